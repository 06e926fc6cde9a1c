//! The build source of a CRCBundle: one pass of the bundle's actor for a bundle with
//! `spec.build`. Observe (the inputs while they matter, the recorded temporary objects, the
//! installer Job's child report), decide ([`decide::decide`], pure), write the status ahead of
//! the actions, act, record the UIDs created, then start or stop the stage children from what
//! is recorded.

pub mod admit;
pub mod decide;
pub mod stage_times;
pub mod stages;
pub mod teardown;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::api::PropagationPolicy;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::actors::bundle::build_source::stages::build_vm::{BuildVmStage, ValidationClone};
use crate::actors::bundle::build_source::stages::disk_copy::DiskCopy;
use crate::actors::bundle::build_source::stages::guest_session::GuestSession;
use crate::actors::bundle::build_source::stages::installer_job::InstallerJob;
use crate::actors::bundle::download::JobState;
use crate::actors::runtime::context::Context;
use crate::actors::runtime::object_actor::Next;
use crate::actors::runtime::stage::children::Children;
use crate::actors::runtime::stage::{Stage, judge, judge_meta, meta_controlled_by};
use crate::api::bundle::{
    BuildSpec, BuildStage, CRCBundle, CRCBundleStatus, ManifestRef, ManifestSourceKind,
};
use crate::api::labels::FINALIZER_BUILD;
use crate::cdi::{DataSource, DataVolume};
use crate::contract::bundle_prep::SECRET_KEY;
use crate::contract::installer::{PostInstallManifest, StagedFile};
use crate::guest::keys;
use crate::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance};
use crate::resources;
use crate::resources::build::{InstallerInputs, Names};
use crate::resources::common::{bundle_labels, controller_ref, is_controlled_by};
use crate::resources::profile::inputs::SshPublicKey;
use crate::resources::profile::vm::{AGED_SECONDS, BuildBoot, DAY_BEHIND_SECONDS};
use crate::resources::profile::{ignition, install_config, manifests};
use crate::write;
use admit::Admitted;
use decide::{Action, Decision, Observed, Owned, Temp, VmRole};

/// The key of the bundle key Secret's public half.
pub const PUBLIC_KEY: &str = "id_ecdsa.pub";

/// Errors of a build pass; each is retried by the bundle's actor (the attempt does not fail on
/// them: they are the API's or the operator's, not the build's).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {what} for CRCBundle {name}: {source}")]
    Observe {
        name: String,
        what: String,
        source: kube::Error,
    },
    #[error("{action:?} for CRCBundle {name}: {source}")]
    Act {
        name: String,
        action: Action,
        source: kube::Error,
    },
    #[error("updating the finalizers of CRCBundle {name}: {source}")]
    Finalizer { name: String, source: kube::Error },
    #[error("rendering the installer inputs of CRCBundle {name}: {detail}")]
    Render { name: String, detail: String },
    #[error(transparent)]
    Status(#[from] crate::actors::bundle::Error),
}

