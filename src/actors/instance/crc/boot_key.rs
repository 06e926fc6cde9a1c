//! Boot-key binding (`docs/architecture.md`, "ClusterInstance"): before any disk exists, an
//! instance records which bundle disk and SSH key it boots with. Afterwards the instance keeps its
//! own copy of the key and never re-resolves the bundle; a lost copy is restored only when the
//! bundle's disk and key are provably the ones recorded, because a different key could not log in
//! to the cloned disk — or worse, would belong to a different disk.
//!
//! Downloaded bundles bind to their archive `sha256`; built bundles to their raw `diskSHA256`.
//!
//! The status only names the disk and key; it is not trusted for where they are or whose they
//! are (anyone who may write `crcbundles/status` could point it at another disk): they are
//! taken from the operator namespace and must be controlled by the bundle, as its prep Job or
//! build makes them.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
use kube::ResourceExt;
use sha2::{Digest, Sha256};

use crate::api::bundle::{BundlePhase, BundleSource, CRCBundle};
use crate::api::common::LocalRef;
use crate::api::instance::CRCBootKeyStatus;
use crate::resources::common::is_controlled_by;

/// The key of the private key in the bundle's Secret and in the instance's copy.
pub const KEY: &str = "id_ecdsa";

/// Why the boot key cannot be bound, verified or restored. Reported as `BootKeyUnavailable`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("CRCBundle {bundle} is Ready but does not record its {missing}")]
    RefsIncomplete { bundle: String, missing: String },
    #[error(
        "CRCBundle {bundle}'s status places its {what} in namespace {named}, but a bundle's disk and key live in the operator namespace {namespace}; the status is wrong"
    )]
    OutsideOperatorNamespace {
        bundle: String,
        what: &'static str,
        named: String,
        namespace: String,
    },
    #[error(
        "{what} {namespace}/{name} that CRCBundle {bundle}'s status names is not controlled by the bundle; it is not the bundle's, and no instance boots from it"
    )]
    NotTheBundles {
        bundle: String,
        what: &'static str,
        namespace: String,
        name: String,
    },
    #[error("golden PVC {namespace}/{name} of CRCBundle {bundle} does not exist")]
    GoldenDiskMissing {
        bundle: String,
        namespace: String,
        name: String,
    },
    #[error("SSH key Secret {namespace}/{name} of CRCBundle {bundle} is missing or has no {KEY}")]
    KeyMissing {
        bundle: String,
        namespace: String,
        name: String,
    },
    #[error(
        "the bundle disk or key changed since this instance was created ({what}); refusing recovery: \
         delete and recreate the instance to use the current bundle"
    )]
    Changed { what: String },
    #[error(
        "DataVolume {name} exists but no boot key was recorded; automatic recovery is unsafe: \
         delete the DataVolume or the instance"
    )]
    UnboundDisk { name: String },
    #[error(
        "Secret {name} holds a different key than the one this instance was bound to; delete it to \
         have it restored from the bundle"
    )]
    CopyMismatch { name: String },
    #[error("Secret {name} exists but is not controlled by this instance; rename or delete it")]
    CopyForeign { name: String },
    #[error("no boot key is recorded for this Ready instance; automatic recovery is unsafe")]
    NotRecorded,
}

/// What the resolver found for a binding: the bundle (Ready) and the objects its status names,
/// looked up in `namespace` (the operator namespace).
pub struct Source<'a> {
    pub bundle: &'a CRCBundle,
    pub namespace: &'a str,
    pub pvc: Option<&'a PersistentVolumeClaim>,
    pub secret: Option<&'a Secret>,
}

