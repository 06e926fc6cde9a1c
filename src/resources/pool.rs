//! Objects a ClusterPool makes (`docs/operations.md`, "ClusterPool"): its instances `<pool>-<N>`
//! and the CRCBundle of its template's `crcVersion`, and the labels that make an instance a
//! member of the pool.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::{Resource, ResourceExt};

use super::bundle::published_bundle_name;
use crate::api::bundle::DEFAULT_GOLDEN_VOLUME_SIZE;
use crate::api::common::{Arch, LocalRef};
use crate::api::instance::{ClusterInstance, ClusterInstanceSpec};
use crate::api::labels::{CREATED_FOR, CREATED_FOR_POOLS, MANAGED_BY, MANAGED_BY_OPERATOR, POOL};
use crate::api::pool::ClusterPool;
use crate::api::{CRCBundle, CRCBundleSpec};

/// Whether `instance` belongs to the pool named `pool`: it carries the pool label and the
/// managed-by label of the operator (how upstream lists a pool's instances).
pub fn is_member(pool: &str, instance: &ClusterInstance) -> bool {
    let labels = instance.labels();
    labels.get(POOL).is_some_and(|v| v == pool)
        && labels
            .get(MANAGED_BY)
            .is_some_and(|v| v == MANAGED_BY_OPERATOR)
}

/// The label selector listing the members of the pool named `pool` (see [`is_member`]).
pub fn member_selector(pool: &str) -> String {
    format!("{MANAGED_BY}={MANAGED_BY_OPERATOR},{POOL}={pool}")
}

/// `<pool>-<N>` with the smallest non-negative `N` no member of `pool` in `instances` (deleting
/// ones included) is named with.
pub fn instance_name(pool: &str, instances: &[ClusterInstance]) -> String {
    let prefix = format!("{pool}-");
    let used: BTreeSet<u64> = instances
        .iter()
        .filter(|i| is_member(pool, i))
        .filter_map(|i| i.name_any().strip_prefix(&prefix)?.parse().ok())
        .collect();
    let n = (0..).find(|n| !used.contains(n)).unwrap_or_default();
    format!("{prefix}{n}")
}

/// A new instance of `pool` named `name`: pool label, managed-by label, controller owner
/// reference to the pool, `type: crc`, `poolRef` and the pool's template verbatim.
pub fn new_instance(pool: &ClusterPool, name: &str) -> ClusterInstance {
    let pool_name = pool.name_any();
    let labels = BTreeMap::from([
        (POOL.to_owned(), pool_name.clone()),
        (MANAGED_BY.to_owned(), MANAGED_BY_OPERATOR.to_owned()),
    ]);
    ClusterInstance {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            namespace: pool.namespace(),
            labels: Some(labels),
            owner_references: pool.controller_owner_ref(&()).map(|r| vec![r]),
            ..ObjectMeta::default()
        },
        spec: ClusterInstanceSpec {
            type_: pool.spec.type_,
            pool_ref: Some(LocalRef::new(pool_name)),
            template: pool.spec.template.clone(),
        },
        status: None,
    }
}

/// The operator's policy for the bundles it creates for pools (`--pool-crc-versions`,
/// `--pool-bundle-storage-class`, `--pool-bundle-gc-grace`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PoolBundles {
    /// The `crcVersion`s a pool may have a CRCBundle created for.
    pub crc_versions: VersionPatterns,
    /// StorageClass of a created bundle's volumes; `None` is the cluster's default class.
    pub storage_class: Option<String>,
    /// How long a created bundle stays once no pool or instance refers to it.
    pub gc_grace: Duration,
}

/// One hour: long enough for a pool to be deleted and made again (a rename, a Helm upgrade)
/// without downloading its bundle again.
pub const DEFAULT_GC_GRACE: Duration = Duration::from_secs(3600);

impl Default for PoolBundles {
    /// Safe by default: no version is allowed until the administrator says which.
    fn default() -> Self {
        Self {
            crc_versions: VersionPatterns::default(),
            storage_class: None,
            gc_grace: DEFAULT_GC_GRACE,
        }
    }
}

/// A list of version patterns, `*` matching any run of characters (`4.22.*`, `4.21.3`, `*`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VersionPatterns(Vec<String>);

