//! Pure decisions of the ClusterPool controller (`docs/operations.md`, "ClusterPool"): the
//! namespace policy, the lease and instance accounting, need/room/excess, the CRCBundle a pool
//! ensures, and the one change a reconcile makes: create one instance, or delete the newest idle
//! one. The actor (`pool/mod.rs`) observes, these functions decide, the actor acts and records the
//! status.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::actors::instance::gates::HCP_MESSAGE;
use crate::actors::lease::decide::{claimed, is_pending};
use crate::actors::pool::bundles::{PoolBundles, bundle_for};
use crate::actors::runtime::platform::NamespaceState;
use crate::api::CRCBundle;
use crate::api::common::ClusterType;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{ClusterInstance, InstancePhase};
use crate::api::lease::ClusterLease;
use crate::api::pool::{ClusterPool, ClusterPoolSpec, ClusterPoolStatus};
use crate::resources::pool::{instance_name, is_member, new_instance};

/// The pool's instances, counted (see [`count`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Every instance of the pool, terminating ones included.
    pub total: i32,
    /// With a deletionTimestamp.
    pub terminating: i32,
    /// Not terminating, phase Ready, claimed by no lease.
    pub available: i32,
    /// Not terminating, phase Ready, claimed by a lease.
    pub leased: i32,
    /// Terminating, or not yet Ready (no phase, Provisioning, Terminating); not Failed.
    pub pending: i32,
}

/// The size the pool works toward (`docs/operations.md`, "ClusterPool", steps 5 and 6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sizing {
    /// Instances to add: `max(minSize − total, warmSpares − (available + pending),
    /// pendingDemand − (available + pending))`.
    pub need: i32,
    /// Instances that may still be added: `maxSize − total`.
    pub room: i32,
    /// Available instances beyond what is wanted: `min(available − max(warmSpares,
    /// pendingDemand), total − minSize)`.
    pub excess: i32,
}

/// What a reconcile does besides recording `status`.
#[derive(Clone, Debug)]
pub struct Decision {
    pub status: ClusterPoolStatus,
    /// The CRCBundle that must exist (created when missing, never changed).
    pub bundle: Option<CRCBundle>,
    /// Create this instance (at most one change per reconcile).
    pub create: Option<ClusterInstance>,
    /// Delete this idle instance (name, UID), scaling down.
    pub delete: Option<(String, String)>,
    /// Look again after this long: an instance is not idle long enough to be trimmed yet (a
    /// deadline). A pool blocked by the namespace policy has no timer: the shared Namespace view
    /// wakes it when the policy changes.
    pub requeue: Option<Duration>,
}

/// Lease accounting of a pool (`docs/operations.md`, "ClusterPool", step 3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaseDemand {
    /// Instance names in any lease's `status.instanceRef`, deleting leases included.
    pub claimed: BTreeSet<String>,
    /// Leases of this pool, not deleting, Pending or without a phase.
    pub pending_demand: i32,
}

/// Lease accounting of `pool` over every lease of its namespace.
pub fn lease_demand(pool: &str, leases: &[ClusterLease]) -> LeaseDemand {
    let pending = leases
        .iter()
        .filter(|l| l.metadata.deletion_timestamp.is_none())
        .filter(|l| l.spec.pool_ref.name == pool)
        .filter(|l| is_pending(l))
        .count();
    LeaseDemand {
        claimed: claimed(leases),
        pending_demand: i32::try_from(pending).unwrap_or(i32::MAX),
    }
}

fn is_ready(instance: &ClusterInstance) -> bool {
    instance
        .status
        .as_ref()
        .is_some_and(|s| s.phase == Some(InstancePhase::Ready))
}

/// Its bundle now publishes another disk than it was cloned from (`Stale=True`).
fn is_stale(instance: &ClusterInstance) -> bool {
    instance
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, types::STALE))
        .is_some_and(|c| c.status == "True")
}

/// Counts the members of `pool` among `instances`; `claimed` are the instances leases hold.
pub fn count(pool: &str, instances: &[ClusterInstance], claimed: &BTreeSet<String>) -> Counts {
    let mut counts = Counts::default();
    for instance in instances.iter().filter(|i| is_member(pool, i)) {
        counts.total += 1;
        if instance.metadata.deletion_timestamp.is_some() {
            counts.terminating += 1;
            counts.pending += 1;
            continue;
        }
        let phase = instance.status.as_ref().and_then(|s| s.phase);
        match phase {
            Some(InstancePhase::Ready) if claimed.contains(&instance.name_any()) => {
                counts.leased += 1
            }
            Some(InstancePhase::Ready) => counts.available += 1,
            Some(InstancePhase::Failed) => {}
            _ => counts.pending += 1,
        }
    }
    counts
}

