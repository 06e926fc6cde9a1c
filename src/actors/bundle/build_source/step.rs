//! What every stage of a build pass works with: what the pass observed ([`Observed`]), the
//! actions it decides ([`Action`]), the status being decided with its condition helpers
//! ([`Step`]), what the builders get ([`BuildInput`]), and the temporary objects' lifecycle
//! that every stage shares (named and created in order, lost or replaced ones failing the
//! attempt, released once not needed).

use std::collections::BTreeMap;

use super::admit;
use super::temps::{Kind, Temp};
use crate::actors::runtime::api_error::Doing;
use crate::actors::runtime::stage::JobState;
use crate::actors::runtime::stage::{Observation, WhenLost, attempt_failure};
use crate::api::bundle::{
    BuildInputs, BuildResources, BuildSpec, BuildStage, BuildStatus, BundlePhase, CRCBundle,
    CRCBundleStatus,
};
use crate::api::common::ObjectIdentity;
use crate::api::conditions::{self, reasons, types};
use crate::api::labels::RETRY_ANNOTATION;
use crate::contract::build_helper::Step as HelperStep;
use crate::resources::build::{InstallerInputs, Names};
use crate::resources::bundle::JobSettings;
use crate::resources::profile::vm::BuildBoot;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The build VM as a pass read it (only once its UID is recorded and it is ours).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmSeen {
    /// The boot its template is for.
    pub boot: Option<BuildBoot>,
    /// `spec.runStrategy`.
    pub halted: bool,
    /// `status.runStrategy` is `Halted`: KubeVirt has acted on the stop.
    pub halt_observed: bool,
    pub vmi: Option<VmiSeen>,
    /// KubeVirt could not create its VMI (`Failure`), as it says.
    pub failure: Option<String>,
    /// A virt-launcher pod of the VM still exists (it may still hold the disks). Read only
    /// once the VM is halted and its VMI gone; assumed true before.
    pub launcher_pod: bool,
}

/// The build VM's VMI.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VmiSeen {
    pub uid: String,
    pub phase: String,
    /// The address once it runs.
    pub ip: Option<String>,
    /// What KubeVirt says keeps it from running (a disk QEMU cannot open, a missing volume).
    pub blocked: Option<String>,
}

impl VmiSeen {
    pub fn running_at(&self) -> Option<&str> {
        (self.phase == "Running")
            .then_some(self.ip.as_deref())
            .flatten()
    }
}

/// What a pass found.
#[derive(Clone, Debug, Default)]
pub struct Observed {
    /// The retry annotation's value.
    pub retry: Option<String>,
    /// The inputs as admitted now; `None` when the stage does not read them.
    pub admitted: Option<Result<BuildInputs, admit::Error>>,
    /// For each temporary object whose UID is recorded (but the installer Job, reported by its
    /// child): `None` when it is ours, else what it is ([`crate::actors::runtime::stage::judge`]).
    pub temps: BTreeMap<Temp, Option<Observation>>,
    /// Each recorded Job as its child reported it (the installer, helper and disk Jobs).
    pub jobs: BTreeMap<Temp, JobState>,
    /// The build VM, its VMI and launcher pod.
    pub vm: Option<VmSeen>,
    /// The validation VM, its VMI and launcher pod.
    pub validation_vm: Option<VmSeen>,
    /// The bundle's key Secret (`<bundle>-ssh-key`).
    pub key_secret: Owned,
    /// The bundle's golden PVC (`<bundle>-golden`), read from the Publish stage on.
    pub golden: Owned,
    /// The bundle's metadata ConfigMap and DataSource, read in the Ready stage.
    pub metadata: Owned,
    pub data_source: Owned,
    /// The operator namespace (where the golden PVC is published).
    pub namespace: String,
}

/// Which of the attempt's VMs an action is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum VmRole {
    Build,
    Validation,
}

impl VmRole {
    /// The VM a helper step works in: the validation clone for the validation steps.
    pub fn of(step: HelperStep) -> VmRole {
        match step {
            HelperStep::Validate | HelperStep::Aged => VmRole::Validation,
            _ => VmRole::Build,
        }
    }
}

impl Observed {
    pub fn vm_of(&self, role: VmRole) -> Option<&VmSeen> {
        match role {
            VmRole::Build => self.vm.as_ref(),
            VmRole::Validation => self.validation_vm.as_ref(),
        }
    }
    /// The recorded Job `temp` as its child reported it.
    pub fn job(&self, temp: Temp) -> &JobState {
        static NONE: JobState = JobState::None;
        self.jobs.get(&temp).unwrap_or(&NONE)
    }
}