/// One build pass.
pub async fn pass(
    cached: &CRCBundle,
    ctx: &Arc<Context>,
    children: &mut Children,
) -> Result<Next, Error> {
    let name = cached.name_any();
    // The status is written ahead of every object and applied whole: never decide on a cache
    // that may not show our last write (it would name, or even start, an attempt again).
    let Some(bundle) = crate::actors::bundle::current(ctx, cached).await? else {
        // Deleted: the supervisor stops us.
        return Ok(Next::Done);
    };
    let bundle = bundle.as_ref();
    let finalized = bundle.finalizers().iter().any(|f| f == FINALIZER_BUILD);
    if bundle.metadata.deletion_timestamp.is_some() {
        if !finalized {
            return Ok(Next::Done);
        }
        return teardown_pass(ctx, bundle).await;
    }
    if !finalized {
        // Before anything of the build exists, so nothing can outlive a deletion unordered.
        // The update's watch event brings the next pass.
        set_finalizer(ctx, bundle, true).await?;
        return Ok(Next::Done);
    }
    let spec = bundle.spec.build.clone().unwrap_or_else(empty_build);
    let deadline =
        crate::actors::lease::decide::parse_duration(&spec.deadline).unwrap_or(DEFAULT_DEADLINE);
    let retry = decide::retry_of(bundle);
    let mut admitted = None;
    let mut observed = Observed {
        retry: retry.clone(),
        namespace: ctx.namespace.clone(),
        ..Default::default()
    };
    if decide::reads_inputs(bundle, retry.as_deref()) {
        let read = read_inputs(ctx, &name, &spec).await?;
        let result = admit::admit(&spec, &ctx.namespace, &read);
        observed.admitted = Some(
            result
                .as_ref()
                .map(|a| a.inputs.clone())
                .map_err(Clone::clone),
        );
        admitted = result.ok();
    }
    observe(ctx, bundle, children, &mut observed).await?;
    let Decision {
        mut status,
        actions,
        requeue,
    } = decide::decide(bundle, &observed, deadline, Time(Timestamp::now()));

    // Write-ahead: the attempt, its inputs and the names of what is about to exist.
    let mut current = bundle.clone();
    let ended = stage_times::ended(bundle.status.as_ref(), &status);
    crate::actors::bundle::write_status(ctx, &current, &status).await?;
    // Counted once written: a pass whose write failed sees the same ends again.
    for end in ended {
        ctx.metrics
            .build_stage_ended(&format!("{:?}", end.stage), &end.result, end.took);
    }
    current.status = Some(status.clone());
    let mut created = false;
    for action in &actions {
        if let Some(uid) = act(
            ctx,
            bundle,
            &spec,
            &status,
            admitted.as_ref(),
            &observed,
            action,
        )
        .await?
            && let Action::Create(temp) = action
        {
            decide::record_created(&mut status, *temp, uid);
            created = true;
        }
    }
    if created {
        crate::actors::bundle::write_status(ctx, &current, &status).await?;
    }
    publish_stage_events(ctx, bundle, &status).await;

    let owner = bundle.uid().unwrap_or_default();
    follow::<InstallerJob>(ctx, children, &owner, &status).await;
    follow::<BuildVmStage>(ctx, children, &owner, &status).await;
    follow::<GuestSession>(ctx, children, &owner, &status).await;
    follow::<DiskCopy>(ctx, children, &owner, &status).await;
    follow::<ValidationClone>(ctx, children, &owner, &status).await;
    Ok(requeue.map_or(Next::Done, Next::Requeue))
}

/// How often a deleting bundle looks again: not every object it waits for is watched (the
/// helper's Role and RoleBinding).
const TEARDOWN_STEP: Duration = Duration::from_secs(2);

/// One pass of a deleting bundle ([`teardown::teardown`]): read every recorded object and the
/// build VM, record the step, act, and drop the finalizer once nothing is left.
async fn teardown_pass(ctx: &Arc<Context>, bundle: &CRCBundle) -> Result<Next, Error> {
    let name = bundle.name_any();
    let owner = bundle.uid().unwrap_or_default();
    let resources = bundle
        .status
        .as_ref()
        .and_then(|s| s.build.as_ref())
        .and_then(|b| b.resources.clone())
        .unwrap_or_default();
    let mut seen = teardown::Seen::default();
    for &temp in Temp::ALL {
        let Some(recorded) = temp.slot(&resources).filter(|r| !r.uid.is_empty()) else {
            continue;
        };
        let meta = recorded_meta(ctx, &name, temp, recorded).await?;
        let presence = teardown::presence(recorded, &owner, meta.as_ref());
        // Its run strategy, VMI and launcher pods, while it is ours and still there.
        if matches!(temp, Temp::BuildVm | Temp::ValidationVm)
            && matches!(
                presence,
                teardown::Presence::Ours | teardown::Presence::Deleting
            )
        {
            let vm = build_vm(ctx, &name, recorded, &owner).await?.1;
            if temp == Temp::BuildVm {
                seen.vm = vm;
            } else {
                seen.validation_vm = vm;
            }
        }
        seen.temps.insert(temp, presence);
    }
    let step = teardown::teardown(bundle, &seen, Time(Timestamp::now()));
    if step.done {
        set_finalizer(ctx, bundle, false).await?;
        tracing::info!(crcbundle = %name, "build objects deleted; finalizer removed");
        return Ok(Next::Done);
    }
    crate::actors::bundle::write_status(ctx, bundle, &step.status).await?;
    let status = &step.status;
    for action in &step.actions {
        act(
            ctx,
            bundle,
            &empty_build(),
            status,
            None,
            &Observed::default(),
            action,
        )
        .await?;
    }
    Ok(Next::Requeue(TEARDOWN_STEP))
}

async fn set_finalizer(ctx: &Context, bundle: &CRCBundle, add: bool) -> Result<(), Error> {
    let api = Api::<CRCBundle>::all(ctx.client.clone());
    match write::finalizer(&api, bundle, FINALIZER_BUILD, add).await {
        // Changed since it was read: that change's watch event brings the next pass.
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(Error::Finalizer {
            name: bundle.name_any(),
            source,
        }),
    }
}

