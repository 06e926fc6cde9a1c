//! The operator's supervision tree (ractor) on a level-triggered core.
//!
//! ```text
//! root
//! ├── supervisor/crcbundle        one watcher + reflector for CRCBundles
//! │   └── crcbundle/<uid>         one actor per bundle
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
pub mod bundle;
pub mod claims;
pub mod context;
pub mod crc;
pub mod download;
pub mod instance;
pub mod instance_gates;
pub mod kind_supervisor;
pub mod lease;
pub mod lease_decide;
pub mod pool;
pub mod pool_decide;
pub mod resolve;
pub mod root;

pub use context::{Context, Tuning};
pub use kind_supervisor::{ObjectActor, ObjectArgs, ObjectMsg};
pub use root::{Root, RootMsg};

/// Registered name of the actor for the object with `uid` of `kind` (e.g. `crcbundle/<uid>`).
pub fn object_actor_name(kind: &str, uid: &str) -> String {
    format!("{kind}/{uid}")
}

/// Registered name of the supervisor of `kind`.
pub fn supervisor_name(kind: &str) -> String {
    format!("supervisor/{kind}")
}

/// Live actors per kind, from the names actors are registered under (`<kind>/<uid>`,
/// `supervisor/<kind>`, `root`).
pub fn live_actor_counts() -> std::collections::BTreeMap<String, i64> {
    let mut counts = std::collections::BTreeMap::new();
    for name in ractor::registry::registered() {
        let kind = match name.split_once('/') {
            Some(("supervisor", _)) => "supervisor",
            Some((kind, _)) => kind,
            None => name.as_str(),
        };
        *counts.entry(kind.to_owned()).or_insert(0) += 1;
    }
    counts
}
