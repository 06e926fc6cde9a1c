//! `guestcluster-sim demo`: the whole flow on an embedded control plane, with progress output.
//!
//! The flow: control plane → simulated cluster (KubeVirt, CDI, kubelet, CRC guests with their own
//! API servers) and its router for passthrough Routes → a local mirror serving a CRC bundle → the
//! operator (leader-elected) → the bundle downloaded by the prep Job into a raw golden disk → the
//! sample namespace (with a pull secret) and pool of two → both instances Ready (disk clone, VM,
//! crc-agent Job, guest API through the instance Route) → the `kubectl get` view → kubectl on a
//! guest with the instance's published kubeconfig, through the router.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use tokio::sync::oneshot;

use guestcluster::actors::ObjectActor;
use guestcluster::actors::bundle::BundleActor;
use guestcluster::actors::instance::InstanceActor;
use guestcluster::actors::pool::PoolActor;
use guestcluster::actors::root::TreeConfig;
use guestcluster::actors::runtime::context::GuestSettings;
use guestcluster::api::instance::InstancePhase;
use guestcluster::api::labels;
use guestcluster::api::{CRCBundle, ClusterInstance, ClusterPool};
use guestcluster::contract::build_helper::Settle;
use guestcluster::guest::route::RouteAccess;
use guestcluster::metrics::Metrics;
use guestcluster::resources::bundle::JobSettings;
use guestcluster::tools::release::ReleaseRepositories;
use guestcluster::{manifests, operator};
use testenv::{self, ControlPlane};

use crate::bundles;
use crate::file_server::{Fault, FileServer};
use crate::product_bin;
use crate::route_proxy::RouteProxy;

/// Namespace the demo runs the operator in.
pub const OPERATOR_NAMESPACE: &str = "guestcluster-system";
const FIELD_MANAGER: &str = "guestcluster-demo";
/// The management cluster's apps domain: instance Route hosts are made under it.
const INGRESS_DOMAIN: &str = "apps.mgmt.demo";
/// The samples the demo applies, in order: the enabled namespace (then the demo adds its
/// `pull-secret`) and the pool of two. The others
/// (a standalone instance, a lease, an hcp pool, a build-sourced bundle) stay out so the demo runs
/// two guests; apply them by hand with `--keep-running true`.
const DEMO_SAMPLES: [&str; 2] = ["namespace.yaml", "clusterpool.yaml"];
/// Namespace and name of the sample pool.
const POOL_NAMESPACE: &str = "guestcluster-demo";
const POOL_NAME: &str = "crc-pool";
/// The pool of instances from the built bundle (`samples/clusterpool-custom.yaml`).
const CUSTOM_POOL_NAME: &str = "crc-pool-custom";
const CUSTOM_POOL_SAMPLE: &str = "clusterpool-custom.yaml";
/// How many Ready instances the sample pool settles at (`minSize`).
const POOL_SIZE: usize = 2;

/// Errors that end the demo.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    ControlPlane(#[from] testenv::Error),
    #[error(transparent)]
    ProductBinary(#[from] product_bin::Error),
    #[error("applying the samples: {0}")]
    Samples(#[from] manifests::Error),
    #[error("installing the Jobs' service accounts: {0}")]
    JobAccounts(#[source] crate::Error),
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("writing {path}: {source}")]
    Write {
        path: String,
        source: std::io::Error,
    },
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("the operator stopped: {0}")]
    Operator(String),
    #[error("timed out after {0:?} waiting for {1}")]
    Timeout(Duration, String),
    #[error("running kubectl: {0}")]
    Kubectl(String),
    #[error("{0}")]
    Demo(String),
}

/// How the demo runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Keep the control plane and operator up until Ctrl-C. `None`: only when stdout is a
    /// terminal, so scripted runs finish.
    pub keep_running: Option<bool>,
    /// Where the samples live.
    pub samples_dir: std::path::PathBuf,
    /// The product binary that runs our Jobs' pods; `None`: the one next to this program (see
    /// [`product_bin`]).
    pub guestcluster_bin: Option<PathBuf>,
    /// Run the operator as a process of this binary (`<bin> operator`) instead of in this
    /// process: the scale benchmark measures an earlier build's hand-offs this way.
    pub operator_bin: Option<PathBuf>,
    /// The kind of cluster to play (OpenShift unless asked otherwise).
    pub flavour: crate::Flavour,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            keep_running: None,
            samples_dir: testenv::project_dir().join("samples"),
            guestcluster_bin: None,
            operator_bin: None,
            flavour: crate::Flavour::default(),
        }
    }
}

struct Progress(Instant);

