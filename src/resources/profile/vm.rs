//! The VirtualMachines of profile `crc-kubevirt-v1`: the build VM in each of its boots, the
//! validation VM, and the shape instance VMs of a built bundle share. Firmware, machine type,
//! disks and buses, network and clock are all stated, none left to the cluster's defaults
//! (docs/design/certificates-and-time.md, docs/design/network.md).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::network::{HOSTNAME, VM_NETWORK_CIDR};
use crate::api::CRCBundle;
use crate::api::common::Arch;
use crate::api::labels;
use crate::kubevirt::{
    Bootloader, CdRomTarget, Clock, ClockOffsetUtc, Cpu, Devices, Disk, DiskBus, DomainResources,
    DomainSpec, Efi, Firmware, Interface, InterfaceMasquerade, KvmTimer, Machine, Memory, Network,
    PersistentVolumeClaimSource, PodNetwork, RunStrategy, TickPolicy, TickTimer, Timer,
    VirtualMachine, VirtualMachineInstanceSpec, VirtualMachineInstanceTemplateSpec,
    VirtualMachineSpec, Volume,
};
use crate::resources::common::{bundle_labels, controller_ref};
use crate::resources::instance::{root_disk, root_volume};

/// The install ISO's disk (and volume) in the build VM.
pub const ISO_DISK: &str = "installiso";
/// The one interface and the pod network it is on.
pub const NETWORK: &str = "default";
/// How far behind real time the guest runs while it installs.
pub const DAY_BEHIND_SECONDS: i64 = -86_400;
/// How far ahead the validation clone's second boot runs: 20 days, inside the 25 the sealed
/// certificates must still have.
pub const AGED_SECONDS: i64 = 20 * 86_400;
/// A clean shutdown of the build VM matters (its disk becomes the golden disk); KubeVirt's
/// default is 180 s.
pub const BUILD_GRACE_SECONDS: i64 = 600;
/// Validation and instance VMs are disposable: KubeVirt's default, stated.
pub const DISPOSABLE_GRACE_SECONDS: i64 = 180;

/// Why a build-side VM cannot be built.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("CRCBundle {0} has no spec.build")]
    NotABuild(String),
}

/// The guest's clock, set by KubeVirt when a VMI starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestClock {
    /// One day behind real time: the generator and install boots.
    DayBehind,
    /// Real time: every boot after the cold restart, clones included.
    RealTime,
    /// Twenty days ahead: the validation clone's second boot.
    Aged,
}

impl GuestClock {
    pub fn offset_seconds(self) -> i64 {
        match self {
            GuestClock::DayBehind => DAY_BEHIND_SECONDS,
            GuestClock::RealTime => 0,
            GuestClock::Aged => AGED_SECONDS,
        }
    }
}

/// Which boot of the build VM a spec is for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BuildBoot {
    /// The stock live ISO with the generator Ignition (PVC `iso_claim`), a day behind.
    Generator { iso_claim: String },
    /// The ISO copy with the single-node Ignition embedded (PVC `iso_claim`), a day behind.
    Install { iso_claim: String },
    /// After the cold restart: the installed root disk alone, on real time (and a validation
    /// clone's first boot).
    Installed,
    /// A validation clone booted again with its clock 20 days ahead.
    Aged,
}

impl BuildBoot {
    pub fn clock(&self) -> GuestClock {
        match self {
            BuildBoot::Generator { .. } | BuildBoot::Install { .. } => GuestClock::DayBehind,
            BuildBoot::Installed => GuestClock::RealTime,
            BuildBoot::Aged => GuestClock::Aged,
        }
    }

    fn iso_claim(&self) -> Option<&str> {
        match self {
            BuildBoot::Generator { iso_claim } | BuildBoot::Install { iso_claim } => {
                Some(iso_claim)
            }
            BuildBoot::Installed | BuildBoot::Aged => None,
        }
    }
}

/// Where a build-side VM lives and what it boots from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildVmNames<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    /// The build attempt that owns it (label `guestcluster.opdev.io/build-attempt`).
    pub attempt: &'a str,
    /// The DataVolume holding the root disk.
    pub root_data_volume: &'a str,
}

