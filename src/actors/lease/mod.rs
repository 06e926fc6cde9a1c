//! The ClusterLease actor: one per lease, keyed by UID (`docs/operations.md`, "ClusterLease").
//!
//! A lease gets the finalizer `guestcluster.opdev.io/release`; while Pending it binds the first
//! Ready instance of its pool that no lease claims, copying the instance's kubeconfig Secret into
//! `<lease>-kubeconfig` and recording the binding in one status write; once Bound its TTL deletes
//! it; its deletion deletes the bound instance (the pool creates a replacement).
//!
//! Binding never gives one instance to two leases: a lease does not bind itself but asks its
//! pool's actor, which owns the claims on the pool's instances and binds one lease at a time on
//! live reads ([`crate::actors::pool::claims`]). A pool that does not exist yet is waited for
//! (`Bound=False reason=PoolNotFound`); a pool whose actor cannot answer now is retried with
//! backoff (`PoolUnavailable`).
//!
//! Releasing needs no such turn: the released instance is claimed by this lease until the
//! instance is being deleted, and a deleting instance is never bound, so nothing can bind it in
//! between; the pool may delete it too, which the UID precondition makes harmless.
//!
//! Decisions are pure ([`crate::actors::lease::decide`]). An instance becoming bindable (or no
//! longer) triggers the Pending leases of the instance's pool, and a pool's creation, spec change
//! or deletion the Pending leases naming the pool ([`ObjectActor::related_events`]).

pub mod decide;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::PropagationPolicy;
use kube::{Api, ResourceExt};

use crate::actors::lease::decide::Step;
use crate::actors::pool::{self, BindOutcome, ClaimError};
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::object_actor::{Next, ObjectActor, ReconcileError, phase_name};
use crate::actors::runtime::triggers::{Related, RelatedEvents, related_changes};
use crate::api::labels::{FINALIZER_RELEASE, MANAGED_BY, MANAGED_BY_OPERATOR, POOL};
use crate::api::{ClusterInstance, ClusterLease, ClusterPool};
use crate::resources::lease::unbound_status;
use crate::write::{self, Guard};

/// Errors of a lease reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Bind(#[from] ClaimError),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Bind(err) => err.reason(),
            Error::Api(err) => err.reason(),
        }
    }
}

#[derive(Default)]
pub struct LeaseActor;

/// The kind, for errors.
const KIND: &str = "ClusterLease";

impl ObjectActor for LeaseActor {
    type Object = ClusterLease;
    type Error = Error;
    type Request = std::convert::Infallible;
    const KIND: &'static str = "clusterlease";

    fn phase(object: &Self::Object) -> Option<String> {
        phase_name(object.status.as_ref().and_then(|s| s.phase))
    }
    /// A terminating namespace blocks binding.
    const WATCHES_NAMESPACES: bool = true;
    /// A lease waits for its pool's actor to answer a bind request (up to `BIND_TIMEOUT`); it
    /// must not hold a permit that pool's reconcile may be queued for.
    const HOLDS_PERMIT: bool = false;

    /// A pool instance that becomes bindable or stops being one, or a pool created, changed in
    /// its spec or being deleted, wakes the Pending leases of that pool. A status write of
    /// either (a condition's message, the pool's counts) wakes none: nothing a lease binds by
    /// changed, and the pool's status changes with every lease that waits on it.
    fn related_events(ctx: &Arc<Context>) -> Vec<RelatedEvents<ClusterLease>> {
        vec![
            related_changes(
                Api::<ClusterInstance>::all(ctx.client.clone()),
                |instance: &ClusterInstance| {
                    (
                        instance.bindable().map(str::to_owned),
                        instance.labels().get(POOL).cloned(),
                        instance.labels().get(MANAGED_BY).cloned(),
                    )
                },
                |instance: &ClusterInstance| {
                    let labels = instance.labels();
                    if labels.get(MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_OPERATOR) {
                        return None;
                    }
                    pending_of(instance.namespace()?, labels.get(POOL)?.clone())
                },
            ),
            related_changes(
                Api::<ClusterPool>::all(ctx.client.clone()),
                |pool: &ClusterPool| {
                    (
                        pool.metadata.generation,
                        pool.metadata.deletion_timestamp.is_some(),
                    )
                },
                |pool: &ClusterPool| pending_of(pool.namespace()?, pool.name_any()),
            ),
        ]
    }

    async fn reconcile(lease: &ClusterLease, ctx: &Arc<Context>) -> Result<Next, Error> {
        reconcile(lease, ctx).await
    }
}

/// The Pending leases of the pool `pool` in `namespace`.
fn pending_of(namespace: String, pool: String) -> Option<Related<ClusterLease>> {
    Some(Related::new(namespace, move |lease: &ClusterLease| {
        lease.spec.pool_ref.name == pool && lease.is_pending()
    }))
}

/// One pass: the lease from the cache is what it observes, [`decide::step`] (pure) decides, and
/// [`act`] does it; [`release`] is the teardown of a deleted lease.
async fn reconcile(lease: &ClusterLease, ctx: &Context) -> Result<Next, Error> {
    let step = decide::step(lease, Timestamp::now());
    act(lease, ctx, step).await
}

