//! The simulated KubeVirt (`sim::kubevirt`) against the real control plane, with
//! the rest of the simulation (storage, CDI, kubelet, guests) running.
//!
//! One simulation serves every test of this binary (see `support::shared_sim`); the restart test
//! has it alone while it restarts it.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};

use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, keys};
use guestcluster::kubevirt::{
    PrintableStatus, RunStrategy, VirtualMachine, VirtualMachineInstance, VmiPhase, labels,
};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use russh::keys::PrivateKey;
use serde_json::{Value, json};
use sim::guest::disk::create_disk;
use sim::guest::state::GuestState;
use support::shared_sim::{self, Setup, SharedSim};
use support::{client, namespace, wait_for};

// ---------------------------------------------------------------------------------------------
// The shared simulation
// ---------------------------------------------------------------------------------------------

async fn sim() -> &'static SharedSim {
    shared_sim::start(|| Setup {
        root: shared_sim::temp_root("sim-kubevirt-"),
        node_name: "sim-node",
        our_image_prefix: "quay.io/opdev/guestcluster",
        flavour: Default::default(),
    })
    .await
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

fn vms(client: &Client, ns: &str) -> Api<VirtualMachine> {
    Api::namespaced(client.clone(), ns)
}

fn vmis(client: &Client, ns: &str) -> Api<VirtualMachineInstance> {
    Api::namespaced(client.clone(), ns)
}

fn pvcs(client: &Client, ns: &str) -> Api<PersistentVolumeClaim> {
    Api::namespaced(client.clone(), ns)
}

fn pods(client: &Client, ns: &str) -> Api<Pod> {
    Api::namespaced(client.clone(), ns)
}

/// A VirtualMachine with 1 GiB of memory and one virtio root disk from PVC `claim`.
fn vm_with_pvc(name: &str, strategy: &str, claim: &str) -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
        "metadata": {"name": name},
        "spec": {
            "runStrategy": strategy,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    // KubeVirt refuses a VMI that asks for no memory.
                    "domain": {
                        "resources": {"requests": {"memory": "1Gi"}},
                        "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": claim}}],
                },
            },
        },
    })
}

async fn create_vm(client: &Client, ns: &str, vm: Value) -> VirtualMachine {
    let vm: VirtualMachine = serde_json::from_value(vm).expect("a VirtualMachine");
    vms(client, ns)
        .create(&PostParams::default(), &vm)
        .await
        .expect("create the VirtualMachine")
}

async fn create_pvc(client: &Client, ns: &str, name: &str) -> PersistentVolumeClaim {
    create_pvc_with(client, ns, name, "ReadWriteOnce").await
}

async fn create_pvc_with(
    client: &Client,
    ns: &str,
    name: &str,
    access: &str,
) -> PersistentVolumeClaim {
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "accessModes": [access],
            "resources": {"requests": {"storage": "1Gi"}},
        },
    }))
    .unwrap();
    pvcs(client, ns)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("create the PVC")
}

/// Waits until PVC `name` is bound and returns the path of its `disk.img`.
async fn bound_disk_path(sim: &SharedSim, client: &Client, ns: &str, name: &str) -> PathBuf {
    let ctx = sim.ctx();
    wait_for(&format!("PVC {ns}/{name} bound"), || {
        let ctx = ctx.clone();
        async move {
            ctx.volumes
                .claim_disk_path(client, ns, name)
                .await
                .ok()
                .flatten()
        }
    })
    .await
}

/// A bound PVC holding a bootable guest disk. The disk is written before the claim binds, as
/// a pre-populated volume would be: a VMI waiting for this claim must never see it blank.
async fn bootable_pvc(sim: &SharedSim, client: &Client, ns: &str, name: &str) -> PathBuf {
    bootable_pvc_with(sim, client, ns, name, "ReadWriteOnce").await
}

async fn bootable_pvc_with(
    sim: &SharedSim,
    client: &Client,
    ns: &str,
    name: &str,
    access: &str,
) -> PathBuf {
    let pvc = create_pvc_with(client, ns, name, access).await;
    let uid = pvc.uid().expect("a created PVC has a UID");
    let path = sim.ctx().volumes.disk_path(&uid);
    std::fs::create_dir_all(path.parent().unwrap()).expect("create the volume directory");
    write_bootable_disk(&path);
    assert_eq!(bound_disk_path(sim, client, ns, name).await, path);
    path
}

/// The key every test guest authorizes for `core`.
fn guest_key() -> &'static PrivateKey {
    static KEY: OnceLock<PrivateKey> = OnceLock::new();
    KEY.get_or_init(|| keys::generate_ecdsa_p256().expect("generate a test SSH key"))
}

fn authorized_key() -> String {
    keys::authorized_key_line(guest_key().public_key(), "sim-kubevirt-test")
        .expect("authorized_keys line")
}

const DISK_BYTES: u64 = 1 << 30;

/// Makes `path` an installed RHCOS system that lets [`guest_key`] in as `core`.
fn write_bootable_disk(path: &std::path::Path) {
    create_disk(
        path,
        DISK_BYTES,
        Some(&GuestState::rhcos(&authorized_key())),
    )
    .expect("write the guest disk");
}