/// Starts (or keeps) the child of stage `S` on its recorded object; stops it when nothing is
/// recorded. A failed attempt keeps its children: their reports tell its cleanup what is still
/// there to delete.
async fn follow<S: Stage>(
    ctx: &Arc<Context>,
    children: &mut Children,
    owner: &str,
    status: &CRCBundleStatus,
) {
    match S::slot(status) {
        Some(recorded) => children.ensure::<S>(ctx, owner, recorded).await,
        None => children.stop(S::KIND),
    }
}

/// `spec.build.deadline`'s default, for a deadline the schema let through but Go's syntax
/// does not parse.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(6 * 3600);

fn empty_build() -> BuildSpec {
    BuildSpec {
        release_image: String::new(),
        pull_secret_ref: Default::default(),
        profile: Default::default(),
        installation_manifest_refs: Vec::new(),
        post_install_manifest_refs: Vec::new(),
        vm: Default::default(),
        placement: None,
        deadline: String::new(),
    }
}

/// An Event for every stage condition that changed status or reason (`Ready` has its own, from
/// the status write).
async fn publish_stage_events(ctx: &Context, bundle: &CRCBundle, status: &CRCBundleStatus) {
    let before = bundle
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for type_ in decide::STAGE_CONDITIONS {
        ctx.events
            .transition(bundle, type_, before, &status.conditions)
            .await;
    }
}

/// Reads the pull secret and every manifest source named by the spec.
async fn read_inputs(ctx: &Context, name: &str, spec: &BuildSpec) -> Result<admit::Read, Error> {
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &ctx.namespace);
    let config_maps = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ctx.namespace);
    let pull_secret = secrets
        .get_opt(&spec.pull_secret_ref.name)
        .await
        .map_err(|source| Error::Observe {
            name: name.to_owned(),
            what: format!("Secret {}", spec.pull_secret_ref.name),
            source,
        })?
        .map(secret_data);
    let installation = read_sources(
        &secrets,
        &config_maps,
        name,
        &spec.installation_manifest_refs,
    )
    .await?;
    let post_install = read_sources(
        &secrets,
        &config_maps,
        name,
        &spec.post_install_manifest_refs,
    )
    .await?;
    Ok(admit::Read {
        pull_secret,
        installation,
        post_install,
    })
}

async fn read_sources(
    secrets: &Api<Secret>,
    config_maps: &Api<ConfigMap>,
    name: &str,
    refs: &[ManifestRef],
) -> Result<Vec<admit::Source>, Error> {
    let mut out = Vec::with_capacity(refs.len());
    for reference in refs {
        let err = |source| Error::Observe {
            name: name.to_owned(),
            what: format!("{:?} {}", reference.kind, reference.name),
            source,
        };
        let data = match reference.kind {
            ManifestSourceKind::Secret => secrets
                .get_opt(&reference.name)
                .await
                .map_err(err)?
                .map(secret_data),
            ManifestSourceKind::ConfigMap => config_maps
                .get_opt(&reference.name)
                .await
                .map_err(err)?
                .map(config_map_data),
        };
        out.push(admit::Source {
            reference: reference.clone(),
            data,
        });
    }
    Ok(out)
}

fn secret_data(secret: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = secret
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    // `stringData` is write-only, but a Secret read from a fake or a cache may still hold it.
    for (k, v) in secret.string_data.unwrap_or_default() {
        data.entry(k).or_insert_with(|| v.into_bytes());
    }
    data
}

fn config_map_data(config_map: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = config_map
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (k, v) in config_map.binary_data.unwrap_or_default() {
        data.insert(k, v.0);
    }
    data
}