/// The need, room and excess of a pool with `counts` and `pending_demand` waiting leases.
pub fn sizing(spec: &ClusterPoolSpec, counts: Counts, pending_demand: i32) -> Sizing {
    let coming = counts.available.saturating_add(counts.pending);
    let need = (spec.min_size - counts.total)
        .max(spec.warm_spares.saturating_sub(coming))
        .max(pending_demand.saturating_sub(coming));
    let spare_floor = spec.warm_spares.max(pending_demand);
    Sizing {
        need,
        room: spec.max_size.saturating_sub(counts.total),
        excess: (counts.available - spare_floor).min(counts.total - spec.min_size),
    }
}

/// Since when an instance is idle: its `Ready` condition's lastTransitionTime, else its
/// creation time.
pub fn idle_since(instance: &ClusterInstance) -> Option<Timestamp> {
    instance
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, types::READY))
        .map(|c| c.last_transition_time.0)
        .or_else(|| instance.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The instance scale-down deletes: among the Ready, unclaimed, not deleting members idle for at
/// least `grace`, a stale one first, then the newest (by creation time, then name). `Err(wait)`: none is idle long
/// enough yet, the first becomes so after `wait`; `Ok(None)`: no candidate at all.
pub fn trim_candidate<'a>(
    pool: &str,
    instances: &'a [ClusterInstance],
    claimed: &BTreeSet<String>,
    now: Timestamp,
    grace: Duration,
) -> Result<Option<&'a ClusterInstance>, Duration> {
    let mut shortest: Option<Duration> = None;
    let mut idle: Vec<&ClusterInstance> = Vec::new();
    let candidates = instances
        .iter()
        .filter(|i| is_member(pool, i))
        .filter(|i| i.metadata.deletion_timestamp.is_none())
        .filter(|i| is_ready(i))
        .filter(|i| !claimed.contains(&i.name_any()));
    for instance in candidates {
        let since = idle_since(instance).unwrap_or(now);
        let elapsed = Duration::try_from(now.duration_since(since)).unwrap_or_default();
        match grace.checked_sub(elapsed) {
            Some(left) if !left.is_zero() => {
                shortest = Some(shortest.map_or(left, |s| s.min(left)));
            }
            _ => idle.push(instance),
        }
    }
    if let Some(newest) = idle.into_iter().max_by_key(|i| {
        (
            is_stale(i),
            i.metadata.creation_timestamp.as_ref().map(|t| t.0),
            i.name_any(),
        )
    }) {
        return Ok(Some(newest));
    }
    match shortest {
        Some(wait) => Err(wait),
        None => Ok(None),
    }
}

/// The bundle a pool's template selects, as the bundle view shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BundleState {
    /// The template selects none (the manual path, or `type: hcp`).
    NoneSelected,
    Missing,
    NotReady,
    Ready,
}

/// What the pool controller observed (live reads) besides the pool itself.
#[derive(Clone, Copy, Debug)]
pub struct Observed<'a> {
    pub namespace: NamespaceState,
    pub bundle: BundleState,
    /// The pool's instances (listed by its labels).
    pub instances: &'a [ClusterInstance],
    /// Every lease of the pool's namespace.
    pub leases: &'a [ClusterLease],
    pub now: Timestamp,
    /// How long an instance must be idle before scale-down may delete it.
    pub idle_grace: Duration,
    /// Which `crcVersion`s may have a bundle created, and on which StorageClass.
    pub pool_bundles: &'a PoolBundles,
}