/// Makes `path` a live ISO (what `coreos-installer iso ignition embed` produces).
fn write_live_iso(path: &std::path::Path) {
    let ignition = json!({
        "ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": [authorized_key()]}]},
    });
    let state = GuestState {
        live_iso: Some(ignition.to_string()),
        ..GuestState::rhcos_without_users()
    };
    create_disk(path, DISK_BYTES, Some(&state)).expect("write the live ISO");
}

/// Runs `line` (argv words) in the guest at `ip` over SSH as `core`.
async fn ssh(ip: &str, argv: &[&str]) -> String {
    let guest = SshGuest::connect(
        &format!("{ip}:22"),
        guest_key().clone(),
        &SshOptions::default(),
    )
    .await
    .expect("SSH into the guest");
    let output = guest
        .run_checked(&Command::new(argv.iter().copied()))
        .await
        .expect("run a command in the guest");
    output.stdout_text()
}

async fn set_run_strategy(client: &Client, ns: &str, name: &str, strategy: &str) {
    vms(client, ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runStrategy": strategy}})),
        )
        .await
        .expect("patch spec.runStrategy");
}

/// Waits until the VM satisfies `check`; the message shows its last status.
async fn wait_vm(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&VirtualMachine) -> bool,
) -> VirtualMachine {
    let api = vms(client, ns);
    let last = Mutex::new(None);
    let found = wait_for_quiet(|| async {
        let vm = api.get_opt(name).await.ok().flatten()?;
        let ok = check(&vm);
        *last.lock().unwrap() = Some(serde_json::to_string(&vm.status).unwrap_or_default());
        ok.then_some(vm)
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "timed out waiting for VM {ns}/{name}: {what}; last status: {}",
            last.lock().unwrap().clone().unwrap_or_default()
        )
    })
}

/// Waits until the VMI `name` satisfies `check`.
async fn wait_vmi(
    client: &Client,
    ns: &str,
    name: &str,
    what: &str,
    check: impl Fn(&VirtualMachineInstance) -> bool,
) -> VirtualMachineInstance {
    let api = vmis(client, ns);
    let last = Mutex::new(None);
    let found = wait_for_quiet(|| async {
        let vmi = api.get_opt(name).await.ok().flatten();
        *last.lock().unwrap() = Some(match &vmi {
            Some(v) => format!(
                "uid {:?}, status {}",
                v.uid(),
                serde_json::to_string(&v.status).unwrap_or_default()
            ),
            None => "absent".into(),
        });
        vmi.filter(|v| check(v))
    })
    .await;
    found.unwrap_or_else(|| {
        panic!(
            "timed out waiting for VMI {ns}/{name}: {what}; last seen: {}",
            last.lock().unwrap().clone().unwrap_or_default()
        )
    })
}

