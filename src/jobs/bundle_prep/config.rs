//! What the Job is told by its environment: the stage, the URLs, the directories and the size
//! limits ([`Config::from_env`]).

use super::*;

/// Size limits (bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// `MAX_BUNDLE_BYTES` (default 64 GiB): the downloaded archive.
    pub bundle: u64,
    /// `MAX_SHA256SUM_BYTES` (default 1 MiB): the checksum file.
    pub checksums: u64,
    /// `MAX_QCOW2_BYTES` (default 128 GiB): `crc.qcow2` as stored in the archive.
    pub qcow2: u64,
    /// `MAX_KEY_BYTES` (default 64 KiB): `id_ecdsa_crc`.
    pub key: u64,
    /// `MAX_BUNDLE_INFO_BYTES` (default 1 MiB): `crc-bundle-info.json`.
    pub info: u64,
    /// `MAX_ARCHIVE_MEMBERS` (default 10000): members of the archive, skipped ones included.
    pub members: u64,
    /// `MAX_UNPACKED_BYTES` (default 256 GiB): every member's size added up, skipped ones
    /// included (they are decompressed to be skipped).
    pub unpacked: u64,
    /// `GOLDEN_VOLUME_BYTES` (the bundle's `goldenVolumeSize`; unset: no limit): the disk's
    /// virtual size, which the raw golden disk takes.
    pub golden: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            bundle: 64 << 30,
            checksums: 1 << 20,
            qcow2: 128 << 30,
            key: 64 << 10,
            info: 1 << 20,
            members: 10_000,
            unpacked: 256 << 30,
            golden: u64::MAX,
        }
    }
}

/// The Job's settings, from its environment.
#[derive(Clone, Debug)]
pub struct Config {
    pub bundle_url: String,
    pub sha256_url: String,
    /// `ALLOW_HTTP=true`: plain-http URLs accepted (`spec.allowHTTP`).
    pub allow_http: bool,
    /// Namespace of the Secret and ConfigMap (the operator namespace).
    pub namespace: String,
    pub bundle_name: String,
    pub bundle_uid: String,
    pub ssh_secret_name: String,
    pub metadata_configmap_name: String,
    /// `GOLDEN_DIR` (default `/golden`): the golden PVC's mount.
    pub golden_dir: PathBuf,
    /// `SCRATCH_DIR` (default `/work`): the scratch PVC's mount.
    pub scratch_dir: PathBuf,
    pub limits: Limits,
    pub http: HttpOptions,
    /// `PREP_STAGE`: which part of the preparation this process runs.
    pub stage: Stage,
}

