//! Objects of a build-sourced CRCBundle's attempt, in the operator namespace
//! (`docs/operations.md`, "CRCBundle (build source)"): the installer's ServiceAccount, its input
//! Secret, the work and ISO PVCs and the installer Job (Prepare); the helper's account and role,
//! the credentials Secret, the root DataVolume, the install ISO PVC, the build VM and the helper
//! Job of each guest step (Install, Customize, Seal); the disk Job (Publish).
//! Every one is named after the bundle and the attempt, carries the attempt label and is
//! controlled by the bundle, so an object of another attempt is never mistaken for this one's.

mod jobs;

pub use jobs::*;

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret, ServiceAccount};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::bundle::pvc;
use super::common::{bundle_labels, controller_ref};
use crate::api::CRCBundle;
use crate::api::bundle::BuildSpec;
use crate::api::labels;
use crate::cdi::{
    BlankSource, DataSource, DataSourceSource, DataSourceSpec, DataVolume, DataVolumeSourceSpec,
    DataVolumeSpec, PvcSource, StorageResources, StorageSpec,
};
use crate::contract::build_helper::Step;
use crate::contract::installer as contract;
use crate::kubevirt::VirtualMachine;
use crate::resources::profile::vm::{self as profile_vm, BuildBoot, BuildVmNames};

/// Size of the work PVC: the extracted installer (~0.5 GiB), the stock live ISO (~1.2 GiB) and
/// the staging directory, with room to spare.
pub const WORK_SIZE: &str = "8Gi";
/// Size of the ISO PVC: one live ISO with an Ignition embedded.
pub const ISO_SIZE: &str = "4Gi";
/// The installer Job's limits: a release extract and an ISO download take minutes, not hours;
/// transient registry or network failures get two more pods.
pub const INSTALLER_DEADLINE_SECONDS: i64 = 3600;
pub const INSTALLER_BACKOFF_LIMIT: i32 = 2;
/// Where the installer Job mounts its volumes.
pub const INPUTS_DIR: &str = "/inputs";
pub const WORK_DIR: &str = "/work";
pub const ISO_DIR: &str = "/iso";

/// Names of one attempt's objects: `<bundle>-b<attempt>-<what>`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    bundle: String,
    pub attempt: i32,
    pub service_account: String,
    pub installer_secret: String,
    pub work_pvc: String,
    pub iso_pvc: String,
    pub installer_job: String,
    /// The helper's ServiceAccount, Role and RoleBinding.
    pub helper: String,
    pub credentials_secret: String,
    pub root_data_volume: String,
    pub install_iso_pvc: String,
    pub build_vm: String,
    pub disk_job: String,
    /// The clone of the golden PVC the validation VM boots (a DataVolume and its PVC).
    pub validation_data_volume: String,
    pub validation_vm: String,
    /// The NetworkPolicy around both VMs' launcher pods.
    pub guest_policy: String,
}

impl Names {
    pub fn of(bundle: &str, attempt: i32) -> Self {
        let name = |what: &str| format!("{bundle}-b{attempt}-{what}");
        Self {
            bundle: bundle.to_owned(),
            attempt,
            service_account: name("installer"),
            installer_secret: name("installer"),
            work_pvc: name("work"),
            iso_pvc: name("iso"),
            installer_job: name("installer"),
            helper: name("helper"),
            credentials_secret: name("credentials"),
            root_data_volume: name("root"),
            install_iso_pvc: name("install-iso"),
            build_vm: name("build"),
            disk_job: name("disk"),
            validation_data_volume: name("validation"),
            validation_vm: name("validation"),
            guest_policy: name("guests"),
        }
    }

    /// The name of the attempt's object `what`: `<bundle>-b<attempt>-<what>`.
    pub fn of_attempt(&self, what: &str) -> String {
        format!("{}-b{}-{what}", self.bundle, self.attempt)
    }

    /// The bundle the attempt belongs to.
    pub fn bundle(&self) -> &str {
        &self.bundle
    }

    /// The VM a helper step works in: the validation clone's for the validation steps.
    pub fn vm_of(&self, step: Step) -> &str {
        match step {
            Step::Validate | Step::Aged => &self.validation_vm,
            _ => &self.build_vm,
        }
    }

    /// The helper Job of `step` for the VMI `vmi_uid`: `<bundle>-b<n>-<step>-<first 8 of the
    /// UID>`, so a new VMI gets a new Job and the old one's result never counts for it.
    pub fn helper_job(&self, step: Step, vmi_uid: &str) -> String {
        let short: String = vmi_uid.chars().filter(|c| *c != '-').take(8).collect();
        format!(
            "{}-b{}-{}-{short}",
            self.bundle,
            self.attempt,
            step.as_str()
        )
    }
}

