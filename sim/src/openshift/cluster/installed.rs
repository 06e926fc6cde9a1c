//! What a cluster installed by the simulated bootstrap in place does beyond a sealed CRC disk's
//! (whose disk has no [`InstallState`]), by **guest** time, as `docs/design/certificates-and-time.md`
//! describes a real one:
//!
//! - the control plane's day-long certificates are renewed (30 days) once past their rotation
//!   point (80 % of their lifetime), expired or not;
//! - the kubelet files a CSR when its certificate passes its rotation point: the client CSR only
//!   if it can authenticate — with its own still-valid certificate, or with the bootstrap
//!   kubeconfig, which works while its day-long certificate is valid or once the
//!   `kubelet-bootstrap-cred-manager` DaemonSet has replaced it (which it can only if its service
//!   account may get the node-bootstrapper's token, by the guest API server's RBAC); the serving
//!   CSR with a valid client certificate;
//! - approved kubelet CSRs are issued by the current CSR signer: the installer's, capped at its
//!   expiry (an expired signer fails the CSR), until the Secrets `csr-signer-signer` and
//!   `csr-signer` of `openshift-kube-controller-manager-operator` are deleted — then a new signer
//!   (another issuer name, 60 days) issues 30-day certificates;
//! - while installing, the operators come up one by one and the ClusterVersion is Progressing.

use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use super::{Controllers, Error, KUBELET_SIGNERS, SIGNING_DURATION, kubelet_csr};
use crate::guest::state::{Certificate, File, GuestState, paths};
use crate::installer::render_record;
use crate::openshift::pki::{self, Signer};

/// The kube-controller-manager operator's namespace and its signer Secrets.
pub const KCM_OPERATOR_NAMESPACE: &str = "openshift-kube-controller-manager-operator";
pub const SIGNER_SECRETS: [&str; 2] = ["csr-signer-signer", "csr-signer"];
/// SNC's DaemonSet that keeps a working bootstrap kubeconfig for the kubelet.
pub const CRED_MANAGER: &str = "kubelet-bootstrap-cred-manager";
pub const CRED_MANAGER_NAMESPACE: &str = "openshift-machine-config-operator";
const DAY: i64 = 86_400;
/// Certificates living at most this long are the control plane's day-long ones.
const SHORT_LIVED: i64 = 2 * DAY;
/// Lifetime of a signer the operator makes.
const OPERATOR_SIGNER_LIFETIME: i64 = 60 * DAY;
/// How far the kube-controller-manager backdates what it issues.
const BACKDATE: i64 = 300;

/// Whether a certificate is past its rotation point (80 % of its lifetime) at `now`.
pub fn rotation_due(cert: &Certificate, now: i64) -> bool {
    now >= cert.not_before + (cert.not_after - cert.not_before) * 4 / 5
}

pub fn valid_at(cert: &Certificate, now: i64) -> bool {
    cert.not_before <= now && now < cert.not_after
}

/// Renews the control plane's day-long certificates that are past their rotation point; how
/// many were renewed.
pub fn rotate_control_plane(state: &mut GuestState, now: i64) -> usize {
    let prefix = format!("{}/", paths::STATIC_POD_RESOURCES);
    let mut renewed = 0;
    for (path, cert) in state.certificates.iter_mut() {
        if path.starts_with(&prefix)
            && cert.not_after - cert.not_before <= SHORT_LIVED
            && rotation_due(cert, now)
        {
            cert.not_before = now;
            cert.not_after = now + SIGNING_DURATION;
            renewed += 1;
        }
    }
    renewed
}

/// The guest path of the certificate a kubelet signer issues.
pub fn kubelet_cert_path(signer: &str) -> &'static str {
    if signer.ends_with("kubelet-serving") {
        paths::KUBELET_SERVER_CERT
    } else {
        paths::KUBELET_CLIENT_CERT
    }
}

/// Whether the kubelet can reach the API with its bootstrap kubeconfig.
pub fn bootstrap_works(state: &GuestState, now: i64) -> bool {
    state
        .certificates
        .get(paths::KUBELET_BOOTSTRAP_CERT)
        .is_none_or(|cert| valid_at(cert, now))
}

