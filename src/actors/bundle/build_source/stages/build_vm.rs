//! The Install stage's build VM, recorded in `status.build.resources.buildVM`. The child reports
//! the VM's printable status and its VMI's as progress, so every change of either (the VM's
//! status follows its VMI) brings its parent back to decide; the parent reads the VM, its VMI
//! and launcher pod itself when it decides. A lost build VM fails the attempt: its root disk's
//! install cannot be trusted half-done.

use crate::kubevirt::VirtualMachine;

use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::CRCBundleStatus;
use crate::api::common::ObjectIdentity;

/// The build VM stage.
pub struct BuildVmStage;

impl Stage for BuildVmStage {
    type Object = VirtualMachine;
    const KIND: &'static str = "crcbundle.buildvm";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| r.build_vm.as_ref())
    }

    async fn observe(vm: &VirtualMachine, _ctx: &Context) -> Result<Observation, kube::Error> {
        Ok(Observation::Progress(progress(vm)))
    }
}

/// The Validate stage's clone of the golden disk, booted as `status.build.resources.validationVM`:
/// followed like the build VM, and lost the same way (what it proved is not known half-done).
pub struct ValidationClone;

impl Stage for ValidationClone {
    type Object = VirtualMachine;
    const KIND: &'static str = "crcbundle.validationclone";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| r.validation_vm.as_ref())
    }

    async fn observe(vm: &VirtualMachine, _ctx: &Context) -> Result<Observation, kube::Error> {
        Ok(Observation::Progress(progress(vm)))
    }
}

/// The VM's run strategy, printable status and generation: what changes when its VMI does.
fn progress(vm: &VirtualMachine) -> String {
    let status = vm.status.clone().unwrap_or_default();
    format!(
        "runStrategy {:?}/{:?}, {:?}, created {}, ready {}, generation {:?}/{:?}",
        vm.spec.run_strategy,
        status.run_strategy,
        status.printable_status,
        status.created,
        status.ready,
        vm.metadata.generation,
        status.observed_generation
    )
}
