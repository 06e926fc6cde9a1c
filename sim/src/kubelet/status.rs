//! Pod status as a kubelet writes it, as strategic-merge patches of `pods/status` (conditions
//! merge by type, so conditions other controllers add — e.g. the Job controller's
//! `DisruptionTarget` — survive).

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use serde_json::{Value, json};

/// How one container ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Terminated {
    pub container: String,
    pub exit_code: i32,
    /// `Completed`, `Error`, `StartError`, …
    pub reason: String,
    pub message: Option<String>,
    pub started_at: Option<Timestamp>,
    pub finished_at: Timestamp,
}

impl Terminated {
    /// A process that exited (or was killed: `exit_code` 128 + signal, like a container runtime).
    pub fn exited(container: &str, exit_code: i32, started: Timestamp, now: Timestamp) -> Self {
        Self {
            container: container.to_owned(),
            exit_code,
            reason: if exit_code == 0 { "Completed" } else { "Error" }.into(),
            message: None,
            started_at: Some(started),
            finished_at: now,
        }
    }

    /// A process that could not be started (no such program, …): the runtime's `StartError`.
    pub fn start_error(container: &str, message: String, now: Timestamp) -> Self {
        Self {
            container: container.to_owned(),
            exit_code: 128,
            reason: "StartError".into(),
            message: Some(message),
            started_at: None,
            finished_at: now,
        }
    }
}

