//! What the crc-agent tells the operator, decided from what the API shows (`docs/operations.md`,
//! "Provisioning, in order"): the handoff Secret (the agent's only output) and, while there is
//! none, a diagnosis of its Job and pods for the `CRCAgent` condition.

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::actors::job_pods::BLOCKED_WAITING;
use crate::api::conditions::reasons;

/// How long after the Job completed a missing handoff is blamed on watch-cache lag.
pub const HANDOFF_GRACE_SECONDS: i64 = 30;

/// A valid handoff for the VMI the operator just observed: the agent configured the guest. Only
/// the version is taken from it; the published kubeconfig is the operator's own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handoff {
    pub ocp_version: String,
}

/// An OpenShift version as a handoff may state it: `4.16.0`, `4.17.0-rc.1`, `4.18.0-0.okd-…`.
fn is_version(text: &str) -> bool {
    let mut parts = text.splitn(2, ['-', '+']);
    let release = parts.next().unwrap_or_default();
    let numbers: Vec<&str> = release.split('.').collect();
    text.len() <= 64
        && (2..=3).contains(&numbers.len())
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        && parts.next().is_none_or(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-.+_".contains(&b))
        })
}

fn data<'a>(secret: &'a Secret, key: &str) -> Option<&'a [u8]> {
    secret
        .data
        .as_ref()?
        .get(key)
        .map(|ByteString(b)| b.as_slice())
}

/// Accepts the handoff Secret only when the instance controls it (controller reference with its
/// UID: anyone may create a Secret of that name, and an agent's account may create any), it
/// names `vmi_uid`, carries a kubeconfig and states a version that looks like one (an empty one
/// is allowed: upstream's agent may not know it).
pub fn accept_handoff(secret: &Secret, instance_uid: &str, vmi_uid: &str) -> Option<Handoff> {
    let controlled = crate::resources::common::is_controlled_by(secret, instance_uid);
    data(secret, "kubeconfig").filter(|k| !k.is_empty())?;
    let named = data(secret, "vmiUID").map(|u| String::from_utf8_lossy(u).trim().to_owned());
    let ocp_version = data(secret, "ocpVersion")
        .map(|v| String::from_utf8_lossy(v).trim().to_owned())
        .unwrap_or_default();
    let version_ok = ocp_version.is_empty() || is_version(&ocp_version);
    (controlled && version_ok && named.as_deref() == Some(vmi_uid))
        .then_some(Handoff { ocp_version })
}

/// The `CRCAgent` condition while no valid handoff exists.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    /// `True`, `False` or `Unknown`.
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
    /// The Job failed for good: the instance is `Failed`.
    pub failed: bool,
}

fn job_condition(job: &Job, type_: &str) -> Option<(String, Option<Timestamp>, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.last_transition_time.as_ref().map(|t| t.0),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Pod Events that mean the pod will not start by waiting.
const BLOCKING_POD_EVENTS: [&str; 4] = [
    "FailedMount",
    "FailedScheduling",
    "Failed",
    "FailedCreatePodSandBox",
];

/// The newest Event about object `name` of `kind` with one of `reasons`.
fn event_about<'a>(
    events: &'a [Event],
    kind: &str,
    name: &str,
    reasons: &[&str],
) -> Option<&'a Event> {
    events
        .iter()
        .filter(|e| {
            e.involved_object.kind.as_deref() == Some(kind)
                && e.involved_object.name.as_deref() == Some(name)
                && e.reason.as_deref().is_some_and(|r| reasons.contains(&r))
        })
        .max_by_key(|e| e.last_timestamp.as_ref().map(|t| t.0))
}

/// What an Event says is missing, when the pod needs an object that is gone: a mounted Secret
/// (`FailedMount … secret "x" not found`) or its ServiceAccount (`FailedCreate … serviceaccount
/// "x" not found`). The pass recreates what it owns; this names the gap meanwhile.
fn missing_prerequisite(event: &Event) -> Option<String> {
    let message = event.message.as_deref()?;
    let lower = message.to_ascii_lowercase();
    let kind = ["secret", "serviceaccount"]
        .into_iter()
        .find(|k| lower.contains(&format!("{k} \"")))?;
    lower
        .contains("not found")
        .then(|| format!("{kind}: {message}"))
}

