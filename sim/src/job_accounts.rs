//! What the Helm chart installs for the operator's Jobs, for the scenarios and the demo that run
//! the operator without the chart: the bundle-prep ServiceAccount and its Role in the operator
//! namespace. `tests/helm.rs` checks these against the chart's rendered manifests, so the two
//! cannot drift.

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, Patch, PatchParams};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::Error;

const MANAGER: &str = "guestcluster-sim-install";
/// The prep Jobs' service account (the chart's `bundlePrep.serviceAccountName` default).
pub const PREP_ACCOUNT: &str = "bundle-prep";

/// The prep Job's publishing container server-side applies the bundle's key Secret and metadata
/// ConfigMap: a patch that creates what is missing. It reads nothing.
pub fn prep_role(namespace: &str) -> Role {
    from_json(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": { "name": PREP_ACCOUNT, "namespace": namespace },
        "rules": [{
            "apiGroups": [""],
            "resources": ["secrets", "configmaps"],
            "verbs": ["create", "patch"],
        }],
    }))
}

fn prep_binding(namespace: &str) -> RoleBinding {
    from_json(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": { "name": PREP_ACCOUNT, "namespace": namespace },
        "roleRef": { "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": PREP_ACCOUNT },
        "subjects": [{ "kind": "ServiceAccount", "name": PREP_ACCOUNT, "namespace": namespace }],
    }))
}

fn from_json<T: DeserializeOwned>(value: Value) -> T {
    serde_json::from_value(value).expect("a well-formed built-in object")
}

/// Applies the prep account, its Role and the binding (idempotent).
pub async fn install_prep_account(client: &kube::Client, namespace: &str) -> Result<(), Error> {
    let params = PatchParams::apply(MANAGER).force();
    let account: ServiceAccount = from_json(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": { "name": PREP_ACCOUNT, "namespace": namespace },
    }));
    Api::<ServiceAccount>::namespaced(client.clone(), namespace)
        .patch(PREP_ACCOUNT, &params, &Patch::Apply(&account))
        .await?;
    Api::<Role>::namespaced(client.clone(), namespace)
        .patch(PREP_ACCOUNT, &params, &Patch::Apply(&prep_role(namespace)))
        .await?;
    Api::<RoleBinding>::namespaced(client.clone(), namespace)
        .patch(
            PREP_ACCOUNT,
            &params,
            &Patch::Apply(&prep_binding(namespace)),
        )
        .await?;
    Ok(())
}
