//! One simulated guest cluster: a kube-apiserver (on the control plane's etcd, under the disk's
//! own prefix) serving the guest's OpenShift API at `<guest address>:6443`, plus the controllers
//! that move OpenShift objects the way a real single-node cluster would:
//!
//! - kubelet CSRs (client and serving) appear when the kubelet starts, and are issued once
//!   approved: a real certificate for the requested subject and key, signed by a CA of the CSR's
//!   signer, as the kube-controller-manager does;
//! - ClusterOperators and the ClusterVersion become Available once the kubelet has run for
//!   `Timings.operators` and the guest's certificates are valid *by guest time*;
//! - the Machine Config Operator ([`mco`]): `00-master` carries the pull secret, the pool's
//!   MachineConfigs are rendered into `rendered-master-<hash>` objects that stay, a new rendering
//!   lands in the guest's files after `Timings.rollout`, and the pool reports it as upstream does;
//! - the client CA bundle follows the `openshift-config/admin-kubeconfig-client-ca` ConfigMap and
//!   the bundles of the other client signers ([`signers`]: made from the disk's PKI, replaced
//!   when `regenerate-top-level` asks, trimmed by `remove-old-trust`), like the kube-apiserver
//!   operator does;
//! - `apiservers.config.openshift.io/cluster` `spec.servingCerts.namedCertificates` roll out like a
//!   new kube-apiserver revision: ClusterOperator `kube-apiserver` is Progressing for
//!   `Timings.rollout`, then the API server restarts with one `--tls-sni-cert-key` per entry (the
//!   TLS Secret from `openshift-config`), keeping its data in etcd;
//! - `openshift-config/pull-secret` reaches the guest's `/var/lib/kubelet/config.json` only through
//!   the MCO's rendering.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

pub mod csr_signer;
mod installed;
pub mod mco;
mod node;
pub mod scc;
pub mod signers;

use super::pki::{CsrSigner, GuestPki};
use crate::Timings;
use crate::guest::state::{Certificate, GuestState};
use testenv::{ApiServerLauncher, ExtraApiServer, ExtraApiServerSpec};

/// The field manager of every write the simulation makes to a guest API: what a disk carries
/// into its copies is told apart from it (see [`super::persist`]).
pub(super) const MANAGER: &str = "guestcluster-sim-openshift";

/// Whether an operator is Available, with the reason and message it reports.
type Availability = (bool, &'static str, &'static str);
/// The signers of the kubelet's own CSRs (client, then serving).
const KUBELET_SIGNERS: [&str; 2] = [
    "kubernetes.io/kube-apiserver-client-kubelet",
    "kubernetes.io/kubelet-serving",
];
/// The signers the kube-controller-manager issues certificates for.
const CONTROLLER_SIGNERS: [&str; 4] = [
    "kubernetes.io/kube-apiserver-client",
    "kubernetes.io/kube-apiserver-client-kubelet",
    "kubernetes.io/kubelet-serving",
    "kubernetes.io/legacy-unknown",
];
/// The user the kubelet's CSRs are for.
const KUBELET_USER: &str = "system:node:crc";
/// Who the kubelet's bootstrap kubeconfig authenticates as (its first client CSR).
const NODE_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
/// How long issued certificates are valid (the cluster signing duration), in seconds.
const SIGNING_DURATION: i64 = 30 * 86_400;
/// The cluster operators a CRC guest reports and the crc-agent waits for (and a few more).
pub const OPERATORS: [&str; 8] = [
    "authentication",
    "console",
    "etcd",
    "ingress",
    "kube-apiserver",
    "machine-config",
    "network",
    "openshift-apiserver",
];

