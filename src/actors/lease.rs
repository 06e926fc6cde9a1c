//! The ClusterLease actor: one per lease, keyed by UID (upstream §4.2).
//!
//! A lease gets the finalizer `guestcluster.opdev.io/release`; while Pending it binds the first
//! Ready instance of its pool that no lease claims, copying the instance's kubeconfig Secret into
//! `<lease>-kubeconfig` and recording the binding in one status write; once Bound its TTL deletes
//! it; its deletion deletes the bound instance (the pool creates a replacement).
//!
//! Binding never gives one instance to two leases: every bind, release and pool change holds
//! [`super::Context::claims`] and decides on live (uncached) reads, and the binding status is
//! written with the live lease's resourceVersion as a precondition before the lock is released.
//! A crash between the kubeconfig copy and the status write leaves no claim: the next reconcile
//! binds again and rewrites the copy.
//!
//! Decisions are pure ([`super::lease_decide`]). Instance changes trigger the Pending leases of
//! the instance's pool ([`ObjectActor::related_events`]).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::instance_gates::NamespaceState;
use super::kind_supervisor::{
    Next, ObjectActor, ReconcileError, Related, RelatedEvents, related_events,
};
use super::lease_decide::{self, BindDecision, CopyAction, Step};
use crate::api::conditions::{self, reasons, types};
use crate::api::labels::{FIELD_MANAGER, FINALIZER_RELEASE, MANAGED_BY, MANAGED_BY_OPERATOR, POOL};
use crate::api::{API_VERSION, ClusterInstance, ClusterLease, ClusterLeaseStatus};
use crate::write;

/// How soon a lease that waits (no capacity, terminating namespace) looks again (upstream: 10 s).
/// Instance changes of its pool trigger it at once; this covers anything missed.
pub const LEASE_REQUEUE: Duration = Duration::from_secs(10);

/// Errors of a lease reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading {what} for ClusterLease {name}: {source}")]
    Observe {
        name: String,
        what: String,
        source: kube::Error,
    },
    #[error("writing status of ClusterLease {name}: {source}")]
    WriteStatus { name: String, source: kube::Error },
    #[error("updating finalizers of ClusterLease {name}: {source}")]
    Finalizer { name: String, source: kube::Error },
    #[error("deleting {what} for ClusterLease {name}: {source}")]
    Delete {
        name: String,
        what: String,
        source: kube::Error,
    },
    #[error("writing Secret {secret} for ClusterLease {name}: {source}")]
    WriteSecret {
        name: String,
        secret: String,
        source: kube::Error,
    },
    #[error("binding ClusterLease {name}: {message}")]
    Kubeconfig {
        name: String,
        reason: &'static str,
        message: String,
    },
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Kubeconfig { reason, .. } => reason,
            _ => reasons::RECONCILE_ERROR,
        }
    }
}

#[derive(Default)]
pub struct LeaseActor;

impl ObjectActor for LeaseActor {
    type Object = ClusterLease;
    type Error = Error;
    const KIND: &'static str = "clusterlease";
    /// A terminating namespace blocks binding.
    const WATCHES_NAMESPACES: bool = true;

    /// Any change of a pool instance wakes the Pending leases of that pool.
    fn related_events(ctx: &Arc<super::Context>) -> Vec<RelatedEvents<ClusterLease>> {
        vec![related_events(
            Api::<ClusterInstance>::all(ctx.client.clone()),
            |instance: &ClusterInstance| {
                let labels = instance.labels();
                if labels.get(MANAGED_BY).map(String::as_str) != Some(MANAGED_BY_OPERATOR) {
                    return None;
                }
                let pool = labels.get(POOL)?.clone();
                Some(Related::new(
                    instance.namespace()?,
                    move |lease: &ClusterLease| {
                        lease.spec.pool_ref.name == pool && lease_decide::is_pending(lease)
                    },
                ))
            },
        )]
    }

    async fn reconcile(lease: &ClusterLease, ctx: &Arc<super::Context>) -> Result<Next, Error> {
        reconcile(lease, ctx).await
    }
}

