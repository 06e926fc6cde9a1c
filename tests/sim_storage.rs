//! The simulated storage (`sim::volumes`) and CDI (`sim::cdi`) against the real control plane:
//! PVC binding and cleanup, DataVolumes with blank, pvc-clone and http sources, StorageProfiles
//! and Block volumes.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::BTreeMap;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use sim::volumes::VolumeStore;
use support::shared_sim::{self, Setup};
use support::{client, namespace, unique, wait_for};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const MI: u64 = 1 << 20;
const GI: u64 = 1 << 30;

/// The shared simulation (see [`shared_sim`]), started on first use, and a client for this
/// test's runtime. No test restarts it.
async fn setup() -> (VolumeStore, Client) {
    let sim = shared_sim::start(|| Setup {
        root: shared_sim::temp_root("sim-storage-"),
        node_name: "sim-storage-node",
        // Pods of these tests never get as far as running a process.
        our_image_prefix: "registry.invalid/sim-storage-tests/",
        flavour: Default::default(),
    })
    .await;
    (sim.ctx().volumes.clone(), client().await)
}

fn data_volume_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
        "datavolumes",
    )
}

fn data_volumes(client: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &data_volume_resource())
}

async fn create_data_volume(client: &Client, ns: &str, name: &str, spec: Value) {
    let dv: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "cdi.kubevirt.io/v1beta1",
        "kind": "DataVolume",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    }))
    .expect("DataVolume object");
    data_volumes(client, ns)
        .create(&PostParams::default(), &dv)
        .await
        .expect("create DataVolume");
}

fn blank(size: &str) -> Value {
    json!({"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": size}}}})
}

fn status_of(dv: &DynamicObject) -> Value {
    dv.data.get("status").cloned().unwrap_or(Value::Null)
}

fn phase_of(dv: &DynamicObject) -> String {
    status_of(dv)["phase"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn condition(dv: &DynamicObject, kind: &str) -> Value {
    status_of(dv)["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == kind).cloned())
        .unwrap_or(Value::Null)
}

/// Waits for `phase`; a different terminal phase fails at once with the status.
async fn wait_phase(client: &Client, ns: &str, name: &str, phase: &str) -> DynamicObject {
    let api = data_volumes(client, ns);
    wait_for(&format!("DataVolume {ns}/{name} {phase}"), || {
        let api = api.clone();
        async move {
            let dv = api.get_opt(name).await.ok().flatten()?;
            let now = phase_of(&dv);
            if now != phase && matches!(now.as_str(), "Succeeded" | "Failed") {
                panic!(
                    "DataVolume {ns}/{name} ended {now}, not {phase}: {:#}",
                    status_of(&dv)
                );
            }
            (now == phase).then_some(dv)
        }
    })
    .await
}

async fn claim(client: &Client, ns: &str, name: &str) -> Option<PersistentVolumeClaim> {
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
        .expect("get PVC")
}

async fn disk_of(volumes: &VolumeStore, client: &Client, ns: &str, name: &str) -> PathBuf {
    volumes
        .claim_disk_path(client, ns, name)
        .await
        .expect("resolve claim")
        .unwrap_or_else(|| panic!("PVC {ns}/{name} is bound"))
}

const PATTERN: &[u8] = b"guestcluster-sim-storage-pattern";

fn write_pattern(path: &Path, offset: u64) {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .expect("open disk for writing");
    file.seek(SeekFrom::Start(offset)).expect("seek");
    file.write_all(PATTERN).expect("write pattern");
}

fn read_at(path: &Path, offset: u64, len: usize) -> Vec<u8> {
    let mut file = std::fs::File::open(path).expect("open disk");
    file.seek(SeekFrom::Start(offset)).expect("seek");
    let mut buf = vec![0; len];
    file.read_exact(&mut buf).expect("read");
    buf
}

fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).expect("disk metadata").blocks() * 512
}

/// Waits until `path` no longer exists.
async fn wait_gone(what: &str, path: &Path) {
    wait_for(what, || async { (!path.exists()).then_some(()) }).await;
}

#[tokio::test]
async fn a_claim_of_a_provisioner_nobody_runs_stays_pending() {
    use k8s_openapi::api::storage::v1::StorageClass;

    let (_volumes, client) = setup().await;
    let ns = namespace(&client, "sim-unserved").await;
    let class = unique("unserved");
    let unserved: StorageClass = serde_json::from_value(json!({
        "metadata": {"name": class},
        "provisioner": "example.com/not-deployed",
    }))
    .expect("StorageClass");
    let classes = Api::<StorageClass>::all(client.clone());
    classes
        .create(&PostParams::default(), &unserved)
        .await
        .expect("create StorageClass");
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "waiting"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": class,
        },
    }))
    .expect("PVC");
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("create PVC");
    // kube-controller-manager hands the claim to the class's provisioner by annotation; the
    // sim, which plays other provisioners, leaves it alone past a resync of its own.
    wait_for("the claim handed to its provisioner", || async {
        let annotations = claim(&client, &ns, "waiting").await?.metadata.annotations?;
        (annotations.get("volume.kubernetes.io/storage-provisioner")? == "example.com/not-deployed")
            .then_some(())
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_secs(6)).await;
    let waiting = claim(&client, &ns, "waiting").await.expect("claim");
    assert_eq!(
        waiting.status.and_then(|s| s.phase).as_deref(),
        Some("Pending")
    );
    let uid = waiting.metadata.uid.expect("uid");
    let pv = Api::<PersistentVolume>::all(client.clone())
        .get_opt(&format!("pvc-{uid}"))
        .await
        .expect("read PV");
    assert!(pv.is_none(), "no volume for a class nobody provisions");
    classes
        .delete(&class, &DeleteParams::default())
        .await
        .expect("delete StorageClass");
}

