//! Minimal CRDs for the OpenShift kinds a CRC guest serves and our code touches. Like the
//! management-cluster stand-ins in `testenv`, they keep unknown fields and have a status
//! subresource; they are not the upstream schemas.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

/// (group, kind, plural, namespaced)
const KINDS: &[(&str, &str, &str, bool)] = &[
    (
        "config.openshift.io",
        "ClusterVersion",
        "clusterversions",
        false,
    ),
    (
        "config.openshift.io",
        "ClusterOperator",
        "clusteroperators",
        false,
    ),
    ("config.openshift.io", "APIServer", "apiservers", false),
    ("config.openshift.io", "OAuth", "oauths", false),
    ("config.openshift.io", "Ingress", "ingresses", false),
    (
        "config.openshift.io",
        "Infrastructure",
        "infrastructures",
        false,
    ),
    (
        "config.openshift.io",
        "ImageDigestMirrorSet",
        "imagedigestmirrorsets",
        false,
    ),
    (
        "machineconfiguration.openshift.io",
        "MachineConfig",
        "machineconfigs",
        false,
    ),
    (
        "machineconfiguration.openshift.io",
        "MachineConfigPool",
        "machineconfigpools",
        false,
    ),
    (
        "operator.openshift.io",
        "IngressController",
        "ingresscontrollers",
        true,
    ),
    ("route.openshift.io", "Route", "routes", true),
];

/// The CRDs, ready to apply.
pub fn all() -> Vec<CustomResourceDefinition> {
    KINDS
        .iter()
        .map(|&(group, kind, plural, namespaced)| minimal(group, kind, plural, namespaced))
        .collect()
}

fn minimal(group: &str, kind: &str, plural: &str, namespaced: bool) -> CustomResourceDefinition {
    // Every kind we serve is v1 upstream.
    let version = "v1";
    let open = serde_json::json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "versions": [{
                "name": version,
                "served": true,
                "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": open, "status": open}
                }}
            }]
        }
    }))
    .expect("static CRD shape")
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_kind_has_a_crd() {
        let crds = super::all();
        assert_eq!(crds.len(), super::KINDS.len());
        assert!(
            crds.iter()
                .any(|c| c.metadata.name.as_deref() == Some("clusterversions.config.openshift.io"))
        );
    }
}
