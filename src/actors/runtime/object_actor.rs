//! What every kind's object actor is: the [`ObjectActor`] trait a kind implements (observe,
//! decide, act, record in one `reconcile`), the messages it receives, and how it asks to be
//! looked at again ([`Next`]).

use std::fmt::Debug;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use dashmap::DashSet;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use ractor::{ActorId, ActorRef, SupervisionEvent};
use serde::de::DeserializeOwned;
use tokio::sync::Semaphore;

use super::triggers::{OwnerEvents, Related, RelatedEvents};
use crate::actors::runtime::backoff::Backoff;
use crate::actors::runtime::context::Context;
use crate::actors::runtime::mailbox;
use crate::actors::runtime::names::object_actor_name;
use crate::actors::runtime::stage::Report;
use crate::actors::runtime::stage::children::Children;
use crate::actors::runtime::views::Change;

/// What an object actor receives.
#[derive(Debug)]
pub enum ObjectMsg<R> {
    /// "Look at your object again": the supervisor's watches and resyncs, and the actor's own
    /// timers, send only this.
    Reconcile,
    /// A request of the kind's own from another actor ([`ObjectActor::Request`]), e.g. a lease
    /// asking its pool's actor for an instance.
    Request(R),
    /// From one of the actor's own stage children ([`crate::actors::runtime::stage`]).
    Child(ChildMsg),
}

/// What an object actor hears about its stage children.
#[derive(Debug)]
pub enum ChildMsg {
    /// A child's report about the object it follows.
    Report(Report),
    /// The restart backoff of the child of this kind is over.
    Restart(&'static str),
}

/// What an object actor starts with: which object it serves, where to read it, and how it
/// retries a failed reconcile.
pub struct ObjectArgs<K: Resource<DynamicType = ()> + Clone + 'static> {
    pub key: ObjectRef<K>,
    pub uid: String,
    pub store: Store<K>,
    pub ctx: Arc<Context>,
    pub retry: Backoff,
    /// Restarts of the actor's own stage children, if it has any.
    pub restart: Backoff,
    /// Reconcile permits shared by every object actor ([`SupervisorArgs::permits`]).
    pub permits: Arc<Semaphore>,
}

/// What a reconcile asks for afterwards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Nothing until the next trigger (a watch event or the periodic resync).
    Done,
    /// Look again after this long even without a trigger (e.g. while a gate blocks).
    Requeue(Duration),
}

/// An error of a reconcile: logged, counted under its condition reason, retried.
pub trait ReconcileError: std::error::Error + Send + 'static {
    /// The condition reason this error is reported under.
    fn reason(&self) -> &'static str;
}

