//! The VMI spec rules KubeVirt's VM and VMI admission share (`ValidateVirtualMachineInstanceSpec`),
//! for the parts our objects use: interfaces and networks, boot order, disks, firmware and
//! volumes. Messages and field paths are upstream's (kubevirt v1.9), in upstream's order.

use serde_json::Value;

use super::{CauseType, Denial, FieldPath, is_set, items, text};

/// Disk buses KubeVirt accepts, in the order its message lists them.
const DISK_BUSES: [&str; 4] = ["virtio", "scsi", "sata", "usb"];
/// NIC models KubeVirt accepts.
const INTERFACE_MODELS: [&str; 7] = [
    "e1000", "e1000e", "igb", "ne2k_pci", "pcnet", "rtl8139", "virtio",
];
/// Binding methods of an interface, one of which must be set (the removed `slirp`, `macvtap`
/// and `passt` count as none).
const BINDINGS: [&str; 5] = ["bridge", "masquerade", "sriov", "passtBinding", "binding"];
/// Volume source fields, exactly one of which must be set.
const VOLUME_SOURCES: [&str; 16] = [
    "persistentVolumeClaim",
    "sysprep",
    "cloudInitNoCloud",
    "cloudInitConfigDrive",
    "containerDisk",
    "ephemeral",
    "emptyDisk",
    "hostDisk",
    "dataVolume",
    "configMap",
    "secret",
    "downwardAPI",
    "serviceAccount",
    "downwardMetrics",
    "memoryDump",
    "containerPath",
];
/// Disk targets, at most one of which may be set.
const DISK_TARGETS: [&str; 3] = ["disk", "lun", "cdrom"];
/// A serial number's longest length.
const MAX_SERIAL_LEN: usize = 256;
/// `IsDNS1123Label`'s longest label.
const DNS1123_LABEL_MAX: usize = 63;

/// Every rule below for the VMI spec `spec` at `field` (`spec` for a VMI,
/// `spec.template.spec` for a VM), after KubeVirt's defaults were applied.
pub fn validate(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let mut denials = network(field, spec);
    denials.extend(boot_order(field, spec));
    denials.extend(domain(&field.child("domain"), &spec["domain"]));
    denials.extend(volumes(&field.child("volumes"), items(spec, "volumes")));
    denials
}

fn interfaces(spec: &Value) -> &[Value] {
    items(&spec["domain"]["devices"], "interfaces")
}

fn network_named<'a>(spec: &'a Value, name: &str) -> Option<&'a Value> {
    items(spec, "networks")
        .iter()
        .find(|n| text(n, "name") == name)
}

