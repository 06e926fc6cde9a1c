//! The guest state inside a raw disk image.
//!
//! Layout at offset 0 of `disk.img`: the magic `GCSIMST1` (8 bytes), the JSON length as u64
//! little-endian (8 bytes), then the JSON of [`GuestState`]. The rest of the (sparse) file is
//! untouched, so a file copy, a CDI clone or a `qemu-img convert` round trip carries the guest,
//! and the virtual size stays what the volume made it. A file whose first 16 bytes are zero is a
//! blank disk.

use std::fs::OpenOptions;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use super::state::GuestState;

pub const MAGIC: &[u8; 8] = b"GCSIMST1";
const HEADER_LEN: u64 = 16;
/// Refuse to allocate for absurd lengths from a damaged header.
const MAX_STATE_LEN: u64 = 1 << 30;

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
    let old_len = previous_record_len(&mut file).map_err(io(path))?;
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
    if sync {
        file.sync_data().map_err(io(path))?;
    }
    Ok(())
}

/// Length of the record already at offset 0 (0 when there is none).
fn previous_record_len(file: &mut std::fs::File) -> std::io::Result<u64> {
    let mut header = [0u8; HEADER_LEN as usize];
    file.seek(SeekFrom::Start(0))?;
    let read = read_up_to(file, &mut header)?;
    if read < header.len() || &header[..8] != MAGIC {
        return Ok(0);
    }
    let len = u64::from_le_bytes(header[8..16].try_into().unwrap_or([0; 8]));
    let file_len = file.metadata()?.len();
    Ok((HEADER_LEN + len.min(MAX_STATE_LEN)).min(file_len))
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
