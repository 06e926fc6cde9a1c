//! A supervisor per kind: one watcher + reflector for the kind, one child actor per object (by
//! UID), restarts with backoff when a child fails.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::PartialObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use serde::de::DeserializeOwned;
use tokio::sync::{Semaphore, broadcast};
use tokio::task::JoinHandle;
use tracing::Instrument as _;

use super::backoff::{Backoff, Failures};
use super::context::Context;
use super::mailbox;
use super::names::{object_actor_name, supervisor_name};
use super::stage::Report;
use super::stage::children::{Children, Parent};
use super::views::Change;

/// How long a stopping supervisor waits for its children.
pub const CHILD_STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// What an object actor receives.
#[derive(Debug)]
pub enum ObjectMsg<R> {
    /// "Look at your object again": the supervisor's watches and resyncs, and the actor's own
    /// timers, send only this.
    Reconcile,
    /// A request of the kind's own from another actor ([`ObjectActor::Request`]), e.g. a lease
    /// asking its pool's actor for an instance.
    Request(R),
    /// From one of the actor's own stage children ([`super::stage`]).
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
    /// policy). Fed by the shared Namespace view ([`super::views`]).
    const WATCHES_NAMESPACES: bool = false;

    /// Whether a reconcile takes one of the tree's shared permits while it runs (bounded,
    /// FIFO-fair concurrency). A kind whose reconcile waits for another actor's answer opts out,
    /// so it never holds a permit the actor it waits for needs.
    const HOLDS_PERMIT: bool = true;

    /// Kinds of the stage children an actor of this kind supervises ([`super::stage`]), shown
    /// in the metrics from the start.
    const CHILD_KINDS: &'static [&'static str] = &[];

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
    /// ([`super::stage`]): the pass gets the actor's children, to read their reports and to
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
        _myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(timer) = state.requeue.take() {
            timer.abort();
        }
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
                ObjectMsg::Reconcile => reconcile(myself, state).await,
                ObjectMsg::Request(request) => {
                    if let Some(object) = state.object() {
                        A::request(&object, &state.args.ctx, request).await;
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

/// A status phase as `guestcluster_objects` labels it: its API name.
pub fn phase_name(phase: Option<impl Debug>) -> Option<String> {
    phase.map(|p| format!("{p:?}"))
}

/// The span of an object's actor: its kind, namespace and name, and the actor's name.
pub(super) fn object_span<K: Resource>(
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

async fn reconcile<A: ObjectActor>(
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
    let result = A::reconcile_with_children(&object, &args.ctx, &mut state.children).await;
    drop(permit);
    let outcome = match &result {
        Ok(_) => "ok",
        Err(err) => err.reason(),
    };
    args.ctx
        .metrics
        .reconciled(A::KIND, outcome, started.elapsed());
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

/// A stream of owner UIDs: "something this object owns changed".
pub type OwnerEvents = futures::stream::BoxStream<'static, String>;

/// Owner UIDs of the objects of kind `K` that `api` sees change (created, updated or deleted),
/// for owners of kind `owner_kind` (by controller owner reference).
pub fn owner_events<K>(api: Api<PartialObjectMeta<K>>, owner_kind: &'static str) -> OwnerEvents
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    labelled_owner_events(api, owner_kind, None)
}

/// [`owner_events`] for only the objects matching the label selector `labels`, so a watch of a
/// busy kind (Secrets, Jobs) carries only what we label rather than the whole cluster's traffic.
///
/// Metadata only: an owner event needs the owner references, so neither a Secret's data nor a
/// Job's pod template is ever decoded or held.
pub fn labelled_owner_events<K>(
    api: Api<PartialObjectMeta<K>>,
    owner_kind: &'static str,
    labels: Option<&str>,
) -> OwnerEvents
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = match labels {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let owner = match event {
                Ok(
                    watcher::Event::Apply(obj)
                    | watcher::Event::Delete(obj)
                    | watcher::Event::InitApply(obj),
                ) => obj
                    .owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true) && r.kind == owner_kind)
                    .map(|r| r.uid.clone()),
                _ => None,
            };
            futures::future::ready(owner)
        })
        .boxed()
}

