//! The generic child actor of a stage: follows the one object its parent recorded, reports what
//! it sees. It writes nothing.

use std::marker::PhantomData;
use std::sync::Arc;

use futures::StreamExt;
use kube::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use crate::actors::runtime::context::Context;
use crate::actors::runtime::stage::{Observation, Report, Stage, judge};
use crate::api::common::ObjectIdentity;

/// How a child reports to its parent (a cast into the parent's mailbox; a closed mailbox means
/// the parent is stopping, and the next parent starts a new child that reports again).
pub type Reporter = Arc<dyn Fn(Report) + Send + Sync>;

/// What a child starts with.
pub struct StageArgs {
    pub ctx: Arc<Context>,
    /// UID of the bundle that must control the object.
    pub owner_uid: String,
    /// The object's identity as the parent recorded it in status.
    pub recorded: ObjectIdentity,
    pub report: Reporter,
}

/// The child actor of stage `S`.
pub struct StageActor<S>(PhantomData<fn() -> S>);

impl<S> Default for StageActor<S> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

/// What a child receives.
pub enum StageMsg<K> {
    /// What its watch shows under the recorded name (`None`: nothing).
    Seen(Option<K>),
    /// Time to read the object's surroundings again ([`Stage::recheck`]).
    Recheck,
}

pub struct StageState<K> {
    args: StageArgs,
    /// The last observation reported, so an unchanged object is not reported again.
    reported: Option<Observation>,
    /// What the watch showed last, for a recheck.
    last: Option<K>,
    /// A recheck is scheduled.
    recheck_pending: bool,
    watch: JoinHandle<()>,
}

impl<S: Stage> Actor for StageActor<S> {
    type Msg = StageMsg<S::Object>;
    type State = StageState<S::Object>;
    type Arguments = StageArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: StageArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let api = Api::<S::Object>::namespaced(args.ctx.client.clone(), &args.ctx.namespace);
        let name = args.recorded.name.clone();
        let watch = tokio::spawn(async move {
            // One watch of one name: the first event is what exists now (or `None`), so a child
            // started after a crash reports at once.
            let events = watcher::watch_object(api, &name).default_backoff();
            futures::pin_mut!(events);
            while let Some(event) = events.next().await {
                match event {
                    Ok(object) => {
                        if crate::actors::runtime::mailbox::post(&myself, StageMsg::Seen(object))
                            .is_err()
                        {
                            return;
                        }
                    }
                    Err(err) => {
                        tracing::warn!(kind = S::KIND, %name, "watch error (retrying with backoff): {err}")
                    }
                }
            }
        });
        Ok(StageState {
            args,
            reported: None,
            last: None,
            recheck_pending: false,
            watch,
        })
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.watch.abort();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        message: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        crate::actors::runtime::mailbox::taken(&myself);
        match message {
            StageMsg::Seen(object) => state.last = object,
            StageMsg::Recheck => state.recheck_pending = false,
        }
        let object = state.last.clone();
        let span = tracing::info_span!(
            "stage",
            kind = S::KIND,
            name = %state.args.recorded.name,
            actor = myself.get_name().unwrap_or_default(),
        );
        async move {
            let args = &state.args;
            let observation = match judge(&args.recorded, &args.owner_uid, object.as_ref()) {
                Some(verdict) => verdict,
                // `judge` saw an object of ours. An error here fails the child; its parent starts
                // it again after a backoff, and the new child reads afresh.
                None => match &object {
                    // Boxed, as an object worker's reconcile is: only a pointer waits in the
                    // actor's loop.
                    Some(object) => Box::pin(S::observe(object, &args.ctx)).await?,
                    None => Observation::Lost,
                },
            };
            let recheck = object.as_ref().and_then(S::recheck);
            if let (Some(every), Observation::Progress(_), false) =
                (recheck, &observation, state.recheck_pending)
            {
                crate::actors::runtime::mailbox::send_after(&myself, every, || StageMsg::Recheck);
                state.recheck_pending = true;
            }
            if state.reported.as_ref() != Some(&observation) {
                tracing::debug!(kind = S::KIND, object = %args.recorded.name, ?observation, "reporting");
                (args.report)(Report {
                    kind: S::KIND,
                    uid: args.recorded.uid.clone(),
                    observation: observation.clone(),
                });
                state.reported = Some(observation);
            }
            Ok(())
        }
        .instrument(span)
        .await
    }
}
