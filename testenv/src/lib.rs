//! An embedded Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager) for
//! integration tests, `make demo` and `make dev-up` (`guestcluster-sim dev up`).
//!
//! It is a real apiserver with RBAC, admission and the controllers that matter to an operator
//! (garbage collection, namespace deletion, Jobs, ServiceAccounts), but no scheduler or kubelet:
//! pods stay `Pending`. Our CRDs and those of the external kinds we touch (KubeVirt, CDI,
//! OpenShift, HCO; generated from the upstream API types by `tools/external-crds`, so unknown
//! fields are pruned and schemas enforced) are installed before [`ControlPlane::start`] returns.
//! [`ControlPlane::kubevirt`] installs KubeVirt's own control plane on it (upstream virt-api and
//! virt-controller, from virt-operator's install strategy), [`ControlPlane::cdi`] CDI's API
//! server and [`ControlPlane::cdi_controller`] its controller (upstream cdi-apiserver and
//! cdi-controller, as cdi-operator installs them), each once, on first use.
//!
//! Tests share one control plane per test binary through [`ControlPlane::shared`] and isolate
//! themselves by namespace and object name:
//!
//! ```no_run
//! # async fn example() -> Result<(), testenv::Error> {
//! let cp = testenv::ControlPlane::shared().await?;
//! let client = cp.client()?;
//! # Ok(()) }
//! ```
//!
//! The binaries come from `tools/controlplane/build.sh` (`make controlplane`), or from
//! `$GUESTCLUSTER_CONTROLPLANE_BIN`; KubeVirt's from `tools/kubevirt/build.sh` (`make kubevirt`),
//! or from `$GUESTCLUSTER_KUBEVIRT_BIN`; CDI's from `tools/cdi/build.sh` (`make cdi`), or from
//! `$GUESTCLUSTER_CDI_BIN`.

mod binaries;
mod cdi;
mod certs;
mod components;
mod crds;
mod extra_apiserver;
mod fsutil;
mod in_pod;
mod kubeconfig;
mod kubevirt;
pub mod ports;
mod process;
mod statedir;

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};

pub use binaries::BIN_DIR_ENV;
pub use cdi::{CDI_VERSION, CdiController, CdiInstall};
pub use crds::FIELD_MANAGER;
pub use extra_apiserver::{ApiServerLauncher, ExtraApiServer, ExtraApiServerSpec};
pub use kubeconfig::CONTEXT;
pub use kubevirt::{KUBEVIRT_NAME, KUBEVIRT_NAMESPACE, KUBEVIRT_VERSION, KubeVirtInstall};

use components::Ports;
use process::ManagedProcess;
use statedir::StateDir;

/// How long a component gets to exit after SIGTERM before it is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// Pause between readiness probes.
const POLL_INTERVAL: Duration = Duration::from_millis(100);
/// Upper bound on one readiness probe, so a hung connection cannot eat the whole deadline.
const PROBE_TIMEOUT: Duration = Duration::from_secs(5);
/// Starts that failed because another process took one of our ports are retried this often.
const START_ATTEMPTS: u32 = 3;
/// Lines of a component log quoted in errors.
const LOG_TAIL_LINES: usize = 30;