impl Progress {
    fn step(&self, what: impl std::fmt::Display) {
        println!("[{:>6.1}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// What a demo run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// The operator's hand-offs from the bundle's download to the two Ready instances
    /// ([`crate::handoffs`]).
    pub handoffs: Option<crate::handoffs::Summary>,
}

/// Runs the demo end to end.
pub async fn run(opts: Options) -> Result<Report, Error> {
    // Before anything starts: without the product binary no Job could run.
    let guestcluster_bin = product_bin::locate(opts.guestcluster_bin.as_deref())?;
    let progress = Progress(Instant::now());
    progress.step("starting the embedded control plane (etcd, kube-apiserver, kube-controller-manager); the first run builds them from source, which takes a few minutes");
    let state_dir = testenv::dev_state_dir()?.with_file_name("demo");
    let cp = ControlPlane::start(testenv::Options {
        state_dir: Some(state_dir),
        ..Default::default()
    })
    .await?;
    progress.step(format!(
        "control plane ready at {} (kube-apiserver ready {:.1}s after spawn)",
        cp.server_url(),
        cp.startup_times().apiserver.as_secs_f64()
    ));
    let result = drive(&cp, &opts, &guestcluster_bin, &progress).await;
    progress.step("stopping the control plane");
    let stopped = cp.shutdown().await;
    let report = result?;
    stopped?;
    Ok(report)
}

async fn drive(
    cp: &ControlPlane,
    opts: &Options,
    guestcluster_bin: &Path,
    progress: &Progress,
) -> Result<Report, Error> {
    let client = cp.client()?;
    ensure_namespace(&client, OPERATOR_NAMESPACE).await?;
    crate::job_accounts::install_prep_account(&client, OPERATOR_NAMESPACE)
        .await
        .map_err(Error::JobAccounts)?;

    let sim_root = cp.state_dir().join("sim");
    progress.step(format!(
        "starting the simulated cluster (KubeVirt, CDI, a node, CRC guests) in {}",
        sim_root.display()
    ));
    cp.kubevirt().await?;
    cp.cdi_controller().await?;
    let mut sim = crate::Sim::start(
        client.clone(),
        crate::Options {
            root: sim_root.clone(),
            timings: crate::Timings::realistic(),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            guestcluster_bin: guestcluster_bin.to_path_buf(),
            our_image_prefix: JOB_IMAGE_REPO.to_owned(),
            node_name: "demo-node".to_owned(),
            flavour: opts.flavour,
        },
    )
    .await
    .map_err(|e| Error::Operator(e.to_string()))?;
    sim.serve_guest_apis(cp.apiserver_launcher());
    let router = RouteProxy::start(client.clone())
        .await
        .map_err(|e| Error::Operator(format!("starting the router: {e}")))?;
    crate::route_proxy::set_ingress_domain(&client, INGRESS_DOMAIN).await?;
    progress.step(format!(
        "the management cluster's router (passthrough Routes, as an HTTPS proxy) listens at {}; Route hosts are under *.{INGRESS_DOMAIN}",
        router.url()
    ));

    progress.step(format!(
        "building the CRC bundle {DEMO_VERSION} (a sealed guest disk, converted with qemu-img) for the local mirror"
    ));
    let mirror = Mirror::start(&sim_root.join("mirror")).await?;
    progress.step(format!("  serving {}", mirror.bundle_url));

    progress.step(format!(
        "starting the operator in namespace {OPERATOR_NAMESPACE} (leader election on; guest APIs reached through the router, as GUESTCLUSTER_ROUTE_PROXY={} would)",
        router.url()
    ));
    let metrics = Metrics::default();
    let guests = GuestSettings {
        route_access: RouteAccess::via_proxy(&router.url()),
    };
    let op = match &opts.operator_bin {
        None => RunningOperator::start(&client, metrics.clone(), guests).await?,
        Some(bin) => RunningOperator::spawn(bin, cp, &router.url())?,
    };
    progress.step(format!(
        "  dashboard: http://{}/dashboard (read-only: bundles, pools, instances, leases and the actor tree; reload to follow along)",
        op.dashboard
    ));
    let recorder = crate::handoffs::Recorder::start(&client);

    let name = guestcluster::actors::resolve::published_bundle_name(
        DEMO_VERSION,
        guestcluster::api::common::Arch::Amd64,
    );
    progress.step(format!(
        "creating CRCBundle {name} from the local mirror (the sample pool's crcVersion selects it)"
    ));
    mirror.apply_bundle(&client).await?;
    let bundles: Api<CRCBundle> = Api::all(client.clone());
    progress.step(format!("waiting for the download of {name} (prep Job: download, verify, extract, qemu-img convert to raw, publish the key)"));
    let settled = wait_until_settled(&bundles, &name, Duration::from_secs(300), progress).await?;
    let status = settled.status.unwrap_or_default();
    if status.phase != Some(guestcluster::api::bundle::BundlePhase::Ready) {
        return Err(Error::Demo(format!("CRCBundle {name} is not Ready")));
    }
    progress.step(format!(
        "  {name} is Ready: OpenShift {}, raw disk sha256 {}, {} bytes virtual",
        status.ocp_version.as_deref().unwrap_or("?"),
        status.disk_sha256.as_deref().unwrap_or("?"),
        status.disk_virtual_size.unwrap_or_default(),
    ));

    progress.step(format!(
        "applying {} from {}, and Secret {POOL_NAMESPACE}/pull-secret (the pool's default pull secret)",
        DEMO_SAMPLES.join(" and "),
        opts.samples_dir.display()
    ));
    // The namespace first, then its pull secret, then the pool: instances find the secret at once.
    for (i, name) in DEMO_SAMPLES.iter().enumerate() {
        let objects = read_sample(&opts.samples_dir, name)?;
        for obj in manifests::apply_all(&client, objects, FIELD_MANAGER).await? {
            let kind = obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("?");
            let ns = obj
                .metadata
                .namespace
                .as_deref()
                .map(|n| format!("{n}/"))
                .unwrap_or_default();
            progress.step(format!(
                "  applied {kind} {ns}{} ({name})",
                obj.metadata.name.as_deref().unwrap_or("?")
            ));
        }
        if i == 0 {
            ensure_pull_secret(&client).await?;
            progress.step(format!("  applied Secret {POOL_NAMESPACE}/pull-secret"));
        }
    }

    progress.step(format!(
        "waiting for ClusterPool {POOL_NAMESPACE}/{POOL_NAME} to have {POOL_SIZE} Ready instances (each: root disk cloned from the golden disk, VM started, crc-agent Job configures the guest, guest API probed through its Route)"
    ));
    let ready = wait_for_pool(&client, POOL_NAME, Duration::from_secs(900), progress).await?;
    let dropped = guestcluster::write::dropped_fields_counter().get();
    if opts.operator_bin.is_some() {
        progress.step("the operator runs as a process: its log (stderr) names any field the API server dropped");
    } else if dropped > 0 {
        return Err(Error::Operator(format!(
            "the API server dropped {dropped} field(s) the operator wrote; the operator's warnings name them"
        )));
    }
    if opts.operator_bin.is_none() {
        progress
            .step("every object the operator wrote was stored as sent (each write is read back)");
    }
    let built = build_stages(&client, &opts.samples_dir, progress).await?;
    progress.step(format!(
        "applying {CUSTOM_POOL_SAMPLE}: ClusterPool {POOL_NAMESPACE}/{CUSTOM_POOL_NAME} of {POOL_SIZE} instances from CRCBundle {built} (crcBundleRef: the pool never creates a bundle)"
    ));
    manifests::apply_all(
        &client,
        read_sample(&opts.samples_dir, CUSTOM_POOL_SAMPLE)?,
        FIELD_MANAGER,
    )
    .await?;
    progress.step(format!(
        "waiting for ClusterPool {POOL_NAMESPACE}/{CUSTOM_POOL_NAME} to have {POOL_SIZE} Ready instances booted from the built golden disk (profile crc-kubevirt-v1)"
    ));
    wait_for_pool(
        &client,
        CUSTOM_POOL_NAME,
        Duration::from_secs(900),
        progress,
    )
    .await?;
    let handoffs = crate::handoffs::Summary::of(&recorder.handoffs());
    drop(recorder);
    match &handoffs {
        Some(summary) => progress.step(format!(
            "the operator's hand-offs (a watched step finished → its next write for that object): {summary}"
        )),
        None => progress.step("no hand-offs were seen (no step finished while the recorder watched)"),
    }

    println!();
    print_kubectl(
        cp,
        &["get", "crcbundles,clusterpools,clusterinstances", "-A"],
    )?;
    println!();
    print_kubectl(
        cp,
        &[
            "get",
            "clusterinstances",
            "-A",
            "-o",
            "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase,OCP:.status.ocpVersion,API:.status.apiEndpoint,KUBECONFIG:.status.kubeconfigSecretRef.name,READY:.status.conditions[?(@.type==\"Ready\")].reason",
        ],
    )?;
    println!();
    if opts.operator_bin.is_none() {
        println!(
            "operator: {} bundle, {} pool and {} instance actor(s); probes at http://{}/readyz, metrics at http://{}/metrics, dashboard at http://{}/dashboard",
            metrics.live_actors(BundleActor::KIND),
            metrics.live_actors(PoolActor::KIND),
            metrics.live_actors(InstanceActor::KIND),
            op.health,
            op.metrics,
            op.dashboard,
        );
    } else {
        println!(
            "operator (a process): probes at http://{}/readyz, metrics at http://{}/metrics, dashboard at http://{}/dashboard",
            op.health, op.metrics, op.dashboard,
        );
    }

    let first = &ready[0];
    let (secret_name, kubeconfig_file) =
        write_guest_kubeconfig(&client, cp.state_dir(), first).await?;
    let kubectl = cp.bin_dir().join("kubectl");
    println!();
    println!(
        "Using a guest: {} published its kubeconfig in Secret {POOL_NAMESPACE}/{} (key `kubeconfig`); its server is the instance Route {}, reached through the router. Written to {} (removed when the demo stops):",
        first.name_any(),
        secret_name,
        first
            .status
            .as_ref()
            .and_then(|s| s.api_endpoint.as_deref())
            .unwrap_or("?"),
        kubeconfig_file.display()
    );
    println!();
    println!(
        "  kubectl -n {POOL_NAMESPACE} get secret {secret_name} -o jsonpath='{{.data.kubeconfig}}' | base64 -d > {}",
        kubeconfig_file.display()
    );
    let guest = GuestKubectl {
        kubectl: &kubectl,
        proxy: router.url(),
        kubeconfig: &kubeconfig_file,
    };
    println!(
        "  {}",
        guest.command_line(&["get", "clusteroperators"], true)
    );
    println!();
    println!(
        "kubectl on guest {} with that kubeconfig, through the router:",
        first.name_any()
    );
    guest.run(&["auth", "whoami"])?;
    guest.run(&["get", "clusterversion", "-o", CLUSTERVERSION_COLUMNS])?;
    guest.run(&["get", "clusteroperators", "-o", CLUSTEROPERATOR_COLUMNS])?;
    println!();

    let keep_running = opts
        .keep_running
        .unwrap_or_else(|| std::io::stdout().is_terminal());
    if keep_running {
        println!("export KUBECONFIG={}", cp.kubeconfig_path().display());
        println!("export PATH={}:$PATH", cp.bin_dir().display());
        println!(
            "# on a guest: {}",
            guest.command_line(&["get", "clusterversion"], false)
        );
        println!("\nThe control plane, guests and operator keep running; press Ctrl-C to stop.");
        operator::shutdown_signal().await;
    } else {
        println!(
            "To keep the control plane, guests and operator up and use kubectl on them, run `make demo`"
        );
        println!("in a terminal, or `cargo run -p guestcluster-sim -- demo --keep-running true`.");
    }
    let stopped = op.stop().await;
    sim.shutdown().await;
    drop(router);
    stopped.map(|()| Report { handoffs })
}

/// The operator as `guestcluster operator` runs it (`operator::run`: probes, metrics, leader
/// election, the supervision tree) in this process, with the router as its way to Route hosts.
struct RunningOperator {
    health: SocketAddr,
    metrics: SocketAddr,
    dashboard: SocketAddr,
    running: Running,
}

enum Running {
    InProcess {
        stop: oneshot::Sender<()>,
        task: tokio::task::JoinHandle<Result<(), Error>>,
    },
    Process(std::process::Child),
}

impl RunningOperator {
    async fn start(
        client: &kube::Client,
        metrics: Metrics,
        guests: GuestSettings,
    ) -> Result<RunningOperator, Error> {
        let loopback = SocketAddr::from(([127, 0, 0, 1], 0));
        let options = operator::Options {
            namespace: OPERATOR_NAMESPACE.to_owned(),
            leader_elect: true,
            leader_timing: Default::default(),
            identity: operator::default_identity(),
            health_addr: Some(loopback),
            metrics_addr: Some(loopback),
            dashboard_addr: Some(loopback),
            tree: TreeConfig::default(),
            jobs: JobSettings {
                image: format!("{JOB_IMAGE_REPO}:demo"),
                prep_service_account: crate::job_accounts::PREP_ACCOUNT.to_owned(),
                pod_users: Default::default(),
                // Upstream's three reads, a second apart: the demo's operators settle in seconds.
                settle: Settle::every(std::time::Duration::from_secs(1)),
                // The sample's release repository (the simulated registry serves any).
                release_repositories: ReleaseRepositories::parse(DEMO_RELEASE_REPOSITORY),
            },
            platform: Default::default(),
            guests,
            // The sample pool's crcVersion only: what an administrator would allow.
            pool_bundles: guestcluster::actors::pool::bundles::PoolBundles {
                crc_versions: guestcluster::actors::pool::bundles::VersionPatterns::parse(
                    DEMO_VERSION,
                ),
                ..Default::default()
            },
        };
        let (stop, stopped) = oneshot::channel::<()>();
        let (bound_tx, bound_rx) = oneshot::channel();
        let client = client.clone();
        let task = tokio::spawn(async move {
            operator::run(
                operator::Clients::shared(client),
                options,
                metrics,
                async {
                    let _ = stopped.await;
                },
                move |bound| {
                    let _ = bound_tx.send(bound);
                },
            )
            .await
            .map_err(|e| Error::Operator(e.to_string()))
        });
        let bound = match bound_rx.await {
            Ok(bound) => bound,
            Err(_) => {
                return Err(match task.await {
                    Ok(Err(e)) => e,
                    _ => Error::Operator("the operator stopped before listening".into()),
                });
            }
        };
        let missing = || Error::Operator("the operator bound no listener".into());
        Ok(RunningOperator {
            health: bound.health.ok_or_else(missing)?,
            metrics: bound.metrics.ok_or_else(missing)?,
            dashboard: bound.dashboard.ok_or_else(missing)?,
            running: Running::InProcess { stop, task },
        })
    }

    /// `bin operator` as a process, with the same settings as [`RunningOperator::start`].
    fn spawn(bin: &Path, cp: &ControlPlane, router: &str) -> Result<RunningOperator, Error> {
        // Held together so the three differ; outside the range client connections are given.
        let held = (0..3)
            .map(|_| testenv::ports::reserve().and_then(|l| Ok((l.local_addr()?, l))))
            .collect::<Result<Vec<(SocketAddr, _)>, _>>()
            .map_err(|e| Error::Operator(format!("finding a free port: {e}")))?;
        let (health, metrics, dashboard) = (held[0].0, held[1].0, held[2].0);
        drop(held);
        let mut command = std::process::Command::new(bin);
        // Dies with this process, so an interrupted run leaves no operator behind.
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .arg("operator")
            .args(["--namespace", OPERATOR_NAMESPACE])
            .arg(format!("--health-probe-bind-address={health}"))
            .arg(format!("--metrics-bind-address={metrics}"))
            .arg(format!("--dashboard-bind-address={dashboard}"))
            .arg(format!("--job-image={JOB_IMAGE_REPO}:demo"))
            .arg(format!(
                "--bundle-prep-service-account={}",
                crate::job_accounts::PREP_ACCOUNT
            ))
            .arg(format!("--pool-crc-versions={DEMO_VERSION}"))
            .arg(format!(
                "--build-release-repositories={DEMO_RELEASE_REPOSITORY}"
            ))
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env(guestcluster::guest::route::ROUTE_PROXY_ENV, router)
            .env("RUST_LOG", "warn,kube_client::client::builder=off")
            .stdout(std::process::Stdio::null())
            .spawn()
            .map_err(|e| Error::Operator(format!("starting {}: {e}", bin.display())))?;
        Ok(RunningOperator {
            health,
            metrics,
            dashboard,
            running: Running::Process(child),
        })
    }

    async fn stop(self) -> Result<(), Error> {
        match self.running {
            Running::InProcess { stop, task } => {
                let _ = stop.send(());
                match task.await {
                    Ok(result) => result,
                    Err(err) => Err(Error::Operator(err.to_string())),
                }
            }
            Running::Process(mut child) => {
                // SIGTERM: the operator's graceful shutdown, as a Deployment's rollout would.
                unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
                let status = tokio::task::spawn_blocking(move || child.wait())
                    .await
                    .map_err(|e| Error::Operator(e.to_string()))?
                    .map_err(|e| Error::Operator(e.to_string()))?;
                if status.success() {
                    Ok(())
                } else {
                    Err(Error::Operator(format!(
                        "the operator exited with {status}"
                    )))
                }
            }
        }
    }
}

/// The objects of the sample file `name`.
fn read_sample(dir: &Path, name: &str) -> Result<Vec<DynamicObject>, Error> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).map_err(|source| Error::Read {
        path: path.display().to_string(),
        source,
    })?;
    Ok(manifests::parse(&text)?)
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), Error> {
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(ns))
        .await?;
    Ok(())
}

