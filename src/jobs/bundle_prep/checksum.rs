//! `sha256sum.txt` parsing and file hashing.

use std::io::Read;
use std::path::Path;

use sha2::{Digest as _, Sha256};

use super::progress::Progress;

/// Read size when hashing files.
const READ_SIZE: usize = 1 << 20;

/// The digest `listing` (a `sha256sum` output) gives for `file_name`: lines `<hex>  <name>`
/// (text mode) or `<hex> *<name>` (binary mode), or BSD-style `SHA256 (<name>) = <hex>`; a
/// leading `./` on the name is ignored. `Err` says why there is no single answer.
pub fn expected_digest(listing: &str, file_name: &str) -> Result<String, String> {
    let mut found: Option<String> = None;
    for line in listing.lines() {
        let Some((digest, name)) = parse_line(line) else {
            continue;
        };
        if name.strip_prefix("./").unwrap_or(name) != file_name {
            continue;
        }
        match &found {
            Some(earlier) if *earlier != digest => {
                return Err(format!(
                    "it is listed twice with different digests ({earlier} and {digest})"
                ));
            }
            _ => found = Some(digest),
        }
    }
    found.ok_or_else(|| "it is not listed".to_owned())
}

/// `(lower-case hex digest, name)` of one line, `None` for anything else.
fn parse_line(line: &str) -> Option<(String, &str)> {
    let line = line.trim_end_matches(['\r', '\n']);
    let (digest, name) = if let Some(rest) = line.strip_prefix("SHA256 (") {
        let (name, digest) = rest.rsplit_once(") = ")?;
        (digest.trim(), name)
    } else {
        let (digest, rest) = line.split_once(' ')?;
        let name = rest.strip_prefix(' ').or_else(|| rest.strip_prefix('*'))?;
        (digest, name)
    };
    let is_hex = digest.len() == 64 && digest.bytes().all(|b| b.is_ascii_hexdigit());
    (is_hex && !name.is_empty()).then(|| (digest.to_ascii_lowercase(), name))
}

/// Lower-case hex of a finished hash.
pub fn hex(hasher: Sha256) -> String {
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Hex SHA-256 and length of the first `limit` bytes of a file (all with `None`), read in
/// 1 MiB blocks; with `log`, progress at every tenth.
pub fn sha256_prefix(path: &Path, limit: Option<u64>, log: bool) -> std::io::Result<(Sha256, u64)> {
    let file = std::fs::File::open(path)?;
    let total = match limit {
        Some(limit) => limit,
        None => file.metadata()?.len(),
    };
    let mut reader = file.take(total);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; READ_SIZE];
    let mut done = 0u64;
    let mut progress = Progress::new(Some(total), 0);
    loop {
        let n = match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        hasher.update(&buf[..n]);
        done += n as u64;
        if let Some(line) = progress.update(done).filter(|_| log) {
            tracing::info!("hashing {}: {line}", path.display());
        }
    }
    if done != total {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("{} ended at {done} of {total} bytes", path.display()),
        ));
    }
    Ok((hasher, done))
}

/// Hex SHA-256 and length of a whole file, reading every byte (see [`sha256_prefix`]).
#[cfg(test)]
pub fn sha256_file(path: &Path, log: bool) -> std::io::Result<(String, u64)> {
    let (hasher, len) = sha256_prefix(path, None, log)?;
    Ok((hex(hasher), len))
}

