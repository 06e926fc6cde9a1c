//! Scale benchmark: the operator (release build) against many objects on the embedded control
//! plane, with the platform operands present but no simulation running pods, so instances wait
//! for bundles whose prep Jobs never start — the steady state of a large, busy cluster.
//!
//! `make bench-scale` (or `cargo bench --bench scale -- [--instances 100,1000] [--pools 20]
//! [--bundles 20] [--idle-seconds 60] [--state bundle-not-ready,platform-absent,…|all]
//! [--resync-period 20s]`). Each
//! `--state` is a waiting state the objects can sit in for hours ([`WaitState`]); for each size
//! and state it prints, from one run:
//! - the time from the operator's start until every object has a status;
//! - the operator's peak (`VmHWM`) and steady (`VmRSS`) resident memory;
//! - API requests per second while idle, minus the same cluster's rate without the operator
//!   (measured first, in the same run), from the API server's `apiserver_request_total`;
//! - the requests by verb and resource during convergence (the benchmark's own polling
//!   subtracted);
//! - then, with the simulation, the demo's pool of two: the median and worst hand-off (a watched
//!   step finished → the operator's next write for that object; `sim::handoffs`).
//!   `--no-handoffs` skips it.
//!
//! `GUESTCLUSTER_BIN=<path>` runs another operator binary (an earlier build, for a before/after).
//!
//! Numbers are measurements on a shared machine, not assertions: see `docs/performance.md`.
#![allow(clippy::disallowed_methods)] // the benchmark writes its objects as a user would

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use guestcluster::api::{CRCBundle, ClusterInstance, ClusterLease, ClusterPool};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

const NAMESPACE: &str = "scale";

/// What every object waits for, set up before the operator starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum WaitState {
    /// Platform ready, the namespace enabled with its pull secret: instances wait for bundles
    /// whose prep Jobs never start (no simulation runs pods).
    BundleNotReady,
    /// No KubeVirt or CDI yet (the operator installed first): `OperandNotFound`.
    PlatformAbsent,
    /// KubeVirt present but still deploying.
    PlatformNotReady,
    /// The namespace lacks `guestcluster.opdev.io/enabled`.
    NamespaceNotEnabled,
    /// The namespace has no default pull secret.
    PullSecretMissing,
    /// No bundle exists for the pools' `crcVersion`s and the operator may make none (its default
    /// `--pool-crc-versions`, which allows none).
    VersionNotAllowed,
    /// Every pool at its `maxSize`, with one Pending ClusterLease per ten instances.
    PoolAtMax,
}

impl WaitState {
    const ALL: [WaitState; 7] = [
        WaitState::BundleNotReady,
        WaitState::PlatformAbsent,
        WaitState::PlatformNotReady,
        WaitState::NamespaceNotEnabled,
        WaitState::PullSecretMissing,
        WaitState::VersionNotAllowed,
        WaitState::PoolAtMax,
    ];

    fn name(self) -> &'static str {
        match self {
            WaitState::BundleNotReady => "bundle-not-ready",
            WaitState::PlatformAbsent => "platform-absent",
            WaitState::PlatformNotReady => "platform-not-ready",
            WaitState::NamespaceNotEnabled => "namespace-not-enabled",
            WaitState::PullSecretMissing => "pull-secret-missing",
            WaitState::VersionNotAllowed => "version-not-allowed",
            WaitState::PoolAtMax => "pool-at-max",
        }
    }

    fn parse(list: &str) -> Vec<WaitState> {
        if list == "all" {
            return Self::ALL.to_vec();
        }
        list.split(',')
            .map(|name| {
                Self::ALL
                    .into_iter()
                    .find(|s| s.name() == name)
                    .unwrap_or_else(|| {
                        let names: Vec<_> = Self::ALL.iter().map(|s| s.name()).collect();
                        panic!("--state {name}: one of {}, or all", names.join(", "))
                    })
            })
            .collect()
    }
}

struct Args {
    sizes: Vec<usize>,
    states: Vec<WaitState>,
    pools: usize,
    bundles: usize,
    idle: Duration,
    /// Also run the pool-of-two flow with the simulation and report the hand-offs.
    handoffs: bool,
    /// The operator's `--resync-period`, so that the idle window holds resyncs (unset: the
    /// operator's default, 5 minutes, which a short window misses).
    resync: Option<String>,
}

