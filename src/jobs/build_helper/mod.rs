//! `guestcluster build-helper`: the guest session of a bundle build's Install stage
//! (`docs/design/certificates-and-time.md`, "2. Generator boot" to "4. Cold restart"). One Job
//! per step and VMI; the steps themselves are [`crate::guest::build`]:
//!
//! - **generator** (guest a day behind): the installer and its staging directory into the live
//!   system's memory, the single-node Ignition made there, patched, embedded into the install
//!   ISO (`disk.img` of the install ISO volume, via a partial file) in this pod; the admin
//!   kubeconfig and kubeadmin password into the credentials Secret; the guest powered off;
//! - **install** (guest a day behind): the install followed through the guest API until the
//!   cluster is settled, the installer's kubelet signer recorded in the credentials Secret,
//!   SNC's certificate steps, settled again;
//! - **certificates** (guest on real time, after the cold restart): kubelet CSRs approved until
//!   both kubelet certificates are valid 25 days by guest time from a signer that is not the
//!   installer's;
//! - **customize** (stage 3, [`crate::guest::customize`]): the profile's post-install steps, the
//!   htpasswd users, the router CA, the user's post-install manifests, the MachineConfigPool
//!   rollouts and a settled cluster;
//! - **seal** (stage 4, [`crate::guest::seal`]): pull secret emptied and rolled out, build-only
//!   objects removed, `/opt/kubeconfig`, kubelet disabled, scrubbed and trimmed, read back, the
//!   guest powered off;
//! - **validate** (stage 6, the validation clone on real time, [`crate::guest::validate`]): what
//!   sealing promised read in the untouched clone, then the crc-agent's startup path;
//! - **aged** (stage 6, the same clone 20 days ahead): the startup path again.
//!
//! Scoped to its VMI as the crc-agent is ([`crate::agent::scope`]): a VMI that is replaced or
//! stops ends the work without effect (exit 0, `vmiGone` in the outcome). The outcome is the
//! termination message; a failure writes `<Reason>: <message>` there instead.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use tracing::info;

use crate::agent;
use crate::agent::scope::{self, Verdict};
use crate::contract::build_helper::{
    ENV_CREDENTIALS_DIR, ENV_CREDENTIALS_SECRET, ENV_INPUTS_DIR, ENV_ISO_DIR, ENV_NAMESPACE,
    ENV_RELEASE_IMAGE, ENV_SETTLE_INTERVAL_MS, ENV_SSH_HOST, ENV_SSH_KEY_PATH, ENV_STEP,
    ENV_VM_NAME, ENV_VMI_UID, ENV_WORK_DIR, KEY_INSTALLER_SIGNER, KEY_KUBEADMIN_PASSWORD,
    KEY_KUBECONFIG, Outcome, Settle, Step,
};
use crate::contract::installer::{
    KEY_POST_INSTALL, PostInstallManifest, WORK_BIN, WORK_STAGING, WORK_STOCK_ISO,
};
use crate::guest::api::Credentials;
use crate::guest::build::{self as steps, DAY_SECONDS};
use crate::guest::cluster::{self, Patience};
use crate::guest::kubeconfig::Kubeconfig;
use crate::guest::ssh::{SshGuest, SshOptions};
use crate::guest::{GuestError, keys};
use crate::guest::{customize, seal, validate};
use crate::identity;
use crate::jobs::exit::{self, Failure as _};
use crate::kubevirt::VirtualMachineInstance;
use crate::resources::profile::post_install;
use crate::tools::coreos_installer;

/// The ISO the build VM boots, in the install ISO volume.
pub const DISK_FILE: &str = "disk.img";
const PARTIAL_DISK_FILE: &str = ".disk.img.partial";
/// The patched live Ignition, only while it is embedded (it holds the pull secret).
const IGNITION_FILE: &str = ".live.ign";
const SSH_PORT: u16 = 22;
/// How long each wait of the helper may take. Public so that a test can hold them against the
/// durations a real cluster takes (`tests/e2e_deadlines.rs`).
#[derive(Clone, Copy, Debug)]
pub struct Waits {
    /// sshd answering after the VMI runs (a live ISO boots in a minute or two).
    pub ssh: Duration,
    /// Each guest command of the generator boot: the installer's `create` steps take seconds
    /// to a few minutes.
    pub installer_command: Duration,
    /// Each guest command of the later steps (reads, `openssl`, `date`).
    pub command: Duration,
    /// The install itself, from the live boot to a settled cluster: the installer allows
    /// 20 min for the API, 30 min for bootstrapping and 40 min for the cluster to initialize.
    pub install: Duration,
    /// One round of waiting for a settled cluster over one connection, before connecting again.
    pub install_round: Duration,
    /// A certificate step of the install boot, the CSR loop after the cold restart, and the
    /// wait for a settled cluster after a boot (a cluster start takes up to 25 min).
    pub certificates: Duration,
    /// A MachineConfigPool rollout: the node drains and reboots for it on real hardware.
    pub rollout: Duration,
}

