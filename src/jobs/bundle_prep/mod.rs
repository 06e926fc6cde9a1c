//! `guestcluster bundle-prep`: the per-bundle prep Job of the download source (upstream
//! `B-prep`, whose shell script this replaces).
//!
//! Everything comes from the environment the operator puts on the Job ([`Config::from_env`]):
//!
//! 1. fetch `SHA256_URL` and find the digest listed for `basename(BUNDLE_URL)`;
//! 2. download `BUNDLE_URL` to `SCRATCH_DIR/bundle.crcbundle`, resuming a partial file or a cut
//!    connection with `Range`, hashing as it goes, and compare the digests;
//! 3. extract only `DIR/crc.qcow2`, `DIR/id_ecdsa_crc` and `DIR/crc-bundle-info.json` (the
//!    whole archive is checked: no absolute or `..` paths, no links or devices, size caps) into
//!    `SCRATCH_DIR/extracted/`, then delete the archive;
//! 4. read `clusterInfo.openshiftVersion` and the key (before any disk is written);
//! 5. `qemu-img convert` the qcow2 to raw `GOLDEN_DIR/.disk.img.partial`, hash it, and rename it
//!    to `GOLDEN_DIR/disk.img` — a half-converted disk is never `disk.img`;
//! 6. server-side apply the key Secret and the metadata ConfigMap, owned by the CRCBundle;
//! 7. clean the scratch directory.
//!
//! Reruns converge: a partial download resumes, a complete one is reused when its digest matches,
//! and an extraction of the same archive (marked with the archive digest) is reused.
//!
//! A failure ends the process with a non-zero exit code and writes `<Reason>: <message>` to the
//! termination-message file and as the last line on stderr, where the operator reads it
//! ([`PrepError::reason`], [`REASONS`](crate::contract::bundle_prep::REASONS)). The environment, the exit codes and what is published
//! are the operator's contract with this Job ([`crate::contract::bundle_prep`]).

pub(crate) mod checksum;
mod config;
mod convert;
mod download;
mod extract;
mod progress;
mod publish;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use crate::contract::bundle_prep::{
    ENV_ALLOW_HTTP, ENV_BUNDLE_NAME, ENV_BUNDLE_UID, ENV_BUNDLE_URL, ENV_GOLDEN_DIR,
    ENV_GOLDEN_VOLUME_BYTES, ENV_METADATA_CONFIGMAP_NAME, ENV_NAMESPACE, ENV_SCRATCH_DIR,
    ENV_SHA256_URL, ENV_SSH_SECRET_NAME, ENV_STAGE, STAGE_FETCH, STAGE_PUBLISH, exit_code_of,
};
use crate::contract::termination;
use crate::jobs::exit::{self, Failure as _};
use crate::tools::qemu_img;

pub use config::{Config, Limits, Stage};
pub use download::HttpOptions;

use convert::convert;

/// Field manager of the Secret and ConfigMap this Job applies.
pub const FIELD_MANAGER: &str = "guestcluster-bundle-prep";
/// The download, in `SCRATCH_DIR`.
pub const ARCHIVE_FILE: &str = "bundle.crcbundle";
/// The raw golden disk, in `GOLDEN_DIR`.
pub const DISK_FILE: &str = "disk.img";
/// The conversion's output until it is complete and hashed, in `GOLDEN_DIR`.
pub const PARTIAL_DISK_FILE: &str = ".disk.img.partial";
/// Completed extraction, in `SCRATCH_DIR` (holds [`EXTRACTED_MARKER`]).
const EXTRACTED_DIR: &str = "extracted";
/// Extraction in progress, in `SCRATCH_DIR`; renamed to [`EXTRACTED_DIR`] when complete.
const EXTRACTING_DIR: &str = ".extracting";
/// In [`EXTRACTED_DIR`]: the SHA-256 of the archive the members came from.
const EXTRACTED_MARKER: &str = "archive.sha256";

/// Members taken from the archive, under its top-level directory.
pub const QCOW2_MEMBER: &str = "crc.qcow2";
pub const KEY_MEMBER: &str = "id_ecdsa_crc";
pub const INFO_MEMBER: &str = "crc-bundle-info.json";