/// Diagnoses the agent from its Job, its pods and the Events about them (`pods` and `events`
/// already filtered to the Job's).
pub fn diagnose(job: &Job, pods: &[Pod], events: &[Event], now: Timestamp) -> Diagnosis {
    let name = job.name_any();
    let hint = format!("see `kubectl describe job {name}` and its pod logs");
    let diag = |status, reason, what: String, failed| Diagnosis {
        status,
        reason,
        message: format!("crc-agent Job {name}: {what}; {hint}"),
        failed,
    };
    if let Some((reason, _, message)) = job_condition(job, "Failed") {
        let cause = pods
            .iter()
            .filter_map(terminated_message)
            .next_back()
            .unwrap_or(message);
        return diag(
            "False",
            reasons::AGENT_JOB_FAILED,
            format!("failed ({reason}): {cause}"),
            true,
        );
    }
    if let Some((_, completed, _)) = job_condition(job, "Complete") {
        let recent = completed.is_some_and(|t| (now - t).get_seconds() < HANDOFF_GRACE_SECONDS);
        return if recent {
            diag(
                "Unknown",
                reasons::HANDOFF_PENDING,
                "completed; waiting for its handoff Secret to be observed".into(),
                false,
            )
        } else {
            diag(
                "False",
                reasons::HANDOFF_INVALID,
                "completed, but its handoff Secret is missing, empty or for another VMI".into(),
                false,
            )
        };
    }
    if let Some(missing) = events
        .iter()
        .filter(|e| matches!(e.reason.as_deref(), Some("FailedMount" | "FailedCreate")))
        .find_map(missing_prerequisite)
    {
        return diag(
            "False",
            reasons::AGENT_PREREQUISITE_MISSING,
            format!("a prerequisite is missing ({missing})"),
            false,
        );
    }
    if pods.is_empty()
        && let Some(event) = event_about(events, "Job", &name, &["FailedCreate"])
    {
        return diag(
            "False",
            reasons::AGENT_POD_CREATION_FAILED,
            format!(
                "cannot create its pod: {}",
                event.message.as_deref().unwrap_or_default()
            ),
            false,
        );
    }
    let mut running = false;
    let mut failed_pod = false;
    for pod in pods {
        let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
        let event = (phase == Some("Pending"))
            .then(|| event_about(events, "Pod", &pod.name_any(), &BLOCKING_POD_EVENTS))
            .flatten()
            .map(|e| {
                format!(
                    "{}: {}",
                    e.reason.as_deref().unwrap_or_default(),
                    e.message.as_deref().unwrap_or_default()
                )
            });
        if let Some(blocked) = blocked(pod).or(event) {
            return diag(
                "False",
                reasons::AGENT_POD_BLOCKED,
                format!("pod {} is blocked: {blocked}", pod.name_any()),
                false,
            );
        }
        match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
            Some("Running") => running = true,
            Some("Failed") => failed_pod = true,
            _ => {}
        }
    }
    if running {
        diag(
            "Unknown",
            reasons::AGENT_WORKING,
            "configuring the guest".into(),
            false,
        )
    } else if failed_pod {
        let cause = pods
            .iter()
            .filter_map(terminated_message)
            .next_back()
            .unwrap_or_else(|| "no message".into());
        diag(
            "Unknown",
            reasons::AGENT_RETRYING,
            format!("a pod failed ({cause}); the Job retries"),
            false,
        )
    } else {
        diag(
            "Unknown",
            reasons::AGENT_POD_PENDING,
            if pods.is_empty() {
                "no pod yet".into()
            } else {
                "pod starting".into()
            },
            false,
        )
    }
}

/// The end of a pod's termination message, on one line: the agent's words there may quote the
/// guest, and a condition carries an excerpt only.
fn terminated_message(pod: &Pod) -> Option<String> {
    pod.status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find_map(|c| c.state.as_ref()?.terminated.as_ref()?.message.clone())
        .map(|m| crate::text::tail_excerpt(&m))
        .filter(|m| !m.is_empty())
}