/// Whether the kubelet files a CSR of `signer` now: its certificate is due and it can
/// authenticate. `Some` carries the certificate's `notBefore` (one CSR per certificate).
pub fn kubelet_csr_due(state: &GuestState, signer: &str, now: i64) -> Option<i64> {
    // A certificate the kubelet does not have (removed to bootstrap again) is due at once.
    let cert = state.certificates.get(kubelet_cert_path(signer));
    if cert.is_some_and(|cert| !rotation_due(cert, now)) {
        return None;
    }
    let client_valid = state
        .certificates
        .get(paths::KUBELET_CLIENT_CERT)
        .is_some_and(|client| valid_at(client, now));
    let can_authenticate = if signer.ends_with("kubelet-serving") {
        client_valid
    } else {
        client_valid || bootstrap_works(state, now)
    };
    can_authenticate.then_some(cert.map_or(i64::MIN, |cert| cert.not_before))
}

/// Validity of a certificate the signer issues now; an expired signer issues nothing.
pub fn issue_window(signer: &Certificate, now: i64) -> Result<(i64, i64), String> {
    if now >= signer.not_after {
        return Err(format!(
            "the signer {} has expired (notAfter {})",
            signer.subject,
            crate::guest::time::openssl_date(signer.not_after)
        ));
    }
    Ok((
        now - BACKDATE,
        (now + SIGNING_DURATION).min(signer.not_after),
    ))
}

/// The signer the kube-controller-manager operator makes when its Secrets are gone.
pub fn operator_signer(now: i64) -> Certificate {
    Certificate {
        not_before: now,
        not_after: now + OPERATOR_SIGNER_LIFETIME,
        issuer: format!("CN=openshift-kube-controller-manager-operator_csr-signer-signer@{now}"),
        subject: format!("CN=kube-csr-signer_@{now}"),
    }
}

/// What the cred-manager does on the node: the bootstrap kubeconfig now uses a service-account
/// token, so the installer's day-long bootstrap certificate no longer matters.
pub fn apply_cred_manager(state: &mut GuestState) {
    state.certificates.remove(paths::KUBELET_BOOTSTRAP_CERT);
    state.files.remove(paths::KUBELET_BOOTSTRAP_CERT);
    state.files.insert(
        paths::BOOTSTRAP_KUBECONFIG.to_owned(),
        File::root(
            "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    server: https://api-int.crc.testing:6443\n  name: local\nusers:\n- name: kubelet\n  user:\n    token: simulated-node-bootstrapper-token\n",
            0o600,
        ),
    );
}

/// The API call a cred-manager script makes for the node-bootstrapper's token: `oc create token
/// node-bootstrapper` (a TokenRequest), or SNC's and the MCO's `recover-kubeconfig.sh`'s
/// `oc get secret node-bootstrapper-token` (the MCO's long-lived token Secret,
/// openshift/machine-config-operator 7ff337a4f
/// `manifests/machineconfigserver/node-bootstrapper-token.yaml`).
pub fn token_call(script: &str) -> Option<ResourceAttributes> {
    let attributes =
        |verb: &str, resource: &str, subresource: Option<&str>, name: &str| ResourceAttributes {
            namespace: Some(CRED_MANAGER_NAMESPACE.to_owned()),
            verb: Some(verb.to_owned()),
            resource: Some(resource.to_owned()),
            subresource: subresource.map(str::to_owned),
            name: Some(name.to_owned()),
            ..ResourceAttributes::default()
        };
    if script.contains("create token node-bootstrapper") {
        Some(attributes(
            "create",
            "serviceaccounts",
            Some("token"),
            "node-bootstrapper",
        ))
    } else if script.contains("get secret") && script.contains("node-bootstrapper-token") {
        Some(attributes(
            "get",
            "secrets",
            None,
            "node-bootstrapper-token",
        ))
    } else {
        None
    }
}

/// Whether the guest API server lets service account `account` of the cred-manager's
/// namespace make `call` (a SubjectAccessReview, with the groups a service account has).
async fn allowed(
    client: &kube::Client,
    account: &str,
    call: &ResourceAttributes,
) -> Result<bool, Error> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(format!(
                "system:serviceaccount:{CRED_MANAGER_NAMESPACE}:{account}"
            )),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{CRED_MANAGER_NAMESPACE}"),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(call.clone()),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&Default::default(), &review)
        .await?;
    Ok(answer.status.is_some_and(|s| s.allowed))
}

