//! virt-api's launcher eviction interceptor (`virt-launcher-eviction-interceptor.kubevirt.io`):
//! what a node drain meets when it evicts a VM's virt-launcher pod.
//!
//! Upstream: kubevirt d923fdb, `pkg/virt-api/webhooks/validating-webhook/admitters/
//! pod-eviction-admitter.go` (the decision), `pkg/util/migrations/migrations.go`
//! `VMIEvictionStrategy` (the VMI's own strategy, else the cluster's from the `KubeVirt`
//! resource's `spec.configuration.evictionStrategy`) and `pkg/virt-operator/resource/generate/
//! components/webhooks.go` (the registration). A VMI that is to be moved is marked with
//! `status.evacuationNodeName` and the eviction is *denied* (429, so `kubectl drain` retries) —
//! the evacuation controller then migrates it; one that cannot move under `LiveMigrate` blocks
//! the drain. `None` (and no strategy at all) lets the eviction delete the pod: the guest is
//! killed and the VM's run strategy decides what happens next.
//!
//! [`decide`] is pure; [`review`] reads the pod, the VMI and the cluster's strategy, marks the
//! VMI and answers the `AdmissionReview`.

use std::time::Duration;

use kube::api::{Api, ApiResource, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::platform::KUBEVIRT_NAMESPACE;

/// The webhook's name.
pub const NAME: &str = "virt-launcher-eviction-interceptor.kubevirt.io";
/// Its path (virt-operator's `PodEvictionValidatePath`).
pub const PATH: &str = "/pod-eviction-validate";
/// The registration's match condition: only pods named like a virt-launcher pod are sent.
pub const MATCH_CONDITION: &str = r#"object.metadata.name.startsWith("virt-launcher")"#;
/// The VMI condition virt-handler sets from the VMI's volumes and interfaces.
pub const LIVE_MIGRATABLE: &str = "LiveMigratable";

/// What the interceptor does with one eviction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Let the eviction through: the API server deletes the pod.
    Pass,
    /// Refuse it with this message (HTTP 429).
    Deny(String),
    /// Mark the VMI with `status.evacuationNodeName: node`, then refuse with `message`.
    Evacuate { node: String, message: String },
}

