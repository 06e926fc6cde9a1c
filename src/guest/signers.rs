//! Per-instance client-certificate signers (beyond what CRC does): every clone of a disk starts
//! with the same `node-system-admin-signer` and `kube-control-plane-signer`, whose certificates
//! the guest API server trusts for client authentication. Anyone who is cluster-admin in one
//! clone can read their keys and make a `system:masters` certificate that every other clone of
//! the disk accepts. So the crc-agent has each instance's cluster make new ones and then stop
//! trusting the disk's, the way `oc adm ocp-certificates regenerate-top-level` and
//! `remove-old-trust` do (openshift/oc `pkg/cli/admin/ocpcertificates/certregen/rootregen.go`,
//! `trustpurge/trustpurge.go`), from Rust through the guest API:
//!
//! 1. read each signer's certificate and its CA bundle;
//! 2. mark each signer for regeneration: annotation `auth.openshift.io/certificate-not-after:
//!    force-regeneration`, applied with the field manager `regenerate-signers`;
//! 3. wait until the kube-apiserver operator has made a new signer and put it into the bundle;
//! 4. apply each bundle with only the certificates that were not in it at step 1 (field manager
//!    `remove-old-trust`); the API server reloads its client CA without a restart.
//!
//! Every run starts over from what the cluster holds then, so a retried agent regenerates again
//! and still drops every certificate of the disk. The admin signer is the instance's own already
//! (step 8). The kube-controller-manager's CSR signer, which signs the kubelet's client
//! certificate, is not regenerated here (`docs/decisions.md`, "Per-instance client signers").

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::cluster::{Error, Patience, retry};

pub const STEP_SIGNERS: &str = "regenerate client signers";
/// The kube-apiserver operator's namespace, where the signers and their bundles are.
pub const NAMESPACE: &str = "openshift-kube-apiserver-operator";
/// Each signer's Secret and its CA bundle ConfigMap.
pub const SIGNERS: [(&str, &str); 2] = [
    ("node-system-admin-signer", "node-system-admin-ca"),
    ("kube-control-plane-signer", "kube-control-plane-signer-ca"),
];
pub const NOT_AFTER: &str = "auth.openshift.io/certificate-not-after";
pub const FORCE: &str = "force-regeneration";
pub const BUNDLE_KEY: &str = "ca-bundle.crt";
const REGENERATE_MANAGER: &str = "regenerate-signers";
const REMOVE_TRUST_MANAGER: &str = "remove-old-trust";

/// The PEM certificates of a bundle, each normalised to end with one newline.
pub fn certificates(bundle: &str) -> Vec<String> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    const END: &str = "-----END CERTIFICATE-----";
    let mut out = Vec::new();
    let mut rest = bundle;
    while let Some(start) = rest.find(BEGIN) {
        let Some(end) = rest[start..].find(END) else {
            break;
        };
        let stop = start + end + END.len();
        out.push(format!("{}\n", rest[start..stop].trim()));
        rest = &rest[stop..];
    }
    out
}

/// What a bundle keeps once the trust from before the regeneration is removed: its
/// certificates that were not in `before`. `None` while it has none of its own yet (the new
/// signer is not in it), which is no state to apply.
pub fn trimmed(now: &str, before: &[String]) -> Option<String> {
    let kept: Vec<String> = certificates(now)
        .into_iter()
        .filter(|c| !before.contains(c))
        .collect();
    (!kept.is_empty()).then(|| kept.concat())
}

/// One signer as read before the regeneration.
struct Before {
    secret: &'static str,
    bundle: &'static str,
    cert: Option<String>,
    trusted: Vec<String>,
}

/// The certificate of a `kubernetes.io/tls` Secret, if it holds one.
pub(super) fn tls_crt(secret: Option<Secret>) -> Option<String> {
    let data = secret?.data?;
    Some(String::from_utf8_lossy(&data.get("tls.crt")?.0).into_owned())
}

