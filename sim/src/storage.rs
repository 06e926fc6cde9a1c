//! The cluster's storage as a platform engineer finds it: StorageClasses of the flavour, and the
//! StorageProfile CDI keeps for each class (`status.claimPropertySets`), from which a
//! DataVolume's `spec.storage` takes the access and volume modes it leaves unset.
//!
//! - OpenShift flavour: ODF's Ceph RBD class `ocs-storagecluster-ceph-rbd` is the default (its
//!   profile prefers Block), and the hostpath-provisioner class `hostpath-csi` offers Filesystem.
//! - Kubernetes flavour: `hostpath-csi` alone, the default.
//!
//! CDI's known-provisioner table (`pkg/storagecapabilities/storagecapabilities.go`, v1.66.0) and
//! its rendering (`pkg/controller/datavolume/util.go`) are modelled by the pure functions here;
//! [`run`] applies the classes and keeps a profile per class. A profile's `spec.claimPropertySets`
//! overrides the table, as an administrator's edit does upstream. The sim's provisioner serves
//! every class (`sim::volumes`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{Error, Flavour, SimContext};

/// ODF's RBD class, the default of an OpenShift Virtualization cluster on ODF.
pub const RBD_CLASS: &str = "ocs-storagecluster-ceph-rbd";
const RBD_PROVISIONER: &str = "openshift-storage.rbd.csi.ceph.com";
/// The hostpath-provisioner's class (HPP), Filesystem only.
pub const HOSTPATH_CLASS: &str = "hostpath-csi";
const HOSTPATH_PROVISIONER: &str = "kubevirt.io.hostpath-provisioner";
/// `storageclass.kubernetes.io/is-default-class`.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

const FIELD_MANAGER: &str = "guestcluster-sim-storage";
const RESYNC: Duration = Duration::from_secs(5);

/// One entry of `claimPropertySets`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimPropertySet {
    #[serde(default)]
    pub access_modes: Vec<String>,
    pub volume_mode: Option<String>,
}

fn set(access: &str, mode: &str) -> ClaimPropertySet {
    ClaimPropertySet {
        access_modes: vec![access.to_owned()],
        volume_mode: Some(mode.to_owned()),
    }
}

/// CDI's capabilities of a provisioner, most preferred first; empty for one it does not know.
pub fn capabilities(provisioner: &str) -> Vec<ClaimPropertySet> {
    let (rwx, rwo) = ("ReadWriteMany", "ReadWriteOnce");
    match provisioner {
        // `createRbdCapabilities`: Block first, so an unset mode becomes Block.
        RBD_PROVISIONER | "rbd.csi.ceph.com" | "rook-ceph.rbd.csi.ceph.com" => {
            vec![set(rwx, "Block"), set(rwo, "Block"), set(rwo, "Filesystem")]
        }
        // `createTopoLVMCapabilities` (LVMS).
        "topolvm.io" | "topolvm.cybozu.com" => vec![set(rwo, "Block"), set(rwo, "Filesystem")],
        HOSTPATH_PROVISIONER | "kubevirt.io/hostpath-provisioner" => {
            vec![set(rwo, "Filesystem")]
        }
        _ => Vec::new(),
    }
}

/// The StorageClasses of a flavour: (name, provisioner, default).
pub fn classes(flavour: Flavour) -> Vec<(&'static str, &'static str, bool)> {
    match flavour {
        Flavour::OpenShift => vec![
            (RBD_CLASS, RBD_PROVISIONER, true),
            (HOSTPATH_CLASS, HOSTPATH_PROVISIONER, false),
        ],
        Flavour::Kubernetes => vec![(HOSTPATH_CLASS, HOSTPATH_PROVISIONER, true)],
    }
}