/// One kind of object the operator reconciles: each object gets an [`ObjectWorker`] actor (by
/// UID) that runs [`ObjectActor::reconcile`] on every trigger.
pub trait ObjectActor: Default + Send + Sync + 'static {
    type Object: Resource<DynamicType = ()>
        + Clone
        + DeserializeOwned
        + Debug
        + Send
        + Sync
        + 'static;
    type Error: ReconcileError;
    /// What other actors may ask an actor of this kind ([`ObjectMsg::Request`]);
    /// [`std::convert::Infallible`] for kinds that take no requests.
    type Request: Send + 'static;
    /// Lower-case kind, used in actor names, logs and metrics.
    const KIND: &'static str;

    /// The phase the object's status reports, for `guestcluster_objects{kind,phase}` (`None`:
    /// none yet, or the kind has no phase).
    fn phase(_object: &Self::Object) -> Option<String> {
        None
    }

    /// Whether a change of a Namespace's policy (label, deletion) triggers the actors of every
    /// object in it, for kinds whose decisions depend on their namespace (the namespace
    /// policy). Fed by the shared Namespace view ([`crate::actors::runtime::views`]).
    const WATCHES_NAMESPACES: bool = false;

    /// Whether a reconcile takes one of the tree's shared permits while it runs (bounded,
    /// FIFO-fair concurrency). A kind whose reconcile waits for another actor's answer opts out,
    /// so it never holds a permit the actor it waits for needs.
    const HOLDS_PERMIT: bool = true;

    /// Kinds of the stage children an actor of this kind supervises ([`crate::actors::runtime::stage`]), shown
    /// in the metrics from the start.
    fn child_kinds() -> Vec<&'static str> {
        Vec::new()
    }

    /// The objects of this kind that a change of a shared view concerns (`None`: none).
    fn woken_by(_change: &Change) -> Option<Related<Self::Object>> {
        None
    }

    /// Watches of the objects these actors own, as owner UIDs; each event triggers the owner's
    /// actor, so a finished Job or a deleted PVC is noticed without polling.
    fn owned_events(_ctx: &Arc<Context>) -> Vec<OwnerEvents> {
        Vec::new()
    }

    /// Watches of related objects that are not owned (e.g. the instances a lease may bind, the
    /// leases of a pool): each event names which of this kind's objects care, and those actors
    /// are triggered. See [`related_events`].
    fn related_events(_ctx: &Arc<Context>) -> Vec<RelatedEvents<Self::Object>> {
        Vec::new()
    }

    /// One observe → decide → act → record pass over `object` (as the watch cache has it).
    fn reconcile(
        object: &Self::Object,
        ctx: &Arc<Context>,
    ) -> impl std::future::Future<Output = Result<Next, Self::Error>> + Send;

    /// [`ObjectActor::reconcile`] for a kind whose actor supervises stage children
    /// ([`crate::actors::runtime::stage`]): the pass gets the actor's children, to read their reports and to
    /// start or stop them from the status it writes. Kinds without children keep the default.
    fn reconcile_with_children(
        object: &Self::Object,
        ctx: &Arc<Context>,
        children: &mut Children,
    ) -> impl std::future::Future<Output = Result<Next, Self::Error>> + Send {
        let _ = children;
        Self::reconcile(object, ctx)
    }

    /// Handles one request about `object` (as the watch cache has it), answering through the
    /// reply port the request carries. An actor handles one message at a time, so requests and
    /// reconciles of one object never overlap: that is what lets an actor own a decision (a
    /// pool's actor owns the claims on its instances). A request that arrives when the object
    /// is gone is dropped unanswered, and its sender sees the reply port close.
    fn request(
        object: &Self::Object,
        ctx: &Arc<Context>,
        request: Self::Request,
    ) -> impl std::future::Future<Output = ()> + Send {
        let _ = (object, ctx);
        async move { drop(request) }
    }
}

/// The running actor of the object of kind `A` with `uid`, to send it requests; `None` when no
/// such actor is registered (the object is gone, not seen yet, or its actor is restarting).
pub fn object_actor<A: ObjectActor>(uid: &str) -> Option<ActorRef<ObjectMsg<A::Request>>> {
    ActorRef::where_is(object_actor_name(A::KIND, uid))
}

/// A status phase as `guestcluster_objects` labels it: its API name.
pub fn phase_name(phase: Option<impl Debug>) -> Option<String> {
    phase.map(|p| format!("{p:?}"))
}

/// Actors with a reconcile from [`trigger`] waiting in their mailbox.
static QUEUED: LazyLock<DashSet<ActorId>> = LazyLock::new(DashSet::new);

/// Asks `actor` to reconcile, unless a reconcile asked for earlier is still waiting: that one
/// reads the object when it runs, so it covers this trigger too. Without this, every event that
/// arrives while an actor is busy (a lease waiting up to a minute for its pool's answer) would
/// queue one more full reconcile, and a burst of events would keep it busy long after.
pub fn trigger<R: Send + 'static>(actor: &ActorRef<ObjectMsg<R>>) {
    if !QUEUED.insert(actor.get_id()) {
        return;
    }
    // A closed mailbox means the actor is stopping; its supervision event handles the rest.
    if mailbox::post(actor, ObjectMsg::Reconcile).is_err() {
        QUEUED.remove(&actor.get_id());
    }
}

/// The worker took a reconcile (or stopped): a trigger from now on queues a new one.
pub(super) fn reconcile_taken(actor: ActorId) {
    QUEUED.remove(&actor);
}

/// The child that stopped and why, for a supervision event that says a child stopped.
pub fn exit_of(event: &SupervisionEvent) -> Option<(&ractor::ActorCell, String)> {
    match event {
        SupervisionEvent::ActorFailed(cell, err) => Some((cell, format!("failed: {err}"))),
        SupervisionEvent::ActorTerminated(cell, _, reason) => Some((
            cell,
            format!("terminated: {}", reason.as_deref().unwrap_or("no reason")),
        )),
        _ => None,
    }
}
