//! Volumes of VMs and VMIs: which PVC (or DataVolume) backs each, whether it is usable, and the
//! `disk.img` inside it.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Client, ResourceExt};

use super::decide::{VolumeSummary, VolumeWait};
use crate::{Error, SimContext};
use guestcluster::kubevirt::Volume;

/// CDI's DataVolume (`cdi.kubevirt.io/v1beta1`).
pub fn data_volume_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
        "datavolumes",
    )
}

/// What a volume's storage looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClaimState {
    /// Bound PVC with this UID.
    Ready {
        pvc_uid: String,
    },
    Waiting(VolumeWait),
}

/// The state of the PVC behind `volume`; `None` for volumes without a PVC (cloud-init).
///
/// A `dataVolume` volume waits for its DataVolume to succeed; when the DataVolume is gone (CDI
/// garbage-collects completed ones) its PVC is used directly, as KubeVirt does.
pub async fn claim_state(
    client: &Client,
    namespace: &str,
    volume: &Volume,
) -> Result<Option<ClaimState>, Error> {
    let Some(claim) = volume.claim_name() else {
        return Ok(None);
    };
    if volume.data_volume.is_some() {
        let dvs: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), namespace, &data_volume_resource());
        if let Some(dv) = dvs.get_opt(claim).await? {
            let phase = dv.data["status"]["phase"].as_str().unwrap_or("Pending");
            match phase {
                "Succeeded" => {}
                "Failed" => {
                    let message = dv.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(|c| c["message"].as_str())
                        .find(|m| !m.is_empty())
                        .unwrap_or("no message")
                        .to_owned();
                    return Ok(Some(ClaimState::Waiting(VolumeWait::DataVolumeFailed {
                        data_volume: claim.to_owned(),
                        message,
                    })));
                }
                other => {
                    return Ok(Some(ClaimState::Waiting(VolumeWait::Provisioning {
                        data_volume: claim.to_owned(),
                        phase: other.to_owned(),
                    })));
                }
            }
        }
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
    Ok(Some(match pvcs.get_opt(claim).await? {
        None => ClaimState::Waiting(VolumeWait::NotFound {
            claim: claim.to_owned(),
        }),
        Some(pvc) if pvc.metadata.deletion_timestamp.is_some() => {
            // A PVC being deleted cannot be used by a new pod (the kubelet refuses it).
            ClaimState::Waiting(VolumeWait::NotFound {
                claim: claim.to_owned(),
            })
        }
        Some(pvc) if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound") => {
            ClaimState::Ready {
                pvc_uid: pvc.uid().unwrap_or_default(),
            }
        }
        Some(_) => ClaimState::Waiting(VolumeWait::Unbound {
            claim: claim.to_owned(),
        }),
    }))
}

/// The first volume a VMI cannot use yet, if any.
pub async fn first_wait(
    client: &Client,
    namespace: &str,
    volumes: &[Volume],
) -> Result<Option<VolumeWait>, Error> {
    for volume in volumes {
        if let Some(ClaimState::Waiting(wait)) = claim_state(client, namespace, volume).await? {
            return Ok(Some(wait));
        }
    }
    Ok(None)
}

/// What a VM's volumes look like, for its printable status.
pub async fn summary(
    client: &Client,
    namespace: &str,
    volumes: &[Volume],
) -> Result<VolumeSummary, Error> {
    let mut summary = VolumeSummary::default();
    for volume in volumes {
        match claim_state(client, namespace, volume).await? {
            Some(ClaimState::Waiting(VolumeWait::Provisioning { .. })) => {
                summary.provisioning = true;
            }
            Some(ClaimState::Waiting(VolumeWait::DataVolumeFailed { .. })) => {
                summary.data_volume_failed = true;
            }
            Some(ClaimState::Waiting(VolumeWait::Unbound { .. })) => summary.unbound = true,
            _ => {}
        }
    }
    Ok(summary)
}

/// The volume of the bound PVC `claim` (its disk is [`ClaimVolume::content`]), or why there is
/// none.
pub async fn disk_image(
    ctx: &SimContext,
    namespace: &str,
    claim: &str,
) -> Result<Result<crate::volumes::ClaimVolume, String>, Error> {
    Ok(ctx
        .volumes
        .claim_volume(&ctx.client, namespace, claim)
        .await?
        .ok_or_else(|| format!("PVC {namespace}/{claim} does not exist or is not bound")))
}

/// Finds, in a controller's store, the objects in a namespace that use the claim of a name.
pub type ClaimUsers = fn(&Store<DynamicObject>, &str, &str) -> Vec<ObjectRef<DynamicObject>>;

/// `controller`, also woken when a PVC or a DataVolume changes, for the objects `users` finds
/// using it (a VM or VMI waiting for its volumes).
pub fn woken_by_claims(
    controller: Controller<DynamicObject>,
    client: &Client,
    users: ClaimUsers,
) -> Controller<DynamicObject> {
    let for_pvcs = controller.store();
    let for_dvs = controller.store();
    let dv = data_volume_resource();
    controller
        .watches(
            Api::<PersistentVolumeClaim>::all(client.clone()),
            watcher::Config::default(),
            move |pvc| {
                users(
                    &for_pvcs,
                    &pvc.namespace().unwrap_or_default(),
                    &pvc.name_any(),
                )
            },
        )
        .watches_with(
            Api::<DynamicObject>::all_with(client.clone(), &dv),
            dv.clone(),
            watcher::Config::default(),
            move |dv| {
                users(
                    &for_dvs,
                    &dv.namespace().unwrap_or_default(),
                    &dv.name_any(),
                )
            },
        )
}

/// Claim names in a JSON `volumes` list (for mapping PVC/DataVolume events to their users).
pub fn claims_in(volumes: &serde_json::Value) -> impl Iterator<Item = &str> {
    volumes.as_array().into_iter().flatten().filter_map(|v| {
        v["dataVolume"]["name"]
            .as_str()
            .or_else(|| v["persistentVolumeClaim"]["claimName"].as_str())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_in_reads_both_volume_kinds() {
        let volumes = serde_json::json!([
            {"name": "a", "dataVolume": {"name": "dv"}},
            {"name": "b", "persistentVolumeClaim": {"claimName": "pvc"}},
            {"name": "c", "cloudInitNoCloud": {"userData": "x"}},
        ]);
        assert_eq!(claims_in(&volumes).collect::<Vec<_>>(), vec!["dv", "pvc"]);
        assert_eq!(claims_in(&serde_json::Value::Null).count(), 0);
    }
}
