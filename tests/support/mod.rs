//! Helpers shared by the integration tests: the shared control plane, unique names, polling with
//! a deadline, the samples, kubectl, and the operator as a child process.
#![allow(dead_code)] // each test binary uses a different subset

pub mod build;
pub mod crc;
pub mod e2e;
pub mod helm;
pub mod leaks;
pub mod shared_sim;
pub mod world;

use std::future::Future;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use guestcluster::manifests;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use testenv::ControlPlane;

/// How long any single wait in a test may take before it fails with what it observed.
pub const DEADLINE: Duration = Duration::from_secs(60);

async fn control_plane() -> &'static ControlPlane {
    match ControlPlane::shared().await {
        Ok(cp) => cp,
        Err(err) => panic!("the test control plane did not start: {err}"),
    }
}

/// Log files of every operator this test process started.
static OPERATOR_LOGS: std::sync::Mutex<Vec<PathBuf>> = std::sync::Mutex::new(Vec::new());

/// Fails the test when an operator of this process reported a field the API server dropped from
/// one of its writes (its write path reads every write back): on a real cluster that setting
/// would be silently lost. Every wait and the end of every operator run check it, so each
/// scenario reads back what it caused to be written.
pub fn assert_stored_as_sent() {
    let logs = OPERATOR_LOGS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone();
    let marker = guestcluster::write::DROPPED_MESSAGE;
    let dropped: Vec<String> = logs
        .iter()
        .filter_map(|log| std::fs::read_to_string(log).ok())
        .flat_map(|text| {
            text.lines()
                .filter(|line| line.contains(marker))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        dropped.is_empty(),
        "the API server dropped fields the operator wrote (fix the builder, or the schema in \
         testenv/src/external-crds if that is wrong):\n{}",
        dropped.join("\n")
    );
}

/// A client of the shared control plane, bound to the calling test's runtime.
pub async fn client() -> kube::Client {
    control_plane()
        .await
        .client()
        .expect("client for the test control plane")
}

/// The shared control plane's client configuration, for a test that builds its own clients.
pub async fn config() -> kube::Config {
    control_plane().await.config()
}

/// Evicts pod `ns/name` once, as each round of `kubectl drain` does: the code and message when
/// refused. (A client's default retries would repeat a 429 for minutes.)
pub async fn evict_once(ns: &str, name: &str) -> Result<(), (u16, String)> {
    let mut config = config().await;
    config.default_retry = false;
    let client = kube::Client::try_from(config).expect("a client without retries");
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, ns);
    match pods.evict(name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) => Err((status.code, status.message)),
        Err(err) => panic!("evicting {ns}/{name}: {err}"),
    }
}

/// A name unique within this test process run: `<prefix>-<pid>-<n>`.
pub fn unique(prefix: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Creates a fresh namespace for one test and returns its name.
pub async fn namespace(client: &kube::Client, prefix: &str) -> String {
    let name = unique(prefix);
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create test namespace");
    name
}

/// Creates the namespace `name` unless it exists; returns its name.
pub async fn ensure_namespace(client: &kube::Client, name: &str) -> String {
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": name}})).unwrap();
    match Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(e) => panic!("create namespace {name}: {e}"),
    }
    name.to_owned()
}

/// Polls `check` until it yields a value; panics after [`DEADLINE`] saying what it waited for.
pub async fn wait_for<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_within(what, DEADLINE, check).await
}

/// [`wait_for`] for whole guest provisioning flows (clone, boot, agent, rollout): a deadline
/// that only catches a hang, never a slow machine.
pub async fn wait_long<T, F, Fut>(what: &str, check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    wait_within(what, Duration::from_secs(600), check).await
}

