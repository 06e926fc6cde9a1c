//! More kube-apiservers on the control plane's etcd, each under its own key prefix: the simulated
//! guests' OpenShift API servers. Each has its own PKI (given by the caller, who keeps it in the
//! guest's disk) and its own client CA file, which kube-apiserver reloads when it changes — that
//! is how a guest starts trusting a new client CA, like OpenShift's `admin-kubeconfig-client-ca`.
//!
//! Extra serving certificates for other host names (`--tls-sni-cert-key`, what OpenShift's
//! `namedCertificates` become) are flags, not reloadable files: changing the set means starting
//! the process again with a new spec ([`ApiServerLauncher::spawn`] + [`ExtraApiServer::wait_ready`]
//! after stopping the old one), as the kube-apiserver operator rolls out a new revision. The data
//! lives in etcd under the prefix, so it survives that.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use base64::Engine as _;
use kube::config::{KubeConfigOptions, Kubeconfig};

use super::process::ManagedProcess;
use super::{Error, fsutil};

/// What a guest API server is started with.
#[derive(Clone, Debug)]
pub struct ExtraApiServerSpec {
    /// Used in the process name's log file.
    pub name: String,
    /// State directory (created): PKI files and the log.
    pub dir: PathBuf,
    /// etcd key prefix, e.g. `/guests/<disk id>`; the objects of this API server live there.
    pub etcd_prefix: String,
    /// Address to serve on (the guest's address and 6443).
    pub bind: SocketAddr,
    /// Host name clients verify the serving certificate against (`api.crc.testing`).
    pub server_name: String,
    pub serving_cert_pem: String,
    pub serving_key_pem: String,
    /// CA that signed the serving certificate (what clients trust).
    pub server_ca_pem: String,
    /// CA bundle for client certificates; replace it later with [`ExtraApiServer::set_client_ca`].
    pub client_ca_pem: String,
    /// A `system:masters` client certificate signed by a CA in `client_ca_pem`.
    pub admin_cert_pem: String,
    pub admin_key_pem: String,
    /// Serving certificates chosen by SNI (`--tls-sni-cert-key`), each `(cert PEM, key PEM,
    /// host names)`: served to clients whose TLS SNI is one of the names (`*.` wildcards allowed;
    /// no names means the certificate's own). Any other name gets `serving_cert_pem`.
    pub sni_certs: Vec<(String, String, Vec<String>)>,
    pub startup_timeout: Duration,
}

/// Starts extra API servers on a control plane's etcd.
#[derive(Clone, Debug)]
pub struct ApiServerLauncher {
    pub(crate) bin_dir: PathBuf,
    pub(crate) etcd_url: String,
    pub(crate) service_account_key: PathBuf,
    pub(crate) service_account_public_key: PathBuf,
}

/// A running extra API server; stopped when dropped.
pub struct ExtraApiServer {
    process: ManagedProcess,
    client_ca_file: PathBuf,
    kubeconfig: PathBuf,
    config: kube::Config,
}

impl ApiServerLauncher {
    /// The control plane's `kubectl` binary (the same build as the API servers).
    pub fn kubectl(&self) -> PathBuf {
        self.bin_dir.join("kubectl")
    }

    /// Starts the API server and waits until `/readyz` answers `ok`.
    pub async fn start(&self, spec: &ExtraApiServerSpec) -> Result<ExtraApiServer, Error> {
        let mut server = self.spawn(spec).await?;
        server.wait_ready(spec.startup_timeout).await?;
        Ok(server)
    }

    /// Starts the API server process without waiting for it: for callers that must own the
    /// process (to stop it) while it comes up. Follow with [`ExtraApiServer::wait_ready`].
    pub async fn spawn(&self, spec: &ExtraApiServerSpec) -> Result<ExtraApiServer, Error> {
        fsutil::create_dir(&spec.dir)?;
        let files = write_pki(spec)?;
        let args = extra_apiserver_args(self, spec, &files);
        let log = spec.dir.join("kube-apiserver.log");
        let program = self.bin_dir.join("kube-apiserver");
        let process = ManagedProcess::spawn("guest-kube-apiserver", &program, &args, log).await?;
        let kubeconfig = spec.dir.join("kubeconfig");
        fsutil::write_private(&kubeconfig, &admin_kubeconfig(spec))?;
        let config = load(&kubeconfig).await?;
        Ok(ExtraApiServer {
            process,
            client_ca_file: files.client_ca,
            kubeconfig,
            config,
        })
    }
}

