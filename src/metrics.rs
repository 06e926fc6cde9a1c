//! Prometheus metrics of the operator, served at `/metrics`.
//!
//! This module knows nothing of the actors: whoever runs them hands over a function that counts
//! the live ones ([`Metrics::count_live_actors_with`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// Labels naming the kind of object an actor or reconcile is about (`crcbundle`, `supervisor`, …).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

/// Labels of a reconcile outcome.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReconcileLabels {
    pub kind: String,
    /// `ok` or the condition reason of the error.
    pub result: String,
}

/// Live actors per kind, as counted by whoever runs the actors.
pub type LiveActorCounts = Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>;

/// Every metric the operator exports. Cloning shares the underlying values.
#[derive(Clone, Default)]
pub struct Metrics {
    /// Live actors per kind (refreshed from the actor registry on every scrape).
    pub actors: Family<KindLabels, Gauge>,
    /// Actors restarted by their supervisor after a failure, per kind.
    pub actor_restarts: Family<KindLabels, Counter>,
    /// Reconciles per kind and outcome.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Where the live-actor gauge is read from at scrape time; nothing counted until set.
    live_actor_counts: Arc<Mutex<Option<LiveActorCounts>>>,
}

impl Metrics {
    /// A registry exposing these metrics under the `guestcluster_` prefix.
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("guestcluster");
        registry.register("actors", "Live actors per kind", self.actors.clone());
        registry.register(
            "actor_restarts",
            "Actors restarted by their supervisor after a failure",
            self.actor_restarts.clone(),
        );
        registry.register(
            "reconciles",
            "Reconciles per kind and result",
            self.reconciles.clone(),
        );
        registry
    }

    /// Exposes the series of `kind` at zero before anything happens, so dashboards and alerts see
    /// "no restarts" rather than "no data".
    pub fn init_kind(&self, kind: &str) {
        let labels = kind_labels(kind);
        let _ = self.actors.get_or_create(&labels);
        let _ = self.actor_restarts.get_or_create(&labels);
    }

    pub fn actor_restarted(&self, kind: &str) {
        self.actor_restarts.get_or_create(&kind_labels(kind)).inc();
    }

    pub fn reconciled(&self, kind: &str, result: &str) {
        self.reconciles
            .get_or_create(&ReconcileLabels {
                kind: kind.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }

    /// Reads the live actors per kind through `count` from now on (shared by every clone).
    pub fn count_live_actors_with(
        &self,
        count: impl Fn() -> BTreeMap<String, i64> + Send + Sync + 'static,
    ) {
        *self.lock_live_actor_counts() = Some(Arc::new(count));
    }

    /// Current number of live actors of `kind`.
    pub fn live_actors(&self, kind: &str) -> i64 {
        self.live_actor_counts().get(kind).copied().unwrap_or(0)
    }

    fn live_actor_counts(&self) -> BTreeMap<String, i64> {
        // Called outside the lock: the counting function may take locks of its own.
        let count = self.lock_live_actor_counts().clone();
        count.map(|count| count()).unwrap_or_default()
    }

    fn lock_live_actor_counts(&self) -> std::sync::MutexGuard<'_, Option<LiveActorCounts>> {
        // A plain replace cannot leave the slot half-written, so a poisoned lock is still sound.
        self.live_actor_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Restarts of actors of `kind` so far.
    pub fn restarts(&self, kind: &str) -> u64 {
        self.actor_restarts.get_or_create(&kind_labels(kind)).get()
    }

    /// The OpenMetrics text exposition of all metrics.
    pub fn encode(&self) -> String {
        // Live actors are counted at scrape time rather than on start/stop: a killed actor skips
        // its own cleanup, and a counter would drift.
        for (kind, count) in self.live_actor_counts() {
            self.actors.get_or_create(&kind_labels(&kind)).set(count);
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry());
        out
    }
}

fn kind_labels(kind: &str) -> KindLabels {
    KindLabels {
        kind: kind.to_owned(),
    }
}