#[tokio::test]
async fn a_plain_claim_is_bound_and_its_directory_follows_it() {
    let (volumes, client) = setup().await;
    let ns = namespace(&client, "sim-pvc").await;
    let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns);
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "scratch"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "2Gi"}},
            "storageClassName": sim::storage::HOSTPATH_CLASS,
        },
    }))
    .expect("PVC");
    pvcs.create(&PostParams::default(), &pvc)
        .await
        .expect("create PVC");

    let bound = wait_for("PVC bound", || async {
        claim(&client, &ns, "scratch")
            .await
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"))
    })
    .await;
    let status = bound.status.as_ref().expect("status");
    let capacity = status.capacity.as_ref().expect("capacity");
    assert_eq!(capacity["storage"].0, "2Gi");
    assert_eq!(status.access_modes, Some(vec!["ReadWriteOnce".to_owned()]));
    let uid = bound.uid().expect("uid");
    let dir = volumes.dir(&uid);
    assert!(dir.is_dir(), "{} exists once bound", dir.display());
    assert_eq!(
        volumes
            .claim_volume(&client, &ns, "scratch")
            .await
            .expect("claim volume")
            .map(|v| v.dir),
        Some(dir.clone())
    );
    let pv_name = bound.spec.as_ref().and_then(|s| s.volume_name.clone());
    assert_eq!(pv_name.as_deref(), Some(format!("pvc-{uid}").as_str()));

    pvcs.delete("scratch", &DeleteParams::default())
        .await
        .expect("delete PVC");
    wait_gone("the claim's directory removed", &dir).await;
    let pvs = Api::<PersistentVolume>::all(client.clone());
    wait_for("the claim's PV removed", || async {
        let pv = pvs.get_opt(&format!("pvc-{uid}")).await.expect("get PV");
        pv.is_none().then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_blank_data_volume_is_a_sparse_disk_of_its_size() {
    let (volumes, client) = setup().await;
    let ns = namespace(&client, "sim-blank").await;
    create_data_volume(&client, &ns, "blank", blank("1Gi")).await;

    let dv = wait_phase(&client, &ns, "blank", "Succeeded").await;
    let status = status_of(&dv);
    assert_eq!(status["progress"], "100.0%");
    assert_eq!(status["claimName"], "blank");
    assert_eq!(condition(&dv, "Ready")["status"], "True");
    assert_eq!(condition(&dv, "Bound")["status"], "True");
    assert_eq!(condition(&dv, "Running")["reason"], "Completed");

    let pvc = claim(&client, &ns, "blank")
        .await
        .expect("the DataVolume's PVC");
    let owner = &pvc.owner_references()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.controller),
        ("DataVolume", Some(true))
    );
    assert_eq!(Some(owner.uid.clone()), dv.uid());
    let disk = disk_of(&volumes, &client, &ns, "blank").await;
    assert_eq!(std::fs::metadata(&disk).expect("disk").len(), GI);
    assert!(
        allocated(&disk) < MI,
        "sparse: {} bytes allocated",
        allocated(&disk)
    );
}