/// Interfaces and networks (`pkg/network/admitter`): one pod network, one source per network,
/// one binding per interface, masquerade only on the pod network, names unique and paired.
fn network(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let mut denials = Vec::new();
    let networks = items(spec, "networks");
    let ifaces = interfaces(spec);
    let iface_path = |i: usize| {
        field
            .children(&["domain", "devices", "interfaces"])
            .index(i)
    };

    let pod_networks = networks.iter().filter(|n| is_set(n, "pod")).count();
    if pod_networks > 1 {
        denials.push(Denial::new(
            CauseType::FieldValueDuplicate,
            field.child("interfaces"),
            format!(
                "more than one interface is connected to a pod network in {}",
                field.child("interfaces")
            ),
        ));
    }
    let multus_default = networks
        .iter()
        .filter(|n| n["multus"]["default"].as_bool() == Some(true))
        .count();
    if multus_default > 1 {
        denials.push(Denial::invalid(
            field.child("networks"),
            "Multus CNI should only have one default network",
        ));
    }
    if pod_networks > 0 && multus_default > 0 {
        denials.push(Denial::invalid(
            field.child("networks"),
            "Pod network cannot be defined when Multus default network is defined",
        ));
    }
    for (i, net) in networks.iter().enumerate() {
        let sources = ["pod", "multus", "resourceClaim"]
            .iter()
            .filter(|k| is_set(net, k))
            .count();
        let message = match sources {
            0 => "should have a network type",
            1 => continue,
            _ => "should have only one network type",
        };
        denials.push(Denial::new(
            CauseType::FieldValueRequired,
            field.child("networks").index(i),
            message,
        ));
    }
    if let Some(i) = networks
        .iter()
        .position(|n| is_set(n, "multus") && text(&n["multus"], "networkName").is_empty())
    {
        denials.push(Denial::new(
            CauseType::FieldValueRequired,
            field.child("networks").index(i),
            "CNI delegating plugin must have a networkName",
        ));
    }
    for (i, iface) in ifaces.iter().enumerate() {
        let name = text(iface, "name");
        if BINDINGS.iter().filter(|k| is_set(iface, k)).count() != 1 {
            denials.push(Denial::invalid(
                iface_path(i),
                format!(
                    "logical {name} interface must have exactly one binding method or binding plugin"
                ),
            ));
        }
        // A missing network counts as "not the pod network", as upstream.
        let on_pod_network = network_named(spec, name).is_some_and(|n| is_set(n, "pod"));
        if is_set(iface, "masquerade") && !on_pod_network {
            denials.push(Denial::invalid(
                iface_path(i).child("name"),
                "Masquerade interface only implemented with pod network",
            ));
        }
    }
    for (i, net) in networks.iter().enumerate() {
        let name = text(net, "name");
        if networks[..i].iter().any(|n| text(n, "name") == name) {
            denials.push(Denial::new(
                CauseType::FieldValueDuplicate,
                field.child("networks").index(i).child("name"),
                format!(
                    "Network with name {name:?} already exists, every network must have a unique name"
                ),
            ));
        }
    }
    for (i, net) in networks.iter().enumerate() {
        let name = text(net, "name");
        if !ifaces.iter().any(|f| text(f, "name") == name) {
            let path = field.child("networks").index(i).child("name");
            denials.push(Denial::new(
                CauseType::FieldValueRequired,
                &path,
                format!("{path} '{name}' not found."),
            ));
        }
    }
    for (i, iface) in ifaces.iter().enumerate() {
        let name = text(iface, "name");
        if ifaces[..i].iter().any(|f| text(f, "name") == name) {
            denials.push(Denial::new(
                CauseType::FieldValueDuplicate,
                iface_path(i).child("name"),
                "Only one interface can be connected to one specific network",
            ));
        }
    }
    for (i, iface) in ifaces.iter().enumerate() {
        let name = text(iface, "name");
        if network_named(spec, name).is_none() {
            let path = iface_path(i).child("name");
            denials.push(Denial::invalid(
                &path,
                format!("{path} '{name}' not found."),
            ));
        }
    }
    for (i, iface) in ifaces.iter().enumerate() {
        let name = text(iface, "name");
        let name_ok = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
        if !name_ok {
            denials.push(Denial::invalid(
                iface_path(i).child("name"),
                "Network interface name can only contain alphabetical characters, numbers, dashes (-) or underscores (_)",
            ));
        }
        let model = text(iface, "model");
        if !model.is_empty() && !INTERFACE_MODELS.contains(&model) {
            denials.push(Denial::new(
                CauseType::FieldValueNotSupported,
                iface_path(i).child("model"),
                format!(
                    "interface {} uses model {model} that is not supported.",
                    iface_path(i).child("name")
                ),
            ));
        }
    }
    denials
}

/// A `bootOrder` as Go reads a `*uint`: negative numbers count as below 1.
fn boot_order_of(device: &Value) -> Option<i64> {
    device.get("bootOrder").and_then(Value::as_i64)
}

/// Every disk names a volume (an empty cdrom needs a feature gate that is off), and boot orders
/// are unique across disks and interfaces (`validateBootOrder`, `validateInterfaceBootOrder`).
fn boot_order(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let mut denials = Vec::new();
    let volumes = items(spec, "volumes");
    let disks_path = field.children(&["domain", "devices", "disks"]);
    let mut seen: Vec<i64> = Vec::new();
    for (i, disk) in items(&spec["domain"]["devices"], "disks")
        .iter()
        .enumerate()
    {
        let name = text(disk, "name");
        let volume = volumes.iter().find(|v| text(v, "name") == name);
        match volume {
            None if !is_set(disk, "cdrom") => denials.push(Denial::invalid(
                disks_path.index(i).child("name"),
                // Upstream prints this path with a capital `Name`.
                format!("{} '{name}' not found.", disks_path.index(i).child("Name")),
            )),
            None => denials.push(Denial::invalid(
                disks_path.index(i).child("name"),
                "DeclarativeHotplugVolumes feature gate not enabled, cannot define an empty CD-ROM disk",
            )),
            Some(volume) => {
                if is_set(disk, "lun")
                    && !is_set(volume, "persistentVolumeClaim")
                    && !is_set(volume, "dataVolume")
                {
                    let path = disks_path.index(i).child("lun");
                    denials.push(Denial::invalid(
                        &path,
                        format!(
                            "{path} can only be mapped to a DataVolume or PersistentVolumeClaim volume."
                        ),
                    ));
                }
            }
        }
        if let Some(order) = boot_order_of(disk) {
            if seen.contains(&order) {
                let path = disks_path.index(i).child("bootOrder");
                denials.push(Denial::invalid(
                    &path,
                    format!("Boot order for {path} already set for a different device."),
                ));
            }
            seen.push(order);
        }
    }
    let ifaces_path = field.children(&["domain", "devices", "interfaces"]);
    for (i, iface) in interfaces(spec).iter().enumerate() {
        let Some(order) = boot_order_of(iface) else {
            continue;
        };
        if order < 1 {
            // Upstream indexes the spec path itself here (`spec[0]`), not the interface.
            denials.push(Denial::invalid(
                field.index(i).child("bootOrder"),
                format!("{} must have a boot order > 0, if supplied", field.index(i)),
            ));
            continue;
        }
        if seen.contains(&order) {
            let path = ifaces_path.index(i).child("bootOrder");
            denials.push(Denial::invalid(
                &path,
                format!("Boot order for {path} already set for a different device."),
            ));
        }
        seen.push(order);
    }
    denials
}

