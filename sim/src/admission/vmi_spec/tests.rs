use serde_json::{Value, json};

use super::*;
use crate::kubevirt::defaults::apply_spec_defaults;

/// A spec that passes: one virtio disk on a DataVolume, the default pod network.
fn spec() -> Value {
    let mut spec = json!({
        "domain": {
            "resources": {"requests": {"memory": "1Gi"}},
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
        },
        "volumes": [{"name": "root", "dataVolume": {"name": "crc-root"}}],
    });
    apply_spec_defaults(&mut spec);
    spec
}

fn check(spec: &Value) -> Vec<Denial> {
    validate(&FieldPath::new("spec"), spec)
}

fn messages(spec: &Value) -> Vec<String> {
    check(spec).into_iter().map(|d| d.message).collect()
}

fn disks(spec: &mut Value) -> &mut Vec<Value> {
    spec["domain"]["devices"]["disks"].as_array_mut().unwrap()
}

fn add_volume(spec: &mut Value, volume: Value) {
    spec["volumes"].as_array_mut().unwrap().push(volume);
}

#[test]
fn a_plain_spec_passes() {
    assert_eq!(check(&spec()), []);
}

#[test]
fn boot_orders_are_unique_across_disks_and_interfaces() {
    let mut s = spec();
    disks(&mut s)[0]["bootOrder"] = json!(1);
    disks(&mut s).push(json!({"name": "iso", "bootOrder": 1, "cdrom": {"bus": "sata"}}));
    add_volume(
        &mut s,
        json!({"name": "iso", "persistentVolumeClaim": {"claimName": "iso"}}),
    );
    let denials = check(&s);
    assert_eq!(
        denials,
        [Denial::invalid(
            "spec.domain.devices.disks[1].bootOrder",
            "Boot order for spec.domain.devices.disks[1].bootOrder already set for a different device."
        )]
    );
    // 2 on the cdrom and 1 on an interface clashes with the disk.
    disks(&mut s)[1]["bootOrder"] = json!(2);
    s["domain"]["devices"]["interfaces"][0]["bootOrder"] = json!(1);
    assert_eq!(
        messages(&s),
        [
            "Boot order for spec.domain.devices.interfaces[0].bootOrder already set for a different device."
        ]
    );
    s["domain"]["devices"]["interfaces"][0]["bootOrder"] = json!(3);
    assert_eq!(check(&s), []);
}

#[test]
fn boot_orders_start_at_one() {
    let mut s = spec();
    disks(&mut s)[0]["bootOrder"] = json!(0);
    let denials = check(&s);
    assert_eq!(denials[0].field, "spec.domain.devices.disks[0].bootOrder");
    assert_eq!(
        denials[0].message,
        "spec.domain.devices.disks[0] must have a boot order > 0, if supplied"
    );
    let mut s = spec();
    s["domain"]["devices"]["interfaces"][0]["bootOrder"] = json!(0);
    // Upstream's wording for an interface indexes the spec path.
    assert_eq!(
        messages(&s),
        ["spec[0] must have a boot order > 0, if supplied"]
    );
}

#[test]
fn every_disk_is_backed_by_a_volume_of_its_name() {
    let mut s = spec();
    disks(&mut s).push(json!({"name": "data", "disk": {"bus": "virtio"}}));
    let denials = check(&s);
    assert_eq!(
        denials,
        [Denial::invalid(
            "spec.domain.devices.disks[1].name",
            "spec.domain.devices.disks[1].Name 'data' not found."
        )]
    );
    // An empty cdrom needs the DeclarativeHotplugVolumes gate.
    disks(&mut s)[1] = json!({"name": "tray", "cdrom": {"bus": "sata"}});
    assert_eq!(
        messages(&s),
        ["DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk"]
    );
}

