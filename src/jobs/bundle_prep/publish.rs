//! Publication of the key Secret and the metadata ConfigMap, owned by the CRCBundle.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::Api;

use super::{FIELD_MANAGER, PrepError, PrivateKey};
use crate::api::labels;
use crate::contract::bundle_prep::{
    CM_DISK_SHA256, CM_DISK_VIRTUAL_SIZE, CM_OCP_VERSION, CM_SHA256, SECRET_KEY,
};

/// What is published, and where.
pub struct Publication<'a> {
    pub namespace: &'a str,
    pub bundle_name: &'a str,
    pub bundle_uid: &'a str,
    pub secret_name: &'a str,
    pub configmap_name: &'a str,
    pub key: &'a PrivateKey,
    pub ocp_version: &'a str,
    pub sha256: &'a str,
    pub disk_sha256: &'a str,
    pub disk_virtual_size: u64,
}

/// The controller reference to the CRCBundle. No `blockOwnerDeletion`: setting it needs
/// permission on the bundle's finalizers, which the prep Job's account does not have.
pub fn owner_reference(bundle_name: &str, bundle_uid: &str) -> OwnerReference {
    OwnerReference {
        api_version: "guestcluster.opdev.io/v1alpha1".into(),
        kind: "CRCBundle".into(),
        name: bundle_name.into(),
        uid: bundle_uid.into(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

fn metadata(p: &Publication<'_>, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(p.namespace.into()),
        labels: Some(BTreeMap::from([
            (
                labels::MANAGED_BY.to_owned(),
                labels::MANAGED_BY_OPERATOR.to_owned(),
            ),
            (labels::CRC_BUNDLE.to_owned(), p.bundle_name.to_owned()),
        ])),
        owner_references: Some(vec![owner_reference(p.bundle_name, p.bundle_uid)]),
        ..ObjectMeta::default()
    }
}

/// The key Secret (type Opaque, key `id_ecdsa`). Never log it.
pub fn secret(p: &Publication<'_>) -> Secret {
    Secret {
        metadata: metadata(p, p.secret_name),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            SECRET_KEY.to_owned(),
            ByteString(p.key.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// The metadata ConfigMap.
pub fn config_map(p: &Publication<'_>) -> ConfigMap {
    ConfigMap {
        metadata: metadata(p, p.configmap_name),
        data: Some(BTreeMap::from([
            (CM_OCP_VERSION.to_owned(), p.ocp_version.to_owned()),
            (CM_SHA256.to_owned(), p.sha256.to_owned()),
            (CM_DISK_SHA256.to_owned(), p.disk_sha256.to_owned()),
            (
                CM_DISK_VIRTUAL_SIZE.to_owned(),
                p.disk_virtual_size.to_string(),
            ),
        ])),
        ..ConfigMap::default()
    }
}

/// Server-side applies the Secret, then the ConfigMap (field manager
/// `guestcluster-bundle-prep`, forced).
pub async fn publish(p: &Publication<'_>) -> Result<(), PrepError> {
    let client = kube::Client::try_default().await.map_err(|e| {
        PrepError::PublishFailed(format!("no Kubernetes client configuration: {e}"))
    })?;
    let secrets = Api::<Secret>::namespaced(client.clone(), p.namespace);
    crate::write::apply(&secrets, p.secret_name, &secret(p), FIELD_MANAGER)
        .await
        .map_err(|e| {
            PrepError::PublishFailed(format!(
                "applying Secret {}/{}: {e}",
                p.namespace, p.secret_name
            ))
        })?;
    let config_maps = Api::<ConfigMap>::namespaced(client, p.namespace);
    crate::write::apply(
        &config_maps,
        p.configmap_name,
        &config_map(p),
        FIELD_MANAGER,
    )
    .await
    .map_err(|e| {
        PrepError::PublishFailed(format!(
            "applying ConfigMap {}/{}: {e}",
            p.namespace, p.configmap_name
        ))
    })?;
    tracing::info!(
        "published Secret {}/{} and ConfigMap {}/{}",
        p.namespace,
        p.secret_name,
        p.namespace,
        p.configmap_name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_carry_the_values_and_the_controller_reference() {
        let key = super::super::private_key(
            b"-----BEGIN OPENSSH PRIVATE KEY-----\nk\n-----END OPENSSH PRIVATE KEY-----\n".to_vec(),
        )
        .unwrap();
        let p = Publication {
            namespace: "ops",
            bundle_name: "crc-4.16.0-amd64",
            bundle_uid: "uid-1",
            secret_name: "crc-4.16.0-amd64-ssh-key",
            configmap_name: "crc-4.16.0-amd64-metadata",
            key: &key,
            ocp_version: "4.16.0",
            sha256: "aa",
            disk_sha256: "bb",
            disk_virtual_size: 268435456,
        };
        let secret = serde_json::to_value(secret(&p)).unwrap();
        assert_eq!(secret["apiVersion"], "v1");
        assert_eq!(secret["kind"], "Secret");
        assert_eq!(secret["type"], "Opaque");
        assert_eq!(secret["metadata"]["namespace"], "ops");
        let owner = &secret["metadata"]["ownerReferences"][0];
        assert_eq!(owner["kind"], "CRCBundle");
        assert_eq!(owner["apiVersion"], "guestcluster.opdev.io/v1alpha1");
        assert_eq!(owner["uid"], "uid-1");
        assert_eq!(owner["controller"], true);
        assert!(owner.get("blockOwnerDeletion").is_none());
        assert!(secret["data"]["id_ecdsa"].as_str().is_some());

        let cm = serde_json::to_value(config_map(&p)).unwrap();
        assert_eq!(cm["kind"], "ConfigMap");
        assert_eq!(
            cm["data"],
            serde_json::json!({"ocpVersion": "4.16.0", "sha256": "aa", "diskSHA256": "bb", "diskVirtualSize": "268435456"})
        );
        assert_eq!(
            cm["metadata"]["labels"]["opdev.io/crc-bundle"],
            "crc-4.16.0-amd64"
        );
    }
}
