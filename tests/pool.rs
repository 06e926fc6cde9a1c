//! The ClusterPool controller against a real API server, with the supervision tree in process:
//! CRCBundle creation, scale-up one instance at a time, the namespace policy, hcp and
//! `crcBundleRef`. Lease demand and scale-down are in `tests/lease.rs`.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use guestcluster::actors::Context;
use guestcluster::actors::pool::bundles::{PoolBundles, VersionPatterns};
use guestcluster::actors::root::{self, Kind, TreeConfig};
use guestcluster::actors::runtime::context::GuestSettings;
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::labels::{
    CREATED_FOR, CREATED_FOR_POOLS, MANAGED_BY, MANAGED_BY_OPERATOR, NAMESPACE_ENABLED, POOL,
};
use guestcluster::api::{CRCBundle, ClusterInstance, ClusterPool, LocalRef};
use guestcluster::metrics::Metrics;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use support::wait_for;

fn pool(name: &str, type_: &str, min: i32, max: i32, template: Value) -> ClusterPool {
    serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": name},
        "spec": {"type": type_, "minSize": min, "maxSize": max, "template": template},
    }))
    .unwrap()
}

fn template(source: Value) -> Value {
    let mut t = json!({"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4});
    t.as_object_mut()
        .unwrap()
        .extend(source.as_object().unwrap().clone());
    t
}

async fn members(api: &Api<ClusterInstance>, pool: &str) -> Vec<ClusterInstance> {
    api.list(&ListParams::default().labels(&format!("{POOL}={pool}")))
        .await
        .expect("list instances")
        .items
}

/// Changes the pool's spec (a new generation) and waits until a reconcile has recorded it.
async fn bump(api: &Api<ClusterPool>, name: &str, warm_spares: i32) -> ClusterPool {
    let p = api
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"warmSpares": warm_spares}})),
        )
        .await
        .expect("patch pool");
    let generation = p.metadata.generation;
    wait_for(
        &format!("{name}: generation {generation:?} observed"),
        || async {
            let p = api.get(name).await.ok()?;
            (p.status.as_ref()?.observed_generation == generation).then_some(p)
        },
    )
    .await
}

async fn enabled_namespace(client: &kube::Client, prefix: &str) -> String {
    let ns = support::namespace(client, prefix).await;
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_ENABLED: "true"}}})),
        )
        .await
        .expect("label namespace");
    ns
}

