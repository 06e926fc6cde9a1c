//! The build source of a CRCBundle: one pass of the bundle's actor for a bundle with
//! `spec.build`. Observe (the inputs while they matter, the recorded temporary objects, the
//! installer Job's child report), decide ([`decide::decide`], pure), write the status ahead of
//! the actions, act, record the UIDs created, then start or stop the stage children from what
//! is recorded.

pub mod act;
pub mod admit;
pub mod decide;
pub mod error;
pub mod observe;
pub mod session;
pub mod stage_times;
pub mod stages;
pub mod step;
pub mod teardown;
pub mod temps;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};

use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::object_actor::Next;
use crate::actors::runtime::stage::children::Children;
use crate::api::bundle::{BuildSpec, BuildStage, CRCBundle, CRCBundleStatus};
use crate::api::labels::FINALIZER_BUILD;
use crate::write;
use decide::Decision;
use step::{Action, Observed};
use temps::Temp;

pub use error::Error;

/// One build pass.
pub async fn pass(
    cached: &CRCBundle,
    ctx: &Arc<Context>,
    children: &mut Children,
) -> Result<Next, Error> {
    let name = cached.name_any();
    // The status is written ahead of every object and applied whole: never decide on a cache
    // that may not show our last write (it would name, or even start, an attempt again).
    let Some(bundle) = crate::actors::bundle::current(ctx, cached).await? else {
        // Deleted: the supervisor stops us.
        return Ok(Next::Done);
    };
    let bundle = bundle.as_ref();
    let finalized = bundle.finalizers().iter().any(|f| f == FINALIZER_BUILD);
    if bundle.metadata.deletion_timestamp.is_some() {
        if !finalized {
            return Ok(Next::Done);
        }
        return teardown_pass(ctx, bundle).await;
    }
    if !finalized {
        // Before anything of the build exists, so nothing can outlive a deletion unordered.
        // The update's watch event brings the next pass.
        set_finalizer(ctx, bundle, true).await?;
        return Ok(Next::Done);
    }
    let spec = bundle.spec.build.clone().unwrap_or_else(empty_build);
    let deadline = crate::api::duration::parse_duration(&spec.deadline).unwrap_or(DEFAULT_DEADLINE);
    let retry = decide::retry_of(bundle);
    let mut admitted = None;
    let mut observed = Observed {
        retry: retry.clone(),
        namespace: ctx.namespace.clone(),
        ..Default::default()
    };
    if decide::reads_inputs(bundle, retry.as_deref()) {
        let read = observe::read_inputs(ctx, &name, &spec).await?;
        let result = admit::admit(
            &spec,
            &name,
            &ctx.namespace,
            &ctx.jobs.release_repositories,
            &read,
        );
        observed.admitted = Some(
            result
                .as_ref()
                .map(|a| a.inputs.clone())
                .map_err(Clone::clone),
        );
        admitted = result.ok();
    }
    observe::observe(ctx, bundle, children, &mut observed).await?;
    let Decision {
        mut status,
        actions,
        requeue,
    } = decide::decide(bundle, &observed, deadline, Time(Timestamp::now()));

    // Write-ahead: the attempt, its inputs and the names of what is about to exist.
    let mut current = bundle.clone();
    let ended = stage_times::ended(bundle.status.as_ref(), &status);
    crate::actors::bundle::write_status(ctx, &current, &status).await?;
    // Counted once written: a pass whose write failed sees the same ends again.
    for end in ended {
        ctx.metrics
            .build_stage_ended(&format!("{:?}", end.stage), &end.result, end.took);
    }
    current.status = Some(status.clone());
    let mut created = false;
    for action in &actions {
        if let Some(uid) = act::act(
            ctx,
            bundle,
            &spec,
            &status,
            admitted.as_ref(),
            &observed,
            action,
        )
        .await?
            && let Action::Create(temp) = action
        {
            decide::record_created(&mut status, *temp, uid);
            created = true;
        }
    }
    if created {
        crate::actors::bundle::write_status(ctx, &current, &status).await?;
    }
    publish_stage_events(ctx, bundle, &status).await;

    let owner = bundle.uid().unwrap_or_default();
    for child in stages::children() {
        (child.follow)(ctx, children, &owner, &status).await;
    }
    Ok(requeue.map_or(Next::Done, Next::Requeue))
}