/// "These objects of kind `K` care about a change": the objects in `namespace` (every
/// namespace when `None`) for which `matches` holds (as the supervisor's watch cache has them).
pub struct Related<K> {
    pub namespace: Option<String>,
    pub matches: Box<dyn Fn(&K) -> bool + Send + Sync>,
}

impl<K> Related<K> {
    pub fn new(namespace: String, matches: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self {
        Self {
            namespace: Some(namespace),
            matches: Box::new(matches),
        }
    }

    /// The objects in any namespace for which `matches` holds (for cluster-scoped causes, such
    /// as a CRCBundle or the platform).
    pub fn anywhere(matches: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self {
        Self {
            namespace: None,
            matches: Box::new(matches),
        }
    }
}

impl<K> Debug for Related<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Related")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A stream of [`Related`] selections of a kind's objects.
pub type RelatedEvents<K> = futures::stream::BoxStream<'static, Related<K>>;

/// Watches kind `R` through `api` and maps every changed (created, updated or deleted) object
/// to the objects of kind `K` that care, with `map` (`None`: nobody cares).
pub fn related_events<R, K>(
    api: Api<R>,
    map: impl Fn(&R) -> Option<Related<K>> + Send + 'static,
) -> RelatedEvents<K>
where
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K: 'static,
{
    related_events_selected(api, watcher::Config::default(), map)
}

/// [`related_events`] of the objects `config` selects (a label selector keeps a busy kind's
/// other objects off the wire).
pub fn related_events_selected<R, K>(
    api: Api<R>,
    config: watcher::Config,
    map: impl Fn(&R) -> Option<Related<K>> + Send + 'static,
) -> RelatedEvents<K>
where
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K: 'static,
{
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let related = match event {
                Ok(
                    watcher::Event::Apply(obj)
                    | watcher::Event::Delete(obj)
                    | watcher::Event::InitApply(obj),
                ) => map(&obj),
                _ => None,
            };
            futures::future::ready(related)
        })
        .boxed()
}

/// Messages of a kind supervisor; all of them come from its own watch task or timers.
#[derive(Debug)]
pub enum SupervisorMsg<K: Resource<DynamicType = ()>> {
    /// An object was created or changed.
    Applied { uid: String, key: ObjectRef<K> },
    /// An object was deleted.
    Deleted { uid: String },
    /// A full re-list finished; objects not in it are gone.
    Relisted { uids: HashSet<String> },
    /// Restart the actor of `uid` after a failure.
    Respawn { uid: String },
    /// Periodic resync: trigger every child, covering any missed event.
    Resync,
    /// Something the object with `uid` owns changed.
    Owned { uid: String },
    /// The Namespace `name` changed: trigger every object in it.
    Namespace { name: String },
    /// A related object changed: trigger the objects it selects.
    Related(Related<K>),
}

/// Supervisor of all actors of one kind.
pub struct KindSupervisor<A>(PhantomData<fn() -> A>);

impl<A> Default for KindSupervisor<A> {
    fn default() -> Self {
        Self(PhantomData)
    }
}

/// Startup arguments of a kind supervisor.
pub struct SupervisorArgs {
    pub ctx: Arc<Context>,
    /// Restarts of failed children.
    pub backoff: Backoff,
    /// Retries of failed reconciles, per object.
    pub retry: Backoff,
    pub resync: Duration,
    /// Bounds the reconciles running at once across all kinds (a fair, FIFO semaphore), so
    /// the first passes of a thousand new actors queue rather than stampede.
    pub permits: Arc<Semaphore>,
}

pub struct SupervisorState<A: ObjectActor> {
    ctx: Arc<Context>,
    store: Store<A::Object>,
    backoff: Backoff,
    retry: Backoff,
    permits: Arc<Semaphore>,
    children: HashMap<String, Child<A>>,
    by_actor: HashMap<ActorId, String>,
    watch: JoinHandle<()>,
    resync: JoinHandle<()>,
    owned: Vec<JoinHandle<()>>,
}

