//! Bootstrap in place, as a live ISO whose Ignition is a single-node bootstrap-in-place config
//! runs it: bootkube checks the installer's certificates **by guest time** (one not yet valid, or
//! expired, fails the bootstrap visibly and nothing is installed), then the installed system is
//! written to the installation disk and the guest reboots into it. Pure functions; the host
//! (`GuestHost`) times and persists them.

use super::exec::{Machine, containers, crio};
use super::ignition::{self, IgnitionError};
use super::state::{Certificate, File, GuestState, InstallState, NODE_NAME, RootDisk, Unit, paths};
use super::time;
use crate::installer::{
    IGNITION_GUEST_PKI, IGNITION_INSTALLATION_DISK, IGNITION_RELEASE_IMAGE,
    IGNITION_RELEASE_VERSION, IGNITION_TLS_DIR, KUBELET_BOOTSTRAP_CLIENT, KUBELET_SIGNER,
    native::{GUEST_PKI_DAYS, yaml_top},
};
use crate::openshift::GuestPki;

pub const BOOTKUBE: &str = "bootkube.service";
const INSTALL_TO_DISK: &str = "install-to-disk.service";
/// The only installation disk a VMI has: its first disk.
pub const INSTALLATION_DISK: &str = "/dev/vda";
/// bootkube.sh's process ID in journal lines.
const BOOTKUBE_PID: u32 = 2270;

