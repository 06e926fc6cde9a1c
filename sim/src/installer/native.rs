//! The Rust-native fake installer: `openshift-install version`, `create manifests` and
//! `create single-node-ignition-config` as the shell fake does them (same files, same Ignition),
//! over any file system ([`InstallFs`]) and at a given clock. A guest runs it on its own file
//! system and clock when it executes the extracted launcher (`guest::exec::installer`).
//!
//! What only this one does: it also mints the installed cluster's real API key material
//! (`openshift::GuestPki`, stamped like the other certificates) into the Ignition
//! ([`super::IGNITION_GUEST_PKI`]) and into `auth/kubeconfig`, so the admin kubeconfig it hands
//! out works against the cluster it installs. The shell fake writes a placeholder kubeconfig.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::{Value, json};

use super::{
    BOOTSTRAP_NODE_IP_ENV, IGNITION_BOOTSTRAP_NODE_IP, IGNITION_GUEST_PKI,
    IGNITION_INSTALLATION_DISK, IGNITION_RELEASE_IMAGE, IGNITION_RELEASE_VERSION, IGNITION_TLS_DIR,
    INSTALLER_CERTS, Launcher, Stage, render_record,
};
use crate::guest::state::Certificate;
use crate::openshift::GuestPki;

/// The release override the real installer honours (SNC sets it).
pub const RELEASE_OVERRIDE_ENV: &str = "OPENSHIFT_INSTALL_RELEASE_IMAGE_OVERRIDE";

/// Files the installer reads and writes. Paths are absolute.
pub trait InstallFs {
    fn read(&self, path: &str) -> Option<Vec<u8>>;
    fn is_file(&self, path: &str) -> bool;
    /// Names of the regular files directly in `dir`, sorted.
    fn list_files(&self, dir: &str) -> Vec<String>;
    /// Writes a file, creating missing parent directories.
    fn write(&mut self, path: &str, data: &[u8], mode: u32) -> Result<(), String>;
    fn make_dirs(&mut self, path: &str) -> Result<(), String>;
    /// Removes a file or a directory tree; nothing to remove is fine.
    fn remove(&mut self, path: &str) -> Result<(), String>;
}

/// Why a command failed; the exit code is the real installer's.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InstallerError {
    /// A command line the installer does not accept (exit 2).
    #[error("openshift-install: {0}")]
    Usage(String),
    /// A failed command (exit 1).
    #[error("openshift-install: {0}")]
    Failed(String),
}

impl InstallerError {
    pub fn exit_code(&self) -> u32 {
        match self {
            InstallerError::Usage(_) => 2,
            InstallerError::Failed(_) => 1,
        }
    }
}

fn failed(message: impl Into<String>) -> InstallerError {
    InstallerError::Failed(message.into())
}

/// One run of the installer.
pub struct Invocation<'a> {
    pub launcher: &'a Launcher,
    /// The process environment (only the installer's variables matter).
    pub env: &'a BTreeMap<String, String>,
    /// The working directory, for a relative `--dir`.
    pub cwd: &'a str,
    /// The caller's clock, unix seconds: every certificate starts here.
    pub now: i64,
    /// Randomness for the kubeadmin password and the cluster ID.
    pub seed: u64,
}

/// Runs `openshift-install <args>`; returns its standard output.
pub fn run(
    fs: &mut dyn InstallFs,
    call: &Invocation<'_>,
    args: &[String],
) -> Result<String, InstallerError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["version"] => Ok(version(call.launcher)),
        ["create", "manifests", rest @ ..] => {
            let dir = parse_dir(rest, call.cwd)?;
            create_manifests(fs, call, &dir).map(|()| String::new())
        }
        ["create", "single-node-ignition-config", rest @ ..] => {
            let dir = parse_dir(rest, call.cwd)?;
            create_single_node_ignition_config(fs, call, &dir).map(|()| String::new())
        }
        _ => Err(InstallerError::Usage(format!(
            "unknown command \"{}\" (simulated in the guest: version, create manifests, create single-node-ignition-config)",
            args.join(" ")
        ))),
    }
}

fn version(launcher: &Launcher) -> String {
    format!(
        "openshift-install {}\nbuilt from commit 0000000000000000000000000000000000000000\nrelease image {}@{}\nrelease architecture amd64\n",
        launcher.release_version,
        release_repository(&launcher.release_image),
        launcher.release_digest
    )
}

