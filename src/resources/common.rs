//! Pieces every builder uses: labels, owner references.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::api::labels;

/// The labels every operator-created object of a bundle carries.
pub fn bundle_labels(bundle: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_OPERATOR.to_owned(),
        ),
        (labels::CRC_BUNDLE.to_owned(), bundle.to_owned()),
    ])
}

/// A controller owner reference to `owner` (which must have been read from the API: it needs a
/// UID). `blockOwnerDeletion` stays unset: the operator's RBAC need not include `finalizers`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = None;
    Some(reference)
}
