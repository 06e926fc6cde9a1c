//! Typed KubeVirt objects (`kubevirt.io/v1`): the fields of `VirtualMachine` and
//! `VirtualMachineInstance` the operator writes (VM profiles) or reads (status), hand-written
//! from the upstream API.
//!
//! This is **not** the whole upstream API. Deserializing an object drops the fields not modelled
//! here, so never write back an object you read (use server-side apply or a patch of the fields
//! you own). The derives set `schema = "disabled"`: these kinds are KubeVirt's, never installed
//! by us (tests install CRDs generated from the upstream API types, `testenv/src/external-crds`,
//! so a misspelled field is pruned there as on a real cluster).
//!
//! Enums read from the cluster carry an `Unknown` catch-all, so an unexpected value from a newer
//! KubeVirt does not make the whole object unreadable; the catch-all is not meant to be written.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, LocalObjectReference, PodDNSConfig, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// API group of VirtualMachine and VirtualMachineInstance.
pub const GROUP: &str = "kubevirt.io";
/// API version of VirtualMachine and VirtualMachineInstance.
pub const VERSION: &str = "v1";

/// Labels and annotations KubeVirt puts on VMIs and virt-launcher pods.
pub mod labels {
    /// `kubevirt.io=virt-launcher` marks every virt-launcher pod.
    pub const APP: &str = "kubevirt.io";
    /// Value of [`APP`] on virt-launcher pods.
    pub const VIRT_LAUNCHER: &str = "virt-launcher";
    /// On a virt-launcher pod: the UID of the VMI it runs.
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// Annotation on a virt-launcher pod: the name of the VMI (libvirt domain) it runs.
    pub const DOMAIN_ANNOTATION: &str = "kubevirt.io/domain";
}

/// Finalizers KubeVirt sets.
pub mod finalizers {
    /// On every VMI: removed by virt-controller once the guest is stopped and the virt-launcher
    /// pod is gone, so a deleted VMI stays visible (and its disks held) until then.
    pub const VMI_FOREGROUND_DELETE: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
    /// On every VirtualMachine: removed once its VMI is gone.
    pub const VM_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
}

/// Condition types of VirtualMachines and VMIs.
pub mod condition_types {
    /// VMI: the guest runs (KubeVirt copies this onto the VM).
    pub const READY: &str = "Ready";
    /// VMI: `False` when virt-controller cannot set the VMI up (e.g. reason `FailedPvcNotFound`).
    pub const SYNCHRONIZED: &str = "Synchronized";
    /// VMI: whether every DataVolume it uses is populated.
    pub const DATA_VOLUMES_READY: &str = "DataVolumesReady";
    /// VMI: the launcher pod's scheduling, mirrored from the pod.
    pub const POD_SCHEDULED: &str = "PodScheduled";
    /// VM: the last start or stop attempt failed.
    pub const FAILURE: &str = "Failure";
}

/// Condition reasons KubeVirt uses that the operator may look at.
pub mod condition_reasons {
    /// `Synchronized=False`: a volume's PVC (or DataVolume) does not exist.
    pub const FAILED_PVC_NOT_FOUND: &str = "FailedPvcNotFound";
    /// VM `Ready=False`: there is no VMI.
    pub const VMI_NOT_EXISTS: &str = "VMINotExists";
    /// VM `Ready=False`: the VMI has no Ready condition yet.
    pub const VMI_CONDITION_MISSING: &str = "VMIConditionMissing";
    /// `PodScheduled=False`.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
}

// ---------------------------------------------------------------------------------------------
// VirtualMachine
// ---------------------------------------------------------------------------------------------

/// A VirtualMachine: keeps (or not) a VirtualMachineInstance running from its template.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachine",
    plural = "virtualmachines",
    namespaced,
    status = "VirtualMachineStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// Whether and when a VMI runs. Takes precedence; set this or `running`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<RunStrategy>,
    /// Legacy switch: `true` = `Always`, `false` = `Halted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// What every VMI of this VM is created from.
    #[serde(default)]
    pub template: VirtualMachineInstanceTemplateSpec,
}

impl VirtualMachineSpec {
    /// The run strategy in force, as KubeVirt reads it: `runStrategy`, else `running`
    /// (`true` = `Always`), else `Halted`.
    pub fn effective_run_strategy(&self) -> RunStrategy {
        match (self.run_strategy, self.running) {
            (Some(strategy), _) => strategy,
            (None, Some(true)) => RunStrategy::Always,
            (None, Some(false) | None) => RunStrategy::Halted,
        }
    }
}

