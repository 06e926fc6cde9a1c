//! The build source of a CRCBundle (`docs/architecture.md`, "The build source") as a pure
//! decision: what the pass observed in, the next status and the actions out. An attempt runs
//! every stage in turn — Admit, Prepare, Install, Customize, Seal, Publish, Validate, each with
//! its condition — then Ready, which publishes the bundle (`Ready=True`) and deletes the
//! temporary objects. A failure in any stage ends the attempt in Failed until a new retry value
//! starts the next one.
//!
//! ```text
//! new attempt ─▶ Admit ─▶ Prepare ─▶ Install ─▶ Customize ─▶ Seal ─▶ Publish ─▶ Validate ─▶ Ready
//!  ▲               │         │          │           │         │         │          │          │
//!  │               ▼         ▼          ▼           ▼         ▼         ▼          ▼          ▼
//!  └─retry value─ Failed ◀── bad input, a Job failed, an object lost or replaced, inputs changed,
//!                            a manifest rejected, the deadline (temporary objects deleted)
//! ```
//!
//! Write-ahead: the pass writes the status this returns — the attempt, its inputs and the name
//! of every object it is about to create — before it acts, and records each created UID
//! ([`record_created`]) in a second write right after. A crash between the two leaves a named
//! slot without a UID, which the next pass creates again: the create finds the first one
//! (`AlreadyExists`), takes its UID, and the pass after that judges whether it is really ours.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actors::bundle::build_source::admit;
use crate::actors::bundle::download::JobState;
use crate::actors::runtime::stage::{Observation, WhenLost, attempt_failure};
use crate::api::bundle::{
    BuildInputs, BuildResources, BuildStage, BuildStatus, BundlePhase, BundleSource, CRCBundle,
    CRCBundleStatus, ReleaseStatus,
};
use crate::api::bundle::{InstallStep, ValidationBoot};
use crate::api::common::LocalRef;
use crate::api::common::ObjectIdentity;
use crate::api::conditions::{self, reasons, types};
use crate::api::labels::RETRY_ANNOTATION;
use crate::contract::build_helper::{Outcome as HelperOutcome, Step as HelperStep};
use crate::contract::disk::Outcome as DiskOutcome;
use crate::contract::installer::Outcome;
use crate::resources::build::Names;
use crate::resources::profile::vm::BuildBoot;

