//! A supervisor per kind: one watcher + reflector for the kind, one child actor per object (by
//! UID), restarts with backoff when a child fails.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::{Semaphore, broadcast};
use tokio::task::JoinHandle;

use super::object_actor::{ObjectActor, ObjectArgs, ObjectMsg, exit_of, trigger};
use super::triggers::{OwnerEvents, Related, RelatedEvents};
use super::worker::ObjectWorker;
use crate::actors::runtime::backoff::{Backoff, Failures};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::mailbox;
use crate::actors::runtime::names::{object_actor_name, supervisor_name};
use crate::actors::runtime::views::Change;

/// How long a stopping supervisor waits for its children.
pub const CHILD_STOP_TIMEOUT: Duration = Duration::from_secs(10);

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
        for kind in A::child_kinds() {
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
        .map(|e| e.map(|e| e.modify(|o| o.meta_mut().managed_fields = None)));
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

fn applied<K: Resource<DynamicType = ()>>(obj: &K) -> Option<SupervisorMsg<K>> {
    obj.uid().map(|uid| SupervisorMsg::Applied {
        uid,
        key: ObjectRef::from_obj(obj),
    })
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
    use crate::actors::runtime::object_actor::{Next, ReconcileError};
    use crate::metrics::Metrics;

    /// What the flaky kind saw at each attempt: when, and the backoff the metrics reported for
    /// its kind just before.
    static ATTEMPTS: Mutex<Vec<(tokio::time::Instant, (usize, Duration))>> = Mutex::new(Vec::new());

    const UID: &str = "uid-flaky";

    /// A worker's arguments for the ConfigMap `name` with `uid`, the only object of its store,
    /// with a client that reaches nothing.
    fn worker_args(
        name: &str,
        uid: &str,
        retry: Backoff,
        metrics: Metrics,
    ) -> ObjectArgs<ConfigMap> {
        let object: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
        }))
        .unwrap();
        let (store, mut writer) = reflector::store::<ConfigMap>();
        writer.apply_watcher_event(&Event::Apply(object.clone()));
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let ctx = Context::build(
            client,
            "operator",
            metrics,
            Default::default(),
            Default::default(),
            crate::actors::runtime::context::GuestSettings {
                route_access: Default::default(),
            },
            Default::default(),
        );
        ObjectArgs {
            key: ObjectRef::from_obj(&object),
            uid: uid.to_owned(),
            store,
            ctx,
            retry,
            restart: Backoff::default(),
            permits: Arc::new(Semaphore::new(1)),
        }
    }

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
        let metrics = Metrics::default();
        let args = worker_args("flaky", UID, retry.clone(), metrics.clone());
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

    /// Reconciles of the gated kind so far, and the gate each waits at.
    static GATED_RUNS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    static GATE: Semaphore = Semaphore::const_new(0);

    #[derive(Default)]
    struct Gated;

    impl ObjectActor for Gated {
        type Object = ConfigMap;
        type Error = Flaked;
        type Request = std::convert::Infallible;
        const KIND: &'static str = "gated";

        async fn reconcile(_: &ConfigMap, _: &Arc<Context>) -> Result<Next, Flaked> {
            GATE.acquire().await.expect("open gate").forget();
            GATED_RUNS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(Next::Done)
        }
    }

    /// Triggers that arrive while a reconcile runs queue one more reconcile, not one each: the
    /// next reconcile reads the object as it is then.
    #[tokio::test]
    async fn triggers_during_a_reconcile_queue_one_more_not_one_each() {
        let args = worker_args(
            "gated",
            "uid-gated",
            Backoff::reconcile(),
            Metrics::default(),
        );
        let (actor, handle) = Actor::spawn(None, ObjectWorker::<Gated>::default(), args)
            .await
            .unwrap();
        trigger(&actor);
        // The first reconcile is running (held at the gate) once the mailbox is empty again.
        tokio::time::timeout(Duration::from_secs(10), async {
            while mailbox::depths_of(&actor) > 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the first reconcile taken");
        for _ in 0..50 {
            trigger(&actor);
        }
        assert_eq!(
            mailbox::depths_of(&actor),
            1,
            "one reconcile waits, not fifty"
        );
        GATE.add_permits(100);
        tokio::time::timeout(Duration::from_secs(10), async {
            while GATED_RUNS.load(std::sync::atomic::Ordering::SeqCst) < 2
                || mailbox::depths_of(&actor) > 0
            {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("both reconciles ran");
        assert_eq!(GATED_RUNS.load(std::sync::atomic::Ordering::SeqCst), 2);
        actor.stop(None);
        handle.await.unwrap();
    }
}
