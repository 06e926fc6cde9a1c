//! The pod loop: level-triggered from the pod watch (and a periodic resync over its store), it
//! binds unbound pods, starts one worker per pod it runs, forwards deletions to the workers, and
//! releases a pod's IP when the pod object is gone.
//!
//! A worker owns its pod until the object is gone: it prepares the sandbox, runs the processes,
//! writes the status, and once the pod is being deleted stops the processes and finishes the
//! deletion (grace period 0). Keeping the worker until the object is gone means a stale watch
//! event can never make the loop treat a pod it ran as one it lost.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::{AbortHandle, JoinSet};

use super::status;
use super::{is_launcher_pod, runs_pod};
use crate::{Error, Options, SimContext};

/// How often every pod is reconciled without an event (retries of failed calls and of pods
/// waiting for a Secret or a claim).
const RESYNC: Duration = Duration::from_secs(2);
/// The API default when a deleted pod carries no grace period.
pub(super) const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// `None` while the pod runs; `Some(grace)` once it is being deleted.
pub(super) type Control = Option<Duration>;

struct Entry {
    ip: Ipv4Addr,
    control: watch::Sender<Control>,
    worker: AbortHandle,
}

struct Kubelet {
    ctx: Arc<SimContext>,
    tools_bin: PathBuf,
    /// Pods this kubelet runs, by UID, until the object is gone.
    pods: HashMap<String, Entry>,
    /// Dropping it (the kubelet task aborted) aborts every worker, which kills its processes.
    workers: JoinSet<()>,
}

pub async fn run(ctx: Arc<SimContext>, tools_bin: PathBuf) -> Result<(), Error> {
    let api: Api<Pod> = Api::all(ctx.client.clone());
    let (store, writer) = reflector::store();
    let mut events = pin!(
        watcher(api, watcher::Config::default())
            .default_backoff()
            .reflect(writer)
    );
    let mut kubelet = Kubelet {
        ctx,
        tools_bin,
        pods: HashMap::new(),
        workers: JoinSet::new(),
    };
    let mut resync = tokio::time::interval(RESYNC);
    resync.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut listed = false;
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod))) => {
                    kubelet.reconcile(&pod).await;
                }
                Some(Ok(watcher::Event::Delete(pod))) => kubelet.forget(&pod.uid().unwrap_or_default()),
                Some(Ok(watcher::Event::InitDone)) => {
                    listed = true;
                    kubelet.forget_missing(&store);
                }
                Some(Ok(watcher::Event::Init)) => {}
                Some(Err(err)) => tracing::warn!("pod watch: {err}"),
                None => return Err(Error::Other("the pod watch ended".into())),
            },
            _ = resync.tick(), if listed => {
                for pod in store.state() {
                    kubelet.reconcile(&pod).await;
                }
                kubelet.forget_missing(&store);
            }
            Some(joined) = kubelet.workers.join_next() => {
                if let Err(err) = joined
                    && err.is_panic()
                {
                    tracing::error!("a pod worker panicked: {err}");
                }
            }
        }
    }
}

fn grace_period(pod: &Pod) -> Duration {
    pod.metadata
        .deletion_grace_period_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(DEFAULT_GRACE, Duration::from_secs)
}

/// Whether the default scheduler would consider the pod (we are it).
fn wants_scheduling(pod: &Pod) -> bool {
    let Some(spec) = &pod.spec else { return false };
    let unbound = spec.node_name.as_deref().unwrap_or_default().is_empty();
    let ours = spec
        .scheduler_name
        .as_deref()
        .is_none_or(|s| s == "default-scheduler");
    let gated = spec
        .scheduling_gates
        .as_ref()
        .is_some_and(|g| !g.is_empty());
    unbound && ours && !gated && pod.metadata.deletion_timestamp.is_none()
}