#[test]
fn a_lun_needs_a_claim_or_data_volume() {
    let mut s = spec();
    disks(&mut s).push(json!({"name": "ci", "lun": {"bus": "scsi"}}));
    add_volume(
        &mut s,
        json!({"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config"}}),
    );
    assert_eq!(
        messages(&s),
        [
            "spec.domain.devices.disks[1].lun can only be mapped to a DataVolume or PersistentVolumeClaim volume."
        ]
    );
}

#[test]
fn disk_buses_are_kubevirts() {
    for bus in ["virtio", "sata", "scsi", "usb"] {
        let mut s = spec();
        disks(&mut s)[0]["disk"]["bus"] = json!(bus);
        assert_eq!(check(&s), [], "{bus}");
    }
    let mut s = spec();
    disks(&mut s)[0]["disk"]["bus"] = json!("ide");
    assert_eq!(
        check(&s),
        [Denial::invalid(
            "spec.domain.devices.disks[0].disk.bus",
            "IDE bus is not supported"
        )]
    );
    disks(&mut s)[0]["disk"]["bus"] = json!("nvme");
    assert_eq!(
        messages(&s),
        [
            "spec.domain.devices.disks[0] is set with an unrecognized bus nvme, must be one of: [virtio scsi sata usb]"
        ]
    );
}

#[test]
fn a_cdrom_cannot_use_virtio() {
    let mut s = spec();
    disks(&mut s).push(json!({"name": "iso", "cdrom": {"bus": "virtio", "readonly": true}}));
    add_volume(
        &mut s,
        json!({"name": "iso", "persistentVolumeClaim": {"claimName": "iso"}}),
    );
    assert_eq!(
        check(&s),
        [Denial::invalid(
            "spec.domain.devices.disks[1].cdrom.bus",
            "Bus type virtio is invalid for CD-ROM device"
        )]
    );
    for bus in ["sata", "scsi"] {
        disks(&mut s)[1]["cdrom"]["bus"] = json!(bus);
        assert_eq!(check(&s), [], "{bus}");
    }
}

#[test]
fn a_sata_disk_cannot_be_read_only_but_a_sata_cdrom_can() {
    let mut s = spec();
    disks(&mut s)[0]["disk"] = json!({"bus": "sata", "readonly": true});
    assert_eq!(messages(&s), ["sata hard-disks do not support read-only."]);
    disks(&mut s)[0] = json!({"name": "root", "cdrom": {"bus": "sata", "readonly": true}});
    assert_eq!(check(&s), []);
}

#[test]
fn dedicated_io_threads_need_virtio() {
    let mut s = spec();
    disks(&mut s)[0]["disk"]["bus"] = json!("sata");
    disks(&mut s)[0]["dedicatedIOThread"] = json!(true);
    let denials = check(&s);
    assert_eq!(denials[0].cause, CauseType::FieldValueNotSupported);
    assert_eq!(
        denials[0].message,
        "IOThreads are not supported for disks on a sata bus"
    );
}

#[test]
fn a_disk_has_one_target() {
    let mut s = spec();
    disks(&mut s)[0]["cdrom"] = json!({"bus": "sata"});
    assert_eq!(
        messages(&s),
        ["spec.domain.devices.disks[0] can only have a single target type defined"]
    );
}

#[test]
fn disk_names_are_unique_labels() {
    let mut s = spec();
    disks(&mut s).push(json!({"name": "root", "disk": {"bus": "virtio"}}));
    assert_eq!(
        messages(&s),
        [
            "spec.domain.devices.disks[1] and spec.domain.devices.disks[0] must not have the same Name."
        ]
    );
    let mut s = spec();
    disks(&mut s)[0]["name"] = json!("Root_Disk");
    s["volumes"][0]["name"] = json!("Root_Disk");
    assert_eq!(
        messages(&s),
        [
            "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', \
          and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', \
          regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
        ]
    );
    assert_eq!(dns1123_label_errors("root.disk"), ["must not contain dots"]);
    assert_eq!(
        dns1123_label_errors(&"a".repeat(64)),
        ["must be no more than 63 characters"]
    );
    assert!(dns1123_label_errors("rootdisk-2").is_empty());
}