/// Errors of the test control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{what} binaries are unavailable: {reason}\n\
         Build them with `make {make_target}` (runs {script}; needs Go), or set {env} to a \
         directory holding {required}"
    )]
    BinariesMissing {
        what: &'static str,
        reason: String,
        make_target: &'static str,
        script: &'static str,
        env: &'static str,
        required: String,
    },

    #[error("cannot determine the cache directory: set GUESTCLUSTER_CACHE, XDG_CACHE_HOME or HOME")]
    NoCacheDir,

    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("state directory {path} is in use by running process {pid}")]
    StateDirInUse { path: PathBuf, pid: i32 },

    #[error(
        "state directory {path} is not empty and was not created by the test control plane; \
         refusing to use it (it is deleted on shutdown)"
    )]
    StateDirForeign { path: PathBuf },

    #[error("generating certificates: {0}")]
    Certificates(#[from] rcgen::Error),

    #[error("no free loopback port: {0}")]
    NoFreePort(#[source] io::Error),

    #[error("cannot start {name} ({program}): {source}")]
    Spawn {
        name: &'static str,
        program: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{name} exited ({status}); last lines of {log}:\n{tail}")]
    Exited {
        name: &'static str,
        status: String,
        log: PathBuf,
        tail: String,
    },

    #[error(
        "{name} was not ready after {waited:?} (last check: {last_check}); last lines of {log}:\n{tail}"
    )]
    NotReady {
        name: &'static str,
        waited: Duration,
        last_check: String,
        log: PathBuf,
        tail: String,
    },

    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        #[source]
        source: kube::config::KubeconfigError,
    },

    #[error("serializing the kubeconfig: {0}")]
    KubeconfigSerialize(String),

    #[error("building a Kubernetes client: {0}")]
    Client(#[source] Box<kube::Error>),

    #[error("CRD file {path}: {reason}")]
    CrdFile { path: PathBuf, reason: String },

    #[error("applying CRD {name}: {source}")]
    ApplyCrd {
        name: String,
        #[source]
        source: Box<kube::Error>,
    },

    #[error("CRD {name}: {detail}")]
    CrdNotEstablished { name: String, detail: String },

    #[error("the shared test control plane failed to start: {0}")]
    SharedStartFailed(String),

    #[error("waiting for a stop signal: {0}")]
    Signal(#[source] io::Error),

    #[error("stopping the control plane: {0}")]
    Shutdown(String),

    #[error("KubeVirt's control plane: {0}")]
    KubeVirt(String),

    #[error("CDI: {0}")]
    Cdi(String),
}

impl Error {
    /// Whether a component lost the race for a port we picked (then the start is retried).
    fn is_port_conflict(&self) -> bool {
        matches!(self, Error::Exited { tail, .. } if tail.contains("address already in use"))
    }
}

/// How to start a control plane. `Options::default()` is what tests want.
#[derive(Debug, Clone)]
pub struct Options {
    /// Project root; `tools/controlplane/build.sh` is looked up under it.
    pub project_dir: PathBuf,
    /// Every `*.yaml` here is applied as CRDs. A missing directory installs only the external
    /// CRDs.
    pub crd_dir: PathBuf,
    /// Fixed state directory: created if missing, reused if it is a stale state directory,
    /// refused if it holds anything else. `None`: a fresh directory under `<cache>/runs/`.
    pub state_dir: Option<PathBuf>,
    /// Directory with the binaries; `None`: `$GUESTCLUSTER_CONTROLPLANE_BIN` or the build script.
    pub bin_dir: Option<PathBuf>,
    /// Start kube-controller-manager (garbage collection, namespaces, Jobs, ServiceAccounts).
    pub controller_manager: bool,
    /// Deadline for each readiness wait (etcd, kube-apiserver, CRDs, controller manager).
    pub startup_timeout: Duration,
}

/// The repository root this crate was built in (it holds `crds/`, `samples/` and `tools/`): the
/// workspace directory above this member crate.
pub fn project_dir() -> PathBuf {
    let manifest_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().unwrap_or(manifest_dir).to_path_buf()
}

impl Default for Options {
    fn default() -> Self {
        let project_dir = project_dir();
        Self {
            crd_dir: project_dir.join("crds"),
            project_dir,
            state_dir: None,
            bin_dir: None,
            controller_manager: true,
            // Generous because a cold apiserver on a loaded two-core CI machine is slow, and a
            // spurious timeout costs more than a slow failure.
            startup_timeout: Duration::from_secs(120),
        }
    }
}

/// How long each startup phase took, measured from the spawn of its first process.
#[derive(Debug, Clone, Copy, Default)]
pub struct StartupTimes {
    /// etcd spawn until its client port accepts connections.
    pub etcd: Duration,
    /// kube-apiserver spawn until `/readyz` answers `ok`.
    pub apiserver: Duration,
    /// Applying all CRDs until every one is `Established`.
    pub crds: Duration,
    /// kube-controller-manager spawn until it created the `default` ServiceAccount.
    pub controller_manager: Duration,
    /// The whole of [`ControlPlane::start`], including locating binaries.
    pub total: Duration,
}

/// A running control plane. Dropping it (or [`ControlPlane::shutdown`]) stops the processes
/// and deletes the state directory; prefer `shutdown` in async code, since the drop blocks the
/// thread for the components' graceful exit (about a second for kube-apiserver).
#[derive(Debug)]
pub struct ControlPlane {
    state: StateDir,
    bin_dir: PathBuf,
    server_url: String,
    kubeconfig: PathBuf,
    ca_pem: String,
    config: kube::Config,
    times: StartupTimes,
    launcher: ApiServerLauncher,
    /// In start order; stopped in reverse so no component outlives what it depends on.
    processes: Mutex<Vec<ManagedProcess>>,
    /// KubeVirt's control plane, installed on first use ([`ControlPlane::kubevirt`]).
    kubevirt: tokio::sync::OnceCell<Result<KubeVirtInstall, String>>,
    /// CDI's API server, installed on first use ([`ControlPlane::cdi`]).
    cdi: tokio::sync::OnceCell<Result<CdiInstall, String>>,
    /// CDI's controller, installed on first use ([`ControlPlane::cdi_controller`]).
    cdi_controller: tokio::sync::OnceCell<Result<CdiController, String>>,
}

/// What one successful boot produced, before it is owned by a [`ControlPlane`].
struct Booted {
    launcher: ApiServerLauncher,
    server_url: String,
    kubeconfig: PathBuf,
    ca_pem: String,
    config: kube::Config,
    times: StartupTimes,
    processes: Vec<ManagedProcess>,
}

impl ControlPlane {
    /// Starts etcd, kube-apiserver and (unless disabled) kube-controller-manager, installs the
    /// CRDs and returns once everything is ready.
    ///
    /// On failure the state directory is kept for its logs (the error names the log file); a
    /// later start removes it once this process is gone.
    pub async fn start(opts: Options) -> Result<Self, Error> {
        let started = Instant::now();
        let bin_dir = binaries::locate(opts.bin_dir.as_deref(), &opts.project_dir).await?;
        // Parsed before anything is spawned so a broken CRD file fails fast.
        let crds = crds::load(&opts.crd_dir)?;
        let state = match &opts.state_dir {
            Some(dir) => StateDir::fixed(dir)?,
            None => StateDir::fresh(&statedir::cache_root()?.join("runs"))?,
        };
        let booted = boot_with_retries(&opts, &bin_dir, &state, &crds).await?;
        let times = StartupTimes {
            total: started.elapsed(),
            ..booted.times
        };
        tracing::info!(server = %booted.server_url, state = %state.path().display(), ?times, "control plane ready");
        Ok(Self {
            state,
            bin_dir,
            server_url: booted.server_url,
            kubeconfig: booted.kubeconfig,
            ca_pem: booted.ca_pem,
            config: booted.config,
            times,
            launcher: booted.launcher,
            processes: Mutex::new(booted.processes),
            kubevirt: tokio::sync::OnceCell::new(),
            cdi: tokio::sync::OnceCell::new(),
            cdi_controller: tokio::sync::OnceCell::new(),
        })
    }

    /// The control plane shared by every test in this test binary, started on first use.
    ///
    /// A failed start is remembered, so every test fails fast with the same message instead of
    /// each retrying a slow start. The processes die with the test process (they are killed at
    /// exit, and by `PR_SET_PDEATHSIG` should the process crash).
    pub async fn shared() -> Result<&'static ControlPlane, Error> {
        static SHARED: tokio::sync::OnceCell<Result<ControlPlane, String>> =
            tokio::sync::OnceCell::const_new();
        extern "C" fn kill_shared_at_exit() {
            if let Some(Ok(cp)) = SHARED.get() {
                cp.kill_at_exit();
            }
        }
        let started = SHARED
            .get_or_init(|| async {
                let started = ControlPlane::start(Options::default()).await;
                if started.is_ok() {
                    // SAFETY: registers a plain function; it only signals, reaps and deletes
                    // files, none of which can unwind across the FFI boundary.
                    unsafe {
                        libc::atexit(kill_shared_at_exit);
                    }
                }
                started.map_err(|e| e.to_string())
            })
            .await;
        started
            .as_ref()
            .map_err(|message| Error::SharedStartFailed(message.clone()))
    }

    /// The kube-apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The admin kubeconfig (context [`CONTEXT`]), usable with `kubectl --kubeconfig`.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// The directory holding etcd, kube-apiserver, kube-controller-manager and kubectl.
    pub fn bin_dir(&self) -> &Path {
        &self.bin_dir
    }

    /// The state directory: PKI, etcd data, kubeconfig and one log file per component.
    pub fn state_dir(&self) -> &Path {
        self.state.path()
    }

    /// The CA certificate (PEM) that signed the apiserver's serving and the admin certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// How long the start took, per phase.
    /// Starts more API servers on this control plane's etcd (the simulated guests' APIs).
    pub fn apiserver_launcher(&self) -> ApiServerLauncher {
        self.launcher.clone()
    }

    pub fn startup_times(&self) -> StartupTimes {
        self.times
    }

    /// The admin client configuration, for callers that adjust it (e.g. impersonation).
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// A new admin client. Must be called inside a Tokio runtime, and used only in it: each
    /// `#[tokio::test]` has its own runtime, so tests must not share clients.
    pub fn client(&self) -> Result<Client, Error> {
        Client::try_from(self.config()).map_err(|e| Error::Client(Box::new(e)))
    }

    /// A `kubectl` command already pointed at this control plane.
    pub fn kubectl(&self) -> std::process::Command {
        let mut command = std::process::Command::new(self.bin_dir.join("kubectl"));
        command.arg("--kubeconfig").arg(&self.kubeconfig);
        command
    }

    /// Fails with the log tail if any component has exited.
    pub fn check_running(&self) -> Result<(), Error> {
        ensure_all_running(&mut self.lock_processes())
    }

    /// Stops the components (SIGTERM, SIGKILL after a grace period) and deletes the state
    /// directory, without blocking the async runtime.
    pub async fn shutdown(self) -> Result<(), Error> {
        tokio::task::spawn_blocking(move || self.stop())
            .await
            .map_err(|e| Error::Shutdown(e.to_string()))?
    }

    /// Idempotent: a second call finds no processes and no directory.
    fn stop(&self) -> Result<(), Error> {
        let mut processes = self.lock_processes();
        while let Some(mut process) = processes.pop() {
            process.stop(STOP_GRACE);
        }
        self.state.remove()
    }

    /// At process exit nothing must block: kill without grace, and skip everything if another
    /// thread holds the lock mid-operation (`PR_SET_PDEATHSIG` then does the killing).
    fn kill_at_exit(&self) {
        let Ok(mut processes) = self.processes.try_lock() else {
            return;
        };
        while let Some(mut process) = processes.pop() {
            process.kill();
        }
        // Nothing to report to at exit; a leftover directory is removed by the next start.
        let _ = self.state.remove();
    }

    fn lock_processes(&self) -> MutexGuard<'_, Vec<ManagedProcess>> {
        // The list stays consistent even if a holder panicked: entries are only pushed/popped.
        self.processes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Err(e) = self.stop() {
            tracing::warn!(error = %e, "control plane did not stop cleanly");
        }
    }
}

