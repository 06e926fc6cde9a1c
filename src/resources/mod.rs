//! Pure builders: a spec plus identities in, a Kubernetes object out. No I/O, so every object the
//! operator creates is unit-tested (golden YAML under `src/resources/golden/`).

pub mod build;
pub mod bundle;
pub mod common;
pub mod instance;
pub mod lease;
pub mod pool;
pub mod profile;
