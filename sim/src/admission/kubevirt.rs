//! virt-api's admission of VirtualMachines (`virtualmachine-validator.kubevirt.io`, on create
//! and update) and of new VirtualMachineInstances
//! (`virtualmachineinstances-create-validator.kubevirt.io`): the template or spec rules of
//! [`vmi_spec`](super::vmi_spec) after KubeVirt's defaults, the run strategy, and what a VMI
//! must have to be created (a disk per volume, memory).

use serde_json::Value;

use super::{
    Amount, CauseType, Denial, FieldPath, Verdict, is_set, items, quantity, text, verdict,
};
use crate::kubevirt::defaults::apply_spec_defaults;

/// Run strategies a VM may have (`WaitAsReceiver` needs a feature gate that is off).
const RUN_STRATEGIES: [&str; 5] = ["Halted", "Manual", "Always", "RerunOnFailure", "Once"];

/// The deprecation warning virt-api returns for a VM that sets `spec.running`.
pub const RUNNING_DEPRECATED: &str =
    "spec.running is deprecated, please use spec.runStrategy instead.";

/// The VM admission: `vm` is the object of the request (create or update).
pub fn validate_vm(vm: &Value) -> Verdict {
    // A VM being deleted is let through so its finalizers can go.
    if is_set(&vm["metadata"], "deletionTimestamp") {
        return Ok(());
    }
    let spec = &vm["spec"];
    let field = FieldPath::new("spec");
    if !is_set(spec, "template") {
        return Err(vec![Denial::new(
            CauseType::FieldValueRequired,
            field.child("template"),
            "missing virtual machine template.",
        )]);
    }
    // Validated on a defaulted copy, as virt-api does; the stored VM keeps what was sent.
    let mut template_spec = spec["template"]["spec"].clone();
    apply_spec_defaults(&mut template_spec);
    let mut denials =
        super::vmi_spec::validate(&field.children(&["template", "spec"]), &template_spec);
    denials.extend(run_strategy(&field, spec));
    verdict(denials)
}

/// Warnings virt-api adds to an admitted VM.
pub fn vm_warnings(vm: &Value) -> Vec<String> {
    if is_set(&vm["spec"], "running") {
        vec![RUNNING_DEPRECATED.to_owned()]
    } else {
        Vec::new()
    }
}

/// `validateRunStrategy`: exactly one of `running` and `runStrategy`, and a known strategy.
fn run_strategy(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let mut denials = Vec::new();
    let running = is_set(spec, "running");
    let strategy = spec.get("runStrategy").and_then(Value::as_str);
    if running && strategy.is_some() {
        denials.push(Denial::invalid(
            field.child("running"),
            "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead",
        ));
    }
    if !running && strategy.is_none() {
        denials.push(Denial::invalid(
            field.child("running"),
            "RunStrategy must be specified",
        ));
    }
    match strategy {
        Some("WaitAsReceiver") => denials.push(Denial::invalid(
            field.child("runStrategy"),
            "Invalid RunStrategy (WaitAsReceiver), DecentralizedLiveMigration feature gate is not enabled in kubevirt resource",
        )),
        Some(s) if !RUN_STRATEGIES.contains(&s) => denials.push(Denial::invalid(
            field.child("runStrategy"),
            format!("Invalid RunStrategy ({s})"),
        )),
        _ => {}
    }
    denials
}

/// The VMI create admission: `vmi` is the new VMI. Defaults are applied first, as virt-api's
/// mutating webhook does before the validating one runs.
pub fn validate_vmi_create(vmi: &Value) -> Verdict {
    let field = FieldPath::new("spec");
    let mut spec = vmi["spec"].clone();
    apply_spec_defaults(&mut spec);
    let mut denials = super::vmi_spec::validate(&field, &spec);
    denials.extend(volumes_have_devices(&field, &spec));
    denials.extend(memory_requested(&field, &spec));
    verdict(denials)
}

/// `validateVirtualMachineInstanceSpecVolumeDisks`: every volume is a disk or a filesystem
/// (a memory dump volume excepted).
fn volumes_have_devices(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let devices = &spec["domain"]["devices"];
    let named =
        |list: &str, name: &str| items(devices, list).iter().any(|d| text(d, "name") == name);
    items(spec, "volumes")
        .iter()
        .enumerate()
        .filter(|(_, v)| !is_set(v, "memoryDump"))
        .filter_map(|(i, v)| {
            let name = text(v, "name");
            if named("disks", name) || named("filesystems", name) {
                return None;
            }
            // Upstream's path says `domain.volumes`.
            let path = field
                .children(&["domain", "volumes"])
                .index(i)
                .child("name");
            Some(Denial::invalid(
                &path,
                format!("{path} '{name}' not found."),
            ))
        })
        .collect()
}

