//! The Install stage (`docs/design/certificates-and-time.md`, "2. Generator boot" to "4. Cold
//! restart"): the build VM and its volumes, then its three boots, each with its helper Job, and
//! the cold restart between the second and the third. Its child follows the build VM.

use crate::actors::bundle::build_source::session::{self, Session, SessionState, guest_session};
use crate::actors::bundle::build_source::step::{
    Action, BuildInput, Observed, Step, VmRole, ensure_temps, release,
};
use crate::actors::bundle::build_source::temps::{Built, Temp};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Stage, WhenLost, build_slot};
use crate::api::bundle::{BuildStage, BuildStatus, CRCBundleStatus, InstallStep};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::types;
use crate::contract::build_helper::Step as HelperStep;
use crate::kubevirt::VirtualMachine;
use crate::resources::build::{self, Names};
use crate::resources::profile::vm::BuildBoot;

/// What the Install stage makes, in creation order: the helper's account and credentials, the
/// build VM's volumes and the build VM up front, then a helper Job per boot.
pub const TEMPS: [Temp; 9] = [
    Temp::HelperAccount,
    Temp::HelperRole,
    Temp::HelperRoleBinding,
    Temp::CredentialsSecret,
    Temp::GuestPolicy,
    Temp::RootDataVolume,
    Temp::InstallIsoPvc,
    Temp::BuildVm,
    Temp::HelperJob,
];

/// The volumes the cold restart deletes: the live ISOs and the installer's work volume.
pub const RELEASED_BY_COLD_RESTART: [Temp; 3] = [Temp::WorkPvc, Temp::IsoPvc, Temp::InstallIsoPvc];

/// What the stages after the cold restart still need of the Install stage's objects.
pub fn after_cold_restart() -> Vec<Temp> {
    Temp::up_front(&TEMPS)
        .into_iter()
        .filter(|t| !RELEASED_BY_COLD_RESTART.contains(t))
        .collect()
}

/// The Install stage (`docs/design/certificates-and-time.md`, "2. Generator boot" to "4. Cold
/// restart"): the build VM's three boots, each with its helper Job, and the cold restart between
/// the second and the third.
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let install_step = step.build().install_step.unwrap_or(InstallStep::Generator);
    // After the cold restart the ISOs are gone on purpose: their absence fails nothing.
    let needed: Vec<Temp> = if install_step == InstallStep::Certificates {
        after_cold_restart()
    } else {
        Temp::up_front(&TEMPS)
    };
    if !ensure_temps(step, observed, names, &needed, types::INSTALLED, actions) {
        return;
    }
    if !actions.is_empty() {
        step.progress(
            BuildStage::Install,
            "creating the build VM and its volumes".into(),
        );
        return;
    }
    let (boot, helper_step) = match install_step {
        InstallStep::Generator => (
            BuildBoot::Generator {
                iso_claim: names.iso_pvc.clone(),
            },
            HelperStep::Generator,
        ),
        InstallStep::Install => (
            BuildBoot::Install {
                iso_claim: names.install_iso_pvc.clone(),
            },
            HelperStep::Install,
        ),
        InstallStep::ColdRestart | InstallStep::Certificates => {
            (BuildBoot::Installed, HelperStep::Certificates)
        }
    };
    if install_step == InstallStep::Certificates {
        // Once the cold restart has started them going, the ISOs and the work volume stay gone;
        // a deletion that a crash interrupted is sent again, and one seen through is forgotten.
        let resources = step
            .build_mut()
            .resources
            .get_or_insert_with(Default::default);
        release(resources, observed, &RELEASED_BY_COLD_RESTART, actions);
    }
    let session = Session {
        stage: BuildStage::Install,
        label: describe(install_step),
        role: VmRole::Build,
        boot,
        helper_step,
        // The cold restart's boot has no helper of its own: it only starts the VM.
        helper_counts: install_step != InstallStep::ColdRestart,
    };
    match guest_session(step, observed, names, actions, &session) {
        SessionState::Done(summary) => step_done(step, install_step, &summary, names),
        SessionState::Started if install_step == InstallStep::ColdRestart => {
            // The VM starts from its root disk alone: the ISOs and the work volume go.
            for temp in RELEASED_BY_COLD_RESTART {
                if let Some(recorded) = step.build().resources.as_ref().and_then(|r| temp.slot(r))
                    && !recorded.uid.is_empty()
                {
                    actions.push(Action::Delete {
                        temp,
                        name: recorded.name.clone(),
                        uid: recorded.uid.clone(),
                    });
                }
            }
            step.build_mut().install_step = Some(InstallStep::Certificates);
            step.progress(
                BuildStage::Install,
                format!(
                    "cold restart: VirtualMachine {} started on real time from its root disk alone; the ISO and work volumes are deleted",
                    names.build_vm
                ),
            );
        }
        _ => {}
    }
}