/// The repository part of a pullspec (no tag, no digest), as the tools' `release_repository`.
fn release_repository(image: &str) -> &str {
    let repo = image.split('@').next().unwrap_or(image);
    let last = repo.rsplit('/').next().unwrap_or(repo);
    match last.rfind(':') {
        Some(i) => &repo[..repo.len() - (last.len() - i)],
        None => repo,
    }
}

fn parse_dir(args: &[&str], cwd: &str) -> Result<String, InstallerError> {
    let mut dir = ".".to_owned();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match *arg {
            "--dir" | "--log-level" => {
                let value = iter.next().ok_or_else(|| {
                    InstallerError::Usage(format!("flag needs an argument: {arg}"))
                })?;
                if *arg == "--dir" {
                    dir = (*value).to_owned();
                }
            }
            a if a.starts_with("--dir=") => dir = a["--dir=".len()..].to_owned(),
            a if a.starts_with("--log-level=") => {}
            other => return Err(InstallerError::Usage(format!("unknown flag: {other}"))),
        }
    }
    Ok(crate::guest::exec::fs::normalize(cwd, &dir))
}

fn state_dir(dir: &str) -> String {
    format!("{dir}/.openshift_install_state")
}

/// The install-config in use: the one in `dir` (consumed by `create manifests`), else the one it
/// kept.
fn install_config(fs: &dyn InstallFs, dir: &str) -> Result<(String, String), InstallerError> {
    for path in [
        format!("{dir}/install-config.yaml"),
        format!("{}/install-config.yaml", state_dir(dir)),
    ] {
        if let Some(bytes) = fs.read(&path) {
            return Ok((path, String::from_utf8_lossy(&bytes).into_owned()));
        }
    }
    Err(failed(format!(
        "failed to fetch Install Config: {dir}/install-config.yaml does not exist"
    )))
}

fn validate(config: &str) -> Result<(), InstallerError> {
    if yaml_top("baseDomain", config).is_none_or(|v| v.is_empty()) {
        return Err(failed("invalid install-config: baseDomain is required"));
    }
    if cluster_name(config).is_none_or(|v| v.is_empty()) {
        return Err(failed("invalid install-config: metadata.name is required"));
    }
    if yaml_top("pullSecret", config).is_none_or(|v| v.is_empty()) {
        return Err(failed("invalid install-config: pullSecret is required"));
    }
    Ok(())
}

fn io(err: String) -> InstallerError {
    failed(err)
}

fn cluster_config(config: &str) -> String {
    let mut out = String::from(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: cluster-config-v1\n  namespace: kube-system\ndata:\n  install-config: |\n",
    );
    // The cluster keeps the install-config without its pull secret.
    for line in config.split_inclusive('\n') {
        out.push_str("    ");
        if line.starts_with("pullSecret:") {
            out.push_str("pullSecret: \"\"\n");
        } else {
            out.push_str(line);
        }
    }
    out
}

/// Mints the certificates of `stage` into `<dir>/tls/`, stamped `now`.
fn mint(fs: &mut dyn InstallFs, dir: &str, stage: Stage, now: i64) -> Result<(), InstallerError> {
    for cert in INSTALLER_CERTS.iter().filter(|c| c.stage == stage) {
        let record = render_record(&Certificate {
            not_before: now,
            not_after: now + cert.lifetime,
            issuer: cert.issuer.to_owned(),
            subject: cert.subject.to_owned(),
        });
        fs.write(
            &format!("{dir}/tls/{}.crt", cert.name),
            record.as_bytes(),
            0o644,
        )
        .map_err(io)?;
    }
    Ok(())
}

/// The cluster's pull secret, from the install-config, as `create manifests` writes it
/// (`manifests/openshift-config-secret-pull-secret.yaml`).
fn write_pull_secret(
    fs: &mut dyn InstallFs,
    dir: &str,
    config: &str,
) -> Result<(), InstallerError> {
    let pull_secret = yaml_top("pullSecret", config).unwrap_or_default();
    fs.write(
        &format!("{dir}/manifests/openshift-config-secret-pull-secret.yaml"),
        format!(
            "apiVersion: v1\nkind: Secret\ntype: kubernetes.io/dockerconfigjson\nmetadata:\n  name: pull-secret\n  namespace: openshift-config\ndata:\n  .dockerconfigjson: {}\n",
            BASE64.encode(pull_secret.as_bytes())
        )
        .as_bytes(),
        0o600,
    )
    .map_err(io)
}

fn root_ca_path(dir: &str) -> String {
    format!("{dir}/tls/root-ca.crt")
}