#[tokio::test]
async fn a_clone_copies_content_also_across_namespaces() {
    let (volumes, client) = setup().await;
    let source_ns = namespace(&client, "sim-clone-src").await;
    let target_ns = namespace(&client, "sim-clone-dst").await;
    create_data_volume(&client, &source_ns, "golden", blank("64Mi")).await;
    wait_phase(&client, &source_ns, "golden", "Succeeded").await;
    let golden = disk_of(&volumes, &client, &source_ns, "golden").await;
    write_pattern(&golden, 10 * MI);

    let clone = |namespace: &str, size: Option<&str>| {
        // CDI's admission wants the target storage and the source's namespace even when the
        // size is left to the source.
        let storage = match size {
            Some(size) => json!({"resources": {"requests": {"storage": size}}}),
            None => json!({}),
        };
        json!({"source": {"pvc": {"namespace": namespace, "name": "golden"}}, "storage": storage})
    };
    create_data_volume(
        &client,
        &target_ns,
        "bigger",
        clone(&source_ns, Some("128Mi")),
    )
    .await;
    // No size: taken from the source, as CDI does.
    create_data_volume(&client, &source_ns, "same-ns", clone(&source_ns, None)).await;

    for (ns, name, len) in [
        (&target_ns, "bigger", 128 * MI),
        (&source_ns, "same-ns", 64 * MI),
    ] {
        let dv = wait_phase(&client, ns, name, "Succeeded").await;
        assert_eq!(condition(&dv, "Running")["message"], "Clone Complete");
        let disk = disk_of(&volumes, &client, ns, name).await;
        assert_eq!(std::fs::metadata(&disk).expect("disk").len(), len);
        assert_eq!(
            read_at(&disk, 10 * MI, PATTERN.len()),
            PATTERN,
            "{ns}/{name}"
        );
        assert!(
            allocated(&disk) < 4 * MI,
            "sparse copy: {}",
            allocated(&disk)
        );
    }
}

/// Upstream CDI does not fail the DataVolume: it gives it no phase and refuses it on its
/// conditions (and in an Event), so it waits for a bigger request.
#[tokio::test]
async fn a_clone_into_a_smaller_volume_is_refused_naming_both_sizes() {
    let (_, client) = setup().await;
    let ns = namespace(&client, "sim-clone-small").await;
    create_data_volume(&client, &ns, "golden", blank("64Mi")).await;
    wait_phase(&client, &ns, "golden", "Succeeded").await;
    let spec = json!({
        // CDI's schema requires the namespace even for a clone within the same namespace.
        "source": {"pvc": {"namespace": ns, "name": "golden"}},
        "storage": {"resources": {"requests": {"storage": "32Mi"}}},
    });
    create_data_volume(&client, &ns, "too-small", spec).await;

    let api = data_volumes(&client, &ns);
    let ready = wait_for("the clone refused on its Ready condition", || async {
        let dv = api.get_opt("too-small").await.ok().flatten()?;
        let ready = condition(&dv, "Ready");
        (ready["reason"] == "CloneValidationFailed").then_some((ready, dv))
    })
    .await;
    let (ready, dv) = ready;
    assert_eq!(ready["status"], "False");
    let message = ready["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&format!("{} < {}", 32 * MI, 64 * MI)),
        "names both sizes: {message}"
    );
    assert_eq!(phase_of(&dv), "", "no phase: {:?}", status_of(&dv));
    assert!(
        claim(&client, &ns, "too-small").await.is_none(),
        "no PVC made"
    );
}

/// A pod on a node the simulated kubelet does not serve, so only this test moves its status. It
/// mounts the claim read-write: CDI ignores pods that only declare it or mount it read-only
/// (`GetPodsUsingPVCs`).
async fn pod_using(client: &Client, ns: &str, name: &str, claim: &str) {
    let pods = Api::<Pod>::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": "elsewhere",
            "containers": [{"name": "holder", "image": "registry.invalid/holder",
                            "volumeMounts": [{"name": "disk", "mountPath": "/disk"}]}],
            "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": claim}}],
        },
    }))
    .expect("pod");
    // The namespace's default ServiceAccount may not exist yet; admission needs it.
    wait_for("pod created", || async {
        pods.create(&PostParams::default(), &pod).await.ok()
    })
    .await;
    let running = json!({"status": {"phase": "Running"}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&running))
        .await
        .expect("mark the pod Running");
}

