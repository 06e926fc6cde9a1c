//! The `SecurityContextConstraints` kind, served as OpenShift serves it (a cluster-scoped CRD of
//! `security.openshift.io/v1`, so discovery lists the group), with the `restricted-v2` object and
//! CDI's `containerized-data-importer`.
//! The schema is not modelled (unknown fields are kept): nothing reads these objects, admission
//! is [`super::restricted_v2`]'s. It is what a client sees to tell OpenShift from Kubernetes.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;

use crate::Error;

const FIELD_MANAGER: &str = "guestcluster-sim-scc";
const CRD_NAME: &str = "securitycontextconstraints.security.openshift.io";
const ESTABLISHED_WITHIN: Duration = Duration::from_secs(60);

/// Serves the kind and creates `restricted-v2`; returns once discovery lists the group.
pub async fn ensure(client: &kube::Client) -> Result<(), Error> {
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {
            "group": "security.openshift.io",
            "scope": "Cluster",
            "names": {"kind": "SecurityContextConstraints", "listKind": "SecurityContextConstraintsList",
                      "plural": "securitycontextconstraints", "singular": "securitycontextconstraints",
                      "shortNames": ["scc"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object",
                                     "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    }))
    .map_err(|e| Error::Other(format!("the SCC CRD: {e}")))?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    crds.patch(
        CRD_NAME,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&crd),
    )
    .await?;
    let started = Instant::now();
    while !guestcluster::operator::platform::serves_scc(client).await? {
        if started.elapsed() > ESTABLISHED_WITHIN {
            return Err(Error::Other(format!(
                "{CRD_NAME} not served within {ESTABLISHED_WITHIN:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("security.openshift.io", "v1", "SecurityContextConstraints"),
        "securitycontextconstraints",
    );
    let sccs: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let restricted = json!({
        "apiVersion": "security.openshift.io/v1", "kind": "SecurityContextConstraints",
        "metadata": {"name": super::restricted_v2::NAME},
        "allowHostDirVolumePlugin": false, "allowHostIPC": false, "allowHostNetwork": false,
        "allowHostPID": false, "allowHostPorts": false, "allowPrivilegeEscalation": false,
        "allowPrivilegedContainer": false, "allowedCapabilities": ["NET_BIND_SERVICE"],
        "requiredDropCapabilities": ["ALL"], "readOnlyRootFilesystem": false,
        "fsGroup": {"type": "MustRunAs"}, "runAsUser": {"type": "MustRunAsRange"},
        "seLinuxContext": {"type": "MustRunAs"}, "supplementalGroups": {"type": "RunAsAny"},
        "seccompProfiles": ["runtime/default"], "priority": null, "users": [],
        "groups": ["system:authenticated"],
        "volumes": ["configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                    "persistentVolumeClaim", "projected", "secret"],
    });
    // cdi-operator's (containerized-data-importer v1.65.0 `pkg/operator/controller/scc.go`).
    let namespace = testenv::KUBEVIRT_NAMESPACE;
    let cdi = json!({
        "apiVersion": "security.openshift.io/v1", "kind": "SecurityContextConstraints",
        "metadata": {"name": super::restricted_v2::CDI_SCC, "labels": {"cdi.kubevirt.io": ""}},
        "allowPrivilegeEscalation": false, "requiredDropCapabilities": ["ALL"],
        "runAsUser": {"type": "MustRunAsNonRoot"}, "seLinuxContext": {"type": "MustRunAs"},
        "supplementalGroups": {"type": "MustRunAs"}, "seccompProfiles": ["runtime/default"],
        "priority": null,
        "users": [format!("system:serviceaccount:{namespace}:cdi-sa"),
                  format!("system:serviceaccount:{namespace}:cdi-cronjob")],
        "volumes": ["configMap", "downwardAPI", "emptyDir", "persistentVolumeClaim",
                    "projected", "secret", "csi", "ephemeral"],
    });
    for (name, scc) in [
        (super::restricted_v2::NAME, &restricted),
        (super::restricted_v2::CDI_SCC, &cdi),
    ] {
        // A fresh CRD may refuse writes for a moment after discovery lists it.
        let mut last = None;
        for _ in 0..50 {
            match sccs
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(scc),
                )
                .await
            {
                Ok(_) => {
                    last = None;
                    break;
                }
                Err(err) => last = Some(err),
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Some(err) = last {
            return Err(Error::Kube(err));
        }
    }
    Ok(())
}
