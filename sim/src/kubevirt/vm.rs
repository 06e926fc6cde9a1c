//! The VirtualMachine controller: keeps a VMI running (or not) per run strategy and reports the
//! VM's status. Decisions are [`decide_vm`] and [`printable_status`]; this is the I/O.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};
use serde_json::{Value, json};

use super::decide::{
    StatusInputs, VmAction, VmInputs, VmiView, backoff_remaining, condition, decide_vm,
    next_start_failure, pending_start_refusal, printable_status, set_condition, start_refused,
    trim_requests, vm_conditions,
};
use super::{Shared, defaults, is_conflict, is_not_found, merge_status_patch, now, storage, vmi};
use crate::Error;
use guestcluster::kubevirt::{
    RunStrategy, VirtualMachine, VirtualMachineInstance, VirtualMachineStatus, condition_types,
    finalizers, labels,
};

/// Annotation on a VMI: the VM generation it was created from.
pub const VM_GENERATION_ANNOTATION: &str = "kubevirt.io/vm-generation";
/// A start the API server refused is tried again this much later (or when the VM changes).
const START_REFUSED_RETRY: Duration = Duration::from_secs(5);

pub(super) fn resource() -> ApiResource {
    ApiResource::erase::<VirtualMachine>(&())
}

pub(super) async fn run(shared: Arc<Shared>) {
    let client = shared.ctx.client.clone();
    let ar = resource();
    let controller = Controller::new_with(
        Api::<DynamicObject>::all_with(client.clone(), &ar),
        watcher::Config::default(),
        ar.clone(),
    );
    let vmi_ar = vmi::resource();
    let controller = controller.owns_with(
        Api::<DynamicObject>::all_with(client.clone(), &vmi_ar),
        vmi_ar.clone(),
        watcher::Config::default(),
    );
    storage::woken_by_claims(controller, &client, users)
        .run(reconcile, super::error_policy, shared)
        .for_each(|result| async move {
            if let Err(err) = result {
                tracing::debug!("simulated KubeVirt VM controller: {err}");
            }
        })
        .await;
}

/// VMs in `namespace` whose template uses the claim `name`.
fn users(
    store: &Store<DynamicObject>,
    namespace: &str,
    name: &str,
) -> Vec<ObjectRef<DynamicObject>> {
    store
        .state()
        .into_iter()
        .filter(|vm| vm.namespace().as_deref() == Some(namespace))
        .filter(|vm| {
            storage::claims_in(&vm.data["spec"]["template"]["spec"]["volumes"]).any(|c| c == name)
        })
        .map(|vm| ObjectRef::from_obj_with(vm.as_ref(), resource()))
        .collect()
}

fn controller_uid(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> Option<&str> {
    meta.owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.as_str())
}

