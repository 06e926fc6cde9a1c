//! What a Job of a bundle's stages shows: its outcome from its conditions, the termination
//! message of its pod, and, while it runs, what keeps its pod from starting.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;

use crate::actors::job_pods;
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::Observation;

/// How often a Job's pod that has not started is looked at again for what keeps it from
/// starting ([`recheck`]).
pub const JOB_RECHECK: Duration = Duration::from_secs(20);

/// While a pod of `job` exists that is not ready, [`JOB_RECHECK`]: what blocks it (an image it
/// cannot pull, a volume the kubelet refuses) shows in the pod and its Events, never in the
/// Job. Otherwise none: a new pod, a pod turning ready and a pod ending all change the Job's
/// status (`active`, `ready`, `failed`, `succeeded`), whose watch brings the child back. A Job
/// the Job controller has made no pod for yet waits for that, not for a timer.
pub fn recheck(job: &Job) -> Option<Duration> {
    let status = job.status.as_ref()?;
    (status.active.unwrap_or(0) > status.ready.unwrap_or(0)).then_some(JOB_RECHECK)
}

/// `progress`, followed by what keeps the Job's pod from starting, if anything does.
pub async fn with_blocker(
    progress: String,
    client: &kube::Client,
    ns: &str,
    job: &Job,
) -> Result<Observation, kube::Error> {
    Ok(Observation::Progress(
        match job_pods::blocker(client, ns, job).await? {
            Some(blocker) => format!("{progress}; {blocker}"),
            None => progress,
        },
    ))
}

/// A Job's outcome from its conditions (authoritative) or counters, as upstream read them.
pub fn outcome(job: &Job) -> Observation {
    let status = job.status.clone().unwrap_or_default();
    for condition in status.conditions.iter().flatten() {
        if condition.status != "True" {
            continue;
        }
        match condition.type_.as_str() {
            "Complete" => return Observation::Done(String::new()),
            "Failed" => {
                let reason = condition.reason.clone().unwrap_or_else(|| "Failed".into());
                let message = condition.message.clone().unwrap_or_default();
                return Observation::Failed(format!("{reason} {message}").trim().to_owned());
            }
            _ => {}
        }
    }
    if status.succeeded.unwrap_or(0) > 0 {
        return Observation::Done(String::new());
    }
    let limit = job.spec.as_ref().and_then(|s| s.backoff_limit).unwrap_or(6);
    match status.failed {
        Some(failed) if failed > limit => Observation::Failed(format!("{failed} pods failed")),
        failed => Observation::Progress(format!(
            "{} pod(s) active, {} failed",
            status.active.unwrap_or(0),
            failed.unwrap_or(0)
        )),
    }
}

/// The termination message of the Job's most recent failed pod (`<Reason>: <message>`): its
/// last line, where a failing program writes its reason, cut to an excerpt (a helper's reason
/// may quote a guest).
pub async fn last_failure(
    client: &kube::Client,
    ns: &str,
    job: &Job,
) -> Result<Option<String>, kube::Error> {
    let message = termination_message(client, ns, job, |code| code != 0).await?;
    Ok(message
        .map(|m| crate::text::tail_excerpt(m.lines().last().unwrap_or_default()))
        .filter(|m| !m.is_empty()))
}

/// The termination message of the Job's most recent pod (see [`job_pods::of`]) whose container
/// (or init container) exited with a code `exit` accepts.
pub async fn termination_message(
    client: &kube::Client,
    ns: &str,
    job: &Job,
    exit: impl Fn(i32) -> bool,
) -> Result<Option<String>, kube::Error> {
    let pods = job_pods::of(client, ns, job).await?;
    Ok(pods
        .iter()
        // Init containers too: the prep Job's download runs in one, and a failure there ends
        // the pod before its container starts.
        .flat_map(|p| {
            p.status.iter().flat_map(|s| {
                s.init_container_statuses
                    .iter()
                    .flatten()
                    .chain(s.container_statuses.iter().flatten())
            })
        })
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .filter(|t| exit(t.exit_code))
        .max_by_key(|t| t.finished_at.as_ref().map(|f| f.0))
        .and_then(|t| t.message.clone()))
}

/// A Job of the build whose result is its termination message: `Done` with the message of its
/// succeeded pod, `Failed` with the last line of its failed pod's.
pub async fn observe_job(job: &Job, ctx: &Context) -> Result<Observation, kube::Error> {
    Ok(match outcome(job) {
        Observation::Done(_) => Observation::Done(
            termination_message(&ctx.client, &ctx.namespace, job, |code| code == 0)
                .await?
                .unwrap_or_default(),
        ),
        Observation::Failed(why) => Observation::Failed(
            last_failure(&ctx.client, &ctx.namespace, job)
                .await?
                .unwrap_or(why),
        ),
        Observation::Progress(progress) => {
            with_blocker(progress, &ctx.client, &ctx.namespace, job).await?
        }
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(
            serde_json::json!({"metadata": {"name": "b-prep", "uid": "u"},
            "spec": {"backoffLimit": 2, "template": {}}, "status": status}),
        )
        .unwrap()
    }

    #[test]
    fn only_a_pod_that_has_not_started_is_looked_at_again() {
        use serde_json::json;
        assert_eq!(recheck(&job(json!({}))), None, "no pod made yet");
        assert_eq!(
            recheck(&job(json!({"active": 1, "ready": 0}))),
            Some(JOB_RECHECK)
        );
        assert_eq!(recheck(&job(json!({"active": 1}))), Some(JOB_RECHECK));
        assert_eq!(
            recheck(&job(json!({"active": 1, "ready": 1}))),
            None,
            "running"
        );
        assert_eq!(recheck(&job(json!({"failed": 1}))), None, "ended");
    }

    #[test]
    fn conditions_decide_over_counters() {
        assert_eq!(
            outcome(&job(
                serde_json::json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]})
            )),
            Observation::Done(String::new())
        );
        assert_eq!(
            outcome(&job(
                serde_json::json!({"failed": 3, "conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]})
            )),
            Observation::Failed("BackoffLimitExceeded".into())
        );
    }

    #[test]
    fn counters_decide_without_conditions() {
        assert_eq!(
            outcome(&job(serde_json::json!({"succeeded": 1}))),
            Observation::Done(String::new())
        );
        assert_eq!(
            outcome(&job(serde_json::json!({"failed": 3}))),
            Observation::Failed("3 pods failed".into())
        );
        assert_eq!(
            outcome(&job(serde_json::json!({"active": 1, "failed": 2}))),
            Observation::Progress("1 pod(s) active, 2 failed".into())
        );
    }
}