#[test]
fn serial_cache_io_and_error_policy_take_known_values() {
    let mut s = spec();
    let disk = &mut disks(&mut s)[0];
    disk["serial"] = json!("abc/def");
    disk["cache"] = json!("unsafe");
    disk["io"] = json!("io_uring");
    disk["errorPolicy"] = json!("retry");
    assert_eq!(
        messages(&s),
        [
            "spec.domain.devices.disks[0] must be made up of the following characters [A-Za-z0-9_.+-], if specified",
            "spec.domain.devices.disks[0].cache has invalid value unsafe",
            "Disk IO mode for spec.domain.devices.disks is not supported. Supported modes are: native, threads.",
            "spec.domain.devices.disks[0].errorPolicy has invalid value \"retry\"",
        ]
    );
    let mut s = spec();
    disks(&mut s)[0]["serial"] = json!("s".repeat(257));
    assert_eq!(
        messages(&s),
        ["spec.domain.devices.disks[0] must be less than or equal to 256 in length, if specified"]
    );
    let mut s = spec();
    let disk = &mut disks(&mut s)[0];
    disk["serial"] = json!("CRC-root_1.0+x");
    disk["cache"] = json!("writeback");
    disk["io"] = json!("native");
    disk["errorPolicy"] = json!("report");
    assert_eq!(check(&s), []);
}

#[test]
fn masquerade_only_on_the_pod_network() {
    let mut s = spec();
    s["networks"] = json!([{"name": "default", "multus": {"networkName": "crc-net"}}]);
    assert_eq!(
        check(&s),
        [Denial::invalid(
            "spec.domain.devices.interfaces[0].name",
            "Masquerade interface only implemented with pod network"
        )]
    );
    // Bridge on a secondary network is fine.
    s["domain"]["devices"]["interfaces"][0] = json!({"name": "default", "bridge": {}});
    assert_eq!(check(&s), []);
}

#[test]
fn an_interface_has_exactly_one_binding() {
    let mut s = spec();
    s["domain"]["devices"]["interfaces"][0]["bridge"] = json!({});
    assert_eq!(
        messages(&s),
        ["logical default interface must have exactly one binding method or binding plugin"]
    );
    let mut s = spec();
    s["domain"]["devices"]["interfaces"][0] = json!({"name": "default"});
    assert_eq!(
        messages(&s),
        ["logical default interface must have exactly one binding method or binding plugin"]
    );
    let mut s = spec();
    s["domain"]["devices"]["interfaces"][0] =
        json!({"name": "default", "binding": {"name": "passt"}});
    assert_eq!(check(&s), []);
}

#[test]
fn interfaces_and_networks_pair_up_by_name() {
    let mut s = spec();
    s["networks"][0]["name"] = json!("pod");
    assert_eq!(
        messages(&s),
        [
            "Masquerade interface only implemented with pod network",
            "spec.networks[0].name 'pod' not found.",
            "spec.domain.devices.interfaces[0].name 'default' not found.",
        ]
    );
}

#[test]
fn networks_have_one_source_and_unique_names() {
    let mut s = spec();
    s["networks"] = json!([
        {"name": "default", "pod": {}},
        {"name": "default", "pod": {}},
        {"name": "none"},
        {"name": "both", "pod": {}, "multus": {"networkName": "x"}},
        {"name": "nameless", "multus": {}},
    ]);
    for name in ["none", "both", "nameless"] {
        s["domain"]["devices"]["interfaces"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": name, "bridge": {}}));
    }
    assert_eq!(
        messages(&s),
        [
            "more than one interface is connected to a pod network in spec.interfaces",
            "should have a network type",
            "should have only one network type",
            "CNI delegating plugin must have a networkName",
            "Network with name \"default\" already exists, every network must have a unique name",
        ]
    );
}

#[test]
fn multus_default_networks_exclude_the_pod_network() {
    let mut s = spec();
    s["networks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ovn", "multus": {"networkName": "ovn", "default": true}}));
    s["domain"]["devices"]["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "ovn", "bridge": {}}));
    assert_eq!(
        messages(&s),
        ["Pod network cannot be defined when Multus default network is defined"]
    );
}

