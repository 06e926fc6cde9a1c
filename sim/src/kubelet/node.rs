//! The Node object and its heartbeat. The node lifecycle controller (real, in
//! kube-controller-manager) taints and then evicts pods of a node whose Lease and Ready
//! condition go stale, and the pod garbage collector deletes pods bound to a node that does not
//! exist — so the Node exists before the first binding and is renewed well within the grace
//! period.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use super::super::{Error, SimContext};

/// How often the Lease and the Ready condition are renewed (the kubelet's default).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
/// Namespace of node Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";
/// The node's address, its pods' `hostIP`.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// Label on the simulated Node.
pub const SIM_NODE_LABEL: &str = "sim.guestcluster.opdev.io/node";

const LEASE_SECONDS: i32 = 40;
const FIELD_MANAGER: &str = "guestcluster-sim-kubelet";

fn time(t: Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

fn micro_time(t: Timestamp) -> Value {
    serde_json::to_value(MicroTime(t)).unwrap_or(Value::Null)
}

/// Generous, so the resource checks of anything we create pass; the scheduler is not real.
fn resources() -> Value {
    json!({
        "cpu": "64",
        "memory": "256Gi",
        "ephemeral-storage": "1Ti",
        "pods": "500",
        "devices.kubevirt.io/kvm": "1k",
        "devices.kubevirt.io/tun": "1k",
        "devices.kubevirt.io/vhost-net": "1k",
    })
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, now: Timestamp) -> Value {
    json!({
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": time(now),
        "lastTransitionTime": time(now),
    })
}

/// `status` of a healthy node at `now`.
pub fn node_status(name: &str, now: Timestamp) -> Value {
    json!({
        "capacity": resources(),
        "allocatable": resources(),
        "conditions": [
            condition("MemoryPressure", "False", "KubeletHasSufficientMemory", "kubelet has sufficient memory available", now),
            condition("DiskPressure", "False", "KubeletHasNoDiskPressure", "kubelet has no disk pressure", now),
            condition("PIDPressure", "False", "KubeletHasSufficientPID", "kubelet has sufficient PID available", now),
            condition("Ready", "True", "KubeletReady", "simulated kubelet is posting ready status", now),
        ],
        "addresses": [
            { "type": "InternalIP", "address": NODE_IP.to_string() },
            { "type": "Hostname", "address": name },
        ],
        "daemonEndpoints": { "kubeletEndpoint": { "Port": 10250 } },
        "nodeInfo": {
            "machineID": "sim",
            "systemUUID": "sim",
            "bootID": "sim",
            "kernelVersion": "sim",
            "osImage": "guestcluster simulated node",
            "containerRuntimeVersion": "sim://1",
            "kubeletVersion": "v1.37.2-sim",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    })
}

/// A heartbeat changes `lastHeartbeatTime` only: a condition whose status is unchanged keeps
/// the time of its last transition.
fn keep_transition_times(status: &mut Value, node: &Node) {
    let existing = node.status.as_ref().and_then(|s| s.conditions.as_ref());
    let Some(conditions) = status["conditions"].as_array_mut() else {
        return;
    };
    for condition in conditions {
        let same = existing.into_iter().flatten().find(|c| {
            Some(c.type_.as_str()) == condition["type"].as_str()
                && Some(c.status.as_str()) == condition["status"].as_str()
        });
        if let Some(since) = same.and_then(|c| c.last_transition_time.clone()) {
            condition["lastTransitionTime"] = serde_json::to_value(since).unwrap_or(Value::Null);
        }
    }
}

/// The Node as created (status included: nodes may set it on create).
pub fn node_object(name: &str, now: Timestamp) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/worker": "",
                SIM_NODE_LABEL: "true",
            },
        },
        "spec": {},
        "status": node_status(name, now),
    })
}

/// The node Lease, owned by the Node as a kubelet's is (so it goes with the Node).
pub fn lease_object(name: &str, node_uid: &str, now: Timestamp) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": LEASE_NAMESPACE,
            "ownerReferences": [{
                "apiVersion": "v1",
                "kind": "Node",
                "name": name,
                "uid": node_uid,
            }],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": LEASE_SECONDS,
            "renewTime": micro_time(now),
        },
    })
}