fn args() -> Args {
    let mut args = Args {
        sizes: vec![100, 1000],
        states: vec![WaitState::BundleNotReady],
        pools: 20,
        bundles: 20,
        idle: Duration::from_secs(60),
        handoffs: true,
        resync: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| panic!("{arg} needs a value"));
        match arg.as_str() {
            "--instances" => {
                args.sizes = value()
                    .split(',')
                    .map(|n| n.parse().expect("--instances: numbers"))
                    .collect()
            }
            "--state" => args.states = WaitState::parse(&value()),
            "--pools" => args.pools = value().parse().expect("--pools: a number"),
            "--bundles" => args.bundles = value().parse().expect("--bundles: a number"),
            "--idle-seconds" => {
                args.idle = Duration::from_secs(value().parse().expect("--idle-seconds: a number"))
            }
            "--no-handoffs" => args.handoffs = false,
            "--resync-period" => args.resync = Some(value()),
            // cargo bench passes `--bench`; filters are not meaningful here.
            _ => {}
        }
    }
    args
}

fn main() {
    let args = args();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let mut reports = Vec::new();
    for &state in &args.states {
        for &n in &args.sizes {
            reports.push(runtime.block_on(run(n, state, &args)));
        }
    }
    let handoffs = args.handoffs.then(|| runtime.block_on(handoffs()));
    println!();
    println!(
        "## Scale benchmark ({} pools, {} bundles)",
        args.pools, args.bundles
    );
    println!();
    println!(
        "| state | instances | all have a status | peak RSS | steady RSS | idle req/s (operator − baseline) | requests during convergence |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in &reports {
        println!(
            "| {} | {} | {:.1} s | {:.1} MiB | {:.1} MiB | {:.2} ({:.2} − {:.2}) | {} |",
            r.state.name(),
            r.instances,
            r.converged.as_secs_f64(),
            r.peak_rss_kib as f64 / 1024.0,
            r.steady_rss_kib as f64 / 1024.0,
            r.idle_rate - r.baseline_rate,
            r.idle_rate,
            r.baseline_rate,
            r.convergence_total,
        );
    }
    for r in &reports {
        print_requests(
            &format!(
                "Requests by verb and resource while {} instances converged ({}):",
                r.instances,
                r.state.name()
            ),
            &r.by_verb_resource,
            0,
        );
    }
    for r in &reports {
        print_requests(
            &format!(
                "Requests per second by verb and resource while idle with {} instances, {} (operator and cluster):",
                r.instances,
                r.state.name()
            ),
            &r.idle_by_verb_resource,
            2,
        );
    }
    if let Some(summary) = handoffs {
        println!();
        println!(
            "Hand-offs over a pool of two (the demo's flow with the simulation; a watched step finished → the operator's next write for that object):"
        );
        match summary {
            Some(summary) => println!("{summary}"),
            None => println!("none seen"),
        }
    }
}

/// Prints `title`, then the non-zero counts (or rates) of `requests` by verb and resource, largest
/// first, with `decimals` digits after the point.
fn print_requests(title: &str, requests: &BTreeMap<(String, String), f64>, decimals: usize) {
    println!();
    println!("{title}");
    let mut rows: Vec<_> = requests.iter().filter(|(_, n)| **n > 0.0).collect();
    rows.sort_by(|a, b| b.1.total_cmp(a.1));
    for ((verb, resource), n) in rows {
        println!("  {verb:>7} {resource:<40} {n:>8.decimals$}");
    }
}

