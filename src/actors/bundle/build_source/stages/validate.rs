//! The Validate stage (condition `Validated`): the golden PVC cloned into the validation
//! DataVolume and booted as the validation clone, on real time (sealing checked, the CRC startup
//! path run), then again with its clock 20 days ahead. Its child follows the validation clone.

use super::install::{after_cold_restart, vm_progress};
use crate::actors::bundle::build_source::session::{Session, SessionState, guest_session};
use crate::actors::bundle::build_source::step::{
    Action, BuildInput, Observed, Step, VmRole, ensure_temps,
};
use crate::actors::bundle::build_source::temps::{Built, Temp};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::{BuildStage, BuildStatus, CRCBundleStatus, ValidationBoot};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::types;
use crate::contract::build_helper::Step as HelperStep;
use crate::kubevirt::VirtualMachine;
use crate::resources::build::{self, Names};
use crate::resources::profile::vm::BuildBoot;

/// What the Validate stage makes: the clone of the golden PVC and the VM that boots it.
pub const TEMPS: [Temp; 2] = [Temp::ValidationDataVolume, Temp::ValidationVm];

/// The golden PVC cloned into the validation DataVolume, booted on real time (sealing
/// checked, the startup path run), then again with its clock 20 days ahead.
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let mut needed = after_cold_restart();
    needed.extend(TEMPS);
    if !ensure_temps(step, observed, names, &needed, types::VALIDATED, actions) {
        return;
    }
    if !actions.is_empty() {
        step.progress(
            BuildStage::Validate,
            format!(
                "cloning the golden PVC into DataVolume {} for VirtualMachine {}",
                names.validation_data_volume, names.validation_vm
            ),
        );
        return;
    }
    let boot = *step
        .build_mut()
        .validation_boot
        .get_or_insert(ValidationBoot::RealTime);
    let session = match boot {
        ValidationBoot::RealTime => Session {
            stage: BuildStage::Validate,
            label: "first boot, real time",
            role: VmRole::Validation,
            boot: BuildBoot::Installed,
            helper_step: HelperStep::Validate,
            helper_counts: true,
        },
        ValidationBoot::Aged => Session {
            stage: BuildStage::Validate,
            label: "second boot, 20 days ahead",
            role: VmRole::Validation,
            boot: BuildBoot::Aged,
            helper_step: HelperStep::Aged,
            helper_counts: true,
        },
    };
    if let SessionState::Done(summary) = guest_session(step, observed, names, actions, &session) {
        match boot {
            ValidationBoot::RealTime => {
                step.build_mut().validation_boot = Some(ValidationBoot::Aged);
                step.progress(BuildStage::Validate, format!("first boot: {summary}"));
            }
            ValidationBoot::Aged => step.succeed(
                BuildStage::Validate,
                format!(
                    "a clone of the golden disk booted on real time (sealing held, the CRC startup path passed) and again 20 days ahead: {summary}"
                ),
            ),
        }
    }
}

/// The helper step of the validation clone's current boot.
pub fn helper_step(build: &BuildStatus) -> Option<HelperStep> {
    Some(match build.validation_boot? {
        ValidationBoot::RealTime => HelperStep::Validate,
        ValidationBoot::Aged => HelperStep::Aged,
    })
}

/// The Validate stage's objects: the clone of the golden PVC and the VM that boots it.
pub fn build(temp: Temp, input: &BuildInput) -> Result<Option<Built>, String> {
    let (bundle, ns, names) = (input.bundle, input.ns, input.names);
    Ok(Some(match temp {
        Temp::ValidationDataVolume => {
            let golden = crate::resources::bundle::Names::of(names.bundle()).golden_pvc;
            build::validation_data_volume(bundle, ns, names, &golden).into()
        }
        Temp::ValidationVm => build::validation_vm(bundle, ns, names, &BuildBoot::Installed)
            .map_err(|e| e.to_string())?
            .into(),
        other => return Err(format!("the Validate stage does not make {other:?}")),
    }))
}

/// The Validate stage's child: the clone of the golden disk, booted as
/// `status.build.resources.validationVM`: followed like the build VM, and lost the same way (what
/// it proved is not known half-done).
pub struct ValidationClone;

