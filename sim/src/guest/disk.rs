//! The guest state inside a raw disk image.
//!
//! Layout at offset 0 of `disk.img`: the magic `GCSIMST1` (8 bytes), the JSON length as u64
//! little-endian (8 bytes), then the JSON of [`GuestState`]. The rest of the (sparse) file is
//! untouched, so a file copy, a CDI clone or a `qemu-img convert` round trip carries the guest,
//! and the virtual size stays what the volume made it. A file whose first 16 bytes are zero is a
//! blank disk.
//!
//! One more region follows the state: freed blocks the guest has not trimmed yet
//! ([`GuestState::untrimmed_bytes`]) stay allocated on a real thin-provisioned disk, so a sparse
//! copy of a disk that was not `fstrim`med is larger. At [`UNTRIMMED_START`] (the root
//! partition's start) the image holds one non-zero byte per untrimmed byte, at most
//! [`UNTRIMMED_MAX`], and a hole after that (the whole region is a hole when nothing is
//! untrimmed). The region only ever lies inside the file: a tiny image has none.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd as _;
use std::path::{Path, PathBuf};

use super::state::{GuestState, ROOT_PARTITION_START};

pub const MAGIC: &[u8; 8] = b"GCSIMST1";
const HEADER_LEN: u64 = 16;
/// Refuse to allocate for absurd lengths from a damaged header.
const MAX_STATE_LEN: u64 = 1 << 30;
/// Where the untrimmed region starts.
pub const UNTRIMMED_START: u64 = ROOT_PARTITION_START;
/// The untrimmed region's largest size: the scale is 1:1 up to here, so a test sees the effect
/// without writing gigabytes.
pub const UNTRIMMED_MAX: u64 = 64 << 20;
/// What the untrimmed region is filled with: anything but zeros, which a sparse copy skips.
const UNTRIMMED_FILL: u8 = 0xa5;

/// Why a disk's state could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("disk image {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("disk image {path} holds data that is not a simulated guest (no {magic} header)", magic = String::from_utf8_lossy(MAGIC))]
    Unrecognized { path: PathBuf },
    #[error("disk image {path}: guest state is damaged: {reason}")]
    Corrupt { path: PathBuf, reason: String },
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DiskError + '_ {
    move |source| DiskError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The guest state on a disk image; `None` for a blank (zeroed or empty) disk.
