//! The storage provisioner: every PVC gets a directory `<root>/<pvc-uid>/` and a PersistentVolume
//! pointing at it. A Filesystem-mode volume is that directory (a disk lives there as `disk.img`,
//! CDI's and KubeVirt's convention); a Block-mode volume is a device, played by the file
//! `device` of the claim's full size, created with the volume. Pods see a Block volume only
//! through `volumeDevices`, never as a directory (the kubelet refuses the mismatch).
//!
//! The sim plays an *external dynamic provisioner*, not the binder: it creates a PV pre-bound to
//! the claim (`claimRef` with the claim's UID, `pv.kubernetes.io/provisioned-by`), and the real
//! PersistentVolume controller of kube-controller-manager binds the pair (`spec.volumeName`,
//! `status.phase=Bound`, `status.capacity`, `status.accessModes`). Writing the claim status
//! ourselves would fight that controller, which resets unbound-looking claims to `Pending`.
//!
//! When the claim is really gone (PVC protection, also real, keeps it while a pod uses it) the PV
//! controller marks the PV `Released` and leaves deletion to us, as for any external provisioner:
//! we delete the directory, then the PV.
//!
//! Level-triggered: every watch event and a periodic resync re-derive what is missing from the
//! stores, so a restarted sim converges (PV names derive from the claim UID, so a retry can never
//! provision twice), and directories left behind by claims deleted while the sim was down are
//! swept.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, ObjectReference, PersistentVolume, PersistentVolumeClaim,
    PersistentVolumeSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::{Error, SimContext};

/// `pv.kubernetes.io/provisioned-by` of the sim's PVs. Not `kubernetes.io/…`, so the PV
/// controller treats it as an external provisioner and leaves deletion to us.
pub const PROVISIONER: &str = "sim.guestcluster.opdev.io/local";
/// Label on every PV the sim provisions (the PV watch selects on it).
pub const VOLUME_LABEL: &str = "sim.guestcluster.opdev.io/volume";
/// The disk image inside a volume directory (the CDI and KubeVirt convention).
pub const DISK_FILE: &str = "disk.img";
/// What stands for a Block volume's device inside its directory.
pub const DEVICE_FILE: &str = "device";

/// `spec.volumeMode` of a claim (the API server defaults it to `Filesystem`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeMode {
    Filesystem,
    Block,
}

impl VolumeMode {
    pub fn of(pvc: &PersistentVolumeClaim) -> Self {
        let mode = pvc.spec.as_ref().and_then(|s| s.volume_mode.as_deref());
        Self::parse(mode.unwrap_or("Filesystem"))
    }

    /// Anything but `Block` is a filesystem (the API server admits only the two).
    pub fn parse(text: &str) -> Self {
        if text == "Block" {
            VolumeMode::Block
        } else {
            VolumeMode::Filesystem
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeMode::Filesystem => "Filesystem",
            VolumeMode::Block => "Block",
        }
    }

    /// The file holding the volume's content inside its directory: a disk image or the device.
    pub fn content_file(self) -> &'static str {
        match self {
            VolumeMode::Filesystem => DISK_FILE,
            VolumeMode::Block => DEVICE_FILE,
        }
    }
}

/// A bound claim's volume: its directory and mode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimVolume {
    pub dir: PathBuf,
    pub mode: VolumeMode,
}

impl ClaimVolume {
    /// The disk: `disk.img` of a Filesystem volume, the device of a Block one.
    pub fn content(&self) -> PathBuf {
        self.dir.join(self.mode.content_file())
    }
}

/// How often everything is re-derived even without events (covers failed API calls).
const RESYNC: Duration = Duration::from_secs(5);

/// Directory per PVC (by UID) holding its `disk.img` or files. The root belongs to this module:
/// a directory there without a claim or PV is removed.
#[derive(Clone, Debug)]
pub struct VolumeStore {
    root: PathBuf,
}