/// A later stage's session on the installed build VM (Customize, Seal): the Install stage's
/// objects it still needs checked, then one helper step on the VM on real time; the helper's
/// summary once it is done.
pub fn on_installed(
    step: &mut Step,
    observed: &Observed,
    names: &Names,
    actions: &mut Vec<Action>,
    (stage, label, helper_step): (BuildStage, &'static str, HelperStep),
) -> Option<String> {
    if !ensure_temps(
        step,
        observed,
        names,
        &after_cold_restart(),
        stage.condition(),
        actions,
    ) {
        return None;
    }
    let session = Session::on_installed(stage, label, helper_step);
    match guest_session(step, observed, names, actions, &session) {
        SessionState::Done(summary) => Some(summary),
        _ => None,
    }
}

/// The helper step of the Install stage's current boot.
pub fn helper_step(build: &BuildStatus) -> Option<HelperStep> {
    Some(match build.install_step? {
        InstallStep::Generator => HelperStep::Generator,
        InstallStep::Install => HelperStep::Install,
        InstallStep::ColdRestart | InstallStep::Certificates => HelperStep::Certificates,
    })
}

fn describe(step: InstallStep) -> &'static str {
    match step {
        InstallStep::Generator => "generator boot",
        InstallStep::Install => "install boot",
        InstallStep::ColdRestart => "cold restart",
        InstallStep::Certificates => "kubelet certificates",
    }
}

/// A helper finished its step: on to the next.
fn step_done(step: &mut Step, done: InstallStep, summary: &str, names: &Names) {
    let next = match done {
        InstallStep::Generator => Some(InstallStep::Install),
        InstallStep::Install => Some(InstallStep::ColdRestart),
        InstallStep::ColdRestart | InstallStep::Certificates => None,
    };
    match next {
        Some(next) => {
            step.build_mut().install_step = Some(next);
            step.progress(BuildStage::Install, format!("{}: {summary}", describe(done)));
        }
        None => step.succeed(
            BuildStage::Install,
            format!(
                "VirtualMachine {} installed a day behind real time and cold-restarted from its root disk alone; {summary}",
                names.build_vm
            ),
        ),
    }
}

/// The Install stage's objects: the helper's account and credentials, the build VM's volumes,
/// the build VM in its generator boot, and each boot's helper Job.
pub fn build(temp: Temp, input: &BuildInput) -> Result<Option<Built>, String> {
    let (bundle, ns, names) = (input.bundle, input.ns, input.names);
    Ok(Some(match temp {
        Temp::HelperAccount => build::helper_account(bundle, ns, names).into(),
        Temp::HelperRole => build::helper_role(bundle, ns, names).into(),
        Temp::HelperRoleBinding => build::helper_role_binding(bundle, ns, names).into(),
        Temp::CredentialsSecret => build::credentials_secret(bundle, ns, names).into(),
        Temp::GuestPolicy => build::guest_policy(bundle, ns, names).into(),
        Temp::RootDataVolume => build::root_data_volume(bundle, input.spec, ns, names).into(),
        Temp::InstallIsoPvc => build::install_iso_pvc(bundle, ns, names).into(),
        Temp::BuildVm => {
            let boot = BuildBoot::Generator {
                iso_claim: names.iso_pvc.clone(),
            };
            build::build_vm(bundle, ns, names, &boot)
                .map_err(|e| e.to_string())?
                .into()
        }
        // The decision named it for a running VMI it saw; one that cannot be built from this
        // pass's status and observations is a bug to see, retried with backoff.
        Temp::HelperJob => session::build_helper(input).ok_or_else(|| {
            "the helper Job's step, VMI or pinned release is not known to this pass".to_owned()
        })?,
        other => return Err(format!("the Install stage does not make {other:?}")),
    }))
}

