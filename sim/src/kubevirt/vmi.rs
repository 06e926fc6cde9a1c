//! The VMI controller: virt-controller's and virt-handler's work for a VMI, one step at a time
//! from what is observed ([`next_vmi_step`]), until the VMI waits for something.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
    Preconditions,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::decide::{
    PodView, VmiObservation, VmiStep, VolumeWait, condition, device_targets, next_vmi_step,
    set_condition,
};
use super::guests::{BootDisk, BootRequest, Exits};
use super::launcher::{self, ended_status, launcher_pod};
use super::{Shared, is_conflict, is_not_found, merge_status_patch, now, storage};
use crate::Error;
use guestcluster::kubevirt::{
    PhaseTransitionTimestamp, VirtualMachineInstance, VirtualMachineInstanceStatus,
    VmiNetworkInterface, VmiPhase, VolumeStatus, condition_types, finalizers, labels,
};

/// Steps taken in one reconcile before handing back to the controller (a guard against a step
/// that does not change what the next observation sees).
const MAX_STEPS: usize = 24;
/// While waiting for a pod or volume, look again this often even without an event.
const POLL: Duration = Duration::from_secs(2);

pub(super) fn resource() -> ApiResource {
    ApiResource::erase::<VirtualMachineInstance>(&())
}

pub(super) async fn run(shared: Arc<Shared>) {
    let client = shared.ctx.client.clone();
    let ar = resource();
    let controller = Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default(),
        ar.clone(),
    );
    let controller = controller.owns_with(
        Api::<Pod>::all(client.clone()),
        (),
        watcher::Config::default().labels(&launcher::selector()),
    );
    storage::woken_by_claims(controller, &client, waiting_users)
        .run(
            |vmi, shared: Arc<Shared>| async move {
                converge(
                    &shared,
                    &vmi.namespace().unwrap_or_default(),
                    &vmi.name_any(),
                )
                .await
            },
            super::error_policy,
            shared,
        )
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!("simulated KubeVirt VMI controller: {err}");
            }
        })
        .await;
}

