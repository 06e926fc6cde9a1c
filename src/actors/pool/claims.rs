//! Claims on a pool's instances, owned by the pool's actor (the binding of `docs/operations.md`,
//! "ClusterLease").
//!
//! A Pending lease does not bind itself: its actor asks the actor of its pool
//! (`clusterpool/<uid>`) with a [`ClaimRequest`] ([`crate::actors::pool::request_bind`]), and the pool's
//! actor binds between its own reconciles ([`serve`]). An actor handles one message at a time,
//! so one pool's bindings and its scale decisions never overlap, while different pools do not
//! wait for each other.
//!
//! Binding stays level-triggered and crash-safe: the pool's actor decides on live (uncached)
//! reads of the lease, the pool's instances and the namespace's leases, copies the kubeconfig,
//! and records the binding in the lease's status with the live lease's resourceVersion as a
//! precondition. `status.instanceRef` is the only record of a claim; a request is only a
//! trigger. A lost request or reply leaves nothing half-done (the lease asks again on its next
//! trigger), and a crash between the kubeconfig copy and the status write leaves no claim.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use ractor::RpcReplyPort;

use super::bind::{self, BindDecision, CopyAction};
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::api::conditions::reasons;
use crate::api::{ClusterInstance, ClusterLease, ClusterLeaseStatus, ClusterPool};
use crate::resources::lease::kubeconfig_secret_name;
use crate::resources::lease::unbound_status;
use crate::resources::pool::member_selector;
use crate::write::{self, Guard};

/// Which lease a request is about (its actor's object, by name and UID).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseKey {
    pub namespace: String,
    pub name: String,
    pub uid: String,
}

impl LeaseKey {
    pub fn of(lease: &ClusterLease) -> Self {
        Self {
            namespace: lease.namespace().unwrap_or_default(),
            name: lease.name_any(),
            uid: lease.uid().unwrap_or_default(),
        }
    }
}

/// What a lease's actor asks its pool's actor.
pub enum ClaimRequest {
    /// Bind the lease, if it is a Pending lease of this pool, to a free instance of the pool.
    Bind {
        lease: LeaseKey,
        reply: RpcReplyPort<Result<BindOutcome, Error>>,
    },
}

/// What a bind request did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BindOutcome {
    /// The live lease is gone, no longer Pending, or now names another pool: nothing to do.
    Skipped,
    /// No instance for it now; its status says why (`Bound=False`).
    Waiting,
    /// Bound to this instance.
    Bound { instance: String },
}

/// Errors of binding; each maps to the lease's condition reason ([`Error::reason`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The lease's pool does not exist, or is being deleted: the lease waits for it.
    #[error("ClusterLease {lease}: pool {pool} {why}")]
    PoolNotFound {
        lease: String,
        pool: String,
        why: &'static str,
    },
    /// The pool exists but its actor cannot take the request now (not started yet,
    /// restarting, or busy past the timeout): the lease retries with backoff.
    #[error("ClusterLease {lease}: the actor of pool {pool} {why}")]
    PoolUnavailable {
        lease: String,
        pool: String,
        why: String,
    },
    #[error(transparent)]
    View(#[from] crate::actors::runtime::views::Error),
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error("binding ClusterLease {name}: {message}")]
    Kubeconfig {
        name: String,
        reason: &'static str,
        message: String,
    },
}

/// The kind, for errors.
const KIND: &str = "ClusterLease";

impl Error {
    /// The condition reason this error is reported under.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::PoolNotFound { .. } => reasons::POOL_NOT_FOUND,
            Error::PoolUnavailable { .. } => reasons::POOL_UNAVAILABLE,
            Error::Kubeconfig { reason, .. } => reason,
            Error::Api(err) => err.reason(),
            Error::View(_) => reasons::RECONCILE_ERROR,
        }
    }

    /// For the errors a lease waits out, what its `Bound=False` condition says.
    pub fn waiting_message(&self) -> Option<String> {
        match self {
            Error::PoolNotFound { pool, why, .. } => {
                Some(format!("pool {pool} {why}; waiting for it"))
            }
            Error::PoolUnavailable { pool, why, .. } => {
                Some(format!("the actor of pool {pool} {why}; retrying"))
            }
            _ => None,
        }
    }
}

/// Handles one request to the actor of `pool` (as its watch cache has it).
pub async fn serve(pool: &ClusterPool, ctx: &Context, request: ClaimRequest) {
    match request {
        ClaimRequest::Bind { lease, reply } => {
            // The lease stopped waiting (`BIND_TIMEOUT`) and will ask again: a request queued
            // behind a busy pool is not worked through after its asker left, or retries would
            // keep the queue, and the client's request budget, full.
            if reply.is_closed() {
                tracing::debug!(clusterpool = %pool.name_any(), namespace = %lease.namespace, clusterlease = %lease.name, "bind request abandoned by its lease; skipped");
                return;
            }
            let result = bind(pool, ctx, &lease).await;
            if let Err(err) = &result {
                tracing::warn!(clusterpool = %pool.name_any(), namespace = %lease.namespace, clusterlease = %lease.name, "binding failed: {err}");
            }
            // The lease may have stopped waiting for the answer; what was written stands and
            // its next trigger finds it.
            let _ = reply.send(result);
        }
    }
}

