//! Extraction of the three expected members from the bundle (a zstd-compressed tar).
//!
//! Every member of the archive is checked, not only the ones taken ([`decide`]): an archive
//! with an absolute or `..` path, a link or a special file is refused as a whole. Members are
//! written to fixed names in the target directory, never to their archive paths.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::Path;

use ruzstd::decoding::errors::{FrameDecoderError, ReadFrameHeaderError};
use ruzstd::decoding::{BlockDecodingStrategy, FrameDecoder};

use super::progress::Progress;
use super::{INFO_MEMBER, KEY_MEMBER, Limits, PrepError, QCOW2_MEMBER};
use crate::jobs::exit::Failure as _;

const BUFFER: usize = 1 << 20;

/// A member the Job takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wanted {
    Qcow2,
    Key,
    Info,
}

impl Wanted {
    const ALL: [Wanted; 3] = [Wanted::Qcow2, Wanted::Key, Wanted::Info];

    /// Its name in the archive's top-level directory, and in the extraction directory.
    pub fn file_name(self) -> &'static str {
        match self {
            Wanted::Qcow2 => QCOW2_MEMBER,
            Wanted::Key => KEY_MEMBER,
            Wanted::Info => INFO_MEMBER,
        }
    }

    fn limit(self, limits: &Limits) -> (u64, &'static str) {
        match self {
            Wanted::Qcow2 => (limits.qcow2, "MAX_QCOW2_BYTES"),
            Wanted::Key => (limits.key, "MAX_KEY_BYTES"),
            Wanted::Info => (limits.info, "MAX_BUNDLE_INFO_BYTES"),
        }
    }

    fn index(self) -> usize {
        match self {
            Wanted::Qcow2 => 0,
            Wanted::Key => 1,
            Wanted::Info => 2,
        }
    }
}

/// The type of a tar member, as far as safety is concerned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
    Symlink,
    HardLink,
    Device,
    Fifo,
    /// PAX or GNU headers describing other members.
    Metadata,
    /// Any other type byte.
    Other(u8),
}

impl Kind {
    pub fn of(entry_type: tar::EntryType) -> Kind {
        use tar::EntryType as T;
        match entry_type {
            T::Regular | T::Continuous | T::GNUSparse => Kind::File,
            T::Directory => Kind::Dir,
            T::Symlink => Kind::Symlink,
            T::Link => Kind::HardLink,
            T::Char | T::Block => Kind::Device,
            T::Fifo => Kind::Fifo,
            T::XGlobalHeader | T::XHeader | T::GNULongName | T::GNULongLink => Kind::Metadata,
            other => Kind::Other(other.as_byte()),
        }
    }
}

/// What to do with one member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    Extract(Wanted),
    Skip,
    /// Refuse the whole archive, saying why.
    Reject(String),
}

/// Decides about the member at `path` (as stored) of type `kind`, the archive's top-level
/// directory being `dir`.
pub fn decide(path: &[u8], kind: Kind, dir: &str) -> Decision {
    if kind == Kind::Metadata {
        return Decision::Skip;
    }
    if path.is_empty() {
        return Decision::Reject("has an empty name".into());
    }
    if path.starts_with(b"/") {
        return Decision::Reject("has an absolute path".into());
    }
    let parts: Vec<&[u8]> = path
        .split(|&b| b == b'/')
        .filter(|part| !part.is_empty() && *part != b".")
        .collect();
    if parts.contains(&&b".."[..]) {
        return Decision::Reject("climbs out of the extraction directory (`..`)".into());
    }
    match kind {
        Kind::Symlink => Decision::Reject("is a symbolic link".into()),
        Kind::HardLink => Decision::Reject("is a hard link".into()),
        Kind::Device => Decision::Reject("is a device file".into()),
        Kind::Fifo => Decision::Reject("is a FIFO".into()),
        Kind::Other(byte) => Decision::Reject(format!(
            "has the unsupported tar type {:?}",
            char::from(byte)
        )),
        Kind::Dir | Kind::Metadata => Decision::Skip,
        Kind::File => match parts.as_slice() {
            [top, name] if *top == dir.as_bytes() => Wanted::ALL
                .into_iter()
                .find(|w| w.file_name().as_bytes() == *name)
                .map_or(Decision::Skip, Decision::Extract),
            _ => Decision::Skip,
        },
    }
}

