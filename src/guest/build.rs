//! The build helper's steps in the guest for the Install stage
//! (`docs/design/certificates-and-time.md`, "2. Generator boot" to "4. Cold restart"): the
//! single-node Ignition made in the generator boot, the install followed through the guest API,
//! SNC's certificate steps, and the kubelet certificates brought to 25 days after the cold restart
//! — every validity judged by guest time.
//!
//! The same rules as the crc-agent's steps ([`crate::guest`]): simple commands only, decisions in
//! Rust from their output, the guest API only through the SSH tunnel with TLS checked at the
//! guest's clock.

mod kubelet_certs;

pub use kubelet_certs::*;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use sha2::{Digest, Sha256};

use super::cluster::{self, Patience, condition_true, config_resource, retry};
use super::ssh::SshGuest;
use super::{Command, Guest, GuestError};
use crate::contract::build_helper::Settle;
use crate::resources::instance::sha256_hex;
use crate::resources::profile::inputs::Sensitive;
use crate::resources::profile::network::{HOSTNAME, NODE_IP};
use crate::resources::profile::{ignition, manifests};

/// The live system's memory-backed scratch directory: nothing written there reaches a disk.
pub const WORK: &str = "/var/tmp/guestcluster";
pub const INSTALLER: &str = "/var/tmp/guestcluster/openshift-install";
pub const INSTALL_DIR: &str = "/var/tmp/guestcluster/install";
/// What `openshift-install create single-node-ignition-config` writes for a live ISO.
pub const LIVE_IGNITION: &str = "bootstrap-in-place-for-live-iso.ign";
/// The kubelet's certificates on the node.
pub const KUBELET_CLIENT_CERT: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";
pub const KUBELET_SERVER_CERT: &str = "/var/lib/kubelet/pki/kubelet-server-current.pem";
/// How long the kubelet certificates must stay valid by guest time: 25 days.
pub const MIN_VALIDITY_SECONDS: i64 = 25 * 86_400;
/// A day, the shift of the generator and install boots.
pub const DAY_SECONDS: i64 = 86_400;
/// How far the guest clock may be from where the boot puts it (the install's own duration and
/// clock drift, not a wrong offset).
pub const CLOCK_TOLERANCE_SECONDS: i64 = 3_600;
/// SNC's DaemonSet that keeps a bootstrap kubeconfig usable after the first client certificate
/// expired, and the namespace it runs in.
pub const CRED_MANAGER: &str = "kubelet-bootstrap-cred-manager";
pub const MCO_NAMESPACE: &str = "openshift-machine-config-operator";
/// The ServiceAccount whose token the kubelet bootstraps with (it may file node CSRs).
pub const NODE_BOOTSTRAPPER: &str = "node-bootstrapper";
/// The kube-controller-manager operator's CSR signer Secrets; deleted so it makes a new signer.
pub const KCM_OPERATOR_NAMESPACE: &str = "openshift-kube-controller-manager-operator";
pub const CSR_SIGNER_SECRETS: [&str; 2] = ["csr-signer-signer", "csr-signer"];
/// The image of the cred-manager's container: the OpenShift CLI.
pub const CRED_MANAGER_IMAGE: &str = "quay.io/openshift/origin-cli:latest";

/// A failed guest step of the build; [`Error::reason`] names it for the Job's termination
/// message.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Guest {
        step: &'static str,
        source: GuestError,
    },
    #[error(
        "the guest clock is {actual} s from real time, expected {expected} s (±{CLOCK_TOLERANCE_SECONDS} s): the VM's clock offset did not take effect, or chronyd moved it"
    )]
    ClockNotShifted { expected: i64, actual: i64 },
    #[error("openshift-install {step}: {detail}")]
    Installer { step: &'static str, detail: String },
    #[error("uploading {path}: {detail}")]
    Upload { path: String, detail: String },
    #[error("{0}")]
    Profile(String),
    #[error("{0}")]
    Cluster(#[from] cluster::Error),
    #[error("the install did not complete: {0}")]
    InstallIncomplete(String),
    #[error("the kubelet certificates did not reach 25 days by guest time: {0}")]
    NotRotated(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Guest { .. } | Error::Upload { .. } => "GuestStepFailed",
            Error::ClockNotShifted { .. } => "ClockNotShifted",
            Error::Installer { .. } | Error::Profile(_) => "InstallerFailed",
            Error::Cluster(_) => "GuestAPIUnavailable",
            Error::InstallIncomplete(_) => "InstallIncomplete",
            Error::NotRotated(_) => "CertificatesNotRotated",
        }
    }
}

