//! The Customize stage in the guest (`docs/architecture.md`, "The build source"): the profile's
//! post-install steps ([`crate::resources::profile::post_install`]) and the user's post-install
//! manifests sent through the guest API, then the MachineConfigPool rollouts they caused waited
//! for. Every read decides from the cluster's own objects; nothing is assumed done because it was
//! sent.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Discovery;

use super::cluster::{self, Patience, condition_true, retry};
use super::{Command, Guest, GuestError};
use crate::contract::installer::PostInstallManifest;
use crate::manifests;
use crate::resources::profile::post_install::{self, Change, Target};

/// The field manager of everything the build applies in the guest.
pub const FIELD_MANAGER: &str = "guestcluster-build-helper";
/// The pool every MachineConfig of a single-node cluster lands in.
pub const MASTER_POOL: &str = "master";

/// Why the Customize step failed; [`Error::reason`] is its helper reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Cluster(#[from] cluster::Error),
    #[error("{step}: {source}")]
    Guest {
        step: &'static str,
        source: GuestError,
    },
    #[error(
        "the guest API rejected {object} from {source_name}/{key} of postInstallManifestRefs: {message}"
    )]
    Rejected {
        object: String,
        source_name: String,
        key: String,
        message: String,
    },
    #[error("post-install manifest {source_name}/{key}: {problem}")]
    Unreadable {
        source_name: String,
        key: String,
        problem: String,
    },
    #[error("MachineConfigPool {MASTER_POOL} did not finish its rollout: {0}")]
    Rollout(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Cluster(_) => "GuestAPIUnavailable",
            Error::Guest { .. } => "GuestStepFailed",
            Error::Rejected { .. } | Error::Unreadable { .. } => "ManifestRejected",
            Error::Rollout(_) => "RolloutIncomplete",
        }
    }
}

/// As SNC does: the DHCP name (`crc`) kept as the static hostname, for networks that hand out
/// none.
pub async fn keep_hostname<G: Guest>(guest: &G) -> Result<String, Error> {
    let step = "make the hostname static";
    let err = |source| Error::Guest { step, source };
    let transient = guest
        .run_checked(&Command::new(["hostnamectl", "status", "--transient"]))
        .await
        .map_err(err)?
        .stdout_text()
        .trim()
        .to_owned();
    if transient.is_empty() {
        return Err(err(GuestError::Ssh(
            "`hostnamectl status --transient` printed nothing".into(),
        )));
    }
    guest
        .run_checked(&Command::sudo([
            "hostnamectl",
            "set-hostname",
            transient.as_str(),
        ]))
        .await
        .map_err(err)?;
    Ok(transient)
}

/// Sends every change of `steps` in order; each call is retried within `calls` (the guest API
/// restarts during rollouts).
pub async fn apply_steps(
    client: &kube::Client,
    steps: &[post_install::Step],
    calls: Patience,
) -> Result<(), Error> {
    let discovery = retry("discover the guest API", calls, || {
        manifests::discover(client)
    })
    .await?;
    for step in steps {
        for change in &step.changes {
            send(client, &discovery, step.what, change, calls).await?;
        }
        tracing::info!(step = step.what, "post-install step done");
    }
    Ok(())
}

async fn send(
    client: &kube::Client,
    discovery: &Discovery,
    what: &'static str,
    change: &Change,
    calls: Patience,
) -> Result<(), Error> {
    match change {
        Change::Apply(value) => {
            let object: DynamicObject = serde_json::from_value(value.clone()).map_err(|e| {
                Error::Cluster(cluster::Error::Timeout {
                    step: what,
                    seconds: 0,
                    last: format!("the profile's object does not parse: {e}"),
                })
            })?;
            retry(what, calls, || {
                manifests::apply(client, discovery, &object, FIELD_MANAGER)
            })
            .await?;
        }
        Change::Patch { target, patch } => {
            let api = target_api(client, target);
            let params = PatchParams::default();
            let patch = Patch::Merge(patch);
            retry(what, calls, || api.patch(target.name, &params, &patch)).await?;
        }
    }
    Ok(())
}

