//! The crc-agent's steps against the guest cluster (`docs/architecture.md`, "The crc-agent"):
//! install the instance identity, approve the kubelet's CSRs, inject the pull secret and the
//! htpasswd users, serve the external certificate, wait for the cluster to settle, and produce the
//! kubeconfig for the Route.
//!
//! Every step that waits does so with a [`Patience`] (poll interval and overall deadline) so that
//! tests can be quick; [`Patiences::upstream`] is the Go agent's 10 s / 10–20 min.
//!
//! Upstream's step 8 runs `oc patch` inside the guest. Here the guest only runs simple commands
//! (see [`crate::guest`]), so the ConfigMap is patched through the SSH tunnel with the sealed
//! kubeconfig's own admin certificate instead — the same request, made from Rust.

use std::collections::BTreeMap;
use std::fmt::Display;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use k8s_openapi::ByteString;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::api::{self, Clock, Credentials};
use super::csr::KUBELET_SIGNERS;
use super::kubeconfig::{self, Kubeconfig};
use super::ssh::SshGuest;
use super::{Command, Guest, GuestError, htpasswd};
use crate::identity::Identity;

/// The guest's admin kubeconfig.
pub const KUBECONFIG_PATH: &str = "/opt/kubeconfig";
/// Its mode on a sealed disk, kept when it is rewritten.
pub const KUBECONFIG_MODE: u32 = 0o600;
pub const OPENSHIFT_CONFIG: &str = "openshift-config";
/// The ConfigMap whose `ca-bundle.crt` the guest API trusts for client certificates.
pub const CLIENT_CA_CONFIGMAP: &str = "admin-kubeconfig-client-ca";
pub const CLIENT_CA_KEY: &str = "ca-bundle.crt";
pub const PULL_SECRET: &str = "pull-secret";
pub const PULL_SECRET_KEY: &str = ".dockerconfigjson";
pub const HTPASSWD_SECRET: &str = "htpass-secret";
pub const HTPASSWD_KEY: &str = "htpasswd";
pub const EXTERNAL_CERT_SECRET: &str = "external-api-serving-cert";
pub const APPROVAL_REASON: &str = "CRCAgentApproval";
/// ClusterOperators that must be Available before the cluster is handed over (step 16).
pub const REQUIRED_OPERATORS: [&str; 5] = [
    "authentication",
    "console",
    "etcd",
    "ingress",
    "openshift-apiserver",
];
/// Go's `bcrypt.DefaultCost`, what upstream hashes with.
pub const BCRYPT_COST: u32 = 10;

/// How often to try and for how long.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patience {
    pub interval: Duration,
    pub deadline: Duration,
}

impl Patience {
    pub const fn new(interval: Duration, deadline: Duration) -> Self {
        Self { interval, deadline }
    }
}

/// The patience of each waiting step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Patiences {
    /// Step 8: `/opt/kubeconfig` readable with a cluster.
    pub kubeconfig: Patience,
    /// Step 8: the client CA ConfigMap patch (the API comes up after the kubelet).
    pub ca_patch: Patience,
    /// Step 11: the API answers with the identity.
    pub api: Patience,
    /// Steps 12–15: single requests, retried on transient failures.
    pub calls: Patience,
    /// Step 16: the ClusterOperators.
    pub operators: Patience,
    /// Step 17: the ClusterVersion (after step 15 the API server rolls out, so calls may fail).
    pub version: Patience,
    /// Step 11a: the kube-apiserver operator's new client signers.
    pub signers: Patience,
    /// Step 11b: each wait for the new CSR signer (its operator's five minutes before the
    /// kube-controller-manager takes it), and for the kubelet's certificates from it.
    pub csr_signer: Patience,
}

impl Patiences {
    /// Upstream's intervals and deadlines.
    pub const fn upstream() -> Self {
        let ten = Duration::from_secs(10);
        Self {
            kubeconfig: Patience::new(ten, Duration::from_secs(600)),
            ca_patch: Patience::new(ten, Duration::from_secs(600)),
            api: Patience::new(ten, Duration::from_secs(1200)),
            calls: Patience::new(ten, Duration::from_secs(300)),
            operators: Patience::new(ten, Duration::from_secs(1200)),
            version: Patience::new(ten, Duration::from_secs(1200)),
            // Not an upstream step. The operator's certificate rotation acts on every change
            // of its Secrets (and resyncs every minute): look often, it is usually a second.
            signers: Patience::new(Duration::from_secs(1), Duration::from_secs(600)),
            // Not an upstream step either: five minutes of the operator's, then a kubelet
            // bootstrap; twice that, with room.
            csr_signer: Patience::new(Duration::from_secs(2), Duration::from_secs(900)),
        }
    }

