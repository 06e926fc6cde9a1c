//! Simulated CRC guests: a guest-state model stored inside the VM's disk image and a real SSH
//! server (russh) per running VMI, executing the simple commands `guestcluster::guest` sends.
//!
//! | module | role |
//! |---|---|
//! | [`state`] | the model: users, units, files, certificates, disk sizes, … |
//! | [`disk`] | the model inside `disk.img` (magic + length + JSON at offset 0) |
//! | [`boot`] | firmware: which disk boots (boot order, blank fall-through, live ISO) |
//! | [`ignition`] | the live ISO applying its Ignition config |
//! | [`install`] | bootstrap in place: bootkube's certificate check, the installed system |
//! | [`shell`] | the accepted command-line syntax (no scripts) |
//! | [`exec`] | the pure command interpreter |
//! | [`time`] | guest clock and date formatting |
//! | `sshd` | the SSH server: auth from the state, exec, `direct-tcpip` |
//!
//! [`GuestHost`] is what the simulated KubeVirt drives: boot a VMI's guest, shut it down, learn
//! about guest-initiated power-offs. See `docs/simulation.md`, "Guests".

pub mod boot;
pub mod disk;
pub mod exec;
pub mod ignition;
pub mod install;
pub mod shell;
mod sshd;
pub mod state;
pub mod time;

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use russh::keys::PrivateKey;
use tokio::sync::broadcast;

use self::boot::Boot;
use self::disk::DiskError;
use self::exec::{Effect, Machine, Runtime};
use self::shell::Pipeline;
pub use self::state::GuestState;
use super::Timings;
use guestcluster::guest::keys;

/// The SSH port every guest listens on.
pub const SSH_PORT: u16 = 22;

/// How long a guest going down waits for the simulations' [`StopHook`]s.
const STOP_HOOK_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(60);

/// A change a simulation makes to a guest's state on its way down.
pub type StateChange = Box<dyn FnOnce(&mut GuestState) + Send>;

/// Part of a graceful stop (shutdown, power-off, reboot) that a simulation plays in the guest,
/// like a service systemd stops before the filesystems are synced: called with the VMI UID after
/// sshd stopped, and the change it returns is applied to the state that is then flushed. The
/// guest stays powered on (`is_running`, `update_state` work) until every hook returned, so
/// nothing sees the VM off, or its disk released, before the hooks are done.
pub type StopHook =
    Arc<dyn Fn(&str) -> futures::future::BoxFuture<'static, Option<StateChange>> + Send + Sync>;

/// Part of stopping one unit that a simulation plays, as the unit's own stop would: called with
/// the VMI UID once a command stopped the unit, and its change applied to the state. The guest
/// runs no further command until every such hook returned: on a real node `systemctl stop`
/// returns once the unit is down, so nothing the next command does can come before it.
pub type UnitStopHook = StopHook;

/// How to power on a VMI's guest.
#[derive(Clone, Debug)]
pub struct BootSpec {
    pub vmi_uid: String,
    pub namespace: String,
    pub vm_name: String,
    /// Where sshd listens (the launcher pod's IP).
    pub ip: Ipv4Addr,
    pub disks: Vec<BootDisk>,
    /// KubeVirt `domain.clock` offset: the guest RTC runs this far from host time.
    pub clock_offset_seconds: i64,
}

