//! `guestcluster disk`: the Publish stage's Job (`docs/architecture.md`, "The build source").
//! Copies the stopped build VM's raw root disk (`$SOURCE_DIR/disk.img`) into the golden PVC
//! (`$TARGET_DIR/disk.img`) sparsely, hashing it in the same pass ([`sparse::copy`]); the copy is
//! written to a partial file, flushed, and renamed, so the golden PVC holds either no disk or the
//! whole one. Its termination message is [`Outcome`]: the digest and virtual size the bundle
//! publishes.
//!
//! It runs with no API token: it reads one volume and writes another.

pub mod sparse;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::contract::disk::{DISK_FILE, ENV_SOURCE_DIR, ENV_TARGET_DIR, Outcome, PARTIAL_FILE};
use crate::jobs::exit::{self, Failure as _};

/// Why the copy failed; [`Error::reason`] is one of
/// [`REASONS`](crate::contract::disk::REASONS).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidConfig(String),
    #[error("the build VM's disk {path}: {source}")]
    SourceUnreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what}: {source}")]
    Storage {
        what: String,
        source: std::io::Error,
    },
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidConfig(_) => "InvalidConfig",
            Error::SourceUnreadable { .. } => "SourceUnreadable",
            Error::Storage { .. } => "StorageError",
        }
    }
}

impl exit::Failure for Error {
    fn reason(&self) -> &'static str {
        Error::reason(self)
    }

    fn storage_error(what: String, source: std::io::Error) -> Self {
        Error::Storage { what, source }
    }
}

/// The Job's settings, from its environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub source_dir: PathBuf,
    pub target_dir: PathBuf,
}

impl Config {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let dir = |name: &str| {
            exit::required(&lookup, name)
                .map(PathBuf::from)
                .map_err(Error::InvalidConfig)
        };
        Ok(Config {
            source_dir: dir(ENV_SOURCE_DIR)?,
            target_dir: dir(ENV_TARGET_DIR)?,
        })
    }
}

/// Entry point of `guestcluster disk`.
pub fn main() -> ExitCode {
    exit::run(
        Config::from_lookup(|name| std::env::var(name).ok()),
        |config| async move {
            // Blocking file work: off the runtime's workers.
            tokio::task::spawn_blocking(move || run(&config))
                .await
                .map_err(|e| Error::Storage {
                    what: "the copy".into(),
                    source: std::io::Error::other(e),
                })?
        },
        |outcome| serde_json::to_string(outcome).unwrap_or_default(),
    )
}

/// Copies, flushes and renames; see the module documentation.
pub fn run(config: &Config) -> Result<Outcome, Error> {
    let source_path = config.source_dir.join(DISK_FILE);
    let source = std::fs::File::open(&source_path).map_err(|source| Error::SourceUnreadable {
        path: source_path.clone(),
        source,
    })?;
    let partial = config.target_dir.join(PARTIAL_FILE);
    let target = std::fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .open(&partial)
        .map_err(Error::storage(format!("creating {}", partial.display())))?;
    tracing::info!(source = %source_path.display(), target = %partial.display(), "copying");
    let copied = sparse::copy(&source, &target).map_err(|e| copy_error(&source_path, e))?;
    drop(target);
    let disk = config.target_dir.join(DISK_FILE);
    std::fs::rename(&partial, &disk).map_err(Error::storage(format!(
        "renaming {} to {}",
        partial.display(),
        disk.display()
    )))?;
    sync_dir(&config.target_dir)?;
    tracing::info!(
        sha256 = %copied.sha256,
        size = copied.size,
        data_bytes = copied.data_bytes,
        "golden disk written"
    );
    Ok(Outcome {
        disk_sha256: copied.sha256,
        disk_virtual_size: copied.size,
        data_bytes: copied.data_bytes,
    })
}

/// A read error is the source's; anything else (a full or failing golden volume) is storage.
fn copy_error(source_path: &Path, err: std::io::Error) -> Error {
    if err.kind() == std::io::ErrorKind::UnexpectedEof {
        return Error::SourceUnreadable {
            path: source_path.to_owned(),
            source: err,
        };
    }
    Error::Storage {
        what: format!("copying {}", source_path.display()),
        source: err,
    }
}