impl Names {
    pub fn vm_name(&self, role: VmRole) -> &str {
        match role {
            VmRole::Build => &self.build_vm,
            VmRole::Validation => &self.validation_vm,
        }
    }
}

/// One of the bundle's own objects (kept after the build), as found under its name.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Owned {
    #[default]
    Missing,
    Ours,
    /// An object under the name that the bundle does not control: never adopted (a key Secret
    /// would open the build guest to whoever made it; a golden PVC would be theirs to read).
    NotOurs,
}

/// Something to do against the API, after the status naming it is written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Generate the bundle's key pair into its key Secret (kept after the build: it is the
    /// bundle's `id_ecdsa`).
    CreateKeySecret,
    /// Create the bundle's golden PVC (kept after the build: it is the bundle's disk).
    CreateGoldenPvc,
    /// Publish the bundle's metadata ConfigMap from the status (kept: consumers read it).
    PublishMetadata,
    /// Publish the CDI DataSource at the golden PVC (kept: plain KubeVirt users boot from it).
    PublishDataSource,
    /// Create the object named in its slot; its UID is recorded right after.
    Create(Temp),
    /// Delete the recorded object (UID precondition: never a namesake).
    Delete {
        temp: Temp,
        name: String,
        uid: String,
    },
    /// Stop the VM (`runStrategy: Halted`).
    HaltVm(VmRole),
    /// Give the VM the shape of `boot` and start it; only once it is halted and its VMI and
    /// launcher pod are gone.
    StartVm(VmRole, BuildBoot),
}

impl Action {
    /// What it does to the API, for its error's reason.
    pub fn doing(&self) -> Doing {
        match self {
            Action::CreateKeySecret | Action::CreateGoldenPvc | Action::Create(_) => Doing::Create,
            Action::Delete { .. } => Doing::Delete,
            // Server-side apply, or a patch of the VM.
            Action::PublishMetadata
            | Action::PublishDataSource
            | Action::HaltVm(_)
            | Action::StartVm(..) => Doing::Update,
        }
    }
}

/// The status being decided, with the condition helpers of a build.
pub struct Step<'a> {
    pub status: &'a mut CRCBundleStatus,
    /// `spec.build`.
    pub spec: Option<&'a BuildSpec>,
    pub generation: Option<i64>,
    pub now: Time,
}

impl Step<'_> {
    pub fn build(&self) -> &BuildStatus {
        static EMPTY: BuildStatus = BuildStatus {
            attempt: None,
            retry: None,
            stage: None,
            started_at: None,
            finished_at: None,
            resources: None,
            install_step: None,
            validation_boot: None,
            vmi_uid: None,
            message: None,
        };
        self.status.build.as_ref().unwrap_or(&EMPTY)
    }

    pub fn build_mut(&mut self) -> &mut BuildStatus {
        self.status.build.get_or_insert_with(Default::default)
    }

    pub fn set(&mut self, type_: &str, ok: bool, reason: &str, message: String) {
        conditions::set(
            &mut self.status.conditions,
            conditions::new(
                type_,
                ok,
                reason,
                message,
                self.generation,
                self.now.clone(),
            ),
        );
    }

    /// Progress of `stage`: its condition and `Ready`.
    pub fn progress(&mut self, stage: BuildStage, message: String) {
        self.set(stage.condition(), false, reasons::BUILDING, message.clone());
        self.ready_building(format!("stage {stage:?}: {message}"));
    }

    /// `stage` succeeded: its condition, and the attempt moves on to its successor (Ready has
    /// no condition of its own but `Ready`, which its pass sets).
    pub fn succeed(&mut self, stage: BuildStage, message: String) {
        self.set(stage.condition(), true, reasons::STAGE_SUCCEEDED, message);
        let next = stage.next().unwrap_or(BuildStage::Ready);
        self.build_mut().stage = Some(next);
        if next == BuildStage::Ready {
            // One write moves stage and message together: a reader never sees the last stage's
            // message under Ready.
            self.ready_building("publishing the bundle".into());
        } else {
            self.progress(next, "starting".into());
        }
    }

    pub fn start_attempt(&mut self, attempt: i32, retry: Option<String>) {
        *self.build_mut() = BuildStatus {
            attempt: Some(attempt),
            retry,
            stage: Some(BuildStage::Admit),
            started_at: Some(self.now.clone()),
            ..Default::default()
        };
        self.status.phase = Some(BundlePhase::Building);
        self.status.inputs = None;
        self.status.release = None;
        for (_, condition) in BuildStage::with_conditions() {
            conditions::remove(&mut self.status.conditions, condition);
        }
        self.ready_building(format!("attempt {attempt}: admitting the inputs"));
    }

    pub fn ready_building(&mut self, message: String) {
        let attempt = self.build().attempt.unwrap_or(1);
        self.build_mut().message = Some(message.clone());
        self.set(
            types::READY,
            false,
            reasons::BUILDING,
            format!("attempt {attempt}, {message}"),
        );
    }

    /// Fails the attempt: the stage's condition and `Ready` carry the reason; the temporary
    /// objects are deleted by [`cleanup`].
    pub fn fail(&mut self, stage_condition: &str, reason: &str, message: String) {
        let hint = format!(
            "; fix it, then set the annotation {RETRY_ANNOTATION} to a new value to start another attempt"
        );
        self.status.phase = Some(BundlePhase::Failed);
        let now = self.now.clone();
        let build = self.build_mut();
        build.stage = Some(BuildStage::Failed);
        build.finished_at = Some(now);
        build.message = Some(message.clone());
        self.set(stage_condition, false, reason, message.clone());
        self.set(types::READY, false, reason, format!("{message}{hint}"));
    }
}

