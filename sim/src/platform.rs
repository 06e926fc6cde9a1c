//! The operator objects a cluster with OpenShift Virtualization has: a `KubeVirt` and a `CDI`
//! reporting themselves deployed and available, as their operators would.
//!
//! The `KubeVirt` carries the configuration HCO writes into it on a cluster of more than one
//! worker: `evictionStrategy: LiveMigrate` for every VMI that sets none
//! (hyperconverged-cluster-operator `api/v1beta1/hyperconverged_types.go`, `EvictionStrategy`:
//! `LiveMigrate` by default, `None` only on a single-node cluster). The simulated cluster has one
//! Node but plays a management cluster whose nodes get drained for upgrades.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::Error;

const MANAGER: &str = "guestcluster-sim-platform";
/// Where the simulated KubeVirt "installation" lives (OpenShift Virtualization's namespace).
pub const KUBEVIRT_NAMESPACE: &str = "openshift-cnv";
/// The cluster-wide eviction strategy of VMIs that set none (HCO's default on a multi-node
/// cluster).
pub const CLUSTER_EVICTION_STRATEGY: &str = "LiveMigrate";

/// The `KubeVirt` kind (`kubevirt.io/v1`, `kubevirts`).
pub fn kubevirt_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt"),
        "kubevirts",
    )
}

/// Creates (or refreshes) `KubeVirt openshift-cnv/kubevirt` and `CDI cdi`, both Deployed.
pub async fn ensure(client: &kube::Client) -> Result<(), Error> {
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": KUBEVIRT_NAMESPACE}});
    let ns_api: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns_api
        .patch(
            KUBEVIRT_NAMESPACE,
            &PatchParams::apply(MANAGER),
            &Patch::Apply(namespace),
        )
        .await?;
    let kubevirt = kubevirt_resource();
    let cdi = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "CDI"),
        "cdis",
    );
    deployed(
        Api::namespaced_with(client.clone(), KUBEVIRT_NAMESPACE, &kubevirt),
        &kubevirt,
        "kubevirt",
        json!({"configuration": {"evictionStrategy": CLUSTER_EVICTION_STRATEGY}}),
    )
    .await?;
    deployed(Api::all_with(client.clone(), &cdi), &cdi, "cdi", json!({})).await
}

async fn deployed(
    api: Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
    spec: serde_json::Value,
) -> Result<(), Error> {
    let object = json!({"apiVersion": resource.api_version, "kind": resource.kind, "metadata": {"name": name}, "spec": spec});
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object),
    )
    .await?;
    let condition = |t: &str, s: &str| json!({"type": t, "status": s, "reason": "AllComponentsReady", "message": "simulated"});
    let status = json!({
        "apiVersion": resource.api_version, "kind": resource.kind, "metadata": {"name": name},
        "status": {"phase": "Deployed", "conditions": [condition("Available", "True"), condition("Progressing", "False"), condition("Degraded", "False")]}
    });
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(status),
    )
    .await?;
    Ok(())
}
