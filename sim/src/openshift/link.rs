//! Runs a guest cluster for every simulated guest whose kubelet runs: started when the kubelet
//! starts (as static pods would start the API server), stopped when it stops or the guest goes
//! down. The API server listens on the guest's address at 6443 and is registered as the guest's
//! port 6443, so both an SSH `direct-tcpip` tunnel to `api.crc.testing:6443` and the management
//! cluster's Service/Route reach it.
//!
//! On the way down (the kubelet stopping, or a graceful stop of the guest, as a [`StopHook`])
//! the objects clients wrote are saved into the guest's state, as a real node's etcd would be
//! flushed to its disk; a cluster starting on a prefix that holds nothing yet gets them back
//! (see [`super::persist`]). A crash saves nothing.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde_json::Value;
use sha2::{Digest as _, Sha256};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::watch;

use super::cluster::{ClusterSpec, GuestCluster, GuestView};
use crate::guest::state::{File, paths};
use crate::guest::{GuestEvent, GuestEventKind, StateChange, StopHook};
use crate::{Error, SimContext};
use testenv::ApiServerLauncher;

const KUBELET: &str = "kubelet.service";
/// The guest API port (the node's, where its `oc` reaches it).
pub use crate::guest::exec::oc::API_PORT;
/// How long saving a stopping cluster's objects may take (attempts included) before it stops
/// without: the disk then keeps what it carried.
const SAVE_TIMEOUT: Duration = Duration::from_secs(30);

/// A guest's cluster: being started (a boot with the kubelet enabled and the agent's
/// `systemctl start kubelet` both ask, and two API servers must never race for one address),
/// running, or going down.
enum Entry {
    /// Being started by the start with this number.
    Starting(u64),
    Running(Box<GuestCluster>),
    Stopping(Stopping),
}

/// What clients wrote, as saved on the way down; `None` when it could not be read.
type Saved = Option<Arc<Vec<Value>>>;

/// A cluster going down: its objects being saved, then its API server stopping. The entry goes
/// once the server is gone, so a new start never races it for the address.
#[derive(Clone)]
struct Stopping {
    /// `Some` once the save is over.
    saved: watch::Receiver<Option<Saved>>,
    /// True once the API server is gone (and the entry removed).
    down: watch::Receiver<bool>,
}

impl Stopping {
    async fn saved(mut self) -> Saved {
        self.saved
            .wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|saved| saved.clone())
            .flatten()
    }

    async fn down(mut self) {
        let _ = self.down.wait_for(|down| *down).await;
    }
}

/// Numbers starts, so a start finishing late never takes the place of a newer one.
static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

type Clusters = Arc<Mutex<HashMap<String, Entry>>>;

/// The controller: reacts to guest events until the simulation stops.
pub async fn run(ctx: Arc<SimContext>, launcher: ApiServerLauncher) -> Result<(), Error> {
    let mut events = ctx.guests.subscribe_events();
    let clusters: Clusters = Arc::default();
    ctx.guests.add_stop_hook(stop_hook(clusters.clone()));
    ctx.guests
        .add_unit_stop_hook(KUBELET, kubelet_stop_hook(ctx.clone(), clusters.clone()));
    loop {
        match events.recv().await {
            Ok(event) => handle(&ctx, &launcher, &clusters, event),
            // Missed events: the per-guest state is re-read on the next one; a lag only delays.
            Err(RecvError::Lagged(missed)) => {
                tracing::warn!(missed, "guest cluster manager lagged")
            }
            Err(RecvError::Closed) => return Ok(()),
        }
    }
}

fn handle(
    ctx: &Arc<SimContext>,
    launcher: &ApiServerLauncher,
    clusters: &Clusters,
    event: GuestEvent,
) {
    let uid = event.vmi_uid;
    match event.kind {
        GuestEventKind::UnitStarted(unit) if unit == KUBELET => start(ctx, launcher, clusters, uid),
        GuestEventKind::Booted if kubelet_running(ctx, &uid) => start(ctx, launcher, clusters, uid),
        // A graceful stop took the cluster down in its stop hook; this is for a crash.
        GuestEventKind::Rebooting | GuestEventKind::Stopped => stop(ctx, clusters, &uid),
        _ => {}
    }
}

/// The guests' part in a graceful stop: the cluster goes down, and what its clients wrote goes
/// into the state the guest flushes.
fn stop_hook(clusters: Clusters) -> StopHook {
    Arc::new(move |uid: &str| {
        let stopping = take_down(&clusters, uid);
        Box::pin(async move {
            let objects = stopping?.saved().await?;
            let change: StateChange = Box::new(move |state| {
                super::persist::save_into(state, objects.as_ref().clone());
            });
            Some(change)
        })
    })
}