#[tokio::test]
async fn a_clone_waits_while_its_source_is_in_use() {
    let (volumes, client) = setup().await;
    let ns = namespace(&client, "sim-clone-busy").await;
    create_data_volume(&client, &ns, "golden", blank("64Mi")).await;
    wait_phase(&client, &ns, "golden", "Succeeded").await;
    write_pattern(&disk_of(&volumes, &client, &ns, "golden").await, MI);
    pod_using(&client, &ns, "builder", "golden").await;

    let spec = json!({
        // CDI's schema requires the namespace even for a clone within the same namespace.
        "source": {"pvc": {"namespace": ns, "name": "golden"}},
        "storage": {"resources": {"requests": {"storage": "64Mi"}}},
    });
    create_data_volume(&client, &ns, "copy", spec).await;
    let api = data_volumes(&client, &ns);
    // Upstream starts the target's upload server (`CloneInProgress`) but no clone source pod
    // while another pod mounts the source read-write.
    wait_for("clone in progress, its upload server running", || async {
        let dv = api.get_opt("copy").await.ok().flatten()?;
        (phase_of(&dv) == "CloneInProgress").then_some(())
    })
    .await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    for _ in 0..10 {
        let listed = pods.list(&Default::default()).await.expect("pods");
        let sources: Vec<String> = listed
            .items
            .iter()
            .map(ResourceExt::name_any)
            .filter(|n| n.ends_with("-source-pod"))
            .collect();
        assert!(
            sources.is_empty(),
            "no clone source while in use: {sources:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    }
    // A Block target's device exists from the start, a Filesystem target's disk only once
    // populated: either way it does not hold the source's data yet.
    let target = disk_of(&volumes, &client, &ns, "copy").await;
    assert!(
        !target.exists() || read_at(&target, MI, PATTERN.len()) != PATTERN,
        "nothing copied while the source is in use"
    );

    Api::<Pod>::namespaced(client.clone(), &ns)
        .delete("builder", &DeleteParams::default().grace_period(0))
        .await
        .expect("delete the pod");
    wait_phase(&client, &ns, "copy", "Succeeded").await;
    assert_eq!(read_at(&target, MI, PATTERN.len()), PATTERN);
}

/// A tiny HTTP/1.1 server: `files` by path, 404 otherwise. Returns its base URL.
async fn serve(files: BTreeMap<String, Vec<u8>>) -> String {
    serve_gated(files, tokio::sync::watch::channel(true).1).await
}

/// [`serve`], sending each body only once `gate` is open (the headers go at once).
async fn serve_gated(
    files: BTreeMap<String, Vec<u8>>,
    gate: tokio::sync::watch::Receiver<bool>,
) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the test HTTP server");
    let addr = listener.local_addr().expect("server address");
    let files = Arc::new(files);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let files = files.clone();
            let mut gate = gate.clone();
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&request);
                let path = text.split_whitespace().nth(1).unwrap_or("/").to_owned();
                let (head, body) = match files.get(&path) {
                    Some(body) => ("HTTP/1.1 200 OK", body.clone()),
                    None => ("HTTP/1.1 404 Not Found", b"not found".to_vec()),
                };
                let head = format!(
                    "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).await;
                let _ = gate.wait_for(|open| *open).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    format!("http://{addr}")
}

/// A qcow2 image (made by `qemu-img`) of a 16Mi raw disk with [`PATTERN`] at 5Mi.
fn qcow2_image() -> Vec<u8> {
    let dir = tempfile::tempdir().expect("temp dir");
    let raw = dir.path().join("disk.raw");
    let qcow2 = dir.path().join("disk.qcow2");
    let file = std::fs::File::create(&raw).expect("raw image");
    file.set_len(16 * MI).expect("size raw image");
    write_pattern(&raw, 5 * MI);
    let out = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "raw", "-O", "qcow2"])
        .arg(&raw)
        .arg(&qcow2)
        .output()
        .expect("qemu-img runs (Debian: apt-get install qemu-utils)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::read(&qcow2).expect("read qcow2")
}