/// Errors of a simulated guest cluster.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("starting the guest API server: {0}")]
    Start(#[from] testenv::Error),
    #[error("guest PKI: {0}")]
    Pki(#[from] super::pki::Error),
    #[error("guest API: {0}")]
    Kube(#[from] kube::Error),
    #[error("guest API client: {0}")]
    Client(String),
    #[error("the objects the disk carries: {0}")]
    Persist(#[from] super::persist::Error),
}

/// What the cluster controllers need to know about (and do to) the guest they run in.
pub trait GuestView: Send + Sync + 'static {
    /// Whether the kubelet unit is running now.
    fn kubelet_running(&self) -> bool;
    /// The guest clock, unix seconds.
    fn guest_now(&self) -> i64;
    /// Whether every certificate the guest tracks is valid at guest time.
    fn certificates_valid(&self) -> bool;
    /// Renews the kubelet's certificates from `now` (guest time) for `days`, as an approved CSR
    /// does.
    fn renew_kubelet_certificates(&self, now: i64, days: i64);
    /// Writes MachineConfig files into the guest (path, contents, mode).
    fn write_files(&self, files: Vec<(String, Vec<u8>, u32)>);
    /// A guest file's bytes, if it exists.
    fn file(&self, path: &str) -> Option<Vec<u8>>;
    /// A copy of the guest's state (`None` when it is not running).
    fn state(&self) -> Option<GuestState>;
    /// Changes the guest's state as a process in it would (written through to its disk).
    fn update(&self, change: Box<dyn FnOnce(&mut GuestState) + Send>);
}

/// The namespace of the Secrets `namedCertificates` refer to, as in OpenShift.
const CONFIG_NAMESPACE: &str = "openshift-config";

/// `--tls-sni-cert-key` entries: (certificate PEM, key PEM, host names).
type SniCerts = Vec<(String, String, Vec<String>)>;

/// How to run one guest cluster.
#[derive(Clone)]
pub struct ClusterSpec {
    /// Directory for the API server's PKI files and log.
    pub dir: PathBuf,
    /// `<guest address>:6443`.
    pub bind: SocketAddr,
    /// etcd prefix: one per disk, so a VM restart keeps its cluster and a clone starts fresh.
    pub etcd_prefix: String,
    pub pki: GuestPki,
    /// OpenShift version installed in the disk.
    pub version: String,
    pub timings: Timings,
    /// The objects clients wrote, as the disk carries them (`GuestState::api_objects`): created
    /// when the prefix holds no cluster yet (a copy of the disk), ignored otherwise.
    pub saved_objects: Vec<Value>,
}

/// A running guest cluster; stopping it stops the API server (the data stays in etcd).
pub struct GuestCluster {
    server: Arc<Mutex<ServerSlot>>,
    controllers: tokio::task::JoinHandle<()>,
    bind: SocketAddr,
    config: kube::Config,
}

/// The API server process, shared by [`GuestCluster::stop`] and the rollout that replaces it.
/// One lock covers both fields, so a rollout never installs a new process after a stop.
#[derive(Default)]
struct ServerSlot {
    server: Option<ExtraApiServer>,
    stopped: bool,
}

fn slot(server: &Mutex<ServerSlot>) -> std::sync::MutexGuard<'_, ServerSlot> {
    server.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GuestCluster {
    /// Starts the API server, installs the OpenShift CRDs and baseline objects, and the
    /// controllers.
    pub async fn start(
        launcher: &ApiServerLauncher,
        spec: ClusterSpec,
        guest: Arc<dyn GuestView>,
    ) -> Result<Self, Error> {
        // The simulation's own identity comes from a CA only it knows, so replacing the user
        // client CA bundle (as the crc-agent does) never locks the simulation out.
        let internal = GuestPki::generate(spec.pki.not_before, 3650)?;
        let (sim_cert, sim_key) = internal.client_cert("guestcluster-sim", "system:masters")?;
        let server_spec = ExtraApiServerSpec {
            name: format!("guest-{}", spec.bind),
            dir: spec.dir.clone(),
            etcd_prefix: spec.etcd_prefix.clone(),
            bind: spec.bind,
            server_name: "api.crc.testing".into(),
            serving_cert_pem: spec.pki.serving_cert.clone(),
            serving_key_pem: spec.pki.serving_key.clone(),
            server_ca_pem: spec.pki.server_ca_cert.clone(),
            client_ca_pem: format!("{}{}", internal.admin_ca_cert, spec.pki.admin_ca_cert),
            admin_cert_pem: sim_cert,
            admin_key_pem: sim_key,
            // The rollout controller adds the namedCertificates once it has read them.
            sni_certs: Vec::new(),
            startup_timeout: Duration::from_secs(60),
        };
        let server = launcher.start(&server_spec).await?;
        let config = server.config();
        let client =
            kube::Client::try_from(config.clone()).map_err(|e| Error::Client(e.to_string()))?;
        install_crds(&client).await?;
        // The baseline's ClusterVersion is there from the first start on this prefix on.
        let fresh = config_api(&client, "ClusterVersion", "clusterversions")
            .get_opt("version")
            .await?
            .is_none();
        ensure_baseline(&client, &spec).await?;
        if fresh && !spec.saved_objects.is_empty() {
            // Like a node whose etcd lost some data: the cluster still comes up.
            match super::persist::restore(&client, &spec.saved_objects).await {
                Ok(restored) => tracing::info!(
                    restored,
                    saved = spec.saved_objects.len(),
                    prefix = %spec.etcd_prefix,
                    "guest cluster: restored the objects the disk carries"
                ),
                Err(err) => tracing::warn!(
                    prefix = %spec.etcd_prefix,
                    "guest cluster: the objects the disk carries were not restored: {err}"
                ),
            }
        }
        let slot = Arc::new(Mutex::new(ServerSlot {
            server: Some(server),
            stopped: false,
        }));
        let requesters = Requesters {
            node: impersonating(&config, KUBELET_USER, &["system:nodes"])?,
            bootstrapper: impersonating(
                &config,
                NODE_BOOTSTRAPPER,
                &[
                    "system:serviceaccounts",
                    "system:serviceaccounts:openshift-machine-config-operator",
                ],
            )?,
        };
        let controllers = tokio::spawn(run_controllers(Controllers {
            client,
            requesters,
            launcher: launcher.clone(),
            server_spec,
            server: slot.clone(),
            sni_rollout: None,
            sni_failed: None,
            guest,
            timings: spec.timings.clone(),
            version: spec.version.clone(),
            internal_ca: internal.admin_ca_cert.clone(),
            pki: spec.pki.clone(),
            client_ca_file: spec.dir.join("client-ca.crt"),
            kubelet_since: None,
            csr_epoch: None,
            csr_pending: Vec::new(),
            csr_signers: BTreeMap::new(),
            kcm_signer: None,
            kubelet_starts: 0,
            csr_trusted: None,
            renewals_requested: BTreeMap::new(),
            failures: BTreeMap::new(),
            rollouts: BTreeMap::new(),
            node_registered: None,
        }));
        Ok(GuestCluster {
            server: slot,
            controllers,
            bind: spec.bind,
            config,
        })
    }

    /// Where the API server listens.
    pub fn addr(&self) -> SocketAddr {
        self.bind
    }

    /// An admin client configuration for the simulation's own use.
    pub fn config(&self) -> kube::Config {
        // The same after a rollout: the restarted server keeps its CA, name and address.
        self.config.clone()
    }

    /// Every object a client wrote to this cluster, as the disk carries it.
    pub async fn client_objects(&self) -> Result<Vec<Value>, Error> {
        let client =
            kube::Client::try_from(self.config()).map_err(|e| Error::Client(e.to_string()))?;
        Ok(super::persist::snapshot(&client).await?)
    }

    pub fn stop(self) {
        self.controllers.abort();
        let server = {
            let mut slot = slot(&self.server);
            slot.stopped = true;
            slot.server.take()
        };
        if let Some(mut server) = server {
            server.stop();
        }
    }
}

impl Drop for GuestCluster {
    fn drop(&mut self) {
        self.controllers.abort();
    }
}

fn resource(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
}

fn config_api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource("config.openshift.io", kind, plural),
    )
}

fn mc_api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &resource("machineconfiguration.openshift.io", kind, plural),
    )
}

