//! An operator started in front of objects that already exist gives every one of them its first
//! pass — queued behind a small reconcile bound, none dropped — and not at the next periodic
//! resync. (The rule that makes a listed object's first pass see it in the watch cache is
//! unit-tested in `kind_supervisor`: the objects of a list are announced after the list.)
// Tests act as users: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use guestcluster::actors::Context;
use guestcluster::actors::root::{self, Kind, TreeConfig};
use guestcluster::api::{CRCBundle, CRCBundleSpec};
use guestcluster::metrics::Metrics;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;
use support::wait_for;

const BUNDLES: usize = 40;

#[tokio::test]
async fn every_object_listed_at_start_gets_its_first_pass_without_a_resync() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let prefix = support::unique("startup");
    for i in 0..BUNDLES {
        let spec: CRCBundleSpec =
            serde_json::from_value(json!({"version": format!("4.17.{i}")})).unwrap();
        api.create(
            &PostParams::default(),
            &CRCBundle::new(&format!("{prefix}-{i}"), spec),
        )
        .await
        .unwrap();
    }

    let operator_ns = support::ensure_namespace(&client, "startup-test").await;
    let ctx = Context::new(
        client.clone(),
        operator_ns,
        Metrics::default(),
        Default::default(),
    );
    let config = TreeConfig {
        kinds: vec![Kind::CrcBundle],
        // Far beyond the wait below: only first passes can write these statuses.
        resync: Duration::from_secs(3600),
        // Few permits, so most first passes queue behind others.
        max_concurrent_reconciles: 2,
        ..Default::default()
    };
    let tree = root::start(ctx, config).await.expect("tree starts");

    wait_for("every listed bundle has a status", || async {
        let list = api.list(&ListParams::default()).await.ok()?.items;
        let ours: Vec<&CRCBundle> = list
            .iter()
            .filter(|b| b.name_any().starts_with(&prefix))
            .collect();
        let missing: Vec<String> = ours
            .iter()
            .filter(|b| b.status.is_none())
            .map(|b| b.name_any())
            .collect();
        eprintln!(
            "{} of {} listed, without status: {missing:?}",
            ours.len(),
            BUNDLES
        );
        (ours.len() == BUNDLES && missing.is_empty()).then_some(())
    })
    .await;
    tree.stop_and_wait(None, None).await.unwrap();
}