struct Child<A: ObjectActor> {
    key: ObjectRef<A::Object>,
    actor: Option<ActorRef<ObjectMsg<A::Request>>>,
    failures: Failures,
}

impl<A> Actor for KindSupervisor<A>
where
    A: ObjectActor,
    ObjectRef<A::Object>: Hash + Eq + Clone + Send + Sync,
{
    type Msg = SupervisorMsg<A::Object>;
    type State = SupervisorState<A>;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: SupervisorArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let (store, writer) = reflector::store::<A::Object>();
        let api = Api::<A::Object>::all(args.ctx.client.clone());
        let watch = tokio::spawn(forward_events::<A>(
            api,
            writer,
            myself.clone(),
            args.ctx.clone(),
        ));
        let resync = mailbox::send_interval(&myself, args.resync, || SupervisorMsg::Resync);
        let mut owned: Vec<JoinHandle<()>> = A::owned_events(&args.ctx)
            .into_iter()
            .map(|events| tokio::spawn(forward_owned::<A>(events, myself.clone())))
            .collect();
        owned.extend(
            A::related_events(&args.ctx)
                .into_iter()
                .map(|events| tokio::spawn(forward_related::<A>(events, myself.clone()))),
        );
        owned.push(tokio::spawn(forward_views::<A>(
            args.ctx.views.subscribe(),
            myself.clone(),
        )));
        args.ctx.metrics.init_kind(A::KIND);
        args.ctx.caches.publish(store.clone());
        let counted = store.clone();
        args.ctx.metrics.count_objects_with(A::KIND, move || {
            let mut by_phase = std::collections::BTreeMap::<String, i64>::new();
            for object in counted.state() {
                let phase = A::phase(&object).unwrap_or_else(|| "None".to_owned());
                *by_phase.entry(phase).or_default() += 1;
            }
            by_phase
        });
        for kind in A::CHILD_KINDS {
            args.ctx.metrics.init_kind(kind);
        }
        args.ctx.metrics.init_kind("supervisor");
        Ok(SupervisorState {
            ctx: args.ctx,
            store,
            backoff: args.backoff,
            retry: args.retry,
            permits: args.permits,
            children: HashMap::new(),
            by_actor: HashMap::new(),
            watch,
            resync,
            owned,
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        state.watch.abort();
        state.resync.abort();
        for task in &state.owned {
            task.abort();
        }
        // ractor does not stop linked children with their supervisor.
        myself
            .stop_children_and_wait(Some("supervisor stopping".into()), Some(CHILD_STOP_TIMEOUT))
            .await;
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        mailbox::taken(&myself);
        match msg {
            SupervisorMsg::Applied { uid, key } => {
                let child = state.children.entry(uid.clone()).or_insert_with(|| Child {
                    key: key.clone(),
                    actor: None,
                    failures: Failures::default(),
                });
                child.key = key;
                match &child.actor {
                    Some(actor) => trigger(actor),
                    None if child.failures.consecutive == 0 => {
                        spawn_child(&myself, state, &uid).await
                    }
                    // A restart is already scheduled; it reconciles on start.
                    None => {}
                }
            }
            SupervisorMsg::Deleted { uid } => stop_child(state, &uid),
            SupervisorMsg::Relisted { uids } => {
                let gone: Vec<String> = state
                    .children
                    .keys()
                    .filter(|u| !uids.contains(*u))
                    .cloned()
                    .collect();
                for uid in gone {
                    stop_child(state, &uid);
                }
            }
            SupervisorMsg::Respawn { uid } => {
                let wanted = state.children.get(&uid).is_some_and(|c| c.actor.is_none());
                if wanted {
                    spawn_child(&myself, state, &uid).await;
                }
            }
            SupervisorMsg::Owned { uid } => {
                if let Some(actor) = state.children.get(&uid).and_then(|c| c.actor.as_ref()) {
                    trigger(actor);
                }
            }
            SupervisorMsg::Namespace { name } => {
                let in_namespace = state
                    .children
                    .values()
                    .filter(|c| c.key.namespace.as_deref() == Some(name.as_str()))
                    .filter_map(|c| c.actor.as_ref());
                for actor in in_namespace {
                    trigger(actor);
                }
            }
            SupervisorMsg::Related(related) => {
                for child in state.children.values() {
                    let Some(actor) = &child.actor else {
                        continue;
                    };
                    if related
                        .namespace
                        .as_ref()
                        .is_some_and(|ns| child.key.namespace.as_ref() != Some(ns))
                    {
                        continue;
                    }
                    if state
                        .store
                        .get(&child.key)
                        .is_some_and(|obj| (related.matches)(&obj))
                    {
                        trigger(actor);
                    }
                }
            }
            SupervisorMsg::Resync => {
                for actor in state.children.values().filter_map(|c| c.actor.as_ref()) {
                    trigger(actor);
                }
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let Some((cell, why)) = exit_of(&event) else {
            return Ok(());
        };
        // Children we stopped on purpose were removed from `by_actor` already.
        let Some(uid) = state.by_actor.remove(&cell.get_id()) else {
            return Ok(());
        };
        let Some(child) = state.children.get_mut(&uid) else {
            return Ok(());
        };
        child.actor = None;
        let delay = state
            .backoff
            .next_delay(&mut child.failures, Instant::now());
        state.ctx.metrics.actor_restarted(A::KIND);
        tracing::warn!(kind = A::KIND, %uid, object = %child.key, ?delay, "actor {why}; restarting");
        mailbox::send_after(&myself, delay, move || SupervisorMsg::Respawn { uid });
        Ok(())
    }
}

fn trigger<R: Send + 'static>(actor: &ActorRef<ObjectMsg<R>>) {
    // A closed mailbox means the actor is stopping; its supervision event handles the rest.
    let _ = mailbox::post(actor, ObjectMsg::Reconcile);
}

async fn spawn_child<A>(
    myself: &ActorRef<SupervisorMsg<A::Object>>,
    state: &mut SupervisorState<A>,
    uid: &str,
) where
    A: ObjectActor,
{
    let Some(child) = state.children.get_mut(uid) else {
        return;
    };
    let args = ObjectArgs {
        key: child.key.clone(),
        uid: uid.to_owned(),
        store: state.store.clone(),
        ctx: state.ctx.clone(),
        retry: state.retry.clone(),
        restart: state.backoff.clone(),
        permits: state.permits.clone(),
    };
    let name = object_actor_name(A::KIND, uid);
    match Actor::spawn_linked(
        Some(name),
        ObjectWorker::<A>::default(),
        args,
        myself.get_cell(),
    )
    .await
    {
        Ok((actor, _)) => {
            state.by_actor.insert(actor.get_id(), uid.to_owned());
            trigger(&actor);
            child.actor = Some(actor);
        }
        Err(err) => {
            // Typically the name is still registered by a dying predecessor: try again later.
            let delay = state
                .backoff
                .next_delay(&mut child.failures, Instant::now());
            tracing::warn!(kind = A::KIND, %uid, ?delay, "spawning actor failed: {err}; retrying");
            let uid = uid.to_owned();
            mailbox::send_after(myself, delay, move || SupervisorMsg::Respawn { uid });
        }
    }
}

fn stop_child<A: ObjectActor>(state: &mut SupervisorState<A>, uid: &str) {
    // Also when the child is dead and skipped its own cleanup: the object is gone.
    state.ctx.metrics.not_backing_off(A::KIND, uid);
    state.ctx.own_writes.forget(uid);
    if let Some(child) = state.children.remove(uid)
        && let Some(actor) = child.actor
    {
        state.by_actor.remove(&actor.get_id());
        actor.stop(Some("object deleted".into()));
    }
}

/// Runs the kind's watch (with backoff on errors), feeding the reflector store and turning events
/// into supervisor messages.
async fn forward_events<A: ObjectActor>(
    api: Api<A::Object>,
    writer: reflector::store::Writer<A::Object>,
    supervisor: ActorRef<SupervisorMsg<A::Object>>,
    ctx: Arc<Context>,
) where
    ObjectRef<A::Object>: Hash + Eq,
{
    // Managed fields are the larger part of an object that the operator applies to (an entry per
    // field manager, its status included) and no reconcile reads them: not kept.
    let trimmed = watcher(api, watcher::Config::default())
        .map(|e| e.map(|e| e.modify(|o| o.managed_fields_mut().clear())));
    let events = reflector::reflector(writer, trimmed).default_backoff();
    futures::pin_mut!(events);
    let mut listing = Listing::default();
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(err) => {
                tracing::warn!(kind = A::KIND, "watch error (retrying with backoff): {err}");
                continue;
            }
        };
        if matches!(event, watcher::Event::InitDone) {
            ctx.readiness.mark_synced(A::KIND);
        }
        for msg in listing.messages(event) {
            if mailbox::post(&supervisor, msg).is_err() {
                return;
            }
        }
    }
}

