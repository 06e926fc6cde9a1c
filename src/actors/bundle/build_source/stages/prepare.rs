//! The Admit and Prepare stages (condition `Prepared`): the inputs admitted and recorded, the
//! bundle's key Secret, the installer's objects, then the installer Job followed to its end —
//! it verifies the release, extracts `openshift-install` and prepares the live ISO.

use k8s_openapi::api::batch::v1::Job;

use crate::actors::bundle::build_source::step::{
    Action, BuildInput, Observed, Owned, Step, ensure_temps,
};
use crate::actors::bundle::build_source::temps::{Built, Temp};
use crate::actors::bundle::jobs::{self, observe_job};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::JobState;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::{BuildStage, CRCBundleStatus, InstallStep, ReleaseStatus};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::{reasons, types};
use crate::contract::installer::Outcome;
use crate::resources::build::{self, Names};

/// What the Prepare stage makes, in creation order.
pub const TEMPS: [Temp; 5] = [
    Temp::ServiceAccount,
    Temp::InstallerSecret,
    Temp::WorkPvc,
    Temp::IsoPvc,
    Temp::InstallerJob,
];

/// Admit: the inputs admitted are recorded (their digests, the release, the VM profile) and
/// Prepare starts in the same pass; inputs that fail admission fail the attempt.
pub fn admit(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    match &observed.admitted {
        Some(Ok(inputs)) => {
            step.status.inputs = Some(inputs.clone());
            step.status.release = Some(ReleaseStatus {
                image: step
                    .spec
                    .map(|s| s.release_image.clone())
                    .unwrap_or_default(),
                digest: None,
            });
            step.status.vm_profile = inputs.profile.clone();
            step.build_mut().stage = Some(BuildStage::Prepare);
            decide(step, observed, names, actions);
        }
        Some(Err(err)) => step.fail(types::PREPARED, err.reason(), err.to_string()),
        // Not read: the next pass reads them.
        None => {}
    }
}

/// Prepare: the key Secret, then every temporary object named and created in order, then the
/// installer Job followed to its end.
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    match observed.key_secret {
        Owned::Ours => {}
        Owned::Missing => actions.push(Action::CreateKeySecret),
        Owned::NotOurs => {
            let name = crate::resources::bundle::Names::of(names.bundle()).ssh_secret;
            step.fail(
                types::PREPARED,
                reasons::RESOURCE_REPLACED,
                format!(
                    "Secret {name} exists but this bundle does not control it; it is not adopted as the build's key. Delete it to retry"
                ),
            );
            return;
        }
    }
    if !ensure_temps(step, observed, names, &TEMPS, types::PREPARED, actions) {
        return;
    }
    if !actions.is_empty() {
        step.set(
            types::PREPARED,
            false,
            reasons::BUILDING,
            "creating the installer's objects".into(),
        );
        step.ready_building("stage Prepare: creating the installer's objects".into());
        return;
    }
    match observed.job(Temp::InstallerJob) {
        JobState::Seen(Observation::Done(result)) => match serde_json::from_str::<Outcome>(result)
        {
            Ok(outcome) => {
                step.status.ocp_version = Some(outcome.version.clone());
                if let Some(release) = step.status.release.as_mut() {
                    release.digest = Some(outcome.release_digest.clone());
                }
                step.build_mut().stage = Some(BuildStage::Install);
                step.set(
                    types::PREPARED,
                    true,
                    reasons::STAGE_SUCCEEDED,
                    format!(
                        "OpenShift {} (release {}), RHCOS {} live ISO verified (sha256 {}) with the generator Ignition in {}",
                        outcome.version,
                        outcome.release_digest,
                        outcome.rhcos_version,
                        outcome.iso_sha256,
                        names.iso_pvc
                    ),
                );
                step.build_mut().install_step = Some(InstallStep::Generator);
                step.progress(
                    BuildStage::Install,
                    "creating the build VM and its volumes".into(),
                );
            }
            Err(err) => step.fail(
                types::PREPARED,
                reasons::INSTALLER_JOB_FAILED,
                format!(
                    "installer Job {} succeeded but its result is unreadable ({err}); is the operator image the same version as the Job's?",
                    names.installer_job
                ),
            ),
        },
        JobState::Seen(Observation::Failed(detail)) => step.fail(
            types::PREPARED,
            reasons::INSTALLER_JOB_FAILED,
            format!("installer Job {} failed: {detail}", names.installer_job),
        ),
        JobState::Seen(Observation::Progress(progress)) => {
            let message = format!("installer Job {}: {progress}", names.installer_job);
            step.set(types::PREPARED, false, reasons::BUILDING, message.clone());
            step.ready_building(format!("stage Prepare: {message}"));
        }
        _ => {
            let message = format!("waiting for installer Job {}", names.installer_job);
            step.set(types::PREPARED, false, reasons::BUILDING, message.clone());
            step.ready_building(format!("stage Prepare: {message}"));
        }
    }
}