fn create_manifests(
    fs: &mut dyn InstallFs,
    call: &Invocation<'_>,
    dir: &str,
) -> Result<(), InstallerError> {
    let (path, config) = install_config(fs, dir)?;
    validate(&config)?;
    for sub in ["manifests", "openshift"] {
        fs.make_dirs(&format!("{dir}/{sub}")).map_err(io)?;
    }
    fs.make_dirs(&state_dir(dir)).map_err(io)?;
    fs.write(
        &format!("{dir}/manifests/cluster-config.yaml"),
        cluster_config(&config).as_bytes(),
        0o644,
    )
    .map_err(io)?;
    // The two installer manifests a CRC build edits (the CVO's overrides, the apps domain), in
    // the shape openshift-install writes them.
    fs.write(
        &format!("{dir}/manifests/cvo-overrides.yaml"),
        b"apiVersion: config.openshift.io/v1\nkind: ClusterVersion\nmetadata:\n  name: version\n  namespace: openshift-cluster-version\nspec:\n  channel: stable-4.22\n  clusterID: 00000000-0000-4000-8000-000000000000\n",
        0o644,
    )
    .map_err(io)?;
    let domain = format!(
        "apps.{}.{}",
        config
            .split_once("metadata:")
            .and_then(|(_, rest)| yaml_any("name", rest))
            .unwrap_or_else(|| "crc".into()),
        yaml_any("baseDomain", &config).unwrap_or_else(|| "testing".into())
    );
    fs.write(
        &format!("{dir}/manifests/cluster-ingress-02-config.yml"),
        format!(
            "apiVersion: config.openshift.io/v1\nkind: Ingress\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  domain: {domain}\nstatus: {{}}\n"
        )
        .as_bytes(),
        0o644,
    )
    .map_err(io)?;
    for (name, manifest) in cluster_manifests(&config)? {
        fs.write(
            &format!("{dir}/manifests/{name}"),
            manifest.as_bytes(),
            0o644,
        )
        .map_err(io)?;
    }
    write_pull_secret(fs, dir, &config)?;
    mint(fs, dir, Stage::Manifests, call.now)?;
    if path == format!("{dir}/install-config.yaml") {
        fs.write(
            &format!("{}/install-config.yaml", state_dir(dir)),
            config.as_bytes(),
            0o644,
        )
        .map_err(io)?;
        fs.remove(&path).map_err(io)?;
    }
    Ok(())
}

/// The cluster-scoped configuration `create manifests` derives from the install-config
/// (openshift/installer `pkg/asset/manifests/infrastructure.go` and `network.go`, defaults from
/// `pkg/types/defaults/installconfig.go`): the Infrastructure `cluster` (API URLs, platform
/// `None`, single-replica topologies for one control-plane node) and the Network `cluster`
/// (the install-config's first cluster and service networks and network type). The shell
/// installer writes the same text.
fn cluster_manifests(config: &str) -> Result<[(&'static str, String); 2], InstallerError> {
    let parsed: Value = serde_saphyr::from_str(config)
        .map_err(|e| failed(format!("invalid install-config: {e}")))?;
    let name = cluster_name(config).unwrap_or_default();
    let domain = yaml_top("baseDomain", config).unwrap_or_default();
    let text = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    };
    let topology = match text(&parsed["controlPlane"]["replicas"]).as_deref() {
        Some("1") => "SingleReplica",
        _ => "HighlyAvailable",
    };
    let networking = &parsed["networking"];
    let network_type = text(&networking["networkType"]).unwrap_or_else(|| "OVNKubernetes".into());
    let cluster_cidr =
        text(&networking["clusterNetwork"][0]["cidr"]).unwrap_or_else(|| "10.128.0.0/14".into());
    let host_prefix =
        text(&networking["clusterNetwork"][0]["hostPrefix"]).unwrap_or_else(|| "23".into());
    let service = text(&networking["serviceNetwork"][0]).unwrap_or_else(|| "172.30.0.0/16".into());
    Ok([
        (
            "cluster-infrastructure-02-config.yml",
            format!(
                "apiVersion: config.openshift.io/v1\nkind: Infrastructure\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  cloudConfig:\n    name: \"\"\n  platformSpec:\n    type: None\nstatus:\n  apiServerInternalURI: https://api-int.{name}.{domain}:6443\n  apiServerURL: https://api.{name}.{domain}:6443\n  controlPlaneTopology: {topology}\n  cpuPartitioning: None\n  etcdDiscoveryDomain: \"\"\n  infrastructureName: {name}-sim01\n  infrastructureTopology: {topology}\n  platform: None\n  platformStatus:\n    type: None\n"
            ),
        ),
        (
            "cluster-network-02-config.yml",
            format!(
                "apiVersion: config.openshift.io/v1\nkind: Network\nmetadata:\n  creationTimestamp: null\n  name: cluster\nspec:\n  clusterNetwork:\n  - cidr: {cluster_cidr}\n    hostPrefix: {host_prefix}\n  externalIP:\n    policy: {{}}\n  networkType: {network_type}\n  serviceNetwork:\n  - {service}\nstatus: {{}}\n"
            ),
        ),
    ])
}