fn time(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn containers(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| &s.containers)
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

fn init_containers(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .iter()
        .flat_map(|s| s.init_containers.iter().flatten())
        .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
        .collect()
}

fn uid(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn condition(kind: &str, ready: bool, reason: Option<&str>, now: Timestamp) -> Value {
    let mut c = json!({
        "type": kind,
        "status": if ready { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": time(now),
    });
    if let Some(reason) = reason {
        c["reason"] = reason.into();
    }
    c
}

/// Conditions of a pod whose containers are (`ready`) or are not running.
fn conditions(sandbox: bool, ready: bool, reason: Option<&str>, now: Timestamp) -> Value {
    json!([
        condition("PodReadyToStartContainers", sandbox, None, now),
        condition("Initialized", true, None, now),
        condition("Ready", ready, reason, now),
        condition("ContainersReady", ready, reason, now),
        condition("PodScheduled", true, None, now),
    ])
}

fn container_status(pod: &Pod, name: &str, image: &str, state: Value, ready: bool) -> Value {
    json!({
        "name": name,
        "image": image,
        "imageID": format!("sim://{image}"),
        "containerID": format!("sim://{}/{name}", uid(pod)),
        "ready": ready,
        "started": ready,
        "restartCount": 0,
        "state": state,
    })
}

fn ips(ip: Ipv4Addr) -> Value {
    json!([{ "ip": ip.to_string() }])
}

/// The pod is accepted by the node: containers are being created.
pub fn accepted(pod: &Pod, host_ip: Ipv4Addr, now: Timestamp) -> Value {
    let mut status = waiting(pod, "ContainerCreating", None, now);
    status["status"]["hostIP"] = host_ip.to_string().into();
    status["status"]["hostIPs"] = ips(host_ip);
    status["status"]["startTime"] = time(now).into();
    status
}

/// Containers wait to be created, e.g. for a missing Secret.
pub fn waiting(pod: &Pod, reason: &str, message: Option<&str>, now: Timestamp) -> Value {
    let statuses: Vec<Value> = containers(pod)
        .iter()
        .map(|(name, image)| {
            let mut waiting = json!({ "reason": reason });
            if let Some(message) = message {
                waiting["message"] = message.into();
            }
            container_status(pod, name, image, json!({ "waiting": waiting }), false)
        })
        .collect();
    json!({ "status": {
        "phase": "Pending",
        "conditions": conditions(false, false, Some("ContainersNotReady"), now),
        "containerStatuses": statuses,
    }})
}

/// Every container's process runs.
pub fn running(pod: &Pod, pod_ip: Ipv4Addr, started: Timestamp, now: Timestamp) -> Value {
    let statuses: Vec<Value> = containers(pod)
        .iter()
        .map(|(name, image)| {
            let state = json!({ "running": { "startedAt": time(started) } });
            container_status(pod, name, image, state, true)
        })
        .collect();
    json!({ "status": {
        "phase": "Running",
        "podIP": pod_ip.to_string(),
        "podIPs": ips(pod_ip),
        "conditions": conditions(true, true, None, now),
        "containerStatuses": statuses,
    }})
}

/// Phase after every container ended (`restartPolicy: Never`).
pub fn phase(results: &[Terminated]) -> &'static str {
    if results.iter().all(|r| r.exit_code == 0) {
        "Succeeded"
    } else {
        "Failed"
    }
}

/// Every container ended (or the pod ended at a failed init container): `containerStatuses`
/// and `initContainerStatuses` from the results of the containers that ran.
pub fn terminated(pod: &Pod, results: &[Terminated], now: Timestamp) -> Value {
    let statuses = |list: Vec<(String, String)>| -> Vec<Value> {
        list.iter()
            .filter_map(|(name, image)| {
                let r = results.iter().find(|r| &r.container == name)?;
                let mut state = json!({
                    "exitCode": r.exit_code,
                    "reason": r.reason,
                    "finishedAt": time(r.finished_at),
                    "containerID": format!("sim://{}/{name}", uid(pod)),
                });
                if let Some(started) = r.started_at {
                    state["startedAt"] = time(started).into();
                }
                if let Some(message) = &r.message {
                    state["message"] = message.as_str().into();
                }
                Some(container_status(
                    pod,
                    name,
                    image,
                    json!({ "terminated": state }),
                    false,
                ))
            })
            .collect()
    };
    let mut status = json!({
        "phase": phase(results),
        "conditions": conditions(false, false, Some("PodCompleted"), now),
        "containerStatuses": statuses(containers(pod)),
    });
    let init = statuses(init_containers(pod));
    if !init.is_empty() {
        status["initContainerStatuses"] = init.into();
    }
    json!({ "status": status })
}

/// A pod this kubelet did not start but a previous one did: its process died with the old
/// kubelet, as after a node reboot, and `restartPolicy: Never` forbids starting it again.
pub fn lost(pod: &Pod, now: Timestamp) -> Value {
    let results: Vec<Terminated> = containers(pod)
        .iter()
        .map(|(name, _)| Terminated {
            container: name.clone(),
            exit_code: 137,
            reason: "ContainerStatusUnknown".into(),
            message: Some(
                "The container could not be located when the pod was terminated \
                 (the simulated kubelet restarted)"
                    .into(),
            ),
            started_at: None,
            finished_at: now,
        })
        .collect();
    let mut status = terminated(pod, &results, now);
    status["status"]["phase"] = "Failed".into();
    status
}

/// Whether a kubelet already started this pod (so this one must not start it again).
pub fn was_started(pod: &Pod) -> bool {
    pod.status.as_ref().is_some_and(|s| s.start_time.is_some())
}

/// Whether the pod reached `Succeeded` or `Failed`.
pub fn is_terminal(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    matches!(phase, Some("Succeeded" | "Failed"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> Pod {
        serde_json::from_value(json!({
            "metadata": { "name": "p", "namespace": "ns", "uid": "u1" },
            "spec": { "containers": [
                { "name": "main", "image": "quay.io/opdev/guestcluster:v1" },
                { "name": "side", "image": "quay.io/opdev/guestcluster:v1" },
            ]},
        }))
        .expect("pod")
    }

    fn at(seconds: i64) -> Timestamp {
        Timestamp::from_second(seconds).expect("timestamp")
    }

    /// The patch must deserialize into the typed status, or the API server would reject it.
    fn typed(patch: &Value) -> k8s_openapi::api::core::v1::PodStatus {
        serde_json::from_value(patch["status"].clone()).expect("a valid PodStatus")
    }

    #[test]
    fn accepted_is_pending_with_host_ip_and_start_time() {
        let status = typed(&accepted(&pod(), Ipv4Addr::LOCALHOST, at(10)));
        assert_eq!(status.phase.as_deref(), Some("Pending"));
        assert_eq!(status.host_ip.as_deref(), Some("127.0.0.1"));
        assert!(status.start_time.is_some());
        let waiting = status.container_statuses.expect("statuses")[0]
            .state
            .clone()
            .and_then(|s| s.waiting)
            .expect("waiting");
        assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
    }

    #[test]
    fn running_reports_ip_ready_and_started() {
        let ip = Ipv4Addr::new(127, 10, 0, 7);
        let status = typed(&running(&pod(), ip, at(10), at(11)));
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert_eq!(status.pod_ip.as_deref(), Some("127.10.0.7"));
        assert_eq!(status.pod_ips.expect("podIPs")[0].ip, "127.10.0.7");
        let ready = status.conditions.expect("conditions");
        assert!(ready.iter().all(|c| c.status == "True"), "{ready:?}");
        let statuses = status.container_statuses.expect("statuses");
        assert_eq!(statuses.len(), 2);
        assert!(statuses.iter().all(|s| s.ready && s.started == Some(true)));
    }

    #[test]
    fn a_failed_init_container_fails_the_pod_and_reports_its_message() {
        let mut p = pod();
        p.spec.as_mut().unwrap().init_containers = Some(vec![
            serde_json::from_value(json!({"name": "fetch", "image": "i"})).unwrap(),
        ]);
        let mut failed = Terminated::exited("fetch", 3, at(1), at(2));
        failed.message = Some("DownloadFailed: 404".into());
        let status = typed(&terminated(&p, &[failed], at(3)));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        assert!(
            status.container_statuses.unwrap_or_default().is_empty(),
            "never started"
        );
        let init = &status.init_container_statuses.expect("init statuses")[0];
        let state = init.state.clone().and_then(|s| s.terminated).unwrap();
        assert_eq!(
            (state.exit_code, state.message.as_deref()),
            (3, Some("DownloadFailed: 404"))
        );
    }

    #[test]
    fn terminated_phase_follows_exit_codes() {
        let ok = Terminated::exited("main", 0, at(1), at(2));
        let also_ok = Terminated::exited("side", 0, at(1), at(2));
        let failed = Terminated::exited("side", 2, at(1), at(2));
        assert_eq!(phase(&[ok.clone(), also_ok]), "Succeeded");
        assert_eq!(phase(&[ok.clone(), failed.clone()]), "Failed");
        let status = typed(&terminated(&pod(), &[ok, failed], at(3)));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        let side = &status.container_statuses.expect("statuses")[1];
        let state = side
            .state
            .clone()
            .and_then(|s| s.terminated)
            .expect("terminated");
        assert_eq!(
            (state.exit_code, state.reason.as_deref()),
            (2, Some("Error"))
        );
        assert!(state.finished_at.is_some() && state.started_at.is_some());
    }

    #[test]
    fn start_errors_are_failures_with_a_message() {
        let result = Terminated::start_error("main", "no such file".into(), at(1));
        assert_eq!(phase(std::slice::from_ref(&result)), "Failed");
        let patch = terminated(&pod(), &[result], at(1));
        let state = &patch["status"]["containerStatuses"][0]["state"]["terminated"];
        assert_eq!(state["reason"], "StartError");
        assert_eq!(state["message"], "no such file");
    }

    #[test]
    fn lost_pods_fail_like_after_a_node_reboot() {
        let status = typed(&lost(&pod(), at(5)));
        assert_eq!(status.phase.as_deref(), Some("Failed"));
        let state = status.container_statuses.expect("statuses")[0]
            .state
            .clone()
            .and_then(|s| s.terminated)
            .expect("terminated");
        assert_eq!(state.reason.as_deref(), Some("ContainerStatusUnknown"));
    }

    #[test]
    fn start_and_terminal_detection() {
        let mut p = pod();
        assert!(!was_started(&p) && !is_terminal(&p));
        p.status = Some(typed(&accepted(&p, Ipv4Addr::LOCALHOST, at(1))));
        assert!(was_started(&p) && !is_terminal(&p));
        p.status = Some(typed(&lost(&p, at(2))));
        assert!(is_terminal(&p));
    }
}