/// Why the install cannot produce a system.
#[derive(Debug, thiserror::Error)]
pub enum InstallError {
    #[error("the live ISO carries no Ignition config")]
    NoIgnition,
    #[error("the Ignition has no {0}")]
    Missing(&'static str),
    #[error(transparent)]
    Ignition(#[from] IgnitionError),
    #[error("the Ignition's API key material: {0}")]
    Pki(String),
    #[error("install manifest {path}: {reason}")]
    Manifest { path: String, reason: String },
}

/// Whether a booted live system runs a bootstrap in place: its Ignition names an installation
/// disk and enables bootkube.
pub fn is_bootstrap_in_place(state: &GuestState) -> bool {
    state.live_iso.is_some()
        && state.files.contains_key(IGNITION_INSTALLATION_DISK)
        && state.units.get(BOOTKUBE).is_some_and(|u| u.enabled)
}

/// bootkube's first steps at guest time `now`: every certificate of the Ignition must be valid
/// (as the control plane's TLS would otherwise refuse it), and the installation disk must be the
/// VMI's first disk. On failure the unit is `failed` with the reason in its journal, and
/// `Err` carries that reason.
pub fn bootkube(machine: &mut Machine, now: i64, has_target: bool) -> Result<(), String> {
    let state = &machine.state;
    let disk = state
        .file(IGNITION_INSTALLATION_DISK)
        .map(|d| String::from_utf8_lossy(d).trim().to_owned())
        .unwrap_or_default();
    let tls = format!("{IGNITION_TLS_DIR}/");
    let invalid = state
        .certificates
        .iter()
        .filter(|(path, _)| path.starts_with(&tls))
        .find_map(|(path, cert)| validity_error(cert, now).map(|e| (path.clone(), e)));
    let failure = if let Some((path, error)) = invalid {
        Some(vec![
            format!("Checking {path}"),
            format!("https://localhost:6443/version: tls: failed to verify certificate: {error}"),
        ])
    } else if let Some(error) = bootstrap_ip_error(machine) {
        Some(vec![error])
    } else if disk != INSTALLATION_DISK || !has_target {
        Some(vec![format!(
            "install-to-disk: installation disk {disk} not found (the VMI's first disk is {INSTALLATION_DISK})"
        )])
    } else {
        None
    };
    let Some(lines) = failure else {
        return Ok(());
    };
    let reason = lines.last().cloned().unwrap_or_default();
    let host = machine.state.hostname.clone();
    let stamp = time::journal_date(now);
    let journal = machine
        .state
        .journal
        .entry(BOOTKUBE.to_owned())
        .or_default();
    for line in lines {
        journal.push(format!(
            "{stamp} {host} bootkube.sh[{BOOTKUBE_PID}]: {line}"
        ));
    }
    journal.push(format!(
        "{stamp} {host} systemd[1]: bootkube.service: Main process exited, code=exited, status=1/FAILURE"
    ));
    journal.push(format!(
        "{stamp} {host} systemd[1]: bootkube.service: Failed with result 'exit-code'."
    ));
    let unit = machine.state.units.entry(BOOTKUBE.to_owned()).or_default();
    unit.active = false;
    unit.failed = true;
    Err(reason)
}

/// The bootstrap control plane runs on the bootstrap kubelet's node IP: the Ignition's
/// `OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP`, else the address of the default route's NIC. etcd's
/// member and serving certificates are made for it, so when the installed kubelet's node IP (the
/// Ignition's `KUBELET_NODE_IP` drop-in, else that same NIC) is another one, the control plane
/// cannot come up on the installed node (assisted-service sets the variable for exactly this
/// case: `addBootstrapKubeletIpIfRequired`).
fn bootstrap_ip_error(machine: &Machine) -> Option<String> {
    let default_nic = machine.runtime.guest_ip.to_string();
    let bootstrap = machine
        .state
        .file(crate::installer::IGNITION_BOOTSTRAP_NODE_IP)
        .map(|b| String::from_utf8_lossy(b).trim().to_owned())
        .unwrap_or_else(|| default_nic.clone());
    let node = machine
        .state
        .file(paths::NODE_IP_DROPIN)
        .and_then(|b| {
            let text = String::from_utf8_lossy(b);
            let start = text.find("KUBELET_NODE_IP=")? + "KUBELET_NODE_IP=".len();
            Some(
                text[start..]
                    .split(|c: char| c == '"' || c.is_whitespace())
                    .next()?
                    .to_owned(),
            )
        })
        .unwrap_or(default_nic);
    (bootstrap != node).then(|| {
        format!(
            "etcd: member crc advertises peer URL https://{bootstrap}:2380 and its certificates cover {bootstrap}, but the node's IP is {node}: the control plane cannot move to the installed node"
        )
    })
}

/// Go's wording for a certificate outside its validity at `now`; `None` when it is valid.
pub fn validity_error(cert: &Certificate, now: i64) -> Option<String> {
    let rfc3339 = |t| time::strftime(t, "%Y-%m-%dT%H:%M:%SZ").unwrap_or_default();
    if now < cert.not_before {
        Some(format!(
            "x509: certificate has expired or is not yet valid: current time {} is before {}",
            rfc3339(now),
            rfc3339(cert.not_before)
        ))
    } else if now > cert.not_after {
        Some(format!(
            "x509: certificate has expired or is not yet valid: current time {} is after {}",
            rfc3339(now),
            rfc3339(cert.not_after)
        ))
    } else {
        None
    }
}

/// Where the installed node keeps the installer's control-plane certificates, relative to
/// [`paths::STATIC_POD_RESOURCES`]: the API server's serving and aggregator client certificates
/// as the secrets of `openshift-kube-apiserver` that carry them
/// (cluster-kube-apiserver-operator `pkg/operator/certrotationcontroller`), the signers whose
/// bundles the API server trusts as its configmaps. The other signers stay with their operators,
/// off the node.
const NODE_CERT_PATHS: &[(&str, &str)] = &[
    (
        "kube-apiserver-lb-server",
        "kube-apiserver-certs/secrets/external-loadbalancer-serving-certkey/tls.crt",
    ),
    (
        "kube-apiserver-internal-lb-server",
        "kube-apiserver-certs/secrets/internal-loadbalancer-serving-certkey/tls.crt",
    ),
    (
        "kube-apiserver-localhost-server",
        "kube-apiserver-certs/secrets/localhost-serving-cert-certkey/tls.crt",
    ),
    (
        "aggregator-client",
        "kube-apiserver-certs/secrets/aggregator-client/tls.crt",
    ),
    (
        "aggregator-signer",
        "kube-apiserver-certs/configmaps/aggregator-client-ca/ca-bundle.crt",
    ),
    (
        "admin-kubeconfig-signer",
        "kube-apiserver-certs/configmaps/client-ca/ca-bundle.crt",
    ),
];

/// The node path of an installer certificate, if the node keeps it.
pub fn node_cert_path(name: &str) -> Option<String> {
    NODE_CERT_PATHS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, path)| format!("{}/{path}", paths::STATIC_POD_RESOURCES))
}