/// Everything that varies between the profile's VMs.
struct Shape<'a> {
    arch: Arch,
    cores: i32,
    memory: &'a str,
    clock: GuestClock,
    root_data_volume: &'a str,
    iso_claim: Option<&'a str>,
    grace_seconds: i64,
    node_selector: BTreeMap<String, String>,
    tolerations: Vec<Toleration>,
    affinity: Option<Affinity>,
    /// `spec.evictionStrategy`; unset, the cluster's (`KubeVirt` configuration) applies.
    eviction: Option<&'static str>,
}

/// The eviction strategy of the build's VMs: a drain deletes their virt-launcher pods, it never
/// migrates them. OpenShift Virtualization's cluster default, `LiveMigrate`, would either hold
/// every drain of the node for the whole build (the root disk is `ReadWriteOnce`, so the VM is
/// not live-migratable) or, on shared storage, migrate a guest whose clock is shifted — and
/// KubeVirt sets a migrated guest's clock to the host's through the guest agent, which undoes
/// the shift (`docs/design/certificates-and-time.md`). A killed build VM restarts under
/// `RerunOnFailure` (the validation VM under `Always`) and its stage goes on or fails with a
/// reason; an instance's VM keeps the cluster's strategy.
pub const BUILD_EVICTION_STRATEGY: &str = "None";

/// The machine type KubeVirt knows for `arch`.
fn machine_type(arch: Arch) -> &'static str {
    match arch {
        Arch::Amd64 => "q35",
        Arch::Arm64 => "virt",
    }
}

/// The CD-ROM bus: arm64's `virt` machine has no SATA controller.
fn cdrom_bus(arch: Arch) -> DiskBus {
    match arch {
        Arch::Amd64 => DiskBus::Sata,
        Arch::Arm64 => DiskBus::Scsi,
    }
}

/// The x86 timers of a modern Linux guest (what virt-install gives SNC's VM): RTC catches up on
/// missed ticks, PIT delivers them late, no HPET, the KVM clock as the clock source. arm64 has
/// none of these devices.
fn timers(arch: Arch) -> Option<Timer> {
    match arch {
        Arch::Amd64 => Some(Timer {
            hpet: Some(TickTimer {
                tick_policy: None,
                present: Some(false),
            }),
            pit: Some(TickTimer {
                tick_policy: Some(TickPolicy::Delay),
                present: None,
            }),
            rtc: Some(TickTimer {
                tick_policy: Some(TickPolicy::Catchup),
                present: None,
            }),
            kvm: Some(KvmTimer {
                present: Some(true),
            }),
        }),
        Arch::Arm64 => None,
    }
}

fn vmi_spec(shape: Shape<'_>) -> VirtualMachineInstanceSpec {
    // Admission guarantees at least one core; never hand KubeVirt zero.
    let cores = shape.cores.max(1).unsigned_abs();
    // The blank disk first: the firmware falls through to the ISO until the installer has
    // written the disk, and boots the disk from then on.
    let mut disks = vec![root_disk(Some(1))];
    let mut volumes = vec![root_volume(shape.root_data_volume)];
    if let Some(claim) = shape.iso_claim {
        disks.push(Disk {
            name: ISO_DISK.to_owned(),
            boot_order: Some(2),
            cdrom: Some(CdRomTarget {
                bus: Some(cdrom_bus(shape.arch)),
                readonly: Some(true),
            }),
            ..Disk::default()
        });
        volumes.push(Volume {
            name: ISO_DISK.to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimSource {
                claim_name: claim.to_owned(),
                read_only: Some(true),
                hotpluggable: None,
            }),
            ..Volume::default()
        });
    }
    VirtualMachineInstanceSpec {
        domain: DomainSpec {
            cpu: Some(Cpu {
                cores: Some(cores),
                sockets: Some(1),
                threads: Some(1),
                model: None,
            }),
            memory: Some(Memory {
                guest: Some(Quantity(shape.memory.to_owned())),
            }),
            resources: Some(DomainResources {
                requests: BTreeMap::from([
                    ("cpu".to_owned(), Quantity(cores.to_string())),
                    ("memory".to_owned(), Quantity(shape.memory.to_owned())),
                ]),
                limits: BTreeMap::new(),
            }),
            devices: Devices {
                disks,
                interfaces: vec![Interface {
                    name: NETWORK.to_owned(),
                    model: Some("virtio".to_owned()),
                    masquerade: Some(InterfaceMasquerade {}),
                    ..Interface::default()
                }],
                ..Devices::default()
            },
            firmware: Some(Firmware {
                bootloader: Some(Bootloader {
                    efi: Some(Efi {
                        secure_boot: Some(false),
                        persistent: None,
                    }),
                    bios: None,
                }),
                ..Firmware::default()
            }),
            clock: Some(Clock {
                utc: Some(ClockOffsetUtc {
                    offset_seconds: Some(shape.clock.offset_seconds()),
                }),
                timezone: None,
                timer: timers(shape.arch),
            }),
            machine: Some(Machine {
                type_: Some(machine_type(shape.arch).to_owned()),
            }),
        },
        volumes,
        networks: vec![Network {
            name: NETWORK.to_owned(),
            pod: Some(PodNetwork {
                vm_network_cidr: Some(VM_NETWORK_CIDR.to_owned()),
            }),
            multus: None,
        }],
        node_selector: shape.node_selector,
        tolerations: shape.tolerations,
        affinity: shape.affinity,
        hostname: Some(HOSTNAME.to_owned()),
        termination_grace_period_seconds: Some(shape.grace_seconds),
        eviction_strategy: shape.eviction.map(str::to_owned),
        ..VirtualMachineInstanceSpec::default()
    }
}