/// `spec.runStrategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunStrategy {
    /// A VMI always runs; a VMI that ends (or is stopped) is replaced by a new one.
    Always,
    /// A VMI runs until it succeeds; a failed VMI is replaced, a succeeded one is not.
    RerunOnFailure,
    /// Started and stopped only by requests (`virtctl start/stop`).
    Manual,
    /// No VMI runs.
    Halted,
    /// One VMI is started; it is not restarted whatever its outcome.
    Once,
    /// A value this code does not know (read-only).
    #[serde(other)]
    Unknown,
}

impl RunStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Manual => "Manual",
            RunStrategy::Halted => "Halted",
            RunStrategy::Once => "Once",
            RunStrategy::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for RunStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.template` of a VirtualMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceTemplateSpec {
    /// Labels and annotations copied onto every VMI (and from there onto its launcher pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default)]
    pub spec: VirtualMachineInstanceSpec,
}

/// Observed state of a VirtualMachine (written by KubeVirt).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// A VMI of this VM exists (in any phase).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub created: bool,
    /// The VMI runs and is Ready.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    /// One-word summary, as `kubectl get vm` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<PrintableStatus>,
    /// The run strategy KubeVirt last acted on. After changing `spec.runStrategy`, wait until
    /// this equals it before relying on the new behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<RunStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<KubevirtCondition>,
    /// Pending start/stop requests (what `virtctl start/stop/restart` writes), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_change_requests: Vec<StateChangeRequest>,
    /// Consecutive VMIs that failed before running; drives the restart back-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    /// The VM's `metadata.generation` when KubeVirt last synced it with a VMI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    /// The `metadata.generation` the current VMI was created from (its
    /// `kubevirt.io/vm-generation` annotation; kubevirt v1.9.0 `vm.go` `syncGenerationInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `status.printableStatus` of a VirtualMachine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PrintableStatus {
    Stopped,
    Provisioning,
    Starting,
    Running,
    Paused,
    Stopping,
    Terminating,
    CrashLoopBackOff,
    Migrating,
    ErrorUnschedulable,
    ErrImagePull,
    ImagePullBackOff,
    ErrorPvcNotFound,
    DataVolumeError,
    WaitingForVolumeBinding,
    WaitingForReceiver,
    /// KubeVirt's `Unknown`, and any value this code does not know.
    #[serde(other)]
    Unknown,
}

/// A start or stop request in `status.stateChangeRequests`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeRequest {
    pub action: StateChangeAction,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, String>,
    /// For `Stop`: the VMI to stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateChangeAction {
    #[default]
    Start,
    Stop,
    #[serde(other)]
    Unknown,
}

/// `status.startFailure` of a VirtualMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    #[serde(default)]
    pub consecutive_fail_count: i64,
    /// KubeVirt spells it `lastFailedVMIUID`, not camel case.
    #[serde(
        default,
        rename = "lastFailedVMIUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_failed_vmi_uid: Option<String>,
    /// No new VMI is started before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<Time>,
}

/// A condition as KubeVirt writes it (both timestamps may be null, unlike `meta/v1.Condition`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubevirtCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub last_probe_time: Option<Time>,
    #[serde(default)]
    pub last_transition_time: Option<Time>,
}

impl KubevirtCondition {
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(
    conditions: &'a [KubevirtCondition],
    type_: &str,
) -> Option<&'a KubevirtCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// `<reason>: <message>` of a condition, either part left out when empty.
fn describe(condition: &KubevirtCondition) -> String {
    let parts = [condition.reason.as_deref(), condition.message.as_deref()];
    let parts: Vec<&str> = parts
        .into_iter()
        .flatten()
        .filter(|p| !p.is_empty())
        .collect();
    parts.join(": ")
}

impl VirtualMachine {
    /// KubeVirt's `Failure` condition, as `<reason>: <message>`: the VMI could not be created
    /// (`FailedCreate`, `Failure while starting VMI: …`).
    pub fn start_failure(&self) -> Option<String> {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        find_condition(conditions.unwrap_or_default(), condition_types::FAILURE)
            .filter(|c| c.is_true())
            .map(describe)
    }

