//! Prometheus metrics of the operator, served at `/metrics`.
//!
//! This module knows nothing of the actors: whoever runs them hands over a function that counts
//! the live ones ([`Metrics::count_live_actors_with`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
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

/// Labels of a failed reconcile: the kind and the error's reason (`ReadFailed`,
/// `StatusWriteFailed`, …, or a kind's own).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub kind: String,
    pub reason: String,
}

/// Labels of an API request the operator's client sent: the HTTP method and the response's status
/// code (`error` when no response came).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: String,
    pub code: String,
}

/// Labels of a build stage that ended: the stage and `ok` or the failure's reason.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StageLabels {
    pub stage: String,
    pub result: String,
}

/// Labels of an object count: its kind and the phase its status reports (`None`: none).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub kind: String,
    pub phase: String,
}

/// Labels of a bundle count: where its disk comes from and the stage it is at.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BundleStageLabels {
    pub source: String,
    pub stage: String,
}

/// Labels of the pools' sizes: which number (`pools`, `min`, `max`, `total`, `available`,
/// `leased`). No pool or namespace name: `/metrics` names no tenant's objects (the dashboard,
/// on loopback, does).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PoolLabels {
    pub state: String,
}

/// Objects of one kind per phase, as counted by whoever watches them.
pub type PhaseCounts = Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>;

/// A number per actor kind (live actors, waiting messages), as counted by whoever runs the
/// actors.
pub type PerKindCounts = Arc<dyn Fn() -> BTreeMap<String, i64> + Send + Sync>;

/// Every metric the operator exports. Cloning shares the underlying values.
#[derive(Clone)]
pub struct Metrics {
    /// Live actors per kind (refreshed from the actor registry on every scrape).
    pub actors: Family<KindLabels, Gauge>,
    /// Messages sent to actors and not yet handled, per kind (refreshed on every scrape).
    pub mailbox_depth: Family<KindLabels, Gauge>,
    /// Actors restarted by their supervisor after a failure, per kind.
    pub actor_restarts: Family<KindLabels, Counter>,
    /// Reconciles per kind and outcome.
    pub reconciles: Family<ReconcileLabels, Counter>,
    /// Failed reconciles per kind and reason.
    pub reconcile_errors: Family<ErrorLabels, Counter>,
    /// Objects per kind whose last reconcile failed and that wait for their retry.
    pub backoff_objects: Family<KindLabels, Gauge>,
    /// The longest retry delay currently scheduled per kind, in seconds (0: none backing off).
    pub backoff_max_delay: Family<KindLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    /// Every scheduled retry of a failed reconcile, by its delay in seconds.
    pub retry_delays: Family<KindLabels, Histogram, fn() -> Histogram>,
    /// How long reconciles took, per kind and outcome.
    pub reconcile_durations: Family<ReconcileLabels, Histogram, fn() -> Histogram>,
    /// Build stages that ended, by how long they took, per stage and result.
    pub build_stages: Family<StageLabels, Histogram, fn() -> Histogram>,
    /// API requests sent, per verb and response code.
    pub api_requests: Family<RequestLabels, Counter>,
    /// 1 while this process leads (runs the supervision tree), else 0.
    pub leader: Gauge,
    /// Objects per kind and phase (refreshed from the watch caches on every scrape).
    pub objects: Family<PhaseLabels, Gauge>,
    /// CRCBundles per source and current stage (set from the watch cache on every scrape).
    pub bundles: Family<BundleStageLabels, Gauge>,
    /// Each pool's bounds and instance counts (set from the watch cache on every scrape).
    pub pool_instances: Family<PoolLabels, Gauge>,
    /// Where `objects` is read from at scrape time, per kind.
    phase_counts: Arc<Mutex<BTreeMap<String, PhaseCounts>>>,
    /// Where the live-actor gauge is read from at scrape time; nothing counted until set.
    live_actor_counts: Arc<Mutex<Option<PerKindCounts>>>,
    /// Where the mailbox-depth gauge is read from at scrape time; nothing counted until set.
    mailbox_depths: Arc<Mutex<Option<PerKindCounts>>>,
    /// Current retry delay of every object backing off, per kind and UID.
    backing_off: Arc<Mutex<HashMap<String, HashMap<String, Duration>>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            actors: Family::default(),
            mailbox_depth: Family::default(),
            actor_restarts: Family::default(),
            reconciles: Family::default(),
            reconcile_errors: Family::default(),
            backoff_objects: Family::default(),
            backoff_max_delay: Family::default(),
            retry_delays: Family::new_with_constructor(retry_delay_histogram),
            reconcile_durations: Family::new_with_constructor(duration_histogram),
            api_requests: Family::default(),
            build_stages: Family::new_with_constructor(stage_histogram),
            leader: Gauge::default(),
            objects: Family::default(),
            bundles: Family::default(),
            pool_instances: Family::default(),
            phase_counts: Arc::default(),
            live_actor_counts: Arc::default(),
            mailbox_depths: Arc::default(),
            backing_off: Arc::default(),
        }
    }
}

/// Buckets of the retry delays: the reconcile backoff's steps (1 s doubling) up to its cap.
fn retry_delay_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 300.0])
}

