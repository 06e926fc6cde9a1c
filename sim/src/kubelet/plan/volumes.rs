//! Volumes of a pod: where each lives on the host, and the files of Secret, ConfigMap,
//! downward-API and projected volumes.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    DownwardAPIVolumeFile, KeyToPath, Pod, ProjectedVolumeSource, Volume,
};

use super::env::field_value;
use super::{DirToMake, FileToWrite, Host, Inputs, Ownership, PlanError, PodPlan};

/// Mode of projected files when the pod does not say (the API default, 0644).
const DEFAULT_FILE_MODE: u32 = 0o644;

/// Where a volume lives on the host, adding its directory and files to the plan.
pub(super) fn plan_volume(
    pod: &Pod,
    volume: &Volume,
    inputs: &Inputs,
    host: &Host,
    fs_group: Option<u32>,
    plan: &mut PodPlan,
) -> Result<PathBuf, PlanError> {
    let own = |dir: &Path, read_only: bool, plan: &mut PodPlan| {
        if let Some(group) = fs_group {
            plan.ownership.push(Ownership {
                dir: dir.to_owned(),
                group,
                read_only,
            });
        }
    };
    if let Some(pvc) = &volume.persistent_volume_claim {
        let volume = inputs.claims.get(&pvc.claim_name).ok_or_else(|| {
            PlanError::Missing(format!(
                "persistentvolumeclaim {:?} does not exist or is not bound",
                pvc.claim_name
            ))
        })?;
        // A CSI volume mounted read-only keeps its owners (`supportsFSGroup`); `fsGroup` is a
        // filesystem's matter, a device is never chowned by the kubelet.
        if pvc.read_only != Some(true) && volume.mode == crate::volumes::VolumeMode::Filesystem {
            own(&volume.dir, false, plan);
        }
        return Ok(volume.dir.clone());
    }
    let dir = host.sandbox.join("volumes").join(&volume.name);
    // An emptyDir is made world-writable; the other kinds are the kubelet's read-only files.
    let empty_dir = volume.empty_dir.is_some();
    plan.dirs.push(DirToMake {
        path: dir.clone(),
        mode: empty_dir.then_some(0o777),
    });
    own(&dir, !empty_dir, plan);
    let files = if empty_dir {
        Vec::new()
    } else if let Some(secret) = &volume.secret {
        let name = secret.secret_name.clone().unwrap_or_default();
        let data = source_data("secret", &name, &inputs.secrets, secret.optional)?;
        key_files(
            &data,
            secret.items.as_deref(),
            secret.default_mode,
            secret.optional == Some(true),
            ("secret", &name),
        )?
    } else if let Some(cm) = &volume.config_map {
        let data = source_data("configmap", &cm.name, &inputs.config_maps, cm.optional)?;
        key_files(
            &data,
            cm.items.as_deref(),
            cm.default_mode,
            cm.optional == Some(true),
            ("configmap", &cm.name),
        )?
    } else if let Some(downward) = &volume.downward_api {
        let items = downward.items.as_deref().unwrap_or_default();
        downward_files(pod, items, downward.default_mode, host)?
    } else if let Some(projected) = &volume.projected {
        projected_files(pod, projected, inputs, host)?
    } else {
        return Err(PlanError::Unsupported(format!(
            "volume {:?}: only persistentVolumeClaim, emptyDir, secret, configMap, downwardAPI \
             and projected volumes are simulated",
            volume.name
        )));
    };
    for (relative, contents, mode) in files {
        plan.files.push(FileToWrite {
            path: dir.join(relative),
            contents,
            mode,
        });
    }
    Ok(dir)
}

type PlannedFile = (String, Vec<u8>, u32);

/// The data of a Secret or ConfigMap; an optional missing one is empty.
pub(super) fn source_data(
    kind: &str,
    name: &str,
    all: &BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    optional: Option<bool>,
) -> Result<BTreeMap<String, Vec<u8>>, PlanError> {
    match all.get(name) {
        Some(data) => Ok(data.clone()),
        None if optional == Some(true) => Ok(BTreeMap::new()),
        None => Err(PlanError::Missing(format!("{kind} {name:?} not found"))),
    }
}

