//! A per-instance CSR signer (beyond what CRC does). The kube-controller-manager signs every
//! `kubernetes.io/*` CSR with `csr-signer`, vouched for by `csr-signer-signer`, and the guest
//! API server trusts both for client certificates (`csr-controller-ca`). Every clone of a disk
//! starts with the same two keys, so a lessee could make a `system:masters` certificate with
//! them that every other clone accepts. The crc-agent has the instance's cluster make new ones,
//! moves the kubelet to the new signer, then stops trusting the disk's
//! (`docs/decisions.md`, "Per-instance client signers"):
//!
//! 1. read `csr-signer` and the bundles `csr-signer-ca` and `csr-controller-signer-ca` of
//!    `openshift-kube-controller-manager-operator`;
//! 2. mark `csr-signer-signer` for regeneration (`auth.openshift.io/certificate-not-after:
//!    force-regeneration`, as `oc adm ocp-certificates regenerate-top-level` does); the operator
//!    makes a new signer-signer and a new `csr-signer`;
//! 3. wait until the kube-controller-manager signs with the new one: its operator copies it to
//!    `openshift-kube-controller-manager/csr-signer` only five minutes after its `notBefore`, so
//!    that the API server trusts it first (cluster-kube-controller-manager-operator
//!    `ManageCSRSigner`);
//! 4. remove the kubelet's client and serving certificates and restart it: it bootstraps again
//!    (with the cred-manager's kubeconfig) and asks for both; approve its CSRs until both are
//!    issued by the new signer;
//! 5. apply both bundles without the certificates read in step 1 (field manager
//!    `remove-old-trust`), as `oc adm ocp-certificates remove-old-trust` does.
//!
//! Step 4 comes before step 5 so the node never loses the API. A retried agent starts over from
//! what the cluster holds: it regenerates again and still drops every certificate it found.

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;

use super::build::{KUBELET_CLIENT_CERT, KUBELET_SERVER_CERT};
use super::cluster::{self, Error, Patience, retry};
use super::signers::{BUNDLE_KEY, FORCE, NOT_AFTER, bundle_text, certificates, tls_crt, trimmed};
use super::{Command, Guest};
use crate::resources::profile::network::HOSTNAME;

pub const STEP: &str = "regenerate the CSR signer";
pub const OPERATOR_NAMESPACE: &str = "openshift-kube-controller-manager-operator";
pub const KCM_NAMESPACE: &str = "openshift-kube-controller-manager";
pub const SIGNER_SIGNER: &str = "csr-signer-signer";
pub const SIGNER: &str = "csr-signer";
/// The bundles of the signers and of the signer-signers; the API server's `csr-controller-ca`
/// is made of both.
pub const BUNDLES: [&str; 2] = ["csr-signer-ca", "csr-controller-signer-ca"];
const REGENERATE_MANAGER: &str = "regenerate-signers";
const REMOVE_TRUST_MANAGER: &str = "remove-old-trust";

/// The common name in an `openssl x509 -issuer` line (`issuer=CN = a, O = b` from OpenSSL 3,
/// `issuer= /CN=a/O=b` from older ones, `issuer=CN=a` as well).
pub fn issuer_cn(line: &str) -> Option<&str> {
    let text = line.trim().strip_prefix("issuer=").unwrap_or(line).trim();
    let at = text.find("CN")?;
    let rest = text[at + 2..].trim_start().strip_prefix('=')?.trim_start();
    let end = rest.find([',', '/']).unwrap_or(rest.len());
    Some(rest[..end].trim())
}

/// The common name of a PEM certificate.
pub fn common_name(pem: &str) -> Option<String> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let cert = block.parse_x509().ok()?;
    let cn = cert.subject().iter_common_name().next()?.as_str().ok()?;
    Some(cn.to_owned())
}

