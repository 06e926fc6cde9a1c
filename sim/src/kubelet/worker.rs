//! One pod's life on the node: wait for what it refers to, prepare the sandbox, run the
//! processes, report their status, and stop them and finish the deletion once the pod is deleted.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use tokio::sync::watch;

use super::node::NODE_IP;
use super::plan::{self, Host, Inputs, PlanError, PodPlan, References};
use super::pods::{Control, DEFAULT_GRACE, delete_now, patch_status, pod_key, record_event};
use super::process::{self, Process};
use super::status::{self, Terminated};
use crate::SimContext;
use crate::network::ingress::Registration;

/// How often a pod waiting for something it refers to tries again.
const PREPARE_RETRY: Duration = Duration::from_secs(1);

/// Waits until the pod is being deleted and returns its grace period; never returns when the
/// kubelet dropped the pod (its worker is aborted then).
async fn deletion(control: &mut watch::Receiver<Control>) -> Duration {
    let grace = control.wait_for(Option::is_some).await.map(|g| *g);
    match grace {
        Ok(grace) => grace.unwrap_or(DEFAULT_GRACE),
        Err(_) => std::future::pending().await,
    }
}

pub(super) struct Worker {
    pub ctx: Arc<SimContext>,
    pub tools_bin: PathBuf,
    pub pod: Pod,
    pub ip: Ipv4Addr,
}

impl Worker {
    pub async fn run(self, mut control: watch::Receiver<Control>) {
        self.run_pod(&mut control).await;
        deletion(&mut control).await;
        delete_now(&self.ctx.client, &self.pod).await;
    }

    /// The container's process group as this pod's, for NetworkPolicy, until dropped.
    fn register(&self, process: &Process) -> Option<Registration> {
        let group = process.group()?;
        Some(self.ctx.pod_groups.register(
            group,
            &self.pod.namespace().unwrap_or_default(),
            &self.pod.name_any(),
        ))
    }

    async fn patch(&self, patch: Value) {
        patch_status(&self.ctx.client, &self.pod, patch).await;
    }

    /// Runs the pod to a terminal status, or until it is deleted.
    async fn run_pod(&self, control: &mut watch::Receiver<Control>) {
        self.patch(status::accepted(&self.pod, NODE_IP, Timestamp::now()))
            .await;
        let plan = tokio::select! {
            plan = self.prepare_until_ready() => plan,
            _ = deletion(control) => return,
        };
        tokio::select! {
            _ = tokio::time::sleep(self.ctx.options.timings.pod_start) => {}
            _ = deletion(control) => return,
        }
        if let Err(err) = write_sandbox(&plan) {
            let now = Timestamp::now();
            let results: Vec<Terminated> = plan
                .processes
                .iter()
                .map(|p| Terminated::start_error(&p.container, err.to_string(), now))
                .collect();
            return self
                .patch(status::terminated(&self.pod, &results, now))
                .await;
        }
        // Init containers, in order: the first that fails fails the pod (`restartPolicy: Never`).
        let mut init_results = Vec::new();
        for init in &plan.init_processes {
            let result = match Process::spawn(init) {
                Err(err) => Terminated::start_error(
                    &init.container,
                    format!("{}: {err}", init.program.display()),
                    Timestamp::now(),
                ),
                Ok(process) => {
                    let _registered = self.register(&process);
                    let mut one = [process];
                    tokio::select! {
                        results = process::wait_all(&mut one) => results,
                        grace = deletion(control) => process::stop_all(&mut one, grace).await,
                    }
                    .remove(0)
                }
            };
            // Deleted meanwhile (a grace period is set): the pod ends here too.
            let failed = result.exit_code != 0 || control.borrow().is_some();
            init_results.push(result);
            if failed {
                tracing::info!(pod = %pod_key(&self.pod), "init container failed or pod deleted");
                return self
                    .patch(status::terminated(
                        &self.pod,
                        &init_results,
                        Timestamp::now(),
                    ))
                    .await;
            }
        }
        let (mut running, failed) = spawn_all(&plan);
        let _registered: Vec<_> = running.iter().filter_map(|p| self.register(p)).collect();
        let started = running
            .first()
            .map_or_else(Timestamp::now, Process::started);
        self.patch(status::running(
            &self.pod,
            self.ip,
            started,
            Timestamp::now(),
        ))
        .await;
        let mut results = tokio::select! {
            results = process::wait_all(&mut running) => results,
            grace = deletion(control) => process::stop_all(&mut running, grace).await,
        };
        results.extend(failed);
        results.extend(init_results);
        tracing::info!(pod = %pod_key(&self.pod), phase = status::phase(&results), "pod ended");
        self.patch(status::terminated(&self.pod, &results, Timestamp::now()))
            .await;
    }

