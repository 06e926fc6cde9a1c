//! The instance VirtualMachine and the VM profiles a bundle's disk boots with.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{Error, instance_labels, owned_meta, vm_name};
use crate::api::ClusterInstance;
use crate::api::bundle::{BundleSource, CRCBundle};
use crate::api::common::Arch;
use crate::kubevirt::{
    DataVolumeSource, Devices, Disk, DiskBus, DiskTarget, DomainResources, DomainSpec, RunStrategy,
    VirtualMachine, VirtualMachineInstanceSpec, VirtualMachineInstanceTemplateSpec,
    VirtualMachineSpec, Volume,
};
use crate::resources::profile;

/// Name of the root disk (and its volume) inside the VM.
pub const ROOT_DISK: &str = "rootdisk";

/// How an instance VM is shaped for a bundle's disk (`CRCBundle.status.vmProfile`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum VmProfile {
    /// `crc-download-v0`: the VM the Go operator makes for a downloaded bundle: BIOS, KubeVirt's
    /// default pod network, one virtio disk; nothing else set.
    CrcDownloadV0,
    /// `crc-kubevirt-v1`: the VM a built bundle was installed in (`resources::profile::vm`):
    /// EFI, the machine type of `arch`, masquerade binding with a pinned guest network, the
    /// clock on real time. The disk was installed for this shape and boots only in it.
    CrcKubevirtV1 { arch: Arch },
}

impl VmProfile {
    pub const CRC_DOWNLOAD_V0: &'static str = "crc-download-v0";
    pub const CRC_KUBEVIRT_V1: &'static str = profile::NAME;

    /// The profile named `name` for a bundle of `arch`; an unknown name is an error naming it.
    pub fn parse(name: &str, arch: Arch) -> Result<Self, Error> {
        match name {
            Self::CRC_DOWNLOAD_V0 => Ok(VmProfile::CrcDownloadV0),
            Self::CRC_KUBEVIRT_V1 => Ok(VmProfile::CrcKubevirtV1 { arch }),
            other => Err(Error::UnknownVmProfile(other.to_owned())),
        }
    }

    /// The profile a bundle's instances boot with: `status.vmProfile`; a downloaded bundle that
    /// does not record one (prepared before the field existed, or by the Go operator) is
    /// `crc-download-v0`; a built bundle must record its profile.
    pub fn of_bundle(bundle: &CRCBundle) -> Result<Self, Error> {
        let status = bundle.status.as_ref();
        match status
            .and_then(|s| s.vm_profile.as_deref())
            .filter(|p| !p.is_empty())
        {
            Some(name) => Self::parse(name, bundle.spec.arch),
            None if status.and_then(|s| s.source) == Some(BundleSource::Build) => {
                Err(Error::MissingVmProfile(bundle.name_any()))
            }
            None => Ok(VmProfile::CrcDownloadV0),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VmProfile::CrcDownloadV0 => Self::CRC_DOWNLOAD_V0,
            VmProfile::CrcKubevirtV1 { .. } => Self::CRC_KUBEVIRT_V1,
        }
    }
}

impl std::fmt::Display for VmProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The instance's VirtualMachine (named after the instance, create-only): `runStrategy: Always`,
/// the common labels on the VM and its template, `nodeSelector`, `memory` and `cores`, and the
/// root DataVolume `dv_name` as the one virtio disk, shaped by `profile`.
pub fn virtual_machine(
    instance: &ClusterInstance,
    profile: VmProfile,
    dv_name: &str,
    memory: &str,
    cores: i32,
    node_selector: &BTreeMap<String, String>,
) -> VirtualMachine {
    let name = instance.name_any();
    let spec = match profile {
        VmProfile::CrcKubevirtV1 { arch } => {
            profile::vm::instance_vmi_spec(arch, cores, memory, dv_name, node_selector)
        }
        VmProfile::CrcDownloadV0 => VirtualMachineInstanceSpec {
            node_selector: node_selector.clone(),
            domain: DomainSpec {
                resources: Some(DomainResources {
                    requests: BTreeMap::from([
                        ("memory".to_owned(), Quantity(memory.to_owned())),
                        ("cpu".to_owned(), Quantity(cores.to_string())),
                    ]),
                    limits: BTreeMap::new(),
                }),
                devices: Devices {
                    disks: vec![root_disk(None)],
                    ..Default::default()
                },
                ..Default::default()
            },
            volumes: vec![root_volume(dv_name)],
            ..Default::default()
        },
    };
    VirtualMachine {
        metadata: owned_meta(instance, &vm_name(&name)),
        spec: VirtualMachineSpec {
            run_strategy: Some(RunStrategy::Always),
            running: None,
            template: VirtualMachineInstanceTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(vm_template_labels(&name)),
                    ..Default::default()
                }),
                spec,
            },
        },
        status: None,
    }
}

/// The labels of the instance VM's template (and so of its VMIs and launcher pods): the common
/// ones and [`crate::api::labels::VM`], which the Service and NetworkPolicy select.
fn vm_template_labels(instance: &str) -> BTreeMap<String, String> {
    let mut template = instance_labels(instance);
    template.insert(crate::api::labels::VM.to_owned(), vm_name(instance));
    template
}

/// The root disk of every VM that boots a bundle's disk: virtio, named [`ROOT_DISK`], first in
/// `boot_order` when one is set.
pub fn root_disk(boot_order: Option<u32>) -> Disk {
    Disk {
        name: ROOT_DISK.to_owned(),
        boot_order,
        disk: Some(DiskTarget {
            bus: Some(DiskBus::Virtio),
        }),
        ..Default::default()
    }
}