/// One file of the staging directory, relative to the installer's directory.
pub struct StagedFile {
    pub path: String,
    pub data: Vec<u8>,
}

/// What the generator boot yields. The Ignition and the credentials hold secrets.
pub struct Generated {
    /// The live Ignition with the profile's patches.
    pub live_ignition: Sensitive,
    pub kubeconfig: Vec<u8>,
    pub kubeadmin_password: Vec<u8>,
}

/// The guest's clock minus ours, in seconds.
pub async fn clock_skew<G: Guest>(guest: &G) -> Result<i64, Error> {
    let before = now_unix();
    let output = guest
        .run_checked(&Command::new(["date", "-u", "+%s"]))
        .await
        .map_err(guest_err("read the guest clock"))?;
    let text = output.stdout_text();
    let guest_now: i64 = text.trim().parse().map_err(|_| Error::Guest {
        step: "read the guest clock",
        source: GuestError::Ssh(format!("`date -u +%s` printed {text:?}")),
    })?;
    Ok(guest_now - before)
}

/// Checks that the guest runs `expected` seconds from real time (a day behind: −86400).
pub async fn check_clock<G: Guest>(guest: &G, expected: i64) -> Result<i64, Error> {
    let actual = clock_skew(guest).await?;
    if (actual - expected).abs() > CLOCK_TOLERANCE_SECONDS {
        return Err(Error::ClockNotShifted { expected, actual });
    }
    Ok(actual)
}

/// Lowercase hex of a finished digest.
fn hex(digest: &[u8]) -> String {
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// Reads from `inner` and hashes what it reads, so a file is hashed as it is sent.
struct Hashing<R> {
    inner: R,
    hasher: Sha256,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Hashing<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            self.hasher.update(&buf.filled()[before..]);
        }
        polled
    }
}

/// Writes `data` to `path` as root through stdin (no size limit, nothing on a command line), and
/// checks what the guest wrote by its SHA-256: `sudo tee PATH | sha256sum` — the digest is also
/// what keeps the file's bytes from coming back on stdout.
pub async fn upload(guest: &SshGuest, path: &str, data: &[u8], mode: u32) -> Result<(), Error> {
    upload_from(guest, path, data, mode).await
}

/// [`upload`] of the local file `source`, streamed: `openshift-install` is hundreds of MiB and
/// the helper's memory limit is 1 GiB, so it is sent as it is read, never held whole.
pub async fn upload_file(
    guest: &SshGuest,
    path: &str,
    source: &std::path::Path,
    mode: u32,
) -> Result<(), Error> {
    let file = tokio::fs::File::open(source)
        .await
        .map_err(|e| Error::Upload {
            path: path.to_owned(),
            detail: format!("reading {}: {e}", source.display()),
        })?;
    upload_from(guest, path, file, mode).await
}

