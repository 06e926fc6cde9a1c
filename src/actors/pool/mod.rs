//! The ClusterPool actor: one per pool, keyed by UID.
//!
//! As upstream's pool controller (`docs/operations.md`, "ClusterPool"): it records the namespace
//! policy (`ProvisioningAllowed`), ensures the pool's CRCBundle, accounts the pool's instances
//! and its namespace's leases, and makes at most one change per reconcile: create one instance,
//! or delete the newest idle unclaimed one. The decisions are pure ([`decide`]); this
//! module observes with live reads, acts, and records the status with one server-side apply when
//! it changed. Its instances (owned) and the leases naming it trigger it.
//!
//! It also owns the claims on its instances: its leases ask it to bind them
//! ([`request_bind`], [`crate::actors::pool::claims`]). It handles one message at a time, so a binding and a
//! scale decision never interleave and it never trims an instance a lease is being bound to.

pub mod bind;
pub mod bundles;
pub mod claims;
pub mod decide;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, PartialObjectMeta, PropagationPolicy};
use kube::{Api, ResourceExt};
use ractor::rpc::CallResult;

use crate::actors::platform::NamespaceState;
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::object_actor::{
    Next, ObjectActor, ObjectMsg, ReconcileError, object_actor,
};
use crate::actors::runtime::triggers::{
    OwnerEvents, Related, RelatedEvents, owner_events, related_changes,
};
use crate::actors::runtime::views::{self, Change};
use crate::api::conditions::reasons;
use crate::api::{CRCBundle, ClusterInstance, ClusterLease, ClusterPool};
use crate::resources::pool::member_selector;
use crate::write::{self, Guard};
pub use claims::{BindOutcome, ClaimRequest, Error as ClaimError, LeaseKey};

/// Errors of a pool reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    View(#[from] views::Error),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Api(err) => err.reason(),
            Error::View(_) => reasons::RECONCILE_ERROR,
        }
    }
}

#[derive(Default)]
pub struct PoolActor;

/// The kind, for errors.
const KIND: &str = "ClusterPool";

impl ObjectActor for PoolActor {
    type Object = ClusterPool;
    type Error = Error;
    type Request = ClaimRequest;
    const KIND: &'static str = "clusterpool";
    /// The namespace policy reads the pool's Namespace: a label change must be seen at once.
    const WATCHES_NAMESPACES: bool = true;

    /// The pool's instances (controller owner reference) trigger it.
    fn owned_events(ctx: &Arc<Context>) -> Vec<OwnerEvents> {
        vec![owner_events(
            Api::<PartialObjectMeta<ClusterInstance>>::all(ctx.client.clone()),
            "ClusterPool",
        )]
    }

    /// A change of the pool's CRCBundle wakes it: to ensure it again when deleted, and to say
    /// whether it is Ready (`BundleAvailable`).
    fn woken_by(change: &Change) -> Option<Related<ClusterPool>> {
        let Change::Bundle(name) = change else {
            return None;
        };
        let name = name.clone();
        Some(Related::anywhere(move |p: &ClusterPool| {
            crate::actors::resolve::bundle_name(&p.spec.template).as_deref() == Some(name.as_str())
        }))
    }

    /// Leases naming the pool trigger it (demand and claims change with them).
    /// A lease created, deleted, moved to another pool, or changing phase or instance wakes its
    /// pool: what the pool's demand counts. Its other status writes (why it waits) do not.
    fn related_events(ctx: &Arc<Context>) -> Vec<RelatedEvents<ClusterPool>> {
        vec![related_changes(
            Api::<ClusterLease>::all(ctx.client.clone()),
            |lease: &ClusterLease| {
                (
                    lease.status.as_ref().and_then(|s| s.phase),
                    lease.instance().map(str::to_owned),
                    lease.spec.pool_ref.name.clone(),
                    lease.metadata.deletion_timestamp.is_some(),
                )
            },
            |lease: &ClusterLease| {
                let pool = lease.spec.pool_ref.name.clone();
                Some(Related::new(lease.namespace()?, move |p: &ClusterPool| {
                    p.name_any() == pool
                }))
            },
        )]
    }

