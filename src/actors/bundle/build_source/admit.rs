//! Stage 0 of a build, Admit, as a pure function: the build's inputs as read from the operator
//! namespace in, their digests (never their contents) out, or the first input that is missing or
//! unusable, named with its object and key.
//!
//! An input is a build's only by consent: its object must carry the label
//! `guestcluster.opdev.io/build-input` with the bundle's name or `all`. Without it nothing of
//! the object is read further — whoever may create a CRCBundle could otherwise name any Secret of
//! the operator namespace (another bundle's key, the Helm release) and have it put into a Job,
//! onto a golden disk, or quoted by a parse error into a condition. Parse errors never quote
//! an input either: they name the document by index, kind and position.
//!
//! The digests go to `status.inputs` before any object of the attempt exists. Every later pass
//! that needs the contents admits them again and compares ([`Admitted::inputs`] with the recorded
//! ones): an input edited after the build started fails the attempt instead of building
//! something other than what the status says.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::api::bundle::{BuildInputs, BuildSpec, ManifestDigest, ManifestRef, ManifestSourceKind};
use crate::api::conditions::reasons;
use crate::api::labels::{BUILD_INPUT, BUILD_INPUT_ALL};
use crate::resources::profile::inputs::{self, PullSecret};
use crate::tools::release::{self, ReleaseRepositories};

/// The key of a pull secret Secret (`kubernetes.io/dockerconfigjson`).
pub const PULL_SECRET_KEY: &str = ".dockerconfigjson";

/// Most bytes the referenced manifests may hold together: they travel in the attempt's installer
/// Secret (1 MiB at most, with the pull secret twice, the profile's manifests and the Ignition
/// beside them), so more would fail hours later, at the Prepare stage.
pub const MAX_MANIFEST_BYTES: usize = 512 * 1024;

/// Why the inputs cannot start a build. Every message names the object (and key) and what to do;
/// none carries an input's contents.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error(
        "spec.build.releaseImage is in repository {repository}, which this operator does not build from (--build-release-repositories: {allowed}); a release is code the installer Job runs with the pull secret, so ask the operator's administrator to add the repository, or use one of those"
    )]
    ReleaseNotAllowed { repository: String, allowed: String },
    /// `object` is `<Kind> <namespace>/<name>`, `field` the spec field that names it.
    #[error(
        "{object} named in spec.build.{field} is not shared with CRCBundle {bundle}: {found}; label it {BUILD_INPUT}={bundle} (or {BUILD_INPUT}={BUILD_INPUT_ALL}) to let this bundle build with it"
    )]
    NotShared {
        field: &'static str,
        object: String,
        bundle: String,
        /// What the label says now.
        found: String,
    },
    #[error(
        "the manifests named in spec.build.installationManifestRefs and postInstallManifestRefs hold {bytes} bytes together, more than the {MAX_MANIFEST_BYTES} the build's installer Secret has room for; remove or shrink some"
    )]
    TooLarge { bytes: usize },
    #[error(
        "Secret {namespace}/{name} named in spec.build.pullSecretRef does not exist; create it with the key {PULL_SECRET_KEY}"
    )]
    PullSecretNotFound { namespace: String, name: String },
    #[error(
        "Secret {namespace}/{name} named in spec.build.pullSecretRef has no key {PULL_SECRET_KEY}; add the registry pull secret under that key"
    )]
    PullSecretKeyMissing { namespace: String, name: String },
    #[error(
        "the key {PULL_SECRET_KEY} of Secret {namespace}/{name} is not a registry pull secret: {problem}"
    )]
    PullSecretInvalid {
        namespace: String,
        name: String,
        problem: inputs::Error,
    },
    /// `object` is `<Kind> <namespace>/<name>`.
    #[error("{object} named in spec.build.{field} does not exist; create it")]
    ManifestSourceNotFound { field: &'static str, object: String },
    #[error(
        "{object} named in spec.build.{field} has no data keys; every key holds one YAML manifest stream"
    )]
    ManifestSourceEmpty { field: &'static str, object: String },
    #[error("key {key:?} of {object} (spec.build.{field}) is not a manifest stream: {problem}")]
    ManifestInvalid {
        field: &'static str,
        object: String,
        key: String,
        problem: String,
    },
}

