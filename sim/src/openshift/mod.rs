//! The OpenShift API of a simulated CRC guest: per-guest PKI, minimal OpenShift CRDs, and a
//! guest cluster (kube-apiserver + simulation controllers) that runs while the guest's kubelet
//! does.

pub mod cluster;
pub mod crds;
pub mod link;
pub mod persist;
pub mod pki;

pub use cluster::{ClusterSpec, GuestCluster, GuestView};
pub use pki::GuestPki;
