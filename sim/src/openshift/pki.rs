//! The PKI a CRC guest carries in its disk: the API server's serving CA and certificate (for
//! `api.crc.testing`), and the `admin-kubeconfig` client CA with the admin certificate that
//! `/opt/kubeconfig` holds. Clones of one disk share it, exactly like real CRC clones do, which is
//! why every instance gets its own identity from the crc-agent.

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use serde::{Deserialize, Serialize};
use time::OffsetDateTime;

/// Host names the guest API serving certificate covers.
pub const SERVING_NAMES: [&str; 3] = ["api.crc.testing", "api-int.crc.testing", "localhost"];

/// Errors of certificate generation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("generating a certificate: {0}")]
    Rcgen(#[from] rcgen::Error),
    #[error("invalid validity time {0}")]
    Time(i64),
    #[error("invalid certificate signing request: {0}")]
    Request(String),
}

/// PEM-encoded key material of one guest cluster.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GuestPki {
    pub server_ca_cert: String,
    pub server_ca_key: String,
    pub serving_cert: String,
    pub serving_key: String,
    pub admin_ca_cert: String,
    pub admin_ca_key: String,
    /// `system:admin` in `system:masters`, signed by the admin CA.
    pub admin_cert: String,
    pub admin_key: String,
    /// Validity of the leaf certificates (guest time, unix seconds).
    pub not_before: i64,
    pub not_after: i64,
    /// The API server's other client-certificate signers, by Secret name
    /// (`node-system-admin-signer`, `kube-control-plane-signer`): made with the disk's PKI, so
    /// every clone of the disk trusts the same ones until its cluster makes new ones.
    #[serde(default)]
    pub client_signers: std::collections::BTreeMap<String, Signer>,
    /// The kube-controller-manager operator's `csr-signer-signer` and the `csr-signer` it
    /// vouches for, which signs every `kubernetes.io/*` CSR (the kubelet's certificates among
    /// them): the disk's, so shared by every clone until its cluster makes new ones.
    #[serde(default)]
    pub csr_signer_signer: Option<Signer>,
    #[serde(default)]
    pub csr_signer: Option<Signer>,
}

/// A self-signed signer: its certificate and key, PEM.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signer {
    /// Its common name: the issuer of what it signs.
    pub cn: String,
    pub cert: String,
    pub key: String,
}

impl Signer {
    /// A new signer named `cn`, valid from `not_before` for `days` (unix seconds).
    pub fn generate(cn: &str, not_before: i64, days: i64) -> Result<Signer, Error> {
        let key = KeyPair::generate()?;
        let mut params = ca_params(cn);
        params.not_before =
            OffsetDateTime::from_unix_timestamp(not_before).map_err(|_| Error::Time(not_before))?;
        let not_after = not_before + days * 86_400;
        params.not_after =
            OffsetDateTime::from_unix_timestamp(not_after).map_err(|_| Error::Time(not_after))?;
        let cert = params.self_signed(&key)?;
        Ok(Signer {
            cn: cn.to_owned(),
            cert: cert.pem(),
            key: key.serialize_pem(),
        })
    }

    /// A client certificate for `user` in `group` signed by this signer (what anyone holding
    /// its key can make), valid from `not_before` to `not_after`.
    pub fn client_cert(
        &self,
        user: &str,
        group: &str,
        not_before: i64,
        not_after: i64,
    ) -> Result<(String, String), Error> {
        // As for the admin CA: the issuer is rebuilt from the parameters the signer was made
        // with (its name and key are what a signature carries).
        let issuer = Issuer::new(ca_params(&self.cn), KeyPair::from_pem(&self.key)?);
        let mut client = CertificateParams::default();
        client.distinguished_name = name(user, Some(group));
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        leaf(client, &issuer, not_before, not_after)
    }
}

/// The client-certificate signers a new disk's PKI holds besides the admin one, by Secret name.
pub const CLIENT_SIGNERS: [&str; 2] = ["node-system-admin-signer", "kube-control-plane-signer"];

/// Lifetimes of the kube-controller-manager operator's CSR signers, in days
/// (cluster-kube-controller-manager-operator `certrotationcontroller.go`: 60 and 30).
pub const CSR_SIGNER_SIGNER_DAYS: i64 = 60;
pub const CSR_SIGNER_DAYS: i64 = 30;

/// A new `csr-signer-signer` and `csr-signer` made at guest time `now`, named as the operator
/// names them. (Upstream the second is signed by the first; here both are self-signed: the API
/// server trusts both bundles' certificates as roots either way.)
pub fn csr_signers(now: i64) -> Result<(Signer, Signer), Error> {
    Ok((
        Signer::generate(
            &format!("openshift-kube-controller-manager-operator_csr-signer-signer@{now}"),
            now,
            CSR_SIGNER_SIGNER_DAYS,
        )?,
        Signer::generate(&format!("kube-csr-signer_@{now}"), now, CSR_SIGNER_DAYS)?,
    ))
}

