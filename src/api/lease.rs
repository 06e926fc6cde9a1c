//! `ClusterLease`: a claim on one instance of a pool, optionally for a limited time.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{ClusterType, LocalRef};

/// Desired state of a ClusterLease.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "guestcluster.opdev.io",
    version = "v1alpha1",
    kind = "ClusterLease",
    plural = "clusterleases",
    shortname = "clease",
    namespaced,
    status = "ClusterLeaseStatus",
    doc = "ClusterLease claims one Ready instance of a ClusterPool in the same namespace; deleting the lease (or its TTL expiring) releases the instance, which is then replaced.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Instance",
        type_ = "string",
        json_path = ".status.instanceRef.name"
    ),
    printcolumn(name = "Version", type_ = "string", json_path = ".status.ocpVersion"),
    printcolumn(name = "Topology", type_ = "string", json_path = ".status.topology"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLeaseSpec {
    /// The pool (same namespace) to take an instance from.
    pub pool_ref: LocalRef,
    /// How long the lease lasts once bound: a Go duration such as `2h`, `90m` or `1h30m`.
    /// Omitted, zero (`0`, `0s`) or negative: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    // Exactly what Go's time.ParseDuration accepts: the pattern is its grammar (sign, fractions,
    // units ns/us/µs/μs/ms/s/m/h, a lone 0) and gives the message; CEL's duration() is
    // ParseDuration itself and rejects what overflows an int64 of nanoseconds.
    #[x_kube(validation = Rule::new("self.matches('^[-+]?(0|(([0-9]+(\\\\.[0-9]*)?|\\\\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$') && duration(self) == duration(self)").message("ttl must be a Go duration such as 2h, 90m or 1h30m; 0 means no TTL"))]
    pub ttl: Option<String>,
    /// Free text: who or what asked for the lease (a CI job URL, a person).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_by: Option<String>,
}

/// Observed state of a ClusterLease.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLeaseStatus {
    /// Pending, Bound, Releasing, Released or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<LeasePhase>,
    /// The bound instance: the single source of truth for the binding.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance_ref: Option<LocalRef>,
    /// Secret `<lease>-kubeconfig` with the key `kubeconfig` for the bound guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret_ref: Option<LocalRef>,
    /// OpenShift version of the bound guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocp_version: Option<String>,
    /// Topology of the bound guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<ClusterType>,
    /// The bound guest's API URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_endpoint: Option<String>,
    /// When the lease was bound; the TTL counts from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(description = "When the lease was bound; the TTL counts from here.")]
    pub bound_time: Option<Time>,
    /// `Bound`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Lifecycle phase of a ClusterLease.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum LeasePhase {
    Pending,
    Bound,
    Releasing,
    Released,
    Failed,
}

/// Names of the instances claimed by any of `leases`, deleting ones included (a deleting lease
/// still holds its instance until the release has deleted it).
pub fn claimed(leases: &[ClusterLease]) -> std::collections::BTreeSet<String> {
    leases
        .iter()
        .filter_map(ClusterLease::instance)
        .map(str::to_owned)
        .collect()
}

impl ClusterLease {
    /// Whether the lease waits for an instance: phase unset or `Pending`.
    pub fn is_pending(&self) -> bool {
        matches!(
            self.status.as_ref().and_then(|s| s.phase),
            None | Some(LeasePhase::Pending)
        )
    }

    /// The instance the lease's status names.
    pub fn instance(&self) -> Option<&str> {
        self.status
            .as_ref()
            .and_then(|s| s.instance_ref.as_ref())
            .and_then(LocalRef::name)
    }

    /// The instance the lease claims, for that instance's `status.leaseRef` (informational only,
    /// as in the Go operator): the one its status names, unless the lease is being deleted.
    pub fn claim(&self) -> Option<&str> {
        self.metadata
            .deletion_timestamp
            .is_none()
            .then(|| self.instance())
            .flatten()
    }
}

/// A lease of pool `p` in namespace `ns` for unit tests, with our finalizer, in `phase`,
/// naming `instance`.
#[cfg(test)]
pub mod fixtures {
    use super::*;

    pub fn lease(name: &str, phase: Option<LeasePhase>, instance: Option<&str>) -> ClusterLease {
        let mut l: ClusterLease = serde_json::from_value(serde_json::json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                         "generation": 1,
                         "finalizers": [crate::api::labels::FINALIZER_RELEASE]},
            "spec": {"poolRef": {"name": "p"}},
        }))
        .unwrap();
        if phase.is_some() || instance.is_some() {
            l.status = Some(ClusterLeaseStatus {
                phase,
                instance_ref: instance.map(LocalRef::new),
                ..ClusterLeaseStatus::default()
            });
        }
        l
    }
}
