//! The kubelet's part for the virt-launcher pods upstream virt-controller renders (the kubelet
//! simulation binds them but leaves running and deleting them to us): a bound launcher pod gets
//! an IP and runs, and is `Ready` while its containers are and every readiness gate holds
//! (virt-controller sets `kubevirt.io/virtual-machine-unpaused`); a deleted one powers its guest
//! off, then goes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus, Pod,
    PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::decide::Exit;
use super::{Shared, is_not_found, now};
use crate::Error;
use guestcluster::kubevirt::{VmiPhase, labels};

/// The label selector of every virt-launcher pod.
pub fn selector() -> String {
    format!("{}={}", labels::APP, labels::VIRT_LAUNCHER)
}

/// A container's name and image.
type Named = (String, String);

/// The containers of `pod` with their images: those that run to completion before the others
/// (init containers), then those that keep running (sidecars — init containers with
/// `restartPolicy: Always`, such as KubeVirt's `guest-console-log` — and the containers).
fn containers(pod: &Pod) -> (Vec<Named>, Vec<Named>) {
    let named = |c: &k8s_openapi::api::core::v1::Container| {
        (c.name.clone(), c.image.clone().unwrap_or_default())
    };
    let spec = pod.spec.as_ref();
    let init = spec
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten();
    let sidecar =
        |c: &&k8s_openapi::api::core::v1::Container| c.restart_policy.as_deref() == Some("Always");
    let run_once = init.clone().filter(|c| !sidecar(c)).map(named).collect();
    let keep_running = init
        .filter(sidecar)
        .chain(spec.map(|s| &s.containers).into_iter().flatten())
        .map(named)
        .collect();
    (run_once, keep_running)
}

fn running(name: &str, image: &str, now: &Time) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: image.into(),
        image_id: image.into(),
        ready: true,
        started: Some(true),
        restart_count: 0,
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(now.clone()),
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

fn terminated(
    name: &str,
    image: &str,
    exit_code: i32,
    started_at: Option<Time>,
    now: &Time,
) -> ContainerStatus {
    ContainerStatus {
        name: name.into(),
        image: image.into(),
        image_id: image.into(),
        ready: false,
        started: Some(false),
        restart_count: 0,
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
                started_at,
                finished_at: Some(now.clone()),
                ..ContainerStateTerminated::default()
            }),
            ..ContainerState::default()
        }),
        ..ContainerStatus::default()
    }
}

/// The kubelet's `Ready` rule (`pkg/kubelet/status/generate.go`, `GeneratePodReadyCondition`):
/// every container ready and every readiness gate's condition `True`; `None` when it holds, else
/// the reason it does not.
pub fn not_ready_reason(pod: &Pod) -> Option<&'static str> {
    let status = pod.status.as_ref();
    let containers_ready = status
        .and_then(|s| s.container_statuses.as_ref())
        .is_some_and(|list| !list.is_empty() && list.iter().all(|c| c.ready));
    if !containers_ready {
        return Some("ContainersNotReady");
    }
    let conditions = status.and_then(|s| s.conditions.as_ref());
    let gates_hold = pod
        .spec
        .as_ref()
        .and_then(|s| s.readiness_gates.as_ref())
        .into_iter()
        .flatten()
        .all(|gate| {
            conditions
                .into_iter()
                .flatten()
                .any(|c| c.type_ == gate.condition_type && c.status == "True")
        });
    (!gates_hold).then_some("ReadinessGatesNotReady")
}