    /// Plans the pod, waiting (with the reason in the container status) while something it
    /// refers to is missing.
    async fn prepare_until_ready(&self) -> PodPlan {
        let mut shown = None;
        loop {
            match self.prepare().await {
                Ok(plan) => return plan,
                Err(err) => {
                    let message = err.to_string();
                    if shown.as_ref() != Some(&message) {
                        tracing::info!(pod = %pod_key(&self.pod), "pod cannot start yet: {message}");
                        // A volume the volume manager refuses leaves the containers waiting in
                        // `ContainerCreating`, without a message; the kubelet says why in an
                        // Event (`kubelet.go` syncPod).
                        let mount = matches!(err, PlanError::Mount { .. });
                        let shown_message = (!mount).then_some(message.as_str());
                        let patch = status::waiting(
                            &self.pod,
                            err.reason(),
                            shown_message,
                            Timestamp::now(),
                        );
                        self.patch(patch).await;
                        if mount {
                            let what = format!("Unable to attach or mount volumes: {message}");
                            record_event(
                                &self.ctx.client,
                                &self.pod,
                                ("Warning", "FailedMount"),
                                &what,
                                "kubelet",
                            )
                            .await;
                        }
                        shown = Some(message);
                    }
                }
            }
            tokio::time::sleep(PREPARE_RETRY).await;
        }
    }

    async fn prepare(&self) -> Result<PodPlan, PlanError> {
        let inputs = fetch(&self.ctx, &self.pod, &plan::references(&self.pod)).await?;
        let options = &self.ctx.options;
        let host = Host {
            guestcluster_bin: options.guestcluster_bin.clone(),
            api_server: api_server(&options.kubeconfig)?,
            tools_bin: self.tools_bin.clone(),
            host_path: std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
            sandbox: plan::sandbox_dir(
                &options.root,
                &self.pod.namespace().unwrap_or_default(),
                &self.pod.name_any(),
                &self.pod.uid().unwrap_or_default(),
            ),
            node_name: options.node_name.clone(),
            host_ip: NODE_IP,
            pod_ip: self.ip,
        };
        plan::plan_pod(&self.pod, &inputs, &host)
    }
}

/// The API server's URL from the simulation's kubeconfig: pods reach the same server.
fn api_server(kubeconfig: &std::path::Path) -> Result<String, PlanError> {
    let config = kube::config::Kubeconfig::read_from(kubeconfig)
        .map_err(|e| PlanError::Missing(format!("{}: {e}", kubeconfig.display())))?;
    config
        .clusters
        .iter()
        .find_map(|c| c.cluster.as_ref()?.server.clone())
        .ok_or_else(|| PlanError::Missing(format!("{}: no server", kubeconfig.display())))
}

/// Starts every container; one that cannot start ends at once with `StartError`.
fn spawn_all(plan: &PodPlan) -> (Vec<Process>, Vec<Terminated>) {
    let mut running = Vec::new();
    let mut failed = Vec::new();
    for process in &plan.processes {
        match Process::spawn(process) {
            Ok(p) => running.push(p),
            Err(err) => {
                let message = format!("{}: {err}", process.program.display());
                failed.push(Terminated::start_error(
                    &process.container,
                    message,
                    Timestamp::now(),
                ));
            }
        }
    }
    (running, failed)
}

