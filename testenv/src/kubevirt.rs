//! KubeVirt's own control plane in the test world: virt-api (its webhooks) and virt-controller
//! of the pinned upstream release (`tools/kubevirt`), installed as virt-operator installs them.
//!
//! What virt-operator would do for a `KubeVirt` object comes from upstream's own install strategy
//! (`kubevirt-install`, which calls `install.GenerateCurrentInstallStrategy`): the CRDs, the
//! ServiceAccounts and RBAC, the webhook registrations and admission policies, and the command
//! line and environment of each Deployment. The differences from a cluster, and why:
//! - the two Deployments run as processes on this machine, each in a mount namespace of its own
//!   where its ServiceAccount's token, the cluster CA and its namespace are at the in-cluster
//!   path (client-go's in-cluster config, and KubeVirt's namespace lookup, read them there), so
//!   they act as their ServiceAccounts under upstream's RBAC;
//! - webhooks are called at `https://127.0.0.1:<port>` (there is no Service routing here), with
//!   a CA made at each start in `caBundle`, as virt-operator injects its own;
//! - their ports are free loopback ports instead of 8443;
//! - the `KubeVirt` object is written here with the status virt-operator reports once deployed;
//! - Services, the aggregated `subresources.kubevirt.io` API, virt-operator's own webhook,
//!   virt-handler (the simulation plays the node), the export proxy, the synchronization
//!   controller and virt-template are not run.

// This plays virt-operator and writes as it does, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;
use rcgen::ExtendedKeyUsagePurpose;
use serde_json::{Value, json};

use super::binaries::{self, KUBEVIRT};
use super::in_pod::{
    self, CertificateAuthority, environment, free_port, served_at, served_by, service_names,
    wait_established,
};
use super::{ControlPlane, Error, fsutil};

/// The field manager of what is installed here (virt-operator's own is `virt-operator`).
const MANAGER: &str = "guestcluster-testenv-kubevirt";
/// How long the processes get to become ready.
const READY_TIMEOUT: Duration = Duration::from_secs(180);

/// Where KubeVirt is installed: OpenShift Virtualization's namespace (HCO's `KubeVirt` lives
/// there on OpenShift).
pub const KUBEVIRT_NAMESPACE: &str = "openshift-cnv";
/// The `KubeVirt` object's name, as HCO names it.
pub const KUBEVIRT_NAME: &str = "kubevirt-kubevirt-hyperconverged";

/// KubeVirt's control plane of a [`ControlPlane`]: virt-api and virt-controller run among its
/// processes (stopped with it, checked by [`ControlPlane::check_running`]).
#[derive(Debug, Clone)]
pub struct KubeVirtInstall {
    namespace: String,
    dir: PathBuf,
    api_port: u16,
}

impl KubeVirtInstall {
    /// The namespace KubeVirt is installed in.
    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// virt-api's loopback port (its webhooks).
    pub fn api_port(&self) -> u16 {
        self.api_port
    }

    /// The directory of their certificates, credentials, install strategy and logs
    /// (`virt-api.log`, `virt-controller.log`).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl ControlPlane {
    /// KubeVirt installed on this control plane, as virt-operator installs it: the `KubeVirt`
    /// object (`Deployed`) in [`KUBEVIRT_NAMESPACE`], upstream's CRDs, RBAC and webhooks, and
    /// virt-api and virt-controller running. Started on first use; returns once virt-api answers
    /// webhook calls and virt-controller leads. A failed start is remembered.
    pub async fn kubevirt(&self) -> Result<&KubeVirtInstall, Error> {
        self.kubevirt
            .get_or_init(|| async { self.install_kubevirt().await.map_err(|e| e.to_string()) })
            .await
            .as_ref()
            .map_err(|message| Error::KubeVirt(message.clone()))
    }