/// Like `support::wait_for`, but hands the timeout back so the caller can say what it saw.
async fn wait_for_quiet<T, F, Fut>(mut check: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = std::time::Instant::now();
    loop {
        if let Some(value) = check().await {
            return Some(value);
        }
        if start.elapsed() > support::DEADLINE {
            return None;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

async fn running_vmi(client: &Client, ns: &str, name: &str) -> VirtualMachineInstance {
    wait_vmi(client, ns, name, "Running and Ready with an IP", |v| {
        v.is_ready() && v.first_ip().is_some()
    })
    .await
}

async fn launcher_pods(client: &Client, ns: &str, vmi_uid: &str) -> Vec<Pod> {
    pods(client, ns)
        .list(&ListParams::default().labels(&format!("{}={vmi_uid}", labels::CREATED_BY)))
        .await
        .expect("list launcher pods")
        .items
}

async fn the_launcher_pod(client: &Client, ns: &str, vmi: &VirtualMachineInstance) -> Pod {
    let uid = vmi.uid().unwrap();
    let mut found = launcher_pods(client, ns, &uid).await;
    assert_eq!(found.len(), 1, "one launcher pod for VMI {uid}");
    found.remove(0)
}

fn pod_ip(pod: &Pod) -> String {
    pod.status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("a running launcher pod has an IP")
}

async fn vmi_gone(client: &Client, ns: &str, name: &str, uid: &str) {
    let api = vmis(client, ns);
    wait_for(&format!("VMI {ns}/{name} ({uid}) gone"), || async {
        match api.get_opt(name).await.ok()? {
            Some(v) if v.uid().as_deref() == Some(uid) => None,
            _ => Some(()),
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn every_start_gives_a_new_vmi_launcher_pod_and_ip() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-start").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "Always", "root")).await;

    let vm = wait_vm(&client, &ns, "vm", "Running and ready", |vm| {
        vm.is_ready() && vm.printable_status() == Some(PrintableStatus::Running)
    })
    .await;
    assert!(vm.status.as_ref().unwrap().created);
    assert_eq!(vm.observed_run_strategy(), Some(RunStrategy::Always));
    let first = running_vmi(&client, &ns, "vm").await;
    let first_pod = the_launcher_pod(&client, &ns, &first).await;
    assert_eq!(first.first_ip(), Some(pod_ip(&first_pod).as_str()));
    assert_eq!(
        first.status.as_ref().unwrap().node_name.as_deref(),
        Some("sim-node")
    );
    assert!(first_pod.name_any().starts_with("virt-launcher-vm-"));
    assert_eq!(first_pod.name_any().len(), "virt-launcher-vm-".len() + 5);
    let owner = &first.owner_references()[0];
    assert_eq!(owner.kind, "VirtualMachine");
    assert_eq!(owner.controller, Some(true));
    // KubeVirt labels the pod with the guest's hostname (the VMI's name when the spec sets
    // none), not the VM's name, and the VMI not at all.
    assert_eq!(first_pod.labels()["vm.kubevirt.io/name"], "vm");
    assert!(!first.labels().contains_key("vm.kubevirt.io/name"));
    assert_eq!(
        first_pod.labels()["app"],
        "vm",
        "template labels reach the pod"
    );

    // Stop: the VMI and its pod go, the VM says Stopped.
    set_run_strategy(&client, &ns, "vm", "Halted").await;
    let first_uid = first.uid().unwrap();
    vmi_gone(&client, &ns, "vm", &first_uid).await;
    assert!(launcher_pods(&client, &ns, &first_uid).await.is_empty());
    wait_vm(&client, &ns, "vm", "Stopped", |vm| {
        vm.printable_status() == Some(PrintableStatus::Stopped)
            && vm.observed_run_strategy() == Some(RunStrategy::Halted)
            && !vm.is_ready()
    })
    .await;

    // Start again: a new VMI, a new pod, a new IP.
    set_run_strategy(&client, &ns, "vm", "Always").await;
    let second = wait_vmi(&client, &ns, "vm", "a new VMI Running", |v| {
        v.uid() != first.uid() && v.is_ready()
    })
    .await;
    let second_pod = the_launcher_pod(&client, &ns, &second).await;
    assert_ne!(second_pod.name_any(), first_pod.name_any());
    assert_ne!(pod_ip(&second_pod), pod_ip(&first_pod));
    assert_eq!(second.first_ip(), Some(pod_ip(&second_pod).as_str()));

    // Restart through a state change request (what `virtctl restart` writes).
    vms(&client, &ns)
        .patch_status(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"stateChangeRequests": [
                {"action": "Stop", "uid": second.uid()}, {"action": "Start"}]}})),
        )
        .await
        .expect("request a restart");
    let third = wait_vmi(&client, &ns, "vm", "a third VMI Running", |v| {
        v.uid() != second.uid() && v.uid() != first.uid() && v.is_ready()
    })
    .await;
    let third_pod = the_launcher_pod(&client, &ns, &third).await;
    assert_ne!(pod_ip(&third_pod), pod_ip(&second_pod));
    wait_vm(&client, &ns, "vm", "the requests done and cleared", |vm| {
        vm.is_ready()
            && vm
                .status
                .as_ref()
                .is_some_and(|s| s.state_change_requests.is_empty())
    })
    .await;
}

#[tokio::test]
async fn the_disk_is_held_until_the_launcher_pod_is_gone() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-hold").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "Always", "root")).await;
    let vmi = running_vmi(&client, &ns, "vm").await;
    let uid = vmi.uid().unwrap();
    assert!(
        vmi.finalizers()
            .iter()
            .any(|f| f == guestcluster::kubevirt::finalizers::VMI_FOREGROUND_DELETE)
    );

    // Deleting the PVC while the VM runs: PVC protection keeps it.
    pvcs(&client, &ns)
        .delete("root", &DeleteParams::default())
        .await
        .expect("delete the PVC");
    let pvc = pvcs(&client, &ns).get("root").await.expect("the PVC stays");
    assert!(pvc.metadata.deletion_timestamp.is_some());

    // Stop the VM. Whenever the PVC (or the VMI) is seen gone, its launcher pod must be gone
    // already: the pod holds the disk and the VMI's finalizer waits for it.
    set_run_strategy(&client, &ns, "vm", "Halted").await;
    wait_for("the VMI and the PVC gone", || {
        let client = client.clone();
        let (ns, uid) = (ns.clone(), uid.clone());
        async move {
            let vmi_gone = vmis(&client, &ns)
                .get_opt("vm")
                .await
                .ok()?
                .is_none_or(|v| v.uid().as_deref() != Some(uid.as_str()));
            let pvc_gone = pvcs(&client, &ns).get_opt("root").await.ok()?.is_none();
            let pods_left = launcher_pods(&client, &ns, &uid).await.len();
            if vmi_gone || pvc_gone {
                assert_eq!(
                    pods_left, 0,
                    "the VMI or PVC went before the launcher pod did"
                );
            }
            (vmi_gone && pvc_gone).then_some(())
        }
    })
    .await;
}

#[tokio::test]
async fn legacy_running_false_keeps_the_vm_stopped() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-legacy").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    let mut vm = vm_with_pvc("vm", "Always", "root");
    vm["spec"].as_object_mut().unwrap().remove("runStrategy");
    vm["spec"]["running"] = json!(false);
    create_vm(&client, &ns, vm).await;
    let vm = wait_vm(&client, &ns, "vm", "Stopped", |vm| {
        vm.printable_status() == Some(PrintableStatus::Stopped)
    })
    .await;
    // KubeVirt reports the run strategy it acted on only once the VM was first started.
    assert_eq!(vm.observed_run_strategy(), None);
    assert!(vmis(&client, &ns).get_opt("vm").await.unwrap().is_none());

    vms(&client, &ns)
        .patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"running": true}})),
        )
        .await
        .unwrap();
    running_vmi(&client, &ns, "vm").await;
}

