//! The CRCBundle actor: one per bundle, keyed by UID, and the supervisor of the bundle's stage
//! children ([`crate::actors::runtime::stage`]).
//!
//! Download-sourced bundles run the download source: observe the bundle's volumes, key and
//! metadata, take the prep Job's state from its child's report, decide with
//! [`crate::actors::bundle::download::decide`], act, record — the bundle's actor alone writes its status — and
//! then start (or stop) the prep Job's child from the identity just recorded. Build-sourced
//! bundles run the build source ([`build_source`]) the same way, with one child per stage in
//! flight: the installer Job, the build VM, the guest session (its helper Job), the disk copy
//! (the disk Job) and the validation clone.

pub mod build_source;
pub mod collect;
pub mod download;
pub mod jobs;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher;
use kube::{Api, Resource, ResourceExt};

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, ServiceAccount};
use kube::api::{PartialObjectMeta, PropagationPolicy};

use crate::actors::bundle::build_source::stages;
use crate::actors::bundle::download::Action;
use crate::actors::bundle::download::prep_job::PrepJob;
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::object_actor::{Next, ObjectActor, ReconcileError, phase_name};
use crate::actors::runtime::stage::JobState;
use crate::actors::runtime::stage::Stage;
use crate::actors::runtime::stage::children::Children;
use crate::actors::runtime::triggers::{
    OwnerEvents, Related, RelatedEvents, owner_events, related_events_selected,
};
use crate::api::bundle::{CRCBundle, CRCBundleStatus};
use crate::api::conditions::reasons;
use crate::api::labels;
use crate::api::{ClusterInstance, ClusterPool};
use crate::cdi::{DataSource, DataVolume};
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::resources;
use crate::resources::bundle::Names;
use crate::resources::common::is_controlled_by;
use crate::write;
use collect::Collect;

/// Errors of a bundle reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    Build(Box<crate::actors::bundle::build_source::Error>),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Api(err) => err.reason(),
            Error::Build(err) => err.reason(),
        }
    }
}

#[derive(Default)]
pub struct BundleActor;

/// The kind, for errors.
const KIND: &str = "CRCBundle";

impl ObjectActor for BundleActor {
    type Object = CRCBundle;
    type Error = Error;
    type Request = std::convert::Infallible;
    const KIND: &'static str = "crcbundle";