async fn install_crds(client: &kube::Client) -> Result<(), Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in super::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        api.patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&crd),
        )
        .await?;
    }
    for crd in super::crds::all() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        let established = kube::runtime::wait::conditions::is_crd_established();
        let _ = tokio::time::timeout(
            Duration::from_secs(30),
            kube::runtime::wait::await_condition(api.clone(), &name, established),
        )
        .await;
    }
    Ok(())
}

/// Creates what an installed CRC cluster has, where missing. Create-only: objects a user (or the
/// crc-agent) changed are left alone.
async fn ensure_baseline(client: &kube::Client, spec: &ClusterSpec) -> Result<(), Error> {
    let create = |api: Api<DynamicObject>, body: Value| async move {
        let obj: DynamicObject =
            serde_json::from_value(body).map_err(|e| Error::Client(e.to_string()))?;
        match api.create(&post_params(), &obj).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
            Err(e) => Err(Error::Kube(e)),
        }
    };
    let core = |kind: &str, plural: &str, ns: Option<&str>| {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("", "v1", kind), plural);
        match ns {
            Some(ns) => Api::<DynamicObject>::namespaced_with(client.clone(), ns, &ar),
            None => Api::<DynamicObject>::all_with(client.clone(), &ar),
        }
    };
    for ns in [
        "openshift-config",
        "openshift-config-managed",
        "openshift-machine-config-operator",
        "openshift-ingress",
        "openshift-ingress-operator",
        "openshift-image-registry",
        signers::NAMESPACE,
    ] {
        create(
            core("Namespace", "namespaces", None),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await?;
    }
    // Who may file the kubelet's CSRs: the node bootstrapper (OpenShift binds it to Kubernetes'
    // `system:node-bootstrapper` role) and the node itself (the Node authorizer's grant on a real
    // cluster; this API server authorizes with RBAC alone).
    create(
        Api::all_with(
            client.clone(),
            &resource(
                "rbac.authorization.k8s.io",
                "ClusterRoleBinding",
                "clusterrolebindings",
            ),
        ),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "system:node-bootstrapper"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:node-bootstrapper"},
               "subjects": [
                   {"kind": "ServiceAccount", "name": "node-bootstrapper", "namespace": "openshift-machine-config-operator"},
                   {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "system:nodes"}]}),
    )
    .await?;
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    create(
        core("Secret", "secrets", Some("openshift-config")),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "pull-secret", "namespace": "openshift-config"},
               "type": "kubernetes.io/dockerconfigjson", "data": {".dockerconfigjson": b64("{\"auths\":{}}")}}),
    )
    .await?;
    create(
        core("ConfigMap", "configmaps", Some("openshift-config")),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "admin-kubeconfig-client-ca", "namespace": "openshift-config"},
               "data": {"ca-bundle.crt": spec.pki.admin_ca_cert}}),
    )
    .await?;
    // What an installed cluster has and SNC's post-install steps change: the installer's
    // temporary kubeadmin login, the router's CA, the default IngressController (two replicas
    // until scaled), and the image registry, Removed on platform none.
    create(
        core("Secret", "secrets", Some("kube-system")),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "kubeadmin", "namespace": "kube-system"},
               "type": "Opaque", "data": {"kubeadmin": b64("installer-kubeadmin-hash")}}),
    )
    .await?;
    let router_ca = super::pki::CsrSigner::generate("ingress-operator")?;
    create(
        core("Secret", "secrets", Some("openshift-ingress-operator")),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "router-ca", "namespace": "openshift-ingress-operator"},
               "type": "kubernetes.io/tls", "data": {"tls.crt": b64(&router_ca.ca_cert), "tls.key": b64("")}}),
    )
    .await?;
    create(
        Api::namespaced_with(
            client.clone(),
            "openshift-ingress-operator",
            &resource(
                "operator.openshift.io",
                "IngressController",
                "ingresscontrollers",
            ),
        ),
        json!({"apiVersion": "operator.openshift.io/v1", "kind": "IngressController",
               "metadata": {"name": "default", "namespace": "openshift-ingress-operator"},
               "spec": {"replicas": 2}}),
    )
    .await?;
    create(
        Api::all_with(
            client.clone(),
            &resource("imageregistry.operator.openshift.io", "Config", "configs"),
        ),
        json!({"apiVersion": "imageregistry.operator.openshift.io/v1", "kind": "Config",
               "metadata": {"name": "cluster"}, "spec": {"managementState": "Removed", "replicas": 1}}),
    )
    .await?;
    let cluster_scoped = [
        (
            config_api(client, "ClusterVersion", "clusterversions"),
            "config.openshift.io/v1",
            "ClusterVersion",
            "version",
            json!({"channel": "stable", "clusterID": "00000000-0000-0000-0000-000000000000"}),
        ),
        (
            config_api(client, "APIServer", "apiservers"),
            "config.openshift.io/v1",
            "APIServer",
            "cluster",
            json!({}),
        ),
        (
            config_api(client, "OAuth", "oauths"),
            "config.openshift.io/v1",
            "OAuth",
            "cluster",
            json!({}),
        ),
        (
            config_api(client, "Ingress", "ingresses"),
            "config.openshift.io/v1",
            "Ingress",
            "cluster",
            json!({"domain": "apps-crc.testing"}),
        ),
        (
            config_api(client, "Image", "images"),
            "config.openshift.io/v1",
            "Image",
            "cluster",
            json!({}),
        ),
        (
            mc_api(client, "MachineConfigPool", "machineconfigpools"),
            "machineconfiguration.openshift.io/v1",
            "MachineConfigPool",
            "master",
            json!({"machineConfigSelector": {"matchLabels": {"machineconfiguration.openshift.io/role": "master"}}}),
        ),
    ];
    for (api, api_version, kind, name, spec_body) in cluster_scoped {
        create(api, json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}, "spec": spec_body})).await?;
    }
    for op in OPERATORS {
        create(
            config_api(client, "ClusterOperator", "clusteroperators"),
            json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterOperator", "metadata": {"name": op}, "spec": {}}),
        )
        .await?;
    }
    Ok(())
}