/// Turns the kind's watch events (after the reflector applied them) into supervisor messages.
///
/// The store shows a (re)list only once it is complete: an actor triggered by one of its
/// objects before then would find its object missing (or stale) and skip its pass. So the
/// objects of a list are announced together, after it.
struct Listing<K: Resource<DynamicType = ()>> {
    uids: HashSet<String>,
    applied: Vec<SupervisorMsg<K>>,
}

impl<K: Resource<DynamicType = ()>> Default for Listing<K> {
    fn default() -> Self {
        Self {
            uids: HashSet::new(),
            applied: Vec::new(),
        }
    }
}

impl<K: Resource<DynamicType = ()>> Listing<K> {
    fn messages(&mut self, event: watcher::Event<K>) -> Vec<SupervisorMsg<K>> {
        match event {
            watcher::Event::Apply(obj) => applied(&obj).into_iter().collect(),
            watcher::Event::Delete(obj) => obj
                .uid()
                .map(|uid| SupervisorMsg::Deleted { uid })
                .into_iter()
                .collect(),
            watcher::Event::Init => {
                self.uids.clear();
                self.applied.clear();
                Vec::new()
            }
            watcher::Event::InitApply(obj) => {
                self.uids.extend(obj.uid());
                self.applied.extend(applied(&obj));
                Vec::new()
            }
            watcher::Event::InitDone => {
                let mut msgs = vec![SupervisorMsg::Relisted {
                    uids: std::mem::take(&mut self.uids),
                }];
                msgs.append(&mut self.applied);
                msgs
            }
        }
    }
}

