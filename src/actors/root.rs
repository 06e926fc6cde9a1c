//! The root supervisor: starts one supervisor per kind and restarts it with backoff if it fails.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, SupervisionEvent};
use tokio::sync::Semaphore;

use crate::actors::bundle::BundleActor;
use crate::actors::instance::InstanceActor;
use crate::actors::lease::LeaseActor;
use crate::actors::pool::PoolActor;
use crate::actors::runtime::backoff::{Backoff, Failures};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::kind_supervisor::{
    CHILD_STOP_TIMEOUT, KindSupervisor, SupervisorArgs, name_of,
};
use crate::actors::runtime::mailbox;
use crate::actors::runtime::object_actor::ObjectActor;

/// Name under which the root supervisor is registered.
pub const ROOT_NAME: &str = "root";

/// The kinds supervised under the root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    CrcBundle,
    ClusterInstance,
    ClusterPool,
    ClusterLease,
}

/// Every kind, in start order.
pub const KINDS: [Kind; 4] = [
    Kind::CrcBundle,
    Kind::ClusterInstance,
    Kind::ClusterPool,
    Kind::ClusterLease,
];

/// Kind names (as used by object actors) whose watches the tree runs.
pub const KIND_NAMES: &[&str] = &[
    BundleActor::KIND,
    InstanceActor::KIND,
    PoolActor::KIND,
    LeaseActor::KIND,
];

#[derive(Debug)]
pub enum RootMsg {
    /// Start (again) the supervisor of a kind.
    Start(Kind),
}

/// Tuning of the tree, mostly for tests.
#[derive(Clone, Debug)]
pub struct TreeConfig {
    /// Restarts of failed supervisors and object actors.
    pub backoff: Backoff,
    /// Retries of an object's failed reconciles ([`Backoff::reconcile`]).
    pub retry: Backoff,
    /// How often every object actor is triggered even without watch events.
    pub resync: Duration,
    /// The kinds whose supervisors run (default: all of [`KINDS`]); tests leave out controllers
    /// that would interfere with what they drive by hand.
    pub kinds: Vec<Kind>,
    /// Reconciles running at once across every kind ([`DEFAULT_MAX_CONCURRENT_RECONCILES`]);
    /// the others wait their turn in arrival order.
    pub max_concurrent_reconciles: usize,
}

/// What `--max-concurrent-reconciles` defaults to: enough to keep a busy API server's
/// round trips overlapped, few enough that a restart in front of a thousand objects queues
/// its first passes instead of sending them all at once.
pub const DEFAULT_MAX_CONCURRENT_RECONCILES: usize = 32;

impl Default for TreeConfig {
    fn default() -> Self {
        Self {
            backoff: Backoff::default(),
            retry: Backoff::reconcile(),
            resync: Duration::from_secs(300),
            kinds: KINDS.to_vec(),
            max_concurrent_reconciles: DEFAULT_MAX_CONCURRENT_RECONCILES,
        }
    }
}

pub struct Root;

pub struct RootState {
    ctx: Arc<Context>,
    config: TreeConfig,
    /// Shared by every object actor of every kind.
    permits: Arc<Semaphore>,
    running: HashMap<ActorId, Kind>,
    failures: HashMap<Kind, Failures>,
}

impl Actor for Root {
    type Msg = RootMsg;
    type State = RootState;
    type Arguments = (Arc<Context>, TreeConfig);

    async fn pre_start(
        &self,
        myself: ActorRef<RootMsg>,
        (ctx, config): Self::Arguments,
    ) -> Result<RootState, ActorProcessingErr> {
        for kind in &config.kinds {
            mailbox::post(&myself, RootMsg::Start(*kind))?;
        }
        Ok(RootState {
            ctx,
            permits: Arc::new(Semaphore::new(config.max_concurrent_reconciles.max(1))),
            config,
            running: HashMap::new(),
            failures: HashMap::new(),
        })
    }

    async fn post_stop(
        &self,
        myself: ActorRef<RootMsg>,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        // Dependents first, in reverse start order: a lease asks its pool's actor to bind it,
        // so leases stop before pools rather than find their pool's actor gone and record
        // that on the way out.
        for kind in KINDS.iter().rev() {
            let supervisors = myself
                .get_children()
                .into_iter()
                .filter(|cell| state.running.get(&cell.get_id()) == Some(kind));
            for cell in supervisors {
                let _ = cell
                    .stop_and_wait(Some("operator stopping".into()), Some(CHILD_STOP_TIMEOUT))
                    .await;
            }
        }
        myself
            .stop_children_and_wait(Some("operator stopping".into()), Some(CHILD_STOP_TIMEOUT))
            .await;
        state.ctx.views.stop();
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<RootMsg>,
        RootMsg::Start(kind): RootMsg,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        mailbox::taken(&myself);
        let args = SupervisorArgs {
            ctx: state.ctx.clone(),
            backoff: state.config.backoff.clone(),
            retry: state.config.retry.clone(),
            resync: state.config.resync,
            permits: state.permits.clone(),
        };
        let cell = match kind {
            Kind::CrcBundle => spawn::<BundleActor>(args, myself.get_cell()).await,
            Kind::ClusterInstance => spawn::<InstanceActor>(args, myself.get_cell()).await,
            Kind::ClusterPool => spawn::<PoolActor>(args, myself.get_cell()).await,
            Kind::ClusterLease => spawn::<LeaseActor>(args, myself.get_cell()).await,
        };
        match cell {
            Ok(cell) => {
                state.running.insert(cell.get_id(), kind);
            }
            Err(err) => {
                tracing::error!(?kind, "starting supervisor failed: {err}");
                schedule_restart(&myself, state, kind);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<RootMsg>,
        event: SupervisionEvent,
        state: &mut RootState,
    ) -> Result<(), ActorProcessingErr> {
        let cell = match &event {
            SupervisionEvent::ActorFailed(cell, _)
            | SupervisionEvent::ActorTerminated(cell, _, _) => cell,
            _ => return Ok(()),
        };
        if let Some(kind) = state.running.remove(&cell.get_id()) {
            tracing::error!(?kind, "supervisor stopped ({event}); restarting");
            // A supervisor that panicked skipped its own cleanup: stop its orphans, so that its
            // successor can register their names again.
            cell.stop_children(Some("supervisor restarting".into()));
            state.ctx.metrics.actor_restarted("supervisor");
            schedule_restart(&myself, state, kind);
        }
        Ok(())
    }
}

async fn spawn<A: ObjectActor>(
    args: SupervisorArgs,
    root: ActorCell,
) -> Result<ActorCell, ractor::SpawnErr> {
    let (actor, _) = Actor::spawn_linked(
        Some(name_of::<A>()),
        KindSupervisor::<A>::default(),
        args,
        root,
    )
    .await?;
    Ok(actor.get_cell())
}

fn schedule_restart(myself: &ActorRef<RootMsg>, state: &mut RootState, kind: Kind) {
    let failures = state.failures.entry(kind).or_default();
    let delay = state.config.backoff.next_delay(failures, Instant::now());
    mailbox::send_after(myself, delay, move || RootMsg::Start(kind));
}

/// Starts the shared views and the supervision tree and returns the root.
pub async fn start(
    ctx: Arc<Context>,
    config: TreeConfig,
) -> Result<ActorRef<RootMsg>, ractor::SpawnErr> {
    ctx.views.start(&ctx.client);
    let (root, _) = Actor::spawn(Some(ROOT_NAME.to_owned()), Root, (ctx, config)).await?;
    Ok(root)
}