#[tokio::test]
async fn node_selector_and_tolerations_are_recorded_on_the_launcher_pod() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-place").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    let mut vm = vm_with_pvc("vm", "Always", "root");
    vm["spec"]["template"]["spec"]["nodeSelector"] = json!({"disktype": "ssd"});
    vm["spec"]["template"]["spec"]["tolerations"] =
        json!([{"key": "dedicated", "operator": "Equal", "value": "vms", "effect": "NoSchedule"}]);
    create_vm(&client, &ns, vm).await;
    let vmi = running_vmi(&client, &ns, "vm").await;
    let pod = the_launcher_pod(&client, &ns, &vmi).await;
    let spec = pod.spec.unwrap();
    assert_eq!(
        spec.node_selector
            .unwrap()
            .get("disktype")
            .map(String::as_str),
        Some("ssd")
    );
    let toleration = &spec.tolerations.unwrap()[0];
    assert_eq!(toleration.key.as_deref(), Some("dedicated"));
    assert_eq!(toleration.effect.as_deref(), Some("NoSchedule"));
    assert_eq!(spec.node_name.as_deref(), Some("sim-node"));
    let claims: Vec<_> = spec
        .volumes
        .unwrap()
        .into_iter()
        .filter_map(|v| v.persistent_volume_claim.map(|c| c.claim_name))
        .collect();
    assert_eq!(claims, vec!["root"]);
}

#[tokio::test]
async fn a_missing_pvc_is_reported_and_waited_for() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-missing").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "Always", "later")).await;
    wait_vm(&client, &ns, "vm", "ErrorPvcNotFound", |vm| {
        vm.printable_status() == Some(PrintableStatus::ErrorPvcNotFound)
    })
    .await;
    let vmi = wait_vmi(&client, &ns, "vm", "Pending", |v| {
        v.phase() == VmiPhase::Pending
    })
    .await;
    assert!(
        launcher_pods(&client, &ns, &vmi.uid().unwrap())
            .await
            .is_empty()
    );

    bootable_pvc(sim, &client, &ns, "later").await;
    let running = running_vmi(&client, &ns, "vm").await;
    assert_eq!(
        running.uid(),
        vmi.uid(),
        "the same VMI starts once its disk exists"
    );
    wait_vm(&client, &ns, "vm", "Running", |vm| {
        vm.printable_status() == Some(PrintableStatus::Running)
    })
    .await;
}

#[tokio::test]
async fn a_data_volume_is_waited_for_until_it_succeeds() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-dv").await;
    let mut vm = vm_with_pvc("vm", "Always", "unused");
    vm["spec"]["template"]["spec"]["volumes"] =
        json!([{"name": "root", "dataVolume": {"name": "root-dv"}}]);
    create_vm(&client, &ns, vm).await;
    wait_vm(
        &client,
        &ns,
        "vm",
        "ErrorPvcNotFound before the DataVolume exists",
        |vm| vm.printable_status() == Some(PrintableStatus::ErrorPvcNotFound),
    )
    .await;
    let dv: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
        "metadata": {"name": "root-dv"},
        "spec": {"source": {"blank": {}},
                 "storage": {"resources": {"requests": {"storage": "1Gi"}}}},
    }))
    .unwrap();
    let dvs: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns,
        &sim::kubevirt::storage::data_volume_resource(),
    );
    dvs.create(&PostParams::default(), &dv)
        .await
        .expect("create the DataVolume");
    wait_for("the DataVolume Succeeded", || async {
        let dv = dvs.get("root-dv").await.ok()?;
        (dv.data["status"]["phase"] == "Succeeded").then_some(())
    })
    .await;
    let path = bound_disk_path(sim, &client, &ns, "root-dv").await;
    write_bootable_disk(&path);
    let vmi = running_vmi(&client, &ns, "vm").await;
    let status = vmi.status.unwrap();
    assert_eq!(status.volume_status[0].target.as_deref(), Some("vda"));
}

#[tokio::test]
async fn a_disk_qemu_cannot_open_keeps_the_vmi_scheduled_with_virt_handlers_reason() {
    use std::os::unix::fs::PermissionsExt as _;
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-perm").await;
    let disk = bootable_pvc(sim, &client, &ns, "root").await;
    // Another user's file, on a volume the VMI mounts read-only: the launcher's fsGroup does
    // not reach it, and QEMU (107) may not open it.
    std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o600)).unwrap();
    let mut vm = vm_with_pvc("locked", "Always", "root");
    vm["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"] = json!(true);
    create_vm(&client, &ns, vm).await;
    let blocked = wait_vmi(&client, &ns, "locked", "Synchronized=False", |v| {
        v.start_blocker().is_some()
    })
    .await;
    assert_eq!(blocked.phase(), VmiPhase::Scheduled);
    let sync = blocked.condition("Synchronized").unwrap();
    assert_eq!(
        sync.reason.as_deref(),
        Some("Synchronizing with the Domain failed.")
    );
    let message = sync.message.clone().unwrap_or_default();
    assert!(
        message.starts_with("server error. command SyncVMI failed: ")
            && message.contains(
                "Could not open '/var/run/kubevirt-private/vmi-disks/root/disk.img': Permission denied"
            ),
        "{message}"
    );
    // The VM shows it too, and stays Starting.
    let vm = wait_vm(&client, &ns, "locked", "the VM copies Synchronized", |vm| {
        let conditions = vm
            .status
            .as_ref()
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        guestcluster::kubevirt::find_condition(&conditions, "Synchronized").is_some()
    })
    .await;
    assert_eq!(
        vm.printable_status(),
        Some(guestcluster::kubevirt::PrintableStatus::Starting)
    );
    // Once QEMU may open it, virt-handler's next sync starts the guest.
    std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(0o666)).unwrap();
    running_vmi(&client, &ns, "locked").await;
}