pub const WAITS: Waits = Waits {
    ssh: Duration::from_secs(600),
    installer_command: Duration::from_secs(600),
    command: Duration::from_secs(60),
    install: Duration::from_secs(2 * 3600),
    install_round: Duration::from_secs(120),
    certificates: Duration::from_secs(40 * 60),
    rollout: Duration::from_secs(45 * 60),
};

/// Why the helper failed; [`Error::reason`] is one of
/// [`REASONS`](crate::contract::build_helper::REASONS).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    InvalidConfig(String),
    #[error("{0}")]
    Scope(#[from] scope::Error),
    #[error("guest SSH: {0}")]
    Ssh(#[source] GuestError),
    #[error("{0}")]
    Step(#[from] steps::Error),
    #[error("{0}")]
    Cluster(#[from] cluster::Error),
    #[error("embedding the single-node Ignition: {0}")]
    Embed(String),
    #[error("the credentials: {0}")]
    Credentials(String),
    #[error("{0}")]
    Customize(#[from] customize::Error),
    #[error("{0}")]
    Seal(#[from] seal::Error),
    #[error("{0}")]
    Validate(#[from] validate::Error),
    #[error("the CRC startup path: {reason}: {source}", reason = source.reason())]
    Startup {
        #[source]
        source: agent::Error,
    },
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

    fn storage_error(what: String, source: std::io::Error) -> Self {
        Error::Storage { what, source }
    }
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidConfig(_) => "InvalidConfig",
            Error::Scope(_) => "VMIUnreadable",
            Error::Ssh(_) => "GuestUnreachable",
            Error::Step(err) => err.reason(),
            Error::Cluster(_) => "GuestAPIUnavailable",
            Error::Embed(_) => "EmbedFailed",
            Error::Credentials(_) => "CredentialsUnavailable",
            Error::Customize(err) => err.reason(),
            Error::Seal(err) => err.reason(),
            Error::Validate(err) => err.reason(),
            Error::Startup { .. } => "StartupFailed",
            Error::Storage { .. } => "StorageError",
        }
    }
}

/// The helper's settings, from the Job's environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub step: Step,
    pub namespace: String,
    pub vm_name: String,
    pub vmi_uid: String,
    pub ssh_host: String,
    pub ssh_key_path: PathBuf,
    pub release_image: String,
    pub credentials_secret: String,
    pub work_dir: Option<PathBuf>,
    pub iso_dir: Option<PathBuf>,
    pub credentials_dir: Option<PathBuf>,
    pub inputs_dir: Option<PathBuf>,
    pub settle: Settle,
}

impl Config {
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Config, Error> {
        let required = |name: &str| exit::required(&lookup, name).map_err(Error::InvalidConfig);
        let step_text = required(ENV_STEP)?;
        let step = Step::parse(&step_text).ok_or_else(|| {
            Error::InvalidConfig(format!(
                "{ENV_STEP}={step_text:?} is not one of generator, install, certificates, customize, seal"
            ))
        })?;
        let path = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let settle = match lookup(ENV_SETTLE_INTERVAL_MS).filter(|v| !v.is_empty()) {
            None => Settle::UPSTREAM,
            Some(text) => Settle::every(Duration::from_millis(text.parse().map_err(|_| {
                Error::InvalidConfig(format!(
                    "{ENV_SETTLE_INTERVAL_MS}={text:?} is not a number of milliseconds"
                ))
            })?)),
        };
        let config = Config {
            step,
            namespace: required(ENV_NAMESPACE)?,
            vm_name: required(ENV_VM_NAME)?,
            vmi_uid: required(ENV_VMI_UID)?,
            ssh_host: required(ENV_SSH_HOST)?,
            ssh_key_path: PathBuf::from(required(ENV_SSH_KEY_PATH)?),
            release_image: required(ENV_RELEASE_IMAGE)?,
            credentials_secret: required(ENV_CREDENTIALS_SECRET)?,
            work_dir: path(ENV_WORK_DIR),
            iso_dir: path(ENV_ISO_DIR),
            credentials_dir: path(ENV_CREDENTIALS_DIR),
            inputs_dir: path(ENV_INPUTS_DIR),
            settle,
        };
        let needs = |present: bool, name: &str| {
            if present {
                Ok(())
            } else {
                Err(Error::InvalidConfig(format!(
                    "{name} is required for step {}",
                    step.as_str()
                )))
            }
        };
        match step {
            Step::Generator => {
                needs(config.work_dir.is_some(), ENV_WORK_DIR)?;
                needs(config.iso_dir.is_some(), ENV_ISO_DIR)?;
            }
            Step::Install | Step::Certificates | Step::Seal => {
                needs(config.credentials_dir.is_some(), ENV_CREDENTIALS_DIR)?;
            }
            Step::Customize => {
                needs(config.credentials_dir.is_some(), ENV_CREDENTIALS_DIR)?;
                needs(config.inputs_dir.is_some(), ENV_INPUTS_DIR)?;
            }
            Step::Validate | Step::Aged => {
                needs(config.inputs_dir.is_some(), ENV_INPUTS_DIR)?;
            }
        }
        Ok(config)
    }

    fn ssh_addr(&self) -> String {
        if self.ssh_host.contains(':') {
            format!("[{}]:{SSH_PORT}", self.ssh_host)
        } else {
            format!("{}:{SSH_PORT}", self.ssh_host)
        }
    }
}

/// Entry point of `guestcluster build-helper`.
pub fn main() -> ExitCode {
    exit::run(
        Config::from_lookup(|name| std::env::var(name).ok()),
        |config| async move {
            let client = kube::Client::try_default()
                .await
                .map_err(|e| Error::InvalidConfig(format!("management cluster client: {e}")))?;
            run(&config, client).await
        },
        |outcome| serde_json::to_string(outcome).unwrap_or_default(),
    )
}

/// Runs the configured step for its VMI; `client` is the management cluster's.
pub async fn run(config: &Config, client: kube::Client) -> Result<Outcome, Error> {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &config.namespace);
    let gone = |reason: String| Outcome {
        step: config.step,
        vmi_gone: Some(reason),
        summary: String::new(),
    };
    if let Verdict::Stop(reason) =
        scope::check(&vmis, &config.namespace, &config.vm_name, &config.vmi_uid).await?
    {
        info!(%reason, "the VMI is not this Job's; nothing done");
        return Ok(gone(reason));
    }
    let watch = scope::watch_until_gone(
        vmis,
        config.vm_name.clone(),
        config.vmi_uid.clone(),
        Duration::from_secs(1),
    );
    let work = async {
        Ok::<_, Error>(match config.step {
            Step::Generator => {
                let guest = connect(config).await?;
                let summary = generator(config, &client, &guest).await?;
                (Some(guest), summary)
            }
            // The install boot reboots under its connections: it makes its own.
            Step::Install => (None, install(config, &client).await?),
            Step::Certificates => {
                let guest = connect(config).await?;
                let summary = certificates(config, guest.clone()).await?;
                guest.close().await;
                (None, summary)
            }
            Step::Customize => {
                let guest = connect(config).await?;
                let summary = customize(config, guest.clone()).await?;
                guest.close().await;
                (None, summary)
            }
            Step::Seal => {
                let guest = connect(config).await?;
                let summary = seal(config, guest.clone()).await?;
                (Some(guest), summary)
            }
            Step::Validate | Step::Aged => (None, validation(config).await?),
        })
    };
    // Dropping the work on a gone VMI drops its SSH connections with it.
    let (powered_off, summary) = tokio::select! {
        reason = watch => return Ok(gone(reason)),
        result = work => result?,
    };
    if let Some(guest) = powered_off {
        // After the watch: the power-off ends the VMI on purpose.
        steps::power_off(&guest).await?;
        info!(step = config.step.as_str(), "guest powered off");
    }
    Ok(Outcome {
        step: config.step,
        vmi_gone: None,
        summary,
    })
}

async fn connect(config: &Config) -> Result<Arc<SshGuest>, Error> {
    let text = std::fs::read_to_string(&config.ssh_key_path).map_err(Error::storage(format!(
        "reading the SSH key {}",
        config.ssh_key_path.display()
    )))?;
    let key = keys::parse_private_key(&text).map_err(|e| {
        Error::InvalidConfig(format!("SSH key {}: {e}", config.ssh_key_path.display()))
    })?;
    let addr = config.ssh_addr();
    crate::guest::ssh::wait_for_port(&addr, Duration::from_secs(2), WAITS.ssh)
        .await
        .map_err(Error::Ssh)?;
    let options = ssh_options(config.step);
    let guest = SshGuest::connect(&addr, key, &options)
        .await
        .map_err(Error::Ssh)?;
    info!(%addr, "connected to the guest");
    Ok(Arc::new(guest))
}

/// How long a step's guest work may take: its Job's deadline less a minute, so that a guest that
/// stops answering ends the step with its own reason while the pod can still report it.
fn step_budget(step: Step) -> Duration {
    let seconds = crate::resources::build::helper_deadline_seconds(step) - REPORT_MARGIN_SECONDS;
    Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
}

/// Left of a Job's deadline for the helper to report a hung step.
const REPORT_MARGIN_SECONDS: i64 = 60;

/// The SSH limits of a step, from now: each command's own budget, all of them within the step's.
fn ssh_options(step: Step) -> SshOptions {
    SshOptions {
        connect_timeout: Duration::from_secs(30),
        command_timeout: Some(match step {
            Step::Generator => WAITS.installer_command,
            Step::Install
            | Step::Certificates
            | Step::Customize
            | Step::Seal
            | Step::Validate
            | Step::Aged => WAITS.command,
        }),
        deadline: Some(tokio::time::Instant::now() + step_budget(step)),
        ..SshOptions::default()
    }
}

/// The generator boot.
async fn generator(
    config: &Config,
    client: &kube::Client,
    guest: &SshGuest,
) -> Result<String, Error> {
    let skew = steps::check_clock(guest, -DAY_SECONDS).await?;
    info!(skew, "guest clock a day behind");
    let work = config
        .work_dir
        .as_deref()
        .unwrap_or(std::path::Path::new("."));
    let iso_dir = config
        .iso_dir
        .as_deref()
        .unwrap_or(std::path::Path::new("."));
    let installer = work.join(WORK_BIN).join("openshift-install");
    // Streamed to the guest from the file; missing, it is the work volume's fault.
    std::fs::metadata(&installer)
        .map_err(Error::storage(format!("reading {}", installer.display())))?;
    let staging_dir = work.join(WORK_STAGING);
    let staged = steps::read_staging(&staging_dir).map_err(Error::storage(format!(
        "reading the staging directory {}",
        staging_dir.display()
    )))?;
    let generated = steps::generate(guest, &installer, &staged, &config.release_image).await?;
    info!("single-node Ignition created in the guest");

    // Embedding edits a file and involves no clock: done here, from the stock ISO.
    let ignition = iso_dir.join(IGNITION_FILE);
    write_private(&ignition, generated.live_ignition.expose().as_bytes())?;
    let partial = iso_dir.join(PARTIAL_DISK_FILE);
    let embedded = coreos_installer::embed(&ignition, &work.join(WORK_STOCK_ISO), &partial).await;
    let _ = std::fs::remove_file(&ignition);
    embedded.map_err(|e| Error::Embed(e.to_string()))?;
    let disk = iso_dir.join(DISK_FILE);
    std::fs::rename(&partial, &disk).map_err(Error::storage(format!(
        "renaming {} to {}",
        partial.display(),
        disk.display()
    )))?;
    info!(disk = %disk.display(), "install ISO written");

    patch_credentials(
        client,
        config,
        [
            (KEY_KUBECONFIG, generated.kubeconfig),
            (KEY_KUBEADMIN_PASSWORD, generated.kubeadmin_password),
        ],
    )
    .await?;
    Ok(format!(
        "single-node Ignition made at guest time ({skew} s from real time) and embedded into the install ISO"
    ))
}

fn write_private(path: &std::path::Path, data: &[u8]) -> Result<(), Error> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(Error::storage(format!("writing {}", path.display())))?;
    file.write_all(data)
        .map_err(Error::storage(format!("writing {}", path.display())))
}

/// Adds keys to the credentials Secret (server-side apply of those keys only).
async fn patch_credentials<const N: usize>(
    client: &kube::Client,
    config: &Config,
    entries: [(&str, Vec<u8>); N],
) -> Result<(), Error> {
    let data: std::collections::BTreeMap<String, ByteString> = entries
        .into_iter()
        .map(|(k, v)| (k.to_owned(), ByteString(v)))
        .collect();
    let patch = serde_json::json!({"data": data});
    let secrets = Api::<Secret>::namespaced(client.clone(), &config.namespace);
    crate::write::merge_patch(&secrets, &config.credentials_secret, &patch)
        .await
        .map_err(|e| {
            Error::Credentials(format!(
                "writing Secret {}/{}: {e}",
                config.namespace, config.credentials_secret
            ))
        })?;
    Ok(())
}

/// What the credentials Secret holds, as mounted.
struct Mounted {
    credentials: Credentials,
    installer_signer: Option<String>,
    /// The installer's admin kubeconfig as written (the sealed disk's `/opt/kubeconfig`).
    kubeconfig: String,
    kubeadmin_password: Option<String>,
}

fn read_mounted(config: &Config) -> Result<Mounted, Error> {
    let dir = config
        .credentials_dir
        .as_deref()
        .unwrap_or(std::path::Path::new("."));
    let read = |key: &str| std::fs::read_to_string(dir.join(key));
    let text = read(KEY_KUBECONFIG).map_err(|e| {
        Error::Credentials(format!(
            "{}/{KEY_KUBECONFIG}: {e} (the generator step writes it)",
            dir.display()
        ))
    })?;
    let kubeconfig = Kubeconfig::parse(&text)
        .map_err(|e| Error::Credentials(format!("{KEY_KUBECONFIG}: {e}")))?;
    let server_ca = kubeconfig
        .server_ca()
        .map_err(|e| Error::Credentials(format!("{KEY_KUBECONFIG}: {e}")))?;
    let (client_cert, client_key) = kubeconfig
        .client_credentials()
        .map_err(|e| Error::Credentials(format!("{KEY_KUBECONFIG}: {e}")))?;
    Ok(Mounted {
        credentials: Credentials {
            server_ca,
            client_cert,
            client_key,
        },
        installer_signer: read(KEY_INSTALLER_SIGNER)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
        kubeconfig: text,
        kubeadmin_password: read(KEY_KUBEADMIN_PASSWORD)
            .ok()
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty()),
    })
}