impl Error {
    /// The condition reason of the failure.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::PullSecretNotFound { .. } | Error::ManifestSourceNotFound { .. } => {
                reasons::INPUT_NOT_FOUND
            }
            Error::PullSecretKeyMissing { .. } | Error::ManifestSourceEmpty { .. } => {
                reasons::INPUT_KEY_MISSING
            }
            Error::PullSecretInvalid { .. } => reasons::INVALID_PULL_SECRET,
            Error::ManifestInvalid { .. } => reasons::INVALID_MANIFEST,
            Error::NotShared { .. } => reasons::INPUT_NOT_SHARED,
            Error::TooLarge { .. } => reasons::INPUTS_TOO_LARGE,
            Error::ReleaseNotAllowed { .. } => reasons::RELEASE_NOT_ALLOWED,
        }
    }
}

/// A referenced Secret or ConfigMap as read: the value of its [`BUILD_INPUT`] label and its data
/// keys and values (a Secret's decoded).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Object {
    pub shared_with: Option<String>,
    pub data: BTreeMap<String, Vec<u8>>,
}

// An object's bytes never reach a log through `{:?}`: it may be a Secret no bundle may read.
impl std::fmt::Debug for Object {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Object")
            .field("shared_with", &self.shared_with)
            .field("keys", &self.data.keys().collect::<Vec<_>>())
            .finish()
    }
}

/// One referenced manifest source as read, or `None` when the object does not exist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    pub reference: ManifestRef,
    pub object: Option<Object>,
}

/// Everything Admit reads, in the order of the spec.
#[derive(Clone, Debug, Default)]
pub struct Read {
    /// The pull secret Secret, or `None` when it does not exist.
    pub pull_secret: Option<Object>,
    pub installation: Vec<Source>,
    pub post_install: Vec<Source>,
}

/// One manifest file an input holds: `<source>/<key>`, as the installer Job writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Manifest {
    pub source: String,
    pub key: String,
    pub text: String,
}

/// Admitted inputs: the digests for the status and the contents for the stages that use them.
#[derive(Clone, Debug)]
pub struct Admitted {
    pub inputs: BuildInputs,
    pub pull_secret: PullSecret,
    pub installation_manifests: Vec<Manifest>,
    pub post_install_manifests: Vec<Manifest>,
}

/// Checks and digests the inputs of `spec`, read from `namespace` for CRCBundle `bundle`; its
/// release must come from one of `releases`.
pub fn admit(
    spec: &BuildSpec,
    bundle: &str,
    namespace: &str,
    releases: &ReleaseRepositories,
    read: &Read,
) -> Result<Admitted, Error> {
    if !releases.allows(&spec.release_image) {
        return Err(Error::ReleaseNotAllowed {
            repository: release::repository(&spec.release_image).to_owned(),
            allowed: releases.list(),
        });
    }
    let secret_name = spec.pull_secret_ref.name.clone();
    let object = read
        .pull_secret
        .as_ref()
        .ok_or_else(|| Error::PullSecretNotFound {
            namespace: namespace.to_owned(),
            name: secret_name.clone(),
        })?;
    check_shared(
        object,
        bundle,
        "pullSecretRef",
        format!("Secret {namespace}/{secret_name}"),
    )?;
    let bytes = object
        .data
        .get(PULL_SECRET_KEY)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| Error::PullSecretKeyMissing {
            namespace: namespace.to_owned(),
            name: secret_name.clone(),
        })?;
    let pull_secret = std::str::from_utf8(bytes)
        .map_err(|_| inputs::Error::PullSecretNotJson)
        .and_then(PullSecret::parse)
        .map_err(|problem| Error::PullSecretInvalid {
            namespace: namespace.to_owned(),
            name: secret_name,
            problem,
        })?;
    let (installation_digests, installation_manifests) = manifest_sources(
        "installationManifestRefs",
        bundle,
        namespace,
        &read.installation,
    )?;
    let (post_install_digests, post_install_manifests) = manifest_sources(
        "postInstallManifestRefs",
        bundle,
        namespace,
        &read.post_install,
    )?;
    let total: usize = installation_manifests
        .iter()
        .chain(&post_install_manifests)
        .map(|m| m.text.len())
        .sum();
    if total > MAX_MANIFEST_BYTES {
        return Err(Error::TooLarge { bytes: total });
    }
    Ok(Admitted {
        inputs: BuildInputs {
            pull_secret_sha256: Some(hex_sha256(bytes)),
            installation_manifests: installation_digests,
            post_install_manifests: post_install_digests,
            profile: Some(spec.profile.as_str().to_owned()),
        },
        pull_secret,
        installation_manifests,
        post_install_manifests,
    })
}