    async fn install_kubevirt(&self) -> Result<KubeVirtInstall, Error> {
        let started = Instant::now();
        let bin_dir = binaries::locate_set(&KUBEVIRT, &super::project_dir()).await?;
        let namespace = KUBEVIRT_NAMESPACE.to_owned();
        let dir = self.state_dir().join("kubevirt");
        fsutil::create_dir(&dir)?;
        let client = self.client()?;
        let objects = install_strategy(&bin_dir, &kubevirt_object(), &dir).await?;
        let kubevirt = objects
            .iter()
            .find(|o| o["kind"] == "KubeVirt")
            .ok_or_else(|| kubevirt_error("kubevirt-install printed no KubeVirt object"))?;
        deployed_kubevirt(&client, kubevirt).await?;
        let pki = Pki::generate(&dir, &namespace)?;
        let api_port = free_port()?;
        let controller_port = free_port()?;

        for object in &objects {
            match object["kind"].as_str() {
                // Run here as processes, not as pods.
                Some("Deployment") | Some("Service") | Some("KubeVirt") => {}
                Some("MutatingWebhookConfiguration") | Some("ValidatingWebhookConfiguration") => {
                    // Only virt-api's: virt-operator's own and virt-template's are served by
                    // components that do not run here.
                    if served_by(object) == Some("virt-api") {
                        apply(&client, &served_at(object, api_port, &pki.ca.ca_pem)).await?
                    }
                }
                _ => apply(&client, object).await?,
            }
        }
        for crd in objects
            .iter()
            .filter(|o| o["kind"] == "CustomResourceDefinition")
        {
            let name = crd["metadata"]["name"].as_str().unwrap_or_default();
            wait_established(&client, name).await?;
        }
        let ca_configmap = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kubevirt-ca", "namespace": namespace},
            "data": {"ca-bundle": pki.ca.ca_pem},
        });
        apply(&client, &ca_configmap).await?;

        for (component, port) in [("virt-api", api_port), ("virt-controller", controller_port)] {
            let deployment = objects
                .iter()
                .find(|o| o["kind"] == "Deployment" && o["metadata"]["name"] == component)
                .ok_or_else(|| {
                    kubevirt_error(format!(
                        "the install strategy has no {component} Deployment"
                    ))
                })?;
            let pod = &deployment["spec"]["template"]["spec"];
            let account = pod["serviceAccountName"].as_str().unwrap_or("default");
            let credentials = dir.join(format!("{component}.serviceaccount"));
            self.write_credentials(&client, &namespace, account, &credentials, Error::KubeVirt)
                .await?;
            let container = &pod["containers"][0];
            let mut args = command_line(container, port);
            args.extend(pki.flags(component));
            let program = bin_dir.join(component);
            let env = environment(container);
            let container = in_pod::Container {
                name: component_name(component),
                program: &program,
                args: &args,
                env: &env,
                credentials: &credentials,
                log: dir.join(format!("{component}.log")),
            };
            let process = in_pod::spawn(container, self.server_url(), Error::KubeVirt).await?;
            self.lock_processes().push(process);
        }
        let install = KubeVirtInstall {
            namespace,
            dir,
            api_port,
        };
        self.wait_kubevirt_ready(&client, &install).await?;
        tracing::info!(
            namespace = install.namespace,
            api_port,
            elapsed = ?started.elapsed(),
            "KubeVirt's control plane is ready"
        );
        Ok(install)
    }

    /// Waits until virt-api's validating webhook answers through the API server and
    /// virt-controller holds its leader lease.
    async fn wait_kubevirt_ready(
        &self,
        client: &kube::Client,
        install: &KubeVirtInstall,
    ) -> Result<(), Error> {
        let deadline = Instant::now() + READY_TIMEOUT;
        let vms = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
            "virtualmachines",
        );
        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &vms);
        // A VM without a template: refused by virt-api's `virtualmachine-validator.kubevirt.io`.
        let probe: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "kubevirt-readiness-probe"},
            "spec": {"runStrategy": "Halted"},
        }))
        .map_err(|e| kubevirt_error(e.to_string()))?;
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        let mut component = "virt-api";
        let mut last;
        loop {
            self.check_running()?;
            match api.create(&dry_run, &probe).await {
                Err(kube::Error::Api(status)) if status.message.contains("denied the request") => {
                    break;
                }
                Err(err) => last = err.to_string(),
                Ok(_) => last = "a VM without a template was admitted".into(),
            }
            if Instant::now() > deadline {
                return Err(not_ready(component, install, &last));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        component = "virt-controller";
        let leases: Api<Lease> = Api::namespaced(client.clone(), &install.namespace);
        loop {
            self.check_running()?;
            match leases.get_opt("virt-controller").await {
                Ok(Some(lease))
                    if lease
                        .spec
                        .as_ref()
                        .and_then(|s| s.holder_identity.as_deref())
                        .is_some_and(|h| !h.is_empty()) =>
                {
                    return Ok(());
                }
                Ok(_) => last = "no leader yet".into(),
                Err(err) => last = format!("its lease: {err}"),
            }
            if Instant::now() > deadline {
                return Err(not_ready(component, install, &last));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

/// The `KubeVirt` object an installation starts from.
fn kubevirt_object() -> Value {
    json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": KUBEVIRT_NAME, "namespace": KUBEVIRT_NAMESPACE},
        // The images of the release that runs (nothing pulls them here).
        "spec": {"imageRegistry": "quay.io/kubevirt", "imageTag": KUBEVIRT_VERSION,
                 "configuration": {}},
    })
}

/// Creates (or refreshes) the `KubeVirt` object with the status virt-operator reports once
/// everything is deployed: what `kubevirt-install` derived (`kubevirt`'s status), the phase and
/// the conditions (virt-controller reads the configuration only of a `KubeVirt` with a phase).
async fn deployed_kubevirt(client: &kube::Client, kubevirt: &Value) -> Result<(), Error> {
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": KUBEVIRT_NAMESPACE}});
    apply(client, &namespace).await?;
    apply(client, &kubevirt_object()).await?;
    let condition = |t: &str, s: &str| {
        json!({"type": t, "status": s,
        "reason": "AllComponentsReady", "message": "All components are ready."})
    };
    let mut derived = kubevirt["status"].clone();
    let fields = derived
        .as_object_mut()
        .ok_or_else(|| kubevirt_error("kubevirt-install printed a KubeVirt without status"))?;
    fields.insert("phase".into(), json!("Deployed"));
    fields.insert("observedKubeVirtVersion".into(), json!(KUBEVIRT_VERSION));
    fields.insert("targetKubeVirtVersion".into(), json!(KUBEVIRT_VERSION));
    fields.insert(
        "conditions".into(),
        json!([
            condition("Available", "True"),
            condition("Progressing", "False"),
            condition("Degraded", "False")
        ]),
    );
    let status = json!({
        "apiVersion": "kubevirt.io/v1", "kind": "KubeVirt",
        "metadata": {"name": KUBEVIRT_NAME, "namespace": KUBEVIRT_NAMESPACE},
        "status": derived,
    });
    let resource = kubevirt_resource();
    Api::<DynamicObject>::namespaced_with(client.clone(), KUBEVIRT_NAMESPACE, &resource)
        .patch_status(
            KUBEVIRT_NAME,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&status),
        )
        .await
        .map_err(|e| kubevirt_error(format!("the KubeVirt object's status: {e}")))?;
    Ok(())
}

/// The release the KubeVirt binaries are built from (`tools/kubevirt/go.mod`).
pub const KUBEVIRT_VERSION: &str = "v1.9.0";

fn kubevirt_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("kubevirt.io", "v1", "KubeVirt"),
        "kubevirts",
    )
}