struct Controllers {
    client: kube::Client,
    /// The kubelet's CSRs are filed as the kubelet would authenticate, so the API server
    /// records the requester an approver must check.
    requesters: Requesters,
    launcher: ApiServerLauncher,
    /// What the running API server was started with; a rollout restarts it with new SNI
    /// certificates, and the client CA kept current so a restart never reverts it.
    server_spec: ExtraApiServerSpec,
    server: Arc<Mutex<ServerSlot>>,
    /// A namedCertificates rollout waiting for its turn: the wanted certificates and when the
    /// change was first seen.
    sni_rollout: Option<(SniCerts, Instant)>,
    /// Certificates the API server did not start with; not tried again until they change.
    sni_failed: Option<SniCerts>,
    guest: Arc<dyn GuestView>,
    timings: Timings,
    version: String,
    internal_ca: String,
    /// The disk's PKI: where the client signers start from.
    pki: GuestPki,
    client_ca_file: PathBuf,
    /// When the kubelet was last seen starting (host clock), for operator readiness.
    kubelet_since: Option<Instant>,
    /// The kubelet start for which CSRs were created.
    csr_epoch: Option<Instant>,
    /// Signers whose kubelet CSR for `csr_epoch` is still to be created.
    csr_pending: Vec<&'static str>,
    /// The simulated kube-controller-manager's signers, made on first use.
    csr_signers: BTreeMap<String, CsrSigner>,
    /// The CSR signer the kube-controller-manager was given (`csr_signer`), when the cluster
    /// has a real one: it signs the `kubernetes.io/*` CSRs.
    kcm_signer: Option<csr_signer::KcmSigner>,
    /// The kubelet unit's start count at the kubelet start seen last.
    kubelet_starts: u32,
    /// The CNs of `csr-controller-ca` as the last pass left it (`None`: no CSR signer chain).
    csr_trusted: Option<Vec<String>>,
    /// An installed cluster's kubelet: the renewal CSR filed per signer, for which certificate
    /// (`notBefore`) and CSR signer.
    renewals_requested: BTreeMap<&'static str, (i64, String)>,
    /// The last error of each controller sub-step that is failing, to log each error once.
    failures: BTreeMap<&'static str, String>,
    /// MachineConfigPool rollouts in progress: rendered config name → when it started.
    rollouts: BTreeMap<String, Instant>,
    /// The Node this kubelet start registered: name, InternalIP and whether the kubelet could
    /// authenticate.
    node_registered: Option<(String, String, bool)>,
}

async fn run_controllers(mut c: Controllers) {
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        c.step().await;
    }
}

impl Controllers {
    /// One level-triggered pass over everything the controllers own. The sub-steps are
    /// independent: one that fails (an unreachable API, an object the API server refuses) is
    /// logged and retried on the next pass, and never holds up the others.
    async fn step(&mut self) {
        let running = self.guest.kubelet_running();
        self.kubelet_since = match (running, self.kubelet_since) {
            (true, None) => Some(Instant::now()),
            (true, since) => since,
            (false, _) => None,
        };
        let result = self.keep_server_running().await;
        self.outcome("API server", result);
        let state = self.guest.state();
        // A `systemctl restart` is a kubelet start too, however quick.
        let starts = state
            .as_ref()
            .and_then(|s| s.units.get("kubelet.service"))
            .map_or(0, |u| u.starts);
        if running && starts != self.kubelet_starts && self.kubelet_since.is_some() {
            self.kubelet_since = Some(Instant::now());
            self.node_registered = None;
        }
        self.kubelet_starts = starts;
        if let Some(state) = state.as_ref().filter(|s| s.install.is_some()) {
            let result = self.installed_cluster(state).await;
            self.outcome("installed cluster", result);
        }
        let installing = state
            .as_ref()
            .and_then(|s| s.install.as_ref())
            .is_some_and(|i| i.completed_at.is_none());
        if let Some(state) = state.as_ref() {
            let result = self.node(state).await;
            self.outcome("node", result);
        }
        let pki = self.pki.clone();
        // The client CA follows the signers' bundles as this pass left them; a pass that could
        // not read them leaves the client CA as it is until the next.
        let csr_trust = match state.as_ref() {
            Some(state) => self.csr_signer_chain(state).await,
            None => Ok(String::new()),
        };
        match (self.client_signers(&pki).await, csr_trust) {
            (Ok(signers), Ok(csr_trust)) => {
                self.csr_trusted = (!csr_trust.is_empty()).then(|| {
                    signers::certificates(&csr_trust)
                        .iter()
                        .filter_map(|c| super::pki::common_name(c))
                        .collect()
                });
                self.outcome("client signers", Ok(()));
                self.outcome("CSR signer", Ok(()));
                let result = self.sync_client_ca(&format!("{signers}{csr_trust}")).await;
                self.outcome("client CA", result);
            }
            (signers, csr_trust) => {
                self.outcome("client signers", signers.map(drop));
                self.outcome("CSR signer", csr_trust.map(drop));
            }
        }
        let result = self.named_certificates().await;
        self.outcome("named certificates", result);
        let installed = state.as_ref().is_some_and(|s| s.install.is_some());
        let result = self.kubelet_csrs(installed).await;
        self.outcome("kubelet CSRs", result);
        // One reading of the clock for both: the ClusterVersion never reports an operator
        // Available that its ClusterOperator does not show yet.
        let availability: Vec<Availability> = (0..OPERATORS.len())
            .map(|i| self.availability(i, installing))
            .collect();
        let result = self.operators(&availability, installing).await;
        self.outcome("cluster operators", result);
        let result = self.cluster_version(&availability, installing).await;
        self.outcome("cluster version", result);
        let result = self.machine_configs().await;
        self.outcome("machine configs", result);
    }