impl VolumeStore {
    pub fn new(root: PathBuf) -> Self {
        Self { root }
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn dir(&self, pvc_uid: &str) -> PathBuf {
        self.root.join(pvc_uid)
    }

    /// The volume of a bound claim.
    pub fn volume(&self, pvc_uid: &str, mode: VolumeMode) -> ClaimVolume {
        ClaimVolume {
            dir: self.dir(pvc_uid),
            mode,
        }
    }

    /// `<dir>/disk.img`: the disk of a Filesystem-mode volume.
    pub fn disk_path(&self, pvc_uid: &str) -> PathBuf {
        self.volume(pvc_uid, VolumeMode::Filesystem).content()
    }

    /// The disk of claim `namespace/name` ([`ClaimVolume::content`]) once it is bound.
    pub async fn claim_disk_path(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<PathBuf>, Error> {
        let volume = self.claim_volume(client, namespace, name).await?;
        Ok(volume.map(|v| v.content()))
    }

    /// The volume of claim `namespace/name`, or `None` while the claim does not exist or is not
    /// bound yet (its directory may not exist before binding; a real pod would not start either).
    pub async fn claim_volume(
        &self,
        client: &Client,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ClaimVolume>, Error> {
        let api = Api::<PersistentVolumeClaim>::namespaced(client.clone(), namespace);
        let Some(pvc) = api.get_opt(name).await? else {
            return Ok(None);
        };
        Ok(bound_uid(&pvc).map(|uid| self.volume(&uid, VolumeMode::of(&pvc))))
    }

    fn ensure_dir(&self, pvc_uid: &str) -> Result<PathBuf, Error> {
        let dir = self.dir(pvc_uid);
        std::fs::create_dir_all(&dir).map_err(|source| Error::Io {
            path: dir.clone(),
            source,
        })?;
        Ok(dir)
    }

    /// The volume's directory and, for a Block claim, its device: a file of the claim's size,
    /// all zeros, as a new device reads. An existing device is left as it is (it holds data).
    fn ensure_volume(&self, pvc: &PersistentVolumeClaim, pvc_uid: &str) -> Result<PathBuf, Error> {
        let dir = self.ensure_dir(pvc_uid)?;
        if VolumeMode::of(pvc) != VolumeMode::Block {
            return Ok(dir);
        }
        let device = dir.join(DEVICE_FILE);
        let io = |source| Error::Io {
            path: device.clone(),
            source,
        };
        let Some(bytes) = requested_bytes(pvc) else {
            return Ok(dir);
        };
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&device)
        {
            Ok(file) => {
                file.set_len(bytes).map_err(io)?;
                use std::os::unix::fs::PermissionsExt;
                std::fs::set_permissions(&device, std::fs::Permissions::from_mode(0o660))
                    .map_err(io)?;
            }
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(err) => return Err(io(err)),
        }
        Ok(dir)
    }

    fn remove_dir(&self, pvc_uid: &str) -> Result<(), Error> {
        let dir = self.dir(pvc_uid);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { path: dir, source }),
        }
    }

    /// Names of the directories under the root (claim UIDs).
    fn dir_uids(&self) -> Result<Vec<String>, Error> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => {
                return Err(Error::Io {
                    path: self.root.clone(),
                    source,
                });
            }
        };
        let mut uids = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|source| Error::Io {
                path: self.root.clone(),
                source,
            })?;
            if let Some(name) = entry.file_name().to_str() {
                uids.push(name.to_owned());
            }
        }
        Ok(uids)
    }
}

/// The claim's storage request in bytes.
fn requested_bytes(pvc: &PersistentVolumeClaim) -> Option<u64> {
    let requests = pvc.spec.as_ref()?.resources.as_ref()?.requests.as_ref()?;
    crate::quantity::parse_quantity(&requests.get("storage")?.0)
}

/// The claim's UID when it is bound (its directory exists from then on).
pub(crate) fn bound_uid(pvc: &PersistentVolumeClaim) -> Option<String> {
    let bound = pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
    if bound { pvc.uid() } else { None }
}