    /// The same patience for every step (tests).
    pub const fn uniform(patience: Patience) -> Self {
        Self {
            kubeconfig: patience,
            ca_patch: patience,
            api: patience,
            calls: patience,
            operators: patience,
            version: patience,
            signers: patience,
            csr_signer: patience,
        }
    }
}

/// A failed cluster step; the message names the step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Guest {
        step: &'static str,
        source: GuestError,
    },
    #[error("{step}: {source}")]
    Kubeconfig {
        step: &'static str,
        source: kubeconfig::Error,
    },
    #[error("{step}: {source}")]
    Client {
        step: &'static str,
        source: api::Error,
    },
    #[error("{step}: {source}")]
    Htpasswd {
        step: &'static str,
        source: htpasswd::Error,
    },
    #[error("{step}: gave up after {seconds}s, last error: {last}")]
    Timeout {
        step: &'static str,
        seconds: u64,
        last: String,
    },
    #[error("guest clock: {0}")]
    Clock(String),
}

impl Error {
    /// The step that failed.
    pub fn step(&self) -> &'static str {
        match self {
            Error::Guest { step, .. }
            | Error::Kubeconfig { step, .. }
            | Error::Client { step, .. }
            | Error::Htpasswd { step, .. }
            | Error::Timeout { step, .. } => step,
            Error::Clock(_) => "guest clock",
        }
    }
}

pub const STEP_CA_BOOTSTRAP: &str = "CA bootstrap";
pub const STEP_CLIENT: &str = "guest API client";
pub const STEP_WAIT_API: &str = "wait for guest API";
pub const STEP_CSRS: &str = "approve kubelet CSRs";
pub const STEP_PULL_SECRET: &str = "inject pull secret";
pub const STEP_HTPASSWD: &str = "configure htpasswd users";
pub const STEP_EXTERNAL_CERT: &str = "install external API certificate";
pub const STEP_OPERATORS: &str = "wait for cluster operators";
pub const STEP_VERSION: &str = "read cluster version";
pub const STEP_KUBECONFIG: &str = "build handoff kubeconfig";

/// Calls `attempt` until it succeeds, every `patience.interval`, until `patience.deadline`;
/// the timeout error carries the last failure.
pub async fn retry<T, E, F, Fut>(
    step: &'static str,
    patience: Patience,
    mut attempt: F,
) -> Result<T, Error>
where
    E: Display,
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let deadline = tokio::time::Instant::now() + patience.deadline;
    loop {
        match attempt().await {
            Ok(value) => return Ok(value),
            Err(err) => {
                let last = err.to_string();
                if tokio::time::Instant::now() + patience.interval > deadline {
                    return Err(Error::Timeout {
                        step,
                        seconds: patience.deadline.as_secs(),
                        last,
                    });
                }
                tracing::debug!(step, error = %last, "not yet, retrying");
                tokio::time::sleep(patience.interval).await;
            }
        }
    }
}

fn host_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The guest's clock as an offset from ours, measured once with `date +%s`: the guest's
/// certificates are valid by its time, which may differ from the pod's on purpose.
pub async fn guest_clock<G: Guest>(guest: &G) -> Result<Clock, Error> {
    let before = host_now();
    let output = guest
        .run_checked(&Command::new(["date", "+%s"]))
        .await
        .map_err(|e| Error::Clock(e.to_string()))?;
    let text = output.stdout_text();
    let guest_now: i64 = text
        .trim()
        .parse()
        .map_err(|_| Error::Clock(format!("`date +%s` printed {text:?}")))?;
    let offset = guest_now - before;
    Ok(Arc::new(move || host_now() + offset))
}

