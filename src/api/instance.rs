//! `ClusterInstance`: one guest cluster, standalone or owned by a pool.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ClusterType, LocalRef};
use super::template::ClusterTemplate;

/// Desired state of a ClusterInstance.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "guestcluster.opdev.io",
    version = "v1alpha1",
    kind = "ClusterInstance",
    plural = "clusterinstances",
    shortname = "cinst",
    namespaced,
    status = "ClusterInstanceStatus",
    doc = "ClusterInstance is one guest OpenShift cluster: for type crc, a single-node OpenShift Local VM cloned from a CRCBundle.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.ocpVersion"),
    printcolumn(name = "Topology", type_ = "string", json_path = ".status.topology"),
    printcolumn(name = "Lease", type_ = "string", json_path = ".status.leaseRef.name"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInstanceSpec {
    /// Topology: `crc` or `hcp` (accepted, reported as TopologyUnsupported).
    #[serde(rename = "type")]
    pub type_: ClusterType,
    /// The pool that owns this instance; empty for a standalone instance.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_ref: Option<LocalRef>,
    /// What the guest cluster looks like.
    pub template: ClusterTemplate,
}

/// Observed state of a ClusterInstance.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterInstanceStatus {
    /// Provisioning, Ready, Failed or Terminating. Leasing is shown by `leaseRef`, not a phase.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<InstancePhase>,
    /// OpenShift version observed in the guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocp_version: Option<String>,
    /// Topology, echoed from spec.type once Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<ClusterType>,
    /// The guest API URL, `https://<route host>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    /// Secret `<instance>-kubeconfig` with the key `kubeconfig` for the guest API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<LocalRef>,
    /// The lease that claims this instance (read-only projection of ClusterLease.status.instanceRef).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_ref: Option<LocalRef>,
    /// CRC backing objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc: Option<CRCBackingStatus>,
    /// HostedCluster and NodePools of an `hcp` instance, as the Go operator recorded them.
    /// guestcluster does not provision `hcp` and never writes this; it is kept so that the
    /// hosted cluster of a migrated instance can still be found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hyper_shift: Option<HyperShiftBackingStatus>,
    /// Durable record that provisioning was authorized by the namespace policy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provisioning: Option<ProvisioningStatus>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, VersionMismatch, Stale, GuestAPIReachable, CRCAgent, Terminating,
    /// ProvisioningAllowed, HyperConvergedReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

impl ClusterInstance {
    /// The kubeconfig Secret a lease binding this instance copies, when it can be bound: not
    /// deleting, phase Ready, a kubeconfig Secret published.
    pub fn bindable(&self) -> Option<&str> {
        if self.metadata.deletion_timestamp.is_some() {
            return None;
        }
        let status = self.status.as_ref()?;
        if status.phase != Some(InstancePhase::Ready) {
            return None;
        }
        status
            .kubeconfig_secret_ref
            .as_ref()
            .and_then(LocalRef::name)
    }
}

impl ClusterInstanceStatus {
    /// The status as guestcluster applies it: without the fields only the Go operator wrote
    /// (`hyperShift`, `provisioning.legacy`). A server-side apply then never takes them over, so
    /// they keep whatever their writer left, and a concurrent change to them is never undone.
    pub fn as_applied(&self) -> Self {
        let mut status = self.clone();
        status.hyper_shift = None;
        if let Some(provisioning) = &mut status.provisioning {
            provisioning.legacy = None;
        }
        status
    }
}

/// Lifecycle phase of a ClusterInstance.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum InstancePhase {
    Provisioning,
    Ready,
    Failed,
    Terminating,
}

/// Identities of a CRC instance's backing objects.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CRCBackingStatus {
    /// Name of the VirtualMachine, recorded before it is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_name: Option<String>,
    /// Name of the root DataVolume, recorded before it is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume_name: Option<String>,
    /// Address of the guest's SSH server (the VMI IP).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_endpoint: Option<String>,
    /// The VMI for which the published handoff is valid.
    #[serde(default, rename = "vmiUID", skip_serializing_if = "Option::is_none")]
    pub vmi_uid: Option<String>,
    /// UID of the VirtualMachine, kept for dependent cleanup.
    #[serde(default, rename = "vmUID", skip_serializing_if = "Option::is_none")]
    pub vm_uid: Option<String>,
    /// UID of the root DataVolume, kept for dependent cleanup.
    #[serde(
        default,
        rename = "dataVolumeUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub data_volume_uid: Option<String>,
    /// UID of the root DataVolume whose guest authorizes only the instance key (the crc-agent
    /// revoked the bundle key there); the instance's copy of the bundle key is not kept for it.
    #[serde(
        default,
        rename = "instanceKeyDataVolumeUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub instance_key_data_volume_uid: Option<String>,
    /// The bundle and key this instance was bound to before any disk existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_key: Option<CRCBootKeyStatus>,
}