/// The two parts of a preparation. The prep Job runs them as two containers so that the one
/// handling downloaded data (unpacking, `qemu-img`) holds no API token, and the one holding the
/// token that writes Secrets touches nothing downloaded but the key and the facts it is handed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// Both, in one process.
    All,
    /// Steps 1–5: checksum, archive, members, the raw golden disk; the key and the facts are
    /// left in the scratch volume.
    Fetch,
    /// Step 6–7: the Secret and ConfigMap from what `Fetch` left; scratch cleaned.
    Publish,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Config, PrepError> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup` (an environment).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, PrepError> {
        let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let required = [
            ENV_BUNDLE_URL,
            ENV_SHA256_URL,
            ENV_NAMESPACE,
            ENV_BUNDLE_NAME,
            ENV_BUNDLE_UID,
            ENV_SSH_SECRET_NAME,
            ENV_METADATA_CONFIGMAP_NAME,
        ];
        let missing: Vec<&str> = required
            .iter()
            .copied()
            .filter(|name| get(name).is_none())
            .collect();
        if !missing.is_empty() {
            return Err(PrepError::InvalidConfig(format!(
                "missing environment variables: {}",
                missing.join(", ")
            )));
        }
        let value = |name: &str| get(name).unwrap_or_default().trim().to_owned();
        let bytes = |name: &str, default: u64| match get(name) {
            None => Ok(default),
            Some(text) => parse_bytes(&text).ok_or_else(|| {
                PrepError::InvalidConfig(format!(
                    "{name}={text:?} is not a byte count (digits, optionally with Ki, Mi, Gi or Ti)"
                ))
            }),
        };
        let number = |name: &str, default: u64| match get(name) {
            None => Ok(default),
            Some(text) => text.trim().parse::<u64>().map_err(|_| {
                PrepError::InvalidConfig(format!("{name}={text:?} is not a whole number"))
            }),
        };
        let defaults = Limits::default();
        let limits = Limits {
            bundle: bytes("MAX_BUNDLE_BYTES", defaults.bundle)?,
            checksums: bytes("MAX_SHA256SUM_BYTES", defaults.checksums)?,
            qcow2: bytes("MAX_QCOW2_BYTES", defaults.qcow2)?,
            key: bytes("MAX_KEY_BYTES", defaults.key)?,
            info: bytes("MAX_BUNDLE_INFO_BYTES", defaults.info)?,
            members: number("MAX_ARCHIVE_MEMBERS", defaults.members)?,
            unpacked: bytes("MAX_UNPACKED_BYTES", defaults.unpacked)?,
            golden: bytes(ENV_GOLDEN_VOLUME_BYTES, defaults.golden)?,
        };
        let http_defaults = HttpOptions::default();
        let attempts = number("DOWNLOAD_ATTEMPTS", u64::from(http_defaults.attempts))?;
        let http = HttpOptions {
            connect_timeout: Duration::from_secs(number(
                "HTTP_CONNECT_TIMEOUT_SECONDS",
                http_defaults.connect_timeout.as_secs(),
            )?),
            read_timeout: Duration::from_secs(number(
                "HTTP_READ_TIMEOUT_SECONDS",
                http_defaults.read_timeout.as_secs(),
            )?),
            attempts: u32::try_from(attempts.max(1)).unwrap_or(u32::MAX),
            backoff: Duration::from_millis(number(
                "DOWNLOAD_RETRY_BACKOFF_MS",
                u64::try_from(http_defaults.backoff.as_millis()).unwrap_or(u64::MAX),
            )?),
            max_backoff: http_defaults.max_backoff,
            ca_file: get("SSL_CERT_FILE").map(PathBuf::from),
        };
        Ok(Config {
            bundle_url: value(ENV_BUNDLE_URL),
            allow_http: get(ENV_ALLOW_HTTP).is_some_and(|v| v.trim() == "true"),
            sha256_url: value(ENV_SHA256_URL),
            namespace: value(ENV_NAMESPACE),
            bundle_name: value(ENV_BUNDLE_NAME),
            bundle_uid: value(ENV_BUNDLE_UID),
            ssh_secret_name: value(ENV_SSH_SECRET_NAME),
            metadata_configmap_name: value(ENV_METADATA_CONFIGMAP_NAME),
            golden_dir: PathBuf::from(get(ENV_GOLDEN_DIR).unwrap_or_else(|| "/golden".into())),
            scratch_dir: PathBuf::from(get(ENV_SCRATCH_DIR).unwrap_or_else(|| "/work".into())),
            limits,
            http,
            stage: match get(ENV_STAGE).as_deref().map(str::trim) {
                None => Stage::All,
                Some(STAGE_FETCH) => Stage::Fetch,
                Some(STAGE_PUBLISH) => Stage::Publish,
                Some(other) => {
                    return Err(PrepError::InvalidConfig(format!(
                        "{ENV_STAGE}={other:?} is neither {STAGE_FETCH} nor {STAGE_PUBLISH}"
                    )));
                }
            },
        })
    }
}

/// `123`, `64Gi`, `512Mi`, `64Ki`, `2Ti`.
pub(super) fn parse_bytes(text: &str) -> Option<u64> {
    let text = text.trim();
    let (digits, shift) = [("Ki", 10), ("Mi", 20), ("Gi", 30), ("Ti", 40)]
        .iter()
        .find_map(|(suffix, shift)| text.strip_suffix(suffix).map(|d| (d, *shift)))
        .unwrap_or((text, 0));
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}
