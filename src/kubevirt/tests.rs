use super::*;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use serde_json::json;

#[test]
fn build_vm_profile_round_trips_to_kubevirt_json() {
    let vm = VirtualMachine::new(
        "crc",
        VirtualMachineSpec {
            run_strategy: Some(RunStrategy::RerunOnFailure),
            running: None,
            template: VirtualMachineInstanceTemplateSpec {
                metadata: None,
                spec: VirtualMachineInstanceSpec {
                    domain: DomainSpec {
                        cpu: Some(Cpu {
                            cores: Some(6),
                            ..Cpu::default()
                        }),
                        memory: Some(Memory {
                            guest: Some(Quantity("14336Mi".into())),
                        }),
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
                                offset_seconds: Some(-86400),
                            }),
                            timezone: None,
                            timer: None,
                        }),
                        devices: Devices {
                            disks: vec![
                                Disk {
                                    name: "root".into(),
                                    boot_order: Some(1),
                                    disk: Some(DiskTarget {
                                        bus: Some(DiskBus::Virtio),
                                    }),
                                    ..Disk::default()
                                },
                                Disk {
                                    name: "iso".into(),
                                    boot_order: Some(2),
                                    cdrom: Some(CdRomTarget {
                                        bus: Some(DiskBus::Sata),
                                        readonly: Some(true),
                                    }),
                                    ..Disk::default()
                                },
                            ],
                            interfaces: vec![Interface {
                                name: "default".into(),
                                masquerade: Some(InterfaceMasquerade {}),
                                ..Interface::default()
                            }],
                            ..Devices::default()
                        },
                        ..DomainSpec::default()
                    },
                    networks: vec![Network {
                        name: "default".into(),
                        pod: Some(PodNetwork::default()),
                        multus: None,
                    }],
                    volumes: vec![
                        Volume {
                            name: "root".into(),
                            data_volume: Some(DataVolumeSource {
                                name: "crc-root".into(),
                                hotpluggable: None,
                            }),
                            ..Volume::default()
                        },
                        Volume {
                            name: "iso".into(),
                            persistent_volume_claim: Some(PersistentVolumeClaimSource {
                                claim_name: "crc-iso".into(),
                                ..PersistentVolumeClaimSource::default()
                            }),
                            ..Volume::default()
                        },
                    ],
                    ..VirtualMachineInstanceSpec::default()
                },
            },
        },
    );
    let value = serde_json::to_value(&vm).unwrap();
    assert_eq!(value["apiVersion"], "kubevirt.io/v1");
    assert_eq!(value["kind"], "VirtualMachine");
    assert_eq!(
        value["spec"],
        json!({
            "runStrategy": "RerunOnFailure",
            "template": {"spec": {
                "domain": {
                    "cpu": {"cores": 6},
                    "memory": {"guest": "14336Mi"},
                    "devices": {
                        "disks": [
                            {"name": "root", "bootOrder": 1, "disk": {"bus": "virtio"}},
                            {"name": "iso", "bootOrder": 2,
                             "cdrom": {"bus": "sata", "readonly": true}},
                        ],
                        "interfaces": [{"name": "default", "masquerade": {}}],
                    },
                    "firmware": {"bootloader": {"efi": {"secureBoot": false}}},
                    "clock": {"utc": {"offsetSeconds": -86400}},
                },
                "volumes": [
                    {"name": "root", "dataVolume": {"name": "crc-root"}},
                    {"name": "iso", "persistentVolumeClaim": {"claimName": "crc-iso"}},
                ],
                "networks": [{"name": "default", "pod": {}}],
            }},
        })
    );
    let back: VirtualMachine = serde_json::from_value(value).unwrap();
    assert_eq!(back.spec, vm.spec);
    assert_eq!(
        back.spec.template.spec.domain.clock_offset_seconds(),
        -86400
    );
    assert_eq!(
        back.spec.template.spec.volumes[0].claim_name(),
        Some("crc-root")
    );
    assert!(back.spec.template.spec.domain.devices.disks[1].is_cdrom());
    assert_eq!(
        back.spec.template.spec.domain.devices.disks[1].bus(),
        DiskBus::Sata
    );
}