    /// Logs a sub-step's failure when it starts or changes (and at debug level on each repeat),
    /// and its recovery.
    fn outcome(&mut self, step: &'static str, result: Result<(), Error>) {
        match result {
            Ok(()) => {
                if self.failures.remove(step).is_some() {
                    tracing::info!(step, "guest cluster controller recovered");
                }
            }
            Err(err) => {
                let err = err.to_string();
                if self.failures.get(step) == Some(&err) {
                    tracing::debug!(step, "guest cluster controller still failing: {err}");
                } else {
                    tracing::warn!(step, "guest cluster controller failed: {err}");
                    // Also next to the API server's log, where a test's failure points.
                    if let Some(dir) = self.client_ca_file.parent() {
                        let _ = std::fs::OpenOptions::new()
                            .create(true)
                            .append(true)
                            .open(dir.join("controllers.log"))
                            .and_then(|mut f| {
                                std::io::Write::write_all(
                                    &mut f,
                                    format!("{}: {step} failed: {err}\n", now_rfc3339()).as_bytes(),
                                )
                            });
                    }
                    self.failures.insert(step, err);
                }
            }
        }
    }

    async fn sync_client_ca(&mut self, signers: &str) -> Result<(), Error> {
        let cm = Api::<ConfigMap>::namespaced(self.client.clone(), "openshift-config")
            .get_opt("admin-kubeconfig-client-ca")
            .await?;
        let bundle = cm
            .and_then(|cm| cm.data)
            .and_then(|d| d.get("ca-bundle.crt").cloned())
            .unwrap_or_default();
        let wanted = format!("{}{}{}", self.internal_ca, bundle, signers);
        self.server_spec.client_ca_pem.clone_from(&wanted);
        if std::fs::read_to_string(&self.client_ca_file)
            .ok()
            .as_deref()
            != Some(wanted.as_str())
        {
            let tmp = self.client_ca_file.with_extension("tmp");
            std::fs::write(&tmp, &wanted)
                .and_then(|()| std::fs::rename(&tmp, &self.client_ca_file))
                .map_err(|e| Error::Client(e.to_string()))?;
        }
        Ok(())
    }

    /// Like the kubelet with a static pod: an API server process that is gone (it exited, or a
    /// restart could not start it) is started again with the current spec, unless the cluster
    /// is being stopped.
    async fn keep_server_running(&mut self) -> Result<(), Error> {
        let needs_start = {
            let mut slot = slot(&self.server);
            !slot.stopped
                && match slot.server.as_mut() {
                    None => true,
                    Some(server) => server.ensure_running().is_err(),
                }
        };
        if needs_start {
            tracing::warn!("guest API server is not running; starting it again");
            self.restart_server().await?;
        }
        Ok(())
    }

    /// The namedCertificates rollout. A changed set first shows as ClusterOperator
    /// `kube-apiserver` Progressing for `Timings.rollout` (the installer's time), then the API
    /// server restarts with it; the data stays in etcd, and a server that does not come up with
    /// the new certificates is rolled back (and that set is not tried again until it changes).
    async fn named_certificates(&mut self) -> Result<(), Error> {
        let wanted = self.wanted_sni_certs().await?;
        if wanted == self.server_spec.sni_certs || self.sni_failed.as_ref() == Some(&wanted) {
            self.sni_rollout = None;
            return Ok(());
        }
        let since = match &self.sni_rollout {
            Some((certs, since)) if *certs == wanted => *since,
            _ => {
                self.sni_rollout = Some((wanted, Instant::now()));
                return Ok(());
            }
        };
        if since.elapsed() < self.timings.rollout {
            return Ok(());
        }
        let previous = std::mem::replace(&mut self.server_spec.sni_certs, wanted.clone());
        if let Err(err) = self.restart_server().await {
            tracing::warn!(
                "guest API server did not start with the named certificates; rolling back: {err}"
            );
            self.server_spec.sni_certs = previous;
            self.sni_failed = Some(wanted);
            self.restart_server().await?;
        }
        self.sni_rollout = None;
        Ok(())
    }

