//! The build's Jobs: the installer, a helper per guest step, and the disk copy; each restricted,
//! without an API token unless its step needs one.

#[allow(unused_imports)]
use super::*;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    Container, EnvVar, KeyToPath, PersistentVolumeClaimVolumeSource, PodSpec, PodTemplateSpec,
    SecretVolumeSource, Volume, VolumeMount,
};

use crate::api::bundle::BuildSpec;
use crate::contract::build_helper::{self as helper_contract, Step};
use crate::contract::disk as disk_contract;
use crate::contract::installer as contract;
use crate::contract::termination;
use crate::resources::bundle::JobSettings;
use crate::resources::common::{
    JobResources, PodUsers, QEMU_GROUP, job_container, restricted_pod, tmp_volume,
};

/// The installer Job: `guestcluster installer`, no privileges, no `/dev/kvm`, no API token,
/// within the build's placement.
pub fn installer_job(
    bundle: &CRCBundle,
    build: &BuildSpec,
    namespace: &str,
    names: &Names,
    settings: &JobSettings,
) -> Job {
    let env = env_vars([
        (contract::ENV_RELEASE_IMAGE, build.release_image.clone()),
        (contract::ENV_ARCH, bundle.spec.arch.as_str().to_owned()),
        (contract::ENV_INPUTS_DIR, INPUTS_DIR.to_owned()),
        (contract::ENV_WORK_DIR, WORK_DIR.to_owned()),
        (contract::ENV_ISO_DIR, ISO_DIR.to_owned()),
        (termination::ENV_PATH, termination::DEFAULT_PATH.to_owned()),
    ]);
    let mounts = vec![
        mount("inputs", INPUTS_DIR, true),
        mount("work", WORK_DIR, false),
        mount("iso", ISO_DIR, false),
    ];
    restricted_job(
        bundle,
        build,
        namespace,
        names,
        JobShape {
            name: &names.installer_job,
            component: labels::COMPONENT_BUILD_INSTALLER,
            service_account: &names.service_account,
            api_token: false,
            backoff_limit: INSTALLER_BACKOFF_LIMIT,
            deadline_seconds: INSTALLER_DEADLINE_SECONDS,
            container: job_container(
                "installer",
                &settings.image,
                "installer",
                env,
                mounts,
                JobResources::INSTALLER,
            ),
            volumes: vec![
                secret_volume("inputs", &names.installer_secret),
                claim_volume("work", &names.work_pvc),
                claim_volume("iso", &names.iso_pvc),
            ],
            pod_users: settings.pod_users,
            supplemental_groups: &[],
        },
    )
}

/// What differs between the build's Jobs; `restricted_job` adds what they share.
struct JobShape<'a> {
    name: &'a str,
    /// The pod's `opdev.io/component` label.
    component: &'static str,
    service_account: &'a str,
    /// Whether the pod gets its account's token (only the helper talks to the API server).
    api_token: bool,
    backoff_limit: i32,
    deadline_seconds: i64,
    container: Container,
    volumes: Vec<Volume>,
    pod_users: PodUsers,
    /// Groups beyond the pod's own (see [`restricted_pod`]).
    supplemental_groups: &'a [i64],
}