/// Buckets of reconcile durations: from a pass that only reads caches to one that waits on the
/// API server for many writes.
fn duration_histogram() -> Histogram {
    Histogram::new([
        0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    ])
}

/// Buckets of build stage durations: seconds for a failed check, hours for an install.
fn stage_histogram() -> Histogram {
    Histogram::new([
        10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 1800.0, 3600.0, 7200.0, 14400.0,
    ])
}

impl Metrics {
    /// A registry exposing these metrics under the `guestcluster_` prefix.
    pub fn registry(&self) -> Registry {
        let mut registry = Registry::with_prefix("guestcluster");
        registry.register("actors", "Live actors per kind", self.actors.clone());
        registry.register(
            "mailbox_depth",
            "Messages sent to actors and not yet handled, per kind",
            self.mailbox_depth.clone(),
        );
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
        registry.register(
            "reconcile_errors",
            "Failed reconciles per kind and the reason of their error",
            self.reconcile_errors.clone(),
        );
        registry.register(
            "reconcile_backoff_objects",
            "Objects whose last reconcile failed, waiting for their retry",
            self.backoff_objects.clone(),
        );
        registry.register(
            "reconcile_backoff_max_delay_seconds",
            "Longest retry delay currently scheduled for a failed reconcile",
            self.backoff_max_delay.clone(),
        );
        registry.register(
            "reconcile_retry_delay_seconds",
            "Retries of failed reconciles, by the delay they were scheduled with",
            self.retry_delays.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "How long reconciles took, per kind and result",
            self.reconcile_durations.clone(),
        );
        registry.register(
            "build_stage_duration_seconds",
            "Build stages that ended, by how long they took, per stage and result",
            self.build_stages.clone(),
        );
        registry.register(
            "api_requests",
            "API requests the operator sent, per HTTP verb and response code",
            self.api_requests.clone(),
        );
        registry.register(
            "objects",
            "Objects per kind and the phase their status reports",
            self.objects.clone(),
        );
        registry.register(
            "bundles",
            "CRCBundles per source and the stage they are at",
            self.bundles.clone(),
        );
        registry.register(
            "pool_instances",
            "ClusterPools (pools) and their bounds (min, max) and instances (total, available, leased), summed over every pool",
            self.pool_instances.clone(),
        );
        registry.register(
            "leader",
            "1 while this process leads and runs the supervision tree",
            self.leader.clone(),
        );
        registry.register(
            "dropped_fields",
            "Fields of the operator's writes that the API server did not store (see the warning log)",
            crate::write::dropped_fields_counter(),
        );
        registry
    }

    /// Exposes the series of `kind` at zero before anything happens, so dashboards and alerts see
    /// "no restarts" rather than "no data".
    pub fn init_kind(&self, kind: &str) {
        let labels = kind_labels(kind);
        let _ = self.actors.get_or_create(&labels);
        let _ = self.actor_restarts.get_or_create(&labels);
        let _ = self.backoff_objects.get_or_create(&labels);
        let _ = self.backoff_max_delay.get_or_create(&labels);
    }

    pub fn actor_restarted(&self, kind: &str) {
        self.actor_restarts.get_or_create(&kind_labels(kind)).inc();
    }

