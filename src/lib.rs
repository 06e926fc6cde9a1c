//! guestcluster: runs OpenShift Local (CRC) single-node clusters as KubeVirt VMs and builds CRC
//! golden disks inside the management cluster.
//!
//! Layout (see `docs/architecture.md`):
//! - [`api`]: the CRD types, their admission rules and the condition vocabulary (no I/O).
//! - [`contract`]: what the operator and the Jobs it runs agree on (env, exit codes, messages).
//! - [`resources`]: pure builders and names of every object the operator creates.
//! - [`actors`]: the operator's supervision tree on a level-triggered core.
//!
//! The embedded control plane (`testenv/`) and the simulated management cluster with the demo
//! (`sim/`) are separate workspace crates for tests and the demo; this crate depends on neither.

pub mod actors;
pub mod agent;
pub mod api;
pub mod apidocs;
pub mod cdi;
pub mod contract;
pub mod crdgen;
pub mod events;
pub mod guest;
pub mod identity;
pub mod jobs;
pub mod kubevirt;
pub mod manifests;
pub mod metrics;
pub mod operator;
pub mod resources;
pub mod route;
pub mod text;
pub mod tools;
pub mod write;