async fn upload_from(
    guest: &SshGuest,
    path: &str,
    data: impl tokio::io::AsyncRead + Unpin + Send,
    mode: u32,
) -> Result<(), Error> {
    let mode = format!("{:04o}", mode & 0o7777);
    let step = "upload a file";
    guest
        .run_checked(&Command::sudo([
            "install",
            "-m",
            &mode,
            "-D",
            "/dev/null",
            path,
        ]))
        .await
        .map_err(guest_err(step))?;
    let command = Command::sudo(["tee", path]).pipe(Command::new(["sha256sum"]));
    let mut sent = Hashing {
        inner: data,
        hasher: Sha256::new(),
    };
    let output = guest
        .run_with_reader(&command, &mut sent)
        .await
        .map_err(guest_err(step))?;
    let printed = output.stdout_text();
    let expected = hex(&sent.hasher.finalize());
    if !output.success() || printed.split_whitespace().next() != Some(expected.as_str()) {
        return Err(Error::Upload {
            path: path.to_owned(),
            detail: format!(
                "the guest wrote something else (sha256sum printed {:?}, status {}, {})",
                printed.trim(),
                output.status,
                output.stderr_text().trim()
            ),
        });
    }
    Ok(())
}

fn guest_err(step: &'static str) -> impl Fn(GuestError) -> Error {
    move |source| Error::Guest { step, source }
}

/// Runs `openshift-install create <what> --dir INSTALL_DIR` as root in the guest, pinned to the
/// release the installer Job resolved. The bootstrap's node IP is the cluster's (SNC's dummy NIC),
/// not the default route's: the bootstrap kubelet otherwise takes the pod network's address,
/// and etcd, made for that address, cannot follow the node to its installed IP (what
/// assisted-service's `addBootstrapKubeletIpIfRequired` sets the variable for).
async fn openshift_install(
    guest: &SshGuest,
    step: &'static str,
    release: &str,
) -> Result<(), Error> {
    let command = Command::sudo([
        "env".to_owned(),
        "OPENSHIFT_INSTALL_EXPERIMENTAL_DISABLE_IMAGE_POLICY=true".to_owned(),
        format!("OPENSHIFT_INSTALL_RELEASE_IMAGE_OVERRIDE={release}"),
        format!("OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP={NODE_IP}"),
        INSTALLER.to_owned(),
        "create".to_owned(),
        step.to_owned(),
        "--dir".to_owned(),
        INSTALL_DIR.to_owned(),
    ]);
    let output = guest.run(&command).await.map_err(guest_err(step))?;
    if !output.success() {
        return Err(Error::Installer {
            step,
            detail: format!(
                "exit status {}: {}",
                output.status,
                last_lines(&output.stderr_text(), 5)
            ),
        });
    }
    Ok(())
}

fn last_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.trim().lines().collect();
    lines[lines.len().saturating_sub(n)..].join(" | ")
}

/// Reads a file of the installer's directory.
async fn read_install_file(guest: &SshGuest, relative: &str) -> Result<Vec<u8>, Error> {
    guest
        .read_file(&format!("{INSTALL_DIR}/{relative}"))
        .await
        .map_err(guest_err("read an installer file"))
}

/// Applies a profile edit to an installer-made manifest in place.
async fn edit_manifest(
    guest: &SshGuest,
    relative: &str,
    edit: fn(&str) -> Result<String, manifests::Error>,
) -> Result<(), Error> {
    let text = String::from_utf8(read_install_file(guest, relative).await?)
        .map_err(|_| Error::Profile(format!("{relative} is not UTF-8")))?;
    let edited = edit(&text).map_err(|e| Error::Profile(format!("{relative}: {e}")))?;
    upload(
        guest,
        &format!("{INSTALL_DIR}/{relative}"),
        edited.as_bytes(),
        0o644,
    )
    .await
}

