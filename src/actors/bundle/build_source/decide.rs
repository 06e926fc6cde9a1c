//! The build source of a CRCBundle (`docs/architecture.md`, "The build source") as a pure
//! decision: what the pass observed in, the next status and the actions out. An attempt runs
//! every stage in turn — Admit, Prepare, Install, Customize, Seal, Publish, Validate, each with
//! its condition — then Ready, which publishes the bundle (`Ready=True`) and deletes the
//! temporary objects. A failure in any stage ends the attempt in Failed until a new retry value
//! starts the next one. This module decides what every stage shares (the attempt, the deadline,
//! the inputs check, the cleanup of a failed attempt); each stage's own part is its slice in
//! [`super::stages`], reached through the stage table.
//!
//! ```text
//! new attempt ─▶ Admit ─▶ Prepare ─▶ Install ─▶ Customize ─▶ Seal ─▶ Publish ─▶ Validate ─▶ Ready
//!  ▲               │         │          │           │         │         │          │          │
//!  │               ▼         ▼          ▼           ▼         ▼         ▼          ▼          ▼
//!  └─retry value─ Failed ◀── bad input, a Job failed, an object lost or replaced, inputs changed,
//!                            a manifest rejected, the deadline (temporary objects deleted)
//! ```
//!
//! Write-ahead: the pass writes the status this returns — the attempt, its inputs and the name
//! of every object it is about to create — before it acts, and records each created UID
//! ([`record_created`]) in a second write right after. A crash between the two leaves a named
//! slot without a UID, which the next pass creates again: the create finds the first one

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::stages::{self, Inputs};
use super::step::{Action, Observed, Step, release};
use super::temps::Temp;
use crate::api::bundle::{BuildStage, BuildStatus, BundleSource, CRCBundle, CRCBundleStatus};
use crate::api::conditions::reasons;
use crate::api::labels::RETRY_ANNOTATION;
use crate::resources::build::Names;

/// The next step of a build-sourced bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CRCBundleStatus,
    pub actions: Vec<Action>,
    /// Look again after this long without a trigger: the build's deadline.
    pub requeue: Option<Duration>,
}

/// Whether the stage needs the inputs read and admitted this pass.
pub fn reads_inputs(bundle: &CRCBundle, retry: Option<&str>) -> bool {
    match build_of(bundle) {
        None => true,
        Some(build) => match build.stage {
            None => true,
            Some(BuildStage::Failed) => retry_requested(build, retry),
            Some(stage) => stages::row(stage).is_some_and(|row| row.inputs != Inputs::Unread),
        },
    }
}

fn build_of(bundle: &CRCBundle) -> Option<&BuildStatus> {
    bundle.status.as_ref().and_then(|s| s.build.as_ref())
}

fn retry_requested(build: &BuildStatus, retry: Option<&str>) -> bool {
    retry.is_some() && build.retry.as_deref() != retry
}

/// Records the UID now under `temp`'s recorded name, right after [`Action::Create`].
pub fn record_created(status: &mut CRCBundleStatus, temp: Temp, uid: String) {
    let resources = status
        .build
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default);
    if let Some(slot) = temp.slot_mut(resources) {
        slot.uid = uid;
    }
}

/// The retry annotation of a bundle.
pub fn retry_of(bundle: &CRCBundle) -> Option<String> {
    bundle
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RETRY_ANNOTATION))
        .cloned()
}