async fn boot_with_retries(
    opts: &Options,
    bin_dir: &Path,
    state: &StateDir,
    crds: &[CustomResourceDefinition],
) -> Result<Booted, Error> {
    let mut attempt = 1;
    loop {
        match boot(opts, bin_dir, state, crds).await {
            Err(e) if e.is_port_conflict() && attempt < START_ATTEMPTS => {
                tracing::warn!(attempt, error = %e, "port taken by another process, retrying");
                state.clear()?;
                attempt += 1;
            }
            result => return result,
        }
    }
}

/// One start attempt in `state`. Processes started by a failed attempt are killed when the
/// partial list is dropped.
async fn boot(
    opts: &Options,
    bin_dir: &Path,
    state: &StateDir,
    crds: &[CustomResourceDefinition],
) -> Result<Booted, Error> {
    let dir = state.path();
    let deadline = opts.startup_timeout;
    let (pki, ca_pem) = certs::generate(&dir.join("pki"))?;
    let ports = Ports::pick()?;
    let mut processes = Vec::new();
    let mut times = StartupTimes::default();

    let phase = Instant::now();
    let etcd_args = components::etcd_args(&dir.join("etcd"), &ports);
    processes.push(spawn(bin_dir, "etcd", &etcd_args, dir).await?);
    wait_until(&mut processes, deadline, || port_open(ports.etcd_client)).await?;
    times.etcd = phase.elapsed();

    let server_url = ports.server_url();
    let kubeconfig = dir.join("kubeconfig");
    kubeconfig::write(&kubeconfig, &server_url, &pki)?;
    let config = kubeconfig::load(&kubeconfig).await?;
    let client = Client::try_from(config.clone()).map_err(|e| Error::Client(Box::new(e)))?;

    let phase = Instant::now();
    let apiserver_args = components::apiserver_args(&pki, &ports, &dir.join("apiserver-certs"));
    processes.push(spawn(bin_dir, "kube-apiserver", &apiserver_args, dir).await?);
    wait_until(&mut processes, deadline, || readyz(&client)).await?;
    times.apiserver = phase.elapsed();

    // Before the controller manager starts, so its garbage collector's first discovery already
    // sees the custom types (it rediscovers only every 30 s).
    let phase = Instant::now();
    crds::install(&client, crds, deadline).await?;
    times.crds = phase.elapsed();

    if opts.controller_manager {
        let phase = Instant::now();
        let args = components::controller_manager_args(&pki, &kubeconfig);
        processes.push(spawn(bin_dir, "kube-controller-manager", &args, dir).await?);
        wait_until(&mut processes, deadline, || {
            default_service_account(&client)
        })
        .await?;
        times.controller_manager = phase.elapsed();
    }

    Ok(Booted {
        launcher: ApiServerLauncher {
            bin_dir: bin_dir.to_path_buf(),
            etcd_url: ports.etcd_url(),
            service_account_key: pki.service_account_key.clone(),
            service_account_public_key: pki.service_account_public_key.clone(),
        },
        server_url,
        kubeconfig,
        ca_pem,
        config,
        times,
        processes,
    })
}