/// The Prepare stage's objects: the installer's account, Secret (only in a pass that admitted
/// the inputs), volumes and Job.
pub fn build(temp: Temp, input: &BuildInput) -> Result<Option<Built>, String> {
    let (bundle, ns, names) = (input.bundle, input.ns, input.names);
    Ok(Some(match temp {
        Temp::ServiceAccount => build::service_account(bundle, ns, names).into(),
        Temp::InstallerSecret => {
            let Some(inputs) = input.installer else {
                return Ok(None);
            };
            build::installer_secret(bundle, ns, names, inputs)
                .map_err(|e| e.to_string())?
                .into()
        }
        Temp::WorkPvc => build::work_pvc(bundle, ns, names).into(),
        Temp::IsoPvc => build::iso_pvc(bundle, ns, names).into(),
        Temp::InstallerJob => {
            build::installer_job(bundle, input.spec, ns, names, input.jobs).into()
        }
        other => return Err(format!("the Prepare stage does not make {other:?}")),
    }))
}

/// The Prepare stage's child: the installer Job of a build attempt, recorded in
/// `status.build.resources.installerJob`. Its result is the termination message of its
/// succeeded pod ([`crate::contract::installer::Outcome`]); a lost installer Job fails the
/// attempt, because what it left on the work volume cannot be trusted half-written.
pub struct InstallerJob;