    async fn reconcile(pool: &ClusterPool, ctx: &Arc<Context>) -> Result<Next, Error> {
        reconcile(pool, ctx).await
    }

    async fn request(pool: &ClusterPool, ctx: &Arc<Context>, request: ClaimRequest) {
        claims::serve(pool, ctx, request).await;
    }
}

/// How long a lease waits for its pool's actor to answer a bind request. The actor binds one
/// lease at a time; a lease that gives up asks again later and finds whatever was recorded.
pub const BIND_TIMEOUT: Duration = Duration::from_secs(30);

/// Asks the actor of `lease`'s pool to bind it. The pool is looked up live by name (its actor
/// is registered by UID); a pool that does not exist, or whose actor is not running or does not
/// answer in time, is an error the lease waits out.
pub async fn request_bind(
    ctx: &Context,
    lease: &ClusterLease,
) -> Result<BindOutcome, claims::Error> {
    let key = LeaseKey::of(lease);
    let pool = lease.spec.pool_ref.name.clone();
    let found = Api::<ClusterPool>::namespaced(ctx.client.clone(), &key.namespace)
        .get_opt(&pool)
        .await
        .map_err(ApiError::on(
            "ClusterLease",
            &key.name,
            Doing::Read,
            format!("ClusterPool {pool}"),
        ))?;
    let Some(uid) = found.and_then(|p| p.uid()) else {
        return Err(claims::Error::PoolNotFound {
            lease: key.name,
            pool,
            why: "does not exist",
        });
    };
    let unavailable = |why: String| claims::Error::PoolUnavailable {
        lease: key.name.clone(),
        pool: pool.clone(),
        why,
    };
    let Some(actor) = object_actor::<PoolActor>(&uid) else {
        return Err(unavailable("is not running yet".to_owned()));
    };
    let lease_key = key.clone();
    let answer = crate::actors::runtime::mailbox::call(
        &actor,
        move |reply| {
            ObjectMsg::Request(ClaimRequest::Bind {
                lease: lease_key,
                reply,
            })
        },
        Some(BIND_TIMEOUT),
    )
    .await;
    match answer {
        Ok(CallResult::Success(outcome)) => outcome,
        Ok(CallResult::Timeout) => Err(unavailable(format!(
            "did not answer within {}s",
            BIND_TIMEOUT.as_secs()
        ))),
        // The actor stopped before answering, or its pool left its cache.
        Ok(CallResult::SenderError) | Err(_) => Err(unavailable("stopped".to_owned())),
    }
}

/// One pass: observe, decide ([`decide::decide`], pure), act.
async fn reconcile(pool: &ClusterPool, ctx: &Context) -> Result<Next, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the owned instances.
        return Ok(Next::Done);
    }
    let seen = observe(pool, ctx).await?;
    let decision = decide::decide(
        pool,
        decide::Observed {
            namespace: seen.namespace,
            bundle: seen.bundle,
            instances: &seen.members,
            leases: &seen.leases,
            now: Timestamp::now(),
            idle_grace: ctx.tuning.pool_idle_grace,
            pool_bundles: &ctx.pool_bundles,
        },
    );
    act(pool, ctx, &decision).await?;
    Ok(decision.requeue.map_or(Next::Done, Next::Requeue))
}

/// What a pass reads.
struct Seen {
    namespace: NamespaceState,
    bundle: decide::BundleState,
    members: Vec<ClusterInstance>,
    leases: Vec<ClusterLease>,
}

