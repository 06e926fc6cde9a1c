//! Typed CDI DataVolumes (`cdi.kubevirt.io/v1beta1`): the fields the operator writes (an instance's
//! root disk) or reads (import/clone progress), hand-written from the upstream API.
//!
//! As with [`crate::kubevirt`], this is **not** the whole upstream API: deserializing drops the
//! fields not modelled here, so never write back an object you read. The derive sets
//! `schema = "disabled"` (CDI owns the CRD; tests install one generated from CDI's API types,
//! `testenv/src/external-crds`). Enums read from the cluster carry an `Unknown` catch-all.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// API group of DataVolumes.
pub const GROUP: &str = "cdi.kubevirt.io";
/// API version of DataVolumes.
pub const VERSION: &str = "v1beta1";

/// Condition types CDI writes on DataVolumes.
pub mod condition_types {
    /// The DataVolume's PVC is bound.
    pub const BOUND: &str = "Bound";
    /// The content is populated (`phase: Succeeded`).
    pub const READY: &str = "Ready";
    /// An importer/cloner pod is running.
    pub const RUNNING: &str = "Running";
}

/// A DataVolume: a PVC plus where its content comes from. CDI creates a PVC of the same name.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "DataVolume",
    plural = "datavolumes",
    namespaced,
    status = "DataVolumeStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSpec {
    /// Where the content comes from (exactly one source).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<DataVolumeSourceSpec>,
    /// The PVC to create, completed by CDI's StorageProfile (access and volume modes, size
    /// overhead). Preferred over the older `spec.pvc`, which is not modelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StorageSpec>,
}

/// A DataSource: a named, stable pointer at a PVC that VirtualMachines and DataVolumes clone
/// from with `sourceRef` (a built bundle publishes one at its golden PVC).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "cdi.kubevirt.io",
    version = "v1beta1",
    kind = "DataSource",
    plural = "datasources",
    namespaced,
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct DataSourceSpec {
    pub source: DataSourceSource,
}

/// `spec.source` of a DataSource.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataSourceSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcSource>,
}

/// `spec.source`: exactly one of the fields is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSourceSpec {
    /// Clone an existing PVC (possibly from another namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pvc: Option<PvcSource>,
    /// Import a disk image from an HTTP(S) URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http: Option<HttpSource>,
    /// An empty disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blank: Option<BlankSource>,
}

/// `source.pvc`: the PVC to clone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PvcSource {
    pub namespace: String,
    pub name: String,
}

/// `source.http`: the image to import.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HttpSource {
    pub url: String,
}

/// Marker: `source.blank` (serializes as `{}`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlankSource {}

/// `spec.storage`: a subset of a PVC spec; what is left unset CDI takes from the StorageProfile.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<StorageResources>,
    /// Unset: the cluster's default StorageClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
    /// Unset: from the StorageProfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_modes: Option<Vec<String>>,
    /// `Filesystem` or `Block`; unset: from the StorageProfile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volume_mode: Option<String>,
}

/// `storage.resources`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StorageResources {
    /// `storage`: the requested size.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
}

/// Observed state of a DataVolume (written by CDI).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<DataVolumePhase>,
    /// Percentage such as `45.20%`, or `N/A`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<String>,
    /// The PVC holding the content (the DataVolume's name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// Restarts of the importer/cloner pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_count: Option<i32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<DataVolumeCondition>,
}

/// `status.phase` of a DataVolume.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DataVolumePhase {
    /// Not yet processed (`""`).
    #[serde(rename = "")]
    Unset,
    Pending,
    #[serde(rename = "PVCBound")]
    PvcBound,
    ImportScheduled,
    ImportInProgress,
    CloneScheduled,
    CloneInProgress,
    #[serde(rename = "CSICloneInProgress")]
    CsiCloneInProgress,
    SnapshotForSmartCloneInProgress,
    CloneFromSnapshotSourceInProgress,
    #[serde(rename = "SmartClonePVCInProgress")]
    SmartClonePvcInProgress,
    ExpansionInProgress,
    NamespaceTransferInProgress,
    PrepClaimInProgress,
    RebindInProgress,
    UploadScheduled,
    UploadReady,
    /// The PVC waits for a consumer pod (WaitForFirstConsumer binding).
    WaitForFirstConsumer,
    PendingPopulation,
    /// The content is complete.
    Succeeded,
    Failed,
    Paused,
    /// CDI's `Unknown`, and any value this code does not know.
    #[serde(other)]
    Unknown,
}

impl DataVolumePhase {
    /// `Succeeded`: the disk is populated.
    pub fn is_succeeded(self) -> bool {
        self == DataVolumePhase::Succeeded
    }
}

/// A DataVolume condition (`Bound`, `Ready`, `Running`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_heartbeat_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl DataVolumeCondition {
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

