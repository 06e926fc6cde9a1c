//! `guestcluster agent`: the crc-agent (`docs/architecture.md`, "The crc-agent"). Run by the
//! operator's per-VMI Job, it turns a freshly booted CRC guest into a usable cluster — DNS,
//! kubelet, the instance identity, CSRs, pull secret, users, the external certificate — and hands
//! the admin kubeconfig over in the handoff Secret.
//!
//! - [`config`]: settings from the Job's environment;
//! - [`scope`]: the agent works only while its VMI (by UID) is `Running`;
//! - [`publish`]: the handoff Secret;
//! - [`run`]: pre-flight, steps 1–19 in upstream order.
//!
//! Exit status: 0 when the handoff is published or the VMI went away (nothing left to do), 1 on
//! any failure, with `<Reason>: <message>` as the container's termination message.

pub mod config;
pub mod publish;
pub mod scope;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use kube::api::Api;
use tracing::{Instrument as _, info, info_span};

use crate::guest::cluster::{self, Patiences};
use crate::guest::ssh::{SshGuest, SshOptions};
use crate::guest::{GuestError, htpasswd, keys, steps};
use crate::identity::{self, Identity};
use crate::kubevirt::VirtualMachineInstance;
use crate::resources::profile::network::HOSTNAME;

pub use config::{Config, Settings};
pub use publish::{Handoff, Owner};

/// How a run ended without failing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The handoff Secret is published.
    Published { secret: String, ocp_version: String },
    /// The VMI stopped being the agent's (deleted, replaced, not Running): nothing published.
    VmiGone { reason: String },
}

