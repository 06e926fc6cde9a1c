//! The handoff Secret, the agent's last step (`docs/architecture.md`, "The crc-agent"): the only
//! thing the agent tells the operator.
//! `<instance>-crc-raw-kubeconfig-<vmiUID>` with the kubeconfig, the OpenShift version and the
//! VMI UID, owned by the ClusterInstance.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource as _;
use kube::api::Api;

use crate::api::instance::ClusterInstance;
use crate::api::labels;
use crate::contract::agent::{KUBECONFIG_KEY, OCP_VERSION_KEY, VMI_UID_KEY};

const SECRET_TYPE: &str = "Opaque";

/// Why the handoff could not be published.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("handoff Secret {namespace}/{name}: {source}")]
    Api {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("handoff Secret {namespace}/{name} exists and is not ours: {reason}")]
    Foreign {
        namespace: String,
        name: String,
        reason: String,
    },
}

/// What the agent hands over.
#[derive(Clone, PartialEq, Eq)]
pub struct Handoff {
    pub kubeconfig: String,
    pub ocp_version: String,
    pub vmi_uid: String,
}

// The kubeconfig holds the admin key: keep it out of `{:?}`.
impl std::fmt::Debug for Handoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handoff")
            .field("ocp_version", &self.ocp_version)
            .field("vmi_uid", &self.vmi_uid)
            .finish_non_exhaustive()
    }
}

/// Who the handoff belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner {
    pub instance_name: String,
    pub namespace: String,
    /// Empty for Jobs of operators that did not pass `INSTANCE_UID` (legacy: no owner reference).
    pub instance_uid: String,
}

/// `<instance>-crc-raw-kubeconfig-<vmiUID>`.
pub fn secret_name(instance: &str, vmi_uid: &str) -> String {
    format!("{instance}-crc-raw-kubeconfig-{vmi_uid}")
}

/// The Secret as the agent publishes it.
pub fn desired(owner: &Owner, handoff: &Handoff) -> Secret {
    let owner_references = (!owner.instance_uid.is_empty()).then(|| {
        vec![OwnerReference {
            api_version: ClusterInstance::api_version(&()).into_owned(),
            kind: ClusterInstance::kind(&()).into_owned(),
            name: owner.instance_name.clone(),
            uid: owner.instance_uid.clone(),
            // Unset like upstream: the agent's account may not update the instance's finalizers,
            // which blockOwnerDeletion would require.
            block_owner_deletion: None,
            controller: Some(true),
        }]
    });
    Secret {
        metadata: ObjectMeta {
            name: Some(secret_name(&owner.instance_name, &handoff.vmi_uid)),
            namespace: Some(owner.namespace.clone()),
            labels: Some(BTreeMap::from([
                (
                    labels::MANAGED_BY.to_string(),
                    labels::MANAGED_BY_AGENT.to_string(),
                ),
                (
                    labels::CLUSTER_INSTANCE.to_string(),
                    owner.instance_name.clone(),
                ),
            ])),
            owner_references,
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(data(handoff)),
        ..Default::default()
    }
}

fn data(handoff: &Handoff) -> BTreeMap<String, ByteString> {
    BTreeMap::from([
        (
            KUBECONFIG_KEY.to_string(),
            ByteString(handoff.kubeconfig.as_bytes().to_vec()),
        ),
        (
            OCP_VERSION_KEY.to_string(),
            ByteString(handoff.ocp_version.as_bytes().to_vec()),
        ),
        (
            VMI_UID_KEY.to_string(),
            ByteString(handoff.vmi_uid.as_bytes().to_vec()),
        ),
    ])
}

/// What to do about an existing Secret of that name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Ours and already right (a retried Job).
    UpToDate,
    /// Ours with other data: update it.
    Update,
    /// Not ours: leave it alone.
    Foreign(String),
}

/// Upstream's ownership rule: with an instance UID, an owner reference to that ClusterInstance
/// (kind, name and UID); without one (legacy), no owners at all and our labels.
pub fn decide(existing: &Secret, owner: &Owner, handoff: &Handoff) -> Decision {
    let owners = existing
        .metadata
        .owner_references
        .as_deref()
        .unwrap_or_default();
    if owner.instance_uid.is_empty() {
        let labels = existing.metadata.labels.clone().unwrap_or_default();
        let ours = owners.is_empty()
            && labels.get(labels::MANAGED_BY).map(String::as_str) == Some(labels::MANAGED_BY_AGENT)
            && labels.get(labels::CLUSTER_INSTANCE) == Some(&owner.instance_name);
        if !ours {
            return Decision::Foreign(
                "legacy handoff must have no owner and the crc-agent labels".into(),
            );
        }
    } else {
        let kind = ClusterInstance::kind(&());
        let ours = owners.iter().any(|r| {
            r.kind == kind && r.name == owner.instance_name && r.uid == owner.instance_uid
        });
        if !ours {
            let found: Vec<String> = owners
                .iter()
                .map(|r| format!("{}/{} ({})", r.kind, r.name, r.uid))
                .collect();
            return Decision::Foreign(format!(
                "owners [{}], expected ClusterInstance/{} ({})",
                found.join(", "),
                owner.instance_name,
                owner.instance_uid
            ));
        }
    }
    let type_ = existing.type_.as_deref().unwrap_or(SECRET_TYPE);
    if type_ != SECRET_TYPE {
        // A Secret's type cannot be updated, and the agent may not delete Secrets.
        return Decision::Foreign(format!("type {type_}, expected {SECRET_TYPE}"));
    }
    if existing.data.as_ref() == Some(&data(handoff)) {
        Decision::UpToDate
    } else {
        Decision::Update
    }
}

