//! Pure decisions of the ClusterPool controller (upstream §4.1, §2.5): the namespace policy, the
//! instance accounting, the desired size, the CRCBundle a pool ensures and the one instance a
//! reconcile may create. The actor (`super::pool`) observes, these functions decide, the actor
//! acts and records the status.
//!
//! This slice scales up only; scale-down and idle trimming come later.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::{Resource, ResourceExt};

use super::instance_gates::{HCP_MESSAGE, NamespaceState};
use crate::api::bundle::DEFAULT_GOLDEN_VOLUME_SIZE;
use crate::api::common::{Arch, ClusterType, LocalRef};
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{ClusterInstance, ClusterInstanceSpec, InstancePhase};
use crate::api::labels::{MANAGED_BY, MANAGED_BY_OPERATOR, POOL};
use crate::api::pool::{ClusterPool, ClusterPoolSpec, ClusterPoolStatus};
use crate::api::template::ClusterTemplate;
use crate::api::{CRCBundle, CRCBundleSpec};

/// The pool's instances, counted (see [`count`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Not terminating.
    pub total: i32,
    /// With a deletionTimestamp.
    pub terminating: i32,
    /// Not terminating, phase Ready, no `status.leaseRef`.
    pub available: i32,
    /// Not terminating, with a `status.leaseRef`.
    pub leased: i32,
}

/// What a reconcile does besides recording `status`.
#[derive(Clone, Debug)]
pub struct Decision {
    pub status: ClusterPoolStatus,
    /// The CRCBundle that must exist (created when missing, never changed).
    pub bundle: Option<CRCBundle>,
    /// Create one instance (at most one per reconcile).
    pub create: bool,
    /// Look again after the provisioning requeue interval (blocked by the namespace policy).
    pub requeue: bool,
}

/// Whether `instance` belongs to the pool named `pool`: the pool label and `spec.poolRef` agree.
pub fn is_member(pool: &str, instance: &ClusterInstance) -> bool {
    instance.labels().get(POOL).is_some_and(|v| v == pool)
        && instance
            .spec
            .pool_ref
            .as_ref()
            .is_some_and(|r| r.name == pool)
}

/// Counts the members of `pool` among `instances`.
pub fn count(pool: &str, instances: &[ClusterInstance]) -> Counts {
    let mut counts = Counts::default();
    for instance in instances.iter().filter(|i| is_member(pool, i)) {
        if instance.metadata.deletion_timestamp.is_some() {
            counts.terminating += 1;
            continue;
        }
        counts.total += 1;
        let status = instance.status.as_ref();
        if status.is_some_and(|s| s.lease_ref.is_some()) {
            counts.leased += 1;
        } else if status.is_some_and(|s| s.phase == Some(InstancePhase::Ready)) {
            counts.available += 1;
        }
    }
    counts
}

/// How many instances the pool wants before the `maxSize` cap: `max(minSize, leased + warmSpares)`.
pub fn demand(spec: &ClusterPoolSpec, leased: i32) -> i32 {
    spec.min_size.max(leased.saturating_add(spec.warm_spares))
}

/// How many instances the pool keeps: [`demand`] capped at `maxSize`.
pub fn desired(spec: &ClusterPoolSpec, leased: i32) -> i32 {
    demand(spec, leased).min(spec.max_size).max(0)
}

/// Name of the CRCBundle a pool with `crcVersion` uses: `crc-<crcVersion>-<arch>`.
pub fn bundle_name(version: &str, arch: Arch) -> String {
    format!("crc-{version}-{arch}")
}

/// The CRCBundle a pool with this template ensures: only for `crcVersion` (non-empty), never
/// with `crcBundleRef`. Cluster-scoped, shared, no owner reference.
pub fn bundle_for(template: &ClusterTemplate) -> Option<CRCBundle> {
    if template.crc_bundle_ref.is_some() {
        return None;
    }
    let version = template.crc_version()?;
    let arch = template.arch();
    let spec = CRCBundleSpec {
        version: Some(version.to_owned()),
        arch,
        bundle_url: None,
        sha256_url: None,
        storage_class_name: template
            .storage_class_name
            .clone()
            .filter(|s| !s.is_empty()),
        golden_volume_size: DEFAULT_GOLDEN_VOLUME_SIZE.to_owned(),
        build: None,
    };
    Some(CRCBundle::new(&bundle_name(version, arch), spec))
}