async fn forward_owned<A: ObjectActor>(
    mut events: OwnerEvents,
    supervisor: ActorRef<SupervisorMsg<A::Object>>,
) {
    while let Some(uid) = events.next().await {
        if mailbox::post(&supervisor, SupervisorMsg::Owned { uid }).is_err() {
            return;
        }
    }
}

async fn forward_related<A: ObjectActor>(
    mut events: RelatedEvents<A::Object>,
    supervisor: ActorRef<SupervisorMsg<A::Object>>,
) {
    while let Some(related) = events.next().await {
        if mailbox::post(&supervisor, SupervisorMsg::Related(related)).is_err() {
            return;
        }
    }
}

/// Turns changes of the shared views into triggers of the objects they concern; a subscriber
/// that fell behind has lost changes, and triggers every object instead.
async fn forward_views<A: ObjectActor>(
    mut changes: broadcast::Receiver<Change>,
    supervisor: ActorRef<SupervisorMsg<A::Object>>,
) {
    loop {
        let msgs = match changes.recv().await {
            Ok(change) => view_messages::<A>(&change),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::warn!(
                    kind = A::KIND,
                    missed,
                    "view changes missed; triggering every object"
                );
                vec![SupervisorMsg::Resync]
            }
            Err(broadcast::error::RecvError::Closed) => return,
        };
        for msg in msgs {
            if mailbox::post(&supervisor, msg).is_err() {
                return;
            }
        }
    }
}