/// Lowercase hex SHA-256 of the raw private-key bytes.
pub fn key_sha256(key: &[u8]) -> String {
    Sha256::digest(key)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The private key bytes of a Secret under [`KEY`], when present and non-empty.
pub fn key_bytes(secret: &Secret) -> Option<&[u8]> {
    secret
        .data
        .as_ref()?
        .get(KEY)
        .map(|ByteString(b)| b.as_slice())
        .filter(|b| !b.is_empty())
}

/// Verifies a Ready bundle's disk and key and describes them as a binding.
pub fn bind(source: &Source<'_>) -> Result<CRCBootKeyStatus, Error> {
    let bundle = source.bundle;
    let name = bundle.name_any();
    let status = bundle.status.clone().unwrap_or_default();
    let incomplete = |missing: &str| Error::RefsIncomplete {
        bundle: name.clone(),
        missing: missing.to_owned(),
    };
    if status.phase != Some(BundlePhase::Ready) {
        return Err(incomplete("Ready phase"));
    }
    let built = status.source == Some(BundleSource::Build);
    let bundle_sha256 = status.sha256.clone().unwrap_or_default();
    let disk_sha256 = status.disk_sha256.clone().filter(|s| !s.is_empty());
    if built && disk_sha256.is_none() {
        return Err(incomplete("diskSHA256"));
    }
    if !built && bundle_sha256.is_empty() {
        return Err(incomplete("sha256"));
    }
    let pvc_name = status
        .qcow2_pvc_ref
        .as_ref()
        .and_then(LocalRef::name)
        .map(str::to_owned)
        .ok_or_else(|| incomplete("golden PVC (qcow2PVCRef)"))?;
    let named = status
        .qcow2_pvc_namespace
        .clone()
        .ok_or_else(|| incomplete("golden PVC namespace"))?;
    if named != source.namespace {
        return Err(Error::OutsideOperatorNamespace {
            bundle: name.clone(),
            what: "golden PVC and key",
            named,
            namespace: source.namespace.to_owned(),
        });
    }
    let pvc_namespace = named;
    let bundle_uid = bundle.uid().unwrap_or_default();
    let not_the_bundles = |what, object_name: &str| Error::NotTheBundles {
        bundle: name.clone(),
        what,
        namespace: pvc_namespace.clone(),
        name: object_name.to_owned(),
    };
    let secret_name = status
        .ssh_key_secret_ref
        .as_ref()
        .and_then(LocalRef::name)
        .map(str::to_owned)
        .ok_or_else(|| incomplete("SSH key Secret (sshKeySecretRef)"))?;
    let pvc = source
        .pvc
        .filter(|p| p.uid().is_some_and(|u| !u.is_empty()))
        .ok_or_else(|| Error::GoldenDiskMissing {
            bundle: name.clone(),
            namespace: pvc_namespace.clone(),
            name: pvc_name.clone(),
        })?;
    if !is_controlled_by(pvc, &bundle_uid) {
        return Err(not_the_bundles("golden PVC", &pvc_name));
    }
    let key_missing = || Error::KeyMissing {
        bundle: name.clone(),
        namespace: pvc_namespace.clone(),
        name: secret_name.clone(),
    };
    let secret = source
        .secret
        .filter(|s| s.uid().is_some_and(|u| !u.is_empty()))
        .ok_or_else(key_missing)?;
    if !is_controlled_by(secret, &bundle_uid) {
        return Err(not_the_bundles("SSH key Secret", &secret_name));
    }
    let key = key_bytes(secret).ok_or_else(key_missing)?;
    Ok(CRCBootKeyStatus {
        bundle_uid: bundle.uid().unwrap_or_default(),
        bundle_sha256,
        disk_sha256: if built { disk_sha256 } else { None },
        pvc_namespace: pvc_namespace.clone(),
        pvc_name,
        pvc_uid: pvc.uid().unwrap_or_default(),
        storage_class_name: bundle
            .spec
            .storage_class_name
            .clone()
            .filter(|s| !s.is_empty()),
        secret_namespace: secret.namespace().unwrap_or(pvc_namespace),
        secret_name,
        secret_uid: secret.uid().unwrap_or_default(),
        key_sha256: key_sha256(key),
    })
}

/// The source still is exactly what `binding` recorded (every field, UIDs and digests included).
pub fn verify_unchanged(binding: &CRCBootKeyStatus, source: &Source<'_>) -> Result<(), Error> {
    let current = bind(source).map_err(|e| Error::Changed {
        what: e.to_string(),
    })?;
    let differences: Vec<&str> = [
        ("bundle UID", current.bundle_uid != binding.bundle_uid),
        (
            "bundle sha256",
            current.bundle_sha256 != binding.bundle_sha256,
        ),
        ("disk sha256", current.disk_sha256 != binding.disk_sha256),
        (
            "golden PVC",
            current.pvc_namespace != binding.pvc_namespace
                || current.pvc_name != binding.pvc_name
                || current.pvc_uid != binding.pvc_uid,
        ),
        (
            "key Secret",
            current.secret_namespace != binding.secret_namespace
                || current.secret_name != binding.secret_name
                || current.secret_uid != binding.secret_uid,
        ),
        ("key", current.key_sha256 != binding.key_sha256),
    ]
    .into_iter()
    .filter_map(|(what, differs)| differs.then_some(what))
    .collect();
    if differences.is_empty() {
        Ok(())
    } else {
        Err(Error::Changed {
            what: format!("{} differ", differences.join(", ")),
        })
    }
}

/// Whether the bundle an instance is bound to still publishes the disk it was cloned from: the
/// digest it was bound to (a built bundle's `diskSHA256`, a downloaded one's archive `sha256`)
/// against the one the Ready bundle publishes now. `None` while the bundle is not Ready (it
/// cannot say yet). A bundle deleted and made again with the same disk is current.
pub fn freshness(binding: &CRCBootKeyStatus, bundle: &CRCBundle) -> Option<Freshness> {
    let status = bundle.status.as_ref()?;
    if status.phase != Some(BundlePhase::Ready) {
        return None;
    }
    let published = if status.source == Some(BundleSource::Build) {
        status.disk_sha256.clone()
    } else {
        status.sha256.clone()
    }
    .unwrap_or_default();
    let bound = binding
        .disk_sha256
        .clone()
        .unwrap_or_else(|| binding.bundle_sha256.clone());
    Some(if published == bound {
        Freshness::Current { digest: bound }
    } else {
        Freshness::Stale { bound, published }
    })
}

/// See [`freshness`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Freshness {
    Current { digest: String },
    Stale { bound: String, published: String },
}

