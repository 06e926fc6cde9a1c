//! The one place the operator writes to the Kubernetes API. Every write is idempotent:
//!
//! - [`record_status`] ([`status`]): the status of one of our kinds, by server-side apply with our field
//!   manager, only when it changed, with an Event when its main condition's reason changed and
//!   one log line;
//! - [`create`] ([`api`], with the other primitives): an existing object of that name is fine (the next pass looks at it);
//! - [`delete_exact`]: only the object with the UID that was observed (a UID precondition), so a
//!   same-named replacement is never removed; gone is fine;
//! - [`merge_patch`] and [`finalizer`] for the few in-place changes;
//! - [`apply`]: an object a Job publishes whole (server-side apply, forced).
//!
//! Creates, applies, merge patches and status writes are read back: the stored object the server answers
//! with is compared with what was sent ([`readback`]), and a field it dropped is logged as a
//! warning and counted (`guestcluster_dropped_fields_total`), never silently lost.
//!
//! `clippy.toml` disallows `Api::create`, `Api::delete` and `Api::patch_status` everywhere else.
//!
//! Events are writes too: [`crate::events`] publishes them with [`api`]'s primitives, and
//! [`status`] publishes one through it; so `api` imports neither of the others.

pub mod api;
pub mod readback;
pub mod status;

pub use api::{
    DROPPED_MESSAGE, apply, create, create_new, create_uid, delete_exact, dropped_fields_counter,
    finalizer, merge_patch, replace,
};
pub use status::{Guard, Recorded, Written, record_status};