/// The common name of the first certificate of a PEM text.
pub fn common_name(pem: &str) -> Option<String> {
    use x509_parser::prelude::FromDer as _;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).ok()?;
    let (_, cert) = x509_parser::certificate::X509Certificate::from_der(&block.contents).ok()?;
    cert.subject()
        .iter_common_name()
        .next()?
        .as_str()
        .ok()
        .map(str::to_owned)
}

impl GuestPki {
    /// Fresh key material whose leaves are valid from `not_before` for `days` (guest time).
    pub fn generate(not_before: i64, days: i64) -> Result<GuestPki, Error> {
        let not_after = not_before + days * 86_400;
        let (server_ca_cert, server_ca_key, server_issuer) = ca(SERVER_CA)?;
        let (admin_ca_cert, admin_ca_key, admin_issuer) = ca(ADMIN_CA)?;

        let mut serving = CertificateParams::new(
            SERVING_NAMES
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>(),
        )?;
        serving.distinguished_name = name("api.crc.testing", None);
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        for ip in ["127.0.0.1", "192.168.126.11"] {
            if let Ok(ip) = ip.parse() {
                serving
                    .subject_alt_names
                    .push(rcgen::SanType::IpAddress(ip));
            }
        }
        let (serving_cert, serving_key) = leaf(serving, &server_issuer, not_before, not_after)?;

        let mut admin = CertificateParams::default();
        admin.distinguished_name = name("system:admin", Some("system:masters"));
        admin.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let (admin_cert, admin_key) = leaf(admin, &admin_issuer, not_before, not_after)?;

        let mut client_signers = std::collections::BTreeMap::new();
        for signer in CLIENT_SIGNERS {
            let cn = format!("openshift-kube-apiserver-operator_{signer}@{not_before}");
            client_signers.insert(signer.to_owned(), Signer::generate(&cn, not_before, 365)?);
        }
        let (csr_signer_signer, csr_signer) = csr_signers(not_before)?;
        Ok(GuestPki {
            client_signers,
            csr_signer_signer: Some(csr_signer_signer),
            csr_signer: Some(csr_signer),
            server_ca_cert,
            server_ca_key,
            serving_cert,
            serving_key,
            admin_ca_cert,
            admin_ca_key,
            admin_cert,
            admin_key,
            not_before,
            not_after,
        })
    }

    /// A client certificate for `user` in `group`, signed by a CA in the admin client bundle,
    /// valid like the other leaves. The simulation's own controllers use one of these, so they
    /// keep working when the user's bundle is replaced.
    pub fn client_cert(&self, user: &str, group: &str) -> Result<(String, String), Error> {
        // The issuer needs only the CA's name, key usages and key: rebuild them from the same
        // parameters the CA was made with.
        let issuer = Issuer::new(ca_params(ADMIN_CA), KeyPair::from_pem(&self.admin_ca_key)?);
        let mut client = CertificateParams::default();
        client.distinguished_name = name(user, Some(group));
        client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        leaf(client, &issuer, self.not_before, self.not_after)
    }
}

fn name(cn: &str, org: Option<&str>) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    if let Some(org) = org {
        dn.push(DnType::OrganizationName, org);
    }
    dn
}

const SERVER_CA: &str = "kube-apiserver-serving-ca";
const ADMIN_CA: &str = "admin-kubeconfig-signer";

fn ca(cn: &str) -> Result<(String, String, Issuer<'static, KeyPair>), Error> {
    let key = KeyPair::generate()?;
    let params = ca_params(cn);
    let cert = params.self_signed(&key)?;
    let (cert_pem, key_pem) = (cert.pem(), key.serialize_pem());
    Ok((cert_pem, key_pem, Issuer::new(params, key)))
}

fn ca_params(cn: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = name(cn, Some("openshift"));
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    // CAs are long-lived in OpenShift (10 years for the signers); only leaves expire in tests.
    params.not_before = rcgen::date_time_ymd(2000, 1, 1);
    params.not_after = rcgen::date_time_ymd(2100, 1, 1);
    params
}