/// The rename is durable only once its directory is flushed.
fn sync_dir(dir: &Path) -> Result<(), Error> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(Error::storage(format!("flushing {}", dir.display())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::contract::disk::REASONS;
    use std::io::{Seek, SeekFrom, Write};
    use std::os::unix::fs::MetadataExt;

    /// A raw image of `size` bytes with data at the given offsets, allocated zeros at others,
    /// and holes everywhere else.
    fn image(path: &Path, size: u64, data: &[(u64, &[u8])], zeros: &[(u64, usize)]) {
        let mut file = std::fs::File::create(path).unwrap();
        file.set_len(size).unwrap();
        for (at, bytes) in data {
            file.seek(SeekFrom::Start(*at)).unwrap();
            file.write_all(bytes).unwrap();
        }
        for (at, len) in zeros {
            file.seek(SeekFrom::Start(*at)).unwrap();
            file.write_all(&vec![0; *len]).unwrap();
        }
        file.sync_all().unwrap();
    }

    fn dirs() -> (tempfile::TempDir, Config) {
        let root = tempfile::tempdir().unwrap();
        let config = Config {
            source_dir: root.path().join("source"),
            target_dir: root.path().join("golden"),
        };
        std::fs::create_dir_all(&config.source_dir).unwrap();
        std::fs::create_dir_all(&config.target_dir).unwrap();
        (root, config)
    }

    #[test]
    fn the_copy_is_the_same_bytes_with_the_same_digest_and_only_the_data_allocated() {
        let (_root, config) = dirs();
        let size = 64 << 20;
        let data: Vec<u8> = (0..3 * sparse::CHUNK + 777)
            .map(|i| (i % 251) as u8)
            .collect();
        let source = config.source_dir.join(DISK_FILE);
        image(
            &source,
            size,
            // A run across chunk boundaries, a lone byte in a block, data at the very end.
            &[
                (5 * 4096 + 3, &data),
                (40 << 20, b"x"),
                (size - 10, b"0123456789"),
            ],
            // Zeroed free space: allocated in the source, a hole in the copy.
            &[(20 << 20, 8 << 20)],
        );
        let outcome = run(&config).unwrap();

        let disk = config.target_dir.join(DISK_FILE);
        assert!(!config.target_dir.join(PARTIAL_FILE).exists());
        assert_eq!(
            std::fs::read(&disk).unwrap(),
            std::fs::read(&source).unwrap()
        );
        let file = std::fs::File::open(&source).unwrap();
        assert_eq!(outcome.disk_sha256, sparse::hash_only(&file).unwrap());
        assert_eq!(outcome.disk_virtual_size, size);
        // Whole blocks around the data: the run, the lone byte's block, the last block.
        let blocks = |n: u64| n.div_ceil(4096) * 4096;
        assert_eq!(
            outcome.data_bytes,
            blocks(data.len() as u64 + 3) + 4096 + 4096
        );
        let allocated = |p: &Path| std::fs::metadata(p).unwrap().blocks() * 512;
        assert!(
            allocated(&disk) <= outcome.data_bytes + (64 << 10),
            "the copy allocates its data only: {} for {}",
            allocated(&disk),
            outcome.data_bytes
        );
        assert!(
            allocated(&source) >= 8 << 20,
            "the source's zeros are allocated"
        );
    }

    #[test]
    fn an_image_of_holes_only_is_copied_as_holes() {
        let (_root, config) = dirs();
        image(&config.source_dir.join(DISK_FILE), 16 << 20, &[], &[]);
        let outcome = run(&config).unwrap();
        assert_eq!(outcome.data_bytes, 0);
        assert_eq!(
            outcome.disk_sha256,
            sparse::hash_only(&std::fs::File::open(config.source_dir.join(DISK_FILE)).unwrap())
                .unwrap()
        );
        assert_eq!(outcome.disk_virtual_size, 16 << 20);
    }

    #[test]
    fn a_rerun_replaces_a_partial_copy_and_a_missing_source_says_which() {
        let (_root, config) = dirs();
        std::fs::write(
            config.target_dir.join(PARTIAL_FILE),
            b"left by a killed pod",
        )
        .unwrap();
        let err = run(&config).unwrap_err();
        assert_eq!(err.reason(), "SourceUnreadable");
        assert!(err.to_string().contains("source/disk.img"), "{err}");
        assert!(!config.target_dir.join(DISK_FILE).exists());

        image(
            &config.source_dir.join(DISK_FILE),
            1 << 20,
            &[(0, b"boot")],
            &[],
        );
        run(&config).unwrap();
        assert!(!config.target_dir.join(PARTIAL_FILE).exists());
        assert_eq!(
            std::fs::read(config.target_dir.join(DISK_FILE)).unwrap()[..4],
            *b"boot"
        );
    }

    #[test]
    fn settings_are_required_and_every_reason_is_listed() {
        let err = Config::from_lookup(|_| None).unwrap_err();
        assert_eq!(err.to_string(), "SOURCE_DIR is required");
        let errors = [
            Error::InvalidConfig(String::new()),
            Error::SourceUnreadable {
                path: PathBuf::new(),
                source: std::io::Error::other("x"),
            },
            Error::storage("x")(std::io::Error::other("x")),
        ];
        for err in errors {
            assert!(REASONS.contains(&err.reason()), "{}", err.reason());
        }
    }
}