/// The generator boot (`docs/design/certificates-and-time.md`, "2. Generator boot"): the
/// installer and its inputs into the live system's memory, the manifests made and completed, the
/// single-node Ignition made — all at the guest's clock — and read back with the credentials.
pub async fn generate(
    guest: &SshGuest,
    installer: &std::path::Path,
    staged: &[StagedFile],
    release: &str,
) -> Result<Generated, Error> {
    guest
        .run_checked(&Command::sudo(["mkdir", "-p", INSTALL_DIR]))
        .await
        .map_err(guest_err("create the install directory"))?;
    upload_file(guest, INSTALLER, installer, 0o755).await?;
    let (config, manifests_to_add): (Vec<&StagedFile>, Vec<&StagedFile>) =
        staged.iter().partition(|f| f.path == "install-config.yaml");
    let config = config
        .first()
        .ok_or_else(|| Error::Profile("the staging directory has no install-config.yaml".into()))?;
    upload(
        guest,
        &format!("{INSTALL_DIR}/install-config.yaml"),
        &config.data,
        0o600,
    )
    .await?;
    openshift_install(guest, "manifests", release).await?;
    edit_manifest(
        guest,
        manifests::CVO_OVERRIDES_FILE,
        manifests::merge_cvo_overrides,
    )
    .await?;
    edit_manifest(
        guest,
        manifests::INGRESS_CONFIG_FILE,
        manifests::set_ingress_domain,
    )
    .await?;
    for file in manifests_to_add {
        upload(
            guest,
            &format!("{INSTALL_DIR}/{}", file.path),
            &file.data,
            0o644,
        )
        .await?;
    }
    openshift_install(guest, "single-node-ignition-config", release).await?;
    let live = String::from_utf8(read_install_file(guest, LIVE_IGNITION).await?)
        .map_err(|_| Error::Profile(format!("{LIVE_IGNITION} is not UTF-8")))?;
    let live_ignition = ignition::patch_live_ignition(&live)
        .map_err(|e| Error::Profile(format!("patching {LIVE_IGNITION}: {e}")))?;
    Ok(Generated {
        live_ignition,
        kubeconfig: read_install_file(guest, "auth/kubeconfig").await?,
        kubeadmin_password: read_install_file(guest, "auth/kubeadmin-password").await?,
    })
}

/// Powers the guest off; the connection dropping under the command is the expected end.
pub async fn power_off(guest: &SshGuest) -> Result<(), Error> {
    match guest.run(&Command::sudo(["poweroff"])).await {
        Ok(output) if output.success() => Ok(()),
        Ok(output) => Err(Error::Guest {
            step: "power off",
            source: GuestError::failed(&Command::sudo(["poweroff"]), output.status, &output.stderr),
        }),
        Err(GuestError::NoExitStatus { .. } | GuestError::Ssh(_)) => Ok(()),
        Err(source) => Err(Error::Guest {
            step: "power off",
            source,
        }),
    }
}

/// Whether every ClusterOperator is Available, not Progressing and not Degraded, and the
/// ClusterVersion Available and not Progressing; `Err` says what is not.
async fn settled(client: &kube::Client) -> Result<String, String> {
    let versions: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &config_resource("ClusterVersion", "clusterversions"),
    );
    let version = within(versions.get("version")).await?;
    if !condition_true(&version, "Available") || condition_true(&version, "Progressing") {
        let message = condition_message(&version, "Progressing");
        return Err(format!("ClusterVersion not complete: {message}"));
    }
    let operators: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &config_resource("ClusterOperator", "clusteroperators"),
    );
    let list = within(operators.list(&ListParams::default())).await?;
    if list.items.is_empty() {
        return Err("no ClusterOperators yet".into());
    }
    let unsettled: Vec<String> = list
        .items
        .iter()
        .filter(|op| {
            !condition_true(op, "Available")
                || condition_true(op, "Progressing")
                || condition_true(op, "Degraded")
        })
        .map(|op| op.metadata.name.clone().unwrap_or_default())
        .collect();
    if !unsettled.is_empty() {
        return Err(format!(
            "ClusterOperators not settled: {}",
            unsettled.join(", ")
        ));
    }
    Ok(version.data["status"]["desired"]["version"]
        .as_str()
        .unwrap_or_default()
        .to_owned())
}

