//! The kube-controller-manager's CSR signer, as its operator keeps it
//! (cluster-kube-controller-manager-operator `pkg/operator/certrotationcontroller/
//! certrotationcontroller.go` and `pkg/operator/targetconfigcontroller/targetconfigcontroller.go`,
//! library-go `pkg/operator/certrotation`):
//!
//! - `csr-signer-signer` (60 days) and `csr-signer` (30 days, `kube-csr-signer_@<time>`) are
//!   Secrets of `openshift-kube-controller-manager-operator` with `tls.crt`, `tls.key` and the
//!   `auth.openshift.io/certificate-not-before|not-after|issuer` annotations, first made from the
//!   disk's PKI, so every clone of one disk starts with the same keys (a built disk's come from
//!   the operator during the build, `super::installed`);
//! - a `csr-signer-signer` whose `certificate-not-after` is not an RFC 3339 time (what
//!   `oc adm ocp-certificates regenerate-top-level` writes) or is past is replaced by a new one,
//!   and so is the `csr-signer` it vouches for;
//! - `csr-controller-signer-ca` collects the signer-signers, `csr-signer-ca` the signers (what a
//!   client removes stays removed; the current one is put back), and `csr-controller-ca` is both,
//!   in the operator's namespace and in `openshift-config-managed`, where the API server takes it
//!   into its client CA;
//! - the kube-controller-manager signs with `openshift-kube-controller-manager/csr-signer`, which
//!   the operator copies from its own only `Timings.csr_signer_propagation` after the new
//!   signer's `notBefore` (upstream: five minutes, "to propagate the change to other components,
//!   like kas for trust"), unless there is none yet.
//!
//! Not modelled: the installer's `kubelet-signer`, which the installed cluster's first Secrets
//! name, is a record without a key (`super::installed`): while the Secrets hold no certificate,
//! this module does nothing. Upstream `csr-signer` is signed by `csr-signer-signer`; here both are
//! self-signed, which the API server's trust does not tell apart (both bundles are roots to it).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use serde_json::json;

use super::signers::{
    BUNDLE_KEY, ISSUER, NOT_AFTER, NOT_BEFORE, certificates, create, regeneration_due,
};
use super::{Controllers, Error, post_params};
use crate::guest::state::{Certificate, GuestState};
use crate::openshift::pki::{self, Signer};

pub const OPERATOR_NAMESPACE: &str = "openshift-kube-controller-manager-operator";
pub const KCM_NAMESPACE: &str = "openshift-kube-controller-manager";
pub const CONFIG_MANAGED: &str = "openshift-config-managed";
pub const SIGNER_SIGNER: &str = "csr-signer-signer";
pub const SIGNER: &str = "csr-signer";
pub const SIGNER_SIGNER_BUNDLE: &str = "csr-controller-signer-ca";
pub const SIGNER_BUNDLE: &str = "csr-signer-ca";
pub const TRUST_BUNDLE: &str = "csr-controller-ca";

/// A CSR signer as its Secret holds it: key, validity and who vouches for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KcmSigner {
    pub signer: Signer,
    pub not_before: i64,
    pub not_after: i64,
    /// The common name of its `csr-signer-signer` (the Secret's issuer annotation).
    pub issuer: String,
}

impl KcmSigner {
    /// The guest's record of this signer (what `openssl x509 -subject -issuer` would print).
    pub fn record(&self) -> Certificate {
        Certificate {
            not_before: self.not_before,
            not_after: self.not_after,
            issuer: format!("CN={}", self.issuer),
            subject: format!("CN={}", self.signer.cn),
        }
    }
}

/// A Secret of `namespace` holding `signer`, valid from `not_before` to `not_after`.
pub fn signer_secret(
    namespace: &str,
    name: &str,
    signer: &Signer,
    issuer: &str,
    not_before: i64,
    not_after: i64,
) -> Result<Secret, Error> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": namespace, "annotations": {
            NOT_BEFORE: rfc3339(not_before),
            NOT_AFTER: rfc3339(not_after),
            ISSUER: issuer,
        }},
        "stringData": {"tls.crt": signer.cert, "tls.key": signer.key}
    }))
    .map_err(|e| Error::Client(e.to_string()))
}

