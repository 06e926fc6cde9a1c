//! One simulation shared by every test of a test binary.
//!
//! Tests run in parallel, each on a runtime of its own, against one control plane; two
//! simulations would fight over the same objects (two schedulers binding one pod, two
//! provisioners one PVC). So the simulation runs on a thread with a runtime of its own (a kube
//! client is bound to the runtime it was made in) for the life of the test process. Tests
//! [`share`](SharedSim::share) it; a test that [`restart`](SharedSim::restart)s it has it
//! [`exclusive`](SharedSim::exclusive)ly.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use sim::{Options, Sim, SimContext, Timings};
use testenv::ControlPlane;
use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard, mpsc, oneshot};

/// What a test binary's simulation differs in; the rest of [`Options`] is the same for all.
pub struct Setup {
    /// Where volumes, pod sandboxes, logs and fake tools live (see [`temp_root`]).
    pub root: PathBuf,
    /// Name of the simulated Node.
    pub node_name: &'static str,
    /// Container images whose pods run the `guestcluster` binary.
    pub our_image_prefix: &'static str,
    /// Which kind of cluster to play (tests default to OpenShift, the product's main target).
    pub flavour: sim::Flavour,
}

type RestartDone = oneshot::Sender<Result<Arc<SimContext>, String>>;

/// The running simulation of this test binary.
pub struct SharedSim {
    root: PathBuf,
    ctx: Mutex<Arc<SimContext>>,
    restart: mpsc::UnboundedSender<RestartDone>,
    /// Read: a test using the simulation. Write: a test restarting it.
    gate: RwLock<()>,
}

/// The simulation of this test binary, started on first use with `setup` (later calls do not
/// call it) without blocking the caller's runtime. Panics with the reason when it cannot start.
pub async fn start(setup: fn() -> Setup) -> &'static SharedSim {
    static SIM: OnceLock<SharedSim> = OnceLock::new();
    if let Some(sim) = SIM.get() {
        return sim;
    }
    tokio::task::spawn_blocking(move || SIM.get_or_init(|| launch(setup())))
        .await
        .expect("simulation start task")
}

/// A fresh directory under Cargo's per-target temporary directory, kept after the run (`cargo
/// clean` removes it).
pub fn temp_root(prefix: &str) -> PathBuf {
    tempfile::Builder::new()
        .prefix(prefix)
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .expect("simulation root")
        .keep()
}

impl SharedSim {
    /// The simulation's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The context of the simulation running now (a restart replaces it).
    pub fn ctx(&self) -> Arc<SimContext> {
        self.ctx.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Uses the simulation alongside other tests until the guard drops; a restart waits for it.
    pub async fn share(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read().await
    }

    /// Has the simulation alone until the guard drops, as [`SharedSim::restart`] needs.
    pub async fn exclusive(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write().await
    }

    /// Stops the simulation (killing its pod processes and guests; nothing is recorded in the
    /// API) and starts a fresh one on the same root: what a crashed and restarted node sees.
    pub async fn restart(&self, _exclusive: &RwLockWriteGuard<'_, ()>) {
        let (done, restarted) = oneshot::channel();
        self.restart.send(done).expect("the simulation thread runs");
        let ctx = restarted
            .await
            .expect("the simulation thread answers")
            .unwrap_or_else(|err| panic!("the simulation did not restart: {err}"));
        *self.ctx.lock().unwrap_or_else(|e| e.into_inner()) = ctx;
    }
}

fn launch(setup: Setup) -> SharedSim {
    let root = setup.root.clone();
    let (started, result) = std::sync::mpsc::channel();
    let (restart, mut restarts) = mpsc::unbounded_channel::<RestartDone>();
    std::thread::Builder::new()
        .name("simulation".into())
        .spawn(move || {
            if std::env::var_os("RUST_LOG").is_some() {
                let _ = tracing_subscriber::fmt()
                    .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                    .try_init();
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("simulation runtime");
            runtime.block_on(async move {
                let mut sim = match start_sim(&setup).await {
                    Ok(sim) => sim,
                    Err(err) => return drop(started.send(Err(err))),
                };
                let _ = started.send(Ok(sim.ctx.clone()));
                // Runs for the rest of the test process.
                while let Some(done) = restarts.recv().await {
                    sim.shutdown().await;
                    match start_sim(&setup).await {
                        Ok(restarted) => {
                            let _ = done.send(Ok(restarted.ctx.clone()));
                            sim = restarted;
                        }
                        Err(err) => return drop(done.send(Err(err))),
                    }
                }
            });
        })
        .expect("simulation thread");
    let ctx = match result.recv() {
        Ok(Ok(ctx)) => ctx,
        Ok(Err(err)) => panic!("the simulation did not start: {err}"),
        Err(_) => panic!("the simulation thread died"),
    };
    SharedSim {
        root,
        ctx: Mutex::new(ctx),
        restart,
        gate: RwLock::const_new(()),
    }
}

async fn start_sim(setup: &Setup) -> Result<Sim, String> {
    let cp = ControlPlane::shared().await.map_err(|e| e.to_string())?;
    let client = cp.client().map_err(|e| e.to_string())?;
    let options = Options {
        root: setup.root.clone(),
        timings: Timings::fast(),
        kubeconfig: cp.kubeconfig_path().to_path_buf(),
        guestcluster_bin: PathBuf::from(env!("CARGO_BIN_EXE_guestcluster")),
        our_image_prefix: setup.our_image_prefix.into(),
        node_name: setup.node_name.into(),
        flavour: setup.flavour,
    };
    cp.kubevirt().await.map_err(|e| e.to_string())?;
    cp.cdi_controller().await.map_err(|e| e.to_string())?;
    Sim::start(client, options).await.map_err(|e| e.to_string())
}
