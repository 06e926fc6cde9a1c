//! The CRC backing of a ClusterInstance (`docs/architecture.md`, "ClusterInstance"), once its
//! gates are open.
//!
//! A pass is *observe → plan → act*:
//!
//! - [`observe`] does every read of the pass into one plain [`observe::Observed`];
//! - [`plan`] (pure, table-tested without an API server) walks the backing in creation order,
//!   stops at the first thing not there yet and says why (`Ready=False <reason>`), and returns the
//!   actions to take and the status to record;
//! - [`act`] performs the actions through the one write path ([`crate::write`]).
//!
//! Every step is "observe, then create what is missing", so a pass started at any point after a
//! crash converges to the same objects. What must be durable before an object exists is written
//! to the status first (the boot-key binding before any disk, the API endpoint before the Route,
//! the VMI UID before its agent Job), and the plan stops there so that write lands before the
//! create. Decisions with rules of their own are pure functions in the submodules ([`boot_key`],
//! [`agent`], [`teardown_plan`]).

pub mod act;
pub mod agent;
pub mod boot_key;
pub mod inputs;
pub mod observe;
pub mod plan;
pub mod scope;
pub mod teardown;
pub mod teardown_plan;

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use kube::ResourceExt;
use kube::api::Api;

use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::api::instance::{ClusterInstance, ClusterInstanceStatus};
use crate::api::labels::FINALIZER_CLEANUP;
pub use inputs::{bundle_name, is_manual, pull_secret_name, user_secret_names};
pub use plan::UNWATCHED_RECHECK;
pub use scope::Error;

/// How often a Ready instance re-checks its guest (upstream: 60 s): the guest API's health is
/// not visible to any watch.
pub const READY_RECHECK: Duration = Duration::from_secs(60);
/// Readiness probe budget (upstream: 10 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);

/// Where a pass ended.
pub enum Outcome {
    /// Ready; look again after [`READY_RECHECK`].
    Ready,
    /// Stopped at a step; look again after the duration, or (`None`) when a watch event says
    /// what it waits for changed.
    Wait(Option<Duration>),
}

/// One pass over the CRC backing of `instance`; `status` arrives with the gate conditions set
/// and, once the pass's actions succeeded, leaves with everything the pass learned. On an error
/// it is left as it arrived: the next pass plans again from what exists.
pub async fn reconcile(
    instance: &ClusterInstance,
    ctx: &Context,
    status: &mut ClusterInstanceStatus,
) -> Result<Outcome, Error> {
    let mut observed = Box::pin(observe::observe(instance, status, ctx)).await?;
    let settings = plan::Settings {
        job_image: ctx.jobs.image.clone(),
        pod_users: ctx.jobs.pod_users,
    };
    let now = Time(Timestamp::now());
    let planned = loop {
        let planned = plan::plan(&plan::Input {
            instance,
            status,
            observed: &observed,
            now: now.clone(),
            settings: &settings,
        });
        // The probe is the one observation that costs seconds: it is made only when the plan
        // gets that far.
        match (&planned.end, &observed.probe) {
            (plan::End::Probe { kubeconfig }, None) => {
                let result = ctx
                    .guests
                    .route_access
                    .probe_readyz(kubeconfig, PROBE_TIMEOUT)
                    .await
                    .map_err(|e| e.to_string());
                observed.probe = Some(result);
            }
            _ => break planned,
        }
    };
    if !planned.actions.is_empty() && !ensure_finalizer(instance, ctx).await? {
        // Conflicted: that change's watch event brings the next pass, which plans again.
        return Ok(Outcome::Wait(None));
    }
    Box::pin(act::act(instance, ctx, &planned.actions)).await?;
    *status = planned.status;
    Ok(match planned.end {
        plan::End::Ready => Outcome::Ready,
        plan::End::Stop(stop) => Outcome::Wait(stop.requeue),
        // Not returned once the probe was observed.
        plan::End::Probe { .. } => Outcome::Wait(Some(plan::PROBE_RETRY)),
    })
}

/// The teardown finalizer, added right before the backing's first object is created: an
/// instance that never got that far (gated, waiting for its bundle, a bad pull secret) owns
/// nothing to tear down, and a thousand of them cost no finalizer update. `false` when the
/// update conflicted.
async fn ensure_finalizer(instance: &ClusterInstance, ctx: &Context) -> Result<bool, Error> {
    if instance.finalizers().iter().any(|f| f == FINALIZER_CLEANUP) {
        return Ok(true);
    }
    let api: Api<ClusterInstance> = Api::namespaced(
        ctx.client.clone(),
        &instance.namespace().unwrap_or_default(),
    );
    match crate::write::finalizer(&api, instance, FINALIZER_CLEANUP, true).await {
        Ok(()) => {
            tracing::info!(clusterinstance = %instance.name_any(), "finalizer added");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(source) => Err(ApiError::on(
            "ClusterInstance",
            &instance.name_any(),
            Doing::UpdateFinalizers,
            "",
        )(source)
        .into()),
    }
}