/// Whether operator `index` of `count` is up `elapsed` into an install whose operators take
/// `total`: they come up one after another.
pub fn operator_up_during_install(
    index: usize,
    count: usize,
    elapsed: std::time::Duration,
    total: std::time::Duration,
) -> bool {
    let count = count.max(1) as u32;
    elapsed >= total * (index as u32 + 1) / count
}

fn signer_secret(name: &str, signer: &Certificate) -> Result<Secret, Error> {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": name, "namespace": KCM_OPERATOR_NAMESPACE},
        "stringData": {"tls.crt": render_record(signer), "tls.key": "simulated signer key\n"}
    }))
    .map_err(|e| Error::Client(e.to_string()))
}

impl Controllers {
    /// One pass of the installed cluster's own behaviour (see the module docs).
    pub(super) async fn installed_cluster(&mut self, state: &GuestState) -> Result<(), Error> {
        let Some(install) = state.install.clone() else {
            return Ok(());
        };
        let now = self.guest.guest_now();
        let mut probe = state.clone();
        if rotate_control_plane(&mut probe, now) > 0 {
            self.guest.update(Box::new(move |s| {
                let renewed = rotate_control_plane(s, now);
                tracing::info!(renewed, "guest cluster rotated its day-long certificates");
            }));
        }
        self.signer_secrets(&install, now).await?;
        if self.kubelet_since.is_some() {
            self.renewal_csrs(state, now).await?;
        }
        if state
            .certificates
            .contains_key(paths::KUBELET_BOOTSTRAP_CERT)
        {
            self.cred_manager().await?;
        }
        Ok(())
    }

    /// The cred-manager's pod, played: it runs only if SCC admission lets its service account
    /// have it (see [`super::scc`]), and writes the bootstrap kubeconfig only if that account
    /// may make the API call its script makes for the token (the guest API server's RBAC
    /// answers, as it would the pod). A refusal is this step's error: on a real cluster the
    /// pod's `oc` fails and the container restarts.
    async fn cred_manager(&mut self) -> Result<(), Error> {
        let Some(daemonset) =
            Api::<DaemonSet>::namespaced(self.client.clone(), CRED_MANAGER_NAMESPACE)
                .get_opt(CRED_MANAGER)
                .await?
        else {
            return Ok(());
        };
        let pod = daemonset.spec.template.spec.as_ref();
        let account = pod
            .and_then(|p| p.service_account_name.clone())
            .filter(|a| !a.is_empty())
            .unwrap_or_else(|| "default".to_owned());
        let script: String = pod
            .into_iter()
            .flat_map(|p| &p.containers)
            .flat_map(|c| c.command.iter().flatten().chain(c.args.iter().flatten()))
            .map(|part| format!("{part}\n"))
            .collect();
        // The DaemonSet controller cannot create a pod the SCC admission refuses.
        if let Some(scc) = pod.and_then(super::scc::required)
            && !allowed(
                &self.client,
                &account,
                &super::scc::use_of(scc, CRED_MANAGER_NAMESPACE),
            )
            .await?
        {
            return Err(Error::Client(format!(
                "DaemonSet {CRED_MANAGER_NAMESPACE}/{CRED_MANAGER}: {} (system:serviceaccount:{CRED_MANAGER_NAMESPACE}:{account}): the bootstrap kubeconfig is not replaced",
                super::scc::refusal(CRED_MANAGER, scc)
            )));
        }
        let Some(call) = token_call(&script) else {
            return Err(Error::Client(format!(
                "DaemonSet {CRED_MANAGER_NAMESPACE}/{CRED_MANAGER}: its script neither creates a node-bootstrapper token nor reads node-bootstrapper-token"
            )));
        };
        if allowed(&self.client, &account, &call).await? {
            self.guest.update(Box::new(apply_cred_manager));
            return Ok(());
        }
        Err(Error::Client(format!(
            "DaemonSet {CRED_MANAGER_NAMESPACE}/{CRED_MANAGER}: system:serviceaccount:{CRED_MANAGER_NAMESPACE}:{account} cannot {} {}{} {:?} in namespace {CRED_MANAGER_NAMESPACE} (forbidden): the bootstrap kubeconfig is not replaced",
            call.verb.as_deref().unwrap_or_default(),
            call.resource.as_deref().unwrap_or_default(),
            call.subresource
                .as_deref()
                .map(|s| format!("/{s}"))
                .unwrap_or_default(),
            call.name.as_deref().unwrap_or_default(),
        )))
    }

