//! The machinery of the supervision tree, the same for every kind: the root, the per-kind
//! supervisors and their object actors, the stage children of an object actor, mailboxes,
//! backoff, actor names, the shared caches and views, and the record of the operator's own
//! writes. Nothing here knows what a bundle, an instance, a pool or a lease decides.

pub mod api_error;
pub mod backoff;
pub mod caches;
pub mod context;
pub mod kind_supervisor;
pub mod mailbox;
pub mod names;
pub mod object_actor;
pub mod own_writes;
pub mod stage;
pub mod triggers;
pub mod user_secrets;
pub mod views;
pub mod worker;
