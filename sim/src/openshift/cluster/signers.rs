//! The kube-apiserver's client-certificate signers besides the admin one, as the
//! kube-apiserver operator keeps them (openshift/library-go `pkg/operator/certrotation`):
//!
//! - each signer is a Secret of `openshift-kube-apiserver-operator` (`tls.crt`, `tls.key`,
//!   annotations `auth.openshift.io/certificate-not-before|not-after|issuer`), first made from
//!   the disk's PKI, so every clone of one disk starts with the same keys;
//! - each has a CA bundle ConfigMap (label `auth.openshift.io/managed-certificate-type:
//!   ca-bundle`, key `ca-bundle.crt`), and the API server trusts for client certificates every
//!   certificate of those bundles (the operator's `kube-apiserver-client-ca`, read again by the
//!   API server without a restart);
//! - a signer whose `certificate-not-after` annotation is not an RFC 3339 time (what
//!   `oc adm ocp-certificates regenerate-top-level` writes: `force-regeneration`) or is past,
//!   by guest time, is replaced on the operator's next pass by a new one (new key, named
//!   `<namespace>_<name>@<guest now>`), and the new certificate is put first in its bundle,
//!   the old ones staying (library-go `signer.go`, `cabundle.go`);
//! - what a client removes from a bundle (`oc adm ocp-certificates remove-old-trust`) stays
//!   removed; the current signer is put back if it is missing.
//!
//! Not modelled: the leaf certificates these signers issue (the kube-controller-manager's and
//! kube-scheduler's client certificates, `node-system-admin`'s): the simulation's controllers
//! authenticate with a CA of their own, and a node's `localhost.kubeconfig` uses the admin one.
//! Expired certificates are not dropped from a bundle.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::json;

use super::{Controllers, Error, post_params};
use crate::openshift::pki::{GuestPki, Signer};

/// The kube-apiserver operator's namespace, where these signers and their bundles live.
pub const NAMESPACE: &str = "openshift-kube-apiserver-operator";
/// Each signer's Secret and its CA bundle ConfigMap.
pub const SIGNERS: [(&str, &str); 2] = [
    ("node-system-admin-signer", "node-system-admin-ca"),
    ("kube-control-plane-signer", "kube-control-plane-signer-ca"),
];
pub const NOT_BEFORE: &str = "auth.openshift.io/certificate-not-before";
pub const NOT_AFTER: &str = "auth.openshift.io/certificate-not-after";
pub const ISSUER: &str = "auth.openshift.io/certificate-issuer";
pub const BUNDLE_LABEL: &str = "auth.openshift.io/managed-certificate-type";
pub const BUNDLE_KEY: &str = "ca-bundle.crt";
/// How long a signer the operator makes lives.
const SIGNER_DAYS: i64 = 365;

/// The PEM certificates of a bundle, each with its trailing newline.
pub fn certificates(bundle: &str) -> Vec<String> {
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = bundle;
    while let Some(start) = rest.find("-----BEGIN CERTIFICATE-----") {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let stop = start + end + END.len();
        out.push(format!("{}\n", &rest[start..stop]));
        rest = &rest[stop..];
    }
    out
}

/// Whether a signer Secret's `not-after` annotation asks for a new signer at guest time `now`:
/// missing, not an RFC 3339 time, or past.
pub fn regeneration_due(not_after: Option<&str>, now: i64) -> bool {
    match not_after.and_then(|text| text.parse::<k8s_openapi::jiff::Timestamp>().ok()) {
        Some(at) => at.as_second() <= now,
        None => true,
    }
}

/// `bundle` with `current` first, once, and the rest as it was.
pub fn with_current(bundle: &str, current: &str) -> String {
    let current = certificates(current);
    let mut out: Vec<String> = current.clone();
    out.extend(
        certificates(bundle)
            .into_iter()
            .filter(|c| !current.contains(c)),
    );
    out.concat()
}

fn rfc3339(at: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn secret(name: &str, signer: &Signer, not_before: i64) -> Result<Secret, Error> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": NAMESPACE, "annotations": {
            NOT_BEFORE: rfc3339(not_before),
            NOT_AFTER: rfc3339(not_before + SIGNER_DAYS * 86_400),
            ISSUER: signer.cn,
        }},
        "stringData": {"tls.crt": signer.cert, "tls.key": signer.key}
    }))
    .map_err(|e| Error::Client(e.to_string()))
}