async fn spawn(
    bin_dir: &Path,
    name: &'static str,
    args: &[String],
    state_dir: &Path,
) -> Result<ManagedProcess, Error> {
    let log = state_dir.join(format!("{name}.log"));
    ManagedProcess::spawn(name, &bin_dir.join(name), args, log).await
}

fn ensure_all_running(processes: &mut [ManagedProcess]) -> Result<(), Error> {
    processes
        .iter_mut()
        .try_for_each(ManagedProcess::ensure_running)
}

/// Polls `probe` until it succeeds, failing early if any process exits and with the log of the
/// newest process (the one being waited for) after `timeout`.
async fn wait_until<F, Fut>(
    processes: &mut [ManagedProcess],
    timeout: Duration,
    mut probe: F,
) -> Result<(), Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    loop {
        ensure_all_running(processes)?;
        let last_check = match tokio::time::timeout(PROBE_TIMEOUT, probe()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => format!("no answer within {PROBE_TIMEOUT:?}"),
        };
        if started.elapsed() >= timeout {
            let newest = processes.last();
            let (name, log) = newest.map_or(("<none>", PathBuf::new()), |p| {
                (p.name(), p.log().to_path_buf())
            });
            return Err(Error::NotReady {
                name,
                waited: started.elapsed(),
                last_check,
                tail: fsutil::tail(&log, LOG_TAIL_LINES),
                log,
            });
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

async fn port_open(port: u16) -> Result<(), String> {
    tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .map(drop)
        .map_err(|e| format!("connecting to 127.0.0.1:{port}: {e}"))
}

/// `/readyz` rather than `/healthz` or `/version`: it stays failing until the post-start hooks
/// (bootstrap RBAC roles, priority levels, CRD informers) are done, and requests before that
/// fail in confusing ways (e.g. Forbidden for the admin).
async fn readyz(client: &Client) -> Result<(), String> {
    // kube builds `<prefix>/<name>`, so an empty prefix yields the bare `/readyz` path.
    let request = kube::core::Request::new("")
        .get("readyz", &Default::default())
        .map_err(|e| e.to_string())?;
    match client.request_text(request).await {
        Ok(body) if body.trim() == "ok" => Ok(()),
        Ok(body) => Err(format!("/readyz: {}", body.trim())),
        Err(e) => Err(format!("/readyz: {e}")),
    }
}

/// The ServiceAccount controller creates `default` in every namespace, so its appearance in
/// `default` shows the controller manager is connected and its informers have synced.
async fn default_service_account(client: &Client) -> Result<(), String> {
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    match api.get_opt("default").await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("ServiceAccount default/default does not exist yet".into()),
        Err(e) => Err(format!("reading ServiceAccount default/default: {e}")),
    }
}

/// The fixed state directory of `guestcluster-sim dev up`.
pub fn dev_state_dir() -> Result<PathBuf, Error> {
    Ok(statedir::cache_root()?.join("dev"))
}

/// Runs a control plane for interactive use until Ctrl-C or SIGTERM, then stops it cleanly.
///
/// Uses [`dev_state_dir`] unless `opts.state_dir` is set, and prints how to point kubectl (or
/// the operator) at it. Fails if a component dies while running.
pub async fn dev_up(mut opts: Options) -> Result<(), Error> {
    if opts.state_dir.is_none() {
        opts.state_dir = Some(dev_state_dir()?);
    }
    let cp = ControlPlane::start(opts).await?;
    print_banner(&cp);
    let outcome = run_until_signal(&cp).await;
    println!("stopping the control plane...");
    let stopped = cp.shutdown().await;
    outcome.and(stopped)
}

fn print_banner(cp: &ControlPlane) {
    let kubeconfig = cp.kubeconfig_path().display();
    let times = cp.startup_times();
    println!(
        "control plane ready at {} (kube-apiserver ready {:.1}s after spawn, total {:.1}s)",
        cp.server_url(),
        times.apiserver.as_secs_f64(),
        times.total.as_secs_f64()
    );
    println!("kubeconfig: {kubeconfig}");
    println!("kubectl:    {}", cp.bin_dir().join("kubectl").display());
    println!("logs:       {}/*.log", cp.state_dir().display());
    println!();
    println!("export KUBECONFIG={kubeconfig}");
    println!("export PATH={}:$PATH", cp.bin_dir().display());
    println!();
    println!("Press Ctrl-C to stop.");
}

/// Returns on Ctrl-C or SIGTERM, or with an error as soon as a component dies.
async fn run_until_signal(cp: &ControlPlane) -> Result<(), Error> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).map_err(Error::Signal)?;
    let mut health = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            ctrl_c = tokio::signal::ctrl_c() => return ctrl_c.map_err(Error::Signal),
            _ = terminate.recv() => return Ok(()),
            _ = health.tick() => cp.check_running()?,
        }
    }
}
