//! Pure planning: a pod spec plus what the kubelet fetched for it becomes the directories and
//! files of the pod's sandbox and one process per container. No I/O here, so every rule of
//! docs/simulation.md ("Node, scheduling and pods") is unit-tested below.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec, Volume};

use super::expand::expand;
use crate::volumes::{ClaimVolume, VolumeMode};

mod env;
pub mod identity;
mod volumes;

use env::{container_env, process_env};
pub use identity::Credentials;
use volumes::{plan_volume, safe_relative};

/// File name that makes `command[0]` mean "the image's guestcluster binary".
pub const OUR_BINARY_NAME: &str = "guestcluster";

/// Why a pod cannot start (yet). The kubelet keeps the pod waiting and retries, as a real one
/// does for a missing Secret; the message lands in the container's waiting state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// Something the pod refers to is missing (may appear later).
    #[error("{0}")]
    Missing(String),
    /// The pod uses something the simulation does not model.
    #[error("not simulated: {0}")]
    Unsupported(String),
    /// The pod's settings cannot work (a root user under `runAsNonRoot`).
    #[error("{0}")]
    Invalid(String),
    /// The volume manager refuses a volume (a Block claim in `volumeMounts`, a Filesystem one in
    /// `volumeDevices`): the pod stays `ContainerCreating` and a `FailedMount` Event says why.
    #[error(
        "unmounted volumes=[{volume}], unattached volumes=[{volume}], failed to process volumes=[{volume}]: {why}"
    )]
    Mount { volume: String, why: String },
}

impl PlanError {
    /// The container waiting reason a kubelet would show.
    pub fn reason(&self) -> &'static str {
        match self {
            PlanError::Missing(_) | PlanError::Unsupported(_) | PlanError::Invalid(_) => {
                "CreateContainerConfigError"
            }
            PlanError::Mount { .. } => "ContainerCreating",
        }
    }
}

/// What a pod refers to outside itself; the kubelet fetches these before planning.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct References {
    pub secrets: BTreeSet<String>,
    pub config_maps: BTreeSet<String>,
    pub claims: BTreeSet<String>,
    /// Audiences of projected service-account tokens (`""` = the API server's default).
    pub token_audiences: BTreeMap<String, Option<i64>>,
}

/// What the kubelet fetched for a pod. A name missing from a map does not exist (or, for a
/// claim, is not bound yet).
#[derive(Debug, Default)]
pub struct Inputs {
    pub secrets: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    pub config_maps: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
    /// Claim name → its volume.
    pub claims: BTreeMap<String, ClaimVolume>,
    /// Audience (`""` = default) → token.
    pub tokens: BTreeMap<String, String>,
}

/// The host side: where and how this pod's processes run.
#[derive(Debug, Clone)]
pub struct Host {
    pub guestcluster_bin: PathBuf,
    /// The API server's URL as pods reach it (in-cluster config's `https://kubernetes.default`).
    pub api_server: String,
    /// Fake tools, first on `PATH`.
    pub tools_bin: PathBuf,
    /// `PATH` of the simulation itself, after the tools.
    pub host_path: String,
    /// `<root>/pods/<namespace>_<pod>_<uid>`.
    pub sandbox: PathBuf,
    pub node_name: String,
    pub host_ip: Ipv4Addr,
    pub pod_ip: Ipv4Addr,
}

/// A file to write before the processes start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileToWrite {
    pub path: PathBuf,
    pub contents: Vec<u8>,
    pub mode: u32,
}

/// A directory the kubelet makes before the processes start, with its mode (`None`: as created).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirToMake {
    pub path: PathBuf,
    pub mode: Option<u32>,
}

pub use crate::permissions::Ownership;

/// One container as a local process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessPlan {
    pub container: String,
    /// Who the process runs as; `None` runs it as the simulation itself (tests of the runner).
    pub credentials: Option<Credentials>,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The whole environment (the simulation's own is not inherited).
    pub env: Vec<(String, String)>,
    pub cwd: PathBuf,
    /// stdout and stderr.
    pub log: PathBuf,
    /// The host file behind the container's `terminationMessagePath`.
    pub termination_log: PathBuf,
    /// `terminationMessagePolicy: FallbackToLogsOnError`: an empty message of a failed
    /// container is taken from the end of its log.
    pub fallback_to_logs: bool,
    /// `resources.limits.memory` in bytes: the container's cgroup `memory.max`.
    pub memory_limit: Option<u64>,
}