/// The guest API through the guest, with TLS checked at the guest's clock, which must be on
/// real time for every step after the cold restart.
async fn real_time_client(
    guest: &Arc<SshGuest>,
    mounted: &Mounted,
) -> Result<(kube::Client, i64), Error> {
    let skew = steps::check_clock(guest.as_ref(), 0).await?;
    let clock = cluster::guest_clock(guest.as_ref()).await?;
    let api = crate::guest::api::client(guest.clone(), &mounted.credentials, clock).map_err(
        |source| cluster::Error::Client {
            step: cluster::STEP_CLIENT,
            source,
        },
    )?;
    Ok((api, skew))
}

/// The user's post-install manifests, as the operator rendered them into the installer Secret.
fn read_post_install(config: &Config) -> Result<Vec<PostInstallManifest>, Error> {
    let dir = config
        .inputs_dir
        .as_deref()
        .unwrap_or(std::path::Path::new("."));
    let path = dir.join(KEY_POST_INSTALL);
    let text =
        std::fs::read(&path).map_err(Error::storage(format!("reading {}", path.display())))?;
    // No input snippet in the message: a manifest may hold secrets.
    serde_json::from_slice(&text).map_err(|e| {
        Error::InvalidConfig(format!(
            "{} is not the operator's list of manifests (line {}, column {})",
            path.display(),
            e.line(),
            e.column()
        ))
    })
}