/// `validateDomainSpec`: the disks, the bootloader, and Secure Boot needing SMM.
fn domain(field: &FieldPath, domain: &Value) -> Vec<Denial> {
    let mut denials = disks(
        &field.children(&["devices", "disks"]),
        items(&domain["devices"], "disks"),
    );
    let bootloader = &domain["firmware"]["bootloader"];
    if is_set(bootloader, "efi") && is_set(bootloader, "bios") {
        let path = field.children(&["firmware", "bootloader"]);
        denials.push(Denial::invalid(
            &path,
            format!("{path} has both EFI and BIOS configured, but they are mutually exclusive."),
        ));
    }
    // Secure Boot is on unless `secureBoot: false`; SMM is on when `smm` is set unless
    // `enabled: false`.
    let secure_boot =
        is_set(bootloader, "efi") && bootloader["efi"]["secureBoot"].as_bool() != Some(false);
    let smm = is_set(&domain["features"], "smm")
        && domain["features"]["smm"]["enabled"].as_bool() != Some(false);
    let tdx = is_set(&domain["launchSecurity"], "tdx");
    if secure_boot && !smm && !tdx {
        denials.push(Denial::invalid(
            field,
            format!(
                "{field} has EFI SecureBoot enabled. SecureBoot requires SMM, which is currently disabled."
            ),
        ));
    }
    denials
}

/// The target (`disk`, `lun` or `cdrom`) set on `disk`, and its bus.
fn target(disk: &Value) -> (&'static str, &str) {
    for kind in DISK_TARGETS {
        if is_set(disk, kind) {
            return (kind, text(&disk[kind], "bus"));
        }
    }
    ("", "")
}

/// `ValidateDisks`: per disk, in upstream's order.
fn disks(field: &FieldPath, disks: &[Value]) -> Vec<Denial> {
    let mut denials = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let name = text(disk, "name");
        for (j, other) in disks[..i].iter().enumerate() {
            if text(other, "name") == name {
                denials.push(Denial::invalid(
                    field.index(i).child("name"),
                    format!(
                        "{} and {} must not have the same Name.",
                        field.index(i),
                        field.index(j)
                    ),
                ));
            }
        }
        if DISK_TARGETS.iter().filter(|k| is_set(disk, k)).count() > 1 {
            denials.push(Denial::invalid(
                field.index(i),
                format!(
                    "{} can only have a single target type defined",
                    field.index(i)
                ),
            ));
        }
        if boot_order_of(disk).is_some_and(|o| o < 1) {
            denials.push(Denial::invalid(
                field.index(i).child("bootOrder"),
                format!("{} must have a boot order > 0, if supplied", field.index(i)),
            ));
        }
        denials.extend(bus(field, i, disk));
        let serial = text(disk, "serial");
        let serial_ok = serial
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "_.+-".contains(c));
        if !serial_ok {
            denials.push(Denial::invalid(
                field.index(i).child("serial"),
                format!(
                    "{} must be made up of the following characters [A-Za-z0-9_.+-], if specified",
                    field.index(i)
                ),
            ));
        }
        if serial.chars().count() > MAX_SERIAL_LEN {
            denials.push(Denial::invalid(
                field.index(i).child("serial"),
                format!(
                    "{} must be less than or equal to {MAX_SERIAL_LEN} in length, if specified",
                    field.index(i)
                ),
            ));
        }
        let cache = text(disk, "cache");
        if !["", "none", "writethrough", "writeback"].contains(&cache) {
            let path = field.index(i).child("cache");
            denials.push(Denial::invalid(
                &path,
                format!("{path} has invalid value {cache}"),
            ));
        }
        let io = text(disk, "io");
        if !["", "native", "threads"].contains(&io) {
            denials.push(Denial::new(
                CauseType::FieldValueNotSupported,
                field.children(&["domain", "devices", "disks"]).index(i).child("io"),
                format!(
                    "Disk IO mode for {field} is not supported. Supported modes are: native, threads."
                ),
            ));
        }
        if let Some(policy) = disk.get("errorPolicy").and_then(Value::as_str)
            && !["stop", "ignore", "report", "enospace"].contains(&policy)
        {
            let path = field.index(i).child("errorPolicy");
            denials.push(Denial::invalid(
                &path,
                format!("{path} has invalid value \"{policy}\""),
            ));
        }
        for message in dns1123_label_errors(name) {
            denials.push(Denial::invalid(
                // Upstream nests the path once more here; only the message is shown.
                field
                    .children(&["domain", "devices", "disks"])
                    .index(i)
                    .child("name"),
                message,
            ));
        }
    }
    denials
}

