//! The profile's post-install steps (SNC's post-install customisation, in SNC's order;
//! `docs/decisions.md`, "Customize, Seal, Publish, Validate, Ready"): what the Customize stage
//! changes in the installed cluster before the user's own manifests. Pure: the objects to apply
//! and the patches to send; the build helper sends them through the guest API
//! ([`crate::guest::customize`]). The steps that need something read from the cluster first (the
//! router CA, the kubeadmin password for the htpasswd file) are the helper's.

use serde_json::{Value, json};

use super::manifests::CVO_OVERRIDES;

/// The hostpath CSI driver's namespace, name and storage class (SNC `create_pvs`).
pub const CSI_NAMESPACE: &str = "hostpath-provisioner";
pub const CSI_DRIVER: &str = "kubevirt.io.hostpath-provisioner";
pub const CSI_ACCOUNT: &str = "csi-hostpath-provisioner-sa";
pub const STORAGE_CLASS: &str = "crc-csi-hostpath-provisioner";
/// Where the plugin keeps volumes on the node.
pub const CSI_DATA_DIR: &str = "/var/lib/csi-hostpath-data/";
pub const REGISTRY_NAMESPACE: &str = "openshift-image-registry";
pub const REGISTRY_CLAIM: &str = "crc-image-registry-storage";
/// The images of the CSI DaemonSet, as SNC's kustomization swaps them in. Each is pulled with
/// `IfNotPresent`, as SNC's manifests say: a `:latest` tag defaults to `Always`, and a sealed
/// disk cannot pull (its pull secret is `{}` until `crc start` injects one, and a disconnected
/// host never can), so the pods would wait on the registry instead of running the cached image.
pub const CSI_DRIVER_IMAGE: &str =
    "registry.redhat.io/container-native-virtualization/hostpath-csi-driver-rhel9:v4.21";
pub const CSI_REGISTRAR_IMAGE: &str =
    "registry.redhat.io/openshift4/ose-csi-node-driver-registrar:latest";
pub const CSI_LIVENESS_IMAGE: &str = "registry.redhat.io/openshift4/ose-csi-livenessprobe:latest";
pub const CSI_PROVISIONER_IMAGE: &str =
    "registry.redhat.io/openshift4/ose-csi-external-provisioner:latest";
/// The HTPasswd identity provider's name and the Secret it reads.
pub const IDP_NAME: &str = "developer";
pub const HTPASSWD_SECRET: &str = "htpass-secret";
/// A year: how long OAuth access tokens live on a CRC cluster.
pub const TOKEN_MAX_AGE_SECONDS: i64 = 31_536_000;
/// The ConfigMap the router CA is copied into for the exposed registry, and its key.
pub const REGISTRY_CERTS: &str = "registry-certs";
pub const REGISTRY_ROUTE_HOST: &str = "default-route-openshift-image-registry.apps-crc.testing";
pub const ROUTER_CA_SECRET: &str = "router-ca";
pub const INGRESS_OPERATOR_NAMESPACE: &str = "openshift-ingress-operator";
pub const SECURITY_NOTICE: &str = "security-notice";

/// An object the installed cluster already has, to patch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Target {
    pub api_version: &'static str,
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespace: Option<&'static str>,
    pub name: &'static str,
}

impl Target {
    pub fn describe(&self) -> String {
        match self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }
}

pub const CLUSTER_VERSION: Target = Target {
    api_version: "config.openshift.io/v1",
    kind: "ClusterVersion",
    plural: "clusterversions",
    namespace: None,
    name: "version",
};
pub const REGISTRY_CONFIG: Target = Target {
    api_version: "imageregistry.operator.openshift.io/v1",
    kind: "Config",
    plural: "configs",
    namespace: None,
    name: "cluster",
};
pub const INGRESS_CONTROLLER: Target = Target {
    api_version: "operator.openshift.io/v1",
    kind: "IngressController",
    plural: "ingresscontrollers",
    namespace: Some(INGRESS_OPERATOR_NAMESPACE),
    name: "default",
};
pub const OAUTH: Target = Target {
    api_version: "config.openshift.io/v1",
    kind: "OAuth",
    plural: "oauths",
    namespace: None,
    name: "cluster",
};
pub const IMAGE_CONFIG: Target = Target {
    api_version: "config.openshift.io/v1",
    kind: "Image",
    plural: "images",
    namespace: None,
    name: "cluster",
};