/// Stage 3: the profile's post-install steps, then the user's manifests, then the rollouts.
async fn customize(config: &Config, guest: Arc<SshGuest>) -> Result<String, Error> {
    let mounted = read_mounted(config)?;
    let manifests = read_post_install(config)?;
    let password = mounted.kubeadmin_password.clone().ok_or_else(|| {
        Error::Credentials(format!(
            "{KEY_KUBEADMIN_PASSWORD} is missing (the generator step writes it)"
        ))
    })?;
    let (api, _) = real_time_client(&guest, &mounted).await?;
    steps::wait_settled(&api, config.settle, patience(WAITS.certificates), || {
        guest.is_closed()
    })
    .await?;
    let calls = patience(steps::CALL_WAIT);
    let hostname = customize::keep_hostname(guest.as_ref()).await?;
    cluster::configure_htpasswd(&api, &password, cluster::BCRYPT_COST, calls).await?;
    let profile = post_install::steps();
    customize::apply_steps(&api, &profile, calls).await?;
    customize::trust_router_ca(&api, calls).await?;
    info!("the profile's post-install steps done");
    let applied = customize::apply_user_manifests(&api, &manifests, calls).await?;
    let rendered = customize::wait_pool(&api, patience(WAITS.rollout)).await?;
    let version = steps::wait_settled(&api, config.settle, patience(WAITS.certificates), || {
        guest.is_closed()
    })
    .await?;
    Ok(format!(
        "{} post-install steps of the profile and {} object(s) of postInstallManifestRefs applied; hostname {hostname}; MachineConfigPool master on {rendered}; OpenShift {version} settled",
        profile.len() + 2,
        applied.len()
    ))
}

