//! The download source of a CRCBundle (`docs/architecture.md`, "The download source") as a pure
//! decision: observed objects in, the next status and the actions to take out.
//!
//! ```text
//! Pending ──create PVCs, record + create prep Job──▶ Preparing ──Job succeeded, key + metadata published──▶ Ready
//!                                                     │  ▲                                                  │
//!                                    Job failed ──────┘  └── Job deleted (made again) golden PVC or key gone ─┘
//!                                       ▼                                                (Reprovisioning → Pending)
//!                                     Failed ──Job deleted──▶ Pending
//! ```
//!
//! The prep Job is followed by a child actor of the bundle's actor ([`crate::actors::runtime::stage`]);
//! what it reported comes in as [`JobState`]. The Job's name is recorded in `status.prepJob`
//! before it is created and its UID right after ([`record_created`]), so a restarted operator
//! follows the same Job. A deleted prep Job is made again, as upstream does; a Job under the name
//! that is not the recorded one is never adopted (`ResourceReplaced`, see `docs/decisions.md`).

pub mod prep_job;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actors::bundle::download::prep_job::PrepJob;
use crate::actors::runtime::api_error::Doing;
use crate::actors::runtime::stage::{JobState, Observation, Stage, attempt_failure};
use crate::api::bundle::{BundlePhase, BundleSource, CRCBundle, CRCBundleStatus};
use crate::api::common::{LocalRef, ObjectIdentity};
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
    /// The prep Job recorded in `status.prepJob`, as its child actor reported it.
    pub job: JobState,
    pub ssh_secret: bool,
    pub metadata: Option<ConfigMap>,
}

/// Something to do against the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    CreateGoldenPvc,
    CreateScratchPvc,
    /// Create the Job named in `status.prepJob` (recorded by an earlier pass); its UID is
    /// recorded right after ([`record_created`]).
    CreatePrepJob,
    /// Background propagation, so the scratch PVC is released by its pod. The UID is the
    /// recorded Job's: a newer namesake is never deleted.
    DeletePrepJob {
        uid: String,
    },
    DeleteScratchPvc {
        uid: String,
    },
}

impl Action {
    /// What it does to the API, for its error's reason.
    pub fn doing(&self) -> Doing {
        match self {
            Action::CreateGoldenPvc | Action::CreateScratchPvc | Action::CreatePrepJob => {
                Doing::Create
            }
            Action::DeletePrepJob { .. } | Action::DeleteScratchPvc { .. } => Doing::Delete,
        }
    }
}

/// The next step for a bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CRCBundleStatus,
    pub actions: Vec<Action>,
}

/// Records the UID of the prep Job found under the recorded name right after
/// [`Action::CreatePrepJob`] (the one just created, or one created before a crash).
pub fn record_created(status: &mut CRCBundleStatus, uid: String) {
    if let Some(job) = status.prep_job.as_mut() {
        job.uid = uid;
    }
}