impl Stage for ValidationClone {
    type Object = VirtualMachine;
    const KIND: &'static str = "crcbundle.validationclone";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| Temp::ValidationVm.slot(r))
    }

    async fn observe(vm: &VirtualMachine, _ctx: &Context) -> Result<Observation, kube::Error> {
        Ok(Observation::Progress(vm_progress(vm)))
    }
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

    #[test]
    fn validation_boots_the_clone_on_real_time_then_20_days_ahead() {
        let (b, observed) = later(
            BuildStage::Validate,
            running("vmi-clone", BuildBoot::Installed),
        );
        let d = decide(&b, &observed, HOUR, at(100));
        let build = d.status.build.as_ref().unwrap();
        assert_eq!(build.validation_boot, Some(ValidationBoot::RealTime));
        assert_eq!(d.actions, vec![Action::Create(Temp::HelperJob)]);
        let helper = build
            .resources
            .as_ref()
            .unwrap()
            .helper_job
            .clone()
            .unwrap();
        assert_eq!(helper.name, "custom-b1-validate-vmiclone");
        assert_eq!(helper_step(build), Some(HelperStep::Validate));

        // The first boot's helper done: the clone is halted for its aged boot.
        let mut b = applied(b, &d);
        let mut observed = observed;
        observed.jobs.insert(
            Temp::HelperJob,
            JobState::Seen(Observation::Done(
                serde_json::to_string(&HelperOutcome {
                    step: HelperStep::Validate,
                    vmi_gone: None,
                    summary: "sealing held".into(),
                })
                .unwrap(),
            )),
        );
        let d = decide(&b, &observed, HOUR, at(101));
        assert_eq!(
            d.status.build.as_ref().unwrap().validation_boot,
            Some(ValidationBoot::Aged)
        );
        b = applied(b, &d);
        observed.jobs.insert(Temp::HelperJob, JobState::Unreported);
        let d = decide(&b, &observed, HOUR, at(102));
        assert_eq!(d.actions, vec![Action::HaltVm(VmRole::Validation)]);

        // Halted and released: started again 20 days ahead.
        observed.validation_vm = Some(VmSeen {
            boot: Some(BuildBoot::Installed),
            halted: true,
            halt_observed: true,
            vmi: None,
            failure: None,
            launcher_pod: false,
        });
        let d = decide(&b, &observed, HOUR, at(103));
        assert_eq!(
            d.actions,
            vec![Action::StartVm(VmRole::Validation, BuildBoot::Aged)]
        );

        // The aged boot's helper done: Validated, and on to Ready.
        let vmi = "vmi-aged";
        let mut b = applied(b, &d);
        let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
        build.vmi_uid = Some(vmi.into());
        build.resources.as_mut().unwrap().helper_job = Some(ObjectIdentity {
            name: Names::of("custom", 1).helper_job(HelperStep::Aged, vmi),
            uid: "aged-uid".into(),
        });
        observed.validation_vm = Some(running(vmi, BuildBoot::Aged));
        observed.jobs.insert(
            Temp::HelperJob,
            JobState::Seen(Observation::Done(
                serde_json::to_string(&HelperOutcome {
                    step: HelperStep::Aged,
                    vmi_gone: None,
                    summary: "passed again".into(),
                })
                .unwrap(),
            )),
        );
        let d = decide(&b, &observed, HOUR, at(104));
        assert_eq!(
            d.status.build.as_ref().unwrap().stage,
            Some(BuildStage::Ready)
        );
        // Stage and message move in one write: no Validate message under Ready.
        assert_eq!(
            d.status.build.as_ref().unwrap().message.as_deref(),
            Some("publishing the bundle")
        );
        let validated = conditions::find(&d.status.conditions, types::VALIDATED).unwrap();
        assert_eq!(
            (validated.status.as_str(), validated.reason.as_str()),
            ("True", reasons::STAGE_SUCCEEDED)
        );
        assert!(
            validated.message.contains("passed again"),
            "{}",
            validated.message
        );
    }
}
