//! The download source's stage: the prep Job (`<bundle>-prep`), recorded in `status.prepJob`.
//! A lost prep Job is made again, as upstream does (`docs/decisions.md`).

use k8s_openapi::api::batch::v1::Job;

use crate::actors::bundle::jobs::{self, last_failure, outcome, with_blocker};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost};
use crate::api::bundle::CRCBundleStatus;
use crate::api::common::ObjectIdentity;
/// The prep Job stage.
pub struct PrepJob;

impl Stage for PrepJob {
    type Object = Job;
    const KIND: &'static str = "crcbundle.prepjob";
    const WHEN_LOST: WhenLost = WhenLost::Recreate;
    fn recheck(job: &Job) -> Option<std::time::Duration> {
        jobs::recheck(job)
    }

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        status.prep_job.as_ref().filter(|job| !job.uid.is_empty())
    }

    async fn observe(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
        Ok(match outcome(job) {
            Observation::Failed(why) => {
                let detail = last_failure(&ctx.client, &ctx.namespace, job).await?;
                Observation::Failed(detail.unwrap_or(why))
            }
            Observation::Progress(progress) => {
                with_blocker(progress, &ctx.client, &ctx.namespace, job).await?
            }
            other => other,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_recorded_uid_is_a_slot_to_follow() {
        let mut status = CRCBundleStatus::default();
        assert_eq!(PrepJob::slot(&status), None);
        status.prep_job = Some(ObjectIdentity {
            name: "b-prep".into(),
            uid: String::new(),
        });
        assert_eq!(PrepJob::slot(&status), None, "named, not created yet");
        status.prep_job.as_mut().unwrap().uid = "u".into();
        assert_eq!(PrepJob::slot(&status).unwrap().uid, "u");
    }
}