fn leaf(
    mut params: CertificateParams,
    issuer: &Issuer<'_, KeyPair>,
    not_before: i64,
    not_after: i64,
) -> Result<(String, String), Error> {
    params.not_before =
        OffsetDateTime::from_unix_timestamp(not_before).map_err(|_| Error::Time(not_before))?;
    params.not_after =
        OffsetDateTime::from_unix_timestamp(not_after).map_err(|_| Error::Time(not_after))?;
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

/// A signer of the simulated kube-controller-manager: its own CA, which issues the certificates
/// of approved CertificateSigningRequests naming it (so the signer determines the issuer, as in
/// a real cluster).
pub struct CsrSigner {
    /// The signer's CA certificate, PEM.
    pub ca_cert: String,
    issuer: Issuer<'static, KeyPair>,
}

impl CsrSigner {
    /// A fresh CA for `signer_name` (for example `kubernetes.io/kubelet-serving`).
    pub fn generate(signer_name: &str) -> Result<CsrSigner, Error> {
        let (ca_cert, _key, issuer) = ca(&format!("kube-csr-signer_@{signer_name}"))?;
        Ok(CsrSigner { ca_cert, issuer })
    }

    /// Signs with `signer`'s key, as the kube-controller-manager does with the `csr-signer` it
    /// was given.
    pub fn from_signer(signer: &Signer) -> Result<CsrSigner, Error> {
        Ok(CsrSigner {
            ca_cert: signer.cert.clone(),
            issuer: Issuer::new(ca_params(&signer.cn), KeyPair::from_pem(&signer.key)?),
        })
    }

    /// The certificate (PEM) for a PEM-encoded PKCS#10 `request`: its subject, SANs and key, the
    /// CSR's `usages` (Kubernetes names, like "client auth"), valid from `not_before` to
    /// `not_after` (unix seconds).
    pub fn sign(
        &self,
        request: &[u8],
        usages: &[String],
        not_before: i64,
        not_after: i64,
    ) -> Result<String, Error> {
        use x509_parser::extensions::{GeneralName, ParsedExtension};
        use x509_parser::prelude::FromDer as _;
        let bad = |what: &str| Error::Request(what.to_owned());
        let (_, pem) =
            x509_parser::pem::parse_x509_pem(request).map_err(|e| Error::Request(e.to_string()))?;
        if pem.label != "CERTIFICATE REQUEST" {
            return Err(Error::Request(format!("a {} PEM block", pem.label)));
        }
        let (_, csr) =
            x509_parser::certification_request::X509CertificationRequest::from_der(&pem.contents)
                .map_err(|e| Error::Request(e.to_string()))?;
        csr.verify_signature()
            .map_err(|e| Error::Request(format!("signature: {e}")))?;
        let info = &csr.certification_request_info;
        let key = RequestKey::from_spki(&info.subject_pki)?;

        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        for cn in info.subject.iter_common_name() {
            dn.push(DnType::CommonName, cn.as_str().map_err(|_| bad("CN"))?);
        }
        for org in info.subject.iter_organization() {
            dn.push(
                DnType::OrganizationName,
                org.as_str().map_err(|_| bad("O"))?,
            );
        }
        params.distinguished_name = dn;
        for ext in csr.requested_extensions().into_iter().flatten() {
            let ParsedExtension::SubjectAlternativeName(san) = ext else {
                continue;
            };
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(dns) => params.subject_alt_names.push(
                        rcgen::SanType::DnsName((*dns).try_into().map_err(|_| bad("DNS name"))?),
                    ),
                    GeneralName::IPAddress(ip) => {
                        let ip = match ip.len() {
                            4 => <[u8; 4]>::try_from(*ip).map(std::net::IpAddr::from).ok(),
                            16 => <[u8; 16]>::try_from(*ip).map(std::net::IpAddr::from).ok(),
                            _ => None,
                        };
                        params
                            .subject_alt_names
                            .push(rcgen::SanType::IpAddress(ip.ok_or_else(|| bad("IP"))?));
                    }
                    _ => {}
                }
            }
        }
        for usage in usages {
            match usage.as_str() {
                "digital signature" => params.key_usages.push(KeyUsagePurpose::DigitalSignature),
                "key encipherment" => params.key_usages.push(KeyUsagePurpose::KeyEncipherment),
                "client auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ClientAuth),
                "server auth" => params
                    .extended_key_usages
                    .push(ExtendedKeyUsagePurpose::ServerAuth),
                _ => {}
            }
        }
        params.not_before =
            OffsetDateTime::from_unix_timestamp(not_before).map_err(|_| Error::Time(not_before))?;
        params.not_after =
            OffsetDateTime::from_unix_timestamp(not_after).map_err(|_| Error::Time(not_after))?;
        params.use_authority_key_identifier_extension = true;
        Ok(params.signed_by(&key, &self.issuer)?.pem())
    }
}

/// The public key of a certificate request, as rcgen needs it to certify the key.
struct RequestKey {
    der: Vec<u8>,
    algorithm: &'static rcgen::SignatureAlgorithm,
}

