//! `guestcluster demo`: the whole flow on an embedded control plane, with progress output.
//!
//! Today the flow is: control plane → simulated cluster (KubeVirt, CDI, kubelet, guests) → a local
//! mirror serving a CRC bundle → operator (leader-elected) → the bundle downloaded by the prep Job
//! into a raw golden disk → the samples → the `kubectl get` view. Later issues extend it (builds,
//! pools, instances) without changing how it is started.

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, Patch, PatchParams};
use tokio::sync::oneshot;

use crate::actors::ObjectActor;
use crate::actors::bundle::BundleActor;
use crate::api::CRCBundle;
use crate::metrics::Metrics;
use crate::resources::bundle::JobSettings;
use crate::sim::bundles;
use crate::sim::file_server::{Fault, FileServer};
use crate::testenv::{self, ControlPlane};
use crate::{manifests, operator, sim};

/// Namespace the demo runs the operator in.
pub const OPERATOR_NAMESPACE: &str = "guestcluster-system";
const FIELD_MANAGER: &str = "guestcluster-demo";

/// Errors that end the demo.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    ControlPlane(#[from] testenv::Error),
    #[error("applying the samples: {0}")]
    Samples(#[from] manifests::Error),
    #[error("reading {path}: {source}")]
    Read {
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
}

/// How the demo runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Keep the control plane and operator up until Ctrl-C. `None`: only when stdout is a
    /// terminal, so scripted runs finish.
    pub keep_running: Option<bool>,
    /// Where the samples live.
    pub samples_dir: std::path::PathBuf,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            keep_running: None,
            samples_dir: Path::new(env!("CARGO_MANIFEST_DIR")).join("samples"),
        }
    }
}

struct Progress(Instant);