/// Why bundle preparation failed. Each variant is one condition reason ([`Self::reason`]).
#[derive(Debug, thiserror::Error)]
pub enum PrepError {
    /// A required environment variable is missing or a value does not parse.
    #[error("{0}")]
    InvalidConfig(String),
    /// The server answered with an error status (after retries for 5xx/408/429), or the URL is
    /// unusable.
    #[error("GET {}: {message}", download::shown(.url))]
    Http { url: String, message: String },
    /// The transfer kept failing (connect/read timeouts, cut connections, short bodies).
    #[error("GET {} did not complete after {attempts} attempts; last error: {last}", download::shown(.url))]
    DownloadInterrupted {
        url: String,
        attempts: u32,
        last: String,
    },
    /// The checksum file does not list the archive (or lists it twice, differently).
    #[error("{} does not give one SHA-256 for {file}: {detail}", download::shown(.checksums_url))]
    ChecksumMissing {
        file: String,
        checksums_url: String,
        detail: String,
    },
    /// The archive's digest is not the listed one.
    #[error("{file} has SHA-256 {actual}, but the checksum file lists {expected}")]
    ChecksumMismatch {
        file: String,
        expected: String,
        actual: String,
    },
    /// A download or archive member exceeds its limit.
    #[error("{what} is larger than the limit of {limit} bytes (set {setting} to allow more)")]
    TooLarge {
        what: String,
        limit: u64,
        setting: &'static str,
    },
    /// The archive is not a readable zstd-compressed tar.
    #[error("the archive is not a readable zstd tar: {0}")]
    ArchiveInvalid(String),
    /// An expected member is not in the archive.
    #[error("the archive has no member {member}")]
    MissingMember { member: String },
    /// A member would escape the extraction directory, is a link or special file, appears
    /// twice, or makes qemu-img open other files.
    #[error("archive member {member:?} {why}; refusing the archive")]
    UnsafeMember { member: String, why: String },
    /// `crc-bundle-info.json` is not JSON or lacks `clusterInfo.openshiftVersion`.
    #[error("crc-bundle-info.json: {0}")]
    BundleInfoUnreadable(String),
    /// `id_ecdsa_crc` is empty or not a private key (its content is never shown).
    #[error("id_ecdsa_crc: {0}")]
    KeyUnreadable(String),
    /// `qemu-img` could not inspect or convert the image.
    #[error("{0}")]
    ConvertFailed(String),
    /// The Secret or ConfigMap could not be applied.
    #[error("{0}")]
    PublishFailed(String),
    /// Reading or writing the scratch or golden volume failed.
    #[error("{what}: {source}")]
    Storage {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

impl exit::Failure for PrepError {
    fn reason(&self) -> &'static str {
        PrepError::reason(self)
    }

    fn exit_code(&self) -> ExitCode {
        ExitCode::from(PrepError::exit_code(self))
    }

    fn storage_error(what: String, source: std::io::Error) -> Self {
        PrepError::Storage { what, source }
    }
}

impl PrepError {
    /// The condition reason: a CamelCase word from [`REASONS`](crate::contract::bundle_prep::REASONS).
    pub fn reason(&self) -> &'static str {
        match self {
            PrepError::InvalidConfig(_) => "InvalidConfig",
            PrepError::Http { .. } => "HttpError",
            PrepError::DownloadInterrupted { .. } => "DownloadInterrupted",
            PrepError::ChecksumMissing { .. } => "ChecksumMissing",
            PrepError::ChecksumMismatch { .. } => "ChecksumMismatch",
            PrepError::TooLarge { .. } => "TooLarge",
            PrepError::ArchiveInvalid(_) => "ArchiveInvalid",
            PrepError::MissingMember { .. } => "MissingMember",
            PrepError::UnsafeMember { .. } => "UnsafeMember",
            PrepError::BundleInfoUnreadable(_) => "BundleInfoUnreadable",
            PrepError::KeyUnreadable(_) => "KeyUnreadable",
            PrepError::ConvertFailed(_) => "ConvertFailed",
            PrepError::PublishFailed(_) => "PublishFailed",
            PrepError::Storage { .. } => "StorageError",
        }
    }

    /// The process exit code: 10 + the reason's index in [`REASONS`](crate::contract::bundle_prep::REASONS).
    pub fn exit_code(&self) -> u8 {
        exit_code_of(self.reason()).unwrap_or(u8::MAX)
    }

    /// `<Reason>: <message>`, as written to the termination message.
    pub fn termination_message(&self) -> String {
        termination::message(self.reason(), self)
    }
}