fn blocked(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    for c in status.container_statuses.iter().flatten() {
        if let Some(waiting) = c.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = waiting.reason.as_deref().unwrap_or_default();
            if BLOCKED_WAITING.contains(&reason) {
                return Some(format!(
                    "{reason}: {}",
                    waiting.message.as_deref().unwrap_or_default()
                ));
            }
        }
    }
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .map(|c| {
            format!(
                "unschedulable: {}",
                c.message.as_deref().unwrap_or_default()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::labels;
    use k8s_openapi::api::batch::v1::{JobCondition, JobStatus};
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, PodStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
    use std::collections::BTreeMap;

    fn handoff(owner_uid: Option<&str>, vmi: &str, kubeconfig: &str) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some(format!("crc-1-crc-raw-kubeconfig-{vmi}")),
                labels: Some(BTreeMap::from([
                    (labels::MANAGED_BY.into(), labels::MANAGED_BY_AGENT.into()),
                    (labels::CLUSTER_INSTANCE.into(), "crc-1".into()),
                ])),
                owner_references: owner_uid.map(|uid| {
                    vec![OwnerReference {
                        kind: "ClusterInstance".into(),
                        uid: uid.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            data: Some(BTreeMap::from([
                (
                    "kubeconfig".into(),
                    ByteString(kubeconfig.as_bytes().to_vec()),
                ),
                ("ocpVersion".into(), ByteString(b"4.22.7".to_vec())),
                ("vmiUID".into(), ByteString(vmi.as_bytes().to_vec())),
            ])),
            ..Default::default()
        }
    }

    #[test]
    fn a_handoff_is_accepted_only_for_this_vmi_and_instance() {
        let ok = handoff(Some("inst"), "vmi-1", "apiVersion: v1");
        assert_eq!(
            accept_handoff(&ok, "inst", "vmi-1").map(|h| h.ocp_version),
            Some("4.22.7".into())
        );
        assert_eq!(accept_handoff(&ok, "inst", "vmi-2"), None);
        assert_eq!(accept_handoff(&ok, "other", "vmi-1"), None);
        assert_eq!(
            accept_handoff(&handoff(Some("inst"), "vmi-1", ""), "inst", "vmi-1"),
            None
        );
        // Labels are not control: anyone may write a Secret with them.
        let unowned = handoff(None, "vmi-1", "apiVersion: v1");
        assert!(accept_handoff(&unowned, "inst", "vmi-1").is_none());
        let mut plain_owner = ok.clone();
        plain_owner.metadata.owner_references.as_mut().unwrap()[0].controller = None;
        assert!(accept_handoff(&plain_owner, "inst", "vmi-1").is_none());
    }

    #[test]
    fn only_a_version_is_taken_from_a_handoff() {
        let with = |version: &str| {
            let mut s = handoff(Some("inst"), "vmi-1", "apiVersion: v1");
            s.data
                .as_mut()
                .unwrap()
                .insert("ocpVersion".into(), ByteString(version.as_bytes().to_vec()));
            accept_handoff(&s, "inst", "vmi-1")
        };
        for good in [
            "4.16.0",
            "4.17.0-rc.1",
            "4.18.0-0.okd-2025-01-01-000000",
            "4.16",
            "",
        ] {
            assert!(with(good).is_some(), "{good}");
        }
        for bad in [
            "4",
            "four.16",
            "4.16.0 <script>",
            "4.16.0\nx",
            &"9".repeat(70),
        ] {
            assert!(with(bad).is_none(), "{bad:?}");
        }
    }

    fn job(condition: Option<(&str, i64)>) -> Job {
        Job {
            metadata: ObjectMeta {
                name: Some("crc-1-crc-agent-0123456789ab".into()),
                ..Default::default()
            },
            status: Some(JobStatus {
                conditions: condition.map(|(type_, at)| {
                    vec![JobCondition {
                        type_: type_.into(),
                        status: "True".into(),
                        reason: Some("BackoffLimitExceeded".into()),
                        last_transition_time: Some(Time(Timestamp::from_second(at).unwrap())),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pod(phase: &str, waiting: Option<&str>, message: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("agent-pod".into()),
                ..Default::default()
            },
            status: Some(PodStatus {
                phase: Some(phase.into()),
                container_statuses: Some(vec![ContainerStatus {
                    name: "crc-agent".into(),
                    state: Some(ContainerState {
                        waiting: waiting.map(|r| ContainerStateWaiting {
                            reason: Some(r.into()),
                            message: Some("details".into()),
                        }),
                        terminated: message.map(|m| ContainerStateTerminated {
                            message: Some(m.into()),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    #[test]
    fn diagnosis_follows_the_job_and_its_pods() {
        let failed = diagnose(
            &job(Some(("Failed", 0))),
            &[pod("Failed", None, Some("SshUnreachable: no route"))],
            &[],
            at(10),
        );
        assert_eq!(
            (failed.reason, failed.failed),
            (reasons::AGENT_JOB_FAILED, true)
        );
        assert!(
            failed.message.contains("SshUnreachable"),
            "{}",
            failed.message
        );
        assert!(failed.message.contains("kubectl describe job"));

        let fresh = diagnose(&job(Some(("Complete", 100))), &[], &[], at(110));
        assert_eq!(fresh.reason, reasons::HANDOFF_PENDING);
        let stale = diagnose(&job(Some(("Complete", 100))), &[], &[], at(200));
        assert_eq!(
            (stale.status, stale.reason),
            ("False", reasons::HANDOFF_INVALID)
        );

        let cases = [
            (
                vec![pod("Pending", Some("ImagePullBackOff"), None)],
                vec![],
                reasons::AGENT_POD_BLOCKED,
            ),
            (
                vec![pod("Running", None, None)],
                vec![],
                reasons::AGENT_WORKING,
            ),
            (
                vec![pod("Failed", None, Some("x"))],
                vec![],
                reasons::AGENT_RETRYING,
            ),
            (vec![], vec![], reasons::AGENT_POD_PENDING),
            (
                vec![],
                vec![Event {
                    message: Some(
                        "Error creating: pods \"p\" is forbidden: error looking up service \
                         account team/crc-1-crc-agent-x: serviceaccount \"crc-1-crc-agent-x\" \
                         not found"
                            .into(),
                    ),
                    ..event("Job", "crc-1-crc-agent-0123456789ab", "FailedCreate")
                }],
                reasons::AGENT_PREREQUISITE_MISSING,
            ),
            (
                vec![pod("Pending", None, None)],
                vec![Event {
                    message: Some(
                        "MountVolume.SetUp failed for volume \"identity\" : secret \
                         \"crc-1-crc-identity\" not found"
                            .into(),
                    ),
                    ..event("Pod", "agent-pod", "FailedMount")
                }],
                reasons::AGENT_PREREQUISITE_MISSING,
            ),
        ];
        for (pods, events, want) in cases {
            assert_eq!(diagnose(&job(None), &pods, &events, at(0)).reason, want);
        }
    }

    fn event(kind: &str, name: &str, reason: &str) -> Event {
        Event {
            involved_object: k8s_openapi::api::core::v1::ObjectReference {
                kind: Some(kind.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some("details".into()),
            ..Default::default()
        }
    }

    #[test]
    fn events_explain_a_pod_that_never_starts() {
        let job = job(None);
        let created = diagnose(
            &job,
            &[],
            &[event("Job", "crc-1-crc-agent-0123456789ab", "FailedCreate")],
            at(0),
        );
        assert_eq!(created.reason, reasons::AGENT_POD_CREATION_FAILED);
        let mount = diagnose(
            &job,
            &[pod("Pending", None, None)],
            &[event("Pod", "agent-pod", "FailedMount")],
            at(0),
        );
        assert_eq!(mount.reason, reasons::AGENT_POD_BLOCKED);
        assert!(mount.message.contains("FailedMount"), "{}", mount.message);
        let unrelated = diagnose(
            &job,
            &[pod("Pending", None, None)],
            &[event("Pod", "other-pod", "FailedMount")],
            at(0),
        );
        assert_eq!(unrelated.reason, reasons::AGENT_POD_PENDING);
    }
}
