//! Runs a guest cluster for every simulated guest whose kubelet runs: started when the kubelet
//! starts (as static pods would start the API server), stopped when it stops or the guest goes
//! down. The API server listens on the guest's address at 6443 and is registered as the guest's
//! port 6443, so both an SSH `direct-tcpip` tunnel to `api.crc.testing:6443` and the management
//! cluster's Service/Route reach it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};

use sha2::{Digest as _, Sha256};
use tokio::sync::broadcast::error::RecvError;

use super::cluster::{ClusterSpec, GuestCluster, GuestView};
use crate::guest::state::{File, paths};
use crate::guest::{GuestEvent, GuestEventKind};
use crate::{Error, SimContext};
use testenv::ApiServerLauncher;

const KUBELET: &str = "kubelet.service";
/// The guest API port.
pub const API_PORT: u16 = 6443;

/// A guest's cluster: being started (a boot with the kubelet enabled and the agent's
/// `systemctl start kubelet` both ask, and two API servers must never race for one address),
/// or running.
enum Entry {
    /// Being started by the start with this number.
    Starting(u64),
    Running(Box<GuestCluster>),
}

/// Numbers starts, so a start finishing late never takes the place of a newer one.
static STARTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

type Clusters = Arc<Mutex<HashMap<String, Entry>>>;

/// The controller: reacts to guest events until the simulation stops.
pub async fn run(ctx: Arc<SimContext>, launcher: ApiServerLauncher) -> Result<(), Error> {
    let mut events = ctx.guests.subscribe_events();
    let clusters: Clusters = Arc::default();
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
        GuestEventKind::UnitStopped(unit) if unit == KUBELET => stop(ctx, clusters, &uid),
        GuestEventKind::Rebooting | GuestEventKind::Stopped => stop(ctx, clusters, &uid),
        _ => {}
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
        let mut clusters = lock(clusters);
        if clusters.contains_key(&uid) {
            return;
        }
        let start = STARTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        clusters.insert(uid.clone(), Entry::Starting(start));
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
    };
    let (ctx, launcher, clusters) = (ctx.clone(), launcher.clone(), clusters.clone());
    tokio::spawn(async move {
        let view = Arc::new(View {
            ctx: ctx.clone(),
            uid: uid.clone(),
        });
        match GuestCluster::start(&launcher, spec, view).await {
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

fn stop(ctx: &SimContext, clusters: &Clusters, uid: &str) {
    // A cluster still starting sees its entry gone when it is up, and stops itself.
    let removed = lock(clusters).remove(uid);
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