/// How far ahead the aged boot's clock runs: 20 days.
pub const AGED_SECONDS: i64 = 20 * DAY_SECONDS;

/// The API host a validation clone's identity is made for: never a real one.
pub fn validation_api_host(vm_name: &str) -> String {
    format!("api.{vm_name}.validation.invalid")
}

/// Stage 6, either boot: the clock as the boot sets it, what sealing promised (first boot, before
/// anything is injected), then the crc-agent's startup path with an identity made here.
async fn validation(config: &Config) -> Result<String, Error> {
    let aged = config.step == Step::Aged;
    let guest = connect(config).await?;
    let skew = steps::check_clock(guest.as_ref(), if aged { AGED_SECONDS } else { 0 }).await?;
    let promises = if aged {
        None
    } else {
        let promises = validate::read_promises(guest.as_ref(), patience(steps::CALL_WAIT)).await?;
        if let Some(broken) = promises.broken() {
            return Err(validate::Error::Broken(broken).into());
        }
        // The clone is thrown away after its aged boot, which runs 20 days ahead: chronyd,
        // which reaches NTP on a pod network, would step that clock back at boot.
        validate::hold_clock(guest.as_ref()).await?;
        Some(promises)
    };
    guest.close().await;
    info!(skew, "the validation clone's clock and promises checked");

    let key_text = std::fs::read_to_string(&config.ssh_key_path).map_err(Error::storage(
        format!("reading the SSH key {}", config.ssh_key_path.display()),
    ))?;
    let key = keys::parse_private_key(&key_text).map_err(|e| {
        Error::InvalidConfig(format!("SSH key {}: {e}", config.ssh_key_path.display()))
    })?;
    let dir = config
        .inputs_dir
        .as_deref()
        .unwrap_or(std::path::Path::new("."));
    let pull_path = dir.join(crate::contract::installer::KEY_PULL_SECRET);
    let pull_secret = std::fs::read(&pull_path)
        .map_err(Error::storage(format!("reading {}", pull_path.display())))?;
    let host = validation_api_host(&config.vm_name);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let identity = identity::generate(&host, now)
        .map_err(|e| Error::InvalidConfig(format!("the validation identity: {e}")))?;
    let settings = agent::Settings {
        run_deadline: step_budget(config.step),
        ..agent::Settings::default()
    };
    let (_kubeconfig, version) = agent::startup_path(&agent::Startup {
        addr: config.ssh_addr(),
        user: agent::config::DEFAULT_SSH_USER,
        // The clone is thrown away after the aged boot, which logs in with the same key: the
        // bundle key stays the only one authorized.
        guest_key: &key,
        bundle_key: None,
        identity: &identity,
        pull_secret: &pull_secret,
        api_hostname: &host,
        settings: &settings,
    })
    .await
    .map_err(|source| Error::Startup { source })?;
    Ok(match promises {
        Some(promises) => format!(
            "sealing held in the fresh clone (no pull secret on the node or in a MachineConfig of its etcd, kubelet disabled, {} certificates valid at least {} days by guest time); the CRC startup path passed: SSH, DNS, kubelet and API, pull secret, users, OpenShift {version}",
            promises.certificates.len(),
            promises.shortest_days()
        ),
        None => format!(
            "with the guest clock {} days ahead, the CRC startup path passed again: OpenShift {version}",
            skew / DAY_SECONDS
        ),
    })
}