impl Stage for InstallerJob {
    type Object = Job;
    const KIND: &'static str = "crcbundle.installerjob";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;
    fn recheck(job: &Job) -> Option<std::time::Duration> {
        jobs::recheck(job)
    }

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| Temp::InstallerJob.slot(r))
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        observe_job(job, ctx).await
    }
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

    #[test]
    fn the_first_pass_records_inputs_and_names_before_anything_exists() {
        let mut observed = admitted();
        observed.key_secret = Owned::Missing;
        let decision = decide(&bundle(), &observed, HOUR, at(0));
        let status = &decision.status;
        let build = status.build.as_ref().unwrap();
        assert_eq!(build.attempt, Some(1));
        assert_eq!(build.stage, Some(BuildStage::Prepare));
        assert_eq!(status.phase, Some(BundlePhase::Building));
        assert_eq!(status.inputs, Some(inputs("aa")));
        assert_eq!(status.vm_profile.as_deref(), Some("crc-kubevirt-v1"));
        assert_eq!(
            status.release.as_ref().unwrap().image,
            "quay.io/example/release:4.22"
        );
        let resources = build.resources.as_ref().unwrap();
        for temp in up_front(BuildStage::Prepare) {
            let slot = temp.slot(resources).expect("named");
            assert!(slot.name.starts_with("custom-b1-"), "{slot:?}");
            assert!(slot.uid.is_empty());
        }
        let mut expected = vec![Action::CreateKeySecret];
        expected.extend(
            up_front(BuildStage::Prepare)
                .into_iter()
                .map(Action::Create),
        );
        assert_eq!(decision.actions, expected);
        assert_eq!(reason(status, types::READY).1, reasons::BUILDING);
        assert_eq!(decision.requeue, Some(HOUR));
    }

    #[test]
    fn a_bad_input_fails_before_anything_is_named() {
        let mut observed = admitted();
        observed.admitted = Some(Err(admit::Error::PullSecretNotFound {
            namespace: "ops".into(),
            name: "p".into(),
        }));
        let decision = decide(&bundle(), &observed, HOUR, at(0));
        let status = &decision.status;
        assert_eq!(status.phase, Some(BundlePhase::Failed));
        assert_eq!(
            reason(status, types::PREPARED),
            ("False".into(), reasons::INPUT_NOT_FOUND.into())
        );
        let ready = conditions::find(&status.conditions, types::READY).unwrap();
        assert!(ready.message.contains("Secret ops/p"), "{}", ready.message);
        assert!(
            ready.message.contains(RETRY_ANNOTATION),
            "{}",
            ready.message
        );
        assert!(status.inputs.is_none());
        assert!(decision.actions.is_empty(), "{:?}", decision.actions);
        assert_eq!(decision.requeue, None);
    }

    #[test]
    fn a_finished_installer_records_the_release_and_moves_to_install() {
        let decision = decide(
            &prepared(),
            &with_installer(Observation::Done(outcome())),
            HOUR,
            at(60),
        );
        let status = &decision.status;
        assert!(decision.actions.is_empty(), "{:?}", decision.actions);
        assert_eq!(status.ocp_version.as_deref(), Some("4.22.3"));
        assert_eq!(
            status.release.as_ref().unwrap().digest,
            Some(format!("sha256:{}", "1".repeat(64)))
        );
        assert_eq!(
            status.build.as_ref().unwrap().stage,
            Some(BuildStage::Install)
        );
        assert_eq!(
            reason(status, types::PREPARED),
            ("True".into(), reasons::STAGE_SUCCEEDED.into())
        );
        assert_eq!(reason(status, types::INSTALLED).0, "False");
        assert_eq!(
            status.build.as_ref().unwrap().install_step,
            Some(InstallStep::Generator)
        );
        // The next pass names the Install stage's objects, then creates them in order.
        let entered = applied(prepared(), &decision);
        let next = decide(
            &entered,
            &with_installer(Observation::Done(outcome())),
            HOUR,
            at(90),
        );
        let created: Vec<Temp> = next
            .actions
            .iter()
            .map(|a| match a {
                Action::Create(temp) => *temp,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(created, up_front(BuildStage::Install));
        assert_eq!(next.requeue, Some(HOUR - Duration::from_secs(90)));
    }

    #[test]
    fn a_failed_installer_fails_the_attempt_and_deletes_its_objects() {
        let decision = decide(
            &prepared(),
            &with_installer(Observation::Failed("ChecksumMismatch: bad".into())),
            HOUR,
            at(60),
        );
        let status = &decision.status;
        assert_eq!(status.phase, Some(BundlePhase::Failed));
        assert_eq!(
            reason(status, types::PREPARED),
            ("False".into(), reasons::INSTALLER_JOB_FAILED.into())
        );
        let deleted: Vec<Temp> = decision
            .actions
            .iter()
            .map(|a| match a {
                Action::Delete { temp, uid, .. } => {
                    assert_eq!(uid, &format!("uid-{temp:?}"));
                    *temp
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(deleted, up_front(BuildStage::Prepare));
    }

    #[test]
    fn a_key_secret_of_someone_else_is_never_used() {
        let mut observed = admitted();
        observed.key_secret = Owned::NotOurs;
        let decision = decide(&bundle(), &observed, HOUR, at(0));
        assert_eq!(
            reason(&decision.status, types::PREPARED).1,
            reasons::RESOURCE_REPLACED
        );
        let message = conditions::find(&decision.status.conditions, types::PREPARED)
            .unwrap()
            .message
            .clone();
        assert!(message.contains("custom-ssh-key"), "{message}");
        assert!(
            !decision
                .actions
                .iter()
                .any(|a| matches!(a, Action::Create(_) | Action::CreateKeySecret)),
            "{:?}",
            decision.actions
        );
    }
}
