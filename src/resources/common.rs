//! Pieces every builder uses: labels, owner references.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, EnvVar, SecurityContext, VolumeMount};
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

/// UID of `obj`'s controller (its owner reference with `controller: true`).
pub fn controller_uid<K: Resource>(obj: &K) -> Option<&str> {
    obj.meta()
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// Whether the object with UID `owner_uid` controls `obj`: only such objects are ours to use,
/// repair or delete (a same-named object may belong to someone else or a deleted namesake).
pub fn is_controlled_by<K: Resource>(obj: &K, owner_uid: &str) -> bool {
    !owner_uid.is_empty() && controller_uid(obj) == Some(owner_uid)
}

/// A controller owner reference to `owner` (which must have been read from the API: it needs a
/// UID). `blockOwnerDeletion` stays unset: the operator's RBAC need not include `finalizers`.
pub fn controller_ref<K: Resource<DynamicType = ()>>(owner: &K) -> Option<OwnerReference> {
    let mut reference = owner.controller_owner_ref(&())?;
    reference.block_owner_deletion = None;
    Some(reference)
}

/// The container of one of our Jobs: `guestcluster <subcommand>` from `image`, with the
/// termination message the operator reads back (the file, or the log tail if the process died
/// before writing it) and no privilege escalation.
pub fn job_container(
    name: &str,
    image: &str,
    subcommand: &str,
    env: Vec<EnvVar>,
    mounts: Vec<VolumeMount>,
) -> Container {
    Container {
        name: name.to_owned(),
        image: Some(image.to_owned()),
        args: Some(vec![subcommand.to_owned()]),
        env: Some(env),
        volume_mounts: Some(mounts),
        termination_message_path: Some(crate::contract::termination::DEFAULT_PATH.to_owned()),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            ..Default::default()
        }),
        ..Default::default()
    }
}