/// Pod status of a launcher whose guest may start: Running with `ip`, init containers done,
/// every container and sidecar running and ready; `Ready` per [`not_ready_reason`].
pub fn running_status(pod: &Pod, ip: &str, host_ip: &str, now: &Time) -> PodStatus {
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    };
    let (init, main) = containers(pod);
    let sidecars = sidecar_names(pod);
    let mut status = PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(ip.into()),
        pod_ips: Some(vec![PodIP { ip: ip.into() }]),
        host_ip: Some(host_ip.into()),
        start_time: Some(now.clone()),
        init_container_statuses: (!init.is_empty() || !sidecars.is_empty()).then(|| {
            init.iter()
                .map(|(name, image)| terminated(name, image, 0, Some(now.clone()), now))
                .chain(
                    main.iter()
                        .filter(|(name, _)| sidecars.contains(name))
                        .map(|(name, image)| running(name, image, now)),
                )
                .collect()
        }),
        container_statuses: Some(
            main.iter()
                .filter(|(name, _)| !sidecars.contains(name))
                .map(|(name, image)| running(name, image, now))
                .collect(),
        ),
        ..pod.status.clone().unwrap_or_default()
    };
    let mut conditions: Vec<PodCondition> = status
        .conditions
        .take()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| {
            !["PodScheduled", "Initialized", "ContainersReady", "Ready"].contains(&c.type_.as_str())
        })
        .collect();
    conditions.extend(["PodScheduled", "Initialized", "ContainersReady"].map(condition));
    status.conditions = Some(conditions);
    let with_status = Pod {
        status: Some(status.clone()),
        ..pod.clone()
    };
    let ready = ready_condition(&with_status, now);
    status.conditions.get_or_insert_default().push(ready);
    status
}

/// The `Ready` condition the kubelet would write now for `pod`.
fn ready_condition(pod: &Pod, now: &Time) -> PodCondition {
    let reason = not_ready_reason(pod);
    PodCondition {
        type_: "Ready".into(),
        status: if reason.is_none() { "True" } else { "False" }.into(),
        reason: reason.map(String::from),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    }
}

/// Pod status once the VMI ended: virt-launcher and its containers exited (0 after a
/// power-off).
pub fn ended_status(pod: &Pod, vmi_phase: VmiPhase, now: &Time) -> PodStatus {
    let succeeded = vmi_phase == VmiPhase::Succeeded;
    let previous = pod.status.clone().unwrap_or_default();
    let started_at = previous.start_time.clone();
    let code = if succeeded { 0 } else { 1 };
    let end = |(name, image): &Named| terminated(name, image, code, started_at.clone(), now);
    let (init, main) = containers(pod);
    let sidecars = sidecar_names(pod);
    let mut conditions: Vec<PodCondition> = previous
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_ != "ContainersReady" && c.type_ != "Ready")
        .collect();
    conditions.extend(["ContainersReady", "Ready"].map(|type_| PodCondition {
        type_: type_.into(),
        status: "False".into(),
        reason: Some("PodCompleted".into()),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    }));
    PodStatus {
        phase: Some(if succeeded { "Succeeded" } else { "Failed" }.into()),
        conditions: Some(conditions),
        init_container_statuses: (!init.is_empty() || !sidecars.is_empty()).then(|| {
            init.iter()
                .map(|(name, image)| terminated(name, image, 0, started_at.clone(), now))
                .chain(main.iter().filter(|(n, _)| sidecars.contains(n)).map(end))
                .collect()
        }),
        container_statuses: Some(
            main.iter()
                .filter(|(n, _)| !sidecars.contains(n))
                .map(end)
                .collect(),
        ),
        ..previous
    }
}

/// The names of `pod`'s sidecars (init containers with `restartPolicy: Always`).
fn sidecar_names(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .into_iter()
        .flatten()
        .filter(|c| c.restart_policy.as_deref() == Some("Always"))
        .map(|c| c.name.clone())
        .collect()
}

/// The kubelet's part for launcher pods.
pub(super) async fn run(shared: Arc<Shared>) {
    let pods: Api<Pod> = Api::all(shared.ctx.client.clone());
    Controller::new(pods, watcher::Config::default().labels(&selector()))
        .run(reconcile, super::error_policy, shared)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!("simulated virt-launcher kubelet: {err}");
            }
        })
        .await;
}