/// Step 8: `/opt/kubeconfig` once it is YAML with at least one cluster.
pub async fn read_kubeconfig<G: Guest>(
    guest: &G,
    step: &'static str,
    patience: Patience,
) -> Result<Kubeconfig, Error> {
    retry(step, patience, || async {
        let bytes = guest
            .read_file(KUBECONFIG_PATH)
            .await
            .map_err(|e| e.to_string())?;
        let text = String::from_utf8(bytes).map_err(|_| "not UTF-8".to_string())?;
        let kubeconfig = Kubeconfig::parse(&text).map_err(|e| e.to_string())?;
        if kubeconfig.cluster_count() == 0 {
            return Err(format!("{KUBECONFIG_PATH} has no clusters yet"));
        }
        Ok(kubeconfig)
    })
    .await
}

/// Step 8: makes the guest API trust the identity's client CA and switches `/opt/kubeconfig`
/// to the identity's client certificate. Returns the guest API server's CA (PEM).
///
/// The ConfigMap is patched with the credentials `/opt/kubeconfig` holds: the sealed admin
/// certificate on a first run, the identity itself on a Job retry (whose CA is then already
/// trusted), so the step is idempotent.
pub async fn bootstrap_client_ca(
    ssh: &Arc<SshGuest>,
    identity: &Identity,
    clock: Clock,
    patiences: &Patiences,
) -> Result<String, Error> {
    let step = STEP_CA_BOOTSTRAP;
    let mut kubeconfig = read_kubeconfig(ssh.as_ref(), step, patiences.kubeconfig).await?;
    let server_ca = kubeconfig
        .server_ca()
        .map_err(|source| Error::Kubeconfig { step, source })?;
    let (client_cert, client_key) = kubeconfig
        .client_credentials()
        .map_err(|source| Error::Kubeconfig { step, source })?;
    let credentials = Credentials {
        server_ca: server_ca.clone(),
        client_cert,
        client_key,
    };
    let client = api::client(ssh.clone(), &credentials, clock)
        .map_err(|source| Error::Client { step, source })?;
    let configmaps: Api<ConfigMap> = Api::namespaced(client, OPENSHIFT_CONFIG);
    let body = json!({"data": {CLIENT_CA_KEY: identity.client_ca_crt}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
    retry(step, patiences.ca_patch, || {
        configmaps.patch(CLIENT_CA_CONFIGMAP, &params, &patch)
    })
    .await?;
    kubeconfig
        .set_client(&identity.client_crt, &identity.client_key)
        .map_err(|source| Error::Kubeconfig { step, source })?;
    let text = kubeconfig
        .to_yaml()
        .map_err(|source| Error::Kubeconfig { step, source })?;
    ssh.write_file(KUBECONFIG_PATH, text.as_bytes(), KUBECONFIG_MODE)
        .await
        .map_err(|source| Error::Guest { step, source })?;
    Ok(server_ca)
}

/// Step 10: the guest API client with the identity's client certificate.
pub fn identity_client(
    ssh: &Arc<SshGuest>,
    server_ca: &str,
    identity: &Identity,
    clock: Clock,
) -> Result<kube::Client, Error> {
    let credentials = Credentials {
        server_ca: server_ca.to_string(),
        client_cert: identity.client_crt.clone(),
        client_key: identity.client_key.clone(),
    };
    api::client(ssh.clone(), &credentials, clock).map_err(|source| Error::Client {
        step: STEP_CLIENT,
        source,
    })
}

/// Step 11: the API answers (list namespaces, limit 1).
pub async fn wait_api(client: &kube::Client, patience: Patience) -> Result<(), Error> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let params = ListParams::default().limit(1);
    retry(STEP_WAIT_API, patience, || namespaces.list(&params)).await?;
    Ok(())
}

/// Whether a CSR is a kubelet CSR nobody has decided on yet.
pub fn needs_approval(csr: &CertificateSigningRequest) -> bool {
    let undecided = csr.status.as_ref().is_none_or(|status| {
        status.certificate.as_ref().is_none_or(|c| c.0.is_empty())
            && status
                .conditions
                .iter()
                .flatten()
                .all(|c| c.type_ != "Approved" && c.type_ != "Denied")
    });
    undecided && KUBELET_SIGNERS.contains(&csr.spec.signer_name.as_str())
}

/// Step 12: approves the pending kubelet CSRs that node `node`'s kubelet filed (one pass; see
/// [`super::csr`]); returns how many were approved. Others stay pending for someone else.
pub async fn approve_csrs(
    client: &kube::Client,
    node: &str,
    patience: Patience,
) -> Result<Approvals, Error> {
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    retry(STEP_CSRS, patience, || async {
        let mut approvals = Approvals::default();
        for mut csr in csrs.list(&ListParams::default()).await?.items {
            if !needs_approval(&csr) {
                continue;
            }
            let name = csr.metadata.name.clone().unwrap_or_default();
            if let Err(refusal) = super::csr::review(&csr, node) {
                approvals.refused.push((name, refusal));
                continue;
            }
            let status = csr.status.get_or_insert_with(Default::default);
            status.conditions.get_or_insert_with(Vec::new).push(
                CertificateSigningRequestCondition {
                    type_: "Approved".into(),
                    status: "True".into(),
                    reason: Some(APPROVAL_REASON.into()),
                    message: Some("approved by the guestcluster crc-agent".into()),
                    ..Default::default()
                },
            );
            csrs.replace_subresource("approval", &name, &PostParams::default(), &csr)
                .await?;
            tracing::info!(csr = %name, signer = %csr.spec.signer_name, "approved kubelet CSR");
            approvals.approved += 1;
        }
        Ok::<_, kube::Error>(approvals)
    })
    .await
}

/// What one approval pass did: how many CSRs it approved, and which pending ones it left, with
/// why. The caller logs the refusals, once per CSR however many passes see it.
#[derive(Debug, Default)]
pub struct Approvals {
    pub approved: usize,
    pub refused: Vec<(String, super::csr::Refusal)>,
}

impl Approvals {
    /// Logs each refusal whose CSR is not in `logged` yet, and remembers it there.
    pub fn log_refusals(&self, logged: &mut std::collections::HashSet<String>) {
        for (name, refusal) in &self.refused {
            if logged.insert(name.clone()) {
                tracing::warn!(csr = %name, "left a kubelet CSR pending: {refusal}");
            }
        }
    }
}

/// Step 13: `openshift-config/pull-secret` carries the mounted pull secret.
pub async fn inject_pull_secret(
    client: &kube::Client,
    pull_secret: &[u8],
    patience: Patience,
) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPENSHIFT_CONFIG);
    let body = json!({"data": {PULL_SECRET_KEY: BASE64.encode(pull_secret)}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
    retry(STEP_PULL_SECRET, patience, || {
        secrets.patch(PULL_SECRET, &params, &patch)
    })
    .await?;
    Ok(())
}

/// Step 14: `kubeadmin` (with `kubeadmin_password`) and `developer` in
/// `openshift-config/htpass-secret`, other users kept; the Secret is created when missing.
pub async fn configure_htpasswd(
    client: &kube::Client,
    kubeadmin_password: &str,
    cost: u32,
    patience: Patience,
) -> Result<(), Error> {
    let step = STEP_HTPASSWD;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPENSHIFT_CONFIG);
    let existing = retry(step, patience, || secrets.get_opt(HTPASSWD_SECRET)).await?;
    let current = existing
        .as_ref()
        .and_then(|s| s.data.as_ref())
        .and_then(|d| d.get(HTPASSWD_KEY))
        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
        .unwrap_or_default();
    let text = htpasswd::with_crc_users(&current, kubeadmin_password, cost)
        .map_err(|source| Error::Htpasswd { step, source })?;
    let data = BTreeMap::from([(HTPASSWD_KEY.to_string(), ByteString(text.into_bytes()))]);
    retry(step, patience, || async {
        match secrets.get_opt(HTPASSWD_SECRET).await? {
            Some(_) => {
                let patch = json!({"data": {HTPASSWD_KEY: BASE64.encode(&data[HTPASSWD_KEY].0)}});
                secrets
                    .patch(
                        HTPASSWD_SECRET,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await?;
            }
            None => {
                let secret = Secret {
                    metadata: kube::api::ObjectMeta {
                        name: Some(HTPASSWD_SECRET.into()),
                        namespace: Some(OPENSHIFT_CONFIG.into()),
                        ..Default::default()
                    },
                    type_: Some("Opaque".into()),
                    data: Some(data.clone()),
                    ..Default::default()
                };
                crate::write::create(&secrets, &secret).await?;
            }
        }
        Ok::<_, kube::Error>(())
    })
    .await
}

pub fn config_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("config.openshift.io", "v1", kind),
        plural,
    )
}

