//! The ClusterInstance actor: one per instance, keyed by UID.
//!
//! A pass (`docs/architecture.md`, "ClusterInstance"): deletion runs the ordered teardown
//! ([`crc::teardown`]) and then releases our finalizer; otherwise the gates are decided
//! (topology, namespace policy, platform: pure, in [`gates`]), and once they are
//! open the CRC backing takes the next step ([`crc`]), adding our finalizer right before
//! its first object. The status is recorded with one server-side apply when it changed, with an
//! Event when the `Ready` reason changed.

pub mod crc;
pub mod gates;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::PartialObjectMeta;
use kube::{Api, ResourceExt};

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;

use crate::actors::instance::gates::Observed;
use crate::actors::platform::NamespaceState;
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::object_actor::{Next, ObjectActor, ReconcileError, phase_name};
use crate::actors::runtime::triggers::{
    OwnerEvents, Related, RelatedEvents, labelled_owner_events, owner_events, related_events,
    view_owner_events,
};
use crate::actors::runtime::views::{self, Change};
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{ClusterInstance, ClusterInstanceStatus, InstancePhase};
use crate::api::labels::{CLUSTER_INSTANCE, FINALIZER_CLEANUP};
use crate::cdi::DataVolume;
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::write;

/// Errors of an instance reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
    #[error(transparent)]
    View(#[from] views::Error),
    #[error(transparent)]
    Backing(#[from] crc::Error),
    #[error(transparent)]
    Teardown(#[from] crc::teardown::Error),
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        match self {
            Self::Teardown(_) => reasons::CLEANUP_ERROR,
            Self::Api(err) => err.reason(),
            Self::Backing(err) => err.reason(),
            Self::View(_) => reasons::RECONCILE_ERROR,
        }
    }
}

/// After this long in teardown, `Terminating` says `CleanupTimedOut` (the finalizer stays).
pub const CLEANUP_TIMEOUT: Duration = Duration::from_secs(15 * 60);

#[derive(Default)]
pub struct InstanceActor;

/// The kind, for errors.
const KIND: &str = "ClusterInstance";

impl ObjectActor for InstanceActor {
    type Object = ClusterInstance;
    type Error = Error;
    type Request = std::convert::Infallible;
    const KIND: &'static str = "clusterinstance";

    fn phase(object: &Self::Object) -> Option<String> {
        phase_name(object.status.as_ref().and_then(|s| s.phase))
    }
    /// The namespace policy reads the instance's Namespace: a label change must be seen at once.
    const WATCHES_NAMESPACES: bool = true;

    /// Objects the instance controls (Jobs, Secrets, the VM and DataVolume, the Route) and the
    /// VMIs labelled with its name wake it.
    fn owned_events(ctx: &Arc<Context>) -> Vec<OwnerEvents> {
        let c = &ctx.client;
        // Everything the instance (or its agent) creates carries its name label.
        let ours = Some(CLUSTER_INSTANCE);
        vec![
            labelled_owner_events(
                Api::<PartialObjectMeta<Job>>::all(c.clone()),
                "ClusterInstance",
                ours,
            ),
            labelled_owner_events(
                Api::<PartialObjectMeta<Secret>>::all(c.clone()),
                "ClusterInstance",
                ours,
            ),
            owner_events(
                Api::<PartialObjectMeta<VirtualMachine>>::all(c.clone()),
                "ClusterInstance",
            ),
            owner_events(
                Api::<PartialObjectMeta<DataVolume>>::all(c.clone()),
                "ClusterInstance",
            ),
            // From the shared Route view's watch, which also serves the host-uniqueness check.
            view_owner_events(ctx, |change| match change {
                Change::Route { owner } => owner.clone(),
                _ => None,
            }),
        ]
    }

    /// An instance waiting for (or built from) a CRCBundle wakes when that bundle changes; one
    /// whose recorded platform gate is no longer the platform's wakes when the platform changes.
    fn woken_by(change: &Change) -> Option<Related<ClusterInstance>> {
        match change {
            Change::Bundle(name) => {
                let name = name.clone();
                Some(Related::anywhere(move |i: &ClusterInstance| {
                    !crc::is_manual(i) && crc::bundle_name(i) == name
                }))
            }
            Change::Platform(gate) => {
                let gate = gate.clone();
                Some(Related::anywhere(move |i: &ClusterInstance| {
                    gates::platform_outdated(i, &gate)
                }))
            }
            // The lease view: `status.leaseRef` follows the leases that claim the instance.
            Change::Lease {
                namespace,
                instances,
            } => {
                let instances = instances.clone();
                Some(Related::new(
                    namespace.clone(),
                    move |i: &ClusterInstance| instances.contains(&i.name_any()),
                ))
            }
            Change::Namespace(_) | Change::Route { .. } => None,
        }
    }

    /// VMIs labelled with an instance's name wake it; so does a user Secret it names.
    fn related_events(ctx: &Arc<Context>) -> Vec<RelatedEvents<ClusterInstance>> {
        let c = &ctx.client;
        vec![
            // Metadata only: the label is all the mapping reads.
            related_events(
                Api::<PartialObjectMeta<VirtualMachineInstance>>::all(c.clone()),
                |vmi: &PartialObjectMeta<VirtualMachineInstance>| {
                    let name = vmi.labels().get(CLUSTER_INSTANCE)?.clone();
                    Some(Related::new(
                        vmi.namespace()?,
                        move |i: &ClusterInstance| i.name_any() == name,
                    ))
                },
            ),
            // Users' Secrets carry none of our labels: every Secret is watched, metadata only
            // and never stored, so a pull secret or `bundleSSHKeyRef` Secret created (or fixed)
            // wakes the instances that named it instead of a timer, and the shared copy of it
            // is forgotten (`user_secrets`).
            related_events(Api::<PartialObjectMeta<Secret>>::all(c.clone()), {
                let ctx = ctx.clone();
                move |secret: &PartialObjectMeta<Secret>| {
                    let namespace = secret.namespace()?;
                    ctx.user_secrets.changed(&namespace, &secret.name_any());
                    let name = Some(secret.name_any());
                    Some(Related::new(namespace, move |i: &ClusterInstance| {
                        crc::user_secret_names(i).contains(&name)
                    }))
                }
            }),
        ]
    }

    async fn reconcile(instance: &ClusterInstance, ctx: &Arc<Context>) -> Result<Next, Error> {
        reconcile(instance, ctx).await
    }
}

async fn reconcile(instance: &ClusterInstance, ctx: &Arc<Context>) -> Result<Next, Error> {
    let name = instance.name_any();
    let ns = instance.namespace().unwrap_or_default();
    let api: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let has_finalizer = instance.finalizers().iter().any(|f| f == FINALIZER_CLEANUP);

    if instance.metadata.deletion_timestamp.is_some() {
        if !has_finalizer {
            return Ok(Next::Done);
        }
        if let Some(next) = teardown(instance, ctx, &api).await? {
            return Ok(next);
        }
        if release_finalizer(&api, instance).await? {
            tracing::info!(clusterinstance = %name, namespace = %ns, "finalizer removed");
        }
        return Ok(Next::Done);
    }
    // Never decide on a watch cache that may not have seen our own last write: `startedAt`,
    // the boot-key binding and the API endpoint are written once, ahead of what they guard, and
    // the status is applied whole — a stale copy would erase them. Once the cache shows our
    // last write (or we never wrote), it is as good as a live read and costs no request.
    let Some(instance) = ctx
        .own_writes
        .current(&api, instance)
        .await
        .map_err(ApiError::on(KIND, &name, Doing::Read, "the instance"))?
    else {
        // Gone or replaced: the supervisor stops or retriggers us.
        return Ok(Next::Done);
    };
    let instance = instance.as_ref();
    let observed = observe(ctx, instance).await?;
    let decision = gates::decide(instance, &observed, Time(Timestamp::now()));
    let mut status = decision.status;
    // A blocked gate waits for its view to change (`woken_by`), not for a timer.
    let mut next = Next::Done;
    if decision.open {
        // Record what the pass learned even when it ends in an error: write-ahead fields
        // (binding, endpoint) must not be lost to a later failing call.
        let outcome = Box::pin(crc::reconcile(instance, ctx, &mut status)).await;
        status.lease_ref = lease_projection(ctx, instance).await?;
        next = match &outcome {
            Ok(crc::Outcome::Ready) => Next::Requeue(crc::READY_RECHECK),
            Ok(crc::Outcome::Wait(Some(after))) => Next::Requeue(*after),
            Ok(crc::Outcome::Wait(None)) => Next::Done,
            Err(_) => next,
        };
        record(ctx, &api, instance, &status).await?;
        outcome?;
        return Ok(next);
    }
    record(ctx, &api, instance, &status).await?;
    Ok(next)
}

/// Writes the status when it changed (with an Event when the `Ready` reason changed).
async fn record(
    ctx: &Context,
    api: &Api<ClusterInstance>,
    instance: &ClusterInstance,
    status: &ClusterInstanceStatus,
) -> Result<(), Error> {
    ctx.own_writes
        .record_status(api, instance, status, &ctx.events)
        .await
        .map_err(ApiError::on(
            KIND,
            &instance.name_any(),
            Doing::WriteStatus,
            "",
        ))?;
    Ok(())
}

/// `status.leaseRef`: the lease that claims this instance (informational only, as in the Go
/// operator), from the shared lease view.
async fn lease_projection(
    ctx: &Context,
    instance: &ClusterInstance,
) -> Result<Option<crate::api::common::LocalRef>, Error> {
    let ns = instance.namespace().unwrap_or_default();
    Ok(ctx.views.lease_of(&ns, &instance.name_any()).await?)
}

/// One teardown pass. `Some(next)` while backing objects remain; `None` once the finalizer may
/// go. Progress is recorded as `phase=Terminating`, `Terminating=True CleanupInProgress` (or
/// `CleanupTimedOut`, or `CleanupError` on a failed call).
async fn teardown(
    instance: &ClusterInstance,
    ctx: &Arc<Context>,
    api: &Api<ClusterInstance>,
) -> Result<Option<Next>, Error> {
    let result = crc::teardown::run(instance, ctx).await;
    let (reason, message) = match &result {
        Ok(crc::teardown::Progress::Done) => return Ok(None),
        Ok(crc::teardown::Progress::Pending(step)) => {
            let started = instance
                .metadata
                .deletion_timestamp
                .as_ref()
                .map(|t| t.0)
                .unwrap_or_else(Timestamp::now);
            let overdue =
                (Timestamp::now() - started).get_seconds() > CLEANUP_TIMEOUT.as_secs() as i64;
            if overdue {
                (
                    reasons::CLEANUP_TIMED_OUT,
                    format!("cleanup has taken over 15 minutes; now {step}"),
                )
            } else {
                (reasons::CLEANUP_IN_PROGRESS, step.clone())
            }
        }
        Err(e) => (reasons::CLEANUP_ERROR, e.to_string()),
    };
    let mut status = instance.status.clone().unwrap_or_default();
    status.phase = Some(InstancePhase::Terminating);
    conditions::set(
        &mut status.conditions,
        conditions::new(
            types::TERMINATING,
            true,
            reason,
            message,
            instance.metadata.generation,
            Time(Timestamp::now()),
        ),
    );
    match record(ctx, api, instance, &status).await {
        Ok(()) => {}
        // Gone meanwhile: nothing left to record.
        Err(Error::Api(ApiError {
            doing: Doing::WriteStatus,
            source,
            ..
        })) if matches!(*source, kube::Error::Api(ref s) if s.code == 404) => {}
        Err(e) => return Err(e),
    }
    result?;
    Ok(Some(Next::Requeue(crc::teardown::STEP_REQUEUE)))
}

/// Releases our finalizer once the teardown is done (it was added by the CRC pass before the
/// first object, [`crate::actors::instance::crc::reconcile`]).
async fn release_finalizer(
    api: &Api<ClusterInstance>,
    instance: &ClusterInstance,
) -> Result<bool, Error> {
    match write::finalizer(api, instance, FINALIZER_CLEANUP, false).await {
        Ok(()) => Ok(true),
        // Changed since it was read (e.g. its pool adopted it meanwhile): that change's watch
        // event is queued for this actor and brings the next pass; no retry with backoff.
        Err(kube::Error::Api(status)) if status.code == 409 => {
            tracing::debug!(clusterinstance = %instance.name_any(), "finalizer update conflicted; looking again on the next event");
            Ok(false)
        }
        Err(source) => Err(
            ApiError::on(KIND, &instance.name_any(), Doing::UpdateFinalizers, "")(source).into(),
        ),
    }
}

/// Reads from the shared views: the namespace always, the platform only once the namespace
/// policy allows work.
async fn observe(ctx: &Context, instance: &ClusterInstance) -> Result<Observed, Error> {
    let ns_name = instance.namespace().unwrap_or_default();
    let namespace = ctx.views.namespace(&ns_name).await?;
    let authorized = instance
        .status
        .as_ref()
        .is_some_and(|s| s.provisioning.is_some());
    let allowed = match namespace {
        NamespaceState::Enabled => true,
        NamespaceState::Disabled => authorized,
        NamespaceState::Missing | NamespaceState::Terminating => false,
    };
    if !allowed || instance.spec.type_ == crate::api::common::ClusterType::Hcp {
        return Ok(Observed {
            namespace,
            platform: None,
        });
    }
    Ok(Observed {
        namespace,
        platform: Some(ctx.views.platform().await?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn instance(ns: &str, template: serde_json::Value) -> ClusterInstance {
        let mut t = json!({"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4});
        t.as_object_mut()
            .unwrap()
            .extend(template.as_object().unwrap().clone());
        serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterInstance",
            "metadata": {"name": "one", "namespace": ns},
            "spec": {"type": "crc", "template": t},
        }))
        .unwrap()
    }

    /// A bundle change wakes the instances of every namespace that select that bundle (by
    /// version or by reference), and no others; namespace and Route changes are not mapped here.
    #[test]
    fn a_bundle_change_wakes_exactly_the_instances_selecting_it() {
        let by_version = instance("a", json!({"crcVersion": "4.22.7"}));
        let by_ref = instance("b", json!({"crcBundleRef": {"name": "crc-4.22.7-amd64"}}));
        let other = instance("a", json!({"crcVersion": "4.21.0"}));
        let manual = instance("a", json!({"releaseImage": "https://example/disk"}));
        let related = InstanceActor::woken_by(&Change::Bundle("crc-4.22.7-amd64".into()))
            .expect("bundle changes are mapped");
        assert_eq!(related.namespace, None, "every namespace");
        assert!((related.matches)(&by_version));
        assert!((related.matches)(&by_ref));
        assert!(!(related.matches)(&other));
        assert!(!(related.matches)(&manual));
        assert!(InstanceActor::woken_by(&Change::Namespace("a".into())).is_none());
        assert!(InstanceActor::woken_by(&Change::Route { owner: None }).is_none());
    }
}