fn rfc3339(at: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(at)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

fn seconds(text: Option<&String>) -> Option<i64> {
    text?
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

/// The signer a Secret holds, when it holds a real certificate and key (the installer's
/// `kubelet-signer` Secrets hold a record: `None`).
pub fn held(secret: &Secret) -> Option<KcmSigner> {
    let data = secret.data.as_ref()?;
    let text = |key: &str| {
        data.get(key)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
    };
    let cert = text("tls.crt")?;
    let cn = pki::common_name(&cert)?;
    let annotations = secret.metadata.annotations.clone().unwrap_or_default();
    Some(KcmSigner {
        signer: Signer {
            cn,
            cert,
            key: text("tls.key")?,
        },
        not_before: seconds(annotations.get(NOT_BEFORE)).unwrap_or(i64::MIN),
        not_after: seconds(annotations.get(NOT_AFTER)).unwrap_or(i64::MAX),
        issuer: annotations.get(ISSUER).cloned().unwrap_or_default(),
    })
}

/// Whether the kube-controller-manager should take `current` over what it signs with now
/// (`ManageCSRSigner`): when it has none, when its own has expired, or once the current one is
/// `propagation` seconds past its `notBefore`.
pub fn kcm_takes(
    current: &KcmSigner,
    used: Option<&KcmSigner>,
    now: i64,
    propagation: i64,
) -> bool {
    match used {
        None => true,
        Some(used) if used.signer == current.signer => false,
        Some(used) => used.not_after <= now || now >= current.not_before + propagation,
    }
}

/// `first` then `second`'s certificates not already in it.
pub fn combined(first: &str, second: &str) -> String {
    let mut out = certificates(first);
    for cert in certificates(second) {
        if !out.contains(&cert) {
            out.push(cert);
        }
    }
    out.concat()
}

impl Controllers {
    /// One pass of the operator's CSR signer chain (see the module docs). Returns the
    /// `csr-controller-ca` bundle for the API server's client CA, and keeps
    /// `self.kcm_signer` on what the kube-controller-manager signs with.
    pub(super) async fn csr_signer_chain(&mut self, state: &GuestState) -> Result<String, Error> {
        let secrets = Api::<Secret>::namespaced(self.client.clone(), OPERATOR_NAMESPACE);
        let now = self.guest.guest_now();
        let mut signer_signer = secrets.get_opt(SIGNER_SIGNER).await?;
        let mut signer = secrets.get_opt(SIGNER).await?;
        if (signer_signer.is_none() || signer.is_none()) && state.install.is_none() {
            // A CRC disk's cluster: its Secrets come from the disk's PKI.
            let (Some(disk_signer_signer), Some(disk_signer)) = state
                .pki
                .as_ref()
                .map(|p| (p.csr_signer_signer.clone(), p.csr_signer.clone()))
                .unwrap_or_default()
            else {
                return Ok(String::new());
            };
            super::ensure_namespace(&self.client, OPERATOR_NAMESPACE).await?;
            let not_before = state.pki.as_ref().map_or(now, |p| p.not_before);
            let days = |d: i64| not_before + d * 86_400;
            let made = [
                signer_secret(
                    OPERATOR_NAMESPACE,
                    SIGNER_SIGNER,
                    &disk_signer_signer,
                    &disk_signer_signer.cn,
                    not_before,
                    days(pki::CSR_SIGNER_SIGNER_DAYS),
                )?,
                signer_secret(
                    OPERATOR_NAMESPACE,
                    SIGNER,
                    &disk_signer,
                    &disk_signer_signer.cn,
                    not_before,
                    days(pki::CSR_SIGNER_DAYS),
                )?,
            ];
            for secret in made {
                create(&secrets, &secret).await?;
            }
            signer_signer = secrets.get_opt(SIGNER_SIGNER).await?;
            signer = secrets.get_opt(SIGNER).await?;
        }
        let (Some(signer_signer), Some(signer)) = (signer_signer, signer) else {
            return Ok(String::new());
        };
        let (Some(mut top), Some(mut current)) = (held(&signer_signer), held(&signer)) else {
            self.kcm_signer = None;
            return Ok(String::new());
        };
        let annotations = signer_signer
            .metadata
            .annotations
            .clone()
            .unwrap_or_default();
        if regeneration_due(annotations.get(NOT_AFTER).map(String::as_str), now) {
            let (new_top, new_signer) = pki::csr_signers(now)?;
            let days = |d: i64| now + d * 86_400;
            for (name, made, issuer, until, old) in [
                (
                    SIGNER_SIGNER,
                    &new_top,
                    &new_top.cn,
                    days(pki::CSR_SIGNER_SIGNER_DAYS),
                    &signer_signer,
                ),
                (
                    SIGNER,
                    &new_signer,
                    &new_top.cn,
                    days(pki::CSR_SIGNER_DAYS),
                    &signer,
                ),
            ] {
                let mut fresh = signer_secret(OPERATOR_NAMESPACE, name, made, issuer, now, until)?;
                fresh.metadata.resource_version = old.metadata.resource_version.clone();
                secrets.replace(name, &post_params(), &fresh).await?;
            }
            top = KcmSigner {
                signer: new_top.clone(),
                not_before: now,
                not_after: days(pki::CSR_SIGNER_SIGNER_DAYS),
                issuer: new_top.cn.clone(),
            };
            current = KcmSigner {
                signer: new_signer.clone(),
                not_before: now,
                not_after: days(pki::CSR_SIGNER_DAYS),
                issuer: new_top.cn.clone(),
            };
            let record = current.record();
            tracing::info!(signer = %new_signer.cn, "guest cluster: the kube-controller-manager operator made a new CSR signer chain");
            self.guest.update(Box::new(move |s| {
                if let Some(pki) = s.pki.as_mut() {
                    pki.csr_signer_signer = Some(new_top);
                    pki.csr_signer = Some(new_signer);
                }
                if let Some(install) = s.install.as_mut() {
                    install.csr_signer = record;
                }
            }));
        }

        let bundles = Api::<ConfigMap>::namespaced(self.client.clone(), OPERATOR_NAMESPACE);
        let tops = keep_current(&bundles, SIGNER_SIGNER_BUNDLE, &top.signer.cert).await?;
        let signers = keep_current(&bundles, SIGNER_BUNDLE, &current.signer.cert).await?;
        let trust = combined(&signers, &tops);
        write_bundle(&bundles, OPERATOR_NAMESPACE, TRUST_BUNDLE, &trust).await?;
        super::ensure_namespace(&self.client, CONFIG_MANAGED).await?;
        let managed = Api::<ConfigMap>::namespaced(self.client.clone(), CONFIG_MANAGED);
        write_bundle(&managed, CONFIG_MANAGED, TRUST_BUNDLE, &trust).await?;

        // What the kube-controller-manager signs with.
        let targets = Api::<Secret>::namespaced(self.client.clone(), KCM_NAMESPACE);
        let target = targets.get_opt(SIGNER).await?;
        let used = target.as_ref().and_then(held);
        let propagation = i64::try_from(self.timings.csr_signer_propagation.as_secs()).unwrap_or(0);
        if kcm_takes(&current, used.as_ref(), now, propagation) {
            super::ensure_namespace(&self.client, KCM_NAMESPACE).await?;
            let mut copy = signer_secret(
                KCM_NAMESPACE,
                SIGNER,
                &current.signer,
                &current.issuer,
                current.not_before,
                current.not_after,
            )?;
            match target {
                Some(old) => {
                    copy.metadata.resource_version = old.metadata.resource_version;
                    targets.replace(SIGNER, &post_params(), &copy).await?;
                }
                None => create(&targets, &copy).await?,
            }
            tracing::info!(signer = %current.signer.cn, "guest cluster: the kube-controller-manager signs with a new CSR signer");
            self.kcm_signer = Some(current);
        } else {
            self.kcm_signer = used;
        }
        Ok(trust)
    }
}

/// The bundle `name` with `current` in it (first, once), written back if that changed it;
/// returns its text.
async fn keep_current(api: &Api<ConfigMap>, name: &str, current: &str) -> Result<String, Error> {
    let text = api
        .get_opt(name)
        .await?
        .and_then(|cm| cm.data)
        .and_then(|mut d| d.remove(BUNDLE_KEY))
        .unwrap_or_default();
    let wanted = super::signers::with_current(&text, current);
    if wanted != text {
        write_bundle(api, OPERATOR_NAMESPACE, name, &wanted).await?;
    }
    Ok(wanted)
}

async fn write_bundle(
    api: &Api<ConfigMap>,
    namespace: &str,
    name: &str,
    text: &str,
) -> Result<(), Error> {
    match api.get_opt(name).await? {
        None => {
            let cm: ConfigMap = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace},
                "data": {BUNDLE_KEY: text},
            }))
            .map_err(|e| Error::Client(e.to_string()))?;
            create(api, &cm).await
        }
        Some(mut cm) => {
            let data = cm.data.get_or_insert_with(BTreeMap::new);
            if data.get(BUNDLE_KEY).map(String::as_str) == Some(text) {
                return Ok(());
            }
            data.insert(BUNDLE_KEY.to_owned(), text.to_owned());
            api.replace(name, &post_params(), &cm).await?;
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn signer(cn: &str, not_before: i64, not_after: i64) -> KcmSigner {
        KcmSigner {
            signer: Signer {
                cn: cn.into(),
                cert: format!("cert of {cn}"),
                key: format!("key of {cn}"),
            },
            not_before,
            not_after,
            issuer: "top".into(),
        }
    }

    #[test]
    fn the_controller_manager_takes_a_new_signer_only_after_its_trust_propagated() {
        let now = 1_800_000_000;
        let old = signer("old", now - 86_400, now + 86_400);
        let new = signer("new", now, now + 30 * 86_400);
        assert!(kcm_takes(&new, None, now, 300), "none yet: at once");
        assert!(!kcm_takes(&new, Some(&old), now + 299, 300));
        assert!(kcm_takes(&new, Some(&old), now + 300, 300));
        assert!(!kcm_takes(&new, Some(&new), now + 900, 300), "already");
        let expired = signer("expired", now - 2 * 86_400, now - 1);
        assert!(kcm_takes(&new, Some(&expired), now, 300), "its own expired");
    }

    #[test]
    fn the_trust_bundle_is_both_bundles_once() {
        let a = "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
        let b = "-----BEGIN CERTIFICATE-----\nBBBB\n-----END CERTIFICATE-----\n";
        assert_eq!(combined(a, &format!("{b}{a}")), format!("{a}{b}"));
    }
}