fn condition_message(object: &DynamicObject, type_: &str) -> String {
    object.data["status"]["conditions"]
        .as_array()
        .and_then(|conditions| {
            conditions
                .iter()
                .find(|c| c["type"] == type_)
                .and_then(|c| c["message"].as_str())
        })
        .unwrap_or("no message")
        .to_owned()
}

/// Waits, by reading the cluster, until the install is complete and stays so for
/// `settle.checks` reads in a row `settle.interval` apart (while it is not, it reads every
/// `patience.interval`); returns the OpenShift version. Ends early when `gone` says the
/// connection the client tunnels through is lost (a guest reboot).
pub async fn wait_settled(
    client: &kube::Client,
    settle: Settle,
    patience: Patience,
    gone: impl Fn() -> bool,
) -> Result<String, Error> {
    let deadline = tokio::time::Instant::now() + patience.deadline;
    let mut streak = 0;
    let mut last = String::new();
    loop {
        if gone() {
            return Err(Error::InstallIncomplete(format!(
                "the guest closed the connection (it reboots during the install); last: {last}"
            )));
        }
        let pause = match settled(client).await {
            Ok(version) => {
                streak += 1;
                if streak >= settle.checks {
                    return Ok(version);
                }
                settle.interval
            }
            Err(why) => {
                streak = 0;
                last = why;
                patience.interval
            }
        };
        if tokio::time::Instant::now() + pause > deadline {
            return Err(Error::InstallIncomplete(format!(
                "not settled within {} s: {}",
                patience.deadline.as_secs(),
                if streak > 0 {
                    format!("{streak} of {} settled reads in a row", settle.checks)
                } else {
                    last
                }
            )));
        }
        tokio::time::sleep(pause).await;
    }
}

/// The issuer line of a certificate in the guest (`issuer=…`), read there.
pub async fn issuer<G: Guest>(guest: &G, path: &str) -> Result<String, Error> {
    let output = guest
        .run_checked(&Command::sudo([
            "openssl", "x509", "-noout", "-issuer", "-in", path,
        ]))
        .await
        .map_err(guest_err("read a certificate's issuer"))?;
    Ok(output.stdout_text().trim().to_owned())
}

/// What the cred-manager's pod may do, bound to a ServiceAccount of its own: mint a token of the
/// `node-bootstrapper` ServiceAccount (nothing else of it), and run privileged (the
/// `privileged` SCC: the MCO's namespace is no run-level namespace). The MCO's own
/// `machine-config-daemon` account may do neither of the first (its roles: openshift/
/// machine-config-operator `manifests/machineconfigdaemon/{clusterrole,role}.yaml`), and SNC's
/// DaemonSet, which reads the `node-bootstrapper-token` Secret as the namespace's `default`
/// account, needs a read of Secrets nothing grants it. Seal deletes all three with the DaemonSet.
pub fn cred_manager_access() -> (ServiceAccount, Role, RoleBinding) {
    let meta = || ObjectMeta {
        name: Some(CRED_MANAGER.to_owned()),
        namespace: Some(MCO_NAMESPACE.to_owned()),
        ..ObjectMeta::default()
    };
    let rule = |group: &str, resource: &str, name: &str, verb: &str| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        resource_names: Some(vec![name.to_owned()]),
        verbs: vec![verb.to_owned()],
        ..PolicyRule::default()
    };
    (
        ServiceAccount {
            metadata: meta(),
            ..ServiceAccount::default()
        },
        Role {
            metadata: meta(),
            rules: Some(vec![
                rule("", "serviceaccounts/token", NODE_BOOTSTRAPPER, "create"),
                rule(
                    "security.openshift.io",
                    "securitycontextconstraints",
                    "privileged",
                    "use",
                ),
            ]),
        },
        RoleBinding {
            metadata: meta(),
            role_ref: RoleRef {
                api_group: Some("rbac.authorization.k8s.io".to_owned()),
                kind: "Role".to_owned(),
                name: CRED_MANAGER.to_owned(),
            },
            subjects: Some(vec![Subject {
                kind: "ServiceAccount".to_owned(),
                name: CRED_MANAGER.to_owned(),
                namespace: Some(MCO_NAMESPACE.to_owned()),
                ..Subject::default()
            }]),
        },
    )
}

