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

fn pool(type_: &str, min: i32, max: i32, spares: i32, template: serde_json::Value) -> ClusterPool {
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