/// An existing instance-owned copy is ours and holds the bound key.
pub fn check_copy(
    copy: &Secret,
    instance_uid: &str,
    binding: &CRCBootKeyStatus,
) -> Result<(), Error> {
    let name = copy.name_any();
    if !crate::resources::common::is_controlled_by(copy, instance_uid) {
        return Err(Error::CopyForeign { name });
    }
    match key_bytes(copy) {
        Some(key) if key_sha256(key) == binding.key_sha256 => Ok(()),
        _ => Err(Error::CopyMismatch { name }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::bundle::{CRCBundleSpec, CRCBundleStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
    use std::collections::BTreeMap;

    fn bundle(source: BundleSource) -> CRCBundle {
        let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
            "version": "4.22.7",
            "storageClassName": "fast"
        }))
        .unwrap();
        let mut bundle = CRCBundle::new("crc-4.22.7-amd64", spec);
        bundle.metadata.uid = Some("bundle-uid".into());
        bundle.status = Some(CRCBundleStatus {
            phase: Some(BundlePhase::Ready),
            source: Some(source),
            qcow2_pvc_ref: Some(LocalRef {
                name: "crc-4.22.7-amd64-golden".into(),
            }),
            qcow2_pvc_namespace: Some("guestcluster-system".into()),
            ssh_key_secret_ref: Some(LocalRef {
                name: "crc-4.22.7-amd64-ssh".into(),
            }),
            sha256: (source == BundleSource::Download).then(|| "a".repeat(64)),
            disk_sha256: Some("d".repeat(64)),
            ..Default::default()
        });
        bundle
    }

    /// A controller reference to the bundle of [`bundle`], as its prep Job or build sets.
    fn the_bundles() -> Option<Vec<OwnerReference>> {
        Some(vec![OwnerReference {
            api_version: "guestcluster.opdev.io/v1alpha1".into(),
            kind: "CRCBundle".into(),
            name: "crc-4.22.7-amd64".into(),
            uid: "bundle-uid".into(),
            controller: Some(true),
            ..Default::default()
        }])
    }

    fn pvc(uid: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("crc-4.22.7-amd64-golden".into()),
                namespace: Some("guestcluster-system".into()),
                uid: Some(uid.into()),
                owner_references: the_bundles(),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn secret(uid: &str, key: &[u8]) -> Secret {
        Secret {
            metadata: ObjectMeta {
                name: Some("crc-4.22.7-amd64-ssh".into()),
                namespace: Some("guestcluster-system".into()),
                uid: Some(uid.into()),
                owner_references: the_bundles(),
                ..Default::default()
            },
            data: Some(BTreeMap::from([(KEY.into(), ByteString(key.to_vec()))])),
            ..Default::default()
        }
    }

    #[test]
    fn a_downloaded_bundle_binds_to_its_archive_digest() {
        let (b, p, s) = (
            bundle(BundleSource::Download),
            pvc("pvc-1"),
            secret("s-1", b"KEY"),
        );
        let binding = bind(&Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: Some(&p),
            secret: Some(&s),
        })
        .unwrap();
        assert_eq!(binding.bundle_sha256, "a".repeat(64));
        assert_eq!(binding.disk_sha256, None);
        assert_eq!(binding.pvc_uid, "pvc-1");
        assert_eq!(binding.secret_uid, "s-1");
        assert_eq!(binding.storage_class_name.as_deref(), Some("fast"));
        assert_eq!(binding.key_sha256, key_sha256(b"KEY"));
    }

    #[test]
    fn a_built_bundle_binds_to_its_disk_digest() {
        let (b, p, s) = (
            bundle(BundleSource::Build),
            pvc("pvc-1"),
            secret("s-1", b"KEY"),
        );
        let binding = bind(&Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: Some(&p),
            secret: Some(&s),
        })
        .unwrap();
        assert_eq!(binding.bundle_sha256, "");
        assert_eq!(binding.disk_sha256, Some("d".repeat(64)));
    }

    #[test]
    fn binding_needs_the_disk_and_a_non_empty_key() {
        let b = bundle(BundleSource::Download);
        let p = pvc("pvc-1");
        let no_disk = bind(&Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: None,
            secret: Some(&secret("s", b"K")),
        });
        assert!(matches!(no_disk, Err(Error::GoldenDiskMissing { .. })));
        let empty_key = bind(&Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: Some(&p),
            secret: Some(&secret("s", b"")),
        });
        assert!(matches!(empty_key, Err(Error::KeyMissing { .. })));
        let mut no_sha = bundle(BundleSource::Download);
        no_sha.status.as_mut().unwrap().sha256 = None;
        let err = bind(&Source {
            namespace: "guestcluster-system",
            bundle: &no_sha,
            pvc: Some(&p),
            secret: Some(&secret("s", b"K")),
        })
        .unwrap_err();
        assert!(err.to_string().contains("sha256"), "{err}");
    }

    #[test]
    fn recovery_refuses_a_replaced_key_or_disk() {
        let b = bundle(BundleSource::Download);
        let (p, s) = (pvc("pvc-1"), secret("s-1", b"KEY"));
        let source = Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: Some(&p),
            secret: Some(&s),
        };
        let binding = bind(&source).unwrap();
        assert_eq!(verify_unchanged(&binding, &source), Ok(()));

        let replaced_key = secret("s-2", b"OTHER");
        let err = verify_unchanged(
            &binding,
            &Source {
                namespace: "guestcluster-system",
                bundle: &b,
                pvc: Some(&p),
                secret: Some(&replaced_key),
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("key Secret, key differ"), "{err}");
        assert!(err.to_string().contains("refusing recovery"), "{err}");

        let new_disk = pvc("pvc-2");
        let err = verify_unchanged(
            &binding,
            &Source {
                namespace: "guestcluster-system",
                bundle: &b,
                pvc: Some(&new_disk),
                secret: Some(&s),
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("golden PVC differ"), "{err}");
    }

    #[test]
    fn a_copy_must_be_ours_and_hold_the_bound_key() {
        let b = bundle(BundleSource::Download);
        let (p, s) = (pvc("pvc-1"), secret("s-1", b"KEY"));
        let binding = bind(&Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: Some(&p),
            secret: Some(&s),
        })
        .unwrap();
        let mut copy = secret("copy", b"KEY");
        copy.metadata.name = Some("crc-1-crc-boot-key".into());
        assert!(matches!(
            check_copy(&copy, "inst-uid", &binding),
            Err(Error::CopyForeign { .. })
        ));
        copy.metadata.owner_references = Some(vec![OwnerReference {
            controller: Some(true),
            uid: "inst-uid".into(),
            ..Default::default()
        }]);
        assert_eq!(check_copy(&copy, "inst-uid", &binding), Ok(()));
        copy.data = Some(BTreeMap::from([(KEY.into(), ByteString(b"X".to_vec()))]));
        assert!(matches!(
            check_copy(&copy, "inst-uid", &binding),
            Err(Error::CopyMismatch { .. })
        ));
    }

    #[test]
    fn the_status_is_not_trusted_for_where_the_disk_is_or_whose_it_is() {
        let (b, p, s) = (
            bundle(BundleSource::Download),
            pvc("pvc-1"),
            secret("s-1", b"KEY"),
        );
        let source = |p, s| Source {
            namespace: "guestcluster-system",
            bundle: &b,
            pvc: Some(p),
            secret: Some(s),
        };
        // Another namespace in the status: refused before anything is looked at.
        let mut elsewhere = b.clone();
        elsewhere.status.as_mut().unwrap().qcow2_pvc_namespace = Some("tenant".into());
        let err = bind(&Source {
            bundle: &elsewhere,
            ..source(&p, &s)
        })
        .unwrap_err();
        assert!(
            matches!(&err, Error::OutsideOperatorNamespace { named, .. } if named == "tenant"),
            "{err}"
        );
        // Objects of the right names that the bundle does not control.
        let mut foreign = p.clone();
        foreign.metadata.owner_references = None;
        let err = bind(&source(&foreign, &s)).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::NotTheBundles {
                    what: "golden PVC",
                    ..
                }
            ),
            "{err}"
        );
        let mut foreign = s.clone();
        foreign.metadata.owner_references.as_mut().unwrap()[0].uid = "another-bundle".into();
        let err = bind(&source(&p, &foreign)).unwrap_err();
        assert!(
            matches!(
                &err,
                Error::NotTheBundles {
                    what: "SSH key Secret",
                    ..
                }
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains("not controlled by the bundle"),
            "{err}"
        );
        assert!(bind(&source(&p, &s)).is_ok());
    }
}
