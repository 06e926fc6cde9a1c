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

use crate::actors::platform::NamespaceState;
use crate::actors::pool::bundles::{PoolBundles, bundle_for};
use crate::api::CRCBundle;
use crate::api::common::ClusterType;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{ClusterInstance, InstancePhase};
use crate::api::lease::ClusterLease;
use crate::api::lease::claimed;
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
        .filter(|l| l.is_pending())
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
                reasons::TOPOLOGY_UNSUPPORTED_MESSAGE,
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
mod tests;