/// The interceptor's answer for evicting `pod`, whose VMI (named by the pod's
/// `kubevirt.io/domain` annotation) was read as `vmi`, on a cluster whose `KubeVirt` says
/// `cluster_strategy`.
pub fn decide(
    pod: &Value,
    vmi: Result<&Value, String>,
    cluster_strategy: Option<&str>,
) -> Decision {
    let launcher = pod["metadata"]["labels"][guestcluster::kubevirt::labels::APP]
        == guestcluster::kubevirt::labels::VIRT_LAUNCHER;
    let completed = matches!(
        pod["status"]["phase"].as_str(),
        Some("Failed" | "Succeeded")
    );
    if !launcher || completed {
        return Decision::Pass;
    }
    if pod["metadata"]["annotations"][guestcluster::kubevirt::labels::DOMAIN_ANNOTATION]
        .as_str()
        .is_none()
    {
        return Decision::Pass;
    }
    let vmi = match vmi {
        Ok(vmi) => vmi,
        Err(err) => return Decision::Deny(format!("kubevirt failed getting the vmi: {err}")),
    };
    let Some(strategy) = vmi["spec"]["evictionStrategy"]
        .as_str()
        .or(cluster_strategy)
    else {
        return Decision::Pass;
    };
    let name = vmi["metadata"]["name"].as_str().unwrap_or_default();
    let migratable = is_migratable(vmi);
    let mark = match strategy {
        "LiveMigrate" if !migratable => {
            return Decision::Deny(format!(
                "VMI {name} is configured with an eviction strategy but is not live-migratable"
            ));
        }
        "LiveMigrate" | "External" => true,
        "LiveMigrateIfPossible" => migratable,
        _ => false,
    };
    if !mark {
        return Decision::Pass;
    }
    let namespace = vmi["metadata"]["namespace"].as_str().unwrap_or_default();
    let message = format!("Eviction triggered evacuation of VMI \"{namespace}/{name}\"");
    if vmi["status"]["evacuationNodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
    {
        return Decision::Deny(format!("Evacuation in progress: {message}"));
    }
    let node = pod["spec"]["nodeName"].as_str().unwrap_or_default();
    if vmi["status"]["nodeName"].as_str().unwrap_or_default() != node {
        return Decision::Deny("Eviction request for target Pod".to_owned());
    }
    Decision::Evacuate {
        node: node.to_owned(),
        message,
    }
}

/// `IsMigratable`: the `LiveMigratable` condition is `True`.
fn is_migratable(vmi: &Value) -> bool {
    vmi["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == LIVE_MIGRATABLE && c["status"] == "True")
}

/// How long one API read or write of the interceptor may take (the registration allows 10 s).
const CALL_TIMEOUT: Duration = Duration::from_secs(4);

/// The interceptor's `AdmissionResponse` for the eviction `request` (of an `AdmissionReview`).
pub async fn review(client: &kube::Client, request: &Value) -> Value {
    let namespace = request["namespace"].as_str().unwrap_or_default();
    let pod_name = request["name"].as_str().unwrap_or_default();
    let dry_run =
        request["dryRun"] == true || request["object"]["deleteOptions"]["dryRun"][0] == "All";
    let allowed = json!({"uid": request["uid"], "allowed": true});
    let denied = |message: String| {
        json!({"uid": request["uid"], "allowed": false,
               "status": {"message": message, "code": 429}})
    };
    let pods: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
    );
    // Upstream passes an eviction whose pod it cannot read.
    let Ok(Ok(pod)) = tokio::time::timeout(CALL_TIMEOUT, pods.get(pod_name)).await else {
        return allowed;
    };
    let pod = serde_json::to_value(&pod).unwrap_or_default();
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::erase::<guestcluster::kubevirt::VirtualMachineInstance>(&()),
    );
    let vmi_name = pod["metadata"]["annotations"]
        [guestcluster::kubevirt::labels::DOMAIN_ANNOTATION]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let vmi = if vmi_name.is_empty() {
        Err("no domain annotation".to_owned())
    } else {
        match tokio::time::timeout(CALL_TIMEOUT, vmis.get(&vmi_name)).await {
            Ok(Ok(vmi)) => Ok(serde_json::to_value(&vmi).unwrap_or_default()),
            Ok(Err(err)) => Err(err.to_string()),
            Err(_) => Err("timed out".to_owned()),
        }
    };
    let strategy = cluster_strategy(client).await;
    match decide(
        &pod,
        vmi.as_ref().map_err(Clone::clone),
        strategy.as_deref(),
    ) {
        Decision::Pass => allowed,
        Decision::Deny(message) => denied(message),
        Decision::Evacuate { node, message } => {
            let params = PatchParams {
                dry_run,
                ..PatchParams::default()
            };
            let mark = json!({"status": {"evacuationNodeName": node}});
            match tokio::time::timeout(
                CALL_TIMEOUT,
                vmis.patch_status(&vmi_name, &params, &Patch::Merge(mark)),
            )
            .await
            {
                Ok(Ok(_)) => denied(message),
                Ok(Err(err)) => denied(format!(
                    "kubevirt failed marking the vmi for eviction: {err}"
                )),
                Err(_) => {
                    denied("kubevirt failed marking the vmi for eviction: timed out".to_owned())
                }
            }
        }
    }
}