async fn reconcile(pod: Arc<Pod>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.ctx.client.clone(), &namespace);
    let Some(pod) = api.get_opt(&pod.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let pod_uid = pod.uid().unwrap_or_default();
    if let Some(ip) = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
    {
        shared.adopt_pod_ip(&pod_uid, ip);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        // Like the kubelet: stop the workload (a graceful guest power-off), then finish the
        // deletion. The pod object, and so the hold on its PVCs, lasts until then.
        if let Some(vmi_uid) = pod.labels().get(labels::CREATED_BY) {
            shared.shutdown_guest(vmi_uid, Exit::PodDeleted).await;
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod_uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => {}
            Err(err) if is_not_found(&err) => {}
            Err(err) => return Err(err.into()),
        }
        shared.release_pod_ip(&pod_uid);
        return Ok(Action::await_change());
    }
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let status = pod.status.as_ref();
    let has_ip = status.and_then(|s| s.pod_ip.as_ref()).is_some();
    let ended = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    if bound && !has_ip && !ended {
        let ip = shared.pod_ip(&pod_uid);
        let host_ip = crate::kubelet::NODE_IP.to_string();
        let status = running_status(&pod, &ip.to_string(), &host_ip, &now());
        api.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({
                "metadata": {"resourceVersion": pod.resource_version()},
                "status": status,
            })),
        )
        .await?;
    } else if has_ip && !ended {
        // The kubelet's status manager: `Ready` follows the readiness gates others set.
        let ready = ready_condition(&pod, &now());
        let current = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
        if current.map(|c| &c.status) != Some(&ready.status) {
            api.patch_status(
                &pod.name_any(),
                &PatchParams::default(),
                &Patch::Strategic(serde_json::json!({
                    "metadata": {"resourceVersion": pod.resource_version()},
                    "status": {"conditions": [ready]},
                })),
            )
            .await?;
        }
    }
    // Nothing else happens to a running launcher pod without an event; look again now and then
    // in case an event was missed.
    Ok(Action::requeue(Duration::from_secs(30)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn launcher(gates: &[&str]) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "virt-launcher-vm-abcde"},
            "spec": {
                "containers": [{"name": "compute", "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}],
                // KubeVirt's serial console logger, a sidecar.
                "initContainers": [{"name": "guest-console-log", "restartPolicy": "Always",
                                    "image": "quay.io/kubevirt/virt-launcher:v1.9.0"}],
                "readinessGates": gates.iter().map(|g| json!({"conditionType": g})).collect::<Vec<_>>(),
            },
        }))
        .unwrap()
    }

    #[test]
    fn a_pod_is_ready_only_once_every_readiness_gate_holds() {
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        let gate = "kubevirt.io/virtual-machine-unpaused";
        let pod = launcher(&[gate]);
        let mut running = Pod {
            status: Some(running_status(&pod, "127.10.0.9", "127.0.0.1", &t)),
            ..pod
        };
        let status = running.status.as_ref().unwrap();
        assert_eq!(
            status.container_statuses.as_ref().unwrap()[0].name,
            "compute"
        );
        let sidecar = &status.init_container_statuses.as_ref().unwrap()[0];
        assert_eq!(sidecar.name, "guest-console-log");
        assert!(sidecar.ready, "a sidecar keeps running");
        assert_eq!(not_ready_reason(&running), Some("ReadinessGatesNotReady"));
        let ready = |pod: &Pod| {
            pod.status
                .as_ref()
                .unwrap()
                .conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_ == "Ready")
                .unwrap()
                .status
                .clone()
        };
        assert_eq!(ready(&running), "False");
        running
            .status
            .as_mut()
            .unwrap()
            .conditions
            .as_mut()
            .unwrap()
            .push(PodCondition {
                type_: gate.into(),
                status: "True".into(),
                ..PodCondition::default()
            });
        assert_eq!(not_ready_reason(&running), None);
        assert_eq!(ready_condition(&running, &t).status, "True");
        let ungated = launcher(&[]);
        let ungated = Pod {
            status: Some(running_status(&ungated, "127.10.0.9", "127.0.0.1", &t)),
            ..ungated
        };
        assert_eq!(ready(&ungated), "True");
    }

    #[test]
    fn pod_statuses_run_then_end() {
        let pod = launcher(&[]);
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        let running = running_status(&pod, "127.10.0.9", "127.0.0.1", &t);
        assert_eq!(running.phase.as_deref(), Some("Running"));
        assert_eq!(running.pod_ip.as_deref(), Some("127.10.0.9"));
        let pod = Pod {
            status: Some(running),
            ..launcher(&[])
        };
        let ended = ended_status(&pod, VmiPhase::Succeeded, &t);
        assert_eq!(ended.phase.as_deref(), Some("Succeeded"));
        assert_eq!(ended.pod_ip.as_deref(), Some("127.10.0.9"), "the IP stays");
        let terminated = ended.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!(terminated.exit_code, 0);
        let failed = ended_status(&pod, VmiPhase::Failed, &t);
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
    }
}
