//! The Machine Config Operator of a single-node cluster, as machine-config-operator (7ff337a)
//! keeps its objects:
//!
//! - **template** (`templates/common/_base/files/pull-secret.yaml`): the `00-master`
//!   MachineConfig, labelled with the master role, carries `/var/lib/kubelet/config.json` with
//!   the cluster's pull secret (`openshift-config/pull-secret`);
//! - **render** (`pkg/controller/render/render_controller.go`): the MachineConfigs matching the
//!   pool's `machineConfigSelector`, merged in name order, become a `rendered-master-<hash>`
//!   MachineConfig *object* (owned by the pool, no role label, so never a source itself); the
//!   pool's `spec.configuration` names it and its sources. Rendered configs are never deleted:
//!   every pull secret the cluster ever had stays in one (`oc adm prune renderedmachineconfigs`
//!   removes the ones no pool uses);
//! - **node status** (`pkg/controller/node/status.go`): once the node runs the target,
//!   `status.configuration` becomes the spec's, `updatedMachineCount` equals `machineCount`, and
//!   `Updated` is True; until then `Updating` is True. The node gets the rendered files and unit
//!   masks after `Timings.rollout` (a mask that left the rendering is lifted).
//!
//! The MachineConfigs are written as the machine-config-controller, so a disk carries them like a
//! real etcd does; the pool is the simulation's (made on every start), so a cluster started from a
//! disk takes the rendering it finds first as the one its node already runs.

use std::collections::BTreeMap;
use std::time::Instant;

use base64::Engine as _;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use sha2::Digest as _;

use super::{CONFIG_NAMESPACE, Controllers, Error, apply_status, hex, mc_api, now_rfc3339};

/// The field manager of the MachineConfigs the simulated MCO writes: a client, so a disk carries
/// them (see `super::super::persist`).
pub const MCO_MANAGER: &str = "machine-config-controller";
/// The label a pool selects its MachineConfigs by.
pub const ROLE_LABEL: &str = "machineconfiguration.openshift.io/role";
/// The template controller's MachineConfig holding the pull secret.
pub const TEMPLATE_CONFIG: &str = "00-master";
pub const RENDERED_PREFIX: &str = "rendered-master-";
const GENERATED_BY: &str = "machineconfiguration.openshift.io/generated-by-controller-version";
const CONTROLLER_VERSION: &str = "simulated";
const POOL: &str = "master";
const API_VERSION: &str = "machineconfiguration.openshift.io/v1";
const PULL_SECRET_PATH: &str = "/var/lib/kubelet/config.json";

impl Controllers {
    /// One pass of the template, render and node-status controllers.
    pub(super) async fn machine_configs(&mut self) -> Result<(), Error> {
        self.template_config().await?;
        let pools = mc_api(&self.client, "MachineConfigPool", "machineconfigpools");
        let Some(pool) = pools.get_opt(POOL).await? else {
            return Ok(());
        };
        let Some(target) = self.render(&pool).await? else {
            return Ok(());
        };
        self.roll_out(&pools, &pool, &target).await
    }

    /// `00-master` follows the cluster's pull secret.
    async fn template_config(&self) -> Result<(), Error> {
        let secret = Api::<Secret>::namespaced(self.client.clone(), CONFIG_NAMESPACE)
            .get_opt("pull-secret")
            .await?;
        let Some(pull_secret) = secret
            .and_then(|s| s.data)
            .and_then(|d| d.get(".dockerconfigjson").map(|v| v.0.clone()))
        else {
            return Ok(());
        };
        let source = format!(
            "data:;base64,{}",
            base64::engine::general_purpose::STANDARD.encode(&pull_secret)
        );
        let spec = json!({"config": {"ignition": {"version": "3.5.0"}, "storage": {"files": [
            {"path": PULL_SECRET_PATH, "mode": 0o600, "overwrite": true, "contents": {"source": source}}
        ]}}});
        let configs = mc_api(&self.client, "MachineConfig", "machineconfigs");
        let current = configs.get_opt(TEMPLATE_CONFIG).await?;
        if current.as_ref().is_some_and(|c| c.data["spec"] == spec) {
            return Ok(());
        }
        let body = json!({"apiVersion": API_VERSION, "kind": "MachineConfig",
            "metadata": {"name": TEMPLATE_CONFIG, "labels": {ROLE_LABEL: POOL},
                         "annotations": {GENERATED_BY: CONTROLLER_VERSION}},
            "spec": spec});
        configs
            .patch(
                TEMPLATE_CONFIG,
                &PatchParams::apply(MCO_MANAGER).force(),
                &Patch::Apply(&body),
            )
            .await?;
        Ok(())
    }

