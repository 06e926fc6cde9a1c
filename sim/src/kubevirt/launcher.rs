//! virt-launcher pods: what virt-controller creates for a VMI, and the kubelet's part for them
//! (the kubelet simulation binds them but leaves running and deleting them to us): a bound
//! launcher pod gets an IP and runs; a deleted one powers its guest off, then goes.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerState, ContainerStateRunning, ContainerStateTerminated,
    ContainerStatus, PersistentVolumeClaimVolumeSource, Pod, PodCondition, PodIP,
    PodSecurityContext, PodSpec, PodStatus, SecurityContext, Volume as PodVolume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};

use super::{Shared, is_not_found, now};
use crate::Error;
use guestcluster::kubevirt::{VirtualMachineInstance, VmiPhase, labels};

/// Image of the simulated launcher's `compute` container (never pulled or run).
pub const LAUNCHER_IMAGE: &str = "quay.io/kubevirt/virt-launcher:v1.5.0-sim";
/// virt-launcher's user and group (and QEMU's).
const QEMU: i64 = crate::permissions::QEMU_ID as i64;
/// The container that runs the guest.
pub const COMPUTE: &str = "compute";
/// Node label KubeVirt requires of nodes that can run VMs.
pub const SCHEDULABLE_LABEL: &str = "kubevirt.io/schedulable";

/// The label selector of every virt-launcher pod.
pub fn selector() -> String {
    format!("{}={}", labels::APP, labels::VIRT_LAUNCHER)
}

/// The name of the VM a VMI belongs to (its `vm.kubevirt.io/name` label), else the VMI's name.
pub fn vm_name(vmi: &VirtualMachineInstance) -> String {
    vmi.labels()
        .get(labels::VM_NAME)
        .cloned()
        .unwrap_or_else(|| vmi.name_any())
}

/// The virt-launcher pod virt-controller creates for `vmi`: named
/// `virt-launcher-<vm>-<5 random chars>` (generateName), owned by the VMI, carrying the VMI's
/// labels plus KubeVirt's, mounting every PVC the VMI uses (so PVC protection keeps them while
/// the pod exists), with the VMI's node selector, tolerations and affinity.
pub fn launcher_pod(vmi: &VirtualMachineInstance) -> Pod {
    let spec = &vmi.spec;
    let vm = vm_name(vmi);
    let mut pod_labels = vmi.labels().clone();
    pod_labels.insert(labels::APP.into(), labels::VIRT_LAUNCHER.into());
    pod_labels.insert(labels::CREATED_BY.into(), vmi.uid().unwrap_or_default());
    pod_labels.insert(labels::VM_NAME.into(), vm.clone());
    let annotations = BTreeMap::from([(labels::DOMAIN_ANNOTATION.to_owned(), vmi.name_any())]);
    let owner = OwnerReference {
        api_version: VirtualMachineInstance::api_version(&()).into_owned(),
        kind: VirtualMachineInstance::kind(&()).into_owned(),
        name: vmi.name_any(),
        uid: vmi.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    };
    let volumes: Vec<PodVolume> = spec
        .volumes
        .iter()
        .filter_map(|v| {
            let claim = v.claim_name()?;
            let read_only = v.persistent_volume_claim.as_ref().and_then(|p| p.read_only);
            Some(PodVolume {
                name: v.name.clone(),
                persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                    claim_name: claim.to_owned(),
                    read_only,
                }),
                ..PodVolume::default()
            })
        })
        .collect();
    let mut node_selector = spec.node_selector.clone();
    node_selector.insert(SCHEDULABLE_LABEL.into(), "true".into());
    let memory = spec
        .domain
        .memory
        .as_ref()
        .and_then(|m| m.guest.clone())
        .or_else(|| {
            spec.domain
                .resources
                .as_ref()
                .and_then(|r| r.requests.get("memory").cloned())
        });
    let requests: BTreeMap<String, Quantity> = memory
        .map(|m| BTreeMap::from([("memory".to_owned(), m)]))
        .unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("virt-launcher-{vm}-")),
            namespace: vmi.namespace(),
            labels: Some(pod_labels),
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: COMPUTE.into(),
                image: Some(LAUNCHER_IMAGE.into()),
                command: Some(vec!["/usr/bin/virt-launcher-monitor".into()]),
                security_context: Some(SecurityContext {
                    run_as_user: Some(QEMU),
                    run_as_group: Some(QEMU),
                    run_as_non_root: Some(true),
                    allow_privilege_escalation: Some(false),
                    capabilities: Some(Capabilities {
                        add: Some(vec!["NET_BIND_SERVICE".into()]),
                        drop: Some(vec!["ALL".into()]),
                    }),
                    ..Default::default()
                }),
                resources: (!requests.is_empty()).then(|| {
                    k8s_openapi::api::core::v1::ResourceRequirements {
                        requests: Some(requests),
                        ..Default::default()
                    }
                }),
                ..Container::default()
            }],
            volumes: (!volumes.is_empty()).then_some(volumes),
            node_selector: Some(node_selector),
            tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
            affinity: spec.affinity.clone(),
            hostname: Some(spec.hostname.clone().unwrap_or_else(|| vmi.name_any())),
            dns_policy: spec.dns_policy.clone(),
            dns_config: spec.dns_config.clone(),
            restart_policy: Some("Never".into()),
            automount_service_account_token: Some(false),
            // A non-root VMI's launcher (KubeVirt v1.6+ sets fsGroup 107 on every launcher).
            security_context: Some(PodSecurityContext {
                run_as_user: Some(QEMU),
                run_as_group: Some(QEMU),
                run_as_non_root: Some(true),
                fs_group: Some(QEMU),
                ..Default::default()
            }),
            // KubeVirt: the VMI's grace period plus 15 s for the launcher itself.
            termination_grace_period_seconds: Some(
                spec.termination_grace_period_seconds.unwrap_or(30) + 15,
            ),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// Pod status of a launcher whose guest may start: Running with `ip`.