/// The PV name for a claim, as CSI external provisioners name theirs.
pub fn pv_name(pvc_uid: &str) -> String {
    format!("pvc-{pvc_uid}")
}

/// `volume.kubernetes.io/storage-provisioner`, and its beta name: kube-controller-manager's
/// PV controller sets both on a claim of a class with an external provisioner (kubernetes
/// v1.37.2 `pkg/controller/volume/persistentvolume/pv_controller_base.go`
/// `setClaimProvisioner`).
const STORAGE_PROVISIONER: [&str; 2] = [
    "volume.kubernetes.io/storage-provisioner",
    "volume.beta.kubernetes.io/storage-provisioner",
];

/// Whether the sim still has to provision a PV for this claim: a live claim that nobody bound
/// to a volume yet, whose PV is not in the store, and that the PV controller handed to a
/// provisioner the sim plays. An external provisioner serves only claims annotated with its
/// own name (sig-storage-lib-external-provisioner `controller.go` `shouldProvision`).
fn needs_volume(pvc: &PersistentVolumeClaim, pv_uids: &HashSet<String>) -> bool {
    let Some(uid) = pvc.metadata.uid.as_deref() else {
        return false;
    };
    let annotations = pvc.metadata.annotations.as_ref();
    let ours = STORAGE_PROVISIONER
        .iter()
        .find_map(|key| annotations?.get(*key))
        .is_some_and(|name| crate::storage::provisions(name));
    if !ours {
        return false;
    }
    let being_deleted = pvc.metadata.deletion_timestamp.is_some();
    // A claim with `volumeName` is statically bound (or already bound to ours): not ours to serve.
    let has_volume = pvc
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty());
    !being_deleted && !has_volume && !pv_uids.contains(uid)
}

/// The PV that backs `pvc` with `dir`, pre-bound to the claim by UID. `None` when the claim has
/// no storage request (the API server does not admit those).
fn volume_for(pvc: &PersistentVolumeClaim, dir: &Path) -> Option<PersistentVolume> {
    let uid = pvc.metadata.uid.as_deref()?;
    let spec = pvc.spec.as_ref()?;
    let request = spec
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?
        .clone();
    let access_modes = spec
        .access_modes
        .clone()
        .filter(|m| !m.is_empty())
        .unwrap_or_else(|| vec!["ReadWriteOnce".to_owned()]);
    Some(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(pv_name(uid)),
            labels: Some(BTreeMap::from([(
                VOLUME_LABEL.to_owned(),
                "true".to_owned(),
            )])),
            annotations: Some(BTreeMap::from([(
                "pv.kubernetes.io/provisioned-by".to_owned(),
                PROVISIONER.to_owned(),
            )])),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".to_owned(), request)])),
            access_modes: Some(access_modes),
            volume_mode: Some(
                spec.volume_mode
                    .clone()
                    .unwrap_or_else(|| "Filesystem".to_owned()),
            ),
            // The binder matches classes exactly; a claim without a class matches none.
            storage_class_name: spec.storage_class_name.clone(),
            persistent_volume_reclaim_policy: Some("Delete".to_owned()),
            host_path: Some(HostPathVolumeSource {
                path: dir.to_string_lossy().into_owned(),
                type_: None,
            }),
            claim_ref: Some(ObjectReference {
                api_version: Some("v1".to_owned()),
                kind: Some("PersistentVolumeClaim".to_owned()),
                namespace: pvc.metadata.namespace.clone(),
                name: pvc.metadata.name.clone(),
                uid: Some(uid.to_owned()),
                ..ObjectReference::default()
            }),
            ..PersistentVolumeSpec::default()
        }),
        status: None,
    })
}

