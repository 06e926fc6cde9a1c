//! What a build pass does: each [`Action`] of the decision against the API, after the status
//! naming it is written. A temporary object is made by the builders' entry point of the stage
//! that makes it ([`super::stages::maker`]) and created here; every write goes through
//! [`crate::write`].

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::PropagationPolicy;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use super::admit::Admitted;
use super::error::{Error, KIND};
use super::stages;
use super::step::{Action, BuildInput, Observed, VmRole};
use super::temps::{Kind, of_kind, with_built};
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::api::bundle::{BuildSpec, CRCBundle, CRCBundleStatus};
use crate::cdi::DataSource;
use crate::contract::bundle_prep::SECRET_KEY;
use crate::contract::installer::{PostInstallManifest, StagedFile};
use crate::guest::keys;
use crate::kubevirt::VirtualMachine;
use crate::resources;
use crate::resources::build::{InstallerInputs, Names};
use crate::resources::common::{bundle_labels, controller_ref, is_controlled_by};
use crate::resources::profile::inputs::SshPublicKey;
use crate::resources::profile::{ignition, install_config, manifests};
use crate::write;

/// The key of the bundle key Secret's public half.
pub const PUBLIC_KEY: &str = "id_ecdsa.pub";

/// Performs `action`; for [`Action::Create`], returns the UID now under the recorded name.
pub async fn act(
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
    let kube_err = |source| -> Error {
        ApiError::on(KIND, &name, action.doing(), format!("{action:?}"))(source).into()
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
        Action::Create(temp) => {
            // Only a pass that admitted the inputs renders them, for the object that carries
            // them; the next pass creates it otherwise.
            let installer = match admitted {
                Some(admitted) if temp.carries_inputs() => {
                    Some(installer_inputs(ctx, bundle, admitted).await?)
                }
                _ => None,
            };
            let input = BuildInput {
                bundle,
                spec,
                ns,
                names: &names,
                status,
                observed,
                jobs: &ctx.jobs,
                helper_step: status.build.as_ref().and_then(stages::helper_step),
                installer: installer.as_ref(),
            };
            let Some(built) = (stages::maker(*temp).build)(*temp, &input).map_err(render)? else {
                return Ok(None);
            };
            with_built!(built, object => create(ctx, object).await).map_err(kube_err)?
        }
        Action::Delete { temp, name, uid } => {
            // In the foreground for Jobs and DataVolumes: a Job is gone only once its pods
            // are, a DataVolume once its PVC is, so a deleted bundle's finalizer (which waits
            // for every recorded object) goes last, with nothing of the attempt left.
            let propagation = match temp.kind() {
                Kind::Job | Kind::DataVolume => PropagationPolicy::Foreground,
                _ => PropagationPolicy::Background,
            };
            of_kind!(temp.kind(), K => delete_with::<K>(ctx, name, uid, propagation).await)
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
        .map_err(ApiError::on(KIND, &name, Doing::Read, "the key Secret"))?;
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
