//! virt-handler's work for the VMIs upstream virt-controller hands to this node: start the
//! guest, report it `Running`, end the VMI with its guest, one step at a time from what is
//! observed ([`next_vmi_step`]), until the VMI waits for something.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, ResourceExt};

use super::decide::{Exit, PodView, VmiObservation, VmiStep, device_targets, next_vmi_step};
use super::guests::{BootDisk, BootRequest, Exits};
use super::launcher::{self, ended_status};
use super::{Shared, now, storage};
use crate::Error;
use guestcluster::kubevirt::{VirtualMachineInstance, VmiPhase, labels};
use serde_json::{Value, json};

/// Steps taken in one reconcile before handing back to the controller (a guard against a step
/// that does not change what the next observation sees).
const MAX_STEPS: usize = 24;

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
    controller
        .owns_with(
            Api::<Pod>::all(client.clone()),
            (),
            watcher::Config::default().labels(&launcher::selector()),
        )
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
                tracing::debug!("simulated virt-handler: {err}");
            }
        })
        .await;
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
    let api: Api<DynamicObject> =
        Api::namespaced_with(shared.handler.clone(), namespace, &resource());
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    for _ in 0..MAX_STEPS {
        // virt-handler's RBAC lets it list and watch VMIs, not get them.
        let listed = api
            .list(&ListParams::default().fields(&format!("metadata.name={name}")))
            .await?;
        let Some(raw) = listed.items.into_iter().next() else {
            shared.forget_vmi(namespace, name);
            return Ok(Action::await_change());
        };
        let vmi: VirtualMachineInstance = match raw.clone().try_parse() {
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
        let node = &shared.ctx.options.node_name;
        let observation = VmiObservation {
            phase,
            deleting: vmi.metadata.deletion_timestamp.is_some(),
            on_this_node: vmi.status.as_ref().and_then(|s| s.node_name.as_ref()) == Some(node),
            pods: &pod_views,
            guest: shared.guest_view(&uid),
            start_remaining: if phase == VmiPhase::Scheduled {
                shared.mark_scheduled(&uid);
                shared.start_remaining(&vmi)
            } else {
                Duration::ZERO
            },
        };
        let step = next_vmi_step(&observation);
        tracing::debug!(%namespace, %name, %uid, ?phase, ?step, "simulated virt-handler step");
        match step {
            VmiStep::Nothing => return Ok(Action::requeue(Duration::from_secs(60))),
            VmiStep::WaitStart(left) => return Ok(Action::requeue(left)),
            VmiStep::ShutdownGuest => shared.shutdown_guest(&uid, Exit::PoweredOff).await,
            VmiStep::Finish {
                phase,
                reason,
                message,
            } => {
                tracing::info!(%namespace, %name, %uid, %phase, %reason, "simulated VMI ended: {message}");
                write_status(&api, &raw, |status, now| {
                    enter(status, phase, now);
                    status["reason"] = json!(reason);
                })
                .await?;
                if phase.is_final() {
                    shared.forget_guest(&uid);
                }
            }
            VmiStep::Boot { pod } => {
                if let Err(message) = qemu_opens_every_disk(shared, &vmi).await? {
                    tracing::info!(%namespace, %name, %uid, "simulated domain did not start: {message}");
                    write_status(&api, &raw, |status, now| {
                        set_condition(
                            status,
                            condition(SYNCHRONIZED, false, SYNC_FAILED_REASON, &message, now),
                        );
                    })
                    .await?;
                    // virt-handler retries the sync with a backoff.
                    return Ok(Action::requeue(SYNC_RETRY));
                }
                if let Err(message) = boot(shared, &vmi, &pod).await? {
                    tracing::info!(%namespace, %name, %uid, "simulated guest did not start: {message}");
                    write_status(&api, &raw, |status, now| {
                        enter(status, VmiPhase::Failed, now);
                        status["reason"] = json!("BootFailed");
                        set_condition(
                            status,
                            condition(SYNCHRONIZED, false, SYNC_FAILED_REASON, &message, now),
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
                let disks: Vec<(String, String)> = vmi
                    .spec
                    .domain
                    .devices
                    .disks
                    .iter()
                    .map(|d| d.name.clone())
                    .zip(targets)
                    .collect();
                write_status(&api, &raw, |status, now| {
                    enter(status, VmiPhase::Running, now);
                    let ip = pod.ip.clone().unwrap_or_default();
                    // virt-controller lists the interfaces (with the pod's interface name);
                    // virt-handler adds what the domain and the guest agent report.
                    let interfaces = list_entry(status, "interfaces", &interface);
                    interfaces["ipAddress"] = json!(ip);
                    interfaces["ipAddresses"] = json!([ip]);
                    interfaces["mac"] = json!(mac);
                    interfaces["interfaceName"] = json!("eth0");
                    interfaces["infoSource"] = json!("domain, guest-agent");
                    // virt-controller lists the volumes with their claims; virt-handler adds
                    // the device each appears as.
                    for (disk, target) in &disks {
                        list_entry(status, "volumeStatus", disk)["target"] = json!(target);
                    }
                    if let Some(fields) = status.as_object_mut() {
                        fields.remove("reason");
                    }
                    remove_condition(status, SYNCHRONIZED);
                    let (ok, reason, message) = match &migratable {
                        Ok(()) => (true, "", ""),
                        Err(message) => (false, DISKS_NOT_LIVE_MIGRATABLE, message.as_str()),
                    };
                    set_condition(status, condition(LIVE_MIGRATABLE, ok, reason, message, now));
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
pub const LIVE_MIGRATABLE: &str = "LiveMigratable";
/// The VMI condition virt-handler sets `False` when it cannot start the domain.
const SYNCHRONIZED: &str = "Synchronized";
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
        vm_name: vm_name(vmi),
        ip,
        disks,
        clock_offset_seconds: vmi.spec.domain.clock_offset_seconds(),
    };
    Ok(shared.guests.boot(request).await)
}

/// Enters `phase`, recording when.
fn enter(status: &mut Value, phase: VmiPhase, now: &Time) {
    status["phase"] = json!(phase.as_str());
    let entered = json!({"phase": phase.as_str(), "phaseTransitionTimestamp": now});
    let timestamps = &mut status["phaseTransitionTimestamps"];
    if !timestamps.is_array() {
        *timestamps = json!([]);
    }
    if let Some(list) = timestamps.as_array_mut()
        && !list.iter().any(|t| t["phase"] == phase.as_str())
    {
        list.push(entered);
    }
}

/// The entry named `name` of the status list `field`, added when missing.
fn list_entry<'a>(status: &'a mut Value, field: &str, name: &str) -> &'a mut Value {
    let list = &mut status[field];
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("an array");
    let index = match list.iter().position(|e| e["name"] == name) {
        Some(index) => index,
        None => {
            list.push(json!({"name": name}));
            list.len() - 1
        }
    };
    &mut list[index]
}

/// Changes the VMI's status with `change`; writes nothing when nothing changed. KubeVirt's VMI
/// has no status subresource, and virt-handler's RBAC allows `update`, not `patch`: like
/// virt-handler, this replaces the object as read, so a concurrent change fails it (conflict)
/// and the step is decided again on what is there now.
async fn write_status(
    api: &Api<DynamicObject>,
    vmi: &DynamicObject,
    change: impl FnOnce(&mut Value, &Time),
) -> Result<(), Error> {
    let old = match &vmi.data["status"] {
        Value::Object(fields) => Value::Object(fields.clone()),
        _ => json!({}),
    };
    let mut new = old.clone();
    change(&mut new, &now());
    if new == old {
        return Ok(());
    }
    let mut updated = vmi.clone();
    updated.data["status"] = new;
    api.replace(&vmi.name_any(), &PostParams::default(), &updated)
        .await?;
    Ok(())
}

/// The name of the VM a VMI belongs to: its controller's, else the VMI's own (the guest's
/// simulated host names it by this).
fn vm_name(vmi: &VirtualMachineInstance) -> String {
    vmi.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == "VirtualMachine")
        .map_or_else(|| vmi.name_any(), |r| r.name.clone())
}

/// A VMI condition as virt-handler writes it.
fn condition(type_: &str, status: bool, reason: &str, message: &str, now: &Time) -> Value {
    let mut condition = json!({
        "type": type_,
        "status": if status { "True" } else { "False" },
        "lastProbeTime": null,
        "lastTransitionTime": now,
    });
    if !reason.is_empty() {
        condition["reason"] = json!(reason);
    }
    if !message.is_empty() {
        condition["message"] = json!(message);
    }
    condition
}

/// Sets `new` among the status's conditions, keeping the transition time while the status holds.
fn set_condition(status: &mut Value, mut new: Value) {
    let list = &mut status["conditions"];
    if !list.is_array() {
        *list = json!([]);
    }
    let list = list.as_array_mut().expect("an array");
    match list.iter_mut().find(|c| c["type"] == new["type"]) {
        Some(old) => {
            if old["status"] == new["status"] {
                new["lastTransitionTime"] = old["lastTransitionTime"].clone();
            }
            *old = new;
        }
        None => list.push(new),
    }
}

fn remove_condition(status: &mut Value, type_: &str) {
    if let Some(list) = status["conditions"].as_array_mut() {
        list.retain(|c| c["type"] != type_);
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
        let mut status = json!({});
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
        enter(&mut status, VmiPhase::Pending, &t0);
        enter(&mut status, VmiPhase::Pending, &t1);
        assert_eq!(status["phase"], "Pending");
        assert_eq!(
            status["phaseTransitionTimestamps"],
            json!([{"phase": "Pending", "phaseTransitionTimestamp": "1970-01-01T00:00:00Z"}])
        );
    }

    #[test]
    fn running_adds_to_the_entries_virt_controller_listed() {
        let mut status = json!({"interfaces": [{"name": "default", "podInterfaceName": "eth0"}]});
        list_entry(&mut status, "interfaces", "default")["ipAddress"] = json!("127.10.0.1");
        list_entry(&mut status, "volumeStatus", "root")["target"] = json!("vda");
        assert_eq!(
            status,
            json!({"interfaces": [{"name": "default", "podInterfaceName": "eth0",
                                   "ipAddress": "127.10.0.1"}],
                   "volumeStatus": [{"name": "root", "target": "vda"}]})
        );
    }

    #[test]
    fn a_condition_keeps_its_transition_time_while_its_status_holds() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
        let mut status = json!({});
        set_condition(
            &mut status,
            condition("LiveMigratable", false, "R", "m", &t0),
        );
        set_condition(
            &mut status,
            condition("LiveMigratable", false, "R", "n", &t1),
        );
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:00:00Z"
        );
        assert_eq!(status["conditions"][0]["message"], "n");
        set_condition(&mut status, condition("LiveMigratable", true, "", "", &t1));
        assert_eq!(
            status["conditions"][0]["lastTransitionTime"],
            "1970-01-01T00:00:01Z"
        );
    }
}