/// VMIs in `namespace` not yet scheduled that use the claim `name`.
fn waiting_users(
    store: &Store<DynamicObject>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<DynamicObject>> {
    store
        .state()
        .into_iter()
        .filter(|vmi| vmi.namespace().as_deref() == Some(namespace))
        .filter(|vmi| {
            matches!(
                vmi.data["status"]["phase"].as_str(),
                None | Some("" | "Pending")
            )
        })
        .filter(|vmi| storage::claims_in(&vmi.data["spec"]["volumes"]).any(|c| c == name))
        .map(|vmi| ObjectRef::from_obj_with(vmi.as_ref(), resource()))
        .collect()
}

/// Handles guest exits: the VMI of a guest that stopped is looked at at once.
pub(super) async fn watch_exits(shared: Arc<Shared>, mut exits: Exits) {
    while let Some((uid, exit)) = exits.next().await {
        shared.record_exit(&uid, exit);
        if let Some((namespace, name)) = shared.vmi_name(&uid) {
            let shared = shared.clone();
            tokio::spawn(async move {
                if let Err(err) = converge(&shared, &namespace, &name).await {
                    tracing::debug!(%namespace, %name, "after a guest exit: {err}");
                }
            });
        }
    }
}

/// Takes steps for the VMI `namespace/name` until it waits for something.
pub(super) async fn converge(
    shared: &Arc<Shared>,
    namespace: &str,
    name: &str,
) -> Result<Action, Error> {
    let lock = shared.vmi_lock(namespace, name);
    let _guard = lock.lock().await;
    let client = shared.ctx.client.clone();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), namespace, &resource());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for _ in 0..MAX_STEPS {
        let Some(raw) = api.get_opt(name).await? else {
            shared.forget_vmi(namespace, name);
            return Ok(Action::await_change());
        };
        let vmi: VirtualMachineInstance = match raw.try_parse() {
            Ok(vmi) => vmi,
            Err(err) => {
                tracing::warn!(%namespace, %name, "simulated KubeVirt cannot read this VMI: {err}");
                return Ok(Action::await_change());
            }
        };
        let uid = vmi.uid().unwrap_or_default();
        shared.remember_vmi(&uid, namespace, name);
        let launcher_pods = pods
            .list(&ListParams::default().labels(&format!("{}={uid}", labels::CREATED_BY)))
            .await?
            .items;
        let pod_views: Vec<PodView> = launcher_pods.iter().map(pod_view).collect();
        let phase = vmi.phase();
        let deleting = vmi.metadata.deletion_timestamp.is_some();
        let volume_wait = if !deleting && phase == VmiPhase::Pending && pod_views.is_empty() {
            storage::first_wait(&client, namespace, &vmi.spec.volumes).await?
        } else {
            None
        };
        let observation = VmiObservation {
            phase,
            deleting,
            has_finalizer: vmi
                .finalizers()
                .iter()
                .any(|f| f == finalizers::VMI_FOREGROUND_DELETE),
            volume_wait: volume_wait.as_ref(),
            pods: &pod_views,
            guest: shared.guest_view(&uid),
            start_remaining: if phase == VmiPhase::Scheduled {
                shared.start_remaining(&vmi)
            } else {
                Duration::ZERO
            },
        };
        let step = next_vmi_step(&observation);
        tracing::debug!(%namespace, %name, %uid, ?phase, ?step, "simulated KubeVirt VMI step");
        match step {
            VmiStep::Nothing => return Ok(Action::requeue(Duration::from_secs(60))),
            VmiStep::WaitPod | VmiStep::WaitPodsGone => return Ok(Action::requeue(POLL)),
            VmiStep::WaitStart(left) => return Ok(Action::requeue(left)),
            VmiStep::WaitVolumes(wait) => {
                report_volume_wait(&api, &vmi, &wait).await?;
                return Ok(Action::requeue(POLL));
            }
            VmiStep::AddFinalizer => {
                let mut list = vmi.finalizers().to_vec();
                list.push(finalizers::VMI_FOREGROUND_DELETE.into());
                patch_finalizers(&api, &vmi, list).await?;
            }
            VmiStep::RemoveFinalizer => {
                let list = vmi
                    .finalizers()
                    .iter()
                    .filter(|f| *f != finalizers::VMI_FOREGROUND_DELETE)
                    .cloned()
                    .collect();
                patch_finalizers(&api, &vmi, list).await?;
                shared.forget_guest(&uid);
            }
            VmiStep::ShutdownGuest => shared.shutdown_guest(&uid).await,
            VmiStep::Finish {
                phase,
                reason,
                message,
            } => {
                tracing::info!(%namespace, %name, %uid, %phase, %reason, "simulated VMI ended: {message}");
                write_status(&api, &vmi, |status, now| {
                    enter(status, phase, now);
                    status.reason = Some(reason.clone());
                    set_condition(
                        &mut status.conditions,
                        condition(condition_types::READY, false, &reason, &message, now),
                    );
                })
                .await?;
            }
            VmiStep::DeletePods => {
                for pod in pod_views.iter().filter(|p| !p.deleting) {
                    delete_pod(&pods, pod).await?;
                }
            }
            VmiStep::MarkPending => {
                write_status(&api, &vmi, |status, now| {
                    enter(status, VmiPhase::Pending, now)
                })
                .await?;
            }
            VmiStep::CreatePod => {
                pods.create(&PostParams::default(), &launcher_pod(&vmi))
                    .await?;
                mark_scheduling(&api, &vmi).await?;
            }
            VmiStep::MarkScheduling => mark_scheduling(&api, &vmi).await?,
            VmiStep::MarkScheduled { pod } => {
                write_status(&api, &vmi, |status, now| {
                    enter(status, VmiPhase::Scheduled, now);
                    status.node_name = pod.node.clone();
                    status.active_pods = [(pod.uid.clone(), pod.node.clone().unwrap_or_default())]
                        .into_iter()
                        .collect();
                    status.launcher_container_image_version = Some(launcher::LAUNCHER_IMAGE.into());
                })
                .await?;
                shared.mark_scheduled(&uid);
            }
            VmiStep::Boot { pod } => {
                if let Err(message) = qemu_opens_every_disk(shared, &vmi).await? {
                    tracing::info!(%namespace, %name, %uid, "simulated domain did not start: {message}");
                    write_status(&api, &vmi, |status, now| {
                        set_condition(
                            &mut status.conditions,
                            condition(
                                condition_types::SYNCHRONIZED,
                                false,
                                SYNC_FAILED_REASON,
                                &message,
                                now,
                            ),
                        );
                    })
                    .await?;
                    // virt-handler retries the sync with a backoff.
                    return Ok(Action::requeue(SYNC_RETRY));
                }
                if let Err(message) = boot(shared, &vmi, &pod).await? {
                    tracing::info!(%namespace, %name, %uid, "simulated guest did not start: {message}");
                    write_status(&api, &vmi, |status, now| {
                        enter(status, VmiPhase::Failed, now);
                        status.reason = Some("BootFailed".into());
                        set_condition(
                            &mut status.conditions,
                            condition(condition_types::READY, false, "BootFailed", &message, now),
                        );
                    })
                    .await?;
                }
            }
            VmiStep::MarkRunning { pod } => {
                let targets = device_targets(
                    &vmi.spec
                        .domain
                        .devices
                        .disks
                        .iter()
                        .map(|d| d.bus())
                        .collect::<Vec<_>>(),
                );
                let interface = vmi
                    .spec
                    .domain
                    .devices
                    .interfaces
                    .first()
                    .map_or_else(|| "default".to_owned(), |i| i.name.clone());
                let mac = vmi
                    .spec
                    .domain
                    .devices
                    .interfaces
                    .first()
                    .and_then(|i| i.mac_address.clone())
                    .unwrap_or_else(|| mac_for(&uid));
                let access_modes = claim_access_modes(shared, &vmi).await?;
                let migratable = live_migratable(&vmi, &access_modes);
                write_status(&api, &vmi, |status, now| {
                    enter(status, VmiPhase::Running, now);
                    status.node_name = pod.node.clone();
                    let ip = pod.ip.clone().unwrap_or_default();
                    status.interfaces = vec![VmiNetworkInterface {
                        name: Some(interface.clone()),
                        ip_address: Some(ip.clone()),
                        ip_addresses: vec![ip],
                        mac: Some(mac.clone()),
                        interface_name: Some("eth0".into()),
                        info_source: Some("domain, guest-agent".into()),
                    }];
                    status.volume_status = vmi
                        .spec
                        .domain
                        .devices
                        .disks
                        .iter()
                        .zip(&targets)
                        .map(|(disk, target)| VolumeStatus {
                            name: disk.name.clone(),
                            target: Some(target.clone()),
                            persistent_volume_claim_info: vmi
                                .spec
                                .volume(&disk.name)
                                .and_then(|v| v.claim_name())
                                .map(|claim| guestcluster::kubevirt::PersistentVolumeClaimInfo {
                                    claim_name: Some(claim.to_owned()),
                                    access_modes: access_modes
                                        .get(claim)
                                        .cloned()
                                        .unwrap_or_default(),
                                    ..Default::default()
                                }),
                        })
                        .collect();
                    status.reason = None;
                    set_condition(
                        &mut status.conditions,
                        condition(condition_types::READY, true, "GuestRunning", "", now),
                    );
                    let (ok, reason, message) = match &migratable {
                        Ok(()) => (true, "", ""),
                        Err(message) => (false, DISKS_NOT_LIVE_MIGRATABLE, message.as_str()),
                    };
                    set_condition(
                        &mut status.conditions,
                        condition(LIVE_MIGRATABLE, ok, reason, message, now),
                    );
                })
                .await?;
            }
            VmiStep::FinishPod { pod, phase } => {
                if let Some(pod) = launcher_pods.iter().find(|p| p.name_any() == pod) {
                    let status = ended_status(pod, phase, &now());
                    pods.patch_status(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(serde_json::json!({ "status": status })),
                    )
                    .await?;
                }
            }
        }
    }
    Ok(Action::requeue(Duration::from_secs(1)))
}