/// The next status of a pool that is not being deleted, and the one change to make.
pub fn decide(pool: &ClusterPool, observed: Observed<'_>) -> Decision {
    let generation = pool.metadata.generation;
    let ns = pool.metadata.namespace.as_deref().unwrap_or_default();
    let name = pool.name_any();
    let spec = &pool.spec;
    let demand = lease_demand(&name, observed.leases);
    let counts = count(&name, observed.instances, &demand.claimed);
    let mut status = pool.status.clone().unwrap_or_default();
    status.total_instances = Some(counts.total);
    status.terminating_instances = Some(counts.terminating);
    status.available_instances = Some(counts.available);
    status.leased_instances = Some(counts.leased);
    status.observed_generation = generation;
    let now = Time(observed.now);
    let cond = |type_: &str, ok: bool, reason: &str, message: &str| {
        conditions::new(type_, ok, reason, message, generation, now.clone())
    };
    let mut decision = Decision {
        status: ClusterPoolStatus::default(),
        bundle: None,
        create: None,
        delete: None,
        requeue: None,
    };

    let refusal = observed.namespace.refusal(ns);
    let allowed = match &refusal {
        Some((reason, message)) => cond(types::PROVISIONING_ALLOWED, false, reason, message),
        None => cond(
            types::PROVISIONING_ALLOWED,
            true,
            reasons::NAMESPACE_ENABLED,
            &format!("namespace {ns} is enabled for guestcluster"),
        ),
    };
    conditions::set(&mut status.conditions, allowed);

    if spec.type_ == ClusterType::Hcp {
        conditions::set(
            &mut status.conditions,
            cond(
                types::CAPACITY_AVAILABLE,
                false,
                reasons::TOPOLOGY_UNSUPPORTED,
                HCP_MESSAGE,
            ),
        );
        decision.status = status;
        return decision;
    }

    let size = sizing(spec, counts, demand.pending_demand);
    let (total, max) = (counts.total, spec.max_size);
    let capacity = if max < spec.min_size || max < spec.warm_spares {
        cond(
            types::CAPACITY_AVAILABLE,
            false,
            reasons::MAX_SIZE_TOO_SMALL,
            &format!(
                "maxSize {max} is below minSize {} or warmSpares {}",
                spec.min_size, spec.warm_spares
            ),
        )
    } else if size.need > 0 && size.room <= 0 {
        cond(
            types::CAPACITY_AVAILABLE,
            false,
            reasons::AT_CAPACITY,
            &format!(
                "{} more instances wanted but the pool has {total} of maxSize {max}; raise maxSize or release leases",
                size.need
            ),
        )
    } else {
        cond(
            types::CAPACITY_AVAILABLE,
            true,
            reasons::CAPACITY_SUFFICIENT,
            &format!("the pool can provide the instances it is asked for (maxSize {max})"),
        )
    };
    conditions::set(&mut status.conditions, capacity);
    if let Some(bundle) = bundle_condition(spec, observed.bundle, observed.pool_bundles, &cond) {
        conditions::set(&mut status.conditions, bundle);
    }
    decision.status = status;

    if refusal.is_some() {
        // Status only: no bundle, no creation, no trimming.
        return decision;
    }
    decision.bundle = bundle_for(&spec.template, observed.pool_bundles);
    if size.need > 0 {
        if size.room > 0 {
            let instance_name = instance_name(&name, observed.instances);
            decision.create = Some(new_instance(pool, &instance_name));
        }
        return decision;
    }
    if size.excess > 0 {
        match trim_candidate(
            &name,
            observed.instances,
            &demand.claimed,
            observed.now,
            observed.idle_grace,
        ) {
            Ok(Some(instance)) => {
                decision.delete = Some((instance.name_any(), instance.uid().unwrap_or_default()));
            }
            Ok(None) => {}
            Err(wait) => decision.requeue = Some(wait),
        }
        return decision;
    }
    if let Some(stale) = replacement(&name, observed.instances, &demand.claimed) {
        decision.delete = Some((stale.name_any(), stale.uid().unwrap_or_default()));
    }
    decision
}

/// `BundleAvailable` of a pool whose template selects a bundle. The pool creates its instances
/// either way (they wait for the bundle, cheaply); this says why they wait.
fn bundle_condition(
    spec: &ClusterPoolSpec,
    state: BundleState,
    policy: &PoolBundles,
    cond: &impl Fn(&str, bool, &str, &str) -> Condition,
) -> Option<Condition> {
    let name = crate::actors::resolve::bundle_name(&spec.template)?;
    let referenced = spec.template.crc_bundle_ref().is_some();
    Some(match state {
        BundleState::NoneSelected => return None,
        BundleState::Ready => cond(
            types::BUNDLE_AVAILABLE,
            true,
            reasons::BUNDLE_READY,
            &format!("CRCBundle {name} is Ready"),
        ),
        BundleState::NotReady => cond(
            types::BUNDLE_AVAILABLE,
            false,
            reasons::BUNDLE_NOT_READY,
            &format!(
                "waiting for CRCBundle {name} to become Ready; the pool's instances wait with it (`kubectl get crcbundle {name}` shows its progress)"
            ),
        ),
        BundleState::Missing if referenced => cond(
            types::BUNDLE_AVAILABLE,
            false,
            reasons::BUNDLE_NOT_FOUND,
            &format!(
                "CRCBundle {name} does not exist; crcBundleRef names a bundle the pool never creates: create it"
            ),
        ),
        BundleState::Missing if bundle_for(&spec.template, policy).is_none() => cond(
            types::BUNDLE_AVAILABLE,
            false,
            reasons::CRC_VERSION_NOT_ALLOWED,
            &format!(
                "CRCBundle {name} does not exist, and the operator creates bundles for pools only for the crcVersions it allows ({}): ask its administrator to allow crcVersion {} (--pool-crc-versions), or create a CRCBundle and name it in crcBundleRef",
                policy.crc_versions,
                spec.template.crc_version().unwrap_or_default()
            ),
        ),
        BundleState::Missing => cond(
            types::BUNDLE_AVAILABLE,
            false,
            reasons::BUNDLE_NOT_FOUND,
            &format!("CRCBundle {name} does not exist yet; the pool creates it for crcVersion"),
        ),
    })
}