/// What the kubelet does about one pod, given whether it already runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Nothing,
    /// Unbound: bind it to our node.
    Bind,
    /// Start a worker (sandbox, processes, status).
    Start,
    /// Ours and running here, being deleted: stop it within the grace period.
    Stop(Duration),
    /// Being deleted and nothing of it runs here: remove the object now.
    DeleteNow,
    /// A previous kubelet started it and its process is gone.
    MarkLost,
}

/// The level-triggered decision for one pod (see the module doc and docs/simulation.md).
fn decide(pod: &Pod, options: &Options, running_here: bool) -> Action {
    if wants_scheduling(pod) {
        return Action::Bind;
    }
    let node = pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
    if node != Some(options.node_name.as_str()) || is_launcher_pod(pod) {
        return Action::Nothing;
    }
    let deleting = pod.metadata.deletion_timestamp.is_some();
    match (running_here, deleting) {
        (true, true) => Action::Stop(grace_period(pod)),
        (true, false) => Action::Nothing,
        (false, true) => Action::DeleteNow,
        (false, false) if !runs_pod(options, pod) || status::is_terminal(pod) => Action::Nothing,
        (false, false) if status::was_started(pod) => Action::MarkLost,
        (false, false) => Action::Start,
    }
}

impl Kubelet {
    async fn reconcile(&mut self, pod: &Pod) {
        let Some(uid) = pod.uid() else { return };
        let entry = self.pods.get(&uid);
        match decide(pod, &self.ctx.options, entry.is_some()) {
            Action::Nothing => {}
            Action::Bind => bind(&self.ctx, pod).await,
            Action::Start => self.start(pod, uid),
            Action::Stop(grace) => {
                if let Some(entry) = entry {
                    entry.control.send_if_modified(|c| {
                        let changed = c.is_none();
                        c.get_or_insert(grace);
                        changed
                    });
                }
            }
            Action::DeleteNow => delete_now(&self.ctx.client, pod).await,
            Action::MarkLost => {
                tracing::info!(pod = %pod_key(pod), "marking a pod started by a previous kubelet failed");
                patch_status(&self.ctx.client, pod, status::lost(pod, Timestamp::now())).await;
            }
        }
    }

    fn start(&mut self, pod: &Pod, uid: String) {
        let ip = self.ctx.network.allocate();
        let (control, receiver) = watch::channel(None);
        let worker = super::worker::Worker {
            ctx: self.ctx.clone(),
            tools_bin: self.tools_bin.clone(),
            pod: pod.clone(),
            ip,
        };
        let worker = self.workers.spawn(worker.run(receiver));
        self.pods.insert(
            uid,
            Entry {
                ip,
                control,
                worker,
            },
        );
    }

    /// The pod object is gone: stop its worker (killing anything still running) and free its IP.
    fn forget(&mut self, uid: &str) {
        if let Some(entry) = self.pods.remove(uid) {
            entry.worker.abort();
            self.ctx.network.release(entry.ip);
        }
    }

    fn forget_missing(&mut self, store: &Store<Pod>) {
        let present: HashSet<String> = store.state().iter().filter_map(|p| p.uid()).collect();
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|uid| !present.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            self.forget(&uid);
        }
    }
}

pub(super) fn pod_key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn pods_api(client: &Client, pod: &Pod) -> Api<Pod> {
    Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default())
}

/// Binds the pod to our node through `pods/binding`, as the scheduler does, and records the
/// placement it did not check in the `Scheduled` event.
async fn bind(ctx: &SimContext, pod: &Pod) {
    let node = &ctx.options.node_name;
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": { "name": pod.name_any() },
        "target": { "apiVersion": "v1", "kind": "Node", "name": node },
    });
    let api = pods_api(&ctx.client, pod);
    let bound = api
        .create_subresource::<Value, Value>(
            "binding",
            &pod.name_any(),
            &PostParams::default(),
            &binding,
        )
        .await;
    match bound {
        Ok(_) => {
            tracing::debug!(pod = %pod_key(pod), %node, "bound");
            record_scheduled(&ctx.client, pod, node).await;
        }
        // Already bound (by us on an earlier event) or gone.
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {}
        Err(err) => tracing::warn!(pod = %pod_key(pod), "binding failed: {err}"),
    }
}