/// Everything needed to start a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPlan {
    pub dirs: Vec<DirToMake>,
    pub files: Vec<FileToWrite>,
    /// Applied after the directories and files are in place.
    pub ownership: Vec<Ownership>,
    /// The init containers, run one after another to completion before `processes` start.
    pub init_processes: Vec<ProcessPlan>,
    pub processes: Vec<ProcessPlan>,
}

/// Where a container writes its termination message unless it says otherwise.
pub const DEFAULT_TERMINATION_MESSAGE_PATH: &str = "/dev/termination-log";

/// A path inside the container and where it is on the host.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Mount {
    container_path: String,
    host_path: PathBuf,
}

/// The sandbox directory of a pod: `<root>/pods/<namespace>_<pod>_<uid>`.
pub fn sandbox_dir(root: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root.join("pods").join(format!("{namespace}_{name}_{uid}"))
}

/// Whether `command[0]` names the image's entrypoint binary rather than another program.
pub fn is_our_binary(command0: &str) -> bool {
    Path::new(command0).file_name().and_then(|n| n.to_str()) == Some(OUR_BINARY_NAME)
}

fn spec(pod: &Pod) -> Result<&PodSpec, PlanError> {
    pod.spec
        .as_ref()
        .ok_or_else(|| PlanError::Unsupported("a pod without spec".into()))
}

fn volumes(spec: &PodSpec) -> &[Volume] {
    spec.volumes.as_deref().unwrap_or_default()
}

/// The Secrets, ConfigMaps, claims and tokens a pod refers to.
pub fn references(pod: &Pod) -> References {
    let mut refs = References::default();
    let Some(spec) = pod.spec.as_ref() else {
        return refs;
    };
    for volume in volumes(spec) {
        if let Some(secret) = &volume.secret {
            refs.secrets.extend(secret.secret_name.clone());
        }
        if let Some(cm) = &volume.config_map {
            refs.config_maps.insert(cm.name.clone());
        }
        if let Some(pvc) = &volume.persistent_volume_claim {
            refs.claims.insert(pvc.claim_name.clone());
        }
        let sources = volume.projected.as_ref().and_then(|p| p.sources.as_deref());
        for source in sources.unwrap_or_default() {
            if let Some(secret) = &source.secret {
                refs.secrets.insert(secret.name.clone());
            }
            if let Some(cm) = &source.config_map {
                refs.config_maps.insert(cm.name.clone());
            }
            if let Some(token) = &source.service_account_token {
                refs.token_audiences.insert(
                    token.audience.clone().unwrap_or_default(),
                    token.expiration_seconds,
                );
            }
        }
    }
    for container in &spec.containers {
        for env in container.env.as_deref().unwrap_or_default() {
            let source = env.value_from.as_ref();
            if let Some(key) = source.and_then(|s| s.secret_key_ref.as_ref()) {
                refs.secrets.insert(key.name.clone());
            }
            if let Some(key) = source.and_then(|s| s.config_map_key_ref.as_ref()) {
                refs.config_maps.insert(key.name.clone());
            }
        }
        for from in container.env_from.as_deref().unwrap_or_default() {
            if let Some(secret) = &from.secret_ref {
                refs.secrets.insert(secret.name.clone());
            }
            if let Some(cm) = &from.config_map_ref {
                refs.config_maps.insert(cm.name.clone());
            }
        }
    }
    refs
}

/// Plans the whole pod: sandbox directories, volume files, one process per container.
pub fn plan_pod(pod: &Pod, inputs: &Inputs, host: &Host) -> Result<PodPlan, PlanError> {
    let spec = spec(pod)?;
    // The sandbox is searchable by the pod's users; `HOME` and `TMPDIR` of a container that sets
    // neither are shared scratch space, like an image's `/tmp`.
    let dir = |path: PathBuf, mode: u32| DirToMake {
        path,
        mode: Some(mode),
    };
    let mut plan = PodPlan {
        dirs: vec![
            dir(host.sandbox.clone(), 0o755),
            dir(host.sandbox.join("home"), 0o1777),
            dir(host.sandbox.join("tmp"), 0o1777),
        ],
        files: Vec::new(),
        ownership: Vec::new(),
        init_processes: Vec::new(),
        processes: Vec::new(),
    };
    let fs_group = identity::fs_group(spec)?;
    let mut volume_dirs = BTreeMap::new();
    for volume in volumes(spec) {
        let dir = plan_volume(pod, volume, inputs, host, fs_group, &mut plan)?;
        volume_dirs.insert(volume.name.clone(), dir);
    }
    let container_process = |container: &Container, plan: &mut PodPlan| {
        let mounts = mounts(container, &volume_dirs, inputs, spec, plan)?;
        let kubeconfig = in_cluster_kubeconfig(pod, container, &mounts, host, plan);
        let credentials = identity::credentials(spec, container)?;
        let process = plan_process(pod, container, &mounts, kubeconfig.as_deref(), inputs, host)?;
        // A kubelet creates the termination message file writable by any user of the container.
        plan.files.push(FileToWrite {
            path: process.termination_log.clone(),
            contents: Vec::new(),
            mode: 0o666,
        });
        Ok::<_, PlanError>(ProcessPlan {
            credentials: Some(credentials),
            ..process
        })
    };
    for container in spec.init_containers.as_deref().unwrap_or_default() {
        let process = container_process(container, &mut plan)?;
        plan.init_processes.push(process);
    }
    for container in &spec.containers {
        let process = container_process(container, &mut plan)?;
        plan.processes.push(process);
    }
    Ok(plan)
}

