//! The ClusterInstance actor: one per instance, keyed by UID.
//!
//! This slice runs the gates that come before any backing object (upstream §3.1): deletion
//! (release of our finalizer), the finalizer itself, the topology (hcp is reported unsupported),
//! the namespace policy (§4.4) and the platform (KubeVirt, CDI, HyperConverged). The decisions are
//! pure ([`super::instance_gates`]); this module observes, patches the finalizer and records the
//! status with one server-side apply when it changed.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use serde_json::json;

use super::apply;
use super::instance_gates::{self, NamespaceState, Observed, Platform};
use super::kind_supervisor::{Next, ObjectActor, ReconcileError};
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{ClusterInstance, ClusterInstanceStatus};
use crate::api::labels::FINALIZER_CLEANUP;

/// How soon an instance blocked by a gate looks again (upstream: 20 s). Namespace changes
/// trigger at once; this covers the platform operands, which have no watch of their own.
pub const PROVISIONING_REQUEUE: Duration = Duration::from_secs(20);

/// Errors of an instance reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status of ClusterInstance {name}: {source}")]
    WriteStatus { name: String, source: kube::Error },
    #[error("updating finalizers of ClusterInstance {name}: {source}")]
    Finalizer { name: String, source: kube::Error },
    #[error("reading {what} for ClusterInstance {name}: {source}")]
    Observe {
        name: String,
        what: String,
        source: kube::Error,
    },
}

impl ReconcileError for Error {
    fn reason(&self) -> &'static str {
        reasons::RECONCILE_ERROR
    }
}

#[derive(Default)]
pub struct InstanceActor;

impl ObjectActor for InstanceActor {
    type Object = ClusterInstance;
    type Error = Error;
    const KIND: &'static str = "clusterinstance";
    /// The namespace policy reads the instance's Namespace: a label change must be seen at once.
    const WATCHES_NAMESPACES: bool = true;

    async fn reconcile(
        instance: &ClusterInstance,
        ctx: &Arc<super::Context>,
    ) -> Result<Next, Error> {
        reconcile(instance, ctx).await
    }
}

async fn reconcile(instance: &ClusterInstance, ctx: &super::Context) -> Result<Next, Error> {
    let name = instance.name_any();
    let ns = instance.namespace().unwrap_or_default();
    let api: Api<ClusterInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let has_finalizer = instance.finalizers().iter().any(|f| f == FINALIZER_CLEANUP);

    if instance.metadata.deletion_timestamp.is_some() {
        // Nothing backs an instance yet: teardown is releasing our finalizer.
        if has_finalizer {
            let rest: Vec<&String> = instance
                .finalizers()
                .iter()
                .filter(|f| *f != FINALIZER_CLEANUP)
                .collect();
            patch_finalizers(&api, instance, &rest).await?;
            tracing::info!(clusterinstance = %name, namespace = %ns, "finalizer removed");
        }
        return Ok(Next::Done);
    }
    if !has_finalizer {
        let mut all: Vec<&String> = instance.finalizers().iter().collect();
        let ours = FINALIZER_CLEANUP.to_owned();
        all.push(&ours);
        patch_finalizers(&api, instance, &all).await?;
        tracing::info!(clusterinstance = %name, namespace = %ns, "finalizer added");
        // The update event brings us back.
        return Ok(Next::Done);
    }

    // `startedAt` is written once and must never move: before authorizing, decide on a live read
    // rather than a watch cache that may not have seen our own earlier write yet.
    let live;
    let instance = if instance
        .status
        .as_ref()
        .is_none_or(|s| s.provisioning.is_none())
    {
        live = api
            .get_opt(&name)
            .await
            .map_err(|source| Error::Observe {
                name: name.clone(),
                what: "the instance".into(),
                source,
            })?
            .filter(|i| i.uid() == instance.uid());
        match &live {
            Some(live) => live,
            // Gone or replaced: the supervisor stops or retriggers us.
            None => return Ok(Next::Done),
        }
    } else {
        instance
    };
    let observed = observe(ctx, instance).await?;
    let decision = instance_gates::decide(instance, &observed, Time(Timestamp::now()));
    if Some(&decision.status) != instance.status.as_ref() {
        write_status(&api, instance, &decision.status).await?;
    }
    Ok(if decision.requeue {
        Next::Requeue(PROVISIONING_REQUEUE)
    } else {
        Next::Done
    })
}

/// Replaces `metadata.finalizers`, guarded by the resourceVersion we decided on (a concurrent
/// change fails with a conflict and is retried on the next trigger).
async fn patch_finalizers(
    api: &Api<ClusterInstance>,
    instance: &ClusterInstance,
    finalizers: &[&String],
) -> Result<(), Error> {
    let name = instance.name_any();
    let patch = json!({"metadata": {
        "resourceVersion": instance.resource_version(),
        "finalizers": finalizers,
    }});
    match api
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        // Already gone: nothing left to release.
        Err(kube::Error::Api(status))
            if status.code == 404 && instance.metadata.deletion_timestamp.is_some() =>
        {
            Ok(())
        }
        Err(source) => Err(Error::Finalizer { name, source }),
    }
}

/// Live reads: the namespace always, the platform only once the namespace policy allows work.
async fn observe(ctx: &super::Context, instance: &ClusterInstance) -> Result<Observed, Error> {
    let name = instance.name_any();
    let err = |what: &str| {
        let (name, what) = (name.clone(), what.to_owned());
        move |source| Error::Observe { name, what, source }
    };
    let ns_name = instance.namespace().unwrap_or_default();
    let ns = Api::<Namespace>::all(ctx.client.clone())
        .get_opt(&ns_name)
        .await
        .map_err(err("namespace"))?;
    let namespace = NamespaceState::of(ns.as_ref());
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
    let client = &ctx.client;
    let platform = Platform {
        kubevirt: list_all(client, "kubevirt.io", "v1", "KubeVirt", "kubevirts")
            .await
            .map_err(err("KubeVirt"))?,
        cdi: list_all(client, "cdi.kubevirt.io", "v1beta1", "CDI", "cdis")
            .await
            .map_err(err("CDI"))?,
        hyperconverged: list_all(
            client,
            "hco.kubevirt.io",
            "v1beta1",
            "HyperConverged",
            "hyperconvergeds",
        )
        .await
        .map_err(err("HyperConverged"))?,
    };
    Ok(Observed {
        namespace,
        platform: Some(platform),
    })
}

/// Every object of a kind in all namespaces; a kind the API server does not serve has none.
async fn list_all(
    client: &kube::Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Result<Vec<DynamicObject>, kube::Error> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural);
    match Api::<DynamicObject>::all_with(client.clone(), &resource)
        .list(&ListParams::default())
        .await
    {
        Ok(list) => Ok(list.items),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

async fn write_status(
    api: &Api<ClusterInstance>,
    instance: &ClusterInstance,
    status: &ClusterInstanceStatus,
) -> Result<(), Error> {
    let name = instance.name_any();
    apply::status(api, &name, status)
        .await
        .map_err(|source| Error::WriteStatus {
            name: name.clone(),
            source,
        })?;
    let ready = conditions::find(&status.conditions, types::READY);
    tracing::info!(
        clusterinstance = %name,
        namespace = instance.namespace().unwrap_or_default(),
        phase = ?status.phase,
        reason = ready.map(|c| c.reason.as_str()).unwrap_or_default(),
        "status recorded"
    );
    Ok(())
}
