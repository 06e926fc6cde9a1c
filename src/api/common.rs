//! Small types shared by several kinds.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// CPU architecture of a CRC bundle and its guests.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum Arch {
    #[default]
    #[serde(rename = "amd64")]
    Amd64,
    #[serde(rename = "arm64")]
    Arm64,
}

impl Arch {
    /// The spelling used in names, URLs and manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Arch::Amd64 => "amd64",
            Arch::Arm64 => "arm64",
        }
    }
}

impl std::fmt::Display for Arch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Topology of a guest cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
pub enum ClusterType {
    /// OpenShift Local (CRC): one single-node OpenShift VM per instance.
    #[serde(rename = "crc")]
    Crc,
    /// Hosted control planes (HyperShift). Accepted for compatibility; guestcluster reports
    /// `Ready=False reason=TopologyUnsupported` and does nothing else.
    #[serde(rename = "hcp")]
    Hcp,
}

impl ClusterType {
    pub fn as_str(self) -> &'static str {
        match self {
            ClusterType::Crc => "crc",
            ClusterType::Hcp => "hcp",
        }
    }
}

/// A reference to an object by name, in a namespace implied by the referring field: Kubernetes'
/// `LocalObjectReference`, declared the way the Go operator declares its references. `name` may be
/// omitted or empty, which means the reference is not set: Go clients write an unset non-pointer
/// reference as `{}`. Read it with [`LocalRef::name`].
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[schemars(extend("x-kubernetes-map-type" = "atomic"))]
pub struct LocalRef {
    /// Name of the referenced object; empty means the reference is not set.
    #[serde(default)]
    pub name: String,
}

impl LocalRef {
    pub fn new(name: impl Into<String>) -> Self {
        Self { name: name.into() }
    }

    /// The name, or `None` when the reference is not set (empty name).
    pub fn name(&self) -> Option<&str> {
        Some(self.name.as_str()).filter(|n| !n.is_empty())
    }
}

/// Name and UID of an object, so that a replaced object (same name, new UID) is noticed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ObjectIdentity {
    /// Name of the object.
    pub name: String,
    /// UID of the object; empty until the object has been created.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub uid: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_reference_names_nothing() {
        let unset: LocalRef = serde_json::from_str("{}").unwrap();
        assert_eq!(unset, LocalRef::default());
        assert_eq!(unset.name(), None);
        assert_eq!(LocalRef::new("").name(), None);
        assert_eq!(LocalRef::new("pool").name(), Some("pool"));
    }
}