/// The install strategy virt-operator would apply for `kubevirt`.
async fn install_strategy(
    bin_dir: &Path,
    kubevirt: &Value,
    dir: &Path,
) -> Result<Vec<Value>, Error> {
    use tokio::io::AsyncWriteExt;
    let program = bin_dir.join("kubevirt-install");
    let mut child = tokio::process::Command::new(&program)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| Error::Spawn {
            name: "kubevirt-install",
            program: program.clone(),
            source,
        })?;
    let mut stdin = child.stdin.take().expect("piped stdin");
    stdin
        .write_all(kubevirt.to_string().as_bytes())
        .await
        .map_err(fsutil::io_error(&program))?;
    drop(stdin);
    let output = child
        .wait_with_output()
        .await
        .map_err(fsutil::io_error(&program))?;
    if !output.status.success() {
        return Err(kubevirt_error(format!(
            "kubevirt-install failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim_end()
        )));
    }
    // Kept beside the logs: what was installed, for whoever reads them.
    let path = dir.join("install-strategy.json");
    std::fs::write(&path, &output.stdout).map_err(fsutil::io_error(&path))?;
    serde_json::from_slice(&output.stdout)
        .map_err(|e| kubevirt_error(format!("kubevirt-install printed no object list: {e}")))
}

/// The container's command and arguments as virt-operator writes them, without the program
/// name, with `--port` set to `port`.
fn command_line(container: &Value, port: u16) -> Vec<String> {
    let words: Vec<String> = container["command"]
        .as_array()
        .into_iter()
        .flatten()
        .chain(container["args"].as_array().into_iter().flatten())
        .filter_map(|w| w.as_str().map(str::to_owned))
        .collect();
    let mut args: Vec<String> = words.into_iter().skip(1).collect();
    match args.iter().position(|a| a == "--port") {
        Some(i) if i + 1 < args.len() => args[i + 1] = port.to_string(),
        _ => args.extend(["--port".to_owned(), port.to_string()]),
    }
    args
}

