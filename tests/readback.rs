//! The operator's write path reads every write back: a field the API server drops (here pruned
//! by KubeVirt's schema, as an older KubeVirt would prune a field it does not know) is counted
//! and logged, and a write stored as sent is not.
// The objects are written through the operator's write path itself.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::write;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::json;

fn vm(name: &str, machine: serde_json::Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {
            "machine": machine, "devices": {}}}}},
    }))
    .expect("VirtualMachine")
}

/// One test in this binary: the counter is process-wide.
#[tokio::test]
async fn a_dropped_field_is_counted_and_a_stored_one_is_not() {
    let client = support::client().await;
    let ns = support::namespace(&client, "readback").await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachine",
    ));
    let vms: Api<DynamicObject> = Api::namespaced_with(client, &ns, &resource);
    let dropped = || write::dropped_fields_counter().get();

    write::create(&vms, &vm("right", json!({"type": "q35"})))
        .await
        .expect("create a VM");
    assert_eq!(dropped(), 0, "a VM stored as sent");

    // Misspelled: a real cluster prunes it silently and the VM gets the default machine type.
    write::create(&vms, &vm("wrong", json!({"tpye": "q35"})))
        .await
        .expect("a pruned field does not fail the create");
    assert_eq!(dropped(), 1, "`machine.tpye` was dropped");

    write::merge_patch(
        &vms,
        "right",
        &json!({"spec": {"template": {"spec": {"domain": {"firmware": {"serial": "s", "uuuid": "x"}}}}}}),
    )
    .await
    .expect("merge patch");
    assert_eq!(
        dropped(),
        2,
        "`firmware.uuuid` was dropped, `firmware.serial` kept"
    );

    assert!(
        !write::create_new(&vms, &vm("right", json!({"tpye": "q35"})))
            .await
            .expect("an existing VM is fine"),
        "not created twice"
    );
    assert_eq!(dropped(), 2, "a create refused as existing stored nothing");
}
