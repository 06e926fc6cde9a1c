//! Mailbox depth: messages sent to an actor and not yet handled. Ractor does not expose the
//! length of a mailbox, so every send to one of our actors goes through [`post`], [`call`],
//! [`send_after`] or [`send_interval`] (clippy.toml refuses ractor's own elsewhere) and every
//! handler starts with [`taken`].
//!
//! Counts are kept per actor and summed per kind at scrape time over the actors still
//! registered: messages left in the mailbox of an actor that stopped (or whose timer fired after
//! it stopped) are dropped with it instead of skewing the gauge forever.
#![allow(clippy::disallowed_methods)] // the one place that calls ractor's own sends

use std::collections::BTreeMap;
use std::sync::LazyLock;

use dashmap::DashMap;
use ractor::{ActorId, ActorRef, Message, MessagingErr};

/// Pending messages per actor, for every actor of this process (like ractor's registry).
static PENDING: LazyLock<DashMap<ActorId, i64>> = LazyLock::new(DashMap::new);

fn add(actor: ActorId, delta: i64) {
    *PENDING.entry(actor).or_insert(0) += delta;
}

/// Sends `msg` to `to`, counting it until `to` takes it.
pub fn post<M: Message>(to: &ActorRef<M>, msg: M) -> Result<(), MessagingErr<M>> {
    add(to.get_id(), 1);
    to.cast(msg).inspect_err(|_| add(to.get_id(), -1))
}

/// Asks `to` and waits up to `timeout` for the answer (ractor's `call`), counting the question
/// until `to` takes it.
pub async fn call<M: Message, T: Send + 'static>(
    to: &ActorRef<M>,
    ask: impl FnOnce(ractor::RpcReplyPort<T>) -> M,
    timeout: Option<std::time::Duration>,
) -> Result<ractor::rpc::CallResult<T>, MessagingErr<M>> {
    add(to.get_id(), 1);
    to.call(ask, timeout)
        .await
        .inspect_err(|_| add(to.get_id(), -1))
}

/// Sends the message `make` returns to `to` after `delay` (ractor's `send_after`), counting it
/// once it is sent.
pub fn send_after<M: Message>(
    to: &ActorRef<M>,
    delay: std::time::Duration,
    make: impl FnOnce() -> M + Send + 'static,
) -> tokio::task::JoinHandle<Result<(), MessagingErr<M>>> {
    let id = to.get_id();
    to.send_after(delay, move || {
        add(id, 1);
        make()
    })
}

/// Sends the message `make` returns to `to` every `period` (ractor's `send_interval`), counting
/// each.
pub fn send_interval<M: Message>(
    to: &ActorRef<M>,
    period: std::time::Duration,
    make: impl Fn() -> M + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let id = to.get_id();
    to.send_interval(period, move || {
        add(id, 1);
        make()
    })
}

/// Called first by every handler: one message of `myself` is no longer waiting.
pub fn taken<M: Message>(myself: &ActorRef<M>) {
    add(myself.get_id(), -1);
}

/// Pending messages of one actor.
pub fn depths_of<M: Message>(actor: &ActorRef<M>) -> i64 {
    PENDING.get(&actor.get_id()).map_or(0, |n| *n)
}

/// Pending messages per kind over the registered actors (named as in [`crate::actors::runtime::names`]);
/// forgets the actors that are gone.
pub fn depths() -> BTreeMap<String, i64> {
    let mut live = BTreeMap::new();
    for name in ractor::registry::registered() {
        if let Some(cell) = ractor::registry::where_is(name.clone()) {
            live.insert(
                cell.get_id(),
                crate::actors::runtime::names::kind_of(&name).to_owned(),
            );
        }
    }
    PENDING.retain(|id, _| live.contains_key(id));
    let mut depths: BTreeMap<String, i64> = live.values().map(|k| (k.clone(), 0)).collect();
    for entry in PENDING.iter() {
        if let Some(kind) = live.get(entry.key()) {
            *depths.entry(kind.clone()).or_insert(0) += (*entry.value()).max(0);
        }
    }
    depths
}

#[cfg(test)]
mod tests {
    use ractor::{Actor, ActorProcessingErr};
    use tokio::sync::{Semaphore, mpsc};

    use super::*;

    /// Handles a message only when given a permit, and reports each one it handled.
    struct Gated;

    impl Actor for Gated {
        type Msg = u32;
        type State = (std::sync::Arc<Semaphore>, mpsc::UnboundedSender<u32>);
        type Arguments = Self::State;

        async fn pre_start(
            &self,
            _: ActorRef<u32>,
            args: Self::State,
        ) -> Result<Self::State, ActorProcessingErr> {
            Ok(args)
        }

        async fn handle(
            &self,
            myself: ActorRef<u32>,
            msg: u32,
            (gate, handled): &mut Self::State,
        ) -> Result<(), ActorProcessingErr> {
            taken(&myself);
            gate.acquire().await?.forget();
            handled.send(msg)?;
            Ok(())
        }
    }

    fn depth(kind: &str) -> i64 {
        depths().get(kind).copied().unwrap_or(-1)
    }

    #[tokio::test]
    async fn depth_counts_what_waits_and_forgets_stopped_actors() {
        let gate = std::sync::Arc::new(Semaphore::new(0));
        let (tx, mut handled) = mpsc::unbounded_channel();
        let name = crate::actors::runtime::names::object_actor_name("mailboxtest", "u1");
        let (actor, handle) = Actor::spawn(Some(name), Gated, (gate.clone(), tx))
            .await
            .expect("spawn");
        for n in 0..3 {
            post(&actor, n).expect("post");
        }
        // The first is being handled (waiting at the gate), two wait in the mailbox.
        tokio::time::timeout(std::time::Duration::from_secs(10), async {
            while depth("mailboxtest") != 2 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("two messages waiting");
        gate.add_permits(3);
        for n in 0..3 {
            assert_eq!(handled.recv().await, Some(n));
        }
        assert_eq!(depth("mailboxtest"), 0);
        // Left in the mailbox of an actor that stops: dropped from the count with the actor.
        post(&actor, 9).expect("post");
        actor.kill();
        handle.await.expect("stopped");
        assert_eq!(
            depth("mailboxtest"),
            -1,
            "a kind with no actor has no depth"
        );
        assert!(!PENDING.contains_key(&actor.get_id()));
    }
}
