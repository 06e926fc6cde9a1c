//! The CRCBundle actor: one per bundle, keyed by UID.
//!
//! For now it records that the bundle was observed (`observedGeneration`, the source, and
//! `Ready=False reason=Pending`); the download and build sources build on this skeleton.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;

use super::kind_supervisor::{ObjectActor, ObjectArgs, Trigger};
use crate::api::API_VERSION;
use crate::api::bundle::{BundlePhase, BundleSource, CRCBundle, CRCBundleStatus};
use crate::api::conditions::{self, reasons, types};
use crate::api::labels::FIELD_MANAGER;

/// Errors of a bundle reconcile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing status of CRCBundle {name}: {source}")]
    WriteStatus { name: String, source: kube::Error },
}

impl Error {
    /// The condition reason this error is reported under.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::WriteStatus { .. } => reasons::RECONCILE_ERROR,
        }
    }
}

#[derive(Default)]
pub struct BundleActor;

impl ObjectActor for BundleActor {
    type Object = CRCBundle;
    const KIND: &'static str = "crcbundle";
}

impl Actor for BundleActor {
    type Msg = Trigger;
    type State = ObjectArgs<CRCBundle>;
    type Arguments = ObjectArgs<CRCBundle>;

    async fn pre_start(
        &self,
        _myself: ActorRef<Trigger>,
        args: ObjectArgs<CRCBundle>,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<Trigger>,
        Trigger::Reconcile: Trigger,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        // Observe from the watch cache; a missing object or a different UID means the bundle we
        // serve is gone and the supervisor is about to stop us.
        let Some(bundle) = state.store.get(&state.key) else {
            return Ok(());
        };
        if bundle.uid().as_deref() != Some(state.uid.as_str()) {
            return Ok(());
        }
        let result = reconcile(&bundle, state).await;
        let outcome = match &result {
            Ok(()) => "ok",
            Err(err) => err.reason(),
        };
        state.ctx.metrics.reconciled(BundleActor::KIND, outcome);
        if let Err(err) = result {
            tracing::warn!(crcbundle = %bundle.name_any(), "reconcile failed, retrying: {err}");
            myself.send_after(std::time::Duration::from_secs(5), || Trigger::Reconcile);
        }
        Ok(())
    }
}

async fn reconcile(bundle: &CRCBundle, state: &ObjectArgs<CRCBundle>) -> Result<(), Error> {
    let now = Time(Timestamp::now());
    let Some(status) = next_status(bundle, now) else {
        return Ok(());
    };
    let name = bundle.name_any();
    let patch = json!({ "apiVersion": API_VERSION, "kind": "CRCBundle", "status": status });
    Api::<CRCBundle>::all(state.ctx.client.clone())
        .patch_status(
            &name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&patch),
        )
        .await
        .map_err(|source| Error::WriteStatus {
            name: name.clone(),
            source,
        })?;
    tracing::info!(crcbundle = %name, generation = ?bundle.metadata.generation, "recorded observed state");
    Ok(())
}

/// The status the bundle should have, or `None` when the current one is already right.
///
/// Pure: the decision of what to write is separate from writing it, so it is unit-tested and a
/// status write never triggers another write (no hot loop on our own watch events).
pub fn next_status(bundle: &CRCBundle, now: Time) -> Option<CRCBundleStatus> {
    let current = bundle.status.clone().unwrap_or_default();
    let generation = bundle.metadata.generation;
    let source = if bundle.spec.build.is_some() {
        BundleSource::Build
    } else {
        BundleSource::Download
    };
    let mut next = current.clone();
    next.observed_generation = generation;
    next.source = Some(source);
    next.phase.get_or_insert(BundlePhase::Pending);
    let message = match source {
        BundleSource::Download => {
            "CRCBundle observed; the download source is not implemented in this operator version yet"
        }
        BundleSource::Build => {
            "CRCBundle observed; the build source is not implemented in this operator version yet"
        }
    };
    conditions::set(
        &mut next.conditions,
        conditions::new(
            types::READY,
            false,
            reasons::PENDING,
            message,
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

    fn bundle(generation: i64) -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(json!({"version": "4.16.0"})).unwrap();
        let mut b = CRCBundle::new("crc-4.16.0-amd64", spec);
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
        assert_eq!(status.source, Some(BundleSource::Download));
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