    /// The signer Secrets: created once from the disk's signer; when one has gone since, the
    /// operator makes a new signer and records it in the disk.
    async fn signer_secrets(
        &mut self,
        install: &crate::guest::state::InstallState,
        now: i64,
    ) -> Result<(), Error> {
        super::ensure_namespace(&self.client, KCM_OPERATOR_NAMESPACE).await?;
        let secrets = Api::<Secret>::namespaced(self.client.clone(), KCM_OPERATOR_NAMESPACE);
        let mut missing = false;
        for name in SIGNER_SECRETS {
            missing |= secrets.get_opt(name).await?.is_none();
        }
        if !missing {
            return Ok(());
        }
        // The operator's signers are real (their keys sign what the kube-controller-manager
        // issues, `super::csr_signer`); the installer's is a record.
        let (signer, made) = if install.signer_secrets_created {
            let signer = operator_signer(now);
            let days = (signer.not_after - signer.not_before) / 86_400;
            let top_cn = signer.issuer.trim_start_matches("CN=").to_owned();
            let top = Signer::generate(&top_cn, now, pki::CSR_SIGNER_SIGNER_DAYS)?;
            let own = Signer::generate(signer.subject.trim_start_matches("CN="), now, days)?;
            tracing::info!(signer = %signer.subject, "guest cluster: the kube-controller-manager operator made a new CSR signer");
            (signer, Some((top, own)))
        } else {
            (install.csr_signer.clone(), None)
        };
        for name in SIGNER_SECRETS {
            match secrets.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(err) => return Err(err.into()),
            }
            let secret = match &made {
                Some((top, own)) => {
                    let (held, until) = if name == super::csr_signer::SIGNER_SIGNER {
                        (top, now + pki::CSR_SIGNER_SIGNER_DAYS * 86_400)
                    } else {
                        (own, signer.not_after)
                    };
                    super::csr_signer::signer_secret(
                        KCM_OPERATOR_NAMESPACE,
                        name,
                        held,
                        &top.cn,
                        now,
                        until,
                    )?
                }
                None => signer_secret(name, &signer)?,
            };
            match secrets.create(&super::post_params(), &secret).await {
                Ok(_) => {}
                Err(kube::Error::Api(status)) if status.code == 409 => {}
                Err(err) => return Err(err.into()),
            }
        }
        self.guest.update(Box::new(move |s| {
            if let (Some(pki), Some((top, own))) = (s.pki.as_mut(), made) {
                pki.csr_signer_signer = Some(top);
                pki.csr_signer = Some(own);
            }
            if let Some(install) = s.install.as_mut() {
                install.csr_signer = signer;
                install.signer_secrets_created = true;
            }
        }));
        Ok(())
    }

    /// The kubelet's renewal CSRs (one per certificate and signer, see [`kubelet_csr_due`]).
    async fn renewal_csrs(&mut self, state: &GuestState, now: i64) -> Result<(), Error> {
        let Some(install) = &state.install else {
            return Ok(());
        };
        for signer in KUBELET_SIGNERS {
            let Some(cert_key) = kubelet_csr_due(state, signer, now) else {
                continue;
            };
            let key = (cert_key, install.csr_signer.subject.clone());
            if self.renewals_requested.get(signer) == Some(&key) {
                continue;
            }
            let csr = kubelet_csr(signer, super::KUBELET_USER)
                .map_err(|e| Error::Client(e.to_string()))?;
            self.requesters
                .csrs(signer, true)
                .create(&super::post_params(), &csr)
                .await?;
            tracing::info!(signer, "guest kubelet filed a renewal CSR");
            self.renewals_requested.insert(signer, key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: i64 = 1_800_000_000;

    fn cert(not_before: i64, lifetime: i64, issuer: &str) -> Certificate {
        Certificate {
            not_before,
            not_after: not_before + lifetime,
            issuer: issuer.into(),
            subject: "CN=x".into(),
        }
    }

    fn installed(stamp: i64) -> GuestState {
        let mut state = GuestState::default();
        for path in [paths::KUBELET_CLIENT_CERT, paths::KUBELET_SERVER_CERT] {
            state.add_certificate(path, cert(stamp, DAY, "CN=kubelet-signer, OU=openshift"));
        }
        state.add_certificate(paths::KUBELET_BOOTSTRAP_CERT, cert(stamp, DAY, "CN=b"));
        state.add_certificate(paths::AGGREGATOR_CLIENT_CERT, cert(stamp, DAY, "CN=lb"));
        state.add_certificate(
            &format!(
                "{}/kube-apiserver-certs/configmaps/client-ca/ca-bundle.crt",
                paths::STATIC_POD_RESOURCES
            ),
            cert(stamp, 3650 * DAY, "CN=root-ca"),
        );
        state
    }

    #[test]
    fn day_long_control_plane_certificates_rotate_past_their_rotation_point() {
        let mut state = installed(NOW);
        assert_eq!(rotate_control_plane(&mut state, NOW + DAY / 2), 0);
        // A day and an hour later (the cold restart): expired, renewed for 30 days.
        assert_eq!(rotate_control_plane(&mut state, NOW + DAY + 3600), 1);
        let lb = &state.certificates[paths::AGGREGATOR_CLIENT_CERT];
        assert_eq!(
            (lb.not_before, lb.not_after),
            (NOW + DAY + 3600, NOW + 31 * DAY + 3600)
        );
        let kubelet = &state.certificates[paths::KUBELET_CLIENT_CERT];
        assert_eq!(
            kubelet.not_before, NOW,
            "the kubelet's certificates are not the control plane's"
        );
    }

    #[test]
    fn an_expired_kubelet_needs_the_cred_manager_to_bootstrap_again() {
        let state = installed(NOW);
        assert_eq!(
            kubelet_csr_due(&state, KUBELET_SIGNERS[0], NOW + 60),
            None,
            "young"
        );
        // Past the rotation point but valid: renews with its own certificate.
        assert_eq!(
            kubelet_csr_due(&state, KUBELET_SIGNERS[0], NOW + DAY * 9 / 10),
            Some(NOW)
        );
        // Expired, bootstrap certificate expired too: stuck.
        let later = NOW + DAY + 3600;
        assert_eq!(kubelet_csr_due(&state, KUBELET_SIGNERS[0], later), None);
        assert_eq!(
            kubelet_csr_due(&state, KUBELET_SIGNERS[1], later),
            None,
            "no client certificate"
        );
        let mut managed = state.clone();
        apply_cred_manager(&mut managed);
        assert_eq!(
            kubelet_csr_due(&managed, KUBELET_SIGNERS[0], later),
            Some(NOW)
        );
        assert!(managed.file(paths::BOOTSTRAP_KUBECONFIG).is_some());
    }

    #[test]
    fn a_cred_manager_script_names_the_call_it_needs_allowed() {
        let minted = token_call("token=$(oc create token node-bootstrapper -n x)").unwrap();
        assert_eq!(
            (
                minted.verb.as_deref(),
                minted.resource.as_deref(),
                minted.subresource.as_deref()
            ),
            (Some("create"), Some("serviceaccounts"), Some("token"))
        );
        let read = token_call(
            "oc get secret -n openshift-machine-config-operator node-bootstrapper-token -o x",
        )
        .unwrap();
        assert_eq!(
            (read.verb.as_deref(), read.name.as_deref()),
            (Some("get"), Some("node-bootstrapper-token"))
        );
        assert_eq!(token_call("sleep 3600"), None);
    }

    #[test]
    fn the_installer_signer_caps_what_it_issues_and_a_new_one_issues_thirty_days() {
        let installer = cert(NOW, DAY, "CN=kubelet-signer, OU=openshift");
        assert_eq!(
            issue_window(&installer, NOW + 60),
            Ok((NOW + 60 - BACKDATE, NOW + DAY))
        );
        assert!(issue_window(&installer, NOW + DAY + 1).is_err());
        let fresh = operator_signer(NOW + DAY);
        assert_ne!(fresh.subject, installer.subject);
        assert_eq!(
            issue_window(&fresh, NOW + DAY + 60),
            Ok((NOW + DAY + 60 - BACKDATE, NOW + DAY + 60 + SIGNING_DURATION))
        );
    }

    #[test]
    fn operators_come_up_one_after_another() {
        let total = std::time::Duration::from_secs(8);
        let up = |elapsed| {
            (0..8)
                .filter(|i| {
                    operator_up_during_install(
                        *i,
                        8,
                        std::time::Duration::from_secs(elapsed),
                        total,
                    )
                })
                .count()
        };
        assert_eq!((up(0), up(1), up(4), up(8)), (0, 1, 4, 8));
    }
}
