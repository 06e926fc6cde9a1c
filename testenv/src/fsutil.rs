//! Small file helpers that attach the path to every I/O error.

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use super::Error;

pub(crate) fn io_error(path: &Path) -> impl FnOnce(io::Error) -> Error + '_ {
    move |source| Error::Io {
        path: path.to_path_buf(),
        source,
    }
}

pub(crate) fn create_dir(path: &Path) -> Result<(), Error> {
    fs::create_dir_all(path).map_err(io_error(path))
}

/// Writes a file readable by everyone (certificates, kubeconfig paths are not secret).
pub(crate) fn write_public(path: &Path, contents: &str) -> Result<(), Error> {
    write_with_mode(path, contents, 0o644)
}

/// Writes a file only its owner can read: private keys and anything that points at them.
pub(crate) fn write_private(path: &Path, contents: &str) -> Result<(), Error> {
    write_with_mode(path, contents, 0o600)
}

fn write_with_mode(path: &Path, contents: &str, mode: u32) -> Result<(), Error> {
    // The mode applies only on creation, so a leftover file with wider permissions is replaced
    // rather than rewritten in place.
    match fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(io_error(path)(e)),
    }
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(path)
        .map_err(io_error(path))?;
    file.write_all(contents.as_bytes()).map_err(io_error(path))
}

/// The last `max_lines` lines of a (log) file, read from at most its last 16 KiB so a huge log
/// costs nothing. Returns a placeholder instead of failing: this only decorates another error.
pub(crate) fn tail(path: &Path, max_lines: usize) -> String {
    const WINDOW: u64 = 16 * 1024;
    let read = || -> io::Result<String> {
        let mut file = fs::File::open(path)?;
        let len = file.metadata()?.len();
        file.seek(SeekFrom::Start(len.saturating_sub(WINDOW)))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    };
    match read() {
        Ok(text) => {
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(max_lines)..].join("\n")
        }
        Err(e) => format!("<cannot read {}: {e}>", path.display()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_returns_last_lines() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        fs::write(&path, text).expect("write");
        assert_eq!(tail(&path, 2), "line 98\nline 99");
    }

    #[test]
    fn tail_of_missing_file_says_so() {
        assert!(tail(Path::new("/nonexistent/log"), 5).contains("cannot read"));
    }
}