/// The Install stage's child: the build VM, recorded in `status.build.resources.buildVM`. It
/// reports the VM's printable status and its VMI's as progress, so every change of either (the
/// VM's status follows its VMI) brings its parent back to decide; the parent reads the VM, its
/// VMI and launcher pod itself when it decides. A lost build VM fails the attempt: its root
/// disk's install cannot be trusted half-done.
pub struct BuildVmStage;

impl Stage for BuildVmStage {
    type Object = VirtualMachine;
    const KIND: &'static str = "crcbundle.buildvm";
    const WHEN_LOST: WhenLost = WhenLost::FailAttempt;

    fn slot(status: &CRCBundleStatus) -> Option<&ObjectIdentity> {
        build_slot(status, |r| Temp::BuildVm.slot(r))
    }

    async fn observe(vm: &VirtualMachine, _ctx: &Context) -> Result<Observation, kube::Error> {
        Ok(Observation::Progress(vm_progress(vm)))
    }
}

/// The VM's run strategy, printable status and generation: what changes when its VMI does.
pub fn vm_progress(vm: &VirtualMachine) -> String {
    let status = vm.status.clone().unwrap_or_default();
    format!(
        "runStrategy {:?}/{:?}, {:?}, created {}, ready {}, generation {:?}/{:?}",
        vm.spec.run_strategy,
        status.run_strategy,
        status.printable_status,
        status.created,
        status.ready,
        vm.metadata.generation,
        status.observed_generation
    )
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

    #[test]
    fn each_helper_step_done_moves_the_build_vm_to_its_next_boot() {
        // Generator done → Install: the VM is halted, waited for, then started with the
        // install ISO.
        let (mut b, observed) = installing(
            InstallStep::Generator,
            running("vmi-1", generator_boot()),
            helper_done(HelperStep::Generator),
        );
        let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
        build.vmi_uid = Some("vmi-1".into());
        build.resources.as_mut().unwrap().helper_job = Some(ObjectIdentity {
            name: "custom-b1-generator-vmi1".into(),
            uid: "job-1".into(),
        });
        let d = decide(&b, &observed, HOUR, at(70));
        assert_eq!(
            d.status.build.as_ref().unwrap().install_step,
            Some(InstallStep::Install)
        );
        let b = applied(b, &d);
        let (_, mut observed) = installing(
            InstallStep::Install,
            running("vmi-1", generator_boot()),
            JobState::Unreported,
        );
        assert_eq!(
            decide(&b, &observed, HOUR, at(71)).actions,
            vec![Action::HaltVm(VmRole::Build)]
        );
        let vm = observed.vm.as_mut().unwrap();
        vm.halted = true;
        let waiting = decide(&b, &observed, HOUR, at(72));
        assert!(waiting.actions.is_empty(), "the VMI is still there");
        let vm = observed.vm.as_mut().unwrap();
        vm.vmi = None;
        let held = decide(&b, &observed, HOUR, at(73));
        assert!(
            held.actions.is_empty(),
            "the launcher pod still holds the disks"
        );
        assert_eq!(
            held.requeue,
            waiting.requeue.map(|r| r - Duration::from_secs(1)),
            "only the stage deadline: the launcher pod's watch event wakes the pass"
        );
        let vm = observed.vm.as_mut().unwrap();
        vm.launcher_pod = false;
        vm.halt_observed = true;
        let start = decide(&b, &observed, HOUR, at(74));
        assert_eq!(
            start.actions,
            vec![Action::StartVm(
                VmRole::Build,
                BuildBoot::Install {
                    iso_claim: "custom-b1-install-iso".into()
                }
            )]
        );
    }

    #[test]
    fn the_cold_restart_starts_the_root_disk_alone_and_deletes_the_isos() {
        let (b, mut observed) = installing(
            InstallStep::ColdRestart,
            VmSeen {
                boot: Some(BuildBoot::Install {
                    iso_claim: "custom-b1-install-iso".into(),
                }),
                halted: true,
                halt_observed: true,
                ..Default::default()
            },
            JobState::Unreported,
        );
        observed.temps.insert(Temp::WorkPvc, None);
        observed.temps.insert(Temp::IsoPvc, None);
        let d = decide(&b, &observed, HOUR, at(80));
        assert_eq!(
            d.actions[0],
            Action::StartVm(VmRole::Build, BuildBoot::Installed)
        );
        let deleted: Vec<Temp> = d.actions[1..]
            .iter()
            .map(|a| match a {
                Action::Delete { temp, .. } => *temp,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(deleted, RELEASED_BY_COLD_RESTART);
        assert_eq!(
            d.status.build.as_ref().unwrap().install_step,
            Some(InstallStep::Certificates)
        );
        // Afterwards their absence fails nothing.
        let b = applied(b, &d);
        for temp in RELEASED_BY_COLD_RESTART {
            observed.temps.insert(temp, Some(Observation::Lost));
        }
        observed.vm = Some(running("vmi-3", BuildBoot::Installed));
        let next = decide(&b, &observed, HOUR, at(81));
        assert_ne!(
            next.status.phase,
            Some(BundlePhase::Failed),
            "{:?}",
            next.status
        );
        assert_eq!(next.actions.last(), Some(&Action::Create(Temp::HelperJob)));
        let resources = next
            .status
            .build
            .as_ref()
            .unwrap()
            .resources
            .as_ref()
            .unwrap();
        for temp in RELEASED_BY_COLD_RESTART {
            assert_eq!(
                temp.slot(resources),
                None,
                "{temp:?} gone: forgotten, read no more"
            );
        }
        // A deletion that a crash interrupted is sent again.
        observed.temps.insert(Temp::IsoPvc, None);
        let again = decide(&b, &observed, HOUR, at(82));
        assert!(
            again
                .actions
                .iter()
                .any(|a| matches!(a, Action::Delete { temp, .. } if *temp == Temp::IsoPvc)),
            "{:?}",
            again.actions
        );
    }

    #[test]
    fn the_certificates_helper_done_is_installed_and_a_failed_helper_fails_the_attempt() {
        for (helper, want) in [
            (
                helper_done(HelperStep::Certificates),
                ("True", reasons::STAGE_SUCCEEDED),
            ),
            (
                JobState::Seen(Observation::Failed("CertificatesNotRotated: 3 days".into())),
                ("False", reasons::HELPER_JOB_FAILED),
            ),
        ] {
            let (mut b, observed) = installing(
                InstallStep::Certificates,
                running("vmi-3", BuildBoot::Installed),
                helper,
            );
            let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
            build.vmi_uid = Some("vmi-3".into());
            build.resources.as_mut().unwrap().helper_job = Some(ObjectIdentity {
                name: "custom-b1-certificates-vmi3".into(),
                uid: "job-3".into(),
            });
            let d = decide(&b, &observed, HOUR, at(90));
            let (status, reason_) = reason(&d.status, types::INSTALLED);
            assert_eq!((status.as_str(), reason_.as_str()), want);
            if want.0 == "True" {
                assert_eq!(
                    d.status.build.as_ref().unwrap().stage,
                    Some(BuildStage::Customize)
                );
            } else {
                assert_eq!(d.status.phase, Some(BundlePhase::Failed));
                assert!(d.actions.iter().any(|a| matches!(
                    a,
                    Action::Delete {
                        temp: Temp::BuildVm,
                        ..
                    }
                )));
            }
        }
    }
}
