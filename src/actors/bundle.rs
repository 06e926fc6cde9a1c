//! The CRCBundle actor: one per bundle, keyed by UID.
//!
//! Download-sourced bundles run the download source (observe the bundle's objects, decide with
//! [`super::download::decide`], act, record). Build-sourced bundles are recorded as observed
//! (`Ready=False reason=Pending`) until the build source exists.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::api::{ListParams, PartialObjectMeta, PropagationPolicy};

use super::context::Context;
use super::download::{self, Action};
use super::kind_supervisor::{Next, ObjectActor, OwnerEvents, ReconcileError, owner_events};
use crate::api::bundle::{BundlePhase, BundleSource, CRCBundle, CRCBundleStatus};
use crate::api::conditions::{self, reasons, types};
use crate::resources;
use crate::resources::bundle::Names;
use crate::write::{self, Guard};

/// Errors of a bundle reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status of CRCBundle {name}: {source}")]
    WriteStatus { name: String, source: kube::Error },
    #[error("reading {what} of CRCBundle {name}: {source}")]
    Observe {
        name: String,
        what: String,
        source: kube::Error,
    },
    #[error("{action:?} for CRCBundle {name}: {source}")]
    Act {
        name: String,
        action: Action,
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        reasons::RECONCILE_ERROR
    }
}

#[derive(Default)]
pub struct BundleActor;

impl ObjectActor for BundleActor {
    type Object = CRCBundle;
    type Error = Error;
    type Request = std::convert::Infallible;
    const KIND: &'static str = "crcbundle";

    async fn reconcile(bundle: &CRCBundle, ctx: &Arc<Context>) -> Result<Next, Error> {
        reconcile(bundle, ctx).await.map(|()| Next::Done)
    }

    /// The prep Job, the PVCs and what the Job publishes live in the operator namespace and are
    /// owned by the bundle.
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
        ]
    }
}

async fn reconcile(bundle: &CRCBundle, ctx: &Context) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    if bundle.spec.build.is_some() {
        return match next_status(bundle, now) {
            Some(status) => write_status(ctx, bundle, &status).await,
            None => Ok(()),
        };
    }
    let observed = observe(ctx, bundle).await?;
    let decision = download::decide(bundle, &observed, &ctx.namespace, now);
    for action in &decision.actions {
        act(ctx, bundle, action).await?;
    }
    write_status(ctx, bundle, &decision.status).await
}

async fn write_status(
    ctx: &Context,
    bundle: &CRCBundle,
    status: &CRCBundleStatus,
) -> Result<(), Error> {
    let api = Api::<CRCBundle>::all(ctx.client.clone());
    write::record_status(&api, bundle, status, Guard::None, &ctx.events)
        .await
        .map(drop)
        .map_err(|source| Error::WriteStatus {
            name: bundle.name_any(),
            source,
        })
}

/// Reads what exists of the bundle's objects. Only objects the bundle controls count: an object
/// of a deleted namesake is still being garbage-collected and must not be mistaken for ours.
async fn observe(ctx: &Context, bundle: &CRCBundle) -> Result<download::Observed, Error> {
    let names = Names::of(&bundle.name_any());
    let uid = bundle.uid().unwrap_or_default();
    let ns = ctx.namespace.as_str();
    let client = &ctx.client;
    let owned = |meta: &kube::api::ObjectMeta| {
        meta.owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .is_some_and(|r| r.uid == uid)
    };
    let err = |what: &str| {
        let (name, what) = (bundle.name_any(), what.to_owned());
        move |source| Error::Observe { name, what, source }
    };
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    let golden_pvc = pvcs
        .get_opt(&names.golden_pvc)
        .await
        .map_err(err("golden PVC"))?;
    let scratch_pvc = pvcs
        .get_opt(&names.scratch_pvc)
        .await
        .map_err(err("scratch PVC"))?;
    let job = Api::<Job>::namespaced(client.clone(), ns)
        .get_opt(&names.prep_job)
        .await
        .map_err(err("prep Job"))?
        .filter(|j| owned(&j.metadata));
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(&names.ssh_secret)
        .await
        .map_err(err("SSH key Secret"))?;
    let metadata = Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(&names.metadata)
        .await
        .map_err(err("metadata ConfigMap"))?
        .filter(|c| owned(&c.metadata));
    let job_failure = match &job {
        Some(job) if job.status.as_ref().and_then(|s| s.failed).unwrap_or(0) > 0 => {
            last_failure(client, ns, &names.prep_job)
                .await
                .map_err(err("prep pods"))?
        }
        _ => None,
    };
    Ok(download::Observed {
        golden_pvc: golden_pvc.is_some_and(|p| owned(&p.metadata)),
        scratch_pvc: scratch_pvc
            .filter(|p| owned(&p.metadata))
            .and_then(|p| p.metadata.uid),
        job,
        job_failure,
        ssh_secret: secret.is_some_and(|s| owned(&s.metadata)),
        metadata,
    })
}

