//! The operator's supervision tree (ractor) on a level-triggered core.
//!
//! ```text
//! root
//! ├── supervisor/crcbundle        one watcher + reflector for CRCBundles
//! │   └── crcbundle/<uid>         one actor per bundle; supervises its stage children
//! │       ├── crcbundle.prepjob/<uid>       follows the prep Job recorded in status (stage/)
//! │       └── crcbundle.installerjob/<uid>  follows a build's installer Job (stage/)
//! ├── supervisor/clusterinstance  one watcher + reflector for ClusterInstances (+ Namespaces)
//! │   └── clusterinstance/<uid>   one actor per instance
//! ├── supervisor/clusterpool      one watcher + reflector for ClusterPools (+ Namespaces,
//! │   │                           owned ClusterInstances, ClusterLeases → their pool)
//! │   └── clusterpool/<uid>       one actor per pool; owns the claims on its instances
//! └── supervisor/clusterlease     one watcher + reflector for ClusterLeases (+ Namespaces,
//!     │                           pool ClusterInstances and ClusterPools → Pending leases of
//!     │                           that pool)
//!     └── clusterlease/<uid>      one actor per lease; asks its pool's actor to bind it
//! ```
//!
//! Truth lives in the API server: messages are only triggers ("object X changed") or requests
//! ("bind lease L", asked of the actor that owns the decision), and on every one an actor
//! re-reads what it decides on and takes the next step. Losing or duplicating a message is
//! harmless, and so is killing any actor or the whole process.

pub mod backoff;
pub mod build;
pub mod bundle;
pub mod caches;
pub mod claims;
pub mod context;
pub mod crc;
pub mod download;
pub mod instance;
pub mod instance_gates;
pub mod kind_supervisor;
pub mod lease;
pub mod lease_decide;
pub mod mailbox;
pub mod names;
pub mod own_writes;
pub mod pool;
pub mod pool_bundles;
pub mod pool_decide;
pub mod resolve;
pub mod root;
pub mod stage;
pub mod user_secrets;
pub mod views;

pub use context::{Context, Tuning};
pub use kind_supervisor::{ObjectActor, ObjectArgs, ObjectMsg};
pub use names::{live_actor_counts, object_actor_name, supervisor_name};
pub use root::{Root, RootMsg};