/// Extracts `dir/crc.qcow2`, `dir/id_ecdsa_crc` and `dir/crc-bundle-info.json` of `archive`
/// into the existing, empty directory `into` (as `crc.qcow2`, `id_ecdsa_crc`,
/// `crc-bundle-info.json`), after checking every member. Blocking.
pub fn extract(archive: &Path, dir: &str, into: &Path, limits: &Limits) -> Result<(), PrepError> {
    let invalid = |e: std::io::Error| PrepError::ArchiveInvalid(e.to_string());
    let file = std::fs::File::open(archive)
        .map_err(PrepError::storage(format!("opening {}", archive.display())))?;
    let decoder = ZstdFrames::new(BufReader::with_capacity(BUFFER, file));
    let mut tar = tar::Archive::new(decoder);
    let mut seen = [false; 3];
    let (mut members, mut unpacked) = (0u64, 0u64);
    for entry in tar.entries().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        // Skipped members are decompressed too: a small archive must not unpack forever.
        members += 1;
        unpacked = unpacked.saturating_add(entry.size());
        if members > limits.members {
            return Err(PrepError::TooLarge {
                what: "the archive's member count".into(),
                limit: limits.members,
                setting: "MAX_ARCHIVE_MEMBERS",
            });
        }
        if unpacked > limits.unpacked {
            return Err(PrepError::TooLarge {
                what: "the archive's unpacked size".into(),
                limit: limits.unpacked,
                setting: "MAX_UNPACKED_BYTES",
            });
        }
        let path = entry.path_bytes().into_owned();
        let shown = String::from_utf8_lossy(&path).into_owned();
        let wanted = match decide(&path, Kind::of(entry.header().entry_type()), dir) {
            Decision::Skip => continue,
            Decision::Reject(why) => {
                return Err(PrepError::UnsafeMember { member: shown, why });
            }
            Decision::Extract(wanted) => wanted,
        };
        if seen[wanted.index()] {
            return Err(PrepError::UnsafeMember {
                member: shown,
                why: "appears more than once".into(),
            });
        }
        let (limit, setting) = wanted.limit(limits);
        let too_large = || PrepError::TooLarge {
            what: format!("archive member {shown}"),
            limit,
            setting,
        };
        if entry.size() > limit {
            return Err(too_large());
        }
        let dest = into.join(wanted.file_name());
        let storage = |what: &str| PrepError::storage(format!("{what} {}", dest.display()));
        let mut out = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(if wanted == Wanted::Key { 0o600 } else { 0o644 })
            .open(&dest)
            .map_err(storage("creating"))?;
        let mut progress = Progress::new(Some(entry.size()), 0);
        let mut buf = vec![0u8; BUFFER];
        let mut written = 0u64;
        loop {
            let n = match entry.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(err) => return Err(invalid(err)),
            };
            written += n as u64;
            if written > limit {
                return Err(too_large());
            }
            out.write_all(&buf[..n]).map_err(storage("writing"))?;
            if wanted == Wanted::Qcow2
                && let Some(line) = progress.update(written)
            {
                tracing::info!("extracting {shown}: {line}");
            }
        }
        out.sync_all().map_err(storage("syncing"))?;
        seen[wanted.index()] = true;
        tracing::info!("extracted {shown} ({written} bytes)");
    }
    if let Some(missing) = Wanted::ALL.into_iter().find(|w| !seen[w.index()]) {
        return Err(PrepError::MissingMember {
            member: format!("{dir}/{}", missing.file_name()),
        });
    }
    Ok(())
}

/// Decompresses a stream of zstd frames (skippable frames skipped), like `zstd -d`.
struct ZstdFrames<R> {
    source: R,
    decoder: FrameDecoder,
    in_frame: bool,
}

impl<R: BufRead> ZstdFrames<R> {
    fn new(source: R) -> Self {
        ZstdFrames {
            source,
            decoder: FrameDecoder::new(),
            in_frame: false,
        }
    }
}

