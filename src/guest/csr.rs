//! Which kubelet CSRs the operator approves in a guest: only the ones the guest's own kubelet
//! could have filed. Approving every pending kubelet CSR would let anything that can create a CSR
//! in the guest (any authenticated user may) obtain a `system:node:crc` certificate, i.e. the
//! node's powers. The rules are the kube-controller-manager's and OpenShift's machine approver's,
//! narrowed to the one node a CRC guest has:
//!
//! - the requester is the node itself (`system:node:<node>`), or, for the client certificate
//!   only, the node bootstrapper account the kubelet's bootstrap kubeconfig authenticates as;
//! - the request's subject is exactly `CN=system:node:<node>, O=system:nodes`;
//! - the usages are the signer's: `client auth` or `server auth`, with `digital signature` and
//!   optionally `key encipherment`, nothing else.

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::prelude::FromDer;

/// CSR signers of the kubelet's client and serving certificates, approved in step 12 of the
/// CRC startup path.
pub const KUBELET_SIGNERS: [&str; 2] = [
    "kubernetes.io/kube-apiserver-client-kubelet",
    "kubernetes.io/kubelet-serving",
];

/// The account the kubelet's bootstrap kubeconfig authenticates as on OpenShift.
pub const NODE_BOOTSTRAPPER: &str =
    "system:serviceaccount:openshift-machine-config-operator:node-bootstrapper";
const NODES_GROUP: &str = "system:nodes";

/// Why a kubelet CSR is left for someone else to decide.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    #[error("signer {0} is not a kubelet signer")]
    Signer(String),
    #[error("requested by {user}, not by node {node}{also}")]
    Requester {
        user: String,
        node: String,
        also: &'static str,
    },
    #[error("the request does not parse as a PKCS#10 CSR")]
    Request,
    #[error("subject {got:?}, not CN=system:node:{node}, O={NODES_GROUP}")]
    Subject { got: String, node: String },
    #[error("usages {got:?} are not {signer}'s")]
    Usages { got: Vec<String>, signer: String },
}

/// Whether `csr` is one the kubelet of `node` filed; the refusal says why not.
pub fn review(csr: &CertificateSigningRequest, node: &str) -> Result<(), Refusal> {
    let signer = csr.spec.signer_name.as_str();
    let client = signer == KUBELET_SIGNERS[0];
    if !KUBELET_SIGNERS.contains(&signer) {
        return Err(Refusal::Signer(signer.to_owned()));
    }
    let node_user = format!("system:node:{node}");
    let user = csr.spec.username.as_deref().unwrap_or_default();
    let requester_ok = user == node_user || (client && user == NODE_BOOTSTRAPPER);
    if !requester_ok {
        return Err(Refusal::Requester {
            user: user.to_owned(),
            node: node.to_owned(),
            also: if client {
                " or the node bootstrapper"
            } else {
                ""
            },
        });
    }
    let subject = subject(&csr.spec.request.0).ok_or(Refusal::Request)?;
    if subject != (vec![node_user.clone()], vec![NODES_GROUP.to_owned()]) {
        return Err(Refusal::Subject {
            got: format!("CN={}, O={}", subject.0.join("+"), subject.1.join("+")),
            node: node.to_owned(),
        });
    }
    let purpose = if client { "client auth" } else { "server auth" };
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let allowed = ["digital signature", "key encipherment", purpose];
    let fits = usages.iter().any(|u| u == purpose)
        && usages.iter().any(|u| u == "digital signature")
        && usages.iter().all(|u| allowed.contains(&u.as_str()));
    if !fits {
        return Err(Refusal::Usages {
            got: usages,
            signer: signer.to_owned(),
        });
    }
    Ok(())
}

/// The request's common names and organizations (PEM or DER).
fn subject(request: &[u8]) -> Option<(Vec<String>, Vec<String>)> {
    let der = match x509_parser::pem::parse_x509_pem(request) {
        Ok((_, pem)) if pem.label == "CERTIFICATE REQUEST" => pem.contents,
        Ok(_) => return None,
        Err(_) => request.to_vec(),
    };
    let (_, csr) = X509CertificationRequest::from_der(&der).ok()?;
    let name = &csr.certification_request_info.subject;
    let strings = |iter: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue>| {
        iter.map(|a| a.as_str().map(str::to_owned))
            .collect::<Result<Vec<_>, _>>()
            .ok()
    };
    Some((
        strings(&mut name.iter_common_name())?,
        strings(&mut name.iter_organization())?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(cn: &str, org: &str) -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::default();
        let mut dn = rcgen::DistinguishedName::new();
        dn.push(rcgen::DnType::CommonName, cn);
        dn.push(rcgen::DnType::OrganizationName, org);
        params.distinguished_name = dn;
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn csr(signer: &str, user: &str, pem: &str, usages: &[&str]) -> CertificateSigningRequest {
        use base64::Engine as _;
        serde_json::from_value(json!({
            "metadata": {"name": "csr-1"},
            "spec": {
                "request": base64::engine::general_purpose::STANDARD.encode(pem),
                "signerName": signer, "username": user, "usages": usages,
            },
        }))
        .unwrap()
    }

    #[test]
    fn the_nodes_own_csrs_and_the_bootstrappers_client_csr_pass() {
        let pem = request("system:node:crc", "system:nodes");
        let [client, serving] = KUBELET_SIGNERS;
        let client_usages = ["digital signature", "key encipherment", "client auth"];
        for user in ["system:node:crc", NODE_BOOTSTRAPPER] {
            assert_eq!(
                review(&csr(client, user, &pem, &client_usages), "crc"),
                Ok(())
            );
        }
        let serving_usages = ["digital signature", "server auth"];
        assert_eq!(
            review(
                &csr(serving, "system:node:crc", &pem, &serving_usages),
                "crc"
            ),
            Ok(())
        );
    }

    #[test]
    fn anyone_else_or_another_subject_or_extra_usages_are_refused() {
        let [client, serving] = KUBELET_SIGNERS;
        let good = request("system:node:crc", "system:nodes");
        let usages = ["digital signature", "client auth"];
        let refused = |c: CertificateSigningRequest| review(&c, "crc").unwrap_err();

        assert!(matches!(
            refused(csr(client, "developer", &good, &usages)),
            Refusal::Requester { .. }
        ));
        assert!(matches!(
            refused(csr(client, "system:node:other", &good, &usages)),
            Refusal::Requester { .. }
        ));
        // The bootstrapper may only ask for the client certificate.
        assert!(matches!(
            refused(csr(
                serving,
                NODE_BOOTSTRAPPER,
                &good,
                &["digital signature", "server auth"]
            )),
            Refusal::Requester { .. }
        ));
        assert!(matches!(
            refused(csr(
                client,
                "system:node:crc",
                &request("system:admin", "system:masters"),
                &usages
            )),
            Refusal::Subject { .. }
        ));
        assert!(matches!(
            refused(csr(
                client,
                "system:node:crc",
                &good,
                &["digital signature", "client auth", "server auth"]
            )),
            Refusal::Usages { .. }
        ));
        assert_eq!(
            refused(csr(client, "system:node:crc", "not a request", &usages)),
            Refusal::Request
        );
        assert!(matches!(
            refused(csr(
                "kubernetes.io/kube-apiserver-client",
                "system:node:crc",
                &good,
                &usages
            )),
            Refusal::Signer(_)
        ));
    }
}