/// One change to the cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// Server-side applied: created, or brought to this content.
    Apply(Value),
    /// A JSON merge patch of an object every installed cluster has.
    Patch { target: Target, patch: Value },
}

/// One post-install step: what it is for (progress and errors) and its changes, in order.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    pub what: &'static str,
    pub changes: Vec<Change>,
}

/// The post-install steps that need nothing read from the cluster, in SNC's order.
pub fn steps() -> Vec<Step> {
    vec![
        Step {
            what: "storage: the hostpath CSI driver, its default storage class and the registry's claim",
            changes: storage().into_iter().map(Change::Apply).collect(),
        },
        Step {
            what: "CVO overrides",
            changes: vec![Change::Patch {
                target: CLUSTER_VERSION,
                patch: json!({"spec": {"overrides": cvo_overrides()}}),
            }],
        },
        Step {
            what: "one router replica",
            changes: vec![Change::Patch {
                target: INGRESS_CONTROLLER,
                patch: json!({"spec": {"replicas": 1}}),
            }],
        },
        Step {
            what: "image registry managed, on its claim, with its default route",
            changes: vec![Change::Patch {
                target: REGISTRY_CONFIG,
                patch: json!({"spec": {
                    "managementState": "Managed",
                    "defaultRoute": true,
                    "storage": {"pvc": {"claim": REGISTRY_CLAIM}},
                }}),
            }],
        },
        Step {
            what: "OAuth with the htpasswd identity provider, kubeadmin a cluster admin",
            changes: vec![
                Change::Patch {
                    target: OAUTH,
                    patch: json!({"spec": {
                        "identityProviders": [{
                            "name": IDP_NAME,
                            "mappingMethod": "claim",
                            "type": "HTPasswd",
                            "htpasswd": {"fileData": {"name": HTPASSWD_SECRET}},
                        }],
                        "tokenConfig": {"accessTokenMaxAgeSeconds": TOKEN_MAX_AGE_SECONDS},
                    }}),
                },
                Change::Apply(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": "kubeadmin"},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "kubeadmin"}],
                })),
            ],
        },
        Step {
            what: "the console's development-only notice",
            changes: vec![Change::Apply(json!({
                "apiVersion": "console.openshift.io/v1",
                "kind": "ConsoleNotification",
                "metadata": {"name": SECURITY_NOTICE},
                "spec": {
                    "text": "OpenShift Local cluster is for development and testing purposes. DON'T use it for production.",
                    "location": "BannerTop",
                },
            }))],
        },
        Step {
            what: "cluster ID cleared (each instance gets its own)",
            changes: vec![Change::Patch {
                target: CLUSTER_VERSION,
                patch: json!({"spec": {"clusterID": ""}}),
            }],
        },
    ]
}

/// ClusterVersion `spec.overrides`: the profile's unmanaged operators, as at install time.
fn cvo_overrides() -> Vec<Value> {
    CVO_OVERRIDES
        .iter()
        .map(|o| {
            json!({"kind": o.kind, "group": o.group, "namespace": o.namespace, "name": o.name, "unmanaged": true})
        })
        .collect()
}

/// The router CA trusted for the exposed registry: the ConfigMap (from the CA read from
/// `openshift-ingress-operator/router-ca`) and the patch naming it.
pub fn registry_trust(router_ca_pem: &str) -> [Change; 2] {
    [
        Change::Apply(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": REGISTRY_CERTS, "namespace": "openshift-config"},
            "data": {REGISTRY_ROUTE_HOST: router_ca_pem},
        })),
        Change::Patch {
            target: IMAGE_CONFIG,
            patch: json!({"spec": {"additionalTrustedCA": {"name": REGISTRY_CERTS}}}),
        },
    ]
}