/// `spec.configuration.evictionStrategy` of the cluster's `KubeVirt`, if any.
async fn cluster_strategy(client: &kube::Client) -> Option<String> {
    let resource = crate::platform::kubevirt_resource();
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), KUBEVIRT_NAMESPACE, &resource);
    let list = tokio::time::timeout(CALL_TIMEOUT, api.list(&Default::default()))
        .await
        .ok()?
        .ok()?;
    list.items.iter().find_map(|kv| {
        kv.data["spec"]["configuration"]["evictionStrategy"]
            .as_str()
            .map(str::to_owned)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launcher(node: &str) -> Value {
        json!({
            "metadata": {"name": "virt-launcher-vm-abcde", "namespace": "ns",
                         "labels": {"kubevirt.io": "virt-launcher"},
                         "annotations": {"kubevirt.io/domain": "vm"}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running"},
        })
    }

    fn vmi(strategy: Option<&str>, migratable: bool) -> Value {
        let mut vmi = json!({
            "metadata": {"name": "vm", "namespace": "ns"},
            "spec": {},
            "status": {"nodeName": "node-a", "conditions": [
                {"type": LIVE_MIGRATABLE, "status": if migratable { "True" } else { "False" }},
            ]},
        });
        if let Some(strategy) = strategy {
            vmi["spec"]["evictionStrategy"] = json!(strategy);
        }
        vmi
    }

    fn evacuate() -> Decision {
        Decision::Evacuate {
            node: "node-a".into(),
            message: "Eviction triggered evacuation of VMI \"ns/vm\"".into(),
        }
    }

    #[test]
    fn the_vmis_own_strategy_wins_over_the_clusters() {
        let pod = launcher("node-a");
        assert_eq!(
            decide(&pod, Ok(&vmi(Some("None"), true)), Some("LiveMigrate")),
            Decision::Pass
        );
        assert_eq!(
            decide(&pod, Ok(&vmi(None, true)), Some("LiveMigrate")),
            evacuate()
        );
        assert_eq!(decide(&pod, Ok(&vmi(None, true)), None), Decision::Pass);
    }

    #[test]
    fn live_migrate_blocks_the_drain_of_a_vmi_that_cannot_move() {
        assert_eq!(
            decide(
                &launcher("node-a"),
                Ok(&vmi(None, false)),
                Some("LiveMigrate")
            ),
            Decision::Deny(
                "VMI vm is configured with an eviction strategy but is not live-migratable".into()
            )
        );
    }

    #[test]
    fn if_possible_moves_what_can_move_and_lets_the_rest_go() {
        let pod = launcher("node-a");
        let strategy = Some("LiveMigrateIfPossible");
        assert_eq!(decide(&pod, Ok(&vmi(strategy, true)), None), evacuate());
        assert_eq!(
            decide(&pod, Ok(&vmi(strategy, false)), None),
            Decision::Pass
        );
        assert_eq!(
            decide(&pod, Ok(&vmi(Some("External"), false)), None),
            evacuate()
        );
    }

    #[test]
    fn a_marked_vmi_and_a_migration_target_are_refused() {
        let mut marked = vmi(None, true);
        marked["status"]["evacuationNodeName"] = json!("node-a");
        assert_eq!(
            decide(&launcher("node-a"), Ok(&marked), Some("LiveMigrate")),
            Decision::Deny(
                "Evacuation in progress: Eviction triggered evacuation of VMI \"ns/vm\"".into()
            )
        );
        assert_eq!(
            decide(
                &launcher("node-b"),
                Ok(&vmi(None, true)),
                Some("LiveMigrate")
            ),
            Decision::Deny("Eviction request for target Pod".into())
        );
    }

    #[test]
    fn other_pods_and_finished_launchers_pass_and_a_missing_vmi_is_refused() {
        let mut other = launcher("node-a");
        other["metadata"]["labels"] = json!({"app": "web"});
        assert_eq!(
            decide(&other, Err("gone".into()), Some("LiveMigrate")),
            Decision::Pass
        );
        let mut done = launcher("node-a");
        done["status"]["phase"] = json!("Succeeded");
        assert_eq!(
            decide(&done, Err("gone".into()), Some("LiveMigrate")),
            Decision::Pass
        );
        assert_eq!(
            decide(&launcher("node-a"), Err("not found".into()), None),
            Decision::Deny("kubevirt failed getting the vmi: not found".into())
        );
    }
}
