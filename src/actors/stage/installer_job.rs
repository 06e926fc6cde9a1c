//! The Prepare stage's child: the installer Job of a build attempt, recorded in
//! `status.build.resources.installerJob`. Its result is the termination message of its
//! succeeded pod ([`crate::contract::installer::Outcome`]); a lost installer Job fails the
//! attempt, because what it left on the work volume cannot be trusted half-written.

use k8s_openapi::api::batch::v1::Job;

use super::prep_job::{JOB_RECHECK, last_failure, outcome, termination_message, with_blocker};
use super::{Observation, Stage, WhenLost, build_slot};
use crate::actors::context::Context;
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

/// A Job of the build whose result is its termination message: `Done` with the message of its
/// succeeded pod, `Failed` with the last line of its failed pod's.
pub(super) async fn observe_job(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
    let name = job.metadata.name.as_deref().unwrap_or_default();
    Ok(match outcome(job) {
        Observation::Done(_) => Observation::Done(
            termination_message(&ctx.client, &ctx.namespace, name, |code| code == 0)
                .await?
                .unwrap_or_default(),
        ),
        Observation::Failed(why) => Observation::Failed(
            last_failure(&ctx.client, &ctx.namespace, name)
                .await?
                .unwrap_or(why),
        ),
        Observation::Progress(progress) => {
            with_blocker(progress, &ctx.client, &ctx.namespace, name).await?
        }
        other => other,
    })
}
