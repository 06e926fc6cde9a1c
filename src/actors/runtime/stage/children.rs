//! A parent's bookkeeping of its stage children: which child runs for which recorded identity,
//! the last report of each, and restarts with backoff. Kept by the parent's actor
//! ([`crate::actors::runtime::worker::ObjectWorker`]) and handed to its reconcile.
//!
//! What runs is decided by the parent's reconcile from the status it just wrote
//! ([`Children::ensure`], [`Children::stop`]); nothing here is truth, only who is watching. A
//! child that fails is not started again here but marked as backing off: when the delay is over
//! the parent reconciles, and that pass starts the child from the identity in status.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ractor::{Actor, ActorCell, ActorId};

use crate::actors::runtime::backoff::{Backoff, Failures};
use crate::actors::runtime::context::Context;
use crate::actors::runtime::names::object_actor_name;
use crate::actors::runtime::stage::actor::{Reporter, StageActor, StageArgs};
use crate::actors::runtime::stage::{Observation, Report, Stage};
use crate::api::common::ObjectIdentity;
use crate::metrics::Metrics;

/// How long a stopping parent waits for each child.
const CHILD_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// How the parent is reached: its cell (children are linked to it), its mailbox for reports, and
/// its timer for "restart the child of this kind now".
pub struct Parent {
    pub cell: ActorCell,
    pub report: Reporter,
    pub restart_after: Arc<dyn Fn(&'static str, Duration) + Send + Sync>,
}

/// The children of one parent, one per stage kind.
pub struct Children {
    parent: Option<Parent>,
    backoff: Backoff,
    slots: BTreeMap<&'static str, Slot>,
}

struct Slot {
    recorded: ObjectIdentity,
    actor: Option<ActorCell>,
    failures: Failures,
    /// A restart is scheduled; until it is due, the child is not started.
    backing_off: bool,
    report: Option<Observation>,
}

impl Children {
    /// The children of the actor `parent`; failed children restart after `backoff`.
    pub fn new(parent: Parent, backoff: Backoff) -> Self {
        Self {
            parent: Some(parent),
            backoff,
            slots: BTreeMap::new(),
        }
    }

    /// A parent that cannot start children (unit tests of a pass that starts none).
    pub fn detached() -> Self {
        Self {
            parent: None,
            backoff: Backoff::default(),
            slots: BTreeMap::new(),
        }
    }

    /// The last observation of the child of stage `S` about the object `recorded`; `None` until
    /// that child has reported (or when no child follows it).
    pub fn observation<S: Stage>(&self, recorded: &ObjectIdentity) -> Option<&Observation> {
        self.slots
            .get(S::KIND)
            .filter(|slot| slot.recorded == *recorded)
            .and_then(|slot| slot.report.as_ref())
    }

    /// Keeps a report of a child that follows what is recorded; `false` for a stale report (of
    /// a child stopped since, or of an identity no longer recorded).
    pub fn receive(&mut self, report: Report) -> bool {
        match self.slots.get_mut(report.kind) {
            Some(slot) if slot.recorded.uid == report.uid => {
                slot.report = Some(report.observation);
                true
            }
            _ => false,
        }
    }

    /// Makes the child of stage `S` follow `recorded`, the identity in the bundle's status
    /// (owned by `owner_uid`): nothing when it already does (or is waiting out a restart
    /// backoff); a child following another identity is stopped first.
    pub async fn ensure<S: Stage>(
        &mut self,
        ctx: &Arc<Context>,
        owner_uid: &str,
        recorded: &ObjectIdentity,
    ) {
        match self.slots.get(S::KIND) {
            Some(slot)
                if slot.recorded == *recorded && (slot.actor.is_some() || slot.backing_off) =>
            {
                return;
            }
            // The old child holds the registered name until it has stopped: wait for it, so
            // the new one can take the name at once.
            Some(slot) if slot.recorded != *recorded => {
                if let Some(slot) = self.slots.remove(S::KIND)
                    && let Some(actor) = slot.actor
                {
                    actor
                        .stop_and_wait(
                            Some("follows another identity".into()),
                            Some(CHILD_STOP_TIMEOUT),
                        )
                        .await
                        .ok();
                }
            }
            _ => {}
        }
        let Some(parent) = &self.parent else {
            return;
        };
        let slot = self.slots.entry(S::KIND).or_insert_with(|| Slot {
            recorded: recorded.clone(),
            actor: None,
            failures: Failures::default(),
            backing_off: false,
            report: None,
        });
        let name = object_actor_name(S::KIND, owner_uid);
        let args = StageArgs {
            ctx: ctx.clone(),
            owner_uid: owner_uid.to_owned(),
            recorded: recorded.clone(),
            report: parent.report.clone(),
        };
        match Actor::spawn_linked(
            Some(name.clone()),
            StageActor::<S>::default(),
            args,
            parent.cell.clone(),
        )
        .await
        {
            Ok((actor, _)) => slot.actor = Some(actor.get_cell()),
            Err(err) => {
                // The name is still held: by a child of a predecessor of this parent that was
                // killed without stopping its children, or by a child of ours still stopping
                // (this slot runs none). Either is stopped, and the child is started again
                // after a backoff.
                if let Some(holder) = ractor::registry::where_is(name) {
                    holder.stop(Some("orphaned stage child".into()));
                }
                let delay = self.backoff.next_delay(&mut slot.failures, Instant::now());
                slot.backing_off = true;
                tracing::warn!(
                    kind = S::KIND,
                    owner = owner_uid,
                    ?delay,
                    "starting stage child failed: {err}; retrying"
                );
                (parent.restart_after)(S::KIND, delay);
            }
        }
    }

    /// Stops the child of `kind` and forgets its reports (the stage is no longer in flight, or
    /// follows another identity now).
    pub fn stop(&mut self, kind: &str) {
        if let Some(slot) = self.slots.remove(kind)
            && let Some(actor) = slot.actor
        {
            actor.stop(Some("stage no longer in flight".into()));
        }
    }

    /// Stops every child and waits until each has stopped (the parent is stopping: ractor does
    /// not stop linked children with their parent, and a child still watching after its
    /// operator stopped would outlive the client it watches with).
    pub async fn stop_all(&mut self) {
        let slots = std::mem::take(&mut self.slots);
        for actor in slots.into_values().filter_map(|slot| slot.actor) {
            actor
                .stop_and_wait(Some("parent stopping".into()), Some(CHILD_STOP_TIMEOUT))
                .await
                .ok();
        }
    }

    /// A child died (`why`) without being stopped: its restart is scheduled after a backoff
    /// and counted. `false` when the actor is no child of these (e.g. stopped on purpose).
    pub fn exited(&mut self, actor: ActorId, why: &str, metrics: &Metrics) -> bool {
        let Some((kind, slot)) = self
            .slots
            .iter_mut()
            .find(|(_, slot)| slot.actor.as_ref().is_some_and(|a| a.get_id() == actor))
        else {
            return false;
        };
        slot.actor = None;
        slot.backing_off = true;
        slot.report = None;
        let delay = self.backoff.next_delay(&mut slot.failures, Instant::now());
        metrics.actor_restarted(kind);
        tracing::warn!(kind = *kind, object = %slot.recorded.name, ?delay, "stage child {why}; restarting");
        if let Some(parent) = &self.parent {
            (parent.restart_after)(kind, delay);
        }
        true
    }

    /// The restart backoff of the child of `kind` is over: the next reconcile starts it again.
    pub fn restart_due(&mut self, kind: &str) {
        if let Some(slot) = self.slots.get_mut(kind) {
            slot.backing_off = false;
        }
    }
}