/// The claim UID of one of our PVs once its claim is gone for good: the PV controller says so
/// (`Released`; `Failed` after a failed reclaim) and our own claim store agrees.
fn reclaimable(pv: &PersistentVolume, live_claims: &HashSet<String>) -> Option<String> {
    let phase = pv.status.as_ref().and_then(|s| s.phase.as_deref());
    if !matches!(phase, Some("Released" | "Failed")) {
        return None;
    }
    let uid = pv.spec.as_ref()?.claim_ref.as_ref()?.uid.clone()?;
    (!live_claims.contains(&uid)).then_some(uid)
}

/// Directories whose claim and PV are both gone (deleted while the sim was not running, or a
/// crash between creating a directory and its PV).
fn orphan_dirs(
    dir_uids: &[String],
    live_claims: &HashSet<String>,
    pv_claims: &HashSet<String>,
) -> Vec<String> {
    dir_uids
        .iter()
        .filter(|uid| !live_claims.contains(*uid) && !pv_claims.contains(*uid))
        .cloned()
        .collect()
}

/// Claim UIDs named by the `claimRef` of PVs in the store.
fn pv_claim_uids(pvs: &Store<PersistentVolume>) -> HashSet<String> {
    pvs.state()
        .iter()
        .filter_map(|pv| pv.spec.as_ref()?.claim_ref.as_ref()?.uid.clone())
        .collect()
}

fn claim_uids(pvcs: &Store<PersistentVolumeClaim>) -> HashSet<String> {
    pvcs.state().iter().filter_map(|pvc| pvc.uid()).collect()
}

/// Which watch an event came from, and whether it completed a (re)list.
enum Fed {
    Claims { listed: bool },
    Volumes { listed: bool },
}

fn listed<K>(event: &Result<watcher::Event<K>, watcher::Error>) -> bool {
    matches!(event, Ok(watcher::Event::InitDone))
}

/// The storage provisioner; runs until its watches end.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    let client = ctx.client.clone();
    let (pvcs, pvc_writer) = reflector::store::<PersistentVolumeClaim>();
    let (pvs, pv_writer) = reflector::store::<PersistentVolume>();
    let claim_events = reflector::reflector(
        pvc_writer,
        watcher(Api::all(client.clone()), watcher::Config::default()),
    )
    .default_backoff()
    .map(|e| Fed::Claims { listed: listed(&e) });
    let volume_events = reflector::reflector(
        pv_writer,
        watcher(
            Api::all(client.clone()),
            watcher::Config::default().labels(VOLUME_LABEL),
        ),
    )
    .default_backoff()
    .map(|e| Fed::Volumes { listed: listed(&e) });
    let mut events = std::pin::pin!(futures::stream::select(claim_events, volume_events));
    let mut resync = tokio::time::interval(RESYNC);
    let (mut claims_listed, mut volumes_listed) = (false, false);
    loop {
        let sweep = tokio::select! {
            fed = events.next() => match fed {
                Some(Fed::Claims { listed }) => { claims_listed |= listed; false }
                Some(Fed::Volumes { listed }) => { volumes_listed |= listed; false }
                None => return Err(Error::Other("volume watches ended".into())),
            },
            _ = resync.tick() => true,
        };
        // Acting on a half-listed store would provision twice or sweep live directories.
        if claims_listed && volumes_listed {
            reconcile(&ctx, &pvcs, &pvs, sweep).await;
        }
    }
}

/// One level-triggered pass over everything in the stores; failures are logged and retried by
/// the next event or resync.
async fn reconcile(
    ctx: &SimContext,
    pvcs: &Store<PersistentVolumeClaim>,
    pvs: &Store<PersistentVolume>,
    sweep: bool,
) {
    let live_claims = claim_uids(pvcs);
    let pv_claims = pv_claim_uids(pvs);
    for pvc in pvcs.state() {
        if let Err(err) = provision(ctx, &pvc, &pv_claims).await {
            tracing::warn!(pvc = %pvc.name_any(), "sim volumes: provisioning failed: {err}");
        }
    }
    for pv in pvs.state() {
        if let Some(uid) = reclaimable(&pv, &live_claims)
            && let Err(err) = reclaim(ctx, &pv, &uid).await
        {
            tracing::warn!(pv = %pv.name_any(), "sim volumes: reclaim failed: {err}");
        }
    }
    if sweep {
        sweep_orphans(&ctx.volumes, &live_claims, &pv_claims);
    }
}

