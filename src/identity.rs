//! The instance identity (`docs/decisions.md`, "ECDSA P-256 instance identities"): the
//! `<instance>-crc-identity` Secret that the operator creates once per instance and the crc-agent
//! installs into the guest.
//!
//! - a **client CA** (`admin-kubeconfig-signer-custom`), whose private key is thrown away as soon
//!   as it has signed the client certificate, so nobody can mint more admin certificates;
//! - the **client certificate** `system:admin` / `system:masters` the handoff kubeconfig uses;
//! - a self-signed **serving certificate** for the Route host, which the guest API presents for
//!   that name and which the handoff kubeconfig trusts as its CA.
//!
//! Upstream generates RSA-2048 keys. rcgen on the `ring` backend cannot generate RSA keys, so
//! [`generate`] makes ECDSA P-256 keys; [`validate`] accepts both, because identities created by
//! the Go operator survive an operator swap.

use std::collections::BTreeMap;
use std::path::Path;

use k8s_openapi::ByteString;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SerialNumber,
};
use rustls::pki_types::PrivateKeyDer;
use rustls::pki_types::pem::PemObject as _;
use time::OffsetDateTime;
use x509_parser::certificate::X509Certificate;
use x509_parser::extensions::GeneralName;
use x509_parser::time::ASN1Time;

/// Secret key of the client CA certificate.
pub const CLIENT_CA_CRT: &str = "client-ca.crt";
/// Secret key of the `system:admin` client certificate.
pub const CLIENT_CRT: &str = "client.crt";
/// Secret key of the client certificate's private key.
pub const CLIENT_KEY: &str = "client.key";
/// Secret key of the self-signed serving certificate for the API host.
pub const SERVING_CRT: &str = "serving.crt";
/// Secret key of the serving certificate's private key.
pub const SERVING_KEY: &str = "serving.key";
/// All five keys, in the order upstream lists them.
pub const KEYS: [&str; 5] = [
    CLIENT_CA_CRT,
    CLIENT_CRT,
    CLIENT_KEY,
    SERVING_CRT,
    SERVING_KEY,
];

pub const CLIENT_CA_CN: &str = "admin-kubeconfig-signer-custom";
pub const CLIENT_CA_OU: &str = "openshift";
pub const CLIENT_CN: &str = "system:admin";
pub const CLIENT_GROUP: &str = "system:masters";

const VALIDITY_YEARS: i32 = 10;

/// Which certificate a problem is about, for messages.
const CLIENT_CA: &str = "client CA certificate";
const CLIENT: &str = "client certificate";
const SERVING: &str = "serving certificate";

/// The five PEM documents of an identity.
#[derive(Clone, PartialEq, Eq)]
pub struct Identity {
    pub client_ca_crt: String,
    pub client_crt: String,
    pub client_key: String,
    pub serving_crt: String,
    pub serving_key: String,
}

// Private keys must never reach logs through `{:?}`.
impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("client_ca_crt", &self.client_ca_crt)
            .field("client_crt", &self.client_crt)
            .field("serving_crt", &self.serving_crt)
            .finish_non_exhaustive()
    }
}