/// The namespace policy and the bundle from the shared views (their changes wake us); members
/// and leases on live reads: a watch cache may not show the instance this actor created a
/// moment ago (acting on it would create one too many), nor a lease it bound a moment ago
/// (acting on it would trim a leased instance). Bindings are made by this actor too, between
/// reconciles.
async fn observe(pool: &ClusterPool, ctx: &Context) -> Result<Seen, Error> {
    let name = pool.name_any();
    let ns = pool.namespace().unwrap_or_default();
    let err = |what: &str| ApiError::on(KIND, &name, Doing::Read, what.to_owned());
    let namespace = ctx.views.namespace(&ns).await?;
    let members = list_live(
        &Api::<ClusterInstance>::namespaced(ctx.client.clone(), &ns),
        &ListParams::default().labels(&member_selector(&name)),
    )
    .await
    .map_err(err("instances"))?;
    let leases = list_live(
        &Api::<ClusterLease>::namespaced(ctx.client.clone(), &ns),
        &ListParams::default(),
    )
    .await
    .map_err(err("leases"))?;
    let bundle = match crate::actors::resolve::bundle_name(&pool.spec.template) {
        None => decide::BundleState::NoneSelected,
        Some(bundle) => match ctx.views.bundle(&bundle).await? {
            None => decide::BundleState::Missing,
            Some(b)
                if b.status.as_ref().and_then(|s| s.phase)
                    == Some(crate::api::bundle::BundlePhase::Ready) =>
            {
                decide::BundleState::Ready
            }
            Some(_) => decide::BundleState::NotReady,
        },
    };
    Ok(Seen {
        namespace,
        bundle,
        members,
        leases,
    })
}

/// The objects `params` selects, read live, without their managed fields: no decision reads
/// them, and they are the larger part of an object several managers write (an instance's
/// status apply, its pool's labels, a lease's finalizer), while the list is held across the
/// pass's writes. Twenty pools serving their leases at once held about 16 MiB of such lists at
/// a thousand instances.
pub(crate) async fn list_live<K>(api: &Api<K>, params: &ListParams) -> Result<Vec<K>, kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let mut items = api.list(params).await?.items;
    for item in &mut items {
        item.meta_mut().managed_fields = None;
    }
    Ok(items)
}

/// The decision's bundle, instance create or delete, then the status.
async fn act(pool: &ClusterPool, ctx: &Context, decision: &decide::Decision) -> Result<(), Error> {
    let name = pool.name_any();
    let ns = pool.namespace().unwrap_or_default();
    let instances: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
    if let Some(bundle) = &decision.bundle {
        ensure_bundle(ctx, &name, bundle).await?;
    }
    if let Some(instance) = &decision.create {
        let instance_name = instance.name_any();
        // Created by an earlier reconcile is fine: the watch brings its event.
        let created = write::create_new(&instances, instance)
            .await
            .map_err(ApiError::on(
                KIND,
                &name,
                Doing::Create,
                format!("ClusterInstance {instance_name}"),
            ))?;
        if created {
            tracing::info!(clusterpool = %name, namespace = %ns, clusterinstance = %instance_name, "instance created");
        }
        // Its creation event (owned_events) brings us back to count it and go on.
    }
    if let Some((instance, uid)) = &decision.delete {
        // Gone already, or replaced by a new instance of the same name, is fine.
        write::delete_exact(&instances, instance, uid, PropagationPolicy::Background)
            .await
            .map_err(ApiError::on(
                KIND,
                &name,
                Doing::Delete,
                format!("idle ClusterInstance {instance}"),
            ))?;
        tracing::info!(clusterpool = %name, namespace = %ns, clusterinstance = %instance, "idle instance deleted (scale-down)");
    }
    let pools: Api<ClusterPool> = Api::namespaced(ctx.client.clone(), &ns);
    write::record_status(&pools, pool, &decision.status, Guard::None, &ctx.events)
        .await
        .map_err(ApiError::on(KIND, &name, Doing::WriteStatus, ""))?;
    Ok(())
}

/// Creates the pool's CRCBundle unless one of that name exists; an existing one is reused
/// untouched, even if its spec differs. Existence is read from the shared bundle view; a bundle
/// it has not seen yet makes the create find it (`AlreadyExists` is success).
async fn ensure_bundle(ctx: &Context, pool: &str, bundle: &CRCBundle) -> Result<(), Error> {
    let api: Api<CRCBundle> = Api::all(ctx.client.clone());
    let bundle_name = bundle.name_any();
    let create_err = ApiError::on(
        KIND,
        pool,
        Doing::Create,
        format!("CRCBundle {bundle_name}"),
    );
    if ctx.views.bundle(&bundle_name).await?.is_some() {
        return Ok(());
    }
    if write::create_new(&api, bundle).await.map_err(create_err)? {
        tracing::info!(clusterpool = %pool, crcbundle = %bundle_name, "CRCBundle created");
    }
    Ok(())
}
