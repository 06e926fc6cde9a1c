//! The download source of a CRCBundle (upstream-behaviour §2.2) as a pure decision: observed
//! objects in, the next status and the actions to take out.
//!
//! ```text
//! Pending ──create PVCs + prep Job──▶ Preparing ──Job succeeded, key + metadata published──▶ Ready
//!                                        │  ▲                                                  │
//!                       Job failed ──────┘  └── Job deleted (retry)     golden PVC or key gone ─┘
//!                          ▼                                             (Reprovisioning → Pending)
//!                        Failed
//! ```

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::bundle::{BundlePhase, BundleSource, CRCBundle, CRCBundleStatus};
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::contract::bundle_prep as prep;
use crate::resources::bundle::Names;

/// VM profile of downloaded bundles: the upstream VM shape.
pub const DOWNLOAD_VM_PROFILE: &str = "crc-download-v0";

/// What exists of a bundle's objects in the operator namespace.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    pub golden_pvc: bool,
    /// UID of the scratch PVC the bundle controls, when it exists.
    pub scratch_pvc: Option<String>,
    pub job: Option<Job>,
    /// `<reason>: <message>` of the prep Job's last failed pod, when there is one.
    pub job_failure: Option<String>,
    pub ssh_secret: bool,
    pub metadata: Option<ConfigMap>,
}

/// Something to do against the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    CreateGoldenPvc,
    CreateScratchPvc,
    CreatePrepJob,
    /// Background propagation, so the scratch PVC is released by its pod. The UID is the
    /// observed Job's: a newer namesake is never deleted.
    DeletePrepJob {
        uid: String,
    },
    DeleteScratchPvc {
        uid: String,
    },
}

/// The next step for a bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CRCBundleStatus,
    pub actions: Vec<Action>,
}

/// Decides the next step of a download-sourced bundle.
pub fn decide(bundle: &CRCBundle, observed: &Observed, namespace: &str, now: Time) -> Decision {
    let names = Names::of(bundle.metadata.name.as_deref().unwrap_or_default());
    let generation = bundle.metadata.generation;
    let mut status = bundle.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.source = Some(BundleSource::Download);
    let phase = status.phase.unwrap_or(BundlePhase::Pending);
    let mut actions = Vec::new();
    let ready = |status: &mut CRCBundleStatus, ok: bool, reason: &str, message: String| {
        conditions::set(
            &mut status.conditions,
            conditions::new(types::READY, ok, reason, message, generation, now.clone()),
        );
    };

    match phase {
        BundlePhase::Ready => {
            let missing: Vec<&str> = [
                (!observed.golden_pvc).then_some(names.golden_pvc.as_str()),
                (!observed.ssh_secret).then_some(names.ssh_secret.as_str()),
            ]
            .into_iter()
            .flatten()
            .collect();
            if missing.is_empty() {
                // Cleanup after Ready is best effort and idempotent.
                if let Some(job) = &observed.job {
                    actions.push(delete_job(job));
                }
                if let (Some(uid), None) = (&observed.scratch_pvc, &observed.job) {
                    actions.push(Action::DeleteScratchPvc { uid: uid.clone() });
                }
            } else {
                status.phase = Some(BundlePhase::Pending);
                ready(
                    &mut status,
                    false,
                    reasons::REPROVISIONING,
                    format!(
                        "{} missing in namespace {namespace}; preparing the bundle again",
                        missing.join(" and ")
                    ),
                );
                // A leftover succeeded Job would short-circuit the new preparation.
                if let Some(job) = &observed.job {
                    actions.push(delete_job(job));
                }
            }
        }
        BundlePhase::Failed => {
            if observed.job.is_none() {
                status.phase = Some(BundlePhase::Pending);
                ready(
                    &mut status,
                    false,
                    reasons::PENDING,
                    format!("prep Job {} was deleted; retrying", names.prep_job),
                );
            }
        }
        BundlePhase::Pending | BundlePhase::Preparing | BundlePhase::Building => {
            if !observed.golden_pvc {
                actions.push(Action::CreateGoldenPvc);
            }
            match observed.job.as_ref().map(job_outcome) {
                None => {
                    if observed.scratch_pvc.is_none() {
                        actions.push(Action::CreateScratchPvc);
                    }
                    actions.push(Action::CreatePrepJob);
                }
                Some(JobOutcome::Failed(why)) => {
                    status.phase = Some(BundlePhase::Failed);
                    let detail = observed.job_failure.clone().unwrap_or(why);
                    ready(
                        &mut status,
                        false,
                        reasons::PREP_JOB_FAILED,
                        format!(
                            "prep Job {namespace}/{} failed: {detail}. Fix the cause (spec.bundleURL, spec.sha256URL, the mirror), then delete the Job to retry",
                            names.prep_job
                        ),
                    );
                    return Decision { status, actions };
                }
                Some(JobOutcome::Succeeded)
                    if observed.ssh_secret && observed.metadata.is_some() =>
                {
                    if let Some(metadata) = &observed.metadata {
                        publish_ready(&mut status, metadata, &names, namespace);
                    }
                    ready(
                        &mut status,
                        true,
                        reasons::BUNDLE_READY,
                        format!("golden disk {namespace}/{} is ready", names.golden_pvc),
                    );
                    if let Some(job) = &observed.job {
                        actions.push(delete_job(job));
                    }
                    return Decision { status, actions };
                }
                // Running, or succeeded with the key or metadata not visible yet.
                Some(_) => {}
            }
            status.phase = Some(BundlePhase::Preparing);
            let url = crate::resources::bundle::urls(bundle)
                .map(|u| u.bundle)
                .unwrap_or_default();
            ready(
                &mut status,
                false,
                reasons::PREPARING,
                format!(
                    "downloading and extracting {url} (prep Job {namespace}/{})",
                    names.prep_job
                ),
            );
        }
    }
    Decision { status, actions }
}