/// What a successful run produced, and how long each step took.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub ocp_version: String,
    /// SHA-256 of the archive.
    pub sha256: String,
    pub disk_sha256: String,
    pub disk_virtual_size: u64,
    /// Whether the archive was downloaded (false: an earlier run's extraction was reused).
    pub downloaded: bool,
    pub timings: Timings,
}

/// Durations of the steps of a run.
#[derive(Clone, Debug, Default)]
pub struct Timings {
    /// Checksum file and archive, including hashing the archive.
    pub download: Duration,
    pub extract: Duration,
    pub convert: Duration,
    /// SHA-256 of the raw disk.
    pub hash: Duration,
    pub publish: Duration,
    pub total: Duration,
}

impl Outcome {
    /// The success line written to the termination message.
    pub fn summary(&self) -> String {
        let t = &self.timings;
        format!(
            "Prepared: ocpVersion {}, sha256 {}, diskSHA256 {}, diskVirtualSize {} (download {:.1}s, extract {:.1}s, convert {:.1}s, hash {:.1}s, publish {:.1}s, total {:.1}s)",
            self.ocp_version,
            self.sha256,
            self.disk_sha256,
            self.disk_virtual_size,
            t.download.as_secs_f64(),
            t.extract.as_secs_f64(),
            t.convert.as_secs_f64(),
            t.hash.as_secs_f64(),
            t.publish.as_secs_f64(),
            t.total.as_secs_f64(),
        )
    }
}

/// The bundle's private key. Its content never appears in `Debug` output, logs or errors.
pub struct PrivateKey(Vec<u8>);

impl std::fmt::Debug for PrivateKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PrivateKey(<{} bytes, redacted>)", self.0.len())
    }
}

impl PrivateKey {
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The archive's file name: the last segment of the URL's path (`crc_libvirt_4.16.0_amd64.crcbundle`).
pub fn archive_file_name(url: &str) -> Result<String, PrepError> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| PrepError::InvalidConfig(format!("BUNDLE_URL {url:?} is not a URL: {e}")))?;
    let name = uri.path().rsplit('/').next().unwrap_or_default();
    if name.is_empty() || name == "." || name == ".." {
        return Err(PrepError::InvalidConfig(format!(
            "BUNDLE_URL {url} does not end in a file name"
        )));
    }
    Ok(name.to_owned())
}

/// The archive's top-level directory: the file name without `.crcbundle`.
pub fn archive_dir_name(file_name: &str) -> &str {
    file_name.strip_suffix(".crcbundle").unwrap_or(file_name)
}

/// `clusterInfo.openshiftVersion` of `crc-bundle-info.json`.
pub fn ocp_version(info_json: &[u8]) -> Result<String, PrepError> {
    let info: serde_json::Value = serde_json::from_slice(info_json)
        .map_err(|e| PrepError::BundleInfoUnreadable(format!("not JSON: {e}")))?;
    let version = info
        .pointer("/clusterInfo/openshiftVersion")
        .and_then(|v| v.as_str())
        .map(str::trim)
        .unwrap_or_default();
    if version.is_empty() || version == "null" {
        return Err(PrepError::BundleInfoUnreadable(
            "clusterInfo.openshiftVersion is missing or empty".into(),
        ));
    }
    if version.len() > 128 || version.chars().any(char::is_control) {
        return Err(PrepError::BundleInfoUnreadable(
            "clusterInfo.openshiftVersion is not a version string".into(),
        ));
    }
    Ok(version.to_owned())
}

/// Checks the key file looks like a private key, without ever showing its content.
pub fn private_key(bytes: Vec<u8>) -> Result<PrivateKey, PrepError> {
    let text = std::str::from_utf8(&bytes)
        .map_err(|_| PrepError::KeyUnreadable("not text (a PEM/OpenSSH private key)".into()))?;
    let text = text.trim_start();
    if text.is_empty() {
        return Err(PrepError::KeyUnreadable("empty".into()));
    }
    if !(text.starts_with("-----BEGIN ") && text.contains("PRIVATE KEY-----")) {
        return Err(PrepError::KeyUnreadable(
            "not a PEM/OpenSSH private key".into(),
        ));
    }
    Ok(PrivateKey(bytes))
}

/// Runs the stage(s) `config.stage` names.
pub async fn run(config: &Config) -> Result<Outcome, PrepError> {
    match config.stage {
        Stage::Fetch => fetch(config).await,
        Stage::Publish => publish_prepared(config, Timings::default()).await,
        Stage::All => {
            let fetched = fetch(config).await?;
            publish_prepared(config, fetched.timings).await
        }
    }
}