/// Judges every recorded temporary object (the installer Job through its child) and the key
/// Secret.
async fn observe(
    ctx: &Context,
    bundle: &CRCBundle,
    children: &Children,
    observed: &mut Observed,
) -> Result<(), Error> {
    let owner = bundle.uid().unwrap_or_default();
    let name = bundle.name_any();
    let resources = bundle
        .status
        .as_ref()
        .and_then(|s| s.build.as_ref())
        .and_then(|b| b.resources.clone())
        .unwrap_or_default();
    for &temp in Temp::ALL {
        let Some(recorded) = temp.slot(&resources).filter(|r| !r.uid.is_empty()) else {
            continue;
        };
        let seen = match temp {
            Temp::BuildVm => {
                let (seen, vm) = build_vm(ctx, &name, recorded, &owner).await?;
                observed.vm = vm;
                seen
            }
            Temp::ValidationVm => {
                let (seen, vm) = build_vm(ctx, &name, recorded, &owner).await?;
                observed.validation_vm = vm;
                seen
            }
            Temp::InstallerJob => {
                observed.installer = children
                    .observation::<InstallerJob>(recorded)
                    .cloned()
                    .map_or(JobState::Unreported, JobState::Seen);
                continue;
            }
            Temp::HelperJob => {
                observed.helper = children
                    .observation::<GuestSession>(recorded)
                    .cloned()
                    .map_or(JobState::Unreported, JobState::Seen);
                continue;
            }
            Temp::DiskJob => {
                observed.disk = children
                    .observation::<DiskCopy>(recorded)
                    .cloned()
                    .map_or(JobState::Unreported, JobState::Seen);
                continue;
            }
            _ => {
                let meta = recorded_meta(ctx, &name, temp, recorded).await?;
                judge_meta(recorded, &owner, meta.as_ref())
            }
        };
        observed.temps.insert(temp, seen);
    }
    if resources
        .installer_job
        .as_ref()
        .is_some_and(|j| j.uid.is_empty())
    {
        observed.installer = JobState::Named;
    }
    let key = Api::<Secret>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_opt(&resources::bundle::Names::of(&name).ssh_secret)
        .await
        .map_err(|source| Error::Observe {
            name: name.clone(),
            what: "the key Secret".into(),
            source,
        })?;
    observed.key_secret = match key {
        None => Owned::Missing,
        Some(key) if is_controlled_by(&key, &owner) => Owned::Ours,
        Some(_) => Owned::NotOurs,
    };
    let stage = bundle
        .status
        .as_ref()
        .and_then(|s| s.build.as_ref())
        .and_then(|b| b.stage);
    if matches!(
        stage,
        Some(BuildStage::Publish | BuildStage::Validate | BuildStage::Ready)
    ) {
        let owned = |meta: Option<ObjectMeta>| match meta {
            None => Owned::Missing,
            Some(meta) if meta_controlled_by(&meta, &owner) => Owned::Ours,
            Some(_) => Owned::NotOurs,
        };
        let bundle_names = resources::bundle::Names::of(&name);
        observed.golden =
            owned(meta_of::<PersistentVolumeClaim>(ctx, &name, &bundle_names.golden_pvc).await?);
        if stage == Some(BuildStage::Ready) {
            observed.metadata =
                owned(meta_of::<ConfigMap>(ctx, &name, &bundle_names.metadata).await?);
            observed.data_source = owned(meta_of::<DataSource>(ctx, &name, &name).await?);
        }
    }
    Ok(())
}

/// The metadata ConfigMap of a built bundle: the keys the download source publishes, from the
/// status the build recorded.
fn metadata_config_map(bundle: &CRCBundle, ns: &str, status: &CRCBundleStatus) -> ConfigMap {
    use crate::contract::bundle_prep::{CM_DISK_SHA256, CM_DISK_VIRTUAL_SIZE, CM_OCP_VERSION};
    let name = bundle.name_any();
    let mut data = BTreeMap::new();
    for (key, value) in [
        (CM_OCP_VERSION, status.ocp_version.clone()),
        (CM_DISK_SHA256, status.disk_sha256.clone()),
        (
            CM_DISK_VIRTUAL_SIZE,
            status.disk_virtual_size.map(|s| s.to_string()),
        ),
    ] {
        if let Some(value) = value {
            data.insert(key.to_owned(), value);
        }
    }
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(resources::bundle::Names::of(&name).metadata),
            namespace: Some(ns.to_owned()),
            labels: Some(bundle_labels(&name)),
            owner_references: controller_ref(bundle).map(|r| vec![r]),
            ..Default::default()
        },
        data: Some(data),
        ..Default::default()
    }
}

/// The build VM (judged like every temporary object) and, when it is ours, its boot, run
/// strategy, VMI and launcher pod.
async fn build_vm(
    ctx: &Context,
    bundle: &str,
    recorded: &crate::api::common::ObjectIdentity,
    owner: &str,
) -> Result<
    (
        Option<crate::actors::runtime::stage::Observation>,
        Option<decide::VmSeen>,
    ),
    Error,