fn pod_view(pod: &Pod) -> PodView {
    let status = pod.status.as_ref();
    PodView {
        name: pod.name_any(),
        uid: pod.uid().unwrap_or_default(),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        node: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
        ip: status.and_then(|s| s.pod_ip.clone()),
        phase: status.and_then(|s| s.phase.clone()),
    }
}

/// A stable locally administered MAC for a VMI without one.
fn mac_for(uid: &str) -> String {
    let hash = uid
        .bytes()
        .fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
        .to_be_bytes();
    format!(
        "02:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        hash[0], hash[1], hash[2], hash[3], hash[4]
    )
}

/// The VMI condition saying whether a live migration could move it.
pub const LIVE_MIGRATABLE: &str = crate::admission::eviction::LIVE_MIGRATABLE;
/// Its reason when a disk's claim is not shared.
pub const DISKS_NOT_LIVE_MIGRATABLE: &str = "DisksNotLiveMigratable";

/// The access modes of every claim `vmi`'s volumes name (a claim that cannot be read has none).
async fn claim_access_modes(
    shared: &Arc<Shared>,
    vmi: &VirtualMachineInstance,
) -> Result<BTreeMap<String, Vec<String>>, Error> {
    let namespace = vmi.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(shared.ctx.client.clone(), &namespace);
    let mut modes = BTreeMap::new();
    for claim in vmi.spec.volumes.iter().filter_map(|v| v.claim_name()) {
        if let Some(pvc) = claims.get_opt(claim).await? {
            let access = pvc.spec.and_then(|s| s.access_modes).unwrap_or_default();
            modes.insert(claim.to_owned(), access);
        }
    }
    Ok(modes)
}