#[tokio::test]
async fn a_missing_disk_image_fails_the_vmi_with_a_reason() {
    let _shared = sim().await.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-nodisk").await;
    create_pvc(&client, &ns, "empty").await;
    let vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "bare"},
        "spec": {
            "domain": {
                "resources": {"requests": {"memory": "1Gi"}},
                "devices": {"disks": [{"name": "root", "disk": {}}]},
            },
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "empty"}}],
        },
    }))
    .unwrap();
    vmis(&client, &ns)
        .create(&PostParams::default(), &vmi)
        .await
        .expect("create the VMI");
    let failed = wait_vmi(&client, &ns, "bare", "Failed", |v| {
        v.phase() == VmiPhase::Failed
    })
    .await;
    let status = failed.status.clone().unwrap();
    assert_eq!(status.reason.as_deref(), Some("BootFailed"));
    // The launcher pod's container ended too.
    let pod = the_launcher_pod(&client, &ns, &failed).await;
    wait_for("the launcher pod Failed", || {
        let pods = pods(&client, &ns);
        let name = pod.name_any();
        async move {
            let pod = pods.get(&name).await.ok()?;
            (pod.status?.phase.as_deref() == Some("Failed")).then_some(())
        }
    })
    .await;
}

async fn evict(ns: &str, pod: &Pod) -> Result<(), (u16, String)> {
    support::evict_once(ns, &pod.name_any()).await
}

fn condition<'a>(
    vmi: &'a VirtualMachineInstance,
    kind: &str,
) -> Option<&'a guestcluster::kubevirt::KubevirtCondition> {
    vmi.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == kind)
}

#[tokio::test]
async fn a_drain_meets_the_clusters_live_migrate_strategy_unless_the_vmi_says_none() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-evict").await;
    bootable_pvc(sim, &client, &ns, "local-root").await;
    bootable_pvc_with(sim, &client, &ns, "shared-root", "ReadWriteMany").await;
    bootable_pvc(sim, &client, &ns, "none-root").await;
    create_vm(&client, &ns, vm_with_pvc("local", "Always", "local-root")).await;
    create_vm(&client, &ns, vm_with_pvc("shared", "Always", "shared-root")).await;
    let mut none = vm_with_pvc("none", "Always", "none-root");
    none["spec"]["template"]["spec"]["evictionStrategy"] = json!("None");
    create_vm(&client, &ns, none).await;

    // A VM on a ReadWriteOnce disk cannot move, and the cluster's LiveMigrate holds the drain.
    let local = running_vmi(&client, &ns, "local").await;
    let c = condition(&local, "LiveMigratable").expect("a LiveMigratable condition");
    assert_eq!(
        (c.status.as_str(), c.reason.as_deref()),
        ("False", Some("DisksNotLiveMigratable"))
    );
    let pod = the_launcher_pod(&client, &ns, &local).await;
    let (code, message) = evict(&ns, &pod).await.expect_err("the drain is held");
    assert_eq!(code, 429, "{message}");
    assert!(
        message.contains(
            "VMI local is configured with an eviction strategy but is not live-migratable"
        ),
        "{message}"
    );
    assert!(
        pods(&client, &ns)
            .get_opt(&pod.name_any())
            .await
            .unwrap()
            .is_some()
    );

    // One on a shared disk is marked for evacuation; the eviction is refused while it moves.
    let shared = running_vmi(&client, &ns, "shared").await;
    let pod = the_launcher_pod(&client, &ns, &shared).await;
    let (code, message) = evict(&ns, &pod).await.expect_err("evacuated, not evicted");
    assert_eq!(code, 429, "{message}");
    assert!(
        message.contains(&format!(
            "Eviction triggered evacuation of VMI \"{ns}/shared\""
        )),
        "{message}"
    );
    let marked = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns,
        &kube::api::ApiResource::erase::<VirtualMachineInstance>(&()),
    )
    .get("shared")
    .await
    .unwrap();
    let marked = serde_json::to_value(&marked).unwrap();
    assert_eq!(
        marked["status"]["evacuationNodeName"],
        json!(pod.spec.as_ref().unwrap().node_name)
    );
    let (_, again) = evict(&ns, &pod).await.expect_err("still moving");
    assert!(
        again.starts_with("admission webhook") && again.contains("Evacuation in progress"),
        "{again}"
    );

    // `None` on the VMI: the eviction deletes the pod, and the guest stops with it.
    let first = running_vmi(&client, &ns, "none").await;
    let pod = the_launcher_pod(&client, &ns, &first).await;
    evict(&ns, &pod).await.expect("evicted");
    let second = wait_vmi(&client, &ns, "none", "a replacement VMI Running", |v| {
        v.uid() != first.uid() && v.is_ready()
    })
    .await;
    assert_ne!(second.uid(), first.uid());
}