/// Binding of an instance to the bundle disk and SSH key it boots with. Recovery of the key copy
/// refuses when the bundle's recorded digest differs.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CRCBootKeyStatus {
    /// UID of the CRCBundle the instance was bound to.
    #[serde(rename = "bundleUID")]
    pub bundle_uid: String,
    /// Archive SHA-256 of a downloaded bundle (empty for built bundles).
    #[serde(rename = "bundleSHA256")]
    pub bundle_sha256: String,
    /// Raw disk SHA-256 of a built bundle; built bundles bind to it.
    #[serde(
        default,
        rename = "diskSHA256",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_sha256: Option<String>,
    /// Namespace of the golden PVC the root disk is cloned from.
    pub pvc_namespace: String,
    /// Name of the golden PVC.
    pub pvc_name: String,
    /// UID of the golden PVC; a different UID means the disk was replaced.
    #[serde(rename = "pvcUID")]
    pub pvc_uid: String,
    /// StorageClass of the golden PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Namespace of the bundle's SSH key Secret.
    pub secret_namespace: String,
    /// Name of the bundle's SSH key Secret.
    pub secret_name: String,
    /// UID of the bundle's SSH key Secret; a different UID means the key was replaced.
    #[serde(rename = "secretUID")]
    pub secret_uid: String,
    /// SHA-256 of the private key.
    #[serde(rename = "keySHA256")]
    pub key_sha256: String,
}

/// When provisioning was authorized.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ProvisioningStatus {
    /// When the namespace policy first allowed provisioning this instance.
    #[schemars(
        description = "When the namespace policy first allowed provisioning this instance."
    )]
    pub started_at: Time,
    /// Set by the Go operator when it adopted backing objects of its earlier versions.
    /// guestcluster does not adopt such objects and never writes this; it is kept as recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub legacy: Option<bool>,
}

/// The HyperShift objects backing an `hcp` instance (written by the Go operator only).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct HyperShiftBackingStatus {
    /// Name of the `hypershift.openshift.io/v1beta1` HostedCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted_cluster_name: Option<String>,
    /// Namespace of the HostedCluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hosted_cluster_namespace: Option<String>,
    /// The NodePools backing the instance's workers.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub node_pool_names: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A status as the Go operator writes it: `kubeconfigSecretRef` is a non-pointer struct there,
    /// so an unset one is `{}`.
    fn upstream_status() -> serde_json::Value {
        json!({
            "phase": "Provisioning",
            "kubeconfigSecretRef": {},
            "hyperShift": {
                "hostedClusterName": "hcp",
                "hostedClusterNamespace": "clusters",
                "nodePoolNames": ["hcp-a", "hcp-b"],
            },
            "provisioning": {"startedAt": "2026-01-02T03:04:05Z", "legacy": true},
            "observedGeneration": 1,
        })
    }

    #[test]
    fn reads_the_go_operators_status() {
        let status: ClusterInstanceStatus = serde_json::from_value(upstream_status()).unwrap();
        assert_eq!(status.kubeconfig_secret_ref.as_ref().unwrap().name(), None);
        let hs = status.hyper_shift.as_ref().unwrap();
        assert_eq!(hs.hosted_cluster_name.as_deref(), Some("hcp"));
        assert_eq!(hs.node_pool_names, ["hcp-a", "hcp-b"]);
        assert_eq!(status.provisioning.as_ref().unwrap().legacy, Some(true));
    }

    #[test]
    fn applied_status_leaves_the_go_operators_fields_alone() {
        let status: ClusterInstanceStatus = serde_json::from_value(upstream_status()).unwrap();
        let applied = serde_json::to_value(status.as_applied()).unwrap();
        assert_eq!(applied.get("hyperShift"), None);
        assert_eq!(
            applied["provisioning"],
            json!({"startedAt": "2026-01-02T03:04:05Z"})
        );
        // Everything we own is still applied.
        assert_eq!(applied["phase"], "Provisioning");
        assert_eq!(applied["observedGeneration"], 1);
        // Absent stays absent.
        let ours = serde_json::to_value(ClusterInstanceStatus::default().as_applied()).unwrap();
        assert_eq!(ours, json!({}));
    }
}
