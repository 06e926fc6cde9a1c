//! The Publish stage (condition `Published`): the build VM stopped and its disks released, the
//! bundle's golden PVC, then the disk Job copying the root disk into it. Its child follows the
//! disk Job.

use k8s_openapi::api::batch::v1::Job;

use super::install::after_cold_restart;
use crate::actors::bundle::build_source::session::still_holding;
use crate::actors::bundle::build_source::step::{
    Action, BuildInput, Observed, Owned, Step, VmRole, ensure_temps,
};
use crate::actors::bundle::build_source::temps::{Built, Temp};
use crate::actors::bundle::jobs::{self, observe_job};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::JobState;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::{BuildStage, CRCBundleStatus};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::{reasons, types};
use crate::contract::disk::Outcome as DiskOutcome;
use crate::resources::build::{self, Names};

/// What the Publish stage makes: the disk Job.
pub const TEMPS: [Temp; 1] = [Temp::DiskJob];

/// The build VM stopped and its disks released, the golden PVC, then the disk Job
/// copying the root disk into it.
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    if !ensure_temps(
        step,
        observed,
        names,
        &after_cold_restart(),
        types::PUBLISHED,
        actions,
    ) {
        return;
    }
    let Some(vm) = &observed.vm else {
        step.progress(
            BuildStage::Publish,
            format!("waiting to read VirtualMachine {}", names.build_vm),
        );
        return;
    };
    if !vm.halted {
        actions.push(Action::HaltVm(VmRole::Build));
        step.progress(
            BuildStage::Publish,
            format!("stopping VirtualMachine {}", names.build_vm),
        );
        return;
    }
    if let Some(message) = still_holding(vm, &names.build_vm) {
        step.progress(BuildStage::Publish, message);
        return;
    }
    let golden = crate::resources::bundle::Names::of(names.bundle()).golden_pvc;
    match observed.golden {
        Owned::Ours => {}
        Owned::Missing => {
            actions.push(Action::CreateGoldenPvc);
            step.progress(
                BuildStage::Publish,
                format!("creating the golden PVC {golden}"),
            );
            return;
        }
        Owned::NotOurs => {
            step.fail(
                types::PUBLISHED,
                reasons::RESOURCE_REPLACED,
                format!(
                    "PersistentVolumeClaim {golden} exists but this bundle does not control it; it is not written to. Delete it to retry"
                ),
            );
            return;
        }
    }
    if !ensure_temps(step, observed, names, &TEMPS, types::PUBLISHED, actions) {
        return;
    }
    if !actions.is_empty() {
        step.progress(
            BuildStage::Publish,
            format!("starting disk Job {} into {golden}", names.disk_job),
        );
        return;
    }
    match observed.job(Temp::DiskJob) {
        JobState::Seen(Observation::Done(result)) => {
            match serde_json::from_str::<DiskOutcome>(result) {
                Ok(outcome) => {
                    let short: String = outcome.disk_sha256.chars().take(12).collect();
                    step.status.disk_sha256 = Some(outcome.disk_sha256.clone());
                    step.status.disk_sha256_short = Some(short);
                    step.status.disk_virtual_size = i64::try_from(outcome.disk_virtual_size).ok();
                    step.succeed(
                        BuildStage::Publish,
                        format!(
                            "the build VM's root disk copied into {golden}/disk.img: {} bytes virtual, {} bytes of data, sha256 {}",
                            outcome.disk_virtual_size, outcome.data_bytes, outcome.disk_sha256
                        ),
                    );
                }
                Err(err) => step.fail(
                    types::PUBLISHED,
                    reasons::DISK_JOB_FAILED,
                    format!(
                        "disk Job {} succeeded but its result is unreadable ({err}); is the operator image the same version as the Job's?",
                        names.disk_job
                    ),
                ),
            }
        }
        JobState::Seen(Observation::Failed(detail)) => step.fail(
            types::PUBLISHED,
            reasons::DISK_JOB_FAILED,
            format!("disk Job {} failed: {detail}", names.disk_job),
        ),
        JobState::Seen(Observation::Progress(progress)) => step.progress(
            BuildStage::Publish,
            format!("disk Job {}: {progress}", names.disk_job),
        ),
        _ => step.progress(
            BuildStage::Publish,
            format!("waiting for disk Job {}", names.disk_job),
        ),
    }
}

/// The Publish stage's object: the disk Job into the bundle's golden PVC.
pub fn build(temp: Temp, input: &BuildInput) -> Result<Option<Built>, String> {
    match temp {
        Temp::DiskJob => {
            let golden = crate::resources::bundle::Names::of(input.names.bundle()).golden_pvc;
            Ok(Some(
                build::disk_job(
                    input.bundle,
                    input.spec,
                    input.ns,
                    input.names,
                    &golden,
                    input.jobs,
                )
                .into(),
            ))
        }
        other => Err(format!("the Publish stage does not make {other:?}")),
    }
}

/// The Publish stage's child: the disk Job of a build attempt, recorded in
/// `status.build.resources.diskJob`. Its result is the termination message of its succeeded pod
/// ([`crate::contract::disk::Outcome`]). A lost disk Job fails the attempt: a golden PVC it was
/// writing holds a partial file that nothing may trust until a new attempt writes it again.
pub struct DiskCopy;

impl Stage for DiskCopy {
    type Object = Job;
    const KIND: &'static str = "crcbundle.diskcopy";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;
    fn recheck(job: &Job) -> Option<std::time::Duration> {
        jobs::recheck(job)
    }

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| Temp::DiskJob.slot(r))
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        observe_job(job, ctx).await
    }
}