    /// A reconcile of `kind` ended with `result` after `took`.
    pub fn reconciled(&self, kind: &str, result: &str, took: Duration) {
        let labels = ReconcileLabels {
            kind: kind.to_owned(),
            result: result.to_owned(),
        };
        self.reconciles.get_or_create(&labels).inc();
        self.reconcile_durations
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A reconcile of `kind` failed with an error of `reason`.
    pub fn reconcile_failed(&self, kind: &str, reason: &str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels {
                kind: kind.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    /// A build stage ended with `result` (`ok` or a reason) after `took`.
    pub fn build_stage_ended(&self, stage: &str, result: &str, took: Duration) {
        self.build_stages
            .get_or_create(&StageLabels {
                stage: stage.to_owned(),
                result: result.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    /// The client sent a request with `verb` and got `code` (`None`: no response).
    pub fn api_request(&self, verb: &str, code: Option<u16>) {
        self.api_requests
            .get_or_create(&RequestLabels {
                verb: verb.to_owned(),
                code: code.map_or_else(|| "error".to_owned(), |c| c.to_string()),
            })
            .inc();
    }

    /// The object `uid` of `kind` failed to reconcile and is retried after `delay`.
    pub fn retrying(&self, kind: &str, uid: &str, delay: Duration) {
        self.retry_delays
            .get_or_create(&kind_labels(kind))
            .observe(delay.as_secs_f64());
        self.set_backing_off(kind, |objects| {
            objects.insert(uid.to_owned(), delay);
        });
    }

    /// The object `uid` of `kind` no longer backs off: it reconciled, or its actor stopped.
    pub fn not_backing_off(&self, kind: &str, uid: &str) {
        self.set_backing_off(kind, |objects| {
            objects.remove(uid);
        });
    }

    /// Objects of `kind` backing off now, and the longest of their delays.
    pub fn backing_off(&self, kind: &str) -> (usize, Duration) {
        let all = self.lock_backing_off();
        let objects = all.get(kind);
        (
            objects.map_or(0, HashMap::len),
            objects
                .and_then(|o| o.values().max().copied())
                .unwrap_or_default(),
        )
    }

    fn set_backing_off(&self, kind: &str, change: impl FnOnce(&mut HashMap<String, Duration>)) {
        let mut all = self.lock_backing_off();
        let objects = all.entry(kind.to_owned()).or_default();
        change(objects);
        // Updated under the lock, so two changes cannot leave the gauges in the wrong order.
        let labels = kind_labels(kind);
        self.backoff_objects
            .get_or_create(&labels)
            .set(i64::try_from(objects.len()).unwrap_or(i64::MAX));
        let longest = objects.values().max().copied().unwrap_or_default();
        self.backoff_max_delay
            .get_or_create(&labels)
            .set(longest.as_secs_f64());
    }

    fn lock_backing_off(
        &self,
    ) -> std::sync::MutexGuard<'_, HashMap<String, HashMap<String, Duration>>> {
        // Every change is a single insert or remove: a poisoned map is still consistent.
        self.backing_off
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Reads the live actors per kind through `count` from now on (shared by every clone).
    pub fn count_live_actors_with(
        &self,
        count: impl Fn() -> BTreeMap<String, i64> + Send + Sync + 'static,
    ) {
        *lock_slot(&self.live_actor_counts) = Some(Arc::new(count));
    }

    /// Reads the waiting messages per actor kind through `count` from now on.
    pub fn count_mailboxes_with(
        &self,
        count: impl Fn() -> BTreeMap<String, i64> + Send + Sync + 'static,
    ) {
        *lock_slot(&self.mailbox_depths) = Some(Arc::new(count));
    }

    /// Reads the objects of `kind` per phase through `count` from now on.
    pub fn count_objects_with(
        &self,
        kind: &str,
        count: impl Fn() -> BTreeMap<String, i64> + Send + Sync + 'static,
    ) {
        self.phase_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(kind.to_owned(), Arc::new(count));
    }

    /// Current number of live actors of `kind`.
    pub fn live_actors(&self, kind: &str) -> i64 {
        self.live_actor_counts().get(kind).copied().unwrap_or(0)
    }

    fn live_actor_counts(&self) -> BTreeMap<String, i64> {
        read_slot(&self.live_actor_counts)
    }

    /// Restarts of actors of `kind` so far.
    pub fn restarts(&self, kind: &str) -> u64 {
        self.actor_restarts.get_or_create(&kind_labels(kind)).get()
    }

    /// Replaces the bundle counts by source and stage; a pair nobody is at drops out.
    pub fn set_bundle_stages(&self, counts: &BTreeMap<(String, String), i64>) {
        self.bundles.clear();
        for ((source, stage), n) in counts {
            self.bundles
                .get_or_create(&BundleStageLabels {
                    source: source.clone(),
                    stage: stage.clone(),
                })
                .set(*n);
        }
    }

    /// Replaces the pools' sizes: `state → value`, summed over every pool.
    pub fn set_pool_sizes(&self, sizes: &BTreeMap<&str, i64>) {
        self.pool_instances.clear();
        for (state, value) in sizes {
            self.pool_instances
                .get_or_create(&PoolLabels {
                    state: (*state).to_owned(),
                })
                .set(*value);
        }
    }

    /// The OpenMetrics text exposition of all metrics.
    pub fn encode(&self) -> String {
        // Live actors are counted at scrape time rather than on start/stop: a killed actor skips
        // its own cleanup, and a counter would drift.
        for (kind, count) in self.live_actor_counts() {
            self.actors.get_or_create(&kind_labels(&kind)).set(count);
        }
        self.mailbox_depth.clear();
        for (kind, depth) in read_slot(&self.mailbox_depths) {
            self.mailbox_depth
                .get_or_create(&kind_labels(&kind))
                .set(depth);
        }
        // Phases nobody is in any more drop out rather than linger at their last count.
        let counts: Vec<(String, PhaseCounts)> = self
            .phase_counts
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .iter()
            .map(|(k, c)| (k.clone(), c.clone()))
            .collect();
        self.objects.clear();
        for (kind, count) in counts {
            for (phase, n) in count() {
                self.objects
                    .get_or_create(&PhaseLabels {
                        kind: kind.clone(),
                        phase,
                    })
                    .set(n);
            }
        }
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry());
        out
    }
}

fn lock_slot(
    slot: &Mutex<Option<PerKindCounts>>,
) -> std::sync::MutexGuard<'_, Option<PerKindCounts>> {
    // A plain replace cannot leave the slot half-written, so a poisoned lock is still sound.
    slot.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read_slot(slot: &Mutex<Option<PerKindCounts>>) -> BTreeMap<String, i64> {
    // Called outside the lock: the counting function may take locks of its own.
    let count = lock_slot(slot).clone();
    count.map(|count| count()).unwrap_or_default()
}

fn kind_labels(kind: &str) -> KindLabels {
    KindLabels {
        kind: kind.to_owned(),
    }
}
