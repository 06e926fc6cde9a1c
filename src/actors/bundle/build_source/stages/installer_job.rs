//! The Prepare stage's child: the installer Job of a build attempt, recorded in
//! `status.build.resources.installerJob`. Its result is the termination message of its
//! succeeded pod ([`crate::contract::installer::Outcome`]); a lost installer Job fails the
//! attempt, because what it left on the work volume cannot be trusted half-written.

use k8s_openapi::api::batch::v1::Job;

use crate::actors::bundle::jobs::{JOB_RECHECK, observe_job};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::CRCBundleStatus;
use crate::api::common::ObjectIdentity;

/// The installer Job stage.
pub struct InstallerJob;

impl Stage for InstallerJob {
    type Object = Job;
    const KIND: &'static str = "crcbundle.installerjob";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;
    const RECHECK: Option<std::time::Duration> = Some(JOB_RECHECK);

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| r.installer_job.as_ref())
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        observe_job(job, ctx).await
    }
}
