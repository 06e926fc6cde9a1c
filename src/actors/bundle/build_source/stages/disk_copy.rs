//! The Publish stage's child: the disk Job of a build attempt, recorded in
//! `status.build.resources.diskJob`. Its result is the termination message of its succeeded pod
//! ([`crate::contract::disk::Outcome`]). A lost disk Job fails the attempt: a golden PVC it was
//! writing holds a partial file that nothing may trust until a new attempt writes it again.

use k8s_openapi::api::batch::v1::Job;

use crate::actors::bundle::jobs::observe_job;
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::CRCBundleStatus;
use crate::api::common::ObjectIdentity;

/// The disk copy stage.
pub struct DiskCopy;

impl Stage for DiskCopy {
    type Object = Job;
    const KIND: &'static str = "crcbundle.diskcopy";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;
    const RECHECK: Option<std::time::Duration> = Some(crate::actors::bundle::jobs::JOB_RECHECK);

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| r.disk_job.as_ref())
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        observe_job(job, ctx).await
    }
}
