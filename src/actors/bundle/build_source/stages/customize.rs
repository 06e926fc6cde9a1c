//! The Customize stage (condition `Customized`): the installed build VM on real time, with the
//! customize helper, which applies the profile's and the user's post-install manifests.

use super::install::on_installed;
use crate::actors::bundle::build_source::step::{Action, Observed, Step};
use crate::api::bundle::{BuildStage, BuildStatus};
use crate::contract::build_helper::Step as HelperStep;
use crate::resources::build::Names;

/// The installed build VM on real time, with the customize helper.
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let session = (BuildStage::Customize, "customize", HelperStep::Customize);
    if let Some(summary) = on_installed(step, observed, names, actions, session) {
        step.succeed(BuildStage::Customize, summary);
    }
}

/// The customize helper, for every boot of the stage.
pub fn helper_step(_: &BuildStatus) -> Option<HelperStep> {
    Some(HelperStep::Customize)
}

#[cfg(test)]
mod tests {
    use crate::actors::bundle::build_source::tests::*;

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
        observed.jobs.insert(Temp::HelperJob, JobState::Seen(Observation::Failed(
            "ManifestRejected: the guest API rejected ConfigMap x/Bad from extra/cm.yaml of postInstallManifestRefs: Invalid value".into(),
        )));
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
        observed.jobs.insert(Temp::HelperJob, JobState::Unreported);
        observed.admitted = Some(Ok(inputs("bb")));
        let d = decide(&b, &observed, HOUR, at(100));
        assert_eq!(
            reason(&d.status, types::CUSTOMIZED),
            ("False".into(), reasons::INPUTS_CHANGED.into())
        );
    }
}