fn target_api(client: &kube::Client, target: &Target) -> Api<DynamicObject> {
    let (group, version) = target
        .api_version
        .rsplit_once('/')
        .unwrap_or(("", target.api_version));
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(group, version, target.kind),
        target.plural,
    );
    match target.namespace {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// As SNC does: the router's CA trusted for the exposed registry's route.
pub async fn trust_router_ca(client: &kube::Client, calls: Patience) -> Result<(), Error> {
    let step = "trust the router CA for the registry route";
    let secrets: Api<Secret> =
        Api::namespaced(client.clone(), post_install::INGRESS_OPERATOR_NAMESPACE);
    let ca = retry(step, calls, || async {
        let secret = secrets.get(post_install::ROUTER_CA_SECRET).await?;
        secret
            .data
            .and_then(|d| d.get("tls.crt").cloned())
            .and_then(|v| String::from_utf8(v.0).ok())
            .filter(|pem| pem.contains("BEGIN CERTIFICATE"))
            .ok_or_else(|| {
                kube::Error::Service(
                    format!(
                        "Secret {}/{} has no PEM tls.crt yet",
                        post_install::INGRESS_OPERATOR_NAMESPACE,
                        post_install::ROUTER_CA_SECRET
                    )
                    .into(),
                )
            })
    })
    .await?;
    let steps = [post_install::Step {
        what: step,
        changes: post_install::registry_trust(&ca).to_vec(),
    }];
    apply_steps(client, &steps, calls).await
}

/// The user's manifests, each data key one YAML stream, server-side applied in order. A
/// request the guest API refuses (4xx, an unknown kind) fails at once with the object and the
/// server's message; anything else (the API restarting) is retried within `calls`.
pub async fn apply_user_manifests(
    client: &kube::Client,
    sources: &[PostInstallManifest],
    calls: Patience,
) -> Result<Vec<String>, Error> {
    let mut discovery = retry("discover the guest API", calls, || {
        manifests::discover(client)
    })
    .await?;
    let mut applied = Vec::new();
    for source in sources {
        let unreadable = |problem: String| Error::Unreadable {
            source_name: source.source.clone(),
            key: source.key.clone(),
            problem,
        };
        let mut objects = manifests::parse(&source.text).map_err(|e| unreadable(e.to_string()))?;
        // What a later object may depend on first, as `oc apply` of a directory would not.
        manifests::dependency_order(&mut objects);
        for object in &objects {
            let kind = object
                .types
                .as_ref()
                .map(|t| t.kind.clone())
                .unwrap_or_default();
            let described = match &object.metadata.namespace {
                Some(ns) => format!(
                    "{kind} {ns}/{}",
                    object.metadata.name.as_deref().unwrap_or_default()
                ),
                None => format!(
                    "{kind} {}",
                    object.metadata.name.as_deref().unwrap_or_default()
                ),
            };
            let rejected = |message: String| Error::Rejected {
                object: described.clone(),
                source_name: source.source.clone(),
                key: source.key.clone(),
                message,
            };
            let deadline = tokio::time::Instant::now() + calls.deadline;
            loop {
                match manifests::apply(client, &discovery, object, FIELD_MANAGER).await {
                    Ok(_) => break,
                    Err(manifests::Error::Apply {
                        source: kube::Error::Api(status),
                        ..
                    }) if refused(status.code) => return Err(rejected(status.message)),
                    Err(
                        err @ (manifests::Error::ApiVersion { .. }
                        | manifests::Error::MissingName { .. }
                        | manifests::Error::MissingType { .. }
                        | manifests::Error::Parse(_)),
                    ) => return Err(rejected(err.to_string())),
                    Err(err) => {
                        if tokio::time::Instant::now() + calls.interval > deadline {
                            return Err(match err {
                                manifests::Error::UnknownKind { .. } => rejected(err.to_string()),
                                other => Error::Cluster(cluster::Error::Timeout {
                                    step: "apply the post-install manifests",
                                    seconds: calls.deadline.as_secs(),
                                    last: other.to_string(),
                                }),
                            });
                        }
                        tracing::info!(object = %described, "not applied yet: {err}");
                        tokio::time::sleep(calls.interval).await;
                        // A CRD applied just before serves its kind only after discovery.
                        if matches!(err, manifests::Error::UnknownKind { .. })
                            && let Ok(fresh) = manifests::discover(client).await
                        {
                            discovery = fresh;
                        }
                    }
                }
            }
            tracing::info!(object = %described, "post-install manifest applied");
            applied.push(described);
        }
    }
    Ok(applied)
}

/// A status code that says the request itself is wrong: sending it again cannot help.
fn refused(code: u16) -> bool {
    (400..500).contains(&code) && !matches!(code, 408 | 409 | 429)
}

/// The master pool as read, as the MCO reports a finished rollout (machine-config-operator
/// `pkg/controller/node/status.go`): the node runs the rendering the pool targets, and that
/// rendering is made of every MachineConfig the pool selects now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolState {
    /// `spec.configuration.name`: the rendering the pool targets.
    pub target: String,
    /// `status.configuration.name`: the rendering every node runs.
    pub rendered: String,
    /// Every MachineConfig the pool's `machineConfigSelector` selects is in
    /// `status.configuration.source` (a new one is not rendered yet otherwise).
    pub covers_selected: bool,
    /// `updatedMachineCount == machineCount`, at least one machine.
    pub machines_updated: bool,
    pub updated: bool,
    pub updating: bool,
    pub degraded: bool,
}

