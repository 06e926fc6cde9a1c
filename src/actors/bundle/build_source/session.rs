//! The guest session: one boot of a build attempt's VM with the helper Job of that boot's step,
//! which the Install, Customize, Seal and Validate stages share. It brings the VM into the
//! boot's shape (halting it, waiting for its disks, starting it), then runs the step's helper
//! Job for the VMI running now, made again if it is lost and never counted for another VMI.
//! Its child follows the helper Job, recorded in `status.build.resources.helperJob`; the Job's
//! result is the termination message of its succeeded pod
//! ([`crate::contract::build_helper::Outcome`]). A lost helper Job is made again by the parent
//! (a helper works from status, so another run is safe: `docs/decisions.md`, "The Install
//! stage"); the child only reports.

use k8s_openapi::api::batch::v1::Job;

use super::step::{Action, BuildInput, Observed, Step, VmRole, VmSeen};
use super::temps::{Built, Temp};
use crate::actors::bundle::jobs::{self, observe_job};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::JobState;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, attempt_failure, build_slot};
use crate::api::bundle::{BuildStage, CRCBundleStatus};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::reasons;
use crate::contract::build_helper::{Outcome as HelperOutcome, Step as HelperStep};
use crate::resources::build::{self, HelperTarget, Names};
use crate::resources::profile::vm::BuildBoot;

/// The guest session's child: the helper Job of the current step and VMI.
pub struct GuestSession;

impl Stage for GuestSession {
    type Object = Job;
    const KIND: &'static str = "crcbundle.guestsession";
    const WHEN_LOST: WhenLost = WhenLost::Recreate;
    fn recheck(job: &Job) -> Option<std::time::Duration> {
        jobs::recheck(job)
    }

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| Temp::HelperJob.slot(r))
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        observe_job(job, ctx).await
    }
}

/// One boot of the build VM with its helper Job: what a stage wants of the guest.
pub struct Session {
    pub stage: BuildStage,
    pub label: &'static str,
    pub role: VmRole,
    pub boot: BuildBoot,
    pub helper_step: HelperStep,
    /// Whether the helper's result ends the session (not during the cold restart, whose boot
    /// only has to start).
    pub helper_counts: bool,
}

/// Where a session is after this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SessionState {
    /// The helper finished the step for the current VMI; its summary.
    Done(String),
    /// The VM was started in this boot's shape this pass.
    Started,
    /// Waiting (the stage's condition says on what), or the attempt failed.
    Pending,
}

impl Session {
    pub fn on_installed(
        stage: BuildStage,
        label: &'static str,
        helper_step: HelperStep,
    ) -> Session {
        Session {
            stage,
            label,
            role: VmRole::Build,
            boot: BuildBoot::Installed,
            helper_step,
            helper_counts: true,
        }
    }
}

