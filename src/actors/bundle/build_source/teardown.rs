//! Deleting a build-sourced bundle (`docs/operations.md`, "CRCBundle (build source)"): under the
//! `build-cleanup` finalizer, the Jobs are stopped and the build VM halted first; only once no
//! Job, VMI or virt-launcher pod remains are the VM, the volumes and the rest deleted; the
//! finalizer goes once nothing recorded is left. So no guest or helper ever runs on a volume that
//! is being deleted, and nothing of the build outlives its bundle. Pure: [`super::teardown_pass`]
//! reads and acts.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actors::bundle::build_source::step::{Action, VmRole, VmSeen};
use crate::actors::bundle::build_source::temps::Temp;
use crate::api::bundle::{CRCBundle, CRCBundleStatus};
use crate::api::conditions::{self, reasons, types};

/// A recorded temporary object as a teardown pass found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    /// Not there (any more).
    Gone,
    /// Ours (controlled by the bundle, the recorded UID).
    Ours,
    /// Ours and already being deleted: waited for.
    Deleting,
    /// Another object under the name: never deleted, and forgotten.
    NotOurs,
}

/// Where the object under a recorded name stands, from its metadata.
pub fn presence(
    recorded: &crate::api::common::ObjectIdentity,
    owner_uid: &str,
    meta: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta>,
) -> Presence {
    use crate::actors::runtime::stage::{Observation, judge_meta};
    match (meta, judge_meta(recorded, owner_uid, meta)) {
        (None, _) => Presence::Gone,
        (Some(_), None) => Presence::Ours,
        (Some(_), Some(Observation::Lost)) => Presence::Deleting,
        (Some(_), Some(_)) => Presence::NotOurs,
    }
}

/// What a teardown pass read: each recorded object (UID known) and the build VM.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub temps: BTreeMap<Temp, Presence>,
    /// The build VM, when it is recorded and ours.
    pub vm: Option<VmSeen>,
    /// The validation VM, when it is recorded and ours.
    pub validation_vm: Option<VmSeen>,
}

/// The next teardown step.
#[derive(Clone, Debug, PartialEq)]
pub struct Teardown {
    pub status: CRCBundleStatus,
    pub actions: Vec<Action>,
    /// Nothing recorded is left: the finalizer may go.
    pub done: bool,
}

const JOBS: [Temp; 3] = [Temp::InstallerJob, Temp::HelperJob, Temp::DiskJob];

pub fn teardown(bundle: &CRCBundle, seen: &Seen, now: Time) -> Teardown {
    let mut status = bundle.status.clone().unwrap_or_default();
    let mut actions = Vec::new();
    let build = status.build.get_or_insert_with(Default::default);
    let resources = build.resources.get_or_insert_with(Default::default);

    // First the Jobs and the guest.
    let jobs_left = settle(resources, seen, &JOBS, &mut actions);
    let mut vm_stopped = true;
    for (role, vm) in [
        (VmRole::Build, &seen.vm),
        (VmRole::Validation, &seen.validation_vm),
    ] {
        vm_stopped &= vm
            .as_ref()
            .is_none_or(|vm| vm.halted && vm.halt_observed && vm.vmi.is_none() && !vm.launcher_pod);
        if vm.as_ref().is_some_and(|vm| !vm.halted) {
            actions.push(Action::HaltVm(role));
        }
    }
    let message = if jobs_left > 0 || !vm_stopped {
        let mut waiting = Vec::new();
        if jobs_left > 0 {
            waiting.push(format!("{jobs_left} Job(s) to stop"));
        }
        if !vm_stopped {
            waiting.push("the VMs to halt and release their disks".to_owned());
        }
        format!("deleting: waiting for {}", waiting.join(" and "))
    } else {
        // Then everything else: the VM, its volumes, the accounts and Secrets.
        let others: Vec<Temp> = Temp::ALL
            .iter()
            .copied()
            .filter(|t| !JOBS.contains(t))
            .collect();
        match settle(resources, seen, &others, &mut actions) {
            0 => String::new(),
            left => format!("deleting: {left} object(s) of the build left"),
        }
    };
    let done = message.is_empty();
    if !done {
        build.message = Some(message.clone());
        conditions::set(
            &mut status.conditions,
            conditions::new(
                types::READY,
                false,
                reasons::CLEANUP_IN_PROGRESS,
                message,
                bundle.metadata.generation,
                now,
            ),
        );
    }
    Teardown {
        status,
        actions,
        done,
    }
}