impl Progress {
    fn step(&self, what: impl std::fmt::Display) {
        println!("[{:>6.1}s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// Runs the demo end to end.
pub async fn run(opts: Options) -> Result<(), Error> {
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
    let result = drive(&cp, &opts, &progress).await;
    progress.step("stopping the control plane");
    let stopped = cp.shutdown().await;
    result.and(stopped.map_err(Error::from))
}

async fn drive(cp: &ControlPlane, opts: &Options, progress: &Progress) -> Result<(), Error> {
    let client = cp.client()?;
    ensure_namespace(&client, OPERATOR_NAMESPACE).await?;

    let sim_root = cp.state_dir().join("sim");
    progress.step(format!(
        "starting the simulated cluster (KubeVirt, CDI, a node, CRC guests) in {}",
        sim_root.display()
    ));
    let mut sim = sim::Sim::start(
        client.clone(),
        sim::Options {
            root: sim_root.clone(),
            timings: sim::Timings::realistic(),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            guestcluster_bin: std::env::current_exe()
                .map_err(|e| Error::Operator(e.to_string()))?,
            our_image_prefix: JOB_IMAGE_REPO.to_owned(),
            node_name: "demo-node".to_owned(),
        },
    )
    .await
    .map_err(|e| Error::Operator(e.to_string()))?;
    sim.serve_guest_apis(cp.apiserver_launcher());

    progress.step(format!(
        "building CRC bundles {} (sealed guest disks, converted with qemu-img) for the local mirror",
        DEMO_VERSIONS.join(" and ")
    ));
    let mirror = Mirror::start(&sim_root.join("mirror")).await?;
    for served in &mirror.bundles {
        progress.step(format!("  serving {}", served.bundle_url));
    }

    progress.step(format!(
        "starting the operator in namespace {OPERATOR_NAMESPACE} (leader election on)"
    ));
    let (stop_tx, stop_rx) = oneshot::channel::<()>();
    let (bound_tx, bound_rx) = oneshot::channel();
    let options = operator::Options {
        namespace: OPERATOR_NAMESPACE.to_owned(),
        leader_elect: true,
        identity: operator::default_identity(),
        health_addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        metrics_addr: Some(SocketAddr::from(([127, 0, 0, 1], 0))),
        tree: Default::default(),
        jobs: JobSettings {
            image: format!("{JOB_IMAGE_REPO}:demo"),
            prep_service_account: "default".to_owned(),
        },
    };
    let metrics = Metrics::default();
    let op = tokio::spawn(operator::run(
        client.clone(),
        options,
        metrics.clone(),
        async {
            let _ = stop_rx.await;
        },
        move |bound| {
            let _ = bound_tx.send(bound);
        },
    ));
    let bound = bound_rx
        .await
        .map_err(|_| Error::Operator("exited before listening".into()))?;

    progress.step(format!(
        "creating CRCBundles {} from the local mirror (the sample pool uses the second)",
        DEMO_VERSIONS.map(bundle_name).join(" and ")
    ));
    mirror.apply_bundles(&client).await?;

    progress.step(format!("applying {}", opts.samples_dir.display()));
    let applied =
        manifests::apply_all(&client, read_samples(&opts.samples_dir)?, FIELD_MANAGER).await?;
    for obj in &applied {
        let kind = obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("?");
        let ns = obj
            .metadata
            .namespace
            .as_deref()
            .map(|n| format!("{n}/"))
            .unwrap_or_default();
        progress.step(format!(
            "  applied {kind} {ns}{}",
            obj.metadata.name.as_deref().unwrap_or("?")
        ));
    }

    progress.step("waiting for the operator to observe every CRCBundle");
    let bundles: Api<CRCBundle> = Api::all(client.clone());
    wait_until_observed(&bundles, Duration::from_secs(120), progress).await?;
    for version in DEMO_VERSIONS {
        let name = bundle_name(version);
        progress.step(format!("waiting for the download of {name} (prep Job: download, verify, extract, qemu-img convert to raw, publish the key)"));
        let settled =
            wait_until_settled(&bundles, &name, Duration::from_secs(300), progress).await?;
        if let Some(status) = &settled.status {
            progress.step(format!(
                "  {name} is {:?}: OpenShift {}, raw disk sha256 {}, {} bytes virtual",
                status
                    .phase
                    .unwrap_or(crate::api::bundle::BundlePhase::Pending),
                status.ocp_version.as_deref().unwrap_or("?"),
                status.disk_sha256.as_deref().unwrap_or("?"),
                status.disk_virtual_size.unwrap_or_default(),
            ));
        }
    }

    println!();
    print_kubectl(
        cp,
        &[
            "get",
            "crcbundles,clusterpools,clusterinstances,clusterleases",
            "-A",
        ],
    )?;
    println!();
    print_kubectl(
        cp,
        &[
            "get",
            "crcbundles",
            "-o",
            "custom-columns=NAME:.metadata.name,SOURCE:.status.source,READY:.status.conditions[?(@.type==\"Ready\")].status,REASON:.status.conditions[?(@.type==\"Ready\")].reason,MESSAGE:.status.conditions[?(@.type==\"Ready\")].message",
        ],
    )?;
    println!();
    println!(
        "operator: {} bundle actor(s); probes at http://{}/readyz, metrics at http://{}/metrics",
        metrics.live_actors(BundleActor::KIND),
        bound.health.map(|a| a.to_string()).unwrap_or_default(),
        bound.metrics.map(|a| a.to_string()).unwrap_or_default(),
    );
    println!();
    print_kubectl(
        cp,
        &[
            "get",
            "clusterinstances",
            "-A",
            "-o",
            "custom-columns=NAMESPACE:.metadata.namespace,NAME:.metadata.name,PHASE:.status.phase,PROVISIONING:.status.conditions[?(@.type==\"ProvisioningAllowed\")].reason,PLATFORM:.status.conditions[?(@.type==\"HyperConvergedReady\")].reason,READY:.status.conditions[?(@.type==\"Ready\")].reason",
        ],
    )?;
    println!();
    println!(
        "not yet reconciled in this version: the CRC backing of instances (they stop at CRCBackingPending), pool scale-down, leases, and the build source"
    );
    println!();
    let keep_running = opts
        .keep_running
        .unwrap_or_else(|| std::io::stdout().is_terminal());
    if keep_running {
        println!("export KUBECONFIG={}", cp.kubeconfig_path().display());
        println!("export PATH={}:$PATH", cp.bin_dir().display());
        println!("\nThe control plane and operator keep running; press Ctrl-C to stop.");
        operator::shutdown_signal().await;
    } else {
        println!(
            "To keep the control plane and operator up and use kubectl on them, run `make demo`"
        );
        println!("in a terminal, or `cargo run -- demo --keep-running true`.");
    }
    let _ = stop_tx.send(());
    sim.shutdown().await;
    match op.await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(Error::Operator(err.to_string())),
        Err(err) => Err(Error::Operator(err.to_string())),
    }
}

fn read_samples(dir: &Path) -> Result<Vec<kube::api::DynamicObject>, Error> {
    let read_err = |path: &Path| {
        let path = path.display().to_string();
        move |source| Error::Read { path, source }
    };
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .map_err(read_err(dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    let mut objects = Vec::new();
    for path in paths {
        let text = std::fs::read_to_string(&path).map_err(read_err(&path))?;
        objects.extend(manifests::parse(&text)?);
    }
    Ok(objects)
}

async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), Error> {
    let ns =
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
    Api::<Namespace>::all(client.clone())
        .patch(name, &PatchParams::apply(FIELD_MANAGER), &Patch::Apply(ns))
        .await?;
    Ok(())
}

async fn wait_until_observed(
    api: &Api<CRCBundle>,
    deadline: Duration,
    progress: &Progress,
) -> Result<(), Error> {
    let start = Instant::now();
    let mut reported = std::collections::BTreeSet::new();
    loop {
        let list = api.list(&Default::default()).await?;
        let mut pending = Vec::new();
        for b in &list.items {
            let name = b.metadata.name.clone().unwrap_or_default();
            let observed = b.status.as_ref().and_then(|s| s.observed_generation);
            if observed.is_some() && observed == b.metadata.generation {
                if reported.insert(name.clone()) {
                    progress.step(format!(
                        "  CRCBundle {name} observed at generation {}",
                        observed.unwrap_or_default()
                    ));
                }
            } else {
                pending.push(name);
            }
        }
        if pending.is_empty() {
            return Ok(());
        }
        if start.elapsed() > deadline {
            return Err(Error::Timeout(
                deadline,
                format!("CRCBundles to be observed: {}", pending.join(", ")),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn print_kubectl(cp: &ControlPlane, args: &[&str]) -> Result<(), Error> {
    println!("$ kubectl {}", args.join(" "));
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
/// The versions the samples use: the standalone instance's and the pool's.
const DEMO_VERSIONS: [&str; 2] = ["4.16.0", "4.22.7"];

fn bundle_name(version: &str) -> String {
    format!("crc-{version}-amd64")
}

/// The local stand-in for mirror.openshift.com.
struct Mirror {
    _files: FileServer,
    bundles: Vec<Served>,
}

struct Served {
    version: &'static str,
    bundle_url: String,
    sha256_url: String,
}

impl Mirror {
    async fn start(dir: &Path) -> Result<Mirror, Error> {
        let files = FileServer::start(std::net::IpAddr::from([127, 0, 0, 1]))
            .await
            .map_err(|e| Error::Operator(format!("starting the mirror: {e}")))?;
        let mut served = Vec::new();
        for version in DEMO_VERSIONS {
            let bundle = bundles::build(&dir.join(version), &bundles::BundleSpec::new(version))
                .map_err(|e| Error::Operator(format!("building the demo bundle {version}: {e}")))?;
            let prefix = format!("pub/openshift-v4/clients/crc/bundles/openshift/{version}");
            served.push(Served {
                version,
                bundle_url: files.publish(
                    &format!("{prefix}/{}", bundle.file_name),
                    bundle.archive.clone(),
                    Fault::None,
                ),
                sha256_url: files.publish(
                    &format!("{prefix}/sha256sum.txt"),
                    bundle.sha256sum_txt.clone(),
                    Fault::None,
                ),
            });
        }
        Ok(Mirror {
            _files: files,
            bundles: served,
        })
    }

    /// The bundles the samples need, pointed at this mirror (own field manager, so applying the
    /// samples, or a pool creating its bundle, keeps the URLs).
    async fn apply_bundles(&self, client: &kube::Client) -> Result<(), Error> {
        for served in &self.bundles {
            let name = bundle_name(served.version);
            let bundle = serde_json::json!({
                "apiVersion": crate::api::API_VERSION,
                "kind": "CRCBundle",
                "metadata": {"name": name},
                "spec": {"version": served.version, "bundleURL": served.bundle_url, "sha256URL": served.sha256_url, "goldenVolumeSize": "1Gi"},
            });
            Api::<CRCBundle>::all(client.clone())
                .patch(
                    &name,
                    &PatchParams::apply("guestcluster-demo-mirror"),
                    &Patch::Apply(bundle),
                )
                .await?;
        }
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
    use crate::api::bundle::BundlePhase;
    let start = Instant::now();
    let mut last = String::new();
    loop {
        let bundle = api.get(name).await?;
        if let Some(status) = &bundle.status {
            if let Some(ready) = crate::api::conditions::find(
                &status.conditions,
                crate::api::conditions::types::READY,
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
