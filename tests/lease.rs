//! The ClusterLease controller (and the pool's lease accounting and scale-down) against a real
//! API server, with the pool and lease kinds of the supervision tree in process.
//!
//! The instance controller does not run here: the test plays it, marking pool instances Ready
//! (status phase Ready, `Ready=True`, `kubeconfigSecretRef`) and publishing their
//! `<instance>-kubeconfig` Secrets by hand.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::future::join_all;
use guestcluster::actors::RootMsg;
use guestcluster::actors::root::{self, Kind, TreeConfig};
use guestcluster::actors::{Context, Tuning};
use guestcluster::api::conditions::{reasons, types};
use guestcluster::api::labels::{FINALIZER_RELEASE, NAMESPACE_ENABLED, POOL};
use guestcluster::api::lease::LeasePhase;
use guestcluster::api::{ClusterInstance, ClusterLease, ClusterPool, LocalRef};
use guestcluster::metrics::Metrics;
use guestcluster::resources::lease::kubeconfig_data;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use ractor::ActorRef;
use serde_json::json;
use support::{wait_for, with_condition};

/// Scale-down's idle grace in this test (upstream: 2 minutes).
const IDLE_GRACE: Duration = Duration::from_secs(2);

struct Ns {
    pools: Api<ClusterPool>,
    instances: Api<ClusterInstance>,
    leases: Api<ClusterLease>,
    secrets: Api<Secret>,
}

impl Ns {
    async fn enabled(client: &kube::Client, prefix: &str) -> Self {
        let name = support::namespace(client, prefix).await;
        Api::<Namespace>::all(client.clone())
            .patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_ENABLED: "true"}}})),
            )
            .await
            .expect("label namespace");
        Self {
            pools: Api::namespaced(client.clone(), &name),
            instances: Api::namespaced(client.clone(), &name),
            leases: Api::namespaced(client.clone(), &name),
            secrets: Api::namespaced(client.clone(), &name),
        }
    }

    /// A crc pool using a bundle by reference (so no CRCBundle is created).
    async fn pool(&self, name: &str, min: i32, max: i32) {
        let pool: ClusterPool = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": name},
            "spec": {"type": "crc", "minSize": min, "maxSize": max, "template": {
                "crcBundleRef": {"name": "test-bundle"}, "ocpVersion": "4.22.7",
                "memory": "16Gi", "cores": 4}},
        }))
        .unwrap();
        self.pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("create pool");
    }

    async fn lease(&self, name: &str, pool: &str, ttl: Option<&str>) {
        let mut spec = json!({"poolRef": {"name": pool}, "requestedBy": "tests/lease.rs"});
        if let Some(ttl) = ttl {
            spec["ttl"] = json!(ttl);
        }
        let lease: ClusterLease = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": name},
            "spec": spec,
        }))
        .unwrap();
        self.leases
            .create(&PostParams::default(), &lease)
            .await
            .expect("create lease");
    }

    async fn members(&self, pool: &str) -> Vec<ClusterInstance> {
        self.instances
            .list(&ListParams::default().labels(&format!("{POOL}={pool}")))
            .await
            .expect("list instances")
            .items
    }

    /// Waits until the pool has exactly `n` instances (none terminating) and returns them.
    async fn wait_members(&self, pool: &str, n: usize) -> Vec<ClusterInstance> {
        wait_for(&format!("{pool}: {n} instances"), || async {
            let members = self.members(pool).await;
            (members.len() == n
                && members
                    .iter()
                    .all(|i| i.metadata.deletion_timestamp.is_none()))
            .then_some(members)
        })
        .await
    }

    /// Plays the instance controller: publishes `<instance>-kubeconfig` and marks it Ready.
    async fn make_ready(&self, instance: &str) {
        self.make_ready_since(instance, Time(Timestamp::now()))
            .await;
    }

    /// [`Ns::make_ready`] with `Ready` true since `since`.
    async fn make_ready_since(&self, instance: &str, since: Time) {
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": format!("{instance}-kubeconfig")},
            "type": "Opaque",
        }))
        .unwrap();
        let secret = Secret {
            data: Some(kubeconfig_data(&format!("kubeconfig of {instance}"))),
            ..secret
        };
        match self.secrets.create(&PostParams::default(), &secret).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("create kubeconfig Secret of {instance}: {e}"),
        }
        let status = json!({"status": {
            "phase": "Ready",
            "ocpVersion": "4.22.7",
            "topology": "crc",
            "apiEndpoint": format!("https://api.{instance}.example"),
            "kubeconfigSecretRef": {"name": format!("{instance}-kubeconfig")},
            "conditions": [{"type": types::READY, "status": "True", "reason": "GuestReady",
                            "message": "played by the test",
                            "lastTransitionTime": since}],
        }});
        self.instances
            .patch_status(instance, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("mark instance Ready");
    }

    async fn bound(&self, lease: &str) -> ClusterLease {
        with_condition(
            &self.leases,
            lease,
            types::BOUND,
            "True",
            reasons::INSTANCE_BOUND,
        )
        .await
    }
}