async fn reconcile(object: Arc<DynamicObject>, shared: Arc<Shared>) -> Result<Action, Error> {
    let namespace = object.namespace().unwrap_or_default();
    let name = object.name_any();
    let client = shared.ctx.client.clone();
    let vms: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource());
    let vmis: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &namespace, &vmi::resource());
    let Some(raw) = vms.get_opt(&name).await? else {
        return Ok(Action::await_change());
    };
    let vm: VirtualMachine = match raw.clone().try_parse() {
        Ok(vm) => vm,
        Err(err) => {
            tracing::warn!(%namespace, %name, "simulated KubeVirt cannot read this VM: {err}");
            return Ok(Action::await_change());
        }
    };
    let vm_uid = vm.uid().unwrap_or_default();
    let vmi: Option<VirtualMachineInstance> = match vmis.get_opt(&name).await? {
        Some(raw) => match raw.try_parse() {
            Ok(vmi) => Some(vmi),
            Err(err) => {
                tracing::warn!(%namespace, %name, "simulated KubeVirt cannot read this VMI: {err}");
                return Ok(Action::await_change());
            }
        },
        None => None,
    };
    // A VMI of this name controlled by something else is never touched.
    let foreign = vmi
        .as_ref()
        .is_some_and(|v| controller_uid(&v.metadata).is_some_and(|uid| uid != vm_uid));
    let view = vmi.as_ref().map(VmiView::of);
    let previous = vm.status.clone().unwrap_or_default();
    let has_finalizer = vm
        .finalizers()
        .iter()
        .any(|f| f == finalizers::VM_CONTROLLER);
    let now_ts = Timestamp::now();
    let strategy = vm.spec.effective_run_strategy();
    let vm_deleting = vm.metadata.deletion_timestamp.is_some();

    let action = if vm_deleting {
        match &view {
            Some(v) if !foreign && !v.deleting => VmAction::Stop {
                uid: v.uid.clone(),
                add_start_request: false,
            },
            _ => VmAction::Nothing,
        }
    } else if foreign {
        VmAction::Nothing
    } else {
        let start_failure = previous.start_failure.as_ref();
        decide_vm(&VmInputs {
            strategy,
            observed_strategy: previous.run_strategy,
            vmi: view.as_ref(),
            requests: &previous.state_change_requests,
            backoff_remaining: backoff_remaining(start_failure, now_ts),
        })
    };

    // Status first (write-ahead: a queued start request must be recorded before the VMI that
    // failed goes away), then the action.
    let start_failure = next_start_failure(
        previous.start_failure.as_ref(),
        view.as_ref(),
        now_ts,
        shared
            .ctx
            .options
            .timings
            .vm_start
            .max(Duration::from_millis(100)),
    );
    let requests = trim_requests(
        &previous.state_change_requests,
        view.as_ref(),
        matches!(
            action,
            VmAction::Stop {
                add_start_request: true,
                ..
            }
        ),
    );
    let volumes = storage::summary(&client, &namespace, &vm.spec.template.spec.volumes).await?;
    let now = now();
    let mut conditions = vm_conditions(&previous.conditions, vmi.as_ref(), &now);
    if let Some(refusal) = pending_start_refusal(&previous.conditions, &action, vmi.is_some()) {
        set_condition(&mut conditions, refusal);
    }
    if strategy == RunStrategy::Unknown || foreign {
        let message = if foreign {
            format!("VMI {name} exists and is controlled by another object")
        } else {
            "unknown spec.runStrategy".to_owned()
        };
        set_condition(
            &mut conditions,
            condition(
                condition_types::FAILURE,
                true,
                "FailedCreate",
                &message,
                &now,
            ),
        );
    }
    let status = VirtualMachineStatus {
        created: vmi.is_some(),
        ready: vmi
            .as_ref()
            .is_some_and(|v| v.is_ready() && v.metadata.deletion_timestamp.is_none()),
        printable_status: Some(printable_status(&StatusInputs {
            vm_deleting,
            strategy,
            vmi: vmi.as_ref(),
            action: &action,
            requests: &requests,
            volumes,
            start_failure: start_failure.as_ref(),
        })),
        // Recorded once acted on: a start is recorded when its VMI is seen, so a failed create
        // is retried (RerunOnFailure and Once start only when coming from another strategy).
        run_strategy: if action == VmAction::Start {
            previous.run_strategy
        } else {
            Some(strategy)
        },
        conditions,
        state_change_requests: requests,
        start_failure,
        desired_generation: vmi
            .as_ref()
            .and_then(|v| v.annotations().get(VM_GENERATION_ANNOTATION))
            .and_then(|g| g.parse().ok())
            .or(previous.desired_generation),
        observed_generation: vm.metadata.generation,
    };
    if let Some(patch) = merge_status_patch(&previous, &status, vm.resource_version())? {
        match vms
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => {}
            Err(err) if vm_deleting && is_not_found(&err) => return Ok(Action::await_change()),
            Err(err) => return Err(err.into()),
        }
    }

    if vm_deleting {
        if let VmAction::Stop { uid, .. } = &action {
            delete_vmi(&vmis, &name, uid).await?;
        }
        if vmi.is_none() && has_finalizer {
            patch_finalizers(&vms, &name, |list| {
                list.iter()
                    .filter(|f| *f != finalizers::VM_CONTROLLER)
                    .cloned()
                    .collect()
            })
            .await?;
        }
        return Ok(Action::requeue(Duration::from_secs(5)));
    }
    if !has_finalizer {
        patch_finalizers(&vms, &name, |list| {
            let mut list = list.to_vec();
            list.push(finalizers::VM_CONTROLLER.into());
            list
        })
        .await?;
    }
    match action {
        VmAction::Start => {
            let body = vmi_for(&raw, &vm_uid);
            let new: DynamicObject = serde_json::from_value(body).map_err(|err| {
                Error::Other(format!("building the VMI of {namespace}/{name}: {err}"))
            })?;
            match vmis.create(&PostParams::default(), &new).await {
                Ok(created) => tracing::info!(
                    %namespace, %name, uid = created.uid().unwrap_or_default(),
                    "simulated KubeVirt started a VMI"
                ),
                Err(err) if is_conflict(&err) => {}
                // Refused (an admission webhook, the schema, a namespace being deleted): reported
                // on the VM as KubeVirt reports it, and tried again.
                Err(kube::Error::Api(refusal)) if is_refusal(&refusal) => {
                    tracing::info!(
                        %namespace, %name, "simulated KubeVirt could not start a VMI: {}",
                        refusal.message
                    );
                    let mut conditions = status.conditions.clone();
                    set_condition(&mut conditions, start_refused(&refusal.message, &now));
                    let patch = json!({"status": {"conditions": conditions}});
                    match vms
                        .patch_status(&name, &PatchParams::default(), &Patch::Merge(patch))
                        .await
                    {
                        Ok(_) => {}
                        Err(err) if is_not_found(&err) => {}
                        Err(err) => return Err(err.into()),
                    }
                    return Ok(Action::requeue(START_REFUSED_RETRY));
                }
                Err(err) => return Err(err.into()),
            }
            Ok(Action::await_change())
        }
        VmAction::Stop { uid, .. } => {
            delete_vmi(&vmis, &name, &uid).await?;
            Ok(Action::await_change())
        }
        VmAction::Backoff(left) => Ok(Action::requeue(left)),
        VmAction::Nothing => Ok(Action::requeue(Duration::from_secs(60))),
    }
}

