//! The Install stage's guest session: the helper Job of the current step and VMI, recorded in
//! `status.build.resources.helperJob`. Its result is the termination message of its succeeded pod
//! ([`crate::contract::build_helper::Outcome`]). A lost helper Job is made again by the parent
//! (a helper works from status, so another run is safe: `docs/decisions.md`, "The Install
//! stage"); the child only reports.

use k8s_openapi::api::batch::v1::Job;

use crate::actors::bundle::jobs::observe_job;
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::CRCBundleStatus;
use crate::api::common::ObjectIdentity;

/// The guest session stage.
pub struct GuestSession;

impl Stage for GuestSession {
    type Object = Job;
    const KIND: &'static str = "crcbundle.guestsession";
    const WHEN_LOST: WhenLost = WhenLost::Recreate;
    const RECHECK: Option<std::time::Duration> = Some(crate::actors::bundle::jobs::JOB_RECHECK);

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| r.helper_job.as_ref())
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        observe_job(job, ctx).await
    }
}