/// One disk of the VMI.
#[derive(Clone, Debug)]
pub struct BootDisk {
    pub name: String,
    /// The volume's `disk.img`.
    pub image: PathBuf,
    pub boot_order: Option<u32>,
    pub kind: DiskKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DiskKind {
    Disk,
    Cdrom,
}

/// A guest ended on its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestExit {
    pub vmi_uid: String,
    pub reason: ExitReason,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ExitReason {
    /// `poweroff`/`shutdown -h` inside the guest: state flushed, the VM is off.
    PoweredOff,
    /// The guest died (its disk became unwritable, …).
    Crashed(String),
}

/// Things that happen inside guests, for simulations that react to them (the guest cluster).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GuestEvent {
    pub vmi_uid: String,
    pub kind: GuestEventKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestEventKind {
    /// sshd accepts connections.
    Booted,
    UnitStarted(String),
    UnitStopped(String),
    /// In-guest reboot began (sshd is down until the next `Booted`).
    Rebooting,
    /// Powered off (host shutdown or guest power-off) or crashed.
    Stopped,
}

/// Failures of guest lifecycle operations.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("guest of VMI {vmi_uid} is already running")]
    AlreadyRunning { vmi_uid: String },
    #[error("guest of VMI {vmi_uid} has no bootable disk: it hangs in firmware ({notes})")]
    NoBootableDisk { vmi_uid: String, notes: String },
    #[error("guest of VMI {vmi_uid} is not running")]
    NotRunning { vmi_uid: String },
    #[error("guest of VMI {vmi_uid} was shut down while booting")]
    Stopped { vmi_uid: String },
    #[error("guest sshd cannot listen on {addr}: {source} (binding port 22 on 127.x needs root)")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error(transparent)]
    Ignition(#[from] ignition::IgnitionError),
    #[error("guest SSH host key: {0}")]
    HostKey(#[from] keys::KeyError),
}

/// The running guests, by VMI UID.
pub struct GuestHost {
    inner: Arc<Inner>,
}

struct Inner {
    timings: Timings,
    /// NetworkPolicy at the door: who may connect to a guest's sshd (`None`: no pod network).
    ingress: Option<crate::network::ingress::Ingress>,
    /// Whether guests' chronyd reaches NTP (see [`Runtime::ntp_reachable`]).
    ntp_reachable: AtomicBool,
    /// The `kubectl` that plays guests' `oc` (see [`exec::oc`]), once guest APIs are served.
    kubectl: Mutex<Option<std::path::PathBuf>>,
    guests: Mutex<HashMap<String, Arc<Guest>>>,
    ports: Mutex<HashMap<(String, u16), SocketAddr>>,
    exits: broadcast::Sender<GuestExit>,
    events: broadcast::Sender<GuestEvent>,
    stop_hooks: Mutex<Vec<StopHook>>,
    unit_stop_hooks: Mutex<Vec<(String, UnitStopHook)>>,
}

/// One powered-on VMI (survives in-guest reboots).
struct Guest {
    spec: BootSpec,
    os: Mutex<Option<Os>>,
    sshd: Mutex<Option<sshd::Sshd>>,
    /// A host shutdown is under way: the guest is still registered (powered on) until it is
    /// off, but nothing of it boots again and it sends no exit.
    stopping: AtomicBool,
    /// Set once a host shutdown is complete, for a second shutdown to wait on.
    off: tokio::sync::watch::Sender<bool>,
    /// How many [`UnitStopHook`] runs are under way; commands wait for none.
    settling: tokio::sync::watch::Sender<usize>,
}

/// Numbers boots, so a task of an earlier boot (bootkube) never acts on a later one.
static BOOTS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The booted operating system.
struct Os {
    /// This boot's number.
    serial: u64,
    machine: Machine,
    /// The boot disk the state is written through to (`None` under a live ISO).
    persist: Option<PathBuf>,
    /// `/dev/vda` under a live ISO.
    install_target: Option<PathBuf>,
}

/// A disk chosen and an OS ready to run, before sshd listens.
struct Prepared {
    os: Os,
    host_key: PrivateKey,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a guest lock leaves plain data behind; keep serving it.
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

impl GuestHost {
    /// Guests reached from this host alone (no pods, so no NetworkPolicy to enforce).
    pub fn new(timings: Timings) -> Self {
        Self::with_ingress(timings, None)
    }

    /// Guests on the pod network, whose doors `ingress` keeps (NetworkPolicy at their sshd).
    pub fn on_pod_network(timings: Timings, ingress: crate::network::ingress::Ingress) -> Self {
        Self::with_ingress(timings, Some(ingress))
    }

    fn with_ingress(timings: Timings, ingress: Option<crate::network::ingress::Ingress>) -> Self {
        let (exits, _) = broadcast::channel(64);
        let (events, _) = broadcast::channel(1024);
        Self {
            inner: Arc::new(Inner {
                timings,
                ingress,
                // A pod network reaches NTP: chronyd with RHCOS's default pool steps the clock.
                ntp_reachable: AtomicBool::new(true),
                kubectl: Mutex::new(None),
                guests: Mutex::new(HashMap::new()),
                ports: Mutex::new(HashMap::new()),
                exits,
                events,
                stop_hooks: Mutex::new(Vec::new()),
                unit_stop_hooks: Mutex::new(Vec::new()),
            }),
        }
    }

    /// Powers on a VMI's guest and returns once sshd accepts on `spec.ip:22`.
    ///
    /// Fails with [`GuestError::NoBootableDisk`] when no disk boots (the VM would hang in
    /// firmware; the guest is then not running).
    pub async fn boot(&self, spec: BootSpec) -> Result<(), GuestError> {
        let vmi_uid = spec.vmi_uid.clone();
        let guest = Arc::new(Guest {
            spec,
            os: Mutex::new(None),
            sshd: Mutex::new(None),
            stopping: AtomicBool::new(false),
            off: tokio::sync::watch::Sender::new(false),
            settling: tokio::sync::watch::Sender::new(0),
        });
        {
            let mut guests = lock(&self.inner.guests);
            if guests.contains_key(&vmi_uid) {
                return Err(GuestError::AlreadyRunning { vmi_uid });
            }
            guests.insert(vmi_uid.clone(), guest.clone());
        }
        let result = self.inner.clone().boot_os(&guest).await;
        // A shutdown under way unregisters the guest itself, once it is off.
        if result.is_err() && !guest.stopping.load(Ordering::SeqCst) {
            self.inner.forget(&guest);
        }
        result
    }

    /// Graceful (ACPI) shutdown: sshd stops, the [`StopHook`]s run, the state is flushed to the
    /// boot disk, and after `Timings::shutdown` the VM is off and no longer `is_running`.
    /// No-op if not running; a shutdown already under way is waited for. Emits no [`GuestExit`].
    pub async fn shutdown(&self, vmi_uid: &str) {
        let Some(guest) = self.inner.guest(vmi_uid) else {
            return;
        };
        let mut off = guest.off.subscribe();
        if guest.stopping.swap(true, Ordering::SeqCst) {
            // Its caller (the launcher pod's deletion, the VMI's) may only go on once it is off.
            let _ = off.wait_for(|off| *off).await;
            return;
        }
        self.inner.clear_ports(vmi_uid);
        if let Err(err) = self.inner.stop_os(&guest).await {
            tracing::warn!(
                vmi_uid,
                "simulated guest: flushing state at shutdown: {err}"
            );
        }
        tokio::time::sleep(self.inner.timings.shutdown).await;
        self.inner.forget(&guest);
        if lock(&guest.os).is_some() {
            tracing::warn!(
                vmi_uid,
                "simulated guest: its OS came up again during the host's shutdown and goes without a flush"
            );
        }
        self.inner.event(vmi_uid, GuestEventKind::Stopped);
        guest.off.send_replace(true);
    }

    /// Adds a part a simulation plays in every graceful stop of every guest (see [`StopHook`]).
    pub fn add_stop_hook(&self, hook: StopHook) {
        lock(&self.inner.stop_hooks).push(hook);
    }

    /// Adds a part a simulation plays whenever a command stops `unit` (see [`UnitStopHook`]).
    pub fn add_unit_stop_hook(&self, unit: &str, hook: UnitStopHook) {
        lock(&self.inner.unit_stop_hooks).push((unit.to_owned(), hook));
    }

    /// Reboots a running guest as `systemctl reboot` inside it would (a simulated install
    /// finishing, a MachineConfig rollout): sshd goes down, the state is flushed, and the
    /// firmware picks a boot disk again. Returns at once; watch [`Self::subscribe_events`].
    pub fn reboot(&self, vmi_uid: &str) -> Result<(), GuestError> {
        let guest = self
            .inner
            .guest(vmi_uid)
            .ok_or_else(|| GuestError::NotRunning {
                vmi_uid: vmi_uid.to_string(),
            })?;
        tokio::spawn(self.inner.clone().reboot(guest));
        Ok(())
    }

    /// Whether guests booted from now on reach NTP servers (chronyd then steps their clocks to
    /// host time, undoing a VM clock offset). On by default, as on a pod network with egress.
    pub fn set_ntp_reachable(&self, reachable: bool) {
        self.inner.ntp_reachable.store(reachable, Ordering::Relaxed);
    }

    /// The `kubectl` binary that plays the `oc` of guests booted from now on (see
    /// [`exec::oc`]); set when guest APIs are served.
    pub fn set_kubectl(&self, kubectl: PathBuf) {
        *lock(&self.inner.kubectl) = Some(kubectl);
    }

    /// Guest-initiated power-offs and crashes.
    pub fn subscribe_exits(&self) -> broadcast::Receiver<GuestExit> {
        self.inner.exits.subscribe()
    }

    /// Boots, unit changes, reboots and stops of every guest.
    pub fn subscribe_events(&self) -> broadcast::Receiver<GuestEvent> {
        self.inner.events.subscribe()
    }

    /// Powered on (booting, running, rebooting, or hung after a reboot).
    /// The address the guest's VMI has (its launcher pod's IP).
    pub fn address(&self, vmi_uid: &str) -> Option<std::net::Ipv4Addr> {
        self.inner.guest(vmi_uid).map(|g| g.spec.ip)
    }

    /// The disk the running OS writes its state to (`None` under a live ISO or when stopped).
    pub fn boot_disk(&self, vmi_uid: &str) -> Option<PathBuf> {
        let guest = self.inner.guest(vmi_uid)?;
        let os = lock(&guest.os);
        os.as_ref().and_then(|os| os.persist.clone())
    }

    pub fn is_running(&self, vmi_uid: &str) -> bool {
        lock(&self.inner.guests).contains_key(vmi_uid)
    }

    /// Shuts every guest down (concurrently).
    pub async fn shutdown_all(&self) {
        let uids: Vec<String> = lock(&self.inner.guests).keys().cloned().collect();
        futures::future::join_all(uids.iter().map(|uid| self.shutdown(uid))).await;
    }

    /// Makes `port` on the guest's own addresses reach `target` (a simulated service running
    /// "inside" the guest, e.g. the API server on 6443) for `direct-tcpip` tunnels. Cleared when
    /// the guest stops or reboots.
    pub fn register_port(&self, vmi_uid: &str, port: u16, target: SocketAddr) {
        lock(&self.inner.ports).insert((vmi_uid.to_string(), port), target);
    }

    pub fn unregister_port(&self, vmi_uid: &str, port: u16) {
        lock(&self.inner.ports).remove(&(vmi_uid.to_string(), port));
    }

    /// A copy of the running guest's state.
    pub fn state(&self, vmi_uid: &str) -> Option<GuestState> {
        let guest = self.inner.guest(vmi_uid)?;
        let os = lock(&guest.os);
        os.as_ref().map(|os| os.machine.state.clone())
    }

    /// Changes the running guest's state as a process inside it would (written through to the
    /// boot disk), e.g. a simulated cluster rotating certificates.
    pub fn update_state<R>(
        &self,
        vmi_uid: &str,
        change: impl FnOnce(&mut GuestState) -> R,
    ) -> Result<R, GuestError> {
        let not_running = || GuestError::NotRunning {
            vmi_uid: vmi_uid.to_string(),
        };
        let guest = self.inner.guest(vmi_uid).ok_or_else(not_running)?;
        let mut os = lock(&guest.os);
        let os = os.as_mut().ok_or_else(not_running)?;
        let result = change(&mut os.machine.state);
        if let Some(path) = &os.persist {
            disk::write_state(path, &os.machine.state)?;
        }
        Ok(result)
    }

    /// The guest's wall clock (unix seconds).
    pub fn guest_time(&self, vmi_uid: &str) -> Option<i64> {
        let guest = self.inner.guest(vmi_uid)?;
        let os = lock(&guest.os);
        os.as_ref()
            .map(|os| os.machine.guest_time(time::host_now()).0)
    }

    /// Under a live ISO: the disk image that is `/dev/vda` (the install target).
    pub fn install_target(&self, vmi_uid: &str) -> Option<PathBuf> {
        let guest = self.inner.guest(vmi_uid)?;
        let os = lock(&guest.os);
        os.as_ref().and_then(|os| os.install_target.clone())
    }
}

impl Inner {
    fn guest(&self, vmi_uid: &str) -> Option<Arc<Guest>> {
        lock(&self.guests).get(vmi_uid).cloned()
    }

    /// Still the registered guest of its VMI, and not being shut down.
    fn is_current(&self, guest: &Arc<Guest>) -> bool {
        !guest.stopping.load(Ordering::SeqCst)
            && lock(&self.guests)
                .get(&guest.spec.vmi_uid)
                .is_some_and(|g| Arc::ptr_eq(g, guest))
    }

    /// Unregisters the guest if it is still the current one; tells whether it was.
    fn forget(&self, guest: &Arc<Guest>) -> bool {
        let mut guests = lock(&self.guests);
        let current = guests
            .get(&guest.spec.vmi_uid)
            .is_some_and(|g| Arc::ptr_eq(g, guest));
        if current {
            guests.remove(&guest.spec.vmi_uid);
        }
        current
    }

    /// Unregisters the guest (if still current) and announces its exit in one step: whoever
    /// sees `is_running` turn false can already receive the exit. A guest the host is shutting
    /// down is left to that shutdown, which sends no exit.
    fn forget_with_exit(&self, guest: &Arc<Guest>, reason: ExitReason) -> bool {
        let mut guests = lock(&self.guests);
        let current = !guest.stopping.load(Ordering::SeqCst)
            && guests
                .get(&guest.spec.vmi_uid)
                .is_some_and(|g| Arc::ptr_eq(g, guest));
        if current {
            guests.remove(&guest.spec.vmi_uid);
            let vmi_uid = guest.spec.vmi_uid.clone();
            self.event(&vmi_uid, GuestEventKind::Stopped);
            // No subscriber is fine.
            let _ = self.exits.send(GuestExit { vmi_uid, reason });
        }
        current
    }

    fn clear_ports(&self, vmi_uid: &str) {
        lock(&self.ports).retain(|(uid, _), _| uid != vmi_uid);
    }

    fn event(&self, vmi_uid: &str, kind: GuestEventKind) {
        // No subscriber is fine.
        let _ = self.events.send(GuestEvent {
            vmi_uid: vmi_uid.to_string(),
            kind,
        });
    }

    /// Firmware, boot time, then sshd.
    async fn boot_os(self: Arc<Self>, guest: &Arc<Guest>) -> Result<(), GuestError> {
        let kubectl = lock(&self.kubectl).clone();
        let prepared = firmware(
            &guest.spec,
            self.ntp_reachable.load(Ordering::Relaxed),
            kubectl,
        )?;
        tokio::time::sleep(self.timings.boot).await;
        if !self.is_current(guest) {
            return Err(GuestError::Stopped {
                vmi_uid: guest.spec.vmi_uid.clone(),
            });
        }
        self.launch(guest, prepared).await
    }

    async fn launch(
        self: Arc<Self>,
        guest: &Arc<Guest>,
        prepared: Prepared,
    ) -> Result<(), GuestError> {
        let addr = SocketAddr::new(guest.spec.ip.into(), SSH_PORT);
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|source| GuestError::Bind { addr, source })?;
        let bootstrap = install::is_bootstrap_in_place(&prepared.os.machine.state)
            .then_some(prepared.os.serial);
        // A host shutdown that began while the listener was bound has taken no OS to flush:
        // this one must not come up behind it (it would go without a flush, as if killed).
        if !self.is_current(guest) {
            return Err(GuestError::Stopped {
                vmi_uid: guest.spec.vmi_uid.clone(),
            });
        }
        *lock(&guest.os) = Some(prepared.os);
        let server = sshd::start(listener, prepared.host_key, guest.clone(), self.clone());
        *lock(&guest.sshd) = Some(server);
        tracing::info!(
            vmi_uid = %guest.spec.vmi_uid,
            vm = %format!("{}/{}", guest.spec.namespace, guest.spec.vm_name),
            %addr,
            "simulated guest booted"
        );
        self.event(&guest.spec.vmi_uid, GuestEventKind::Booted);
        if let Some(serial) = bootstrap {
            tokio::spawn(self.clone().bootstrap_in_place(guest.clone(), serial));
        }
        Ok(())
    }

    /// A bootstrap-in-place live boot: after `Timings::bootkube`, bootkube checks the Ignition's
    /// certificates by guest time (a failure stays visible: unit failed, journal, blank disk);
    /// then the installation disk is marked incomplete, after `Timings::install` the installed
    /// system is written to it, and the guest reboots into it within the same VMI (the clock
    /// offset carries over).
    async fn bootstrap_in_place(self: Arc<Self>, guest: Arc<Guest>, serial: u64) {
        let vmi_uid = guest.spec.vmi_uid.clone();
        tokio::time::sleep(self.timings.bootkube).await;
        let target = {
            let mut os = lock(&guest.os);
            let Some(os) = os.as_mut().filter(|os| os.serial == serial) else {
                return;
            };
            let now = os.machine.guest_time(time::host_now()).0;
            let target = os.install_target.clone();
            match install::bootkube(&mut os.machine, now, target.is_some()) {
                Ok(()) => target,
                Err(reason) => {
                    tracing::warn!(vmi_uid = %vmi_uid, "simulated bootstrap in place failed: {reason}");
                    return;
                }
            }
        };
        let Some(target) = target else { return };
        if let Err(err) = disk::write_state_synced(&target, &install::in_progress()) {
            self.crash(&guest, format!("writing the installation disk: {err}"));
            return;
        }
        tracing::info!(vmi_uid = %vmi_uid, disk = %target.display(), "simulated bootstrap in place: installing");
        tokio::time::sleep(self.timings.install).await;
        let installed = {
            let os = lock(&guest.os);
            let Some(os) = os.as_ref().filter(|os| os.serial == serial) else {
                return;
            };
            let now = os.machine.guest_time(time::host_now()).0;
            install::installed_state(&os.machine.state, now, os.machine.runtime.disk_bytes)
        };
        let installed = match installed {
            Ok(state) => state,
            Err(err) => {
                tracing::warn!(vmi_uid = %vmi_uid, "simulated bootstrap in place failed: {err}");
                return;
            }
        };
        if let Err(err) = disk::write_state_synced(&target, &installed) {
            self.crash(&guest, format!("writing the installation disk: {err}"));
            return;
        }
        if !self.is_current(&guest) {
            return;
        }
        tracing::info!(vmi_uid = %vmi_uid, "simulated bootstrap in place: installed, rebooting");
        self.reboot_boxed(guest).await;
    }

    /// [`Self::reboot`] behind a named type: a boot can start a bootstrap that reboots, and
    /// the compiler needs the cycle broken to see that these futures are `Send`.
    fn reboot_boxed(
        self: Arc<Self>,
        guest: Arc<Guest>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
        Box::pin(self.reboot(guest))
    }

    /// Stops sshd (dropping every session and tunnel), runs the [`StopHook`]s, and flushes the
    /// state with their changes to the boot disk.
    async fn stop_os(&self, guest: &Guest) -> Result<(), DiskError> {
        let server = lock(&guest.sshd).take();
        if let Some(server) = server {
            server.stop().await;
        }
        let changes = self.run_stop_hooks(&guest.spec.vmi_uid).await;
        let os = lock(&guest.os).take();
        match os {
            Some(Os {
                mut machine,
                persist: Some(path),
                ..
            }) => {
                for change in changes {
                    change(&mut machine.state);
                }
                machine.shut_down();
                disk::write_state_synced(&path, &machine.state)
            }
            _ => Ok(()),
        }
    }

    async fn run_stop_hooks(&self, vmi_uid: &str) -> Vec<StateChange> {
        let hooks: Vec<StopHook> = lock(&self.stop_hooks).clone();
        let mut changes = Vec::new();
        for hook in hooks {
            match tokio::time::timeout(STOP_HOOK_TIMEOUT, hook(vmi_uid)).await {
                Ok(Some(change)) => changes.push(change),
                Ok(None) => {}
                // A hung simulation must not keep the VM from going down.
                Err(_) => tracing::warn!(
                    vmi_uid,
                    "simulated guest: a stop hook did not finish within {STOP_HOOK_TIMEOUT:?}; going down without it"
                ),
            }
        }
        changes
    }

    /// Runs a command for the SSH server; `None` when the OS is going down.
    fn exec(
        &self,
        guest: &Guest,
        user: &str,
        pipeline: &Pipeline,
        stdin: &[u8],
    ) -> Option<Result<exec::Output, DiskError>> {
        let mut os = lock(&guest.os);
        let os = os.as_mut()?;
        let now = os.machine.guest_time(time::host_now());
        let output = exec::exec_pipeline(&mut os.machine, now, user, pipeline, stdin);
        let vmi_uid = &guest.spec.vmi_uid;
        for program in &output.unknown_commands {
            tracing::warn!(
                vmi_uid = %vmi_uid,
                program = %program,
                "simulated guest: unknown command (exit 127): {}",
                programs(pipeline)
            );
        }
        tracing::debug!(vmi_uid = %vmi_uid, code = output.code, "guest ran `{}`", programs(pipeline));
        if output.changed
            && let Some(path) = &os.persist
            && let Err(err) = disk::write_state(path, &os.machine.state)
        {
            return Some(Err(err));
        }
        Some(Ok(output))
    }

    /// Before a command's exit status goes out: the [`UnitStopHook`]s of the units it stopped
    /// start, and the guest's next command waits for them.
    fn stop_units(self: &Arc<Self>, guest: &Arc<Guest>, effects: &[Effect]) {
        for effect in effects {
            let Effect::UnitStopped(unit) = effect else {
                continue;
            };
            let hooks: Vec<UnitStopHook> = lock(&self.unit_stop_hooks)
                .iter()
                .filter(|(u, _)| u == unit)
                .map(|(_, hook)| hook.clone())
                .collect();
            if hooks.is_empty() {
                continue;
            }
            guest.settling.send_modify(|n| *n += 1);
            let (inner, guest) = (self.clone(), guest.clone());
            tokio::spawn(async move {
                let uid = guest.spec.vmi_uid.clone();
                for hook in hooks {
                    match tokio::time::timeout(STOP_HOOK_TIMEOUT, hook(&uid)).await {
                        Ok(Some(change)) => inner.apply(&guest, change),
                        Ok(None) => {}
                        Err(_) => tracing::warn!(
                            vmi_uid = %uid,
                            "simulated guest: a unit stop hook did not finish within {STOP_HOOK_TIMEOUT:?}"
                        ),
                    }
                }
                guest.settling.send_modify(|n| *n -= 1);
            });
        }
    }

    /// Applies a change to a running guest's state and writes it to its disk.
    fn apply(&self, guest: &Arc<Guest>, change: StateChange) {
        let mut os = lock(&guest.os);
        let Some(os) = os.as_mut() else {
            return;
        };
        change(&mut os.machine.state);
        if let Some(path) = &os.persist
            && let Err(err) = disk::write_state(path, &os.machine.state)
        {
            tracing::warn!(vmi_uid = %guest.spec.vmi_uid, "simulated guest: writing its state: {err}");
        }
    }

    /// After a command: unit events, power effects.
    fn after_command(self: &Arc<Self>, guest: &Arc<Guest>, effects: Vec<Effect>) {
        let vmi_uid = &guest.spec.vmi_uid;
        for effect in effects {
            match effect {
                Effect::UnitStarted(unit) => self.event(vmi_uid, GuestEventKind::UnitStarted(unit)),
                Effect::UnitStopped(unit) => self.event(vmi_uid, GuestEventKind::UnitStopped(unit)),
                Effect::PowerOff => {
                    tokio::spawn(self.clone().power_off(guest.clone()));
                }
                Effect::Reboot => {
                    tokio::spawn(self.clone().reboot(guest.clone()));
                }
            }
        }
    }

    /// `poweroff` inside the guest: sshd stops and the state is flushed at once; after
    /// `Timings::shutdown` the VM is off and a [`GuestExit`] is sent.
    async fn power_off(self: Arc<Self>, guest: Arc<Guest>) {
        let vmi_uid = guest.spec.vmi_uid.clone();
        // Services in the guest are unreachable from the moment it goes down.
        self.clear_ports(&vmi_uid);
        let reason = match self.stop_os(&guest).await {
            Ok(()) => ExitReason::PoweredOff,
            Err(err) => ExitReason::Crashed(format!("flushing state at power-off: {err}")),
        };
        tokio::time::sleep(self.timings.shutdown).await;
        tracing::info!(vmi_uid = %vmi_uid, "simulated guest powered off: {reason:?}");
        // False when the host shut it down meanwhile: no exit then.
        self.forget_with_exit(&guest, reason);
    }

    /// `reboot` inside the guest: down, then the firmware picks a disk again.
    async fn reboot(self: Arc<Self>, guest: Arc<Guest>) {
        let vmi_uid = guest.spec.vmi_uid.clone();
        self.clear_ports(&vmi_uid);
        if let Err(err) = self.stop_os(&guest).await {
            self.crash(&guest, format!("flushing state at reboot: {err}"));
            return;
        }
        self.event(&vmi_uid, GuestEventKind::Rebooting);
        tokio::time::sleep(self.timings.shutdown).await;
        if !self.is_current(&guest) {
            return;
        }
        match self.clone().boot_os(&guest).await {
            Ok(()) => {}
            Err(GuestError::Stopped { .. }) => {}
            Err(GuestError::NoBootableDisk { notes, .. }) => {
                tracing::warn!(vmi_uid = %vmi_uid, "simulated guest hangs in firmware after reboot: {notes}");
            }
            Err(err) => self.crash(&guest, format!("reboot: {err}")),
        }
    }

    /// The guest died: no flush.
    fn crash(&self, guest: &Arc<Guest>, message: String) {
        let server = lock(&guest.sshd).take();
        if let Some(server) = server {
            tokio::spawn(server.stop());
        }
        lock(&guest.os).take();
        let vmi_uid = guest.spec.vmi_uid.clone();
        tracing::warn!(vmi_uid = %vmi_uid, "simulated guest crashed: {message}");
        if self.forget_with_exit(guest, ExitReason::Crashed(message)) {
            self.clear_ports(&vmi_uid);
        }
    }

    /// Where a `direct-tcpip` tunnel to `host:port` lands: the guest resolves `host`; only its
    /// own addresses lead anywhere (a registered port).
    fn tunnel_target(&self, guest: &Guest, host: &str, port: u32) -> Option<SocketAddr> {
        let port = u16::try_from(port).ok()?;
        let address = {
            let os = lock(&guest.os);
            let machine = &os.as_ref()?.machine;
            let address = exec::net::resolve(machine, host)?;
            machine
                .local_addresses()
                .contains(&address)
                .then_some(address)?
        };
        let target = lock(&self.ports)
            .get(&(guest.spec.vmi_uid.clone(), port))
            .copied();
        tracing::debug!(vmi_uid = %guest.spec.vmi_uid, %host, %address, port, ?target, "guest tunnel");
        target
    }
}

/// Program names of a pipeline, for logs (arguments may carry file contents).
fn programs(pipeline: &Pipeline) -> String {
    pipeline
        .stages
        .iter()
        .map(|s| {
            let sudo = if s.sudo { "sudo " } else { "" };
            format!("{sudo}{}", s.argv[0])
        })
        .collect::<Vec<_>>()
        .join(" | ")
}

/// Picks the boot disk and prepares the OS on it (host key on first boot, boot-time resets).
fn firmware(
    spec: &BootSpec,
    ntp_reachable: bool,
    kubectl: Option<std::path::PathBuf>,
) -> Result<Prepared, GuestError> {
    let (choice, notes) = boot::choose(&spec.disks);
    for note in &notes {
        tracing::debug!(vmi_uid = %spec.vmi_uid, "firmware: {note}");
    }
    let Some(choice) = choice else {
        return Err(GuestError::NoBootableDisk {
            vmi_uid: spec.vmi_uid.clone(),
            notes: notes.join("; "),
        });
    };
    let (mut state, persist, install_target, disk_bytes, live) = match choice {
        Boot::Disk {
            path,
            state,
            disk_bytes,
        } => (state, Some(path), None, disk_bytes, false),
        Boot::Live {
            state,
            install_target,
            disk_bytes,
            ..
        } => {
            let (live, warnings) = GuestState::live_environment(&state)?;
            for warning in warnings {
                tracing::warn!(vmi_uid = %spec.vmi_uid, "live ISO ignition: {warning}");
            }
            (live, None, install_target, disk_bytes, true)
        }
    };
    let host_key = match &state.ssh_host_key {
        Some(text) => keys::parse_private_key(text)?,
        None => {
            let key = keys::generate_ed25519()?;
            state.ssh_host_key = Some(keys::to_openssh(&key)?);
            key
        }
    };
    let mut runtime = Runtime::new(disk_bytes, spec.clock_offset_seconds, live);
    runtime.ntp_reachable = ntp_reachable;
    runtime.oc = kubectl.map(|kubectl| exec::oc::OcBackend {
        kubectl,
        api: SocketAddr::new(spec.ip.into(), exec::oc::API_PORT),
    });
    let machine = Machine::power_on(state, runtime);
    if let Some(path) = &persist {
        disk::write_state(path, &machine.state)?;
    }
    Ok(Prepared {
        os: Os {
            serial: BOOTS.fetch_add(1, Ordering::Relaxed),
            machine,
            persist,
            install_target,
        },
        host_key,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guest_host_is_shareable_between_controllers() {
        fn check<T: Send + Sync>() {}
        check::<GuestHost>();
    }

    #[test]
    fn programs_hide_arguments() {
        let pipeline = shell::parse("echo c2VjcmV0 | base64 -d | sudo tee /x").unwrap();
        assert_eq!(programs(&pipeline), "echo | base64 | sudo tee");
    }
}