async fn reconcile(lease: &ClusterLease, ctx: &super::Context) -> Result<Next, Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let api: Api<ClusterLease> = Api::namespaced(ctx.client.clone(), &ns);
    match lease_decide::step(lease, Timestamp::now()) {
        Step::Done => Ok(Next::Done),
        Step::AddFinalizer => {
            set_finalizer(&api, lease, true).await?;
            tracing::info!(clusterlease = %name, namespace = %ns, "finalizer added");
            // The update event brings us back.
            Ok(Next::Done)
        }
        Step::Release => release(lease, ctx, &api).await,
        Step::Bind => bind(lease, ctx, &api).await,
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

/// Deletion: under the claims lock, delete the instance the live lease is bound to, then remove
/// our finalizer.
async fn release(
    lease: &ClusterLease,
    ctx: &super::Context,
    api: &Api<ClusterLease>,
) -> Result<Next, Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let _claims = ctx.claims.lock().await;
    let Some(live) = read_live(api, lease).await? else {
        return Ok(Next::Done);
    };
    if let Some(instance) = lease_decide::instance_of(&live) {
        let instances: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
        let err = |source| Error::Delete {
            name: name.clone(),
            what: format!("ClusterInstance {instance}"),
            source,
        };
        // The pool reuses names: an instance created after the binding is a replacement that
        // only shares the name, and is not ours to release.
        let bound_time = live.status.as_ref().and_then(|s| s.bound_time.clone());
        let target = instances.get_opt(instance).await.map_err(err)?.filter(|i| {
            match (&i.metadata.creation_timestamp, &bound_time) {
                (Some(created), Some(bound)) => created.0 <= bound.0,
                _ => true,
            }
        });
        if let Some(target) = target {
            let uid = target.uid().unwrap_or_default();
            write::delete_exact(&instances, instance, &uid, PropagationPolicy::Background)
                .await
                .map_err(err)?;
            tracing::info!(clusterlease = %name, namespace = %ns, clusterinstance = %instance, "bound instance deleted");
        }
    }
    set_finalizer(api, &live, false).await?;
    tracing::info!(clusterlease = %name, namespace = %ns, "finalizer removed");
    Ok(Next::Done)
}

/// Pending: under the claims lock, on live reads, bind the first free instance of the pool.
async fn bind(
    lease: &ClusterLease,
    ctx: &super::Context,
    api: &Api<ClusterLease>,
) -> Result<Next, Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let err = |what: &str| {
        let (name, what) = (name.clone(), what.to_owned());
        move |source| Error::Observe { name, what, source }
    };
    let _claims = ctx.claims.lock().await;
    // The cache may not show a binding written a moment ago: decide on the live lease.
    let Some(live) = read_live(api, lease).await? else {
        return Ok(Next::Done);
    };
    let namespace = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&ns)
        .await
        .map_err(err("namespace"))?;
    let pool = &live.spec.pool_ref.name;
    let instances: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let members = instances
        .list(
            &ListParams::default()
                .labels(&format!("{MANAGED_BY}={MANAGED_BY_OPERATOR},{POOL}={pool}")),
        )
        .await
        .map_err(err("pool instances"))?
        .items;
    let leases = api
        .list(&ListParams::default())
        .await
        .map_err(err("leases"))?
        .items;
    let now = Time(Timestamp::now());
    let decision = lease_decide::decide_bind(
        &live,
        NamespaceState::of(namespace.as_ref()),
        &members,
        &leases,
        now.clone(),
    );
    match decision {
        BindDecision::NotPending => Ok(Next::Done),
        BindDecision::Wait(status) => {
            if Some(&status) != live.status.as_ref() {
                write_status(api, &live, &status).await?;
                let reason = conditions::find(&status.conditions, types::BOUND)
                    .map(|c| c.reason.clone())
                    .unwrap_or_default();
                tracing::info!(clusterlease = %name, namespace = %ns, clusterpool = %pool, %reason, "waiting");
            }
            Ok(Next::Requeue(LEASE_REQUEUE))
        }
        BindDecision::Bind {
            instance,
            source_secret,
            status,
        } => {
            copy_kubeconfig(ctx, &live, &source_secret, now).await?;
            write_status(api, &live, &status).await?;
            tracing::info!(clusterlease = %name, namespace = %ns, clusterpool = %pool, clusterinstance = %instance, "bound");
            // The status event brings us back for the TTL.
            Ok(Next::Done)
        }
    }
}

