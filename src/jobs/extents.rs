//! Where a sparse file (a raw disk) holds data: its holes read as zeros and need not be read.

/// The next data extent at or after `pos`: `(start, end)`, both within `..=len`. Where holes
/// cannot be found, everything is data.
#[cfg(target_os = "linux")]
pub fn next_data(file: &std::fs::File, pos: u64, len: u64) -> std::io::Result<(u64, u64)> {
    use std::os::fd::AsRawFd as _;

    let seek = |offset: u64, whence: libc::c_int| -> std::io::Result<Option<u64>> {
        let offset = libc::off_t::try_from(offset).map_err(std::io::Error::other)?;
        // SAFETY: lseek on a file descriptor we own; positional reads do not use the offset.
        let result = unsafe { libc::lseek(file.as_raw_fd(), offset, whence) };
        if result >= 0 {
            return Ok(Some(result as u64));
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            // No data (or no hole) after `offset`.
            Some(libc::ENXIO) => Ok(None),
            // Not supported here: all data.
            Some(libc::EINVAL) | Some(libc::EOPNOTSUPP) => Ok(Some(offset as u64)),
            _ => Err(err),
        }
    };
    let Some(start) = seek(pos, libc::SEEK_DATA)? else {
        return Ok((len, len));
    };
    let start = start.min(len);
    let end = seek(start, libc::SEEK_HOLE)?
        .unwrap_or(len)
        .clamp(start, len);
    // A hole search that does not move means no hole support: read to the end.
    let end = if end == start && start < len {
        len
    } else {
        end
    };
    Ok((start, end))
}

#[cfg(not(target_os = "linux"))]
pub fn next_data(_file: &std::fs::File, pos: u64, len: u64) -> std::io::Result<(u64, u64)> {
    Ok((pos, len))
}