/// Declares [`Temp`] from one row per temporary object, in creation order: its Kubernetes kind
/// (for messages), the name a new object gets, and its slot in `status.build.resources`.
macro_rules! temps {
    ($($(#[$doc:meta])* $temp:ident: $kind:literal, $name:ident, $slot:ident;)+) => {
        /// The temporary objects of an attempt, in the order they are created.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
        pub enum Temp {
            $($(#[$doc])* $temp,)+
        }

        impl Temp {
            /// Every temporary object, in creation order.
            pub const ALL: &[Temp] = &[$(Temp::$temp,)+];

            /// Kubernetes kind, for messages.
            pub fn kind(self) -> &'static str {
                match self {
                    $(Temp::$temp => $kind,)+
                }
            }

            /// The name a new object gets (the helper Job's depends on its step and VMI: see
            /// [`Names::helper_job`]).
            pub fn name(self, names: &Names) -> &str {
                match self {
                    $(Temp::$temp => &names.$name,)+
                }
            }

            pub fn slot(self, resources: &BuildResources) -> Option<&ObjectIdentity> {
                match self {
                    $(Temp::$temp => resources.$slot.as_ref(),)+
                }
            }

            pub(super) fn slot_mut(self, resources: &mut BuildResources) -> &mut Option<ObjectIdentity> {
                match self {
                    $(Temp::$temp => &mut resources.$slot,)+
                }
            }
        }
    };
}

temps! {
    ServiceAccount: "ServiceAccount", service_account, service_account;
    InstallerSecret: "Secret", installer_secret, installer_auth_secret;
    WorkPvc: "PersistentVolumeClaim", work_pvc, work_pvc;
    IsoPvc: "PersistentVolumeClaim", iso_pvc, iso_pvc;
    InstallerJob: "Job", installer_job, installer_job;
    HelperAccount: "ServiceAccount", helper, helper_account;
    HelperRole: "Role", helper, helper_role;
    HelperRoleBinding: "RoleBinding", helper, helper_role_binding;
    CredentialsSecret: "Secret", credentials_secret, credentials_secret;
    RootDataVolume: "DataVolume", root_data_volume, root_data_volume;
    InstallIsoPvc: "PersistentVolumeClaim", install_iso_pvc, install_iso_pvc;
    BuildVm: "VirtualMachine", build_vm, build_vm;
    /// The helper Job of the current step and VMI; its name is recorded with it.
    HelperJob: "Job", build_vm, helper_job;
    DiskJob: "Job", disk_job, disk_job;
    ValidationDataVolume: "DataVolume", validation_data_volume, validation_data_volume;
    ValidationVm: "VirtualMachine", validation_vm, validation_vm;
}

impl Temp {
    pub const PREPARE: [Temp; 5] = [
        Temp::ServiceAccount,
        Temp::InstallerSecret,
        Temp::WorkPvc,
        Temp::IsoPvc,
        Temp::InstallerJob,
    ];

    /// What the Install stage creates before its first boot.
    pub const INSTALL: [Temp; 7] = [
        Temp::HelperAccount,
        Temp::HelperRole,
        Temp::HelperRoleBinding,
        Temp::CredentialsSecret,
        Temp::RootDataVolume,
        Temp::InstallIsoPvc,
        Temp::BuildVm,
    ];

    /// The volumes the cold restart deletes: the live ISOs and the installer's work volume.
    pub const RELEASED_BY_COLD_RESTART: [Temp; 3] =
        [Temp::WorkPvc, Temp::IsoPvc, Temp::InstallIsoPvc];

    /// What the stages after the cold restart still need of the Install stage's objects.
    fn after_cold_restart() -> Vec<Temp> {
        Temp::INSTALL
            .into_iter()
            .filter(|t| !Temp::RELEASED_BY_COLD_RESTART.contains(t))
            .collect()
    }
}

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
    fn running_at(&self) -> Option<&str> {
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
    /// The installer Job as its child reported it.
    pub installer: JobState,
    /// The build VM, its VMI and launcher pod.
    pub vm: Option<VmSeen>,
    /// The validation VM, its VMI and launcher pod.
    pub validation_vm: Option<VmSeen>,
    /// The recorded helper Job as its child reported it.
    pub helper: JobState,
    /// The recorded disk Job as its child reported it.
    pub disk: JobState,
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
}

impl Names {
    fn vm_name(&self, role: VmRole) -> &str {
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

/// The next step of a build-sourced bundle.
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: CRCBundleStatus,
    pub actions: Vec<Action>,
    /// Look again after this long without a trigger: the build's deadline.
    pub requeue: Option<Duration>,
}

/// Whether the stage needs the inputs read and admitted this pass.
pub fn reads_inputs(bundle: &CRCBundle, retry: Option<&str>) -> bool {
    match build_of(bundle) {
        None => true,
        Some(build) => match build.stage {
            // Customize applies the post-install manifests: a change before then fails it.
            None | Some(BuildStage::Admit | BuildStage::Prepare | BuildStage::Customize) => true,
            Some(BuildStage::Failed) => retry_requested(build, retry),
            Some(_) => false,
        },
    }
}

fn build_of(bundle: &CRCBundle) -> Option<&BuildStatus> {
    bundle.status.as_ref().and_then(|s| s.build.as_ref())
}

fn retry_requested(build: &BuildStatus, retry: Option<&str>) -> bool {
    retry.is_some() && build.retry.as_deref() != retry
}

/// Records the UID now under `temp`'s recorded name, right after [`Action::Create`].
pub fn record_created(status: &mut CRCBundleStatus, temp: Temp, uid: String) {
    let resources = status
        .build
        .get_or_insert_with(Default::default)
        .resources
        .get_or_insert_with(Default::default);
    if let Some(slot) = temp.slot_mut(resources) {
        slot.uid = uid;
    }
}

/// The retry annotation of a bundle.
pub fn retry_of(bundle: &CRCBundle) -> Option<String> {
    bundle
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RETRY_ANNOTATION))
        .cloned()
}

/// Decides the next step of a build-sourced bundle.
pub fn decide(bundle: &CRCBundle, observed: &Observed, deadline: Duration, now: Time) -> Decision {
    let name = bundle.metadata.name.clone().unwrap_or_default();
    let spec = bundle.spec.build.as_ref();
    let generation = bundle.metadata.generation;
    let mut status = bundle.status.clone().unwrap_or_default();
    status.observed_generation = generation;
    status.source = Some(BundleSource::Build);
    let mut actions = Vec::new();
    let mut step = Step {
        status: &mut status,
        generation,
        now: now.clone(),
    };

    let build = step.status.build.clone().unwrap_or_default();
    let new_attempt = build.attempt.is_none()
        || (build.stage == Some(BuildStage::Failed)
            && retry_requested(&build, observed.retry.as_deref()));
    if new_attempt {
        step.start_attempt(build.attempt.unwrap_or(0) + 1, observed.retry.clone());
    }
    let attempt = step
        .status
        .build
        .as_ref()
        .and_then(|b| b.attempt)
        .unwrap_or(1);
    let names = Names::of(&name, attempt);

    let stage = step.build().stage.unwrap_or(BuildStage::Admit);
    // A Failed attempt only cleans up, a Ready one is done; every other stage runs against the
    // deadline.
    let remaining = match (stage, step.build().started_at.clone()) {
        (BuildStage::Failed | BuildStage::Ready, _) => None,
        (_, Some(started)) => Some(remaining(&started, deadline, &now)),
        (_, None) => Some(deadline),
    };
    if remaining == Some(Duration::ZERO) {
        step.fail(
            condition_of(stage),
            reasons::BUILD_DEADLINE_EXCEEDED,
            format!(
                "the build did not finish within spec.build.deadline ({}); stage {stage:?} was still running",
                spec.map_or("", |s| s.deadline.as_str())
            ),
        );
    } else {
        match stage {
            BuildStage::Admit => {
                match &observed.admitted {
                    Some(Ok(inputs)) => {
                        step.status.inputs = Some(inputs.clone());
                        step.status.release = Some(ReleaseStatus {
                            image: spec.map(|s| s.release_image.clone()).unwrap_or_default(),
                            digest: None,
                        });
                        step.status.vm_profile = inputs.profile.clone();
                        step.build_mut().stage = Some(BuildStage::Prepare);
                        prepare(&mut step, observed, &names, &mut actions);
                    }
                    Some(Err(err)) => step.fail(types::PREPARED, err.reason(), err.to_string()),
                    // Not read: the next pass reads them.
                    None => {}
                }
            }
            BuildStage::Prepare => match &observed.admitted {
                Some(Ok(inputs)) if Some(inputs) != step.status.inputs.as_ref() => step.fail(
                    types::PREPARED,
                    reasons::INPUTS_CHANGED,
                    format!(
                        "an input of CRCBundle {name} changed after its digest was recorded in status.inputs; the attempt does not build from other inputs than it recorded"
                    ),
                ),
                Some(Err(err)) => step.fail(
                    types::PREPARED,
                    reasons::INPUTS_CHANGED,
                    format!("an input changed after the build started: {err}"),
                ),
                _ => prepare(&mut step, observed, &names, &mut actions),
            },
            BuildStage::Install => install(&mut step, observed, &names, &mut actions),
            BuildStage::Customize => match &observed.admitted {
                Some(Ok(inputs)) if Some(inputs) != step.status.inputs.as_ref() => step.fail(
                    types::CUSTOMIZED,
                    reasons::INPUTS_CHANGED,
                    format!(
                        "an input of CRCBundle {name} changed after its digest was recorded in status.inputs; the attempt does not customize from other inputs than it recorded"
                    ),
                ),
                Some(Err(err)) => step.fail(
                    types::CUSTOMIZED,
                    reasons::INPUTS_CHANGED,
                    format!("an input changed after the build started: {err}"),
                ),
                _ => customize(&mut step, observed, &names, &mut actions),
            },
            BuildStage::Seal => seal(&mut step, observed, &names, &mut actions),
            BuildStage::Publish => publish(&mut step, observed, &names, &mut actions),
            BuildStage::Validate => validate(&mut step, observed, &names, &mut actions),
            BuildStage::Ready => ready(&mut step, observed, &names, &mut actions),
            BuildStage::Failed => {}
        }
    }
    if step.build().stage == Some(BuildStage::Failed) {
        cleanup(step.status, observed, &mut actions);
    }
    let requeue = match step.build().stage {
        Some(BuildStage::Failed | BuildStage::Ready) => None,
        _ => remaining.filter(|r| !r.is_zero()),
    };
    Decision {
        status,
        actions,
        requeue,
    }
}

/// The status being decided, with the condition helpers of a build.
struct Step<'a> {
    status: &'a mut CRCBundleStatus,
    generation: Option<i64>,
    now: Time,
}

impl Step<'_> {
    fn build(&self) -> &BuildStatus {
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

    fn build_mut(&mut self) -> &mut BuildStatus {
        self.status.build.get_or_insert_with(Default::default)
    }

    fn set(&mut self, type_: &str, ok: bool, reason: &str, message: String) {
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
    fn progress(&mut self, stage: BuildStage, message: String) {
        self.set(
            condition_of(stage),
            false,
            reasons::BUILDING,
            message.clone(),
        );
        self.ready_building(format!("stage {stage:?}: {message}"));
    }

    /// `stage` succeeded: its condition, and the attempt moves on to `next` (Ready has no
    /// condition of its own but `Ready`, which its pass sets).
    fn succeed(&mut self, stage: BuildStage, message: String, next: BuildStage) {
        self.set(condition_of(stage), true, reasons::STAGE_SUCCEEDED, message);
        self.build_mut().stage = Some(next);
        if next != BuildStage::Ready {
            self.progress(next, "starting".into());
        }
    }

    fn start_attempt(&mut self, attempt: i32, retry: Option<String>) {
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
        for stage in STAGE_CONDITIONS {
            conditions::remove(&mut self.status.conditions, stage);
        }
        self.ready_building(format!("attempt {attempt}: admitting the inputs"));
    }

    fn ready_building(&mut self, message: String) {
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
    fn fail(&mut self, stage_condition: &str, reason: &str, message: String) {
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

pub const STAGE_CONDITIONS: [&str; 6] = [
    types::PREPARED,
    types::INSTALLED,
    types::CUSTOMIZED,
    types::SEALED,
    types::PUBLISHED,
    types::VALIDATED,
];

/// The condition a failure in `stage` is reported on.
fn condition_of(stage: BuildStage) -> &'static str {
    match stage {
        BuildStage::Admit | BuildStage::Prepare => types::PREPARED,
        BuildStage::Install => types::INSTALLED,
        BuildStage::Customize => types::CUSTOMIZED,
        BuildStage::Seal => types::SEALED,
        BuildStage::Publish => types::PUBLISHED,
        BuildStage::Validate | BuildStage::Ready | BuildStage::Failed => types::VALIDATED,
    }
}

fn remaining(started: &Time, deadline: Duration, now: &Time) -> Duration {
    let elapsed = now.0.duration_since(started.0);
    let elapsed = Duration::try_from(elapsed).unwrap_or(Duration::ZERO);
    deadline.saturating_sub(elapsed)
}

/// Stage 1: the key Secret, then every temporary object named and created in order, then the
/// installer Job followed to its end.
fn prepare(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    match observed.key_secret {
        Owned::Ours => {}
        Owned::Missing => actions.push(Action::CreateKeySecret),
        Owned::NotOurs => {
            let name = crate::resources::bundle::Names::of(names.bundle()).ssh_secret;
            step.fail(
                types::PREPARED,
                reasons::RESOURCE_REPLACED,
                format!(
                    "Secret {name} exists but this bundle does not control it; it is not adopted as the build's key. Delete it to retry"
                ),
            );
            return;
        }
    }
    if !ensure_temps(
        step,
        observed,
        names,
        &Temp::PREPARE,
        types::PREPARED,
        actions,
    ) {
        return;
    }
    if !actions.is_empty() {
        step.set(
            types::PREPARED,
            false,
            reasons::BUILDING,
            "creating the installer's objects".into(),
        );
        step.ready_building("stage Prepare: creating the installer's objects".into());
        return;
    }
    match &observed.installer {
        JobState::Seen(Observation::Done(result)) => match serde_json::from_str::<Outcome>(result)
        {
            Ok(outcome) => {
                step.status.ocp_version = Some(outcome.version.clone());
                if let Some(release) = step.status.release.as_mut() {
                    release.digest = Some(outcome.release_digest.clone());
                }
                step.build_mut().stage = Some(BuildStage::Install);
                step.set(
                    types::PREPARED,
                    true,
                    reasons::STAGE_SUCCEEDED,
                    format!(
                        "OpenShift {} (release {}), RHCOS {} live ISO verified (sha256 {}) with the generator Ignition in {}",
                        outcome.version,
                        outcome.release_digest,
                        outcome.rhcos_version,
                        outcome.iso_sha256,
                        names.iso_pvc
                    ),
                );
                step.build_mut().install_step = Some(InstallStep::Generator);
                step.progress(
                    BuildStage::Install,
                    "creating the build VM and its volumes".into(),
                );
            }
            Err(err) => step.fail(
                types::PREPARED,
                reasons::INSTALLER_JOB_FAILED,
                format!(
                    "installer Job {} succeeded but its result is unreadable ({err}); is the operator image the same version as the Job's?",
                    names.installer_job
                ),
            ),
        },
        JobState::Seen(Observation::Failed(detail)) => step.fail(
            types::PREPARED,
            reasons::INSTALLER_JOB_FAILED,
            format!("installer Job {} failed: {detail}", names.installer_job),
        ),
        JobState::Seen(Observation::Progress(progress)) => {
            let message = format!("installer Job {}: {progress}", names.installer_job);
            step.set(types::PREPARED, false, reasons::BUILDING, message.clone());
            step.ready_building(format!("stage Prepare: {message}"));
        }
        _ => {
            let message = format!("waiting for installer Job {}", names.installer_job);
            step.set(types::PREPARED, false, reasons::BUILDING, message.clone());
            step.ready_building(format!("stage Prepare: {message}"));
        }
    }
}

fn job_of(temp: Temp, observed: &Observed) -> &JobState {
    match temp {
        Temp::DiskJob => &observed.disk,
        Temp::HelperJob => &observed.helper,
        _ => &observed.installer,
    }
}

/// Names (write-ahead) and creates each of `temps` not created yet, and fails the attempt on
/// one that was lost or replaced; `false` when it failed.
fn ensure_temps(
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
                    name: temp.name(names).to_owned(),
                    uid: String::new(),
                });
                actions.push(Action::Create(temp));
            }
            Some(recorded) if recorded.uid.is_empty() => actions.push(Action::Create(temp)),
            Some(recorded) => {
                let seen = match temp {
                    Temp::InstallerJob | Temp::DiskJob => match job_of(temp, observed) {
                        JobState::Seen(observation) => Some(observation.clone()),
                        _ => None,
                    },
                    _ => observed.temps.get(&temp).cloned().flatten(),
                };
                if let Some(seen) = seen
                    && let Some((reason, message)) =
                        attempt_failure(WhenLost::FailAttempt, &recorded, &seen)
                {
                    step.fail(condition, reason, format!("{} {message}", temp.kind()));
                    return false;
                }
            }
        }
    }
    true
}