    fn phase(object: &Self::Object) -> Option<String> {
        phase_name(object.status.as_ref().and_then(|s| s.phase))
    }
    fn child_kinds() -> Vec<&'static str> {
        std::iter::once(PrepJob::KIND)
            .chain(stages::children().map(|child| child.kind))
            .collect()
    }

    /// A pass without stage children: it can record and create, but sees no child's report,
    /// so a recorded prep Job is only waited for.
    async fn reconcile(bundle: &CRCBundle, ctx: &Arc<Context>) -> Result<Next, Error> {
        Self::reconcile_with_children(bundle, ctx, &mut Children::detached()).await
    }

    async fn reconcile_with_children(
        bundle: &CRCBundle,
        ctx: &Arc<Context>,
        children: &mut Children,
    ) -> Result<Next, Error> {
        if bundle.spec.build.is_some() {
            return crate::actors::bundle::build_source::pass(bundle, ctx, children)
                .await
                .map_err(|e| Error::Build(Box::new(e)));
        }
        download_pass(bundle, ctx, children).await
    }

    /// The PVCs and what the prep Job publishes live in the operator namespace and are owned by
    /// the bundle (the prep Job itself is watched by its child actor; its owner events also wake
    /// the bundle, which covers the time before a child runs).
    fn owned_events(ctx: &Arc<Context>) -> Vec<OwnerEvents> {
        let client = &ctx.client;
        let ns = ctx.namespace.as_str();
        vec![
            owner_events(
                Api::<PartialObjectMeta<Job>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            owner_events(
                Api::<PartialObjectMeta<PersistentVolumeClaim>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            owner_events(
                Api::<PartialObjectMeta<Secret>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            owner_events(
                Api::<PartialObjectMeta<ConfigMap>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            // A build's installer account: its loss fails the attempt.
            owner_events(
                Api::<PartialObjectMeta<ServiceAccount>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            // A build's root disk and VM (the VM is also followed by its stage child).
            owner_events(
                Api::<PartialObjectMeta<DataVolume>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            owner_events(
                Api::<PartialObjectMeta<VirtualMachine>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
            // The published DataSource: seeing it lets the Ready stage say Ready.
            owner_events(
                Api::<PartialObjectMeta<DataSource>>::namespaced(client.clone(), ns),
                "CRCBundle",
            ),
        ]
    }

    /// The build VM's VMIs and their virt-launcher pods carry the bundle's label (the VM owns
    /// the VMI, the VMI the pod): a VMI that starts, gets its address, ends or goes, and a
    /// launcher pod that goes (releasing the disks), wake the bundle at once. Both watches are
    /// metadata only and select by that label.
    fn related_events(ctx: &Arc<Context>) -> Vec<RelatedEvents<CRCBundle>> {
        fn by_label<R: Resource>(object: &R) -> Option<Related<CRCBundle>> {
            let bundle = object.labels().get(labels::CRC_BUNDLE)?.clone();
            Some(Related::anywhere(move |b: &CRCBundle| {
                b.name_any() == bundle
            }))
        }
        let labelled = watcher::Config::default().labels(labels::CRC_BUNDLE);
        vec![
            related_events_selected(
                Api::<PartialObjectMeta<VirtualMachineInstance>>::namespaced(
                    ctx.client.clone(),
                    &ctx.namespace,
                ),
                labelled.clone(),
                by_label,
            ),
            related_events_selected(
                Api::<PartialObjectMeta<Pod>>::namespaced(ctx.client.clone(), &ctx.namespace),
                labelled.labels(&format!(
                    "{},{}={}",
                    labels::CRC_BUNDLE,
                    crate::kubevirt::labels::APP,
                    crate::kubevirt::labels::VIRT_LAUNCHER
                )),
                by_label,
            ),
        ]
    }
}

async fn download_pass(
    cached: &CRCBundle,
    ctx: &Arc<Context>,
    children: &mut Children,
) -> Result<Next, Error> {
    // `status.prepJob` is written ahead of the Job and the status is applied whole: never
    // decide on a cache that may not show our last write.
    let Some(bundle) = current(ctx, cached).await? else {
        // Deleted: the supervisor stops us.
        return Ok(Next::Done);
    };
    let bundle = bundle.as_ref();
    let observed = observe(ctx, bundle, children).await?;
    let decision = download::decide(bundle, &observed, &ctx.namespace, Time(Timestamp::now()));
    let mut status = decision.status;
    for action in &decision.actions {
        if let Some(uid) = act(ctx, bundle, action).await? {
            download::record_created(&mut status, uid);
        }
    }
    let collect = if created_for_pools(bundle) {
        let referenced = referenced(ctx, bundle).await?;
        let collect = collect::collect(
            status.unreferenced_since.as_ref(),
            referenced,
            Timestamp::now(),
            ctx.pool_bundles.gc_grace,
        );
        match &collect {
            Collect::Keep => status.unreferenced_since = None,
            Collect::Since(at) => status.unreferenced_since = Some(at.clone()),
            Collect::Wait(_) | Collect::Delete => {}
        }
        Some(collect)
    } else {
        None
    };
    write_status(ctx, bundle, &status).await?;
    // Only now, with the identity recorded, does a child follow it.
    let owner = bundle.uid().unwrap_or_default();
    match PrepJob::slot(&status) {
        Some(recorded) => children.ensure::<PrepJob>(ctx, &owner, recorded).await,
        None => children.stop(PrepJob::KIND),
    }
    let grace = ctx.pool_bundles.gc_grace;
    Ok(match collect {
        None => Next::Done,
        // Nothing wakes a bundle when the last pool referring to it goes: look again after
        // the grace, so an unused bundle goes within twice the grace.
        Some(Collect::Keep | Collect::Since(_)) => Next::Requeue(grace),
        Some(Collect::Wait(left)) => Next::Requeue(left),
        Some(Collect::Delete) => {
            collect_bundle(ctx, bundle, grace).await?;
            Next::Done
        }
    })
}

/// Whether the operator made this bundle for pools (the only bundles it removes on its own).
fn created_for_pools(bundle: &CRCBundle) -> bool {
    bundle.metadata.deletion_timestamp.is_none()
        && bundle.labels().get(labels::CREATED_FOR).map(String::as_str)
            == Some(labels::CREATED_FOR_POOLS)
}

/// Whether any pool or instance, in any namespace, still refers to the bundle.
async fn referenced(ctx: &Context, bundle: &CRCBundle) -> Result<bool, Error> {
    let name = bundle.name_any();
    let err = |what: &str| ApiError::on(KIND, &name, Doing::Read, what.to_owned());
    let pools = Api::<ClusterPool>::all(ctx.client.clone())
        .list(&Default::default())
        .await
        .map_err(err("the ClusterPools referring to it"))?;
    let instances = Api::<ClusterInstance>::all(ctx.client.clone())
        .list(&Default::default())
        .await
        .map_err(err("the ClusterInstances referring to it"))?;
    Ok(collect::referenced(
        &bundle.name_any(),
        &bundle.uid().unwrap_or_default(),
        &pools.items,
        &instances.items,
    ))
}

/// Deletes an unused pool-created bundle (by UID: a bundle made again under the name stays),
/// with an Event saying why.
async fn collect_bundle(ctx: &Context, bundle: &CRCBundle, grace: Duration) -> Result<(), Error> {
    let name = bundle.name_any();
    ctx.events
        .publish(
            bundle,
            crate::events::Kind::Normal,
            reasons::BUNDLE_UNREFERENCED,
            &format!(
                "no ClusterPool or ClusterInstance has referred to CRCBundle {name} for {}s; deleting it and its golden disk",
                grace.as_secs()
            ),
        )
        .await;
    write::delete_exact(
        &Api::<CRCBundle>::all(ctx.client.clone()),
        &name,
        &bundle.uid().unwrap_or_default(),
        PropagationPolicy::Background,
    )
    .await
    .map_err(ApiError::on(
        KIND,
        &name,
        Doing::Delete,
        "the unreferenced bundle",
    ))?;
    tracing::info!(crcbundle = %bundle.name_any(), "unreferenced pool-created bundle deleted");
    Ok(())
}

/// The copy of `cached` to decide on ([`crate::actors::runtime::own_writes::OwnWrites::current`]): `None` when
/// the bundle is gone or replaced (the supervisor stops or retriggers the actor).
pub(super) async fn current<'a>(
    ctx: &Context,
    cached: &'a CRCBundle,
) -> Result<Option<std::borrow::Cow<'a, CRCBundle>>, Error> {
    let api = Api::<CRCBundle>::all(ctx.client.clone());
    ctx.own_writes
        .current(&api, cached)
        .await
        .map_err(ApiError::on(
            KIND,
            &cached.name_any(),
            Doing::Read,
            "the bundle",
        ))
        .map_err(Error::from)
}

pub(super) async fn write_status(
    ctx: &Context,
    bundle: &CRCBundle,
    status: &CRCBundleStatus,
) -> Result<(), Error> {
    let api = Api::<CRCBundle>::all(ctx.client.clone());
    ctx.own_writes
        .record_status(&api, bundle, status, &ctx.events)
        .await
        .map_err(ApiError::on(
            KIND,
            &bundle.name_any(),
            Doing::WriteStatus,
            "",
        ))?;
    Ok(())
}

/// Reads what exists of the bundle's objects; the prep Job comes from its child's report. Only
/// objects the bundle controls count: an object of a deleted namesake is still being
/// garbage-collected and must not be mistaken for ours.
async fn observe(
    ctx: &Context,
    bundle: &CRCBundle,
    children: &Children,
) -> Result<download::Observed, Error> {
    let names = Names::of(&bundle.name_any());
    let uid = bundle.uid().unwrap_or_default();
    let ns = ctx.namespace.as_str();
    let client = &ctx.client;
    let name = bundle.name_any();
    let err = |what: &str| ApiError::on(KIND, &name, Doing::Read, what.to_owned());
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let golden_pvc = pvcs
        .get_opt(&names.golden_pvc)
        .await
        .map_err(err("golden PVC"))?;
    let scratch_pvc = pvcs
        .get_opt(&names.scratch_pvc)
        .await
        .map_err(err("scratch PVC"))?;
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&names.ssh_secret)
        .await
        .map_err(err("SSH key Secret"))?;
    let metadata = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&names.metadata)
        .await
        .map_err(err("metadata ConfigMap"))?
        .filter(|c| is_controlled_by(c, &uid));
    let recorded = bundle.status.as_ref().and_then(|s| s.prep_job.as_ref());
    let job = match recorded {
        None => JobState::None,
        Some(job) if job.uid.is_empty() => JobState::Named,
        Some(job) => children
            .observation::<PrepJob>(job)
            .cloned()
            .map_or(JobState::Unreported, JobState::Seen),
    };
    Ok(download::Observed {
        golden_pvc: golden_pvc.is_some_and(|p| is_controlled_by(&p, &uid)),
        scratch_pvc: scratch_pvc
            .filter(|p| is_controlled_by(p, &uid))
            .and_then(|p| p.metadata.uid),
        job,
        ssh_secret: secret.is_some_and(|s| is_controlled_by(&s, &uid)),
        metadata,
    })
}

/// Performs `action`; for [`Action::CreatePrepJob`], returns the UID now under the recorded name.
async fn act(ctx: &Context, bundle: &CRCBundle, action: &Action) -> Result<Option<String>, Error> {
    let ns = ctx.namespace.as_str();
    let client = &ctx.client;
    let names = Names::of(&bundle.name_any());
    let result = match action {
        Action::CreateGoldenPvc => write::create(
            &Api::namespaced(client.clone(), ns),
            &resources::bundle::golden_pvc(bundle, ns),
        )
        .await
        .map(|()| None),
        Action::CreateScratchPvc => write::create(
            &Api::namespaced(client.clone(), ns),
            &resources::bundle::scratch_pvc(bundle, ns),
        )
        .await
        .map(|()| None),
        Action::CreatePrepJob => match resources::bundle::urls(bundle) {
            Some(urls) => {
                write::create_uid(
                    &Api::namespaced(client.clone(), ns),
                    &resources::bundle::prep_job(bundle, ns, &urls, &ctx.jobs),
                )
                .await
            }
            None => Ok(None),
        },
        Action::DeletePrepJob { uid } => write::delete_exact::<Job>(
            &Api::namespaced(client.clone(), ns),
            &names.prep_job,
            uid,
            PropagationPolicy::Background,
        )
        .await
        .map(|()| None),
        Action::DeleteScratchPvc { uid } => write::delete_exact::<PersistentVolumeClaim>(
            &Api::namespaced(client.clone(), ns),
            &names.scratch_pvc,
            uid,
            PropagationPolicy::Background,
        )
        .await
        .map(|()| None),
    };
    if result.is_ok() {
        tracing::info!(crcbundle = %bundle.name_any(), ?action, "done");
    }
    result
        .map_err(ApiError::on(
            KIND,
            &bundle.name_any(),
            action.doing(),
            format!("{action:?}"),
        ))
        .map_err(Error::from)
}