/// Stage 4: sealed in the guest, read back; the caller powers it off.
async fn seal(config: &Config, guest: Arc<SshGuest>) -> Result<String, Error> {
    let mounted = read_mounted(config)?;
    let (api, _) = real_time_client(&guest, &mounted).await?;
    let calls = patience(steps::CALL_WAIT);
    let rollout = patience(WAITS.rollout);
    // SNC's order: chronyd back first, then the pull secret emptied, then every rendering that
    // still carries it pruned.
    seal::remove_build_helpers(&api, calls, rollout).await?;
    info!("cred-manager and chronyd mask removed");
    seal::remove_pull_secret(&api, guest.as_ref(), calls, rollout).await?;
    let pruned = seal::prune_rendered_configs(&api, calls).await?;
    seal::check_machine_configs(&api, calls).await?;
    info!(
        pruned,
        "pull secret removed from the cluster, the node and every MachineConfig"
    );
    seal::remove_installer_login(&api, calls).await?;
    info!("the installer's kubeadmin login removed");
    let scrubbed = seal::seal_disk(guest.as_ref(), mounted.kubeconfig.as_bytes(), calls).await?;
    let sealed = seal::check_sealed(guest.as_ref()).await?;
    if let Some(missing) = sealed.missing() {
        return Err(seal::Error::Incomplete(missing).into());
    }
    Ok(format!(
        "pull secret {{}} on the node and in every MachineConfig ({pruned} old rendered MachineConfigs pruned), {} install-only images pruned (the node IP image kept, crio-wipe replaced by a no-op), kubelet stopped and disabled, pod records of {} namespaces and every lease scrubbed from etcd, etcd compacted at revision {} and defragmented, /opt/kubeconfig written, journal and logs scrubbed, free space trimmed",
        scrubbed.images, scrubbed.pod_namespaces, scrubbed.etcd_revision
    ))
}

