//! What the operator's watch caches hold, as rows: bundles with their source, stage and a
//! timeline read from their conditions, pools with their size, instances with phase and reason,
//! leases. Read on every request of the dashboard and every scrape (the inventory metrics).
//!
//! The row builders are pure; [`Inventory::read`] and [`record`] only read the caches.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;

use crate::actors::Context;
use crate::actors::runtime::object_actor::phase_name;
use crate::api::bundle::{BundleSource, CRCBundle};
use crate::api::conditions::types;
use crate::api::instance::ClusterInstance;
use crate::api::lease::ClusterLease;
use crate::api::pool::ClusterPool;

/// Every cached object of the four kinds, as rows sorted by namespace and name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inventory {
    pub bundles: Vec<BundleRow>,
    pub pools: Vec<PoolRow>,
    pub instances: Vec<InstanceRow>,
    pub leases: Vec<LeaseRow>,
}

impl Inventory {
    /// The rows of what the caches hold now.
    pub fn read(ctx: &Context) -> Self {
        let caches = &ctx.caches;
        Self {
            bundles: sorted(caches.objects::<CRCBundle>().iter().map(|b| bundle_row(b))),
            pools: sorted(caches.objects::<ClusterPool>().iter().map(|p| pool_row(p))),
            instances: sorted(
                caches
                    .objects::<ClusterInstance>()
                    .iter()
                    .map(|i| instance_row(i)),
            ),
            leases: sorted(
                caches
                    .objects::<ClusterLease>()
                    .iter()
                    .map(|l| lease_row(l)),
            ),
        }
    }
}

/// A row's place in its table.
trait Keyed {
    fn key(&self) -> (&str, &str);
}

fn sorted<R: Keyed>(rows: impl Iterator<Item = R>) -> Vec<R> {
    let mut rows: Vec<R> = rows.collect();
    rows.sort_by(|a, b| a.key().cmp(&b.key()));
    rows
}

impl Keyed for BundleRow {
    fn key(&self) -> (&str, &str) {
        ("", &self.name)
    }
}