/// Decides the next step of a download-sourced bundle.
pub fn decide(bundle: &CRCBundle, observed: &Observed, namespace: &str, now: Time) -> Decision {
    let names = Names::of(bundle.metadata.name.as_deref().unwrap_or_default());
    let generation = bundle.metadata.generation;
    let mut status = bundle.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.source = Some(BundleSource::Download);
    let phase = status.phase.unwrap_or(BundlePhase::Pending);
    let recorded = status.prep_job.clone().unwrap_or_default();
    let mut actions = Vec::new();
    let ready = |status: &mut CRCBundleStatus, ok: bool, reason: &str, message: String| {
        conditions::set(
            &mut status.conditions,
            conditions::new(types::READY, ok, reason, message, generation, now.clone()),
        );
    };
    // The recorded Job, when one of ours may exist under its UID (to be deleted).
    let ours = match &observed.job {
        JobState::Unreported
        | JobState::Seen(
            Observation::Progress(_) | Observation::Done(_) | Observation::Failed(_),
        ) => Some(Action::DeletePrepJob {
            uid: recorded.uid.clone(),
        }),
        _ => None,
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
                // Cleanup after Ready is best effort and idempotent: the Job first (its pod
                // holds the scratch PVC), forgotten once its child sees it gone.
                match &observed.job {
                    JobState::Unreported => {}
                    JobState::Seen(
                        Observation::Progress(_) | Observation::Done(_) | Observation::Failed(_),
                    ) => {
                        actions.extend(ours);
                    }
                    // Gone, never created, or not ours (left alone).
                    JobState::None | JobState::Named | JobState::Seen(_) => {
                        status.prep_job = None;
                    }
                }
                if let (Some(uid), None) = (&observed.scratch_pvc, &status.prep_job) {
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
                actions.extend(ours);
                status.prep_job = None;
            }
        }
        BundlePhase::Failed => match &observed.job {
            JobState::None | JobState::Named | JobState::Seen(Observation::Lost) => {
                status.phase = Some(BundlePhase::Pending);
                status.prep_job = None;
                ready(
                    &mut status,
                    false,
                    reasons::PENDING,
                    format!("prep Job {} was deleted; retrying", names.prep_job),
                );
            }
            // Failed stays failed while the Job (or the namesake that failed it) exists, for
            // its logs; the scratch volume (up to 40Gi of a download) is released at once. A
            // retry makes a new one.
            _ => {
                if let Some(uid) = &observed.scratch_pvc {
                    actions.push(Action::DeleteScratchPvc { uid: uid.clone() });
                }
            }
        },
        BundlePhase::Pending | BundlePhase::Preparing | BundlePhase::Building => {
            if !observed.golden_pvc {
                actions.push(Action::CreateGoldenPvc);
            }
            match &observed.job {
                JobState::None | JobState::Seen(Observation::Lost) => {
                    if observed.scratch_pvc.is_none() {
                        actions.push(Action::CreateScratchPvc);
                    }
                    // Write-ahead: the name first; the Job is created by the next pass.
                    status.prep_job = Some(ObjectIdentity {
                        name: names.prep_job.clone(),
                        uid: String::new(),
                    });
                }
                JobState::Named => {
                    if observed.scratch_pvc.is_none() {
                        actions.push(Action::CreateScratchPvc);
                    }
                    actions.push(Action::CreatePrepJob);
                }
                JobState::Seen(replaced @ Observation::Replaced { .. }) => {
                    status.phase = Some(BundlePhase::Failed);
                    if let Some((reason, message)) =
                        attempt_failure(PrepJob::WHEN_LOST, &recorded, replaced)
                    {
                        ready(&mut status, false, reason, format!("prep Job {message}"));
                    }
                    return Decision { status, actions };
                }
                JobState::Seen(Observation::Failed(detail)) => {
                    status.phase = Some(BundlePhase::Failed);
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
                JobState::Seen(Observation::Done(_))
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
                    actions.extend(ours);
                    return Decision { status, actions };
                }
                // Running, not reported yet, or succeeded with the key or metadata not visible
                // yet.
                JobState::Unreported | JobState::Seen(_) => {}
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CRCBundleSpec;
    use k8s_openapi::jiff::Timestamp;

    const NS: &str = "guestcluster-system";
    const JOB: &str = "crc-4.16.0-amd64-prep";

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

    /// Records the Job under its recorded name as created with `uid` (what the pass does right
    /// after [`Action::CreatePrepJob`]).
    fn created(b: &mut CRCBundle, uid: &str) {
        record_created(b.status.as_mut().unwrap(), uid.into());
    }

    fn recorded(b: &CRCBundle) -> Option<ObjectIdentity> {
        b.status.as_ref().unwrap().prep_job.clone()
    }

    fn ready(b: &CRCBundle) -> (String, String, String) {
        let c = conditions::find(&b.status.as_ref().unwrap().conditions, types::READY).unwrap();
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    fn seen(observation: Observation) -> Observed {
        Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            job: JobState::Seen(observation),
            ..Default::default()
        }
    }

    /// A bundle whose prep Job `job-uid` was recorded and created.
    fn preparing() -> CRCBundle {
        let mut b = bundle();
        step(&mut b, &Observed::default());
        step(
            &mut b,
            &Observed {
                job: JobState::Named,
                ..Default::default()
            },
        );
        created(&mut b, "job-uid");
        b
    }

    #[test]
    fn a_new_bundle_gets_its_volumes_and_its_prep_job_named_before_it_is_created() {
        let mut b = bundle();
        let actions = step(&mut b, &Observed::default());
        assert_eq!(
            actions,
            [Action::CreateGoldenPvc, Action::CreateScratchPvc],
            "no Job before its name is recorded"
        );
        assert_eq!(
            recorded(&b),
            Some(ObjectIdentity {
                name: JOB.into(),
                uid: String::new()
            })
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

        // The next pass creates it; its UID is recorded right after.
        let named = Observed {
            golden_pvc: true,
            scratch_pvc: Some("scratch-uid".into()),
            job: JobState::Named,
            ..Default::default()
        };
        assert_eq!(step(&mut b, &named), [Action::CreatePrepJob]);
        created(&mut b, "job-uid");
        assert_eq!(recorded(&b).unwrap().uid, "job-uid");
    }

    #[test]
    fn a_recorded_job_is_waited_for_until_its_child_reports_and_while_it_runs() {
        let mut b = preparing();
        let unreported = Observed {
            job: JobState::Unreported,
            ..seen(Observation::Done(String::new()))
        };
        assert!(
            step(&mut b, &unreported).is_empty(),
            "no second Job after a restart"
        );
        assert!(step(&mut b, &seen(Observation::Progress("1 active".into()))).is_empty());
        assert_eq!(
            b.status.clone().unwrap().phase,
            Some(BundlePhase::Preparing)
        );
        assert_eq!(recorded(&b).unwrap().uid, "job-uid");
    }

    #[test]
    fn a_lost_job_is_made_again_under_a_newly_recorded_name() {
        let mut b = preparing();
        assert!(step(&mut b, &seen(Observation::Lost)).is_empty());
        assert_eq!(
            recorded(&b).unwrap().uid,
            "",
            "the old UID is forgotten first"
        );
        assert_eq!(
            b.status.clone().unwrap().phase,
            Some(BundlePhase::Preparing)
        );
        let named = Observed {
            job: JobState::Named,
            ..seen(Observation::Lost)
        };
        assert_eq!(step(&mut b, &named), [Action::CreatePrepJob]);
    }

    #[test]
    fn a_namesake_that_is_not_the_recorded_job_fails_the_bundle_until_it_is_gone() {
        let mut b = preparing();
        let replaced = seen(Observation::Replaced {
            uid: "other".into(),
        });
        assert!(
            step(&mut b, &replaced).is_empty(),
            "never deleted or adopted"
        );
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Failed));
        let (status, reason, message) = ready(&b);
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::RESOURCE_REPLACED)
        );
        assert!(
            message.contains(JOB) && message.contains("other"),
            "{message}"
        );
        // The namesake is never touched; our own scratch volume is released.
        assert_eq!(
            step(&mut b, &replaced),
            [Action::DeleteScratchPvc {
                uid: "scratch-uid".into()
            }]
        );
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Failed));
        step(&mut b, &seen(Observation::Lost));
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Pending));
        assert_eq!(recorded(&b), None);
    }

    #[test]
    fn a_failed_job_fails_the_bundle_with_the_pods_reason_until_the_job_is_deleted() {
        let mut b = preparing();
        let failed = seen(Observation::Failed(
            "ChecksumMismatch: sha256sum.txt lists aaa, the download is bbb".into(),
        ));
        assert!(step(&mut b, &failed).is_empty());
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
        // Failed stays failed while the Job exists, its scratch volume released...
        assert_eq!(
            step(&mut b, &failed),
            [Action::DeleteScratchPvc {
                uid: "scratch-uid".into()
            }]
        );
        let released = Observed {
            scratch_pvc: None,
            ..failed.clone()
        };
        assert!(step(&mut b, &released).is_empty());
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Failed));
        // ...and retries once it is deleted.
        step(&mut b, &seen(Observation::Lost));
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Pending));
        assert!(ready(&b).2.contains("was deleted; retrying"));
        let gone = Observed {
            job: JobState::None,
            ..seen(Observation::Lost)
        };
        assert!(step(&mut b, &gone).is_empty());
        assert_eq!(recorded(&b).unwrap().name, JOB);
    }

    #[test]
    fn success_publishes_refs_and_digests_then_cleans_up() {
        let mut b = preparing();
        let waiting_for_key = Observed {
            metadata: Some(metadata()),
            ..seen(Observation::Done(String::new()))
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

        // Until the Job's child sees it gone, the Job is deleted again (idempotent) and the
        // scratch PVC, which its pod may hold, stays.
        assert_eq!(
            step(&mut b, &published),
            [Action::DeletePrepJob {
                uid: "job-uid".into()
            }]
        );
        let job_gone = Observed {
            job: JobState::Seen(Observation::Lost),
            ..published
        };
        assert_eq!(
            step(&mut b, &job_gone),
            [Action::DeleteScratchPvc {
                uid: "scratch-uid".into()
            }]
        );
        assert_eq!(recorded(&b), None, "the Job is forgotten once gone");
        let clean = Observed {
            scratch_pvc: None,
            job: JobState::None,
            ..job_gone
        };
        assert!(step(&mut b, &clean).is_empty());
    }

    #[test]
    fn a_lost_key_or_golden_pvc_is_reprovisioned() {
        let mut b = bundle();
        b.status = Some(CRCBundleStatus {
            phase: Some(BundlePhase::Ready),
            prep_job: Some(ObjectIdentity {
                name: JOB.into(),
                uid: "old-job".into(),
            }),
            ..Default::default()
        });
        let observed = Observed {
            golden_pvc: true,
            ssh_secret: false,
            metadata: Some(metadata()),
            job: JobState::Seen(Observation::Done(String::new())),
            ..Default::default()
        };
        assert_eq!(
            step(&mut b, &observed),
            [Action::DeletePrepJob {
                uid: "old-job".into()
            }],
            "a leftover succeeded Job would short-circuit the new preparation"
        );
        assert_eq!(b.status.clone().unwrap().phase, Some(BundlePhase::Pending));
        assert_eq!(recorded(&b), None);
        let (_, reason, message) = ready(&b);
        assert_eq!(reason, reasons::REPROVISIONING);
        assert!(message.contains("crc-4.16.0-amd64-ssh-key"), "{message}");
        let after = Observed {
            job: JobState::None,
            ..observed
        };
        assert_eq!(step(&mut b, &after), [Action::CreateScratchPvc]);
        assert_eq!(recorded(&b).unwrap().uid, "");
    }
}