    /// `status.ready`: the VMI runs and is Ready.
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.ready)
    }

    /// `status.printableStatus`, if written.
    pub fn printable_status(&self) -> Option<PrintableStatus> {
        self.status.as_ref().and_then(|s| s.printable_status)
    }

    /// `status.runStrategy`: the strategy KubeVirt last acted on.
    pub fn observed_run_strategy(&self) -> Option<RunStrategy> {
        self.status.as_ref().and_then(|s| s.run_strategy)
    }

    /// Whether KubeVirt has nothing left to stop: it acted on `Halted`, or the VM never had a
    /// VMI. KubeVirt records `status.runStrategy` only once a VMI was created ("so that we can
    /// tell if the VM got started at least once", kubevirt v1.9.0
    /// `pkg/virt-controller/watch/vm/vm.go` `updateStatus`), so a VM halted before its first
    /// start (still waiting for its DataVolumes) never shows `Halted` there.
    pub fn halt_acted_on(&self) -> bool {
        match &self.status {
            Some(status) => match status.run_strategy {
                Some(strategy) => strategy == RunStrategy::Halted,
                None => !status.created,
            },
            None => true,
        }
    }
}

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

/// `domain`: CPU, memory, devices, firmware, clock, machine type.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<Cpu>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<Memory>,
    /// Pod-style resource requests/limits of the domain (e.g. `memory`, `cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<DomainResources>,
    #[serde(default)]
    pub devices: Devices,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub firmware: Option<Firmware>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<Clock>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
}

impl DomainSpec {
    /// The guest RTC's offset from UTC in seconds (`clock.utc.offsetSeconds`, default 0).
    pub fn clock_offset_seconds(&self) -> i64 {
        self.clock
            .as_ref()
            .and_then(|c| c.utc.as_ref())
            .and_then(|u| u.offset_seconds)
            .unwrap_or(0)
    }
}

/// `domain.cpu`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Cpu {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cores: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sockets: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads: Option<u32>,
    /// `host-model`, `host-passthrough` or a named model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

/// `domain.memory`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Memory {
    /// Memory the guest sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest: Option<Quantity>,
}

/// `domain.resources`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainResources {
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub requests: BTreeMap<String, Quantity>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub limits: BTreeMap<String, Quantity>,
}

/// `domain.devices`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Devices {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disks: Vec<Disk>,
    /// Empty = one interface on the pod network with masquerade binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub interfaces: Vec<Interface>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_serial_console: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub autoattach_graphics_device: Option<bool>,
}

/// One disk of the domain, backed by the volume of the same name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Disk {
    /// Also the name of the volume behind it.
    pub name: String,
    /// Firmware boot priority, 1 first. Devices without one are not tried when any device has
    /// one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_order: Option<u32>,
    /// A hard disk. Neither `disk` nor `cdrom` set means a `disk`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<DiskTarget>,
    /// A CD-ROM drive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cdrom: Option<CdRomTarget>,
    /// Serial number the guest sees.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
}

impl Disk {
    /// Whether this is a CD-ROM drive.
    pub fn is_cdrom(&self) -> bool {
        self.cdrom.is_some()
    }

    /// The bus the guest sees the device on (KubeVirt's default: virtio for disks, sata for
    /// CD-ROMs).
    pub fn bus(&self) -> DiskBus {
        match (&self.disk, &self.cdrom) {
            (_, Some(cdrom)) => cdrom.bus.unwrap_or(DiskBus::Sata),
            (Some(disk), None) => disk.bus.unwrap_or(DiskBus::Virtio),
            (None, None) => DiskBus::Virtio,
        }
    }
}

/// `disk` of a [`Disk`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DiskTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<DiskBus>,
}

/// `cdrom` of a [`Disk`].
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CdRomTarget {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bus: Option<DiskBus>,
    /// KubeVirt's default is `true`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub readonly: Option<bool>,
}

/// Bus of a disk or CD-ROM.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DiskBus {
    /// `/dev/vdX` in the guest.
    Virtio,
    /// `/dev/sdX` in the guest.
    Sata,
    /// `/dev/sdX` in the guest.
    Scsi,
    Usb,
    #[serde(other)]
    Unknown,
}

/// One network interface of the domain, attached to the network of the same name.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Interface {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mac_address: Option<String>,
    /// NIC model, e.g. `virtio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// NAT behind the pod IP (the guest sees a private address).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub masquerade: Option<InterfaceMasquerade>,
    /// Bridged to the network (the guest sees the network's address directly).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bridge: Option<InterfaceBridge>,
}