/// The kubelet stopped: the cluster goes down, and what its clients wrote goes into the guest
/// before its next command runs (the writes came first). A restart (the kubelet running again
/// when the hook runs) leaves the cluster up: containers outlive their kubelet (CRI-O's conmon
/// holds them; the kubelet adopts them when it starts).
fn kubelet_stop_hook(ctx: Arc<SimContext>, clusters: Clusters) -> StopHook {
    Arc::new(move |uid: &str| {
        if kubelet_running(&ctx, uid) {
            return Box::pin(async { None });
        }
        let stopping = take_down(&clusters, uid);
        if stopping.is_some() {
            ctx.guests.unregister_port(uid, API_PORT);
        }
        Box::pin(async move {
            let objects = stopping?.saved().await?;
            let change: StateChange = Box::new(move |state| {
                super::persist::save_into(state, objects.as_ref().clone());
            });
            Some(change)
        })
    })
}

/// Starts taking the cluster of `uid` down, saving what its clients wrote first; `None` when
/// there is no running cluster (one still starting stops itself once up).
fn take_down(clusters: &Clusters, uid: &str) -> Option<Stopping> {
    let mut entries = lock(clusters);
    let cluster = match entries.remove(uid) {
        Some(Entry::Running(cluster)) => cluster,
        Some(Entry::Stopping(stopping)) => {
            entries.insert(uid.to_owned(), Entry::Stopping(stopping.clone()));
            return Some(stopping);
        }
        Some(Entry::Starting(_)) | None => return None,
    };
    let (saved_tx, saved) = watch::channel(None);
    let (down_tx, down) = watch::channel(false);
    let down_probe = down.clone();
    let stopping = Stopping { saved, down };
    entries.insert(uid.to_owned(), Entry::Stopping(stopping.clone()));
    drop(entries);
    let (clusters, uid) = (clusters.clone(), uid.to_owned());
    tokio::spawn(async move {
        let objects = match tokio::time::timeout(SAVE_TIMEOUT, save(&cluster)).await {
            Ok(objects) => Some(objects),
            Err(_) => {
                tracing::warn!(vmi = %uid, "guest cluster: its objects were not saved within {SAVE_TIMEOUT:?}; the disk keeps what it carried");
                None
            }
        };
        saved_tx.send_replace(Some(objects.map(Arc::new)));
        // Stopping waits for the process to exit.
        let _ = tokio::task::spawn_blocking(move || cluster.stop()).await;
        {
            let mut entries = lock(&clusters);
            let ours = matches!(entries.get(&uid), Some(Entry::Stopping(s)) if s.down.same_channel(&down_probe));
            if ours {
                entries.remove(&uid);
            }
        }
        down_tx.send_replace(true);
    });
    Some(stopping)
}