/// A stale member to replace: Ready and unclaimed (no grace: it will never be current again, and
/// handing it out is worse than a short gap), the oldest first, one at a time (none while a
/// member is still terminating). The pool's sizing creates the replacement.
fn replacement<'a>(
    pool: &str,
    instances: &'a [ClusterInstance],
    claimed: &BTreeSet<String>,
) -> Option<&'a ClusterInstance> {
    let members = || instances.iter().filter(|i| is_member(pool, i));
    if members().any(|i| i.metadata.deletion_timestamp.is_some()) {
        return None;
    }
    members()
        .filter(|i| is_ready(i) && is_stale(i) && !claimed.contains(&i.name_any()))
        .min_by_key(|i| {
            (
                i.metadata.creation_timestamp.as_ref().map(|t| t.0),
                i.name_any(),
            )
        })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::common::{Arch, LocalRef};
    use crate::api::instance::ClusterInstanceStatus;
    use crate::api::labels::{MANAGED_BY, POOL};
    use crate::api::lease::{ClusterLeaseStatus, LeasePhase};
    use crate::resources::bundle::published_bundle_name;

    const GRACE: Duration = Duration::from_secs(120);

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    const NOW: i64 = 1_700_000_000;

    fn pool(
        type_: &str,
        min: i32,
        max: i32,
        spares: i32,
        template: serde_json::Value,
    ) -> ClusterPool {
        serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 3},
            "spec": {"type": type_, "minSize": min, "maxSize": max, "warmSpares": spares,
                     "template": template},
        }))
        .unwrap()
    }

    fn crc_template() -> serde_json::Value {
        json!({"crcVersion": "4.22.7", "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4})
    }

    fn crc_pool(min: i32, max: i32, spares: i32) -> ClusterPool {
        pool("crc", min, max, spares, crc_template())
    }

    /// A member of pool `p` created at `created`, in `phase` (None: no status yet), Ready since
    /// `ready_at` (a Ready condition) when given.
    fn inst(
        name: &str,
        phase: Option<InstancePhase>,
        created: i64,
        ready_at: Option<i64>,
    ) -> ClusterInstance {
        let mut i = new_instance(&crc_pool(0, 1, 0), name);
        i.metadata.uid = Some(format!("uid-{name}"));
        i.metadata.creation_timestamp = Some(Time(at(created)));
        i.status = phase.map(|phase| ClusterInstanceStatus {
            phase: Some(phase),
            conditions: ready_at
                .map(|t| {
                    vec![conditions::new(
                        types::READY,
                        true,
                        "GuestReady",
                        "",
                        None,
                        Time(at(t)),
                    )]
                })
                .unwrap_or_default(),
            ..ClusterInstanceStatus::default()
        });
        i
    }

    fn ready(name: &str) -> ClusterInstance {
        inst(name, Some(InstancePhase::Ready), NOW - 1000, None)
    }

    fn provisioning(name: &str) -> ClusterInstance {
        inst(name, Some(InstancePhase::Provisioning), NOW - 10, None)
    }

    fn deleting(mut i: ClusterInstance) -> ClusterInstance {
        i.metadata.deletion_timestamp = Some(Time(at(NOW)));
        i
    }

    fn lease(
        name: &str,
        pool: &str,
        phase: Option<LeasePhase>,
        instance: Option<&str>,
    ) -> ClusterLease {
        let mut l: ClusterLease = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"poolRef": {"name": pool}},
        }))
        .unwrap();
        if phase.is_some() || instance.is_some() {
            l.status = Some(ClusterLeaseStatus {
                phase,
                instance_ref: instance.map(LocalRef::new),
                ..ClusterLeaseStatus::default()
            });
        }
        l
    }

    fn bound(name: &str, instance: &str) -> ClusterLease {
        lease(name, "p", Some(LeasePhase::Bound), Some(instance))
    }

    fn observed<'a>(instances: &'a [ClusterInstance], leases: &'a [ClusterLease]) -> Observed<'a> {
        Observed {
            namespace: NamespaceState::Enabled,
            bundle: BundleState::Ready,
            instances,
            leases,
            now: at(NOW),
            idle_grace: GRACE,
            pool_bundles: &ALLOW_ALL,
        }
    }

    static ALLOW_ALL: std::sync::LazyLock<PoolBundles> = std::sync::LazyLock::new(|| PoolBundles {
        crc_versions: crate::actors::pool::bundles::VersionPatterns::parse("*"),
        ..Default::default()
    });

    fn run(p: &ClusterPool, instances: &[ClusterInstance], leases: &[ClusterLease]) -> Decision {
        decide(p, observed(instances, leases))
    }

    fn capacity(d: &Decision) -> (&str, &str) {
        let c = conditions::find(&d.status.conditions, types::CAPACITY_AVAILABLE).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    fn allowed(d: &Decision) -> (&str, &str) {
        let c = conditions::find(&d.status.conditions, types::PROVISIONING_ALLOWED).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    fn created(d: &Decision) -> Option<String> {
        d.create.as_ref().map(|i| i.name_any())
    }

    fn deleted(d: &Decision) -> Option<&str> {
        d.delete.as_ref().map(|(n, _)| n.as_str())
    }

    #[test]
    fn lease_accounting_claims_from_any_lease_and_demand_from_pending_ones_of_the_pool() {
        let mut going = bound("a", "p-0");
        going.metadata.deletion_timestamp = Some(Time(at(NOW)));
        let mut going_pending = lease("g", "p", None, None);
        going_pending.metadata.deletion_timestamp = Some(Time(at(NOW)));
        let leases = [
            going,
            bound("b", "q-7"),
            lease("c", "p", None, None),
            lease("d", "p", Some(LeasePhase::Pending), None),
            lease("e", "other", None, None),
            lease("f", "p", Some(LeasePhase::Releasing), None),
            going_pending,
        ];
        let d = lease_demand("p", &leases);
        assert_eq!(
            d.claimed,
            BTreeSet::from(["p-0".to_owned(), "q-7".to_owned()])
        );
        assert_eq!(d.pending_demand, 2);
    }

    #[test]
    fn counts_every_member_by_phase_and_claim() {
        let mut foreign = ready("x");
        foreign.labels_mut().insert(POOL.to_owned(), "other".into());
        let mut unmanaged = ready("y");
        unmanaged.labels_mut().remove(MANAGED_BY);
        let instances = [
            ready("a"),
            ready("b"),
            provisioning("c"),
            deleting(ready("d")),
            inst("e", Some(InstancePhase::Failed), NOW, None),
            inst("f", None, NOW, None),
            inst("g", Some(InstancePhase::Terminating), NOW, None),
            foreign,
            unmanaged,
        ];
        let claimed = BTreeSet::from(["b".to_owned(), "c".to_owned()]);
        assert_eq!(
            count("p", &instances, &claimed),
            Counts {
                total: 7,
                terminating: 1,
                available: 1,
                leased: 1,
                pending: 4,
            }
        );
    }

    #[test]
    fn need_room_and_excess_follow_the_formula() {
        let spec = |min, max, spares| crc_pool(min, max, spares).spec;
        let counts = |total, available, pending| Counts {
            total,
            available,
            pending,
            ..Counts::default()
        };
        // minSize − total.
        assert_eq!(sizing(&spec(2, 5, 0), counts(0, 0, 0), 0).need, 2);
        // warmSpares − (available + pending).
        assert_eq!(sizing(&spec(0, 5, 2), counts(3, 1, 0), 0).need, 1);
        assert_eq!(sizing(&spec(0, 5, 2), counts(3, 1, 1), 0).need, 0);
        // pendingDemand − (available + pending).
        assert_eq!(sizing(&spec(0, 5, 0), counts(2, 0, 1), 3).need, 2);
        assert_eq!(sizing(&spec(0, 5, 0), counts(2, 0, 1), 3).room, 3);
        // excess = min(available − max(warmSpares, pendingDemand), total − minSize).
        assert_eq!(sizing(&spec(0, 5, 1), counts(3, 3, 0), 0).excess, 2);
        assert_eq!(sizing(&spec(0, 5, 1), counts(3, 3, 0), 2).excess, 1);
        assert_eq!(sizing(&spec(2, 5, 0), counts(3, 3, 0), 0).excess, 1);
        assert_eq!(sizing(&spec(0, 5, 0), counts(3, 0, 3), 0).excess, 0);
    }

    #[test]
    fn creates_one_instance_at_a_time_named_by_the_smallest_free_number() {
        let p = crc_pool(3, 4, 0);
        let d = run(&p, &[], &[]);
        assert_eq!(created(&d).as_deref(), Some("p-0"));
        assert!(d.delete.is_none());
        assert!(d.requeue.is_none());
        assert_eq!(capacity(&d), ("True", reasons::CAPACITY_SUFFICIENT));
        assert_eq!(allowed(&d), ("True", reasons::NAMESPACE_ENABLED));
        assert_eq!(d.status.total_instances, Some(0));
        assert_eq!(d.status.observed_generation, Some(3));

        let d = run(&p, &[provisioning("p-0"), deleting(ready("p-2"))], &[]);
        assert_eq!(
            created(&d).as_deref(),
            Some("p-1"),
            "deleting names stay taken"
        );
        let d = run(&p, &[provisioning("p-0"), provisioning("p-1")], &[]);
        assert_eq!(created(&d).as_deref(), Some("p-2"));
        let d = run(
            &p,
            &[
                provisioning("p-0"),
                provisioning("p-1"),
                provisioning("p-2"),
            ],
            &[],
        );
        assert!(d.create.is_none(), "at minSize: nothing more");
        assert_eq!(capacity(&d), ("True", reasons::CAPACITY_SUFFICIENT));
    }

    #[test]
    fn terminating_instances_count_in_total_and_as_pending() {
        let p = crc_pool(1, 2, 0);
        let d = run(&p, &[deleting(ready("p-0"))], &[]);
        assert!(d.create.is_none(), "the terminating instance still counts");
        assert_eq!(d.status.terminating_instances, Some(1));
        assert_eq!(d.status.total_instances, Some(1));
        // Spares: a terminating instance is pending, so it covers a spare too.
        let p = crc_pool(0, 2, 1);
        assert!(run(&p, &[deleting(ready("p-0"))], &[]).create.is_none());
    }

    #[test]
    fn pending_leases_add_demand_and_bound_ones_do_not() {
        let p = crc_pool(0, 3, 0);
        let leases = [lease("l1", "p", None, None)];
        let d = run(&p, &[], &leases);
        assert_eq!(created(&d).as_deref(), Some("p-0"));
        let d = run(&p, &[provisioning("p-0")], &leases);
        assert!(
            d.create.is_none(),
            "the provisioning instance covers the demand"
        );
        let leases = [bound("l1", "p-0")];
        let d = run(&p, &[ready("p-0")], &leases);
        assert!(d.create.is_none());
        assert!(d.delete.is_none(), "a leased instance is never trimmed");
        assert_eq!(d.status.leased_instances, Some(1));
        assert_eq!(d.status.available_instances, Some(0));
    }

    #[test]
    fn warm_spares_follow_leases_up_to_max() {
        let p = crc_pool(0, 2, 1);
        let leases = [bound("l1", "p-0")];
        let d = run(&p, &[ready("p-0")], &leases);
        assert_eq!(created(&d).as_deref(), Some("p-1"), "one spare on top");
        let leases = [bound("l1", "p-0"), bound("l2", "p-1")];
        let d = run(&p, &[ready("p-0"), ready("p-1")], &leases);
        assert!(d.create.is_none(), "never beyond maxSize");
        assert_eq!(capacity(&d), ("False", reasons::AT_CAPACITY));
        assert_eq!(d.status.leased_instances, Some(2));
    }

    #[test]
    fn pending_lease_at_max_is_at_capacity() {
        let p = crc_pool(1, 1, 0);
        let leases = [bound("l1", "p-0"), lease("l2", "p", None, None)];
        let d = run(&p, &[ready("p-0")], &leases);
        assert!(d.create.is_none());
        assert_eq!(capacity(&d), ("False", reasons::AT_CAPACITY));
        let d = run(&p, &[ready("p-0")], &[]);
        assert_eq!(capacity(&d), ("True", reasons::CAPACITY_SUFFICIENT));
    }

    #[test]
    fn max_size_below_min_or_spares_is_too_small() {
        for p in [crc_pool(3, 2, 0), crc_pool(0, 2, 3)] {
            let d = run(&p, &[], &[]);
            assert_eq!(capacity(&d), ("False", reasons::MAX_SIZE_TOO_SMALL));
            assert_eq!(created(&d).as_deref(), Some("p-0"), "room is still used");
        }
    }

    #[test]
    fn scale_down_deletes_the_newest_idle_unclaimed_instance() {
        let p = crc_pool(0, 5, 1);
        let instances = [
            inst(
                "p-0",
                Some(InstancePhase::Ready),
                NOW - 900,
                Some(NOW - 800),
            ),
            inst(
                "p-1",
                Some(InstancePhase::Ready),
                NOW - 700,
                Some(NOW - 600),
            ),
            inst("p-2", Some(InstancePhase::Ready), NOW - 500, Some(NOW - 10)),
            inst(
                "p-3",
                Some(InstancePhase::Ready),
                NOW - 400,
                Some(NOW - 300),
            ),
        ];
        // p-3 is claimed, p-2 idle for 10 s only: p-1 is the newest idle one.
        let leases = [bound("l", "p-3")];
        let d = run(&p, &instances, &leases);
        assert_eq!(deleted(&d), Some("p-1"));
        assert_eq!(d.delete.as_ref().unwrap().1, "uid-p-1");
        assert!(d.create.is_none());
        assert!(d.requeue.is_none());
        assert_eq!(capacity(&d), ("True", reasons::CAPACITY_SUFFICIENT));
    }

    #[test]
    fn scale_down_waits_for_the_shortest_remaining_idle_time() {
        let p = crc_pool(0, 5, 0);
        let instances = [
            inst("p-0", Some(InstancePhase::Ready), NOW - 900, Some(NOW - 30)),
            inst(
                "p-1",
                Some(InstancePhase::Ready),
                NOW - 900,
                Some(NOW - 100),
            ),
        ];
        let d = run(&p, &instances, &[]);
        assert!(d.delete.is_none());
        assert_eq!(d.requeue, Some(Duration::from_secs(20)));
        // Without a Ready condition, idle counts from creation.
        let young = [inst("p-0", Some(InstancePhase::Ready), NOW - 60, None)];
        let d = run(&p, &young, &[]);
        assert_eq!(d.requeue, Some(Duration::from_secs(60)));
        let old = [inst("p-0", Some(InstancePhase::Ready), NOW - 120, None)];
        assert_eq!(deleted(&run(&p, &old, &[])), Some("p-0"));
    }

    #[test]
    fn scale_down_keeps_min_size_spares_and_pending_demand() {
        let idle = |n: &str| inst(n, Some(InstancePhase::Ready), NOW - 900, Some(NOW - 800));
        let two = [idle("p-0"), idle("p-1")];
        assert!(
            run(&crc_pool(2, 5, 0), &two, &[]).delete.is_none(),
            "minSize"
        );
        assert!(
            run(&crc_pool(0, 5, 2), &two, &[]).delete.is_none(),
            "warmSpares"
        );
        let demand = [lease("l1", "p", None, None), lease("l2", "p", None, None)];
        assert!(
            run(&crc_pool(0, 5, 0), &two, &demand).delete.is_none(),
            "pending leases"
        );
        assert_eq!(deleted(&run(&crc_pool(1, 5, 0), &two, &[])), Some("p-1"));
        // Non-Ready and deleting instances are never trimmed.
        let others = [
            provisioning("p-0"),
            deleting(idle("p-1")),
            inst("p-2", Some(InstancePhase::Failed), NOW - 900, None),
        ];
        let d = run(&crc_pool(0, 5, 0), &others, &[]);
        assert!(d.delete.is_none() && d.requeue.is_none());
    }

    #[test]
    fn disabled_namespace_only_records_status() {
        let p = crc_pool(2, 3, 0);
        let idle = inst(
            "p-0",
            Some(InstancePhase::Ready),
            NOW - 900,
            Some(NOW - 800),
        );
        for (state, reason) in [
            (NamespaceState::Disabled, reasons::NAMESPACE_DISABLED),
            (NamespaceState::Terminating, reasons::NAMESPACE_TERMINATING),
            (NamespaceState::Missing, reasons::NAMESPACE_UNAVAILABLE),
        ] {
            let d = decide(
                &p,
                Observed {
                    namespace: state,
                    ..observed(std::slice::from_ref(&idle), &[])
                },
            );
            assert!(d.create.is_none());
            assert!(d.bundle.is_none(), "no bundle while {reason}");
            assert_eq!(d.requeue, None, "the Namespace view wakes the pool");
            assert_eq!(allowed(&d), ("False", reason));
            assert_eq!(capacity(&d), ("True", reasons::CAPACITY_SUFFICIENT));
            assert_eq!(d.status.total_instances, Some(1));
            assert_eq!(d.status.available_instances, Some(1));
            // An excess instance is not trimmed either.
            let d = decide(
                &crc_pool(0, 3, 0),
                Observed {
                    namespace: state,
                    ..observed(std::slice::from_ref(&idle), &[])
                },
            );
            assert!(d.delete.is_none());
        }
    }

    #[test]
    fn hcp_is_unsupported_and_creates_nothing() {
        let p = pool("hcp", 2, 3, 0, crc_template());
        let d = run(&p, &[], &[]);
        assert!(d.create.is_none());
        assert!(d.bundle.is_none());
        assert_eq!(capacity(&d), ("False", reasons::TOPOLOGY_UNSUPPORTED));
        let c = conditions::find(&d.status.conditions, types::CAPACITY_AVAILABLE).unwrap();
        assert!(c.message.contains("use type crc"), "{}", c.message);
        assert_eq!(d.status.total_instances, Some(0));
    }

    #[test]
    fn bundle_is_named_by_version_and_arch() {
        assert_eq!(
            published_bundle_name("4.22.7", Arch::Amd64),
            "crc-4.22.7-amd64"
        );
        assert_eq!(
            published_bundle_name("4.22.7", Arch::Arm64),
            "crc-4.22.7-arm64"
        );
        let p = pool(
            "crc",
            1,
            1,
            0,
            json!({"crcVersion": "4.22.7", "crcArch": "arm64", "storageClassName": "fast",
                   "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}),
        );
        let d = run(&p, &[], &[]);
        let b = d.bundle.expect("bundle ensured");
        assert_eq!(b.name_any(), "crc-4.22.7-arm64");
        assert_eq!(b.spec.version.as_deref(), Some("4.22.7"));
        assert_eq!(b.spec.arch, Arch::Arm64);
        assert_eq!(
            b.spec.storage_class_name, None,
            "the operator's StorageClass, not the first tenant's"
        );
        assert!(b.metadata.owner_references.is_none());

        let d = run(&crc_pool(1, 1, 0), &[], &[]);
        let b = d.bundle.expect("bundle ensured");
        assert_eq!(b.name_any(), "crc-4.22.7-amd64");
        assert_eq!(b.spec.storage_class_name, None);
    }

    #[test]
    fn crc_bundle_ref_never_creates_a_bundle() {
        let p = pool(
            "crc",
            1,
            1,
            0,
            json!({"crcBundleRef": {"name": "custom"}, "ocpVersion": "4.22.7",
                   "memory": "16Gi", "cores": 4}),
        );
        let d = run(&p, &[], &[]);
        assert!(d.bundle.is_none());
        assert!(d.create.is_some(), "instances are still created");
        let mut both = p.spec.template.clone();
        both.crc_version = Some("4.22.7".into());
        assert!(bundle_for(&both, &ALLOW_ALL).is_none());
        let mut empty = crc_pool(1, 1, 0).spec.template;
        empty.crc_version = Some(String::new());
        assert!(bundle_for(&empty, &ALLOW_ALL).is_none(), "empty crcVersion");
    }

    #[test]
    fn unchanged_inputs_give_an_unchanged_status() {
        let p = crc_pool(1, 2, 0);
        let one = [ready("p-0")];
        let first = run(&p, &one, &[]);
        let mut again = p.clone();
        again.status = Some(first.status.clone());
        let second = decide(
            &again,
            Observed {
                now: at(NOW + 100),
                ..observed(&one, &[])
            },
        );
        assert_eq!(second.status, first.status);
    }

    fn stale(mut i: ClusterInstance) -> ClusterInstance {
        let status = i.status.as_mut().unwrap();
        status.conditions.push(conditions::new(
            types::STALE,
            true,
            reasons::BUNDLE_REBUILT,
            "",
            None,
            Time(at(NOW)),
        ));
        i
    }

    #[test]
    fn idle_stale_instances_are_replaced_one_at_a_time_and_trimmed_first() {
        let p = crc_pool(3, 5, 0);
        let old = |name: &str, created: i64| {
            inst(
                name,
                Some(InstancePhase::Ready),
                created,
                Some(created + 60),
            )
        };
        // At size: the oldest idle stale member goes; a leased stale one stays.
        let instances = [
            stale(old("p-0", NOW - 900)),
            stale(old("p-1", NOW - 800)),
            old("p-2", NOW - 700),
        ];
        let d = run(&p, &instances, &[bound("l0", "p-0")]);
        assert_eq!(deleted(&d), Some("p-1"));
        // Still terminating: no second one yet.
        let instances = [
            stale(old("p-0", NOW - 900)),
            deleting(stale(old("p-1", NOW - 800))),
            old("p-2", NOW - 700),
        ];
        assert_eq!(deleted(&run(&p, &instances, &[])), None);
        // Scale-down takes a stale idle member before a newer current one.
        let p = crc_pool(0, 5, 0);
        let instances = [stale(old("p-0", NOW - 900)), old("p-1", NOW - 800)];
        assert_eq!(deleted(&run(&p, &instances, &[])), Some("p-0"));
        // Nothing stale: nothing replaced.
        let p = crc_pool(2, 5, 0);
        let instances = [old("p-0", NOW - 900), old("p-1", NOW - 800)];
        assert_eq!(deleted(&run(&p, &instances, &[])), None);
    }

    #[test]
    fn bundle_available_says_why_instances_wait() {
        let available = |p: &ClusterPool, bundle: BundleState| {
            let d = decide(
                p,
                Observed {
                    bundle,
                    ..observed(&[], &[])
                },
            );
            conditions::find(&d.status.conditions, types::BUNDLE_AVAILABLE)
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let by_version = crc_pool(1, 2, 0);
        let (status, reason, message) = available(&by_version, BundleState::Missing).unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::BUNDLE_NOT_FOUND)
        );
        assert!(message.contains("the pool creates it"), "{message}");

        // A version the operator does not allow: no bundle, and a condition naming the fix.
        let allow_4_21 = PoolBundles {
            crc_versions: crate::actors::pool::bundles::VersionPatterns::parse("4.21.*"),
            ..Default::default()
        };
        let d = decide(
            &by_version,
            Observed {
                bundle: BundleState::Missing,
                pool_bundles: &allow_4_21,
                ..observed(&[], &[])
            },
        );
        assert!(d.bundle.is_none());
        assert!(d.create.is_some(), "instances are still created; they wait");
        let c = conditions::find(&d.status.conditions, types::BUNDLE_AVAILABLE).unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", reasons::CRC_VERSION_NOT_ALLOWED)
        );
        assert!(c.message.contains("(4.21.*)"), "{}", c.message);
        assert!(c.message.contains("--pool-crc-versions"), "{}", c.message);
        // The same version's bundle made by an administrator serves the pool.
        let d = decide(
            &by_version,
            Observed {
                bundle: BundleState::Ready,
                pool_bundles: &allow_4_21,
                ..observed(&[], &[])
            },
        );
        let c = conditions::find(&d.status.conditions, types::BUNDLE_AVAILABLE).unwrap();
        assert_eq!(c.reason, reasons::BUNDLE_READY);
        let by_ref = pool(
            "crc",
            1,
            2,
            0,
            json!({"crcBundleRef": {"name": "custom"}, "ocpVersion": "4.22.7",
                   "memory": "16Gi", "cores": 4}),
        );
        let (_, reason, message) = available(&by_ref, BundleState::Missing).unwrap();
        assert_eq!(reason, reasons::BUNDLE_NOT_FOUND);
        assert!(message.contains("CRCBundle custom") && message.contains("create it"));
        let (status, reason, _) = available(&by_ref, BundleState::NotReady).unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("False", reasons::BUNDLE_NOT_READY)
        );
        let (status, reason, _) = available(&by_ref, BundleState::Ready).unwrap();
        assert_eq!(
            (status.as_str(), reason.as_str()),
            ("True", reasons::BUNDLE_READY)
        );
        // The instances are created either way: they wait for the bundle themselves.
        let d = decide(
            &by_ref,
            Observed {
                bundle: BundleState::NotReady,
                ..observed(&[], &[])
            },
        );
        assert!(d.create.is_some());
    }
}