async fn act(lease: &ClusterLease, ctx: &Context, step: Step) -> Result<Next, Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let api: Api<ClusterLease> = Api::namespaced(ctx.client.clone(), &ns);
    match step {
        Step::Done => Ok(Next::Done),
        Step::AddFinalizer => {
            set_finalizer(&api, lease, true).await?;
            tracing::info!(clusterlease = %name, namespace = %ns, "finalizer added");
            // The update event brings us back.
            Ok(Next::Done)
        }
        Step::Release => release(lease, ctx, &api).await,
        Step::Bind => bind(lease, ctx).await,
        Step::Delete => {
            delete_lease(&api, lease).await?;
            tracing::info!(clusterlease = %name, namespace = %ns, "lease expired or released; deleting");
            Ok(Next::Done)
        }
        Step::WaitFor(left) => Ok(Next::Requeue(left)),
        Step::BadTtl(err) => {
            tracing::warn!(clusterlease = %name, namespace = %ns, "ttl ignored: {err}");
            Ok(Next::Done)
        }
    }
}

/// Deletion: delete the instance the live lease is bound to, then remove our finalizer.
async fn release(
    lease: &ClusterLease,
    ctx: &Context,
    api: &Api<ClusterLease>,
) -> Result<Next, Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let Some(live) = read_live(api, lease).await? else {
        return Ok(Next::Done);
    };
    if let Some(instance) = live.instance() {
        let instances: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
        let what = format!("ClusterInstance {instance}");
        // The pool reuses names: an instance created after the binding is a replacement that
        // only shares the name, and is not ours to release.
        let bound_time = live.status.as_ref().and_then(|s| s.bound_time.clone());
        let target = instances
            .get_opt(instance)
            .await
            .map_err(ApiError::on(KIND, &name, Doing::Read, what.as_str()))?
            .filter(|i| match (&i.metadata.creation_timestamp, &bound_time) {
                (Some(created), Some(bound)) => created.0 <= bound.0,
                _ => true,
            });
        if let Some(target) = target {
            let uid = target.uid().unwrap_or_default();
            write::delete_exact(&instances, instance, &uid, PropagationPolicy::Background)
                .await
                .map_err(ApiError::on(KIND, &name, Doing::Delete, what))?;
            tracing::info!(clusterlease = %name, namespace = %ns, clusterinstance = %instance, "bound instance deleted");
        }
    }
    set_finalizer(api, &live, false).await?;
    tracing::info!(clusterlease = %name, namespace = %ns, "finalizer removed");
    Ok(Next::Done)
}

/// Pending: ask the pool's actor to bind the lease. A missing pool is waited for; a pool
/// actor that cannot answer is recorded and retried with backoff.
async fn bind(lease: &ClusterLease, ctx: &Context) -> Result<Next, Error> {
    // Waiting needs no timer (upstream polls every 10 s): what it waits for is watched. A
    // change of a pool instance or of the pool wakes the pool's Pending leases
    // (`related_events`), a change of the namespace policy those in the namespace.
    match pool::request_bind(ctx, lease).await {
        Ok(BindOutcome::Waiting) => Ok(Next::Done),
        // A new binding's status event brings us back for the TTL.
        Ok(BindOutcome::Bound { .. } | BindOutcome::Skipped) => Ok(Next::Done),
        Err(err @ ClaimError::PoolNotFound { .. }) => {
            record_wait(ctx, lease, &err).await?;
            Ok(Next::Done)
        }
        Err(err @ ClaimError::PoolUnavailable { .. }) => {
            record_wait(ctx, lease, &err).await?;
            Err(err.into())
        }
        Err(err) => Err(err.into()),
    }
}

/// Records on `lease` (as its actor's cache has it) why it waits, for an error it waits out
/// ([`ClaimError::waiting_message`]); other errors record nothing. A lease changed since it was
/// cached is left alone: its change triggers its actor again.
async fn record_wait(ctx: &Context, lease: &ClusterLease, error: &ClaimError) -> Result<(), Error> {
    let Some(message) = error.waiting_message() else {
        return Ok(());
    };
    let status = unbound_status(lease, error.reason(), &message, Time(Timestamp::now()));
    let leases: Api<ClusterLease> =
        Api::namespaced(ctx.client.clone(), &lease.namespace().unwrap_or_default());
    let written =
        write::record_status(&leases, lease, &status, Guard::ReadVersion, &ctx.events).await;
    match written {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(ApiError::on(KIND, &lease.name_any(), Doing::WriteStatus, "")(err).into()),
    }
}

/// The lease as the API server has it now; `None` when it is gone or was replaced.
async fn read_live(
    api: &Api<ClusterLease>,
    lease: &ClusterLease,
) -> Result<Option<ClusterLease>, Error> {
    let live = api.get_opt(&lease.name_any()).await.map_err(ApiError::on(
        KIND,
        &lease.name_any(),
        Doing::Read,
        "the lease",
    ))?;
    Ok(live.filter(|l| l.uid() == lease.uid()))
}

async fn set_finalizer(
    api: &Api<ClusterLease>,
    lease: &ClusterLease,
    add: bool,
) -> Result<(), Error> {
    write::finalizer(api, lease, FINALIZER_RELEASE, add)
        .await
        .map_err(ApiError::on(
            KIND,
            &lease.name_any(),
            Doing::UpdateFinalizers,
            "",
        ))
        .map_err(Error::from)
}

/// Deletes this lease (by UID); gone already is fine.
async fn delete_lease(api: &Api<ClusterLease>, lease: &ClusterLease) -> Result<(), Error> {
    let uid = lease.uid().unwrap_or_default();
    write::delete_exact(api, &lease.name_any(), &uid, PropagationPolicy::Background)
        .await
        .map_err(ApiError::on(
            KIND,
            &lease.name_any(),
            Doing::Delete,
            "the lease",
        ))
        .map_err(Error::from)
}