/// Creates the handoff Secret, or brings our existing one up to date; returns its name.
pub async fn publish(
    client: &kube::Client,
    owner: &Owner,
    handoff: &Handoff,
) -> Result<String, Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &owner.namespace);
    let secret = desired(owner, handoff);
    let name = secret.metadata.name.clone().unwrap_or_default();
    let api_error = |source| Error::Api {
        namespace: owner.namespace.clone(),
        name: name.clone(),
        source,
    };
    if crate::write::create_new(&secrets, &secret)
        .await
        .map_err(api_error)?
    {
        return Ok(name);
    }
    let existing = secrets.get(&name).await.map_err(api_error)?;
    match decide(&existing, owner, handoff) {
        Decision::UpToDate => Ok(name),
        Decision::Foreign(reason) => Err(Error::Foreign {
            namespace: owner.namespace.clone(),
            name,
            reason,
        }),
        Decision::Update => {
            let mut updated = existing;
            updated.data = secret.data;
            crate::write::replace(&secrets, &updated)
                .await
                .map_err(api_error)?;
            Ok(name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner(uid: &str) -> Owner {
        Owner {
            instance_name: "demo".into(),
            namespace: "team".into(),
            instance_uid: uid.into(),
        }
    }

    fn handoff() -> Handoff {
        Handoff {
            kubeconfig: "apiVersion: v1\n".into(),
            ocp_version: "4.22.7".into(),
            vmi_uid: "vmi-1".into(),
        }
    }

    #[test]
    fn desired_secret_has_the_contract_fields() {
        let secret = desired(&owner("inst-uid"), &handoff());
        assert_eq!(
            secret.metadata.name.as_deref(),
            Some("demo-crc-raw-kubeconfig-vmi-1")
        );
        let labels = secret.metadata.labels.clone().unwrap();
        assert_eq!(labels[labels::MANAGED_BY], "crc-agent");
        assert_eq!(labels[labels::CLUSTER_INSTANCE], "demo");
        let refs = secret.metadata.owner_references.clone().unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(refs[0].kind, "ClusterInstance");
        assert_eq!(refs[0].api_version, "guestcluster.opdev.io/v1alpha1");
        assert_eq!(refs[0].uid, "inst-uid");
        assert_eq!(refs[0].block_owner_deletion, None);
        let data = secret.data.unwrap();
        assert_eq!(data[VMI_UID_KEY].0, b"vmi-1");
        assert_eq!(data[OCP_VERSION_KEY].0, b"4.22.7");
        assert!(!format!("{:?}", handoff()).contains("apiVersion"));
    }

    #[test]
    fn legacy_secret_has_no_owner() {
        let secret = desired(&owner(""), &handoff());
        assert!(secret.metadata.owner_references.is_none());
    }

    #[test]
    fn our_secret_is_updated_only_when_it_differs() {
        let ours = desired(&owner("u"), &handoff());
        assert_eq!(decide(&ours, &owner("u"), &handoff()), Decision::UpToDate);
        let mut changed = handoff();
        changed.ocp_version = "4.22.8".into();
        assert_eq!(decide(&ours, &owner("u"), &changed), Decision::Update);
        let legacy = desired(&owner(""), &handoff());
        assert_eq!(decide(&legacy, &owner(""), &handoff()), Decision::UpToDate);
        let mut typed = ours.clone();
        typed.type_ = Some("kubernetes.io/tls".into());
        assert!(matches!(
            decide(&typed, &owner("u"), &handoff()),
            Decision::Foreign(_)
        ));
    }

    #[test]
    fn foreign_or_old_owner_secrets_are_refused() {
        let old_owner = desired(&owner("old-uid"), &handoff());
        assert!(matches!(
            decide(&old_owner, &owner("new-uid"), &handoff()),
            Decision::Foreign(_)
        ));
        let mut unowned = desired(&owner(""), &handoff());
        unowned.metadata.labels = None;
        assert!(matches!(
            decide(&unowned, &owner(""), &handoff()),
            Decision::Foreign(_)
        ));
        let owned = desired(&owner("u"), &handoff());
        assert!(matches!(
            decide(&owned, &owner(""), &handoff()),
            Decision::Foreign(_)
        ));
    }
}