/// What the fetch stage leaves in the scratch volume for the publish stage (the key beside it,
/// in [`PREPARED_KEY_FILE`], readable by the pod's user only).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Prepared {
    ocp_version: String,
    sha256: String,
    disk_sha256: String,
    disk_virtual_size: u64,
    downloaded: bool,
}

const PREPARED_FILE: &str = "prepared.json";
const PREPARED_KEY_FILE: &str = "prepared-key";

/// Steps 1–5, then the facts and the key written for [`publish_prepared`].
async fn fetch(config: &Config) -> Result<Outcome, PrepError> {
    let started = Instant::now();
    let mut timings = Timings::default();
    // Admission refuses http without the opt-in; a bundle stored before that rule still may not.
    for url in [&config.bundle_url, &config.sha256_url] {
        if !config.allow_http && !url.to_ascii_lowercase().starts_with("https://") {
            return Err(PrepError::Http {
                url: url.clone(),
                message:
                    "only https is accepted; set spec.allowHTTP: true to download over plain http"
                        .into(),
            });
        }
    }
    let file_name = archive_file_name(&config.bundle_url)?;
    let dir_name = archive_dir_name(&file_name).to_owned();
    for dir in [&config.scratch_dir, &config.golden_dir] {
        std::fs::create_dir_all(dir)
            .map_err(PrepError::storage(format!("creating {}", dir.display())))?;
    }
    remove_if_present(&config.golden_dir.join(PARTIAL_DISK_FILE))?;
    tracing::info!(bundle = %config.bundle_name, url = %download::shown(&config.bundle_url), "preparing bundle {file_name}");

    // 1–3: checksum, archive, members.
    let client = download::Client::new(config.http.clone());
    let listing = client
        .fetch_small(
            &config.sha256_url,
            config.limits.checksums,
            "MAX_SHA256SUM_BYTES",
        )
        .await?;
    let expected = checksum::expected_digest(&String::from_utf8_lossy(&listing), &file_name)
        .map_err(|detail| PrepError::ChecksumMissing {
            file: file_name.clone(),
            checksums_url: config.sha256_url.clone(),
            detail,
        })?;
    tracing::info!(
        "{} lists sha256 {expected} for {file_name}",
        download::shown(&config.sha256_url)
    );

    let (members, downloaded) = match reuse_extraction(&config.scratch_dir, &expected)? {
        Some(members) => {
            tracing::info!("reusing the extraction of an earlier run (archive sha256 {expected})");
            timings.download = started.elapsed();
            (members, false)
        }
        None => {
            let archive = config.scratch_dir.join(ARCHIVE_FILE);
            download_verified(&client, config, &file_name, &expected, &archive).await?;
            timings.download = started.elapsed();
            let step = Instant::now();
            let members = extract_archive(config, &archive, &dir_name, &expected).await?;
            timings.extract = step.elapsed();
            (members, true)
        }
    };

    // 4: what the bundle says, before any disk is written.
    let info = read_member(&members.info, "crc-bundle-info.json")?;
    let ocp_version = ocp_version(&info)?;
    let key = private_key(read_member(&members.key, "id_ecdsa_crc")?)?;
    tracing::info!("bundle {dir_name}: OpenShift {ocp_version}");

    // 5: the raw golden disk.
    let disk = convert(
        &members.qcow2,
        &format!("{dir_name}/{QCOW2_MEMBER}"),
        &config.golden_dir,
        config.limits.golden,
    )
    .await?;
    timings.convert = disk.convert;
    timings.hash = disk.hash;

    // For the publish stage: the key (only the pod's user may read it) and the facts.
    let prepared = Prepared {
        ocp_version,
        sha256: expected,
        disk_sha256: disk.sha256,
        disk_virtual_size: disk.virtual_size,
        downloaded,
    };
    write_private(&config.scratch_dir.join(PREPARED_KEY_FILE), key.as_bytes())?;
    let facts = serde_json::to_vec(&prepared).expect("plain data serializes");
    write_private(&config.scratch_dir.join(PREPARED_FILE), &facts)?;
    timings.total = started.elapsed();
    Ok(Outcome {
        ocp_version: prepared.ocp_version,
        sha256: prepared.sha256,
        disk_sha256: prepared.disk_sha256,
        disk_virtual_size: prepared.disk_virtual_size,
        downloaded,
        timings,
    })
}