/// Creates the sandbox directories and volume files, then gives volumes the pod's `fsGroup`.
fn write_sandbox(plan: &PodPlan) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    for dir in &plan.dirs {
        std::fs::create_dir_all(&dir.path)?;
        if let Some(mode) = dir.mode {
            std::fs::set_permissions(&dir.path, std::fs::Permissions::from_mode(mode))?;
        }
    }
    for file in &plan.files {
        if let Some(parent) = file.path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&file.path, &file.contents)?;
        std::fs::set_permissions(&file.path, std::fs::Permissions::from_mode(file.mode))?;
    }
    for ownership in &plan.ownership {
        crate::permissions::apply(ownership)?;
    }
    Ok(())
}

/// Fetches what the pod refers to. A missing object is left out (planning decides whether that
/// is fine); a failed API call is a reason to wait.
async fn fetch(ctx: &SimContext, pod: &Pod, refs: &References) -> Result<Inputs, PlanError> {
    let namespace = pod.namespace().unwrap_or_default();
    let api_error = |e: kube::Error| PlanError::Missing(format!("API: {e}"));
    let mut inputs = Inputs::default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &namespace);
    for name in &refs.secrets {
        if let Some(secret) = secrets.get_opt(name).await.map_err(api_error)? {
            let data = secret.data.unwrap_or_default();
            let data = data.into_iter().map(|(k, v)| (k, v.0)).collect();
            inputs.secrets.insert(name.clone(), data);
        }
    }
    let config_maps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &namespace);
    for name in &refs.config_maps {
        if let Some(cm) = config_maps.get_opt(name).await.map_err(api_error)? {
            inputs.config_maps.insert(name.clone(), config_map_data(cm));
        }
    }
    for claim in &refs.claims {
        let volume = ctx
            .volumes
            .claim_volume(&ctx.client, &namespace, claim)
            .await;
        let volume = volume.map_err(|e| PlanError::Missing(format!("claim {claim:?}: {e}")))?;
        if let Some(volume) = volume {
            inputs.claims.insert(claim.clone(), volume);
        }
    }
    for (audience, expiration) in &refs.token_audiences {
        let token = service_account_token(&ctx.client, pod, audience, *expiration).await?;
        inputs.tokens.insert(audience.clone(), token);
    }
    Ok(inputs)
}

fn config_map_data(cm: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let text = cm.data.unwrap_or_default().into_iter();
    let binary = cm.binary_data.unwrap_or_default().into_iter();
    text.map(|(k, v)| (k, v.into_bytes()))
        .chain(binary.map(|(k, v)| (k, v.0)))
        .collect()
}

/// A token of the pod's service account bound to the pod, as the kubelet projects it.
async fn service_account_token(
    client: &Client,
    pod: &Pod,
    audience: &str,
    expiration: Option<i64>,
) -> Result<String, PlanError> {
    let account = pod
        .spec
        .as_ref()
        .and_then(|s| s.service_account_name.clone())
        .unwrap_or_else(|| "default".into());
    let request: TokenRequest = serde_json::from_value(json!({
        "spec": {
            "audiences": if audience.is_empty() { vec![] } else { vec![audience] },
            "expirationSeconds": expiration.unwrap_or(3607),
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod.name_any(),
                "uid": pod.uid(),
            },
        },
    }))
    .map_err(|e| PlanError::Unsupported(format!("token request: {e}")))?;
    let accounts: Api<ServiceAccount> =
        Api::namespaced(client.clone(), &pod.namespace().unwrap_or_default());
    let created = accounts
        .create_token_request(&account, &PostParams::default(), &request)
        .await
        .map_err(|e| PlanError::Missing(format!("token for service account {account:?}: {e}")))?;
    created
        .status
        .and_then(|s| s.token)
        .ok_or_else(|| PlanError::Missing(format!("token for service account {account:?}")))
}