/// Polls `check` until it yields a value; panics after `deadline` saying what it waited for.
pub async fn wait_within<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    // One look may not hang the wait: a stalled request is abandoned and the next look makes a
    // fresh one, and the deadline holds even if every look stalls.
    const LOOK: Duration = Duration::from_secs(30);
    let start = Instant::now();
    loop {
        let left = deadline
            .saturating_sub(start.elapsed())
            .max(Duration::from_millis(100));
        if let Ok(Some(value)) = tokio::time::timeout(LOOK.min(left), check()).await {
            assert_stored_as_sent();
            return value;
        }
        if start.elapsed() > deadline {
            // A dropped field is a likelier cause of a hang than a slow machine.
            assert_stored_as_sent();
            panic!("timed out after {deadline:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The ClusterInstances `instances` lists with `params` that are Ready, or `None` when the list
/// fails (a look for [`wait_for`] and its kin).
pub async fn ready_instances(
    instances: &Api<guestcluster::api::ClusterInstance>,
    params: &ListParams,
) -> Option<Vec<guestcluster::api::ClusterInstance>> {
    let list = instances.list(params).await.ok()?;
    Some(
        list.items
            .into_iter()
            .filter(|i| {
                i.status.as_ref().and_then(|s| s.phase)
                    == Some(guestcluster::api::instance::InstancePhase::Ready)
            })
            .collect(),
    )
}

/// The object once its `type_` condition has `status` and `reason` at its current generation.
pub async fn with_condition<K>(
    api: &Api<K>,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> K
where
    K: guestcluster::api::conditions::Conditioned
        + kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    wait_for(&format!("{name}: {type_}={status} {reason}"), || async {
        let object = api.get(name).await.ok()?;
        guestcluster::api::conditions::holds(&object, type_, status, reason).then_some(object)
    })
    .await
}

/// Project root.
pub fn project_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Applies every object in `samples/*.yaml` (server-side apply) and returns them as stored.
pub async fn apply_samples(client: &kube::Client) -> Result<Vec<DynamicObject>, String> {
    let mut objects = Vec::new();
    for entry in std::fs::read_dir(project_dir().join("samples")).map_err(|e| e.to_string())? {
        let path = entry.map_err(|e| e.to_string())?.path();
        if path.extension().is_some_and(|x| x == "yaml") {
            let text = std::fs::read_to_string(&path).map_err(|e| e.to_string())?;
            objects
                .extend(manifests::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?);
        }
    }
    manifests::apply_all(client, objects, "guestcluster-tests")
        .await
        .map_err(|e| e.to_string())
}

/// Runs the built `kubectl` against the shared control plane; panics with stderr on failure.
pub async fn kubectl(args: &[&str]) -> String {
    let cp = control_plane().await;
    let out = cp.kubectl().args(args).output().expect("run kubectl");
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Where the operator's newest process says its `listener` is bound (its `listening` log line,
/// text or JSON). The harness passes port 0: a port picked ahead and freed is one any client
/// connection may take before the process (or its restart) binds it.
fn bound_addr(log: &str, listener: &str) -> Option<SocketAddr> {
    let line = log.lines().rev().find(|l| l.contains("listening"))?;
    [
        format!("{listener}=Some("),
        format!("\"{listener}\":\"Some("),
    ]
    .iter()
    .find_map(|key| {
        let rest = &line[line.find(key.as_str())? + key.len()..];
        rest[..rest.find(')')?].parse().ok()
    })
}

/// The `guestcluster operator` binary running as a child process against the shared control plane.
pub struct Operator {
    child: Arc<Mutex<Child>>,
    /// Set by [`Operator::restarting`]: brings the process back when it ends by itself.
    keeper: Option<Keeper>,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

/// What a Deployment's kubelet does for the operator's pod: a process that ends by itself (lost
/// leadership on a loaded machine, a crash) is started again, with a line in its log saying so.
/// A kill by the test is not followed by a restart.
struct Keeper {
    stop: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Operator {
    pub async fn start(namespace: &str) -> Self {
        Self::start_named(namespace, "first-operator").await
    }

    /// Starts an operator whose leader identity begins with `name`.
    pub async fn start_named(namespace: &str, name: &str) -> Self {
        Self::start_with(namespace, name, &[], &[]).await
    }

    /// [`Operator::start_named`] with extra arguments and environment.
    pub async fn start_with(
        namespace: &str,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawned(namespace, name, args, env, false).await
    }

    /// [`Operator::start_with`], started again whenever it ends by itself (see [`Keeper`]).
    pub async fn restarting(
        namespace: &str,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        Self::spawned(namespace, name, args, env, true).await
    }

    async fn spawned(
        namespace: &str,
        name: &str,
        args: &[&str],
        env: &[(&str, &str)],
        restart: bool,
    ) -> Self {
        let cp = control_plane().await;
        let dir = tempfile::tempdir().expect("temp dir");
        let log = dir.path().join("operator.log");
        let kubeconfig = cp.kubeconfig_path().to_path_buf();
        let (name, namespace, log_file) = (name.to_owned(), namespace.to_owned(), log.clone());
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let env: Vec<(String, String)> = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let spawn = move || {
            let log = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&log_file)
                .expect("log file");
            Command::new(env!("CARGO_BIN_EXE_guestcluster"))
                .args(["operator", "--namespace", &namespace])
                .arg("--health-probe-bind-address=127.0.0.1:0")
                .arg("--metrics-bind-address=127.0.0.1:0")
                // No dashboard: two processes of one test (leader and standby) would fight over its
                // default port, and every port picked ahead is one a client's connection may take
                // before the process binds it. `tests/helm.rs` serves it.
                .arg("--dashboard-bind-address=0")
                // Tests kill operators (SIGKILL, no release): a short lease lets the next one lead
                // in seconds. The renew deadline keeps a wide margin over a loaded machine's renewals.
                .args([
                    "--leader-elect-lease-duration=5s",
                    "--leader-elect-renew-deadline=4s",
                    "--leader-elect-retry-period=500ms",
                ])
                .env("KUBECONFIG", &kubeconfig)
                .env("POD_NAME", &name)
                .env("RUST_LOG", "info")
                .args(&args)
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("spawn guestcluster operator")
        };
        let child = Arc::new(Mutex::new(spawn()));
        OPERATOR_LOGS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(log.clone());
        let keeper = restart.then(|| {
            let stop = Arc::new(AtomicBool::new(false));
            let (child, stop_seen, log) = (child.clone(), stop.clone(), log.clone());
            let thread = std::thread::spawn(move || {
                while !stop_seen.load(Ordering::SeqCst) {
                    {
                        let mut child = child.lock().unwrap_or_else(PoisonError::into_inner);
                        if stop_seen.load(Ordering::SeqCst) {
                            break;
                        }
                        if let Ok(Some(status)) = child.try_wait() {
                            if let Ok(mut file) =
                                std::fs::OpenOptions::new().append(true).open(&log)
                            {
                                let _ = writeln!(
                                    file,
                                    "[test harness] the operator ended by itself ({status}); starting it again, as its Deployment would"
                                );
                            }
                            *child = spawn();
                        }
                    }
                    std::thread::sleep(Duration::from_millis(200));
                }
            });
            Keeper { stop, thread }
        });
        Self {
            child,
            keeper,
            log,
            _dir: dir,
        }
    }

    /// `(status, body)` of a GET on the probe listener; `(0, error)` when it does not answer.
    pub async fn get(&self, path: &str) -> (u16, String) {
        self.get_from("health", path).await
    }

    pub async fn get_metrics(&self) -> (u16, String) {
        self.get_from("metrics", "/metrics").await
    }

    async fn get_from(&self, listener: &str, path: &str) -> (u16, String) {
        match bound_addr(&self.log(), listener) {
            Some(addr) => http_get(addr, path).await,
            None => (0, format!("no {listener} listener logged yet")),
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn log_path(&self) -> &Path {
        &self.log
    }

    fn child(&self) -> std::sync::MutexGuard<'_, Child> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Stops restarting the process (the test ends it now).
    fn keep_no_more(&mut self) {
        if let Some(keeper) = self.keeper.take() {
            keeper.stop.store(true, Ordering::SeqCst);
            let _ = keeper.thread.join();
        }
    }

    /// Sends SIGTERM and waits (up to [`DEADLINE`]) for the exit code.
    pub async fn terminate(&mut self) -> Option<i32> {
        self.keep_no_more();
        let pid = libc::pid_t::try_from(self.child().id()).expect("pid fits");
        // SAFETY: signalling our own child process by pid.
        unsafe { libc::kill(pid, libc::SIGTERM) };
        let status = wait_for("operator exit", || {
            let exited = self.child().try_wait().expect("wait for operator");
            async move { exited }
        })
        .await;
        status.code()
    }
}

impl Operator {
    /// Kills the process at once (SIGKILL): no graceful stop, no lease release.
    pub fn kill(&mut self) {
        self.keep_no_more();
        let mut child = self.child();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// The process's peak resident memory (`VmHWM`) in KiB, while it runs.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        let pid = self.child().id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
        if !std::thread::panicking() {
            assert_stored_as_sent();
        }
    }
}

async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let path = path.to_owned();
    tokio::task::spawn_blocking(move || {
        let request = || -> std::io::Result<(u16, String)> {
            let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            write!(stream, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n")?;
            let mut response = String::new();
            stream.read_to_string(&mut response)?;
            let code = response
                .split_whitespace()
                .nth(1)
                .and_then(|c| c.parse().ok())
                .unwrap_or(0);
            let body = response
                .split_once("\r\n\r\n")
                .map(|(_, b)| b.to_owned())
                .unwrap_or_default();
            Ok((code, body))
        };
        request().unwrap_or_else(|e| (0, e.to_string()))
    })
    .await
    .expect("http task")
}

/// The `ApiResource` of a platform kind (KubeVirt, CDI, HyperConverged), read untyped.
pub fn platform_resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

/// Creates a platform operand and marks it deployed through the status subresource.
pub async fn deployed(api: &Api<DynamicObject>, ar: &ApiResource, name: &str) {
    let obj = DynamicObject::new(name, ar).data(serde_json::json!({"spec": {}}));
    api.create(&PostParams::default(), &obj)
        .await
        .unwrap_or_else(|e| panic!("create {} {name}: {e}", ar.kind));
    let status = serde_json::json!({"status": {"phase": "Deployed",
        "conditions": [{"type": "Available", "status": "True"}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap_or_else(|e| panic!("status of {} {name}: {e}", ar.kind));
}
