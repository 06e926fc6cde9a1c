//! Objects of a download-sourced CRCBundle, in the operator namespace (`docs/operations.md`,
//! "CRCBundle (download source)"): the golden and scratch PVCs and the prep Job, plus the names
//! of what the Job publishes.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnExitCodesRequirement, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::Volume;
use k8s_openapi::api::core::v1::{
    EnvVar, PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
    PodSpec, PodTemplateSpec, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::common::{
    JobResources, PodUsers, api_access_mount, api_access_volume, bundle_labels, controller_ref,
    job_container, restricted_pod, tmp_volume,
};
use crate::api::CRCBundle;
use crate::api::common::Arch;
use crate::contract::bundle_prep as prep;
use crate::contract::termination;

/// Default mirror of the published bundles.
const MIRROR: &str = "https://mirror.openshift.com/pub/openshift-v4/clients/crc/bundles/openshift";
/// Size of the scratch PVC the archive is downloaded and extracted into.
pub const SCRATCH_SIZE: &str = "40Gi";
/// Where the prep Job mounts the golden and scratch PVCs.
pub const GOLDEN_DIR: &str = "/golden";
pub const SCRATCH_DIR: &str = "/work";
/// Prep Job limits (upstream: backoffLimit 2, 2 h).
pub const PREP_BACKOFF_LIMIT: i32 = 2;
/// The container's termination message file (the Kubernetes default, stated explicitly).
pub const TERMINATION_MESSAGE_PATH: &str = termination::DEFAULT_PATH;
pub const PREP_DEADLINE_SECONDS: i64 = 7200;

/// Name of the CRCBundle published for `crcVersion`: `crc-<version>-<arch>`.
pub fn published_bundle_name(version: &str, arch: Arch) -> String {
    format!("crc-{version}-{arch}")
}

/// Names of a bundle's objects: `<bundle>-golden`, `-scratch`, `-prep`, `-ssh-key`, `-metadata`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    pub golden_pvc: String,
    pub scratch_pvc: String,
    pub prep_job: String,
    pub ssh_secret: String,
    pub metadata: String,
}

impl Names {
    pub fn of(bundle: &str) -> Self {
        Self {
            golden_pvc: format!("{bundle}-golden"),
            scratch_pvc: format!("{bundle}-scratch"),
            prep_job: format!("{bundle}-prep"),
            ssh_secret: format!("{bundle}-ssh-key"),
            metadata: format!("{bundle}-metadata"),
        }
    }
}

/// Where the prep Job downloads from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Urls {
    pub bundle: String,
    pub sha256: String,
}

/// The archive and checksum URLs: `spec.bundleURL`/`sha256URL`, each defaulting to the mirror.
pub fn urls(bundle: &CRCBundle) -> Option<Urls> {
    let version = bundle.spec.version.as_deref()?;
    let arch = bundle.spec.arch;
    Some(Urls {
        bundle: bundle
            .spec
            .bundle_url
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| {
                format!("{MIRROR}/{version}/crc_libvirt_{version}_{arch}.crcbundle")
            }),
        sha256: bundle
            .spec
            .sha256_url
            .clone()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| format!("{MIRROR}/{version}/sha256sum.txt")),
    })
}

/// How the operator runs its Jobs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobSettings {
    /// The image holding the `guestcluster` binary (and qemu-img).
    pub image: String,
    /// Service account of the prep Job (needs Secrets and ConfigMaps in the operator namespace).
    pub prep_service_account: String,
    /// Who the Jobs' pods run as (`--platform`).
    pub pod_users: PodUsers,
    /// How a build's helper recognises a settled guest cluster (`--build-settle-interval`).
    pub settle: crate::contract::build_helper::Settle,
    /// The release repositories builds may use (`--build-release-repositories`).
    pub release_repositories: crate::tools::release::ReleaseRepositories,
}

/// Image of the operator's Jobs unless configured (`--job-image`).
pub const DEFAULT_JOB_IMAGE: &str = "quay.io/opdev/guestcluster:latest";

impl Default for JobSettings {
    fn default() -> Self {
        Self {
            image: DEFAULT_JOB_IMAGE.to_owned(),
            prep_service_account: "bundle-prep".to_owned(),
            pod_users: PodUsers::default(),
            settle: crate::contract::build_helper::Settle::UPSTREAM,
            release_repositories: Default::default(),
        }
    }
}

