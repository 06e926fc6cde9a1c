//! A VMI's domain (CPU, memory, devices, firmware, clock) and its volumes.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::LocalObjectReference;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde::{Deserialize, Serialize};

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
