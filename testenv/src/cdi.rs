//! CDI's API server in the test world: `cdi-apiserver` of the pinned upstream release
//! (`tools/cdi`), whose admission webhooks (`datavolume-validate`, `datavolume-mutate`, …) answer
//! for CDI's kinds as on a cluster, installed as cdi-operator installs it.
//!
//! What cdi-operator would create comes from its own factories (`cdi-install`): the ServiceAccount
//! and RBAC of `cdi-apiserver` and the webhook configurations. The differences from a cluster:
//! - it runs as a process in a mount namespace of its own, as its ServiceAccount (`in_pod`);
//! - its main is ours around upstream's `apiserver.NewCdiAPIServer`, so it can listen on a free
//!   loopback port (upstream's binds `0.0.0.0:8443`), and webhooks are called at
//!   `https://127.0.0.1:<port>` with a CA made at each start in `caBundle`;
//! - CDI's CRDs stay the external ones the control plane installs (`crds.rs`) until
//!   [`ControlPlane::cdi_controller`] installs upstream's with the controller (`controller.rs`);
//! - the upload proxy and the aggregated `upload.cdi.kubevirt.io` API do not run.

// This plays cdi-operator and writes as it does, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::{Value, json};

use super::binaries::{self, CDI};
use super::in_pod::{self, CertificateAuthority, environment, free_port, served_at, served_by};
use super::kubevirt::KUBEVIRT_NAMESPACE;
use super::{ControlPlane, Error, fsutil};

mod controller;

pub use controller::CdiController;

/// The field manager of what is installed here (cdi-operator's own is `cdi-operator`).
const MANAGER: &str = "guestcluster-testenv-cdi";
/// How long cdi-apiserver gets to answer webhook calls.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// The Service cdi-operator puts in front of cdi-apiserver; its webhooks name it.
const SERVICE: &str = "cdi-api";
/// The release the binaries are built from (`tools/cdi/go.mod`).
pub const CDI_VERSION: &str = "v1.65.0";

/// CDI's API server of a [`ControlPlane`], running among its processes.
#[derive(Debug, Clone)]
pub struct CdiInstall {
    dir: PathBuf,
    port: u16,
    bin_dir: PathBuf,
    /// What cdi-install printed (`installed.json`).
    objects: Vec<Value>,
}

impl CdiInstall {
    /// cdi-apiserver's loopback port (its webhooks).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its certificates, credentials, the objects installed and its log (`cdi-apiserver.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl ControlPlane {
    /// CDI's API server installed on this control plane in [`KUBEVIRT_NAMESPACE`] (where
    /// OpenShift Virtualization runs CDI too), as cdi-operator installs it: its RBAC and webhook
    /// configurations, and `cdi-apiserver` running. Started on first use; returns once its
    /// DataVolume webhook refuses a bad DataVolume. A failed start is remembered.
    pub async fn cdi(&self) -> Result<&CdiInstall, Error> {
        self.cdi
            .get_or_init(|| async { self.install_cdi().await.map_err(|e| e.to_string()) })
            .await
            .as_ref()
            .map_err(|message| Error::Cdi(message.clone()))
    }