/// How often a deleting bundle looks again: not every object it waits for is watched (the
/// helper's Role and RoleBinding).
const TEARDOWN_STEP: Duration = Duration::from_secs(2);

/// One pass of a deleting bundle ([`teardown::teardown`]): read every recorded object and the
/// build VM, record the step, act, and drop the finalizer once nothing is left.
async fn teardown_pass(ctx: &Arc<Context>, bundle: &CRCBundle) -> Result<Next, Error> {
    let name = bundle.name_any();
    let owner = bundle.uid().unwrap_or_default();
    let resources = observe::recorded(bundle);
    let mut seen = teardown::Seen::default();
    for &temp in Temp::ALL {
        let Some(recorded) = temp.slot(&resources).filter(|r| !r.uid.is_empty()) else {
            continue;
        };
        let meta = observe::recorded_meta(ctx, &name, temp, recorded).await?;
        let presence = teardown::presence(recorded, &owner, meta.as_ref());
        // Its run strategy, VMI and launcher pods, while it is ours and still there.
        if matches!(temp, Temp::BuildVm | Temp::ValidationVm)
            && matches!(
                presence,
                teardown::Presence::Ours | teardown::Presence::Deleting
            )
        {
            let vm = observe::build_vm(ctx, &name, recorded, &owner).await?.1;
            if temp == Temp::BuildVm {
                seen.vm = vm;
            } else {
                seen.validation_vm = vm;
            }
        }
        seen.temps.insert(temp, presence);
    }
    let step = teardown::teardown(bundle, &seen, Time(Timestamp::now()));
    if step.done {
        set_finalizer(ctx, bundle, false).await?;
        tracing::info!(crcbundle = %name, "build objects deleted; finalizer removed");
        return Ok(Next::Done);
    }
    crate::actors::bundle::write_status(ctx, bundle, &step.status).await?;
    let status = &step.status;
    for action in &step.actions {
        act::act(
            ctx,
            bundle,
            &empty_build(),
            status,
            None,
            &Observed::default(),
            action,
        )
        .await?;
    }
    Ok(Next::Requeue(TEARDOWN_STEP))
}

async fn set_finalizer(ctx: &Context, bundle: &CRCBundle, add: bool) -> Result<(), Error> {
    let api = Api::<CRCBundle>::all(ctx.client.clone());
    match write::finalizer(&api, bundle, FINALIZER_BUILD, add).await {
        // Changed since it was read: that change's watch event brings the next pass.
        Ok(()) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => {
            Err(
                ApiError::on(error::KIND, &bundle.name_any(), Doing::UpdateFinalizers, "")(source)
                    .into(),
            )
        }
    }
}

/// `spec.build.deadline`'s default, for a deadline the schema let through but Go's syntax
/// does not parse.
const DEFAULT_DEADLINE: Duration = Duration::from_secs(6 * 3600);

fn empty_build() -> BuildSpec {
    BuildSpec {
        release_image: String::new(),
        pull_secret_ref: Default::default(),
        profile: Default::default(),
        installation_manifest_refs: Vec::new(),
        post_install_manifest_refs: Vec::new(),
        vm: Default::default(),
        placement: None,
        deadline: String::new(),
    }
}

/// An Event for every stage condition that changed status or reason (`Ready` has its own, from
/// the status write).
async fn publish_stage_events(ctx: &Context, bundle: &CRCBundle, status: &CRCBundleStatus) {
    let before = bundle
        .status
        .as_ref()
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    for (_, type_) in BuildStage::with_conditions() {
        ctx.events
            .transition(bundle, type_, before, &status.conditions)
            .await;
    }
}