/// The Install stage (`docs/design/certificates-and-time.md`, "2. Generator boot" to "4. Cold
/// restart"): the build VM's three boots, each with its helper Job, and the cold restart between
/// the second and the third.
fn install(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let install_step = step.build().install_step.unwrap_or(InstallStep::Generator);
    // After the cold restart the ISOs are gone on purpose: their absence fails nothing.
    let needed: Vec<Temp> = if install_step == InstallStep::Certificates {
        Temp::after_cold_restart()
    } else {
        Temp::INSTALL.to_vec()
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
        release(
            resources,
            observed,
            &Temp::RELEASED_BY_COLD_RESTART,
            actions,
        );
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
            for temp in Temp::RELEASED_BY_COLD_RESTART {
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

/// Stage 3: the installed build VM on real time, with the customize helper.
fn customize(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    if !ensure_temps(
        step,
        observed,
        names,
        &Temp::after_cold_restart(),
        types::CUSTOMIZED,
        actions,
    ) {
        return;
    }
    let session = Session::on_installed(BuildStage::Customize, "customize", HelperStep::Customize);
    if let SessionState::Done(summary) = guest_session(step, observed, names, actions, &session) {
        step.succeed(BuildStage::Customize, summary, BuildStage::Seal);
    }
}

/// Stage 4: the seal helper, which powers the guest off at its end.
fn seal(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    if !ensure_temps(
        step,
        observed,
        names,
        &Temp::after_cold_restart(),
        types::SEALED,
        actions,
    ) {
        return;
    }
    let session = Session::on_installed(BuildStage::Seal, "seal", HelperStep::Seal);
    if let SessionState::Done(summary) = guest_session(step, observed, names, actions, &session) {
        step.succeed(
            BuildStage::Seal,
            format!("{summary}; the guest powered itself off"),
            BuildStage::Publish,
        );
    }
}

/// Stage 5: the build VM stopped and its disks released, the golden PVC, then the disk Job
/// copying the root disk into it.
fn publish(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    if !ensure_temps(
        step,
        observed,
        names,
        &Temp::after_cold_restart(),
        types::PUBLISHED,
        actions,
    ) {
        return;
    }
    let Some(vm) = &observed.vm else {
        step.progress(
            BuildStage::Publish,
            format!("waiting to read VirtualMachine {}", names.build_vm),
        );
        return;
    };
    if !vm.halted {
        actions.push(Action::HaltVm(VmRole::Build));
        step.progress(
            BuildStage::Publish,
            format!("stopping VirtualMachine {}", names.build_vm),
        );
        return;
    }
    if let Some(message) = still_holding(vm, &names.build_vm) {
        step.progress(BuildStage::Publish, message);
        return;
    }
    let golden = crate::resources::bundle::Names::of(names.bundle()).golden_pvc;
    match observed.golden {
        Owned::Ours => {}
        Owned::Missing => {
            actions.push(Action::CreateGoldenPvc);
            step.progress(
                BuildStage::Publish,
                format!("creating the golden PVC {golden}"),
            );
            return;
        }
        Owned::NotOurs => {
            step.fail(
                types::PUBLISHED,
                reasons::RESOURCE_REPLACED,
                format!(
                    "PersistentVolumeClaim {golden} exists but this bundle does not control it; it is not written to. Delete it to retry"
                ),
            );
            return;
        }
    }
    if !ensure_temps(
        step,
        observed,
        names,
        &[Temp::DiskJob],
        types::PUBLISHED,
        actions,
    ) {
        return;
    }
    if !actions.is_empty() {
        step.progress(
            BuildStage::Publish,
            format!("starting disk Job {} into {golden}", names.disk_job),
        );
        return;
    }
    match &observed.disk {
        JobState::Seen(Observation::Done(result)) => {
            match serde_json::from_str::<DiskOutcome>(result) {
                Ok(outcome) => {
                    let short: String = outcome.disk_sha256.chars().take(12).collect();
                    step.status.disk_sha256 = Some(outcome.disk_sha256.clone());
                    step.status.disk_sha256_short = Some(short);
                    step.status.disk_virtual_size = i64::try_from(outcome.disk_virtual_size).ok();
                    step.succeed(
                        BuildStage::Publish,
                        format!(
                            "the build VM's root disk copied into {golden}/disk.img: {} bytes virtual, {} bytes of data, sha256 {}",
                            outcome.disk_virtual_size, outcome.data_bytes, outcome.disk_sha256
                        ),
                        BuildStage::Validate,
                    );
                }
                Err(err) => step.fail(
                    types::PUBLISHED,
                    reasons::DISK_JOB_FAILED,
                    format!(
                        "disk Job {} succeeded but its result is unreadable ({err}); is the operator image the same version as the Job's?",
                        names.disk_job
                    ),
                ),
            }
        }
        JobState::Seen(Observation::Failed(detail)) => step.fail(
            types::PUBLISHED,
            reasons::DISK_JOB_FAILED,
            format!("disk Job {} failed: {detail}", names.disk_job),
        ),
        JobState::Seen(Observation::Progress(progress)) => step.progress(
            BuildStage::Publish,
            format!("disk Job {}: {progress}", names.disk_job),
        ),
        _ => step.progress(
            BuildStage::Publish,
            format!("waiting for disk Job {}", names.disk_job),
        ),
    }
}

/// Stage 6: the golden PVC cloned into the validation DataVolume, booted on real time (sealing
/// checked, the startup path run), then again with its clock 20 days ahead.
fn validate(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let mut needed = Temp::after_cold_restart();
    needed.extend([Temp::ValidationDataVolume, Temp::ValidationVm]);
    if !ensure_temps(step, observed, names, &needed, types::VALIDATED, actions) {
        return;
    }
    if !actions.is_empty() {
        step.progress(
            BuildStage::Validate,
            format!(
                "cloning the golden PVC into DataVolume {} for VirtualMachine {}",
                names.validation_data_volume, names.validation_vm
            ),
        );
        return;
    }
    let boot = *step
        .build_mut()
        .validation_boot
        .get_or_insert(ValidationBoot::RealTime);
    let session = match boot {
        ValidationBoot::RealTime => Session {
            stage: BuildStage::Validate,
            label: "first boot, real time",
            role: VmRole::Validation,
            boot: BuildBoot::Installed,
            helper_step: HelperStep::Validate,
            helper_counts: true,
        },
        ValidationBoot::Aged => Session {
            stage: BuildStage::Validate,
            label: "second boot, 20 days ahead",
            role: VmRole::Validation,
            boot: BuildBoot::Aged,
            helper_step: HelperStep::Aged,
            helper_counts: true,
        },
    };
    if let SessionState::Done(summary) = guest_session(step, observed, names, actions, &session) {
        match boot {
            ValidationBoot::RealTime => {
                step.build_mut().validation_boot = Some(ValidationBoot::Aged);
                step.progress(BuildStage::Validate, format!("first boot: {summary}"));
            }
            ValidationBoot::Aged => step.succeed(
                BuildStage::Validate,
                format!(
                    "a clone of the golden disk booted on real time (sealing held, the CRC startup path passed) and again 20 days ahead: {summary}"
                ),
                BuildStage::Ready,
            ),
        }
    }
}

/// Stage 7: the metadata ConfigMap and the DataSource published, and only once both are seen
/// `Ready=True` (a consumer that sees Ready finds them), then every temporary object deleted
/// (Ready stays while they go).
fn ready(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let bundle = crate::resources::bundle::Names::of(names.bundle());
    let mut publishing = false;
    for (owned, action, kind, name) in [
        (
            observed.metadata,
            Action::PublishMetadata,
            "ConfigMap",
            &bundle.metadata,
        ),
        (
            observed.data_source,
            Action::PublishDataSource,
            "DataSource",
            &names.bundle().to_owned(),
        ),
    ] {
        match owned {
            Owned::Ours => {}
            Owned::Missing => {
                actions.push(action);
                publishing = true;
            }
            Owned::NotOurs => {
                step.fail(
                    types::VALIDATED,
                    reasons::RESOURCE_REPLACED,
                    format!(
                        "{kind} {name} exists but this bundle does not control it; the bundle is not published into it. Delete it to retry"
                    ),
                );
                return;
            }
        }
    }
    if publishing {
        step.build_mut().message = Some(format!(
            "publishing ConfigMap {} and DataSource {}",
            bundle.metadata,
            names.bundle()
        ));
        return;
    }
    let now = step.now.clone();
    let status = &mut step.status;
    status.phase = Some(BundlePhase::Ready);
    status.qcow2_pvc_ref = Some(LocalRef::new(&bundle.golden_pvc));
    status.qcow2_pvc_namespace = Some(observed.namespace.clone());
    status.ssh_key_secret_ref = Some(LocalRef::new(&bundle.ssh_secret));
    let build = step.build_mut();
    if build.finished_at.is_none() {
        build.finished_at = Some(now);
    }
    let resources = build.resources.get_or_insert_with(Default::default);
    release(resources, observed, Temp::ALL, actions);
    let left = Temp::ALL
        .iter()
        .filter(|t| t.slot(resources).is_some())
        .count();
    let message = format!(
        "golden disk {}/{} is ready (sha256 {})",
        observed.namespace,
        bundle.golden_pvc,
        step.status.disk_sha256.as_deref().unwrap_or_default()
    );
    step.build_mut().message = Some(if left == 0 {
        "ready; every temporary object deleted".to_owned()
    } else {
        format!("ready; deleting {left} temporary object(s)")
    });
    step.set(types::READY, true, reasons::BUNDLE_READY, message);
}

/// What still holds the disks of a halted VM, or `None` once nothing does.
fn still_holding(vm: &VmSeen, vm_name: &str) -> Option<String> {
    if let Some(vmi) = &vm.vmi {
        return Some(format!(
            "waiting for VMI {} ({}) of VirtualMachine {vm_name} to go",
            vmi.uid, vmi.phase
        ));
    }
    // The launcher pods carry the bundle's label and are watched (metadata only), and
    // `status.runStrategy` comes with the VM's watch event: both wake this pass.
    (vm.launcher_pod || !vm.halt_observed).then(|| {
        format!(
            "waiting for the virt-launcher pod of VirtualMachine {vm_name} to release its disks"
        )
    })
}

/// One boot of the build VM with its helper Job: what a stage wants of the guest.
struct Session {
    stage: BuildStage,
    label: &'static str,
    role: VmRole,
    boot: BuildBoot,
    helper_step: HelperStep,
    /// Whether the helper's result ends the session (not during the cold restart, whose boot
    /// only has to start).
    helper_counts: bool,
}

/// Where a session is after this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
enum SessionState {
    /// The helper finished the step for the current VMI; its summary.
    Done(String),
    /// The VM was started in this boot's shape this pass.
    Started,
    /// Waiting (the stage's condition says on what), or the attempt failed.
    Pending,
}

impl Session {
    fn on_installed(stage: BuildStage, label: &'static str, helper_step: HelperStep) -> Session {
        Session {
            stage,
            label,
            role: VmRole::Build,
            boot: BuildBoot::Installed,
            helper_step,
            helper_counts: true,
        }
    }
}

/// Brings the build VM into the session's boot (halting it, waiting for its disks, starting
/// it), then runs the session's helper Job for the VMI running now, made again if it is lost
/// and never counted for another VMI.
fn guest_session(
    step: &mut Step,
    observed: &Observed,
    names: &Names,
    actions: &mut Vec<Action>,
    session: &Session,
) -> SessionState {
    let (stage, label, role) = (session.stage, session.label, session.role);
    let vm_name = names.vm_name(role);
    let Some(vm) = observed.vm_of(role) else {
        step.progress(stage, format!("waiting to read VirtualMachine {vm_name}"));
        return SessionState::Pending;
    };
    let helper_step = session.helper_step;
    // The helper of this step, for the VMI it was started for.
    let recorded_vmi = step.build().vmi_uid.clone();
    let helper = step
        .build()
        .resources
        .as_ref()
        .and_then(|r| r.helper_job.clone())
        .filter(|h| {
            recorded_vmi
                .as_deref()
                .is_some_and(|v| h.name == names.helper_job(helper_step, v))
        });
    if let Some(helper) = &helper
        && !helper.uid.is_empty()
        && session.helper_counts
    {
        match &observed.helper {
            JobState::Seen(Observation::Done(message)) => {
                match serde_json::from_str::<HelperOutcome>(message) {
                    Ok(outcome) if outcome.vmi_gone.is_none() && outcome.step == helper_step => {
                        return SessionState::Done(outcome.summary);
                    }
                    // The VMI changed under it: the step starts again for the next VMI.
                    Ok(_) => {}
                    Err(err) => {
                        step.fail(
                            condition_of(stage),
                            reasons::HELPER_JOB_FAILED,
                            format!(
                                "helper Job {} succeeded but its result is unreadable ({err}); is the operator image the same version as the Job's?",
                                helper.name
                            ),
                        );
                        return SessionState::Pending;
                    }
                }
            }
            JobState::Seen(Observation::Failed(detail))
                if vm.vmi.as_ref().map(|v| v.uid.as_str()) == recorded_vmi.as_deref() =>
            {
                // A refused manifest is the user's to fix: its own reason, not the Job's.
                let reason = if detail.contains(&format!("{}: ", reasons::MANIFEST_REJECTED)) {
                    reasons::MANIFEST_REJECTED
                } else {
                    reasons::HELPER_JOB_FAILED
                };
                step.fail(
                    condition_of(stage),
                    reason,
                    format!(
                        "{} step: helper Job {} failed: {detail}",
                        helper_step.as_str(),
                        helper.name
                    ),
                );
                return SessionState::Pending;
            }
            JobState::Seen(Observation::Replaced { uid }) => {
                let (reason, message) = attempt_failure(
                    WhenLost::FailAttempt,
                    helper,
                    &Observation::Replaced { uid: uid.clone() },
                )
                .unwrap_or_default();
                step.fail(condition_of(stage), reason, format!("Job {message}"));
                return SessionState::Pending;
            }
            _ => {}
        }
    }

    // The VM in the shape of this step's boot, running.
    if vm.boot.as_ref() != Some(&session.boot) || vm.halted {
        if !vm.halted {
            actions.push(Action::HaltVm(role));
            step.progress(stage, format!("{label}: stopping VirtualMachine {vm_name}"));
            return SessionState::Pending;
        }
        if let Some(message) = still_holding(vm, vm_name) {
            step.progress(stage, format!("{label}: {message}"));
            return SessionState::Pending;
        }
        actions.push(Action::StartVm(role, session.boot.clone()));
        step.progress(stage, format!("{label}: starting VirtualMachine {vm_name}"));
        return SessionState::Started;
    }
    let Some(vmi) = &vm.vmi else {
        let waiting = match &vm.failure {
            Some(failure) => format!("KubeVirt cannot start VirtualMachine {vm_name}: {failure}"),
            None => format!("waiting for KubeVirt to start VirtualMachine {vm_name}"),
        };
        step.progress(stage, format!("{label}: {waiting}"));
        return SessionState::Pending;
    };
    if let Some(blocked) = vmi.blocked.as_ref().filter(|_| vmi.running_at().is_none()) {
        step.progress(
            stage,
            format!(
                "{label}: VMI {} of VirtualMachine {vm_name} cannot start: {blocked}",
                vmi.uid
            ),
        );
        return SessionState::Pending;
    }
    if vmi.running_at().is_none() {
        step.progress(
            stage,
            format!(
                "{label}: VMI {} of VirtualMachine {vm_name} is {}",
                vmi.uid,
                if vmi.phase.is_empty() {
                    "starting"
                } else {
                    vmi.phase.as_str()
                }
            ),
        );
        return SessionState::Pending;
    }
    let wanted = names.helper_job(helper_step, &vmi.uid);
    match &helper {
        Some(h) if h.name == wanted && h.uid.is_empty() => {
            actions.push(Action::Create(Temp::HelperJob));
        }
        Some(h) if h.name == wanted => {
            let progress = match &observed.helper {
                JobState::Seen(Observation::Progress(p)) => p.clone(),
                JobState::Seen(Observation::Lost) => {
                    // A helper Job is safe to make again: it works from status
                    // (`docs/decisions.md`, "The Install stage").
                    let resources = step
                        .build_mut()
                        .resources
                        .get_or_insert_with(Default::default);
                    if let Some(slot) = resources.helper_job.as_mut() {
                        slot.uid = String::new();
                    }
                    actions.push(Action::Create(Temp::HelperJob));
                    "made again after it was deleted".into()
                }
                _ => "starting".into(),
            };
            step.progress(
                stage,
                format!(
                    "{label}: helper Job {wanted} for VMI {}: {progress}",
                    vmi.uid
                ),
            );
            return SessionState::Pending;
        }
        _ => {
            // A new VMI, a new step (or none recorded yet): the previous helper goes, this
            // one's is named first and created right after.
            if let Some(old) = step
                .build()
                .resources
                .as_ref()
                .and_then(|r| r.helper_job.clone())
                .filter(|old| !old.uid.is_empty())
            {
                actions.push(Action::Delete {
                    temp: Temp::HelperJob,
                    name: old.name,
                    uid: old.uid,
                });
            }
            step.build_mut().vmi_uid = Some(vmi.uid.clone());
            let resources = step
                .build_mut()
                .resources
                .get_or_insert_with(Default::default);
            resources.helper_job = Some(ObjectIdentity {
                name: wanted.clone(),
                uid: String::new(),
            });
            actions.push(Action::Create(Temp::HelperJob));
        }
    }
    step.progress(
        stage,
        format!("{label}: starting helper Job {wanted} for VMI {}", vmi.uid),
    );
    SessionState::Pending
}

/// The helper step the attempt's current stage runs.
pub fn helper_step(build: &BuildStatus) -> Option<HelperStep> {
    match build.stage? {
        BuildStage::Install => Some(match build.install_step? {
            InstallStep::Generator => HelperStep::Generator,
            InstallStep::Install => HelperStep::Install,
            InstallStep::ColdRestart | InstallStep::Certificates => HelperStep::Certificates,
        }),
        BuildStage::Customize => Some(HelperStep::Customize),
        BuildStage::Seal => Some(HelperStep::Seal),
        BuildStage::Validate => Some(match build.validation_boot? {
            ValidationBoot::RealTime => HelperStep::Validate,
            ValidationBoot::Aged => HelperStep::Aged,
        }),
        _ => None,
    }
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
            BuildStage::Customize,
        ),
    }
}

/// A failed attempt deletes every temporary object it recorded that is still ours.
fn cleanup(status: &mut CRCBundleStatus, observed: &Observed, actions: &mut Vec<Action>) {
    if let Some(resources) = status.build.as_mut().and_then(|b| b.resources.as_mut()) {
        release(resources, observed, Temp::ALL, actions);
    }
}

/// Deletes each of `temps` that is still ours, and forgets the ones that are gone (or going), so
/// later passes stop reading them.
fn release(
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
        let ours = match temp {
            Temp::InstallerJob => job_ours(&observed.installer),
            Temp::HelperJob => job_ours(&observed.helper),
            Temp::DiskJob => job_ours(&observed.disk),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::bundle::CRCBundleSpec;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    const HOUR: Duration = Duration::from_secs(3600);

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn bundle() -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(json!({"goldenVolumeSize": "80Gi",
            "build": {"releaseImage": "quay.io/example/release:4.22", "pullSecretRef": {"name": "p"}}}))
        .unwrap();
        let mut b = CRCBundle::new("custom", spec);
        b.metadata.generation = Some(1);
        b.metadata.uid = Some("bundle-uid".into());
        b
    }

    fn inputs(sha: &str) -> BuildInputs {
        BuildInputs {
            pull_secret_sha256: Some(sha.into()),
            profile: Some("crc-kubevirt-v1".into()),
            ..Default::default()
        }
    }

    fn admitted() -> Observed {
        Observed {
            admitted: Some(Ok(inputs("aa"))),
            key_secret: Owned::Ours,
            ..Default::default()
        }
    }

    /// Applies a decision as the pass would: status written, every create given a UID.
    fn applied(mut b: CRCBundle, decision: &Decision) -> CRCBundle {
        let mut status = decision.status.clone();
        for action in &decision.actions {
            if let Action::Create(temp) = action {
                record_created(&mut status, *temp, format!("uid-{temp:?}"));
            }
        }
        b.status = Some(status);
        b
    }

    fn reason(status: &CRCBundleStatus, type_: &str) -> (String, String) {
        let c = conditions::find(&status.conditions, type_).expect(type_);
        (c.status.clone(), c.reason.clone())
    }

    fn prepared() -> CRCBundle {
        let first = decide(&bundle(), &admitted(), HOUR, at(0));
        applied(bundle(), &first)
    }

    fn with_installer(observation: Observation) -> Observed {
        let mut observed = admitted();
        observed.installer = JobState::Seen(observation);
        for temp in Temp::PREPARE {
            observed.temps.insert(temp, None);
        }
        observed
    }

    fn outcome() -> String {
        serde_json::to_string(&Outcome {
            release_digest: format!("sha256:{}", "1".repeat(64)),
            version: "4.22.3".into(),
            rhcos_version: "9.6.1".into(),
            iso_sha256: "2".repeat(64),
        })
        .unwrap()
    }

    #[test]
    fn the_first_pass_records_inputs_and_names_before_anything_exists() {
        let mut observed = admitted();
        observed.key_secret = Owned::Missing;
        let decision = decide(&bundle(), &observed, HOUR, at(0));
        let status = &decision.status;
        let build = status.build.as_ref().unwrap();
        assert_eq!(build.attempt, Some(1));
        assert_eq!(build.stage, Some(BuildStage::Prepare));
        assert_eq!(status.phase, Some(BundlePhase::Building));
        assert_eq!(status.inputs, Some(inputs("aa")));
        assert_eq!(status.vm_profile.as_deref(), Some("crc-kubevirt-v1"));
        assert_eq!(
            status.release.as_ref().unwrap().image,
            "quay.io/example/release:4.22"
        );
        let resources = build.resources.as_ref().unwrap();
        for temp in Temp::PREPARE {
            let slot = temp.slot(resources).expect("named");
            assert!(slot.name.starts_with("custom-b1-"), "{slot:?}");
            assert!(slot.uid.is_empty());
        }
        let mut expected = vec![Action::CreateKeySecret];
        expected.extend(Temp::PREPARE.map(Action::Create));
        assert_eq!(decision.actions, expected);
        assert_eq!(reason(status, types::READY).1, reasons::BUILDING);
        assert_eq!(decision.requeue, Some(HOUR));
    }

    #[test]
    fn a_bad_input_fails_before_anything_is_named() {
        let mut observed = admitted();
        observed.admitted = Some(Err(admit::Error::PullSecretNotFound {
            namespace: "ops".into(),
            name: "p".into(),
        }));
        let decision = decide(&bundle(), &observed, HOUR, at(0));
        let status = &decision.status;
        assert_eq!(status.phase, Some(BundlePhase::Failed));
        assert_eq!(
            reason(status, types::PREPARED),
            ("False".into(), reasons::INPUT_NOT_FOUND.into())
        );
        let ready = conditions::find(&status.conditions, types::READY).unwrap();
        assert!(ready.message.contains("Secret ops/p"), "{}", ready.message);
        assert!(
            ready.message.contains(RETRY_ANNOTATION),
            "{}",
            ready.message
        );
        assert!(status.inputs.is_none());
        assert!(decision.actions.is_empty(), "{:?}", decision.actions);
        assert_eq!(decision.requeue, None);
    }

    #[test]
    fn a_failed_attempt_waits_for_a_new_retry_value() {
        let mut observed = admitted();
        observed.admitted = Some(Err(admit::Error::PullSecretNotFound {
            namespace: "ops".into(),
            name: "p".into(),
        }));
        let failed = applied(bundle(), &decide(&bundle(), &observed, HOUR, at(0)));
        let again = decide(&failed, &admitted(), HOUR, at(10));
        assert_eq!(Some(&again.status), failed.status.as_ref(), "unchanged");
        assert!(!reads_inputs(&failed, None));

        let mut retry = admitted();
        retry.retry = Some("1".into());
        assert!(reads_inputs(&failed, Some("1")));
        let second = decide(&failed, &retry, HOUR, at(20));
        let build = second.status.build.as_ref().unwrap();
        assert_eq!(
            (build.attempt, build.retry.as_deref()),
            (Some(2), Some("1"))
        );
        assert_eq!(build.stage, Some(BuildStage::Prepare));
        assert_eq!(build.started_at, Some(at(20)));
        assert!(
            build
                .resources
                .as_ref()
                .unwrap()
                .installer_job
                .as_ref()
                .unwrap()
                .name
                == "custom-b2-installer"
        );
        assert!(
            conditions::find(&second.status.conditions, types::PREPARED)
                .is_some_and(|c| c.reason == reasons::BUILDING)
        );
    }

    #[test]
    fn a_finished_installer_records_the_release_and_moves_to_install() {
        let decision = decide(
            &prepared(),
            &with_installer(Observation::Done(outcome())),
            HOUR,
            at(60),
        );
        let status = &decision.status;
        assert!(decision.actions.is_empty(), "{:?}", decision.actions);
        assert_eq!(status.ocp_version.as_deref(), Some("4.22.3"));
        assert_eq!(
            status.release.as_ref().unwrap().digest,
            Some(format!("sha256:{}", "1".repeat(64)))
        );
        assert_eq!(
            status.build.as_ref().unwrap().stage,
            Some(BuildStage::Install)
        );
        assert_eq!(
            reason(status, types::PREPARED),
            ("True".into(), reasons::STAGE_SUCCEEDED.into())
        );
        assert_eq!(reason(status, types::INSTALLED).0, "False");
        assert_eq!(
            status.build.as_ref().unwrap().install_step,
            Some(InstallStep::Generator)
        );
        // The next pass names the Install stage's objects, then creates them in order.
        let entered = applied(prepared(), &decision);
        let next = decide(
            &entered,
            &with_installer(Observation::Done(outcome())),
            HOUR,
            at(90),
        );
        let created: Vec<Temp> = next
            .actions
            .iter()
            .map(|a| match a {
                Action::Create(temp) => *temp,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(created, Temp::INSTALL);
        assert_eq!(next.requeue, Some(HOUR - Duration::from_secs(90)));
    }

    /// The Install stage's observations after its objects exist: the VM as KubeVirt shows it.
    fn installing(step: InstallStep, vm: VmSeen, helper: JobState) -> (CRCBundle, Observed) {
        let mut b = applied(
            prepared(),
            &decide(
                &prepared(),
                &with_installer(Observation::Done(outcome())),
                HOUR,
                at(60),
            ),
        );
        let entered = decide(
            &b,
            &with_installer(Observation::Done(outcome())),
            HOUR,
            at(61),
        );
        b = applied(b, &entered);
        let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
        build.install_step = Some(step);
        let mut observed = with_installer(Observation::Done(outcome()));
        for temp in Temp::INSTALL {
            observed.temps.insert(temp, None);
        }
        observed.vm = Some(vm);
        observed.helper = helper;
        (b, observed)
    }

    /// An attempt in stage `stage` after the cold restart, every object recorded and ours, the
    /// validation clone's too.
    fn later(stage: BuildStage, validation_vm: VmSeen) -> (CRCBundle, Observed) {
        let (mut b, mut observed) = installing(
            InstallStep::Certificates,
            running("vmi-build", BuildBoot::Installed),
            JobState::Unreported,
        );
        let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
        build.stage = Some(stage);
        let resources = build.resources.get_or_insert_with(Default::default);
        for temp in [Temp::ValidationDataVolume, Temp::ValidationVm] {
            *temp.slot_mut(resources) = Some(ObjectIdentity {
                name: format!("{temp:?}"),
                uid: format!("uid-{temp:?}"),
            });
            observed.temps.insert(temp, None);
        }
        observed.validation_vm = Some(validation_vm);
        (b, observed)
    }

    #[test]
    fn validation_boots_the_clone_on_real_time_then_20_days_ahead() {
        let (b, observed) = later(
            BuildStage::Validate,
            running("vmi-clone", BuildBoot::Installed),
        );
        let d = decide(&b, &observed, HOUR, at(100));
        let build = d.status.build.as_ref().unwrap();
        assert_eq!(build.validation_boot, Some(ValidationBoot::RealTime));
        assert_eq!(d.actions, vec![Action::Create(Temp::HelperJob)]);
        let helper = build
            .resources
            .as_ref()
            .unwrap()
            .helper_job
            .clone()
            .unwrap();
        assert_eq!(helper.name, "custom-b1-validate-vmiclone");
        assert_eq!(helper_step(build), Some(HelperStep::Validate));

        // The first boot's helper done: the clone is halted for its aged boot.
        let mut b = applied(b, &d);
        let mut observed = observed;
        observed.helper = JobState::Seen(Observation::Done(
            serde_json::to_string(&HelperOutcome {
                step: HelperStep::Validate,
                vmi_gone: None,
                summary: "sealing held".into(),
            })
            .unwrap(),
        ));
        let d = decide(&b, &observed, HOUR, at(101));
        assert_eq!(
            d.status.build.as_ref().unwrap().validation_boot,
            Some(ValidationBoot::Aged)
        );
        b = applied(b, &d);
        observed.helper = JobState::Unreported;
        let d = decide(&b, &observed, HOUR, at(102));
        assert_eq!(d.actions, vec![Action::HaltVm(VmRole::Validation)]);

        // Halted and released: started again 20 days ahead.
        observed.validation_vm = Some(VmSeen {
            boot: Some(BuildBoot::Installed),
            halted: true,
            halt_observed: true,
            vmi: None,
            failure: None,
            launcher_pod: false,
        });
        let d = decide(&b, &observed, HOUR, at(103));
        assert_eq!(
            d.actions,
            vec![Action::StartVm(VmRole::Validation, BuildBoot::Aged)]
        );

        // The aged boot's helper done: Validated, and on to Ready.
        let vmi = "vmi-aged";
        let mut b = applied(b, &d);
        let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
        build.vmi_uid = Some(vmi.into());
        build.resources.as_mut().unwrap().helper_job = Some(ObjectIdentity {
            name: Names::of("custom", 1).helper_job(HelperStep::Aged, vmi),
            uid: "aged-uid".into(),
        });
        observed.validation_vm = Some(running(vmi, BuildBoot::Aged));
        observed.helper = JobState::Seen(Observation::Done(
            serde_json::to_string(&HelperOutcome {
                step: HelperStep::Aged,
                vmi_gone: None,
                summary: "passed again".into(),
            })
            .unwrap(),
        ));
        let d = decide(&b, &observed, HOUR, at(104));
        assert_eq!(
            d.status.build.as_ref().unwrap().stage,
            Some(BuildStage::Ready)
        );
        let validated = conditions::find(&d.status.conditions, types::VALIDATED).unwrap();
        assert_eq!(
            (validated.status.as_str(), validated.reason.as_str()),
            ("True", reasons::STAGE_SUCCEEDED)
        );
        assert!(
            validated.message.contains("passed again"),
            "{}",
            validated.message
        );
    }

    #[test]
    fn a_refused_manifest_fails_customize_with_its_own_reason_and_cleans_up() {
        let (mut b, mut observed) = later(
            BuildStage::Customize,
            running("vmi-clone", BuildBoot::Installed),
        );
        observed.admitted = Some(Ok(inputs("aa")));
        let build = b.status.as_mut().unwrap().build.as_mut().unwrap();
        build.vmi_uid = Some("vmi-build".into());
        build.resources.as_mut().unwrap().helper_job = Some(ObjectIdentity {
            name: Names::of("custom", 1).helper_job(HelperStep::Customize, "vmi-build"),
            uid: "helper-uid".into(),
        });
        observed.helper = JobState::Seen(Observation::Failed(
            "ManifestRejected: the guest API rejected ConfigMap x/Bad from extra/cm.yaml of postInstallManifestRefs: Invalid value".into(),
        ));
        let d = decide(&b, &observed, HOUR, at(100));
        assert_eq!(
            reason(&d.status, types::CUSTOMIZED),
            ("False".into(), reasons::MANIFEST_REJECTED.into())
        );
        assert_eq!(d.status.phase, Some(BundlePhase::Failed));
        assert!(
            d.actions.iter().any(|a| matches!(
                a,
                Action::Delete {
                    temp: Temp::BuildVm,
                    ..
                }
            )),
            "{:?}",
            d.actions
        );

        // An input changed before the manifests were applied: InputsChanged.
        observed.helper = JobState::Unreported;
        observed.admitted = Some(Ok(inputs("bb")));
        let d = decide(&b, &observed, HOUR, at(100));
        assert_eq!(
            reason(&d.status, types::CUSTOMIZED),
            ("False".into(), reasons::INPUTS_CHANGED.into())
        );
    }

    #[test]
    fn ready_publishes_then_deletes_every_temporary_object_and_stays_ready() {
        let (b, mut observed) = later(BuildStage::Ready, running("vmi-clone", BuildBoot::Aged));
        observed.namespace = "ops".into();
        let d = decide(&b, &observed, HOUR, at(100));
        assert_eq!(
            d.actions,
            [Action::PublishMetadata, Action::PublishDataSource],
            "published first; nothing is Ready or deleted before both are seen"
        );
        assert_ne!(reason(&d.status, types::READY).0, "True");
        assert_eq!(d.requeue, None, "their watch events wake the bundle");

        // Both seen: Ready, and the temporary objects go.
        observed.metadata = Owned::Ours;
        observed.data_source = Owned::Ours;
        let d = decide(&b, &observed, HOUR, at(101));
        assert!(d.actions.contains(&Action::Delete {
            temp: Temp::ValidationVm,
            name: "ValidationVm".into(),
            uid: "uid-ValidationVm".into(),
        }));
        assert_eq!(
            reason(&d.status, types::READY),
            ("True".into(), reasons::BUNDLE_READY.into())
        );
        assert_eq!(d.status.phase, Some(BundlePhase::Ready));
        assert_eq!(d.status.qcow2_pvc_namespace.as_deref(), Some("ops"));
        assert_eq!(d.requeue, None, "no deadline once Ready");

        // Published and everything gone: nothing left to do, still Ready, far past the deadline.
        observed.metadata = Owned::Ours;
        observed.data_source = Owned::Ours;
        for temp in Temp::ALL {
            observed.temps.insert(*temp, Some(Observation::Lost));
        }
        observed.installer = JobState::Seen(Observation::Lost);
        let b = applied(b, &d);
        let d = decide(&b, &observed, HOUR, at(100_000));
        assert_eq!(reason(&d.status, types::READY).0, "True");
        assert!(
            d.actions.iter().all(|a| !matches!(a, Action::Create(_))),
            "{:?}",
            d.actions
        );
    }

    fn running(uid: &str, boot: BuildBoot) -> VmSeen {
        VmSeen {
            boot: Some(boot),
            vmi: Some(VmiSeen {
                uid: uid.into(),
                phase: "Running".into(),
                ip: Some("10.128.0.9".into()),
                blocked: None,
            }),
            launcher_pod: true,
            ..Default::default()
        }
    }

    fn generator_boot() -> BuildBoot {
        BuildBoot::Generator {
            iso_claim: "custom-b1-iso".into(),
        }
    }

    fn helper_done(step: HelperStep) -> JobState {
        JobState::Seen(Observation::Done(
            serde_json::to_string(&HelperOutcome {
                step,
                vmi_gone: None,
                summary: "done".into(),
            })
            .unwrap(),
        ))
    }

    #[test]
    fn a_running_vmi_gets_its_helper_named_first_then_created() {
        let (b, observed) = installing(
            InstallStep::Generator,
            running("vmi-1aaa", generator_boot()),
            JobState::Unreported,
        );
        let d = decide(&b, &observed, HOUR, at(70));
        assert_eq!(d.actions, vec![Action::Create(Temp::HelperJob)]);
        let build = d.status.build.as_ref().unwrap();
        assert_eq!(build.vmi_uid.as_deref(), Some("vmi-1aaa"));
        assert_eq!(
            build
                .resources
                .as_ref()
                .unwrap()
                .helper_job
                .as_ref()
                .unwrap()
                .name,
            "custom-b1-generator-vmi1aaa"
        );
    }

    #[test]
    fn a_vmi_kubevirt_cannot_start_is_waited_for_with_kubevirts_reason() {
        let mut vm = running("vmi-1aaa", generator_boot());
        if let Some(vmi) = vm.vmi.as_mut() {
            vmi.phase = "Scheduled".into();
            vmi.ip = None;
            vmi.blocked = Some("Synchronizing with the Domain failed.: Could not open 'disk.img': Permission denied".into());
        }
        let (b, observed) = installing(InstallStep::Generator, vm, JobState::Unreported);
        let d = decide(&b, &observed, HOUR, at(70));
        assert!(d.actions.is_empty(), "{:?}", d.actions);
        let message = d.status.build.as_ref().unwrap().message.clone().unwrap();
        assert!(
            message.contains("VMI vmi-1aaa of VirtualMachine")
                && message.contains("cannot start: Synchronizing with the Domain failed.: Could not open 'disk.img': Permission denied"),
            "{message}"
        );

        let mut vm = running("vmi-1aaa", generator_boot());
        vm.vmi = None;
        vm.failure = Some("FailedCreate: Failure while starting VMI: denied".into());
        let (b, observed) = installing(InstallStep::Generator, vm, JobState::Unreported);
        let message = decide(&b, &observed, HOUR, at(70))
            .status
            .build
            .unwrap()
            .message
            .unwrap();
        assert!(
            message.contains("KubeVirt cannot start VirtualMachine")
                && message.ends_with("FailedCreate: Failure while starting VMI: denied"),
            "{message}"
        );
    }

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
        assert_eq!(deleted, Temp::RELEASED_BY_COLD_RESTART);
        assert_eq!(
            d.status.build.as_ref().unwrap().install_step,
            Some(InstallStep::Certificates)
        );
        // Afterwards their absence fails nothing.
        let b = applied(b, &d);
        for temp in Temp::RELEASED_BY_COLD_RESTART {
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
        for temp in Temp::RELEASED_BY_COLD_RESTART {
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

    #[test]
    fn a_failed_installer_fails_the_attempt_and_deletes_its_objects() {
        let decision = decide(
            &prepared(),
            &with_installer(Observation::Failed("ChecksumMismatch: bad".into())),
            HOUR,
            at(60),
        );
        let status = &decision.status;
        assert_eq!(status.phase, Some(BundlePhase::Failed));
        assert_eq!(
            reason(status, types::PREPARED),
            ("False".into(), reasons::INSTALLER_JOB_FAILED.into())
        );
        let deleted: Vec<Temp> = decision
            .actions
            .iter()
            .map(|a| match a {
                Action::Delete { temp, uid, .. } => {
                    assert_eq!(uid, &format!("uid-{temp:?}"));
                    *temp
                }
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(deleted, Temp::PREPARE);
    }

    #[test]
    fn a_lost_or_replaced_object_fails_the_attempt_and_is_never_touched() {
        for (seen, want) in [
            (Observation::Lost, reasons::RESOURCE_LOST),
            (
                Observation::Replaced {
                    uid: "other".into(),
                },
                reasons::RESOURCE_REPLACED,
            ),
        ] {
            let mut observed = with_installer(Observation::Progress("1 active".into()));
            observed.temps.insert(Temp::WorkPvc, Some(seen));
            let decision = decide(&prepared(), &observed, HOUR, at(60));
            assert_eq!(reason(&decision.status, types::PREPARED).1, want);
            let prepared_condition =
                conditions::find(&decision.status.conditions, types::PREPARED).unwrap();
            assert!(
                prepared_condition.message.contains("custom-b1-work"),
                "{}",
                prepared_condition.message
            );
            assert!(
                !decision.actions.iter().any(|a| matches!(
                    a,
                    Action::Delete {
                        temp: Temp::WorkPvc,
                        ..
                    }
                )),
                "{:?}",
                decision.actions
            );
            assert!(decision.actions.contains(&Action::Delete {
                temp: Temp::InstallerJob,
                name: "custom-b1-installer".into(),
                uid: "uid-InstallerJob".into()
            }));
        }
    }

    #[test]
    fn an_object_lost_or_replaced_in_any_later_stage_fails_that_stage() {
        for (stage, condition) in [
            (BuildStage::Customize, types::CUSTOMIZED),
            (BuildStage::Seal, types::SEALED),
            (BuildStage::Publish, types::PUBLISHED),
            (BuildStage::Validate, types::VALIDATED),
        ] {
            for (temp, seen, want) in [
                (
                    Temp::RootDataVolume,
                    Observation::Lost,
                    reasons::RESOURCE_LOST,
                ),
                (
                    Temp::BuildVm,
                    Observation::Replaced {
                        uid: "other".into(),
                    },
                    reasons::RESOURCE_REPLACED,
                ),
            ] {
                let (b, mut observed) = later(stage, running("vmi-clone", BuildBoot::Installed));
                observed.temps.insert(temp, Some(seen));
                let d = decide(&b, &observed, HOUR, at(100));
                assert_eq!(
                    reason(&d.status, condition),
                    ("False".to_owned(), want.to_owned()),
                    "{stage:?} with {temp:?} gone"
                );
                assert!(
                    !d.actions.iter().any(|a| matches!(
                        a,
                        Action::Delete { temp: t, .. } if *t == temp
                    )),
                    "{stage:?}: the {temp:?} that is not ours is never deleted: {:?}",
                    d.actions
                );
            }
        }
    }

    #[test]
    fn a_key_secret_of_someone_else_is_never_used() {
        let mut observed = admitted();
        observed.key_secret = Owned::NotOurs;
        let decision = decide(&bundle(), &observed, HOUR, at(0));
        assert_eq!(
            reason(&decision.status, types::PREPARED).1,
            reasons::RESOURCE_REPLACED
        );
        let message = conditions::find(&decision.status.conditions, types::PREPARED)
            .unwrap()
            .message
            .clone();
        assert!(message.contains("custom-ssh-key"), "{message}");
        assert!(
            !decision
                .actions
                .iter()
                .any(|a| matches!(a, Action::Create(_) | Action::CreateKeySecret)),
            "{:?}",
            decision.actions
        );
    }

    #[test]
    fn inputs_edited_after_admission_fail_the_attempt() {
        let mut observed = with_installer(Observation::Progress("1 active".into()));
        observed.admitted = Some(Ok(inputs("bb")));
        let decision = decide(&prepared(), &observed, HOUR, at(60));
        assert_eq!(
            reason(&decision.status, types::PREPARED).1,
            reasons::INPUTS_CHANGED
        );
    }

    #[test]
    fn the_deadline_fails_the_running_stage() {
        let observed = with_installer(Observation::Progress("1 active".into()));
        let decision = decide(&prepared(), &observed, HOUR, at(3600));
        assert_eq!(
            reason(&decision.status, types::PREPARED).1,
            reasons::BUILD_DEADLINE_EXCEEDED
        );
        assert_eq!(decision.status.phase, Some(BundlePhase::Failed));
    }

    #[test]
    fn the_deadline_fails_every_later_stage_and_the_attempt_cleans_up() {
        for (stage, condition) in [
            (BuildStage::Customize, types::CUSTOMIZED),
            (BuildStage::Seal, types::SEALED),
            (BuildStage::Publish, types::PUBLISHED),
            (BuildStage::Validate, types::VALIDATED),
        ] {
            let (b, observed) = later(stage, running("vmi-clone", BuildBoot::Installed));
            let d = decide(&b, &observed, HOUR, at(2 * 3600));
            assert_eq!(
                reason(&d.status, condition),
                (
                    "False".to_owned(),
                    reasons::BUILD_DEADLINE_EXCEEDED.to_owned()
                ),
                "{stage:?}"
            );
            assert_eq!(d.status.phase, Some(BundlePhase::Failed), "{stage:?}");
            // The attempt cleans up at once (a volume in use stays, protected, until its pod
            // goes).
            for temp in [Temp::BuildVm, Temp::ValidationVm, Temp::RootDataVolume] {
                assert!(
                    d.actions
                        .iter()
                        .any(|a| matches!(a, Action::Delete { temp: t, .. } if *t == temp)),
                    "{stage:?}: {temp:?} not deleted: {:?}",
                    d.actions
                );
            }
        }
    }

    #[test]
    fn a_crash_between_naming_and_creating_creates_again() {
        let first = decide(&bundle(), &admitted(), HOUR, at(0));
        let mut named = bundle();
        named.status = Some(first.status.clone());
        let mut observed = admitted();
        observed.installer = JobState::Named;
        let again = decide(&named, &observed, HOUR, at(5));
        assert_eq!(again.actions, Temp::PREPARE.map(Action::Create).to_vec());
        assert_eq!(
            again.status, first.status,
            "names unchanged, nothing new to write"
        );
    }
}
