//! CDI's controller in the test world: `cdi-controller` of the pinned upstream release
//! (`tools/cdi`), with every controller upstream's main starts (DataVolumes, import, clone and
//! upload, StorageProfiles, CDIConfig, DataSources, DataImportCrons, the volume populators),
//! installed as cdi-operator installs it:
//! - CDI's own CRDs and the `CDI` object (with `cdi.kubevirt.io/configAuthority`, so the config
//!   controller copies its `spec.config` into `CDIConfig config`) from `cdi-install`;
//! - the token key pair of the `cdi-api-signing-key` Secret (cdi-apiserver creates it) where the
//!   Deployment mounts it, and the upload server signers, whose bundles go into the
//!   `cdi-uploadserver{,-client}-signer-bundle` ConfigMaps as cdi-operator's cert manager keeps
//!   them;
//! - the Deployment's arguments and environment, run as its ServiceAccount `cdi-sa` (`in_pod`).
//!
//! The differences from a cluster: the main is ours around upstream's controllers, so metrics are
//! off and the ready file and key directory are in the install's directory (upstream's fixes them
//! at `:8443`, `/tmp/ready` and `/var/run/cdi/token/keys`).

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use serde_json::{Value, json};

use super::{CdiInstall, apply, cdi_error, pod_spec};
use crate::in_pod::{self, environment};
use crate::kubevirt::KUBEVIRT_NAMESPACE;
use crate::{ControlPlane, Error, fsutil};

/// How long cdi-controller gets to lead and fill in `CDIConfig config`.
const READY_TIMEOUT: Duration = Duration::from_secs(180);
/// The Secret cdi-apiserver keeps the clone token key pair in (`pkg/keys/keystore.go`).
const SIGNING_KEY_SECRET: &str = "cdi-api-signing-key";
/// The ClusterRole (and binding) that lets cdi-controller list Routes at cluster scope.
const ROUTE_READER: &str = "guestcluster-testenv:cdi-controller-routes";

/// CDI's controller of a [`ControlPlane`], running among its processes.
#[derive(Debug, Clone)]
pub struct CdiController {
    dir: PathBuf,
    images: Vec<(String, String)>,
}

impl CdiController {
    /// Its key pair, signers, credentials and log (`cdi-controller.log`).
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// The worker images it puts in pods, by their variable (`IMPORTER_IMAGE`, `CLONER_IMAGE`,
    /// `UPLOADSERVER_IMAGE`, …): what a kubelet sees in the pods it is to run.
    pub fn image(&self, variable: &str) -> Option<&str> {
        self.images
            .iter()
            .find(|(name, _)| name == variable)
            .map(|(_, image)| image.as_str())
    }
}

impl ControlPlane {
    /// CDI's controller on this control plane, after its API server ([`ControlPlane::cdi`]):
    /// installed as cdi-operator installs it (see the module docs) and running. Started on first
    /// use; returns once it leads and its config controller has filled in `CDIConfig config`.
    /// A failed start is remembered.
    pub async fn cdi_controller(&self) -> Result<&CdiController, Error> {
        self.cdi_controller
            .get_or_init(|| async {
                self.install_cdi_controller()
                    .await
                    .map_err(|e| e.to_string())
            })
            .await
            .as_ref()
            .map_err(|message| Error::Cdi(message.clone()))
    }