/// Why the agent failed. [`Error::reason`] is the CamelCase reason of the termination message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("configuration: {0}")]
    Config(#[from] config::Error),
    #[error("{}", ssh_key_message(path, source))]
    SshKey {
        path: String,
        source: keys::KeyError,
    },
    #[error("identity {path}: {source}")]
    Identity {
        path: String,
        source: identity::Error,
    },
    #[error("pull secret {path}: {source}")]
    PullSecret {
        path: String,
        source: std::io::Error,
    },
    #[error("management cluster client: {0}")]
    Client(String),
    #[error("{0}")]
    Scope(#[from] scope::Error),
    #[error("guest SSH: {0}")]
    Ssh(#[source] GuestError),
    #[error("guest step: {0}")]
    Step(#[from] steps::StepError),
    #[error("{0}")]
    Cluster(#[from] cluster::Error),
    #[error("kubeadmin password: {0}")]
    Password(#[source] htpasswd::Error),
    #[error("{0}")]
    Publish(#[from] publish::Error),
}

/// The key error names the path itself when it could not be read.
fn ssh_key_message(path: &str, source: &keys::KeyError) -> String {
    match source {
        keys::KeyError::Read { .. } => source.to_string(),
        other => format!("SSH key {path}: {other}"),
    }
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Config(_) => "InvalidConfig",
            Error::SshKey { .. } => "InvalidSSHKey",
            Error::Identity { .. } => "InvalidIdentity",
            Error::PullSecret { .. } => "PullSecretUnreadable",
            Error::Client(_) => "ClientUnavailable",
            Error::Scope(_) => "VMIUnreadable",
            Error::Ssh(_) => "GuestUnreachable",
            Error::Step(_) => "GuestStepFailed",
            Error::Cluster(err) => match err.step() {
                cluster::STEP_CA_BOOTSTRAP => "CABootstrapFailed",
                cluster::STEP_WAIT_API | cluster::STEP_CLIENT => "GuestAPIUnavailable",
                cluster::STEP_OPERATORS => "ClusterOperatorsUnavailable",
                _ => "GuestClusterStepFailed",
            },
            Error::Password(_) => "GuestClusterStepFailed",
            Error::Publish(publish::Error::Foreign { .. }) => "HandoffConflict",
            Error::Publish(_) => "PublishFailed",
        }
    }
}

fn now_unix() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// What pre-flight loaded.
struct Inputs {
    /// The instance key, which stays authorized.
    guest_key: keys::PrivateKey,
    /// The bundle key, when its Secret is mounted (a fresh clone needs it).
    bundle_key: Option<keys::PrivateKey>,
    identity: Identity,
    pull_secret: Vec<u8>,
}

/// A private key file: `None` when absent and `optional`, an error when unreadable or invalid.
fn read_key(path: &std::path::Path, optional: bool) -> Result<Option<keys::PrivateKey>, Error> {
    let shown = path.display().to_string();
    let text = match std::fs::read_to_string(path) {
        Err(err) if optional && err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        other => other.map_err(|source| Error::SshKey {
            path: shown.clone(),
            source: keys::KeyError::Read {
                path: shown.clone(),
                source,
            },
        })?,
    };
    keys::parse_private_key(&text)
        .map(Some)
        .map_err(|source| Error::SshKey {
            path: shown,
            source,
        })
}

/// Pre-flight, like the Go agent's: the SSH keys parse, the identity is valid for the API host,
/// the pull secret is readable — before the guest is touched.
fn preflight(config: &Config) -> Result<Inputs, Error> {
    let guest_key = read_key(&config.guest_key_path, false)?.expect("required keys are read");
    let bundle_key = read_key(&config.ssh_key_path, true)?;
    let identity_error = |source| Error::Identity {
        path: config.identity_path.display().to_string(),
        source,
    };
    let identity = Identity::load_dir(&config.identity_path).map_err(identity_error)?;
    identity::validate(&identity, &config.api_hostname, now_unix()).map_err(identity_error)?;
    let pull_secret =
        std::fs::read(&config.pull_secret_path).map_err(|source| Error::PullSecret {
            path: config.pull_secret_path.display().to_string(),
            source,
        })?;
    Ok(Inputs {
        guest_key,
        bundle_key,
        identity,
        pull_secret,
    })
}

/// The agent: pre-flight, VMI scoping, steps 1–19. `client` is the management cluster's.
pub async fn run(config: &Config, client: kube::Client) -> Result<Outcome, Error> {
    let inputs = preflight(config)?;
    run_checked(config, &inputs, client).await
}

async fn run_checked(
    config: &Config,
    inputs: &Inputs,
    client: kube::Client,
) -> Result<Outcome, Error> {
    let span = info_span!("crc-agent", instance = %config.instance_name, namespace = %config.instance_namespace);
    run_inner(config, inputs, client).instrument(span).await
}

async fn run_inner(
    config: &Config,
    inputs: &Inputs,
    client: kube::Client,
) -> Result<Outcome, Error> {
    info!(vmi_uid = %config.vmi_uid, ssh = %config.ssh_addr(), host = %config.api_hostname, "pre-flight passed");

    let vmis: Api<VirtualMachineInstance> =
        Api::namespaced(client.clone(), &config.instance_namespace);
    let check = || {
        scope::check(
            &vmis,
            &config.instance_namespace,
            &config.instance_name,
            &config.vmi_uid,
        )
    };
    if let scope::Verdict::Stop(reason) = check().await? {
        info!(%reason, "VMI is not ours to configure; exiting without publishing");
        return Ok(Outcome::VmiGone { reason });
    }
    let watch = scope::watch_until_gone(
        vmis.clone(),
        config.instance_name.clone(),
        config.vmi_uid.clone(),
        config.settings.watch_retry,
    );
    // Dropping the steps' future on cancellation drops its SSH connections with it.
    let result = tokio::select! {
        reason = watch => Err(reason),
        result = guest_steps(config, inputs) => Ok(result),
    };
    let (kubeconfig, ocp_version) = match result {
        Err(reason) => {
            info!(%reason, "VMI changed while working; exiting without publishing");
            return Ok(Outcome::VmiGone { reason });
        }
        Ok(result) => result?,
    };

    if let scope::Verdict::Stop(reason) = check().await? {
        info!(%reason, "VMI changed before publishing; exiting without publishing");
        return Ok(Outcome::VmiGone { reason });
    }
    let owner = Owner {
        instance_name: config.instance_name.clone(),
        namespace: config.instance_namespace.clone(),
        instance_uid: config.instance_uid.clone(),
    };
    let handoff = Handoff {
        kubeconfig,
        ocp_version: ocp_version.clone(),
        vmi_uid: config.vmi_uid.clone(),
    };
    let secret = publish::publish(&client, &owner, &handoff).await?;
    info!(%secret, %ocp_version, "step 19: handoff published");
    Ok(Outcome::Published {
        secret,
        ocp_version,
    })
}

/// Steps 1–18; returns the handoff kubeconfig and the OpenShift version.
async fn guest_steps(config: &Config, inputs: &Inputs) -> Result<(String, String), Error> {
    startup_path(&Startup {
        addr: config.ssh_addr(),
        user: &config.ssh_user,
        guest_key: &inputs.guest_key,
        bundle_key: inputs.bundle_key.as_ref(),
        identity: &inputs.identity,
        pull_secret: &inputs.pull_secret,
        api_hostname: &config.api_hostname,
        settings: &config.settings,
    })
    .await
}

/// What the CRC startup path is run with, besides the guest itself.
pub struct Startup<'a> {
    /// The guest's sshd, `host:port`.
    pub addr: String,
    pub user: &'a str,
    /// The key that opens the guest afterwards, and the only one: the instance's own.
    pub guest_key: &'a keys::PrivateKey,
    /// The bundle's key, which a fresh clone of its disk authorizes; tried after `guest_key`.
    pub bundle_key: Option<&'a keys::PrivateKey>,
    pub identity: &'a Identity,
    pub pull_secret: &'a [u8],
    /// The host the external API certificate is for.
    pub api_hostname: &'a str,
    pub settings: &'a Settings,
}

/// Step 1: logs in with the instance key (a guest already configured for this instance), else
/// with the bundle key (a fresh clone); says which.
async fn connect_with_either(
    addr: &str,
    startup: &Startup<'_>,
    options: &SshOptions,
) -> Result<(SshGuest, &'static str), Error> {
    match SshGuest::connect(addr, startup.guest_key.clone(), options).await {
        Ok(guest) => Ok((guest, "instance")),
        Err(GuestError::AuthRejected { user }) => {
            let Some(bundle_key) = startup.bundle_key else {
                return Err(Error::Ssh(GuestError::AuthRejected { user }));
            };
            let guest = SshGuest::connect(addr, bundle_key.clone(), options)
                .await
                .map_err(Error::Ssh)?;
            Ok((guest, "bundle"))
        }
        Err(err) => Err(Error::Ssh(err)),
    }
}

/// The CRC startup path, the upstream agent's steps 1–18 in its order (`docs/architecture.md`,
/// "The crc-agent"): SSH with the instance key or else the bundle key, DNS, only the instance key
/// authorized (the bundle key revoked once it works), the kubelet and API started, CSRs,
/// pull-secret injection, users, the external certificate, operators and version; returns the
/// handoff kubeconfig and the OpenShift version. Instances run it through the agent Job; a build
/// runs it on its validation clone.
pub async fn startup_path(startup: &Startup<'_>) -> Result<(String, String), Error> {
    let (settings, addr) = (startup.settings, startup.addr.as_str());
    let patiences: &Patiences = &settings.patiences;
    let options = SshOptions {
        user: startup.user.to_owned(),
        connect_timeout: settings.ssh_connect_timeout,
        command_timeout: Some(settings.ssh_command_timeout),
        deadline: Some(tokio::time::Instant::now() + settings.run_deadline),
        ..SshOptions::default()
    };

    crate::guest::ssh::wait_for_port(addr, settings.ssh_port.interval, settings.ssh_port.deadline)
        .await
        .map_err(Error::Ssh)?;
    let (bundle, used) = connect_with_either(addr, startup, &options).await?;
    let bundle = Arc::new(bundle);
    info!("step 1: connected with the {used} key");
    let ip = steps::guest_ip(bundle.as_ref()).await?;
    info!(%ip, "step 2: guest IP");
    steps::grow_root(bundle.as_ref()).await?;
    info!("step 3: root filesystem grown");
    steps::configure_dnsmasq(bundle.as_ref(), ip).await?;
    info!("step 4: dnsmasq configured");
    steps::configure_resolver(bundle.as_ref(), ip).await?;
    info!("step 5: resolver configured");
    let line = keys::authorized_key_line(startup.guest_key.public_key(), "crc-instance").map_err(
        |source| Error::SshKey {
            path: "the instance key".into(),
            source,
        },
    )?;
    steps::authorize_only(bundle.as_ref(), &line).await?;
    info!("step 6: only the instance key in authorized_keys");
    steps::start_kubelet(bundle.as_ref()).await?;
    info!("step 7: kubelet started");

    let clock = cluster::guest_clock(bundle.as_ref()).await?;
    let server_ca =
        cluster::bootstrap_client_ca(&bundle, startup.identity, clock, patiences).await?;
    info!("step 8: guest API trusts the instance client CA");

    bundle.close().await;
    let ssh = Arc::new(
        SshGuest::connect(addr, startup.guest_key.clone(), &options)
            .await
            .map_err(Error::Ssh)?,
    );
    steps::revoke_provisioned_keys(ssh.as_ref()).await?;
    info!("step 9: reconnected with the instance key; the install-time keys revoked");
    let clock = cluster::guest_clock(ssh.as_ref()).await?;
    let guest_api = cluster::identity_client(&ssh, &server_ca, startup.identity, clock)?;
    info!("step 10: guest API client ready");
    cluster::wait_api(&guest_api, patiences.api).await?;
    info!("step 11: guest API answers");
    let regenerating = tokio::time::Instant::now();
    crate::guest::signers::regenerate(&guest_api, patiences.calls, patiences.signers).await?;
    info!(
        seconds = regenerating.elapsed().as_secs_f64(),
        "step 11a: the instance's own client signers; the disk's no longer trusted"
    );
    let regenerating = tokio::time::Instant::now();
    crate::guest::csr_signer::regenerate(
        ssh.as_ref(),
        &guest_api,
        patiences.calls,
        patiences.csr_signer,
    )
    .await?;
    info!(
        seconds = regenerating.elapsed().as_secs_f64(),
        "step 11b: the instance's own CSR signer, the kubelet moved to it; the disk's no longer trusted"
    );
    let approvals = cluster::approve_csrs(&guest_api, HOSTNAME, patiences.calls).await?;
    approvals.log_refusals(&mut Default::default());
    info!(
        approved = approvals.approved,
        "step 12: kubelet CSRs approved"
    );
    cluster::inject_pull_secret(&guest_api, startup.pull_secret, patiences.calls).await?;
    info!("step 13: pull secret injected");
    let password = htpasswd::kubeadmin_password().map_err(Error::Password)?;
    cluster::configure_htpasswd(&guest_api, &password, settings.bcrypt_cost, patiences.calls)
        .await?;
    info!("step 14: kubeadmin and developer users configured");
    cluster::install_external_cert(
        &guest_api,
        startup.identity,
        startup.api_hostname,
        patiences.calls,
    )
    .await?;
    info!(host = %startup.api_hostname, "step 15: external API certificate installed");
    cluster::wait_operators(&guest_api, patiences.operators).await?;
    info!("step 16: cluster operators Available");
    let version = cluster::cluster_version(&guest_api, patiences.version).await?;
    info!(%version, "step 17: cluster version read");
    let kubeconfig = cluster::handoff_kubeconfig(startup.identity, startup.api_hostname)?;
    info!("step 18: handoff kubeconfig built");
    ssh.close().await;
    Ok((kubeconfig, version))
}

/// The `agent` subcommand: config from the environment, the management cluster from the pod's
/// service account (or `KUBECONFIG`), exit 0 or 1. Logging must already be set up.
pub fn main() -> ExitCode {
    let result = Config::from_env().map_err(Error::from).and_then(|config| {
        // Bad inputs are reported before anything else is tried, the management cluster included.
        let inputs = preflight(&config)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| Error::Client(format!("starting the async runtime: {e}")))?;
        runtime.block_on(async {
            let client = kube::Client::try_default()
                .await
                .map_err(|e| Error::Client(e.to_string()))?;
            run_checked(&config, &inputs, client).await
        })
    });
    match result {
        Ok(Outcome::Published {
            secret,
            ocp_version,
        }) => {
            info!(%secret, %ocp_version, "crc-agent finished");
            ExitCode::SUCCESS
        }
        Ok(Outcome::VmiGone { reason }) => {
            info!(%reason, "crc-agent stopped: the VMI is no longer ours");
            ExitCode::SUCCESS
        }
        Err(err) => {
            let message = crate::contract::termination::message(err.reason(), &err);
            tracing::error!("{message}");
            crate::contract::termination::write(&message);
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A peer that accepts TCP and then says nothing, as a hung sshd or a black-holing proxy
    /// does: the startup path ends with the SSH step's reason at its connect budget.
    #[tokio::test]
    async fn a_guest_that_accepts_and_never_answers_ends_in_the_ssh_reason() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let held = tokio::spawn(async move {
            let mut open = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                open.push(socket);
            }
        });
        let quick = cluster::Patience::new(Duration::from_millis(50), Duration::from_secs(5));
        let settings = Settings {
            ssh_port: quick,
            ssh_connect_timeout: Duration::from_millis(500),
            patiences: Patiences::uniform(quick),
            ..Settings::default()
        };
        let key = keys::generate_ed25519().unwrap();
        let identity = identity::generate("api.example.com", now_unix()).unwrap();
        let startup = Startup {
            addr: addr.clone(),
            user: "core",
            guest_key: &key,
            bundle_key: Some(&key),
            identity: &identity,
            pull_secret: b"{}",
            api_hostname: "api.example.com",
            settings: &settings,
        };
        // A guard against a hang, not a speed check: the connect budget is half a second.
        let err = tokio::time::timeout(Duration::from_secs(60), startup_path(&startup))
            .await
            .expect("the startup path hung on a silent peer")
            .unwrap_err();
        held.abort();
        assert_eq!(err.reason(), "GuestUnreachable", "{err}");
        assert!(err.to_string().contains(&addr), "{err}");
    }

    #[test]
    fn failures_map_to_reasons() {
        let err = Error::Config(config::Error::Missing(
            crate::contract::agent::ENV_INSTANCE_NAME,
        ));
        assert_eq!(err.reason(), "InvalidConfig");
        assert!(err.to_string().contains("INSTANCE_NAME"));
        let err = Error::Cluster(cluster::Error::Timeout {
            step: cluster::STEP_OPERATORS,
            seconds: 1,
            last: "not Available: console".into(),
        });
        assert_eq!(err.reason(), "ClusterOperatorsUnavailable");
        let err = Error::Publish(publish::Error::Foreign {
            namespace: "n".into(),
            name: "s".into(),
            reason: "r".into(),
        });
        assert_eq!(err.reason(), "HandoffConflict");
    }

    #[test]
    fn preflight_names_the_bad_input() {
        let dir = tempfile::tempdir().unwrap();
        let host = "api.example.com";
        let key = keys::generate_ecdsa_p256().unwrap();
        let key_path = dir.path().join("id_ecdsa");
        std::fs::write(&key_path, keys::to_openssh(&key).unwrap()).unwrap();
        let guest_key_path = dir.path().join("guest-key");
        let guest_key = keys::generate_ed25519().unwrap();
        std::fs::write(&guest_key_path, keys::to_openssh(&guest_key).unwrap()).unwrap();
        let identity_dir = dir.path().join("identity");
        std::fs::create_dir(&identity_dir).unwrap();
        let identity = identity::generate(host, now_unix() - 60).unwrap();
        for (k, v) in identity.to_secret_data() {
            std::fs::write(identity_dir.join(k), v.0).unwrap();
        }
        let pull = dir.path().join("pull");
        std::fs::write(&pull, b"{\"auths\":{}}").unwrap();
        let mut config = Config {
            instance_name: "demo".into(),
            instance_namespace: "team".into(),
            instance_uid: "u".into(),
            vm_name: "demo".into(),
            ssh_host: "127.0.0.1".into(),
            ssh_port: 22,
            vmi_uid: "v".into(),
            ssh_user: "core".into(),
            ssh_key_path: key_path.clone(),
            guest_key_path: guest_key_path.clone(),
            identity_path: identity_dir,
            pull_secret_path: pull,
            api_hostname: host.into(),
            settings: Settings::default(),
        };
        let inputs = preflight(&config).unwrap();
        assert_eq!(inputs.identity, identity);
        assert_eq!(inputs.pull_secret, b"{\"auths\":{}}");

        config.api_hostname = "api.other.com".into();
        let err = preflight(&config).err().unwrap();
        assert_eq!(err.reason(), "InvalidIdentity");
        config.api_hostname = host.into();
        std::fs::write(&key_path, "garbage").unwrap();
        let err = preflight(&config).err().unwrap();
        assert_eq!(err.reason(), "InvalidSSHKey");
        std::fs::write(&key_path, keys::to_openssh(&key).unwrap()).unwrap();
        // The bundle key may be absent (a guest already keyed for the instance); the
        // instance key may not.
        std::fs::remove_file(&key_path).unwrap();
        assert!(preflight(&config).unwrap().bundle_key.is_none());
        std::fs::remove_file(&guest_key_path).unwrap();
        let err = preflight(&config).err().unwrap();
        assert_eq!(err.reason(), "InvalidSSHKey");
        assert!(err.to_string().contains("guest-key"), "{err}");
        std::fs::write(&guest_key_path, keys::to_openssh(&guest_key).unwrap()).unwrap();
        config.pull_secret_path = dir.path().join("missing");
        let err = preflight(&config).err().unwrap();
        assert_eq!(err.reason(), "PullSecretUnreadable");
    }
}