/// Every phase a DataVolume shows, in order, until it is terminal; `listed` fires once the watch
/// is established, so an object created after that cannot slip past it.
async fn phases_until_done(
    client: &Client,
    ns: &str,
    name: &str,
    listed: tokio::sync::oneshot::Sender<()>,
) -> Vec<String> {
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut stream = std::pin::pin!(watcher(data_volumes(client, ns), config));
    let mut listed = Some(listed);
    let mut phases: Vec<String> = Vec::new();
    let collect = async {
        while let Some(event) = stream.next().await {
            let dv = match event {
                Ok(watcher::Event::InitDone) => {
                    if let Some(listed) = listed.take() {
                        let _ = listed.send(());
                    }
                    continue;
                }
                Ok(watcher::Event::Apply(dv) | watcher::Event::InitApply(dv)) => dv,
                _ => continue,
            };
            let phase = phase_of(&dv);
            if !phase.is_empty() && phases.last() != Some(&phase) {
                phases.push(phase.clone());
            }
            if matches!(phase.as_str(), "Succeeded" | "Failed") {
                return;
            }
        }
    };
    tokio::time::timeout(support::DEADLINE, collect)
        .await
        .unwrap_or_else(|_| panic!("{ns}/{name} did not finish; phases seen: {phases:?}"));
    phases
}

#[tokio::test]
async fn an_http_import_converts_qcow2_to_raw() {
    let (volumes, client) = setup().await;
    let ns = namespace(&client, "sim-http").await;
    let qcow2 = qcow2_image();
    assert_eq!(&qcow2[..4], b"QFI\xfb");
    // The body waits until CDI shows the import in progress: upstream's controller sees the
    // importer pod Running only if it runs long enough, so the test holds it there.
    let (open, gate) = tokio::sync::watch::channel(false);
    let base = serve_gated(
        BTreeMap::from([("/images/disk.qcow2".to_owned(), qcow2)]),
        gate,
    )
    .await;
    let name = unique("import");
    let spec = json!({
        "source": {"http": {"url": format!("{base}/images/disk.qcow2")}},
        "storage": {"resources": {"requests": {"storage": "64Mi"}}},
    });
    let (listed, watching) = tokio::sync::oneshot::channel();
    let create = async {
        watching.await.expect("the watch is established");
        create_data_volume(&client, &ns, &name, spec).await;
    };
    let release = async {
        let api = data_volumes(&client, &ns);
        wait_for("the import in progress", || async {
            let dv = api.get_opt(&name).await.ok().flatten()?;
            (phase_of(&dv) == "ImportInProgress").then_some(())
        })
        .await;
        open.send_replace(true);
    };
    let (phases, (), ()) = tokio::join!(
        phases_until_done(&client, &ns, &name, listed),
        create,
        release
    );

    assert_eq!(
        phases.last().map(String::as_str),
        Some("Succeeded"),
        "{phases:?}"
    );
    assert!(
        phases.iter().any(|p| p == "ImportInProgress"),
        "an import in progress is observable: {phases:?}"
    );
    let disk = disk_of(&volumes, &client, &ns, &name).await;
    assert_ne!(read_at(&disk, 0, 4), b"QFI\xfb", "converted to raw");
    assert_eq!(read_at(&disk, 5 * MI, PATTERN.len()), PATTERN);
    assert_eq!(
        std::fs::metadata(&disk).expect("disk").len(),
        64 * MI,
        "fills the PVC"
    );
}

/// Upstream CDI never fails an import: the importer exits 1, the kubelet restarts it, and the
/// DataVolume stays `ImportInProgress` with the error on its `Running` condition.
#[tokio::test]
async fn an_http_404_is_retried_with_the_error_on_the_running_condition() {
    let (_, client) = setup().await;
    let ns = namespace(&client, "sim-http-404").await;
    let base = serve(BTreeMap::new()).await;
    let spec = json!({
        "source": {"http": {"url": format!("{base}/missing.img")}},
        "storage": {"resources": {"requests": {"storage": "64Mi"}}},
    });
    create_data_volume(&client, &ns, "missing", spec).await;

    let api = data_volumes(&client, &ns);
    let dv = wait_for("the importer restarted after its error", || async {
        let dv = api.get_opt("missing").await.ok().flatten()?;
        let restarted = status_of(&dv)["restartCount"].as_i64().unwrap_or(0) >= 1;
        (restarted && condition(&dv, "Running")["reason"] == "Error").then_some(dv)
    })
    .await;
    assert_eq!(phase_of(&dv), "ImportInProgress");
    let message = condition(&dv, "Running")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(message.contains("got 404"), "{message}");
}

