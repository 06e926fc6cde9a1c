//! [`ObjectWorker`]: the one actor that runs any kind's [`ObjectActor`] for one object: reads the
//! object from the watch cache, reconciles, requeues, and supervises the object's stage
//! children.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Instant;

use kube::runtime::reflector::ObjectRef;
use kube::{Resource, ResourceExt};
use ractor::{Actor, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::object_actor::{
    ChildMsg, Next, ObjectActor, ObjectArgs, ObjectMsg, ReconcileError, exit_of, reconcile_taken,
};
use crate::actors::runtime::backoff::{Backoff, Failures};
use crate::actors::runtime::mailbox;
use crate::actors::runtime::stage::children::{Children, Parent};

/// The actor of one object: re-reads its object on every trigger and reconciles it.
pub struct ObjectWorker<A>(PhantomData<fn() -> A>);

impl<A> Default for ObjectWorker<A> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

pub struct WorkerState<A: ObjectActor> {
    args: ObjectArgs<A::Object>,
    /// The pending "look again" timer, replaced by every reconcile.
    requeue: Option<Timer<ObjectMsg<A::Request>>>,
    /// Reconciles that failed in a row; the next retry waits `args.retry` after them.
    failures: Failures,
    /// The actor's stage children (none for most kinds).
    children: Children,
}

/// A message sent to oneself later (`send_after`), abortable.
type Timer<M> = JoinHandle<Result<(), ractor::MessagingErr<M>>>;

impl<A: ObjectActor> WorkerState<A> {
    /// The object as the watch cache has it, if it is still the one this actor serves. A
    /// missing object or a different UID means it is gone and the supervisor is about to stop
    /// us.
    fn object(&self) -> Option<Arc<A::Object>> {
        let args = &self.args;
        args.store
            .get(&args.key)
            .filter(|object| object.uid().as_deref() == Some(args.uid.as_str()))
    }
}

impl<A: ObjectActor> Actor for ObjectWorker<A> {
    type Msg = ObjectMsg<A::Request>;
    type State = WorkerState<A>;
    type Arguments = ObjectArgs<A::Object>;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: ObjectArgs<A::Object>,
    ) -> Result<Self::State, ActorProcessingErr> {
        // A restarted actor retries afresh; what a killed predecessor reported is stale.
        args.ctx.metrics.not_backing_off(A::KIND, &args.uid);
        let reports = myself.clone();
        let timers = myself.clone();
        let parent = Parent {
            cell: myself.get_cell(),
            report: Arc::new(move |report| {
                let _ = mailbox::post(&reports, ObjectMsg::Child(ChildMsg::Report(report)));
            }),
            restart_after: Arc::new(move |kind, delay| {
                drop(mailbox::send_after(&timers, delay, move || {
                    ObjectMsg::Child(ChildMsg::Restart(kind))
                }));
            }),
        };
        Ok(WorkerState {
            children: Children::new(parent, args.restart.clone()),
            args,
            requeue: None,
            failures: Failures::default(),
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.requeue.take() {
            timer.abort();
        }
        reconcile_taken(myself.get_id());
        state.children.stop_all().await;
        state
            .args
            .ctx
            .metrics
            .not_backing_off(A::KIND, &state.args.uid);
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        mailbox::taken(&myself);
        // Every line logged while handling a message names the object and this actor.
        let span = object_span(A::KIND, &state.args.key, myself.get_name());
        async move {
            match msg {
                ObjectMsg::Reconcile => {
                    reconcile_taken(myself.get_id());
                    reconcile(myself, state).await
                }
                ObjectMsg::Request(request) => {
                    if let Some(object) = state.object() {
                        // Boxed, as a reconcile is (see `reconcile`).
                        Box::pin(A::request(&object, &state.args.ctx, request)).await;
                    }
                }
                ObjectMsg::Child(ChildMsg::Report(report)) => {
                    if state.children.receive(report) {
                        reconcile(myself, state).await;
                    }
                }
                ObjectMsg::Child(ChildMsg::Restart(kind)) => {
                    state.children.restart_due(kind);
                    reconcile(myself, state).await;
                }
            }
            Ok(())
        }
        .instrument(span)
        .await
    }

    /// A stage child that died is restarted (after a backoff, by the next reconcile, from the
    /// identity in status); the actor itself carries on.
    async fn handle_supervisor_evt(
        &self,
        _myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, why)) = exit_of(&event) else {
            return Ok(());
        };
        state
            .children
            .exited(cell.get_id(), &why, &state.args.ctx.metrics);
        Ok(())
    }
}

/// The span of an object's actor: its kind, namespace and name, and the actor's name.
pub(crate) fn object_span<K: Resource>(
    kind: &str,
    key: &ObjectRef<K>,
    actor: Option<String>,
) -> tracing::Span {
    tracing::info_span!(
        "object",
        kind,
        namespace = key.namespace.as_deref().unwrap_or_default(),
        name = %key.name,
        actor = actor.as_deref().unwrap_or_default(),
    )
}

pub(super) async fn reconcile<A: ObjectActor>(
    myself: ActorRef<ObjectMsg<A::Request>>,
    state: &mut WorkerState<A>,
) {
    // This reconcile covers whatever the pending timer would have looked at.
    if let Some(timer) = state.requeue.take() {
        timer.abort();
    }
    let Some(object) = state.object() else {
        return;
    };
    let args = &state.args;
    let permit = if A::HOLDS_PERMIT {
        // Closed only if the tree is gone, and then nothing is left to reconcile for.
        let Ok(permit) = args.permits.acquire().await else {
            return;
        };
        Some(permit)
    } else {
        None
    };
    let started = Instant::now();
    // Boxed, and only once the permit is held. ractor keeps each actor's message loop in one
    // allocation for the actor's lifetime, sized for the largest future its handler awaits
    // inline: unboxed, a whole reconcile's state machine (about 27 KiB for an instance, most of
    // the operator's memory at a thousand of them), held even while the actor waits for
    // messages. Boxed after the permit, it exists only while a reconcile runs, so neither an
    // idle actor nor one queued for a permit holds it.
    let result = Box::pin(A::reconcile_with_children(
        &object,
        &args.ctx,
        &mut state.children,
    ))
    .await;
    drop(permit);
    let outcome = match &result {
        Ok(_) => "ok",
        Err(err) => err.reason(),
    };
    args.ctx
        .metrics
        .reconciled(A::KIND, outcome, started.elapsed());
    if let Err(err) = &result {
        args.ctx.metrics.reconcile_failed(A::KIND, err.reason());
    }
    let next = match result {
        Ok(next) => {
            if state.failures.consecutive > 0 {
                state.failures.reset();
                args.ctx.metrics.not_backing_off(A::KIND, &args.uid);
            }
            next
        }
        Err(err) => {
            let delay = args.retry.next_delay(&mut state.failures, Instant::now());
            let delay = Backoff::spread(delay, &args.uid);
            args.ctx.metrics.retrying(A::KIND, &args.uid, delay);
            let failures = state.failures.consecutive;
            tracing::warn!(kind = A::KIND, object = %args.key, failures, ?delay, "reconcile failed, retrying: {err}");
            Next::Requeue(delay)
        }
    };
    if let Next::Requeue(delay) = next {
        state.requeue = Some(mailbox::send_after(&myself, delay, || ObjectMsg::Reconcile));
    }
}
