//! OpenShift's SecurityContextConstraints, as far as pods of ours meet them (docs/simulation.md,
//! "Security context constraints"): every namespace gets a UID range, a group range and an SELinux
//! level ([`allocator`], playing cluster-policy-controller), and every new pod is admitted under
//! `restricted-v2` ([`restricted_v2`], playing the `security.openshift.io/SecurityContextConstraint`
//! admission plugin), which fills in what the pod leaves unset from its namespace's ranges and
//! refuses what lies outside them.

pub mod allocator;
pub mod crd;
pub mod restricted_v2;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// The namespace annotations SCC admission reads.
pub const UID_RANGE: &str = "openshift.io/sa.scc.uid-range";
pub const SUPPLEMENTAL_GROUPS: &str = "openshift.io/sa.scc.supplemental-groups";
pub const MCS: &str = "openshift.io/sa.scc.mcs";
/// The pod annotation naming the SCC a pod was admitted under.
pub const POD_SCC: &str = "openshift.io/scc";

/// A block of IDs, as the annotations write it: `<first>/<size>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    pub first: u32,
    pub size: u32,
}

impl Block {
    pub fn parse(text: &str) -> Option<Self> {
        let (first, size) = text.split_once('/')?;
        let block = Block {
            first: first.trim().parse().ok()?,
            size: size.trim().parse().ok()?,
        };
        (block.size > 0 && block.first.checked_add(block.size - 1).is_some()).then_some(block)
    }

    pub fn last(self) -> u32 {
        self.first + (self.size - 1)
    }

    pub fn contains(self, id: i64) -> bool {
        i64::from(self.first) <= id && id <= i64::from(self.last())
    }
}

impl std::fmt::Display for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.first, self.size)
    }
}

/// What SCC admission knows of a namespace: its annotations, as written (a missing or unreadable
/// one is `None` and refuses pods that need it).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NamespaceRanges {
    pub uids: Option<String>,
    pub groups: Option<String>,
    pub mcs: Option<String>,
}

impl NamespaceRanges {
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Self {
        Self {
            uids: annotations.get(UID_RANGE).cloned(),
            groups: annotations.get(SUPPLEMENTAL_GROUPS).cloned(),
            mcs: annotations.get(MCS).cloned(),
        }
    }
}

/// The namespaces' ranges as the allocator last saw them, shared with the admission webhook
/// (which runs on a thread of its own and cannot ask the API server in the middle of a review).
#[derive(Clone, Debug, Default)]
pub struct Namespaces(Arc<RwLock<BTreeMap<String, NamespaceRanges>>>);

impl Namespaces {
    pub fn get(&self, namespace: &str) -> Option<NamespaceRanges> {
        let map = self.0.read().unwrap_or_else(|e| e.into_inner());
        map.get(namespace).cloned()
    }

    pub fn set(&self, namespace: &str, ranges: NamespaceRanges) {
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        map.insert(namespace.to_owned(), ranges);
    }

    pub fn remove(&self, namespace: &str) {
        let mut map = self.0.write().unwrap_or_else(|e| e.into_inner());
        map.remove(namespace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_parse_as_the_annotations_write_them() {
        let block = Block::parse("1000650000/10000").unwrap();
        assert_eq!((block.first, block.last()), (1000650000, 1000659999));
        assert!(block.contains(1000650000) && block.contains(1000659999));
        assert!(!block.contains(1001) && !block.contains(1000660000));
        assert_eq!(block.to_string(), "1000650000/10000");
        assert_eq!(Block::parse("1000650000"), None);
        assert_eq!(Block::parse("x/1"), None);
        assert_eq!(Block::parse("5/0"), None);
    }
}
