//! The `guestcluster.opdev.io/v1alpha1` API: CRD types, admission rules (OpenAPI + CEL, no
//! webhook) and the vocabulary shared by controllers and users (labels, conditions, reasons).
//!
//! Nothing in here performs I/O; the types are what `guestcluster crdgen` turns into `crds/`.

// kube's derive takes one `printcolumn(...)` / `validation = ...` attribute per entry, which
// clippy mistakes for duplicates.
#![allow(clippy::duplicated_attributes)]

pub mod bundle;
pub mod common;
pub mod conditions;
pub mod duration;
pub mod instance;
pub mod labels;
pub mod lease;
pub mod pool;
pub mod template;

pub use bundle::{CRCBundle, CRCBundleSpec, CRCBundleStatus};
pub use common::{Arch, ClusterType, LocalRef};
pub use instance::{ClusterInstance, ClusterInstanceSpec, ClusterInstanceStatus};
pub use lease::{ClusterLease, ClusterLeaseSpec, ClusterLeaseStatus};
pub use pool::{ClusterPool, ClusterPoolSpec, ClusterPoolStatus};
pub use template::ClusterTemplate;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// API group of every kind in this crate.
pub const GROUP: &str = "guestcluster.opdev.io";
/// The only served (and stored) version.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` as written in manifests and owner references.
pub const API_VERSION: &str = "guestcluster.opdev.io/v1alpha1";

/// Every CRD this operator owns, in a stable order (the order of files under `crds/`).
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        CRCBundle::crd(),
        ClusterInstance::crd(),
        ClusterLease::crd(),
        ClusterPool::crd(),
    ]
}