/// A CA bundle ConfigMap's text; empty when there is none.
pub(super) fn bundle_text(cm: Option<ConfigMap>) -> String {
    cm.and_then(|cm| cm.data)
        .and_then(|mut d| d.remove(BUNDLE_KEY))
        .unwrap_or_default()
}

/// Steps 1–4 above; `calls` for single requests, `patience` for the wait for new signers.
pub async fn regenerate(
    client: &kube::Client,
    calls: Patience,
    patience: Patience,
) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), NAMESPACE);
    let bundles: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    let mut befores = Vec::new();
    for (secret, bundle) in SIGNERS {
        let (cert, text) = retry(STEP_SIGNERS, calls, || async {
            let cert = tls_crt(secrets.get_opt(secret).await?);
            let text = bundle_text(bundles.get_opt(bundle).await?);
            Ok::<_, kube::Error>((cert, text))
        })
        .await?;
        befores.push(Before {
            secret,
            bundle,
            cert,
            trusted: certificates(&text),
        });
    }
    let regenerate = PatchParams::apply(REGENERATE_MANAGER).force();
    for before in &befores {
        let mark = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": before.secret, "namespace": NAMESPACE,
                         "annotations": {NOT_AFTER: FORCE}},
        });
        let mark = Patch::Apply(&mark);
        retry(STEP_SIGNERS, calls, || {
            secrets.patch(before.secret, &regenerate, &mark)
        })
        .await?;
    }
    tracing::info!("client signers marked for regeneration");
    let remove = PatchParams::apply(REMOVE_TRUST_MANAGER).force();
    for before in &befores {
        let kept = retry(STEP_SIGNERS, patience, || async {
            let cert = tls_crt(
                secrets
                    .get_opt(before.secret)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            let new = cert
                .filter(|c| Some(c) != before.cert.as_ref())
                .ok_or_else(|| format!("no new {} yet", before.secret))?;
            let text = bundle_text(
                bundles
                    .get_opt(before.bundle)
                    .await
                    .map_err(|e| e.to_string())?,
            );
            let kept = trimmed(&text, &before.trusted)
                .filter(|kept| {
                    certificates(kept)
                        .iter()
                        .any(|c| certificates(&new).contains(c))
                })
                .ok_or_else(|| {
                    format!(
                        "{} does not hold the new {} yet",
                        before.bundle, before.secret
                    )
                })?;
            Ok::<_, String>(kept)
        })
        .await?;
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": before.bundle, "namespace": NAMESPACE},
            "data": {BUNDLE_KEY: kept},
        });
        let body = Patch::Apply(&body);
        retry(STEP_SIGNERS, calls, || {
            bundles.patch(before.bundle, &remove, &body)
        })
        .await?;
        tracing::info!(
            signer = before.secret,
            removed = before.trusted.len(),
            "client signer regenerated; the disk's trust removed"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----";
    const B: &str = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----";
    const C: &str = "-----BEGIN CERTIFICATE-----\nCCCC\n-----END CERTIFICATE-----";

    #[test]
    fn a_bundle_splits_into_normalised_certificates() {
        assert_eq!(
            certificates(&format!("{A}\r\n\n{B}")),
            vec![format!("{A}\n"), format!("{B}\n")]
        );
        assert!(certificates("no certificate").is_empty());
    }

    #[test]
    fn only_what_came_after_the_regeneration_stays_trusted() {
        let before = certificates(&format!("{A}\n{B}\n"));
        assert_eq!(
            trimmed(&format!("{C}\n{A}\n{B}\n"), &before),
            Some(format!("{C}\n"))
        );
        assert_eq!(
            trimmed(&format!("{A}\n{B}\n"), &before),
            None,
            "no new signer yet"
        );
        // A retried run: what it read first (the first run's new signer included) goes too.
        let retried = certificates(&format!("{C}\n"));
        assert_eq!(
            trimmed(&format!("{B}\n{C}\n"), &retried),
            Some(format!("{B}\n"))
        );
    }
}