/// Whether `object` consents to `bundle`'s use: its [`BUILD_INPUT`] label names the bundle or
/// says [`BUILD_INPUT_ALL`].
fn check_shared(
    object: &Object,
    bundle: &str,
    field: &'static str,
    name: String,
) -> Result<(), Error> {
    match object.shared_with.as_deref() {
        Some(value) if value == bundle || value == BUILD_INPUT_ALL => Ok(()),
        found => Err(Error::NotShared {
            field,
            object: name,
            bundle: bundle.to_owned(),
            found: match found {
                Some(other) => format!("its label {BUILD_INPUT} names {other:?}"),
                None => format!("it has no label {BUILD_INPUT}"),
            },
        }),
    }
}

fn manifest_sources(
    field: &'static str,
    bundle: &str,
    namespace: &str,
    sources: &[Source],
) -> Result<(Vec<ManifestDigest>, Vec<Manifest>), Error> {
    let mut digests = Vec::with_capacity(sources.len());
    let mut manifests = Vec::new();
    for source in sources {
        let kind = kind_name(source.reference.kind);
        let name = source.reference.name.clone();
        let object_name = format!("{kind} {namespace}/{name}");
        let object = source
            .object
            .as_ref()
            .ok_or_else(|| Error::ManifestSourceNotFound {
                field,
                object: object_name.clone(),
            })?;
        check_shared(object, bundle, field, object_name.clone())?;
        let data = &object.data;
        if data.is_empty() {
            return Err(Error::ManifestSourceEmpty {
                field,
                object: object_name,
            });
        }
        for (key, value) in data {
            let invalid = |problem: String| Error::ManifestInvalid {
                field,
                object: object_name.clone(),
                key: key.clone(),
                problem,
            };
            let text =
                std::str::from_utf8(value).map_err(|_| invalid("it is not UTF-8 text".into()))?;
            check_manifest_stream(text).map_err(invalid)?;
            manifests.push(Manifest {
                source: name.clone(),
                key: key.clone(),
                text: text.to_owned(),
            });
        }
        digests.push(ManifestDigest {
            name,
            kind: kind.to_owned(),
            sha256: data_sha256(data),
        });
    }
    Ok((digests, manifests))
}

/// A key must hold at least one object, and every object needs `apiVersion`, `kind` and
/// `metadata.name`: the installer and the guest API refuse anything less, hours later. A
/// problem is told by document index, kind and position only: parsers quote the text they
/// stumble on, which would carry an input's contents into a condition.
fn check_manifest_stream(text: &str) -> Result<(), String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| match e.location() {
            Some(at) => format!(
                "it is not YAML (line {}, column {})",
                at.line(),
                at.column()
            ),
            None => "it is not YAML".to_owned(),
        })?;
    let docs: Vec<serde_json::Value> = docs.into_iter().filter(|d| !d.is_null()).collect();
    if docs.is_empty() {
        return Err("it holds no YAML document".into());
    }
    for (index, doc) in docs.into_iter().enumerate() {
        let Some(kind) = doc["kind"]
            .as_str()
            .filter(|_| doc["apiVersion"].is_string())
            .map(str::to_owned)
        else {
            return Err(format!("document {index} has no apiVersion/kind"));
        };
        if doc["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            return Err(format!("document {index} ({kind}) has no metadata.name"));
        }
        if serde_json::from_value::<kube::api::DynamicObject>(doc).is_err() {
            return Err(format!(
                "document {index} ({kind}) is not a Kubernetes object: a field of its metadata has the wrong type"
            ));
        }
    }
    Ok(())
}