/// Step 15: the guest API serves the identity's certificate for `host` (a TLS Secret plus the
/// APIServer's `namedCertificates`, replacing the list). Changing them rolls the API server out.
pub async fn install_external_cert(
    client: &kube::Client,
    identity: &Identity,
    host: &str,
    patience: Patience,
) -> Result<(), Error> {
    let step = STEP_EXTERNAL_CERT;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPENSHIFT_CONFIG);
    let data = BTreeMap::from([
        (
            "tls.crt".to_string(),
            ByteString(identity.serving_crt.as_bytes().to_vec()),
        ),
        (
            "tls.key".to_string(),
            ByteString(identity.serving_key.as_bytes().to_vec()),
        ),
    ]);
    let desired = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(EXTERNAL_CERT_SECRET.into()),
            namespace: Some(OPENSHIFT_CONFIG.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data.clone()),
        ..Default::default()
    };
    retry(step, patience, || async {
        match secrets.get_opt(EXTERNAL_CERT_SECRET).await? {
            None => crate::write::create(&secrets, &desired).await?,
            Some(current)
                if current.data.as_ref() == Some(&data) && current.type_ == desired.type_ => {}
            Some(current) if current.type_ != desired.type_ => {
                // A Secret's type is immutable: replace the object (that very one).
                let uid = current.metadata.uid.clone().unwrap_or_default();
                crate::write::delete_exact(
                    &secrets,
                    EXTERNAL_CERT_SECRET,
                    &uid,
                    kube::api::PropagationPolicy::Background,
                )
                .await?;
                crate::write::create(&secrets, &desired).await?;
            }
            Some(current) => {
                let mut updated = desired.clone();
                updated.metadata.resource_version = current.metadata.resource_version;
                secrets
                    .replace(EXTERNAL_CERT_SECRET, &PostParams::default(), &updated)
                    .await?;
            }
        }
        Ok::<_, kube::Error>(())
    })
    .await?;
    let apiservers: Api<DynamicObject> =
        Api::all_with(client.clone(), &config_resource("APIServer", "apiservers"));
    let body = json!({"spec": {"servingCerts": {"namedCertificates": [
        {"names": [host], "servingCertificate": {"name": EXTERNAL_CERT_SECRET}}
    ]}}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
    retry(step, patience, || {
        apiservers.patch("cluster", &params, &patch)
    })
    .await?;
    Ok(())
}

pub fn condition_true(object: &DynamicObject, type_: &str) -> bool {
    object.data["status"]["conditions"]
        .as_array()
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c["type"] == type_ && c["status"] == "True")
        })
}