/// The volume behind [`root_disk`]: the DataVolume `dv_name`.
pub fn root_volume(dv_name: &str) -> Volume {
    Volume {
        name: ROOT_DISK.to_owned(),
        data_volume: Some(DataVolumeSource {
            name: dv_name.to_owned(),
            hotpluggable: None,
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CRCBundleSpec;
    use serde_json::json;

    fn bundle(status: serde_json::Value) -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(json!({"version": "4.16.0"})).unwrap();
        let mut b = CRCBundle::new("b", spec);
        b.status = Some(serde_json::from_value(status).unwrap());
        b
    }

    #[test]
    fn profiles_parse_by_name() {
        assert_eq!(
            VmProfile::parse("crc-download-v0", Arch::Arm64).unwrap(),
            VmProfile::CrcDownloadV0
        );
        assert_eq!(
            VmProfile::parse("crc-download-v0", Arch::Amd64)
                .unwrap()
                .to_string(),
            "crc-download-v0"
        );
        let v1 = VmProfile::parse("crc-kubevirt-v1", Arch::Arm64).unwrap();
        assert_eq!(v1, VmProfile::CrcKubevirtV1 { arch: Arch::Arm64 });
        assert_eq!(v1.to_string(), "crc-kubevirt-v1");
        let err = VmProfile::parse("crc-kubevirt-v9", Arch::Amd64).unwrap_err();
        assert!(err.to_string().contains("crc-kubevirt-v9"), "{err}");
    }

    #[test]
    fn bundle_profile_defaults_only_for_downloads() {
        assert_eq!(
            VmProfile::of_bundle(&bundle(json!({"source": "Download"}))).unwrap(),
            VmProfile::CrcDownloadV0
        );
        assert_eq!(
            VmProfile::of_bundle(&bundle(json!({}))).unwrap(),
            VmProfile::CrcDownloadV0
        );
        assert_eq!(
            VmProfile::of_bundle(&bundle(json!({"vmProfile": "crc-download-v0"}))).unwrap(),
            VmProfile::CrcDownloadV0
        );
        assert!(matches!(
            VmProfile::of_bundle(&bundle(json!({"source": "Build"}))),
            Err(Error::MissingVmProfile(name)) if name == "b"
        ));
        let mut built = bundle(json!({"source": "Build", "vmProfile": "crc-kubevirt-v1"}));
        assert_eq!(
            VmProfile::of_bundle(&built).unwrap(),
            VmProfile::CrcKubevirtV1 { arch: Arch::Amd64 }
        );
        built.spec.arch = Arch::Arm64;
        assert_eq!(
            VmProfile::of_bundle(&built).unwrap(),
            VmProfile::CrcKubevirtV1 { arch: Arch::Arm64 }
        );
        assert!(matches!(
            VmProfile::of_bundle(&bundle(json!({"vmProfile": "nope"}))),
            Err(Error::UnknownVmProfile(name)) if name == "nope"
        ));
    }

    #[test]
    fn download_profile_is_the_upstream_vm_and_nothing_else() {
        let instance = super::super::tests::instance();
        let vm = virtual_machine(
            &instance,
            VmProfile::CrcDownloadV0,
            "crc-1-rootdisk",
            "16Gi",
            4,
            &BTreeMap::from([("kubernetes.io/arch".to_owned(), "amd64".to_owned())]),
        );
        let value = serde_json::to_value(&vm).unwrap();
        assert_eq!(
            value["spec"],
            json!({
                "runStrategy": "Always",
                "template": {
                    "metadata": {"labels": {
                        "guestcluster.opdev.io/vm": "crc-1",
                        "opdev.io/cluster-instance": "crc-1",
                        "opdev.io/managed-by": "guestcluster-operator",
                    }},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/arch": "amd64"},
                        "domain": {
                            "resources": {"requests": {"memory": "16Gi", "cpu": "4"}},
                            "devices": {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]},
                        },
                        "volumes": [{"name": "rootdisk", "dataVolume": {"name": "crc-1-rootdisk"}}],
                    },
                },
            })
        );
        assert_eq!(value["metadata"]["name"], "crc-1");
        assert_eq!(value["metadata"]["namespace"], "team-a");
        // An empty node selector is omitted.
        let vm = virtual_machine(
            &instance,
            VmProfile::CrcDownloadV0,
            "d",
            "16Gi",
            4,
            &BTreeMap::new(),
        );
        assert!(
            serde_json::to_value(&vm).unwrap()["spec"]["template"]["spec"]
                .get("nodeSelector")
                .is_none()
        );
    }

    #[test]
    fn kubevirt_v1_instance_vm_matches_golden() {
        let instance = super::super::tests::instance();
        let template = &instance.spec.template;
        let vm = virtual_machine(
            &instance,
            VmProfile::CrcKubevirtV1 { arch: Arch::Amd64 },
            "crc-1-rootdisk",
            &template.memory,
            template.cores,
            &template.vm_node_selector,
        );
        profile::golden_check_objects("instance-vm.yaml", &json!([vm]));
        let spec = serde_json::to_value(&vm.spec.template.spec).unwrap();
        assert_eq!(spec["domain"]["clock"]["utc"]["offsetSeconds"], 0);
        assert_eq!(
            spec["domain"]["devices"]["disks"].as_array().unwrap().len(),
            1
        );
        assert_eq!(spec["volumes"][0]["dataVolume"]["name"], "crc-1-rootdisk");
        assert_eq!(vm.spec.run_strategy, Some(RunStrategy::Always));
    }
}