#[tokio::test]
async fn rerun_on_failure_restarts_after_the_launcher_pod_is_killed() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-rerun").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "RerunOnFailure", "root")).await;
    let first = running_vmi(&client, &ns, "vm").await;
    let pod = the_launcher_pod(&client, &ns, &first).await;
    pods(&client, &ns)
        .delete(&pod.name_any(), &DeleteParams::default())
        .await
        .expect("delete the launcher pod");
    let second = wait_vmi(&client, &ns, "vm", "a replacement VMI Running", |v| {
        v.uid() != first.uid() && v.is_ready()
    })
    .await;
    assert_ne!(second.first_ip(), first.first_ip());
}

#[tokio::test]
async fn a_restarted_simulation_fails_orphaned_vmis_and_restarts_per_run_strategy() {
    let sim = sim().await;
    let exclusive = sim.exclusive().await;
    let client = client().await;
    let ns = namespace(&client, "kv-restart").await;
    bootable_pvc(sim, &client, &ns, "always-root").await;
    create_vm(&client, &ns, vm_with_pvc("always", "Always", "always-root")).await;
    let always = running_vmi(&client, &ns, "always").await;

    sim.restart(&exclusive).await;

    // Nobody runs its guest any more: the VMI fails, and upstream's VM controller starts a new
    // one for `Always`.
    let failed = wait_vmi(&client, &ns, "always", "Failed", |v| {
        v.uid() == always.uid() && v.phase() == VmiPhase::Failed
    })
    .await;
    assert_eq!(
        failed.status.unwrap().reason.as_deref(),
        Some("GuestNotRunning")
    );
    let replaced = wait_vmi(&client, &ns, "always", "a new VMI Running", |v| {
        v.uid() != always.uid() && v.is_ready()
    })
    .await;
    assert_ne!(replaced.first_ip(), None);
    // virt-api, which the restart did not touch, still refuses bad VMs.
    let bad: DynamicObject =
        serde_json::from_value(vm_with_pvc("bad", "Sometimes", "always-root")).unwrap();
    assert_refused(
        raw(&client, &ns, &vm_resource())
            .create(&PostParams::default(), &bad)
            .await,
        &format!("{VM_WEBHOOK}Invalid RunStrategy (Sometimes)"),
    );
}

/// `sudo poweroff` in the guest of VM `name`; returns the VMI that was running.
async fn power_off_from_inside(client: &Client, ns: &str, name: &str) -> VirtualMachineInstance {
    let vmi = running_vmi(client, ns, name).await;
    let ip = vmi.first_ip().unwrap().to_owned();
    // The session may end with the guest; only the outcome matters.
    let guest = SshGuest::connect(
        &format!("{ip}:22"),
        guest_key().clone(),
        &SshOptions::default(),
    )
    .await
    .expect("SSH into the guest");
    let _ = guest.run(&Command::sudo(["poweroff"])).await;
    vmi
}

#[tokio::test]
async fn always_restarts_after_a_guest_power_off() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-always").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "Always", "root")).await;
    let first = power_off_from_inside(&client, &ns, "vm").await;
    let second = wait_vmi(&client, &ns, "vm", "a new VMI after the power-off", |v| {
        v.uid() != first.uid() && v.is_ready()
    })
    .await;
    assert_ne!(second.first_ip(), first.first_ip());
}

#[tokio::test]
async fn rerun_on_failure_does_not_restart_after_a_power_off() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-rerun-ok").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "RerunOnFailure", "root")).await;
    let first = power_off_from_inside(&client, &ns, "vm").await;
    let uid = first.uid().unwrap();
    // The VMI succeeded: KubeVirt removes it and leaves the VM stopped.
    vmi_gone(&client, &ns, "vm", &uid).await;
    let vm = wait_vm(&client, &ns, "vm", "Stopped", |vm| {
        vm.printable_status() == Some(PrintableStatus::Stopped)
            && vm.status.as_ref().is_some_and(|s| !s.created)
    })
    .await;
    assert!(
        vm.status.unwrap().state_change_requests.is_empty(),
        "no start was queued after a success"
    );
    assert!(vmis(&client, &ns).get_opt("vm").await.unwrap().is_none());
    assert!(launcher_pods(&client, &ns, &uid).await.is_empty());
}