#[test]
fn upstream_crc_vm_reads() {
    // The VirtualMachine the Go operator creates for an instance.
    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "demo", "namespace": "ns"},
        "spec": {"runStrategy": "Always", "template": {
            "metadata": {"labels": {"opdev.io/cluster-instance": "demo"}},
            "spec": {
                "nodeSelector": {"kubernetes.io/arch": "amd64"},
                "domain": {
                    "resources": {"requests": {"memory": "16Gi", "cpu": "4"}},
                    "devices": {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]},
                },
                "volumes": [{"name": "rootdisk", "dataVolume": {"name": "demo-rootdisk"}}],
            }}},
    }))
    .unwrap();
    assert_eq!(vm.spec.effective_run_strategy(), RunStrategy::Always);
    let spec = &vm.spec.template.spec;
    assert_eq!(spec.node_selector["kubernetes.io/arch"], "amd64");
    assert_eq!(
        spec.domain.resources.as_ref().unwrap().requests["memory"],
        Quantity("16Gi".into())
    );
    assert_eq!(spec.domain.clock_offset_seconds(), 0);
    assert_eq!(
        spec.volume("rootdisk").unwrap().claim_name(),
        Some("demo-rootdisk")
    );
}

#[test]
fn fields_kubevirt_does_not_spell_in_camel_case_keep_its_spelling() {
    let failure = StartFailure {
        consecutive_fail_count: 1,
        last_failed_vmi_uid: Some("u".into()),
        retry_after_timestamp: None,
    };
    assert_eq!(
        serde_json::to_value(&failure).unwrap(),
        json!({"consecutiveFailCount": 1, "lastFailedVMIUID": "u"})
    );
    let pod = PodNetwork {
        vm_network_cidr: Some("10.0.2.0/24".into()),
    };
    assert_eq!(
        serde_json::to_value(&pod).unwrap(),
        json!({"vmNetworkCIDR": "10.0.2.0/24"})
    );
}

#[test]
fn legacy_running_field_maps_to_a_run_strategy() {
    let spec = |v| -> VirtualMachineSpec { serde_json::from_value(v).unwrap() };
    assert_eq!(
        spec(json!({"running": true})).effective_run_strategy(),
        RunStrategy::Always
    );
    assert_eq!(
        spec(json!({"running": false})).effective_run_strategy(),
        RunStrategy::Halted
    );
    assert_eq!(
        spec(json!({})).effective_run_strategy(),
        RunStrategy::Halted
    );
    assert_eq!(
        spec(json!({"running": true, "runStrategy": "Manual"})).effective_run_strategy(),
        RunStrategy::Manual
    );
}

#[test]
fn unknown_enum_values_do_not_break_reading() {
    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": "x"},
        "spec": {"runStrategy": "WaitAsReceiver", "template": {"spec": {"domain": {
            "devices": {"disks": [{"name": "d", "disk": {"bus": "nvme"}}]}}}}},
        "status": {"printableStatus": "SomethingNew", "runStrategy": "Always",
                   "stateChangeRequests": [{"action": "Freeze"}]},
    }))
    .unwrap();
    assert_eq!(vm.spec.run_strategy, Some(RunStrategy::Unknown));
    assert_eq!(
        vm.spec.template.spec.domain.devices.disks[0].bus(),
        DiskBus::Unknown
    );
    assert_eq!(vm.printable_status(), Some(PrintableStatus::Unknown));
    assert_eq!(vm.observed_run_strategy(), Some(RunStrategy::Always));
    let status = vm.status.unwrap();
    assert_eq!(
        status.state_change_requests[0].action,
        StateChangeAction::Unknown
    );
}

#[test]
fn vmi_status_reads_phase_ip_and_conditions() {
    let vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "x"},
        "spec": {"domain": {}},
        "status": {
            "phase": "Running",
            "nodeName": "node-1",
            "interfaces": [{"name": "default", "ipAddress": ""},
                           {"ipAddress": "10.128.0.7", "ipAddresses": ["10.128.0.7"]}],
            "conditions": [{"type": "Ready", "status": "True",
                            "lastProbeTime": null, "lastTransitionTime": "2025-01-01T00:00:00Z"}],
            "phaseTransitionTimestamps": [
                {"phase": "Running", "phaseTransitionTimestamp": "2025-01-01T00:00:00Z"}],
            "launcherContainerImageVersion": "quay.io/kubevirt/virt-launcher:v1.5.0",
        },
    }))
    .unwrap();
    assert_eq!(vmi.phase(), VmiPhase::Running);
    assert!(!vmi.phase().is_final());
    assert_eq!(vmi.first_ip(), Some("10.128.0.7"));
    assert!(vmi.is_ready());
    assert!(vmi.phase_entered(VmiPhase::Running).is_some());
    assert!(vmi.phase_entered(VmiPhase::Scheduled).is_none());
}

