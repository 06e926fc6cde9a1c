//! Objects a ClusterLease makes (`docs/operations.md`, "ClusterLease"): its copy of the bound
//! instance's kubeconfig, `<lease>-kubeconfig`.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::ResourceExt;

use super::instance::KUBECONFIG_KEY;
use crate::api::conditions::{self, types};
use crate::api::labels::{MANAGED_BY, MANAGED_BY_OPERATOR};
use crate::api::lease::{ClusterLease, ClusterLeaseStatus, LeasePhase};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// Name of the lease's copy of the kubeconfig: `<lease>-kubeconfig`.
pub fn kubeconfig_secret_name(lease: &str) -> String {
    format!("{lease}-kubeconfig")
}

/// The lease's copy of a kubeconfig Secret's `data`: type Opaque, controlled by the lease
/// (`owner`), so it is deleted with the lease.
pub fn kubeconfig_copy(
    lease: &ClusterLease,
    owner: OwnerReference,
    data: &BTreeMap<String, ByteString>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(kubeconfig_secret_name(&lease.name_any())),
            namespace: lease.namespace(),
            labels: Some(copy_labels()),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".to_owned()),
        data: Some(data.clone()),
        ..Secret::default()
    }
}

/// `existing` turned into the lease's copy of `data`: `owner` added unless it is there already,
/// our label added, the data replaced (its resourceVersion is kept, as a precondition).
pub fn adopted_kubeconfig_copy(
    existing: &Secret,
    owner: OwnerReference,
    data: &BTreeMap<String, ByteString>,
) -> Secret {
    let mut adopted = existing.clone();
    if !existing
        .owner_references()
        .iter()
        .any(|r| r.uid == owner.uid)
    {
        adopted
            .metadata
            .owner_references
            .get_or_insert_with(Vec::new)
            .push(owner);
    }
    adopted
        .metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .extend(copy_labels());
    adopted.data = Some(data.clone());
    adopted.string_data = None;
    adopted
}

fn copy_labels() -> BTreeMap<String, String> {
    BTreeMap::from([(MANAGED_BY.to_owned(), MANAGED_BY_OPERATOR.to_owned())])
}

/// Data of a kubeconfig Secret, for tests and tools.
pub fn kubeconfig_data(kubeconfig: &str) -> BTreeMap<String, ByteString> {
    BTreeMap::from([(
        KUBECONFIG_KEY.to_owned(),
        ByteString(kubeconfig.as_bytes().to_vec()),
    )])
}

/// The status of a lease that stays Pending with `Bound=False reason`.
pub fn unbound_status(
    lease: &ClusterLease,
    reason: &str,
    message: &str,
    now: Time,
) -> ClusterLeaseStatus {
    let mut status = lease.status.clone().unwrap_or_default();
    status.phase = Some(LeasePhase::Pending);
    conditions::set(
        &mut status.conditions,
        conditions::new(
            types::BOUND,
            false,
            reason,
            message,
            lease.metadata.generation,
            now,
        ),
    );
    status
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn lease() -> ClusterLease {
        serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterLease",
            "metadata": {"name": "l", "namespace": "ns", "uid": "uid-l"},
            "spec": {"poolRef": {"name": "p"}},
        }))
        .unwrap()
    }

    fn owner(uid: &str) -> OwnerReference {
        OwnerReference {
            api_version: "guestcluster.opdev.io/v1alpha1".into(),
            kind: "ClusterLease".into(),
            name: "l".into(),
            uid: uid.into(),
            controller: Some(true),
            ..OwnerReference::default()
        }
    }

    #[test]
    fn the_copy_is_opaque_labelled_and_owned_by_the_lease() {
        let data = kubeconfig_data("cfg");
        let copy = kubeconfig_copy(&lease(), owner("uid-l"), &data);
        assert_eq!(copy.name_any(), "l-kubeconfig");
        assert_eq!(copy.namespace().as_deref(), Some("ns"));
        assert_eq!(copy.type_.as_deref(), Some("Opaque"));
        assert_eq!(copy.data, Some(data));
        assert_eq!(
            copy.labels().get(MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY_OPERATOR)
        );
        assert_eq!(copy.owner_references(), [owner("uid-l")]);
    }

    #[test]
    fn adoption_adds_the_owner_once_and_keeps_the_resource_version() {
        let mut existing = kubeconfig_copy(&lease(), owner("uid-l"), &kubeconfig_data("old"));
        existing.metadata.resource_version = Some("7".into());
        existing.string_data = Some(BTreeMap::from([("x".into(), "y".into())]));
        let again = adopted_kubeconfig_copy(&existing, owner("uid-l"), &kubeconfig_data("new"));
        assert_eq!(again.owner_references().len(), 1);
        assert_eq!(again.data, Some(kubeconfig_data("new")));
        assert_eq!(again.string_data, None);
        assert_eq!(again.resource_version().as_deref(), Some("7"));

        existing.metadata.owner_references = None;
        existing.metadata.labels = None;
        let adopted = adopted_kubeconfig_copy(&existing, owner("uid-l"), &kubeconfig_data("new"));
        assert_eq!(adopted.owner_references(), [owner("uid-l")]);
        assert_eq!(
            adopted.labels().get(MANAGED_BY).map(String::as_str),
            Some(MANAGED_BY_OPERATOR)
        );
    }
}
