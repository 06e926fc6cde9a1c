//! The CRCBundles the operator creates on pools' behalf: which `crcVersion`s it may create one
//! for, and on which StorageClass (when one nobody refers to any more is removed is the bundle's
//! own decision, `actors::bundle::collect`). A tenant's pool
//! thus cannot make the operator fill shared storage with downloads of its choosing.

use crate::api::CRCBundle;
use crate::api::template::ClusterTemplate;
use crate::resources::pool::pool_bundle;
pub use crate::resources::pool::{DEFAULT_GC_GRACE, PoolBundles, VersionPatterns};

/// The CRCBundle a pool with this template ensures: only for a `crcVersion` (non-empty) that
/// the policy allows, never with `crcBundleRef`; on the policy's StorageClass.
pub fn bundle_for(template: &ClusterTemplate, policy: &PoolBundles) -> Option<CRCBundle> {
    if template.crc_bundle_ref().is_some() {
        return None;
    }
    let version = template.crc_version()?;
    policy
        .crc_versions
        .allows(version)
        .then(|| pool_bundle(version, template.arch(), policy.storage_class.clone()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bundle_only_for_an_allowed_crc_version_on_the_policys_storage_class() {
        let template: ClusterTemplate = serde_json::from_value(json!({
            "crcVersion": "4.22.7", "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4,
            "storageClassName": "tenant-choice"}))
        .unwrap();
        let allow_all = PoolBundles {
            crc_versions: VersionPatterns::parse("*"),
            storage_class: Some("shared-ceph".into()),
            ..Default::default()
        };
        let bundle = bundle_for(&template, &allow_all).expect("a bundle for crcVersion");
        assert_eq!(
            bundle.spec.storage_class_name.as_deref(),
            Some("shared-ceph"),
            "never the template's class"
        );
        assert!(
            bundle_for(&template, &PoolBundles::default()).is_none(),
            "no version is allowed by default"
        );
        let only_4_21 = PoolBundles {
            crc_versions: VersionPatterns::parse("4.21.*"),
            ..Default::default()
        };
        assert!(bundle_for(&template, &only_4_21).is_none());
        let mut both = template.clone();
        both.crc_bundle_ref = Some(crate::api::common::LocalRef::new("custom"));
        assert!(bundle_for(&both, &allow_all).is_none());
        let mut empty = template;
        empty.crc_version = Some(String::new());
        assert!(bundle_for(&empty, &allow_all).is_none(), "empty crcVersion");
    }
}
