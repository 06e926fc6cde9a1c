//! The Seal stage (condition `Sealed`): the seal helper makes the installed guest into a golden
//! disk as SNC does, and powers the guest off at its end.

use super::install::on_installed;
use crate::actors::bundle::build_source::step::{Action, Observed, Step};
use crate::api::bundle::{BuildStage, BuildStatus};
use crate::contract::build_helper::Step as HelperStep;
use crate::resources::build::Names;

/// The seal helper, which powers the guest off at its end.
pub fn decide(step: &mut Step, observed: &Observed, names: &Names, actions: &mut Vec<Action>) {
    let session = (BuildStage::Seal, "seal", HelperStep::Seal);
    if let Some(summary) = on_installed(step, observed, names, actions, session) {
        step.succeed(
            BuildStage::Seal,
            format!("{summary}; the guest powered itself off"),
        );
    }
}

/// The seal helper, for every boot of the stage.
pub fn helper_step(_: &BuildStatus) -> Option<HelperStep> {
    Some(HelperStep::Seal)
}