impl<R: BufRead> Read for ZstdFrames<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        loop {
            if self.in_frame {
                if self.decoder.can_collect() == 0 && !self.decoder.is_finished() {
                    self.decoder
                        .decode_blocks(&mut self.source, BlockDecodingStrategy::UptoBlocks(1))
                        .map_err(std::io::Error::other)?;
                    continue;
                }
                let n = self.decoder.read(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                if self.decoder.is_finished() {
                    self.in_frame = false;
                }
                continue;
            }
            if self.source.fill_buf()?.is_empty() {
                return Ok(0);
            }
            match self.decoder.reset(&mut self.source) {
                Ok(()) => self.in_frame = true,
                Err(FrameDecoderError::ReadFrameHeaderError(ReadFrameHeaderError::SkipFrame {
                    length,
                    ..
                })) => {
                    let skipped = std::io::copy(
                        &mut (&mut self.source).take(u64::from(length)),
                        &mut std::io::sink(),
                    )?;
                    if skipped != u64::from(length) {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::UnexpectedEof,
                            "truncated skippable zstd frame",
                        ));
                    }
                }
                Err(err) => return Err(std::io::Error::other(err)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIR: &str = "crc_libvirt_4.16.0_amd64";

    fn d(path: &str, kind: Kind) -> Decision {
        decide(path.as_bytes(), kind, DIR)
    }

    #[test]
    fn takes_exactly_the_three_members_of_the_top_directory() {
        assert_eq!(
            d("crc_libvirt_4.16.0_amd64/crc.qcow2", Kind::File),
            Decision::Extract(Wanted::Qcow2)
        );
        assert_eq!(
            d("crc_libvirt_4.16.0_amd64/id_ecdsa_crc", Kind::File),
            Decision::Extract(Wanted::Key)
        );
        assert_eq!(
            d(
                "./crc_libvirt_4.16.0_amd64//crc-bundle-info.json",
                Kind::File
            ),
            Decision::Extract(Wanted::Info)
        );
        for skipped in [
            "crc_libvirt_4.16.0_amd64/oc",
            "crc_libvirt_4.16.0_amd64/sub/crc.qcow2",
            "other_dir/crc.qcow2",
            "crc.qcow2",
            "crc_libvirt_4.16.0_amd64",
        ] {
            assert_eq!(d(skipped, Kind::File), Decision::Skip, "{skipped}");
        }
        assert_eq!(d("crc_libvirt_4.16.0_amd64/", Kind::Dir), Decision::Skip);
        assert_eq!(
            d("crc_libvirt_4.16.0_amd64/crc.qcow2", Kind::Dir),
            Decision::Skip
        );
        assert_eq!(d("pax_global_header", Kind::Metadata), Decision::Skip);
    }

    #[test]
    fn refuses_escapes_links_and_special_files_anywhere() {
        for (path, kind, why) in [
            ("/etc/passwd", Kind::File, "absolute"),
            ("crc_libvirt_4.16.0_amd64/../escape", Kind::File, "`..`"),
            ("../crc_libvirt_4.16.0_amd64/crc.qcow2", Kind::File, "`..`"),
            ("crc_libvirt_4.16.0_amd64/..", Kind::Dir, "`..`"),
            (
                "crc_libvirt_4.16.0_amd64/link",
                Kind::Symlink,
                "symbolic link",
            ),
            (
                "crc_libvirt_4.16.0_amd64/crc.qcow2",
                Kind::Symlink,
                "symbolic link",
            ),
            ("elsewhere/hard", Kind::HardLink, "hard link"),
            ("crc_libvirt_4.16.0_amd64/sda", Kind::Device, "device"),
            ("crc_libvirt_4.16.0_amd64/pipe", Kind::Fifo, "FIFO"),
            (
                "crc_libvirt_4.16.0_amd64/vol",
                Kind::Other(b'V'),
                "unsupported",
            ),
            ("", Kind::File, "empty"),
        ] {
            match d(path, kind) {
                Decision::Reject(reason) => assert!(reason.contains(why), "{path}: {reason}"),
                other => panic!("{path} ({kind:?}) was not refused: {other:?}"),
            }
        }
        assert_eq!(Kind::of(tar::EntryType::Symlink), Kind::Symlink);
        assert_eq!(Kind::of(tar::EntryType::GNUSparse), Kind::File);
        assert_eq!(Kind::of(tar::EntryType::XGlobalHeader), Kind::Metadata);
    }

    fn tar_of(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, data) in members {
            let mut header = tar::Header::new_gnu();
            header.set_size(data.len() as u64);
            header.set_mode(0o644);
            header.set_entry_type(tar::EntryType::Regular);
            builder.append_data(&mut header, path, *data).unwrap();
        }
        builder.into_inner().unwrap()
    }