fn kind_name(kind: ManifestSourceKind) -> &'static str {
    match kind {
        ManifestSourceKind::ConfigMap => "ConfigMap",
        ManifestSourceKind::Secret => "Secret",
    }
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn hex_sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// SHA-256 over an object's data in key order, each key and value length-prefixed (8 bytes, big
/// endian), so no two different maps share a digest.
pub fn data_sha256(data: &BTreeMap<String, Vec<u8>>) -> String {
    let mut hasher = Sha256::new();
    for (key, value) in data {
        for part in [key.as_bytes(), value.as_slice()] {
            hasher.update((part.len() as u64).to_be_bytes());
            hasher.update(part);
        }
    }
    hex(&hasher.finalize())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NS: &str = "guestcluster-system";
    const PULL: &str = r#"{"auths":{"quay.io":{"auth":"c2VjcmV0"}}}"#;
    const MACHINECONFIG: &str = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-custom\n";

    fn spec() -> BuildSpec {
        serde_json::from_value(json!({"releaseImage": "quay.io/example/release:4.22",
            "pullSecretRef": {"name": "pull"},
            "installationManifestRefs": [{"name": "mcs"}],
            "postInstallManifestRefs": [{"name": "extra", "kind": "Secret"}]}))
        .unwrap()
    }

    const BUNDLE: &str = "b";

    /// An object shared with every bundle, holding `pairs`.
    fn data(pairs: &[(&str, &str)]) -> Option<Object> {
        Some(Object {
            shared_with: Some(BUILD_INPUT_ALL.to_owned()),
            data: pairs
                .iter()
                .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
                .collect(),
        })
    }

    fn read() -> Read {
        let spec = spec();
        Read {
            pull_secret: data(&[(PULL_SECRET_KEY, PULL)]),
            installation: vec![Source {
                reference: spec.installation_manifest_refs[0].clone(),
                object: data(&[("a.yaml", MACHINECONFIG)]),
            }],
            post_install: vec![Source {
                reference: spec.post_install_manifest_refs[0].clone(),
                object: data(&[(
                    "b.yaml",
                    "---\nkind: ConfigMap\napiVersion: v1\nmetadata: {name: x, namespace: demo}\n---\n",
                )]),
            }],
        }
    }

    fn admit(spec: &BuildSpec, ns: &str, read: &Read) -> Result<Admitted, Error> {
        super::admit(
            spec,
            BUNDLE,
            ns,
            &ReleaseRepositories::parse("quay.io/example/"),
            read,
        )
    }

    #[test]
    fn a_release_from_a_repository_the_operator_does_not_build_from_is_refused_first() {
        let openshift = ReleaseRepositories::default();
        let err = super::admit(&spec(), BUNDLE, NS, &openshift, &read()).unwrap_err();
        assert_eq!(err.reason(), reasons::RELEASE_NOT_ALLOWED);
        let message = err.to_string();
        assert!(
            message.contains("quay.io/example/release")
                && message.contains("quay.io/openshift-release-dev/ocp-release"),
            "{message}"
        );
        // Before any input is looked at.
        let err = super::admit(&spec(), BUNDLE, NS, &openshift, &Read::default()).unwrap_err();
        assert_eq!(err.reason(), reasons::RELEASE_NOT_ALLOWED);
    }

    #[test]
    fn admitted_inputs_are_digests_in_spec_order() {
        let admitted = admit(&spec(), NS, &read()).unwrap();
        let inputs = &admitted.inputs;
        assert_eq!(
            inputs.pull_secret_sha256.as_deref(),
            Some(hex_sha256(PULL.as_bytes()).as_str())
        );
        assert_eq!(inputs.profile.as_deref(), Some("crc-kubevirt-v1"));
        assert_eq!(inputs.installation_manifests[0].name, "mcs");
        assert_eq!(inputs.installation_manifests[0].kind, "ConfigMap");
        assert_eq!(inputs.post_install_manifests[0].kind, "Secret");
        assert_eq!(inputs.installation_manifests[0].sha256.len(), 64);
        assert_eq!(admitted.installation_manifests[0].key, "a.yaml");
        assert_eq!(admitted.post_install_manifests[0].source, "extra");
        // The status form carries no contents.
        let status = serde_json::to_string(inputs).unwrap();
        assert!(
            !status.contains("c2VjcmV0") && !status.contains("quay.io"),
            "{status}"
        );
    }

    #[test]
    fn an_edited_input_changes_its_digest() {
        let before = admit(&spec(), NS, &read()).unwrap().inputs;
        let mut edited = read();
        edited.installation[0].object = data(&[("a.yaml", &MACHINECONFIG.replace("99-", "98-"))]);
        assert_ne!(admit(&spec(), NS, &edited).unwrap().inputs, before);
        assert_eq!(admit(&spec(), NS, &read()).unwrap().inputs, before);
    }

    #[test]
    fn data_digest_separates_keys_from_values() {
        let one = data(&[("ab", "c")]).unwrap().data;
        let other = data(&[("a", "bc")]).unwrap().data;
        assert_ne!(data_sha256(&one), data_sha256(&other));
    }

    #[test]
    fn each_bad_input_names_its_object_key_and_reason() {
        type Case = (
            Box<dyn Fn(&mut Read)>,
            &'static str,
            &'static [&'static str],
        );
        let cases: Vec<Case> = vec![
            (
                Box::new(|r| r.pull_secret = None),
                reasons::INPUT_NOT_FOUND,
                &["Secret guestcluster-system/pull", "pullSecretRef"],
            ),
            (
                Box::new(|r| r.pull_secret = data(&[("other", PULL)])),
                reasons::INPUT_KEY_MISSING,
                &["Secret guestcluster-system/pull", ".dockerconfigjson"],
            ),
            (
                Box::new(|r| r.pull_secret = data(&[(PULL_SECRET_KEY, "{\"auths\":{}}")])),
                reasons::INVALID_PULL_SECRET,
                &["Secret guestcluster-system/pull", "no registry"],
            ),
            (
                Box::new(|r| r.pull_secret = data(&[(PULL_SECRET_KEY, "not json")])),
                reasons::INVALID_PULL_SECRET,
                &["not a JSON object"],
            ),
            (
                Box::new(|r| r.installation[0].object = None),
                reasons::INPUT_NOT_FOUND,
                &[
                    "ConfigMap guestcluster-system/mcs",
                    "installationManifestRefs",
                ],
            ),
            (
                Box::new(|r| r.post_install[0].object = data(&[])),
                reasons::INPUT_KEY_MISSING,
                &[
                    "Secret guestcluster-system/extra",
                    "postInstallManifestRefs",
                ],
            ),
            (
                Box::new(|r| r.installation[0].object = data(&[("a.yaml", "key: [unclosed")])),
                reasons::INVALID_MANIFEST,
                &[
                    "key \"a.yaml\"",
                    "ConfigMap guestcluster-system/mcs",
                    "not YAML (line",
                ],
            ),
            (
                Box::new(|r| r.pull_secret.as_mut().unwrap().shared_with = None),
                reasons::INPUT_NOT_SHARED,
                &[
                    "Secret guestcluster-system/pull",
                    "pullSecretRef",
                    "no label guestcluster.opdev.io/build-input",
                    "guestcluster.opdev.io/build-input=b ",
                ],
            ),
            (
                Box::new(|r| {
                    r.post_install[0].object.as_mut().unwrap().shared_with = Some("other".into())
                }),
                reasons::INPUT_NOT_SHARED,
                &[
                    "Secret guestcluster-system/extra",
                    "postInstallManifestRefs",
                    "names \"other\"",
                ],
            ),
            (
                Box::new(|r| {
                    let big = format!("{MACHINECONFIG}data: {}\n", "x".repeat(MAX_MANIFEST_BYTES));
                    r.installation[0].object = data(&[("a.yaml", &big)]);
                }),
                reasons::INPUTS_TOO_LARGE,
                &["524288"],
            ),
            (
                Box::new(|r| {
                    r.installation[0].object = data(&[("a.yaml", "metadata: {name: x}\n")])
                }),
                reasons::INVALID_MANIFEST,
                &["apiVersion/kind"],
            ),
            (
                Box::new(|r| {
                    r.installation[0].object =
                        data(&[("a.yaml", "apiVersion: v1\nkind: ConfigMap\n")])
                }),
                reasons::INVALID_MANIFEST,
                &["no metadata.name"],
            ),
            (
                Box::new(|r| r.installation[0].object = data(&[("a.yaml", "# only a comment\n")])),
                reasons::INVALID_MANIFEST,
                &["no YAML document"],
            ),
        ];
        for (index, (edit, reason, needles)) in cases.iter().enumerate() {
            let mut r = read();
            edit(&mut r);
            let err = admit(&spec(), NS, &r).expect_err(&format!("case {index}"));
            assert_eq!(err.reason(), *reason, "case {index}: {err}");
            let message = err.to_string();
            for needle in *needles {
                assert!(message.contains(needle), "case {index}: {message}");
            }
            assert!(
                !message.contains("c2VjcmV0"),
                "case {index} leaks: {message}"
            );
        }
    }

    #[test]
    fn an_object_named_for_this_bundle_is_shared_and_nothing_unshared_is_quoted() {
        let mut r = read();
        r.pull_secret.as_mut().unwrap().shared_with = Some(BUNDLE.into());
        assert!(admit(&spec(), NS, &r).is_ok());
        // An unshared object is refused before its contents are looked at: a broken one says
        // nothing of them either.
        const PLANTED: &str = "planted-value-8d1f";
        let mut r = read();
        r.installation[0].object = Some(Object {
            shared_with: None,
            data: BTreeMap::from([("a.yaml".into(), format!("x: [{PLANTED}").into_bytes())]),
        });
        let err = admit(&spec(), NS, &r).unwrap_err();
        assert_eq!(err.reason(), reasons::INPUT_NOT_SHARED);
        assert!(!err.to_string().contains(PLANTED), "{err}");
    }

    #[test]
    fn parse_errors_name_document_kind_and_position_never_the_text() {
        const PLANTED: &str = "planted-value-8d1f";
        let texts = [
            format!("key: [{PLANTED}"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {PLANTED}\n"),
            format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: {PLANTED}\n"),
            format!("{PLANTED}: 1\n"),
            format!("- {PLANTED}\n"),
        ];
        for text in texts {
            let problem = check_manifest_stream(&text).unwrap_err();
            assert!(!problem.contains(PLANTED), "{text:?}: {problem}");
        }
        let problem = check_manifest_stream(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  labels: 7\n",
        )
        .unwrap_err();
        assert_eq!(
            problem,
            "document 0 (ConfigMap) is not a Kubernetes object: a field of its metadata has the wrong type"
        );
    }

    #[test]
    fn debug_shows_no_input_bytes() {
        let read = Read {
            pull_secret: Some(Object {
                shared_with: None,
                data: BTreeMap::from([(
                    ".dockerconfigjson".to_owned(),
                    b"{\"auths\":{\"q\":{\"auth\":\"c2VjcmV0\"}}}".to_vec(),
                )]),
            }),
            installation: vec![Source {
                reference: spec().installation_manifest_refs[0].clone(),
                object: data(&[("a.yaml", "secret-ish: c2VjcmV0\n")]),
            }],
            ..Default::default()
        };
        let shown = format!("{read:?}");
        assert!(
            shown.contains(".dockerconfigjson") && shown.contains("a.yaml"),
            "{shown}"
        );
        assert!(
            !shown.contains("c2VjcmV0") && !shown.contains("99, 50"),
            "{shown}"
        );
    }
}