const NAME_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// `<pool>-<5 lowercase alphanumerics>`, the characters drawn from `seed`.
pub fn instance_name(pool: &str, mut seed: u64) -> String {
    let len = NAME_ALPHABET.len() as u64;
    let suffix: String = (0..5)
        .map(|_| {
            let c = NAME_ALPHABET[(seed % len) as usize] as char;
            seed /= len;
            c
        })
        .collect();
    format!("{pool}-{suffix}")
}

/// A new instance of `pool` named `name`: pool label, managed-by label, controller owner
/// reference to the pool, `type: crc`, `poolRef` and the pool's template verbatim.
pub fn new_instance(pool: &ClusterPool, name: &str) -> ClusterInstance {
    let pool_name = pool.name_any();
    let labels = BTreeMap::from([
        (POOL.to_owned(), pool_name.clone()),
        (MANAGED_BY.to_owned(), MANAGED_BY_OPERATOR.to_owned()),
    ]);
    ClusterInstance {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: pool.namespace(),
            labels: Some(labels),
            owner_references: pool.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: ClusterInstanceSpec {
            type_: ClusterType::Crc,
            pool_ref: Some(LocalRef::new(pool_name)),
            template: pool.spec.template.clone(),
        },
        status: None,
    }
}

/// The next status of a pool that is not being deleted, and what to do.
pub fn decide(
    pool: &ClusterPool,
    namespace: NamespaceState,
    instances: &[ClusterInstance],
    now: Time,
) -> Decision {
    let generation = pool.metadata.generation;
    let ns = pool.metadata.namespace.as_deref().unwrap_or_default();
    let spec = &pool.spec;
    let counts = count(&pool.name_any(), instances);
    let mut status = pool.status.clone().unwrap_or_default();
    status.total_instances = Some(counts.total);
    status.terminating_instances = Some(counts.terminating);
    status.available_instances = Some(counts.available);
    status.leased_instances = Some(counts.leased);
    status.observed_generation = generation;
    let cond = |type_: &str, ok: bool, reason: &str, message: &str| {
        conditions::new(type_, ok, reason, message, generation, now.clone())
    };

    let refusal = namespace.refusal(ns);
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
        return Decision {
            status,
            bundle: None,
            create: false,
            requeue: false,
        };
    }

    let bundle = if refusal.is_none() {
        bundle_for(&spec.template)
    } else {
        None
    };
    let desired = desired(spec, counts.leased);
    let demand = demand(spec, counts.leased);
    let (total, available, max) = (counts.total, counts.available, spec.max_size);
    let mut create = false;
    let capacity = if total < desired {
        match &refusal {
            Some((reason, message)) => cond(
                types::CAPACITY_AVAILABLE,
                false,
                reason,
                &format!("{total} of {desired} instances exist; none is created: {message}"),
            ),
            None => {
                create = true;
                cond(
                    types::CAPACITY_AVAILABLE,
                    true,
                    reasons::PROVISIONING,
                    &format!("{total} of {desired} instances exist; creating one at a time"),
                )
            }
        }
    } else if total >= max && (demand > total || available == 0) {
        cond(
            types::CAPACITY_AVAILABLE,
            false,
            reasons::AT_CAPACITY,
            &format!(
                "the pool is at maxSize {max} with {available} available of {demand} wanted; raise maxSize or release leases"
            ),
        )
    } else {
        cond(
            types::CAPACITY_AVAILABLE,
            true,
            reasons::CAPACITY_AVAILABLE,
            &format!("{total} instances ({available} available) for {desired} desired"),
        )
    };
    conditions::set(&mut status.conditions, capacity);
    Decision {
        status,
        bundle,
        create,
        requeue: refusal.is_some(),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    use super::*;
    use crate::api::instance::ClusterInstanceStatus;

    fn now() -> Time {
        Time(Timestamp::from_second(1_700_000_000).unwrap())
    }

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

    /// A member of pool `p`; `phase` Ready or not, leased or not, terminating or not.
    fn member(name: &str, ready: bool, leased: bool, terminating: bool) -> ClusterInstance {
        let mut i = new_instance(&crc_pool(0, 1, 0), name);
        if terminating {
            i.metadata.deletion_timestamp = Some(now());
        }
        i.status = Some(ClusterInstanceStatus {
            phase: Some(if ready {
                InstancePhase::Ready
            } else {
                InstancePhase::Provisioning
            }),
            lease_ref: leased.then(|| LocalRef::new("lease")),
            ..ClusterInstanceStatus::default()
        });
        i
    }

    fn capacity(d: &Decision) -> (&str, &str) {
        let c = conditions::find(&d.status.conditions, types::CAPACITY_AVAILABLE).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    fn allowed(d: &Decision) -> (&str, &str) {
        let c = conditions::find(&d.status.conditions, types::PROVISIONING_ALLOWED).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn desired_size_is_min_or_leased_plus_spares_capped_at_max() {
        let spec = |min, max, spares| crc_pool(min, max, spares).spec;
        assert_eq!(desired(&spec(2, 5, 0), 0), 2);
        assert_eq!(desired(&spec(0, 5, 1), 0), 1);
        assert_eq!(desired(&spec(0, 5, 1), 3), 4);
        assert_eq!(desired(&spec(2, 5, 1), 0), 2);
        assert_eq!(desired(&spec(0, 5, 2), 4), 5, "capped at maxSize");
        assert_eq!(demand(&spec(0, 5, 2), 4), 6, "demand is not capped");
        assert_eq!(desired(&spec(0, 3, 0), 0), 0);
    }

    #[test]
    fn counts_members_only() {
        let mut foreign_label = member("x", true, false, false);
        foreign_label
            .labels_mut()
            .insert(POOL.to_owned(), "other".into());
        let mut foreign_ref = member("y", true, false, false);
        foreign_ref.spec.pool_ref = Some(LocalRef::new("other"));
        let instances = [
            member("a", true, false, false),
            member("b", true, true, false),
            member("c", false, false, false),
            member("d", true, false, true),
            foreign_label,
            foreign_ref,
        ];
        assert_eq!(
            count("p", &instances),
            Counts {
                total: 3,
                terminating: 1,
                available: 1,
                leased: 1
            }
        );
    }

    #[test]
    fn creates_one_instance_at_a_time_toward_desired() {
        let p = crc_pool(2, 3, 0);
        let d = decide(&p, NamespaceState::Enabled, &[], now());
        assert!(d.create);
        assert!(!d.requeue);
        assert_eq!(capacity(&d), ("True", reasons::PROVISIONING));
        assert_eq!(allowed(&d), ("True", reasons::NAMESPACE_ENABLED));
        assert_eq!(d.status.total_instances, Some(0));
        assert_eq!(d.status.observed_generation, Some(3));

        let one = [member("a", false, false, false)];
        let d = decide(&p, NamespaceState::Enabled, &one, now());
        assert!(d.create, "one below desired: create another");
        assert_eq!(d.status.total_instances, Some(1));

        let two = [
            member("a", false, false, false),
            member("b", true, false, false),
        ];
        let d = decide(&p, NamespaceState::Enabled, &two, now());
        assert!(!d.create, "at desired: nothing more");
        assert_eq!(capacity(&d), ("True", reasons::CAPACITY_AVAILABLE));
        assert_eq!(d.status.available_instances, Some(1));
    }

    #[test]
    fn terminating_instances_do_not_count_toward_desired() {
        let p = crc_pool(1, 2, 0);
        let d = decide(
            &p,
            NamespaceState::Enabled,
            &[member("a", true, false, true)],
            now(),
        );
        assert!(d.create);
        assert_eq!(d.status.terminating_instances, Some(1));
        assert_eq!(d.status.total_instances, Some(0));
    }

    #[test]
    fn warm_spares_follow_leases_up_to_max() {
        let p = crc_pool(0, 2, 1);
        let leased = [member("a", true, true, false)];
        let d = decide(&p, NamespaceState::Enabled, &leased, now());
        assert!(d.create, "leased 1 + 1 spare = 2 desired");
        let full = [
            member("a", true, true, false),
            member("b", true, true, false),
        ];
        let d = decide(&p, NamespaceState::Enabled, &full, now());
        assert!(!d.create, "never beyond maxSize");
        assert_eq!(capacity(&d), ("False", reasons::AT_CAPACITY));
        assert_eq!(d.status.leased_instances, Some(2));
    }

    #[test]
    fn at_max_without_available_instance_is_at_capacity() {
        let p = crc_pool(1, 1, 0);
        let d = decide(
            &p,
            NamespaceState::Enabled,
            &[member("a", false, false, false)],
            now(),
        );
        assert!(!d.create);
        assert_eq!(capacity(&d), ("False", reasons::AT_CAPACITY));
        let d = decide(
            &p,
            NamespaceState::Enabled,
            &[member("a", true, false, false)],
            now(),
        );
        assert_eq!(capacity(&d), ("True", reasons::CAPACITY_AVAILABLE));
    }

    #[test]
    fn disabled_namespace_creates_nothing_but_counts() {
        let p = crc_pool(2, 3, 0);
        for (state, reason) in [
            (NamespaceState::Disabled, reasons::NAMESPACE_DISABLED),
            (NamespaceState::Terminating, reasons::NAMESPACE_TERMINATING),
            (NamespaceState::Missing, reasons::NAMESPACE_UNAVAILABLE),
        ] {
            let d = decide(&p, state, &[member("a", true, false, false)], now());
            assert!(!d.create);
            assert!(d.bundle.is_none(), "no bundle while {reason}");
            assert!(d.requeue);
            assert_eq!(allowed(&d), ("False", reason));
            assert_eq!(capacity(&d), ("False", reason));
            assert_eq!(d.status.total_instances, Some(1));
            assert_eq!(d.status.available_instances, Some(1));
        }
    }

    #[test]
    fn hcp_is_unsupported_and_creates_nothing() {
        let p = pool("hcp", 2, 3, 0, crc_template());
        let d = decide(&p, NamespaceState::Enabled, &[], now());
        assert!(!d.create);
        assert!(d.bundle.is_none());
        assert_eq!(capacity(&d), ("False", reasons::TOPOLOGY_UNSUPPORTED));
        let c = conditions::find(&d.status.conditions, types::CAPACITY_AVAILABLE).unwrap();
        assert!(c.message.contains("use type crc"), "{}", c.message);
        assert_eq!(d.status.total_instances, Some(0));
    }

    #[test]
    fn bundle_is_named_by_version_and_arch() {
        assert_eq!(bundle_name("4.22.7", Arch::Amd64), "crc-4.22.7-amd64");
        assert_eq!(bundle_name("4.22.7", Arch::Arm64), "crc-4.22.7-arm64");
        let p = pool(
            "crc",
            1,
            1,
            0,
            json!({"crcVersion": "4.22.7", "crcArch": "arm64", "storageClassName": "fast",
                   "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}),
        );
        let d = decide(&p, NamespaceState::Enabled, &[], now());
        let b = d.bundle.expect("bundle ensured");
        assert_eq!(b.name_any(), "crc-4.22.7-arm64");
        assert_eq!(b.spec.version.as_deref(), Some("4.22.7"));
        assert_eq!(b.spec.arch, Arch::Arm64);
        assert_eq!(b.spec.storage_class_name.as_deref(), Some("fast"));
        assert!(b.metadata.owner_references.is_none());

        let d = decide(&crc_pool(1, 1, 0), NamespaceState::Enabled, &[], now());
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
        let d = decide(&p, NamespaceState::Enabled, &[], now());
        assert!(d.bundle.is_none());
        assert!(d.create, "instances are still created");
        let mut both = p.spec.template.clone();
        both.crc_version = Some("4.22.7".into());
        assert!(bundle_for(&both).is_none());
        let mut empty = crc_pool(1, 1, 0).spec.template;
        empty.crc_version = Some(String::new());
        assert!(bundle_for(&empty).is_none(), "empty crcVersion");
    }

    #[test]
    fn new_instance_carries_labels_owner_and_template() {
        let p = crc_pool(1, 1, 0);
        let name = instance_name("p", 123_456_789);
        assert_eq!(name.len(), "p-".len() + 5);
        assert!(name[2..].bytes().all(|b| NAME_ALPHABET.contains(&b)));
        assert_ne!(name, instance_name("p", 987_654_321));
        let i = new_instance(&p, &name);
        assert_eq!(i.namespace().as_deref(), Some("ns"));
        assert_eq!(i.labels().get(POOL).map(String::as_str), Some("p"));
        assert_eq!(
            i.labels().get(MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY_OPERATOR)
        );
        let owner = &i.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ClusterPool", "pool-uid", Some(true))
        );
        assert_eq!(i.spec.type_, ClusterType::Crc);
        assert_eq!(i.spec.pool_ref, Some(LocalRef::new("p")));
        assert_eq!(i.spec.template, p.spec.template);
        assert!(is_member("p", &i));
    }

    #[test]
    fn unchanged_inputs_give_an_unchanged_status() {
        let p = crc_pool(1, 2, 0);
        let one = [member("a", true, false, false)];
        let first = decide(&p, NamespaceState::Enabled, &one, now());
        let mut again = p.clone();
        again.status = Some(first.status.clone());
        let later = Time(Timestamp::from_second(1_700_000_100).unwrap());
        let second = decide(&again, NamespaceState::Enabled, &one, later);
        assert_eq!(second.status, first.status);
    }
}