/// SNC's DaemonSet that keeps `/etc/kubernetes/kubeconfig` usable for the kubelet's bootstrap
/// after the installer's 24-hour bootstrap certificate has expired: it writes a kubeconfig with
/// a token of the `node-bootstrapper` ServiceAccount onto the node, as its own account
/// ([`cred_manager_access`]).
pub fn cred_manager() -> DaemonSet {
    let script = r#"set -eu
while true; do
  token=$(oc create token node-bootstrapper -n openshift-machine-config-operator --duration=720h)
  oc config set-cluster local --server=https://api-int.crc.testing:6443 --certificate-authority=/var/run/secrets/kubernetes.io/serviceaccount/ca.crt --embed-certs=true --kubeconfig=/tmp/kubeconfig
  oc config set-credentials kubelet --token="$token" --kubeconfig=/tmp/kubeconfig
  oc config set-context kubelet --cluster=local --user=kubelet --kubeconfig=/tmp/kubeconfig
  oc config use-context kubelet --kubeconfig=/tmp/kubeconfig
  cp /tmp/kubeconfig /etc/kubernetes/kubeconfig
  sleep 3600
done
"#;
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": CRED_MANAGER, "namespace": MCO_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"k8s-app": CRED_MANAGER}},
            "template": {
                "metadata": {"labels": {"k8s-app": CRED_MANAGER}},
                "spec": {
                    "serviceAccountName": CRED_MANAGER,
                    "nodeSelector": {"node-role.kubernetes.io/master": ""},
                    "tolerations": [{"operator": "Exists"}],
                    "priorityClassName": "system-cluster-critical",
                    "containers": [{
                        "name": "cred-manager",
                        "image": CRED_MANAGER_IMAGE,
                        "command": ["/bin/bash", "-c", script],
                        "securityContext": {"privileged": true, "runAsUser": 0},
                        "volumeMounts": [{"name": "etc-kubernetes", "mountPath": "/etc/kubernetes"}],
                    }],
                    "volumes": [{"name": "etc-kubernetes", "hostPath": {"path": "/etc/kubernetes"}}],
                },
            },
        },
    }))
    .expect("a static DaemonSet")
}