/// Names (write-ahead) and creates each of `temps` not created yet, and fails the attempt on
/// one that was lost or replaced; `false` when it failed.
pub fn ensure_temps(
    step: &mut Step,
    observed: &Observed,
    names: &Names,
    temps: &[Temp],
    condition: &str,
    actions: &mut Vec<Action>,
) -> bool {
    for &temp in temps {
        let recorded = step
            .build()
            .resources
            .as_ref()
            .and_then(|r| temp.slot(r))
            .cloned();
        match recorded {
            None => {
                // Write-ahead: the name goes out with this pass's first status write.
                let resources = step
                    .build_mut()
                    .resources
                    .get_or_insert_with(Default::default);
                *temp.slot_mut(resources) = Some(ObjectIdentity {
                    name: temp.name(names),
                    uid: String::new(),
                });
                actions.push(Action::Create(temp));
            }
            Some(recorded) if recorded.uid.is_empty() => actions.push(Action::Create(temp)),
            Some(recorded) => {
                // A Job is judged by its child; the guest session judges its own helper Job.
                let seen = match (temp.kind(), observed.job(temp)) {
                    (Kind::Job, JobState::Seen(observation)) => Some(observation.clone()),
                    (Kind::Job, _) => None,
                    _ => observed.temps.get(&temp).cloned().flatten(),
                };
                if let Some(seen) = seen
                    && let Some((reason, message)) =
                        attempt_failure(WhenLost::FailAttempt, &recorded, &seen)
                {
                    step.fail(
                        condition,
                        reason,
                        format!("{} {message}", temp.kind().as_str()),
                    );
                    return false;
                }
            }
        }
    }
    true
}

/// Deletes each of `temps` that is still ours, and forgets the ones that are gone (or going), so
/// later passes stop reading them.
pub fn release(
    resources: &mut BuildResources,
    observed: &Observed,
    temps: &[Temp],
    actions: &mut Vec<Action>,
) {
    let job_ours = |state: &JobState| {
        matches!(
            state,
            JobState::Unreported
                | JobState::Seen(
                    Observation::Progress(_) | Observation::Done(_) | Observation::Failed(_)
                )
        )
    };
    for &temp in temps {
        let Some(recorded) = temp.slot(resources).filter(|r| !r.uid.is_empty()).cloned() else {
            continue;
        };
        let ours = match temp.kind() {
            Kind::Job => job_ours(observed.job(temp)),
            _ => match observed.temps.get(&temp) {
                Some(None) => true,
                Some(Some(Observation::Lost)) => {
                    *temp.slot_mut(resources) = None;
                    false
                }
                // Replaced by another's, or not read this pass: not ours to delete.
                _ => false,
            },
        };
        if ours {
            actions.push(Action::Delete {
                temp,
                name: recorded.name,
                uid: recorded.uid,
            });
        }
    }
}

/// What the builders of a pass may use.
pub struct BuildInput<'a> {
    pub bundle: &'a CRCBundle,
    pub spec: &'a BuildSpec,
    pub ns: &'a str,
    pub names: &'a Names,
    /// The status just written (the attempt, the names, the pinned release).
    pub status: &'a CRCBundleStatus,
    pub observed: &'a Observed,
    pub jobs: &'a JobSettings,
    /// The helper step the attempt's current stage runs, if any.
    pub helper_step: Option<HelperStep>,
    /// The installer's inputs rendered from the admitted inputs, when this pass admitted them
    /// and the object carries them ([`Temp::carries_inputs`]).
    pub installer: Option<&'a InstallerInputs>,
}