/// Steps 6–7: the Secret and ConfigMap from what [`fetch`] left, then scratch cleaned.
/// `timings` are the fetch stage's when it ran in this process.
async fn publish_prepared(config: &Config, mut timings: Timings) -> Result<Outcome, PrepError> {
    let started = Instant::now();
    let facts_path = config.scratch_dir.join(PREPARED_FILE);
    let facts = std::fs::read(&facts_path).map_err(PrepError::storage(format!(
        "reading {} (the fetch stage writes it)",
        facts_path.display()
    )))?;
    let prepared: Prepared = serde_json::from_slice(&facts).map_err(|e| PrepError::Storage {
        what: format!("reading {}", facts_path.display()),
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string()),
    })?;
    let key_path = config.scratch_dir.join(PREPARED_KEY_FILE);
    let key = private_key(std::fs::read(&key_path).map_err(PrepError::storage(format!(
        "reading {}",
        key_path.display()
    )))?)?;

    // 6: publish.
    publish::publish(&publish::Publication {
        namespace: &config.namespace,
        bundle_name: &config.bundle_name,
        bundle_uid: &config.bundle_uid,
        secret_name: &config.ssh_secret_name,
        configmap_name: &config.metadata_configmap_name,
        key: &key,
        ocp_version: &prepared.ocp_version,
        sha256: &prepared.sha256,
        disk_sha256: &prepared.disk_sha256,
        disk_virtual_size: prepared.disk_virtual_size,
    })
    .await?;
    timings.publish = started.elapsed();

    // 7: scratch.
    clean_scratch(&config.scratch_dir);
    for file in [PREPARED_FILE, PREPARED_KEY_FILE] {
        if let Err(err) = remove_if_present(&config.scratch_dir.join(file)) {
            tracing::warn!("cleaning scratch: {err}");
        }
    }
    timings.total += started.elapsed();
    Ok(Outcome {
        ocp_version: prepared.ocp_version,
        sha256: prepared.sha256,
        disk_sha256: prepared.disk_sha256,
        disk_virtual_size: prepared.disk_virtual_size,
        downloaded: prepared.downloaded,
        timings,
    })
}

/// Writes a file only its owner may read (created `0600`, replaced whole).
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), PrepError> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    remove_if_present(path)?;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .and_then(|mut f| f.write_all(bytes))
        .map_err(PrepError::storage(format!("writing {}", path.display())))
}

/// Downloads and checks the archive. A mismatch on a download that reused bytes of an earlier
/// run (which may have come from another file of the same name) downloads once more from zero.
async fn download_verified(
    client: &download::Client,
    config: &Config,
    file_name: &str,
    expected: &str,
    archive: &Path,
) -> Result<(), PrepError> {
    let mut fresh = false;
    loop {
        let got = client
            .download(&config.bundle_url, archive, config.limits.bundle)
            .await?;
        if got.sha256 == expected {
            tracing::info!("{file_name}: {} bytes, sha256 verified", got.len);
            return Ok(());
        }
        remove_if_present(archive)?;
        if got.reused > 0 && !fresh {
            tracing::warn!(
                "{file_name}: sha256 {} does not match after resuming an earlier download; downloading again from the start",
                got.sha256
            );
            fresh = true;
            continue;
        }
        return Err(PrepError::ChecksumMismatch {
            file: file_name.to_owned(),
            expected: expected.to_owned(),
            actual: got.sha256,
        });
    }
}

/// The extracted members' paths.
#[derive(Clone, Debug)]
struct Members {
    qcow2: PathBuf,
    key: PathBuf,
    info: PathBuf,
}

impl Members {
    fn in_dir(dir: &Path) -> Members {
        Members {
            qcow2: dir.join(QCOW2_MEMBER),
            key: dir.join(KEY_MEMBER),
            info: dir.join(INFO_MEMBER),
        }
    }
}

/// The members of an earlier run's extraction of the same archive, if complete; removes a stale
/// one.
fn reuse_extraction(scratch: &Path, expected: &str) -> Result<Option<Members>, PrepError> {
    let dir = scratch.join(EXTRACTED_DIR);
    let marker = std::fs::read_to_string(dir.join(EXTRACTED_MARKER)).unwrap_or_default();
    let members = Members::in_dir(&dir);
    if marker.trim() == expected
        && [&members.qcow2, &members.key, &members.info]
            .iter()
            .all(|p| p.is_file())
    {
        return Ok(Some(members));
    }
    remove_dir_if_present(&dir)?;
    Ok(None)
}

