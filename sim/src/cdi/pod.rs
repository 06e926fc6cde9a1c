//! One worker pod's life on the node: its container started, run (the worker's data work),
//! ended with its termination message, and restarted after a failure as the kubelet restarts
//! an `OnFailure` container: the failed state first, then CrashLoopBackOff with the doubling
//! delay, then running again with the restart counted.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};
use serde_json::Value;

use super::container::{Target, data_claim};
use super::data::Failure;
use super::{Shared, Worker, importer, transfer};
use crate::kubelet::{self, NODE_IP, status};
use crate::quantity::parse_quantity;
use crate::volumes::{self, VolumeMode};

/// The kubelet's first restart delay and its cap (`backOffPeriod`, `MaxContainerBackOff`).
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// How long a failed container shows `terminated` before CrashLoopBackOff.
const SHOWN_TERMINATED: Duration = Duration::from_secs(1);
/// How often a container that waits for its volume looks again.
const VOLUME_POLL: Duration = Duration::from_millis(500);

/// Whether the pod reached `Succeeded` or `Failed`.
pub fn is_terminal(pod: &Pod) -> bool {
    status::is_terminal(pod)
}

/// The data volume of `pod` once its claim is bound and provisioned; a real container does not
/// start before its volume is mounted either.
async fn data_volume(shared: &Shared, pod: &Pod) -> Result<Target, Failure> {
    let namespace = pod.namespace().unwrap_or_default();
    let claim = data_claim(pod)
        .ok_or_else(|| Failure::processing("the pod has no cdi-data-vol claim"))?
        .to_owned();
    let api = Api::<PersistentVolumeClaim>::namespaced(shared.ctx.client.clone(), &namespace);
    loop {
        if let Ok(Some(pvc)) = api.get_opt(&claim).await
            && let Some(uid) = volumes::bound_uid(&pvc)
        {
            let volume = shared.ctx.volumes.volume(&uid, VolumeMode::of(&pvc));
            let capacity = claim_bytes(&pvc);
            if let Some(capacity) = capacity.filter(|_| volume.dir.is_dir()) {
                return Ok(Target { volume, capacity });
            }
        }
        tokio::time::sleep(VOLUME_POLL).await;
    }
}

fn claim_bytes(pvc: &PersistentVolumeClaim) -> Option<u64> {
    let capacity = pvc
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"));
    let request = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    capacity.or(request).and_then(|q| parse_quantity(&q.0))
}

/// Plays `pod` as `worker` until its container ends well (or the task is aborted: the pod is
/// being deleted or gone).
pub async fn play(shared: Arc<Shared>, pod: Pod, worker: Worker) {
    let client = shared.ctx.client.clone();
    let ip = shared.ctx.network.allocate();
    let _release = Release(&shared, ip);
    kubelet::patch_status(
        &client,
        &pod,
        status::accepted(&pod, NODE_IP, Timestamp::now()),
    )
    .await;
    let mut restarts = restart_count(&pod);
    let mut backoff = FIRST_BACKOFF;
    loop {
        // A container starts once its volume is mounted; an upload server listens as it starts.
        let on_volume = data_volume(&shared, &pod)
            .await
            .map(|target| Container::start(&shared, &pod, worker, target));
        let started = Timestamp::now();
        let running = status::running(&pod, ip, started, Timestamp::now());
        kubelet::patch_status(&client, &pod, with_restarts(running, restarts, None)).await;
        let outcome = match on_volume {
            Ok(Container::Importer(target)) => importer::run(&shared, &pod, &target).await,
            Ok(Container::UploadServer(listening)) => transfer::serve(listening).await,
            Ok(Container::CloneSource(target)) => transfer::send(&shared, &pod, &target).await,
            Err(failure) => Err(failure),
        };
        let (code, message) = match &outcome {
            Ok(message) => (0, message.clone()),
            Err(failure) => (1, failure.message.clone()),
        };
        if code != 0 {
            tracing::info!(pod = %key(&pod), "sim cdi: {worker:?} failed: {message}");
        }
        let ended = status::Terminated {
            message: Some(message),
            ..status::Terminated::exited(&container(&pod), code, started, Timestamp::now())
        };
        let mut terminated =
            status::terminated(&pod, std::slice::from_ref(&ended), Timestamp::now());
        if code == 0 {
            kubelet::patch_status(&client, &pod, with_restarts(terminated, restarts, None)).await;
            return;
        }
        // OnFailure: the pod stays Running while its container is restarted.
        terminated["status"]["phase"] = "Running".into();
        let last = terminated["status"]["containerStatuses"][0]["state"].clone();
        kubelet::patch_status(&client, &pod, with_restarts(terminated, restarts, None)).await;
        tokio::time::sleep(SHOWN_TERMINATED).await;
        let waiting = crash_loop(&pod, backoff);
        kubelet::patch_status(&client, &pod, with_restarts(waiting, restarts, Some(last))).await;
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
        restarts += 1;
    }
}

/// A worker's container, started on its volume.
enum Container<'a> {
    Importer(Target),
    UploadServer(transfer::Listening<'a>),
    CloneSource(Target),
}

impl<'a> Container<'a> {
    fn start(shared: &'a Shared, pod: &Pod, worker: Worker, target: Target) -> Self {
        match worker {
            Worker::Importer => Self::Importer(target),
            Worker::UploadServer => Self::UploadServer(transfer::listen(shared, pod, &target)),
            Worker::CloneSource => Self::CloneSource(target),
        }
    }
}

/// Frees the pod's address when its player ends or is aborted.
struct Release<'a>(&'a Shared, std::net::Ipv4Addr);

impl Drop for Release<'_> {
    fn drop(&mut self) {
        self.0.ctx.network.release(self.1);
    }
}

fn key(pod: &Pod) -> String {
    format!("{}/{}", pod.namespace().unwrap_or_default(), pod.name_any())
}

fn container(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .map(|c| c.name.clone())
        .unwrap_or_default()
}

fn restart_count(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

/// A status patch with the first container's restart count (and its last state).
fn with_restarts(mut patch: Value, restarts: i32, last: Option<Value>) -> Value {
    if let Some(first) = patch["status"]["containerStatuses"].get_mut(0) {
        first["restartCount"] = restarts.into();
        if let Some(last) = last {
            first["lastState"] = last;
        }
    }
    patch
}

/// The container waits out its restart delay.
fn crash_loop(pod: &Pod, backoff: Duration) -> Value {
    let message = format!(
        "back-off {}s restarting failed container={} pod={}",
        backoff.as_secs(),
        container(pod),
        pod.name_any()
    );
    let mut waiting = status::waiting(pod, "CrashLoopBackOff", Some(&message), Timestamp::now());
    waiting["status"]["phase"] = "Running".into();
    waiting
}