/// What the installer Secret holds: the admitted inputs rendered for the Job. The pull secret
/// is in it twice (alone, and inside the install-config), which is why it is a Secret.
pub struct InstallerInputs {
    pub pull_secret: String,
    pub generator_ignition: String,
    pub staging: Vec<contract::StagedFile>,
    /// For the Customize step (the helper mounts only this key).
    pub post_install: Vec<contract::PostInstallManifest>,
}

fn meta(bundle: &CRCBundle, namespace: &str, name: &str, attempt: i32) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: Some(namespace.to_owned()),
        labels: Some(attempt_labels(bundle, attempt)),
        owner_references: controller_ref(bundle).map(|r| vec![r]),
        ..Default::default()
    }
}

fn attempt_labels(bundle: &CRCBundle, attempt: i32) -> BTreeMap<String, String> {
    let mut labels = bundle_labels(&bundle.name_any());
    labels.insert(labels::BUILD_ATTEMPT.to_owned(), attempt.to_string());
    labels
}

/// The labels of the attempt's Job pods of `component`: what the guests' NetworkPolicy selects.
fn job_pod_labels(bundle: &CRCBundle, attempt: i32, component: &str) -> BTreeMap<String, String> {
    let mut labels = attempt_labels(bundle, attempt);
    labels.insert(labels::COMPONENT.to_owned(), component.to_owned());
    labels
}

/// The installer's own account: it talks to no API, so it has no token and no role.
pub fn service_account(bundle: &CRCBundle, namespace: &str, names: &Names) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(bundle, namespace, &names.service_account, names.attempt),
        automount_service_account_token: Some(false),
        ..Default::default()
    }
}

pub fn installer_secret(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    inputs: &InstallerInputs,
) -> Result<Secret, serde_json::Error> {
    let staging = serde_json::to_vec(&inputs.staging)?;
    let post_install = serde_json::to_vec(&inputs.post_install)?;
    let data = BTreeMap::from([
        (
            contract::KEY_PULL_SECRET.to_owned(),
            ByteString(inputs.pull_secret.as_bytes().to_vec()),
        ),
        (
            contract::KEY_GENERATOR_IGNITION.to_owned(),
            ByteString(inputs.generator_ignition.as_bytes().to_vec()),
        ),
        (contract::KEY_STAGING.to_owned(), ByteString(staging)),
        (
            contract::KEY_POST_INSTALL.to_owned(),
            ByteString(post_install),
        ),
    ]);
    Ok(Secret {
        metadata: meta(bundle, namespace, &names.installer_secret, names.attempt),
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Default::default()
    })
}

pub fn work_pvc(bundle: &CRCBundle, namespace: &str, names: &Names) -> PersistentVolumeClaim {
    attempt_pvc(bundle, namespace, names, &names.work_pvc, WORK_SIZE)
}

pub fn iso_pvc(bundle: &CRCBundle, namespace: &str, names: &Names) -> PersistentVolumeClaim {
    attempt_pvc(bundle, namespace, names, &names.iso_pvc, ISO_SIZE)
}

/// A volume of the attempt: the bundle's PVC shape, labelled with the attempt.
fn attempt_pvc(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    name: &str,
    size: &str,
) -> PersistentVolumeClaim {
    let mut claim = pvc(name, bundle, namespace, size);
    claim.metadata.labels = Some(attempt_labels(bundle, names.attempt));
    claim
}

/// The helper's account: it reads its VMI and writes the credentials Secret, nothing else.
pub fn helper_account(bundle: &CRCBundle, namespace: &str, names: &Names) -> ServiceAccount {
    ServiceAccount {
        metadata: meta(bundle, namespace, &names.helper, names.attempt),
        ..Default::default()
    }
}

/// The helper's Role, by name: the build VM's VMI (the scope check and its watch) and the
/// credentials Secret (the generator and install steps write keys into it).
pub fn helper_role(bundle: &CRCBundle, namespace: &str, names: &Names) -> Role {
    let rule = |group: &str, resource: &str, verbs: &[&str], name: &str| PolicyRule {
        api_groups: Some(vec![group.to_owned()]),
        resources: Some(vec![resource.to_owned()]),
        verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
        resource_names: Some(vec![name.to_owned()]),
        ..Default::default()
    };
    Role {
        metadata: meta(bundle, namespace, &names.helper, names.attempt),
        rules: Some(vec![
            PolicyRule {
                api_groups: Some(vec!["kubevirt.io".to_owned()]),
                resources: Some(vec!["virtualmachineinstances".to_owned()]),
                verbs: ["get", "list", "watch"].map(str::to_owned).to_vec(),
                resource_names: Some(vec![names.build_vm.clone(), names.validation_vm.clone()]),
                ..Default::default()
            },
            rule("", "secrets", &["get", "patch"], &names.credentials_secret),
        ]),
    }
}