fn data_url(bytes: &[u8]) -> String {
    format!("data:;base64,{}", BASE64.encode(bytes))
}

fn file_entry(path: &str, contents: &[u8], mode: u32) -> Value {
    json!({"path": path, "mode": mode, "overwrite": true, "contents": {"source": data_url(contents)}})
}

fn create_single_node_ignition_config(
    fs: &mut dyn InstallFs,
    call: &Invocation<'_>,
    dir: &str,
) -> Result<(), InstallerError> {
    let (_, config) = install_config(fs, dir)?;
    validate(&config)?;
    let disk = yaml_any("installationDisk", &config).unwrap_or_default();
    if disk.is_empty() {
        return Err(failed(
            "invalid install-config: bootstrapInPlace.installationDisk is required for single-node-ignition-config",
        ));
    }
    let cluster_config_path = format!("{dir}/manifests/cluster-config.yaml");
    if !fs.is_file(&cluster_config_path) {
        fs.write(
            &cluster_config_path,
            cluster_config(&config).as_bytes(),
            0o644,
        )
        .map_err(io)?;
        write_pull_secret(fs, dir, &config)?;
    }
    if !fs.is_file(&root_ca_path(dir)) {
        mint(fs, dir, Stage::Manifests, call.now)?;
    }
    mint(fs, dir, Stage::Ignition, call.now)?;
    let pki = GuestPki::generate(call.now, GUEST_PKI_DAYS)
        .map_err(|e| failed(format!("generating the cluster's API certificates: {e}")))?;
    let pki_json = serde_json::to_vec(&pki).map_err(|e| failed(e.to_string()))?;

    let release = call
        .env
        .get(RELEASE_OVERRIDE_ENV)
        .filter(|v| !v.is_empty())
        .unwrap_or(&call.launcher.release_image);
    let line = |s: &str| format!("{s}\n").into_bytes();
    let mut files = vec![
        file_entry(
            "/opt/openshift/install-config.yaml",
            config.as_bytes(),
            0o600,
        ),
        file_entry(IGNITION_RELEASE_IMAGE, &line(release), 0o644),
        file_entry(
            IGNITION_RELEASE_VERSION,
            &line(&call.launcher.release_version),
            0o644,
        ),
        file_entry(IGNITION_INSTALLATION_DISK, &line(&disk), 0o644),
    ];
    if let Some(ip) = call
        .env
        .get(BOOTSTRAP_NODE_IP_ENV)
        .filter(|ip| ip.parse::<std::net::IpAddr>().is_ok())
    {
        files.push(file_entry(IGNITION_BOOTSTRAP_NODE_IP, &line(ip), 0o644));
    }
    for name in fs.list_files(&format!("{dir}/tls")) {
        if let Some(bytes) = fs.read(&format!("{dir}/tls/{name}")) {
            files.push(file_entry(
                &format!("{IGNITION_TLS_DIR}/{name}"),
                &bytes,
                0o644,
            ));
        }
    }
    files.push(file_entry(IGNITION_GUEST_PKI, &pki_json, 0o600));
    for sub in ["manifests", "openshift"] {
        for name in fs.list_files(&format!("{dir}/{sub}")) {
            if let Some(bytes) = fs.read(&format!("{dir}/{sub}/{name}")) {
                files.push(file_entry(
                    &format!("/opt/openshift/{sub}/{name}"),
                    &bytes,
                    0o644,
                ));
            }
        }
    }
    let key = yaml_top("sshKey", &config).unwrap_or_default();
    let ignition = json!({
        "ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": [key]}]},
        "storage": {"files": files},
        "systemd": {"units": [
            {"name": "bootkube.service", "enabled": true},
            {"name": "install-to-disk.service", "enabled": true}
        ]}
    });
    let mut text = serde_json::to_string(&ignition).map_err(|e| failed(e.to_string()))?;
    text.push('\n');
    fs.write(
        &format!("{dir}/bootstrap-in-place-for-live-iso.ign"),
        text.as_bytes(),
        0o644,
    )
    .map_err(io)?;
    write_auth(fs, call, dir, &config, &pki)?;
    for gone in [
        format!("{dir}/manifests"),
        format!("{dir}/openshift"),
        state_dir(dir),
        format!("{dir}/install-config.yaml"),
    ] {
        fs.remove(&gone).map_err(io)?;
    }
    Ok(())
}