fn patience(deadline: Duration) -> Patience {
    Patience::new(steps::POLL, deadline)
}

/// The install boot. The live system installs to the root disk and reboots inside the VMI, so
/// the guest drops the connection (and its tunnels) once on the way, and its sshd may answer
/// before the bundle key is installed: every failure to reach a settled cluster is retried over
/// a new connection until [`WAITS`]`.install`.
async fn install(config: &Config, client: &kube::Client) -> Result<String, Error> {
    let mounted = read_mounted(config)?;
    let deadline = tokio::time::Instant::now() + WAITS.install;
    let (guest, api, version) = loop {
        let attempt = async {
            let guest = connect(config).await?;
            let skew = steps::check_clock(guest.as_ref(), -DAY_SECONDS).await?;
            let clock = cluster::guest_clock(guest.as_ref()).await?;
            let api = crate::guest::api::client(guest.clone(), &mounted.credentials, clock)
                .map_err(|source| cluster::Error::Client {
                    step: cluster::STEP_CLIENT,
                    source,
                })?;
            let version =
                steps::wait_settled(&api, config.settle, patience(WAITS.install_round), || {
                    guest.is_closed()
                })
                .await?;
            info!(skew, %version, "install complete, guest a day behind");
            Ok::<_, Error>((guest, api, version))
        };
        match attempt.await {
            Ok(done) => break done,
            // A clock that is not a day behind will not become so: fail at once.
            Err(err @ Error::Step(steps::Error::ClockNotShifted { .. })) => return Err(err),
            Err(err) if tokio::time::Instant::now() + steps::POLL < deadline => {
                info!("install not complete yet: {err}");
                tokio::time::sleep(steps::POLL).await;
            }
            Err(err) => return Err(err),
        }
    };
    let signer = steps::issuer(guest.as_ref(), steps::KUBELET_CLIENT_CERT).await?;
    info!(%signer, "the installer's kubelet signer");
    patch_credentials(
        client,
        config,
        [(KEY_INSTALLER_SIGNER, signer.clone().into_bytes())],
    )
    .await?;
    steps::snc_certificate_steps(&api, patience(WAITS.certificates)).await?;
    info!("cred-manager applied, the installer's CSR signer replaced");
    steps::wait_settled(&api, config.settle, patience(WAITS.certificates), || {
        guest.is_closed()
    })
    .await?;
    guest.close().await;
    Ok(format!(
        "OpenShift {version} installed a day behind real time; the installer's kubelet signer ({signer}) replaced"
    ))
}