/// The termination message of the prep Job's most recent failed pod (`<Reason>: <message>`).
async fn last_failure(
    client: &kube::Client,
    ns: &str,
    job: &str,
) -> Result<Option<String>, kube::Error> {
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await?;
    Ok(pods
        .items
        .iter()
        .flat_map(|p| {
            p.status
                .iter()
                .flat_map(|s| s.container_statuses.iter().flatten())
        })
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref())
        .filter(|t| t.exit_code != 0)
        .max_by_key(|t| t.finished_at.as_ref().map(|f| f.0))
        .and_then(|t| t.message.as_ref())
        .map(|m| m.lines().last().unwrap_or_default().trim().to_owned())
        .filter(|m| !m.is_empty()))
}

async fn act(ctx: &Context, bundle: &CRCBundle, action: &Action) -> Result<(), Error> {
    let ns = ctx.namespace.as_str();
    let client = &ctx.client;
    let names = Names::of(&bundle.name_any());
    let result = match action {
        Action::CreateGoldenPvc => {
            write::create(
                &Api::namespaced(client.clone(), ns),
                &resources::bundle::golden_pvc(bundle, ns),
            )
            .await
        }
        Action::CreateScratchPvc => {
            write::create(
                &Api::namespaced(client.clone(), ns),
                &resources::bundle::scratch_pvc(bundle, ns),
            )
            .await
        }
        Action::CreatePrepJob => match resources::bundle::urls(bundle) {
            Some(urls) => {
                write::create(
                    &Api::namespaced(client.clone(), ns),
                    &resources::bundle::prep_job(bundle, ns, &urls, &ctx.jobs),
                )
                .await
            }
            None => Ok(()),
        },
        Action::DeletePrepJob { uid } => {
            write::delete_exact::<Job>(
                &Api::namespaced(client.clone(), ns),
                &names.prep_job,
                uid,
                PropagationPolicy::Background,
            )
            .await
        }
        Action::DeleteScratchPvc { uid } => {
            write::delete_exact::<PersistentVolumeClaim>(
                &Api::namespaced(client.clone(), ns),
                &names.scratch_pvc,
                uid,
                PropagationPolicy::Background,
            )
            .await
        }
    };
    if result.is_ok() {
        tracing::info!(crcbundle = %bundle.name_any(), ?action, "done");
    }
    result.map_err(|source| Error::Act {
        name: bundle.name_any(),
        action: action.clone(),
        source,
    })
}

/// The status of a build-sourced bundle until the build source exists, or `None` when the
/// current one is already right.
///
/// Pure: the decision of what to write is separate from writing it, so it is unit-tested and a
/// status write never triggers another write (no hot loop on our own watch events).
pub fn next_status(bundle: &CRCBundle, now: Time) -> Option<CRCBundleStatus> {
    let current = bundle.status.clone().unwrap_or_default();
    let generation = bundle.metadata.generation;
    let mut next = current.clone();
    next.observed_generation = generation;
    next.source = Some(BundleSource::Build);
    next.phase.get_or_insert(BundlePhase::Pending);
    conditions::set(
        &mut next.conditions,
        conditions::new(
            types::READY,
            false,
            reasons::PENDING,
            "CRCBundle observed; the build source is not implemented in this operator version yet",
            generation,
            now,
        ),
    );
    (next != current).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::bundle::CRCBundleSpec;
    use serde_json::json;

    fn bundle(generation: i64) -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(json!({"goldenVolumeSize": "80Gi",
            "build": {"releaseImage": "quay.io/example/release:4.22", "pullSecretRef": {"name": "p"}}}))
        .unwrap();
        let mut b = CRCBundle::new("custom", spec);
        b.metadata.generation = Some(generation);
        b
    }

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn first_observation_is_pending() {
        let status = next_status(&bundle(1), at(1)).expect("a status to write");
        assert_eq!(status.observed_generation, Some(1));
        assert_eq!(status.phase, Some(BundlePhase::Pending));
        assert_eq!(status.source, Some(BundleSource::Build));
        let ready = conditions::find(&status.conditions, types::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", reasons::PENDING)
        );
        assert_eq!(ready.observed_generation, Some(1));
    }

    #[test]
    fn settled_status_is_not_rewritten() {
        let mut b = bundle(1);
        b.status = next_status(&b, at(1));
        assert_eq!(next_status(&b, at(99)), None);
    }

    #[test]
    fn new_generation_is_recorded_without_moving_transition_time() {
        let mut b = bundle(1);
        b.status = next_status(&b, at(1));
        b.metadata.generation = Some(2);
        let status = next_status(&b, at(50)).expect("generation changed");
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.conditions[0].last_transition_time, at(1));
        assert_eq!(status.conditions[0].observed_generation, Some(2));
    }
}