    /// The `--tls-sni-cert-key` entries `apiservers/cluster` asks for: one per namedCertificate
    /// whose TLS Secret in `openshift-config` exists and holds a matching certificate and key.
    /// Others are skipped, as the real operator would refuse them.
    async fn wanted_sni_certs(&self) -> Result<SniCerts, Error> {
        let Some(apiserver) = config_api(&self.client, "APIServer", "apiservers")
            .get_opt("cluster")
            .await?
        else {
            return Ok(Vec::new());
        };
        let secrets = Api::<Secret>::namespaced(self.client.clone(), CONFIG_NAMESPACE);
        let mut wanted = Vec::new();
        let entries = apiserver.data["spec"]["servingCerts"]["namedCertificates"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for entry in entries {
            let Some(secret_name) = entry["servingCertificate"]["name"].as_str() else {
                continue;
            };
            let names: Vec<String> = entry["names"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect();
            let Some(secret) = secrets.get_opt(secret_name).await? else {
                tracing::debug!(secret = secret_name, "namedCertificate Secret missing");
                continue;
            };
            let data = secret.data.unwrap_or_default();
            let pem = |key: &str| {
                data.get(key)
                    .and_then(|v| String::from_utf8(v.0.clone()).ok())
            };
            match (pem("tls.crt"), pem("tls.key")) {
                (Some(cert), Some(key)) if key_matches(&cert, &key) => {
                    wanted.push((cert, key, names));
                }
                _ => tracing::debug!(
                    secret = secret_name,
                    "namedCertificate Secret without a matching tls.crt and tls.key"
                ),
            }
        }
        Ok(wanted)
    }

    /// Stops the API server and starts it again with `server_spec`, waiting until it is ready.
    async fn restart_server(&mut self) -> Result<(), Error> {
        let old = slot(&self.server).server.take();
        if let Some(mut old) = old {
            // Stopping blocks until the process exited (SIGTERM, then SIGKILL after a grace).
            let _ = tokio::task::spawn_blocking(move || old.stop()).await;
        }
        let new = self.launcher.spawn(&self.server_spec).await?;
        {
            // Installed before it is ready, so a stop of the cluster meanwhile stops it too.
            let mut slot = slot(&self.server);
            if slot.stopped {
                drop(slot);
                drop(new);
                return Ok(());
            }
            slot.server = Some(new);
        }
        let deadline = Instant::now() + self.server_spec.startup_timeout;
        loop {
            if let Some(server) = slot(&self.server).server.as_mut() {
                server.ensure_running()?;
            }
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .map_err(|e| Error::Client(e.to_string()))?;
            let ready =
                tokio::time::timeout(Duration::from_secs(5), self.client.request_text(request))
                    .await;
            if matches!(ready, Ok(Ok(ref body)) if body.trim() == "ok") {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Client(format!(
                    "the restarted API server was not ready within {:?}: {ready:?}",
                    self.server_spec.startup_timeout
                )));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Kubelet client and serving CSRs appear on each kubelet start; approved ones are issued
    /// (and the kubelet ones renew the guest's kubelet certificates). Each CSR is handled on its
    /// own: one that cannot be issued is marked Failed, as the kube-controller-manager does, and
    /// one the API server refuses is retried on the next pass without holding up the others.
    /// Kubelet CSRs: on a sealed disk two appear at every kubelet start (the crc-agent approves
    /// them); an installed cluster's kubelet files its own renewals (`installed::renewal_csrs`).
    /// Approved ones are issued.
    async fn kubelet_csrs(&mut self, installed: bool) -> Result<(), Error> {
        let api: Api<CertificateSigningRequest> = Api::all(self.client.clone());
        if let Some(since) = self.kubelet_since
            && self.csr_epoch != Some(since)
            && !installed
        {
            self.csr_epoch = Some(since);
            self.csr_pending = KUBELET_SIGNERS.to_vec();
        }
        if self.kubelet_since.is_none() {
            self.csr_pending.clear();
        }
        let mut first_error = None;
        for signer in std::mem::take(&mut self.csr_pending) {
            let created = match kubelet_csr(signer, KUBELET_USER) {
                Ok(csr) => self
                    .requesters
                    .csrs(signer, false)
                    .create(&post_params(), &csr)
                    .await
                    .map(drop)
                    .map_err(Error::Kube),
                Err(e) => Err(Error::Client(e.to_string())),
            };
            if let Err(err) = created {
                first_error.get_or_insert(err);
                self.csr_pending.push(signer);
            }
        }
        for csr in api.list(&ListParams::default()).await? {
            if let Err(err) = self.issue(&api, &csr).await {
                let name = csr.metadata.name.as_deref().unwrap_or_default();
                first_error.get_or_insert(Error::Client(format!("CSR {name}: {err}")));
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Issues one CSR if it is approved, not yet issued, and for a signer the
    /// kube-controller-manager runs.
    async fn issue(
        &mut self,
        api: &Api<CertificateSigningRequest>,
        csr: &CertificateSigningRequest,
    ) -> Result<(), Error> {
        let status = csr.status.clone().unwrap_or_default();
        let is = |type_: &str| {
            status
                .conditions
                .iter()
                .flatten()
                .any(|c| c.type_ == type_ && c.status == "True")
        };
        let signer = csr.spec.signer_name.as_str();
        if !is("Approved")
            || is("Denied")
            || is("Failed")
            || status.certificate.is_some()
            || !CONTROLLER_SIGNERS.contains(&signer)
        {
            return Ok(());
        }
        let name = csr.metadata.name.clone().unwrap_or_default();
        let now = self.guest.guest_now();
        // Like the kube-controller-manager: backdated a little, for the cluster's signing
        // duration or the shorter one the CSR asks for (at least ten minutes).
        let lifetime = csr.spec.expiration_seconds.map_or(SIGNING_DURATION, |s| {
            i64::from(s).clamp(600, SIGNING_DURATION)
        });
        // The kube-controller-manager signs with the CSR signer it was given, which caps the
        // lifetime of what it issues. An installed cluster's kubelet certificates come from its
        // current CSR signer (the installer's until the operator made a new one) while it has
        // no real one.
        let kcm = self.kcm_signer.clone();
        let install_signer = match &kcm {
            Some(kcm) => Some(kcm.record()),
            None => KUBELET_SIGNERS
                .contains(&signer)
                .then(|| self.guest.state().and_then(|s| s.install))
                .flatten()
                .map(|install| install.csr_signer),
        };
        let window = match &install_signer {
            Some(current) => installed::issue_window(current, now)
                .map(|(from, until)| (from, until.min(now + lifetime)))
                .map_err(super::pki::Error::Request),
            None => Ok((now - 300, now + lifetime)),
        };
        // One CA per signer name (and, on an installed cluster, per CSR signer generation).
        let ca_key = match &install_signer {
            Some(current) => format!("{signer}|{}", current.subject),
            None => signer.to_owned(),
        };
        let signed = window.and_then(|(from, until)| {
            match self.csr_signers.entry(ca_key) {
                std::collections::btree_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::btree_map::Entry::Vacant(e) => e.insert(match &kcm {
                    Some(kcm) => CsrSigner::from_signer(&kcm.signer)?,
                    None => CsrSigner::generate(signer)?,
                }),
            }
            .sign(
                &csr.spec.request.0,
                &csr.spec.usages.clone().unwrap_or_default(),
                from,
                until,
            )
            .map(|pem| (pem, from, until))
        });
        let mut issued = None;
        let body = match signed.map(|(pem, from, until)| {
            issued = Some((from, until));
            pem
        }) {
            Ok(pem) => {
                json!({"status": {"certificate": base64::engine::general_purpose::STANDARD.encode(pem)}})
            }
            Err(err @ super::pki::Error::Request(_)) => {
                tracing::warn!(csr = %name, signer, "cannot issue the approved CSR: {err}");
                let mut conditions = status.conditions.clone().unwrap_or_default();
                let failed = json!({"type": "Failed", "status": "True", "reason": "SignerValidationFailure",
                    "message": err.to_string(), "lastUpdateTime": now_rfc3339(), "lastTransitionTime": now_rfc3339()});
                conditions.push(
                    serde_json::from_value(failed).map_err(|e| Error::Client(e.to_string()))?,
                );
                json!({"status": {"conditions": conditions}})
            }
            Err(err) => return Err(err.into()),
        };
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&body))
            .await?;
        match (issued, install_signer) {
            (Some((from, until)), Some(current)) if KUBELET_SIGNERS.contains(&signer) => {
                let path = installed::kubelet_cert_path(signer);
                self.guest.update(Box::new(move |s| {
                    let subject = s.certificates.get(path).map_or_else(
                        || format!("O=system:nodes, CN={KUBELET_USER}"),
                        |c| c.subject.clone(),
                    );
                    // Written anew, so a kubelet that removed its certificate has one again.
                    s.add_certificate(
                        path,
                        Certificate {
                            not_before: from,
                            not_after: until,
                            issuer: current.subject,
                            subject,
                        },
                    );
                }));
            }
            (Some(_), None) if KUBELET_SIGNERS.contains(&signer) => {
                self.guest
                    .renew_kubelet_certificates(now, SIGNING_DURATION / 86_400);
            }
            _ => {}
        }
        Ok(())
    }

    /// Whether operator `index` is Available now, with the reason and message it reports. While
    /// a cluster installs, its operators come up one after another within `Timings.operators`.
    fn availability(&self, index: usize, installing: bool) -> Availability {
        let warmed = self.kubelet_since.is_some_and(|since| {
            if installing {
                installed::operator_up_during_install(
                    index,
                    OPERATORS.len(),
                    since.elapsed(),
                    self.timings.operators,
                )
            } else {
                since.elapsed() >= self.timings.operators
            }
        });
        let certs = self.guest.certificates_valid();
        match (warmed, certs) {
            (true, true) => (true, "AsExpected", "All is well"),
            (_, false) => (
                false,
                "CertificatesExpired",
                "certificates are not valid at guest time",
            ),
            (false, true) if installing => (false, "Installing", "the operator is being installed"),
            (false, true) => (
                false,
                "KubeletNotReady",
                "waiting for the kubelet and static pods",
            ),
        }
    }

    /// Each ClusterOperator's conditions; one that cannot be updated does not hold up the others.
    async fn operators(
        &self,
        availability: &[Availability],
        installing: bool,
    ) -> Result<(), Error> {
        let api = config_api(&self.client, "ClusterOperator", "clusteroperators");
        let mut first_error = None;
        for (op, &(available, reason, message)) in OPERATORS.into_iter().zip(availability) {
            // The kube-apiserver operator rolls out the serving certificates; while the cluster
            // installs, every operator not yet up is progressing.
            let rolling = op == "kube-apiserver" && self.sni_rollout.is_some();
            let progressing = rolling || (installing && !available);
            let status = |t: &str, s: bool| json!({"type": t, "status": if s {"True"} else {"False"}, "reason": reason, "message": message, "lastTransitionTime": now_rfc3339()});
            let mut conditions = vec![
                status("Available", available),
                status("Progressing", progressing),
                status("Degraded", false),
            ];
            if rolling {
                conditions[1] = json!({"type": "Progressing", "status": "True", "reason": "NodeInstaller",
                    "message": "NodeInstallerProgressing: rolling out a new revision with the named serving certificates",
                    "lastTransitionTime": now_rfc3339()});
            }
            let body = json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterOperator", "metadata": {"name": op},
                "status": {"conditions": conditions,
                           "versions": [{"name": "operator", "version": self.version}]}});
            if current_conditions(&api, op, ["Available", "Progressing"]).await
                != [Some(available), Some(progressing)]
                && let Err(err) = apply_status(&api, op, body).await
            {
                first_error.get_or_insert(err);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// The ClusterVersion: Available once every operator is. While an installed cluster
    /// installs, it is Progressing with how many operators are done; the first time it is
    /// Available the install is complete (recorded in the disk).
    async fn cluster_version(
        &self,
        availability: &[Availability],
        installing: bool,
    ) -> Result<(), Error> {
        let done = availability.iter().filter(|a| a.0).count();
        let available = done == OPERATORS.len();
        let progressing = installing && !available;
        let api = config_api(&self.client, "ClusterVersion", "clusterversions");
        let message = if progressing {
            format!(
                "Working towards {}: {done} of {} done ({}% complete)",
                self.version,
                OPERATORS.len(),
                done * 100 / OPERATORS.len()
            )
        } else {
            format!("Cluster version is {}", self.version)
        };
        let current = api.get_opt("version").await.ok().flatten();
        let same = current.as_ref().is_some_and(|cv| {
            let conditions = cv.data["status"]["conditions"].as_array();
            let find = |t: &str| conditions.and_then(|c| c.iter().find(|c| c["type"] == t));
            find("Available")
                .is_some_and(|c| c["status"] == if available { "True" } else { "False" })
                && find("Progressing").is_some_and(|c| {
                    c["status"] == if progressing { "True" } else { "False" }
                        && c["message"] == message
                })
        });
        if !same {
            let flag = |b: bool| if b { "True" } else { "False" };
            let body = json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion", "metadata": {"name": "version"},
                "status": {"desired": {"version": self.version},
                           "history": [{"state": if progressing {"Partial"} else {"Completed"}, "version": self.version}],
                           "conditions": [
                               {"type": "Available", "status": flag(available), "message": message, "lastTransitionTime": now_rfc3339()},
                               {"type": "Progressing", "status": flag(progressing), "message": message, "lastTransitionTime": now_rfc3339()}]}});
            apply_status(&api, "version", body).await?;
        }
        if installing && available {
            let now = self.guest.guest_now();
            self.guest.update(Box::new(move |s| {
                if let Some(install) = s.install.as_mut() {
                    install.completed_at.get_or_insert(now);
                }
            }));
            tracing::info!(version = %self.version, "guest cluster installed");
        }
        Ok(())
    }
}

/// Creates as the simulation ([`MANAGER`]).
/// Creates namespace `name` unless it exists.
async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), Error> {
    let namespaces = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    if namespaces.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let ns = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .map_err(|e| Error::Client(e.to_string()))?;
    match namespaces.create(&post_params(), &ns).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

fn post_params() -> PostParams {
    PostParams {
        dry_run: false,
        field_manager: Some(MANAGER.into()),
    }
}

async fn apply_status(api: &Api<DynamicObject>, name: &str, body: Value) -> Result<(), Error> {
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&body),
    )
    .await?;
    Ok(())
}

/// Whether each condition of `types` is True (`None`: absent, or the object is unreadable).
async fn current_conditions<const N: usize>(
    api: &Api<DynamicObject>,
    name: &str,
    types: [&str; N],
) -> [Option<bool>; N] {
    let obj = api.get_opt(name).await.ok().flatten();
    let conditions = obj
        .as_ref()
        .and_then(|o| o.data["status"]["conditions"].as_array());
    types.map(|type_| {
        conditions?
            .iter()
            .find(|c| c["type"] == type_)
            .map(|c| c["status"] == "True")
    })
}

/// Whether `key_pem` is the private key of the certificate `cert_pem` (kube-apiserver refuses
/// to start otherwise).
fn key_matches(cert_pem: &str, key_pem: &str) -> bool {
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (Ok(cert), Ok(key)) = (
        CertificateDer::from_pem_slice(cert_pem.as_bytes()),
        PrivateKeyDer::from_pem_slice(key_pem.as_bytes()),
    ) else {
        return false;
    };
    let provider = rustls::crypto::ring::default_provider();
    // Unlike `from_der`, a key whose match cannot be told counts as a mismatch here.
    provider
        .key_provider
        .load_private_key(key)
        .is_ok_and(|key| {
            rustls::sign::CertifiedKey::new(vec![cert], key)
                .keys_match()
                .is_ok()
        })
}

/// Files of an Ignition-style MachineConfig spec: `config.storage.files[]` with `data:` URLs.
pub fn machine_config_files(spec: &Value) -> Vec<(String, Vec<u8>, u32)> {
    spec["config"]["storage"]["files"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            let path = f["path"].as_str()?.to_owned();
            let source = f["contents"]["source"].as_str()?;
            let mode = f["mode"]
                .as_u64()
                .and_then(|m| u32::try_from(m).ok())
                .unwrap_or(0o644);
            Some((path, decode_data_url(source)?, mode))
        })
        .collect()
}

/// `data:,<percent-encoded>` or `data:...;base64,<base64>`.
fn decode_data_url(url: &str) -> Option<Vec<u8>> {
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    if meta.ends_with(";base64") {
        return base64::engine::general_purpose::STANDARD.decode(data).ok();
    }
    let mut out = Vec::with_capacity(data.len());
    let bytes = data.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' && i + 2 < bytes.len() {
            let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_rfc3339() -> String {
    k8s_openapi::jiff::Timestamp::now().to_string()
}

/// Clients acting as the guest's kubelet.
struct Requesters {
    /// `system:node:crc`: serving CSRs and renewals.
    node: kube::Client,
    /// The node bootstrapper: the first client CSR of a kubelet start.
    bootstrapper: kube::Client,
}

impl Requesters {
    fn csrs(&self, signer: &str, renewal: bool) -> Api<CertificateSigningRequest> {
        let client = if renewal || signer.ends_with("kubelet-serving") {
            &self.node
        } else {
            &self.bootstrapper
        };
        Api::all(client.clone())
    }
}

/// A client of `config` that the API server takes for `user` in `groups` (the admin may
/// impersonate anyone).
fn impersonating(
    config: &kube::Config,
    user: &str,
    groups: &[&str],
) -> Result<kube::Client, Error> {
    let mut config = config.clone();
    config.auth_info.impersonate = Some(user.to_owned());
    config.auth_info.impersonate_groups = Some(groups.iter().map(|g| (*g).to_owned()).collect());
    kube::Client::try_from(config).map_err(|e| Error::Client(e.to_string()))
}

fn kubelet_csr(signer: &str, cn: &str) -> Result<CertificateSigningRequest, rcgen::Error> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, cn);
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name = dn;
    let pem = params.serialize_request(&key)?.pem()?;
    let usages: Vec<&str> = if signer.ends_with("kubelet-serving") {
        vec!["digital signature", "server auth"]
    } else {
        vec!["digital signature", "client auth"]
    };
    let csr = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "csr-"},
        "spec": {"request": base64::engine::general_purpose::STANDARD.encode(pem), "signerName": signer, "usages": usages}
    });
    Ok(serde_json::from_value(csr).expect("static CSR shape"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_named_certificate_needs_its_own_key() {
        let one = rcgen::generate_simple_self_signed(vec!["a.example".into()]).unwrap();
        let other = rcgen::generate_simple_self_signed(vec!["b.example".into()]).unwrap();
        let pem =
            |c: &rcgen::CertifiedKey<rcgen::KeyPair>| (c.cert.pem(), c.signing_key.serialize_pem());
        let ((cert, key), (_, other_key)) = (pem(&one), pem(&other));
        assert!(key_matches(&cert, &key));
        assert!(!key_matches(&cert, &other_key));
        assert!(!key_matches("not a certificate", &key));
    }

    #[test]
    fn decodes_machine_config_files() {
        let spec = json!({"config": {"storage": {"files": [
            {"path": "/var/lib/kubelet/config.json", "mode": 384, "contents": {"source": "data:,%7B%7D"}},
            {"path": "/etc/b64", "contents": {"source": "data:text/plain;charset=utf-8;base64,aGk="}}
        ]}}});
        let files = machine_config_files(&spec);
        assert_eq!(
            files[0],
            (
                "/var/lib/kubelet/config.json".to_owned(),
                b"{}".to_vec(),
                384
            )
        );
        assert_eq!(files[1], ("/etc/b64".to_owned(), b"hi".to_vec(), 0o644));
    }
}
