//! The operator objects a cluster with OpenShift Virtualization has: the `KubeVirt` (installed,
//! with upstream virt-api and virt-controller, by `testenv::ControlPlane::kubevirt`) configured
//! as HCO configures it. `CDI` and `CDIConfig` are upstream's (cdi-apiserver and cdi-controller,
//! installed by `testenv::ControlPlane::cdi_controller`, which reports `CDI cdi` Deployed as
//! cdi-operator does).
//!
//! HCO writes into the `KubeVirt`, on a cluster of more than one worker,
//! `evictionStrategy: LiveMigrate` for every VMI that sets none
//! (hyperconverged-cluster-operator `api/v1beta1/hyperconverged_types.go`, `EvictionStrategy`:
//! `LiveMigrate` by default, `None` only on a single-node cluster). The simulated cluster has one
//! Node but plays a management cluster whose nodes get drained for upgrades.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::Error;

const MANAGER: &str = "guestcluster-sim-platform";
/// Where KubeVirt is installed (OpenShift Virtualization's namespace).
pub const KUBEVIRT_NAMESPACE: &str = testenv::KUBEVIRT_NAMESPACE;
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

/// Writes HCO's configuration into the installed `KubeVirt`. Fails when KubeVirt or CDI's
/// controller is not running: the simulation plays their node side only.
pub async fn ensure(client: &kube::Client) -> Result<(), Error> {
    let cdi_config = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "CDIConfig"),
        "cdiconfigs",
    );
    let configs: Api<DynamicObject> = Api::all_with(client.clone(), &cdi_config);
    let filled = configs
        .get_opt("config")
        .await?
        .is_some_and(|c| !c.data["status"]["filesystemOverhead"].is_null());
    if !filled {
        return Err(Error::Other(
            "CDI's controller is not running (CDIConfig config has no status): start it with \
             testenv::ControlPlane::cdi_controller before the simulation"
                .into(),
        ));
    }
    let kubevirt = kubevirt_resource();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), KUBEVIRT_NAMESPACE, &kubevirt);
    if api.get_opt(testenv::KUBEVIRT_NAME).await?.is_none() {
        return Err(Error::Other(format!(
            "KubeVirt is not installed ({KUBEVIRT_NAMESPACE}/{} is missing): start it with \
             testenv::ControlPlane::kubevirt before the simulation",
            testenv::KUBEVIRT_NAME
        )));
    }
    let configuration = json!({
        "apiVersion": kubevirt.api_version, "kind": kubevirt.kind,
        "metadata": {"name": testenv::KUBEVIRT_NAME},
        "spec": {"configuration": {"evictionStrategy": CLUSTER_EVICTION_STRATEGY}},
    });
    api.patch(
        testenv::KUBEVIRT_NAME,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(configuration),
    )
    .await?;
    Ok(())
}