/// Hex SHA-256 and length of a sparse file (a raw disk): every byte is hashed, but the holes
/// (found with `SEEK_DATA`/`SEEK_HOLE`) are hashed as the zeros they read as, without reading
/// them; data is read in 1 MiB blocks. With `log`, progress at every tenth.
pub fn sha256_sparse_file(path: &Path, log: bool) -> std::io::Result<(String, u64)> {
    use std::os::unix::fs::FileExt as _;

    let file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    let mut hasher = Sha256::new();
    let zeros = vec![0u8; READ_SIZE];
    let mut buf = vec![0u8; READ_SIZE];
    let mut progress = Progress::new(Some(len), 0);
    let mut pos = 0u64;
    let mut report = |pos: u64| {
        if let Some(line) = progress.update(pos).filter(|_| log) {
            tracing::info!("hashing {}: {line}", path.display());
        }
    };
    while pos < len {
        let (data, hole) = crate::jobs::extents::next_data(&file, pos, len)?;
        while pos < data {
            let n = (data - pos).min(READ_SIZE as u64) as usize;
            hasher.update(&zeros[..n]);
            pos += n as u64;
            report(pos);
        }
        while pos < hole {
            let want = (hole - pos).min(READ_SIZE as u64) as usize;
            let n = match file.read_at(&mut buf[..want], pos) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::UnexpectedEof,
                        format!("{} ended at {pos} of {len} bytes", path.display()),
                    ));
                }
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(err),
            };
            hasher.update(&buf[..n]);
            pos += n as u64;
            report(pos);
        }
    }
    Ok((hex(hasher), len))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "a3f1c0ffee00000000000000000000000000000000000000000000000000beef";
    const B: &str = "1111111111111111111111111111111111111111111111111111111111111111";

    #[test]
    fn finds_the_line_of_the_file() {
        let listing = format!(
            "{B}  crc_vfkit_4.16.0_arm64.crcbundle\n{A}  crc_libvirt_4.16.0_amd64.crcbundle\n"
        );
        assert_eq!(
            expected_digest(&listing, "crc_libvirt_4.16.0_amd64.crcbundle").as_deref(),
            Ok(A)
        );
    }

    #[test]
    fn accepts_binary_mode_crlf_upper_case_dot_slash_and_bsd_lines() {
        let upper = A.to_ascii_uppercase();
        for listing in [
            format!("{A} *f.crcbundle\n"),
            format!("{A}  f.crcbundle\r\n"),
            format!("{upper}  f.crcbundle"),
            format!("{A}  ./f.crcbundle\n"),
            format!("SHA256 (f.crcbundle) = {A}\n"),
        ] {
            assert_eq!(
                expected_digest(&listing, "f.crcbundle").as_deref(),
                Ok(A),
                "{listing:?}"
            );
        }
    }

    #[test]
    fn does_not_match_similar_names_or_malformed_lines() {
        for listing in [
            String::new(),
            format!("{A}  f.crcbundle.part\n"),
            format!("{A}  other/f.crcbundle\n"),
            format!("{A} f.crcbundle\n"),
            format!("{}  f.crcbundle\n", &A[..63]),
            format!("{}  f.crcbundle\n", "z".repeat(64)),
            format!("# {A}  f.crcbundle\n"),
            "f.crcbundle\n".to_owned(),
        ] {
            let err = expected_digest(&listing, "f.crcbundle").unwrap_err();
            assert_eq!(err, "it is not listed", "{listing:?}");
        }
    }

    #[test]
    fn refuses_conflicting_entries_but_accepts_repeats() {
        let repeated = format!("{A}  f.crcbundle\n{A} *f.crcbundle\n");
        assert_eq!(expected_digest(&repeated, "f.crcbundle").as_deref(), Ok(A));
        let conflicting = format!("{A}  f.crcbundle\n{B}  f.crcbundle\n");
        assert!(
            expected_digest(&conflicting, "f.crcbundle")
                .unwrap_err()
                .contains("twice")
        );
    }

    #[test]
    fn hashes_files_and_prefixes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        std::fs::write(&path, b"abc").unwrap();
        let (digest, len) = sha256_file(&path, false).unwrap();
        assert_eq!(
            digest,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(len, 3);
        let (prefix, len) = sha256_prefix(&path, Some(2), false).unwrap();
        assert_eq!(len, 2);
        assert_eq!(hex(prefix), hex(Sha256::new_with_prefix(b"ab")));
        assert!(sha256_prefix(&path, Some(4), false).is_err());
    }

    #[test]
    fn sparse_files_hash_like_their_bytes() {
        use std::io::{Seek as _, SeekFrom, Write as _};

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("disk");
        let mut file = std::fs::File::create(&path).unwrap();
        // Data at the start, in the middle (unaligned) and at the end; holes between.
        file.write_all(b"GCSIMST1 header").unwrap();
        file.seek(SeekFrom::Start(5 * READ_SIZE as u64 + 12345))
            .unwrap();
        file.write_all(&[0xab; 70000]).unwrap();
        file.set_len(12 * READ_SIZE as u64 + 7).unwrap();
        file.seek(SeekFrom::End(-3)).unwrap();
        file.write_all(b"end").unwrap();
        drop(file);
        assert_eq!(
            sha256_sparse_file(&path, false).unwrap(),
            sha256_file(&path, false).unwrap()
        );

        let hole_only = dir.path().join("blank");
        std::fs::File::create(&hole_only)
            .unwrap()
            .set_len(3 << 20)
            .unwrap();
        assert_eq!(
            sha256_sparse_file(&hole_only, false).unwrap(),
            sha256_file(&hole_only, false).unwrap()
        );
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"").unwrap();
        assert_eq!(
            sha256_sparse_file(&empty, false).unwrap().0,
            hex(Sha256::new())
        );
    }
}