/// Days the installed cluster's API key material is valid from the installer's stamp (the
/// simulation's API server serves with it; see `docs/simulation.md`).
pub const GUEST_PKI_DAYS: i64 = 30;

fn write_auth(
    fs: &mut dyn InstallFs,
    call: &Invocation<'_>,
    dir: &str,
    config: &str,
    pki: &GuestPki,
) -> Result<(), InstallerError> {
    let name = cluster_name(config).unwrap_or_default();
    let domain = yaml_top("baseDomain", config).unwrap_or_default();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {}\n    server: https://api.{name}.{domain}:6443\n  name: {name}\ncontexts:\n- context:\n    cluster: {name}\n    user: admin\n  name: admin\ncurrent-context: admin\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\n",
        BASE64.encode(&pki.server_ca_cert),
        BASE64.encode(&pki.admin_cert),
        BASE64.encode(&pki.admin_key),
    );
    fs.write(
        &format!("{dir}/auth/kubeconfig"),
        kubeconfig.as_bytes(),
        0o600,
    )
    .map_err(io)?;
    let mut random = Random(call.seed);
    let bytes: Vec<u8> = (0..18).map(|_| random.byte()).collect();
    let password = BASE64.encode(bytes).replace('+', "K").replace('/', "p");
    fs.write(
        &format!("{dir}/auth/kubeadmin-password"),
        password.as_bytes(),
        0o600,
    )
    .map_err(io)?;
    let id = random.uuid();
    let metadata = format!(
        "{}\n",
        json!({"clusterName": name, "clusterID": id, "infraID": format!("{name}-sim")})
    );
    fs.write(&format!("{dir}/metadata.json"), metadata.as_bytes(), 0o644)
        .map_err(io)
}

/// splitmix64: enough for a password and an ID that differ between runs.
struct Random(u64);

impl Random {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn byte(&mut self) -> u8 {
        self.next().to_le_bytes()[0]
    }

    fn uuid(&mut self) -> String {
        let (a, b) = (self.next(), self.next());
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xfff,
            0x8000 | ((b >> 48) & 0x3fff),
            b & 0xffff_ffff_ffff
        )
    }
}

/// The installer's clock-free seed for a run: different on every call.
pub fn fresh_seed() -> u64 {
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.finish()
}

/// Strips one leading quote and one trailing quote (with trailing blanks), as the shell fake's
/// `gsub(/^["']|["'][ \t]*$/, "")`.
/// A YAML scalar without its quotes, its escapes resolved: `\"` and `\\` in a double-quoted one,
/// `''` in a single-quoted one (what a JSON pull secret written by a YAML library needs).
fn strip_quotes(value: &str) -> String {
    let trimmed = value.trim_end_matches([' ', '\t']);
    if let Some(inner) = trimmed.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
        return inner.replace("\\\"", "\"").replace("\\\\", "\\");
    }
    if let Some(inner) = trimmed
        .strip_prefix('\'')
        .and_then(|v| v.strip_suffix('\''))
    {
        return inner.replace("''", "'");
    }
    value.to_owned()
}

/// A top-level scalar of a YAML file, unquoted; a block scalar yields its first line.
pub fn yaml_top(key: &str, text: &str) -> Option<String> {
    let prefix = format!("{key}:");
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix(&prefix) {
            let value = rest.trim_start_matches([' ', '\t']).to_owned();
            if let Some(style) = value.chars().next().filter(|c| ['|', '>'].contains(c)) {
                // A block scalar: its indented lines, folded (`>`) with spaces or kept (`|`)
                // with line breaks.
                let block: Vec<&str> = lines
                    .take_while(|l| l.starts_with([' ', '\t']) || l.trim().is_empty())
                    .map(|l| l.trim())
                    .collect();
                let joined = block.join(if style == '>' { " " } else { "\n" });
                return Some(joined.trim().to_owned());
            }
            return Some(strip_quotes(&value));
        }
    }
    None
}

