//! `guestcluster installer`: the Prepare stage's Job of a bundle build (`docs/architecture.md`,
//! "The build source"; `docs/design/certificates-and-time.md`, "1. Prepare"). It runs on real
//! time, so it creates nothing with a clock in it:
//!
//! 1. resolve the release pull spec to its digest once (`oc adm release info`) and pin it;
//! 2. extract `openshift-install` of that release onto the work volume and check it names the
//!    same release (`openshift-install version`);
//! 3. write the staging directory (install-config, the profile's and the user's manifests, as
//!    the operator rendered them into the installer Secret) — files only, no
//!    `openshift-install create`;
//! 4. find the RHCOS live ISO (`openshift-install coreos print-stream-json`), download it onto
//!    the work volume and verify its SHA-256;
//! 5. embed the generator Ignition (`coreos-installer iso ignition embed`) into a copy written
//!    as the ISO volume's `disk.img` (via a partial file, renamed when complete).
//!
//! The result ([`Outcome`]) is the termination message of a successful run; a failure writes
//! `<Reason>: <message>` there instead ([`REASONS`](crate::contract::installer::REASONS)). Reruns converge: a verified ISO
//! download is reused, everything else is rewritten.

use std::path::{Component, Path, PathBuf};
use std::process::ExitCode;

use sha2::{Digest, Sha256};

use crate::contract::installer::{
    ENV_ARCH, ENV_INPUTS_DIR, ENV_ISO_DIR, ENV_RELEASE_IMAGE, ENV_WORK_DIR, KEY_GENERATOR_IGNITION,
    KEY_PULL_SECRET, KEY_STAGING, Outcome, REASONS, StagedFile, WORK_BIN, WORK_STAGING,
    WORK_STOCK_ISO,
};
use crate::jobs::bundle_prep::{HttpOptions, download_to};
use crate::jobs::exit::{self, Failure as _};
use crate::tools::release::{self, ReleaseError};
use crate::tools::{coreos_installer, run::RunError};

/// The ISO the build VM boots, in the ISO volume.
pub const DISK_FILE: &str = "disk.img";
const PARTIAL_DISK_FILE: &str = ".disk.img.partial";
/// A live ISO is about 1.2 GiB; refuse a download that grows past this.
const MAX_ISO_BYTES: u64 = 8 << 30;

/// Why the installer Job failed; each variant is one reason of [`REASONS`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidConfig(String),
    #[error("resolving release {image}: {source}")]
    ReleaseUnavailable { image: String, source: ReleaseError },
    #[error("extracting openshift-install from {image}: {detail}")]
    InstallerExtractFailed { image: String, detail: String },
    #[error("finding the RHCOS live ISO: {0}")]
    StreamUnavailable(ReleaseError),
    #[error("downloading {url}: {detail}")]
    DownloadFailed { url: String, detail: String },
    #[error("{url} has SHA-256 {actual}, but the installer's stream metadata gives {expected}")]
    ChecksumMismatch {
        url: String,
        expected: String,
        actual: String,
    },
    #[error("embedding the generator Ignition: {0}")]
    EmbedFailed(RunError),
    #[error("{what}: {source}")]
    Storage {
        what: String,
        source: std::io::Error,
    },
}

impl exit::Failure for Error {
    fn reason(&self) -> &'static str {
        Error::reason(self)
    }

    fn exit_code(&self) -> ExitCode {
        ExitCode::from(Error::exit_code(self))
    }

    fn storage_error(what: String, source: std::io::Error) -> Self {
        Error::Storage { what, source }
    }
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidConfig(_) => "InvalidConfig",
            Error::ReleaseUnavailable { .. } => "ReleaseUnavailable",
            Error::InstallerExtractFailed { .. } => "InstallerExtractFailed",
            Error::StreamUnavailable(_) => "StreamUnavailable",
            Error::DownloadFailed { .. } => "DownloadFailed",
            Error::ChecksumMismatch { .. } => "ChecksumMismatch",
            Error::EmbedFailed(_) => "EmbedFailed",
            Error::Storage { .. } => "StorageError",
        }
    }

    /// 10 + the reason's index in [`REASONS`].
    pub fn exit_code(&self) -> u8 {
        REASONS
            .iter()
            .position(|r| *r == self.reason())
            .map_or(u8::MAX, |i| 10 + i as u8)
    }
}