/// The demo's flow (a downloaded bundle, a pool of two Ready instances) with the simulation, the
/// operator under test as a process; its hand-offs as the recorder saw them.
async fn handoffs() -> Option<sim::handoffs::Summary> {
    eprintln!(
        "[scale] hand-offs: the demo's flow with operator {}",
        operator_binary().display()
    );
    let report = sim::demo::run(sim::demo::Options {
        keep_running: Some(false),
        guestcluster_bin: Some(env!("CARGO_BIN_EXE_guestcluster").into()),
        operator_bin: Some(operator_binary()),
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the demo's flow failed: {e}"));
    report.handoffs
}

struct Report {
    state: WaitState,
    instances: usize,
    converged: Duration,
    peak_rss_kib: u64,
    steady_rss_kib: u64,
    baseline_rate: f64,
    idle_rate: f64,
    /// Requests by verb and resource while idle (operator running), per second.
    idle_by_verb_resource: BTreeMap<(String, String), f64>,
    convergence_total: f64,
    by_verb_resource: BTreeMap<(String, String), f64>,
}

async fn run(n: usize, state: WaitState, args: &Args) -> Report {
    eprintln!(
        "[scale] {n} instances, {}, operator {}: starting a control plane",
        state.name(),
        operator_binary().display()
    );
    // No kube-controller-manager: its reactions to the operator's objects (a PersistentVolume
    // binder retrying unbindable claims, a Job controller retrying pods) are the cluster's
    // traffic, not the operator's, and would drown the operator's own idle rate.
    let cp = testenv::ControlPlane::start(testenv::Options {
        controller_manager: false,
        ..Default::default()
    })
    .await
    .unwrap_or_else(|e| panic!("the control plane did not start: {e} (run `make controlplane`)"));
    let client = cp.client().expect("client");
    if state != WaitState::PlatformAbsent {
        sim::platform::ensure(&client)
            .await
            .expect("platform operands");
    }
    if state == WaitState::PlatformNotReady {
        still_deploying(&client).await;
    }
    create_objects(&client, n, state, args).await;
    eprintln!("[scale] objects created; measuring the cluster without the operator");

    let before = request_counts(&client).await;
    tokio::time::sleep(args.idle).await;
    let after = request_counts(&client).await;
    let baseline_rate = total(&after, &before) / args.idle.as_secs_f64();

    eprintln!("[scale] starting the operator");
    let log = tempfile::NamedTempFile::new().expect("log file");
    let mut operator = Operator::start(&cp, log.path(), args.resync.as_deref());
    let started = Instant::now();
    let at_start = request_counts(&client).await;
    let mut polls = 0.0;
    loop {
        let missing = without_status(&client).await;
        polls += 1.0;
        if missing == 0 {
            break;
        }
        if started.elapsed() > Duration::from_secs(1800) {
            panic!(
                "{missing} objects still have no status after 30 minutes; operator log: {}",
                log.path().display()
            );
        }
        operator.check_running(log.path());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let converged = started.elapsed();
    let at_converged = request_counts(&client).await;
    let mut by_verb_resource = delta(&at_converged, &at_start);
    // The benchmark's own polling: one LIST of each kind per poll (and the metrics GETs).
    for resource in [
        "clusterinstances",
        "clusterpools",
        "crcbundles",
        "clusterleases",
    ] {
        if let Some(count) = by_verb_resource.get_mut(&("LIST".into(), resource.into())) {
            *count -= polls;
        }
    }
    let convergence_total = by_verb_resource.values().sum();
    eprintln!(
        "[scale] converged in {:.1}s; settling, then measuring idle",
        converged.as_secs_f64()
    );

    // Past the last status writes' watch events and requeues of convergence.
    tokio::time::sleep(Duration::from_secs(20)).await;
    let before = request_counts(&client).await;
    tokio::time::sleep(args.idle).await;
    let after = request_counts(&client).await;
    let idle_rate = total(&after, &before) / args.idle.as_secs_f64();
    let idle_by_verb_resource = delta(&after, &before)
        .into_iter()
        .map(|(k, v)| (k, v / args.idle.as_secs_f64()))
        .collect();
    // What the objects wait for, so the idle figure can be read against it.
    for (kind, status) in [
        ("ClusterInstance scale/crc-0", {
            let i = Api::<ClusterInstance>::namespaced(client.clone(), NAMESPACE)
                .get("crc-0")
                .await
                .expect("instance");
            serde_json::to_value(i.status).unwrap_or_default()
        }),
        ("ClusterPool scale/pool-0", {
            let p = Api::<ClusterPool>::namespaced(client.clone(), NAMESPACE)
                .get("pool-0")
                .await
                .expect("pool");
            serde_json::to_value(p.status).unwrap_or_default()
        }),
        ("CRCBundle crc-4.16.0-amd64", {
            let b = Api::<CRCBundle>::all(client.clone())
                .get_opt("crc-4.16.0-amd64")
                .await
                .expect("bundle");
            serde_json::to_value(b.and_then(|b| b.status)).unwrap_or_default()
        }),
    ] {
        let ready = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .unwrap_or_default();
        eprintln!(
            "[scale] {kind}: phase {}, Ready {} {}: {}",
            status["phase"], ready["status"], ready["reason"], ready["message"]
        );
    }
    let (peak_rss_kib, steady_rss_kib) = operator.rss_kib();
    drop(operator);
    cp.shutdown().await.expect("control plane shutdown");
    Report {
        state,
        instances: n,
        converged,
        peak_rss_kib,
        steady_rss_kib,
        baseline_rate,
        idle_rate,
        idle_by_verb_resource,
        convergence_total,
        by_verb_resource,
    }
}

/// KubeVirt as it is while its operator still deploys it.
async fn still_deploying(client: &kube::Client) {
    let resource = sim::platform::kubevirt_resource();
    let api: Api<kube::api::DynamicObject> =
        Api::namespaced_with(client.clone(), sim::platform::KUBEVIRT_NAMESPACE, &resource);
    let status = json!({"status": {"phase": "Deploying", "conditions": [
        {"type": "Available", "status": "False", "reason": "Deploying", "message": "benchmark"},
        {"type": "Progressing", "status": "True", "reason": "Deploying", "message": "benchmark"}]}});
    api.patch_status(
        "kubevirt",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(status),
    )
    .await
    .expect("KubeVirt deploying");
}

async fn create_objects(client: &kube::Client, n: usize, state: WaitState, args: &Args) {
    let labels = if state == WaitState::NamespaceNotEnabled {
        json!({})
    } else {
        json!({guestcluster::api::labels::NAMESPACE_ENABLED: "true"})
    };
    let ns: Namespace =
        serde_json::from_value(json!({"metadata": {"name": NAMESPACE, "labels": labels}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
    // The namespace's pull secret, so instances wait for their bundles (not for the secret).
    let pull: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
        "metadata": {"name": guestcluster::api::template::DEFAULT_PULL_SECRET},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{}}"}}))
    .unwrap();
    if state != WaitState::PullSecretMissing {
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), NAMESPACE)
            .create(&PostParams::default(), &pull)
            .await
            .expect("pull secret");
    }
    let version = |i: usize| format!("4.16.{}", i % args.bundles);
    let bundles: Api<CRCBundle> = Api::all(client.clone());
    let bundle_count = if state == WaitState::VersionNotAllowed {
        0
    } else {
        args.bundles
    };
    for b in 0..bundle_count {
        let bundle: CRCBundle = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "CRCBundle",
            "metadata": {"name": format!("crc-{}-amd64", version(b))},
            "spec": {"version": version(b), "arch": "amd64"}}))
        .unwrap();
        bundles
            .create(&PostParams::default(), &bundle)
            .await
            .expect("bundle");
    }
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), NAMESPACE);
    // At its maximum, a pool holds exactly the instances made for it below.
    let max_size = if state == WaitState::PoolAtMax {
        n.div_ceil(args.pools)
    } else {
        n.div_ceil(args.pools) + 1
    };
    for p in 0..args.pools {
        let pool: ClusterPool = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterPool",
            "metadata": {"name": format!("pool-{p}")},
            "spec": {"type": "crc", "minSize": 0, "maxSize": max_size,
                     "template": {"crcVersion": version(p), "ocpVersion": version(p),
                                  "memory": "16Gi", "cores": 4}}}))
        .unwrap();
        pools
            .create(&PostParams::default(), &pool)
            .await
            .expect("pool");
    }
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), NAMESPACE);
    for i in 0..n {
        let p = i % args.pools;
        // At its maximum, a pool counts these as its members, as if it had made them.
        let labels = if state == WaitState::PoolAtMax {
            json!({guestcluster::api::labels::POOL: format!("pool-{p}"),
                   guestcluster::api::labels::MANAGED_BY: guestcluster::api::labels::MANAGED_BY_OPERATOR})
        } else {
            json!({})
        };
        let instance: ClusterInstance = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterInstance",
            "metadata": {"name": format!("crc-{i}"), "labels": labels},
            "spec": {"type": "crc", "poolRef": {"name": format!("pool-{p}")},
                     "template": {"crcVersion": version(p), "ocpVersion": version(p),
                                  "memory": "16Gi", "cores": 4}}}))
        .unwrap();
        instances
            .create(&PostParams::default(), &instance)
            .await
            .expect("instance");
    }
    if state == WaitState::PoolAtMax {
        let leases: Api<ClusterLease> = Api::namespaced(client.clone(), NAMESPACE);
        for l in 0..n.div_ceil(10) {
            let lease: ClusterLease = serde_json::from_value(json!({
                "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterLease",
                "metadata": {"name": format!("lease-{l}")},
                "spec": {"poolRef": {"name": format!("pool-{}", l % args.pools)}, "ttl": "2h"}}))
            .unwrap();
            leases
                .create(&PostParams::default(), &lease)
                .await
                .expect("lease");
        }
    }
}

