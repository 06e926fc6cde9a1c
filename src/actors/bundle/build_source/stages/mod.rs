//! The build's stages as one table. Each stage is a slice of its own module: its part of the
//! pure decision, the builders' entry point of the temporary objects it makes, the child actors
//! that follow them, and its unit tests. The table below says, per stage, which objects it
//! makes, whether it reads the inputs, which children follow its objects and which helper step
//! its guest session runs; [`BuildStage`] itself knows its successor and its condition. Adding a
//! stage is `docs/architecture.md`, "Adding a stage".

pub mod customize;
pub mod install;
pub mod prepare;
pub mod publish;
pub mod ready;
pub mod seal;
pub mod validate;

use std::sync::Arc;

use futures::future::BoxFuture;

use super::session::GuestSession;
use super::step::{Action, BuildInput, Observed, Step};
use super::temps::{Built, Temp};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::children::Children;
use crate::actors::runtime::stage::{Observation, Stage};
use crate::api::bundle::{BuildStage, BuildStatus, CRCBundleStatus};
use crate::api::common::ObjectIdentity;
use crate::contract::build_helper::Step as HelperStep;
use crate::resources::build::Names;

/// One stage of the table.
pub struct StageRow {
    pub stage: BuildStage,
    /// Its part of the decision, on the status being decided.
    pub decide: fn(&mut Step, &Observed, &Names, &mut Vec<Action>),
    /// Whether it reads the inputs.
    pub inputs: Inputs,
    /// The temporary objects it makes, in creation order ([`Temp::per_boot`] ones as its guest
    /// session needs them, the others up front).
    pub temps: &'static [Temp],
    /// Its builders' entry point: one of its `temps` as a new object; `None` when this pass
    /// cannot build it yet (the next one does).
    pub build: fn(Temp, &BuildInput) -> Result<Option<Built>, String>,
    /// The children that follow its objects once they are recorded.
    pub children: &'static [Child],
    /// The helper step its guest session runs now, if it has one.
    pub helper_step: fn(&BuildStatus) -> Option<HelperStep>,
}

/// What a stage does with the inputs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Inputs {
    Unread,
    /// Reads and admits them, and records them in `status.inputs`.
    Admit,
    /// Reads them again: a change fails the stage, which would `<verb>` from them.
    Recheck(&'static str),
}

/// The stage table, in the order an attempt runs the stages. Failed has no row: a failed
/// attempt only cleans up.
pub const STAGES: &[StageRow] = &[
    StageRow {
        stage: BuildStage::Admit,
        decide: prepare::admit,
        inputs: Inputs::Admit,
        temps: &[],
        build: nothing,
        children: &[],
        helper_step: no_helper,
    },
    StageRow {
        stage: BuildStage::Prepare,
        decide: prepare::decide,
        inputs: Inputs::Recheck("build"),
        temps: &prepare::TEMPS,
        build: prepare::build,
        children: &[Child::reporting::<prepare::InstallerJob>(
            Temp::InstallerJob,
        )],
        helper_step: no_helper,
    },
    StageRow {
        stage: BuildStage::Install,
        decide: install::decide,
        inputs: Inputs::Unread,
        temps: &install::TEMPS,
        build: install::build,
        children: &[
            Child::waking::<install::BuildVmStage>(Temp::BuildVm),
            Child::reporting::<GuestSession>(Temp::HelperJob),
        ],
        helper_step: install::helper_step,
    },
    StageRow {
        stage: BuildStage::Customize,
        decide: customize::decide,
        // It applies the post-install manifests: a change before then fails it.
        inputs: Inputs::Recheck("customize"),
        temps: &[],
        build: nothing,
        children: &[],
        helper_step: customize::helper_step,
    },
    StageRow {
        stage: BuildStage::Seal,
        decide: seal::decide,
        inputs: Inputs::Unread,
        temps: &[],
        build: nothing,
        children: &[],
        helper_step: seal::helper_step,
    },
    StageRow {
        stage: BuildStage::Publish,
        decide: publish::decide,
        inputs: Inputs::Unread,
        temps: &publish::TEMPS,
        build: publish::build,
        children: &[Child::reporting::<publish::DiskCopy>(Temp::DiskJob)],
        helper_step: no_helper,
    },
    StageRow {
        stage: BuildStage::Validate,
        decide: validate::decide,
        inputs: Inputs::Unread,
        temps: &validate::TEMPS,
        build: validate::build,
        children: &[Child::waking::<validate::ValidationClone>(
            Temp::ValidationVm,
        )],
        helper_step: validate::helper_step,
    },
    StageRow {
        stage: BuildStage::Ready,
        decide: ready::decide,
        inputs: Inputs::Unread,
        temps: &[],
        build: nothing,
        children: &[],
        helper_step: no_helper,
    },
];

/// The row of `stage`; `None` for Failed.
pub fn row(stage: BuildStage) -> Option<&'static StageRow> {
    STAGES.iter().find(|row| row.stage == stage)
}

/// The row of the stage that makes `temp` (the first that lists it).
pub fn maker(temp: Temp) -> &'static StageRow {
    STAGES
        .iter()
        .find(|row| row.temps.contains(&temp))
        .expect("every temporary object is made by a stage of the table")
}

