//! The operator objects a cluster with OpenShift Virtualization has: the `KubeVirt` (installed,
//! with upstream virt-api and virt-controller, by `testenv::ControlPlane::kubevirt`) configured
//! as HCO configures it, and a `CDI` reporting itself deployed and available, as cdi-operator
//! would (upstream cdi-apiserver answers CDI's admission, `testenv::ControlPlane::cdi`).
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

/// cdi-operator's registration of cdi-apiserver's DataVolume validation.
const CDI_DATAVOLUME_WEBHOOK: &str = "cdi-api-datavolume-validate";

/// Writes HCO's configuration into the installed `KubeVirt` and creates (or refreshes) `CDI
/// cdi`, Deployed. Fails when KubeVirt or CDI's API server is not installed.
pub async fn ensure(client: &kube::Client) -> Result<(), Error> {
    use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
    let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    if webhooks.get_opt(CDI_DATAVOLUME_WEBHOOK).await?.is_none() {
        return Err(Error::Other(format!(
            "CDI's API server is not installed ({CDI_DATAVOLUME_WEBHOOK} is missing): start it \
             with testenv::ControlPlane::cdi before the simulation"
        )));
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
    let cdi = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "CDI"),
        "cdis",
    );
    deployed(Api::all_with(client.clone(), &cdi), &cdi, "cdi", json!({})).await?;
    cdi_config(client).await
}

/// CDI's default filesystem overhead (containerized-data-importer v1.65
/// `pkg/controller/config-controller.go`, `defaultFilesystemOverhead`).
pub const DEFAULT_FILESYSTEM_OVERHEAD: &str = "0.055";

/// `CDIConfig config` as CDI's config controller keeps it: the filesystem overhead in its
/// status (virt-controller reads it to size a VMI's Filesystem-mode disks, and refuses to go
/// on without it once a `CDI` exists). Per-class overheads are not filled in (every class gets
/// the global one).
async fn cdi_config(client: &kube::Client) -> Result<(), Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "CDIConfig"),
        "cdiconfigs",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let object = |extra: serde_json::Value| {
        let mut object = json!({"apiVersion": resource.api_version, "kind": resource.kind,
                                "metadata": {"name": "config"}});
        object
            .as_object_mut()
            .expect("an object")
            .extend(extra.as_object().cloned().unwrap_or_default());
        object
    };
    api.patch(
        "config",
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object(json!({"spec": {}}))),
    )
    .await?;
    api.patch_status(
        "config",
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(object(json!({"status": {
            "filesystemOverhead": {"global": DEFAULT_FILESYSTEM_OVERHEAD},
        }}))),
    )
    .await?;
    Ok(())
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
