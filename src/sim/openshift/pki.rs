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

        Ok(GuestPki {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