> {
    let err = |what: String| {
        let bundle = bundle.to_owned();
        move |source| Error::Observe {
            name: bundle,
            what,
            source,
        }
    };
    let vm = Api::<VirtualMachine>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_opt(&recorded.name)
        .await
        .map_err(err(format!("VirtualMachine {}", recorded.name)))?;
    if let Some(verdict) = judge(recorded, owner, vm.as_ref()) {
        return Ok((Some(verdict), None));
    }
    let Some(vm) = vm else {
        return Ok((Some(crate::actors::runtime::stage::Observation::Lost), None));
    };
    let vmi = Api::<VirtualMachineInstance>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_opt(&recorded.name)
        .await
        .map_err(err(format!("VirtualMachineInstance {}", recorded.name)))?;
    // The launcher pods matter only once the VM is stopped and its VMI gone (they may still
    // hold the disks); before that, assume they are there and do not ask.
    let stopped = vm.spec.run_strategy == Some(RunStrategy::Halted) && vmi.is_none();
    let launcher_pod = if stopped {
        let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ctx.namespace)
            .list_metadata(&ListParams::default().labels(&format!(
                "{}={}",
                crate::kubevirt::labels::VM_NAME,
                recorded.name
            )))
            .await
            .map_err(err(format!("the virt-launcher pods of {}", recorded.name)))?;
        !pods.items.is_empty()
    } else {
        true
    };
    Ok((None, Some(vm_seen(&vm, vmi.as_ref(), launcher_pod))))
}

/// What the build pass needs of the VM: which boot its template is, and its VMI.
fn vm_seen(
    vm: &VirtualMachine,
    vmi: Option<&VirtualMachineInstance>,
    launcher_pod: bool,
) -> decide::VmSeen {
    let spec = &vm.spec.template.spec;
    let offset = spec.domain.clock_offset_seconds();
    let iso = spec
        .volumes
        .iter()
        .find(|v| v.name == resources::profile::vm::ISO_DISK)
        .and_then(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.clone());
    // The Install boot's ISO is the install ISO volume; the generator's the stock one.
    let boot = match (iso, offset) {
        (None, 0) => Some(BuildBoot::Installed),
        (None, AGED_SECONDS) => Some(BuildBoot::Aged),
        (Some(claim), o) if o == DAY_BEHIND_SECONDS && claim.ends_with("-install-iso") => {
            Some(BuildBoot::Install { iso_claim: claim })
        }
        (Some(claim), o) if o == DAY_BEHIND_SECONDS => {
            Some(BuildBoot::Generator { iso_claim: claim })
        }
        _ => None,
    };
    let halted = |s: Option<&RunStrategy>| s == Some(&RunStrategy::Halted);
    decide::VmSeen {
        boot,
        halted: halted(vm.spec.run_strategy.as_ref()),
        halt_observed: halted(vm.status.as_ref().and_then(|s| s.run_strategy.as_ref())),
        vmi: vmi.map(|vmi| decide::VmiSeen {
            uid: vmi.metadata.uid.clone().unwrap_or_default(),
            phase: vmi.phase().as_str().to_owned(),
            ip: vmi.first_ip().map(str::to_owned),
            blocked: vmi.start_blocker(),
        }),
        failure: vm.start_failure(),
        launcher_pod,
    }
}

/// Runs `$body` with `$k` the Kubernetes type of temporary object `$temp`.
macro_rules! of_kind {
    ($temp:expr, $k:ident => $body:expr) => {
        match $temp {
            Temp::ServiceAccount | Temp::HelperAccount => {
                type $k = ServiceAccount;
                $body
            }
            Temp::InstallerSecret | Temp::CredentialsSecret => {
                type $k = Secret;
                $body
            }
            Temp::WorkPvc | Temp::IsoPvc | Temp::InstallIsoPvc => {
                type $k = PersistentVolumeClaim;
                $body
            }
            Temp::InstallerJob | Temp::HelperJob | Temp::DiskJob => {
                type $k = Job;
                $body
            }
            Temp::HelperRole => {
                type $k = Role;
                $body
            }
            Temp::HelperRoleBinding => {
                type $k = RoleBinding;
                $body
            }
            Temp::RootDataVolume | Temp::ValidationDataVolume => {
                type $k = DataVolume;
                $body
            }
            Temp::BuildVm | Temp::ValidationVm => {
                type $k = VirtualMachine;
                $body
            }
        }
    };
}

/// The metadata of the object under a recorded name (a metadata-only GET), whatever its kind.
async fn recorded_meta(
    ctx: &Context,
    bundle: &str,
    temp: Temp,
    recorded: &crate::api::common::ObjectIdentity,
) -> Result<Option<ObjectMeta>, Error> {
    of_kind!(temp, K => meta_of::<K>(ctx, bundle, &recorded.name).await)
}