async fn extract_archive(
    config: &Config,
    archive: &Path,
    dir_name: &str,
    sha256: &str,
) -> Result<Members, PrepError> {
    let scratch = config.scratch_dir.clone();
    let archive = archive.to_path_buf();
    let dir_name = dir_name.to_owned();
    let sha256 = sha256.to_owned();
    let limits = config.limits.clone();
    tokio::task::spawn_blocking(move || {
        let working = scratch.join(EXTRACTING_DIR);
        remove_dir_if_present(&working)?;
        std::fs::create_dir(&working).map_err(PrepError::storage(format!(
            "creating {}",
            working.display()
        )))?;
        let result = extract::extract(&archive, &dir_name, &working, &limits).and_then(|()| {
            let marker = working.join(EXTRACTED_MARKER);
            std::fs::write(&marker, format!("{sha256}\n"))
                .map_err(PrepError::storage(format!("writing {}", marker.display())))?;
            let done = scratch.join(EXTRACTED_DIR);
            std::fs::rename(&working, &done).map_err(PrepError::storage(format!(
                "renaming {} to {}",
                working.display(),
                done.display()
            )))?;
            sync_dir(&scratch)?;
            Ok(Members::in_dir(&done))
        });
        match result {
            Ok(members) => {
                remove_if_present(&archive)?;
                tracing::info!("extracted the bundle's members; deleted the archive");
                Ok(members)
            }
            Err(err) => {
                let _ = std::fs::remove_dir_all(&working);
                Err(err)
            }
        }
    })
    .await
    .map_err(|e| PrepError::Storage {
        what: "extracting the archive".into(),
        source: std::io::Error::other(e),
    })?
}

fn read_member(path: &Path, name: &str) -> Result<Vec<u8>, PrepError> {
    std::fs::read(path).map_err(PrepError::storage(format!(
        "reading extracted {name} ({})",
        path.display()
    )))
}

/// Removes what the run left in the scratch directory. Failures only warn: the bundle is
/// published by now, and the operator deletes the scratch volume anyway.
fn clean_scratch(scratch: &Path) {
    for dir in [EXTRACTED_DIR, EXTRACTING_DIR] {
        if let Err(err) = remove_dir_if_present(&scratch.join(dir)) {
            tracing::warn!("cleaning scratch: {err}");
        }
    }
    if let Err(err) = remove_if_present(&scratch.join(ARCHIVE_FILE)) {
        tracing::warn!("cleaning scratch: {err}");
    }
}

fn remove_if_present(path: &Path) -> Result<(), PrepError> {
    match std::fs::remove_file(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(PrepError::Storage {
            what: format!("removing {}", path.display()),
            source: err,
        }),
        _ => Ok(()),
    }
}

fn remove_dir_if_present(path: &Path) -> Result<(), PrepError> {
    match std::fs::remove_dir_all(path) {
        Err(err) if err.kind() != std::io::ErrorKind::NotFound => Err(PrepError::Storage {
            what: format!("removing {}", path.display()),
            source: err,
        }),
        _ => Ok(()),
    }
}

/// Makes a rename in `dir` durable.
fn sync_dir(dir: &Path) -> Result<(), PrepError> {
    std::fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(PrepError::storage(format!("syncing {}", dir.display())))
}

/// The `bundle-prep` subcommand: runs, reports, and returns the exit code (0, or 10 + the
/// reason's index in [`REASONS`](crate::contract::bundle_prep::REASONS)). Logging must already be set up.
/// Downloads `url` into `dest` (continuing from the bytes already there) and returns the file's
/// hex SHA-256: the download of this Job, for the other Jobs that fetch large files.
pub async fn download_to(
    url: &str,
    dest: &Path,
    max: u64,
    http: &HttpOptions,
) -> Result<String, PrepError> {
    download::Client::new(http.clone())
        .download(url, dest, max)
        .await
        .map(|downloaded| downloaded.sha256)
}

pub fn main() -> ExitCode {
    exit::run(
        Config::from_env(),
        |config| async move { run(&config).await },
        Outcome::summary,
    )
}

#[cfg(test)]
mod tests;