/// The labels of a build's temporary objects.
fn build_labels(bundle: &CRCBundle, attempt: &str) -> BTreeMap<String, String> {
    let mut labels = bundle_labels(&bundle.name_any());
    labels.insert(labels::BUILD_ATTEMPT.to_owned(), attempt.to_owned());
    labels
}

/// A VM of the build: in the operator namespace, labelled with the attempt, controlled by the
/// bundle; the VMI template carries the same labels.
fn build_side_vm(
    bundle: &CRCBundle,
    names: &BuildVmNames<'_>,
    run_strategy: RunStrategy,
    clock: GuestClock,
    iso_claim: Option<&str>,
    grace_seconds: i64,
) -> Result<VirtualMachine, Error> {
    let build = bundle
        .spec
        .build
        .as_ref()
        .ok_or_else(|| Error::NotABuild(bundle.name_any()))?;
    let placement = build.placement.clone().unwrap_or_default();
    let mut labels = build_labels(bundle, names.attempt);
    labels.insert(labels::VM.to_owned(), names.name.to_owned());
    let spec = vmi_spec(Shape {
        arch: bundle.spec.arch,
        cores: build.vm.cores,
        memory: &build.vm.memory,
        clock,
        root_data_volume: names.root_data_volume,
        iso_claim,
        grace_seconds,
        node_selector: placement.node_selector,
        tolerations: placement.tolerations,
        affinity: placement.affinity,
        eviction: Some(BUILD_EVICTION_STRATEGY),
    });
    Ok(VirtualMachine {
        metadata: ObjectMeta {
            name: Some(names.name.to_owned()),
            namespace: Some(names.namespace.to_owned()),
            labels: Some(labels.clone()),
            owner_references: controller_ref(bundle).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: VirtualMachineSpec {
            run_strategy: Some(run_strategy),
            running: None,
            template: VirtualMachineInstanceTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..ObjectMeta::default()
                }),
                spec,
            },
        },
        status: None,
    })
}

/// The build VM for `boot`. `RerunOnFailure`: a guest that powers itself off (the end of the
/// generator boot) stays off, a crashed one starts again with the same clock; the operator stops
/// it by setting `Halted` and starts it by setting this strategy back.
pub fn build_vm(
    bundle: &CRCBundle,
    names: &BuildVmNames<'_>,
    boot: &BuildBoot,
) -> Result<VirtualMachine, Error> {
    build_side_vm(
        bundle,
        names,
        RunStrategy::RerunOnFailure,
        boot.clock(),
        boot.iso_claim(),
        BUILD_GRACE_SECONDS,
    )
}

/// The validation VM: a clone of the golden disk booted as an instance would boot it, with the
/// build's size and placement, on real time ([`BuildBoot::Installed`]) or 20 days ahead
/// ([`BuildBoot::Aged`]).
pub fn validation_vm(
    bundle: &CRCBundle,
    names: &BuildVmNames<'_>,
    boot: &BuildBoot,
) -> Result<VirtualMachine, Error> {
    build_side_vm(
        bundle,
        names,
        RunStrategy::Always,
        boot.clock(),
        None,
        DISPOSABLE_GRACE_SECONDS,
    )
}

