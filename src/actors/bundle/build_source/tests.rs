//! Fixtures of the build source's unit tests, and everything they use: each stage's tests
//! import this alone.

pub use std::time::Duration;

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
pub use k8s_openapi::jiff::Timestamp;
pub use serde_json::json;

pub use super::admit;
pub use super::decide::*;
pub use super::stages::install::RELEASED_BY_COLD_RESTART;
pub use super::stages::{helper_step, up_front};
pub use super::step::*;
pub use super::temps::*;
pub use crate::actors::runtime::stage::JobState;
pub use crate::actors::runtime::stage::Observation;
pub use crate::api::bundle::{
    BuildInputs, BuildStage, BundlePhase, CRCBundle, CRCBundleSpec, CRCBundleStatus, InstallStep,
    ValidationBoot,
};
pub use crate::api::common::ObjectIdentity;
pub use crate::api::conditions::{self, reasons, types};
pub use crate::api::labels::RETRY_ANNOTATION;
pub use crate::contract::build_helper::{Outcome as HelperOutcome, Step as HelperStep};
pub use crate::contract::installer::Outcome;
pub use crate::resources::build::Names;
pub use crate::resources::profile::vm::BuildBoot;

pub const HOUR: Duration = Duration::from_secs(3600);

pub fn at(secs: i64) -> Time {
    Time(Timestamp::from_second(secs).unwrap())
}

pub fn bundle() -> CRCBundle {
    let spec: CRCBundleSpec = serde_json::from_value(json!({"goldenVolumeSize": "80Gi",
        "build": {"releaseImage": "quay.io/example/release:4.22", "pullSecretRef": {"name": "p"}}}))
    .unwrap();
    let mut b = CRCBundle::new("custom", spec);
    b.metadata.generation = Some(1);
    b.metadata.uid = Some("bundle-uid".into());
    b
}

pub fn inputs(sha: &str) -> BuildInputs {
    BuildInputs {
        pull_secret_sha256: Some(sha.into()),
        profile: Some("crc-kubevirt-v1".into()),
        ..Default::default()
    }
}

pub fn admitted() -> Observed {
    Observed {
        admitted: Some(Ok(inputs("aa"))),
        key_secret: Owned::Ours,
        ..Default::default()
    }
}

/// Applies a decision as the pass would: status written, every create given a UID.
pub fn applied(mut b: CRCBundle, decision: &Decision) -> CRCBundle {
    let mut status = decision.status.clone();
    for action in &decision.actions {
        if let Action::Create(temp) = action {
            record_created(&mut status, *temp, format!("uid-{temp:?}"));
        }
    }
    b.status = Some(status);
    b
}

pub fn reason(status: &CRCBundleStatus, type_: &str) -> (String, String) {
    let c = conditions::find(&status.conditions, type_).expect(type_);
    (c.status.clone(), c.reason.clone())
}

pub fn prepared() -> CRCBundle {
    let first = decide(&bundle(), &admitted(), HOUR, at(0));
    applied(bundle(), &first)
}

pub fn with_installer(observation: Observation) -> Observed {
    let mut observed = admitted();
    observed
        .jobs
        .insert(Temp::InstallerJob, JobState::Seen(observation));
    for temp in up_front(BuildStage::Prepare) {
        observed.temps.insert(temp, None);
    }
    observed
}

pub fn outcome() -> String {
    serde_json::to_string(&Outcome {
        release_digest: format!("sha256:{}", "1".repeat(64)),
        version: "4.22.3".into(),
        rhcos_version: "9.6.1".into(),
        iso_sha256: "2".repeat(64),
    })
    .unwrap()
}

/// The Install stage's observations after its objects exist: the VM as KubeVirt shows it.
pub fn installing(step: InstallStep, vm: VmSeen, helper: JobState) -> (CRCBundle, Observed) {
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
    for temp in up_front(BuildStage::Install) {
        observed.temps.insert(temp, None);
    }
    observed.vm = Some(vm);
    observed.jobs.insert(Temp::HelperJob, helper);
    (b, observed)
}

/// An attempt in stage `stage` after the cold restart, every object recorded and ours, the
/// validation clone's too.
pub fn later(stage: BuildStage, validation_vm: VmSeen) -> (CRCBundle, Observed) {
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

pub fn running(uid: &str, boot: BuildBoot) -> VmSeen {
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

pub fn generator_boot() -> BuildBoot {
    BuildBoot::Generator {
        iso_claim: "custom-b1-iso".into(),
    }
}

pub fn helper_done(step: HelperStep) -> JobState {
    JobState::Seen(Observation::Done(
        serde_json::to_string(&HelperOutcome {
            step,
            vmi_gone: None,
            summary: "done".into(),
        })
        .unwrap(),
    ))
}