impl DataVolume {
    /// `status.phase`; `Unset` when not written yet.
    pub fn phase(&self) -> DataVolumePhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(DataVolumePhase::Unset)
    }

    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&DataVolumeCondition> {
        self.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == type_))
    }

    /// The PVC this DataVolume clones, if it is a PVC clone.
    pub fn pvc_source(&self) -> Option<&PvcSource> {
        self.spec.source.as_ref().and_then(|s| s.pvc.as_ref())
    }

    /// `spec.storage.resources.requests.storage`, if set.
    pub fn requested_storage(&self) -> Option<&Quantity> {
        self.spec
            .storage
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.get("storage"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn clone_data_volume_serializes_as_cdi_expects() {
        let dv = DataVolume::new(
            "crc-1-rootdisk",
            DataVolumeSpec {
                source: Some(DataVolumeSourceSpec {
                    pvc: Some(PvcSource {
                        namespace: "guestcluster-system".into(),
                        name: "crc-golden".into(),
                    }),
                    ..Default::default()
                }),
                storage: Some(StorageSpec {
                    resources: Some(StorageResources {
                        requests: BTreeMap::from([("storage".into(), Quantity("80Gi".into()))]),
                    }),
                    storage_class_name: Some("fast".into()),
                    ..Default::default()
                }),
            },
        );
        let value = serde_json::to_value(&dv).unwrap();
        assert_eq!(value["apiVersion"], "cdi.kubevirt.io/v1beta1");
        assert_eq!(value["kind"], "DataVolume");
        assert_eq!(
            value["spec"],
            json!({
                "source": {"pvc": {"namespace": "guestcluster-system", "name": "crc-golden"}},
                "storage": {"resources": {"requests": {"storage": "80Gi"}},
                            "storageClassName": "fast"},
            })
        );
        let back: DataVolume = serde_json::from_value(value).unwrap();
        assert_eq!(back.spec, dv.spec);
        assert_eq!(back.pvc_source().unwrap().name, "crc-golden");
        assert_eq!(back.requested_storage(), Some(&Quantity("80Gi".into())));
    }

    #[test]
    fn blank_and_http_sources_round_trip() {
        let spec: DataVolumeSpec = serde_json::from_value(json!({
            "source": {"blank": {}},
            "storage": {"accessModes": ["ReadWriteOnce"], "volumeMode": "Block"},
        }))
        .unwrap();
        assert_eq!(spec.source.as_ref().unwrap().blank, Some(BlankSource {}));
        assert_eq!(
            serde_json::to_value(&spec).unwrap()["source"],
            json!({"blank": {}})
        );
        let spec: DataVolumeSpec =
            serde_json::from_value(json!({"source": {"http": {"url": "http://x/crc.qcow2"}}}))
                .unwrap();
        assert_eq!(spec.source.unwrap().http.unwrap().url, "http://x/crc.qcow2");
    }

    #[test]
    fn status_reads_phase_progress_and_conditions() {
        let dv: DataVolume = serde_json::from_value(json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "d", "namespace": "ns"},
            "spec": {"source": {"blank": {}}},
            "status": {
                "phase": "CSICloneInProgress", "progress": "45.20%", "claimName": "d",
                "conditions": [
                    {"type": "Bound", "status": "True", "reason": "Bound", "message": "",
                     "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                     "lastTransitionTime": "2025-01-01T00:00:00Z"},
                    {"type": "Ready", "status": "False", "reason": "TransferRunning"},
                ],
            },
        }))
        .unwrap();
        assert_eq!(dv.phase(), DataVolumePhase::CsiCloneInProgress);
        assert!(!dv.phase().is_succeeded());
        assert!(dv.condition(condition_types::BOUND).unwrap().is_true());
        assert_eq!(
            dv.condition(condition_types::READY)
                .unwrap()
                .reason
                .as_deref(),
            Some("TransferRunning")
        );
        assert_eq!(dv.status.unwrap().progress.as_deref(), Some("45.20%"));
    }

    #[test]
    fn unknown_and_unset_phases_do_not_break_reading() {
        let status: DataVolumeStatus =
            serde_json::from_value(json!({"phase": "SomethingNew"})).unwrap();
        assert_eq!(status.phase, Some(DataVolumePhase::Unknown));
        let status: DataVolumeStatus = serde_json::from_value(json!({"phase": ""})).unwrap();
        assert_eq!(status.phase, Some(DataVolumePhase::Unset));
        let status: DataVolumeStatus =
            serde_json::from_value(json!({"phase": "PVCBound"})).unwrap();
        assert_eq!(status.phase, Some(DataVolumePhase::PvcBound));
        assert_eq!(
            serde_json::to_value(DataVolumePhase::Succeeded).unwrap(),
            json!("Succeeded")
        );
    }
}