    async fn install_cdi(&self) -> Result<CdiInstall, Error> {
        let started = Instant::now();
        let bin_dir = binaries::locate_set(&CDI, &super::project_dir()).await?;
        let namespace = KUBEVIRT_NAMESPACE;
        let dir = self.state_dir().join("cdi");
        fsutil::create_dir(&dir)?;
        let client = self.client()?;
        let objects = what_cdi_operator_creates(&bin_dir, namespace, &dir).await?;
        apply(
            &client,
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}}),
        )
        .await?;
        let ca = CertificateAuthority::generate(
            &dir.join("pki"),
            &format!("cdi-apiserver-signer@{namespace}"),
        )?;
        ca.sign(
            "cdi-apiserver",
            in_pod::service_names(SERVICE, namespace),
            ExtendedKeyUsagePurpose::ServerAuth,
        )?;
        let port = free_port()?;
        for object in &objects {
            match object["kind"].as_str() {
                Some(
                    "ServiceAccount" | "Role" | "RoleBinding" | "ClusterRole"
                    | "ClusterRoleBinding",
                ) => apply(&client, object).await?,
                Some("MutatingWebhookConfiguration" | "ValidatingWebhookConfiguration")
                    if served_by(object) == Some(SERVICE) =>
                {
                    apply(&client, &served_at(object, port, &ca.ca_pem)).await?
                }
                // CRDs: the control plane's external ones; the rest is cdi-controller's, the
                // upload proxy's, or Secrets and a Service that a process here does not need.
                _ => {}
            }
        }

        let pod = pod_spec(&objects, "cdi-apiserver")?;
        let account = pod["serviceAccountName"].as_str().unwrap_or("default");
        let credentials = dir.join("cdi-apiserver.serviceaccount");
        self.write_credentials(&client, namespace, account, &credentials, Error::Cdi)
            .await?;
        let container = &pod["containers"][0];
        let mut args = controller::arguments(container);
        args.extend([
            "-host".to_owned(),
            "127.0.0.1".to_owned(),
            "-port".to_owned(),
            port.to_string(),
        ]);
        let mut env = environment(container);
        env.push((
            "CERT_FILE".to_owned(),
            ca.path("cdi-apiserver.crt").display().to_string(),
        ));
        env.push((
            "KEY_FILE".to_owned(),
            ca.path("cdi-apiserver.key").display().to_string(),
        ));
        let program = bin_dir.join("cdi-apiserver");
        let container = in_pod::Container {
            name: "cdi-apiserver",
            program: &program,
            args: &args,
            env: &env,
            credentials: &credentials,
            log: dir.join("cdi-apiserver.log"),
        };
        let process = in_pod::spawn(container, self.server_url(), Error::Cdi).await?;
        self.lock_processes().push(process);
        let install = CdiInstall {
            dir,
            port,
            bin_dir,
            objects,
        };
        self.wait_cdi_ready(&client, &install).await?;
        tracing::info!(port, elapsed = ?started.elapsed(), "CDI's API server is ready");
        Ok(install)
    }

    /// Waits until the API server calls cdi-apiserver's DataVolume validation: a DataVolume
    /// with neither `pvc` nor `storage` is refused.
    async fn wait_cdi_ready(
        &self,
        client: &kube::Client,
        install: &CdiInstall,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
            "datavolumes",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &resource);
        let probe: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "cdi.kubevirt.io/v1beta1", "kind": "DataVolume",
            "metadata": {"name": "cdi-readiness-probe"},
            "spec": {"source": {"blank": {}}},
        }))
        .map_err(|e| cdi_error(e.to_string()))?;
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let mut last;
        loop {
            self.check_running()?;
            match api.create(&dry_run, &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains("denied the request") => {
                    return Ok(());
                }
                Err(err) => last = err.to_string(),
                Ok(_) => last = "a DataVolume without storage was admitted".into(),
            }
            if Instant::now() > deadline {
                let log = install.dir.join("cdi-apiserver.log");
                return Err(Error::NotReady {
                    name: "cdi-apiserver",
                    waited: READY_TIMEOUT,
                    last_check: last,
                    tail: fsutil::tail(&log, 30),
                    log,
                });
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// What cdi-operator creates for a CDI install in `namespace` (`cdi-install`), kept beside the
/// log.
async fn what_cdi_operator_creates(
    bin_dir: &Path,
    namespace: &str,
    dir: &Path,
) -> Result<Vec<Value>, Error> {
    let stdout =
        run_cdi_install(bin_dir, &["-namespace", namespace, "-version", CDI_VERSION]).await?;
    let path = dir.join("installed.json");
    std::fs::write(&path, &stdout).map_err(fsutil::io_error(&path))?;
    serde_json::from_slice(&stdout)
        .map_err(|e| cdi_error(format!("cdi-install printed no object list: {e}")))
}

/// Runs `cdi-install` with `args`; its standard output.
async fn run_cdi_install(bin_dir: &Path, args: &[&str]) -> Result<Vec<u8>, Error> {
    let program = bin_dir.join("cdi-install");
    let output = tokio::process::Command::new(&program)
        .args(args)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|source| Error::Spawn {
            name: "cdi-install",
            program: program.clone(),
            source,
        })?;
    if !output.status.success() {
        return Err(cdi_error(format!(
            "cdi-install {} failed ({}): {}",
            args.join(" "),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        )));
    }
    Ok(output.stdout)
}

/// The pod template of the Deployment `name` cdi-install printed.
fn pod_spec<'a>(objects: &'a [Value], name: &str) -> Result<&'a Value, Error> {
    objects
        .iter()
        .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == name)
        .map(|deployment| &deployment["spec"]["template"]["spec"])
        .ok_or_else(|| cdi_error(format!("cdi-install printed no {name} Deployment")))
}

async fn apply(client: &kube::Client, object: &Value) -> Result<(), Error> {
    in_pod::apply(client, object, MANAGER, Error::Cdi).await
}

fn cdi_error(message: impl Into<String>) -> Error {
    Error::Cdi(message.into())
}
