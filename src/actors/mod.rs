//! The operator's supervision tree (ractor) on a level-triggered core. The folders are the
//! tree: [`runtime`] is the machinery every kind shares, and each kind has its own folder with
//! its object actor (`mod.rs`), its pure decisions and the children it supervises.
//!
//! ```text
//! root                                   root.rs
//! ├── supervisor/crcbundle               runtime/kind_supervisor.rs
//! │   └── crcbundle/<uid>                bundle/: one actor per bundle
//! │       ├── crcbundle.prepjob/<uid>    bundle/download/prep_job.rs
//! │       └── crcbundle.<stage>/<uid>    bundle/build_source/stages/: installer Job, build VM,
//! │                                      guest session, disk copy, validation clone
//! ├── supervisor/clusterinstance
//! │   └── clusterinstance/<uid>          instance/ (the CRC pass in instance/crc/)
//! ├── supervisor/clusterpool
//! │   └── clusterpool/<uid>              pool/: owns the claims on its instances
//! └── supervisor/clusterlease
//!     └── clusterlease/<uid>             lease/: asks its pool's actor to bind it
//! ```
//!
//! Truth lives in the API server: messages are only triggers ("object X changed") or requests
//! ("bind lease L", asked of the actor that owns the decision), and on every one an actor
//! re-reads what it decides on and takes the next step. Losing or duplicating a message is
//! harmless, and so is killing any actor or the whole process.

pub mod bundle;
pub mod instance;
pub mod job_pods;
pub mod lease;
pub mod platform;
pub mod pool;
pub mod resolve;
pub mod root;
pub mod runtime;

pub use root::{Root, RootMsg};
pub use runtime::context::{Context, Tuning};
pub use runtime::names::{live_actor_counts, object_actor_name, supervisor_name};
pub use runtime::object_actor::{ObjectActor, ObjectArgs, ObjectMsg};
