//! Upstream KubeVirt (virt-api, virt-controller) in the test world: experiment.
#![allow(clippy::disallowed_methods)]

use std::time::{Duration, Instant};

use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::json;
use testenv::ControlPlane;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn virt_controller_renders_a_launcher_pod() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let client = cp.client().unwrap();
    let kv = cp.kubevirt().await.unwrap_or_else(|e| panic!("{e}"));
    eprintln!("kubevirt dir {}", kv.dir().display());
    let vms = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
        "virtualmachines",
    );
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vms);
    let vm: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "crc-1"},
        "spec": {"runStrategy": "Always", "template": {
            "metadata": {"labels": {"app": "crc"}},
            "spec": {"hostname": "crc", "domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}},
              "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "crc-1-root"}}],
              "evictionStrategy": "None"}}}
    })).unwrap();
    api.create(&PostParams::default(), &vm)
        .await
        .unwrap_or_else(|e| panic!("{e}"));
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), "default");
    let start = Instant::now();
    loop {
        let list = pods
            .list(&ListParams::default().labels("kubevirt.io=virt-launcher"))
            .await
            .unwrap();
        if let Some(p) = list.items.first() {
            eprintln!(
                "{}",
                serde_json::to_string_pretty(&p.metadata.labels).unwrap()
            );
            break;
        }
        let vmis = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachineInstance"),
            "virtualmachineinstances",
        );
        let vmi: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vmis);
        if start.elapsed() > Duration::from_secs(60) {
            let v = vmi.get_opt("crc-1").await.unwrap();
            let vm = api.get("crc-1").await.unwrap();
            panic!("no pod; vmi {v:#?} vm status {:#?}", vm.data["status"]);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