/// How many of our objects have no status yet.
async fn without_status(client: &kube::Client) -> usize {
    let lp = ListParams::default();
    let instances = Api::<ClusterInstance>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await
        .expect("list instances");
    let pools = Api::<ClusterPool>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await
        .expect("list pools");
    let bundles = Api::<CRCBundle>::all(client.clone())
        .list(&lp)
        .await
        .expect("list bundles");
    let leases = Api::<ClusterLease>::namespaced(client.clone(), NAMESPACE)
        .list(&lp)
        .await
        .expect("list leases");
    leases.items.iter().filter(|o| o.status.is_none()).count()
        + instances
            .items
            .iter()
            .filter(|o| o.status.is_none())
            .count()
        + pools.items.iter().filter(|o| o.status.is_none()).count()
        + bundles.items.iter().filter(|o| o.status.is_none()).count()
}

/// `apiserver_request_total` summed by (verb, resource).
async fn request_counts(client: &kube::Client) -> BTreeMap<(String, String), f64> {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.expect("GET /metrics");
    let mut counts = BTreeMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(&format!("{name}=\"")))
                .map(|v| v.trim_end_matches('"').to_owned())
                .unwrap_or_default()
        };
        let mut resource = label("resource");
        let subresource = label("subresource");
        if !subresource.is_empty() {
            resource = format!("{resource}/{subresource}");
        }
        *counts.entry((label("verb"), resource)).or_insert(0.0) +=
            value.trim().parse::<f64>().unwrap_or(0.0);
    }
    counts
}

