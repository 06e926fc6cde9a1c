//! The throwaway PKI of one control plane: a CA, the kube-apiserver serving certificate, the admin
//! client certificate and the service-account signing key.
//!
//! Everything is regenerated for every state directory, so rcgen's default validity window is kept
//! and no rotation is needed. All keys are ECDSA P-256 in PKCS#8 PEM, which kube-apiserver and
//! kube-controller-manager accept wherever they read a private key.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};

use super::{Error, fsutil};

/// Names the apiserver is reached by: loopback from the host, the in-cluster service names for
/// anything that resolves them (kube-controller-manager's root CA bundle is handed to pods), and
/// the first address of `--service-cluster-ip-range`, which the `kubernetes` Service gets.
const SERVING_NAMES: &[&str] = &[
    "127.0.0.1",
    "localhost",
    "10.96.0.1",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
];

/// The admin identity in the kubeconfig. `system:masters` is bound to `cluster-admin` by the
/// apiserver's bootstrap RBAC policy, so no RoleBinding is needed before the first request.
pub(crate) const ADMIN_USER: &str = "guestcluster-admin";
const ADMIN_GROUP: &str = "system:masters";

/// Where the PKI files of one control plane live.
#[derive(Debug, Clone)]
pub(crate) struct PkiFiles {
    pub ca_cert: PathBuf,
    pub ca_key: PathBuf,
    pub serving_cert: PathBuf,
    pub serving_key: PathBuf,
    pub admin_cert: PathBuf,
    pub admin_key: PathBuf,
    pub service_account_key: PathBuf,
    /// The public half, for `--service-account-key-file`: that flag reads PKCS#8 private keys
    /// only for RSA (client-go's `ParsePublicKeysPEM` wants SEC1 for ECDSA), so we hand it the
    /// public key instead.
    pub service_account_public_key: PathBuf,
    /// The CA of authenticating proxies (`--requestheader-client-ca-file`): the apiserver
    /// publishes it in `kube-system/extension-apiserver-authentication`, which extension API
    /// servers and webhooks (virt-api) read at start. Nothing holds a certificate it signed.
    pub front_proxy_ca_cert: PathBuf,
}

/// Generates the PKI and writes it into `dir`; returns the file paths and the CA certificate PEM.
pub(crate) fn generate(dir: &Path) -> Result<(PkiFiles, String), Error> {
    fsutil::create_dir(dir)?;
    let ca_key = KeyPair::generate()?;
    let ca_params = ca_params();
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let ca_pem = ca_cert.pem();
    let ca_key_pem = ca_key.serialize_pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let (serving_cert, serving_key) = leaf(serving_params()?, &issuer)?;
    let (admin_cert, admin_key) = leaf(admin_params(), &issuer)?;
    let service_account = KeyPair::generate()?;
    let front_proxy_key = KeyPair::generate()?;
    let mut front_proxy_params = self::ca_params();
    front_proxy_params.distinguished_name = common_name("guestcluster-testenv-front-proxy-ca");
    let front_proxy_ca = front_proxy_params.self_signed(&front_proxy_key)?;

    let files = PkiFiles {
        ca_cert: dir.join("ca.crt"),
        ca_key: dir.join("ca.key"),
        serving_cert: dir.join("apiserver.crt"),
        serving_key: dir.join("apiserver.key"),
        admin_cert: dir.join("admin.crt"),
        admin_key: dir.join("admin.key"),
        service_account_key: dir.join("service-account.key"),
        service_account_public_key: dir.join("service-account.pub"),
        front_proxy_ca_cert: dir.join("front-proxy-ca.crt"),
    };
    fsutil::write_public(&files.ca_cert, &ca_pem)?;
    fsutil::write_private(&files.ca_key, &ca_key_pem)?;
    fsutil::write_public(&files.serving_cert, &serving_cert)?;
    fsutil::write_private(&files.serving_key, &serving_key)?;
    fsutil::write_public(&files.admin_cert, &admin_cert)?;
    fsutil::write_private(&files.admin_key, &admin_key)?;
    fsutil::write_private(&files.service_account_key, &service_account.serialize_pem())?;
    fsutil::write_public(
        &files.service_account_public_key,
        &service_account.public_key_pem(),
    )?;
    fsutil::write_public(&files.front_proxy_ca_cert, &front_proxy_ca.pem())?;
    Ok((files, ca_pem))
}

fn ca_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = common_name("guestcluster-testenv-ca");
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

fn serving_params() -> Result<CertificateParams, Error> {
    let names: Vec<String> = SERVING_NAMES.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names)?;
    params.distinguished_name = common_name("kube-apiserver");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    Ok(params)
}

fn admin_params() -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = common_name(ADMIN_USER);
    dn.push(DnType::OrganizationName, ADMIN_GROUP);
    params.distinguished_name = dn;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    params.use_authority_key_identifier_extension = true;
    params
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

/// Issues a certificate for a fresh key; returns (certificate PEM, PKCS#8 key PEM).
fn leaf(
    params: CertificateParams,
    issuer: &Issuer<'_, KeyPair>,
) -> Result<(String, String), Error> {
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, issuer)?;
    Ok((cert.pem(), key.serialize_pem()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_all_files_with_private_keys_unreadable_by_others() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let (files, ca_pem) = generate(&dir.path().join("pki")).expect("generate");
        assert!(ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
        for key in [
            &files.ca_key,
            &files.serving_key,
            &files.admin_key,
            &files.service_account_key,
        ] {
            let text = std::fs::read_to_string(key).expect("read key");
            assert!(
                text.contains("BEGIN PRIVATE KEY"),
                "{} is not PKCS#8",
                key.display()
            );
            let mode = std::fs::metadata(key).expect("stat").permissions().mode();
            assert_eq!(mode & 0o077, 0, "{} is readable by others", key.display());
        }
        for cert in [&files.ca_cert, &files.serving_cert, &files.admin_cert] {
            let text = std::fs::read_to_string(cert).expect("read cert");
            assert!(text.starts_with("-----BEGIN CERTIFICATE-----"));
        }
    }
}