pub fn read_state(path: &Path) -> Result<Option<GuestState>, DiskError> {
    let mut file = std::fs::File::open(path).map_err(io(path))?;
    let mut header = [0u8; HEADER_LEN as usize];
    let read = read_up_to(&mut file, &mut header).map_err(io(path))?;
    if header.iter().all(|&b| b == 0) {
        return Ok(None);
    }
    if read < header.len() || &header[..8] != MAGIC {
        return Err(DiskError::Unrecognized {
            path: path.to_path_buf(),
        });
    }
    let len = u64::from_le_bytes(header[8..16].try_into().unwrap_or([0; 8]));
    let file_len = file.metadata().map_err(io(path))?.len();
    if len > MAX_STATE_LEN || HEADER_LEN + len > file_len {
        return Err(DiskError::Corrupt {
            path: path.to_path_buf(),
            reason: format!("state length {len} does not fit the {file_len}-byte image"),
        });
    }
    let mut json = vec![0u8; len as usize];
    file.read_exact(&mut json).map_err(io(path))?;
    serde_json::from_slice(&json)
        .map(Some)
        .map_err(|e| DiskError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// Writes the state at offset 0, creating the file if missing. An existing file keeps its size
/// unless the state does not fit (tiny test images); bytes of a longer previous state are zeroed
/// so equal states give equal images.
pub fn write_state(path: &Path, state: &GuestState) -> Result<(), DiskError> {
    write(path, state, false)
}

/// [`write_state`], then flush to stable storage (shutdown, power-off).
pub fn write_state_synced(path: &Path, state: &GuestState) -> Result<(), DiskError> {
    write(path, state, true)
}

/// Creates (or truncates) a sparse image of `virtual_size` bytes, holding `state` if given.
pub fn create_disk(
    path: &Path,
    virtual_size: u64,
    state: Option<&GuestState>,
) -> Result<(), DiskError> {
    let file = std::fs::File::create(path).map_err(io(path))?;
    file.set_len(virtual_size).map_err(io(path))?;
    drop(file);
    match state {
        Some(state) => write_state(path, state),
        None => Ok(()),
    }
}

fn write(path: &Path, state: &GuestState, sync: bool) -> Result<(), DiskError> {
    let json = serde_json::to_vec(state).map_err(|e| DiskError::Corrupt {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io(path))?;
    let (old_len, old_untrimmed) = previous_record(&mut file).map_err(io(path))?;
    let mut record = Vec::with_capacity(HEADER_LEN as usize + json.len());
    record.extend_from_slice(MAGIC);
    record.extend_from_slice(&(json.len() as u64).to_le_bytes());
    record.extend_from_slice(&json);
    file.seek(SeekFrom::Start(0)).map_err(io(path))?;
    file.write_all(&record).map_err(io(path))?;
    if old_len > record.len() as u64 {
        let stale = (old_len - record.len() as u64) as usize;
        file.write_all(&vec![0u8; stale]).map_err(io(path))?;
    }
    // Rewriting up to 64 MiB on every state write would make each command slow; the region
    // follows the state, so it is right as long as the previous state's count is the same.
    if old_untrimmed != Some(state.untrimmed_bytes) {
        set_untrimmed_region(&mut file, state.untrimmed_bytes, old_untrimmed).map_err(io(path))?;
    }
    if sync {
        file.sync_data().map_err(io(path))?;
    }
    Ok(())
}

/// Length of the record already at offset 0 (0 when there is none), and its
/// `untrimmedBytes` (`None` when there is no readable state).
fn previous_record(file: &mut std::fs::File) -> std::io::Result<(u64, Option<u64>)> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Untrimmed {
        #[serde(default)]
        untrimmed_bytes: u64,
    }
    let mut header = [0u8; HEADER_LEN as usize];
    file.seek(SeekFrom::Start(0))?;
    let read = read_up_to(file, &mut header)?;
    if read < header.len() || &header[..8] != MAGIC {
        return Ok((0, None));
    }
    let len = u64::from_le_bytes(header[8..16].try_into().unwrap_or([0; 8]));
    let file_len = file.metadata()?.len();
    let record_len = (HEADER_LEN + len.min(MAX_STATE_LEN)).min(file_len);
    let mut json = vec![0u8; (record_len - HEADER_LEN) as usize];
    let read = read_up_to(file, &mut json)?;
    let untrimmed = serde_json::from_slice::<Untrimmed>(&json[..read])
        .ok()
        .map(|u| u.untrimmed_bytes);
    Ok((record_len, untrimmed))
}

/// Makes the untrimmed region hold `bytes` (capped) non-zero bytes and a hole after them;
/// `previous` is what it held, if known.
fn set_untrimmed_region(
    file: &mut std::fs::File,
    bytes: u64,
    previous: Option<u64>,
) -> std::io::Result<()> {
    let end = (UNTRIMMED_START + UNTRIMMED_MAX).min(file.metadata()?.len());
    if end <= UNTRIMMED_START {
        return Ok(());
    }
    let filled = bytes.min(end - UNTRIMMED_START);
    const CHUNK: u64 = 1 << 20;
    let chunk = vec![UNTRIMMED_FILL; CHUNK.min(filled) as usize];
    file.seek(SeekFrom::Start(UNTRIMMED_START))?;
    let mut left = filled;
    while left > 0 {
        let n = left.min(CHUNK);
        file.write_all(&chunk[..n as usize])?;
        left -= n;
    }
    let rest = UNTRIMMED_START + filled;
    match punch_hole(file, rest, end - rest) {
        Err(err) if err.raw_os_error() == Some(libc::EOPNOTSUPP) => {
            // A filesystem without holes: zeros at least read back right. Only what was filled
            // before, since zeros allocate.
            let was = previous.map_or(end, |p| (UNTRIMMED_START + p).min(end));
            let zeros = vec![0u8; CHUNK.min(was.saturating_sub(rest)) as usize];
            let mut left = was.saturating_sub(rest);
            file.seek(SeekFrom::Start(rest))?;
            while left > 0 {
                let n = left.min(CHUNK);
                file.write_all(&zeros[..n as usize])?;
                left -= n;
            }
            Ok(())
        }
        result => result,
    }
}

/// Deallocates a byte range (it reads as zeros) without changing the file's size. Writing zeros
/// would leave the blocks allocated, and a copy that keeps allocation would keep them.
fn punch_hole(file: &std::fs::File, offset: u64, len: u64) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let invalid = |_| std::io::Error::from(std::io::ErrorKind::InvalidInput);
    let offset = libc::off_t::try_from(offset).map_err(invalid)?;
    let len = libc::off_t::try_from(len).map_err(invalid)?;
    // SAFETY: fallocate only reads its integer arguments; the descriptor is open for writing
    // and owned by `file` for the duration of the call.
    let rc = unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

/// Like `read_exact`, but a short file is not an error: returns how much was read.
fn read_up_to(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..])? {
            0 => break,
            n => filled += n,
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blank_and_empty_disks_have_no_state() {
        let dir = tempfile::tempdir().unwrap();
        let blank = dir.path().join("blank.img");
        create_disk(&blank, 1 << 20, None).unwrap();
        assert_eq!(read_state(&blank).unwrap(), None);
        let empty = dir.path().join("empty.img");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(read_state(&empty).unwrap(), None);
    }

    #[test]
    fn state_round_trips_and_keeps_the_virtual_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let mut state = GuestState::sealed_crc_at("4.22.1", "ssh-ed25519 AAAA core", 0);
        create_disk(&path, 64 << 30, Some(&state)).unwrap();
        assert_eq!(read_state(&path).unwrap().as_ref(), Some(&state));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 << 30);
        state.hostname = "other".into();
        write_state_synced(&path, &state).unwrap();
        assert_eq!(read_state(&path).unwrap().as_ref(), Some(&state));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 << 30);
    }

    #[test]
    fn a_shorter_state_zeroes_the_stale_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let mut state = GuestState {
            hostname: "x".repeat(1000),
            ..GuestState::default()
        };
        create_disk(&path, 1 << 20, Some(&state)).unwrap();
        state.hostname = "short".into();
        write_state(&path, &state).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let json_len = u64::from_le_bytes(bytes[8..16].try_into().unwrap()) as usize;
        assert!(bytes[16 + json_len..].iter().all(|&b| b == 0));
    }

    #[test]
    fn a_missing_file_is_created_and_a_tiny_one_grows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.img");
        write_state(&path, &GuestState::default()).unwrap();
        assert!(read_state(&path).unwrap().is_some());
    }

    /// Bytes the file has allocated inside the untrimmed region, measured by allocation alone.
    fn allocated(path: &Path) -> u64 {
        use std::os::unix::fs::MetadataExt as _;
        std::fs::metadata(path).unwrap().blocks() * 512
    }

    #[test]
    fn untrimmed_bytes_are_allocated_and_a_trim_frees_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk.img");
        let mut state = GuestState::default();
        create_disk(&path, 1 << 30, Some(&state)).unwrap();
        let trimmed = allocated(&path);
        assert!(trimmed < 1 << 20, "a fresh disk is sparse: {trimmed}");

        state.untrimmed_bytes = 8 << 20;
        write_state(&path, &state).unwrap();
        let untrimmed = allocated(&path);
        assert!(
            untrimmed >= trimmed + (8 << 20),
            "8 MiB untrimmed: {trimmed} -> {untrimmed}"
        );
        let bytes = std::fs::read(&path).unwrap();
        let region = &bytes[UNTRIMMED_START as usize..];
        assert!(region[..8 << 20].iter().all(|&b| b != 0));
        assert!(region[8 << 20..].iter().all(|&b| b == 0));
        assert_eq!(read_state(&path).unwrap().as_ref(), Some(&state));

        // Less untrimmed: the rest of the region is a hole again.
        state.untrimmed_bytes = 1 << 20;
        write_state(&path, &state).unwrap();
        let less = allocated(&path);
        assert!(less + (6 << 20) <= untrimmed, "{untrimmed} -> {less}");

        // fstrim: all of it is a hole; the size never changed.
        state.untrimmed_bytes = 0;
        write_state_synced(&path, &state).unwrap();
        assert!(allocated(&path) <= trimmed + 4096, "{}", allocated(&path));
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 1 << 30);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes[UNTRIMMED_START as usize..].iter().all(|&b| b == 0));
    }

    #[test]
    fn the_untrimmed_region_is_capped_and_stays_inside_the_image() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.img");
        let state = GuestState {
            untrimmed_bytes: 1 << 40,
            ..GuestState::default()
        };
        create_disk(&big, 1 << 30, Some(&state)).unwrap();
        let allocated_big = allocated(&big);
        assert!(
            (UNTRIMMED_MAX..UNTRIMMED_MAX + (1 << 20)).contains(&allocated_big),
            "capped at 64 MiB: {allocated_big}"
        );
        // An image ending inside the region: the region stops at its end, the size stays.
        let short = dir.path().join("short.img");
        let len = UNTRIMMED_START + (1 << 20);
        create_disk(&short, len, Some(&state)).unwrap();
        assert_eq!(std::fs::metadata(&short).unwrap().len(), len);
        assert!(allocated(&short) >= 1 << 20);
        // A tiny image has no root partition, so no region.
        let tiny = dir.path().join("tiny.img");
        create_disk(&tiny, 1 << 20, Some(&state)).unwrap();
        assert_eq!(std::fs::metadata(&tiny).unwrap().len(), 1 << 20);
    }

    #[test]
    fn a_copy_of_a_trimmed_disk_allocates_less() {
        let dir = tempfile::tempdir().unwrap();
        let mut state = GuestState {
            untrimmed_bytes: 16 << 20,
            ..GuestState::default()
        };
        let untrimmed = dir.path().join("untrimmed.img");
        create_disk(&untrimmed, 1 << 30, Some(&state)).unwrap();
        let trimmed = dir.path().join("trimmed.img");
        create_disk(&trimmed, 1 << 30, Some(&state)).unwrap();
        state.untrimmed_bytes = 0;
        write_state(&trimmed, &state).unwrap();
        let copy = |from: &Path, name: &str| {
            let to = dir.path().join(name);
            let status = std::process::Command::new("cp")
                .arg("--sparse=always")
                .arg(from)
                .arg(&to)
                .status()
                .unwrap();
            assert!(status.success());
            to
        };
        let untrimmed_copy = allocated(&copy(&untrimmed, "untrimmed-copy.img"));
        let trimmed_copy = allocated(&copy(&trimmed, "trimmed-copy.img"));
        assert!(
            trimmed_copy + (16 << 20) <= untrimmed_copy,
            "trimmed copy {trimmed_copy}, untrimmed copy {untrimmed_copy}"
        );
    }

    #[test]
    fn foreign_and_damaged_images_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let foreign = dir.path().join("foreign.img");
        std::fs::write(&foreign, b"QFI\xfb\0\0\0\x03rest of a qcow2 header").unwrap();
        assert!(matches!(
            read_state(&foreign),
            Err(DiskError::Unrecognized { .. })
        ));
        let damaged = dir.path().join("damaged.img");
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&5u64.to_le_bytes());
        bytes.extend_from_slice(b"{oops");
        std::fs::write(&damaged, bytes).unwrap();
        assert!(matches!(
            read_state(&damaged),
            Err(DiskError::Corrupt { .. })
        ));
    }
}