impl Keyed for PoolRow {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

impl Keyed for InstanceRow {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

impl Keyed for LeaseRow {
    fn key(&self) -> (&str, &str) {
        (&self.namespace, &self.name)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct BundleRow {
    pub name: String,
    /// `Download`, `Build`, or `-` before the first status.
    pub source: String,
    pub phase: String,
    /// The build stage; for a download the first condition not yet `True`, else the phase.
    pub stage: String,
    pub timeline: Vec<Step>,
}

/// One condition in the order its last transition happened, with the time since the previous.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub at: String,
    /// Seconds since the step before it (none for the first).
    pub after_seconds: Option<i64>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PoolRow {
    pub namespace: String,
    pub name: String,
    pub min_size: i32,
    pub max_size: i32,
    pub total: i32,
    pub available: i32,
    pub leased: i32,
}

#[derive(Clone, Debug, PartialEq)]
pub struct InstanceRow {
    pub namespace: String,
    pub name: String,
    pub phase: String,
    /// The reason (and message) of `Ready`, else of the first condition that is not `True`.
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct LeaseRow {
    pub namespace: String,
    pub name: String,
    pub pool: String,
    pub phase: String,
    pub instance: String,
}

fn or_dash(value: Option<String>) -> String {
    value
        .filter(|v| !v.is_empty())
        .unwrap_or_else(|| "-".to_owned())
}

pub fn bundle_row(bundle: &CRCBundle) -> BundleRow {
    let status = bundle.status.as_ref();
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    let source = status.and_then(|s| s.source).map(|s| match s {
        BundleSource::Download => "Download".to_owned(),
        BundleSource::Build => "Build".to_owned(),
    });
    let build_stage = status
        .and_then(|s| s.build.as_ref())
        .and_then(|b| phase_name(b.stage));
    let pending = conditions
        .iter()
        .find(|c| c.status != "True")
        .map(|c| c.type_.clone());
    let phase = status.and_then(|s| phase_name(s.phase));
    BundleRow {
        name: bundle.name_any(),
        source: or_dash(source),
        stage: or_dash(build_stage.or(pending).or_else(|| phase.clone())),
        phase: or_dash(phase),
        timeline: timeline(conditions),
    }
}

/// The conditions in the order of their last transition.
pub fn timeline(conditions: &[Condition]) -> Vec<Step> {
    let mut sorted: Vec<&Condition> = conditions.iter().collect();
    sorted.sort_by_key(|c| c.last_transition_time.0);
    let mut previous: Option<&Time> = None;
    sorted
        .into_iter()
        .map(|c| {
            let at = &c.last_transition_time;
            let step = Step {
                type_: c.type_.clone(),
                status: c.status.clone(),
                reason: c.reason.clone(),
                at: at.0.to_string(),
                after_seconds: previous.map(|p| at.0.duration_since(p.0).as_secs()),
            };
            previous = Some(at);
            step
        })
        .collect()
}

pub fn pool_row(pool: &ClusterPool) -> PoolRow {
    let status = pool.status.as_ref();
    let count = |f: fn(&crate::api::pool::ClusterPoolStatus) -> Option<i32>| {
        status.and_then(f).unwrap_or(0)
    };
    PoolRow {
        namespace: pool.namespace().unwrap_or_default(),
        name: pool.name_any(),
        min_size: pool.spec.min_size,
        max_size: pool.spec.max_size,
        total: count(|s| s.total_instances),
        available: count(|s| s.available_instances),
        leased: count(|s| s.leased_instances),
    }
}

pub fn instance_row(instance: &ClusterInstance) -> InstanceRow {
    let status = instance.status.as_ref();
    let conditions = status.map(|s| s.conditions.as_slice()).unwrap_or_default();
    // `Ready` says why an instance is or is not ready; some other conditions are good when False.
    let telling = conditions
        .iter()
        .find(|c| c.type_ == types::READY)
        .or_else(|| conditions.iter().find(|c| c.status != "True"));
    let reason = telling.map(|c| {
        if c.message.is_empty() {
            c.reason.clone()
        } else {
            format!("{}: {}", c.reason, c.message)
        }
    });
    InstanceRow {
        namespace: instance.namespace().unwrap_or_default(),
        name: instance.name_any(),
        phase: or_dash(status.and_then(|s| phase_name(s.phase))),
        reason: or_dash(reason),
    }
}

pub fn lease_row(lease: &ClusterLease) -> LeaseRow {
    let status = lease.status.as_ref();
    LeaseRow {
        namespace: lease.namespace().unwrap_or_default(),
        name: lease.name_any(),
        pool: lease.spec.pool_ref.name.clone(),
        phase: or_dash(status.and_then(|s| phase_name(s.phase))),
        instance: or_dash(
            status
                .and_then(|s| s.instance_ref.as_ref())
                .map(|r| r.name.clone()),
        ),
    }
}

/// Bundles per `(source, stage)`, for `guestcluster_bundles`.
pub fn bundle_stages(bundles: &[BundleRow]) -> BTreeMap<(String, String), i64> {
    let mut counts = BTreeMap::new();
    for b in bundles {
        *counts
            .entry((b.source.clone(), b.stage.clone()))
            .or_insert(0) += 1;
    }
    counts
}

/// The pools' bounds and counts summed over every pool, and how many pools there are, for
/// `guestcluster_pool_instances`.
pub fn pool_sizes(pools: &[PoolRow]) -> BTreeMap<&'static str, i64> {
    let mut sizes = BTreeMap::from([
        ("pools", 0),
        ("min", 0),
        ("max", 0),
        ("total", 0),
        ("available", 0),
        ("leased", 0),
    ]);
    for p in pools {
        for (state, value) in [
            ("pools", 1),
            ("min", p.min_size),
            ("max", p.max_size),
            ("total", p.total),
            ("available", p.available),
            ("leased", p.leased),
        ] {
            *sizes.entry(state).or_insert(0) += i64::from(value);
        }
    }
    sizes
}

/// Refreshes the inventory metrics (bundles by stage, pool sizes) from the watch caches; called
/// on every scrape.
pub fn record(ctx: &Context) {
    let inventory = Inventory::read(ctx);
    ctx.metrics
        .set_bundle_stages(&bundle_stages(&inventory.bundles));
    ctx.metrics.set_pool_sizes(&pool_sizes(&inventory.pools));
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;

    fn condition(type_: &str, status: &str, reason: &str, at: &str) -> Condition {
        Condition {
            type_: type_.to_owned(),
            status: status.to_owned(),
            reason: reason.to_owned(),
            message: String::new(),
            last_transition_time: Time(at.parse::<Timestamp>().expect("time")),
            observed_generation: None,
        }
    }

    #[test]
    fn the_timeline_follows_the_transitions_with_the_time_between() {
        let steps = timeline(&[
            condition(
                "Installed",
                "True",
                "InstallComplete",
                "2026-12-01T10:30:00Z",
            ),
            condition("Prepared", "True", "Prepared", "2026-12-01T10:00:00Z"),
            condition("Customized", "False", "Customizing", "2026-12-01T10:30:05Z"),
        ]);
        let order: Vec<_> = steps.iter().map(|s| s.type_.as_str()).collect();
        assert_eq!(order, ["Prepared", "Installed", "Customized"]);
        let gaps: Vec<_> = steps.iter().map(|s| s.after_seconds).collect();
        assert_eq!(gaps, [None, Some(1800), Some(5)]);
    }

    fn bundle(status: serde_json::Value) -> CRCBundle {
        serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "CRCBundle",
            "metadata": { "name": "crc-4.22", "namespace": "guestcluster-system", "uid": "b1" },
            "spec": { "bundleUrl": "https://example.com/crc.crcbundle" },
            "status": status,
        }))
        .expect("bundle")
    }

    #[test]
    fn a_bundle_shows_its_source_and_the_first_stage_not_done() {
        let row = bundle_row(&bundle(json!({
            "phase": "Preparing",
            "source": "Download",
            "conditions": [
                { "type": "Downloaded", "status": "False", "reason": "Downloading", "message": "",
                  "lastTransitionTime": "2026-12-01T10:00:00Z" },
            ],
        })));
        assert_eq!(row.source, "Download");
        assert_eq!(row.phase, "Preparing");
        assert_eq!(row.stage, "Downloaded");
        let fresh = bundle_row(&bundle(json!(null)));
        assert_eq!((fresh.source.as_str(), fresh.phase.as_str()), ("-", "-"));
    }

    #[test]
    fn pool_sizes_sum_every_bound_and_count_over_the_pools() {
        let row = |namespace: &str, total| PoolRow {
            namespace: namespace.into(),
            name: "ci".into(),
            min_size: 2,
            max_size: 4,
            total,
            available: 1,
            leased: 2,
        };
        let sizes = pool_sizes(&[row("team-a", 3), row("team-b", 4)]);
        let states: Vec<_> = sizes.iter().map(|(s, v)| (*s, *v)).collect();
        assert_eq!(
            states,
            [
                ("available", 2),
                ("leased", 4),
                ("max", 8),
                ("min", 4),
                ("pools", 2),
                ("total", 7),
            ]
        );
        assert_eq!(pool_sizes(&[])["pools"], 0);
    }
}