/// What `stage` makes up front, in creation order (the unit tests' view of the table).
#[cfg(test)]
pub fn up_front(stage: BuildStage) -> Vec<Temp> {
    row(stage)
        .map(|row| {
            row.temps
                .iter()
                .copied()
                .filter(|t| !t.per_boot())
                .collect()
        })
        .unwrap_or_default()
}

/// Every child of the table.
pub fn children() -> impl Iterator<Item = &'static Child> {
    STAGES.iter().flat_map(|row| row.children)
}

/// The helper step the attempt's current stage runs.
pub fn helper_step(build: &BuildStatus) -> Option<HelperStep> {
    (row(build.stage?)?.helper_step)(build)
}

fn no_helper(_: &BuildStatus) -> Option<HelperStep> {
    None
}

fn nothing(temp: Temp, _: &BuildInput) -> Result<Option<Built>, String> {
    Err(format!("no stage builds {temp:?} here"))
}

/// Starts, keeps or stops a child on its recorded object.
pub type FollowFn = for<'a> fn(
    &'a Arc<Context>,
    &'a mut Children,
    &'a str,
    &'a CRCBundleStatus,
) -> BoxFuture<'a, ()>;

/// What a child last reported about the recorded object.
pub type ReportFn = fn(&Children, &ObjectIdentity) -> Option<Observation>;

/// A child of a stage: the object it follows and what its reports are for.
pub struct Child {
    /// The child's kind ([`Stage::KIND`]).
    pub kind: &'static str,
    pub temp: Temp,
    pub follow: FollowFn,
    /// `Some` when its report is the object's observation for the decision (a Job's outcome);
    /// `None` when it only wakes its parent, which reads the object itself (a VM).
    pub report: Option<ReportFn>,
}

impl Child {
    pub const fn reporting<S: Stage>(temp: Temp) -> Child {
        Child {
            kind: S::KIND,
            temp,
            follow: follow::<S>,
            report: Some(report::<S>),
        }
    }

    pub const fn waking<S: Stage>(temp: Temp) -> Child {
        Child {
            kind: S::KIND,
            temp,
            follow: follow::<S>,
            report: None,
        }
    }
}

/// Starts (or keeps) the child `S` on its recorded object; stops it when nothing is recorded.
/// A failed attempt keeps its children: their reports tell its cleanup what is still there to
/// delete.
fn follow<'a, S: Stage>(
    ctx: &'a Arc<Context>,
    children: &'a mut Children,
    owner: &'a str,
    status: &'a CRCBundleStatus,
) -> BoxFuture<'a, ()> {
    Box::pin(async move {
        match S::slot(status) {
            Some(recorded) => children.ensure::<S>(ctx, owner, recorded).await,
            None => children.stop(S::KIND),
        }
    })
}

fn report<S: Stage>(children: &Children, recorded: &ObjectIdentity) -> Option<Observation> {
    children.observation::<S>(recorded).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::bundle::build_source::temps::with_built;
    use crate::actors::bundle::build_source::tests as fixtures;
    use crate::resources::build::InstallerInputs;
    use crate::resources::bundle::JobSettings;
    use kube::Resource;

    /// Write-ahead records `Temp::name` before the create; the create must make that very name.
    #[test]
    fn every_object_is_built_under_the_name_its_slot_records() {
        let bundle = fixtures::bundle();
        let spec = bundle.spec.build.clone().unwrap();
        let names = Names::of("custom", 1);
        let installer = InstallerInputs {
            pull_secret: "{}".into(),
            generator_ignition: "{}".into(),
            staging: Vec::new(),
            post_install: Vec::new(),
        };
        let input = BuildInput {
            bundle: &bundle,
            spec: &spec,
            ns: "ops",
            names: &names,
            status: &CRCBundleStatus::default(),
            observed: &Observed::default(),
            jobs: &JobSettings::default(),
            helper_step: None,
            installer: Some(&installer),
        };
        for temp in Temp::ALL.iter().filter(|t| !t.per_boot()) {
            let built = (maker(*temp).build)(*temp, &input)
                .unwrap_or_else(|e| panic!("{temp:?}: {e}"))
                .unwrap_or_else(|| panic!("{temp:?} not built"));
            let name = with_built!(built, object => object.meta().name.clone());
            assert_eq!(name, Some(temp.name(&names)), "{temp:?}");
        }
    }

    #[test]
    fn the_table_runs_the_stages_in_their_order_and_makes_every_object_once() {
        let stages: Vec<BuildStage> = STAGES.iter().map(|r| r.stage).collect();
        let mut expected = BuildStage::RUNNING.to_vec();
        expected.push(BuildStage::Ready);
        assert_eq!(stages, expected);
        for pair in STAGES.windows(2) {
            assert_eq!(pair[0].stage.next(), Some(pair[1].stage));
        }
        let made: Vec<Temp> = STAGES.iter().flat_map(|r| r.temps).copied().collect();
        assert_eq!(made, Temp::ALL, "every object made once, in creation order");
        for temp in Temp::ALL {
            assert!(maker(*temp).temps.contains(temp));
        }
        assert!(row(BuildStage::Failed).is_none());
    }
}
