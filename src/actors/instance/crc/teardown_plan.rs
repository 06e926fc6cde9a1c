//! The order a CRC instance is torn down in (`docs/operations.md`, "Deleting an instance"), as a
//! pure function of what still exists. Each pass takes the first step that applies; the actor
//! performs it and looks again.
//!
//! Why this order: agent Jobs go first, because their pods mount the boot-key copy and run as the
//! per-instance account; the VM is halted and its VMI and launcher pods are gone before storage is
//! deleted, so a disk is never pulled from under a running guest; storage is waited for until it
//! is really gone, so a pool's capacity stays held until then.

use crate::kubevirt::RunStrategy;

/// An object the teardown may delete: name and UID (deletes carry a UID precondition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Obj {
    pub name: String,
    pub uid: String,
    /// Already being deleted: wait for it rather than deleting again.
    pub deleting: bool,
}

/// The VirtualMachine as the teardown sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vm {
    pub obj: Obj,
    /// `spec.runStrategy` (or the `running` equivalent).
    pub spec_run_strategy: RunStrategy,
}

/// What still exists of an instance being deleted; only objects the instance controls (or whose
/// parent it recorded) are listed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Remaining {
    pub jobs: Vec<Obj>,
    pub role: Option<Obj>,
    pub role_binding: Option<Obj>,
    pub service_account: Option<Obj>,
    pub boot_key: Option<Obj>,
    pub vm: Option<Vm>,
    pub vmi: Option<Obj>,
    pub launcher_pods: Vec<Obj>,
    pub data_volume: Option<Obj>,
    pub pvc: Option<Obj>,
    pub handoffs: Vec<Obj>,
    pub route: Option<Obj>,
    pub service: Option<Obj>,
}

/// The next teardown step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Delete (foreground) these Jobs, then wait for them to be gone.
    DeleteJobs(Vec<Obj>),
    /// Delete the agent's Role, RoleBinding and ServiceAccount.
    DeleteAgentAccess(Vec<Kinded>),
    DeleteBootKey(Obj),
    /// Set `runStrategy: Halted`.
    HaltVm(Obj),
    /// The guest is stopping: wait for the VMI to go.
    WaitForVmi(Obj),
    DeleteLauncherPods(Vec<Obj>),
    DeleteVm(Obj),
    DeleteDataVolume(Obj),
    DeletePvc(Obj),
    DeleteHandoffs(Vec<Obj>),
    DeleteExposure(Vec<Kinded>),
    /// Everything is gone: release the finalizer.
    Done,
}

/// An object with its kind, for steps that delete several kinds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kinded {
    pub kind: &'static str,
    pub obj: Obj,
}

