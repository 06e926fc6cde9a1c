//! The whole simulated world for scenario tests: the shared control plane, one simulation
//! (KubeVirt, CDI, kubelet, guests and their APIs), a download server, and the operator's
//! supervision tree, all on a runtime of their own for the life of the test process (a kube
//! client is bound to the runtime it was made in, and two simulations would fight over pods).

use std::path::PathBuf;
use std::sync::OnceLock;

use guestcluster::actors::Context;
use guestcluster::actors::pool::bundles::{PoolBundles, VersionPatterns};
use guestcluster::actors::root::{self, TreeConfig};
use guestcluster::actors::runtime::context::GuestSettings;
use guestcluster::guest::route::{ROUTE_PROXY_ENV, RouteAccess};
use guestcluster::metrics::Metrics;
use guestcluster::resources::bundle::JobSettings;
use sim::file_server::FileServer;
use sim::route_proxy::RouteProxy;
use sim::{Flavour, Options, Sim, Timings};
use testenv::ControlPlane;

/// The operator namespace of the scenario world.
pub const OPERATOR_NS: &str = "guestcluster-system";
/// Our Job image in the scenario world (the simulated kubelet runs it as the test binary).
pub const IMAGE: &str = "quay.io/opdev/guestcluster:scenario";

pub struct World {
    /// Where the world keeps files (simulation root, bundles to serve).
    pub root: PathBuf,
    pub files: FileServer,
    pub metrics: Metrics,
    /// The simulated router: Route hosts are reached through it as an HTTPS proxy.
    pub router: std::net::SocketAddr,
    /// The simulated cluster's controllers and guests (a guest's state by VMI UID).
    pub sim: std::sync::Arc<sim::SimContext>,
}

/// How far apart the build helpers' settle checks are (`--build-settle-interval`).
const SETTLE_INTERVAL: &str = "100ms";

/// The release repositories the scenario operators build from (`--build-release-repositories`):
/// the scenarios' releases are `quay.io/example/…`, which the simulated registry serves.
pub const RELEASE_REPOSITORIES: &str = "quay.io/example/";

/// The management cluster's ingress domain in the scenario world.
pub const INGRESS_DOMAIN: &str = "apps.mgmt.example";

/// The kind of cluster this test binary's worlds play (OpenShift unless the binary asks for
/// another before its first world starts).
static FLAVOUR: OnceLock<Flavour> = OnceLock::new();

/// The simulation's timings in this test binary's worlds: the fast ones unless the binary asks
/// for others before its first world starts.
static TIMINGS: OnceLock<Timings> = OnceLock::new();

/// [`world`] with `timings` (the first world of a test binary decides them for all).
pub fn world_with_timings(timings: impl FnOnce() -> Timings) -> &'static World {
    TIMINGS.get_or_init(timings);
    world()
}

/// The world with the operator's supervision tree running in this process, started on first use.
pub fn world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| launch(true, *FLAVOUR.get_or_init(Flavour::default)))
}

/// [`world`] on a plain-Kubernetes cluster; the whole test binary's world then is.
pub fn kubernetes_world() -> &'static World {
    let flavour = *FLAVOUR.get_or_init(|| Flavour::Kubernetes);
    assert_eq!(
        flavour,
        Flavour::Kubernetes,
        "this test binary's world already plays OpenShift"
    );
    world()
}

/// The world without an operator: the test runs the operator as a process of its own.
pub fn bare_world() -> &'static World {
    static WORLD: OnceLock<World> = OnceLock::new();
    WORLD.get_or_init(|| launch(false, *FLAVOUR.get_or_init(Flavour::default)))
}

/// Operator processes in one test binary contend for one leader lease: a test that follows a
/// particular process (counts its actors, kills it) holds this for its whole run, so no other
/// test's process leads meanwhile.
pub async fn one_operator_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    TURN.lock().await
}

/// The operator as a process of its own (one a test can kill) in the [`bare_world`], set up
/// like the in-process one: our Job image, the chart's prep service account, Route hosts
/// through the simulated router. Its leader identity begins with `name`. Like a Deployment's
/// pod, it is started again when it ends by itself (lost leadership on a loaded machine).
pub async fn operator_process(name: &str) -> super::Operator {
    let router = format!("http://{}", bare_world().router);
    super::Operator::restarting(
        OPERATOR_NS,
        name,
        &[
            "--job-image",
            IMAGE,
            "--bundle-prep-service-account",
            sim::job_accounts::PREP_ACCOUNT,
            "--pool-crc-versions",
            "*",
            // As the in-process operator: the fast timings settle operators in 300 ms.
            "--build-settle-interval",
            SETTLE_INTERVAL,
            "--build-release-repositories",
            RELEASE_REPOSITORIES,
            "--log-format",
            "json",
        ],
        &[(ROUTE_PROXY_ENV, router.as_str())],
    )
    .await
}