/// The modes CDI gives the PVC of a DataVolume's `spec.storage`: what it names, the rest from
/// the profile of its class. `profile` is `None` when no class could be chosen (no class named
/// and no default), `Some((name, sets))` otherwise. The error is CDI's `ErrClaimNotValid`
/// message.
pub fn render_modes(
    access_modes: Option<&[String]>,
    volume_mode: Option<&str>,
    profile: Option<(&str, &[ClaimPropertySet])>,
) -> Result<(Vec<String>, String), String> {
    let access_modes = access_modes.filter(|m| !m.is_empty());
    if let (Some(access), Some(mode)) = (access_modes, volume_mode) {
        return Ok((access.to_vec(), mode.to_owned()));
    }
    let Some((name, sets)) = profile else {
        return Err("PVC spec is missing accessMode and no storageClass to choose profile".into());
    };
    let usable: Vec<&ClaimPropertySet> =
        sets.iter().filter(|s| !s.access_modes.is_empty()).collect();
    let Some(first) = usable.first() else {
        return Err(format!("no accessMode specified in StorageProfile {name}"));
    };
    // A named volume mode takes the access modes of the first set with that mode.
    let chosen = volume_mode
        .and_then(|mode| {
            usable
                .iter()
                .find(|s| s.volume_mode.as_deref() == Some(mode))
        })
        .unwrap_or(first);
    let mode = volume_mode
        .map(str::to_owned)
        .or_else(|| chosen.volume_mode.clone())
        .unwrap_or_else(|| "Filesystem".to_owned());
    let access = access_modes.map_or_else(|| chosen.access_modes.clone(), <[String]>::to_vec);
    Ok((access, mode))
}

pub fn storage_profile_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "StorageProfile"),
        "storageprofiles",
    )
}

/// The class a claim without `storageClassName` gets: the default one (the API server's
/// DefaultStorageClass admission picks the same).
pub fn default_class<'a>(
    mut classes: impl Iterator<Item = &'a StorageClass>,
) -> Option<&'a StorageClass> {
    classes.find(|c| {
        c.annotations()
            .get(DEFAULT_CLASS_ANNOTATION)
            .map(String::as_str)
            == Some("true")
    })
}

/// The claim property sets of `profile`: its `spec` when an administrator set them, else its
/// `status` (CDI's).
pub fn profile_sets(profile: &DynamicObject) -> Vec<ClaimPropertySet> {
    let parse = |v: &Value| serde_json::from_value::<Vec<ClaimPropertySet>>(v.clone()).ok();
    let spec = profile.data["spec"]["claimPropertySets"]
        .as_array()
        .filter(|s| !s.is_empty());
    match spec {
        Some(_) => parse(&profile.data["spec"]["claimPropertySets"]),
        None => parse(&profile.data["status"]["claimPropertySets"]),
    }
    .unwrap_or_default()
}

/// The StorageProfile CDI keeps for `class`.
fn profile_status(class: &StorageClass, sets: &[ClaimPropertySet]) -> Value {
    let sets: Vec<Value> = sets
        .iter()
        .map(|s| json!({"accessModes": s.access_modes, "volumeMode": s.volume_mode}))
        .collect();
    json!({
        "storageClass": class.name_any(),
        "provisioner": class.provisioner,
        "claimPropertySets": sets,
    })
}

/// Keeps one StorageProfile per class (CDI's storageprofile-controller). Runs until the
/// simulation stops.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    loop {
        if let Err(err) = sync_profiles(&ctx.client).await {
            tracing::warn!("sim storage: profiles: {err}");
        }
        tokio::time::sleep(RESYNC).await;
    }
}

/// Creates the flavour's classes; before any controller runs, so every claim is created with
/// the default class already in place.
pub async fn apply_classes(client: &Client, flavour: Flavour) -> Result<(), Error> {
    let api = Api::<StorageClass>::all(client.clone());
    for (name, provisioner, default) in classes(flavour) {
        let class: StorageClass = serde_json::from_value(json!({
            "apiVersion": "storage.k8s.io/v1",
            "kind": "StorageClass",
            "metadata": {
                "name": name,
                "annotations": {DEFAULT_CLASS_ANNOTATION: default.to_string()},
            },
            "provisioner": provisioner,
            "reclaimPolicy": "Delete",
            "volumeBindingMode": "Immediate",
        }))
        .map_err(|e| Error::Other(format!("StorageClass {name}: {e}")))?;
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&class),
        )
        .await?;
    }
    Ok(())
}