/// `ValidateVirtualMachineInstanceMandatoryFields`: some memory is asked for. The guest memory
/// defaults from a non-zero memory request or limit, so any of these will do.
fn memory_requested(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let domain = &spec["domain"];
    let nonzero = |v: Option<&Value>| {
        matches!(
            quantity(v),
            Some(Amount::Negative) | Some(Amount::Bytes(1..))
        )
    };
    let requested = nonzero(domain["resources"]["requests"].get("memory"))
        || nonzero(domain["resources"]["limits"].get("memory"))
        || is_set(&domain["memory"], "guest")
        || is_set(&domain["memory"], "hugepages");
    if requested {
        return Vec::new();
    }
    let memory = field.children(&["domain", "memory"]);
    vec![Denial::new(
        CauseType::FieldValueRequired,
        "",
        format!(
            "no memory requested, at least one of '{}', '{}' or '{}' must be set",
            memory.child("guest"),
            memory.children(&["hugepages", "pageSize"]),
            field.children(&["domain", "resources", "requests", "memory"]),
        ),
    )]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A VM that passes: what the operator creates, reduced.
    fn vm() -> Value {
        json!({
            "metadata": {"name": "crc"},
            "spec": {
                "runStrategy": "Always",
                "template": {"spec": {
                    "domain": {
                        "resources": {"requests": {"memory": "16Gi", "cpu": "4"}},
                        "devices": {"disks": [{"name": "rootdisk", "disk": {"bus": "virtio"}}]},
                    },
                    "volumes": [{"name": "rootdisk", "dataVolume": {"name": "crc-rootdisk"}}],
                }},
            },
        })
    }

    fn messages(verdict: Verdict) -> Vec<String> {
        verdict
            .expect_err("refused")
            .into_iter()
            .map(|d| d.message)
            .collect()
    }

    #[test]
    fn the_operators_vm_passes() {
        assert_eq!(validate_vm(&vm()), Ok(()));
        assert!(vm_warnings(&vm()).is_empty());
    }

    #[test]
    fn a_vm_needs_a_template() {
        let mut vm = vm();
        vm["spec"].as_object_mut().unwrap().remove("template");
        let denials = validate_vm(&vm).unwrap_err();
        assert_eq!(denials[0].message, "missing virtual machine template.");
        assert_eq!(denials[0].field, "spec.template");
    }

    #[test]
    fn running_and_run_strategy_are_mutually_exclusive() {
        let mut vm = vm();
        vm["spec"]["running"] = json!(true);
        let denials = validate_vm(&vm).unwrap_err();
        assert_eq!(
            denials[0].message,
            "Running and RunStrategy are mutually exclusive. Note that Running is deprecated, please use RunStrategy instead"
        );
        assert_eq!(denials[0].field, "spec.running");
    }

    #[test]
    fn legacy_running_alone_passes_with_a_warning() {
        let mut vm = vm();
        vm["spec"].as_object_mut().unwrap().remove("runStrategy");
        vm["spec"]["running"] = json!(false);
        assert_eq!(validate_vm(&vm), Ok(()));
        assert_eq!(vm_warnings(&vm), vec![RUNNING_DEPRECATED.to_owned()]);
    }

    #[test]
    fn a_run_strategy_must_be_given() {
        let mut vm = vm();
        vm["spec"].as_object_mut().unwrap().remove("runStrategy");
        assert_eq!(
            messages(validate_vm(&vm)),
            ["RunStrategy must be specified"]
        );
        vm["spec"]["running"] = Value::Null;
        assert_eq!(
            messages(validate_vm(&vm)),
            ["RunStrategy must be specified"]
        );
    }

    #[test]
    fn run_strategies_are_upstreams() {
        for ok in RUN_STRATEGIES {
            let mut vm = vm();
            vm["spec"]["runStrategy"] = json!(ok);
            assert_eq!(validate_vm(&vm), Ok(()), "{ok}");
        }
        let mut vm = vm();
        vm["spec"]["runStrategy"] = json!("always");
        let denials = validate_vm(&vm).unwrap_err();
        assert_eq!(denials[0].message, "Invalid RunStrategy (always)");
        assert_eq!(denials[0].field, "spec.runStrategy");
        vm["spec"]["runStrategy"] = json!("WaitAsReceiver");
        assert_eq!(
            messages(validate_vm(&vm)),
            [
                "Invalid RunStrategy (WaitAsReceiver), DecentralizedLiveMigration feature gate is not enabled in kubevirt resource"
            ]
        );
    }

    #[test]
    fn the_template_is_validated_after_kubevirts_defaults() {
        // A volume without a disk gets one, and no interfaces means the pod network: both pass.
        let mut vm = vm();
        vm["spec"]["template"]["spec"]["volumes"]
            .as_array_mut()
            .unwrap()
            .push(json!({"name": "iso", "persistentVolumeClaim": {"claimName": "iso"}}));
        assert_eq!(validate_vm(&vm), Ok(()));
        // Template rules report template paths.
        vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["bootOrder"] = json!(0);
        let denials = validate_vm(&vm).unwrap_err();
        assert_eq!(
            denials[0].message,
            "spec.template.spec.domain.devices.disks[0] must have a boot order > 0, if supplied"
        );
        assert_eq!(
            denials[0].field,
            "spec.template.spec.domain.devices.disks[0].bootOrder"
        );
    }

    #[test]
    fn template_rules_come_before_the_run_strategy() {
        let mut vm = vm();
        vm["spec"]["runStrategy"] = json!("Sometimes");
        vm["spec"]["template"]["spec"]["domain"]["devices"]["disks"][0]["disk"]["bus"] =
            json!("ide");
        assert_eq!(
            messages(validate_vm(&vm)),
            [
                "IDE bus is not supported",
                "Invalid RunStrategy (Sometimes)"
            ]
        );
    }

    #[test]
    fn a_vm_being_deleted_passes() {
        let mut vm = vm();
        vm["spec"]["runStrategy"] = json!("Sometimes");
        vm["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(validate_vm(&vm), Ok(()));
    }

    #[test]
    fn a_vmi_needs_memory() {
        let vmi = json!({"spec": {"domain": {"devices": {}}}});
        let denials = validate_vmi_create(&vmi).unwrap_err();
        assert_eq!(
            denials[0].message,
            "no memory requested, at least one of 'spec.domain.memory.guest', \
             'spec.domain.memory.hugepages.pageSize' or 'spec.domain.resources.requests.memory' \
             must be set"
        );
        assert_eq!(denials[0].cause, CauseType::FieldValueRequired);
        for memory in [
            json!({"resources": {"requests": {"memory": "1Gi"}}}),
            json!({"resources": {"limits": {"memory": "1Gi"}}}),
            json!({"memory": {"guest": "1Gi"}}),
            json!({"memory": {"hugepages": {"pageSize": "2Mi"}}}),
        ] {
            let mut vmi = json!({"spec": {"domain": memory}});
            vmi["spec"]["domain"]["devices"] = json!({});
            assert_eq!(validate_vmi_create(&vmi), Ok(()), "{vmi}");
        }
        // A zero request asks for nothing.
        let vmi = json!({"spec": {"domain": {"resources": {"requests": {"memory": "0"}}}}});
        assert!(validate_vmi_create(&vmi).is_err());
    }

    #[test]
    fn a_vmi_volume_needs_a_disk_or_filesystem_after_defaults() {
        // Defaults add the disk, so a VMI as created passes ...
        let vmi = json!({"spec": {
            "domain": {"resources": {"requests": {"memory": "1Gi"}}},
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}],
        }});
        assert_eq!(validate_vmi_create(&vmi), Ok(()));
        // ... and the rule itself names the volume.
        let spec = json!({"volumes": [
            {"name": "root", "persistentVolumeClaim": {"claimName": "root"}},
            {"name": "dump", "memoryDump": {"claimName": "dump"}},
        ]});
        let denials = volumes_have_devices(&FieldPath::new("spec"), &spec);
        assert_eq!(denials.len(), 1, "a memory dump needs no disk");
        assert_eq!(
            denials[0].message,
            "spec.domain.volumes[0].name 'root' not found."
        );
    }

    #[test]
    fn vmi_spec_rules_apply_to_a_new_vmi_with_vmi_paths() {
        let vmi = json!({"spec": {
            "domain": {
                "resources": {"requests": {"memory": "1Gi"}},
                "devices": {"disks": [{"name": "iso", "cdrom": {"bus": "virtio"}}]},
            },
            "volumes": [{"name": "iso", "persistentVolumeClaim": {"claimName": "iso"}}],
        }});
        let denials = validate_vmi_create(&vmi).unwrap_err();
        assert_eq!(
            denials[0].message,
            "Bus type virtio is invalid for CD-ROM device"
        );
        assert_eq!(denials[0].field, "spec.domain.devices.disks[0].cdrom.bus");
    }
}