/// The Job's settings, from its environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub release_image: String,
    pub arch: String,
    pub inputs_dir: PathBuf,
    pub work_dir: PathBuf,
    pub iso_dir: PathBuf,
}

impl Config {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let get = |name: &str| exit::required(&lookup, name).map_err(Error::InvalidConfig);
        Ok(Config {
            release_image: get(ENV_RELEASE_IMAGE)?,
            arch: get(ENV_ARCH)?,
            inputs_dir: get(ENV_INPUTS_DIR)?.into(),
            work_dir: get(ENV_WORK_DIR)?.into(),
            iso_dir: get(ENV_ISO_DIR)?.into(),
        })
    }
}

/// Entry point of `guestcluster installer`.
pub fn main() -> ExitCode {
    let http = HttpOptions {
        ca_file: std::env::var_os("SSL_CERT_FILE").map(PathBuf::from),
        ..HttpOptions::default()
    };
    exit::run(
        Config::from_lookup(|name| std::env::var(name).ok()),
        |config| async move { run(&config, &http).await },
        |outcome| serde_json::to_string(outcome).unwrap_or_default(),
    )
}

/// Runs the steps; see the module documentation.
pub async fn run(config: &Config, http: &HttpOptions) -> Result<Outcome, Error> {
    let auth = config.inputs_dir.join(KEY_PULL_SECRET);
    let image = &config.release_image;
    let info = release::info(image, &auth)
        .await
        .map_err(|source| Error::ReleaseUnavailable {
            image: image.clone(),
            source,
        })?;
    let pinned = release::pinned(image, &info.digest);
    tracing::info!(%image, digest = %info.digest, version = %info.version, "release resolved");

    let bin = config.work_dir.join(WORK_BIN);
    create_dir(&bin)?;
    let extract_failed = |detail: String| Error::InstallerExtractFailed {
        image: pinned.clone(),
        detail,
    };
    let installer = release::extract_installer(&pinned, &auth, &bin)
        .await
        .map_err(|e| extract_failed(e.to_string()))?;
    let version = release::installer_version(&installer)
        .await
        .map_err(|e| extract_failed(e.to_string()))?;
    if !version.release_image.ends_with(&info.digest) {
        return Err(extract_failed(format!(
            "the extracted installer installs {}, not {pinned}",
            version.release_image
        )));
    }

    write_staging(config)?;

    let iso = release::live_iso(&installer, &config.arch)
        .await
        .map_err(Error::StreamUnavailable)?;
    let stock = config.work_dir.join(WORK_STOCK_ISO);
    fetch_verified(&iso.location, &iso.sha256, &stock, http).await?;

    let partial = config.iso_dir.join(PARTIAL_DISK_FILE);
    coreos_installer::embed(
        &config.inputs_dir.join(KEY_GENERATOR_IGNITION),
        &stock,
        &partial,
    )
    .await
    .map_err(Error::EmbedFailed)?;
    let disk = config.iso_dir.join(DISK_FILE);
    std::fs::rename(&partial, &disk).map_err(Error::storage(format!(
        "renaming {} to {}",
        partial.display(),
        disk.display()
    )))?;
    Ok(Outcome {
        release_digest: info.digest,
        version: info.version,
        rhcos_version: iso.release,
        iso_sha256: iso.sha256,
    })
}

fn create_dir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(Error::storage(format!("creating {}", dir.display())))
}