/// SNC's `kubevirt-hostpath-provisioner-csi/`: namespace, RBAC, driver, SCC, plugin DaemonSet,
/// the default storage class and the registry's claim.
fn storage() -> Vec<Value> {
    let rule = |groups: &[&str], resources: &[&str], verbs: &[&str]| json!({"apiGroups": groups, "resources": resources, "verbs": verbs});
    let read = ["get", "list", "watch"];
    let host_path = |name: &str, path: &str, kind: &str| json!({"name": name, "hostPath": {"path": path, "type": kind}});
    let socket = json!({"name": "socket-dir", "mountPath": "/csi"});
    vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CSI_NAMESPACE}}),
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": CSI_ACCOUNT, "namespace": CSI_NAMESPACE}}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "hostpath-external-provisioner-runner"},
        "rules": [
            rule(&[""], &["persistentvolumes"], &["get", "list", "watch", "create", "delete"]),
            rule(&[""], &["persistentvolumeclaims"], &["get", "list", "watch", "update"]),
            rule(&["storage.k8s.io"], &["storageclasses", "csinodes", "volumeattachments"], &read),
            rule(&[""], &["events"], &["list", "watch", "create", "update", "patch"]),
            rule(&[""], &["nodes"], &read),
        ]}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
               "metadata": {"name": "hostpath-external-provisioner-runner"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "hostpath-external-provisioner-runner"},
               "subjects": [{"kind": "ServiceAccount", "name": CSI_ACCOUNT, "namespace": CSI_NAMESPACE}]}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
               "metadata": {"name": CSI_DRIVER},
               "spec": {"attachRequired": false, "podInfoOnMount": true, "volumeLifecycleModes": ["Persistent"]}}),
        json!({"apiVersion": "security.openshift.io/v1", "kind": "SecurityContextConstraints",
               "metadata": {"name": "hostpath-provisioner-csi"},
               "allowHostDirVolumePlugin": true, "allowPrivilegedContainer": true,
               "allowHostNetwork": false, "allowHostPorts": false, "allowHostPID": false, "allowHostIPC": false,
               "readOnlyRootFilesystem": false,
               "runAsUser": {"type": "RunAsAny"}, "seLinuxContext": {"type": "RunAsAny"},
               "fsGroup": {"type": "RunAsAny"}, "supplementalGroups": {"type": "RunAsAny"},
               "users": [format!("system:serviceaccount:{CSI_NAMESPACE}:{CSI_ACCOUNT}")],
               "volumes": ["*"]}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "csi-hostpathplugin", "namespace": CSI_NAMESPACE},
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": "csi-hostpathplugin"}},
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": "csi-hostpathplugin"}},
                "spec": {
                    "serviceAccountName": CSI_ACCOUNT,
                    "containers": [
                        {"name": "hostpath-provisioner", "image": CSI_DRIVER_IMAGE, "imagePullPolicy": "IfNotPresent",
                         "args": ["--drivername=kubevirt.io.hostpath-provisioner", "--v=3",
                                  "--datadir=[{\"name\":\"local\",\"path\":\"/csi-data-dir\"}]",
                                  "--endpoint=$(CSI_ENDPOINT)", "--nodeid=$(NODE_NAME)"],
                         "env": [{"name": "CSI_ENDPOINT", "value": "unix:///csi/csi.sock"},
                                 {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                         "securityContext": {"privileged": true},
                         "volumeMounts": [socket,
                                          {"name": "csi-data-dir", "mountPath": "/csi-data-dir"},
                                          {"name": "mountpoint-dir", "mountPath": "/var/lib/kubelet/pods", "mountPropagation": "Bidirectional"},
                                          {"name": "plugins-dir", "mountPath": "/var/lib/kubelet/plugins", "mountPropagation": "Bidirectional"}]},
                        {"name": "node-driver-registrar", "image": CSI_REGISTRAR_IMAGE, "imagePullPolicy": "IfNotPresent",
                         "args": ["--v=3", "--csi-address=/csi/csi.sock",
                                  "--kubelet-registration-path=/var/lib/kubelet/plugins/csi-hostpath/csi.sock"],
                         "securityContext": {"privileged": true},
                         "volumeMounts": [socket, {"name": "registration-dir", "mountPath": "/registration"}]},
                        {"name": "liveness-probe", "image": CSI_LIVENESS_IMAGE, "imagePullPolicy": "IfNotPresent",
                         "args": ["--csi-address=/csi/csi.sock", "--health-port=9898"],
                         "volumeMounts": [socket]},
                        {"name": "csi-provisioner", "image": CSI_PROVISIONER_IMAGE, "imagePullPolicy": "IfNotPresent",
                         "args": ["--v=5", "--csi-address=/csi/csi.sock", "--feature-gates=Topology=true",
                                  "--enable-capacity=false", "--node-deployment=true"],
                         "env": [{"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
                         "volumeMounts": [socket]},
                    ],
                    "volumes": [
                        host_path("socket-dir", "/var/lib/kubelet/plugins/csi-hostpath", "DirectoryOrCreate"),
                        host_path("mountpoint-dir", "/var/lib/kubelet/pods", "DirectoryOrCreate"),
                        host_path("registration-dir", "/var/lib/kubelet/plugins_registry", "Directory"),
                        host_path("plugins-dir", "/var/lib/kubelet/plugins", "Directory"),
                        host_path("csi-data-dir", CSI_DATA_DIR, "DirectoryOrCreate"),
                    ],
                },
            },
        }}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
               "metadata": {"name": STORAGE_CLASS,
                            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}},
               "provisioner": CSI_DRIVER,
               "parameters": {"storagePool": "local"},
               "reclaimPolicy": "Retain",
               "volumeBindingMode": "WaitForFirstConsumer"}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": REGISTRY_CLAIM, "namespace": REGISTRY_NAMESPACE},
               "spec": {"accessModes": ["ReadWriteMany"], "storageClassName": STORAGE_CLASS,
                        "resources": {"requests": {"storage": "20Gi"}}}}),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_post_install_steps_match_golden() {
        let steps: Vec<Value> = steps()
            .into_iter()
            .map(|s| {
                let changes: Vec<Value> = s
                    .changes
                    .into_iter()
                    .map(|c| match c {
                        Change::Apply(object) => json!({"apply": object}),
                        Change::Patch { target, patch } => {
                            json!({"patch": target.describe(), "with": patch})
                        }
                    })
                    .collect();
                json!({"step": s.what, "changes": changes})
            })
            .collect();
        super::super::golden_check_objects("post-install.yaml", &Value::Array(steps));
    }

    #[test]
    fn every_applied_object_names_its_type_and_itself() {
        for step in steps() {
            for change in step.changes {
                if let Change::Apply(object) = change {
                    assert!(object["apiVersion"].is_string(), "{object}");
                    assert!(object["kind"].is_string(), "{object}");
                    assert!(object["metadata"]["name"].is_string(), "{object}");
                }
            }
        }
    }

    #[test]
    fn every_container_the_profile_runs_uses_the_image_the_disk_holds() {
        let mut containers = 0;
        for step in steps() {
            for change in step.changes {
                let Change::Apply(object) = change else {
                    continue;
                };
                let Some(list) = object
                    .pointer("/spec/template/spec/containers")
                    .and_then(Value::as_array)
                else {
                    continue;
                };
                for container in list {
                    containers += 1;
                    assert_eq!(
                        container["imagePullPolicy"], "IfNotPresent",
                        "{} in {}",
                        container["name"], object["metadata"]["name"]
                    );
                }
            }
        }
        assert!(containers >= 4);
    }

    #[test]
    fn the_registry_trusts_the_router_ca_under_its_route_host() {
        let [config_map, patch] = registry_trust("PEM");
        let Change::Apply(cm) = config_map else {
            panic!("a ConfigMap")
        };
        assert_eq!(cm["data"][REGISTRY_ROUTE_HOST], "PEM");
        assert!(matches!(patch, Change::Patch { target, .. } if target == IMAGE_CONFIG));
    }
}
