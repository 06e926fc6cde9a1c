//! Pieces every builder uses: labels, owner references.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, ConfigMapProjection, Container, DownwardAPIProjection, DownwardAPIVolumeFile,
    EmptyDirVolumeSource, EnvVar, KeyToPath, ObjectFieldSelector, PodSecurityContext,
    ProjectedVolumeSource, ResourceRequirements, SeccompProfile, SecurityContext,
    ServiceAccountTokenProjection, Volume, VolumeMount, VolumeProjection,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::api::labels;

/// The labels every operator-created object of a bundle carries.
pub fn bundle_labels(bundle: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_OPERATOR.to_owned(),
        ),
        (labels::CRC_BUNDLE.to_owned(), bundle.to_owned()),
    ])
}

/// UID of `obj`'s controller (its owner reference with `controller: true`).
pub fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// Whether the object with UID `owner_uid` controls `obj`: only such objects are ours to use,
/// repair or delete (a same-named object may belong to someone else or a deleted namesake).
pub fn is_controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    !owner_uid.is_empty() && controller_uid(obj) == Some(owner_uid)
}

/// A controller owner reference to `owner` (which must have been read from the API: it needs a
/// UID). `blockOwnerDeletion` stays unset: the operator's RBAC need not include `finalizers`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = None;
    Some(reference)
}

/// Where a Job's container may write besides its volumes: an `emptyDir`, since the root
/// filesystem is read-only. `TMPDIR` and `HOME` point here (qemu-img's and the installer's
/// temporary files and caches).
pub const TMP_DIR: &str = "/tmp";
const TMP_VOLUME: &str = "tmp";
/// The image's non-root user (see `Containerfile`).
pub const JOB_USER: i64 = 1001;

/// What a Job's container asks for and may use. No CPU limit: a throttled copy or install only
/// takes longer, while memory past the limit is a clear `OOMKilled`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct JobResources {
    pub cpu_request: &'static str,
    pub memory_request: &'static str,
    pub memory_limit: &'static str,
}

impl JobResources {
    /// The agent, the helper steps, the download and the disk copy: SSH, HTTP, hashing.
    pub const LIGHT: Self = Self {
        cpu_request: "100m",
        memory_request: "128Mi",
        memory_limit: "1Gi",
    };
    /// The installer: `openshift-install` and `coreos-installer` over a release payload.
    pub const INSTALLER: Self = Self {
        cpu_request: "500m",
        memory_request: "1Gi",
        memory_limit: "4Gi",
    };
}

/// Who a Job's pod runs as: what the platform decides, so the same Jobs are admitted on OpenShift
/// and on plain Kubernetes (docs/decisions.md, "Pod users").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum PodUsers {
    /// Plain Kubernetes: the pod names the image's user ([`JOB_USER`]) and group-owns its volumes
    /// by it (`fsGroup`), as Pod Security `restricted` allows.
    #[default]
    Fixed,
    /// OpenShift: `restricted-v2` assigns the UID and `fsGroup` from the namespace's range and
    /// refuses any other, so the pod names neither.
    Assigned,
}

/// The group QEMU (virt-launcher) and CDI's pods run as: a disk CDI wrote is `107:107`, `0660`.
pub const QEMU_GROUP: i64 = 107;