/// Makes `<lease>-kubeconfig` a copy of the instance's Secret `source_name`. A missing source or
/// a Secret controlled by someone else is recorded as `Bound=False` and returned as an error.
async fn copy_kubeconfig(
    ctx: &super::Context,
    lease: &ClusterLease,
    source_name: &str,
    now: Time,
) -> Result<(), Error> {
    let name = lease.name_any();
    let ns = lease.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let target = lease_decide::kubeconfig_secret_name(&name);
    let err = |what: &str| {
        let (name, what) = (name.clone(), what.to_owned());
        move |source| Error::Observe { name, what, source }
    };
    let source = secrets
        .get_opt(source_name)
        .await
        .map_err(err("the instance kubeconfig Secret"))?;
    let existing = secrets
        .get_opt(&target)
        .await
        .map_err(err("the lease kubeconfig Secret"))?;
    let write_err = |source| Error::WriteSecret {
        name: name.clone(),
        secret: target.clone(),
        source,
    };
    let (reason, message) =
        match lease_decide::copy_kubeconfig(lease, source_name, source.as_ref(), existing.as_ref())
        {
            CopyAction::Unchanged => return Ok(()),
            CopyAction::Create(secret) => {
                secrets
                    .create(&PostParams::default(), &secret)
                    .await
                    .map_err(write_err)?;
                return Ok(());
            }
            CopyAction::Replace(secret) => {
                secrets
                    .replace(&target, &PostParams::default(), &secret)
                    .await
                    .map_err(write_err)?;
                return Ok(());
            }
            CopyAction::Unavailable(message) => (reasons::KUBECONFIG_UNAVAILABLE, message),
            CopyAction::Conflict(message) => (reasons::RESOURCE_OWNERSHIP_CONFLICT, message),
        };
    let status = lease_decide::unbound_status(lease, reason, &message, now);
    if Some(&status) != lease.status.as_ref() {
        let api: Api<ClusterLease> = Api::namespaced(ctx.client.clone(), &ns);
        write_status(&api, lease, &status).await?;
    }
    Err(Error::Kubeconfig {
        name,
        reason,
        message,
    })
}

/// The lease as the API server has it now; `None` when it is gone or was replaced.
async fn read_live(
    api: &Api<ClusterLease>,
    lease: &ClusterLease,
) -> Result<Option<ClusterLease>, Error> {
    let live = api
        .get_opt(&lease.name_any())
        .await
        .map_err(|source| Error::Observe {
            name: lease.name_any(),
            what: "the lease".into(),
            source,
        })?;
    Ok(live.filter(|l| l.uid() == lease.uid()))
}

/// Server-side applies the status, with the resourceVersion `lease` was read at as a
/// precondition: a lease changed meanwhile is looked at again rather than overwritten.
async fn write_status(
    api: &Api<ClusterLease>,
    lease: &ClusterLease,
    status: &ClusterLeaseStatus,
) -> Result<(), Error> {
    let name = lease.name_any();
    let patch = json!({
        "apiVersion": API_VERSION,
        "kind": "ClusterLease",
        "metadata": {"resourceVersion": lease.resource_version()},
        "status": status,
    });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(drop)
    .map_err(|source| Error::WriteStatus { name, source })
}

async fn set_finalizer(
    api: &Api<ClusterLease>,
    lease: &ClusterLease,
    add: bool,
) -> Result<(), Error> {
    write::finalizer(api, lease, FINALIZER_RELEASE, add)
        .await
        .map_err(|source| Error::Finalizer {
            name: lease.name_any(),
            source,
        })
}

/// Deletes this lease (by UID); gone already is fine.
async fn delete_lease(api: &Api<ClusterLease>, lease: &ClusterLease) -> Result<(), Error> {
    let uid = lease.uid().unwrap_or_default();
    write::delete_exact(api, &lease.name_any(), &uid, PropagationPolicy::Background)
        .await
        .map_err(|source| Error::Delete {
            name: lease.name_any(),
            what: "the lease".into(),
            source,
        })
}