pub fn helper_role_binding(bundle: &CRCBundle, namespace: &str, names: &Names) -> RoleBinding {
    RoleBinding {
        metadata: meta(bundle, namespace, &names.helper, names.attempt),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: names.helper.clone(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: names.helper.clone(),
            namespace: Some(namespace.to_owned()),
            ..Default::default()
        }]),
    }
}

/// The credentials Secret, empty: the generator helper fills it (the admin kubeconfig and
/// kubeadmin password of the installed cluster), the install helper adds the installer signer.
pub fn credentials_secret(bundle: &CRCBundle, namespace: &str, names: &Names) -> Secret {
    Secret {
        metadata: meta(bundle, namespace, &names.credentials_secret, names.attempt),
        type_: Some("Opaque".to_owned()),
        ..Default::default()
    }
}

/// The build VM's root disk: a blank DataVolume of `spec.build.vm.diskSize`, the guest's
/// `/dev/vda`, installed by the install boot. Always `Filesystem`, whatever the StorageProfile
/// prefers: the disk Job reads it as the file `disk.img` and copies only its allocated extents
/// (`SEEK_DATA`), which a Block device does not offer (`docs/decisions.md`, "Volume modes").
/// `ReadWriteOnce` is said as well (one VM uses it), so CDI needs nothing from the profile.
pub fn root_data_volume(
    bundle: &CRCBundle,
    build: &BuildSpec,
    namespace: &str,
    names: &Names,
) -> DataVolume {
    root_data_volume_of(
        bundle,
        namespace,
        names,
        (&names.root_data_volume, &build.vm.disk_size),
        Some((super::common::READ_WRITE_ONCE, super::common::FILESYSTEM)),
    )
}

/// A blank DataVolume `name` of `size` in the bundle's storage class with `modes` (access mode,
/// volume mode); unset, both follow the class's StorageProfile.
fn root_data_volume_of(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    (name, size): (&str, &str),
    modes: Option<(&str, &str)>,
) -> DataVolume {
    DataVolume {
        metadata: meta(bundle, namespace, name, names.attempt),
        spec: DataVolumeSpec {
            source: Some(DataVolumeSourceSpec {
                blank: Some(BlankSource {}),
                ..Default::default()
            }),
            storage: Some(StorageSpec {
                resources: Some(StorageResources {
                    requests: BTreeMap::from([("storage".to_owned(), Quantity(size.to_owned()))]),
                }),
                storage_class_name: bundle
                    .spec
                    .storage_class_name
                    .clone()
                    .filter(|s| !s.is_empty()),
                access_modes: modes.map(|(access, _)| vec![access.to_owned()]),
                volume_mode: modes.map(|(_, mode)| mode.to_owned()),
            }),
        },
        status: None,
    }
}

pub fn install_iso_pvc(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
) -> PersistentVolumeClaim {
    attempt_pvc(bundle, namespace, names, &names.install_iso_pvc, ISO_SIZE)
}

/// The build VM for `boot` (the profile's shape, `resources::profile::vm::build_vm`).
pub fn build_vm(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    boot: &BuildBoot,
) -> Result<VirtualMachine, crate::resources::profile::vm::Error> {
    let vm = (names.build_vm.as_str(), names.root_data_volume.as_str());
    attempt_vm(bundle, namespace, names, vm, boot, profile_vm::build_vm)
}

/// The validation VM for `boot` (real time, or aged 20 days).
pub fn validation_vm(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    boot: &BuildBoot,
) -> Result<VirtualMachine, crate::resources::profile::vm::Error> {
    let vm = (
        names.validation_vm.as_str(),
        names.validation_data_volume.as_str(),
    );
    attempt_vm(
        bundle,
        namespace,
        names,
        vm,
        boot,
        profile_vm::validation_vm,
    )
}