#[tokio::test]
async fn a_blank_first_boot_disk_falls_through_to_the_cdrom() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-boot").await;
    // A blank root disk (bootOrder 1) and a live ISO as cdrom (bootOrder 2).
    create_pvc(&client, &ns, "root").await;
    let root = bound_disk_path(sim, &client, &ns, "root").await;
    create_disk(&root, DISK_BYTES, None).expect("blank root disk");
    create_pvc(&client, &ns, "iso").await;
    let iso = bound_disk_path(sim, &client, &ns, "iso").await;
    write_live_iso(&iso);
    let mut vm = vm_with_pvc("vm", "Always", "root");
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"] = json!([
        {"name": "root", "bootOrder": 1, "disk": {"bus": "virtio"}},
        {"name": "iso", "bootOrder": 2, "cdrom": {"bus": "sata", "readonly": true}},
    ]);
    vm["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "root", "persistentVolumeClaim": {"claimName": "root"}},
        {"name": "iso", "persistentVolumeClaim": {"claimName": "iso"}},
    ]);
    create_vm(&client, &ns, vm).await;
    let vmi = running_vmi(&client, &ns, "vm").await;
    let uid = vmi.uid().unwrap();
    // The live ISO runs, installing to the first disk (/dev/vda).
    assert_eq!(sim.ctx().guests.install_target(&uid), Some(root.clone()));
    let status = vmi.status.unwrap();
    let targets: Vec<_> = status
        .volume_status
        .iter()
        .map(|v| (v.name.as_str(), v.target.as_deref()))
        .collect();
    let mut targets = targets;
    targets.sort();
    assert_eq!(targets, vec![("iso", Some("sda")), ("root", Some("vda"))]);

    // Once the root disk holds a system, it boots first.
    set_run_strategy(&client, &ns, "vm", "Halted").await;
    vmi_gone(&client, &ns, "vm", &uid).await;
    write_bootable_disk(&root);
    set_run_strategy(&client, &ns, "vm", "Always").await;
    let second = wait_vmi(&client, &ns, "vm", "a new VMI Running", |v| {
        v.uid().as_deref() != Some(uid.as_str()) && v.is_ready()
    })
    .await;
    assert_eq!(
        sim.ctx().guests.install_target(&second.uid().unwrap()),
        None
    );
}

#[tokio::test]
async fn the_clock_offset_reaches_the_guest() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-clock").await;
    let disk = bootable_pvc(sim, &client, &ns, "root").await;
    // chronyd masked, as the build masks it for its shifted boots: with NTP in reach (a pod
    // network) it would step the clock back at boot.
    let mut state = GuestState::rhcos(&authorized_key());
    state
        .units
        .entry("chronyd.service".to_owned())
        .or_default()
        .masked = true;
    std::fs::remove_file(&disk).expect("replace the disk");
    create_disk(&disk, DISK_BYTES, Some(&state)).expect("write the guest disk");
    let mut vm = vm_with_pvc("vm", "Always", "root");
    vm["spec"]["template"]["spec"]["domain"]["clock"] = json!({"utc": {"offsetSeconds": -86400}});
    create_vm(&client, &ns, vm).await;
    let vmi = running_vmi(&client, &ns, "vm").await;
    let guest_now: i64 = ssh(vmi.first_ip().unwrap(), &["date", "+%s"])
        .await
        .trim()
        .parse()
        .expect("date +%s prints seconds");
    let host_now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let behind = host_now - guest_now;
    assert!(
        (86_390..=86_410).contains(&behind),
        "the guest runs a day behind, not {behind} s"
    );
}

#[tokio::test]
async fn deleting_a_running_vm_stops_its_vmi_before_the_vm_goes() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-delete").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    create_vm(&client, &ns, vm_with_pvc("vm", "Always", "root")).await;
    let vmi = running_vmi(&client, &ns, "vm").await;
    let uid = vmi.uid().unwrap();
    let vm = vms(&client, &ns).get("vm").await.unwrap();
    assert!(
        vm.finalizers()
            .iter()
            .any(|f| f == guestcluster::kubevirt::finalizers::VM_CONTROLLER)
    );
    vms(&client, &ns)
        .delete("vm", &DeleteParams::default())
        .await
        .expect("delete the VM");
    // Whenever the VM is seen gone, its VMI and launcher pod are gone already.
    wait_for("the VM gone", || {
        let client = client.clone();
        let (ns, uid) = (ns.clone(), uid.clone());
        async move {
            let vm_gone = vms(&client, &ns).get_opt("vm").await.ok()?.is_none();
            if vm_gone {
                assert!(vmis(&client, &ns).get_opt("vm").await.ok()?.is_none());
                assert!(launcher_pods(&client, &ns, &uid).await.is_empty());
            }
            vm_gone.then_some(())
        }
    })
    .await;
    assert!(!sim.ctx().guests.is_running(&uid), "the guest is off");
}

// ---------------------------------------------------------------------------------------------
// Admission (virt-api's validating webhooks, served by the simulation)
// ---------------------------------------------------------------------------------------------

/// The VMs and VMIs of `ns`, untyped: an object is sent exactly as written.
fn raw(client: &Client, ns: &str, resource: &kube::api::ApiResource) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, resource)
}

fn vm_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<VirtualMachine>(&())
}

fn vmi_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::erase::<VirtualMachineInstance>(&())
}

/// The API server's refusal of `result`: 422 with exactly `message`.
fn assert_refused<T: std::fmt::Debug>(result: Result<T, kube::Error>, message: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.message, message);
            assert_eq!(status.code, 422, "{status:?}");
        }
        other => panic!("expected the refusal {message:?}, got {other:?}"),
    }
}

const VM_WEBHOOK: &str =
    "admission webhook \"virtualmachine-validator.kubevirt.io\" denied the request: ";
const VMI_WEBHOOK: &str = "admission webhook \"virtualmachineinstances-create-validator.kubevirt.io\" denied the request: ";
const NO_MEMORY: &str = "no memory requested, at least one of 'spec.domain.memory.guest', \
    'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' must be set";