/// The files of a Secret or ConfigMap volume: every key, or just `items` at their paths. An
/// item whose key is missing fails the pod, unless the volume is optional (as the kubelet does:
/// an optional source's absent keys are left out).
fn key_files(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&[KeyToPath]>,
    default_mode: Option<i32>,
    optional: bool,
    (kind, name): (&str, &str),
) -> Result<Vec<PlannedFile>, PlanError> {
    let mode = |item_mode: Option<i32>| file_mode(item_mode.or(default_mode));
    let Some(items) = items else {
        return Ok(data
            .iter()
            .map(|(key, value)| (key.clone(), value.clone(), mode(None)))
            .collect());
    };
    items
        .iter()
        .filter(|item| !optional || data.contains_key(&item.key))
        .map(|item| {
            let value = data.get(&item.key).ok_or_else(|| {
                PlanError::Missing(format!("{kind} {name:?} has no key {:?}", item.key))
            })?;
            Ok((safe_relative(&item.path)?, value.clone(), mode(item.mode)))
        })
        .collect()
}

fn downward_files(
    pod: &Pod,
    items: &[DownwardAPIVolumeFile],
    default_mode: Option<i32>,
    host: &Host,
) -> Result<Vec<PlannedFile>, PlanError> {
    items
        .iter()
        .map(|item| {
            let field = item.field_ref.as_ref().ok_or_else(|| {
                PlanError::Unsupported(format!(
                    "downwardAPI item {:?}: resourceFieldRef",
                    item.path
                ))
            })?;
            let value = field_value(pod, field, host)?;
            let mode = file_mode(item.mode.or(default_mode));
            Ok((safe_relative(&item.path)?, value.into_bytes(), mode))
        })
        .collect()
}

fn projected_files(
    pod: &Pod,
    projected: &ProjectedVolumeSource,
    inputs: &Inputs,
    host: &Host,
) -> Result<Vec<PlannedFile>, PlanError> {
    let mut files = Vec::new();
    let default_mode = projected.default_mode;
    for source in projected.sources.as_deref().unwrap_or_default() {
        if let Some(secret) = &source.secret {
            let data = source_data("secret", &secret.name, &inputs.secrets, secret.optional)?;
            let items = secret.items.as_deref();
            files.extend(key_files(
                &data,
                items,
                default_mode,
                secret.optional == Some(true),
                ("secret", &secret.name),
            )?);
        } else if let Some(cm) = &source.config_map {
            let data = source_data("configmap", &cm.name, &inputs.config_maps, cm.optional)?;
            let items = cm.items.as_deref();
            files.extend(key_files(
                &data,
                items,
                default_mode,
                cm.optional == Some(true),
                ("configmap", &cm.name),
            )?);
        } else if let Some(downward) = &source.downward_api {
            let items = downward.items.as_deref().unwrap_or_default();
            files.extend(downward_files(pod, items, default_mode, host)?);
        } else if let Some(token) = &source.service_account_token {
            let audience = token.audience.clone().unwrap_or_default();
            let value = inputs.tokens.get(&audience).ok_or_else(|| {
                PlanError::Missing(format!("service account token for audience {audience:?}"))
            })?;
            let path = safe_relative(&token.path)?;
            files.push((path, value.clone().into_bytes(), file_mode(default_mode)));
        } else {
            return Err(PlanError::Unsupported(
                "projected sources other than secret, configMap, downwardAPI and \
                 serviceAccountToken"
                    .into(),
            ));
        }
    }
    Ok(files)
}

fn file_mode(mode: Option<i32>) -> u32 {
    mode.and_then(|m| u32::try_from(m).ok())
        .map_or(DEFAULT_FILE_MODE, |m| m & 0o777)
}

/// API validation already rejects absolute and `..` paths; checked again because a path
/// escaping the sandbox would write anywhere on the developer's machine.
pub(super) fn safe_relative(path: &str) -> Result<String, PlanError> {
    let escapes = Path::new(path).is_absolute()
        || Path::new(path)
            .components()
            .any(|c| matches!(c, std::path::Component::ParentDir));
    if escapes || path.is_empty() {
        return Err(PlanError::Unsupported(format!("file path {path:?}")));
    }
    Ok(path.to_owned())
}