/// virt-handler's disk check for live migration (kubevirt d923fdb `pkg/virt-handler/vm.go`,
/// `checkVolumesForMigration`): every PVC or DataVolume volume must be `ReadWriteMany`; other
/// volumes (container disks, cloud-init) are copied by a block migration. The interfaces,
/// host devices and the rest of upstream's checks are not modelled.
pub fn live_migratable(
    vmi: &VirtualMachineInstance,
    access_modes: &BTreeMap<String, Vec<String>>,
) -> Result<(), String> {
    for claim in vmi.spec.volumes.iter().filter_map(|v| v.claim_name()) {
        let shared = access_modes
            .get(claim)
            .is_some_and(|modes| modes.iter().any(|m| m == "ReadWriteMany"));
        if !shared {
            return Err(format!(
                "cannot migrate VMI: PVC {claim} is not shared, live migration requires that all PVCs must be shared (using ReadWriteMany access mode)"
            ));
        }
    }
    Ok(())
}

/// Starts the guest of `vmi` in `pod`; `Ok(Err(why))` when it cannot start.
/// virt-handler's reason when the domain could not be synchronized (started).
pub const SYNC_FAILED_REASON: &str = "Synchronizing with the Domain failed.";
const SYNC_RETRY: Duration = Duration::from_secs(5);
/// Where virt-launcher mounts a Filesystem-mode PVC of a disk (`disk.img` inside).
const VMI_DISKS_DIR: &str = "/var/run/kubevirt-private/vmi-disks";

