//! The cluster's StorageClasses as a platform engineer finds them:
//!
//! - OpenShift flavour: ODF's Ceph RBD class `ocs-storagecluster-ceph-rbd` is the default, and
//!   the hostpath-provisioner class `hostpath-csi` offers Filesystem.
//! - Kubernetes flavour: `hostpath-csi` alone, the default.
//!
//! The StorageProfile of each class is upstream CDI's (its storageprofile controller, from its
//! known-provisioner table: RBD prefers Block, HPP is Filesystem only); the sim's provisioner
//! plays both provisioners and no other (`sim::volumes`), so a class of any other provisioner
//! leaves its claims Pending, as on a cluster where nobody runs it. Neither provisioner has a `CSIDriver` object here, so
//! CDI fills DataVolumes without volume populators (`shouldUseCDIPopulator`) and clones
//! host-assisted.

use k8s_openapi::api::storage::v1::StorageClass;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::{Error, Flavour};

/// ODF's RBD class, the default of an OpenShift Virtualization cluster on ODF.
pub const RBD_CLASS: &str = "ocs-storagecluster-ceph-rbd";
const RBD_PROVISIONER: &str = "openshift-storage.rbd.csi.ceph.com";
/// The hostpath-provisioner's class (HPP), Filesystem only.
pub const HOSTPATH_CLASS: &str = "hostpath-csi";
const HOSTPATH_PROVISIONER: &str = "kubevirt.io.hostpath-provisioner";
/// `storageclass.kubernetes.io/is-default-class`.
pub const DEFAULT_CLASS_ANNOTATION: &str = "storageclass.kubernetes.io/is-default-class";

const FIELD_MANAGER: &str = "guestcluster-sim-storage";

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

/// Whether the sim plays the external provisioner `name` (one of the flavours' classes).
pub fn provisions(name: &str) -> bool {
    [Flavour::OpenShift, Flavour::Kubernetes]
        .into_iter()
        .flat_map(classes)
        .any(|(_, provisioner, _)| provisioner == name)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flavours_differ_in_their_default_class() {
        let default = |f| classes(f).into_iter().find(|c| c.2).map(|c| c.0);
        assert_eq!(default(Flavour::OpenShift), Some(RBD_CLASS));
        assert_eq!(default(Flavour::Kubernetes), Some(HOSTPATH_CLASS));
    }

    #[test]
    fn only_the_classes_provisioners_are_played() {
        assert!(provisions(RBD_PROVISIONER) && provisions(HOSTPATH_PROVISIONER));
        assert!(!provisions("example.com/not-deployed"));
    }
}