/// Directory first, then the PV: a PV (hence a bound claim) always has its directory.
async fn provision(
    ctx: &SimContext,
    pvc: &PersistentVolumeClaim,
    pv_claims: &HashSet<String>,
) -> Result<(), Error> {
    let Some(uid) = pvc.uid() else { return Ok(()) };
    if !needs_volume(pvc, pv_claims) {
        if pv_claims.contains(&uid) {
            // Ours already: recreate a directory lost with a wiped sim root.
            ctx.volumes.ensure_volume(pvc, &uid)?;
        }
        return Ok(());
    }
    let dir = ctx.volumes.ensure_volume(pvc, &uid)?;
    let Some(pv) = volume_for(pvc, &dir) else {
        return Ok(());
    };
    let api = Api::<PersistentVolume>::all(ctx.client.clone());
    match api.create(&PostParams::default(), &pv).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Directory first, then the PV: while the PV exists we are reminded to retry.
async fn reclaim(ctx: &SimContext, pv: &PersistentVolume, claim_uid: &str) -> Result<(), Error> {
    ctx.volumes.remove_dir(claim_uid)?;
    let api = Api::<PersistentVolume>::all(ctx.client.clone());
    match api.delete(&pv.name_any(), &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

fn sweep_orphans(
    volumes: &VolumeStore,
    live_claims: &HashSet<String>,
    pv_claims: &HashSet<String>,
) {
    let uids = match volumes.dir_uids() {
        Ok(uids) => uids,
        Err(err) => {
            tracing::warn!("sim volumes: listing volume directories: {err}");
            return;
        }
    };
    for uid in orphan_dirs(&uids, live_claims, pv_claims) {
        // A claim created a moment ago may not have reached the store yet, and its directory
        // may already hold data (a pre-populated volume): only a directory left alone for a
        // whole resync period is an orphan.
        if recently_modified(&volumes.dir(&uid)) {
            continue;
        }
        if let Err(err) = volumes.remove_dir(&uid) {
            tracing::warn!("sim volumes: removing orphan directory: {err}");
        }
    }
}

fn recently_modified(dir: &Path) -> bool {
    std::fs::metadata(dir)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < RESYNC)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(json: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(json).expect("claim")
    }

    fn plain_claim() -> PersistentVolumeClaim {
        claim(serde_json::json!({
            "metadata": {
                "name": "data", "namespace": "ns", "uid": "u1",
                "annotations": {STORAGE_PROVISIONER[0]: "kubevirt.io.hostpath-provisioner"},
            },
            "spec": {
                "accessModes": ["ReadWriteMany"],
                "resources": {"requests": {"storage": "10Gi"}},
                "storageClassName": "fast",
                "volumeMode": "Block",
            },
        }))
    }

    fn set(items: &[&str]) -> HashSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn paths_derive_from_the_claim_uid() {
        let store = VolumeStore::new(PathBuf::from("/sim/volumes"));
        assert_eq!(store.dir("u1"), PathBuf::from("/sim/volumes/u1"));
        assert_eq!(
            store.volume("u1", VolumeMode::Filesystem).content(),
            PathBuf::from("/sim/volumes/u1/disk.img")
        );
        assert_eq!(
            store.volume("u1", VolumeMode::Block).content(),
            PathBuf::from("/sim/volumes/u1/device")
        );
    }

    #[test]
    fn a_new_claim_needs_a_volume_once() {
        let pvc = plain_claim();
        assert!(needs_volume(&pvc, &set(&[])));
        assert!(!needs_volume(&pvc, &set(&["u1"])), "PV already provisioned");
    }

    #[test]
    fn a_claim_of_a_provisioner_nobody_plays_needs_no_volume() {
        let mut other = plain_claim();
        other.metadata.annotations = Some(BTreeMap::from([(
            STORAGE_PROVISIONER[0].to_owned(),
            "example.com/not-deployed".to_owned(),
        )]));
        assert!(!needs_volume(&other, &set(&[])));
        let mut unhanded = plain_claim();
        unhanded.metadata.annotations = None;
        assert!(
            !needs_volume(&unhanded, &set(&[])),
            "the PV controller has not handed it to a provisioner yet"
        );
    }

    #[test]
    fn bound_or_deleted_claims_need_no_volume() {
        let mut bound = plain_claim();
        bound.spec.as_mut().expect("spec").volume_name = Some("pv-static".into());
        assert!(!needs_volume(&bound, &set(&[])));

        let mut deleted = plain_claim();
        deleted.metadata.deletion_timestamp =
            Some(serde_json::from_value(serde_json::json!("2026-01-01T00:00:00Z")).expect("time"));
        assert!(!needs_volume(&deleted, &set(&[])));
    }

    #[test]
    fn the_volume_mirrors_the_claim_and_is_prebound_by_uid() {
        let pv = volume_for(&plain_claim(), Path::new("/sim/volumes/u1")).expect("pv");
        let json = serde_json::to_value(&pv).expect("json");
        assert_eq!(json["metadata"]["name"], "pvc-u1");
        assert_eq!(
            json["metadata"]["annotations"]["pv.kubernetes.io/provisioned-by"],
            PROVISIONER
        );
        let spec = &json["spec"];
        assert_eq!(spec["capacity"]["storage"], "10Gi");
        assert_eq!(spec["accessModes"], serde_json::json!(["ReadWriteMany"]));
        assert_eq!(spec["volumeMode"], "Block");
        assert_eq!(spec["storageClassName"], "fast");
        assert_eq!(spec["persistentVolumeReclaimPolicy"], "Delete");
        assert_eq!(spec["hostPath"]["path"], "/sim/volumes/u1");
        assert_eq!(spec["claimRef"]["uid"], "u1");
        assert_eq!(spec["claimRef"]["namespace"], "ns");
        assert_eq!(spec["claimRef"]["name"], "data");
    }

    #[test]
    fn volume_defaults_match_an_unset_class_and_mode() {
        let pvc = claim(serde_json::json!({
            "metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"resources": {"requests": {"storage": "1Gi"}}},
        }));
        let json =
            serde_json::to_value(volume_for(&pvc, Path::new("/d")).expect("pv")).expect("json");
        assert_eq!(json["spec"]["storageClassName"], serde_json::Value::Null);
        assert_eq!(json["spec"]["volumeMode"], "Filesystem");
        assert_eq!(
            json["spec"]["accessModes"],
            serde_json::json!(["ReadWriteOnce"])
        );
    }

    fn released(phase: &str, claim_uid: &str) -> PersistentVolume {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("pvc-{claim_uid}")},
            "spec": {"claimRef": {"uid": claim_uid}},
            "status": {"phase": phase},
        }))
        .expect("pv")
    }

    #[test]
    fn only_released_volumes_of_gone_claims_are_reclaimed() {
        assert_eq!(
            reclaimable(&released("Released", "u1"), &set(&[])),
            Some("u1".into())
        );
        assert_eq!(
            reclaimable(&released("Failed", "u1"), &set(&[])),
            Some("u1".into())
        );
        assert_eq!(reclaimable(&released("Bound", "u1"), &set(&[])), None);
        assert_eq!(
            reclaimable(&released("Released", "u1"), &set(&["u1"])),
            None,
            "our claim store still has the claim: wait for its delete event"
        );
    }

    #[test]
    fn orphans_have_neither_claim_nor_volume() {
        let dirs = vec!["live".to_owned(), "released".to_owned(), "gone".to_owned()];
        assert_eq!(
            orphan_dirs(&dirs, &set(&["live"]), &set(&["released"])),
            vec!["gone".to_owned()]
        );
    }
}