    /// The pool's rendering of its selected MachineConfigs, created if new, and the pool's
    /// `spec.configuration` pointed at it; `None` while the pool selects nothing.
    async fn render(&self, pool: &DynamicObject) -> Result<Option<Target>, Error> {
        let configs = mc_api(&self.client, "MachineConfig", "machineconfigs");
        let all = configs.list(&ListParams::default()).await?;
        let mut selected: Vec<&DynamicObject> =
            all.items.iter().filter(|c| selects(pool, c)).collect();
        if selected.is_empty() {
            return Ok(None);
        }
        selected.sort_by_key(|c| c.metadata.name.clone());
        let merged = merge(&selected);
        let digest = sha2::Sha256::digest(serde_json::to_vec(&merged).unwrap_or_default());
        let name = format!("{RENDERED_PREFIX}{}", &hex(&digest)[..32]);
        if !all
            .items
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(&name))
        {
            let owner = json!({"apiVersion": API_VERSION, "kind": "MachineConfigPool", "name": POOL,
                "uid": pool.metadata.uid.as_deref().unwrap_or_default(),
                "controller": true, "blockOwnerDeletion": true});
            let body = json!({"apiVersion": API_VERSION, "kind": "MachineConfig",
                "metadata": {"name": name, "ownerReferences": [owner],
                             "annotations": {GENERATED_BY: CONTROLLER_VERSION}},
                "spec": merged});
            let params = PostParams {
                dry_run: false,
                field_manager: Some(MCO_MANAGER.into()),
            };
            let object: DynamicObject =
                serde_json::from_value(body).map_err(|e| Error::Client(e.to_string()))?;
            match configs.create(&params, &object).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(err) => return Err(err.into()),
            }
            tracing::info!(rendered = %name, sources = selected.len(), "rendered a MachineConfig");
        }
        let source: Vec<Value> = selected
            .iter()
            .map(|c| {
                json!({"apiVersion": API_VERSION, "kind": "MachineConfig",
                            "name": c.metadata.name.as_deref().unwrap_or_default()})
            })
            .collect();
        let configuration = json!({"name": name, "source": source});
        if pool.data["spec"]["configuration"] != configuration {
            let pools = mc_api(&self.client, "MachineConfigPool", "machineconfigpools");
            // As the simulation: the pool is the baseline's, made anew on every start.
            let params = PatchParams {
                field_manager: Some(super::MANAGER.into()),
                ..PatchParams::default()
            };
            pools
                .patch(
                    POOL,
                    &params,
                    &Patch::Merge(json!({"spec": {"configuration": configuration}})),
                )
                .await?;
        }
        Ok(Some(Target {
            configuration,
            spec: merged,
        }))
    }

    /// The node takes the target after `Timings.rollout` and the pool's status follows; a pool
    /// with no status yet is a cluster starting from a disk that already runs the target.
    async fn roll_out(
        &mut self,
        pools: &Api<DynamicObject>,
        pool: &DynamicObject,
        target: &Target,
    ) -> Result<(), Error> {
        let name = target.configuration["name"].as_str().unwrap_or_default();
        let status = &pool.data["status"]["configuration"];
        let fresh = status["name"].as_str().unwrap_or_default().is_empty();
        let on_target = *status == target.configuration;
        let done = fresh
            || on_target
            || self
                .rollouts
                .entry(name.to_owned())
                .or_insert_with(Instant::now)
                .elapsed()
                >= self.timings.rollout;
        if done && !on_target {
            let configs = mc_api(&self.client, "MachineConfig", "machineconfigs");
            let previous = match status["name"].as_str().filter(|n| !n.is_empty()) {
                Some(old) => configs.get_opt(old).await?.map(|c| c.data["spec"].clone()),
                None => None,
            };
            self.guest
                .write_files(super::machine_config_files(&target.spec));
            let masks = unit_masks(previous.as_ref(), &target.spec);
            self.guest.update(Box::new(move |state| {
                for (unit, masked) in masks {
                    state.units.entry(unit).or_default().masked = masked;
                }
            }));
            self.rollouts.clear();
            tracing::info!(rendered = %name, "the node runs the rendered MachineConfig");
        }
        let configuration = if done {
            target.configuration.clone()
        } else {
            status.clone()
        };
        let updated = i64::from(done);
        let wanted = json!({"configuration": configuration, "machineCount": 1,
            "readyMachineCount": updated, "updatedMachineCount": updated,
            "unavailableMachineCount": 1 - updated, "degradedMachineCount": 0,
            "observedGeneration": pool.metadata.generation});
        let conditions = [("Updated", done), ("Updating", !done), ("Degraded", false)];
        let current = &pool.data["status"];
        let same = wanted
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| current[k] == *v)
            && conditions.iter().all(|(t, s)| {
                current["conditions"]
                    .as_array()
                    .and_then(|c| c.iter().find(|c| c["type"] == *t))
                    .is_some_and(|c| c["status"] == if *s { "True" } else { "False" })
            });
        if same {
            return Ok(());
        }
        let mut body = wanted;
        body["conditions"] = conditions
            .iter()
            .map(|(t, s)| json!({"type": t, "status": if *s {"True"} else {"False"}, "lastTransitionTime": now_rfc3339()}))
            .collect();
        apply_status(
            pools,
            POOL,
            json!({"apiVersion": API_VERSION, "kind": "MachineConfigPool", "metadata": {"name": POOL}, "status": body}),
        )
        .await
    }
}

/// A rendering the pool targets: its `spec.configuration` and the merged spec.
struct Target {
    configuration: Value,
    spec: Value,
}

