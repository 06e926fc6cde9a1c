//! How long each build stage took, and how it ended, read off two consecutive statuses: a stage
//! ends when its condition turns `True`, or when the attempt fails in it. It starts when the
//! stage before it ended (the attempt's start for the first).

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::bundle::{BuildStage, CRCBundleStatus};
use crate::api::conditions;

/// One stage that ended between `before` and `after`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StageEnd {
    pub stage: BuildStage,
    /// `ok`, or the reason of the failure.
    pub result: String,
    pub took: Duration,
}

/// The stages that ended going from `before` to `after`.
pub fn ended(before: Option<&CRCBundleStatus>, after: &CRCBundleStatus) -> Vec<StageEnd> {
    let Some(build) = after.build.as_ref() else {
        return Vec::new();
    };
    let stages: Vec<(BuildStage, &str)> = BuildStage::with_conditions().collect();
    let true_since = |status: Option<&CRCBundleStatus>, type_: &str| {
        status
            .and_then(|s| conditions::find(&s.conditions, type_))
            .filter(|c| c.status == "True")
            .map(|c| c.last_transition_time.clone())
    };
    // When each stage started: the previous stage's end, the attempt's start for the first.
    let started = |index: usize| -> Option<Time> {
        match index.checked_sub(1) {
            None => build.started_at.clone(),
            Some(previous) => true_since(Some(after), stages[previous].1),
        }
    };
    let mut ends = Vec::new();
    for (index, (stage, type_)) in stages.iter().enumerate() {
        if let Some(done) = true_since(Some(after), type_)
            && true_since(before, type_).is_none()
            && let Some(start) = started(index)
        {
            ends.push(StageEnd {
                stage: *stage,
                result: "ok".to_owned(),
                took: between(&start, &done),
            });
        }
    }
    let was = before.and_then(|s| s.build.as_ref()).and_then(|b| b.stage);
    if build.stage == Some(BuildStage::Failed)
        && let Some(failed) = was.filter(|s| *s != BuildStage::Failed)
        && let Some(index) = stages.iter().position(|(s, _)| *s == failed)
        && let (Some(start), Some(end)) = (started(index), build.finished_at.clone())
    {
        let reason = conditions::find(&after.conditions, stages[index].1)
            .filter(|c| c.status == "False")
            .map_or_else(|| "Failed".to_owned(), |c| c.reason.clone());
        ends.push(StageEnd {
            stage: failed,
            result: reason,
            took: between(&start, &end),
        });
    }
    ends
}

fn between(start: &Time, end: &Time) -> Duration {
    end.0
        .duration_since(start.0)
        .try_into()
        .unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn at(s: i64) -> String {
        Timestamp::from_second(1_000_000 + s).unwrap().to_string()
    }

    fn status(
        stage: &str,
        finished: Option<i64>,
        conditions: serde_json::Value,
    ) -> CRCBundleStatus {
        let mut build = json!({"stage": stage, "startedAt": at(0)});
        if let Some(f) = finished {
            build["finishedAt"] = at(f).into();
        }
        serde_json::from_value(json!({"build": build, "conditions": conditions})).unwrap()
    }

    fn cond(type_: &str, ok: bool, reason: &str, when: i64) -> serde_json::Value {
        json!({"type": type_, "status": if ok {"True"} else {"False"}, "reason": reason,
               "message": "", "lastTransitionTime": at(when)})
    }

    #[test]
    fn a_stage_ends_when_its_condition_turns_true_timed_from_the_stage_before() {
        let before = status(
            "Install",
            None,
            json!([cond("Prepared", true, "Prepared", 60)]),
        );
        let after = status(
            "Customize",
            None,
            json!([
                cond("Prepared", true, "Prepared", 60),
                cond("Installed", true, "Installed", 3660)
            ]),
        );
        assert_eq!(
            ended(Some(&before), &after),
            [StageEnd {
                stage: BuildStage::Install,
                result: "ok".into(),
                took: Duration::from_secs(3600),
            }]
        );
        assert!(ended(Some(&after), &after).is_empty(), "counted once");
        // The first stage is timed from the attempt's start.
        let first = ended(None, &before);
        assert_eq!(first[0].stage, BuildStage::Prepare);
        assert_eq!(first[0].took, Duration::from_secs(60));
    }

    #[test]
    fn a_failed_attempt_ends_its_stage_with_the_reason() {
        let before = status(
            "Seal",
            None,
            json!([
                cond("Prepared", true, "Prepared", 60),
                cond("Installed", true, "Installed", 160),
                cond("Customized", true, "Customized", 260),
            ]),
        );
        let after = status(
            "Failed",
            Some(300),
            json!([
                cond("Prepared", true, "Prepared", 60),
                cond("Installed", true, "Installed", 160),
                cond("Customized", true, "Customized", 260),
                cond("Sealed", false, "SealIncomplete", 300),
            ]),
        );
        assert_eq!(
            ended(Some(&before), &after),
            [StageEnd {
                stage: BuildStage::Seal,
                result: "SealIncomplete".into(),
                took: Duration::from_secs(40),
            }]
        );
    }
}