/// An answer of the API server that retrying the same request cannot change by itself: a client
/// error other than a conflict or throttling.
fn is_refusal(status: &kube::core::Status) -> bool {
    (400..500).contains(&status.code) && status.code != 409 && status.code != 429
}

async fn delete_vmi(vmis: &Api<DynamicObject>, name: &str, uid: &str) -> Result<(), Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match vmis.delete(name, &params).await {
        Ok(_) => {
            tracing::info!(name, uid, "simulated KubeVirt stops a VMI");
            Ok(())
        }
        Err(err) if is_not_found(&err) || is_conflict(&err) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Rewrites the VM's finalizers with `change`, on a fresh read and guarded by its resource
/// version (a concurrent change fails the write; the pass is retried).
async fn patch_finalizers(
    api: &Api<DynamicObject>,
    name: &str,
    change: impl FnOnce(&[String]) -> Vec<String>,
) -> Result<(), Error> {
    let Some(current) = api.get_opt(name).await? else {
        return Ok(());
    };
    let list = change(current.finalizers());
    if list.as_slice() == current.finalizers() {
        return Ok(());
    }
    let patch = json!({
        "metadata": {"finalizers": list, "resourceVersion": current.resource_version()},
    });
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(err) if is_not_found(&err) => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// The VMI KubeVirt creates from a VM: the template (kept verbatim, so fields this crate does not
/// model survive), named like the VM, controlled by it, labelled `vm.kubevirt.io/name`, with the
/// default pod network interface and a disk for every volume without one (KubeVirt's defaults),
/// and the VMI finalizer.
pub fn vmi_for(vm: &DynamicObject, vm_uid: &str) -> Value {
    let name = vm.name_any();
    let template = &vm.data["spec"]["template"];
    let mut spec = template["spec"].clone();
    if !spec.is_object() {
        spec = json!({});
    }
    defaults::apply_spec_defaults(&mut spec);
    let mut vmi_labels: BTreeMap<String, Value> = template["metadata"]["labels"]
        .as_object()
        .map(|m| m.clone().into_iter().collect())
        .unwrap_or_default();
    vmi_labels.insert(labels::VM_NAME.into(), json!(name));
    let mut annotations: BTreeMap<String, Value> = template["metadata"]["annotations"]
        .as_object()
        .map(|m| m.clone().into_iter().collect())
        .unwrap_or_default();
    if let Some(generation) = vm.metadata.generation {
        annotations.insert(
            VM_GENERATION_ANNOTATION.into(),
            json!(generation.to_string()),
        );
    }
    json!({
        "apiVersion": VirtualMachineInstance::api_version(&()),
        "kind": VirtualMachineInstance::kind(&()),
        "metadata": {
            "name": name,
            "namespace": vm.namespace(),
            "labels": vmi_labels,
            "annotations": annotations,
            "ownerReferences": [{
                "apiVersion": VirtualMachine::api_version(&()),
                "kind": VirtualMachine::kind(&()),
                "name": name,
                "uid": vm_uid,
                "controller": true,
                "blockOwnerDeletion": true,
            }],
            "finalizers": [finalizers::VMI_FOREGROUND_DELETE],
        },
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vm(spec: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine",
            "metadata": {"name": "crc", "namespace": "ns", "generation": 3},
            "spec": spec,
        }))
        .unwrap()
    }

    #[test]
    fn vmi_copies_the_template_verbatim_with_kubevirt_defaults() {
        let vm = vm(json!({"runStrategy": "Always", "template": {
        "metadata": {"labels": {"app": "crc"}, "annotations": {"a": "b"}},
        "spec": {
            "hostname": "crc",
            "terminationGracePeriodSeconds": 900,
            "someFutureField": {"x": 1},
            "domain": {"devices": {"disks": [{"name": "root", "bootOrder": 1}]}},
            "volumes": [{"name": "root", "dataVolume": {"name": "crc-root"}},
                        {"name": "iso", "persistentVolumeClaim": {"claimName": "crc-iso"}}],
        }}}));
        let vmi = vmi_for(&vm, "vm-uid");
        assert_eq!(vmi["metadata"]["name"], "crc");
        assert_eq!(vmi["metadata"]["namespace"], "ns");
        assert_eq!(
            vmi["metadata"]["labels"],
            json!({"app": "crc", "vm.kubevirt.io/name": "crc"})
        );
        assert_eq!(
            vmi["metadata"]["annotations"],
            json!({"a": "b", "kubevirt.io/vm-generation": "3"})
        );
        assert_eq!(vmi["metadata"]["ownerReferences"][0]["uid"], "vm-uid");
        assert_eq!(vmi["metadata"]["ownerReferences"][0]["controller"], true);
        assert_eq!(
            vmi["metadata"]["finalizers"],
            json!(["foregroundDeleteVirtualMachine"])
        );
        let spec = &vmi["spec"];
        assert_eq!(spec["someFutureField"], json!({"x": 1}));
        assert_eq!(spec["terminationGracePeriodSeconds"], 900);
        assert_eq!(
            spec["domain"]["devices"]["disks"],
            json!([{"name": "root", "bootOrder": 1}, {"name": "iso", "disk": {}}])
        );
        assert_eq!(
            spec["domain"]["devices"]["interfaces"],
            json!([{"name": "default", "masquerade": {}}])
        );
        assert_eq!(spec["networks"], json!([{"name": "default", "pod": {}}]));
        let typed: VirtualMachineInstance = serde_json::from_value(vmi).unwrap();
        assert_eq!(typed.spec.volumes.len(), 2);
    }

    #[test]
    fn explicit_networks_are_kept() {
        let vm = vm(json!({"template": {"spec": {
            "domain": {"devices": {"interfaces": [{"name": "crcnet", "bridge": {}}]}},
            "networks": [{"name": "crcnet", "multus": {"networkName": "crc-net"}}],
        }}}));
        let vmi = vmi_for(&vm, "u");
        assert_eq!(
            vmi["spec"]["networks"],
            json!([{"name": "crcnet", "multus": {"networkName": "crc-net"}}])
        );
        let empty = vmi_for(&self::vm(json!({})), "u");
        assert_eq!(empty["spec"]["networks"][0]["name"], "default");
    }
}
