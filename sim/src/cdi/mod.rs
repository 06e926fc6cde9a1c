//! CDI's worker pods on the simulated node. CDI's control plane is upstream's own
//! (`testenv::ControlPlane::cdi_controller`: cdi-controller v1.65.0 renders every DataVolume's
//! PVC, creates the worker pods and reports DataVolume status from them); the simulation plays
//! only what would run in those pods' containers, found by their images:
//!
//! | pod (container image) | what the simulation does with the pod's volume |
//! |---|---|
//! | importer (`cdi-importer`) | `IMPORTER_SOURCE` `none`: a sparse blank image; `http`: downloads `IMPORTER_ENDPOINT`, converts qcow2 to raw, fits it into the volume |
//! | upload server (`cdi-uploadserver`), a host-assisted clone's target | waits for its clone source, then ends `Clone Complete` |
//! | clone source (`cdi-cloner`) | copies its volume (sparse) into the upload server's named by `UPLOAD_URL`, grown to fill it |
//!
//! Each container ends as CDI's does: exit 0 with its JSON or text termination message, or
//! exit 1 with the error text, restarted by the kubelet (`restartPolicy: OnFailure`) with
//! CrashLoopBackOff's doubling delay. Sources: containerized-data-importer v1.65.0
//! `cmd/cdi-importer/importer.go`, `cmd/cdi-uploadserver/uploadserver.go`,
//! `cmd/cdi-cloner/clone-source.go`, `pkg/importer/data-processor.go`, `pkg/util/util.go`
//! (`GetUsableSpace`); the kubelet's restart backoff: kubernetes v1.34
//! `pkg/kubelet/kubelet.go` (`backOffPeriod` 10 s, `MaxContainerBackOff` 300 s).
//!
//! Binding, running other pods and finishing deletions stay the kubelet's (`sim::kubelet`
//! leaves these pods alone but deletes them at once when asked); the volumes are
//! `sim::volumes`'.

mod container;
pub mod data;
mod importer;
mod pod;
mod transfer;

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};

use super::{Error, SimContext};

/// The kind of CDI worker a pod is, by its first container's image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Worker {
    Importer,
    UploadServer,
    CloneSource,
}

impl Worker {
    /// CDI names its images `cdi-importer`, `cdi-uploadserver` and `cdi-cloner` (upstream,
    /// `quay.io/kubevirt/cdi-*`) or `virt-cdi-*-rhel9` (OpenShift Virtualization): the
    /// repository's last path segment, without tag, digest or RHEL suffix, ends with the name.
    pub fn of(pod: &Pod) -> Option<Self> {
        let image = pod.spec.as_ref()?.containers.first()?.image.as_deref()?;
        let repository = image.split(['@']).next()?;
        let last = repository.rsplit('/').next()?;
        let mut name = last.split(':').next()?;
        if let Some((base, release)) = name.rsplit_once("-rhel")
            && !release.is_empty()
            && release.chars().all(|c| c.is_ascii_digit())
        {
            name = base;
        }
        if name.ends_with("cdi-importer") {
            Some(Self::Importer)
        } else if name.ends_with("cdi-uploadserver") {
            Some(Self::UploadServer)
        } else if name.ends_with("cdi-cloner") {
            Some(Self::CloneSource)
        } else {
            None
        }
    }
}

/// Whether `pod` is a CDI worker pod (played here, not by the kubelet).
pub fn is_worker_pod(pod: &Pod) -> bool {
    Worker::of(pod).is_some()
}

/// What every pod's player reads: the cluster, the volumes, and the upload servers waiting for
/// their clone sources.
pub(crate) struct Shared {
    pub ctx: Arc<SimContext>,
    pub uploads: transfer::Uploads,
}

/// Plays every CDI worker pod bound to the node until the pod watch ends.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    let (pods, writer) = reflector::store::<Pod>();
    let events = reflector::reflector(
        writer,
        watcher(
            Api::<Pod>::all(ctx.client.clone()),
            watcher::Config::default(),
        ),
    )
    .default_backoff();
    let shared = Arc::new(Shared {
        ctx,
        uploads: transfer::Uploads::default(),
    });
    let mut players = Players::default();
    let mut listed = false;
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        listed |= matches!(event, Ok(watcher::Event::InitDone));
        if listed {
            players.sync(&shared, &pods);
        }
    }
    Err(Error::Other("the CDI worker pod watch ended".into()))
}

/// One task per worker pod UID, until the pod ends, is being deleted or is gone.
#[derive(Default)]
struct Players {
    tasks: HashMap<String, tokio::task::JoinHandle<()>>,
}

impl Players {
    fn sync(&mut self, shared: &Arc<Shared>, pods: &Store<Pod>) {
        let node = shared.ctx.options.node_name.as_str();
        let mut live = Vec::new();
        for pod in pods.state() {
            let Some(uid) = pod.uid() else { continue };
            let ours = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
            let Some(worker) = Worker::of(&pod).filter(|_| ours) else {
                continue;
            };
            if pod.metadata.deletion_timestamp.is_some() || pod::is_terminal(&pod) {
                continue;
            }
            live.push(uid.clone());
            self.tasks
                .entry(uid)
                .or_insert_with(|| tokio::spawn(pod::play(shared.clone(), (*pod).clone(), worker)));
        }
        // Deleted or gone: the container is killed (an unfinished copy is left as it was).
        self.tasks.retain(|uid, task| {
            let keep = live.contains(uid);
            if !keep {
                task.abort();
            }
            keep
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(image: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": image}]},
        }))
        .unwrap()
    }

    #[test]
    fn workers_are_known_by_upstreams_and_openshift_virtualizations_images() {
        for (image, worker) in [
            (
                "quay.io/kubevirt/cdi-importer:v1.65.0",
                Some(Worker::Importer),
            ),
            (
                "quay.io/kubevirt/cdi-uploadserver:v1.65.0",
                Some(Worker::UploadServer),
            ),
            (
                "quay.io/kubevirt/cdi-cloner:v1.65.0",
                Some(Worker::CloneSource),
            ),
            (
                "registry.redhat.io/container-native-virtualization/virt-cdi-importer-rhel9@sha256:00",
                Some(Worker::Importer),
            ),
            (
                "registry.redhat.io/container-native-virtualization/virt-cdi-cloner-rhel9:v4.19",
                Some(Worker::CloneSource),
            ),
            ("quay.io/kubevirt/cdi-controller:v1.65.0", None),
            ("registry.invalid/guestcluster:dev", None),
        ] {
            assert_eq!(Worker::of(&pod(image)), worker, "{image}");
        }
    }
}