/// Step 16: every [`REQUIRED_OPERATORS`] is `Available=True`.
pub async fn wait_operators(client: &kube::Client, patience: Patience) -> Result<(), Error> {
    let operators: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &config_resource("ClusterOperator", "clusteroperators"),
    );
    retry(STEP_OPERATORS, patience, || async {
        let mut waiting = Vec::new();
        for name in REQUIRED_OPERATORS {
            match operators.get_opt(name).await.map_err(|e| e.to_string())? {
                Some(operator) if condition_true(&operator, "Available") => {}
                Some(_) => waiting.push(name.to_string()),
                None => waiting.push(format!("{name} (missing)")),
            }
        }
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(format!("not Available: {}", waiting.join(", ")))
        }
    })
    .await
}

/// Step 17: `clusterversions/version` `status.desired.version`.
pub async fn cluster_version(client: &kube::Client, patience: Patience) -> Result<String, Error> {
    let versions: Api<DynamicObject> = Api::all_with(
        client.clone(),
        &config_resource("ClusterVersion", "clusterversions"),
    );
    retry(STEP_VERSION, patience, || async {
        let version = versions.get("version").await.map_err(|e| e.to_string())?;
        version.data["status"]["desired"]["version"]
            .as_str()
            .filter(|v| !v.is_empty())
            .map(str::to_string)
            .ok_or_else(|| "status.desired.version is empty".to_string())
    })
    .await
}