pub fn running_status(pod: &Pod, ip: &str, host_ip: &str, now: &Time) -> PodStatus {
    let condition = |type_: &str| PodCondition {
        type_: type_.into(),
        status: "True".into(),
        last_transition_time: Some(now.clone()),
        ..PodCondition::default()
    };
    PodStatus {
        phase: Some("Running".into()),
        pod_ip: Some(ip.into()),
        pod_ips: Some(vec![PodIP { ip: ip.into() }]),
        host_ip: Some(host_ip.into()),
        start_time: Some(now.clone()),
        conditions: Some(
            ["PodScheduled", "Initialized", "ContainersReady", "Ready"]
                .into_iter()
                .map(condition)
                .collect(),
        ),
        container_statuses: Some(vec![ContainerStatus {
            name: COMPUTE.into(),
            image: LAUNCHER_IMAGE.into(),
            image_id: LAUNCHER_IMAGE.into(),
            ready: true,
            started: Some(true),
            restart_count: 0,
            state: Some(ContainerState {
                running: Some(ContainerStateRunning {
                    started_at: Some(now.clone()),
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..pod.status.clone().unwrap_or_default()
    }
}

/// Pod status once the VMI ended: the `compute` container exited (0 after a power-off).
pub fn ended_status(pod: &Pod, vmi_phase: VmiPhase, now: &Time) -> PodStatus {
    let succeeded = vmi_phase == VmiPhase::Succeeded;
    let previous = pod.status.clone().unwrap_or_default();
    let started_at = previous.start_time.clone();
    PodStatus {
        phase: Some(if succeeded { "Succeeded" } else { "Failed" }.into()),
        conditions: Some(
            ["ContainersReady", "Ready"]
                .into_iter()
                .map(|type_| PodCondition {
                    type_: type_.into(),
                    status: "False".into(),
                    reason: Some("PodCompleted".into()),
                    last_transition_time: Some(now.clone()),
                    ..PodCondition::default()
                })
                .collect(),
        ),
        container_statuses: Some(vec![ContainerStatus {
            name: COMPUTE.into(),
            image: LAUNCHER_IMAGE.into(),
            image_id: LAUNCHER_IMAGE.into(),
            ready: false,
            started: Some(false),
            restart_count: 0,
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: if succeeded { 0 } else { 1 },
                    reason: Some(if succeeded { "Completed" } else { "Error" }.into()),
                    started_at,
                    finished_at: Some(now.clone()),
                    ..ContainerStateTerminated::default()
                }),
                ..ContainerState::default()
            }),
            ..ContainerStatus::default()
        }]),
        ..previous
    }
}

/// The kubelet's part for launcher pods.
pub(super) async fn run(shared: Arc<Shared>) {
    let pods: Api<Pod> = Api::all(shared.ctx.client.clone());
    Controller::new(pods, watcher::Config::default().labels(&selector()))
        .run(reconcile, super::error_policy, shared)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!("simulated virt-launcher kubelet: {err}");
            }
        })
        .await;
}