async fn meta_of<K>(ctx: &Context, bundle: &str, name: &str) -> Result<Option<ObjectMeta>, Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_metadata_opt(name)
        .await
        .map(|o| o.map(|o| o.metadata))
        .map_err(|source| Error::Observe {
            name: bundle.to_owned(),
            what: format!("{} {name}", K::kind(&())),
            source,
        })
}

/// Performs `action`; for [`Action::Create`], returns the UID now under the recorded name.
async fn act(
    ctx: &Context,
    bundle: &CRCBundle,
    spec: &BuildSpec,
    status: &CRCBundleStatus,
    admitted: Option<&Admitted>,
    observed: &Observed,
    action: &Action,
) -> Result<Option<String>, Error> {
    let ns = ctx.namespace.as_str();
    let client = &ctx.client;
    let name = bundle.name_any();
    let attempt = status.build.as_ref().and_then(|b| b.attempt).unwrap_or(1);
    let names = Names::of(&name, attempt);
    let kube_err = |source| Error::Act {
        name: name.clone(),
        action: action.clone(),
        source,
    };
    let render = |detail: String| Error::Render {
        name: name.clone(),
        detail,
    };
    let patch_vm = |role: VmRole, patch: serde_json::Value| {
        let vm = match role {
            VmRole::Build => names.build_vm.clone(),
            VmRole::Validation => names.validation_vm.clone(),
        };
        async move {
            let vms = Api::<VirtualMachine>::namespaced(client.clone(), ns);
            write::merge_patch(&vms, &vm, &patch).await.map(|_| None)
        }
    };
    let result = match action {
        Action::CreateGoldenPvc => {
            let claim = resources::bundle::golden_pvc(bundle, ns);
            write::create(&Api::namespaced(client.clone(), ns), &claim)
                .await
                .map_err(kube_err)?;
            None
        }
        Action::CreateKeySecret => {
            let secret = key_secret(bundle, ns).map_err(render)?;
            write::create(&Api::namespaced(client.clone(), ns), &secret)
                .await
                .map_err(kube_err)?;
            None
        }
        Action::Create(temp) => match temp {
            Temp::ServiceAccount => {
                create(ctx, &resources::build::service_account(bundle, ns, &names)).await
            }
            Temp::InstallerSecret => {
                let Some(admitted) = admitted else {
                    // The inputs were not admitted this pass (they are read while the stage
                    // needs them); the next pass creates it.
                    return Ok(None);
                };
                let inputs = installer_inputs(ctx, bundle, admitted).await?;
                let secret = resources::build::installer_secret(bundle, ns, &names, &inputs)
                    .map_err(|e| render(e.to_string()))?;
                create(ctx, &secret).await
            }
            Temp::WorkPvc => create(ctx, &resources::build::work_pvc(bundle, ns, &names)).await,
            Temp::IsoPvc => create(ctx, &resources::build::iso_pvc(bundle, ns, &names)).await,
            Temp::InstallerJob => {
                let job = resources::build::installer_job(bundle, spec, ns, &names, &ctx.jobs);
                create(ctx, &job).await
            }
            Temp::HelperAccount => {
                create(ctx, &resources::build::helper_account(bundle, ns, &names)).await
            }
            Temp::HelperRole => {
                create(ctx, &resources::build::helper_role(bundle, ns, &names)).await
            }
            Temp::HelperRoleBinding => {
                create(
                    ctx,
                    &resources::build::helper_role_binding(bundle, ns, &names),
                )
                .await
            }
            Temp::CredentialsSecret => {
                create(
                    ctx,
                    &resources::build::credentials_secret(bundle, ns, &names),
                )
                .await
            }
            Temp::RootDataVolume => {
                create(
                    ctx,
                    &resources::build::root_data_volume(bundle, spec, ns, &names),
                )
                .await
            }
            Temp::InstallIsoPvc => {
                create(ctx, &resources::build::install_iso_pvc(bundle, ns, &names)).await
            }
            Temp::BuildVm => {
                let boot = BuildBoot::Generator {
                    iso_claim: names.iso_pvc.clone(),
                };
                let vm = resources::build::build_vm(bundle, ns, &names, &boot)
                    .map_err(|e| render(e.to_string()))?;
                create(ctx, &vm).await
            }
            Temp::HelperJob => {
                // The decision named it for a running VMI it saw; one that cannot be built from
                // this pass's status and observations is a bug to see, retried with backoff.
                let Some(job) = helper_job(bundle, spec, ns, &names, status, observed, &ctx.jobs)
                else {
                    return Err(render(
                        "the helper Job's step, VMI or pinned release is not known to this pass"
                            .into(),
                    ));
                };
                create(ctx, &job).await
            }
            Temp::ValidationDataVolume => {
                let golden = resources::bundle::Names::of(&name).golden_pvc;
                let dv = resources::build::validation_data_volume(bundle, ns, &names, &golden);
                create(ctx, &dv).await
            }
            Temp::ValidationVm => {
                let vm = resources::build::validation_vm(bundle, ns, &names, &BuildBoot::Installed)
                    .map_err(|e| render(e.to_string()))?;
                create(ctx, &vm).await
            }
            Temp::DiskJob => {
                let golden = resources::bundle::Names::of(&name).golden_pvc;
                let job = resources::build::disk_job(bundle, spec, ns, &names, &golden, &ctx.jobs);
                create(ctx, &job).await
            }
        }
        .map_err(kube_err)?,
        Action::Delete { temp, name, uid } => {
            // In the foreground for Jobs: a Job is gone only once its pods are.
            let propagation = match temp {
                Temp::InstallerJob | Temp::HelperJob | Temp::DiskJob => {
                    PropagationPolicy::Foreground
                }
                _ => PropagationPolicy::Background,
            };
            of_kind!(*temp, K => delete_with::<K>(ctx, name, uid, propagation).await)
                .map_err(kube_err)?;
            None
        }
        Action::HaltVm(role) => patch_vm(
            *role,
            serde_json::json!({"spec": {"runStrategy": "Halted"}}),
        )
        .await
        .map_err(kube_err)?,
        Action::StartVm(role, boot) => {
            let vm = match role {
                VmRole::Build => resources::build::build_vm(bundle, ns, &names, boot),
                VmRole::Validation => resources::build::validation_vm(bundle, ns, &names, boot),
            }
            .map_err(|e| render(e.to_string()))?;
            // The whole template of the new boot (the ISO disk gone after the cold restart, the
            // clock aged) and the run strategy, in one write.
            patch_vm(
                *role,
                serde_json::json!({"spec": {
                    "runStrategy": vm.spec.run_strategy,
                    "template": vm.spec.template,
                }}),
            )
            .await
            .map_err(kube_err)?
        }
        Action::PublishMetadata => {
            let config_map = metadata_config_map(bundle, ns, status);
            let api = Api::<ConfigMap>::namespaced(client.clone(), ns);
            write::apply(
                &api,
                &resources::bundle::Names::of(&name).metadata,
                &config_map,
                crate::api::labels::FIELD_MANAGER,
            )
            .await
            .map_err(kube_err)?;
            None
        }
        Action::PublishDataSource => {
            let source = resources::build::data_source(bundle, ns);
            let api = Api::<DataSource>::namespaced(client.clone(), ns);
            write::apply(&api, &name, &source, crate::api::labels::FIELD_MANAGER)
                .await
                .map_err(kube_err)?;
            None
        }
    };
    tracing::info!(crcbundle = %name, ?action, "done");
    Ok(result)
}