impl PoolState {
    /// Done: every node on the targeted rendering of every selected MachineConfig, nothing in
    /// progress.
    pub fn settled(&self) -> bool {
        !self.target.is_empty()
            && self.rendered == self.target
            && self.covers_selected
            && self.machines_updated
            && self.updated
            && !self.updating
            && !self.degraded
    }

    fn describe(&self) -> String {
        format!(
            "targets {:?}, runs {:?}, includes every selected MachineConfig: {}, all machines updated: {}, Updated {}, Updating {}, Degraded {}",
            self.target,
            self.rendered,
            self.covers_selected,
            self.machines_updated,
            self.updated,
            self.updating,
            self.degraded
        )
    }
}

/// Reads the master pool against the MachineConfigs that exist. Rendered configurations are
/// MachineConfigs too, and so are other pools' sources: only those the pool's selector picks
/// count (its `matchLabels`; the master pool selects by role label only).
pub fn pool_state(pool: &DynamicObject, configs: &[DynamicObject]) -> PoolState {
    let status = &pool.data["status"];
    let source: BTreeSet<&str> = status["configuration"]["source"]
        .as_array()
        .map(|s| s.iter().filter_map(|e| e["name"].as_str()).collect())
        .unwrap_or_default();
    let name = |v: &serde_json::Value| {
        v["configuration"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    };
    let machines = status["machineCount"].as_i64().unwrap_or_default();
    PoolState {
        target: name(&pool.data["spec"]),
        rendered: name(status),
        covers_selected: configs
            .iter()
            .filter(|c| selects(pool, c))
            .filter_map(|c| c.metadata.name.as_deref())
            .all(|name| source.contains(name)),
        machines_updated: machines > 0 && status["updatedMachineCount"].as_i64() == Some(machines),
        updated: condition_true(pool, "Updated"),
        updating: condition_true(pool, "Updating"),
        degraded: condition_true(pool, "Degraded"),
    }
}

/// Whether the pool's `machineConfigSelector` (`matchLabels`) selects `config`; an empty
/// selector selects nothing, as the MCO's render controller has it.
fn selects(pool: &DynamicObject, config: &DynamicObject) -> bool {
    let Some(wanted) = pool.data["spec"]["machineConfigSelector"]["matchLabels"].as_object() else {
        return false;
    };
    let labels = config.metadata.labels.as_ref();
    !wanted.is_empty()
        && wanted.iter().all(|(key, value)| {
            labels.and_then(|l| l.get(key)).map(String::as_str) == value.as_str()
        })
}

/// The guest's `machineconfiguration.openshift.io/v1` objects of `kind`.
pub(super) fn mc_api(client: &kube::Client, kind: &str, plural: &str) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("machineconfiguration.openshift.io", "v1", kind),
            plural,
        ),
    )
}