/// Steps 1–5 above: `calls` for single requests and commands, `patience` for each wait (the
/// new signer, the kube-controller-manager taking it, the kubelet's certificates, the bundles).
pub async fn regenerate<G: Guest>(
    guest: &G,
    client: &kube::Client,
    calls: Patience,
    patience: Patience,
) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let bundles: Api<ConfigMap> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let (before, trusted) = retry(STEP, calls, || async {
        let before = tls_crt(secrets.get_opt(SIGNER).await?);
        let mut trusted = Vec::new();
        for bundle in BUNDLES {
            trusted.push(certificates(&bundle_text(bundles.get_opt(bundle).await?)));
        }
        Ok::<_, kube::Error>((before, trusted))
    })
    .await?;

    let mark = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": SIGNER_SIGNER, "namespace": OPERATOR_NAMESPACE,
                     "annotations": {NOT_AFTER: FORCE}},
    });
    let (mark, regenerate) = (
        Patch::Apply(&mark),
        PatchParams::apply(REGENERATE_MANAGER).force(),
    );
    retry(STEP, calls, || {
        secrets.patch(SIGNER_SIGNER, &regenerate, &mark)
    })
    .await?;
    tracing::info!("CSR signer-signer marked for regeneration");

    let (new, cn) = retry(STEP, patience, || async {
        let now = tls_crt(secrets.get_opt(SIGNER).await.map_err(|e| e.to_string())?);
        let new = now
            .filter(|now| Some(now) != before.as_ref())
            .ok_or_else(|| format!("no new {OPERATOR_NAMESPACE}/{SIGNER} yet"))?;
        let cn = common_name(&new).ok_or_else(|| {
            format!("the new {OPERATOR_NAMESPACE}/{SIGNER} holds no readable certificate")
        })?;
        Ok::<_, String>((new, cn))
    })
    .await?;
    let used: Api<Secret> = Api::namespaced(client.clone(), KCM_NAMESPACE);
    retry(STEP, patience, || async {
        let now = tls_crt(used.get_opt(SIGNER).await.map_err(|e| e.to_string())?);
        (now.as_ref() == Some(&new)).then_some(()).ok_or_else(|| {
            format!("the kube-controller-manager does not sign with {cn} yet (its operator waits five minutes after a new signer)")
        })
    })
    .await?;
    tracing::info!(signer = %cn, "the kube-controller-manager signs with the instance's own CSR signer");

    rebootstrap_kubelet(guest, client, &cn, calls, patience).await?;

    let remove = PatchParams::apply(REMOVE_TRUST_MANAGER).force();
    for (bundle, before) in BUNDLES.iter().zip(&trusted) {
        let kept = retry(STEP, patience, || async {
            let text = bundle_text(bundles.get_opt(bundle).await.map_err(|e| e.to_string())?);
            trimmed(&text, before)
                .ok_or_else(|| format!("{OPERATOR_NAMESPACE}/{bundle} holds no new signer yet"))
        })
        .await?;
        let body = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": bundle, "namespace": OPERATOR_NAMESPACE},
            "data": {BUNDLE_KEY: kept},
        });
        let body = Patch::Apply(&body);
        retry(STEP, calls, || bundles.patch(bundle, &remove, &body)).await?;
        tracing::info!(
            bundle,
            removed = before.len(),
            "the disk's CSR signers no longer trusted"
        );
    }
    Ok(())
}

/// Step 4: the kubelet's certificates from the signer named `cn`.
async fn rebootstrap_kubelet<G: Guest>(
    guest: &G,
    client: &kube::Client,
    cn: &str,
    calls: Patience,
    patience: Patience,
) -> Result<(), Error> {
    let ssh = |source| Error::Guest { step: STEP, source };
    guest
        .run_checked(&Command::sudo([
            "rm",
            "-f",
            KUBELET_CLIENT_CERT,
            KUBELET_SERVER_CERT,
        ]))
        .await
        .map_err(ssh)?;
    guest
        .run_checked(&Command::sudo(["systemctl", "restart", "kubelet"]))
        .await
        .map_err(ssh)?;
    tracing::info!("kubelet restarted without certificates, to bootstrap with the new signer");
    let logged = std::sync::Mutex::new(std::collections::HashSet::new());
    let single = Patience::new(calls.interval, calls.interval);
    retry(STEP, patience, || {
        let logged = &logged;
        async move {
            match cluster::approve_csrs(client, HOSTNAME, single).await {
                Ok(approvals) => {
                    approvals.log_refusals(&mut logged.lock().unwrap_or_else(|e| e.into_inner()))
                }
                Err(err) => tracing::debug!("approving the kubelet's CSRs: {err}"),
            }
            for path in [KUBELET_CLIENT_CERT, KUBELET_SERVER_CERT] {
                // A certificate not there yet is the next round's.
                let issued = guest
                    .run(&Command::sudo([
                        "openssl", "x509", "-noout", "-issuer", "-in", path,
                    ]))
                    .await
                    .map_err(|e| e.to_string())?;
                let line = issued.stdout_text();
                if !issued.success() || issuer_cn(&line) != Some(cn) {
                    return Err(format!(
                        "{path} is not issued by {cn} yet ({})",
                        line.trim()
                    ));
                }
            }
            Ok(())
        }
    })
    .await?;
    tracing::info!(signer = %cn, "the kubelet's certificates come from the instance's own CSR signer");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_issuer_common_name_is_read_as_every_openssl_prints_it() {
        assert_eq!(
            issuer_cn("issuer=CN = kube-csr-signer_@1700000000\n"),
            Some("kube-csr-signer_@1700000000")
        );
        assert_eq!(
            issuer_cn("issuer=CN=kube-csr-signer_@17, O=openshift"),
            Some("kube-csr-signer_@17")
        );
        assert_eq!(
            issuer_cn("issuer= /O=openshift/CN=kubelet-signer"),
            Some("kubelet-signer")
        );
        assert_eq!(issuer_cn("issuer=O = openshift"), None);
    }
}