/// Brings the build VM into the session's boot (halting it, waiting for its disks, starting
/// it), then runs the session's helper Job for the VMI running now, made again if it is lost
/// and never counted for another VMI.
pub fn guest_session(
    step: &mut Step,
    observed: &Observed,
    names: &Names,
    actions: &mut Vec<Action>,
    session: &Session,
) -> SessionState {
    let (stage, label, role) = (session.stage, session.label, session.role);
    let vm_name = names.vm_name(role);
    let Some(vm) = observed.vm_of(role) else {
        step.progress(stage, format!("waiting to read VirtualMachine {vm_name}"));
        return SessionState::Pending;
    };
    let helper_step = session.helper_step;
    // The helper of this step, for the VMI it was started for.
    let recorded_vmi = step.build().vmi_uid.clone();
    let helper = step
        .build()
        .resources
        .as_ref()
        .and_then(|r| r.helper_job.clone())
        .filter(|h| {
            recorded_vmi
                .as_deref()
                .is_some_and(|v| h.name == names.helper_job(helper_step, v))
        });
    if let Some(helper) = &helper
        && !helper.uid.is_empty()
        && session.helper_counts
    {
        match observed.job(Temp::HelperJob) {
            JobState::Seen(Observation::Done(message)) => {
                match serde_json::from_str::<HelperOutcome>(message) {
                    Ok(outcome) if outcome.vmi_gone.is_none() && outcome.step == helper_step => {
                        return SessionState::Done(outcome.summary);
                    }
                    // The VMI changed under it: the step starts again for the next VMI.
                    Ok(_) => {}
                    Err(err) => {
                        step.fail(
                            stage.condition(),
                            reasons::HELPER_JOB_FAILED,
                            format!(
                                "helper Job {} succeeded but its result is unreadable ({err}); is the operator image the same version as the Job's?",
                                helper.name
                            ),
                        );
                        return SessionState::Pending;
                    }
                }
            }
            JobState::Seen(Observation::Failed(detail))
                if vm.vmi.as_ref().map(|v| v.uid.as_str()) == recorded_vmi.as_deref() =>
            {
                // A refused manifest is the user's to fix: its own reason, not the Job's.
                let reason = if detail.contains(&format!("{}: ", reasons::MANIFEST_REJECTED)) {
                    reasons::MANIFEST_REJECTED
                } else {
                    reasons::HELPER_JOB_FAILED
                };
                step.fail(
                    stage.condition(),
                    reason,
                    format!(
                        "{} step: helper Job {} failed: {detail}",
                        helper_step.as_str(),
                        helper.name
                    ),
                );
                return SessionState::Pending;
            }
            JobState::Seen(Observation::Replaced { uid }) => {
                let (reason, message) = attempt_failure(
                    WhenLost::FailAttempt,
                    helper,
                    &Observation::Replaced { uid: uid.clone() },
                )
                .unwrap_or_default();
                step.fail(stage.condition(), reason, format!("Job {message}"));
                return SessionState::Pending;
            }
            _ => {}
        }
    }

    // The VM in the shape of this step's boot, running.
    if vm.boot.as_ref() != Some(&session.boot) || vm.halted {
        if !vm.halted {
            actions.push(Action::HaltVm(role));
            step.progress(stage, format!("{label}: stopping VirtualMachine {vm_name}"));
            return SessionState::Pending;
        }
        if let Some(message) = still_holding(vm, vm_name) {
            step.progress(stage, format!("{label}: {message}"));
            return SessionState::Pending;
        }
        actions.push(Action::StartVm(role, session.boot.clone()));
        step.progress(stage, format!("{label}: starting VirtualMachine {vm_name}"));
        return SessionState::Started;
    }
    let Some(vmi) = &vm.vmi else {
        let waiting = match &vm.failure {
            Some(failure) => format!("KubeVirt cannot start VirtualMachine {vm_name}: {failure}"),
            None => format!("waiting for KubeVirt to start VirtualMachine {vm_name}"),
        };
        step.progress(stage, format!("{label}: {waiting}"));
        return SessionState::Pending;
    };
    if let Some(blocked) = vmi.blocked.as_ref().filter(|_| vmi.running_at().is_none()) {
        step.progress(
            stage,
            format!(
                "{label}: VMI {} of VirtualMachine {vm_name} cannot start: {blocked}",
                vmi.uid
            ),
        );
        return SessionState::Pending;
    }
    if vmi.running_at().is_none() {
        step.progress(
            stage,
            format!(
                "{label}: VMI {} of VirtualMachine {vm_name} is {}",
                vmi.uid,
                if vmi.phase.is_empty() {
                    "starting"
                } else {
                    vmi.phase.as_str()
                }
            ),
        );
        return SessionState::Pending;
    }
    let wanted = names.helper_job(helper_step, &vmi.uid);
    match &helper {
        Some(h) if h.name == wanted && h.uid.is_empty() => {
            actions.push(Action::Create(Temp::HelperJob));
        }
        Some(h) if h.name == wanted => {
            let progress = match observed.job(Temp::HelperJob) {
                JobState::Seen(Observation::Progress(p)) => p.clone(),
                JobState::Seen(Observation::Lost) => {
                    // A helper Job is safe to make again: it works from status
                    // (`docs/decisions.md`, "The Install stage").
                    let resources = step
                        .build_mut()
                        .resources
                        .get_or_insert_with(Default::default);
                    if let Some(slot) = resources.helper_job.as_mut() {
                        slot.uid = String::new();
                    }
                    actions.push(Action::Create(Temp::HelperJob));
                    "made again after it was deleted".into()
                }
                _ => "starting".into(),
            };
            step.progress(
                stage,
                format!(
                    "{label}: helper Job {wanted} for VMI {}: {progress}",
                    vmi.uid
                ),
            );
            return SessionState::Pending;
        }
        _ => {
            // A new VMI, a new step (or none recorded yet): the previous helper goes, this
            // one's is named first and created right after.
            if let Some(old) = step
                .build()
                .resources
                .as_ref()
                .and_then(|r| r.helper_job.clone())
                .filter(|old| !old.uid.is_empty())
            {
                actions.push(Action::Delete {
                    temp: Temp::HelperJob,
                    name: old.name,
                    uid: old.uid,
                });
            }
            step.build_mut().vmi_uid = Some(vmi.uid.clone());
            let resources = step
                .build_mut()
                .resources
                .get_or_insert_with(Default::default);
            resources.helper_job = Some(ObjectIdentity {
                name: wanted.clone(),
                uid: String::new(),
            });
            actions.push(Action::Create(Temp::HelperJob));
        }
    }
    step.progress(
        stage,
        format!("{label}: starting helper Job {wanted} for VMI {}", vmi.uid),
    );
    SessionState::Pending
}