/// `validateBusSupport`: known buses only, no IDE, no virtio CD-ROM, no read-only SATA disk,
/// dedicated IO threads only on virtio.
fn bus(field: &FieldPath, i: usize, disk: &Value) -> Vec<Denial> {
    let mut denials = Vec::new();
    let (kind, bus) = target(disk);
    if bus.is_empty() {
        return denials;
    }
    match bus {
        "ide" => denials.push(Denial::invalid(
            field.index(i).child(kind).child("bus"),
            "IDE bus is not supported",
        )),
        "virtio" if kind == "cdrom" => denials.push(Denial::invalid(
            field.index(i).children(&["cdrom", "bus"]),
            format!("Bus type {bus} is invalid for CD-ROM device"),
        )),
        "sata" if disk["disk"]["readonly"].as_bool() == Some(true) => {
            denials.push(Denial::invalid(
                field.index(i).children(&["disk", "bus"]),
                format!("{bus} hard-disks do not support read-only."),
            ))
        }
        known if DISK_BUSES.contains(&known) => {}
        unknown => denials.push(Denial::invalid(
            field.index(i).child(kind).child("bus"),
            format!(
                "{} is set with an unrecognized bus {unknown}, must be one of: [{}]",
                field.index(i),
                DISK_BUSES.join(" ")
            ),
        )),
    }
    if disk["dedicatedIOThread"].as_bool() == Some(true) && bus != "virtio" {
        denials.push(Denial::new(
            CauseType::FieldValueNotSupported,
            field.children(&["domain", "devices", "disks"]).index(i),
            format!("IOThreads are not supported for disks on a {bus} bus"),
        ));
    }
    denials
}

/// `validation.IsDNS1123Label`'s messages for `value` (a disk name becomes a container name).
pub fn dns1123_label_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > DNS1123_LABEL_MAX {
        errors.push(format!(
            "must be no more than {DNS1123_LABEL_MAX} characters"
        ));
    }
    if !is_dns1123_label(value) {
        if !value.is_empty() && value.split('.').all(is_dns1123_label) {
            errors.push("must not contain dots".to_owned());
        } else {
            errors.push(
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters \
                 or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  \
                 or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
                    .to_owned(),
            );
        }
    }
    errors
}

fn is_dns1123_label(value: &str) -> bool {
    let alnum = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit();
    value.starts_with(alnum)
        && value.ends_with(alnum)
        && value.chars().all(|c| alnum(c) || c == '-')
}

/// `validateVolumes`: unique names, exactly one source, a DataVolume volume names its
/// DataVolume.
fn volumes(field: &FieldPath, volumes: &[Value]) -> Vec<Denial> {
    let mut denials = Vec::new();
    for (i, volume) in volumes.iter().enumerate() {
        let name = text(volume, "name");
        if let Some(j) = volumes[..i].iter().position(|v| text(v, "name") == name) {
            denials.push(Denial::invalid(
                field.index(i).child("name"),
                format!(
                    "{} and {} must not have the same Name.",
                    field.index(i),
                    field.index(j)
                ),
            ));
        }
        if is_set(volume, "dataVolume") && text(&volume["dataVolume"], "name").is_empty() {
            denials.push(Denial::new(
                CauseType::FieldValueRequired,
                field.index(i).child("name"),
                "DataVolume 'name' must be set",
            ));
        }
        if VOLUME_SOURCES.iter().filter(|k| is_set(volume, k)).count() != 1 {
            denials.push(Denial::invalid(
                field.index(i),
                format!("{} must have exactly one source type set", field.index(i)),
            ));
        }
    }
    denials
}

#[cfg(test)]
mod tests;