/// After the cold restart.
async fn certificates(config: &Config, guest: Arc<SshGuest>) -> Result<String, Error> {
    let mounted = read_mounted(config)?;
    let signer = mounted.installer_signer.clone().ok_or_else(|| {
        Error::Credentials(format!(
            "{KEY_INSTALLER_SIGNER} is missing (the install step writes it)"
        ))
    })?;
    let (api, skew) = real_time_client(&guest, &mounted).await?;
    info!(skew, "guest clock on real time");
    let [client_cert, server_cert] =
        steps::rotate_kubelet_certs(&guest, &api, &signer, patience(WAITS.certificates)).await?;
    Ok(format!(
        "kubelet client certificate valid {} more days, serving {} more days by guest time, issued by {}",
        client_cert.remaining / 86_400,
        server_cert.remaining / 86_400,
        client_cert.issuer.trim_start_matches("issuer=")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn every_guest_command_of_a_step_ends_before_its_jobs_deadline() {
        for step in Step::ALL {
            let before = tokio::time::Instant::now();
            let options = ssh_options(step);
            let job = Duration::from_secs(
                u64::try_from(crate::resources::build::helper_deadline_seconds(step)).unwrap(),
            );
            let deadline = options.deadline.expect("a step deadline");
            assert!(
                deadline - before + Duration::from_secs(60) <= job + Duration::from_secs(1),
                "{step:?}: the SSH deadline leaves a minute of the Job's to report"
            );
            assert!(options.command_timeout.unwrap() < job, "{step:?}");
        }
    }

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: std::collections::BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        move |name| map.get(name).cloned()
    }

    const BASE: [(&str, &str); 7] = [
        (ENV_NAMESPACE, "ns"),
        (ENV_VM_NAME, "b-b1-build"),
        (ENV_VMI_UID, "uid"),
        (ENV_SSH_HOST, "10.0.0.5"),
        (ENV_SSH_KEY_PATH, "/key/id_ecdsa"),
        (ENV_RELEASE_IMAGE, "quay.io/x/release@sha256:00"),
        (ENV_CREDENTIALS_SECRET, "b-b1-credentials"),
    ];

    #[test]
    fn each_step_needs_its_volumes() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = BASE.to_vec();
            pairs.extend_from_slice(extra);
            Config::from_lookup(env(&pairs))
        };
        let err = with(&[(ENV_STEP, "generator")]).unwrap_err();
        assert_eq!(err.reason(), "InvalidConfig");
        assert!(err.to_string().contains(ENV_WORK_DIR), "{err}");
        let config = with(&[
            (ENV_STEP, "generator"),
            (ENV_WORK_DIR, "/work"),
            (ENV_ISO_DIR, "/iso"),
        ])
        .unwrap();
        assert_eq!(config.step, Step::Generator);
        assert_eq!(config.ssh_addr(), "10.0.0.5:22");
        assert!(with(&[(ENV_STEP, "install")]).is_err());
        assert!(with(&[(ENV_STEP, "certificates"), (ENV_CREDENTIALS_DIR, "/c")]).is_ok());
        assert!(with(&[(ENV_STEP, "seal"), (ENV_CREDENTIALS_DIR, "/c")]).is_ok());
        let err = with(&[(ENV_STEP, "customize"), (ENV_CREDENTIALS_DIR, "/c")]).unwrap_err();
        assert!(err.to_string().contains(ENV_INPUTS_DIR), "{err}");
        let err = with(&[(ENV_STEP, "validate")]).unwrap_err();
        assert!(err.to_string().contains(ENV_INPUTS_DIR), "{err}");
        assert!(with(&[(ENV_STEP, "aged"), (ENV_INPUTS_DIR, "/i")]).is_ok());
        let err = with(&[(ENV_STEP, "publish")]).unwrap_err();
        assert!(err.to_string().contains("\"publish\""), "{err}");
    }

    #[test]
    fn the_settle_interval_is_upstreams_unless_the_operator_passes_one() {
        let with = |extra: &[(&'static str, &'static str)]| {
            let mut pairs = BASE.to_vec();
            pairs.extend_from_slice(&[(ENV_STEP, "seal"), (ENV_CREDENTIALS_DIR, "/c")]);
            pairs.extend_from_slice(extra);
            Config::from_lookup(env(&pairs))
        };
        assert_eq!(with(&[]).unwrap().settle, Settle::UPSTREAM);
        assert_eq!(
            with(&[(ENV_SETTLE_INTERVAL_MS, "100")]).unwrap().settle,
            Settle::every(Duration::from_millis(100))
        );
        let err = with(&[(ENV_SETTLE_INTERVAL_MS, "30s")]).unwrap_err();
        assert!(err.to_string().contains(ENV_SETTLE_INTERVAL_MS), "{err}");
    }

    #[test]
    fn every_reason_is_in_the_contract() {
        use crate::contract::build_helper::REASONS;
        let errors = [
            Error::InvalidConfig(String::new()),
            Error::Embed(String::new()),
            Error::Credentials(String::new()),
            Error::Step(steps::Error::NotRotated(String::new())),
            Error::Step(steps::Error::InstallIncomplete(String::new())),
            Error::Step(steps::Error::ClockNotShifted {
                expected: 0,
                actual: 0,
            }),
            Error::Ssh(GuestError::Ssh(String::new())),
        ];
        for err in errors {
            assert!(REASONS.contains(&err.reason()), "{}", err.reason());
        }
    }
}