/// Decides the next step of a build-sourced bundle.
pub fn decide(bundle: &CRCBundle, observed: &Observed, deadline: Duration, now: Time) -> Decision {
    let name = bundle.metadata.name.clone().unwrap_or_default();
    let spec = bundle.spec.build.as_ref();
    let generation = bundle.metadata.generation;
    let mut status = bundle.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.source = Some(BundleSource::Build);
    let mut actions = Vec::new();
    let mut step = Step {
        status: &mut status,
        spec,
        generation,
        now: now.clone(),
    };

    let build = step.status.build.clone().unwrap_or_default();
    let new_attempt = build.attempt.is_none()
        || (build.stage == Some(BuildStage::Failed)
            && retry_requested(&build, observed.retry.as_deref()));
    if new_attempt {
        step.start_attempt(build.attempt.unwrap_or(0) + 1, observed.retry.clone());
    }
    let attempt = step
        .status
        .build
        .as_ref()
        .and_then(|b| b.attempt)
        .unwrap_or(1);
    let names = Names::of(&name, attempt);

    let stage = step.build().stage.unwrap_or(BuildStage::Admit);
    // A Failed attempt only cleans up, a Ready one is done; every other stage runs against the
    // deadline.
    let remaining = match (stage, step.build().started_at.clone()) {
        (BuildStage::Failed | BuildStage::Ready, _) => None,
        (_, Some(started)) => Some(remaining(&started, deadline, &now)),
        (_, None) => Some(deadline),
    };
    if remaining == Some(Duration::ZERO) {
        step.fail(
            stage.condition(),
            reasons::BUILD_DEADLINE_EXCEEDED,
            format!(
                "the build did not finish within spec.build.deadline ({}); stage {stage:?} was still running",
                spec.map_or("", |s| s.deadline.as_str())
            ),
        );
    } else if let Some(row) = stages::row(stage) {
        match (row.inputs, &observed.admitted) {
            (Inputs::Recheck(verb), Some(Ok(inputs))) if Some(inputs) != step.status.inputs.as_ref() => step.fail(
                stage.condition(),
                reasons::INPUTS_CHANGED,
                format!(
                    "an input of CRCBundle {name} changed after its digest was recorded in status.inputs; the attempt does not {verb} from other inputs than it recorded"
                ),
            ),
            (Inputs::Recheck(_), Some(Err(err))) => step.fail(
                stage.condition(),
                reasons::INPUTS_CHANGED,
                format!("an input changed after the build started: {err}"),
            ),
            _ => (row.decide)(&mut step, observed, &names, &mut actions),
        }
    }
    if step.build().stage == Some(BuildStage::Failed) {
        cleanup(step.status, observed, &mut actions);
    }
    let requeue = match step.build().stage {
        Some(BuildStage::Failed | BuildStage::Ready) => None,
        _ => remaining.filter(|r| !r.is_zero()),
    };
    Decision {
        status,
        actions,
        requeue,
    }
}

fn remaining(started: &Time, deadline: Duration, now: &Time) -> Duration {
    let elapsed = now.0.duration_since(started.0);
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    deadline.saturating_sub(elapsed)
}