/// Binds the Pending lease `key` to the first free instance of `pool`, on live reads.
async fn bind(pool: &ClusterPool, ctx: &Context, key: &LeaseKey) -> Result<BindOutcome, Error> {
    let pool_name = pool.name_any();
    if pool.metadata.deletion_timestamp.is_some() {
        return Err(Error::PoolNotFound {
            lease: key.name.clone(),
            pool: pool_name,
            why: "is being deleted",
        });
    }
    let err = |what: &str| ApiError::on(KIND, &key.name, Doing::Read, what.to_owned());
    let leases: Api<ClusterLease> = Api::namespaced(ctx.client.clone(), &key.namespace);
    // The cache may not show a binding written a moment ago: decide on the live lease.
    let live = leases
        .get_opt(&key.name)
        .await
        .map_err(err("the lease"))?
        .filter(|l| l.uid().as_deref() == Some(key.uid.as_str()));
    let Some(live) = live else {
        return Ok(BindOutcome::Skipped);
    };
    if live.spec.pool_ref.name != pool_name || pool.namespace().as_ref() != Some(&key.namespace) {
        return Ok(BindOutcome::Skipped);
    }
    let namespace = ctx.views.namespace(&key.namespace).await?;
    let members = super::list_live(
        &Api::<ClusterInstance>::namespaced(ctx.client.clone(), &key.namespace),
        &ListParams::default().labels(&member_selector(&pool_name)),
    )
    .await
    .map_err(err("pool instances"))?;
    let all_leases = super::list_live(&leases, &ListParams::default())
        .await
        .map_err(err("leases"))?;
    let now = Time(Timestamp::now());
    match bind::decide_bind(&live, namespace, &members, &all_leases, now.clone()) {
        BindDecision::NotPending => Ok(BindOutcome::Skipped),
        BindDecision::Wait(status) => {
            write_status(ctx, &leases, &live, &status).await?;
            Ok(BindOutcome::Waiting)
        }
        BindDecision::Bind {
            instance,
            source_secret,
            status,
        } => {
            copy_kubeconfig(ctx, &leases, &live, &source_secret, now).await?;
            write_status(ctx, &leases, &live, &status).await?;
            tracing::info!(clusterlease = %key.name, namespace = %key.namespace, clusterpool = %pool_name, clusterinstance = %instance, "bound");
            Ok(BindOutcome::Bound { instance })
        }
    }
}

/// Makes `<lease>-kubeconfig` a copy of the instance's Secret `source_name`. A missing source or
/// a Secret controlled by someone else is recorded as `Bound=False` and returned as an error.
async fn copy_kubeconfig(
    ctx: &Context,
    leases: &Api<ClusterLease>,
    lease: &ClusterLease,
    source_name: &str,
    now: Time,
) -> Result<(), Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let target = kubeconfig_secret_name(&name);
    let err = |what: &str| ApiError::on(KIND, &name, Doing::Read, what.to_owned());
    let source = secrets
        .get_opt(source_name)
        .await
        .map_err(err("the instance kubeconfig Secret"))?;
    let existing = secrets
        .get_opt(&target)
        .await
        .map_err(err("the lease kubeconfig Secret"))?;
    let what = format!("Secret {target}");
    let (reason, message) =
        match bind::copy_kubeconfig(lease, source_name, source.as_ref(), existing.as_ref()) {
            CopyAction::Unchanged => return Ok(()),
            CopyAction::Create(secret) => {
                write::create(&secrets, &secret)
                    .await
                    .map_err(ApiError::on(KIND, &name, Doing::Create, what))?;
                return Ok(());
            }
            CopyAction::Replace(secret) => {
                write::replace(&secrets, &secret)
                    .await
                    .map_err(ApiError::on(KIND, &name, Doing::Update, what))?;
                return Ok(());
            }
            CopyAction::Unavailable(message) => (reasons::KUBECONFIG_UNAVAILABLE, message),
            CopyAction::Conflict(message) => (reasons::RESOURCE_OWNERSHIP_CONFLICT, message),
        };
    let status = unbound_status(lease, reason, &message, now);
    write_status(ctx, leases, lease, &status).await?;
    Err(Error::Kubeconfig {
        name,
        reason,
        message,
    })
}

/// Records the status (when it changed), with the resourceVersion `lease` was read at as a
/// precondition: a lease changed meanwhile is looked at again rather than overwritten.
async fn write_status(
    ctx: &Context,
    api: &Api<ClusterLease>,
    lease: &ClusterLease,
    status: &ClusterLeaseStatus,
) -> Result<(), Error> {
    write::record_status(api, lease, status, Guard::ReadVersion, &ctx.events)
        .await
        .map(drop)
        .map_err(ApiError::on(
            KIND,
            &lease.name_any(),
            Doing::WriteStatus,
            "",
        ))
        .map_err(Error::from)
}