impl Controllers {
    /// One pass of the signers' rotation (see the module docs); returns what their bundles
    /// hold now, for the API server's client CA.
    pub(super) async fn client_signers(&mut self, pki: &GuestPki) -> Result<String, Error> {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), NAMESPACE);
        let bundles = Api::<ConfigMap>::namespaced(self.client.clone(), NAMESPACE);
        let now = self.guest.guest_now();
        let mut trusted = String::new();
        for (name, bundle_name) in SIGNERS {
            let current = secrets.get_opt(name).await?;
            let cert = match current {
                None => {
                    let Some(signer) = pki.client_signers.get(name) else {
                        continue;
                    };
                    create(&secrets, &secret(name, signer, pki.not_before)?).await?;
                    signer.cert.clone()
                }
                Some(current) => {
                    let annotations = current.metadata.annotations.unwrap_or_default();
                    let data = current.data.unwrap_or_default();
                    let cert = data
                        .get("tls.crt")
                        .map(|v| String::from_utf8_lossy(&v.0).into_owned())
                        .unwrap_or_default();
                    if regeneration_due(annotations.get(NOT_AFTER).map(String::as_str), now) {
                        let cn = format!("{NAMESPACE}_{name}@{now}");
                        let signer = Signer::generate(&cn, now, SIGNER_DAYS)?;
                        secrets
                            .replace(name, &post_params(), &{
                                let mut fresh = secret(name, &signer, now)?;
                                fresh.metadata.resource_version = current.metadata.resource_version;
                                fresh
                            })
                            .await?;
                        tracing::info!(signer = %cn, "guest cluster: the kube-apiserver operator made a new client signer");
                        signer.cert
                    } else {
                        cert
                    }
                }
            };
            let bundle = bundles.get_opt(bundle_name).await?;
            let text = bundle
                .as_ref()
                .and_then(|b| b.data.as_ref())
                .and_then(|d| d.get(BUNDLE_KEY).cloned())
                .unwrap_or_default();
            let wanted = with_current(&text, &cert);
            trusted.push_str(&wanted);
            match bundle {
                None => {
                    let cm: ConfigMap = serde_json::from_value(json!({
                        "apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": bundle_name, "namespace": NAMESPACE,
                                     "labels": {BUNDLE_LABEL: "ca-bundle"}},
                        "data": {BUNDLE_KEY: wanted},
                    }))
                    .map_err(|e| Error::Client(e.to_string()))?;
                    create(&bundles, &cm).await?;
                }
                Some(mut cm) if wanted != text => {
                    cm.data
                        .get_or_insert_with(BTreeMap::new)
                        .insert(BUNDLE_KEY.to_owned(), wanted);
                    bundles.replace(bundle_name, &post_params(), &cm).await?;
                }
                Some(_) => {}
            }
        }
        Ok(trusted)
    }
}

/// Creates `obj`; one of that name already there is fine (the next pass looks at it).
pub(super) async fn create<K>(api: &Api<K>, obj: &K) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.create(&post_params(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----";
    const B: &str = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----";

    #[test]
    fn a_bundle_splits_into_its_certificates() {
        let bundle = format!("{A}\n\n{B}\ntrailing");
        assert_eq!(
            certificates(&bundle),
            vec![format!("{A}\n"), format!("{B}\n")]
        );
        assert!(certificates("").is_empty());
    }

    #[test]
    fn the_current_signer_goes_first_once_and_the_old_ones_stay() {
        assert_eq!(with_current(A, B), format!("{B}\n{A}\n"));
        assert_eq!(
            with_current(&format!("{B}\n{A}\n"), B),
            format!("{B}\n{A}\n")
        );
        // Removed by a client: only the current one comes back.
        assert_eq!(with_current("", B), format!("{B}\n"));
    }

    #[test]
    fn a_forced_or_past_expiry_asks_for_a_new_signer() {
        let now = 1_800_000_000;
        assert!(regeneration_due(Some("force-regeneration"), now));
        assert!(regeneration_due(None, now));
        assert!(regeneration_due(Some(&rfc3339(now - 1)), now));
        assert!(!regeneration_due(Some(&rfc3339(now + 3600)), now));
    }
}