/// Waits until the master pool's node runs a rendering of every MachineConfig the pool selects,
/// for two reads in a row; returns the rendered configuration's name. A Degraded pool fails at
/// once.
pub async fn wait_pool(client: &kube::Client, patience: Patience) -> Result<String, Error> {
    let pools = mc_api(client, "MachineConfigPool", "machineconfigpools");
    let configs = mc_api(client, "MachineConfig", "machineconfigs");
    let deadline = tokio::time::Instant::now() + patience.deadline;
    let mut streak = 0;
    let mut last = String::from("not read yet");
    loop {
        let read = async {
            let pool = pools.get(MASTER_POOL).await?;
            let configs = configs.list(&ListParams::default()).await?;
            Ok::<_, kube::Error>(pool_state(&pool, &configs.items))
        };
        match tokio::time::timeout(super::build::REQUEST_TIMEOUT, read).await {
            Ok(Ok(state)) if state.degraded => return Err(Error::Rollout(state.describe())),
            Ok(Ok(state)) if state.settled() => {
                streak += 1;
                if streak >= 2 {
                    return Ok(state.rendered);
                }
            }
            Ok(Ok(state)) => {
                streak = 0;
                last = state.describe();
            }
            Ok(Err(err)) => {
                streak = 0;
                last = err.to_string();
            }
            Err(_) => {
                streak = 0;
                last = "the guest API did not answer".into();
            }
        }
        if tokio::time::Instant::now() + patience.interval > deadline {
            return Err(Error::Rollout(format!(
                "not done within {} s: {last}",
                patience.deadline.as_secs()
            )));
        }
        tokio::time::sleep(patience.interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    const ROLE: &str = "machineconfiguration.openshift.io/role";

    /// The master pool targeting `target`, its node on `runs` made of `source`.
    fn pool(target: &str, runs: &str, source: &[&str], updated: bool) -> DynamicObject {
        let status = |b: bool| if b { "True" } else { "False" };
        let sources: Vec<_> = source.iter().map(|n| json!({"name": n})).collect();
        object(
            json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "master"},
            "spec": {"machineConfigSelector": {"matchLabels": {ROLE: "master"}},
                     "configuration": {"name": target, "source": sources}},
            "status": {"configuration": {"name": runs, "source": sources},
                       "machineCount": 1, "updatedMachineCount": i32::from(updated),
                       "conditions": [{"type": "Updated", "status": status(updated)},
                                      {"type": "Updating", "status": status(!updated)},
                                      {"type": "Degraded", "status": "False"}]}}),
        )
    }

    fn config(name: &str, role: Option<&str>) -> DynamicObject {
        let labels = role.map_or(json!({}), |r| json!({ROLE: r}));
        object(
            json!({"apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
            "metadata": {"name": name, "labels": labels}}),
        )
    }

    #[test]
    fn a_pool_is_done_when_its_node_runs_a_rendering_of_every_config_it_selects() {
        // As on a real cluster: renderings are MachineConfigs (no role), old ones stay, and
        // another pool's configs exist too.
        let configs = [
            config("00-master", Some("master")),
            config("99-user", Some("master")),
            config("99-worker-x", Some("worker")),
            config("rendered-master-old", None),
            config("rendered-master-new", None),
        ];
        let both = ["00-master", "99-user"];
        let done = pool("rendered-master-new", "rendered-master-new", &both, true);
        assert!(pool_state(&done, &configs).settled());
        // The user's MachineConfig is not in the rendering yet.
        let old = pool_state(
            &pool(
                "rendered-master-old",
                "rendered-master-old",
                &["00-master"],
                true,
            ),
            &configs,
        );
        assert!(!old.covers_selected && !old.settled());
        // Targeted, not run yet.
        let rolling = pool("rendered-master-new", "rendered-master-old", &both, false);
        assert!(!pool_state(&rolling, &configs).settled());
        // Reported Updated but the node still on the old rendering.
        let lagging = pool("rendered-master-new", "rendered-master-old", &both, true);
        assert!(!pool_state(&lagging, &configs).settled());
    }

    #[test]
    fn only_a_request_the_server_refuses_is_final() {
        assert!(refused(422) && refused(400) && refused(403) && refused(404));
        assert!(!refused(409) && !refused(429) && !refused(500) && !refused(503));
    }
}