#[tokio::test]
async fn deleting_a_data_volume_removes_its_claim_and_directory() {
    let (volumes, client) = setup().await;
    let ns = namespace(&client, "sim-dv-delete").await;
    create_data_volume(&client, &ns, "short-lived", blank("64Mi")).await;
    wait_phase(&client, &ns, "short-lived", "Succeeded").await;
    let disk = disk_of(&volumes, &client, &ns, "short-lived").await;
    let dir = disk.parent().expect("volume directory").to_owned();

    data_volumes(&client, &ns)
        .delete("short-lived", &DeleteParams::default())
        .await
        .expect("delete DataVolume");
    wait_for("the DataVolume's PVC garbage-collected", || async {
        claim(&client, &ns, "short-lived")
            .await
            .is_none()
            .then_some(())
    })
    .await;
    wait_gone("the DataVolume's directory removed", &dir).await;
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

#[tokio::test]
async fn cdis_admission_refuses_bad_data_volumes_with_its_message() {
    let (_, client) = setup().await;
    let ns = namespace(&client, "sim-dv-admission").await;
    let api = data_volumes(&client, &ns);
    let dv = |name: &str, spec: Value| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    };
    let post = PostParams::default();
    // CDI puts a space before each message.
    let denied = "admission webhook \"datavolume-validate.cdi.kubevirt.io\" denied the request:  ";
    let size = json!({"resources": {"requests": {"storage": "64Mi"}}});

    assert_refused(
        api.create(&post, &dv("none", json!({"storage": size})))
            .await,
        &format!(
            "{denied}Data volume should have either Source or SourceRef, or be externally populated"
        ),
    );
    let both = json!({
        "source": {"blank": {}},
        "sourceRef": {"kind": "DataSource", "name": "rhcos"},
        "storage": size,
    });
    assert_refused(
        api.create(&post, &dv("both", both)).await,
        &format!(
            "{denied}Data volume should have either Source or SourceRef, or be externally populated"
        ),
    );
    let two = json!({"source": {"blank": {}, "http": {"url": "http://x/y"}}, "storage": size});
    assert_refused(
        api.create(&post, &dv("two", two)).await,
        &format!("{denied}Multiple Data volume sources"),
    );
    let zero =
        json!({"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": "0"}}}});
    assert_refused(
        api.create(&post, &dv("zero", zero)).await,
        &format!("{denied}Storage size can't be equal or less than zero"),
    );
    let no_size = json!({"source": {"http": {"url": "http://x/disk.img"}}, "storage": {}});
    assert_refused(
        api.create(&post, &dv("no-size", no_size)).await,
        &format!("{denied}Storage size is missing"),
    );
    assert_refused(
        api.create(&post, &dv("no-target", json!({"source": {"blank": {}}})))
            .await,
        &format!("{denied}Missing Data volume PVC"),
    );

    // The spec of a DataVolume cannot change; its metadata can.
    create_data_volume(&client, &ns, "kept", blank("64Mi")).await;
    assert_refused(
        api.patch(
            "kept",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"storage": {"resources": {"requests": {"storage": "128Mi"}}}}}),
            ),
        )
        .await,
        &format!("{denied}Cannot update DataVolume Spec"),
    );
    api.patch(
        "kept",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"kept": "yes"}}})),
    )
    .await
    .expect("labels may change");
    let names: Vec<String> = api
        .list(&Default::default())
        .await
        .expect("list DataVolumes")
        .items
        .iter()
        .map(|dv| dv.name_any())
        .collect();
    assert_eq!(names, ["kept"], "only the valid DataVolume was stored");
}

/// The PVC's `(volumeMode, accessModes, storageClassName)`.
async fn claim_modes(client: &Client, ns: &str, name: &str) -> (String, Vec<String>, String) {
    let pvc = claim(client, ns, name).await.expect("the DataVolume's PVC");
    let spec = pvc.spec.expect("spec");
    (
        spec.volume_mode.unwrap_or_default(),
        spec.access_modes.unwrap_or_default(),
        spec.storage_class_name.unwrap_or_default(),
    )
}