#[tokio::test]
async fn kubevirts_admission_refuses_bad_vms_and_vmis_with_its_message() {
    let _shared = sim().await.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-admission").await;
    let vms = raw(&client, &ns, &vm_resource());
    let object = |value: Value| -> DynamicObject { serde_json::from_value(value).unwrap() };
    let post = PostParams::default();

    // One boot order on two disks, a cdrom on the virtio bus, `running` next to `runStrategy`.
    let mut vm = vm_with_pvc("vm", "Always", "root");
    vm["spec"]["running"] = json!(true);
    vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"] = json!([
        {"name": "root", "bootOrder": 1, "disk": {"bus": "virtio"}},
        {"name": "iso", "bootOrder": 1, "cdrom": {"bus": "virtio"}},
    ]);
    vm["spec"]["template"]["spec"]["volumes"] = json!([
        {"name": "root", "persistentVolumeClaim": {"claimName": "root"}},
        {"name": "iso", "persistentVolumeClaim": {"claimName": "iso"}},
    ]);
    assert_refused(
        vms.create(&post, &object(vm)).await,
        &format!(
            "{VM_WEBHOOK}Boot order for spec.template.spec.domain.devices.disks[1].bootOrder \
             already set for a different device., Bus type virtio is invalid for CD-ROM device, \
             Running and RunStrategy are mutually exclusive. Note that Running is deprecated, \
             please use RunStrategy instead"
        ),
    );

    // A disk without a volume; masquerade on a secondary network.
    let mut vm = vm_with_pvc("vm", "Always", "root");
    let template = &mut vm["spec"]["template"]["spec"];
    template["domain"]["devices"]["disks"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "data", "disk": {"bus": "sata"}}));
    template["domain"]["devices"]["interfaces"] = json!([{"name": "crc", "masquerade": {}}]);
    template["networks"] = json!([{"name": "crc", "multus": {"networkName": "crc-net"}}]);
    assert_refused(
        vms.create(&post, &object(vm)).await,
        &format!(
            "{VM_WEBHOOK}Masquerade interface only implemented with pod network, \
             spec.template.spec.domain.devices.disks[1].Name 'data' not found."
        ),
    );

    // An unknown run strategy, on create and on update.
    let mut vm = vm_with_pvc("vm", "always", "root");
    assert_refused(
        vms.create(&post, &object(vm.clone())).await,
        &format!("{VM_WEBHOOK}Invalid RunStrategy (always)"),
    );
    vm["spec"]["runStrategy"] = json!("Halted");
    vms.create(&post, &object(vm))
        .await
        .expect("a valid VM is admitted");
    assert_refused(
        vms.patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"runStrategy": "WaitAsReceiver"}})),
        )
        .await,
        &format!(
            "{VM_WEBHOOK}Invalid RunStrategy (WaitAsReceiver), DecentralizedLiveMigration \
             feature gate is not enabled in kubevirt resource"
        ),
    );

    // A VMI created directly is checked as well: it asks for no memory.
    let vmi = object(json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "bare"},
        "spec": {"domain": {"devices": {}}},
    }));
    assert_refused(
        raw(&client, &ns, &vmi_resource()).create(&post, &vmi).await,
        &format!("{VMI_WEBHOOK}{NO_MEMORY}"),
    );
    let names: Vec<String> = vms
        .list(&ListParams::default())
        .await
        .expect("list VMs")
        .items
        .iter()
        .map(|vm| vm.name_any())
        .collect();
    assert_eq!(names, ["vm"], "only the valid VM was stored");
}

#[tokio::test]
async fn a_vm_whose_vmi_is_refused_reports_it_until_its_template_is_fixed() {
    let sim = sim().await;
    let _shared = sim.share().await;
    let client = client().await;
    let ns = namespace(&client, "kv-refused").await;
    bootable_pvc(sim, &client, &ns, "root").await;
    let mut vm = vm_with_pvc("vm", "Always", "root");
    vm["spec"]["template"]["spec"]["domain"]
        .as_object_mut()
        .unwrap()
        .remove("resources");
    // The VM itself is admitted: memory is a rule of the VMI.
    create_vm(&client, &ns, vm).await;
    let expected = format!("Failure while starting VMI: {VMI_WEBHOOK}{NO_MEMORY}");
    let failing = wait_vm(&client, &ns, "vm", "Failure FailedCreate", |vm| {
        let status = vm.status.clone().unwrap_or_default();
        guestcluster::kubevirt::find_condition(&status.conditions, "Failure").is_some_and(|c| {
            c.status == "True"
                && c.reason.as_deref() == Some("FailedCreate")
                && c.message.as_deref() == Some(expected.as_str())
        })
    })
    .await;
    assert!(!failing.status.unwrap().created, "no VMI was created");
    assert!(
        vmis(&client, &ns).get_opt("vm").await.unwrap().is_none(),
        "the API server refused the VMI"
    );

    vms(&client, &ns)
        .patch(
            "vm",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"template": {"spec": {"domain": {
                "memory": {"guest": "1Gi"},
            }}}}})),
        )
        .await
        .expect("give the template memory");
    running_vmi(&client, &ns, "vm").await;
    wait_vm(&client, &ns, "vm", "Ready without Failure", |vm| {
        let status = vm.status.clone().unwrap_or_default();
        status.ready
            && guestcluster::kubevirt::find_condition(&status.conditions, "Failure").is_none()
    })
    .await;
}
