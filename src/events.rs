//! Kubernetes Events about our objects (`kubectl describe` shows them): one on every change of
//! the reason of an object's main condition (`Ready`; `CapacityAvailable` for pools), and a few
//! for notable decisions (a raised root disk size). Publishing is
//! best effort: a failed Event is logged, never a reason to fail a reconcile.
//!
//! An Event repeated within [`SERIES_TTL`] (same object, type and reason) continues the first
//! one's series (`series.count`, `series.lastObservedTime`) instead of creating another, as
//! kube-runtime's `Recorder` does. Unlike that recorder, which keeps a copy of every Event it
//! published for six minutes (about 2.5 KiB each: 3 MiB after a thousand instances got their
//! first reason), only what a series needs is kept: the Event's name and count.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Resource;
use kube::api::Api;

use crate::api::conditions::{self, reasons};
use crate::text::truncate;

/// The controller name Events are reported by.
pub const REPORTER: &str = "guestcluster-operator";

/// How long a published Event can be continued as a series (kube-runtime's `Recorder`'s).
pub const SERIES_TTL: SignedDuration = SignedDuration::from_mins(6);

/// The action every Event reports.
const ACTION: &str = "Reconcile";

/// Normal or Warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Normal,
    Warning,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Normal => "Normal",
            Kind::Warning => "Warning",
        }
    }
}

/// Publishes Events (deduplicated into series).
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    /// `reportingInstance`: the pod's name, else the controller's.
    instance: String,
    series: Arc<Mutex<Series>>,
}