/// Whether the pool's `machineConfigSelector` selects `config`. An empty selector selects nothing,
/// as upstream's `getMachineConfigsForPool`; only `matchLabels` is modelled.
fn selects(pool: &DynamicObject, config: &DynamicObject) -> bool {
    let Some(wanted) = pool.data["spec"]["machineConfigSelector"]["matchLabels"].as_object() else {
        return false;
    };
    let labels = config.metadata.labels.clone().unwrap_or_default();
    !wanted.is_empty()
        && wanted.iter().all(|(k, v)| {
            v.as_str()
                .is_some_and(|v| labels.get(k).map(String::as_str) == Some(v))
        })
}

/// The masks a move from the `previous` rendering to `next` sets (`true`) or lifts (`false`), as
/// the machine-config-daemon applies units (`pkg/daemon/update.go`: `writeUnits` masks a unit the
/// config masks; `deleteStaleData` removes a unit that left the config and presets it, so its
/// mask goes).
fn unit_masks(previous: Option<&Value>, next: &Value) -> Vec<(String, bool)> {
    let masked = |spec: &Value| -> Vec<String> {
        spec["config"]["systemd"]["units"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|u| u["mask"] == true)
            .filter_map(|u| u["name"].as_str().map(str::to_owned))
            .collect()
    };
    let now = masked(next);
    let mut changes: Vec<(String, bool)> = now.iter().map(|u| (u.clone(), true)).collect();
    for unit in previous.map(masked).unwrap_or_default() {
        if !now.contains(&unit) {
            changes.push((unit, false));
        }
    }
    changes
}

/// The selected configs merged as upstream's `MergeMachineConfigs` does for files and units: in
/// name order, a later config's entry for the same path (or unit name) replacing an earlier one.
fn merge(configs: &[&DynamicObject]) -> Value {
    let mut files: BTreeMap<String, Value> = BTreeMap::new();
    let mut units: BTreeMap<String, Value> = BTreeMap::new();
    for config in configs {
        let spec = &config.data["spec"]["config"];
        for file in spec["storage"]["files"].as_array().into_iter().flatten() {
            if let Some(path) = file["path"].as_str() {
                files.insert(path.to_owned(), file.clone());
            }
        }
        for unit in spec["systemd"]["units"].as_array().into_iter().flatten() {
            if let Some(name) = unit["name"].as_str() {
                units.insert(name.to_owned(), unit.clone());
            }
        }
    }
    json!({"config": {"ignition": {"version": "3.5.0"},
        "storage": {"files": files.into_values().collect::<Vec<_>>()},
        "systemd": {"units": units.into_values().collect::<Vec<_>>()}}})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn pool() -> DynamicObject {
        object(
            json!({"apiVersion": API_VERSION, "kind": "MachineConfigPool", "metadata": {"name": "master"},
            "spec": {"machineConfigSelector": {"matchLabels": {ROLE_LABEL: "master"}}}}),
        )
    }

    fn config(name: &str, role: Option<&str>, path: &str, data: &str) -> DynamicObject {
        let labels = role.map(|r| json!({ROLE_LABEL: r})).unwrap_or(json!({}));
        object(
            json!({"apiVersion": API_VERSION, "kind": "MachineConfig", "metadata": {"name": name, "labels": labels},
            "spec": {"config": {"storage": {"files": [{"path": path, "contents": {"source": format!("data:,{data}")}}]}}}}),
        )
    }

    #[test]
    fn the_pool_selects_by_role_and_never_its_renderings() {
        let pool = pool();
        assert!(selects(
            &pool,
            &config("99-master-x", Some("master"), "/x", "")
        ));
        assert!(!selects(
            &pool,
            &config("99-worker-x", Some("worker"), "/x", "")
        ));
        assert!(!selects(
            &pool,
            &config("rendered-master-0", None, "/x", "")
        ));
        let mut empty = pool.clone();
        empty.data["spec"]["machineConfigSelector"] = json!({});
        assert!(!selects(
            &empty,
            &config("99-master-x", Some("master"), "/x", "")
        ));
    }

    #[test]
    fn a_mask_that_leaves_the_rendering_is_lifted() {
        let with =
            json!({"config": {"systemd": {"units": [{"name": "chronyd.service", "mask": true}]}}});
        let without = json!({"config": {"systemd": {"units": []}}});
        assert_eq!(
            unit_masks(None, &with),
            vec![("chronyd.service".to_owned(), true)]
        );
        assert_eq!(
            unit_masks(Some(&with), &without),
            vec![("chronyd.service".to_owned(), false)]
        );
        assert!(unit_masks(Some(&without), &without).is_empty());
    }

    #[test]
    fn a_later_config_replaces_an_earlier_file() {
        let a = config("00-master", Some("master"), "/etc/a", "one");
        let b = config("99-master-a", Some("master"), "/etc/a", "two");
        let merged = merge(&[&a, &b]);
        let files = super::super::machine_config_files(&merged);
        assert_eq!(files, vec![("/etc/a".to_owned(), b"two".to_vec(), 0o644)]);
    }
}
