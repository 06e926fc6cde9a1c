//! The ClusterInstance gates against a real API server, with the supervision tree in process:
//! finalizer, namespace policy, platform gate, the hcp topology and release on deletion.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::actors::Context;
use guestcluster::actors::root::{self, TreeConfig};
use guestcluster::api::ClusterInstance;
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::instance::InstancePhase;
use guestcluster::api::labels::{FINALIZER_CLEANUP, NAMESPACE_ENABLED};
use guestcluster::metrics::Metrics;
use k8s_openapi::api::core::v1::Namespace;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::json;
use support::wait_for;
use support::{deployed, platform_resource as resource};

fn instance(name: &str, type_: &str) -> ClusterInstance {
    serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterInstance",
        "metadata": {"name": name},
        "spec": {"type": type_, "template": {
            "crcVersion": "4.22.7", "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}},
    }))
    .unwrap()
}

/// One tree per test process (actor names are global), so every scenario is in this one test.
#[tokio::test]
async fn instance_gates_follow_namespace_policy_and_platform() {
    let client = support::client().await;
    let operator_ns = support::ensure_namespace(&client, "instance-gates-operator").await;
    let ctx = Context::new(
        client.clone(),
        operator_ns,
        Metrics::default(),
        Default::default(),
    );
    // The default 5-minute resync: namespace changes must arrive through the Namespace watch,
    // platform operands through the provisioning requeue.
    let tree = root::start(ctx, TreeConfig::default())
        .await
        .expect("tree starts");

    let ns = support::namespace(&client, "inst").await;
    let api: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);

    // A namespace without the label: provisioning refused (no finalizer: nothing to tear down).
    let name = support::unique("crc");
    api.create(&PostParams::default(), &instance(&name, "crc"))
        .await
        .expect("create instance");
    let i = support::with_condition(
        &api,
        &name,
        types::PROVISIONING_ALLOWED,
        "False",
        reasons::NAMESPACE_DISABLED,
    )
    .await;
    assert!(!i.finalizers().iter().any(|f| f == FINALIZER_CLEANUP));
    let status = i.status.unwrap();
    assert_eq!(status.phase, Some(InstancePhase::Provisioning));
    assert_eq!(status.provisioning, None);
    let ready = conditions::find(&status.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", reasons::NAMESPACE_DISABLED)
    );
    assert!(
        ready.message.contains("guestcluster.opdev.io/enabled=true"),
        "{}",
        ready.message
    );

    // Labelling the namespace authorizes provisioning; no KubeVirt or CDI exists yet.
    Api::<Namespace>::all(client.clone())
        .patch(
            &ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {NAMESPACE_ENABLED: "true"}}})),
        )
        .await
        .expect("label namespace");
    let i = support::with_condition(
        &api,
        &name,
        types::HYPER_CONVERGED_READY,
        "False",
        reasons::OPERAND_NOT_FOUND,
    )
    .await;
    let status = i.status.unwrap();
    let allowed = conditions::find(&status.conditions, types::PROVISIONING_ALLOWED).unwrap();
    assert_eq!(
        (allowed.status.as_str(), allowed.reason.as_str()),
        ("True", reasons::PROVISIONING_AUTHORIZED)
    );
    let started_at = status
        .provisioning
        .expect("status.provisioning.startedAt set")
        .started_at;
    let ready = conditions::find(&status.conditions, types::READY).unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", reasons::OPERAND_NOT_FOUND)
    );
    assert!(
        ready
            .message
            .starts_with("Platform dependencies are not ready:"),
        "{}",
        ready.message
    );

    // KubeVirt and CDI deployed: the platform gate passes and the CRC backing starts — its first
    // check, the pull secret, fails here because the namespace has none.
    let kv_ar = resource("kubevirt.io", "v1", "KubeVirt", "kubevirts");
    let cdi_ar = resource("cdi.kubevirt.io", "v1beta1", "CDI", "cdis");
    let kv_api = Api::<DynamicObject>::namespaced_with(client.clone(), &ns, &kv_ar);
    let cdi_api = Api::<DynamicObject>::all_with(client.clone(), &cdi_ar);
    let cdi_name = support::unique("cdi");
    deployed(&kv_api, &kv_ar, "kubevirt").await;
    deployed(&cdi_api, &cdi_ar, &cdi_name).await;
    let i = support::with_condition(
        &api,
        &name,
        types::READY,
        "False",
        reasons::INVALID_PULL_SECRET,
    )
    .await;
    let status = i.status.unwrap();
    assert!(conditions::is_true(
        &status.conditions,
        types::HYPER_CONVERGED_READY
    ));
    assert_eq!(status.phase, Some(InstancePhase::Failed));
    let ready = conditions::find(&status.conditions, types::READY).unwrap();
    assert!(
        ready.message.contains(&format!("{ns}/pull-secret")),
        "the message names the Secret: {}",
        ready.message
    );
    assert_eq!(
        status.provisioning.map(|p| p.started_at),
        Some(started_at),
        "startedAt is durable"
    );

    // hcp: accepted, reported unsupported.
    let hcp = support::unique("hcp");
    api.create(&PostParams::default(), &instance(&hcp, "hcp"))
        .await
        .expect("create hcp instance");
    let h = support::with_condition(
        &api,
        &hcp,
        types::READY,
        "False",
        reasons::TOPOLOGY_UNSUPPORTED,
    )
    .await;
    assert_eq!(
        h.status.as_ref().and_then(|s| s.phase),
        Some(InstancePhase::Provisioning)
    );
    assert!(h.status.unwrap().provisioning.is_none());

    // Neither created anything of a backing, so neither carries the teardown finalizer: a
    // deletion takes them away at once.
    for n in [&name, &hcp] {
        let i = api.get(n).await.unwrap();
        assert!(
            !i.finalizers().iter().any(|f| f == FINALIZER_CLEANUP),
            "{n}"
        );
        api.delete(n, &DeleteParams::default())
            .await
            .expect("delete instance");
    }
    for n in [&name, &hcp] {
        wait_for(&format!("{n} is gone"), || async {
            matches!(api.get_opt(n).await, Ok(None)).then_some(())
        })
        .await;
    }

    cdi_api
        .delete(&cdi_name, &DeleteParams::default())
        .await
        .expect("delete CDI");
    tree.stop(None);
}