/// The NetworkPolicy around the attempt's build and validation VMs (their virt-launcher pods):
/// SSH only from the attempt's own helper pods, nothing else. A build guest's machine-config
/// server (22623) hands its rendered config, pull secret included, to whoever asks, and its API
/// knows the installer's admin; neither is for other pods.
pub fn guest_policy(bundle: &CRCBundle, namespace: &str, names: &Names) -> NetworkPolicy {
    let helpers = job_pod_labels(bundle, names.attempt, labels::COMPONENT_BUILD_HELPER);
    NetworkPolicy {
        metadata: meta(bundle, namespace, &names.guest_policy, names.attempt),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: labels::VM.to_owned(),
                    operator: "In".to_owned(),
                    values: Some(vec![names.build_vm.clone(), names.validation_vm.clone()]),
                }]),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                ports: Some(vec![NetworkPolicyPort {
                    protocol: Some("TCP".to_owned()),
                    port: Some(IntOrString::Int(GUEST_SSH_PORT)),
                    ..Default::default()
                }]),
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(helpers),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]),
            }]),
            ..Default::default()
        }),
    }
}

/// The guests' SSH port, the only one their helper pods reach.
pub const GUEST_SSH_PORT: i32 = 22;

/// The shape of one of the attempt's VMs (the profile's `shape`).
type VmShape = fn(
    &CRCBundle,
    &BuildVmNames<'_>,
    &BuildBoot,
) -> Result<VirtualMachine, crate::resources::profile::vm::Error>;

/// The attempt's VM `name` on DataVolume `root_data_volume`, in the profile's `shape`.
fn attempt_vm(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    (name, root_data_volume): (&str, &str),
    boot: &BuildBoot,
    shape: VmShape,
) -> Result<VirtualMachine, crate::resources::profile::vm::Error> {
    let attempt = names.attempt.to_string();
    shape(
        bundle,
        &BuildVmNames {
            namespace,
            name,
            attempt: &attempt,
            root_data_volume,
        },
        boot,
    )
}

/// The validation clone of the golden PVC: a CDI clone, as an instance's root disk is made (the
/// golden PVC itself is never a writable disk).
pub fn validation_data_volume(
    bundle: &CRCBundle,
    namespace: &str,
    names: &Names,
    golden_pvc: &str,
) -> DataVolume {
    // Only the validation VM uses it, and KubeVirt takes either mode: the profile decides.
    let blank = root_data_volume_of(
        bundle,
        namespace,
        names,
        (
            &names.validation_data_volume,
            &bundle.spec.golden_volume_size,
        ),
        None,
    );
    DataVolume {
        spec: DataVolumeSpec {
            source: Some(DataVolumeSourceSpec {
                pvc: Some(PvcSource {
                    namespace: namespace.to_owned(),
                    name: golden_pvc.to_owned(),
                }),
                ..Default::default()
            }),
            ..blank.spec
        },
        ..blank
    }
}