fn publish_ready(
    status: &mut CRCBundleStatus,
    metadata: &ConfigMap,
    names: &Names,
    namespace: &str,
) {
    let data = metadata.data.clone().unwrap_or_default();
    status.phase = Some(BundlePhase::Ready);
    status.qcow2_pvc_ref = Some(LocalRef::new(&names.golden_pvc));
    status.qcow2_pvc_namespace = Some(namespace.to_owned());
    status.ssh_key_secret_ref = Some(LocalRef::new(&names.ssh_secret));
    status.ocp_version = data.get(prep::CM_OCP_VERSION).cloned();
    status.sha256 = data.get(prep::CM_SHA256).cloned();
    status.disk_sha256 = data.get(prep::CM_DISK_SHA256).cloned();
    status.disk_sha256_short = status
        .disk_sha256
        .as_ref()
        .map(|d| d.chars().take(12).collect());
    status.disk_virtual_size = data
        .get(prep::CM_DISK_VIRTUAL_SIZE)
        .and_then(|v| v.parse().ok());
    status.vm_profile = Some(DOWNLOAD_VM_PROFILE.to_owned());
}

enum JobOutcome {
    Running,
    Succeeded,
    Failed(String),
}

/// A Job's outcome from its conditions (authoritative) or counters, as upstream read them.
fn job_outcome(job: &Job) -> JobOutcome {
    let status = job.status.clone().unwrap_or_default();
    for condition in status.conditions.iter().flatten() {
        if condition.status != "True" {
            continue;
        }
        match condition.type_.as_str() {
            "Complete" => return JobOutcome::Succeeded,
            "Failed" => {
                let reason = condition.reason.clone().unwrap_or_else(|| "Failed".into());
                let message = condition.message.clone().unwrap_or_default();
                return JobOutcome::Failed(format!("{reason} {message}").trim().to_owned());
            }
            _ => {}
        }
    }
    if status.succeeded.unwrap_or(0) > 0 {
        return JobOutcome::Succeeded;
    }
    let limit = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
    match status.failed {
        Some(failed) if failed > limit => JobOutcome::Failed(format!("{failed} pods failed")),
        _ => JobOutcome::Running,
    }
}