/// Step 18: the kubeconfig to hand over, rendered from the identity and the Route host as the
/// operator renders the one it publishes — nothing the guest wrote goes into it.
pub fn handoff_kubeconfig(identity: &Identity, host: &str) -> Result<String, Error> {
    Kubeconfig::for_route(host, identity)
        .to_yaml()
        .map_err(|source| Error::Kubeconfig {
            step: STEP_KUBECONFIG,
            source,
        })
}

#[cfg(test)]
mod tests {
    use super::super::Output;
    use super::super::fake::ScriptedGuest;
    use super::*;

    fn quick() -> Patience {
        Patience::new(Duration::from_millis(1), Duration::from_millis(200))
    }

    const KUBECONFIG: &str = "clusters:\n- cluster:\n    certificate-authority-data: Q0E=\n    server: https://api-int.crc.testing:6443\n  name: crc\nusers:\n- name: admin\n  user:\n    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n";

    #[tokio::test]
    async fn kubeconfig_is_polled_until_it_has_a_cluster() {
        let guest = ScriptedGuest::new();
        guest.expect(
            "sudo cat /opt/kubeconfig",
            Output::failed(1, "No such file"),
        );
        guest.expect("sudo cat /opt/kubeconfig", Output::ok("clusters: []\n"));
        guest.expect("sudo cat /opt/kubeconfig", Output::ok(KUBECONFIG));
        let kc = read_kubeconfig(&guest, "test", quick()).await.unwrap();
        assert_eq!(kc.server_ca().unwrap(), "CA");
        guest.assert_done();
    }

    #[tokio::test]
    async fn kubeconfig_timeout_carries_the_last_error() {
        let guest = ScriptedGuest::new();
        guest.fallback(|_| Some(Output::ok("clusters: []\n")));
        let err = read_kubeconfig(
            &guest,
            STEP_CA_BOOTSTRAP,
            Patience::new(Duration::from_millis(1), Duration::from_millis(20)),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(err.to_string().contains("no clusters yet"), "{err}");
        assert_eq!(err.step(), STEP_CA_BOOTSTRAP);
    }

    #[tokio::test]
    async fn guest_clock_follows_the_guest_offset() {
        let guest = ScriptedGuest::new();
        let ahead = host_now() + 86_400;
        guest.expect("date +%s", Output::ok(format!("{ahead}\n")));
        let clock = guest_clock(&guest).await.unwrap();
        let skew = clock() - host_now();
        assert!((86_390..=86_410).contains(&skew), "{skew}");
        let guest = ScriptedGuest::new();
        guest.expect("date +%s", Output::ok("Tue\n"));
        assert!(matches!(guest_clock(&guest).await, Err(Error::Clock(_))));
    }

    #[test]
    fn handoff_kubeconfig_points_at_the_route() {
        let identity = crate::identity::generate("api.example.com", host_now()).unwrap();
        let text = handoff_kubeconfig(&identity, "api.example.com").unwrap();
        let kc = Kubeconfig::parse(&text).unwrap();
        assert_eq!(
            kc.value()["clusters"][0]["cluster"]["server"],
            "https://api.example.com:443"
        );
        assert_eq!(kc.server_ca().unwrap(), identity.serving_crt);
        assert_eq!(
            kc.client_credentials().unwrap(),
            (identity.client_crt.clone(), identity.client_key.clone())
        );
    }

    fn csr(signer: &str, status: serde_json::Value) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "csr-1"},
            "spec": {"request": "", "signerName": signer, "usages": []},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn only_undecided_kubelet_csrs_need_approval() {
        assert!(needs_approval(&csr(KUBELET_SIGNERS[0], json!({}))));
        assert!(needs_approval(&csr(KUBELET_SIGNERS[1], json!({}))));
        assert!(!needs_approval(&csr(
            "kubernetes.io/kube-apiserver-client",
            json!({})
        )));
        assert!(!needs_approval(&csr(
            KUBELET_SIGNERS[0],
            json!({"conditions": [{"type": "Denied", "status": "True"}]})
        )));
        assert!(!needs_approval(&csr(
            KUBELET_SIGNERS[1],
            json!({"conditions": [{"type": "Approved", "status": "True"}]})
        )));
        assert!(!needs_approval(&csr(
            KUBELET_SIGNERS[1],
            json!({"certificate": "Q0VSVA=="})
        )));
    }
}