/// What the launcher pod's kubelet and QEMU do before the guest runs: every PVC volume the VMI
/// does not mark read-only is given the pod's `fsGroup` 107; then QEMU, as 107, opens each disk
/// (read-only for a CD-ROM or `readonly` disk). A disk it cannot open fails the domain's start
/// with libvirt's error, as virt-handler reports it; the VMI stays `Scheduled` and is retried.
async fn qemu_opens_every_disk(
    shared: &Arc<Shared>,
    vmi: &VirtualMachineInstance,
) -> Result<Result<(), String>, Error> {
    let namespace = vmi.namespace().unwrap_or_default();
    for disk in &vmi.spec.domain.devices.disks {
        let Some(volume) = vmi.spec.volume(&disk.name) else {
            continue;
        };
        let Some(claim) = volume.claim_name() else {
            continue;
        };
        // A missing or unbound claim, or no image yet: the boot reports those.
        let Ok(claim_volume) = storage::disk_image(&shared.ctx, &namespace, claim).await? else {
            continue;
        };
        let image = claim_volume.content();
        if !image.exists() {
            continue;
        }
        let read_only_volume = volume
            .persistent_volume_claim
            .as_ref()
            .and_then(|p| p.read_only)
            == Some(true);
        let block = claim_volume.mode == crate::volumes::VolumeMode::Block;
        if block {
            // virt-handler hands a Block volume's device to QEMU
            // (`changeOwnershipOfBlockDevices`); the kubelet's `fsGroup` is for filesystems.
            let qemu = crate::permissions::QEMU_ID;
            if let Err(err) = std::os::unix::fs::chown(&image, Some(qemu), Some(qemu)) {
                return Ok(Err(format!(
                    "changing the owner of {}: {err}",
                    image.display()
                )));
            }
        } else if let Some(dir) = image.parent().filter(|_| !read_only_volume) {
            let ownership = crate::permissions::Ownership {
                dir: dir.to_owned(),
                group: crate::permissions::QEMU_ID,
                read_only: false,
            };
            if let Err(err) = crate::permissions::apply(&ownership) {
                return Ok(Err(format!("applying fsGroup to {}: {err}", dir.display())));
            }
        }
        // A CD-ROM is read-only (KubeVirt's default; ours never say otherwise).
        let write = !disk.is_cdrom();
        if let Err(denied) =
            crate::permissions::may_open(&image, &crate::permissions::qemu(), write)
        {
            tracing::debug!(disk = %disk.name, "QEMU cannot open the disk: {denied}");
            let path = if block {
                format!("/dev/{}", volume.name)
            } else {
                format!(
                    "{VMI_DISKS_DIR}/{}/{}",
                    volume.name,
                    crate::volumes::DISK_FILE
                )
            };
            return Ok(Err(format!(
                "server error. command SyncVMI failed: \"LibvirtError(Code=1, Domain=10, Message='internal error: process exited while connecting to monitor: qemu-kvm: Could not open '{path}': Permission denied')\""
            )));
        }
    }
    Ok(Ok(()))
}

async fn boot(
    shared: &Arc<Shared>,
    vmi: &VirtualMachineInstance,
    pod: &PodView,
) -> Result<Result<(), String>, Error> {
    let namespace = vmi.namespace().unwrap_or_default();
    let Some(ip) = pod.ip.as_deref().and_then(|ip| ip.parse().ok()) else {
        return Ok(Err(format!("pod {} has no usable IP", pod.name)));
    };
    let mut disks = Vec::new();
    for disk in &vmi.spec.domain.devices.disks {
        let Some(volume) = vmi.spec.volume(&disk.name) else {
            return Ok(Err(format!(
                "disk {} has no volume of that name",
                disk.name
            )));
        };
        let Some(claim) = volume.claim_name() else {
            // cloud-init and other generated volumes are not modelled; the guest sees nothing.
            continue;
        };
        let image = match storage::disk_image(&shared.ctx, &namespace, claim).await? {
            Ok(volume) => volume.content(),
            Err(message) => return Ok(Err(message)),
        };
        if !image.exists() {
            return Ok(Err(format!(
                "disk {}: PVC {namespace}/{claim} holds no {}",
                disk.name,
                crate::volumes::DISK_FILE
            )));
        }
        disks.push(BootDisk {
            name: disk.name.clone(),
            image,
            boot_order: disk.boot_order,
            cdrom: disk.is_cdrom(),
        });
    }
    let request = BootRequest {
        vmi_uid: vmi.uid().unwrap_or_default(),
        namespace,
        vm_name: launcher::vm_name(vmi),
        ip,
        disks,
        clock_offset_seconds: vmi.spec.domain.clock_offset_seconds(),
    };
    Ok(shared.guests.boot(request).await)
}