/// The install boot's certificate steps (`docs/design/certificates-and-time.md`, "3. Install
/// boot"): the cred-manager applied, the installer's CSR signer Secrets deleted, and a new signer
/// seen in their place.
pub async fn snc_certificate_steps(client: &kube::Client, patience: Patience) -> Result<(), Error> {
    // Single calls give up sooner than the wait for the new signer, so a refusal surfaces.
    let calls = Patience::new(patience.interval, patience.deadline.min(CALL_WAIT));
    let apply = PatchParams::apply("guestcluster-build-helper").force();
    // Its account and what it may do first, so its first pod starts with them.
    let (account, role, binding) = cred_manager_access();
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    let roles: Api<Role> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    let (account, role, binding) = (
        Patch::Apply(account),
        Patch::Apply(role),
        Patch::Apply(binding),
    );
    retry(
        "apply the cred-manager's account and role",
        calls,
        || async {
            within(accounts.patch(CRED_MANAGER, &apply, &account)).await?;
            within(roles.patch(CRED_MANAGER, &apply, &role)).await?;
            within(bindings.patch(CRED_MANAGER, &apply, &binding)).await
        },
    )
    .await?;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    let daemonset = Patch::Apply(cred_manager());
    retry("apply the kubelet-bootstrap-cred-manager", calls, || {
        within(daemonsets.patch(CRED_MANAGER, &apply, &daemonset))
    })
    .await?;
    tracing::info!("kubelet-bootstrap-cred-manager applied");
    let secrets: Api<Secret> = Api::namespaced(client.clone(), KCM_OPERATOR_NAMESPACE);
    let signer_of = |secret: Option<Secret>| {
        secret
            .and_then(|s| s.data)
            .and_then(|d| d.get("tls.crt").map(|v| sha256_hex(&v.0)))
    };
    let before = retry("read the CSR signer", calls, || async {
        secrets.get_opt(CSR_SIGNER_SECRETS[1]).await.map(signer_of)
    })
    .await?;
    tracing::info!(known = before.is_some(), "CSR signer read");
    let params = DeleteParams::default();
    for name in CSR_SIGNER_SECRETS {
        // The guest cluster's own Secrets, deleted by name as SNC does (`oc delete secret`):
        // the operator's write path with its UID preconditions is for the operator's objects.
        #[allow(clippy::disallowed_methods)]
        let delete = || secrets.delete(name, &params);
        retry("delete the installer's CSR signer", calls, || async {
            let deleted = tokio::time::timeout(REQUEST_TIMEOUT, delete())
                .await
                .map_err(|_| "the guest API did not answer".to_owned())?;
            match deleted {
                Ok(_) => Ok(()),
                Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
                Err(err) => Err(err.to_string()),
            }
        })
        .await?;
    }
    tracing::info!("the installer's CSR signer Secrets deleted");
    retry("wait for a new CSR signer", patience, || async {
        let now = signer_of(within(secrets.get_opt(CSR_SIGNER_SECRETS[1])).await?);
        match now {
            Some(now) if Some(&now) != before.as_ref() => Ok(()),
            _ => Err("the operator has not made a new signer yet".to_owned()),
        }
    })
    .await?;
    Ok(())
}

/// The host's clock, in Unix seconds.
fn now_unix() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The staging directory on the work volume, read into memory (it is small: text files).
pub fn read_staging(dir: &std::path::Path) -> std::io::Result<Vec<StagedFile>> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current)? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_type()?.is_dir() {
                stack.push(path);
            } else if let Ok(relative) = path.strip_prefix(dir) {
                files.insert(
                    relative.to_string_lossy().into_owned(),
                    std::fs::read(&path)?,
                );
            }
        }
    }
    Ok(files
        .into_iter()
        .map(|(path, data)| StagedFile { path, data })
        .collect())
}

/// How long a single guest API call is retried before its step fails with the last error.
pub const CALL_WAIT: Duration = Duration::from_secs(300);

/// How long one request to the guest API (through the SSH tunnel) may take: a guest that
/// accepts the connection and never answers must not hang a step.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// `future`, or an error once [`REQUEST_TIMEOUT`] has passed.
async fn within<T, E: std::fmt::Display>(
    future: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(REQUEST_TIMEOUT, future).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(_) => Err(format!(
            "the guest API did not answer within {} s",
            REQUEST_TIMEOUT.as_secs()
        )),
    }
}