impl RequestKey {
    fn from_spki(spki: &x509_parser::x509::SubjectPublicKeyInfo<'_>) -> Result<RequestKey, Error> {
        use x509_parser::oid_registry::{
            OID_EC_P256, OID_KEY_TYPE_EC_PUBLIC_KEY, OID_NIST_EC_P384, OID_PKCS1_RSAENCRYPTION,
            OID_SIG_ED25519,
        };
        let oid = &spki.algorithm.algorithm;
        let curve = spki
            .algorithm
            .parameters
            .as_ref()
            .and_then(|p| p.as_oid().ok());
        let algorithm = if *oid == OID_KEY_TYPE_EC_PUBLIC_KEY {
            match curve {
                Some(c) if c == OID_EC_P256 => &rcgen::PKCS_ECDSA_P256_SHA256,
                Some(c) if c == OID_NIST_EC_P384 => &rcgen::PKCS_ECDSA_P384_SHA384,
                _ => return Err(Error::Request(format!("unsupported EC curve {curve:?}"))),
            }
        } else if *oid == OID_PKCS1_RSAENCRYPTION {
            &rcgen::PKCS_RSA_SHA256
        } else if *oid == OID_SIG_ED25519 {
            &rcgen::PKCS_ED25519
        } else {
            return Err(Error::Request(format!("unsupported key type {oid}")));
        };
        Ok(RequestKey {
            der: spki.subject_public_key.data.to_vec(),
            algorithm,
        })
    }
}

impl rcgen::PublicKeyData for RequestKey {
    fn der_bytes(&self) -> &[u8] {
        &self.der
    }

    fn algorithm(&self) -> &'static rcgen::SignatureAlgorithm {
        self.algorithm
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rcgen::PublicKeyData as _;

    #[test]
    fn generates_pem_material_with_the_given_validity() {
        let pki = GuestPki::generate(1_700_000_000, 30).unwrap();
        assert!(pki.serving_cert.starts_with("-----BEGIN CERTIFICATE-----"));
        assert_eq!(pki.not_after - pki.not_before, 30 * 86_400);
        let (cert, key) = pki
            .client_cert("guestcluster-sim", "system:masters")
            .unwrap();
        assert!(cert.contains("CERTIFICATE") && key.contains("PRIVATE KEY"));
    }

    #[test]
    fn a_csr_signer_made_from_a_disk_signer_signs_with_its_key() {
        let (_, disk) = csr_signers(1_700_000_000).unwrap();
        assert_eq!(
            common_name(&disk.cert).as_deref(),
            Some("kube-csr-signer_@1700000000")
        );
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name = name("system:node:crc", Some("system:nodes"));
        let request = params.serialize_request(&key).unwrap().pem().unwrap();
        let pem = CsrSigner::from_signer(&disk)
            .unwrap()
            .sign(
                request.as_bytes(),
                &["client auth".to_owned()],
                1_700_000_000,
                1_700_086_400,
            )
            .unwrap();
        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        let cert = block.parse_x509().unwrap();
        let (_, ca) = x509_parser::pem::parse_x509_pem(disk.cert.as_bytes()).unwrap();
        let ca = ca.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca.subject());
        cert.verify_signature(Some(ca.public_key())).unwrap();
    }

    #[test]
    fn a_csr_signer_certifies_the_requested_subject_and_key() {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(vec!["crc".to_owned()]).unwrap();
        params.distinguished_name = name("system:node:crc", Some("system:nodes"));
        let request = params.serialize_request(&key).unwrap().pem().unwrap();
        let signer = CsrSigner::generate("kubernetes.io/kubelet-serving").unwrap();
        let usages = ["digital signature", "server auth"].map(str::to_owned);
        let pem = signer
            .sign(request.as_bytes(), &usages, 1_700_000_000, 1_700_086_400)
            .unwrap();

        let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
        assert_eq!(block.label, "CERTIFICATE");
        let cert = block.parse_x509().unwrap();
        let (_, ca) = x509_parser::pem::parse_x509_pem(signer.ca_cert.as_bytes()).unwrap();
        let ca = ca.parse_x509().unwrap();
        assert_eq!(cert.issuer(), ca.subject());
        cert.verify_signature(Some(ca.public_key())).unwrap();
        assert_eq!(
            cert.subject().to_string(),
            "CN=system:node:crc, O=system:nodes"
        );
        assert_eq!(
            cert.public_key().raw,
            key.subject_public_key_info().as_slice()
        );
        assert_eq!(cert.validity().not_before.timestamp(), 1_700_000_000);
        assert!(
            cert.extended_key_usage()
                .unwrap()
                .unwrap()
                .value
                .server_auth
        );

        assert!(matches!(
            signer.sign(b"not a request", &usages, 0, 1),
            Err(Error::Request(_))
        ));
    }
}