/// Where a kubelet mounts a pod's service account credentials (token, `ca.crt`, `namespace`),
/// and where in-cluster client config reads them.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// What in-cluster config amounts to for a container that mounts service account credentials:
/// a kubeconfig naming the API server, the mounted CA and the mounted token file (re-read by the
/// client as the kubelet rotates it). A container without that mount gets none, so it cannot
/// talk to the API server at all, as in a real pod with `automountServiceAccountToken: false`.
fn in_cluster_kubeconfig(
    pod: &Pod,
    container: &Container,
    mounts: &[Mount],
    host: &Host,
    plan: &mut PodPlan,
) -> Option<PathBuf> {
    let credentials = host_path(SERVICE_ACCOUNT_DIR, mounts)?;
    let path = host
        .sandbox
        .join(format!("{}.in-cluster.kubeconfig", container.name));
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let contents = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{ "name": "in-cluster", "cluster": {
            "server": host.api_server,
            "certificate-authority": format!("{credentials}/ca.crt"),
        }}],
        "users": [{ "name": "service-account", "user": {
            "tokenFile": format!("{credentials}/token"),
        }}],
        "contexts": [{ "name": "in-cluster", "context": {
            "cluster": "in-cluster", "user": "service-account", "namespace": namespace,
        }}],
        "current-context": "in-cluster",
    });
    // Names files only (the token stays in the credentials volume): readable by the pod's user.
    plan.files.push(FileToWrite {
        path: path.clone(),
        contents: contents.to_string().into_bytes(),
        mode: 0o644,
    });
    Some(path)
}

/// A container's mounts, longest container path first (so nested mounts win).
fn mounts(
    container: &Container,
    volume_dirs: &BTreeMap<String, PathBuf>,
    inputs: &Inputs,
    spec: &PodSpec,
    plan: &mut PodPlan,
) -> Result<Vec<Mount>, PlanError> {
    let mut mounts = Vec::new();
    for mount in container.volume_mounts.as_deref().unwrap_or_default() {
        let dir = volume_dirs.get(&mount.name).ok_or_else(|| {
            PlanError::Unsupported(format!("volumeMount of unknown volume {:?}", mount.name))
        })?;
        let claim = volumes(spec)
            .iter()
            .find(|v| v.name == mount.name)
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .and_then(|c| inputs.claims.get(&c.claim_name));
        if let Some(claim) = claim.filter(|c| c.mode == VolumeMode::Block) {
            return Err(mode_mismatch(&mount.name, claim.mode, "volumeMounts"));
        }
        if mount.sub_path_expr.is_some() {
            return Err(PlanError::Unsupported("volumeMounts[].subPathExpr".into()));
        }
        let host_path = match mount.sub_path.as_deref().filter(|s| !s.is_empty()) {
            Some(sub) => {
                let path = dir.join(safe_relative(sub)?);
                // A kubelet creates a missing subPath as a directory.
                plan.dirs.push(DirToMake {
                    path: path.clone(),
                    mode: None,
                });
                path
            }
            None => dir.clone(),
        };
        mounts.push(Mount {
            container_path: normalize(&mount.mount_path),
            host_path,
        });
    }
    for device in container.volume_devices.as_deref().unwrap_or_default() {
        let claim = volumes(spec)
            .iter()
            .find(|v| v.name == device.name)
            .and_then(|v| v.persistent_volume_claim.as_ref())
            .ok_or_else(|| {
                PlanError::Unsupported(format!("volumeDevice {:?} is not a claim", device.name))
            })?;
        let volume = inputs.claims.get(&claim.claim_name).ok_or_else(|| {
            PlanError::Missing(format!("persistentvolumeclaim {:?}", claim.claim_name))
        })?;
        if volume.mode != VolumeMode::Block {
            return Err(mode_mismatch(&device.name, volume.mode, "volumeDevices"));
        }
        mounts.push(Mount {
            container_path: normalize(&device.device_path),
            host_path: volume.content(),
        });
    }
    mounts.sort_by_key(|m| std::cmp::Reverse(m.container_path.len()));
    Ok(mounts)
}

