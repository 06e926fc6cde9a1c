//! Simulated KubeVirt: VirtualMachines, VirtualMachineInstances and virt-launcher pods, against
//! the real API server. See `docs/simulation.md` ("KubeVirt") for what is and is not modelled.
//!
//! Three level-triggered controllers (kube-runtime `Controller`s), each re-reading the objects it
//! acts on and deciding with the pure functions of [`decide`]:
//!
//! - [`vm`]: run strategies → a VMI per start (new UID each time), VM status.
//! - [`vmi`]: a VMI's phases, its virt-launcher pod, booting and stopping its guest through
//!   [`guests`], the `foregroundDeleteVirtualMachine` finalizer held until the pod is gone.
//! - [`launcher`]: the kubelet's part for launcher pods (the kubelet simulation only binds them):
//!   an IP from `ctx.network` and `Running`; on deletion, guest power-off, then the pod goes.
//!
//! What lives only in this process: which guests it booted and how they ended, and the IPs it
//! handed out. After a restart of the simulation a Running VMI has no guest here and is treated
//! as crashed (Failed), and its VM's run strategy decides what follows; the addresses old pods
//! and VMIs still show were reserved at start (`network::reserve_existing`), and a launcher pod's
//! is adopted so that its deletion releases it.

pub mod decide;
pub mod defaults;
pub mod guests;
pub mod launcher;
pub mod storage;
pub mod vm;
pub mod vmi;

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use serde::Serialize;
use serde_json::{Map, Value, json};

use self::decide::{Exit, GuestView};
use self::guests::Guests;
use super::{Error, SimContext};
use guestcluster::kubevirt::{VirtualMachineInstance, VmiPhase};

/// Runs the simulated KubeVirt until the task is aborted.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    let shared = Arc::new(Shared::new(ctx));
    // Subscribed before anything can boot, so no exit is missed.
    let exits = shared.guests.subscribe_exits();
    tokio::join!(
        vm::run(shared.clone()),
        vmi::run(shared.clone()),
        launcher::run(shared.clone()),
        vmi::watch_exits(shared.clone(), exits),
    );
    Err(Error::Other(
        "the simulated KubeVirt controllers stopped".into(),
    ))
}

/// What the controllers share: the simulation context and what this process knows that the API
/// server does not.
pub(crate) struct Shared {
    ctx: Arc<SimContext>,
    guests: Guests,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// How guests ended, by VMI UID.
    exits: HashMap<String, Exit>,
    /// When this process marked a VMI Scheduled, by VMI UID.
    scheduled_at: HashMap<String, Instant>,
    /// VMI UID → (namespace, name), for guest exits.
    vmi_names: HashMap<String, (String, String)>,
    /// One lock per VMI (`namespace/name`), so a VMI is handled by one task at a time.
    vmi_locks: HashMap<String, Arc<tokio::sync::Mutex<()>>>,
    /// IPs handed to launcher pods, by pod UID.
    pod_ips: HashMap<String, Ipv4Addr>,
}

impl Shared {
    fn new(ctx: Arc<SimContext>) -> Self {
        Self {
            guests: Guests::new(ctx.clone()),
            ctx,
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

    /// Powers the guest off (ACPI) and records that it did.
    async fn shutdown_guest(&self, uid: &str) {
        if self.guests.shutdown(uid).await {
            self.record_exit(uid, Exit::PoweredOff);
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

/// A JSON merge patch turning status `old` into `new`, guarded by `resource_version`; `None`
/// when they serialize the same. Top-level status fields absent from `new` are removed.
pub(crate) fn merge_status_patch<S: Serialize>(
    old: &S,
    new: &S,
    resource_version: Option<String>,
) -> Result<Option<Value>, Error> {
    let to_value = |s: &S| {
        serde_json::to_value(s).map_err(|err| Error::Other(format!("serializing a status: {err}")))
    };
    let (old, new) = (to_value(old)?, to_value(new)?);
    if old == new {
        return Ok(None);
    }
    let mut status: Map<String, Value> = new.as_object().cloned().unwrap_or_default();
    for key in old.as_object().into_iter().flat_map(|o| o.keys()) {
        status.entry(key.clone()).or_insert(Value::Null);
    }
    let mut patch = json!({ "status": status });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    Ok(Some(patch))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_status_patch_removes_dropped_fields_and_carries_the_version() {
        let old = json!({"phase": "Running", "reason": "x"});
        let new = json!({"phase": "Failed"});
        let patch = merge_status_patch(&old, &new, Some("42".into()))
            .unwrap()
            .unwrap();
        assert_eq!(
            patch,
            json!({"status": {"phase": "Failed", "reason": null},
                   "metadata": {"resourceVersion": "42"}})
        );
        assert_eq!(merge_status_patch(&new, &new, None).unwrap(), None);
    }
}