/// A build Job: one non-root container, `RuntimeDefault` seccomp, the attempt's labels and its
/// component on its pod, within the build's placement.
fn restricted_job(
    bundle: &CRCBundle,
    build: &BuildSpec,
    namespace: &str,
    names: &Names,
    shape: JobShape<'_>,
) -> Job {
    let placement = build.placement.clone().unwrap_or_default();
    Job {
        metadata: meta(bundle, namespace, shape.name, names.attempt),
        spec: Some(JobSpec {
            backoff_limit: Some(shape.backoff_limit),
            active_deadline_seconds: Some(shape.deadline_seconds),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(job_pod_labels(bundle, names.attempt, shape.component)),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    service_account_name: Some(shape.service_account.to_owned()),
                    automount_service_account_token: (!shape.api_token).then_some(false),
                    security_context: Some(restricted_pod(
                        shape.pod_users,
                        shape.supplemental_groups,
                    )),
                    containers: vec![shape.container],
                    volumes: Some(shape.volumes.into_iter().chain([tmp_volume()]).collect()),
                    node_selector: (!placement.node_selector.is_empty())
                        .then_some(placement.node_selector),
                    tolerations: (!placement.tolerations.is_empty())
                        .then_some(placement.tolerations),
                    affinity: placement.affinity,
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn env_vars<const N: usize>(pairs: [(&str, String); N]) -> Vec<EnvVar> {
    pairs
        .into_iter()
        .map(|(name, value)| EnvVar {
            name: name.to_owned(),
            value: Some(value),
            ..Default::default()
        })
        .collect()
}

fn mount(volume: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: read_only.then_some(true),
        ..Default::default()
    }
}

fn claim_volume(volume: &str, claim: &str) -> Volume {
    Volume {
        name: volume.to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_owned(),
            read_only: None,
        }),
        ..Default::default()
    }
}

/// A Secret volume readable by its owner only.
fn secret_volume(volume: &str, secret: &str) -> Volume {
    Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            default_mode: Some(0o400),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Where the helper Job mounts its volumes.
pub const HELPER_KEY_DIR: &str = "/ssh";
pub const HELPER_CREDENTIALS_DIR: &str = "/credentials";
/// The helper's limits per step: the install boot waits for an install of up to an hour or two;
/// the other steps take minutes. One retry (a new pod) for a transient failure.
pub const HELPER_BACKOFF_LIMIT: i32 = 1;
pub fn helper_deadline_seconds(step: Step) -> i64 {
    match step {
        Step::Generator => 3600,
        Step::Install => 3 * 3600,
        Step::Certificates => 3600,
        // Several MachineConfig rollouts, each a drain and a reboot on real hardware.
        Step::Customize | Step::Seal => 2 * 3600,
        // The startup path waits up to 20 minutes for operators, then for the version.
        Step::Validate | Step::Aged => 3600,
    }
}

/// What a helper Job is started for.
pub struct HelperTarget<'a> {
    pub step: Step,
    pub vmi_uid: &'a str,
    /// The VMI's address.
    pub ssh_host: &'a str,
    /// The release pinned by the installer Job.
    pub release_image: &'a str,
}

/// The helper Job of one step and VMI: `guestcluster build-helper` with the bundle key, and the
/// volumes its step needs (generator: work and install ISO volumes; later steps: the credentials
/// Secret).
pub fn helper_job(
    bundle: &CRCBundle,
    build: &BuildSpec,
    namespace: &str,
    names: &Names,
    target: &HelperTarget<'_>,
    settings: &JobSettings,
) -> Job {
    let key_secret = crate::resources::bundle::Names::of(&names.bundle).ssh_secret;
    let key_path = format!(
        "{HELPER_KEY_DIR}/{}",
        crate::contract::bundle_prep::SECRET_KEY
    );
    let mut env = env_vars([
        (helper_contract::ENV_STEP, target.step.as_str().to_owned()),
        (helper_contract::ENV_NAMESPACE, namespace.to_owned()),
        (
            helper_contract::ENV_VM_NAME,
            names.vm_of(target.step).to_owned(),
        ),
        (helper_contract::ENV_VMI_UID, target.vmi_uid.to_owned()),
        (helper_contract::ENV_SSH_HOST, target.ssh_host.to_owned()),
        (helper_contract::ENV_SSH_KEY_PATH, key_path),
        (
            helper_contract::ENV_RELEASE_IMAGE,
            target.release_image.to_owned(),
        ),
        (
            helper_contract::ENV_CREDENTIALS_SECRET,
            names.credentials_secret.clone(),
        ),
        (
            helper_contract::ENV_SETTLE_INTERVAL_MS,
            settings.settle.interval.as_millis().to_string(),
        ),
        (termination::ENV_PATH, termination::DEFAULT_PATH.to_owned()),
    ]);
    let mut mounts = vec![mount("ssh", HELPER_KEY_DIR, true)];
    let mut volumes = vec![secret_volume("ssh", &key_secret)];
    match target.step {
        Step::Generator => {
            env.extend(env_vars([
                (helper_contract::ENV_WORK_DIR, WORK_DIR.to_owned()),
                (helper_contract::ENV_ISO_DIR, ISO_DIR.to_owned()),
            ]));
            mounts.push(mount("work", WORK_DIR, true));
            mounts.push(mount("install-iso", ISO_DIR, false));
            volumes.push(claim_volume("work", &names.work_pvc));
            volumes.push(claim_volume("install-iso", &names.install_iso_pvc));
        }
        Step::Validate | Step::Aged => {}
        Step::Install | Step::Certificates | Step::Customize | Step::Seal => {
            env.extend(env_vars([(
                helper_contract::ENV_CREDENTIALS_DIR,
                HELPER_CREDENTIALS_DIR.to_owned(),
            )]));
            mounts.push(mount("credentials", HELPER_CREDENTIALS_DIR, true));
            volumes.push(secret_volume("credentials", &names.credentials_secret));
        }
    }
    // Of the installer Secret, only the key the step needs: Customize never sees the pull
    // secret, the validation steps (which inject it, as the crc-agent does) nothing else.
    let input_key = match target.step {
        Step::Customize => Some(contract::KEY_POST_INSTALL),
        Step::Validate | Step::Aged => Some(contract::KEY_PULL_SECRET),
        _ => None,
    };
    if let Some(key) = input_key {
        env.extend(env_vars([(
            helper_contract::ENV_INPUTS_DIR,
            INPUTS_DIR.to_owned(),
        )]));
        mounts.push(mount("inputs", INPUTS_DIR, true));
        let mut inputs = secret_volume("inputs", &names.installer_secret);
        if let Some(secret) = inputs.secret.as_mut() {
            secret.items = Some(vec![KeyToPath {
                key: key.to_owned(),
                path: key.to_owned(),
                mode: None,
                user: None,
            }]);
        }
        volumes.push(inputs);
    }
    let name = names.helper_job(target.step, target.vmi_uid);
    restricted_job(
        bundle,
        build,
        namespace,
        names,
        JobShape {
            name: &name,
            component: labels::COMPONENT_BUILD_HELPER,
            service_account: &names.helper,
            api_token: true,
            backoff_limit: HELPER_BACKOFF_LIMIT,
            deadline_seconds: helper_deadline_seconds(target.step),
            container: job_container(
                "build-helper",
                &settings.image,
                "build-helper",
                env,
                mounts,
                JobResources::LIGHT,
            ),
            volumes,
            pod_users: settings.pod_users,
            supplemental_groups: &[],
        },
    )
}

/// Where the disk Job mounts the build's root disk and the golden PVC.
pub const DISK_SOURCE_DIR: &str = "/source";
pub const DISK_TARGET_DIR: &str = "/golden";
/// A sparse copy of a disk of tens of GiB: minutes; an hour is a stuck volume.
pub const DISK_DEADLINE_SECONDS: i64 = 3600;
pub const DISK_BACKOFF_LIMIT: i32 = 2;

/// The Publish stage's Job: `guestcluster disk` copies the stopped build VM's root disk
/// (read-only) into the golden PVC. No API token: it reports through its termination message.
pub fn disk_job(
    bundle: &CRCBundle,
    build: &BuildSpec,
    namespace: &str,
    names: &Names,
    golden_pvc: &str,
    settings: &JobSettings,
) -> Job {
    let env = env_vars([
        (disk_contract::ENV_SOURCE_DIR, DISK_SOURCE_DIR.to_owned()),
        (disk_contract::ENV_TARGET_DIR, DISK_TARGET_DIR.to_owned()),
        (termination::ENV_PATH, termination::DEFAULT_PATH.to_owned()),
    ]);
    let mounts = vec![
        mount("source", DISK_SOURCE_DIR, true),
        mount("golden", DISK_TARGET_DIR, false),
    ];
    let mut source = claim_volume("source", &names.root_data_volume);
    if let Some(claim) = source.persistent_volume_claim.as_mut() {
        claim.read_only = Some(true);
    }
    restricted_job(
        bundle,
        build,
        namespace,
        names,
        JobShape {
            name: &names.disk_job,
            component: labels::COMPONENT_BUILD_DISK,
            service_account: &names.service_account,
            api_token: false,
            backoff_limit: DISK_BACKOFF_LIMIT,
            deadline_seconds: DISK_DEADLINE_SECONDS,
            container: job_container(
                "disk",
                &settings.image,
                "disk",
                env,
                mounts,
                JobResources::LIGHT,
            ),
            volumes: vec![source, claim_volume("golden", golden_pvc)],
            pod_users: settings.pod_users,
            // The root disk is CDI's (`107:107`, `0660`); the read-only mount keeps its owner.
            supplemental_groups: &[QEMU_GROUP],
        },
    )
}