async fn mark_scheduling(
    api: &Api<DynamicObject>,
    vmi: &VirtualMachineInstance,
) -> Result<(), Error> {
    write_status(api, vmi, |status, now| {
        enter(status, VmiPhase::Scheduling, now);
        status
            .conditions
            .retain(|c| c.type_ != condition_types::SYNCHRONIZED);
        if vmi.spec.volumes.iter().any(|v| v.data_volume.is_some()) {
            set_condition(
                &mut status.conditions,
                condition(
                    condition_types::DATA_VOLUMES_READY,
                    true,
                    "AllDVsReady",
                    "All of the VMI's DVs are bound and not running",
                    now,
                ),
            );
        }
    })
    .await
}

async fn report_volume_wait(
    api: &Api<DynamicObject>,
    vmi: &VirtualMachineInstance,
    wait: &VolumeWait,
) -> Result<(), Error> {
    let namespace = vmi.namespace().unwrap_or_default();
    write_status(api, vmi, |status, now| {
        // Only one wait is reported at a time.
        status.conditions.retain(|c| {
            c.type_ != condition_types::SYNCHRONIZED
                && c.type_ != condition_types::DATA_VOLUMES_READY
        });
        set_condition(&mut status.conditions, wait.condition(&namespace, now));
    })
    .await
}

/// Enters `phase`, recording when.
fn enter(status: &mut VirtualMachineInstanceStatus, phase: VmiPhase, now: &Time) {
    status.phase = Some(phase);
    if !status
        .phase_transition_timestamps
        .iter()
        .any(|t| t.phase == phase)
    {
        status
            .phase_transition_timestamps
            .push(PhaseTransitionTimestamp {
                phase,
                phase_transition_timestamp: now.clone(),
            });
    }
}

/// Changes the VMI's status with `change`; writes nothing when nothing changed. Guarded by the
/// resource version: a concurrent change makes this fail and the step is decided again.
async fn write_status(
    api: &Api<DynamicObject>,
    vmi: &VirtualMachineInstance,
    change: impl FnOnce(&mut VirtualMachineInstanceStatus, &Time),
) -> Result<(), Error> {
    let old = vmi.status.clone().unwrap_or_default();
    let mut new = old.clone();
    change(&mut new, &now());
    if let Some(patch) = merge_status_patch(&old, &new, vmi.resource_version())? {
        api.patch_status(
            &vmi.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await?;
    }
    Ok(())
}

async fn patch_finalizers(
    api: &Api<DynamicObject>,
    vmi: &VirtualMachineInstance,
    finalizers: Vec<String>,
) -> Result<(), Error> {
    let patch = serde_json::json!({
        "metadata": {"finalizers": finalizers, "resourceVersion": vmi.resource_version()},
    });
    match api
        .patch(
            &vmi.name_any(),
            &PatchParams::default(),
            &Patch::Merge(patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if is_not_found(&err) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

async fn delete_pod(pods: &Api<Pod>, pod: &PodView) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(pod.uid.clone()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(&pod.name, &params).await {
        Ok(_) => Ok(()),
        Err(err) if is_not_found(&err) || is_conflict(&err) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macs_are_stable_and_locally_administered() {
        assert_eq!(mac_for("a"), mac_for("a"));
        assert_ne!(mac_for("a"), mac_for("b"));
        assert!(mac_for("a").starts_with("02:"));
        assert_eq!(mac_for("a").len(), 17);
    }

    #[test]
    fn entering_a_phase_records_it_once() {
        let mut status = VirtualMachineInstanceStatus::default();
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
        enter(&mut status, VmiPhase::Pending, &t0);
        enter(&mut status, VmiPhase::Pending, &t1);
        assert_eq!(status.phase_transition_timestamps.len(), 1);
        assert_eq!(
            status.phase_transition_timestamps[0].phase_transition_timestamp,
            t0
        );
    }
}