fn delete_job(job: &Job) -> Action {
    Action::DeletePrepJob {
        uid: job.metadata.uid.clone().unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CRCBundleSpec;
    use k8s_openapi::jiff::Timestamp;

    const NS: &str = "guestcluster-system";

    fn now() -> Time {
        Time(Timestamp::from_second(1_800_000_000).unwrap())
    }

    fn bundle() -> CRCBundle {
        let spec: CRCBundleSpec =
            serde_json::from_value(serde_json::json!({"version": "4.16.0"})).unwrap();
        let mut b = CRCBundle::new("crc-4.16.0-amd64", spec);
        b.metadata.generation = Some(1);
        b
    }

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "crc-4.16.0-amd64-prep", "uid": "job-uid"}, "spec": {"backoffLimit": 2, "template": {}}, "status": status})).unwrap()
    }

    fn metadata() -> ConfigMap {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "m"}, "data": {
            "ocpVersion": "4.16.0", "sha256": "a".repeat(64), "diskSHA256": "0123456789abcdef".repeat(4), "diskVirtualSize": "33285996544"}}))
        .unwrap()
    }

    fn step(b: &mut CRCBundle, observed: &Observed) -> Vec<Action> {
        let d = decide(b, observed, NS, now());
        b.status = Some(d.status);
        d.actions
    }

    fn ready(b: &CRCBundle) -> (String, String, String) {
        let c = conditions::find(&b.status.as_ref().unwrap().conditions, types::READY).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    #[test]
    fn a_new_bundle_gets_its_volumes_and_prep_job() {
        let mut b = bundle();
        let actions = step(&mut b, &Observed::default());
        assert_eq!(
            actions,
            [
                Action::CreateGoldenPvc,
                Action::CreateScratchPvc,
                Action::CreatePrepJob
            ]
        );
        let status = b.status.clone().unwrap();
        assert_eq!(status.phase, Some(BundlePhase::Preparing));
        assert_eq!(status.source, Some(BundleSource::Download));
        assert_eq!(ready(&b).1, reasons::PREPARING);
        assert!(
            ready(&b).2.contains("crc_libvirt_4.16.0_amd64.crcbundle"),
            "{}",
            ready(&b).2
        );
    }

    #[test]
    fn a_running_job_is_waited_for() {
        let mut b = bundle();
        step(&mut b, &Observed::default());
        let observed = Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            job: Some(job(serde_json::json!({"active": 1}))),
            ..Default::default()
        };
        assert!(step(&mut b, &observed).is_empty());
        assert_eq!(b.status.unwrap().phase, Some(BundlePhase::Preparing));
    }

    #[test]
    fn a_failed_job_fails_the_bundle_with_the_pods_reason_until_the_job_is_deleted() {
        let mut b = bundle();
        step(&mut b, &Observed::default());
        let failed = job(
            serde_json::json!({"failed": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}),
        );
        let observed = Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            job: Some(failed),
            job_failure: Some(
                "ChecksumMismatch: sha256sum.txt lists aaa, the download is bbb".into(),
            ),
            ..Default::default()
        };
        assert!(step(&mut b, &observed).is_empty());
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Failed));
        let (status, reason, message) = ready(&b);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::PREP_JOB_FAILED)
        );
        assert!(
            message.contains("ChecksumMismatch") && message.contains("delete the Job to retry"),
            "{message}"
        );
        // Failed stays failed while the Job exists...
        assert!(step(&mut b, &observed).is_empty());
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Failed));
        // ...and retries once it is deleted.
        let gone = Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            ..Default::default()
        };
        step(&mut b, &gone);
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Pending));
        assert_eq!(step(&mut b, &gone), [Action::CreatePrepJob]);
    }

    #[test]
    fn success_publishes_refs_and_digests_then_cleans_up() {
        let mut b = bundle();
        step(&mut b, &Observed::default());
        let done = job(
            serde_json::json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
        );
        let waiting_for_key = Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            job: Some(done.clone()),
            metadata: Some(metadata()),
            ..Default::default()
        };
        assert!(
            step(&mut b, &waiting_for_key).is_empty(),
            "not Ready before the key exists"
        );
        assert_eq!(
            b.status.clone().unwrap().phase,
            Some(BundlePhase::Preparing)
        );

        let published = Observed {
            ssh_secret: true,
            ..waiting_for_key
        };
        assert_eq!(
            step(&mut b, &published),
            [Action::DeletePrepJob {
                uid: "job-uid".into()
            }]
        );
        let status = b.status.clone().unwrap();
        assert_eq!(status.phase, Some(BundlePhase::Ready));
        assert_eq!(
            status.qcow2_pvc_ref,
            Some(LocalRef::new("crc-4.16.0-amd64-golden"))
        );
        assert_eq!(status.qcow2_pvc_namespace.as_deref(), Some(NS));
        assert_eq!(
            status.ssh_key_secret_ref,
            Some(LocalRef::new("crc-4.16.0-amd64-ssh-key"))
        );
        assert_eq!(status.ocp_version.as_deref(), Some("4.16.0"));
        assert_eq!(status.disk_sha256_short.as_deref(), Some("0123456789ab"));
        assert_eq!(status.disk_virtual_size, Some(33_285_996_544));
        assert_eq!(status.vm_profile.as_deref(), Some(DOWNLOAD_VM_PROFILE));
        assert_eq!(ready(&b).1, reasons::BUNDLE_READY);

        let job_gone = Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            ssh_secret: true,
            metadata: Some(metadata()),
            ..Default::default()
        };
        assert_eq!(
            step(&mut b, &job_gone),
            [Action::DeleteScratchPvc {
                uid: "scratch-uid".into()
            }]
        );
        let clean = Observed {
            scratch_pvc: None,
            ..job_gone
        };
        assert!(step(&mut b, &clean).is_empty());
    }

    #[test]
    fn a_lost_key_or_golden_pvc_is_reprovisioned() {
        let mut b = bundle();
        b.status = Some(CRCBundleStatus {
            phase: Some(BundlePhase::Ready),
            ..Default::default()
        });
        let observed = Observed {
            golden_pvc: true,
            ssh_secret: false,
            metadata: Some(metadata()),
            ..Default::default()
        };
        step(&mut b, &observed);
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Pending));
        let (_, reason, message) = ready(&b);
        assert_eq!(reason, reasons::REPROVISIONING);
        assert!(message.contains("crc-4.16.0-amd64-ssh-key"), "{message}");
        assert_eq!(
            step(&mut b, &observed),
            [Action::CreateScratchPvc, Action::CreatePrepJob]
        );
    }
}