fn delta(
    after: &BTreeMap<(String, String), f64>,
    before: &BTreeMap<(String, String), f64>,
) -> BTreeMap<(String, String), f64> {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0)))
        .collect()
}

fn total(after: &BTreeMap<(String, String), f64>, before: &BTreeMap<(String, String), f64>) -> f64 {
    delta(after, before).values().sum()
}

struct Operator(Child);

/// The operator under test: this build's, or `$GUESTCLUSTER_BIN` (e.g. an earlier release
/// build kept aside, to measure before and after a change in the same session).
fn operator_binary() -> std::path::PathBuf {
    std::env::var_os("GUESTCLUSTER_BIN")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| env!("CARGO_BIN_EXE_guestcluster").into())
}

impl Operator {
    fn start(cp: &testenv::ControlPlane, log: &std::path::Path, resync: Option<&str>) -> Self {
        let mut command = Command::new(operator_binary());
        // A benchmark killed midway must not leave its operator running: it would go on
        // reconciling, and a later run's control plane on the same port would count its
        // requests.
        // SAFETY: prctl is async-signal-safe and touches only the child being started.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(&mut command, || {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = command
            .args(["operator", "--namespace", "default", "--leader-elect=false"])
            // No listener on a fixed port: two benchmarks (a before and an after) may run at once.
            .args([
                "--health-probe-bind-address=0",
                "--metrics-bind-address=0",
                "--dashboard-bind-address=0",
            ])
            .args(resync.map(|period| format!("--resync-period={period}")))
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).expect("log file"))
            .spawn()
            .expect("spawn guestcluster operator");
        Self(child)
    }

    fn check_running(&mut self, log: &std::path::Path) {
        if let Ok(Some(status)) = self.0.try_wait() {
            panic!(
                "the operator exited ({status}): {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
    }

    /// (`VmHWM`, `VmRSS`) in KiB.
    fn rss_kib(&self) -> (u64, u64) {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", self.0.id())).unwrap_or_default();
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
                .unwrap_or(0)
        };
        (field("VmHWM:"), field("VmRSS:"))
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