fn component_name(component: &str) -> &'static str {
    match component {
        "virt-api" => "virt-api",
        _ => "virt-controller",
    }
}

fn not_ready(name: &'static str, install: &KubeVirtInstall, last: &str) -> Error {
    let log = install.dir.join(format!("{name}.log"));
    Error::NotReady {
        name,
        waited: READY_TIMEOUT,
        last_check: last.to_owned(),
        tail: fsutil::tail(&log, 30),
        log,
    }
}

/// Server-side apply as virt-operator's stand-in.
async fn apply(client: &kube::Client, object: &Value) -> Result<(), Error> {
    in_pod::apply(client, object, MANAGER, Error::KubeVirt).await
}

fn kubevirt_error(message: impl Into<String>) -> Error {
    Error::KubeVirt(message.into())
}

/// The certificates virt-operator would keep in Secrets: virt-api's serving certificate, the
/// client certificate virt-api presents to virt-handler and virt-controller's metrics
/// certificate, all from one CA (`kubevirt-ca`).
struct Pki {
    ca: CertificateAuthority,
}

impl Pki {
    fn generate(dir: &Path, namespace: &str) -> Result<Self, Error> {
        let ca =
            CertificateAuthority::generate(&dir.join("pki"), &format!("kubevirt.io@{namespace}"))?;
        for component in ["virt-api", "virt-controller"] {
            ca.sign(
                component,
                service_names(component, namespace),
                ExtendedKeyUsagePurpose::ServerAuth,
            )?;
        }
        ca.sign(
            "virt-handler-client",
            vec!["kubevirt.io:system:client:virt-handler".to_owned()],
            ExtendedKeyUsagePurpose::ClientAuth,
        )?;
        Ok(Self { ca })
    }

    /// The flags that point `component` at its certificate files.
    fn flags(&self, component: &str) -> Vec<String> {
        let file = |name: &str| self.ca.path(name).display().to_string();
        match component {
            "virt-api" => vec![
                format!("--tls-cert-file={}", file("virt-api.crt")),
                format!("--tls-key-file={}", file("virt-api.key")),
                format!("--handler-cert-file={}", file("virt-handler-client.crt")),
                format!("--handler-key-file={}", file("virt-handler-client.key")),
            ],
            _ => vec![
                format!("--prom-cert-file={}", file("virt-controller.crt")),
                format!("--prom-key-file={}", file("virt-controller.key")),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_port_flag_is_replaced_and_the_program_name_dropped() {
        let container = json!({"command": ["virt-controller"], "args": ["--launcher-image", "img", "--port", "8443", "-v", "2"]});
        assert_eq!(
            command_line(&container, 1234),
            ["--launcher-image", "img", "--port", "1234", "-v", "2"]
        );
        let container = json!({"command": ["virt-api", "--console-server-port", "8186"]});
        assert_eq!(
            command_line(&container, 7),
            ["--console-server-port", "8186", "--port", "7"]
        );
    }
}