/// The VMI spec of an instance VM of a bundle built with this profile: the root disk clone of
/// DataVolume `root_data_volume`, on real time.
pub fn instance_vmi_spec(
    arch: Arch,
    cores: i32,
    memory: &str,
    root_data_volume: &str,
    node_selector: &BTreeMap<String, String>,
) -> VirtualMachineInstanceSpec {
    vmi_spec(Shape {
        arch,
        cores,
        memory,
        clock: GuestClock::RealTime,
        root_data_volume,
        iso_claim: None,
        grace_seconds: DISPOSABLE_GRACE_SECONDS,
        node_selector: node_selector.clone(),
        tolerations: Vec::new(),
        affinity: None,
        eviction: None,
    })
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::golden::check_golden_objects;
    use super::*;
    use crate::api::CRCBundleSpec;
    use serde_json::{Value, json};

    pub const BUNDLE_UID: &str = "3e7b9c1d-2f3a-4b5c-8d7e-0b5f3c1e7d2a";

    /// The mission's example bundle, as read from the API.
    pub fn bundle(arch: &str) -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(json!({
            "arch": arch,
            "storageClassName": "fast-storage",
            "goldenVolumeSize": "80Gi",
            "build": {
                "releaseImage": "quay.io/example/ocp-release@sha256:0000000000000000000000000000000000000000000000000000000000000000",
                "pullSecretRef": {"name": "bundle-build-pull-secret"},
                "vm": {"cores": 8, "memory": "24Gi", "diskSize": "64Gi"},
                "placement": {"nodeSelector": {"kubernetes.io/arch": arch}},
            },
        }))
        .unwrap();
        let mut bundle = CRCBundle::new("crc-4-22-custom-a", spec);
        bundle.metadata.uid = Some(BUNDLE_UID.into());
        bundle
    }

    pub fn names() -> BuildVmNames<'static> {
        BuildVmNames {
            namespace: "guestcluster-system",
            name: "crc-4-22-custom-a-build",
            attempt: "1",
            root_data_volume: "crc-4-22-custom-a-build-root",
        }
    }

    fn spec(vm: &VirtualMachine) -> Value {
        serde_json::to_value(&vm.spec.template.spec).unwrap()
    }

    #[test]
    fn build_side_vms_match_golden() {
        let b = bundle("amd64");
        let names = names();
        let generator = build_vm(
            &b,
            &names,
            &BuildBoot::Generator {
                iso_claim: "crc-4-22-custom-a-iso".into(),
            },
        )
        .unwrap();
        let install = build_vm(
            &b,
            &names,
            &BuildBoot::Install {
                iso_claim: "crc-4-22-custom-a-install-iso".into(),
            },
        )
        .unwrap();
        let installed = build_vm(&b, &names, &BuildBoot::Installed).unwrap();
        let validation_names = BuildVmNames {
            name: "crc-4-22-custom-a-validation",
            root_data_volume: "crc-4-22-custom-a-validation-root",
            ..names
        };
        let validation = validation_vm(&b, &validation_names, &BuildBoot::Installed).unwrap();
        let aged = validation_vm(&b, &validation_names, &BuildBoot::Aged).unwrap();
        assert_eq!(
            aged.spec.template.spec.domain.clock_offset_seconds(),
            AGED_SECONDS
        );
        check_golden_objects(
            "vms.yaml",
            &json!([generator, install, installed, validation]),
        );
    }

    #[test]
    fn install_boots_run_a_day_behind_with_the_iso_second_and_the_restart_drops_both() {
        let b = bundle("amd64");
        let install = spec(
            &build_vm(
                &b,
                &names(),
                &BuildBoot::Install {
                    iso_claim: "iso".into(),
                },
            )
            .unwrap(),
        );
        assert_eq!(install["domain"]["clock"]["utc"]["offsetSeconds"], -86400);
        assert_eq!(
            install["domain"]["devices"]["disks"],
            json!([
                {"name": "rootdisk", "bootOrder": 1, "disk": {"bus": "virtio"}},
                {"name": "installiso", "bootOrder": 2, "cdrom": {"bus": "sata", "readonly": true}},
            ])
        );
        let installed = spec(&build_vm(&b, &names(), &BuildBoot::Installed).unwrap());
        assert_eq!(installed["domain"]["clock"]["utc"]["offsetSeconds"], 0);
        assert_eq!(
            installed["domain"]["devices"]["disks"],
            json!([{"name": "rootdisk", "bootOrder": 1, "disk": {"bus": "virtio"}}])
        );
        assert_eq!(installed["volumes"].as_array().unwrap().len(), 1);
        // Everything else is the same VM: the cold restart changes only the ISO and the clock.
        let strip = |mut v: Value| {
            v["domain"]["clock"]["utc"] = Value::Null;
            v["domain"]["devices"]["disks"] = Value::Null;
            v["volumes"] = Value::Null;
            v
        };
        assert_eq!(strip(install), strip(installed));
    }

    #[test]
    fn every_vm_pins_network_firmware_machine_and_hostname() {
        let b = bundle("amd64");
        let vms = [
            build_vm(&b, &names(), &BuildBoot::Installed).unwrap(),
            validation_vm(&b, &names(), &BuildBoot::Installed).unwrap(),
        ];
        for vm in &vms {
            let s = spec(vm);
            assert_eq!(
                s["networks"],
                json!([{"name": "default", "pod": {"vmNetworkCIDR": "10.0.2.0/24"}}])
            );
            assert_eq!(
                s["domain"]["devices"]["interfaces"],
                json!([{"name": "default", "model": "virtio", "masquerade": {}}])
            );
            assert_eq!(
                s["domain"]["firmware"],
                json!({"bootloader": {"efi": {"secureBoot": false}}})
            );
            assert_eq!(s["domain"]["machine"], json!({"type": "q35"}));
            assert_eq!(s["hostname"], "crc");
            assert_eq!(s["domain"]["cpu"]["cores"], 8);
            assert_eq!(s["domain"]["memory"]["guest"], "24Gi");
            assert_eq!(s["nodeSelector"], json!({"kubernetes.io/arch": "amd64"}));
            let meta = &vm.metadata;
            assert_eq!(meta.namespace.as_deref(), Some("guestcluster-system"));
            let labels = meta.labels.as_ref().unwrap();
            assert_eq!(labels[labels::BUILD_ATTEMPT], "1");
            assert_eq!(labels[labels::CRC_BUNDLE], "crc-4-22-custom-a");
            let owner = &meta.owner_references.as_ref().unwrap()[0];
            assert_eq!(
                (owner.kind.as_str(), owner.uid.as_str()),
                ("CRCBundle", BUNDLE_UID)
            );
            assert_eq!(owner.controller, Some(true));
        }
    }

    #[test]
    fn a_drain_kills_every_build_vm_and_leaves_instances_to_the_cluster() {
        let b = bundle("amd64");
        let iso = || "iso".to_owned();
        let vms = [
            build_vm(&b, &names(), &BuildBoot::Generator { iso_claim: iso() }).unwrap(),
            build_vm(&b, &names(), &BuildBoot::Install { iso_claim: iso() }).unwrap(),
            build_vm(&b, &names(), &BuildBoot::Installed).unwrap(),
            validation_vm(&b, &names(), &BuildBoot::Installed).unwrap(),
            validation_vm(&b, &names(), &BuildBoot::Aged).unwrap(),
        ];
        for vm in &vms {
            assert_eq!(
                spec(vm)["evictionStrategy"],
                "None",
                "{:?}",
                vm.metadata.name
            );
        }
        let instance = instance_vmi_spec(Arch::Amd64, 4, "16Gi", "root", &BTreeMap::new());
        assert_eq!(instance.eviction_strategy, None);
    }

    #[test]
    fn arm64_uses_its_machine_and_buses_and_no_x86_timers() {
        let s = spec(
            &build_vm(
                &bundle("arm64"),
                &names(),
                &BuildBoot::Generator {
                    iso_claim: "iso".into(),
                },
            )
            .unwrap(),
        );
        assert_eq!(s["domain"]["machine"]["type"], "virt");
        assert_eq!(s["domain"]["devices"]["disks"][1]["cdrom"]["bus"], "scsi");
        assert!(s["domain"]["clock"].get("timer").is_none());
        assert_eq!(s["domain"]["clock"]["utc"]["offsetSeconds"], -86400);
    }

    #[test]
    fn a_downloaded_bundle_has_no_build_vm() {
        let spec: CRCBundleSpec = serde_json::from_value(json!({"version": "4.16.0"})).unwrap();
        let b = CRCBundle::new("crc-4.16.0-amd64", spec);
        assert_eq!(
            build_vm(&b, &names(), &BuildBoot::Installed).unwrap_err(),
            Error::NotABuild("crc-4.16.0-amd64".into())
        );
    }
}