#[tokio::test]
async fn storage_profiles_give_unset_modes_block_on_the_default_rbd_class() {
    let (volumes, client) = setup().await;
    let ns = namespace(&client, "sim-block").await;
    // Upstream CDI's StorageProfile of the class, from its known-provisioner table.
    let profile_resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "StorageProfile"),
        "storageprofiles",
    );
    let profiles = Api::<DynamicObject>::all_with(client.clone(), &profile_resource);
    let first = wait_for("the RBD class's StorageProfile", || async {
        let profile = profiles
            .get_opt(sim::storage::RBD_CLASS)
            .await
            .ok()
            .flatten()?;
        let first = profile.data["status"]["claimPropertySets"][0].clone();
        (!first.is_null()).then_some(first)
    })
    .await;
    assert_eq!(
        first,
        json!({"accessModes": ["ReadWriteMany"], "volumeMode": "Block"})
    );

    create_data_volume(&client, &ns, "raw", blank("64Mi")).await;
    let explicit = json!({"source": {"blank": {}}, "storage": {
        "resources": {"requests": {"storage": "64Mi"}}, "volumeMode": "Filesystem"}});
    create_data_volume(&client, &ns, "files", explicit).await;
    let hostpath = json!({"source": {"blank": {}}, "storage": {
        "resources": {"requests": {"storage": "64Mi"}},
        "storageClassName": sim::storage::HOSTPATH_CLASS}});
    create_data_volume(&client, &ns, "hpp", hostpath).await;
    for name in ["raw", "files", "hpp"] {
        wait_phase(&client, &ns, name, "Succeeded").await;
    }
    let rbd = sim::storage::RBD_CLASS.to_owned();
    let (rwx, rwo) = (
        vec!["ReadWriteMany".to_owned()],
        vec!["ReadWriteOnce".to_owned()],
    );
    assert_eq!(
        claim_modes(&client, &ns, "raw").await,
        ("Block".into(), rwx, rbd.clone())
    );
    assert_eq!(
        claim_modes(&client, &ns, "files").await,
        ("Filesystem".into(), rwo.clone(), rbd)
    );
    assert_eq!(
        claim_modes(&client, &ns, "hpp").await,
        (
            "Filesystem".into(),
            rwo,
            sim::storage::HOSTPATH_CLASS.into()
        )
    );
    // A Block volume is its device, of the claim's size; no `disk.img` anywhere.
    let device = disk_of(&volumes, &client, &ns, "raw").await;
    assert_eq!(device.file_name().unwrap(), sim::volumes::DEVICE_FILE);
    assert_eq!(std::fs::metadata(&device).expect("device").len(), 64 * MI);
    assert!(!device.with_file_name(sim::volumes::DISK_FILE).exists());
    let disk = disk_of(&volumes, &client, &ns, "files").await;
    assert_eq!(disk.file_name().unwrap(), sim::volumes::DISK_FILE);
}

#[tokio::test]
async fn a_block_claim_in_volume_mounts_is_refused_by_the_kubelet_with_a_failed_mount_event() {
    let (_, client) = setup().await;
    let ns = namespace(&client, "sim-block-mount").await;
    create_data_volume(&client, &ns, "raw", blank("64Mi")).await;
    wait_phase(&client, &ns, "raw", "Succeeded").await;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "reader"},
        "spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "reader", "image": "registry.invalid/sim-storage-tests/reader",
                "command": ["/bin/true"],
                "volumeMounts": [{"name": "disk", "mountPath": "/disk"}]}],
            "volumes": [{"name": "disk", "persistentVolumeClaim": {"claimName": "raw"}}],
        },
    }))
    .expect("pod");
    wait_for("pod created", || async {
        pods.create(&PostParams::default(), &pod).await.ok()
    })
    .await;
    let events = Api::<k8s_openapi::api::core::v1::Event>::namespaced(client.clone(), &ns);
    let message = wait_for("the kubelet's FailedMount event", || async {
        let list = events.list(&Default::default()).await.ok()?;
        list.items
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedMount"))
            .and_then(|e| e.message)
    })
    .await;
    assert_eq!(
        message,
        "Unable to attach or mount volumes: unmounted volumes=[disk], unattached volumes=[disk], \
         failed to process volumes=[disk]: volume disk has volumeMode Block, but is specified in \
         volumeMounts"
    );
    let pod = pods.get("reader").await.expect("pod");
    let status = pod.status.expect("status");
    assert_eq!(status.phase.as_deref(), Some("Pending"));
    let waiting = status.container_statuses.expect("statuses")[0]
        .state
        .clone()
        .and_then(|s| s.waiting)
        .expect("waiting");
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
}