/// Waits `interval` between polls of a step that reads the cluster.
pub const POLL: Duration = Duration::from_secs(2);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Output;
    use crate::guest::fake::ScriptedGuest;

    #[tokio::test]
    async fn a_streamed_file_is_hashed_as_it_is_read() {
        use tokio::io::AsyncReadExt;
        // Larger than one read, so the digest spans several.
        let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        let mut reader = Hashing {
            inner: data.as_slice(),
            hasher: Sha256::new(),
        };
        let mut chunk = [0u8; 8192];
        let mut total = 0;
        loop {
            let n = reader.read(&mut chunk).await.unwrap();
            if n == 0 {
                break;
            }
            total += n;
        }
        assert_eq!(total, data.len());
        assert_eq!(hex(&reader.hasher.finalize()), sha256_hex(&data));
    }

    #[test]
    fn enddate_parses_as_openssl_prints_it() {
        assert_eq!(
            parse_enddate("notAfter=Jan  1 00:00:00 1970 GMT\n"),
            Some(0)
        );
        assert_eq!(
            parse_enddate("notAfter=Dec  4 12:30:05 2026 GMT"),
            Some(1_796_387_405)
        );
        assert_eq!(
            parse_enddate("notAfter=Feb 29 00:00:00 2028 GMT"),
            Some(1_835_395_200)
        );
        assert_eq!(parse_enddate("notBefore=Jan  1 00:00:00 1970 GMT"), None);
        assert_eq!(parse_enddate("notAfter=Foo  1 00:00:00 1970 GMT"), None);
        assert_eq!(parse_enddate("notAfter=Jan  1 00:00:00 1970 UTC"), None);
    }

    #[test]
    fn a_kubelet_certificate_passes_only_with_25_days_and_a_new_issuer() {
        let cert = |remaining, issuer: &str, checkend| KubeletCert {
            path: KUBELET_CLIENT_CERT,
            issuer: issuer.into(),
            remaining,
            checkend,
        };
        let installer = "issuer=CN=kubelet-signer, OU=openshift";
        let new = "issuer=CN=kube-csr-signer_@1";
        assert!(cert(MIN_VALIDITY_SECONDS, new, true).passes(installer));
        assert!(!cert(MIN_VALIDITY_SECONDS - 1, new, true).passes(installer));
        assert!(!cert(30 * DAY_SECONDS, new, false).passes(installer));
        assert!(!cert(30 * DAY_SECONDS, installer, true).passes(installer));
    }

    #[tokio::test]
    async fn the_clock_check_accepts_a_day_behind_and_refuses_real_time() {
        let guest = ScriptedGuest::new();
        let behind = now_unix() - DAY_SECONDS;
        guest.expect("date -u +%s", Output::ok(format!("{behind}\n")));
        let skew = check_clock(&guest, -DAY_SECONDS).await.unwrap();
        assert!((skew + DAY_SECONDS).abs() <= 2, "{skew}");
        guest.expect("date -u +%s", Output::ok(format!("{}\n", now_unix())));
        let err = check_clock(&guest, -DAY_SECONDS).await.unwrap_err();
        assert_eq!(err.reason(), "ClockNotShifted");
        assert!(err.to_string().contains("-86400"), "{err}");
    }

    #[test]
    fn the_cred_manager_is_snc_s_daemonset() {
        let ds = cred_manager();
        assert_eq!(ds.metadata.name.as_deref(), Some(CRED_MANAGER));
        assert_eq!(ds.metadata.namespace.as_deref(), Some(MCO_NAMESPACE));
        let spec = ds.spec.template.spec.unwrap();
        assert!(
            spec.containers[0].command.as_ref().unwrap()[2].contains("/etc/kubernetes/kubeconfig")
        );
    }

    #[test]
    fn the_cred_manager_runs_as_an_account_that_may_mint_only_the_bootstrapper_token() {
        let ds = cred_manager();
        let pod = ds.spec.template.spec.unwrap();
        let script = &pod.containers[0].command.as_ref().unwrap()[2];
        assert!(
            script.contains("oc create token node-bootstrapper"),
            "{script}"
        );
        let (account, role, binding) = cred_manager_access();
        assert_eq!(pod.service_account_name, account.metadata.name);
        let rules = role.rules.unwrap();
        let token = &rules[0];
        assert_eq!(
            (
                token.resources.as_deref(),
                token.resource_names.as_deref(),
                token.verbs.as_slice()
            ),
            (
                Some(&["serviceaccounts/token".to_owned()][..]),
                Some(&[NODE_BOOTSTRAPPER.to_owned()][..]),
                &["create".to_owned()][..]
            )
        );
        assert_eq!(binding.role_ref.name, role.metadata.name.unwrap());
        let subject = &binding.subjects.unwrap()[0];
        assert_eq!(
            (subject.name.as_str(), subject.namespace.as_deref()),
            (CRED_MANAGER, Some(MCO_NAMESPACE))
        );
    }
}