/// The volume manager's refusal of a claim used in the other mode
/// (`desired_state_of_world_populator.go`).
fn mode_mismatch(volume: &str, mode: VolumeMode, used_in: &str) -> PlanError {
    PlanError::Mount {
        volume: volume.to_owned(),
        why: format!(
            "volume {volume} has volumeMode {}, but is specified in {used_in}",
            mode.as_str()
        ),
    }
}

fn normalize(path: &str) -> String {
    let trimmed = path.trim_end_matches('/');
    if trimmed.is_empty() {
        "/".into()
    } else {
        trimmed.into()
    }
}

/// Rewrites a container path to the host path of the mount it is under: `value` itself, or the
/// part after `=` of a `--flag=value` argument. Anything else is returned unchanged.
fn rewrite(value: &str, mounts: &[Mount]) -> String {
    if let Some(host) = host_path(value, mounts) {
        return host;
    }
    if let Some((flag, path)) = value.split_once('=')
        && flag.starts_with('-')
        && let Some(host) = host_path(path, mounts)
    {
        return format!("{flag}={host}");
    }
    value.to_owned()
}

fn host_path(value: &str, mounts: &[Mount]) -> Option<String> {
    mounts.iter().find_map(|m| {
        let rest = value.strip_prefix(&m.container_path)?;
        let under = rest.is_empty() || rest.starts_with('/') || m.container_path == "/";
        under.then(|| format!("{}{rest}", m.host_path.display()))
    })
}

fn plan_process(
    pod: &Pod,
    container: &Container,
    mounts: &[Mount],
    kubeconfig: Option<&Path>,
    inputs: &Inputs,
    host: &Host,
) -> Result<ProcessPlan, PlanError> {
    let container_env = container_env(pod, container, inputs, host)?;
    let lookup = |name: &str| container_env.get(name);
    let command: Vec<String> = container
        .command
        .iter()
        .flatten()
        .map(|c| expand(c, lookup))
        .collect();
    let args = container.args.iter().flatten().map(|a| expand(a, lookup));
    let (program, mut argv) = match command.split_first() {
        None => (host.guestcluster_bin.clone(), Vec::new()),
        Some((first, rest)) if is_our_binary(first) => {
            (host.guestcluster_bin.clone(), rest.to_vec())
        }
        Some((first, rest)) => (PathBuf::from(rewrite(first, mounts)), rest.to_vec()),
    };
    argv.extend(args);
    // The termination message file is one more "mount": a kubelet bind-mounts a file at
    // `terminationMessagePath`; here the path is rewritten like any other mount path.
    let termination_log = host
        .sandbox
        .join(format!("{}.termination-log", container.name));
    let mut with_termination = mounts.to_vec();
    with_termination.push(Mount {
        container_path: normalize(
            container
                .termination_message_path
                .as_deref()
                .unwrap_or(DEFAULT_TERMINATION_MESSAGE_PATH),
        ),
        host_path: termination_log.clone(),
    });
    with_termination.sort_by_key(|m| std::cmp::Reverse(m.container_path.len()));
    let mounts = with_termination.as_slice();
    let argv = argv.iter().map(|a| rewrite(a, mounts)).collect();
    let cwd = container
        .working_dir
        .as_deref()
        .and_then(|dir| host_path(&normalize(dir), mounts))
        .map_or_else(|| host.sandbox.clone(), PathBuf::from);
    Ok(ProcessPlan {
        container: container.name.clone(),
        credentials: None,
        program,
        args: argv,
        env: process_env(&container_env, mounts, kubeconfig, host),
        cwd,
        log: host.sandbox.join(format!("{}.log", container.name)),
        termination_log,
        fallback_to_logs: container.termination_message_policy.as_deref()
            == Some("FallbackToLogsOnError"),
        memory_limit: container
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref())
            .and_then(|limits| limits.get("memory"))
            .and_then(|q| crate::quantity::parse_quantity(&q.0)),
    })
}

#[cfg(test)]
mod tests;
