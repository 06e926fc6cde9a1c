//! `ClusterPool`: keeps a number of guest clusters of one template ready to be leased.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use super::common::ClusterType;
use super::template::ClusterTemplate;

/// Desired state of a ClusterPool.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "guestcluster.opdev.io",
    version = "v1alpha1",
    kind = "ClusterPool",
    plural = "clusterpools",
    shortname = "cpool",
    namespaced,
    status = "ClusterPoolStatus",
    doc = "ClusterPool keeps guest clusters of one template provisioned so that ClusterLeases can bind them quickly.",
    printcolumn(name = "Type", type_ = "string", json_path = ".spec.type"),
    printcolumn(name = "Max", type_ = "integer", json_path = ".spec.maxSize"),
    printcolumn(
        name = "Total",
        type_ = "integer",
        json_path = ".status.totalInstances"
    ),
    printcolumn(
        name = "Terminating",
        type_ = "integer",
        json_path = ".status.terminatingInstances"
    ),
    printcolumn(
        name = "Available",
        type_ = "integer",
        json_path = ".status.availableInstances"
    ),
    printcolumn(
        name = "Leased",
        type_ = "integer",
        json_path = ".status.leasedInstances"
    ),
    printcolumn(
        name = "Capacity",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"CapacityAvailable\")].reason"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(
    validation = Rule::new("self.maxSize >= self.minSize").message("maxSize must be greater than or equal to minSize"),
    validation = Rule::new("self.maxSize >= self.warmSpares").message("maxSize must be greater than or equal to warmSpares")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPoolSpec {
    /// Topology of the pool's clusters: `crc` or `hcp` (accepted, not provisioned).
    #[serde(rename = "type")]
    pub type_: ClusterType,
    /// Most instances the pool may have, leased or not.
    #[schemars(range(min = 1))]
    pub max_size: i32,
    /// Fewest instances the pool keeps, leased or not.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub min_size: i32,
    /// Unleased Ready instances the pool keeps on top of the leased ones, within maxSize.
    #[serde(default)]
    #[schemars(range(min = 0))]
    pub warm_spares: i32,
    /// The template each instance is created from (copied verbatim).
    pub template: ClusterTemplate,
}

/// Observed state of a ClusterPool.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ClusterPoolStatus {
    /// Instances of the pool, terminating ones included (they still hold resources).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total_instances: Option<i32>,
    /// Instances of the pool being torn down.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating_instances: Option<i32>,
    /// Ready instances no lease claims.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub available_instances: Option<i32>,
    /// Instances claimed by a lease.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leased_instances: Option<i32>,
    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `CapacityAvailable`, `ProvisioningAllowed` and `BundleAvailable`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}