impl ExtraApiServer {
    /// Waits until `/readyz` answers `ok`; fails with the log tail if the process exits or
    /// `timeout` passes.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<(), Error> {
        let client =
            kube::Client::try_from(self.config.clone()).map_err(|e| Error::Client(Box::new(e)))?;
        let started = Instant::now();
        loop {
            self.process.ensure_running()?;
            let last =
                match tokio::time::timeout(Duration::from_secs(5), super::readyz(&client)).await {
                    Ok(Ok(())) => return Ok(()),
                    Ok(Err(e)) => e,
                    Err(_) => "no answer".to_owned(),
                };
            if started.elapsed() > timeout {
                return Err(Error::NotReady {
                    name: "guest-kube-apiserver",
                    waited: started.elapsed(),
                    last_check: last,
                    tail: fsutil::tail(self.process.log(), 30),
                    log: self.process.log().to_path_buf(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Fails with the log tail if the process has exited.
    pub fn ensure_running(&mut self) -> Result<(), Error> {
        self.process.ensure_running()
    }

    /// An admin client configuration (TLS verified against the server CA and name).
    pub fn config(&self) -> kube::Config {
        self.config.clone()
    }

    /// The admin kubeconfig file.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig
    }

    /// Replaces the trusted client CA bundle; kube-apiserver picks the file up within seconds.
    pub fn set_client_ca(&self, pem: &str) -> Result<(), Error> {
        // Write-then-rename, so the API server never reads a half-written bundle.
        let tmp = self.client_ca_file.with_extension("tmp");
        fsutil::write_public(&tmp, pem)?;
        std::fs::rename(&tmp, &self.client_ca_file).map_err(fsutil::io_error(&self.client_ca_file))
    }

    /// Stops the process (SIGTERM, then SIGKILL).
    pub fn stop(&mut self) {
        self.process.stop(Duration::from_secs(5));
    }
}

impl Drop for ExtraApiServer {
    fn drop(&mut self) {
        self.stop();
    }
}

struct PkiPaths {
    serving_cert: PathBuf,
    serving_key: PathBuf,
    client_ca: PathBuf,
    /// `--tls-sni-cert-key` values: `cert,key[:name,…]`.
    sni: Vec<String>,
}

fn write_pki(spec: &ExtraApiServerSpec) -> Result<PkiPaths, Error> {
    let pki = PkiPaths {
        serving_cert: spec.dir.join("serving.crt"),
        serving_key: spec.dir.join("serving.key"),
        client_ca: spec.dir.join("client-ca.crt"),
        sni: Vec::new(),
    };
    fsutil::write_public(&pki.serving_cert, &spec.serving_cert_pem)?;
    fsutil::write_private(&pki.serving_key, &spec.serving_key_pem)?;
    fsutil::write_public(&pki.client_ca, &spec.client_ca_pem)?;
    let mut pki = pki;
    for (i, (cert_pem, key_pem, names)) in spec.sni_certs.iter().enumerate() {
        let (cert, key) = (
            spec.dir.join(format!("sni-{i}.crt")),
            spec.dir.join(format!("sni-{i}.key")),
        );
        fsutil::write_public(&cert, cert_pem)?;
        fsutil::write_private(&key, key_pem)?;
        let mut value = format!("{},{}", cert.display(), key.display());
        if !names.is_empty() {
            value.push(':');
            value.push_str(&names.join(","));
        }
        pki.sni.push(value);
    }
    Ok(pki)
}

fn extra_apiserver_args(
    launcher: &ApiServerLauncher,
    spec: &ExtraApiServerSpec,
    pki: &PkiPaths,
) -> Vec<String> {
    let flag = |name: &str, value: String| format!("--{name}={value}");
    let sni = pki.sni.iter().map(|v| flag("tls-sni-cert-key", v.clone()));
    let mut args = vec![
        flag("etcd-servers", launcher.etcd_url.clone()),
        flag("etcd-prefix", spec.etcd_prefix.clone()),
        flag("bind-address", spec.bind.ip().to_string()),
        flag("secure-port", spec.bind.port().to_string()),
        flag("advertise-address", spec.bind.ip().to_string()),
        // Same reason as the main API server: a loopback advertise address is refused by the
        // lease endpoint reconciler, and nothing needs the `kubernetes` Service endpoints.
        flag("endpoint-reconciler-type", "none".into()),
        flag("cert-dir", spec.dir.join("certs").display().to_string()),
        flag("tls-cert-file", pki.serving_cert.display().to_string()),
        flag(
            "tls-private-key-file",
            pki.serving_key.display().to_string(),
        ),
        flag("client-ca-file", pki.client_ca.display().to_string()),
        flag("authorization-mode", "RBAC".into()),
        flag(
            "service-account-issuer",
            "https://kubernetes.default.svc".into(),
        ),
        flag(
            "service-account-key-file",
            launcher.service_account_public_key.display().to_string(),
        ),
        flag(
            "service-account-signing-key-file",
            launcher.service_account_key.display().to_string(),
        ),
        flag("service-cluster-ip-range", "10.217.4.0/23".into()),
        // OpenShift admits privileged pods (SNC's kubelet-bootstrap-cred-manager is one).
        flag("allow-privileged", "true".into()),
        flag("profiling", "false".into()),
    ];
    args.extend(sni);
    args
}

fn admin_kubeconfig(spec: &ExtraApiServerSpec) -> String {
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: guest
  cluster:
    server: https://{bind}
    tls-server-name: {server_name}
    certificate-authority-data: {ca}
users:
- name: admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: guest
  context: {{cluster: guest, user: admin}}
current-context: guest
",
        bind = spec.bind,
        server_name = spec.server_name,
        ca = b64(&spec.server_ca_pem),
        cert = b64(&spec.admin_cert_pem),
        key = b64(&spec.admin_key_pem),
    )
}

async fn load(path: &Path) -> Result<kube::Config, Error> {
    let error = |source| Error::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(error)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(error)
}