/// The pool namespace's `pull-secret`, which instances hand to their guests (a placeholder
/// registry credential: the simulated guests pull nothing).
async fn ensure_pull_secret(client: &kube::Client) -> Result<(), Error> {
    let secret = serde_json::json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pull-secret", "namespace": POOL_NAMESPACE},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"ZGVtbzpkZW1v\"}}}"}
    });
    Api::<Secret>::namespaced(client.clone(), POOL_NAMESPACE)
        .patch(
            "pull-secret",
            &PatchParams::apply(FIELD_MANAGER),
            &Patch::Apply(secret),
        )
        .await?;
    Ok(())
}

/// The build source: the sample build bundle's inputs (a pull secret and two manifest
/// ConfigMaps), the bundle, then each stage until `Ready=True`: Prepare (the installer Job:
/// release resolved, installer extracted, live ISO verified, generator Ignition embedded),
/// Install (the generator and install boots a day behind, the cold restart, the kubelet
/// certificates to 25 days by guest time), Customize, Seal, Publish, Validate (a clone booted on
/// real time, then 20 days ahead) and Ready. Returns the bundle's name.
/// How long the demo waits for the sample build to be Ready.
const BUILD_DEADLINE: Duration = Duration::from_secs(1800);

async fn build_stages(
    client: &kube::Client,
    samples_dir: &Path,
    progress: &Progress,
) -> Result<String, Error> {
    use guestcluster::api::conditions::{self, types};
    use guestcluster::api::labels::{BUILD_INPUT, BUILD_INPUT_ALL};
    const MACHINE_CONFIG: &str = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-custom-motd\n  labels:\n    machineconfiguration.openshift.io/role: master\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n";
    const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: team-settings\n  namespace: openshift-config\ndata:\n  owner: platform-team\n";
    let inputs = [
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "bundle-build-pull-secret", "namespace": OPERATOR_NAMESPACE,
                         "labels": {BUILD_INPUT: BUILD_INPUT_ALL}},
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"ZGVtbzpkZW1v\"}}}"}}),
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "custom-machineconfigs", "namespace": OPERATOR_NAMESPACE,
                         "labels": {BUILD_INPUT: BUILD_INPUT_ALL}},
            "data": {"motd.yaml": MACHINE_CONFIG}}),
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "custom-cluster-resources", "namespace": OPERATOR_NAMESPACE,
                         "labels": {BUILD_INPUT: BUILD_INPUT_ALL}},
            "data": {"settings.yaml": CONFIG_MAP}}),
    ];
    let objects = inputs
        .into_iter()
        .map(serde_json::from_value)
        .collect::<Result<Vec<DynamicObject>, _>>()
        .map_err(|e| Error::Demo(format!("build inputs: {e}")))?;
    manifests::apply_all(client, objects, FIELD_MANAGER).await?;
    progress.step(format!(
        "applied the build's inputs in {OPERATOR_NAMESPACE}: Secret bundle-build-pull-secret, ConfigMaps custom-machineconfigs and custom-cluster-resources"
    ));
    let mut bundle = None;
    for obj in manifests::apply_all(
        client,
        read_sample(samples_dir, "crcbundle-build.yaml")?,
        FIELD_MANAGER,
    )
    .await?
    {
        progress.step(format!(
            "  applied CRCBundle {} (build source, crcbundle-build.yaml)",
            obj.metadata.name.as_deref().unwrap_or("?")
        ));
        bundle = obj.metadata.name;
    }
    let name =
        bundle.ok_or_else(|| Error::Demo("crcbundle-build.yaml holds no CRCBundle".into()))?;
    progress.step(format!(
        "waiting for {name} to pass Admit (inputs digested into status), Prepare (installer Job: release resolved to a digest, openshift-install extracted, live ISO verified, generator Ignition embedded), Install (generator and install boots a day behind, cold restart from the root disk alone, kubelet certificates to 25 days by guest time), Customize (SNC's post-install steps and the user's manifests), Seal (in the guest), Publish (sparse copy into the golden PVC), Validate (a clone on real time, then 20 days ahead) and Ready"
    ));
    let api: Api<CRCBundle> = Api::all(client.clone());
    let deadline = Instant::now() + BUILD_DEADLINE;
    let mut last = String::new();
    loop {
        let b = api.get(&name).await?;
        let status = b.status.clone().unwrap_or_default();
        let stage = status.build.as_ref().and_then(|b| b.stage);
        // The condition of the stage in progress: the last one set, in stage order.
        let lines: Vec<String> = guestcluster::api::bundle::BuildStage::with_conditions()
            .map(|(_, condition)| condition)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .find_map(|t| conditions::find(&status.conditions, t))
            .map(|c| format!("{}={} {}", c.type_, c.status, c.reason))
            .into_iter()
            .collect();
        let stage_name = stage.map_or_else(|| "-".to_owned(), |s| format!("{s:?}"));
        let step = status
            .build
            .as_ref()
            .and_then(|b| b.install_step)
            .map(|s| format!(" ({s:?})"))
            .unwrap_or_default();
        let message = status
            .build
            .as_ref()
            .and_then(|b| b.message.clone())
            .unwrap_or_default();
        let line = format!(
            "  {name}: stage {stage_name}{step}, {}: {message}",
            lines.join(", ")
        );
        if !lines.is_empty() && line != last {
            progress.step(&line);
            last = line;
        }
        let message_of = |type_: &str| {
            conditions::find(&status.conditions, type_)
                .map(|c| c.message.clone())
                .unwrap_or_default()
        };
        if stage == Some(guestcluster::api::bundle::BuildStage::Failed) {
            return Err(Error::Demo(format!(
                "the build of {name} failed: {}",
                message_of(types::READY)
            )));
        }
        if conditions::find(&status.conditions, types::READY).is_some_and(|c| c.status == "True") {
            for (_, type_) in guestcluster::api::bundle::BuildStage::with_conditions() {
                progress.step(format!("  {type_}: {}", message_of(type_)));
            }
            progress.step(format!("  Ready: {}", message_of(types::READY)));
            return Ok(name);
        }
        if Instant::now() > deadline {
            return Err(Error::Timeout(
                BUILD_DEADLINE,
                format!("CRCBundle {name} to be Ready"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits until the sample pool has [`POOL_SIZE`] Ready instances, printing each change of an
/// instance's phase and Ready condition, and of the pool's counts. Returns the Ready instances
/// by name.
async fn wait_for_pool(
    client: &kube::Client,
    pool: &str,
    deadline: Duration,
    progress: &Progress,
) -> Result<Vec<ClusterInstance>, Error> {
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), POOL_NAMESPACE);
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), POOL_NAMESPACE);
    let start = Instant::now();
    let mut last = std::collections::BTreeMap::<String, String>::new();
    let mut last_pool = String::new();
    loop {
        if let Some(status) = pools.get_opt(pool).await?.and_then(|p| p.status) {
            let line = format!(
                "  ClusterPool {pool}: {} instance(s), {} available, {} leased",
                status.total_instances.unwrap_or_default(),
                status.available_instances.unwrap_or_default(),
                status.leased_instances.unwrap_or_default(),
            );
            if line != last_pool {
                progress.step(&line);
                last_pool = line;
            }
        }
        let mut list = instances
            .list(&ListParams::default().labels(&format!("{}={pool}", labels::POOL)))
            .await?
            .items;
        list.sort_by_key(|i| i.name_any());
        for instance in &list {
            let name = instance.name_any();
            let status = instance.status.clone().unwrap_or_default();
            let phase = status
                .phase
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "-".to_owned());
            let ready = guestcluster::api::conditions::find(
                &status.conditions,
                guestcluster::api::conditions::types::READY,
            );
            let line = match ready {
                Some(c) if c.message.is_empty() => format!("{phase} ({})", c.reason),
                Some(c) => format!("{phase} ({}): {}", c.reason, c.message),
                None => phase,
            };
            if last.get(&name) != Some(&line) {
                progress.step(format!("  {name}: {line}"));
                last.insert(name, line);
            }
        }
        let ready: Vec<ClusterInstance> = list
            .into_iter()
            .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(InstancePhase::Ready))
            .collect();
        if ready.len() >= POOL_SIZE {
            progress.step(format!(
                "  {} Ready: {}",
                ready.len(),
                ready
                    .iter()
                    .map(|i| i.name_any())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            return Ok(ready);
        }
        if start.elapsed() > deadline {
            return Err(Error::Timeout(
                deadline,
                format!("{POOL_SIZE} Ready instances of ClusterPool {pool}"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Writes `instance`'s published kubeconfig to `<dir>/<instance>.kubeconfig`; returns the
/// Secret's name and the file.
async fn write_guest_kubeconfig(
    client: &kube::Client,
    dir: &Path,
    instance: &ClusterInstance,
) -> Result<(String, PathBuf), Error> {
    let name = instance.name_any();
    let secret_name = instance
        .status
        .as_ref()
        .and_then(|s| s.kubeconfig_secret_ref.as_ref())
        .map(|r| r.name.clone())
        .unwrap_or_else(|| guestcluster::resources::instance::kubeconfig_secret_name(&name));
    let secret = Api::<Secret>::namespaced(client.clone(), POOL_NAMESPACE)
        .get(&secret_name)
        .await?;
    let Some(ByteString(kubeconfig)) = secret.data.and_then(|mut d| d.remove("kubeconfig")) else {
        return Err(Error::Demo(format!(
            "Secret {POOL_NAMESPACE}/{secret_name} has no kubeconfig"
        )));
    };
    let path = dir.join(format!("{name}.kubeconfig"));
    let write_err = |source| Error::Write {
        path: path.display().to_string(),
        source,
    };
    std::fs::write(&path, kubeconfig).map_err(write_err)?;
    Ok((secret_name, path))
}

/// `kubectl get clusteroperators` columns as `oc` shows them.
const CLUSTEROPERATOR_COLUMNS: &str = "custom-columns=NAME:.metadata.name,VERSION:.status.versions[?(@.name==\"operator\")].version,AVAILABLE:.status.conditions[?(@.type==\"Available\")].status,PROGRESSING:.status.conditions[?(@.type==\"Progressing\")].status,DEGRADED:.status.conditions[?(@.type==\"Degraded\")].status";
const CLUSTERVERSION_COLUMNS: &str = "custom-columns=NAME:.metadata.name,VERSION:.status.desired.version,AVAILABLE:.status.conditions[?(@.type==\"Available\")].status";

/// kubectl on a guest with its published kubeconfig, through the router as `HTTPS_PROXY` (Go's
/// `http.ProxyFromEnvironment`: a `CONNECT` to the Route host; TLS stays end to end and kubectl
/// verifies the guest's serving certificate against the kubeconfig's CA data).
struct GuestKubectl<'a> {
    kubectl: &'a Path,
    proxy: String,
    kubeconfig: &'a Path,
}

impl GuestKubectl<'_> {
    /// The command line a user types; `full_path` names the kubectl binary by its path.
    fn command_line(&self, args: &[&str], full_path: bool) -> String {
        let kubectl = if full_path {
            self.kubectl.display().to_string()
        } else {
            "kubectl".to_owned()
        };
        format!(
            "HTTPS_PROXY={} {kubectl} --kubeconfig {} {}",
            self.proxy,
            self.kubeconfig.display(),
            shell_words(args)
        )
    }

    fn run(&self, args: &[&str]) -> Result<(), Error> {
        println!("$ {}", self.command_line(args, false));
        let out = std::process::Command::new(self.kubectl)
            .arg("--kubeconfig")
            .arg(self.kubeconfig)
            .args(args)
            .env("HTTPS_PROXY", &self.proxy)
            .env_remove("https_proxy")
            .env_remove("NO_PROXY")
            .env_remove("no_proxy")
            .output()
            .map_err(|e| Error::Kubectl(e.to_string()))?;
        if !out.status.success() {
            return Err(Error::Kubectl(format!(
                "on the guest: {}",
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
        Ok(())
    }
}

/// `args` as a shell would need them typed: single-quoted where they hold anything but plain
/// word characters.
fn shell_words(args: &[&str]) -> String {
    args.iter()
        .map(|arg| {
            let plain = !arg.is_empty()
                && arg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./:=,".contains(c));
            if plain {
                (*arg).to_owned()
            } else {
                format!("'{}'", arg.replace('\'', "'\\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn print_kubectl(cp: &ControlPlane, args: &[&str]) -> Result<(), Error> {
    println!("$ kubectl {}", shell_words(args));
    let out = cp
        .kubectl()
        .args(args)
        .output()
        .map_err(|e| Error::Kubectl(e.to_string()))?;
    if !out.status.success() {
        return Err(Error::Kubectl(
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    print!("{}", String::from_utf8_lossy(&out.stdout));
    Ok(())
}

/// Repository of the operator's Job image in the demo; the simulated kubelet runs pods of it as
/// this very binary.
const JOB_IMAGE_REPO: &str = "quay.io/opdev/guestcluster";
/// The version the sample pool's `crcVersion` asks for.
const DEMO_VERSION: &str = "4.22.7";
/// The repository of `samples/crcbundle-build.yaml`'s release image, which the demo's operator
/// builds from (`--build-release-repositories`).
const DEMO_RELEASE_REPOSITORY: &str = "quay.io/example/ocp-release";

/// The local stand-in for mirror.openshift.com.
struct Mirror {
    _files: FileServer,
    bundle_url: String,
    sha256_url: String,
}

impl Mirror {
    async fn start(dir: &Path) -> Result<Mirror, Error> {
        let files = FileServer::start(std::net::IpAddr::from([127, 0, 0, 1]))
            .await
            .map_err(|e| Error::Operator(format!("starting the mirror: {e}")))?;
        let bundle = bundles::build(
            &dir.join(DEMO_VERSION),
            &bundles::BundleSpec::new(DEMO_VERSION),
        )
        .map_err(|e| Error::Operator(format!("building the demo bundle {DEMO_VERSION}: {e}")))?;
        let prefix = format!("pub/openshift-v4/clients/crc/bundles/openshift/{DEMO_VERSION}");
        let bundle_url = files.publish(
            &format!("{prefix}/{}", bundle.file_name),
            bundle.archive.clone(),
            Fault::None,
        );
        let sha256_url = files.publish(
            &format!("{prefix}/sha256sum.txt"),
            bundle.sha256sum_txt.clone(),
            Fault::None,
        );
        Ok(Mirror {
            _files: files,
            bundle_url,
            sha256_url,
        })
    }

    /// The bundle the sample pool needs, pointed at this mirror; the pool finds it by name
    /// instead of creating one for the internet.
    async fn apply_bundle(&self, client: &kube::Client) -> Result<(), Error> {
        let name = guestcluster::actors::resolve::published_bundle_name(
            DEMO_VERSION,
            guestcluster::api::common::Arch::Amd64,
        );
        let bundle = serde_json::json!({
            "apiVersion": guestcluster::api::API_VERSION,
            "kind": "CRCBundle",
            "metadata": {"name": name},
            "spec": {"version": DEMO_VERSION, "bundleURL": self.bundle_url, "sha256URL": self.sha256_url, "allowHTTP": true, "goldenVolumeSize": "1Gi"},
        });
        Api::<CRCBundle>::all(client.clone())
            .patch(
                &name,
                &PatchParams::apply("guestcluster-demo-mirror"),
                &Patch::Apply(bundle),
            )
            .await?;
        Ok(())
    }
}

/// Waits until `name` is Ready or Failed, printing each change of its Ready condition.
async fn wait_until_settled(
    api: &Api<CRCBundle>,
    name: &str,
    deadline: Duration,
    progress: &Progress,
) -> Result<CRCBundle, Error> {
    use guestcluster::api::bundle::BundlePhase;
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let bundle = api.get(name).await?;
        if let Some(status) = &bundle.status {
            if let Some(ready) = guestcluster::api::conditions::find(
                &status.conditions,
                guestcluster::api::conditions::types::READY,
            ) {
                let line = format!("  {name}: {} — {}", ready.reason, ready.message);
                if line != last {
                    progress.step(&line);
                    last = line;
                }
            }
            if matches!(status.phase, Some(BundlePhase::Ready | BundlePhase::Failed)) {
                return Ok(bundle);
            }
        }
        if start.elapsed() > deadline {
            return Err(Error::Timeout(
                deadline,
                format!("CRCBundle {name} to be Ready"),
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