async fn reconcile(pod: Arc<Pod>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = pod.namespace().unwrap_or_default();
    let api: Api<Pod> = Api::namespaced(shared.ctx.client.clone(), &namespace);
    let Some(pod) = api.get_opt(&pod.name_any()).await? else {
        return Ok(Action::await_change());
    };
    let pod_uid = pod.uid().unwrap_or_default();
    if let Some(ip) = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.as_deref())
        .and_then(|ip| ip.parse().ok())
    {
        shared.adopt_pod_ip(&pod_uid, ip);
    }
    if pod.metadata.deletion_timestamp.is_some() {
        // Like the kubelet: stop the workload (a graceful guest power-off), then finish the
        // deletion. The pod object, and so the hold on its PVCs, lasts until then.
        if let Some(vmi_uid) = pod.labels().get(labels::CREATED_BY) {
            shared.shutdown_guest(vmi_uid).await;
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(pod_uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(&pod.name_any(), &params).await {
            Ok(_) => {}
            Err(err) if is_not_found(&err) => {}
            Err(err) => return Err(err.into()),
        }
        shared.release_pod_ip(&pod_uid);
        return Ok(Action::await_change());
    }
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_ref())
        .is_some();
    let status = pod.status.as_ref();
    let has_ip = status.and_then(|s| s.pod_ip.as_ref()).is_some();
    let ended = matches!(
        status.and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    );
    if bound && !has_ip && !ended {
        let ip = shared.pod_ip(&pod_uid);
        let host_ip = crate::kubelet::NODE_IP.to_string();
        let status = running_status(&pod, &ip.to_string(), &host_ip, &now());
        api.patch_status(
            &pod.name_any(),
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({ "status": status })),
        )
        .await?;
    }
    // Nothing else happens to a running launcher pod without an event; look again now and then
    // in case an event was missed.
    Ok(Action::requeue(Duration::from_secs(30)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestcluster::kubevirt::VirtualMachineInstanceSpec;
    use serde_json::json;

    #[test]
    fn launcher_pod_mounts_claims_and_records_placement() {
        let spec: VirtualMachineInstanceSpec = serde_json::from_value(json!({
            "domain": {"memory": {"guest": "2Gi"}},
            "nodeSelector": {"disktype": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "vms",
                             "effect": "NoSchedule"}],
            "volumes": [
                {"name": "root", "dataVolume": {"name": "vm-root"}},
                {"name": "iso", "persistentVolumeClaim": {"claimName": "iso", "readOnly": true}},
                {"name": "ci", "cloudInitNoCloud": {"userData": "#cloud-config"}},
            ],
        }))
        .unwrap();
        let mut vmi = VirtualMachineInstance::new("vm", spec);
        vmi.metadata.namespace = Some("ns".into());
        vmi.metadata.uid = Some("vmi-uid".into());
        vmi.metadata.labels = Some(BTreeMap::from([
            ("app".into(), "crc".into()),
            (labels::VM_NAME.into(), "vm".into()),
        ]));
        let pod = launcher_pod(&vmi);
        let value = serde_json::to_value(&pod).unwrap();
        assert_eq!(value["metadata"]["generateName"], "virt-launcher-vm-");
        assert_eq!(
            value["metadata"]["labels"],
            json!({"app": "crc", "kubevirt.io": "virt-launcher",
                   "kubevirt.io/created-by": "vmi-uid", "vm.kubevirt.io/name": "vm"})
        );
        assert_eq!(
            value["metadata"]["ownerReferences"],
            json!([{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                    "name": "vm", "uid": "vmi-uid", "controller": true,
                    "blockOwnerDeletion": true}])
        );
        assert_eq!(
            value["spec"]["volumes"],
            json!([
                {"name": "root", "persistentVolumeClaim": {"claimName": "vm-root"}},
                {"name": "iso", "persistentVolumeClaim": {"claimName": "iso", "readOnly": true}},
            ])
        );
        assert_eq!(
            value["spec"]["nodeSelector"],
            json!({"disktype": "ssd", "kubevirt.io/schedulable": "true"})
        );
        assert_eq!(value["spec"]["tolerations"][0]["key"], "dedicated");
        assert_eq!(
            value["spec"]["containers"][0]["resources"]["requests"]["memory"],
            "2Gi"
        );
        assert_eq!(value["spec"]["restartPolicy"], "Never");
    }

    #[test]
    fn pod_statuses_run_then_end() {
        let pod = Pod::default();
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(0).unwrap());
        let running = running_status(&pod, "127.10.0.9", "127.0.0.1", &t);
        assert_eq!(running.phase.as_deref(), Some("Running"));
        assert_eq!(running.pod_ip.as_deref(), Some("127.10.0.9"));
        let pod = Pod {
            status: Some(running),
            ..Pod::default()
        };
        let ended = ended_status(&pod, VmiPhase::Succeeded, &t);
        assert_eq!(ended.phase.as_deref(), Some("Succeeded"));
        assert_eq!(ended.pod_ip.as_deref(), Some("127.10.0.9"), "the IP stays");
        let terminated = ended.container_statuses.unwrap()[0]
            .state
            .clone()
            .unwrap()
            .terminated
            .unwrap();
        assert_eq!(terminated.exit_code, 0);
        let failed = ended_status(&pod, VmiPhase::Failed, &t);
        assert_eq!(failed.phase.as_deref(), Some("Failed"));
    }
}
