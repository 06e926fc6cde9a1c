//! Kubernetes Events about our objects (`kubectl describe` shows them): one on every change of
//! the reason of an object's main condition (`Ready`; `CapacityAvailable` for pools), and a few
//! for notable decisions (a raised root disk size). Publishing is
//! best effort: a failed Event is logged, never a reason to fail a reconcile.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::Resource;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

use crate::api::conditions::{self, reasons};
use crate::text::truncate;

/// The controller name Events are reported by.
pub const REPORTER: &str = "guestcluster-operator";

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Normal,
    Warning,
}

/// Publishes Events (deduplicated into series by the recorder).
#[derive(Clone)]
pub struct Events {
    recorder: Recorder,
}

impl Events {
    pub fn new(client: kube::Client) -> Self {
        let reporter = Reporter {
            controller: REPORTER.into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Self {
            recorder: Recorder::new(client, reporter),
        }
    }

    /// Publishes one Event about `object`.
    pub async fn publish<K>(&self, object: &K, kind: Kind, reason: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        let event = Event {
            type_: match kind {
                Kind::Normal => EventType::Normal,
                Kind::Warning => EventType::Warning,
            },
            reason: reason.to_owned(),
            // The API server caps notes at 1 KiB.
            note: Some(truncate(note, 1000)),
            action: "Reconcile".into(),
            secondary: None,
        };
        if let Err(err) = self.recorder.publish(&event, &object.object_ref(&())).await {
            tracing::warn!(
                object = object.meta().name.as_deref().unwrap_or_default(),
                %reason,
                "publishing an Event failed: {err}"
            );
        }
    }

    /// An Event when condition `type_` changed reason or status between `before` and `after`:
    /// the stage an object is in, as people follow it with `kubectl describe`.
    pub async fn transition<K>(
        &self,
        object: &K,
        type_: &str,
        before: &[Condition],
        after: &[Condition],
    ) where
        K: Resource<DynamicType = ()>,
    {
        if let Some((kind, reason, note)) = transition(type_, before, after) {
            self.publish(object, kind, &reason, &note).await;
        }
    }
}

/// The Event for a change of condition `type_`, if it changed: `Normal` when it is `True` or the
/// reason means work in progress, `Warning` when someone has to act.
pub fn transition(
    type_: &str,
    before: &[Condition],
    after: &[Condition],
) -> Option<(Kind, String, String)> {
    let new = conditions::find(after, type_)?;
    let old = conditions::find(before, type_);
    if old.is_some_and(|o| o.status == new.status && o.reason == new.reason) {
        return None;
    }
    let kind = if new.status == "True" || PROGRESS_REASONS.contains(&new.reason.as_str()) {
        Kind::Normal
    } else {
        Kind::Warning
    };
    Some((kind, new.reason.clone(), new.message.clone()))
}

/// `False` reasons that mean "working on it", not "something is wrong".
const PROGRESS_REASONS: [&str; 12] = [
    reasons::PENDING,
    reasons::BUILDING,
    reasons::STAGE_SUCCEEDED,
    reasons::PREPARING,
    reasons::REPROVISIONING,
    reasons::CRC_BACKING_PENDING,
    reasons::AGENT_POD_PENDING,
    reasons::AGENT_WORKING,
    reasons::HANDOFF_PENDING,
    reasons::HANDOFF_RECEIVED,
    reasons::VMI_REPLACED,
    reasons::VMI_UNAVAILABLE,
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::types;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;

    fn ready(status: bool, reason: &str) -> Vec<Condition> {
        vec![conditions::new(
            types::READY,
            status,
            reason,
            "m",
            Some(1),
            Time(Timestamp::UNIX_EPOCH),
        )]
    }

    #[test]
    fn only_a_changed_ready_reason_makes_an_event() {
        assert_eq!(
            transition(types::READY, &ready(false, "A"), &ready(false, "A")),
            None
        );
        assert_eq!(
            transition(types::READY, &[], &ready(false, "CRCBackingPending")).map(|e| e.0),
            Some(Kind::Normal)
        );
        assert_eq!(
            transition(
                types::READY,
                &ready(false, "CRCBackingPending"),
                &ready(false, "AgentJobFailed")
            )
            .map(|e| e.0),
            Some(Kind::Warning)
        );
        assert_eq!(
            transition(
                types::READY,
                &ready(false, "X"),
                &ready(true, "BackingResourcesAvailable")
            )
            .map(|e| (e.0, e.1)),
            Some((Kind::Normal, "BackingResourcesAvailable".into()))
        );
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let text = "é".repeat(600);
        let cut = truncate(&text, 1000);
        assert!(cut.len() <= 1000 + '…'.len_utf8());
    }
}