/// Marker: masquerade binding (serializes as `{}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceMasquerade {}

/// Marker: bridge binding (serializes as `{}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct InterfaceBridge {}

/// A network interfaces attach to.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Network {
    pub name: String,
    /// The pod network.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod: Option<PodNetwork>,
    /// A Multus NetworkAttachmentDefinition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multus: Option<MultusNetwork>,
}

/// `pod` network.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodNetwork {
    /// The guest-side CIDR of masquerade binding (default `10.0.2.0/24`). KubeVirt spells it
    /// `vmNetworkCIDR`, not camel case.
    #[serde(
        default,
        rename = "vmNetworkCIDR",
        skip_serializing_if = "Option::is_none"
    )]
    pub vm_network_cidr: Option<String>,
}

/// `multus` network.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MultusNetwork {
    /// `<namespace>/<name>` or `<name>` of the NetworkAttachmentDefinition.
    pub network_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<bool>,
}

/// `domain.firmware`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Firmware {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bootloader: Option<Bootloader>,
    /// SMBIOS serial number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serial: Option<String>,
    /// SMBIOS UUID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
}

/// `firmware.bootloader`: exactly one of `bios`, `efi`. Unset = BIOS.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bootloader {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bios: Option<Bios>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub efi: Option<Efi>,
}

/// Legacy BIOS.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bios {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_serial: Option<bool>,
}

/// UEFI.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Efi {
    /// KubeVirt's default is `true` (and then needs the SMM feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secure_boot: Option<bool>,
    /// Keep EFI variables (NVRAM) across VMIs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent: Option<bool>,
}

/// `domain.clock`: exactly one of `utc`, `timezone`, plus the guest's timers.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Clock {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utc: Option<ClockOffsetUtc>,
    /// The guest RTC runs in this IANA zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Which timers the guest gets and how missed ticks are handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timer: Option<Timer>,
}

/// `clock.timer` (x86 timers; KubeVirt leaves unset ones to the hypervisor's defaults).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Timer {
    /// High Precision Event Timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hpet: Option<TickTimer>,
    /// Programmable Interval Timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pit: Option<TickTimer>,
    /// Real-time clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtc: Option<TickTimer>,
    /// The paravirtual KVM clock.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kvm: Option<KvmTimer>,
}

/// A timer that ticks: `hpet`, `pit` or `rtc`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TickTimer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tick_policy: Option<TickPolicy>,
    /// `false` removes the timer from the guest (default `true`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
}

/// `clock.timer.kvm`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KvmTimer {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub present: Option<bool>,
}

/// What the hypervisor does with ticks the guest missed (e.g. while descheduled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TickPolicy {
    /// Deliver them late, at the normal rate.
    Delay,
    /// Deliver them faster until caught up.
    Catchup,
    /// Merge them into one.
    Merge,
    /// Drop them.
    Discard,
    #[serde(other)]
    Unknown,
}

/// `clock.utc`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClockOffsetUtc {
    /// Seconds the guest RTC is ahead of UTC (negative: behind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_seconds: Option<i64>,
}

/// `domain.machine`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Machine {
    /// e.g. `q35`; unset = the cluster's default.
    #[serde(default, rename = "type", skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
}

/// A volume: where a disk's contents come from. Exactly one source is set.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Volume {
    pub name: String,
    /// The PVC of a CDI DataVolume (KubeVirt waits until the DataVolume is populated).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data_volume: Option<DataVolumeSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_claim: Option<PersistentVolumeClaimSource>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cloud_init_no_cloud: Option<CloudInitNoCloudSource>,
}

impl Volume {
    /// The PVC behind this volume: a DataVolume's PVC has the DataVolume's name.
    pub fn claim_name(&self) -> Option<&str> {
        if let Some(dv) = &self.data_volume {
            Some(&dv.name)
        } else {
            self.persistent_volume_claim
                .as_ref()
                .map(|pvc| pvc.claim_name.as_str())
        }
    }
}

/// `dataVolume` volume source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DataVolumeSource {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<bool>,
}

/// `persistentVolumeClaim` volume source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PersistentVolumeClaimSource {
    pub claim_name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_only: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hotpluggable: Option<bool>,
}

/// `cloudInitNoCloud` volume source.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CloudInitNoCloudSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_data_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<LocalObjectReference>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data_base64: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_data_secret_ref: Option<LocalObjectReference>,
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

#[cfg(test)]
mod tests;
