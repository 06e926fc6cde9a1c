//! KubeVirt's node side, against the real API server and upstream virt-controller and virt-api
//! (`testenv::ControlPlane::kubevirt`), which own VirtualMachines, VMIs up to `Scheduled` and
//! the virt-launcher pods they render. See `docs/simulation.md` ("KubeVirt") for what is and
//! is not modelled.
//!
//! Two level-triggered controllers (kube-runtime `Controller`s), each re-reading the objects it
//! acts on and deciding with the pure functions of [`decide`]:
//!
//! - [`handler`]: virt-handler: a VMI handed to this node is booted through [`guests`], reported
//!   `Running`, and ended with its guest.
//! - [`launcher`]: the kubelet's part for launcher pods (the kubelet simulation only binds them):
//!   an IP from `ctx.network`, `Running`, `Ready` once every readiness gate holds; on deletion,
//!   guest power-off, then the pod goes.
//!
//! What lives only in this process: which guests it booted and how they ended, and the IPs it
//! handed out. After a restart of the simulation a Running VMI has no guest here and is treated
//! as crashed (Failed), and its VM's run strategy decides what follows; the addresses old pods
//! and VMIs still show were reserved at start (`network::reserve_existing`), and a launcher pod's
//! is adopted so that its deletion releases it.

pub mod decide;
pub mod guests;
pub mod handler;
pub mod launcher;
pub mod storage;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use serde_json::json;

use self::decide::{Exit, GuestView};
use self::guests::Guests;
use super::{Error, SimContext};
use guestcluster::kubevirt::{VirtualMachineInstance, VmiPhase};

/// Runs KubeVirt's simulated node side until the task is aborted.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    let handler = handler_client(&ctx).await?;
    let shared = Arc::new(Shared::new(ctx, handler));
    // Subscribed before anything can boot, so no exit is missed.
    let exits = shared.guests.subscribe_exits();
    tokio::join!(
        handler::run(shared.clone()),
        launcher::run(shared.clone()),
        handler::watch_exits(shared.clone(), exits),
    );
    Err(Error::Other(
        "the simulated KubeVirt node controllers stopped".into(),
    ))
}

/// virt-handler's ServiceAccount (virt-operator's install strategy makes it and its RBAC).
pub const HANDLER_ACCOUNT: &str = "kubevirt-handler";

/// A client acting as virt-handler on this node: virt-api's VMI mutator drops status changes
/// from anyone but KubeVirt's own accounts, its VMI update validator takes them from
/// virt-handler only for VMIs on the node its token names, and upstream's RBAC applies. The token
/// is bound to [`handler_pod`], so the API server puts the pod's node in it, as for the
/// DaemonSet's pod on a real node.
async fn handler_client(ctx: &SimContext) -> Result<kube::Client, Error> {
    use k8s_openapi::api::authentication::v1::{
        BoundObjectReference, TokenRequest, TokenRequestSpec,
    };
    use k8s_openapi::api::core::v1::ServiceAccount;
    let namespace = crate::platform::KUBEVIRT_NAMESPACE;
    let pod = handler_pod(ctx).await?;
    let request = TokenRequest {
        spec: Some(TokenRequestSpec {
            expiration_seconds: Some(24 * 3600),
            bound_object_ref: Some(BoundObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                uid: pod.metadata.uid.clone(),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let token = kube::Api::<ServiceAccount>::namespaced(ctx.client.clone(), namespace)
        .create_token_request(HANDLER_ACCOUNT, &Default::default(), &request)
        .await?
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| Error::Other(format!("no token for {namespace}/{HANDLER_ACCOUNT}")))?;
    let error = |e: &dyn std::fmt::Display| {
        Error::Other(format!("{}: {e}", ctx.options.kubeconfig.display()))
    };
    let kubeconfig =
        kube::config::Kubeconfig::read_from(&ctx.options.kubeconfig).map_err(|e| error(&e))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| error(&e))?;
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.into()),
        ..Default::default()
    };
    Ok(kube::Client::try_from(config)?)
}