/// A failed attempt deletes every temporary object it recorded that is still ours.
fn cleanup(status: &mut CRCBundleStatus, observed: &Observed, actions: &mut Vec<Action>) {
    if let Some(resources) = status.build.as_mut().and_then(|b| b.resources.as_mut()) {
        release(resources, observed, Temp::ALL, actions);
    }
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

    #[test]
    fn a_failed_attempt_waits_for_a_new_retry_value() {
        let mut observed = admitted();
        observed.admitted = Some(Err(admit::Error::PullSecretNotFound {
            namespace: "ops".into(),
            name: "p".into(),
        }));
        let failed = applied(bundle(), &decide(&bundle(), &observed, HOUR, at(0)));
        let again = decide(&failed, &admitted(), HOUR, at(10));
        assert_eq!(Some(&again.status), failed.status.as_ref(), "unchanged");
        assert!(!reads_inputs(&failed, None));

        let mut retry = admitted();
        retry.retry = Some("1".into());
        assert!(reads_inputs(&failed, Some("1")));
        let second = decide(&failed, &retry, HOUR, at(20));
        let build = second.status.build.as_ref().unwrap();
        assert_eq!(
            (build.attempt, build.retry.as_deref()),
            (Some(2), Some("1"))
        );
        assert_eq!(build.stage, Some(BuildStage::Prepare));
        assert_eq!(build.started_at, Some(at(20)));
        assert!(
            build
                .resources
                .as_ref()
                .unwrap()
                .installer_job
                .as_ref()
                .unwrap()
                .name
                == "custom-b2-installer"
        );
        assert!(
            conditions::find(&second.status.conditions, types::PREPARED)
                .is_some_and(|c| c.reason == reasons::BUILDING)
        );
    }

    #[test]
    fn a_lost_or_replaced_object_fails_the_attempt_and_is_never_touched() {
        for (seen, want) in [
            (Observation::Lost, reasons::RESOURCE_LOST),
            (
                Observation::Replaced {
                    uid: "other".into(),
                },
                reasons::RESOURCE_REPLACED,
            ),
        ] {
            let mut observed = with_installer(Observation::Progress("1 active".into()));
            observed.temps.insert(Temp::WorkPvc, Some(seen));
            let decision = decide(&prepared(), &observed, HOUR, at(60));
            assert_eq!(reason(&decision.status, types::PREPARED).1, want);
            let prepared_condition =
                conditions::find(&decision.status.conditions, types::PREPARED).unwrap();
            assert!(
                prepared_condition.message.contains("custom-b1-work"),
                "{}",
                prepared_condition.message
            );
            assert!(
                !decision.actions.iter().any(|a| matches!(
                    a,
                    Action::Delete {
                        temp: Temp::WorkPvc,
                        ..
                    }
                )),
                "{:?}",
                decision.actions
            );
            assert!(decision.actions.contains(&Action::Delete {
                temp: Temp::InstallerJob,
                name: "custom-b1-installer".into(),
                uid: "uid-InstallerJob".into()
            }));
        }
    }

    #[test]
    fn an_object_lost_or_replaced_in_any_later_stage_fails_that_stage() {
        for (stage, condition) in [
            (BuildStage::Customize, types::CUSTOMIZED),
            (BuildStage::Seal, types::SEALED),
            (BuildStage::Publish, types::PUBLISHED),
            (BuildStage::Validate, types::VALIDATED),
        ] {
            for (temp, seen, want) in [
                (
                    Temp::RootDataVolume,
                    Observation::Lost,
                    reasons::RESOURCE_LOST,
                ),
                (
                    Temp::BuildVm,
                    Observation::Replaced {
                        uid: "other".into(),
                    },
                    reasons::RESOURCE_REPLACED,
                ),
            ] {
                let (b, mut observed) = later(stage, running("vmi-clone", BuildBoot::Installed));
                observed.temps.insert(temp, Some(seen));
                let d = decide(&b, &observed, HOUR, at(100));
                assert_eq!(
                    reason(&d.status, condition),
                    ("False".to_owned(), want.to_owned()),
                    "{stage:?} with {temp:?} gone"
                );
                assert!(
                    !d.actions.iter().any(|a| matches!(
                        a,
                        Action::Delete { temp: t, .. } if *t == temp
                    )),
                    "{stage:?}: the {temp:?} that is not ours is never deleted: {:?}",
                    d.actions
                );
            }
        }
    }

    #[test]
    fn inputs_edited_after_admission_fail_the_attempt() {
        let mut observed = with_installer(Observation::Progress("1 active".into()));
        observed.admitted = Some(Ok(inputs("bb")));
        let decision = decide(&prepared(), &observed, HOUR, at(60));
        assert_eq!(
            reason(&decision.status, types::PREPARED).1,
            reasons::INPUTS_CHANGED
        );
    }

    #[test]
    fn the_deadline_fails_the_running_stage() {
        let observed = with_installer(Observation::Progress("1 active".into()));
        let decision = decide(&prepared(), &observed, HOUR, at(3600));
        assert_eq!(
            reason(&decision.status, types::PREPARED).1,
            reasons::BUILD_DEADLINE_EXCEEDED
        );
        assert_eq!(decision.status.phase, Some(BundlePhase::Failed));
    }

    #[test]
    fn the_deadline_fails_every_later_stage_and_the_attempt_cleans_up() {
        for (stage, condition) in [
            (BuildStage::Customize, types::CUSTOMIZED),
            (BuildStage::Seal, types::SEALED),
            (BuildStage::Publish, types::PUBLISHED),
            (BuildStage::Validate, types::VALIDATED),
        ] {
            let (b, observed) = later(stage, running("vmi-clone", BuildBoot::Installed));
            let d = decide(&b, &observed, HOUR, at(2 * 3600));
            assert_eq!(
                reason(&d.status, condition),
                (
                    "False".to_owned(),
                    reasons::BUILD_DEADLINE_EXCEEDED.to_owned()
                ),
                "{stage:?}"
            );
            assert_eq!(d.status.phase, Some(BundlePhase::Failed), "{stage:?}");
            // The attempt cleans up at once (a volume in use stays, protected, until its pod
            // goes).
            for temp in [Temp::BuildVm, Temp::ValidationVm, Temp::RootDataVolume] {
                assert!(
                    d.actions
                        .iter()
                        .any(|a| matches!(a, Action::Delete { temp: t, .. } if *t == temp)),
                    "{stage:?}: {temp:?} not deleted: {:?}",
                    d.actions
                );
            }
        }
    }

    #[test]
    fn a_crash_between_naming_and_creating_creates_again() {
        let first = decide(&bundle(), &admitted(), HOUR, at(0));
        let mut named = bundle();
        named.status = Some(first.status.clone());
        let mut observed = admitted();
        observed.jobs.insert(Temp::InstallerJob, JobState::Named);
        let again = decide(&named, &observed, HOUR, at(5));
        assert_eq!(
            again.actions,
            up_front(BuildStage::Prepare)
                .into_iter()
                .map(Action::Create)
                .collect::<Vec<_>>()
        );
        assert_eq!(
            again.status, first.status,
            "names unchanged, nothing new to write"
        );
    }
}