/// The helper Job named in status for the VMI the pass saw running; `None` when the pass did not
/// see it (the next pass creates it).
fn helper_job(
    bundle: &CRCBundle,
    spec: &BuildSpec,
    ns: &str,
    names: &Names,
    status: &CRCBundleStatus,
    observed: &Observed,
    settings: &resources::bundle::JobSettings,
) -> Option<Job> {
    let build = status.build.as_ref()?;
    let step = decide::helper_step(build)?;
    let vmi = observed.vm_of(VmRole::of(step))?.vmi.as_ref()?;
    let recorded = build.resources.as_ref()?.helper_job.as_ref()?;
    if build.vmi_uid.as_deref() != Some(vmi.uid.as_str())
        || recorded.name != names.helper_job(step, &vmi.uid)
    {
        return None;
    }
    let release = status.release.as_ref()?;
    let pinned = crate::tools::release::pinned(&release.image, release.digest.as_deref()?);
    Some(resources::build::helper_job(
        bundle,
        spec,
        ns,
        names,
        &resources::build::HelperTarget {
            step,
            vmi_uid: &vmi.uid,
            ssh_host: vmi.ip.as_deref()?,
            release_image: &pinned,
        },
        settings,
    ))
}

/// Creates `obj` in the operator namespace; the UID now under its name ([`write::create_uid`]).
async fn create<K>(ctx: &Context, obj: &K) -> Result<Option<String>, kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + DeserializeOwned
        + std::fmt::Debug,
{
    write::create_uid(&Api::namespaced(ctx.client.clone(), &ctx.namespace), obj).await
}