/// What the simulated scheduler ignored, for a person reading `kubectl describe pod`.
fn unenforced_placement(pod: &Pod) -> String {
    let spec = pod.spec.as_ref();
    let selector = spec
        .and_then(|s| s.node_selector.clone())
        .unwrap_or_default();
    let tolerations = spec
        .and_then(|s| s.tolerations.as_ref())
        .map_or(0, Vec::len);
    let affinity = spec.is_some_and(|s| s.affinity.is_some());
    format!(
        "not enforced by the simulated scheduler: nodeSelector {selector:?}, {tolerations} \
         toleration(s), affinity {}",
        if affinity { "set" } else { "unset" }
    )
}

async fn record_scheduled(client: &Client, pod: &Pod, node: &str) {
    let message = format!(
        "Successfully assigned {} to {node} ({})",
        pod_key(pod),
        unenforced_placement(pod)
    );
    record_event(
        client,
        pod,
        ("Normal", "Scheduled"),
        &message,
        "default-scheduler",
    )
    .await;
}

/// Records an Event about `pod` as `component` (`(type, reason)`); failures are only logged.
pub(super) async fn record_event(
    client: &Client,
    pod: &Pod,
    (type_, reason): (&str, &str),
    message: &str,
    component: &str,
) {
    let now = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::now(),
    ))
    .unwrap_or(Value::Null);
    let event = json!({
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": { "generateName": format!("{}.", pod.name_any()) },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "namespace": pod.namespace(),
            "name": pod.name_any(),
            "uid": pod.uid(),
        },
        "reason": reason,
        "message": message,
        "type": type_,
        "source": { "component": component },
        "reportingComponent": component,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let events: Api<k8s_openapi::api::core::v1::Event> =
        Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let created = match serde_json::from_value(event) {
        Ok(event) => events.create(&PostParams::default(), &event).await.err(),
        Err(err) => Some(kube::Error::SerdeError(err)),
    };
    if let Some(err) = created {
        tracing::debug!(pod = %pod_key(pod), "{reason} event not recorded: {err}");
    }
}