/// The first step that applies. A step whose objects are all already deleting is a wait: the
/// step is returned again so the actor does not move on before they are gone.
pub fn next(remaining: &Remaining) -> Step {
    if !remaining.jobs.is_empty() {
        return Step::DeleteJobs(remaining.jobs.clone());
    }
    let access: Vec<Kinded> = [
        ("Role", &remaining.role),
        ("RoleBinding", &remaining.role_binding),
        ("ServiceAccount", &remaining.service_account),
    ]
    .into_iter()
    .filter_map(|(kind, obj)| obj.clone().map(|obj| Kinded { kind, obj }))
    .collect();
    if !access.is_empty() {
        return Step::DeleteAgentAccess(access);
    }
    if let Some(key) = &remaining.boot_key {
        return Step::DeleteBootKey(key.clone());
    }
    if let Some(vm) = &remaining.vm
        && vm.spec_run_strategy != RunStrategy::Halted
        && !vm.obj.deleting
    {
        return Step::HaltVm(vm.obj.clone());
    }
    if let Some(vmi) = &remaining.vmi {
        return Step::WaitForVmi(vmi.clone());
    }
    if !remaining.launcher_pods.is_empty() {
        return Step::DeleteLauncherPods(remaining.launcher_pods.clone());
    }
    if let Some(vm) = &remaining.vm {
        return Step::DeleteVm(vm.obj.clone());
    }
    if let Some(dv) = &remaining.data_volume {
        return Step::DeleteDataVolume(dv.clone());
    }
    if let Some(pvc) = &remaining.pvc {
        return Step::DeletePvc(pvc.clone());
    }
    if !remaining.handoffs.is_empty() {
        return Step::DeleteHandoffs(remaining.handoffs.clone());
    }
    let exposure: Vec<Kinded> = [("Route", &remaining.route), ("Service", &remaining.service)]
        .into_iter()
        .filter_map(|(kind, obj)| obj.clone().map(|obj| Kinded { kind, obj }))
        .collect();
    if !exposure.is_empty() {
        return Step::DeleteExposure(exposure);
    }
    Step::Done
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj(name: &str) -> Obj {
        Obj {
            name: name.into(),
            uid: format!("{name}-uid"),
            deleting: false,
        }
    }

    fn everything() -> Remaining {
        Remaining {
            jobs: vec![obj("job")],
            role: Some(obj("role")),
            role_binding: Some(obj("rb")),
            service_account: Some(obj("sa")),
            boot_key: Some(obj("key")),
            vm: Some(Vm {
                obj: obj("vm"),
                spec_run_strategy: RunStrategy::Always,
            }),
            vmi: Some(obj("vmi")),
            launcher_pods: vec![obj("pod")],
            data_volume: Some(obj("dv")),
            pvc: Some(obj("pvc")),
            handoffs: vec![obj("handoff")],
            route: Some(obj("route")),
            service: Some(obj("svc")),
        }
    }

    /// Applies a step the way the API would once it completes.
    fn complete(remaining: &mut Remaining, step: &Step) {
        match step {
            Step::DeleteJobs(_) => remaining.jobs.clear(),
            Step::DeleteAgentAccess(_) => {
                remaining.role = None;
                remaining.role_binding = None;
                remaining.service_account = None;
            }
            Step::DeleteBootKey(_) => remaining.boot_key = None,
            Step::HaltVm(_) => {
                if let Some(vm) = &mut remaining.vm {
                    vm.spec_run_strategy = RunStrategy::Halted;
                }
            }
            Step::WaitForVmi(_) => remaining.vmi = None,
            Step::DeleteLauncherPods(_) => remaining.launcher_pods.clear(),
            Step::DeleteVm(_) => remaining.vm = None,
            Step::DeleteDataVolume(_) => remaining.data_volume = None,
            Step::DeletePvc(_) => remaining.pvc = None,
            Step::DeleteHandoffs(_) => remaining.handoffs.clear(),
            Step::DeleteExposure(_) => {
                remaining.route = None;
                remaining.service = None;
            }
            Step::Done => {}
        }
    }

    #[test]
    fn teardown_runs_in_upstream_order() {
        let mut remaining = everything();
        let mut order = Vec::new();
        loop {
            let step = next(&remaining);
            if step == Step::Done {
                break;
            }
            order.push(format!("{step:?}").split('(').next().unwrap().to_owned());
            complete(&mut remaining, &step);
        }
        assert_eq!(
            order,
            [
                "DeleteJobs",
                "DeleteAgentAccess",
                "DeleteBootKey",
                "HaltVm",
                "WaitForVmi",
                "DeleteLauncherPods",
                "DeleteVm",
                "DeleteDataVolume",
                "DeletePvc",
                "DeleteHandoffs",
                "DeleteExposure"
            ]
        );
    }

    #[test]
    fn storage_waits_while_the_guest_runs() {
        let remaining = Remaining {
            vm: Some(Vm {
                obj: obj("vm"),
                spec_run_strategy: RunStrategy::Halted,
            }),
            vmi: Some(obj("vmi")),
            data_volume: Some(obj("dv")),
            ..Default::default()
        };
        assert_eq!(next(&remaining), Step::WaitForVmi(obj("vmi")));
    }

    #[test]
    fn nothing_left_is_done() {
        assert_eq!(next(&Remaining::default()), Step::Done);
    }
}
