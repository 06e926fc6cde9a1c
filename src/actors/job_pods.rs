//! Why a running Job's pod has not started: the Job itself only counts an active pod, while the
//! pod's container states and the kubelet's or scheduler's Events say what holds it (a volume
//! in the wrong mode, an image that cannot be pulled, a Secret that is gone). The stage message
//! carries it, so a stuck build step is named instead of looking like a long wait.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::Api;
use kube::api::ListParams;

/// The label the Job controller puts on every pod it makes: the Job's UID.
pub const CONTROLLER_UID: &str = "batch.kubernetes.io/controller-uid";

/// The pods Job `job`'s controller made. They are selected by the Job's UID, not by the
/// `job-name` label, which any pod in the namespace can carry, and kept only when the Job is
/// their controller: a pod someone else made does not speak for the Job (its termination
/// message would become a condition).
pub async fn of(client: &kube::Client, ns: &str, job: &Job) -> Result<Vec<Pod>, kube::Error> {
    let Some(uid) = job.metadata.uid.as_deref().filter(|u| !u.is_empty()) else {
        return Ok(Vec::new());
    };
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("{CONTROLLER_UID}={uid}")))
        .await?
        .items;
    Ok(pods
        .into_iter()
        .filter(|pod| controlled_by(pod, uid))
        .collect())
}

/// Whether `pod`'s controller (owner reference with `controller: true`) has UID `uid`.
fn controlled_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|owner| owner.controller == Some(true) && owner.uid == uid)
}

/// Container waiting reasons that do not resolve by waiting.
pub const BLOCKED_WAITING: [&str; 7] = [
    "ImagePullBackOff",
    "ErrImagePull",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// Pod Events that say why it does not start (`FailedMount` carries the volume manager's
/// refusal of a Block claim in `volumeMounts`).
const BLOCKING_EVENTS: [&str; 4] = [
    "FailedMount",
    "FailedAttachVolume",
    "FailedScheduling",
    "FailedCreatePodSandBox",
];

/// What keeps the first pending pod of `pods` from starting, from its waiting containers or
/// the newest blocking Event about it; `None` when nothing does (or no pod is pending).
pub fn why_not_started(pods: &[Pod], events: &[Event]) -> Option<String> {
    pods.iter()
        .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
        .find_map(|pod| {
            let name = pod.metadata.name.as_deref().unwrap_or_default();
            let waiting = pod
                .status
                .iter()
                .flat_map(|s| {
                    s.init_container_statuses
                        .iter()
                        .flatten()
                        .chain(s.container_statuses.iter().flatten())
                })
                .filter_map(|c| c.state.as_ref()?.waiting.as_ref())
                .find(|w| {
                    w.reason
                        .as_deref()
                        .is_some_and(|r| BLOCKED_WAITING.contains(&r))
                });
            if let Some(waiting) = waiting {
                let reason = waiting.reason.as_deref().unwrap_or_default();
                let message = waiting.message.as_deref().unwrap_or_default();
                return Some(format!("pod {name} cannot start: {reason}: {message}"));
            }
            events
                .iter()
                .filter(|e| {
                    e.involved_object.kind.as_deref() == Some("Pod")
                        && e.involved_object.name.as_deref() == Some(name)
                        && e.reason
                            .as_deref()
                            .is_some_and(|r| BLOCKING_EVENTS.contains(&r))
                })
                .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0))
                .map(|e| {
                    format!(
                        "pod {name} cannot start: {}: {}",
                        e.reason.as_deref().unwrap_or_default(),
                        e.message.as_deref().unwrap_or_default()
                    )
                })
        })
}

/// [`why_not_started`] for the pods of Job `job` (see [`of`]): one list of its pods, and of
/// Events only when one of them is pending.
pub async fn blocker(
    client: &kube::Client,
    ns: &str,
    job: &Job,
) -> Result<Option<String>, kube::Error> {
    let pods = of(client, ns, job).await?;
    let pending = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending");
    let mut events = Vec::new();
    for pod in pods.iter().filter(|p| pending(p)) {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let selector = format!("involvedObject.kind=Pod,involvedObject.name={name}");
        events.extend(
            Api::<Event>::namespaced(client.clone(), ns)
                .list(&ListParams::default().fields(&selector))
                .await?
                .items,
        );
    }
    Ok(why_not_started(&pods, &events))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str, waiting: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"phase": phase, "containerStatuses": [{
                "name": "c", "image": "i", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": waiting},
            }]},
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_the_jobs_only_when_the_job_is_its_controller() {
        let owned = |uid: &str, controller: bool| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p", "ownerReferences": [{
                "apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": uid,
                "controller": controller,
            }]}}))
            .unwrap()
        };
        assert!(controlled_by(&owned("u1", true), "u1"));
        assert!(!controlled_by(&owned("u2", true), "u1"), "another Job's");
        assert!(
            !controlled_by(&owned("u1", false), "u1"),
            "owned, not controlled"
        );
        let bare: Pod = serde_json::from_value(json!({"metadata": {"name": "p"}})).unwrap();
        assert!(!controlled_by(&bare, "u1"));
    }

    fn event(pod: &str, reason: &str, message: &str) -> Event {
        serde_json::from_value(json!({
            "metadata": {"name": format!("{pod}.1")},
            "involvedObject": {"kind": "Pod", "name": pod},
            "reason": reason, "message": message,
        }))
        .unwrap()
    }

    const REFUSED: &str = "Unable to attach or mount volumes: unmounted volumes=[root], \
        unattached volumes=[root], failed to process volumes=[root]: volume root has volumeMode \
        Block, but is specified in volumeMounts";

    #[test]
    fn a_refused_volume_is_named_from_the_kubelets_event() {
        let pods = [pod(
            "disk-abc",
            "Pending",
            json!({"reason": "ContainerCreating"}),
        )];
        let events = [
            event("disk-abc", "Scheduled", "Successfully assigned"),
            event("disk-abc", "FailedMount", REFUSED),
            event("other", "FailedMount", "not this pod's"),
        ];
        assert_eq!(
            why_not_started(&pods, &events),
            Some(format!("pod disk-abc cannot start: FailedMount: {REFUSED}"))
        );
    }

    #[test]
    fn a_blocked_container_is_named_from_its_waiting_state() {
        let waiting = json!({"reason": "ImagePullBackOff", "message": "Back-off pulling image"});
        let pods = [pod("p", "Pending", waiting)];
        assert_eq!(
            why_not_started(&pods, &[]),
            Some("pod p cannot start: ImagePullBackOff: Back-off pulling image".into())
        );
    }

    #[test]
    fn a_starting_or_running_pod_is_not_blocked() {
        let creating = [pod("p", "Pending", json!({"reason": "ContainerCreating"}))];
        assert_eq!(why_not_started(&creating, &[]), None);
        let running = [pod("p", "Running", json!(null))];
        let events = [event("p", "FailedMount", "an old one")];
        assert_eq!(why_not_started(&running, &events), None);
    }
}