/// One tree per test process (actor names are global), so every scenario is in this one test.
#[tokio::test]
async fn pools_scale_up_within_namespace_policy() {
    let client = support::client().await;
    let operator_ns = support::ensure_namespace(&client, "pool-operator").await;
    let ctx = Context::build(
        client.clone(),
        operator_ns,
        Metrics::default(),
        Default::default(),
        Default::default(),
        GuestSettings::from_env(),
        PoolBundles {
            crc_versions: VersionPatterns::parse("4.22.*"),
            storage_class: Some("pool-bundles".into()),
            gc_grace: Duration::from_secs(3),
        },
    );
    // The instance controller stays out: these instances never get past their gates anyway.
    // Bundles run (their prep Jobs never start here) so that unused ones are collected.
    let config = TreeConfig {
        kinds: vec![Kind::ClusterPool, Kind::ClusterLease, Kind::CrcBundle],
        ..TreeConfig::default()
    };
    let tree = root::start(ctx, config).await.expect("tree starts");
    let bundles: Api<CRCBundle> = Api::all(client.clone());

    // A crc pool with minSize 2 in an enabled namespace.
    let ns = enabled_namespace(&client, "pool").await;
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), &ns);
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let name = support::unique("crc");
    pools
        .create(
            &PostParams::default(),
            &pool(
                &name,
                "crc",
                2,
                3,
                template(json!({"crcVersion": "4.22.7"})),
            ),
        )
        .await
        .expect("create pool");
    let made = wait_for("CRCBundle crc-4.22.7-amd64", || async {
        bundles.get_opt("crc-4.22.7-amd64").await.ok().flatten()
    })
    .await;
    // Made for pools, on the operator's StorageClass.
    assert_eq!(made.labels()[CREATED_FOR], CREATED_FOR_POOLS);
    assert_eq!(
        made.spec.storage_class_name.as_deref(),
        Some("pool-bundles")
    );
    wait_for(&format!("{name}: totalInstances 2"), || async {
        let p = pools.get(&name).await.ok()?;
        (p.status?.total_instances == Some(2)).then_some(())
    })
    .await;
    let p = support::with_condition(
        &pools,
        &name,
        types::PROVISIONING_ALLOWED,
        "True",
        reasons::NAMESPACE_ENABLED,
    )
    .await;
    let capacity = conditions::find(
        &p.status.as_ref().unwrap().conditions,
        types::CAPACITY_AVAILABLE,
    )
    .unwrap();
    assert_eq!(
        (capacity.status.as_str(), capacity.reason.as_str()),
        ("True", reasons::CAPACITY_SUFFICIENT)
    );
    // Later reconciles (new generations, same desired size) create nothing more.
    bump(&pools, &name, 1).await;
    bump(&pools, &name, 2).await;
    let mut created = members(&instances, &name).await;
    assert_eq!(created.len(), 2, "exactly minSize instances");
    created.sort_by_key(|i| i.name_any());
    for (n, i) in created.iter().enumerate() {
        assert_eq!(i.name_any(), format!("{name}-{n}"), "smallest free number");
        assert_eq!(
            i.labels().get(MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY_OPERATOR)
        );
        let owner = i
            .owner_references()
            .iter()
            .find(|r| r.controller == Some(true))
            .expect("controller owner reference");
        assert_eq!(
            (owner.kind.as_str(), Some(&owner.uid)),
            ("ClusterPool", p.metadata.uid.as_ref())
        );
        assert_eq!(i.spec.pool_ref, Some(LocalRef::new(name.clone())));
        assert_eq!(i.spec.template, p.spec.template);
    }
    let status = pools.get(&name).await.unwrap().status.unwrap();
    assert_eq!(status.total_instances, Some(2));
    assert_eq!(status.leased_instances, Some(0));

    // A pool in a namespace without the label: status only, nothing created.
    let off_ns = support::namespace(&client, "pool-off").await;
    let off_pools: Api<ClusterPool> = Api::namespaced(client.clone(), &off_ns);
    let off_instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &off_ns);
    let off = support::unique("off");
    off_pools
        .create(
            &PostParams::default(),
            &pool(&off, "crc", 2, 2, template(json!({"crcVersion": "4.22.9"}))),
        )
        .await
        .expect("create disabled pool");
    let p = support::with_condition(
        &off_pools,
        &off,
        types::PROVISIONING_ALLOWED,
        "False",
        reasons::NAMESPACE_DISABLED,
    )
    .await;
    assert_eq!(p.status.unwrap().total_instances, Some(0));
    assert!(members(&off_instances, &off).await.is_empty());
    assert!(
        bundles.get_opt("crc-4.22.9-amd64").await.unwrap().is_none(),
        "no bundle from a disabled namespace"
    );

    // hcp: reported unsupported, nothing created.
    let hcp = support::unique("hcp");
    pools
        .create(
            &PostParams::default(),
            &pool(&hcp, "hcp", 1, 1, template(json!({}))),
        )
        .await
        .expect("create hcp pool");
    let p = support::with_condition(
        &pools,
        &hcp,
        types::CAPACITY_AVAILABLE,
        "False",
        reasons::TOPOLOGY_UNSUPPORTED,
    )
    .await;
    assert_eq!(p.status.unwrap().total_instances, Some(0));
    assert!(members(&instances, &hcp).await.is_empty());

    // crcBundleRef: instances, no bundle.
    let by_ref = support::unique("byref");
    let bundle_ref = support::unique("custom-bundle");
    pools
        .create(
            &PostParams::default(),
            &pool(
                &by_ref,
                "crc",
                1,
                1,
                template(json!({"crcBundleRef": {"name": bundle_ref}})),
            ),
        )
        .await
        .expect("create crcBundleRef pool");
    wait_for(&format!("{by_ref}: totalInstances 1"), || async {
        let p = pools.get(&by_ref).await.ok()?;
        (p.status?.total_instances == Some(1)).then_some(())
    })
    .await;
    bump(&pools, &by_ref, 1).await;
    assert_eq!(members(&instances, &by_ref).await.len(), 1);
    assert!(
        bundles.get_opt(&bundle_ref).await.unwrap().is_none(),
        "a pool with crcBundleRef never creates a bundle"
    );
    let created: Vec<String> = bundles
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|b| b.name_any())
        .filter(|b| b.contains(&by_ref) || b.contains(&bundle_ref))
        .collect();
    assert!(created.is_empty(), "{created:?}");

    // A crcVersion the operator does not allow: instances wait, no bundle, and a condition
    // naming the setting.
    let denied = support::unique("denied");
    pools
        .create(
            &PostParams::default(),
            &pool(
                &denied,
                "crc",
                1,
                1,
                template(json!({"crcVersion": "4.99.1"})),
            ),
        )
        .await
        .expect("create pool of a version not allowed");
    let p = support::with_condition(
        &pools,
        &denied,
        types::BUNDLE_AVAILABLE,
        "False",
        reasons::CRC_VERSION_NOT_ALLOWED,
    )
    .await;
    let status = p.status.unwrap();
    let c = conditions::find(&status.conditions, types::BUNDLE_AVAILABLE).unwrap();
    assert!(c.message.contains("--pool-crc-versions"), "{}", c.message);
    assert!(
        bundles.get_opt("crc-4.99.1-amd64").await.unwrap().is_none(),
        "no bundle for a version not allowed"
    );

    // The pool that made crc-4.22.7-amd64 goes, and its instances with it: once nothing refers
    // to the bundle for the grace, the operator deletes it.
    pools
        .delete(&name, &Default::default())
        .await
        .expect("delete the first pool");
    support::wait_long("the unreferenced pool bundle deleted", || async {
        let b = bundles.get_opt("crc-4.22.7-amd64").await.ok()?;
        b.is_none_or(|b| b.uid() != made.uid()).then_some(())
    })
    .await;

    tree.stop(None);
}
