//! What a build pass reads: the inputs while a stage reads them, every recorded temporary object
//! (judged by metadata, the VMs in full, the Jobs through their children's reports), the key
//! Secret, and the bundle's own objects from Publish on. I/O only; the judging is
//! [`crate::actors::runtime::stage::judge`] and the decision [`super::decide`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::ListParams;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::admit;
use super::error::{Error, KIND};
use super::stages;
use super::step::{Observed, Owned, VmSeen, VmiSeen};
use super::temps::{Temp, of_kind};
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::JobState;
use crate::actors::runtime::stage::children::Children;
use crate::actors::runtime::stage::{Observation, judge, judge_meta, meta_controlled_by};
use crate::api::bundle::{
    BuildResources, BuildSpec, BuildStage, CRCBundle, ManifestRef, ManifestSourceKind,
};
use crate::api::common::ObjectIdentity;
use crate::api::labels::BUILD_INPUT;
use crate::cdi::DataSource;
use crate::kubevirt::{RunStrategy, VirtualMachine, VirtualMachineInstance};
use crate::resources;
use crate::resources::common::is_controlled_by;
use crate::resources::profile::vm::{AGED_SECONDS, BuildBoot, DAY_BEHIND_SECONDS};

/// Reads the pull secret and every manifest source named by the spec.
pub async fn read_inputs(
    ctx: &Context,
    name: &str,
    spec: &BuildSpec,
) -> Result<admit::Read, Error> {
    let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &ctx.namespace);
    let config_maps = Api::<ConfigMap>::namespaced(ctx.client.clone(), &ctx.namespace);
    let pull_secret = secrets
        .get_opt(&spec.pull_secret_ref.name)
        .await
        .map_err(ApiError::on(
            KIND,
            name,
            Doing::Read,
            format!("Secret {}", spec.pull_secret_ref.name),
        ))?
        .map(secret_input);
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
        let err = ApiError::on(
            KIND,
            name,
            Doing::Read,
            format!("{:?} {}", reference.kind, reference.name),
        );
        let object = match reference.kind {
            ManifestSourceKind::Secret => secrets
                .get_opt(&reference.name)
                .await
                .map_err(err)?
                .map(secret_input),
            ManifestSourceKind::ConfigMap => config_maps
                .get_opt(&reference.name)
                .await
                .map_err(err)?
                .map(config_map_input),
        };
        out.push(admit::Source {
            reference: reference.clone(),
            object,
        });
    }
    Ok(out)
}

/// The value of an input object's consent label (see [`admit`]).
fn shared_with(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<String> {
    meta.labels.as_ref()?.get(BUILD_INPUT).cloned()
}

fn secret_input(secret: Secret) -> admit::Object {
    admit::Object {
        shared_with: shared_with(&secret.metadata),
        data: secret_data(secret),
    }
}

fn config_map_input(config_map: ConfigMap) -> admit::Object {
    admit::Object {
        shared_with: shared_with(&config_map.metadata),
        data: config_map_data(config_map),
    }
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

/// The temporary objects the bundle's status records.
pub fn recorded(bundle: &CRCBundle) -> BuildResources {
    bundle
        .status
        .as_ref()
        .and_then(|s| s.build.as_ref())
        .and_then(|b| b.resources.clone())
        .unwrap_or_default()
}

/// Judges every recorded temporary object (the installer Job through its child) and the key
/// Secret.
pub async fn observe(
    ctx: &Context,
    bundle: &CRCBundle,
    children: &Children,
    observed: &mut Observed,
) -> Result<(), Error> {
    let owner = bundle.uid().unwrap_or_default();
    let name = bundle.name_any();
    let resources = recorded(bundle);
    for &temp in Temp::ALL {
        let Some(recorded) = temp.slot(&resources).filter(|r| !r.uid.is_empty()) else {
            continue;
        };
        // A Job's observation is its child's report.
        if let Some(child) = stages::children().find(|c| c.temp == temp)
            && let Some(report) = child.report
        {
            let state = report(children, recorded).map_or(JobState::Unreported, JobState::Seen);
            observed.jobs.insert(temp, state);
            continue;
        }
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
        observed.jobs.insert(Temp::InstallerJob, JobState::Named);
    }
    let key = Api::<Secret>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_opt(&resources::bundle::Names::of(&name).ssh_secret)
        .await
        .map_err(ApiError::on(KIND, &name, Doing::Read, "the key Secret"))?;
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
    // From Publish on (the enum is in stage order).
    if stage.is_some_and(|s| (BuildStage::Publish..=BuildStage::Ready).contains(&s)) {
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

/// The build VM (judged like every temporary object) and, when it is ours, its boot, run
/// strategy, VMI and launcher pod.
pub async fn build_vm(
    ctx: &Context,
    bundle: &str,
    recorded: &ObjectIdentity,
    owner: &str,
) -> Result<(Option<Observation>, Option<VmSeen>), Error> {
    let err = |what: String| ApiError::on(KIND, bundle, Doing::Read, what);
    let vm = Api::<VirtualMachine>::namespaced(ctx.client.clone(), &ctx.namespace)
        .get_opt(&recorded.name)
        .await
        .map_err(err(format!("VirtualMachine {}", recorded.name)))?;
    if let Some(verdict) = judge(recorded, owner, vm.as_ref()) {
        return Ok((Some(verdict), None));
    }
    let Some(vm) = vm else {
        return Ok((Some(Observation::Lost), None));
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
                "{}={},{}={}",
                crate::kubevirt::labels::APP,
                crate::kubevirt::labels::VIRT_LAUNCHER,
                crate::api::labels::VM,
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
) -> VmSeen {
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
    VmSeen {
        boot,
        halted: halted(vm.spec.run_strategy.as_ref()),
        halt_observed: vm.halt_acted_on(),
        vmi: vmi.map(|vmi| VmiSeen {
            uid: vmi.metadata.uid.clone().unwrap_or_default(),
            phase: vmi.phase().as_str().to_owned(),
            ip: vmi.first_ip().map(str::to_owned),
            blocked: vmi.start_blocker(),
        }),
        failure: vm.start_failure(),
        launcher_pod,
    }
}

/// The metadata of the object under a recorded name (a metadata-only GET), whatever its kind.
pub async fn recorded_meta(
    ctx: &Context,
    bundle: &str,
    temp: Temp,
    recorded: &ObjectIdentity,
) -> Result<Option<ObjectMeta>, Error> {
    of_kind!(temp.kind(), K => meta_of::<K>(ctx, bundle, &recorded.name).await)
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
        .map_err(ApiError::on(
            KIND,
            bundle,
            Doing::Read,
            format!("{} {name}", K::kind(&())),
        ))
        .map_err(Error::from)
}