/// What the installation disk holds while the install writes it: not bootable.
pub fn in_progress() -> GuestState {
    GuestState {
        install_incomplete: true,
        ..GuestState::default()
    }
}

/// The installed system a bootstrap in place writes to the installation disk, at guest time
/// `now`, from the live system `live` (its Ignition) on a disk of `disk_bytes`:
/// - RHCOS with the Ignition's users, files and units (dnsmasq, drop-ins, a chronyd mask…),
///   without the bootstrap's own `/opt/openshift` and units;
/// - OpenShift of the release's version; kubelet, CRI-O and OVN-Kubernetes enabled;
/// - the installer's control-plane certificates the node keeps under
///   [`paths::STATIC_POD_RESOURCES`] ([`node_cert_path`]),
///   the bootstrap kubeconfig's client certificate at [`paths::KUBELET_BOOTSTRAP_CERT`];
/// - the kubelet's client and serving certificates, issued now by the installer's CSR signer
///   and valid until that signer expires;
/// - the API key material the installer made (or, from an Ignition without it, made now);
/// - the pull secret of the install-config as the kubelet's `config.json`;
/// - every object of the installer's `manifests/` and `openshift/` directories, as the cluster
///   it starts with ([`install_manifests`]).
pub fn installed_state(
    live: &GuestState,
    now: i64,
    disk_bytes: u64,
) -> Result<GuestState, InstallError> {
    let config = live.live_iso.as_deref().ok_or(InstallError::NoIgnition)?;
    let mut state = GuestState::rhcos_without_users();
    state.hostname = NODE_NAME.to_owned();
    ignition::apply(&mut state, config)?;
    let text = |path: &'static str| {
        state
            .file(path)
            .map(|b| String::from_utf8_lossy(b).trim().to_owned())
            .ok_or(InstallError::Missing(path))
    };
    let version = text(IGNITION_RELEASE_VERSION)?;
    let release = text(IGNITION_RELEASE_IMAGE)?;
    let install_config = state
        .file("/opt/openshift/install-config.yaml")
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .unwrap_or_default();
    let pki = match state.file(IGNITION_GUEST_PKI) {
        Some(json) => serde_json::from_slice::<GuestPki>(json)
            .map_err(|e| InstallError::Pki(e.to_string()))?,
        None => {
            GuestPki::generate(now, GUEST_PKI_DAYS).map_err(|e| InstallError::Pki(e.to_string()))?
        }
    };

    let tls = format!("{IGNITION_TLS_DIR}/");
    let records: Vec<(String, Certificate)> = state
        .certificates
        .iter()
        .filter_map(|(path, cert)| {
            let name = path.strip_prefix(&tls)?.strip_suffix(".crt")?;
            Some((name.to_owned(), cert.clone()))
        })
        .collect();
    state.api_objects.extend(install_manifests(&state)?);
    state
        .files
        .retain(|path, _| !path.starts_with("/opt/openshift/"));
    state
        .certificates
        .retain(|path, _| !path.starts_with("/opt/openshift/"));
    state
        .directories
        .retain(|path| !path.starts_with("/opt/openshift"));
    let mut signer = None;
    for (name, cert) in records {
        match name.as_str() {
            KUBELET_SIGNER => signer = Some(cert),
            KUBELET_BOOTSTRAP_CLIENT => state.add_certificate(paths::KUBELET_BOOTSTRAP_CERT, cert),
            _ => {
                if let Some(path) = node_cert_path(&name) {
                    state.add_certificate(&path, cert);
                }
            }
        }
    }
    let signer = signer.ok_or(InstallError::Missing(
        "/opt/openshift/tls/kubelet-signer.crt",
    ))?;
    let subject = format!("O=system:nodes, CN=system:node:{NODE_NAME}");
    for path in [paths::KUBELET_CLIENT_CERT, paths::KUBELET_SERVER_CERT] {
        state.add_certificate(
            path,
            Certificate {
                not_before: now,
                not_after: signer.not_after,
                issuer: signer.subject.clone(),
                subject: subject.clone(),
            },
        );
    }
    state.files.insert(
        paths::BOOTSTRAP_KUBECONFIG.to_owned(),
        File::root(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://api-int.crc.testing:6443\n  name: local\nusers:\n- name: kubelet\n  user:\n    client-certificate: /etc/kubernetes/kubelet-bootstrap-client.crt\n",
            0o600,
        ),
    );
    let pull_secret = yaml_top("pullSecret", &install_config).unwrap_or_else(|| "{}".to_owned());
    state.files.insert(
        paths::PULL_SECRET.to_owned(),
        File::root(pull_secret, 0o600),
    );

    state.units.remove(BOOTKUBE);
    state.units.remove(INSTALL_TO_DISK);
    state.set_unit("kubelet.service", Unit::enabled_running());
    // RHCOS runs CRI-O's crio-wipe before CRI-O (see `exec::crio`).
    for unit in [crio::CRIO, crio::WIPE_UNIT, "ovs-configuration.service"] {
        let entry = state.units.entry(unit.to_owned()).or_default();
        entry.enabled = true;
    }
    containers::install(&mut state, &version, &release);
    state.openshift_version = Some(version);
    crate::guest::state::add_localhost_kubeconfig(&mut state, &pki);
    state.pki = Some(pki);
    state.install = Some(InstallState {
        stamp: signer.not_before,
        csr_signer: signer,
        signer_secrets_created: false,
        completed_at: None,
        release_image: release,
    });
    state.root = RootDisk::filling(disk_bytes);
    state.live_iso = None;
    state.journal.clear();
    Ok(state)
}