async fn sync_profiles(client: &Client) -> Result<(), Error> {
    let resource = storage_profile_resource();
    let profiles = Api::<DynamicObject>::all_with(client.clone(), &resource);
    let classes = Api::<StorageClass>::all(client.clone())
        .list(&Default::default())
        .await?;
    let existing: BTreeMap<String, DynamicObject> = profiles
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    for class in &classes.items {
        let status = profile_status(class, &capabilities(&class.provisioner));
        let name = class.name_any();
        if existing
            .get(&name)
            .is_some_and(|p| p.data["status"] == status)
        {
            continue;
        }
        if !existing.contains_key(&name) {
            let profile: DynamicObject = serde_json::from_value(json!({
                "apiVersion": "cdi.kubevirt.io/v1beta1",
                "kind": "StorageProfile",
                "metadata": {"name": name},
                "spec": {},
            }))
            .map_err(|e| Error::Other(format!("StorageProfile {name}: {e}")))?;
            profiles
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER),
                    &Patch::Apply(&profile),
                )
                .await?;
        }
        let patch = json!({"status": status});
        profiles
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn an_unset_mode_takes_the_first_set_of_the_profile() {
        let rbd = capabilities(RBD_PROVISIONER);
        assert_eq!(
            render_modes(None, None, Some((RBD_CLASS, &rbd))),
            Ok((strings(&["ReadWriteMany"]), "Block".to_owned()))
        );
        let hpp = capabilities(HOSTPATH_PROVISIONER);
        assert_eq!(
            render_modes(None, None, Some((HOSTPATH_CLASS, &hpp))),
            Ok((strings(&["ReadWriteOnce"]), "Filesystem".to_owned()))
        );
    }

    #[test]
    fn a_named_mode_takes_the_access_modes_of_its_first_set() {
        let rbd = capabilities(RBD_PROVISIONER);
        assert_eq!(
            render_modes(None, Some("Filesystem"), Some((RBD_CLASS, &rbd))),
            Ok((strings(&["ReadWriteOnce"]), "Filesystem".to_owned()))
        );
        let rwo = strings(&["ReadWriteOnce"]);
        assert_eq!(
            render_modes(Some(&rwo), None, Some((RBD_CLASS, &rbd))),
            Ok((rwo.clone(), "Block".to_owned()))
        );
        assert_eq!(
            render_modes(Some(&rwo), Some("Block"), None),
            Ok((rwo, "Block".to_owned())),
            "nothing left to ask the profile"
        );
    }

    #[test]
    fn an_empty_profile_or_no_class_is_cdis_claim_not_valid() {
        assert_eq!(
            render_modes(None, None, Some(("local", &[]))),
            Err("no accessMode specified in StorageProfile local".to_owned())
        );
        assert_eq!(
            render_modes(None, Some("Block"), None),
            Err("PVC spec is missing accessMode and no storageClass to choose profile".to_owned())
        );
    }

    #[test]
    fn flavours_differ_in_their_default_class() {
        let default = |f| classes(f).into_iter().find(|c| c.2).map(|c| c.0);
        assert_eq!(default(Flavour::OpenShift), Some(RBD_CLASS));
        assert_eq!(default(Flavour::Kubernetes), Some(HOSTPATH_CLASS));
    }

    #[test]
    fn an_administrators_sets_override_cdis() {
        let profile: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "StorageProfile",
            "metadata": {"name": "x"},
            "spec": {"claimPropertySets": [{"accessModes": ["ReadWriteOnce"], "volumeMode": "Filesystem"}]},
            "status": {"claimPropertySets": [{"accessModes": ["ReadWriteMany"], "volumeMode": "Block"}]},
        }))
        .unwrap();
        assert_eq!(
            profile_sets(&profile),
            vec![set("ReadWriteOnce", "Filesystem")]
        );
    }
}