/// What still holds the disks of a halted VM, or `None` once nothing does.
pub fn still_holding(vm: &VmSeen, vm_name: &str) -> Option<String> {
    if let Some(vmi) = &vm.vmi {
        return Some(format!(
            "waiting for VMI {} ({}) of VirtualMachine {vm_name} to go",
            vmi.uid, vmi.phase
        ));
    }
    // The launcher pods carry the bundle's label and are watched (metadata only), and
    // `status.runStrategy` comes with the VM's watch event: both wake this pass.
    (vm.launcher_pod || !vm.halt_observed).then(|| {
        format!(
            "waiting for the virt-launcher pod of VirtualMachine {vm_name} to release its disks"
        )
    })
}

/// The helper Job named in status for the VMI the pass saw running; `None` when the pass did not
/// see it (the next pass creates it).
pub fn build_helper(input: &BuildInput) -> Option<Built> {
    let status = input.status;
    let names = input.names;
    let build = status.build.as_ref()?;
    let step = input.helper_step?;
    let vmi = input.observed.vm_of(VmRole::of(step))?.vmi.as_ref()?;
    let recorded = build.resources.as_ref()?.helper_job.as_ref()?;
    if build.vmi_uid.as_deref() != Some(vmi.uid.as_str())
        || recorded.name != names.helper_job(step, &vmi.uid)
    {
        return None;
    }
    let release = status.release.as_ref()?;
    let pinned = crate::tools::release::pinned(&release.image, release.digest.as_deref()?);
    Some(
        build::helper_job(
            input.bundle,
            input.spec,
            input.ns,
            names,
            &HelperTarget {
                step,
                vmi_uid: &vmi.uid,
                ssh_host: vmi.ip.as_deref()?,
                release_image: &pinned,
            },
            input.jobs,
        )
        .into(),
    )
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

    #[test]
    fn a_running_vmi_gets_its_helper_named_first_then_created() {
        let (b, observed) = installing(
            InstallStep::Generator,
            running("vmi-1aaa", generator_boot()),
            JobState::Unreported,
        );
        let d = decide(&b, &observed, HOUR, at(70));
        assert_eq!(d.actions, vec![Action::Create(Temp::HelperJob)]);
        let build = d.status.build.as_ref().unwrap();
        assert_eq!(build.vmi_uid.as_deref(), Some("vmi-1aaa"));
        assert_eq!(
            build
                .resources
                .as_ref()
                .unwrap()
                .helper_job
                .as_ref()
                .unwrap()
                .name,
            "custom-b1-generator-vmi1aaa"
        );
    }

    #[test]
    fn a_vmi_kubevirt_cannot_start_is_waited_for_with_kubevirts_reason() {
        let mut vm = running("vmi-1aaa", generator_boot());
        if let Some(vmi) = vm.vmi.as_mut() {
            vmi.phase = "Scheduled".into();
            vmi.ip = None;
            vmi.blocked = Some("Synchronizing with the Domain failed.: Could not open 'disk.img': Permission denied".into());
        }
        let (b, observed) = installing(InstallStep::Generator, vm, JobState::Unreported);
        let d = decide(&b, &observed, HOUR, at(70));
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        let message = d.status.build.as_ref().unwrap().message.clone().unwrap();
        assert!(
            message.contains("VMI vmi-1aaa of VirtualMachine")
                && message.contains("cannot start: Synchronizing with the Domain failed.: Could not open 'disk.img': Permission denied"),
            "{message}"
        );

        let mut vm = running("vmi-1aaa", generator_boot());
        vm.vmi = None;
        vm.failure = Some("FailedCreate: Failure while starting VMI: denied".into());
        let (b, observed) = installing(InstallStep::Generator, vm, JobState::Unreported);
        let message = decide(&b, &observed, HOUR, at(70))
            .status
            .build
            .unwrap()
            .message
            .unwrap();
        assert!(
            message.contains("KubeVirt cannot start VirtualMachine")
                && message.ends_with("FailedCreate: Failure while starting VMI: denied"),
            "{message}"
        );
    }
}