#[test]
fn unset_phase_is_the_empty_string() {
    let status: VirtualMachineInstanceStatus =
        serde_json::from_value(json!({"phase": ""})).unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Unset));
    let status: VirtualMachineInstanceStatus =
        serde_json::from_value(json!({"phase": "WaitingForSync"})).unwrap();
    assert_eq!(status.phase, Some(VmiPhase::Unknown));
    assert_eq!(
        serde_json::to_value(VmiPhase::Scheduled).unwrap(),
        json!("Scheduled")
    );
}

#[test]
fn what_keeps_a_vmi_or_vm_from_starting_is_named_as_kubevirt_reports_it() {
    let vmi = |phase: &str, conditions: serde_json::Value| -> VirtualMachineInstance {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
            "metadata": {"name": "b"}, "spec": {"domain": {"devices": {}}},
            "status": {"phase": phase, "conditions": conditions},
        }))
        .unwrap()
    };
    let sync_failed = json!([{"type": "Synchronized", "status": "False",
        "reason": "Synchronizing with the Domain failed.",
        "message": "server error. command SyncVMI failed: Permission denied"}]);
    assert_eq!(
        vmi("Scheduled", sync_failed.clone())
            .start_blocker()
            .as_deref(),
        Some(
            "Synchronizing with the Domain failed.: server error. command SyncVMI failed: Permission denied"
        )
    );
    assert_eq!(vmi("Running", sync_failed).start_blocker(), None);
    let dv_failed = json!([{"type": "DataVolumesReady", "status": "False", "reason": "Failed",
        "message": "DataVolume root failed: no space"}]);
    assert!(
        vmi("Pending", dv_failed)
            .start_blocker()
            .unwrap()
            .contains("no space")
    );
    let provisioning = json!([{"type": "DataVolumesReady", "status": "False",
        "reason": "NotReady", "message": "DataVolume root is not ready"}]);
    assert_eq!(vmi("Pending", provisioning).start_blocker(), None);

    let vm: VirtualMachine = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": "b"},
        "spec": {"template": {"spec": {"domain": {"devices": {}}}}},
        "status": {"conditions": [{"type": "Failure", "status": "True",
            "reason": "FailedCreate", "message": "Failure while starting VMI: denied"}]},
    }))
    .unwrap();
    assert_eq!(
        vm.start_failure().as_deref(),
        Some("FailedCreate: Failure while starting VMI: denied")
    );
}

#[test]
fn a_halt_is_acted_on_once_kubevirt_records_it_or_when_the_vm_never_had_a_vmi() {
    let vm = |status: serde_json::Value| -> VirtualMachine {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "b"},
            "spec": {"runStrategy": "Halted", "template": {"spec": {"domain": {"devices": {}}}}},
            "status": status,
        }))
        .unwrap()
    };
    // Halted before its first start, waiting for its DataVolumes: what virt-controller v1.9.0
    // writes (no runStrategy until a VMI was created).
    assert!(vm(serde_json::json!({"printableStatus": "Provisioning"})).halt_acted_on());
    assert!(vm(serde_json::json!(null)).halt_acted_on());
    // It ran: the halt counts once KubeVirt acted on it.
    assert!(
        !vm(serde_json::json!({"created": true, "runStrategy": "RerunOnFailure"})).halt_acted_on()
    );
    assert!(!vm(serde_json::json!({"runStrategy": "Always"})).halt_acted_on());
    assert!(vm(serde_json::json!({"runStrategy": "Halted"})).halt_acted_on());
    // A VMI exists but the strategy is not recorded yet: not acted on.
    assert!(!vm(serde_json::json!({"created": true})).halt_acted_on());
}