/// The virt-handler pod of this node (what virt-operator's DaemonSet would run here), created
/// once and kept: bound to the node, labelled `kubevirt.io=virt-handler` (virt-controller's node
/// controller looks for it), running as [`HANDLER_ACCOUNT`]. Its image is not ours, so the
/// kubelet simulation leaves it alone; its status says Running, as the kubelet would.
async fn handler_pod(ctx: &SimContext) -> Result<k8s_openapi::api::core::v1::Pod, Error> {
    use k8s_openapi::api::core::v1::Pod;
    let namespace = crate::platform::KUBEVIRT_NAMESPACE;
    let name = format!("virt-handler-{}", ctx.options.node_name);
    let pods: kube::Api<Pod> = kube::Api::namespaced(ctx.client.clone(), namespace);
    let pod = match pods.get_opt(&name).await? {
        Some(pod) => pod,
        None => {
            let pod: Pod = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": namespace,
                             "labels": {"kubevirt.io": "virt-handler"}},
                "spec": {
                    "nodeName": ctx.options.node_name,
                    "serviceAccountName": HANDLER_ACCOUNT,
                    "containers": [{"name": "virt-handler",
                                    "image": format!("quay.io/kubevirt/virt-handler:{}", testenv::KUBEVIRT_VERSION)}],
                },
            }))
            .map_err(|e| Error::Other(format!("virt-handler pod: {e}")))?;
            pods.create(&Default::default(), &pod).await?
        }
    };
    let running = json!({"status": {"phase": "Running", "hostIP": crate::kubelet::NODE_IP.to_string(),
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(
        &name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(running),
    )
    .await?;
    Ok(pod)
}

/// What the controllers share: the simulation context and what this process knows that the API
/// server does not.
pub(crate) struct Shared {
    ctx: Arc<SimContext>,
    /// Acts as virt-handler ([`handler_client`]).
    handler: kube::Client,
    guests: Guests,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// How guests ended, by VMI UID.
    exits: HashMap<String, Exit>,
    /// When this process first saw a VMI Scheduled, by VMI UID.
    scheduled_at: HashMap<String, Instant>,
    /// VMI UID → (namespace, name), for guest exits.
    vmi_names: HashMap<String, (String, String)>,
    /// One lock per VMI (`namespace/name`), so a VMI is handled by one task at a time.
    vmi_locks: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// IPs handed to launcher pods, by pod UID.
    pod_ips: HashMap<String, Ipv4Addr>,
}

impl Shared {
    fn new(ctx: Arc<SimContext>, handler: kube::Client) -> Self {
        Self {
            guests: Guests::new(ctx.clone()),
            ctx,
            handler,
            state: Mutex::default(),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Plain maps, consistent after any panic in between.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn vmi_lock(&self, namespace: &str, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.state()
            .vmi_locks
            .entry(format!("{namespace}/{name}"))
            .or_default()
            .clone()
    }

    fn remember_vmi(&self, uid: &str, namespace: &str, name: &str) {
        self.state()
            .vmi_names
            .entry(uid.to_owned())
            .or_insert_with(|| (namespace.to_owned(), name.to_owned()));
    }

    fn vmi_name(&self, uid: &str) -> Option<(String, String)> {
        self.state().vmi_names.get(uid).cloned()
    }

    fn forget_vmi(&self, namespace: &str, name: &str) {
        let mut state = self.state();
        let key = (namespace.to_owned(), name.to_owned());
        let uids: Vec<String> = state
            .vmi_names
            .iter()
            .filter(|(_, v)| **v == key)
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in uids {
            state.vmi_names.remove(&uid);
            state.exits.remove(&uid);
            state.scheduled_at.remove(&uid);
        }
    }

    fn forget_guest(&self, uid: &str) {
        let mut state = self.state();
        state.exits.remove(uid);
        state.scheduled_at.remove(uid);
    }

    /// Powers the guest off (ACPI) and records that it did, as `exit`.
    async fn shutdown_guest(&self, uid: &str, exit: Exit) {
        if self.guests.shutdown(uid).await {
            self.record_exit(uid, exit);
        }
    }

    fn record_exit(&self, uid: &str, exit: Exit) {
        self.state().exits.insert(uid.to_owned(), exit);
    }

    fn guest_view(&self, uid: &str) -> GuestView {
        if self.guests.is_running(uid) {
            return GuestView::Running;
        }
        match self.state().exits.get(uid) {
            Some(exit) => GuestView::Exited(exit.clone()),
            None => GuestView::Absent,
        }
    }

    fn mark_scheduled(&self, uid: &str) {
        self.state()
            .scheduled_at
            .entry(uid.to_owned())
            .or_insert_with(Instant::now);
    }

    /// Time left before the guest of a Scheduled VMI may start (`Timings.vm_start` after it was
    /// scheduled; from the status timestamp when this process did not schedule it).
    fn start_remaining(&self, vmi: &VirtualMachineInstance) -> Duration {
        let vm_start = self.ctx.options.timings.vm_start;
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        let elapsed = match self.state().scheduled_at.get(&uid) {
            Some(at) => at.elapsed(),
            None => vmi
                .phase_entered(VmiPhase::Scheduled)
                .and_then(|t| Duration::try_from(t.0.duration_until(Timestamp::now())).ok())
                .unwrap_or(vm_start),
        };
        vm_start.saturating_sub(elapsed)
    }

    /// The IP of launcher pod `pod_uid`, allocated on first use.
    fn pod_ip(&self, pod_uid: &str) -> Ipv4Addr {
        let mut state = self.state();
        *state
            .pod_ips
            .entry(pod_uid.to_owned())
            .or_insert_with(|| self.ctx.network.allocate())
    }

    /// Takes over the address of a launcher pod an earlier simulation ran (reserved at start),
    /// so its deletion releases it like any other.
    fn adopt_pod_ip(&self, pod_uid: &str, ip: Ipv4Addr) {
        self.state().pod_ips.entry(pod_uid.to_owned()).or_insert(ip);
    }

    fn release_pod_ip(&self, pod_uid: &str) {
        if let Some(ip) = self.state().pod_ips.remove(pod_uid) {
            self.ctx.network.release(ip);
        }
    }
}

/// Now, to the second (what a `Time` keeps), so comparisons with stored times hold.
pub(crate) fn now() -> Time {
    let now = Timestamp::now();
    Time(Timestamp::from_second(now.as_second()).unwrap_or(now))
}

pub(crate) fn is_not_found(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 404)
}

pub(crate) fn is_conflict(err: &kube::Error) -> bool {
    matches!(err, kube::Error::Api(status) if status.code == 409)
}

/// Retry soon after a conflict (someone changed the object meanwhile), later after anything else.
pub(crate) fn error_policy<K>(_object: Arc<K>, err: &Error, _shared: Arc<Shared>) -> Action {
    match err {
        Error::Kube(err) if is_conflict(err) => Action::requeue(Duration::from_millis(50)),
        err => {
            tracing::debug!("simulated KubeVirt will retry: {err}");
            Action::requeue(Duration::from_millis(500))
        }
    }
}