#[test]
fn interface_names_and_models() {
    let mut s = spec();
    s["domain"]["devices"]["interfaces"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "default", "masquerade": {}, "model": "virtio"}));
    assert_eq!(
        messages(&s),
        ["Only one interface can be connected to one specific network"]
    );
    let mut s = spec();
    s["domain"]["devices"]["interfaces"][0]["model"] = json!("vmxnet3");
    let denials = check(&s);
    assert_eq!(denials[0].cause, CauseType::FieldValueNotSupported);
    assert_eq!(
        denials[0].message,
        "interface spec.domain.devices.interfaces[0].name uses model vmxnet3 that is not supported."
    );
    let mut s = spec();
    s["domain"]["devices"]["interfaces"][0]["name"] = json!("eth 0");
    s["networks"][0]["name"] = json!("eth 0");
    assert_eq!(
        messages(&s),
        [
            "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)"
        ]
    );
}

#[test]
fn volumes_have_unique_names_and_one_source() {
    let mut s = spec();
    add_volume(
        &mut s,
        json!({"name": "root", "persistentVolumeClaim": {"claimName": "x"}}),
    );
    add_volume(
        &mut s,
        json!({"name": "two", "persistentVolumeClaim": {"claimName": "x"},
                               "dataVolume": {"name": "x"}}),
    );
    add_volume(&mut s, json!({"name": "none"}));
    add_volume(&mut s, json!({"name": "anon", "dataVolume": {"name": ""}}));
    for name in ["two", "none", "anon"] {
        disks(&mut s).push(json!({"name": name, "disk": {}}));
    }
    assert_eq!(
        messages(&s),
        [
            "spec.volumes[1] and spec.volumes[0] must not have the same Name.",
            "spec.volumes[2] must have exactly one source type set",
            "spec.volumes[3] must have exactly one source type set",
            "DataVolume 'name' must be set",
        ]
    );
}

#[test]
fn secure_boot_needs_smm() {
    let mut s = spec();
    s["domain"]["firmware"] = json!({"bootloader": {"efi": {}}});
    assert_eq!(
        check(&s),
        [Denial::invalid(
            "spec.domain",
            "spec.domain has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled."
        )]
    );
    s["domain"]["features"] = json!({"smm": {}});
    assert_eq!(check(&s), []);
    s["domain"]["features"]["smm"]["enabled"] = json!(false);
    assert_eq!(check(&s).len(), 1);
    s["domain"]["firmware"]["bootloader"]["efi"]["secureBoot"] = json!(false);
    assert_eq!(check(&s), []);
}

#[test]
fn efi_and_bios_are_exclusive() {
    let mut s = spec();
    s["domain"]["firmware"] = json!({"bootloader": {"efi": {"secureBoot": false}, "bios": {}}});
    assert_eq!(
        messages(&s),
        [
            "spec.domain.firmware.bootloader has both EFI and BIOS configured, but they are mutually exclusive."
        ]
    );
}

#[test]
fn rules_run_in_upstreams_order() {
    let mut s = spec();
    // A volume rule, a disk rule, a boot-order rule and a network rule at once.
    add_volume(&mut s, json!({"name": "x"}));
    disks(&mut s).push(json!({"name": "x", "disk": {"bus": "ide"}, "bootOrder": 0}));
    s["networks"][0] = json!({"name": "default", "multus": {"networkName": "n"}});
    let order: Vec<String> = check(&s).into_iter().map(|d| d.field).collect();
    assert_eq!(
        order,
        [
            "spec.domain.devices.interfaces[0].name",
            "spec.domain.devices.disks[1].bootOrder",
            "spec.domain.devices.disks[1].disk.bus",
            "spec.volumes[1]",
        ]
    );
}