/// Creates the Node if missing and renews its status and Lease once.
pub async fn beat(ctx: &SimContext) -> Result<(), Error> {
    let name = &ctx.options.node_name;
    let nodes: Api<Node> = Api::all(ctx.client.clone());
    let now = Timestamp::now();
    let node = match nodes.get_opt(name).await? {
        Some(node) => node,
        None => {
            let object = serde_json::from_value(node_object(name, now))
                .map_err(|e| Error::Other(format!("node object: {e}")))?;
            match nodes.create(&PostParams::default(), &object).await {
                Ok(node) => node,
                Err(kube::Error::Api(e)) if e.code == 409 => nodes.get(name).await?,
                Err(e) => return Err(e.into()),
            }
        }
    };
    let mut status = node_status(name, now);
    keep_transition_times(&mut status, &node);
    let patch = json!({ "status": status });
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    renew_lease(ctx, node.metadata.uid.as_deref().unwrap_or_default(), now).await
}

async fn renew_lease(ctx: &SimContext, node_uid: &str, now: Timestamp) -> Result<(), Error> {
    let name = &ctx.options.node_name;
    let leases: Api<Lease> = Api::namespaced(ctx.client.clone(), LEASE_NAMESPACE);
    let lease = lease_object(name, node_uid, now);
    let params = PatchParams::apply(FIELD_MANAGER).force();
    leases.patch(name, &params, &Patch::Apply(lease)).await?;
    Ok(())
}

/// Renews the Node every [`HEARTBEAT`] forever; a failed beat is retried at the next one.
pub async fn heartbeat(ctx: Arc<SimContext>) -> Result<(), Error> {
    let mut ticks = tokio::time::interval(HEARTBEAT);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if let Err(err) = beat(&ctx).await {
            tracing::warn!(node = %ctx.options.node_name, "node heartbeat failed: {err}");
        }
    }
}

/// Registers the Node, retrying until the API server answers (pods are bound only after).
pub async fn register(ctx: &SimContext) {
    let mut delay = Duration::from_millis(100);
    loop {
        match beat(ctx).await {
            Ok(()) => return,
            Err(err) => {
                tracing::warn!(node = %ctx.options.node_name, "node registration failed: {err}");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_object_is_a_ready_node_with_our_address() {
        let node: Node = serde_json::from_value(node_object("sim-node", Timestamp::now()))
            .expect("a valid Node");
        let status = node.status.expect("status");
        let ready = status
            .conditions
            .expect("conditions")
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .expect("Ready");
        assert_eq!(ready.status, "True");
        assert!(ready.last_heartbeat_time.is_some());
        let addresses = status.addresses.expect("addresses");
        assert_eq!(addresses[0].address, "127.0.0.1");
        assert!(status.capacity.expect("capacity").contains_key("pods"));
    }

    #[test]
    fn heartbeats_keep_transition_times_of_unchanged_conditions() {
        let then = Timestamp::from_second(1_700_000_000).expect("timestamp");
        let now = Timestamp::from_second(1_700_000_100).expect("timestamp");
        let mut node: Node = serde_json::from_value(node_object("n", then)).expect("node");
        if let Some(pressure) = node
            .status
            .as_mut()
            .and_then(|s| s.conditions.as_mut())
            .and_then(|c| c.iter_mut().find(|c| c.type_ == "DiskPressure"))
        {
            pressure.status = "True".into();
        }
        let mut status = node_status("n", now);
        keep_transition_times(&mut status, &node);
        let status: k8s_openapi::api::core::v1::NodeStatus =
            serde_json::from_value(status).expect("status");
        for c in status.conditions.expect("conditions") {
            let expected = if c.type_ == "DiskPressure" { now } else { then };
            assert_eq!(
                c.last_transition_time.map(|t| t.0),
                Some(expected),
                "{}",
                c.type_
            );
            assert_eq!(c.last_heartbeat_time.map(|t| t.0), Some(now));
        }
    }

    #[test]
    fn lease_is_owned_by_the_node() {
        let lease: Lease =
            serde_json::from_value(lease_object("sim-node", "uid-1", Timestamp::now()))
                .expect("a valid Lease");
        let spec = lease.spec.expect("spec");
        assert_eq!(spec.holder_identity.as_deref(), Some("sim-node"));
        assert!(spec.renew_time.is_some());
        assert_eq!(
            lease.metadata.owner_references.expect("owner")[0].uid,
            "uid-1"
        );
    }
}
