//! KubeVirt's defaults for a VMI spec, as its VM controller and mutating webhook apply them
//! before a VMI is created and as its VM admission applies them (to a copy) before validating:
//! the pod network when nothing says otherwise, and a disk for every volume without one.
//!
//! Applied to untyped JSON so fields this crate does not model survive.

use serde_json::{Value, json};

/// Adds KubeVirt's defaults to `spec` (a VMI spec, or a VM's `spec.template.spec`):
///
/// - with neither interfaces nor networks (and `autoattachPodInterface` not `false`): interface
///   `default` with the masquerade binding on network `default` of the pod network (the binding
///   OpenShift Virtualization configures as the default);
/// - for every volume that no disk or filesystem names, a disk of that name (`disk: {}`).
pub fn apply_spec_defaults(spec: &mut Value) {
    if !spec.is_object() {
        *spec = json!({});
    }
    let domain = &mut spec["domain"];
    if !domain.is_object() {
        *domain = json!({});
    }
    let devices = &mut domain["devices"];
    if !devices.is_object() {
        *devices = json!({});
    }
    let no_interfaces = devices["interfaces"].as_array().is_none_or(Vec::is_empty);
    let no_networks = spec["networks"].as_array().is_none_or(Vec::is_empty);
    let autoattach = spec["domain"]["devices"]["autoattachPodInterface"]
        .as_bool()
        .unwrap_or(true);
    if no_interfaces && no_networks && autoattach {
        spec["domain"]["devices"]["interfaces"] = json!([{"name": "default", "masquerade": {}}]);
        spec["networks"] = json!([{"name": "default", "pod": {}}]);
    }
    let filesystems: Vec<Value> = spec["domain"]["devices"]["filesystems"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let volume_names: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["name"].as_str().map(String::from))
        .collect();
    let disks = &mut spec["domain"]["devices"]["disks"];
    if !disks.is_array() {
        *disks = json!([]);
    }
    if let Some(disks) = disks.as_array_mut() {
        for volume in volume_names {
            let named = |d: &Value| d["name"] == volume.as_str();
            if !disks.iter().any(named) && !filesystems.iter().any(named) {
                disks.push(json!({"name": volume, "disk": {}}));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_spec_gets_the_pod_network() {
        let mut spec = json!({});
        apply_spec_defaults(&mut spec);
        assert_eq!(
            spec["domain"]["devices"]["interfaces"],
            json!([{"name": "default", "masquerade": {}}])
        );
        assert_eq!(spec["networks"], json!([{"name": "default", "pod": {}}]));
        assert_eq!(spec["domain"]["devices"]["disks"], json!([]));
    }

    #[test]
    fn explicit_networks_and_autoattach_false_are_kept() {
        let mut spec = json!({
            "domain": {"devices": {"interfaces": [{"name": "crcnet", "bridge": {}}]}},
            "networks": [{"name": "crcnet", "multus": {"networkName": "crc-net"}}],
        });
        let before = spec["networks"].clone();
        apply_spec_defaults(&mut spec);
        assert_eq!(spec["networks"], before);
        let mut spec = json!({"domain": {"devices": {"autoattachPodInterface": false}}});
        apply_spec_defaults(&mut spec);
        assert!(spec.get("networks").is_none());
    }

    #[test]
    fn every_volume_without_a_disk_or_filesystem_gets_a_disk() {
        let mut spec = json!({
            "domain": {"devices": {
                "disks": [{"name": "root", "bootOrder": 1}],
                "filesystems": [{"name": "shared", "virtiofs": {}}],
            }},
            "volumes": [
                {"name": "root", "dataVolume": {"name": "crc-root"}},
                {"name": "iso", "persistentVolumeClaim": {"claimName": "crc-iso"}},
                {"name": "shared", "persistentVolumeClaim": {"claimName": "shared"}},
            ],
        });
        apply_spec_defaults(&mut spec);
        assert_eq!(
            spec["domain"]["devices"]["disks"],
            json!([{"name": "root", "bootOrder": 1}, {"name": "iso", "disk": {}}])
        );
    }
}