impl Events {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            instance: std::env::var("POD_NAME").unwrap_or_else(|_| REPORTER.to_owned()),
            series: Arc::default(),
        }
    }

    /// Publishes one Event about `object`.
    pub async fn publish<K>(&self, object: &K, kind: Kind, reason: &str, note: &str)
    where
        K: Resource<DynamicType = ()>,
    {
        if let Err(err) = self.send(&object.object_ref(&()), kind, reason, note).await {
            tracing::warn!(
                object = object.meta().name.as_deref().unwrap_or_default(),
                %reason,
                "publishing an Event failed: {err}"
            );
        }
    }

    async fn send(
        &self,
        regarding: &ObjectReference,
        kind: Kind,
        reason: &str,
        note: &str,
    ) -> Result<(), kube::Error> {
        let now = Timestamp::now();
        let key = SeriesKey::new(regarding, kind, reason);
        let earlier = self.lock().continued(&key, now);
        // Cluster-scoped objects' Events go to `default`, as kube-runtime's.
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let events: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let continued = match earlier {
            Some((name, count)) => {
                let series = EventSeries {
                    count,
                    last_observed_time: MicroTime(now),
                };
                let patch = serde_json::json!({ "series": series });
                match crate::write::api::merge_patch(&events, &name, &patch).await {
                    Ok(_) => Some((name, count)),
                    // The Event is gone (its TTL in the API server, or someone deleted it): a
                    // new series starts.
                    Err(kube::Error::Api(status)) if status.code == 404 => None,
                    Err(err) => {
                        // Whatever failed, the next Event starts afresh rather than patching a
                        // series that may not exist.
                        self.lock().forget(&key);
                        return Err(err);
                    }
                }
            }
            None => None,
        };
        let (name, count) = match continued {
            Some(sent) => sent,
            None => {
                let event = self.event(regarding, kind, reason, note, now);
                if let Err(err) = crate::write::api::create(&events, &event).await {
                    self.lock().forget(&key);
                    return Err(err);
                }
                (event.metadata.name.unwrap_or_default(), 1)
            }
        };
        self.lock().sent(key, name, count, now);
        Ok(())
    }

    /// A new Event, as kube-runtime's `Recorder` makes it.
    fn event(
        &self,
        regarding: &ObjectReference,
        kind: Kind,
        reason: &str,
        note: &str,
        now: Timestamp,
    ) -> Event {
        Event {
            action: Some(ACTION.to_owned()),
            reason: Some(reason.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(regarding.clone()),
            // The API server caps notes at 1 KiB.
            note: Some(truncate(note, 1000)),
            metadata: ObjectMeta {
                namespace: regarding.namespace.clone(),
                name: Some(format!(
                    "{}.{:x}",
                    regarding.name.as_deref().unwrap_or(REPORTER),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some(REPORTER.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(kind.as_str().to_owned()),
            ..Default::default()
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Series> {
        // Every update leaves the map consistent: a panicked holder does not matter.
        self.series.lock().unwrap_or_else(|p| p.into_inner())
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

/// Which object, type and reason an Event was about: a repeat continues its series.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct SeriesKey {
    kind: Kind,
    reason: String,
    /// The object's UID, or its kind, namespace and name when it has none.
    regarding: String,
}

impl SeriesKey {
    fn new(regarding: &ObjectReference, kind: Kind, reason: &str) -> Self {
        let regarding = regarding.uid.clone().unwrap_or_else(|| {
            format!(
                "{}/{}/{}",
                regarding.kind.as_deref().unwrap_or_default(),
                regarding.namespace.as_deref().unwrap_or_default(),
                regarding.name.as_deref().unwrap_or_default()
            )
        });
        Self {
            kind,
            reason: reason.to_owned(),
            regarding,
        }
    }
}

/// The Events published within [`SERIES_TTL`]: the name and count of each series.
#[derive(Default)]
struct Series(HashMap<SeriesKey, Sent>);

struct Sent {
    name: String,
    count: i32,
    last: Timestamp,
}

impl Series {
    /// The name and next count of the series `key` continues at `now`, if any; forgets the
    /// series older than [`SERIES_TTL`] first, so what is kept is bounded by the Events of the
    /// last few minutes.
    fn continued(&mut self, key: &SeriesKey, now: Timestamp) -> Option<(String, i32)> {
        self.0.retain(|_, sent| sent.last + SERIES_TTL > now);
        self.0
            .get(key)
            .map(|sent| (sent.name.clone(), sent.count + 1))
    }

    /// Forgets series `key`: its Event could not be written, so the next one starts a new series.
    fn forget(&mut self, key: &SeriesKey) {
        self.0.remove(key);
    }

    /// Remembers that the Event `name` of series `key` was published at `now`, `count` times.
    fn sent(&mut self, key: SeriesKey, name: String, count: i32, last: Timestamp) {
        self.0.insert(key, Sent { name, count, last });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::conditions::types;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

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

    fn key(uid: &str, reason: &str) -> SeriesKey {
        let regarding = ObjectReference {
            uid: Some(uid.to_owned()),
            ..Default::default()
        };
        SeriesKey::new(&regarding, Kind::Normal, reason)
    }

    #[test]
    fn a_repeat_within_the_ttl_continues_the_series_and_old_ones_are_forgotten() {
        let mut series = Series::default();
        let start = Timestamp::UNIX_EPOCH;
        let at = |secs: i64| start + SignedDuration::from_secs(secs);
        assert_eq!(
            series.continued(&key("a", "R"), start),
            None,
            "a first Event"
        );
        series.sent(key("a", "R"), "a.1".into(), 1, start);
        assert_eq!(
            series.continued(&key("a", "R"), at(60)),
            Some(("a.1".into(), 2))
        );
        series.sent(key("a", "R"), "a.1".into(), 2, at(60));
        assert_eq!(
            series.continued(&key("a", "R"), at(120)),
            Some(("a.1".into(), 3)),
            "counted from the last repeat"
        );
        assert_eq!(
            series.continued(&key("a", "S"), at(120)),
            None,
            "another reason"
        );
        assert_eq!(
            series.continued(&key("b", "R"), at(120)),
            None,
            "another object"
        );
        series.sent(key("b", "R"), "b.1".into(), 1, at(120));
        // Six minutes after a's last repeat: a's series is over and forgotten, b's goes on.
        assert_eq!(series.continued(&key("a", "R"), at(60 + 360)), None);
        assert_eq!(series.0.len(), 1, "only b's series is kept");
        assert_eq!(
            series.continued(&key("b", "R"), at(60 + 360)),
            Some(("b.1".into(), 2))
        );
        series.forget(&key("b", "R"));
        assert_eq!(
            series.continued(&key("b", "R"), at(60 + 361)),
            None,
            "a series whose Event could not be written starts again"
        );
    }

    #[test]
    fn long_notes_are_cut_on_a_character_boundary() {
        let text = "é".repeat(600);
        let cut = truncate(&text, 1000);
        assert!(cut.len() <= 1000 + '…'.len_utf8());
    }
}