/// Why an identity could not be made, read or trusted.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("generating the identity: {0}")]
    Generate(String),
    #[error("identity is missing key {0:?}")]
    MissingKey(&'static str),
    #[error("identity key {key:?} is not UTF-8 text")]
    NotText { key: &'static str },
    #[error("reading identity file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{cert}: not a PEM X.509 certificate: {reason}")]
    Parse { cert: &'static str, reason: String },
    #[error("{cert}: not valid before {not_before} (now {now})")]
    NotYetValid {
        cert: &'static str,
        not_before: String,
        now: String,
    },
    #[error("{cert}: expired at {not_after} (now {now})")]
    Expired {
        cert: &'static str,
        not_after: String,
        now: String,
    },
    #[error("{cert}: not a CA (basic constraints CA flag missing)")]
    NotCa { cert: &'static str },
    #[error("{cert}: subject {field} is {found:?}, expected {expected:?}")]
    Subject {
        cert: &'static str,
        field: &'static str,
        expected: String,
        found: String,
    },
    #[error("{cert}: extended key usage {usage} missing")]
    MissingUsage {
        cert: &'static str,
        usage: &'static str,
    },
    #[error("{cert}: signature does not verify against {signer}: {reason}")]
    Signature {
        cert: &'static str,
        signer: &'static str,
        reason: String,
    },
    #[error("{cert}: private key unreadable: {reason}")]
    Key { cert: &'static str, reason: String },
    #[error("{cert}: private key does not belong to the certificate")]
    KeyMismatch { cert: &'static str },
    #[error("{cert}: DNS names {found:?}, expected exactly [{host:?}]")]
    HostMismatch {
        cert: &'static str,
        host: String,
        found: Vec<String>,
    },
}

impl From<rcgen::Error> for Error {
    fn from(err: rcgen::Error) -> Self {
        Error::Generate(err.to_string())
    }
}

/// A fresh identity for `host`, valid from `now_unix` for ten years.
pub fn generate(host: &str, now_unix: i64) -> Result<Identity, Error> {
    let not_before = OffsetDateTime::from_unix_timestamp(now_unix)
        .map_err(|e| Error::Generate(format!("time {now_unix}: {e}")))?;
    let not_after = ten_years_after(not_before);
    let params = |names: Vec<String>| -> Result<CertificateParams, Error> {
        let mut params = CertificateParams::new(names)?;
        params.not_before = not_before;
        params.not_after = not_after;
        params.serial_number = Some(random_serial()?);
        params.distinguished_name = DistinguishedName::new();
        Ok(params)
    };

    let mut ca = params(Vec::new())?;
    ca.distinguished_name.push(DnType::CommonName, CLIENT_CA_CN);
    ca.distinguished_name
        .push(DnType::OrganizationalUnitName, CLIENT_CA_OU);
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    let ca_key = KeyPair::generate()?;
    let client_ca_crt = ca.self_signed(&ca_key)?.pem();
    // Dropped at the end of this function: the CA key only ever signs this one certificate.
    let issuer = Issuer::new(ca, ca_key);

    let mut client = params(Vec::new())?;
    client
        .distinguished_name
        .push(DnType::CommonName, CLIENT_CN);
    // Kubernetes takes groups from O; upstream sets OU. Both, so either reading agrees.
    client
        .distinguished_name
        .push(DnType::OrganizationName, CLIENT_GROUP);
    client
        .distinguished_name
        .push(DnType::OrganizationalUnitName, CLIENT_GROUP);
    client.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    client.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate()?;
    let client_crt = client.signed_by(&client_key, &issuer)?.pem();

    let mut serving = params(vec![host.to_string()])?;
    serving.distinguished_name.push(DnType::CommonName, host);
    // Its own trust root: the handoff kubeconfig names it as the CA of the Route host.
    serving.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    serving.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_key = KeyPair::generate()?;
    let serving_crt = serving.self_signed(&serving_key)?.pem();

    Ok(Identity {
        client_ca_crt,
        client_crt,
        client_key: client_key.serialize_pem(),
        serving_crt,
        serving_key: serving_key.serialize_pem(),
    })
}

fn ten_years_after(start: OffsetDateTime) -> OffsetDateTime {
    // 29 February has no counterpart ten years on; Go's AddDate rolls it to 1 March.
    start
        .replace_year(start.year() + VALIDITY_YEARS)
        .unwrap_or_else(|_| start + time::Duration::days(3653))
}

fn random_serial() -> Result<SerialNumber, Error> {
    let mut bytes = [0u8; 16];
    rustls::crypto::ring::default_provider()
        .secure_random
        .fill(&mut bytes)
        .map_err(|_| Error::Generate("no system randomness for a serial number".into()))?;
    // A positive DER INTEGER that never collapses to fewer bytes than 128 bits need.
    bytes[0] = (bytes[0] & 0x7f) | 0x40;
    Ok(SerialNumber::from_slice(&bytes))
}

/// Checks that `identity` can be trusted for `host` at `now_unix`: on every operator pass and in
/// the agent's pre-flight, as upstream does.
pub fn validate(identity: &Identity, host: &str, now_unix: i64) -> Result<(), Error> {
    let now = ASN1Time::from_timestamp(now_unix).map_err(|e| Error::Parse {
        cert: CLIENT_CA,
        reason: format!("time {now_unix}: {e}"),
    })?;
    let ca_der = pem_der(&identity.client_ca_crt, CLIENT_CA)?;
    let ca = parse(&ca_der, CLIENT_CA)?;
    let client_der = pem_der(&identity.client_crt, CLIENT)?;
    let client = parse(&client_der, CLIENT)?;
    let serving_der = pem_der(&identity.serving_crt, SERVING)?;
    let serving = parse(&serving_der, SERVING)?;

    for (cert, name) in [(&ca, CLIENT_CA), (&client, CLIENT), (&serving, SERVING)] {
        check_validity(cert, name, now)?;
    }

    if !ca.is_ca() {
        return Err(Error::NotCa { cert: CLIENT_CA });
    }

    expect_attr(CLIENT, "CN", CLIENT_CN, common_names(&client))?;
    expect_attr(CLIENT, "OU", CLIENT_GROUP, org_units(&client))?;
    let eku = client.extended_key_usage().ok().flatten();
    if !eku.is_some_and(|e| e.value.client_auth) {
        return Err(Error::MissingUsage {
            cert: CLIENT,
            usage: "clientAuth",
        });
    }
    client
        .verify_signature(Some(ca.public_key()))
        .map_err(|e| Error::Signature {
            cert: CLIENT,
            signer: CLIENT_CA,
            reason: e.to_string(),
        })?;
    check_key(&client, &identity.client_key, CLIENT)?;

    let names = dns_names(&serving);
    if names.len() != 1 || names[0] != host {
        return Err(Error::HostMismatch {
            cert: SERVING,
            host: host.to_string(),
            found: names,
        });
    }
    expect_attr(SERVING, "CN", host, common_names(&serving))?;
    let eku = serving.extended_key_usage().ok().flatten();
    if !eku.is_some_and(|e| e.value.server_auth) {
        return Err(Error::MissingUsage {
            cert: SERVING,
            usage: "serverAuth",
        });
    }
    serving
        .verify_signature(None)
        .map_err(|e| Error::Signature {
            cert: SERVING,
            signer: "itself",
            reason: e.to_string(),
        })?;
    check_key(&serving, &identity.serving_key, SERVING)?;
    Ok(())
}

/// The single DNS name of a serving certificate: the host it was made for.
pub fn serving_host(serving_crt_pem: &str) -> Option<String> {
    let der = pem_der(serving_crt_pem, SERVING).ok()?;
    let cert = parse(&der, SERVING).ok()?;
    match dns_names(&cert).as_slice() {
        [one] => Some(one.clone()),
        _ => None,
    }
}

impl Identity {
    /// The data of the identity Secret.
    pub fn to_secret_data(&self) -> BTreeMap<String, ByteString> {
        self.fields()
            .into_iter()
            .map(|(key, value)| (key.to_string(), ByteString(value.as_bytes().to_vec())))
            .collect()
    }

    /// Reads the identity Secret's data; a missing key is an error naming it.
    pub fn from_secret_data(data: &BTreeMap<String, ByteString>) -> Result<Self, Error> {
        Self::from_lookup(|key| data.get(key).map(|value| value.0.clone()).ok_or(None))
    }

    /// Reads the identity from a directory holding one file per key (the agent's Secret mount).
    pub fn load_dir(path: &Path) -> Result<Self, Error> {
        Self::from_lookup(|key| {
            let file = path.join(key);
            std::fs::read(&file).map_err(|source| {
                if source.kind() == std::io::ErrorKind::NotFound {
                    None
                } else {
                    Some(Error::Read {
                        path: file.display().to_string(),
                        source,
                    })
                }
            })
        })
    }

    /// `lookup` returns the bytes of a key, `Err(None)` when it is absent, or another error.
    fn from_lookup(
        mut lookup: impl FnMut(&'static str) -> Result<Vec<u8>, Option<Error>>,
    ) -> Result<Self, Error> {
        let mut text = |key: &'static str| -> Result<String, Error> {
            let bytes = lookup(key).map_err(|e| e.unwrap_or(Error::MissingKey(key)))?;
            String::from_utf8(bytes).map_err(|_| Error::NotText { key })
        };
        Ok(Identity {
            client_ca_crt: text(CLIENT_CA_CRT)?,
            client_crt: text(CLIENT_CRT)?,
            client_key: text(CLIENT_KEY)?,
            serving_crt: text(SERVING_CRT)?,
            serving_key: text(SERVING_KEY)?,
        })
    }

    fn fields(&self) -> [(&'static str, &str); 5] {
        [
            (CLIENT_CA_CRT, &self.client_ca_crt),
            (CLIENT_CRT, &self.client_crt),
            (CLIENT_KEY, &self.client_key),
            (SERVING_CRT, &self.serving_crt),
            (SERVING_KEY, &self.serving_key),
        ]
    }
}

fn pem_der(pem: &str, cert: &'static str) -> Result<Vec<u8>, Error> {
    let (_, pem) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).map_err(|e| Error::Parse {
        cert,
        reason: e.to_string(),
    })?;
    if pem.label != "CERTIFICATE" {
        return Err(Error::Parse {
            cert,
            reason: format!("PEM block is {:?}", pem.label),
        });
    }
    Ok(pem.contents)
}

fn parse<'a>(der: &'a [u8], cert: &'static str) -> Result<X509Certificate<'a>, Error> {
    x509_parser::parse_x509_certificate(der)
        .map(|(_, parsed)| parsed)
        .map_err(|e| Error::Parse {
            cert,
            reason: e.to_string(),
        })
}

fn check_validity(
    cert: &X509Certificate<'_>,
    name: &'static str,
    now: ASN1Time,
) -> Result<(), Error> {
    let validity = cert.validity();
    if now < validity.not_before {
        return Err(Error::NotYetValid {
            cert: name,
            not_before: validity.not_before.to_string(),
            now: now.to_string(),
        });
    }
    if now > validity.not_after {
        return Err(Error::Expired {
            cert: name,
            not_after: validity.not_after.to_string(),
            now: now.to_string(),
        });
    }
    Ok(())
}

fn common_names(cert: &X509Certificate<'_>) -> Vec<String> {
    cert.subject()
        .iter_common_name()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect()
}

fn org_units(cert: &X509Certificate<'_>) -> Vec<String> {
    cert.subject()
        .iter_organizational_unit()
        .filter_map(|a| a.as_str().ok().map(str::to_string))
        .collect()
}

fn expect_attr(
    name: &'static str,
    field: &'static str,
    expected: &str,
    found: Vec<String>,
) -> Result<(), Error> {
    if found.iter().any(|value| value == expected) {
        Ok(())
    } else {
        Err(Error::Subject {
            cert: name,
            field,
            expected: expected.to_string(),
            found: found.join(","),
        })
    }
}

fn dns_names(cert: &X509Certificate<'_>) -> Vec<String> {
    let Ok(Some(san)) = cert.subject_alternative_name() else {
        return Vec::new();
    };
    san.value
        .general_names
        .iter()
        .filter_map(|name| match name {
            GeneralName::DNSName(dns) => Some(dns.to_string()),
            _ => None,
        })
        .collect()
}

/// The key belongs to the certificate when their public keys (SubjectPublicKeyInfo) are equal;
/// rustls's ring signer reads PKCS#1 RSA (Go), PKCS#8 and SEC1 keys alike.
fn check_key(cert: &X509Certificate<'_>, key_pem: &str, name: &'static str) -> Result<(), Error> {
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| Error::Key {
        cert: name,
        reason: e.to_string(),
    })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&key).map_err(|e| Error::Key {
        cert: name,
        reason: e.to_string(),
    })?;
    let spki = signer.public_key().ok_or_else(|| Error::Key {
        cert: name,
        reason: "key type without a public key encoding".into(),
    })?;
    if spki.as_ref() == cert.public_key().raw {
        Ok(())
    } else {
        Err(Error::KeyMismatch { cert: name })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOST: &str = "api-demo-0123456789abcdef.apps.example.com";
    const NOW: i64 = 1_800_000_000;

    fn identity() -> Identity {
        generate(HOST, NOW).expect("generate")
    }

    #[test]
    fn generated_identity_validates() {
        let id = identity();
        validate(&id, HOST, NOW).unwrap();
        validate(&id, HOST, NOW + 9 * 365 * 86_400).unwrap();
        assert_eq!(serving_host(&id.serving_crt).as_deref(), Some(HOST));
    }

    #[test]
    fn generated_certificates_carry_upstream_names_and_flags() {
        let id = identity();
        let der = pem_der(&id.client_crt, CLIENT).unwrap();
        let client = parse(&der, CLIENT).unwrap();
        let subject = client.subject().to_string();
        assert!(subject.contains("CN=system:admin"), "{subject}");
        assert!(subject.contains("O=system:masters"), "{subject}");
        assert!(subject.contains("OU=system:masters"), "{subject}");
        assert_eq!(client.serial.bits(), 127);
        let der = pem_der(&id.client_ca_crt, CLIENT_CA).unwrap();
        let ca = parse(&der, CLIENT_CA).unwrap();
        assert!(ca.is_ca());
        let ku = ca.key_usage().unwrap().unwrap().value;
        assert!(ku.key_cert_sign() && ku.digital_signature() && ku.key_encipherment());
        let der = pem_der(&id.serving_crt, SERVING).unwrap();
        let serving = parse(&der, SERVING).unwrap();
        assert!(serving.is_ca());
        let years = (serving.validity().not_after.timestamp() - NOW) / 86_400 / 365;
        assert_eq!(years, 10);
    }

    #[test]
    fn wrong_host_is_refused() {
        let err = validate(&identity(), "api.other.example.com", NOW).unwrap_err();
        assert!(matches!(err, Error::HostMismatch { .. }), "{err}");
        assert!(err.to_string().contains("serving certificate"), "{err}");
    }

    #[test]
    fn expired_and_not_yet_valid_are_refused() {
        let id = identity();
        let err = validate(&id, HOST, NOW + 11 * 365 * 86_400).unwrap_err();
        assert!(
            matches!(
                err,
                Error::Expired {
                    cert: CLIENT_CA,
                    ..
                }
            ),
            "{err}"
        );
        let err = validate(&id, HOST, NOW - 60).unwrap_err();
        assert!(matches!(err, Error::NotYetValid { .. }), "{err}");
    }

    #[test]
    fn client_cert_of_another_ca_is_refused() {
        let mut id = identity();
        let other = generate(HOST, NOW).unwrap();
        id.client_crt = other.client_crt;
        id.client_key = other.client_key;
        let err = validate(&id, HOST, NOW).unwrap_err();
        assert!(
            matches!(err, Error::Signature { cert: CLIENT, .. }),
            "{err}"
        );
    }

    #[test]
    fn mismatched_keys_are_refused() {
        let mut id = identity();
        let other = generate(HOST, NOW).unwrap();
        id.serving_key = other.serving_key.clone();
        let err = validate(&id, HOST, NOW).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { cert: SERVING }), "{err}");
        let mut id = identity();
        id.client_key = other.client_key;
        let err = validate(&id, HOST, NOW).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { cert: CLIENT }), "{err}");
    }

    #[test]
    fn secret_data_round_trips_and_names_missing_keys() {
        let id = identity();
        let mut data = id.to_secret_data();
        assert_eq!(data.len(), 5);
        assert_eq!(Identity::from_secret_data(&data).unwrap(), id);
        data.remove(SERVING_KEY);
        let err = Identity::from_secret_data(&data).unwrap_err();
        assert!(err.to_string().contains("serving.key"), "{err}");
        assert!(!format!("{id:?}").contains("PRIVATE KEY"));
    }

    #[test]
    fn load_dir_reads_one_file_per_key() {
        let id = identity();
        let dir = tempfile::tempdir().unwrap();
        for (key, value) in id.fields() {
            std::fs::write(dir.path().join(key), value).unwrap();
        }
        assert_eq!(Identity::load_dir(dir.path()).unwrap(), id);
        std::fs::remove_file(dir.path().join(CLIENT_CA_CRT)).unwrap();
        assert!(matches!(
            Identity::load_dir(dir.path()),
            Err(Error::MissingKey(CLIENT_CA_CRT))
        ));
    }

    #[test]
    fn garbage_is_a_parse_error_naming_the_certificate() {
        let mut id = identity();
        id.serving_crt = "not pem".into();
        let err = validate(&id, HOST, NOW).unwrap_err();
        assert!(matches!(err, Error::Parse { cert: SERVING, .. }), "{err}");
        assert_eq!(serving_host("nope"), None);
    }

    /// An identity as the Go operator makes it: RSA-2048, PKCS#1 keys, the client group only in
    /// OU. Made once with `openssl` at unix time 1796222598 for `api.rsa.example.com`.
    mod go_operator {
        pub const NOW: i64 = 1_796_222_598 + 3600;
        pub const HOST: &str = "api.rsa.example.com";
        pub const CLIENT_CA_CRT: &str = r"-----BEGIN CERTIFICATE-----
MIIDazCCAlOgAwIBAgIUNbaid1dty2WzoBzgNUCRNV2DVDUwDQYJKoZIhvcNAQEL
BQAwPTESMBAGA1UECwwJb3BlbnNoaWZ0MScwJQYDVQQDDB5hZG1pbi1rdWJlY29u
ZmlnLXNpZ25lci1jdXN0b20wHhcNMjYxMjAyMTQ0MzE4WhcNMzYxMTI5MTQ0MzE4
WjA9MRIwEAYDVQQLDAlvcGVuc2hpZnQxJzAlBgNVBAMMHmFkbWluLWt1YmVjb25m
aWctc2lnbmVyLWN1c3RvbTCCASIwDQYJKoZIhvcNAQEBBQADggEPADCCAQoCggEB
ALBej7efqP2dk+uPDJ9x+sE12++3C1Gvt4Zq99S8FE0iwps1rYJK+IyYvCiLhvfs
ChhqOVARIGYEGu+qGAb+8NYKfJyHNk1aOv8NeEQ8SHZDF7S3nh3ru26DXo2d0fI3
/7Yn+4fxW8b8Ezr5IoEc8dLEOsXAeQ3wBudOqO4z4zgL/YIBUIfE0/Wm+TBSxsY/
jEnZybZSA0BjjI9Ga726zcZiB6qq1VjbHK2c8b1p2GtBKWn7nD3AUodexGSWxBtU
5O1eojs1HTI+VGIxzo4u6G25ilVYTyqAHEcb4rBqldMIcWJ7WPfYBZjXgGEoZyUY
81iQi0KI7Nxhf7CSrAAs090CAwEAAaNjMGEwHQYDVR0OBBYEFOi56JjA2ajc9LwZ
Ml2/8U9kIIrTMB8GA1UdIwQYMBaAFOi56JjA2ajc9LwZMl2/8U9kIIrTMA8GA1Ud
EwEB/wQFMAMBAf8wDgYDVR0PAQH/BAQDAgKkMA0GCSqGSIb3DQEBCwUAA4IBAQCj
WQXRa+BDqxWD/oBtlvLCipskPfYZlrH1NKxVJiwSvcx00pIM3Q1pwvftLaxlq7zE
IzM3E8Ko68tkkh4X2pQ2nX3mdQgGyw2tJuDRF1FlvEl14dDpK+aPg0RrOIobSgMR
mR2D323qcnLdO+e1RaI+0imUPUj3vViMf0iF2To5xb0qzfrsYUOB7+GBDtqlJznE
XK1q8oUWnVNEg9kcX2DKGXvya2NesJEw/QYIvCp1zUJxrol2nnTRxYoGetLaU9q3
YYtQrLhJXL6CO0pwEobdLAwf0WXKNuWqeMEm9xYychmMp5n1dSvl0LHH2vRcuEVG
VgNJ/yUNUP+uz0bVXlSv
-----END CERTIFICATE-----
";
        pub const CLIENT_CRT: &str = r"-----BEGIN CERTIFICATE-----
MIIDcDCCAligAwIBAgIUfkCnz7VCSM+UdD98hHD2uy5x/9AwDQYJKoZIhvcNAQEL
BQAwPTESMBAGA1UECwwJb3BlbnNoaWZ0MScwJQYDVQQDDB5hZG1pbi1rdWJlY29u
ZmlnLXNpZ25lci1jdXN0b20wHhcNMjYxMjAyMTQ0MzE4WhcNMzYxMTI5MTQ0MzE4
WjAwMRcwFQYDVQQLDA5zeXN0ZW06bWFzdGVyczEVMBMGA1UEAwwMc3lzdGVtOmFk
bWluMIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAuLFypQmtXYMG/PvM
qSscLVrXo6ZITp8GEfxTfMXs2mErb91MrpRcUmykfx5/NAwzdvx36wMZ3jFnByTn
FaqlmN0CuTDo0FZRoBT2t1javkkMIm225v+E5VH4OBCvi510pWDHiWjBhS+ajdTt
Og+MrJDhM0snigag2G5Iz/6J+XAP7/G6nm79ZFmIl/oD/btKl6WSjQ9ztIgRfEzE
SnlR1a+mxVjSEJqfSW49HTcjl7wGgcG9T9LtlBX/Tf3cHIj4kbFKrxNrq4Yg0q8X
UKM+PPp5+ayqeb44kp07IUXh/8mI5TpMaksF17JxvDzKdn2cuw1hVF7ayQQGYnNG
FvrYGQIDAQABo3UwczATBgNVHSUEDDAKBggrBgEFBQcDAjAOBgNVHQ8BAf8EBAMC
BaAwDAYDVR0TAQH/BAIwADAdBgNVHQ4EFgQUF4PLY1OgwsTN7AGnmr7YNAvBLFYw
HwYDVR0jBBgwFoAU6LnomMDZqNz0vBkyXb/xT2QgitMwDQYJKoZIhvcNAQELBQAD
ggEBAE7t31Ew3Qvrw5uEdSR29Mm8KdHlrPXZB+gFh6DsdjIdQsfc+rreSvSe9xPO
b7HhumkN+nhgeOcfj/YvLw5Is0N6d3IuvTWS2CavDJcSulzp9zn/HtWkSvKOdias
JPd/IMyWAATAcBxxxEjt6kwEzNWqjtlbl3pPeSpMIqltpS9fSO3ps83EwY30h1Bq
z73DzwPLkZaeM2D+VleKv980U6Ft5BgODnWp+NEnQVN1g94c9AT9fdV/kU5jw4pl
dr+8K5UiiGIzZvwhBa3Dn34+fsf7rXbo8S1+UayMbZ3ZacMSKe2rgnKBsI2aNAn0
Phva37JWBEGTJoDIuVv19XNZwpY=
-----END CERTIFICATE-----
";
        pub const CLIENT_KEY: &str = r"-----BEGIN RSA PRIVATE KEY-----
MIIEowIBAAKCAQEAuLFypQmtXYMG/PvMqSscLVrXo6ZITp8GEfxTfMXs2mErb91M
rpRcUmykfx5/NAwzdvx36wMZ3jFnByTnFaqlmN0CuTDo0FZRoBT2t1javkkMIm22
5v+E5VH4OBCvi510pWDHiWjBhS+ajdTtOg+MrJDhM0snigag2G5Iz/6J+XAP7/G6
nm79ZFmIl/oD/btKl6WSjQ9ztIgRfEzESnlR1a+mxVjSEJqfSW49HTcjl7wGgcG9
T9LtlBX/Tf3cHIj4kbFKrxNrq4Yg0q8XUKM+PPp5+ayqeb44kp07IUXh/8mI5TpM
aksF17JxvDzKdn2cuw1hVF7ayQQGYnNGFvrYGQIDAQABAoIBAFBnmAR3UQ0bxMgQ
Cso+5VZtbOFmu6XWnzrnQaVZOULc+J8LlZ2PIx4TBA3/Rdtv0Fvlj4M1Z2aO1U6L
5zpMfyksVkovG7vPSFvLpJivSxN6E5lNcEniRYXcCJbH1NSQKL7yggu1GkKUNdG3
N8uGB3T84b2F42G4fv+aC4LZSlHXlIi2McVs7tS0wxdn+yjr+VOtFHJv9T42FiTJ
H/o114+BpfXFHb8Mj+Zw1t5ak47XI5/MizA61kaQmOAxwoEh54vJkRDQwGU/U/kX
Ky4TMDW/mgEqKhZ9NufiHHtDjbbEG6ly0s28FTLGNbOMJj+KazTD/QbJSOqNZAiK
0wzPW90CgYEA6p+OgM/ycxkl1IHTylhcKszzV/milSq+uURbicIImZALb41C77R2
vRFoo2q4h2iV3BeyGqVIevR7llMtM5FuLNaGhDhalDfWfwMjJa7irB+F4Fq/aH2h
IXM95CXwH3jIt87zvlLoOBPHF7m6E4n1oX4WjB7YJyvRw+1TOe3y0jcCgYEAyYVN
UbIANlSb57tanJa6GJuYSaLq4DAMMCExsMyQCV04R2k6bzGiPNWFnrqsdhv6JoMA
8DE6z38IjhDWW9Y2ISm1rtE46DHo4obrngfyq/dJjSIGfJj7BsOyvybDNYJ0pDWm
FcfKSVasUGuQdB20XNUfFhMhi828YUnOaJmrwC8CgYEAjMizPK4KwG/dmFdS238L
xw72EdsUaMeebBMNjmrkuCiMBCLSgH1cJnU0waI/Gdly2v9I+t4k0Mq1Ae3lGKVy
Y+tSCjK6f2fGCK68P1diYoAD2Cz739pKfoTlJWpyXKAgaNMAxTqAZ23OsHjco+7L
elzrcKbtcwvDMfrNTtxuMR8CgYAL2cj4Ou2ERGl+sSfc+YgsFkpYWjpRwMGWuvz/
FqiJxG+g03FaRKLzzOK0uOmXcIG/bgjKFzsMJL5ODHNupyQ7wwYqJ6efEABQAfst
Ke59amdq40taXGy2sx952j+0j91oIreHpF4i/fPYLtsp2O1YYDgZxjo8zHZ9iieX
QyI0hQKBgD9WuORHVkB09MFFLFy+IbLAui+we3UwN6accUHgetD/QxmlqDOCJH3d
oVkA8Ym3XOuR0kFEBUr3JlLTGxtrZJAR3uY3jM+pM7UgfdTplR06K0UyoPkCW2Gg
HYac+Mo70Df0G96TSI65wMD7UnTcIoz89UyeXXU6CjbOmHUSpkn6
-----END RSA PRIVATE KEY-----
";
        pub const SERVING_CRT: &str = r"-----BEGIN CERTIFICATE-----
MIIDZDCCAkygAwIBAgIUER93NxjMB2lA1q3yAK7Pt9zD0+YwDQYJKoZIhvcNAQEL
BQAwHjEcMBoGA1UEAwwTYXBpLnJzYS5leGFtcGxlLmNvbTAeFw0yNjEyMDIxNDQz
MThaFw0zNjExMjkxNDQzMThaMB4xHDAaBgNVBAMME2FwaS5yc2EuZXhhbXBsZS5j
b20wggEiMA0GCSqGSIb3DQEBAQUAA4IBDwAwggEKAoIBAQCOy3nHG/2bhz7gVL6K
YBMoHFqyB8P14nJR/W47uMDa+bEo9Hml9sfCIyhmMv4LhO9ivNRBK1fvMiLQGHjO
QrPloqHvOvYi2pq3OKdSSyCkbb0RZ7MSV+tq8b/nBbuc1mZXYgTgqrxsGaAUdYyD
JPNvUDXqOzcvaT2qfdM1AIeDoCiXgTVLgqJduRdjtgIhqKmfCNWzyZphJMqazq46
6nsf+Uiln0lvOzQtOAgTldaaL6Rpkv9VavN3ZBzS8q4fcb6pJTBTAQgW5FTwDJz4
E4kYWTknc9NJp5iHiN75P6Rs8ROm5o4aQsxGwRrrUrwnET8M3m94QE+aDKiPm9E9
GMK9AgMBAAGjgZkwgZYwHQYDVR0OBBYEFKefkW91KOt++ib0w6WHNV/I0F86MB8G
A1UdIwQYMBaAFKefkW91KOt++ib0w6WHNV/I0F86MA8GA1UdEwEB/wQFMAMBAf8w
HgYDVR0RBBcwFYITYXBpLnJzYS5leGFtcGxlLmNvbTATBgNVHSUEDDAKBggrBgEF
BQcDATAOBgNVHQ8BAf8EBAMCAqQwDQYJKoZIhvcNAQELBQADggEBAGAsqPJWtcSo
Sm2P1nzwxz72aIXSSyTTKFXu4jhP4REb0g+/0HPZsmTYpRKw6n8I60fZeOhYsOyU
p7Q9ROCYp41Dd7fVW3+2nilfJ7Rxnt0Uwv+2zE0bdb0nKSNP35dk7qjg3cqagro+
gedn9M5Tjc5xZstayleJgfUca3CxAObPuyq2GgIHOx94s2a/kBZxW9pRj9aQkxTM
Li8HMiyN/eea+LcAi2VLEFf9sFUerUDr3aa5L7VIWBVCqiyCPq1ofmk47ZA4dadf
fUsqoe99gUdxyDolh9H5wnonf+ipzRVqmYALQBOA1cJURWZWYYKvya7eomS9ZyQc
ZXBNNXP4eXk=
-----END CERTIFICATE-----
";
        pub const SERVING_KEY: &str = r"-----BEGIN RSA PRIVATE KEY-----
MIIEoQIBAAKCAQEAjst5xxv9m4c+4FS+imATKBxasgfD9eJyUf1uO7jA2vmxKPR5
pfbHwiMoZjL+C4TvYrzUQStX7zIi0Bh4zkKz5aKh7zr2ItqatzinUksgpG29EWez
ElfravG/5wW7nNZmV2IE4Kq8bBmgFHWMgyTzb1A16js3L2k9qn3TNQCHg6Aol4E1
S4KiXbkXY7YCIaipnwjVs8maYSTKms6uOup7H/lIpZ9Jbzs0LTgIE5XWmi+kaZL/
VWrzd2Qc0vKuH3G+qSUwUwEIFuRU8Ayc+BOJGFk5J3PTSaeYh4je+T+kbPETpuaO
GkLMRsEa61K8JxE/DN5veEBPmgyoj5vRPRjCvQIDAQABAoH/eQoBL8WKM0txALbU
zHajxlxChKYQdVx9iwJHblgtIXCFuzF/7C5DJUyn8flHXnxQbmGhiZwz7Y2R9NLJ
lAz2cLBqk15nRSQIAUcEjb0g7kAXA6njIKll5EEHacxyO3+BQJDVkZsoHHmcN7ts
X73ym2hiSynmnUmX++ysG0FXnTng16QkTIa2IVtj/W60PUGaPXe2EnMsrMH3ERqD
dtNa0P3qREiodme7InDypWjEhqPmbtoq12O9ab9+bWa5gxFHibnAeV3L9NeNZ5wu
3aI3+rNIW+cteA1q4VrMWm2n1q+Vv+jx+9+PjaXQ2BWwnZt1uZiDbCT5lln67Kkj
2Ls9AoGBAMYbY1ZVtYVXln9clc6lG6hmn5/4cv7sHOdGTPJGWWosD9p3Y/tcnrLz
GW4AzGqwQ9n3HNii1n5WHiC/SSq1wb7cqeSz4/H5lKs238ua1XTPGn49mTdQAX/n
3YB31FtS0o4z6ygIoYhkIsfQIhh6RT51qFRC9XYNDQZv4UMRVeJHAoGBALiGHxHC
SPjblZeeVtRQ8qXLyy8yTODp50fQS/ZFkUekdiJfi51p1hU8Rp2CcHQ/j0UNTCcP
Hvqr57dyKeyCtPbTjdQ74Jnc2kUn4J9BJTSYYdAUGtxrz4U812Xtr7L2UxvwoOuA
vO+fINanscdrj79QXMGHGNUl+j6znip5xlDbAoGAQaGxN1kN2i86XNd/igaJMzFM
kOLutiXjLXvM4jcMSHBwkCAdr5jvurlvI1KAZpge4odLtzm7df9x28eDpfKxTVot
rucqDXByIIb9faa+MQSr8kbWC80lsgpPB9CrOdYmi5YHwiuZ2GXUX/5ETXe0mQzB
x6inSYTpW8iVCHMl0OECgYAH08ilnDQ0OjxSPik4wGZKmiZ4Tg3szH8/EJroS3Mq
MtPACYWGm+K06+Wi8NGMXNXa/AFq9r09rOUbZwBYRAMhJUAy7IdOf4vSuypQFxdY
783WYcPx7bDT2gzZCggV81T7Lm3lD4T0NS/TazGjX/CtEN+eZfirsfy3hC8FZjz/
WQKBgQCS0RX8x6Q6pH+XNMRru900F/eWpjJPmPpNUBjT36YvcVrFElCzlX2P3L3T
jJ+MsAVKgkVqqu2KggjJ3mnThRSvUpX8FzXwXwl9quXd0B4/eXS4puV42NlPegqR
qwwsc4epW87SRNXduUEUISGr4xrQlgX0rGwqesABdEkQvitMTw==
-----END RSA PRIVATE KEY-----
";
    }

    #[test]
    fn rsa_identities_of_the_go_operator_validate() {
        let id = Identity {
            client_ca_crt: go_operator::CLIENT_CA_CRT.into(),
            client_crt: go_operator::CLIENT_CRT.into(),
            client_key: go_operator::CLIENT_KEY.into(),
            serving_crt: go_operator::SERVING_CRT.into(),
            serving_key: go_operator::SERVING_KEY.into(),
        };
        validate(&id, go_operator::HOST, go_operator::NOW).unwrap();
        assert_eq!(
            serving_host(&id.serving_crt).as_deref(),
            Some(go_operator::HOST)
        );
        let mut swapped = id.clone();
        swapped.client_key = go_operator::SERVING_KEY.into();
        let err = validate(&swapped, go_operator::HOST, go_operator::NOW).unwrap_err();
        assert!(matches!(err, Error::KeyMismatch { cert: CLIENT }), "{err}");
    }
}
