//! The ClusterPool actor: one per pool, keyed by UID.
//!
//! This slice scales up (upstream §4.1): it records the namespace policy (`ProvisioningAllowed`),
//! ensures the pool's CRCBundle (§2.5), counts the pool's instances and creates at most one
//! instance per reconcile toward the desired size. The decisions are pure
//! ([`super::pool_decide`]); this module observes with live reads, acts and records the status
//! with one server-side apply when it changed. Scale-down and idle trimming are not implemented.

use std::hash::{BuildHasher, RandomState};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::instance::PROVISIONING_REQUEUE;
use super::instance_gates::NamespaceState;
use super::kind_supervisor::{Next, ObjectActor, OwnerEvents, ReconcileError, owner_events};
use super::pool_decide;
use crate::api::conditions::{self, reasons, types};
use crate::api::labels::{FIELD_MANAGER, POOL};
use crate::api::{API_VERSION, CRCBundle, ClusterInstance, ClusterPool, ClusterPoolStatus};

/// Errors of a pool reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status of ClusterPool {name}: {source}")]
    WriteStatus { name: String, source: kube::Error },
    #[error("reading {what} for ClusterPool {name}: {source}")]
    Observe {
        name: String,
        what: String,
        source: kube::Error,
    },
    #[error("creating CRCBundle {bundle} for ClusterPool {name}: {source}")]
    CreateBundle {
        name: String,
        bundle: String,
        source: kube::Error,
    },
    #[error("creating ClusterInstance {instance} for ClusterPool {name}: {source}")]
    CreateInstance {
        name: String,
        instance: String,
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        reasons::RECONCILE_ERROR
    }
}

#[derive(Default)]
pub struct PoolActor;

impl ObjectActor for PoolActor {
    type Object = ClusterPool;
    type Error = Error;
    const KIND: &'static str = "clusterpool";
    /// The namespace policy reads the pool's Namespace: a label change must be seen at once.
    const WATCHES_NAMESPACES: bool = true;

    /// The pool's instances (controller owner reference) trigger it.
    fn owned_events(ctx: &Arc<super::Context>) -> Vec<OwnerEvents> {
        vec![owner_events(
            Api::<ClusterInstance>::all(ctx.client.clone()),
            "ClusterPool",
        )]
    }

    async fn reconcile(pool: &ClusterPool, ctx: &Arc<super::Context>) -> Result<Next, Error> {
        reconcile(pool, ctx).await
    }
}

async fn reconcile(pool: &ClusterPool, ctx: &super::Context) -> Result<Next, Error> {
    if pool.metadata.deletion_timestamp.is_some() {
        // The garbage collector removes the owned instances.
        return Ok(Next::Done);
    }
    let name = pool.name_any();
    let ns = pool.namespace().unwrap_or_default();
    let err = |what: &str| {
        let (name, what) = (name.clone(), what.to_owned());
        move |source| Error::Observe { name, what, source }
    };

    // Live reads: a watch cache may not show the instance this actor created a moment ago, and
    // acting on it would create one too many.
    let namespace = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&ns)
        .await
        .map_err(err("namespace"))?;
    let namespace = NamespaceState::of(namespace.as_ref());
    let instances: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let members = instances
        .list(&ListParams::default().labels(&format!("{POOL}={name}")))
        .await
        .map_err(err("instances"))?
        .items;

    let decision = pool_decide::decide(pool, namespace, &members, Time(Timestamp::now()));
    if let Some(bundle) = &decision.bundle {
        ensure_bundle(ctx, &name, bundle).await?;
    }
    if decision.create {
        let instance_name = pool_decide::instance_name(&name, RandomState::new().hash_one(&name));
        let instance = pool_decide::new_instance(pool, &instance_name);
        instances
            .create(&PostParams::default(), &instance)
            .await
            .map_err(|source| Error::CreateInstance {
                name: name.clone(),
                instance: instance_name.clone(),
                source,
            })?;
        tracing::info!(clusterpool = %name, namespace = %ns, clusterinstance = %instance_name, "instance created");
        // Its creation event (owned_events) brings us back to count it and go on.
    }
    if Some(&decision.status) != pool.status.as_ref() {
        write_status(pool, ctx, &decision.status).await?;
    }
    Ok(if decision.requeue {
        Next::Requeue(PROVISIONING_REQUEUE)
    } else {
        Next::Done
    })
}

/// Creates the pool's CRCBundle unless one of that name exists; an existing one is reused
/// untouched, even if its spec differs.
async fn ensure_bundle(ctx: &super::Context, pool: &str, bundle: &CRCBundle) -> Result<(), Error> {
    let api: Api<CRCBundle> = Api::all(ctx.client.clone());
    let bundle_name = bundle.name_any();
    let create_err = |source| Error::CreateBundle {
        name: pool.to_owned(),
        bundle: bundle_name.clone(),
        source,
    };
    let existing = api.get_opt(&bundle_name).await.map_err(create_err)?;
    if existing.is_some() {
        return Ok(());
    }
    match api.create(&PostParams::default(), bundle).await {
        Ok(_) => {
            tracing::info!(clusterpool = %pool, crcbundle = %bundle_name, "CRCBundle created");
            Ok(())
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(source) => Err(create_err(source)),
    }
}

async fn write_status(
    pool: &ClusterPool,
    ctx: &super::Context,
    status: &ClusterPoolStatus,
) -> Result<(), Error> {
    let name = pool.name_any();
    let ns = pool.namespace().unwrap_or_default();
    let api: Api<ClusterPool> = Api::namespaced(ctx.client.clone(), &ns);
    let patch = json!({ "apiVersion": API_VERSION, "kind": "ClusterPool", "status": status });
    api.patch_status(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map_err(|source| Error::WriteStatus {
        name: name.clone(),
        source,
    })?;
    let capacity = conditions::find(&status.conditions, types::CAPACITY_AVAILABLE);
    tracing::info!(
        clusterpool = %name,
        namespace = %ns,
        total = status.total_instances.unwrap_or_default(),
        capacity = capacity.map(|c| c.reason.as_str()).unwrap_or_default(),
        "status recorded"
    );
    Ok(())
}