fn launch(with_operator: bool, flavour: Flavour) -> World {
    {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("world".into())
            .spawn(move || {
                // As the shared simulation: RUST_LOG shows the simulation's side of a scenario.
                if std::env::var_os("RUST_LOG").is_some() {
                    let _ = tracing_subscriber::fmt()
                        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                        .try_init();
                }
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .expect("world runtime");
                runtime.block_on(async move {
                    match start(with_operator, flavour).await {
                        Ok((world, _sim)) => {
                            let _ = tx.send(Ok(world));
                            // Keep the simulation and the operator running for the process.
                            std::future::pending::<()>().await;
                        }
                        Err(err) => {
                            let _ = tx.send(Err(err));
                        }
                    }
                });
            })
            .expect("world thread");
        match rx.recv() {
            Ok(Ok(world)) => world,
            Ok(Err(err)) => panic!("the scenario world did not start: {err}"),
            Err(_) => panic!("the scenario world thread died"),
        }
    }
}

async fn start(
    with_operator: bool,
    flavour: Flavour,
) -> Result<(World, (Sim, RouteProxy)), String> {
    let cp = ControlPlane::shared().await.map_err(|e| e.to_string())?;
    let client = cp.client().map_err(|e| e.to_string())?;
    super::ensure_namespace(&client, OPERATOR_NS).await;
    sim::job_accounts::install_prep_account(&client, OPERATOR_NS)
        .await
        .map_err(|e| format!("prep account: {e}"))?;
    let root = tempfile::Builder::new()
        .prefix("scenario-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .map_err(|e| e.to_string())?
        .keep();
    cp.kubevirt().await.map_err(|e| e.to_string())?;
    cp.cdi_controller().await.map_err(|e| e.to_string())?;
    let mut sim = Sim::start(
        client.clone(),
        Options {
            root: root.join("sim"),
            timings: TIMINGS.get_or_init(Timings::fast).clone(),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            guestcluster_bin: env!("CARGO_BIN_EXE_guestcluster").into(),
            our_image_prefix: IMAGE
                .rsplit_once(':')
                .map(|(repo, _)| repo)
                .unwrap_or(IMAGE)
                .to_owned(),
            node_name: "scenario-node".into(),
            flavour,
        },
    )
    .await
    .map_err(|e| e.to_string())?;
    sim.serve_guest_apis(cp.apiserver_launcher());
    let files = FileServer::start("127.0.0.1".parse().expect("loopback"))
        .await
        .map_err(|e| e.to_string())?;
    let metrics = Metrics::default();
    // As `operator::run` decides it: from what the simulated cluster serves.
    let pod_users = guestcluster::operator::platform::Platform::Auto
        .resolve(&client)
        .await
        .map_err(|e| format!("platform: {e}"))?;
    let jobs = JobSettings {
        image: IMAGE.to_owned(),
        prep_service_account: sim::job_accounts::PREP_ACCOUNT.to_owned(),
        pod_users,
        // Upstream's three reads, 100 ms apart: the fast timings settle operators in 300 ms.
        settle: guestcluster::contract::build_helper::Settle::every(
            guestcluster::api::duration::parse_flag(SETTLE_INTERVAL)?,
        ),
        release_repositories: guestcluster::tools::release::ReleaseRepositories::parse(
            RELEASE_REPOSITORIES,
        ),
    };
    let router = RouteProxy::start(client.clone())
        .await
        .map_err(|e| e.to_string())?;
    sim::route_proxy::set_ingress_domain(&client, INGRESS_DOMAIN)
        .await
        .map_err(|e| format!("ingress domain: {e}"))?;
    let guests = GuestSettings {
        route_access: RouteAccess::via_proxy(&router.addr().to_string()),
    };
    let ctx = Context::build(
        client,
        OPERATOR_NS,
        metrics.clone(),
        jobs,
        Default::default(),
        guests,
        PoolBundles {
            // Scenario pools ask for the versions their tests serve.
            crc_versions: VersionPatterns::parse("*"),
            ..Default::default()
        },
    );
    let config = TreeConfig {
        backoff: guestcluster::actors::runtime::backoff::Backoff {
            base: std::time::Duration::from_millis(100),
            ..Default::default()
        },
        ..Default::default()
    };
    if with_operator {
        root::start(ctx, config).await.map_err(|e| e.to_string())?;
    }
    Ok((
        World {
            root,
            files,
            metrics,
            router: router.addr(),
            sim: sim.ctx.clone(),
        },
        (sim, router),
    ))
}