/// Deletes each of `temps` that is ours, forgets the ones gone or not ours; returns how many
/// are still there (ours, or ours and going).
fn settle(
    resources: &mut crate::api::bundle::BuildResources,
    seen: &Seen,
    temps: &[Temp],
    actions: &mut Vec<Action>,
) -> usize {
    let mut left = 0;
    for &temp in temps {
        let Some(recorded) = temp.slot(resources).cloned() else {
            continue;
        };
        // Named but never created (a crash between the write-ahead and the create would
        // have recorded the UID on the next pass; a deletion ends that): nothing to wait for.
        if recorded.uid.is_empty() {
            *temp.slot_mut(resources) = None;
            continue;
        }
        match seen.temps.get(&temp) {
            Some(Presence::Ours) => {
                actions.push(Action::Delete {
                    temp,
                    name: recorded.name,
                    uid: recorded.uid,
                });
                left += 1;
            }
            Some(Presence::Deleting) | None => left += 1,
            Some(Presence::Gone | Presence::NotOurs) => *temp.slot_mut(resources) = None,
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::bundle::{BuildResources, BuildStatus, CRCBundleSpec};
    use crate::api::common::ObjectIdentity;
    use crate::resources::profile::vm::BuildBoot;
    use k8s_openapi::jiff::Timestamp;

    fn id(name: &str) -> Option<ObjectIdentity> {
        Some(ObjectIdentity {
            name: name.into(),
            uid: format!("uid-{name}"),
        })
    }

    fn building() -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
            "goldenVolumeSize": "80Gi",
            "build": {"releaseImage": "quay.io/x/release:4.22.3", "pullSecretRef": {"name": "p"}}
        }))
        .unwrap();
        let mut b = CRCBundle::new("custom", spec);
        b.status = Some(CRCBundleStatus {
            build: Some(BuildStatus {
                resources: Some(BuildResources {
                    installer_job: id("installer"),
                    helper_job: id("helper"),
                    work_pvc: id("work"),
                    root_data_volume: id("root"),
                    build_vm: id("vm"),
                    credentials_secret: Some(ObjectIdentity {
                        name: "creds".into(),
                        uid: String::new(),
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        b
    }

    fn now() -> Time {
        Time(Timestamp::from_second(1_800_000_000).unwrap())
    }

    fn running_vm() -> VmSeen {
        VmSeen {
            boot: Some(BuildBoot::Installed),
            launcher_pod: true,
            vmi: Some(crate::actors::bundle::build_source::step::VmiSeen {
                uid: "vmi".into(),
                phase: "Running".into(),
                ip: None,
                blocked: None,
            }),
            ..Default::default()
        }
    }

    fn deleted(t: &Teardown) -> Vec<Temp> {
        t.actions
            .iter()
            .filter_map(|a| match a {
                Action::Delete { temp, .. } => Some(*temp),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn jobs_and_the_guest_stop_before_any_volume_is_deleted_and_the_finalizer_goes_last() {
        let mut b = building();
        let mut seen = Seen {
            temps: [
                (Temp::InstallerJob, Presence::Ours),
                (Temp::HelperJob, Presence::Ours),
                (Temp::WorkPvc, Presence::Ours),
                (Temp::RootDataVolume, Presence::Ours),
                (Temp::BuildVm, Presence::Ours),
            ]
            .into(),
            vm: Some(running_vm()),
            validation_vm: Some(running_vm()),
        };
        let t = teardown(&b, &seen, now());
        assert_eq!(deleted(&t), [Temp::InstallerJob, Temp::HelperJob]);
        assert!(t.actions.contains(&Action::HaltVm(VmRole::Build)));
        assert!(t.actions.contains(&Action::HaltVm(VmRole::Validation)));
        assert!(!t.done);
        let ready = conditions::find(&t.status.conditions, types::READY).unwrap();
        assert_eq!(ready.reason, reasons::CLEANUP_IN_PROGRESS);
        assert!(ready.message.contains("2 Job(s)"), "{}", ready.message);
        b.status = Some(t.status);

        // Jobs going, the VM halted but its launcher pod still there: nothing else yet.
        seen.temps.insert(Temp::InstallerJob, Presence::Deleting);
        seen.temps.insert(Temp::HelperJob, Presence::Gone);
        seen.vm = Some(VmSeen {
            halted: true,
            halt_observed: true,
            launcher_pod: true,
            ..running_vm()
        });
        seen.vm.as_mut().unwrap().vmi = None;
        // The validation clone is already stopped and released: the build VM alone holds on.
        seen.validation_vm = Some(VmSeen {
            halted: true,
            halt_observed: true,
            launcher_pod: false,
            vmi: None,
            ..running_vm()
        });
        let t = teardown(&b, &seen, now());
        assert!(deleted(&t).is_empty(), "{:?}", t.actions);
        assert!(
            !t.actions.contains(&Action::HaltVm(VmRole::Build)),
            "already halted"
        );
        let resources = t.status.build.as_ref().unwrap().resources.as_ref().unwrap();
        assert_eq!(resources.helper_job, None, "a Job seen gone is forgotten");
        b.status = Some(t.status.clone());

        // Stopped: the VM, its volumes and the rest; the never-created Secret is just forgotten.
        seen.temps.insert(Temp::InstallerJob, Presence::Gone);
        seen.vm.as_mut().unwrap().launcher_pod = false;
        let t = teardown(&b, &seen, now());
        assert_eq!(
            deleted(&t),
            [Temp::WorkPvc, Temp::RootDataVolume, Temp::BuildVm]
        );
        assert!(!t.done);
        b.status = Some(t.status);

        // Everything gone (one replaced by a namesake, never touched): done.
        seen.temps = [
            (Temp::WorkPvc, Presence::Gone),
            (Temp::RootDataVolume, Presence::NotOurs),
            (Temp::BuildVm, Presence::Gone),
        ]
        .into();
        seen.vm = None;
        let t = teardown(&b, &seen, now());
        assert!(t.actions.is_empty());
        assert!(t.done);
    }

    #[test]
    fn a_bundle_with_nothing_recorded_is_done_at_once() {
        let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
            "goldenVolumeSize": "80Gi",
            "build": {"releaseImage": "quay.io/x/release:4.22.3", "pullSecretRef": {"name": "p"}}
        }))
        .unwrap();
        let t = teardown(&CRCBundle::new("custom", spec), &Seen::default(), now());
        assert!(t.done && t.actions.is_empty());
    }

    #[test]
    fn presence_is_read_from_metadata() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
            ObjectMeta, OwnerReference, Time as T,
        };
        let recorded = ObjectIdentity {
            name: "custom-b1-work".into(),
            uid: "u1".into(),
        };
        let meta = |uid: &str, owner: &str, deleting: bool| ObjectMeta {
            uid: Some(uid.into()),
            owner_references: Some(vec![OwnerReference {
                controller: Some(true),
                uid: owner.into(),
                ..Default::default()
            }]),
            deletion_timestamp: deleting.then(now).map(|t: Time| T(t.0)),
            ..Default::default()
        };
        assert_eq!(presence(&recorded, "b", None), Presence::Gone);
        assert_eq!(
            presence(&recorded, "b", Some(&meta("u1", "b", false))),
            Presence::Ours
        );
        assert_eq!(
            presence(&recorded, "b", Some(&meta("u1", "b", true))),
            Presence::Deleting
        );
        assert_eq!(
            presence(&recorded, "b", Some(&meta("u2", "b", false))),
            Presence::NotOurs
        );
        assert_eq!(
            presence(&recorded, "b", Some(&meta("u1", "x", false))),
            Presence::NotOurs
        );
    }
}