fn instance_of(lease: &ClusterLease) -> String {
    lease
        .status
        .as_ref()
        .and_then(|s| s.instance_ref.as_ref())
        .map(|r| r.name.clone())
        .expect("a bound lease names its instance")
}

/// The pool and lease kinds only (the test plays the instance controller).
async fn start_tree(client: &kube::Client, operator_ns: &str) -> ActorRef<RootMsg> {
    let ctx = Context::with_tuning(
        client.clone(),
        operator_ns,
        Metrics::default(),
        Default::default(),
        Tuning {
            pool_idle_grace: IDLE_GRACE,
        },
    );
    let config = TreeConfig {
        kinds: vec![Kind::ClusterPool, Kind::ClusterLease],
        ..TreeConfig::default()
    };
    root::start(ctx, config).await.expect("tree starts")
}

/// One tree at a time per test process (actor names are global), so every scenario is in this
/// one test.
#[tokio::test]
async fn leases_bind_expire_and_pools_follow() {
    let client = support::client().await;
    let operator_ns = support::ensure_namespace(&client, "lease-operator").await;
    let tree = start_tree(&client, &operator_ns).await;

    bind_copy_and_wait_for_capacity(&client).await;
    a_lease_waits_for_its_pool_to_exist(&client).await;
    ttl_expiry_replaces_the_instance(&client).await;
    let race = concurrent_leases_never_share_an_instance(&client).await;

    // A new operator (fresh caches, fresh lock) finds the bindings where the old one left them.
    tree.stop_and_wait(Some("operator restart".into()), Some(support::DEADLINE))
        .await
        .expect("tree stops");
    let tree = start_tree(&client, &operator_ns).await;
    restart_keeps_bindings(race).await;

    scale_down_trims_an_idle_extra_instance(&client).await;

    tree.stop(None);
}

/// A lease binds the Ready instance and gets a copy of its kubeconfig; a second lease waits
/// (WaitingForCapacity), the pool adds an instance for it, and it binds once that is Ready.
async fn bind_copy_and_wait_for_capacity(client: &kube::Client) {
    let ns = Ns::enabled(client, "lease-bind").await;
    let pool = support::unique("p");
    ns.pool(&pool, 1, 2).await;
    let first = ns.wait_members(&pool, 1).await;
    let i0 = first[0].name_any();
    assert_eq!(i0, format!("{pool}-0"));
    ns.make_ready(&i0).await;

    ns.lease("one", &pool, None).await;
    let one = ns.bound("one").await;
    assert!(one.finalizers().iter().any(|f| f == FINALIZER_RELEASE));
    let status = one.status.clone().unwrap();
    assert_eq!(status.phase, Some(LeasePhase::Bound));
    assert_eq!(status.instance_ref, Some(LocalRef::new(i0.clone())));
    assert_eq!(
        status.kubeconfig_secret_ref,
        Some(LocalRef::new("one-kubeconfig"))
    );
    assert_eq!(status.ocp_version.as_deref(), Some("4.22.7"));
    assert_eq!(
        status.api_endpoint.as_deref(),
        Some(format!("https://api.{i0}.example").as_str())
    );
    assert!(status.bound_time.is_some());
    let copy = ns
        .secrets
        .get("one-kubeconfig")
        .await
        .expect("kubeconfig copy");
    assert_eq!(copy.type_.as_deref(), Some("Opaque"));
    assert_eq!(
        copy.data,
        Some(kubeconfig_data(&format!("kubeconfig of {i0}")))
    );
    let owner = copy
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true))
        .expect("controller owner");
    assert_eq!(
        (owner.kind.as_str(), Some(&owner.uid)),
        ("ClusterLease", one.metadata.uid.as_ref())
    );

    // No capacity: the second lease waits, and its demand makes the pool add an instance.
    ns.lease("two", &pool, None).await;
    let two = with_condition(
        &ns.leases,
        "two",
        types::BOUND,
        "False",
        reasons::WAITING_FOR_CAPACITY,
    )
    .await;
    assert_eq!(two.status.unwrap().phase, Some(LeasePhase::Pending));
    let members = ns.wait_members(&pool, 2).await;
    let i1 = members
        .iter()
        .map(|i| i.name_any())
        .find(|n| *n != i0)
        .unwrap();
    assert_eq!(i1, format!("{pool}-1"));
    ns.make_ready(&i1).await;
    let two = ns.bound("two").await;
    assert_eq!(instance_of(&two), i1);
    let copy = ns.secrets.get("two-kubeconfig").await.expect("second copy");
    assert_eq!(
        copy.data,
        Some(kubeconfig_data(&format!("kubeconfig of {i1}")))
    );

    wait_for(&format!("{pool}: 2 leased, 0 available"), || async {
        let s = ns.pools.get(&pool).await.ok()?.status?;
        (s.leased_instances == Some(2) && s.available_instances == Some(0)).then_some(())
    })
    .await;
}