/// The CDI DataSource `<bundle>` at the golden PVC, published with the Ready bundle: plain
/// KubeVirt users boot the bundle with `sourceRef` without knowing the PVC's name.
pub fn data_source(bundle: &CRCBundle, namespace: &str) -> DataSource {
    let name = bundle.name_any();
    let mut source = DataSource::new(
        &name,
        DataSourceSpec {
            source: DataSourceSource {
                pvc: Some(PvcSource {
                    namespace: namespace.to_owned(),
                    name: super::bundle::Names::of(&name).golden_pvc,
                }),
            },
        },
    );
    source.metadata.namespace = Some(namespace.to_owned());
    source.metadata.labels = Some(bundle_labels(&name));
    source.metadata.owner_references = controller_ref(bundle).map(|r| vec![r]);
    source
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::bundle::JobSettings;
    use crate::resources::profile::golden_check_objects;
    use k8s_openapi::api::batch::v1::Job;

    fn bundle() -> CRCBundle {
        let mut bundle: CRCBundle = serde_json::from_value(serde_json::json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "CRCBundle",
            "metadata": {"name": "custom", "uid": "bundle-uid"},
            "spec": {"arch": "amd64", "storageClassName": "fast", "goldenVolumeSize": "80Gi",
                "build": {"releaseImage": "quay.io/example/release:4.22.0-x86_64",
                    "pullSecretRef": {"name": "pull"},
                    "placement": {"nodeSelector": {"builds": "yes"}}}}}))
        .unwrap();
        bundle.metadata.uid = Some("bundle-uid".into());
        bundle
    }

    #[test]
    fn attempt_objects_match_golden() {
        let bundle = bundle();
        let names = Names::of("custom", 3);
        let inputs = InstallerInputs {
            pull_secret: "{\"auths\":{\"x\":{}}}".into(),
            generator_ignition: "{}".into(),
            staging: vec![contract::StagedFile {
                path: "install-config.yaml".into(),
                text: "apiVersion: v1\n".into(),
            }],
            post_install: vec![contract::PostInstallManifest {
                source: "extra".into(),
                key: "cm.yaml".into(),
                text: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n".into(),
            }],
        };
        let objects = serde_json::json!([
            service_account(&bundle, "ops", &names),
            installer_secret(&bundle, "ops", &names, &inputs).unwrap(),
            work_pvc(&bundle, "ops", &names),
            iso_pvc(&bundle, "ops", &names),
            installer_job(
                &bundle,
                bundle.spec.build.as_ref().unwrap(),
                "ops",
                &names,
                &JobSettings::default()
            ),
        ]);
        golden_check_objects("build/attempt-objects.yaml", &objects);
        let build = bundle.spec.build.as_ref().unwrap();
        let job = |step| {
            helper_job(
                &bundle,
                build,
                "ops",
                &names,
                &HelperTarget {
                    step,
                    vmi_uid: "4c1e2f3a-0000-4000-8000-000000000001",
                    ssh_host: "vmi-address.invalid",
                    release_image: "quay.io/example/release@sha256:00",
                },
                &JobSettings::default(),
            )
        };
        let objects = serde_json::json!([
            helper_account(&bundle, "ops", &names),
            helper_role(&bundle, "ops", &names),
            helper_role_binding(&bundle, "ops", &names),
            credentials_secret(&bundle, "ops", &names),
            guest_policy(&bundle, "ops", &names),
            root_data_volume(&bundle, build, "ops", &names),
            install_iso_pvc(&bundle, "ops", &names),
            job(Step::Generator),
            job(Step::Install),
            job(Step::Certificates),
            job(Step::Customize),
            job(Step::Seal),
            disk_job(
                &bundle,
                build,
                "ops",
                &names,
                "custom-golden",
                &JobSettings::default()
            ),
        ]);
        golden_check_objects("build/install-objects.yaml", &objects);
    }

    #[test]
    fn the_guest_policy_admits_ssh_from_the_attempts_helper_pods_only() {
        let bundle = bundle();
        let build = bundle.spec.build.as_ref().unwrap();
        let names = Names::of("custom", 3);
        let policy = guest_policy(&bundle, "ops", &names).spec.unwrap();
        let selected = policy.pod_selector.unwrap().match_expressions.unwrap();
        assert_eq!(
            selected[0].values.as_deref(),
            Some(
                &[
                    "custom-b3-build".to_owned(),
                    "custom-b3-validation".to_owned()
                ][..]
            ),
            "both VMs' launcher pods"
        );
        let rules = policy.ingress.unwrap();
        assert_eq!(rules.len(), 1, "one rule: nothing but SSH");
        let port = &rules[0].ports.as_ref().unwrap()[0];
        assert_eq!(port.port, Some(IntOrString::Int(22)));
        let from = rules[0].from.as_ref().unwrap()[0]
            .pod_selector
            .clone()
            .unwrap()
            .match_labels
            .unwrap();
        let pod_labels = |job: Job| job.spec.unwrap().template.metadata.unwrap().labels.unwrap();
        let matches =
            |labels: &BTreeMap<String, String>| from.iter().all(|(k, v)| labels.get(k) == Some(v));
        let target = |step| HelperTarget {
            step,
            vmi_uid: "4c1e2f3a-0000-4000-8000-000000000001",
            ssh_host: "vmi-address.invalid",
            release_image: "quay.io/example/release@sha256:00",
        };
        let settings = JobSettings::default();
        for step in [Step::Generator, Step::Seal, Step::Validate, Step::Aged] {
            let job = helper_job(&bundle, build, "ops", &names, &target(step), &settings);
            assert!(matches(&pod_labels(job)), "{step:?} helper pods");
        }
        let installer = installer_job(&bundle, build, "ops", &names, &settings);
        let disk = disk_job(&bundle, build, "ops", &names, "custom-golden", &settings);
        assert!(!matches(&pod_labels(installer)), "the installer's pods");
        assert!(!matches(&pod_labels(disk)), "the disk Job's pods");
        let earlier = helper_job(
            &bundle,
            build,
            "ops",
            &Names::of("custom", 2),
            &target(Step::Seal),
            &settings,
        );
        assert!(
            !matches(&pod_labels(earlier)),
            "an earlier attempt's helper"
        );
    }

    #[test]
    fn names_carry_bundle_and_attempt() {
        let names = Names::of("b", 2);
        assert_eq!(names.installer_job, "b-b2-installer");
        assert_eq!(names.work_pvc, "b-b2-work");
        assert_eq!(names.iso_pvc, "b-b2-iso");
        assert_eq!(names.build_vm, "b-b2-build");
        assert_eq!(
            names.helper_job(Step::Install, "4c1e2f3a-0000-4000"),
            "b-b2-install-4c1e2f3a"
        );
    }
}