    async fn install_cdi_controller(&self) -> Result<CdiController, Error> {
        let started = Instant::now();
        let install = self.cdi().await?;
        let namespace = KUBEVIRT_NAMESPACE;
        let client = self.client()?;
        let dir = install.dir.join("controller");
        fsutil::create_dir(&dir)?;

        for crd in install.of_kind("CustomResourceDefinition") {
            apply(&client, crd).await?;
        }
        for crd in install.of_kind("CustomResourceDefinition") {
            let name = crd["metadata"]["name"].as_str().unwrap_or_default();
            in_pod::wait_established(&client, name).await?;
        }
        for cdi in install.of_kind("CDI") {
            apply(&client, cdi).await?;
        }

        // On a cluster serving ClusterVersion, upstream's main caches Routes with a field selector
        // on its namespace, a cluster-scoped list that RBAC authorizes at cluster scope, while
        // cdi-operator's RBAC grants Routes only in its namespace (its Role `cdi-deployment`).
        // Without the list the config controller never starts.
        apply(
            &client,
            &json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": ROUTE_READER},
                "rules": [{"apiGroups": ["route.openshift.io"], "resources": ["routes"],
                           "verbs": ["get", "list", "watch"]}],
            }),
        )
        .await?;
        let account = pod_spec(&install.objects, "cdi-deployment")?["serviceAccountName"]
            .as_str()
            .unwrap_or("default")
            .to_owned();
        apply(&client, &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": ROUTE_READER},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROUTE_READER},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }))
        .await?;

        let keys = dir.join("keys");
        write_signing_keys(&client, namespace, &keys).await?;
        // RSA signers, as cdi-operator's cert manager makes them (library-go; CDI signs with
        // SHA256WithRSA), written by cdi-install.
        let signers = dir.join("signers");
        super::run_cdi_install(
            &install.bin_dir,
            &["-signers", &signers.display().to_string()],
        )
        .await?;
        let mut env = Vec::new();
        for (signer, bundle, file_variable) in [
            (
                "cdi-uploadserver-signer",
                "cdi-uploadserver-signer-bundle",
                "UPLOAD_SERVER",
            ),
            (
                "cdi-uploadserver-client-signer",
                "cdi-uploadserver-client-signer-bundle",
                "UPLOAD_CLIENT",
            ),
        ] {
            let cert = signers.join(signer).join("tls.crt");
            let ca_pem = std::fs::read_to_string(&cert).map_err(fsutil::io_error(&cert))?;
            env.push((
                format!("{file_variable}_CERT_FILE"),
                cert.display().to_string(),
            ));
            env.push((
                format!("{file_variable}_KEY_FILE"),
                signers.join(signer).join("tls.key").display().to_string(),
            ));
            let config_map = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": bundle, "namespace": namespace},
                "data": {"ca-bundle.crt": ca_pem},
            });
            apply(&client, &config_map).await?;
        }

        let pod = pod_spec(&install.objects, "cdi-deployment")?;
        let credentials = dir.join(format!("{account}.serviceaccount"));
        self.write_credentials(&client, namespace, &account, &credentials, Error::Cdi)
            .await?;
        let container = &pod["containers"][0];
        let images = environment(container);
        env.extend(images.iter().cloned());
        let mut args = arguments(container);
        args.extend([
            "-metrics-bind-address=0".to_owned(),
            format!("-ready-file={}", dir.join("ready").display()),
            format!("-token-key-dir={}", keys.display()),
        ]);
        let program = install.bin_dir.join("cdi-controller");
        let container = in_pod::Container {
            name: "cdi-controller",
            program: &program,
            args: &args,
            env: &env,
            credentials: &credentials,
            log: dir.join("cdi-controller.log"),
        };
        let process = in_pod::spawn(container, self.server_url(), Error::Cdi).await?;
        self.lock_processes().push(process);
        self.wait_cdi_config(&client, &dir).await?;
        report_deployed(&client).await?;
        tracing::info!(elapsed = ?started.elapsed(), "CDI's controller is ready");
        Ok(CdiController { dir, images })
    }

    /// Waits until the config controller (so the leading manager) has written
    /// `CDIConfig config`'s filesystem overhead.
    async fn wait_cdi_config(
        &self,
        client: &kube::Client,
        dir: &std::path::Path,
    ) -> Result<(), Error> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "CDIConfig"),
            "cdiconfigs",
        );
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_running()?;
            let config = api.get_opt("config").await;
            let last = match &config {
                Ok(Some(config)) if !config.data["status"]["filesystemOverhead"].is_null() => {
                    return Ok(());
                }
                Ok(Some(_)) => "CDIConfig config has no status.filesystemOverhead".to_owned(),
                Ok(None) => "no CDIConfig config".to_owned(),
                Err(err) => err.to_string(),
            };
            if Instant::now() > deadline {
                let log = dir.join("cdi-controller.log");
                return Err(Error::NotReady {
                    name: "cdi-controller",
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

impl CdiInstall {
    fn of_kind<'a>(&'a self, kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
        self.objects.iter().filter(move |o| o["kind"] == kind)
    }
}

/// `CDI cdi` Deployed and Available, as cdi-operator reports a finished install (its
/// `status.phase` and the conditions HCO reads). CDI's CRD has no status subresource: the
/// status is written with the object.
async fn report_deployed(client: &kube::Client) -> Result<(), Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "CDI"),
        "cdis",
    );
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let condition = |kind: &str, status: &str| {
        json!({"type": kind, "status": status, "reason": "DeployCompleted",
               "message": "Deployment Completed"})
    };
    let status = json!({
        "status": {
            "phase": "Deployed",
            "operatorVersion": super::CDI_VERSION,
            "targetVersion": super::CDI_VERSION,
            "observedVersion": super::CDI_VERSION,
            "conditions": [condition("Available", "True"), condition("Progressing", "False"),
                           condition("Degraded", "False")],
        },
    });
    api.patch(
        "cdi",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(status),
    )
    .await
    .map_err(|e| cdi_error(format!("reporting CDI cdi Deployed: {e}")))?;
    Ok(())
}

/// The container's arguments, as its pod passes them.
pub(super) fn arguments(container: &Value) -> Vec<String> {
    container["args"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|a| a.as_str().map(str::to_owned))
        .collect()
}

/// Writes the `cdi-api-signing-key` Secret's pair as its Deployment mounts it (`id_rsa`,
/// `id_rsa.pub`), once cdi-apiserver has created it.
async fn write_signing_keys(
    client: &kube::Client,
    namespace: &str,
    keys: &std::path::Path,
) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    let deadline = Instant::now() + READY_TIMEOUT;
    let data = loop {
        if let Some(data) = secrets
            .get_opt(SIGNING_KEY_SECRET)
            .await
            .ok()
            .flatten()
            .and_then(|s| s.data)
        {
            break data;
        }
        if Instant::now() > deadline {
            return Err(cdi_error(format!(
                "cdi-apiserver created no Secret {namespace}/{SIGNING_KEY_SECRET} in {READY_TIMEOUT:?}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    fsutil::create_dir(keys)?;
    for key in ["id_rsa", "id_rsa.pub"] {
        let value = data.get(key).ok_or_else(|| {
            cdi_error(format!(
                "Secret {namespace}/{SIGNING_KEY_SECRET} has no {key}"
            ))
        })?;
        let text = String::from_utf8(value.0.clone())
            .map_err(|e| cdi_error(format!("{SIGNING_KEY_SECRET} {key}: {e}")))?;
        fsutil::write_private(&keys.join(key), &text)?;
    }
    Ok(())
}