/// A scalar anywhere in the file (first occurrence), unquoted.
pub fn yaml_any(key: &str, text: &str) -> Option<String> {
    let prefix = format!("{key}:");
    text.lines().find_map(|line| {
        let line = line.trim_start_matches([' ', '\t', '-']);
        let rest = line.strip_prefix(&prefix)?;
        Some(strip_quotes(rest.trim_start_matches([' ', '\t'])))
    })
}

/// `metadata.name` of an install-config.
pub fn cluster_name(text: &str) -> Option<String> {
    let mut in_metadata = false;
    for line in text.lines() {
        if line.starts_with("metadata:") {
            in_metadata = true;
            continue;
        }
        if in_metadata {
            let body = line.trim_start_matches([' ', '\t']);
            if body.len() < line.len()
                && let Some(rest) = body.strip_prefix("name:")
            {
                return Some(
                    rest.trim_start_matches([' ', '\t'])
                        .replace(['"', '\''], ""),
                );
            }
        }
        if !line.is_empty() && !line.starts_with([' ', '\t']) {
            in_metadata = false;
        }
    }
    None
}

/// An [`InstallFs`] over a host directory tree (the guest paths are below `root`).
#[cfg(test)]
pub struct HostFs {
    pub root: std::path::PathBuf,
}

#[cfg(test)]
impl HostFs {
    fn host(&self, path: &str) -> std::path::PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

#[cfg(test)]
impl InstallFs for HostFs {
    fn read(&self, path: &str) -> Option<Vec<u8>> {
        std::fs::read(self.host(path)).ok()
    }

    fn is_file(&self, path: &str) -> bool {
        self.host(path).is_file()
    }

    fn list_files(&self, dir: &str) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(self.host(dir))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    fn write(&mut self, path: &str, data: &[u8], _mode: u32) -> Result<(), String> {
        let host = self.host(path);
        if let Some(parent) = host.parent() {
            std::fs::create_dir_all(parent).map_err(|e| e.to_string())?;
        }
        std::fs::write(host, data).map_err(|e| e.to_string())
    }

    fn make_dirs(&mut self, path: &str) -> Result<(), String> {
        std::fs::create_dir_all(self.host(path)).map_err(|e| e.to_string())
    }

    fn remove(&mut self, path: &str) -> Result<(), String> {
        let host = self.host(path);
        if host.is_dir() {
            std::fs::remove_dir_all(host).map_err(|e| e.to_string())
        } else if host.exists() {
            std::fs::remove_file(host).map_err(|e| e.to_string())
        } else {
            Ok(())
        }
    }
}

/// A single-node Ignition made by this installer at `now`, for an install-config with
/// `ssh_key` and installation disk `disk` (tests of what consumes it).
#[cfg(test)]
pub fn test_ignition(now: i64, ssh_key: &str, disk: &str) -> String {
    test_ignition_with_env(now, ssh_key, disk, &[])
}

/// [`test_ignition`] from an installer run with `env`.
#[cfg(test)]
pub fn test_ignition_with_env(now: i64, ssh_key: &str, disk: &str, env: &[(&str, &str)]) -> String {
    let root = tempfile::tempdir().expect("tempdir");
    let mut fs = HostFs {
        root: root.path().to_path_buf(),
    };
    let config = format!(
        "apiVersion: v1\nbaseDomain: testing\nmetadata:\n  name: crc\nbootstrapInPlace:\n  installationDisk: {disk}\npullSecret: '{{\"auths\":{{\"quay.io\":{{\"auth\":\"eDp5\"}}}}}}'\nsshKey: '{ssh_key}'\n"
    );
    fs.write("/i/install-config.yaml", config.as_bytes(), 0o644)
        .expect("install-config");
    let launcher = Launcher {
        release_image: "quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64".into(),
        release_version: "4.22.3".into(),
        release_digest: "sha256:11".into(),
    };
    let env: BTreeMap<String, String> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let call = Invocation {
        launcher: &launcher,
        env: &env,
        cwd: "/",
        now,
        seed: 3,
    };
    let args = ["create", "single-node-ignition-config", "--dir=/i"].map(str::to_owned);
    run(&mut fs, &call, &args).expect("single-node-ignition-config");
    String::from_utf8(
        fs.read("/i/bootstrap-in-place-for-live-iso.ign")
            .expect("ignition"),
    )
    .expect("utf-8")
}

#[cfg(test)]
mod tests;
