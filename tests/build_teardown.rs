//! Deleting a build whose VM never had a VMI. Upstream virt-controller records
//! `status.runStrategy` only once it created a VMI (kubevirt v1.9.0
//! `pkg/virt-controller/watch/vm/vm.go` `updateStatus`), so a build VM that was refused its first
//! VMI never shows `Halted` there, however long the teardown waits for it.
//!
//! This binary has a world of its own: to refuse the build VM its VMI, a ResourceQuota allows
//! no VirtualMachineInstance in the operator namespace, which would hold up every other build.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::api::CRCBundle;
use guestcluster::kubevirt::{RunStrategy, VirtualMachine};
use k8s_openapi::api::core::v1::ResourceQuota;
use kube::api::{Api, DeleteParams, PostParams};
use support::build::{attempt_objects, create_build, good_inputs};
use support::world::{OPERATOR_NS, world};
use support::{wait_for, wait_long};

/// The quota's count of VMIs (quota's object count for a custom resource).
const VMI_COUNT: &str = "count/virtualmachineinstances.kubevirt.io";

#[tokio::test]
async fn a_bundle_deleted_while_its_build_vm_was_refused_its_first_vmi_leaves_nothing() {
    let client = support::client().await;
    world();
    let quotas = Api::<ResourceQuota>::namespaced(client.clone(), OPERATOR_NS);
    let quota: ResourceQuota = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "no-vmis"},
        "spec": {"hard": {VMI_COUNT: "0"}},
    }))
    .unwrap();
    quotas.create(&PostParams::default(), &quota).await.unwrap();
    // The quota admission counts only once kube-controller-manager has filled in the status.
    wait_for("the quota's status", || async {
        let q = quotas.get("no-vmis").await.ok()?;
        q.status?.hard?.contains_key(VMI_COUNT).then_some(())
    })
    .await;

    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("refused");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "30m").await;
    let vms = Api::<VirtualMachine>::namespaced(client.clone(), OPERATOR_NS);
    let vm_name = format!("{name}-b1-build");
    let vm = wait_long("the build VM started and refused its VMI", || async {
        let vm = vms.get_opt(&vm_name).await.ok()??;
        let started = vm
            .spec
            .run_strategy
            .is_some_and(|s| s != RunStrategy::Halted);
        let refused = vm
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "Failure" && c.reason.as_deref() == Some("FailedCreate"));
        (started && refused).then_some(vm)
    })
    .await;
    let status = vm.status.clone().unwrap_or_default();
    assert!(
        !status.created && status.run_strategy.is_none(),
        "KubeVirt records no strategy for a VM that never had a VMI: {status:?}"
    );

    api.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_long("the bundle gone", || async {
        api.get_opt(&name).await.ok()?.is_none().then_some(())
    })
    .await;
    let left = attempt_objects(&client, &format!("{name}-b1")).await;
    assert!(left.is_empty(), "left behind: {left:?}");
    quotas
        .delete("no-vmis", &DeleteParams::default())
        .await
        .unwrap();
}
