//! `VirtualMachineInstance`: one run of a guest, and what KubeVirt reports of it.

use super::*;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, PodDNSConfig, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// VirtualMachineInstance
// ---------------------------------------------------------------------------------------------

/// A VirtualMachineInstance: one run of a guest, in one virt-launcher pod. Every start of a VM
/// creates a new VMI (new UID, new pod, new pod IP).
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachineInstance",
    plural = "virtualmachineinstances",
    namespaced,
    status = "VirtualMachineInstanceStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceSpec {
    /// The virtual hardware.
    #[serde(default)]
    pub domain: DomainSpec,
    /// Where disk contents come from; each disk names one volume.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<Volume>,
    /// Networks the interfaces attach to. Empty = the pod network with masquerade binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub networks: Vec<Network>,
    /// Node labels the virt-launcher pod must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
    /// The guest's hostname (DHCP); default: the VMI name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// Seconds a graceful (ACPI) shutdown may take before the guest is killed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    /// `None`, `LiveMigrate`, `LiveMigrateIfPossible` or `External`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub eviction_strategy: Option<String>,
    /// DNS policy of the virt-launcher pod (and so of the guest's DHCP-provided resolvers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dns_config: Option<PodDNSConfig>,
}

impl VirtualMachineInstanceSpec {
    /// The volume named `name`.
    pub fn volume(&self, name: &str) -> Option<&Volume> {
        self.volumes.iter().find(|v| v.name == name)
    }
}

/// Observed state of a VMI (written by KubeVirt).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<VmiPhase>,
    /// CamelCase reason for the phase, e.g. why it Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The node the virt-launcher pod runs on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// The guest's interfaces. With the pod network, `ipAddress` is the pod IP.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<VmiNetworkInterface>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<KubevirtCondition>,
    /// When each phase was entered.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub phase_transition_timestamps: Vec<PhaseTransitionTimestamp>,
    /// Image version of the virt-launcher pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub launcher_container_image_version: Option<String>,
    /// virt-launcher pod UID → node name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub active_pods: BTreeMap<String, String>,
    /// Each volume and the device it appears as in the guest.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volume_status: Vec<VolumeStatus>,
}

/// `status.phase` of a VMI.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum VmiPhase {
    /// Not yet processed (`""`).
    #[serde(rename = "")]
    Unset,
    /// Accepted; waiting for volumes or for its pod to be created.
    Pending,
    /// The virt-launcher pod exists and is being scheduled / started.
    Scheduling,
    /// The virt-launcher pod runs; the guest is being started.
    Scheduled,
    /// The guest runs.
    Running,
    /// The guest shut down (powered off or stopped).
    Succeeded,
    /// The guest crashed or could not start, or its pod went away.
    Failed,
    /// KubeVirt's `Unknown` (node lost), and any value this code does not know.
    #[serde(other)]
    Unknown,
}

impl VmiPhase {
    /// `Succeeded` or `Failed`: this VMI will never run again.
    pub fn is_final(self) -> bool {
        matches!(self, VmiPhase::Succeeded | VmiPhase::Failed)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VmiPhase::Unset => "",
            VmiPhase::Pending => "Pending",
            VmiPhase::Scheduling => "Scheduling",
            VmiPhase::Scheduled => "Scheduled",
            VmiPhase::Running => "Running",
            VmiPhase::Succeeded => "Succeeded",
            VmiPhase::Failed => "Failed",
            VmiPhase::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for VmiPhase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One entry of `status.interfaces`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VmiNetworkInterface {
    /// The interface's name in the VMI spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_address: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ip_addresses: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac: Option<String>,
    /// The name inside the guest (from the guest agent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interface_name: Option<String>,
    /// `domain`, `guest-agent`, `multus-status` (comma-separated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub info_source: Option<String>,
}

/// One entry of `status.phaseTransitionTimestamps`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseTransitionTimestamp {
    pub phase: VmiPhase,
    pub phase_transition_timestamp: Time,
}

/// One entry of `status.volumeStatus`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeStatus {
    pub name: String,
    /// The device in the guest, e.g. `vda`, `sda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim_info: Option<PersistentVolumeClaimInfo>,
}

/// `volumeStatus[].persistentVolumeClaimInfo`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimInfo {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim_name: Option<String>,
    /// The claim's access modes (`ReadWriteMany` makes the disk shareable by a migration).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub access_modes: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub capacity: BTreeMap<String, Quantity>,
}

impl VirtualMachineInstance {
    /// `status.phase`; `Unset` when not written yet.
    pub fn phase(&self) -> VmiPhase {
        self.status
            .as_ref()
            .and_then(|s| s.phase)
            .unwrap_or(VmiPhase::Unset)
    }

    /// The first non-empty `status.interfaces[].ipAddress`: the pod IP on the pod network.
    pub fn first_ip(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| {
            s.interfaces
                .iter()
                .filter_map(|i| i.ip_address.as_deref())
                .find(|ip| !ip.is_empty())
        })
    }

    /// The condition of type `type_`, if present.
    pub fn condition(&self, type_: &str) -> Option<&KubevirtCondition> {
        self.status
            .as_ref()
            .and_then(|s| find_condition(&s.conditions, type_))
    }

    /// What KubeVirt says keeps this VMI from running, as `<reason>: <message>`: a `Synchronized`
    /// condition that is `False` (virt-handler could not start the domain, e.g. QEMU cannot open
    /// a disk; a missing or unbound PVC) or a failed DataVolume (`DataVolumesReady=False`,
    /// `Failed`). KubeVirt keeps retrying, so this is a reason to wait, named. `None` once it runs.
    pub fn start_blocker(&self) -> Option<String> {
        if self.phase() == VmiPhase::Running {
            return None;
        }
        let blocking = |c: &&KubevirtCondition| {
            c.status == "False"
                && (c.type_ == condition_types::SYNCHRONIZED
                    || (c.type_ == condition_types::DATA_VOLUMES_READY
                        && c.reason.as_deref() == Some("Failed")))
        };
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        conditions
            .unwrap_or_default()
            .iter()
            .find(blocking)
            .map(describe)
    }

    /// Running with `Ready=True`.
    pub fn is_ready(&self) -> bool {
        self.phase() == VmiPhase::Running
            && self
                .condition(condition_types::READY)
                .is_some_and(KubevirtCondition::is_true)
    }

    /// When the VMI entered `phase`, if it did.
    pub fn phase_entered(&self, phase: VmiPhase) -> Option<&Time> {
        self.status.as_ref().and_then(|s| {
            s.phase_transition_timestamps
                .iter()
                .find(|t| t.phase == phase)
                .map(|t| &t.phase_transition_timestamp)
        })
    }
}
