//! Prometheus metrics of the operator, served at `/metrics`.

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

/// Every metric the operator exports. Cloning shares the underlying values.
#[derive(Clone, Default)]
pub struct Metrics {
    /// Live actors per kind (refreshed from the actor registry on every scrape).
    pub actors: Family<KindLabels, Gauge>,
    /// Actors restarted by their supervisor after a failure, per kind.
    pub actor_restarts: Family<KindLabels, Counter>,
    /// Reconciles per kind and outcome.
    pub reconciles: Family<ReconcileLabels, Counter>,
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

    /// Current number of live actors of `kind`, from the actor registry.
    pub fn live_actors(&self, kind: &str) -> i64 {
        crate::actors::live_actor_counts()
            .get(kind)
            .copied()
            .unwrap_or(0)
    }

    /// Restarts of actors of `kind` so far.
    pub fn restarts(&self, kind: &str) -> u64 {
        self.actor_restarts.get_or_create(&kind_labels(kind)).get()
    }

    /// The OpenMetrics text exposition of all metrics.
    pub fn encode(&self) -> String {
        // Live actors are read from the actor registry at scrape time rather than counted on
        // start/stop: a killed actor skips its own cleanup, and a counter would drift.
        for (kind, count) in crate::actors::live_actor_counts() {
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