/// Writes the staging directory afresh from the installer Secret's `staging.json`.
fn write_staging(config: &Config) -> Result<(), Error> {
    let source = config.inputs_dir.join(KEY_STAGING);
    let text = std::fs::read_to_string(&source)
        .map_err(Error::storage(format!("reading {}", source.display())))?;
    let files: Vec<StagedFile> = serde_json::from_str(&text)
        .map_err(|e| Error::InvalidConfig(format!("{}: {e}", source.display())))?;
    let dir = config.work_dir.join(WORK_STAGING);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(err) => return Err(Error::storage(format!("clearing {}", dir.display()))(err)),
    }
    for file in files {
        let relative = staged_path(&file.path).ok_or_else(|| {
            Error::InvalidConfig(format!("staged file path {:?} is not relative", file.path))
        })?;
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            create_dir(parent)?;
        }
        std::fs::write(&path, file.text.as_bytes())
            .map_err(Error::storage(format!("writing {}", path.display())))?;
    }
    Ok(())
}

/// A staged file's path, only when it stays inside the staging directory.
pub fn staged_path(path: &str) -> Option<&Path> {
    let path = Path::new(path);
    (!path.as_os_str().is_empty() && path.components().all(|c| matches!(c, Component::Normal(_))))
        .then_some(path)
}

/// Downloads `url` to `dest` unless a file with `sha256` is already there, and verifies it.
async fn fetch_verified(
    url: &str,
    sha256: &str,
    dest: &Path,
    http: &HttpOptions,
) -> Result<(), Error> {
    if dest.exists() {
        let (existing, _) = hash_file(dest)?;
        if existing == sha256 {
            tracing::info!(path = %dest.display(), "reusing the verified live ISO");
            return Ok(());
        }
        // Not resumable: the download below would continue it.
        std::fs::remove_file(dest)
            .map_err(Error::storage(format!("removing {}", dest.display())))?;
    }
    let actual = match url.strip_prefix("file://") {
        Some(path) => {
            std::fs::copy(path, dest).map_err(|e| Error::DownloadFailed {
                url: url.to_owned(),
                detail: e.to_string(),
            })?;
            hash_file(dest)?.0
        }
        None => download_to(url, dest, MAX_ISO_BYTES, http)
            .await
            .map_err(|e| Error::DownloadFailed {
                url: url.to_owned(),
                detail: e.to_string(),
            })?,
    };
    if actual != sha256 {
        let _ = std::fs::remove_file(dest);
        return Err(Error::ChecksumMismatch {
            url: url.to_owned(),
            expected: sha256.to_owned(),
            actual,
        });
    }
    Ok(())
}

fn hash_file(path: &Path) -> Result<(String, u64), Error> {
    let mut file =
        std::fs::File::open(path).map_err(Error::storage(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    let len = std::io::copy(&mut file, &mut hasher)
        .map_err(Error::storage(format!("reading {}", path.display())))?;
    Ok((
        hasher
            .finalize()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect(),
        len,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staged_paths_stay_inside() {
        assert!(staged_path("install-config.yaml").is_some());
        assert!(staged_path("openshift/99-x.yaml").is_some());
        for bad in ["", "/etc/passwd", "../x", "openshift/../../x", "./x"] {
            assert!(staged_path(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn every_reason_has_its_own_exit_code() {
        let errors = [
            Error::InvalidConfig(String::new()),
            Error::StreamUnavailable(ReleaseError::BadOutput {
                what: "x",
                detail: String::new(),
            }),
            Error::ChecksumMismatch {
                url: String::new(),
                expected: String::new(),
                actual: String::new(),
            },
        ];
        let codes: Vec<u8> = errors.iter().map(Error::exit_code).collect();
        assert_eq!(codes, [10, 13, 15]);
    }

    #[test]
    fn config_names_what_is_missing() {
        let err =
            Config::from_lookup(|name| (name != ENV_ISO_DIR).then(|| "x".to_owned())).unwrap_err();
        assert!(err.to_string().contains(ENV_ISO_DIR), "{err}");
    }
}