/// The pod-level half of Pod Security `restricted`: a non-root user, the runtime's seccomp
/// profile, volumes group-owned by the pod's group; `supplemental_groups` for files owned by
/// another pod's group (a disk of CDI's, read through a read-only mount that keeps its owner).
pub fn restricted_pod(users: PodUsers, supplemental_groups: &[i64]) -> PodSecurityContext {
    let fixed = (users == PodUsers::Fixed).then_some(JOB_USER);
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: fixed,
        fs_group: fixed,
        supplemental_groups: (!supplemental_groups.is_empty())
            .then(|| supplemental_groups.to_vec()),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The writable scratch directory every Job's pod declares (see [`TMP_DIR`]).
/// The service account credentials as a volume, for a pod with
/// `automountServiceAccountToken: false` to mount in the one container that talks to the API:
/// what the kubelet would otherwise mount in every container (token, cluster CA, namespace).
pub const API_ACCESS_VOLUME: &str = "kube-api-access";
pub const API_ACCESS_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

pub fn api_access_volume() -> Volume {
    Volume {
        name: API_ACCESS_VOLUME.to_owned(),
        projected: Some(ProjectedVolumeSource {
            default_mode: Some(0o444),
            sources: Some(vec![
                VolumeProjection {
                    service_account_token: Some(ServiceAccountTokenProjection {
                        path: "token".to_owned(),
                        expiration_seconds: Some(3607),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    config_map: Some(ConfigMapProjection {
                        name: "kube-root-ca.crt".to_owned(),
                        items: Some(vec![KeyToPath {
                            key: "ca.crt".to_owned(),
                            path: "ca.crt".to_owned(),
                            ..Default::default()
                        }]),
                        optional: None,
                    }),
                    ..Default::default()
                },
                VolumeProjection {
                    downward_api: Some(DownwardAPIProjection {
                        items: Some(vec![DownwardAPIVolumeFile {
                            path: "namespace".to_owned(),
                            field_ref: Some(ObjectFieldSelector {
                                api_version: Some("v1".to_owned()),
                                field_path: "metadata.namespace".to_owned(),
                            }),
                            ..Default::default()
                        }]),
                    }),
                    ..Default::default()
                },
            ]),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub fn api_access_mount() -> VolumeMount {
    VolumeMount {
        name: API_ACCESS_VOLUME.to_owned(),
        mount_path: API_ACCESS_DIR.to_owned(),
        read_only: Some(true),
        ..Default::default()
    }
}

pub fn tmp_volume() -> Volume {
    Volume {
        name: TMP_VOLUME.to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity("1Gi".to_owned())),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The container of one of our Jobs: `guestcluster <subcommand>` from `image`, with the
/// termination message the operator reads back (the file, or the log tail if the process died
/// before writing it), the container half of Pod Security `restricted` (no privilege
/// escalation, every capability dropped), a read-only root filesystem with [`TMP_DIR`] mounted
/// writable (the pod must declare [`tmp_volume`]), and `resources`.
pub fn job_container(
    name: &str,
    image: &str,
    subcommand: &str,
    mut env: Vec<EnvVar>,
    mut mounts: Vec<VolumeMount>,
    resources: JobResources,
) -> Container {
    for var in ["TMPDIR", "HOME"] {
        env.push(EnvVar {
            name: var.to_owned(),
            value: Some(TMP_DIR.to_owned()),
            ..Default::default()
        });
    }
    mounts.push(VolumeMount {
        name: TMP_VOLUME.to_owned(),
        mount_path: TMP_DIR.to_owned(),
        ..Default::default()
    });
    let quantity = |q: &str| Quantity(q.to_owned());
    Container {
        name: name.to_owned(),
        image: Some(image.to_owned()),
        args: Some(vec![subcommand.to_owned()]),
        env: Some(env),
        volume_mounts: Some(mounts),
        termination_message_path: Some(crate::contract::termination::DEFAULT_PATH.to_owned()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".to_owned()]),
                add: None,
            }),
            read_only_root_filesystem: Some(true),
            ..Default::default()
        }),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".to_owned(), quantity(resources.cpu_request)),
                ("memory".to_owned(), quantity(resources.memory_request)),
            ])),
            limits: Some(BTreeMap::from([(
                "memory".to_owned(),
                quantity(resources.memory_limit),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `volumeMode` of a volume a Job reads or writes as a file (`docs/decisions.md`, "Volume
/// modes").
pub const FILESYSTEM: &str = "Filesystem";

/// The access mode of a volume one pod or VM uses at a time.
pub const READ_WRITE_ONCE: &str = "ReadWriteOnce";

#[cfg(test)]
mod containerfile_tests {
    /// The image the Jobs run: what the pods' settings assume of it.
    const CONTAINERFILE: &str = include_str!("../../Containerfile");

    #[test]
    fn the_image_runs_as_the_job_user_with_the_tools_the_jobs_call() {
        let lines: Vec<&str> = CONTAINERFILE.lines().map(str::trim).collect();
        let user = super::JOB_USER;
        assert!(
            lines.contains(&format!("USER {user}:0").as_str()),
            "the image's user is the pods' runAsUser {user}, in group 0 as OpenShift's arbitrary UIDs are"
        );
        // Job containers give only args (`agent`, `bundle-prep`, …): the entrypoint is the binary.
        assert!(lines.contains(&r#"ENTRYPOINT ["/usr/local/bin/guestcluster"]"#));
        for needed in [
            "qemu-utils",        // qemu-img: the prep and disk Jobs
            "ca-certificates",   // https downloads and registry pulls
            "/usr/local/bin oc", // the installer Job's `oc adm release`
            "/usr/local/bin/coreos-installer",
            "/usr/local/bin/guestcluster",
        ] {
            assert!(
                CONTAINERFILE.contains(needed),
                "the image provides {needed}"
            );
        }
    }
}