fn view_messages<A: ObjectActor>(change: &Change) -> Vec<SupervisorMsg<A::Object>> {
    let mut msgs = Vec::new();
    if let Change::Namespace(name) = change
        && A::WATCHES_NAMESPACES
    {
        msgs.push(SupervisorMsg::Namespace { name: name.clone() });
    }
    msgs.extend(A::woken_by(change).map(SupervisorMsg::Related));
    msgs
}

/// Owner UIDs that `owner` finds in the changes of the shared views (e.g. the ClusterInstance
/// controlling a changed Route), as [`OwnerEvents`]: the owners are woken from the one shared
/// watch of that kind rather than a watch of their own.
pub fn view_owner_events(ctx: &Context, owner: fn(&Change) -> Option<String>) -> OwnerEvents {
    futures::stream::unfold(ctx.views.subscribe(), move |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(change) => {
                    if let Some(uid) = owner(&change) {
                        return Some((uid, changes));
                    }
                }
                // Lost triggers are covered by the periodic resync.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .boxed()
}

fn applied<K: Resource<DynamicType = ()>>(obj: &K) -> Option<SupervisorMsg<K>> {
    obj.uid().map(|uid| SupervisorMsg::Applied {
        uid,
        key: ObjectRef::from_obj(obj),
    })
}

/// The child that stopped and why, for a supervision event that says a child stopped.
fn exit_of(event: &SupervisionEvent) -> Option<(&ractor::ActorCell, String)> {
    match event {
        SupervisionEvent::ActorFailed(cell, err) => Some((cell, format!("failed: {err}"))),
        SupervisionEvent::ActorTerminated(cell, _, reason) => Some((
            cell,
            format!("terminated: {}", reason.as_deref().unwrap_or("no reason")),
        )),
        _ => None,
    }
}

/// Name under which the supervisor of `A` is registered.
pub fn name_of<A: ObjectActor>() -> String {
    supervisor_name(A::KIND)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::metrics::Metrics;

    /// What the flaky kind saw at each attempt: when, and the backoff the metrics reported for
    /// its kind just before.
    static ATTEMPTS: Mutex<Vec<(tokio::time::Instant, (usize, Duration))>> = Mutex::new(Vec::new());

    const UID: &str = "uid-flaky";

    /// Attempts 1–3 fail, 4 succeeds, 5 fails, 6 succeeds.
    const FAILING: [usize; 4] = [1, 2, 3, 5];

    #[derive(Debug, thiserror::Error)]
    #[error("attempt {0} fails")]
    struct Flaked(usize);

    impl ReconcileError for Flaked {
        fn reason(&self) -> &'static str {
            "Flaked"
        }
    }

    #[derive(Default)]
    struct Flaky;

    impl ObjectActor for Flaky {
        type Object = ConfigMap;
        type Error = Flaked;
        type Request = std::convert::Infallible;
        const KIND: &'static str = "flaky";

        async fn reconcile(_: &ConfigMap, ctx: &Arc<Context>) -> Result<Next, Flaked> {
            let seen = ctx.metrics.backing_off(Self::KIND);
            let attempt = {
                let mut attempts = ATTEMPTS.lock().unwrap();
                attempts.push((tokio::time::Instant::now(), seen));
                attempts.len()
            };
            if FAILING.contains(&attempt) {
                Err(Flaked(attempt))
            } else {
                Ok(Next::Done)
            }
        }
    }

    async fn attempts(n: usize) -> Vec<(tokio::time::Instant, (usize, Duration))> {
        tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                let seen = ATTEMPTS.lock().unwrap().clone();
                if seen.len() >= n {
                    return seen;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} attempts"))
    }

    /// A failing object is retried after doubling delays (each moved up to 10% earlier by its
    /// UID), shows in the backoff metrics while it waits, and starts over once a reconcile
    /// succeeds. (Delays are scaled down from the real 1 s base; timers never fire early, so
    /// only the lower bounds are exact.)
    #[tokio::test]
    async fn failed_reconciles_back_off_per_object_and_reset_on_success() {
        let retry = Backoff {
            base: Duration::from_millis(40),
            ..Backoff::reconcile()
        };
        let step = |n: u32| Backoff::spread(retry.base * n, UID);
        let object: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "flaky", "namespace": "ns", "uid": UID},
        }))
        .unwrap();
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Apply(object.clone()));
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let metrics = Metrics::default();
        let ctx = Context::build(
            client,
            "operator",
            metrics.clone(),
            Default::default(),
            Default::default(),
            crate::actors::context::GuestSettings {
                route_access: Default::default(),
            },
            Default::default(),
        );
        let args = ObjectArgs {
            key: ObjectRef::from_obj(&object),
            uid: UID.to_owned(),
            store,
            ctx,
            retry: retry.clone(),
            restart: Backoff::default(),
            permits: Arc::new(Semaphore::new(1)),
        };
        let (actor, handle) = Actor::spawn(None, ObjectWorker::<Flaky>::default(), args)
            .await
            .unwrap();

        mailbox::post(&actor, ObjectMsg::Reconcile).unwrap();
        let seen = attempts(4).await;
        let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].0 - w[0].0).collect();
        for (gap, expected) in gaps.iter().zip([step(1), step(2), step(4)]) {
            assert!(
                *gap >= expected,
                "retry after {gap:?}, scheduled {expected:?}"
            );
        }
        let reported: Vec<(usize, Duration)> = seen.iter().map(|(_, b)| *b).collect();
        assert_eq!(
            reported,
            [
                (0, Duration::ZERO),
                (1, step(1)),
                (1, step(2)),
                (1, step(4)),
            ]
        );
        assert_eq!(metrics.backing_off(Flaky::KIND), (0, Duration::ZERO));
        let text = metrics.encode();
        assert!(
            text.contains(r#"guestcluster_reconcile_retry_delay_seconds_count{kind="flaky"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"guestcluster_reconcile_backoff_objects{kind="flaky"} 0"#));

        // The success reset the count: the next failure waits the base delay again.
        mailbox::post(&actor, ObjectMsg::Reconcile).unwrap();
        let seen = attempts(6).await;
        assert_eq!(seen[5].1, (1, step(1)));
        assert!(seen[5].0 - seen[4].0 >= step(1));

        actor.stop(None);
        handle.await.unwrap();
    }

    fn config_map(uid: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(format!("cm-{uid}"));
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.uid = Some(uid.into());
        cm
    }

    fn names(msgs: &[SupervisorMsg<ConfigMap>]) -> Vec<String> {
        msgs.iter()
            .map(|m| match m {
                SupervisorMsg::Applied { uid, .. } => format!("applied {uid}"),
                SupervisorMsg::Deleted { uid } => format!("deleted {uid}"),
                SupervisorMsg::Relisted { uids } => format!("relisted {}", uids.len()),
                other => format!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn a_listed_object_is_announced_only_once_the_whole_list_is_in_the_store() {
        let mut listing = Listing::<ConfigMap>::default();
        assert!(listing.messages(Event::Init).is_empty());
        assert!(
            listing
                .messages(Event::InitApply(config_map("a")))
                .is_empty()
        );
        assert!(
            listing
                .messages(Event::InitApply(config_map("b")))
                .is_empty()
        );
        assert_eq!(
            names(&listing.messages(Event::InitDone)),
            ["relisted 2", "applied a", "applied b"]
        );
        // Afterwards, each change is announced as it comes (the store already shows it).
        assert_eq!(
            names(&listing.messages(Event::Apply(config_map("c")))),
            ["applied c"]
        );
        assert_eq!(
            names(&listing.messages(Event::Delete(config_map("a")))),
            ["deleted a"]
        );
        // A re-list after a watch error starts afresh.
        listing.messages(Event::Init);
        listing.messages(Event::InitApply(config_map("b")));
        assert_eq!(
            names(&listing.messages(Event::InitDone)),
            ["relisted 1", "applied b"]
        );
    }
}