/// Deletes the object `name` of the operator namespace if it still has `uid`; dependents (a
/// Job's pods) in the background.
async fn delete_with<K>(
    ctx: &Context,
    name: &str,
    uid: &str,
    propagation: PropagationPolicy,
) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug,
{
    write::delete_exact::<K>(
        &Api::namespaced(ctx.client.clone(), &ctx.namespace),
        name,
        uid,
        propagation,
    )
    .await
}

/// A fresh ECDSA key pair for the bundle: the build's SSH key now, the bundle's `id_ecdsa` once
/// it is Ready.
fn key_secret(bundle: &CRCBundle, ns: &str) -> Result<Secret, String> {
    let key = keys::generate_ecdsa_p256().map_err(|e| e.to_string())?;
    let private = keys::to_openssh(&key).map_err(|e| e.to_string())?;
    let public = keys::authorized_key_line(key.public_key(), "guestcluster-build")
        .map_err(|e| e.to_string())?;
    Ok(Secret {
        metadata: ObjectMeta {
            name: Some(resources::bundle::Names::of(&bundle.name_any()).ssh_secret),
            namespace: Some(ns.to_owned()),
            labels: Some(bundle_labels(&bundle.name_any())),
            owner_references: controller_ref(bundle).map(|r| vec![r]),
            ..Default::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([
            (SECRET_KEY.to_owned(), ByteString(private.into_bytes())),
            (PUBLIC_KEY.to_owned(), ByteString(public.into_bytes())),
        ])),
        ..Default::default()
    })
}

/// Renders the installer Secret's contents from the admitted inputs and the bundle's key.
async fn installer_inputs(
    ctx: &Context,
    bundle: &CRCBundle,
    admitted: &Admitted,
) -> Result<InstallerInputs, Error> {
    let name = bundle.name_any();
    let render = |detail: String| Error::Render {
        name: name.clone(),
        detail,
    };
    let key = Api::<Secret>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get(&resources::bundle::Names::of(&name).ssh_secret)
        .await
        .map_err(|source| Error::Observe {
            name: name.clone(),
            what: "the key Secret".into(),
            source,
        })?;
    if !is_controlled_by(&key, &bundle.uid().unwrap_or_default()) {
        return Err(render(
            "the key Secret is not controlled by the bundle; it is not used".into(),
        ));
    }
    let public = key
        .data
        .as_ref()
        .and_then(|d| d.get(PUBLIC_KEY))
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
        .ok_or_else(|| render(format!("the key Secret has no {PUBLIC_KEY}")))?;
    let ssh_key = SshPublicKey::parse(&public).map_err(|e| render(e.to_string()))?;
    let config = install_config::install_config(bundle.spec.arch, &admitted.pull_secret, &ssh_key)
        .map_err(|e| render(e.to_string()))?;
    let mut staging = vec![StagedFile {
        path: "install-config.yaml".into(),
        text: config.expose().to_owned(),
    }];
    for file in manifests::profile_manifests().map_err(|e| render(e.to_string()))? {
        staging.push(StagedFile {
            path: file.path(),
            text: file.yaml,
        });
    }
    for manifest in &admitted.installation_manifests {
        staging.push(StagedFile {
            path: user_manifest_path(&manifest.source, &manifest.key),
            text: manifest.text.clone(),
        });
    }
    let generator = serde_json::to_string(&ignition::generator_ignition(&ssh_key))
        .map_err(|e| render(e.to_string()))?;
    let post_install = admitted
        .post_install_manifests
        .iter()
        .map(|m| PostInstallManifest {
            source: m.source.clone(),
            key: m.key.clone(),
            text: m.text.clone(),
        })
        .collect();
    Ok(InstallerInputs {
        pull_secret: admitted.pull_secret.expose().to_owned(),
        generator_ignition: generator,
        staging,
        post_install,
    })
}

/// Where a user's installation manifest goes: `openshift/`, after the profile's own (which
/// start with `99-`), named after its source and key so two sources never collide.
pub fn user_manifest_path(source: &str, key: &str) -> String {
    let key = key
        .strip_suffix(".yaml")
        .or_else(|| key.strip_suffix(".yml"))
        .unwrap_or(key);
    format!("openshift/99-user-{source}-{key}.yaml")
}