/// What clients wrote to the cluster; a failed attempt (the API server restarting for a
/// rollout) is tried again until the caller's deadline.
async fn save(cluster: &GuestCluster) -> Vec<Value> {
    let mut last_error = None;
    loop {
        match cluster.client_objects().await {
            Ok(objects) => {
                tracing::info!(
                    objects = objects.len(),
                    "guest cluster: saved the objects clients wrote"
                );
                return objects;
            }
            Err(err) => {
                let err = err.to_string();
                if last_error.as_ref() != Some(&err) {
                    tracing::warn!("guest cluster: saving its objects: {err}");
                }
                last_error = Some(err);
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn kubelet_running(ctx: &SimContext, uid: &str) -> bool {
    ctx.guests
        .state(uid)
        .is_some_and(|s| s.units.get(KUBELET).is_some_and(|u| u.active))
}

fn lock(clusters: &Clusters) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
    clusters.lock().unwrap_or_else(PoisonError::into_inner)
}

fn start(ctx: &Arc<SimContext>, launcher: &ApiServerLauncher, clusters: &Clusters, uid: String) {
    let start = {
        let mut entries = lock(clusters);
        match entries.get(&uid) {
            Some(Entry::Stopping(stopping)) => {
                // Started again while going down: once the old server is gone.
                let stopping = stopping.clone();
                drop(entries);
                let (ctx, launcher, clusters) = (ctx.clone(), launcher.clone(), clusters.clone());
                tokio::spawn(async move {
                    stopping.down().await;
                    if kubelet_running(&ctx, &uid) {
                        start(&ctx, &launcher, &clusters, uid);
                    }
                });
                return;
            }
            Some(_) => return,
            None => {}
        }
        let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        entries.insert(uid.clone(), Entry::Starting(start));
        start
    };
    if !start_cluster(ctx, launcher, clusters, &uid, start) {
        lock(clusters).remove(&uid);
    }
}

/// Starts the API server of guest `uid` in the background; false when the guest cannot have
/// one (nothing was started).
fn start_cluster(
    ctx: &Arc<SimContext>,
    launcher: &ApiServerLauncher,
    clusters: &Clusters,
    uid: &str,
    start: u64,
) -> bool {
    let uid = uid.to_owned();
    let (Some(state), Some(ip), Some(disk)) = (
        ctx.guests.state(&uid),
        ctx.guests.address(&uid),
        ctx.guests.boot_disk(&uid),
    ) else {
        return false;
    };
    let (Some(pki), Some(version)) = (state.pki.clone(), state.openshift_version.clone()) else {
        tracing::warn!(vmi = %uid, "kubelet started on a disk without OpenShift; no API server");
        return false;
    };
    let bind = SocketAddr::from((ip, API_PORT));
    let spec = ClusterSpec {
        dir: ctx.options.root.join("guest-apis").join(&uid),
        bind,
        etcd_prefix: format!("/guests/{}", disk_id(&disk)),
        pki,
        version,
        timings: ctx.options.timings.clone(),
        saved_objects: state.api_objects.clone(),
    };
    let (ctx, launcher, clusters) = (ctx.clone(), launcher.clone(), clusters.clone());
    tokio::spawn(async move {
        let view = Arc::new(View {
            ctx: ctx.clone(),
            uid: uid.clone(),
        });
        // The guest's kube-apiserver is a static pod: the kubelet starts it again when it
        // exits, with a back-off (10 s doubling to 5 min upstream; shorter here). It can fail
        // to bind while the previous boot's server on the same address is still going down.
        let mut delay = Duration::from_secs(1);
        let started = loop {
            match GuestCluster::start(&launcher, spec.clone(), view.clone()).await {
                Ok(cluster) => break Ok(cluster),
                Err(err) => {
                    let wanted = matches!(lock(&clusters).get(&uid), Some(Entry::Starting(n)) if *n == start)
                        && kubelet_running(&ctx, &uid);
                    if !wanted {
                        break Err(err);
                    }
                    tracing::warn!(vmi = %uid, "guest API server did not start, again in {delay:?}: {err}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(10));
                }
            }
        };
        match started {
            Ok(cluster) => {
                let mut entries = lock(&clusters);
                // Still wanted: not stopped meanwhile (the entry gone), kubelet still running.
                let ours = matches!(entries.get(&uid), Some(Entry::Starting(n)) if *n == start);
                let wanted = ours && kubelet_running(&ctx, &uid);
                if wanted {
                    ctx.guests.register_port(&uid, API_PORT, cluster.addr());
                    entries.insert(uid, Entry::Running(Box::new(cluster)));
                } else {
                    if ours {
                        entries.remove(&uid);
                    }
                    drop(entries);
                    cluster.stop();
                }
            }
            Err(err) => {
                tracing::error!(vmi = %uid, "guest API server did not start: {err}");
                let mut entries = lock(&clusters);
                if matches!(entries.get(&uid), Some(Entry::Starting(n)) if *n == start) {
                    entries.remove(&uid);
                }
            }
        }
    });
    true
}

/// Stops the cluster of `uid` without saving anything (the guest crashed).
fn stop(ctx: &SimContext, clusters: &Clusters, uid: &str) {
    let removed = {
        let mut entries = lock(clusters);
        if matches!(entries.get(uid), Some(Entry::Stopping(_))) {
            return;
        }
        // A cluster still starting sees its entry gone when it is up, and stops itself.
        entries.remove(uid)
    };
    if let Some(Entry::Running(cluster)) = removed {
        ctx.guests.unregister_port(uid, API_PORT);
        cluster.stop();
    }
}

/// One etcd prefix per disk: a VM restart finds its cluster again, a clone starts from the
/// baseline of an installed cluster.
fn disk_id(disk: &std::path::Path) -> String {
    let digest = Sha256::digest(disk.as_os_str().as_encoded_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// A guest as the cluster controllers see it.
struct View {
    ctx: Arc<SimContext>,
    uid: String,
}

impl GuestView for View {
    fn kubelet_running(&self) -> bool {
        kubelet_running(&self.ctx, &self.uid)
    }

    fn guest_now(&self) -> i64 {
        self.ctx
            .guests
            .guest_time(&self.uid)
            .unwrap_or_else(crate::guest::time::host_now)
    }

    fn certificates_valid(&self) -> bool {
        let now = self.guest_now();
        self.ctx.guests.state(&self.uid).is_some_and(|s| {
            s.certificates
                .values()
                .all(|c| c.not_before <= now && now < c.not_after)
        })
    }

    fn renew_kubelet_certificates(&self, now: i64, days: i64) {
        let _ = self.ctx.guests.update_state(&self.uid, |s| {
            for path in [paths::KUBELET_CLIENT_CERT, paths::KUBELET_SERVER_CERT] {
                if let Some(cert) = s.certificates.get_mut(path) {
                    cert.not_before = now;
                    cert.not_after = now + days * 86_400;
                }
            }
        });
    }

    fn file(&self, path: &str) -> Option<Vec<u8>> {
        self.ctx
            .guests
            .state(&self.uid)
            .and_then(|s| s.file(path).map(<[u8]>::to_vec))
    }

    fn state(&self) -> Option<crate::guest::GuestState> {
        self.ctx.guests.state(&self.uid)
    }

    fn update(&self, change: Box<dyn FnOnce(&mut crate::guest::GuestState) + Send>) {
        if let Err(err) = self.ctx.guests.update_state(&self.uid, change) {
            tracing::warn!(vmi = %self.uid, "guest cluster: changing the guest: {err}");
        }
    }

    fn write_files(&self, files: Vec<(String, Vec<u8>, u32)>) {
        let _ = self.ctx.guests.update_state(&self.uid, |s| {
            for (path, content, mode) in files {
                s.files.insert(path, File::root(content, mode));
            }
        });
    }
}