    #[test]
    fn reads_several_frames_and_skips_skippable_ones() {
        let tar = tar_of(&[
            (&format!("{DIR}/crc.qcow2"), &[7u8; 3000][..]),
            (&format!("{DIR}/id_ecdsa_crc"), b"key"),
            (&format!("{DIR}/crc-bundle-info.json"), b"{}"),
        ]);
        let level = ruzstd::encoding::CompressionLevel::Fastest;
        let (a, b) = tar.split_at(1000);
        let mut stream = ruzstd::encoding::compress_to_vec(a, level);
        stream.extend_from_slice(&[0x50, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 1, 2, 3]);
        stream.extend(ruzstd::encoding::compress_to_vec(b, level));

        let dir = tempfile::tempdir().unwrap();
        let archive = dir.path().join("a.crcbundle");
        std::fs::write(&archive, &stream).unwrap();
        let mut out = Vec::new();
        ZstdFrames::new(BufReader::new(std::fs::File::open(&archive).unwrap()))
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out, tar);

        let into = dir.path().join("out");
        std::fs::create_dir(&into).unwrap();
        extract(&archive, DIR, &into, &Limits::default()).unwrap();
        assert_eq!(std::fs::read(into.join("crc.qcow2")).unwrap(), [7u8; 3000]);
        assert_eq!(std::fs::read(into.join("id_ecdsa_crc")).unwrap(), b"key");
    }

    #[test]
    fn limits_duplicates_and_garbage_fail() {
        let dir = tempfile::tempdir().unwrap();
        let run = |name: &str, bytes: Vec<u8>, limits: Limits| {
            let archive = dir.path().join(name);
            std::fs::write(&archive, bytes).unwrap();
            let into = dir.path().join(format!("{name}.out"));
            std::fs::create_dir(&into).unwrap();
            extract(&archive, DIR, &into, &limits).unwrap_err()
        };
        let zst = |tar: Vec<u8>| {
            ruzstd::encoding::compress_to_vec(&tar[..], ruzstd::encoding::CompressionLevel::Fastest)
        };
        let qcow2 = format!("{DIR}/crc.qcow2");
        let key = format!("{DIR}/id_ecdsa_crc");

        let small = Limits {
            key: 2,
            ..Limits::default()
        };
        let err = run("large", zst(tar_of(&[(&key, b"key")])), small);
        assert_eq!(err.reason(), "TooLarge");
        assert!(err.to_string().contains("MAX_KEY_BYTES"), "{err}");

        let err = run(
            "twice",
            zst(tar_of(&[(&qcow2, b"a"), (&qcow2, b"b")])),
            Limits::default(),
        );
        assert_eq!(err.reason(), "UnsafeMember");

        let err = run(
            "missing",
            zst(tar_of(&[(&qcow2, b"a"), (&key, b"k")])),
            Limits::default(),
        );
        assert_eq!(
            err.to_string(),
            format!("the archive has no member {DIR}/crc-bundle-info.json")
        );

        let err = run(
            "garbage",
            b"this is not zstd at all".to_vec(),
            Limits::default(),
        );
        assert_eq!(err.reason(), "ArchiveInvalid");

        let mut truncated = zst(tar_of(&[(&qcow2, &[1u8; 5000][..])]));
        truncated.truncate(truncated.len() / 2);
        let err = run("truncated", truncated, Limits::default());
        assert_eq!(err.reason(), "ArchiveInvalid", "{err}");

        // Members nobody extracts count too: their number and their unpacked bytes.
        let filler: Vec<(String, Vec<u8>)> = (0..5)
            .map(|i| (format!("{DIR}/filler-{i}"), vec![0u8; 1000]))
            .collect();
        let fillers: Vec<(&str, &[u8])> = filler
            .iter()
            .map(|(n, b)| (n.as_str(), b.as_slice()))
            .collect();
        let few = Limits {
            members: 4,
            ..Limits::default()
        };
        let err = run("many", zst(tar_of(&fillers)), few);
        assert!(err.to_string().contains("MAX_ARCHIVE_MEMBERS"), "{err}");
        let small = Limits {
            unpacked: 4000,
            ..Limits::default()
        };
        let err = run("big", zst(tar_of(&fillers)), small);
        assert!(err.to_string().contains("MAX_UNPACKED_BYTES"), "{err}");
    }
}