impl VersionPatterns {
    /// From a comma-separated list; blanks are dropped, so an empty value allows nothing.
    pub fn parse(list: &str) -> Self {
        Self(
            list.split(',')
                .map(str::trim)
                .filter(|p| !p.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    pub fn allows(&self, version: &str) -> bool {
        self.0
            .iter()
            .any(|p| glob(p.as_bytes(), version.as_bytes()))
    }
}

impl std::fmt::Display for VersionPatterns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.0.is_empty() {
            f.write_str("none")
        } else {
            f.write_str(&self.0.join(","))
        }
    }
}

/// `*`-only glob matching.
fn glob(pattern: &[u8], text: &[u8]) -> bool {
    match pattern.split_first() {
        None => text.is_empty(),
        Some((b'*', rest)) => (0..=text.len()).any(|i| glob(rest, &text[i..])),
        Some((c, rest)) => text.first() == Some(c) && glob(rest, &text[1..]),
    }
}

/// The CRCBundle made for pools that ask for `crcVersion` `version`: cluster-scoped, shared, no
/// owner reference, labelled as made for pools, on `storage_class` (the operator's policy, never
/// a template's: the first tenant to ask must not choose where everyone's bundle lives). Which
/// versions get one is the pool actor's policy ([`crate::actors::pool::bundles`]).
pub fn pool_bundle(version: &str, arch: Arch, storage_class: Option<String>) -> CRCBundle {
    let spec = CRCBundleSpec {
        version: Some(version.to_owned()),
        arch,
        bundle_url: None,
        sha256_url: None,
        allow_http: false,
        storage_class_name: storage_class,
        golden_volume_size: DEFAULT_GOLDEN_VOLUME_SIZE.to_owned(),
        build: None,
    };
    let mut bundle = CRCBundle::new(&published_bundle_name(version, arch), spec);
    bundle.metadata.labels = Some(BTreeMap::from([(
        CREATED_FOR.to_owned(),
        CREATED_FOR_POOLS.to_owned(),
    )]));
    bundle
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::api::common::ClusterType;

    fn pool(template: serde_json::Value) -> ClusterPool {
        serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterPool",
            "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid"},
            "spec": {"type": "crc", "minSize": 1, "maxSize": 2, "template": template},
        }))
        .unwrap()
    }

    fn crc_pool() -> ClusterPool {
        pool(json!({"crcVersion": "4.22.7", "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}))
    }

    #[test]
    fn new_instance_carries_labels_owner_and_template() {
        let p = crc_pool();
        let i = new_instance(&p, "p-0");
        assert_eq!(i.namespace().as_deref(), Some("ns"));
        assert_eq!(i.labels().get(POOL).map(String::as_str), Some("p"));
        assert_eq!(
            i.labels().get(MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY_OPERATOR)
        );
        let owner = &i.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ClusterPool", "pool-uid", Some(true))
        );
        assert_eq!(i.spec.type_, ClusterType::Crc);
        assert_eq!(i.spec.pool_ref, Some(LocalRef::new("p")));
        assert_eq!(i.spec.template, p.spec.template);
        assert!(is_member("p", &i));
        assert!(!is_member("q", &i));
        assert_eq!(
            member_selector("p"),
            format!("{MANAGED_BY}={MANAGED_BY_OPERATOR},{POOL}=p")
        );
    }

    #[test]
    fn instance_names_fill_the_smallest_gap_among_members() {
        let p = crc_pool();
        let members = [new_instance(&p, "p-0"), new_instance(&p, "p-2")];
        assert_eq!(instance_name("p", &members), "p-1");
        let mut stranger = new_instance(&p, "p-1");
        stranger.labels_mut().remove(MANAGED_BY);
        assert_eq!(
            instance_name("p", &[members[0].clone(), stranger]),
            "p-1",
            "an unmanaged namesake does not take a number"
        );
        assert_eq!(instance_name("p", &[]), "p-0");
    }

    #[test]
    fn patterns_match_whole_versions_with_star_wildcards() {
        let p = VersionPatterns::parse(" 4.22.*, 4.21.3 ,,");
        assert!(p.allows("4.22.7"));
        assert!(p.allows("4.22."));
        assert!(p.allows("4.21.3"));
        assert!(!p.allows("4.21.30"), "whole versions only");
        assert!(!p.allows("14.22.7"));
        assert!(!p.allows("4.99.1"));
        assert!(VersionPatterns::parse("*").allows("anything"));
        assert!(
            !VersionPatterns::parse("").allows("4.22.7"),
            "empty allows none"
        );
        assert!(!PoolBundles::default().crc_versions.allows("4.22.7"));
        assert_eq!(VersionPatterns::parse("").to_string(), "none");
        assert_eq!(p.to_string(), "4.22.*,4.21.3");
    }

    #[test]
    fn a_pool_bundle_is_shared_labelled_and_on_the_given_storage_class() {
        let bundle = pool_bundle("4.22.7", Arch::Amd64, Some("shared-ceph".into()));
        assert_eq!(
            bundle.spec.storage_class_name.as_deref(),
            Some("shared-ceph")
        );
        assert_eq!(bundle.labels()[CREATED_FOR], CREATED_FOR_POOLS);
        assert_eq!(
            bundle.name_any(),
            published_bundle_name("4.22.7", Arch::Amd64)
        );
        assert_eq!(bundle.spec.version.as_deref(), Some("4.22.7"));
        assert!(bundle.owner_references().is_empty(), "shared, no owner");
    }
}