/// Writes a status patch, retrying server errors until it lands or the pod is gone.
pub(crate) async fn patch_status(client: &Client, pod: &Pod, patch: Value) {
    let api = pods_api(client, pod);
    let mut delay = Duration::from_millis(100);
    loop {
        let result = api
            .patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(patch.clone()),
            )
            .await;
        match result {
            Ok(_) => return,
            Err(kube::Error::Api(e)) if e.code == 404 => return,
            Err(kube::Error::Api(e)) if (400..500).contains(&e.code) && e.code != 429 => {
                return tracing::error!(pod = %pod_key(pod), "status patch rejected: {e}");
            }
            Err(err) => tracing::warn!(pod = %pod_key(pod), "status patch failed, retrying: {err}"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

/// Removes the pod object now (grace period 0): what a kubelet does once the containers are
/// stopped, and what lets the API server delete a pod bound to a node.
pub(super) async fn delete_now(client: &Client, pod: &Pod) {
    let api = pods_api(client, pod);
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let mut delay = Duration::from_millis(100);
    loop {
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => return,
            // Gone, or replaced by a pod of the same name (the UID precondition failed).
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => return,
            Err(err) => tracing::warn!(pod = %pod_key(pod), "pod deletion failed, retrying: {err}"),
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> Options {
        Options {
            root: PathBuf::from("/sim"),
            timings: crate::Timings::fast(),
            kubeconfig: PathBuf::from("/sim/kubeconfig"),
            guestcluster_bin: PathBuf::from("/bin/guestcluster"),
            our_image_prefix: "quay.io/opdev/guestcluster".into(),
            node_name: "sim-node".into(),
            flavour: Default::default(),
        }
    }

    fn pod(image: &str, node: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u1" },
            "spec": {
                "nodeName": node,
                "containers": [{ "name": "main", "image": image }],
            },
        }))
        .expect("pod")
    }

    const OURS: &str = "quay.io/opdev/guestcluster:v1";

    fn deleting(mut pod: Pod, grace: i64) -> Pod {
        pod.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
        );
        pod.metadata.deletion_grace_period_seconds = Some(grace);
        pod
    }

    fn with_phase(mut pod: Pod, phase: &str, started: bool) -> Pod {
        let mut status = json!({ "phase": phase });
        if started {
            status["startTime"] = "2025-01-01T00:00:00Z".into();
        }
        pod.status = Some(serde_json::from_value(status).expect("status"));
        pod
    }

    #[test]
    fn unbound_pods_of_any_image_are_bound() {
        assert_eq!(decide(&pod(OURS, None), &options(), false), Action::Bind);
        assert_eq!(
            decide(&pod("busybox", None), &options(), false),
            Action::Bind
        );
        let mut gated = pod(OURS, None);
        if let Some(spec) = gated.spec.as_mut() {
            spec.scheduling_gates = Some(vec![
                serde_json::from_value(json!({"name": "g"})).expect("gate"),
            ]);
        }
        assert_eq!(decide(&gated, &options(), false), Action::Nothing);
        let mut other_scheduler = pod(OURS, None);
        if let Some(spec) = other_scheduler.spec.as_mut() {
            spec.scheduler_name = Some("custom".into());
        }
        assert_eq!(decide(&other_scheduler, &options(), false), Action::Nothing);
    }

    #[test]
    fn our_new_pods_start_and_others_are_left_alone() {
        let o = options();
        assert_eq!(
            decide(&pod(OURS, Some("sim-node")), &o, false),
            Action::Start
        );
        assert_eq!(
            decide(&pod(OURS, Some("other-node")), &o, false),
            Action::Nothing
        );
        assert_eq!(
            decide(&pod("busybox", Some("sim-node")), &o, false),
            Action::Nothing
        );
        assert_eq!(
            decide(&pod(OURS, Some("sim-node")), &o, true),
            Action::Nothing
        );
    }

    #[test]
    fn launcher_pods_are_only_bound() {
        let mut launcher = pod("quay.io/kubevirt/virt-launcher:v1", None);
        launcher.metadata.labels =
            Some([("kubevirt.io".to_string(), "virt-launcher".to_string())].into());
        assert_eq!(decide(&launcher, &options(), false), Action::Bind);
        if let Some(spec) = launcher.spec.as_mut() {
            spec.node_name = Some("sim-node".into());
        }
        assert_eq!(decide(&launcher, &options(), false), Action::Nothing);
        assert_eq!(
            decide(&deleting(launcher, 30), &options(), false),
            Action::Nothing
        );
    }

    #[test]
    fn deletion_stops_what_runs_and_finishes_the_rest_at_once() {
        let o = options();
        let ours = deleting(pod(OURS, Some("sim-node")), 5);
        assert_eq!(
            decide(&ours, &o, true),
            Action::Stop(Duration::from_secs(5))
        );
        assert_eq!(decide(&ours, &o, false), Action::DeleteNow);
        let foreign = deleting(pod("busybox", Some("sim-node")), 30);
        assert_eq!(decide(&foreign, &o, false), Action::DeleteNow);
    }

    #[test]
    fn pods_started_by_a_previous_kubelet_are_lost() {
        let o = options();
        let running = with_phase(pod(OURS, Some("sim-node")), "Running", true);
        assert_eq!(decide(&running, &o, false), Action::MarkLost);
        assert_eq!(decide(&running, &o, true), Action::Nothing);
        let accepted = with_phase(pod(OURS, Some("sim-node")), "Pending", true);
        assert_eq!(decide(&accepted, &o, false), Action::MarkLost);
        let done = with_phase(pod(OURS, Some("sim-node")), "Succeeded", true);
        assert_eq!(decide(&done, &o, false), Action::Nothing);
    }
}