/// A lease naming a pool that does not exist waits (PoolNotFound) and is not an error; once the
/// pool exists its actor binds the lease to the pool's first Ready instance.
async fn a_lease_waits_for_its_pool_to_exist(client: &kube::Client) {
    let ns = Ns::enabled(client, "lease-nopool").await;
    let pool = support::unique("p");
    ns.lease("early", &pool, None).await;
    let early = with_condition(
        &ns.leases,
        "early",
        types::BOUND,
        "False",
        reasons::POOL_NOT_FOUND,
    )
    .await;
    assert_eq!(early.status.unwrap().phase, Some(LeasePhase::Pending));

    ns.pool(&pool, 1, 1).await;
    let members = ns.wait_members(&pool, 1).await;
    ns.make_ready(&members[0].name_any()).await;
    let early = ns.bound("early").await;
    assert_eq!(instance_of(&early), members[0].name_any());
}

/// A TTL deletes the lease; the release deletes its instance and the pool replaces it.
async fn ttl_expiry_replaces_the_instance(client: &kube::Client) {
    let ns = Ns::enabled(client, "lease-ttl").await;
    let pool = support::unique("p");
    ns.pool(&pool, 1, 2).await;
    let first = ns.wait_members(&pool, 1).await;
    let original_uid = first[0].uid().unwrap();
    ns.make_ready(&first[0].name_any()).await;

    ns.lease("short", &pool, Some("3s")).await;
    let short = ns.bound("short").await;
    assert_eq!(instance_of(&short), first[0].name_any());
    wait_for("lease short deleted by its TTL", || async {
        ns.leases
            .get_opt("short")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    wait_for("a replacement instance", || async {
        let members = ns.members(&pool).await;
        (members.len() == 1 && members[0].uid().as_ref() != Some(&original_uid)).then_some(())
    })
    .await;
    wait_for("the lease's kubeconfig copy garbage-collected", || async {
        ns.secrets
            .get_opt("short-kubeconfig")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

/// Leases created at the same moment, competing for fewer instances: each instance goes to at
/// most one lease, the rest wait.
async fn concurrent_leases_never_share_an_instance(client: &kube::Client) -> Race {
    let ns = Ns::enabled(client, "lease-race").await;
    let pool = support::unique("p");
    ns.pool(&pool, 2, 2).await;
    let members = ns.wait_members(&pool, 2).await;

    // Leases first, then both instances Ready at once: binding races on instance events.
    let names: Vec<String> = (0..4).map(|n| format!("race-{n}")).collect();
    join_all(names.iter().map(|n| ns.lease(n, &pool, None))).await;
    let ready: Vec<String> = members.iter().map(|i| i.name_any()).collect();
    join_all(ready.iter().map(|i| ns.make_ready(i))).await;

    let (bound, waiting) = wait_for("every lease bound or waiting, 2 bound", || async {
        let leases = ns.leases.list(&ListParams::default()).await.ok()?.items;
        let bound: Vec<String> = leases
            .iter()
            .filter(|l| l.status.as_ref().and_then(|s| s.phase) == Some(LeasePhase::Bound))
            .map(instance_of)
            .collect();
        let waiting = leases
            .iter()
            .filter(|l| {
                l.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.reason == reasons::WAITING_FOR_CAPACITY)
                })
            })
            .count();
        (bound.len() + waiting == 4 && bound.len() >= 2).then_some((bound, waiting))
    })
    .await;
    assert_eq!((bound.len(), waiting), (2, 2), "{bound:?}");
    let distinct: BTreeSet<&String> = bound.iter().collect();
    assert_eq!(distinct.len(), 2, "one instance per lease: {bound:?}");

    // Two more at once against the same (full) pool change nothing.
    join_all(["late-a", "late-b"].map(|n| ns.lease(n, &pool, None))).await;
    for late in ["late-a", "late-b"] {
        with_condition(
            &ns.leases,
            late,
            types::BOUND,
            "False",
            reasons::WAITING_FOR_CAPACITY,
        )
        .await;
    }
    let still: Vec<String> = ns
        .leases
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|l| l.status.as_ref()?.instance_ref.as_ref())
        .map(|r| r.name.clone())
        .collect();
    assert_eq!(still.len(), 2, "{still:?}");
    let distinct: BTreeSet<&String> = still.iter().collect();
    assert_eq!(distinct.len(), 2, "{still:?}");
    let bindings = bindings(&ns).await;
    Race { ns, pool, bindings }
}

/// The race scenario's namespace and who holds what at the end of it.
struct Race {
    ns: Ns,
    pool: String,
    bindings: BTreeMap<String, String>,
}

/// Lease → bound instance, for every bound lease of the namespace.
async fn bindings(ns: &Ns) -> BTreeMap<String, String> {
    ns.leases
        .list(&ListParams::default())
        .await
        .expect("list leases")
        .items
        .iter()
        .filter_map(|l| {
            Some((
                l.name_any(),
                l.status.as_ref()?.instance_ref.as_ref()?.name.clone(),
            ))
        })
        .collect()
}

/// After a restart nothing is bound again; one more instance goes to exactly one waiting lease.
async fn restart_keeps_bindings(race: Race) {
    let Race {
        ns,
        pool,
        bindings: before,
    } = race;
    ns.lease("after-restart", &pool, None).await;
    with_condition(
        &ns.leases,
        "after-restart",
        types::BOUND,
        "False",
        reasons::WAITING_FOR_CAPACITY,
    )
    .await;
    assert_eq!(bindings(&ns).await, before, "no binding changed");

    // Room for one more: the pool adds it for the waiting leases, and one of them gets it.
    ns.pools
        .patch(
            &pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxSize": 3}})),
        )
        .await
        .expect("raise maxSize");
    let members = ns.wait_members(&pool, 3).await;
    let new = format!("{pool}-2");
    assert!(members.iter().any(|i| i.name_any() == new), "{new}");
    ns.make_ready(&new).await;
    let after = wait_for("the new instance bound", || async {
        let now = bindings(&ns).await;
        (now.len() == before.len() + 1).then_some(now)
    })
    .await;
    let holders: Vec<&String> = after
        .iter()
        .filter(|(_, i)| **i == new)
        .map(|(l, _)| l)
        .collect();
    assert_eq!(holders.len(), 1, "{after:?}");
    for (lease, instance) in &before {
        assert_eq!(after.get(lease), Some(instance), "{lease} kept {instance}");
    }
}

/// Lowering minSize leaves an extra idle instance: scale-down deletes the newest one after the
/// idle grace, and no more.
async fn scale_down_trims_an_idle_extra_instance(client: &kube::Client) {
    let ns = Ns::enabled(client, "pool-trim").await;
    let pool = support::unique("p");
    ns.pool(&pool, 2, 3).await;
    let members = ns.wait_members(&pool, 2).await;
    // Ready since the same second: both become idle together, and the newer is trimmed. (Ready
    // times a second apart would let the older one be idle long enough first, and be trimmed
    // as the only candidate then.)
    let since = Time(Timestamp::now());
    for i in &members {
        ns.make_ready_since(&i.name_any(), since.clone()).await;
    }
    wait_for(&format!("{pool}: 2 available"), || async {
        let s = ns.pools.get(&pool).await.ok()?.status?;
        (s.available_instances == Some(2)).then_some(())
    })
    .await;
    ns.pools
        .patch(
            &pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"minSize": 1}})),
        )
        .await
        .expect("lower minSize");
    let left = wait_for(&format!("{pool}: trimmed to 1 instance"), || async {
        let members = ns.members(&pool).await;
        (members.len() == 1).then_some(members)
    })
    .await;
    assert_eq!(left[0].name_any(), format!("{pool}-0"), "the newest goes");
    // A new generation is reconciled (past the idle grace of the survivor) and keeps minSize.
    let p = ns
        .pools
        .patch(
            &pool,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"maxSize": 4}})),
        )
        .await
        .expect("raise maxSize");
    let generation = p.metadata.generation;
    wait_for(
        &format!("{pool}: generation {generation:?} observed"),
        || async {
            let s = ns.pools.get(&pool).await.ok()?.status?;
            (s.observed_generation == generation && s.total_instances == Some(1)).then_some(())
        },
    )
    .await;
    assert_eq!(ns.members(&pool).await.len(), 1);
}