pub(super) fn pvc(
    name: &str,
    bundle: &CRCBundle,
    namespace: &str,
    size: &str,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: Some(namespace.to_owned()),
            labels: Some(bundle_labels(&bundle.name_any())),
            owner_references: controller_ref(bundle).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec![super::common::READ_WRITE_ONCE.to_owned()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".to_owned(),
                    Quantity(size.to_owned()),
                )])),
                ..Default::default()
            }),
            storage_class_name: bundle
                .spec
                .storage_class_name
                .clone()
                .filter(|s| !s.is_empty()),
            // Jobs write and read these as files (the API default, said out loud: a plain PVC
            // never takes a StorageProfile's mode).
            volume_mode: Some(super::common::FILESYSTEM.to_owned()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The golden PVC: `/disk.img` (raw) once prepared. No CDI annotations: it is a plain clone source.
pub fn golden_pvc(bundle: &CRCBundle, namespace: &str) -> PersistentVolumeClaim {
    let names = Names::of(&bundle.name_any());
    pvc(
        &names.golden_pvc,
        bundle,
        namespace,
        &bundle.spec.golden_volume_size,
    )
}

/// The scratch PVC the archive is downloaded and extracted into; deleted once Ready.
pub fn scratch_pvc(bundle: &CRCBundle, namespace: &str) -> PersistentVolumeClaim {
    let names = Names::of(&bundle.name_any());
    pvc(&names.scratch_pvc, bundle, namespace, SCRATCH_SIZE)
}

/// The prep Job: `guestcluster bundle-prep` with the golden and scratch PVCs mounted.
pub fn prep_job(bundle: &CRCBundle, namespace: &str, urls: &Urls, settings: &JobSettings) -> Job {
    let name = bundle.name_any();
    let names = Names::of(&name);
    let labels = bundle_labels(&name);
    // Admission guarantees a quantity; an unparsable one sets no limit rather than a wrong one.
    let golden_bytes =
        crate::resources::instance::parse_quantity_bytes(&bundle.spec.golden_volume_size)
            .map_or_else(|_| u64::MAX.to_string(), |b| b.to_string());
    let env: Vec<EnvVar> = [
        (prep::ENV_BUNDLE_URL, urls.bundle.as_str()),
        (prep::ENV_SHA256_URL, urls.sha256.as_str()),
        (prep::ENV_NAMESPACE, namespace),
        (prep::ENV_BUNDLE_NAME, name.as_str()),
        (
            prep::ENV_BUNDLE_UID,
            bundle.metadata.uid.as_deref().unwrap_or_default(),
        ),
        (prep::ENV_SSH_SECRET_NAME, names.ssh_secret.as_str()),
        (prep::ENV_METADATA_CONFIGMAP_NAME, names.metadata.as_str()),
        (prep::ENV_GOLDEN_DIR, GOLDEN_DIR),
        (prep::ENV_SCRATCH_DIR, SCRATCH_DIR),
        (prep::ENV_GOLDEN_VOLUME_BYTES, golden_bytes.as_str()),
        (
            prep::ENV_ALLOW_HTTP,
            if bundle.spec.allow_http {
                "true"
            } else {
                "false"
            },
        ),
        // Where the failure reason goes, so the operator can surface it from the pod status.
        (termination::ENV_PATH, TERMINATION_MESSAGE_PATH),
    ]
    .into_iter()
    .map(|(name, value)| EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..Default::default()
    })
    .collect();
    let staged = |stage: &str| {
        let mut env = env.clone();
        env.push(EnvVar {
            name: prep::ENV_STAGE.to_owned(),
            value: Some(stage.to_owned()),
            ..Default::default()
        });
        env
    };
    let volume = |volume: &str, claim: &str| Volume {
        name: volume.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_owned(),
            read_only: None,
        }),
        ..Default::default()
    };
    let mount = |volume: &str, path: &str| VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        ..Default::default()
    };
    Job {
        metadata: ObjectMeta {
            name: Some(names.prep_job.clone()),
            namespace: Some(namespace.to_owned()),
            labels: Some(labels.clone()),
            owner_references: controller_ref(bundle).map(|r| vec![r]),
            ..Default::default()
        },
        spec: Some(JobSpec {
            backoff_limit: Some(PREP_BACKOFF_LIMIT),
            pod_failure_policy: Some(permanent_failures()),
            active_deadline_seconds: Some(PREP_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    service_account_name: Some(settings.prep_service_account.clone()),
                    // Only the publishing container gets the token (mounted explicitly): the
                    // one unpacking and converting downloaded data cannot write Secrets.
                    automount_service_account_token: Some(false),
                    security_context: Some(restricted_pod(settings.pod_users, &[])),
                    init_containers: Some(vec![job_container(
                        PREP_FETCH_CONTAINER,
                        &settings.image,
                        "bundle-prep",
                        staged(prep::STAGE_FETCH),
                        vec![mount("golden", GOLDEN_DIR), mount("scratch", SCRATCH_DIR)],
                        JobResources::LIGHT,
                    )]),
                    containers: vec![job_container(
                        PREP_PUBLISH_CONTAINER,
                        &settings.image,
                        "bundle-prep",
                        staged(prep::STAGE_PUBLISH),
                        vec![mount("scratch", SCRATCH_DIR), api_access_mount()],
                        JobResources::LIGHT,
                    )],
                    volumes: Some(vec![
                        volume("golden", &names.golden_pvc),
                        volume("scratch", &names.scratch_pvc),
                        tmp_volume(),
                        api_access_volume(),
                    ]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The prep Job's init container: download, checks, unpacking and `qemu-img`, without a token.
pub const PREP_FETCH_CONTAINER: &str = "fetch";
/// The prep Job's container: the Secret and ConfigMap, with the token.
pub const PREP_PUBLISH_CONTAINER: &str = "bundle-prep";

/// Bad input (a checksum mismatch, an unsafe archive, …) fails the Job at once; only failures a
/// retry can fix (network, storage) use the backoff limit.
fn permanent_failures() -> PodFailurePolicy {
    let codes = prep::PERMANENT_REASONS
        .iter()
        .filter_map(|r| prep::exit_code_of(r))
        .map(i32::from)
        .collect();
    PodFailurePolicy {
        rules: vec![PodFailurePolicyRule {
            action: "FailJob".to_owned(),
            // Either container: both report the same reasons and exit codes.
            on_exit_codes: Some(PodFailurePolicyOnExitCodesRequirement {
                container_name: None,
                operator: "In".to_owned(),
                values: codes,
            }),
            on_pod_conditions: None,
        }],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::CRCBundleSpec;
    use crate::resources::common::API_ACCESS_DIR;

    fn bundle(spec: serde_json::Value) -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(spec).unwrap();
        let mut b = CRCBundle::new("crc-4.16.0-amd64", spec);
        b.metadata.uid = Some("uid-1".into());
        b
    }

    fn settings() -> JobSettings {
        JobSettings {
            image: "quay.io/opdev/guestcluster:v0.1.0".into(),
            prep_service_account: "bundle-prep".into(),
            ..JobSettings::default()
        }
    }

    #[test]
    fn urls_default_to_the_mirror_and_can_be_overridden_independently() {
        let default = urls(&bundle(serde_json::json!({"version": "4.16.0"}))).unwrap();
        assert_eq!(
            default.bundle,
            "https://mirror.openshift.com/pub/openshift-v4/clients/crc/bundles/openshift/4.16.0/crc_libvirt_4.16.0_amd64.crcbundle"
        );
        assert_eq!(
            default.sha256,
            "https://mirror.openshift.com/pub/openshift-v4/clients/crc/bundles/openshift/4.16.0/sha256sum.txt"
        );
        let mirrored = urls(&bundle(
            serde_json::json!({"version": "4.16.0", "bundleURL": "http://m/b.crcbundle"}),
        ))
        .unwrap();
        assert_eq!(mirrored.bundle, "http://m/b.crcbundle");
        assert!(mirrored.sha256.ends_with("/4.16.0/sha256sum.txt"));
    }

    #[test]
    fn only_the_publishing_container_of_the_prep_job_holds_the_token() {
        let b = bundle(serde_json::json!({"version": "4.16.0"}));
        let job = prep_job(&b, "guestcluster-system", &urls(&b).unwrap(), &settings());
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.automount_service_account_token, Some(false));
        let mounts = |c: &k8s_openapi::api::core::v1::Container| -> Vec<String> {
            c.volume_mounts
                .iter()
                .flatten()
                .map(|m| m.mount_path.clone())
                .collect()
        };
        let stage = |c: &k8s_openapi::api::core::v1::Container| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == prep::ENV_STAGE)
                .and_then(|e| e.value.clone())
        };
        let init = pod.init_containers.unwrap();
        let [fetch] = init.as_slice() else {
            panic!("one init container: {init:?}")
        };
        assert_eq!(fetch.name, PREP_FETCH_CONTAINER);
        assert_eq!(stage(fetch).as_deref(), Some(prep::STAGE_FETCH));
        assert!(
            !mounts(fetch).contains(&API_ACCESS_DIR.to_owned()),
            "fetch has no token"
        );
        assert!(mounts(fetch).contains(&GOLDEN_DIR.to_owned()));
        let [publish] = pod.containers.as_slice() else {
            panic!("one container")
        };
        assert_eq!(stage(publish).as_deref(), Some(prep::STAGE_PUBLISH));
        assert!(mounts(publish).contains(&API_ACCESS_DIR.to_owned()));
        assert!(
            !mounts(publish).contains(&GOLDEN_DIR.to_owned()),
            "publishing needs no disk"
        );
    }

    #[test]
    fn prep_job_matches_golden_yaml() {
        let b = bundle(serde_json::json!({"version": "4.16.0", "storageClassName": "fast"}));
        let job = prep_job(&b, "guestcluster-system", &urls(&b).unwrap(), &settings());
        let objects = serde_json::json!([
            golden_pvc(&b, "guestcluster-system"),
            scratch_pvc(&b, "guestcluster-system"),
            job
        ]);
        let rendered = serde_saphyr::to_string(&objects).unwrap();
        let golden_path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src/resources/golden/bundle-download.yaml"
        );
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(golden_path, &rendered).unwrap();
        }
        let golden = std::fs::read_to_string(golden_path)
            .unwrap_or_else(|_| panic!("missing {golden_path}; run `UPDATE_GOLDEN=1 cargo test --lib resources` and review it"));
        assert_eq!(
            rendered, golden,
            "builders changed; review and run `UPDATE_GOLDEN=1 cargo test --lib resources`"
        );
    }

    #[test]
    fn empty_storage_class_means_the_default() {
        let b = bundle(serde_json::json!({"version": "4.16.0", "storageClassName": ""}));
        let pvc = golden_pvc(&b, "ns");
        assert_eq!(pvc.spec.unwrap().storage_class_name, None);
    }
}