/// The objects of the installer's `manifests/` and `openshift/` directories, which the
/// Ignition carries under `/opt/openshift/`: bootkube's `cluster-bootstrap start` creates every
/// one of them in the cluster it bootstraps (openshift/installer
/// `data/data/bootstrap/files/usr/local/bin/bootkube.sh.template`), so the installed cluster
/// starts with them, MachineConfigs included. Carried in the disk as the objects its cluster
/// is restored with (`GuestState::api_objects`).
pub fn install_manifests(state: &GuestState) -> Result<Vec<serde_json::Value>, InstallError> {
    let mut objects = Vec::new();
    for dir in ["/opt/openshift/manifests/", "/opt/openshift/openshift/"] {
        for (path, file) in state.files.range(dir.to_owned()..) {
            if !path.starts_with(dir) {
                break;
            }
            let bad = |reason: String| InstallError::Manifest {
                path: path.clone(),
                reason,
            };
            let text =
                String::from_utf8(file.content.0.clone()).map_err(|_| bad("not UTF-8".into()))?;
            let docs: Vec<serde_json::Value> =
                serde_saphyr::from_multiple(&text).map_err(|e| bad(e.to_string()))?;
            for doc in docs.into_iter().filter(|d| !d.is_null()) {
                if doc["apiVersion"].as_str().is_none() || doc["kind"].as_str().is_none() {
                    return Err(bad("a document without apiVersion or kind".into()));
                }
                objects.push(doc);
            }
        }
    }
    Ok(objects)
}

#[cfg(test)]
mod tests;
