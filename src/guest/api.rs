//! A Kubernetes client for a guest's OpenShift API, reached only through the guest: every TCP
//! connection is an SSH `direct-tcpip` channel to `api.crc.testing:6443` (resolved by the guest's
//! own DNS), and TLS is verified against the guest's CA **at the guest's clock** — the guest may
//! run a day behind or ahead on purpose, and its certificates are valid by its own time.

use std::sync::Arc;
use std::time::Duration;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

use super::connect::{BoxError, Dial, Io};
use super::ssh::SshGuest;

/// The name the guest API is reached and verified by.
pub const API_HOST: &str = "api.crc.testing";
pub const API_PORT: u16 = 6443;

/// Errors of building a guest API client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("guest API credentials: {0}")]
    Credentials(String),
    #[error("guest API TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("guest API client: {0}")]
    Client(String),
}

/// Who the client is and whom it trusts (PEM).
#[derive(Clone)]
pub struct Credentials {
    /// The guest API server's CA (from the guest's `/opt/kubeconfig`).
    pub server_ca: String,
    pub client_cert: String,
    pub client_key: String,
}

/// Guest time, unix seconds.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// A client whose connections are tunnels through `ssh`.
pub fn client(
    ssh: Arc<SshGuest>,
    credentials: &Credentials,
    clock: Clock,
) -> Result<kube::Client, Error> {
    let tls = tls_config(credentials, clock)?;
    super::connect::client(
        Arc::new(SshTunnel(ssh)),
        API_HOST,
        &format!("https://{API_HOST}:{API_PORT}"),
        tls,
    )
    .map_err(Error::Client)
}

/// Every connection is a fresh `direct-tcpip` channel to the API name, resolved by the guest.
struct SshTunnel(Arc<SshGuest>);

impl Dial for SshTunnel {
    fn dial(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Box<dyn Io>, BoxError>> + Send>>
    {
        let ssh = self.0.clone();
        Box::pin(async move {
            let channel = ssh.open_tunnel(API_HOST, API_PORT).await?;
            Ok(Box::new(channel) as Box<dyn Io>)
        })
    }
}

fn tls_config(credentials: &Credentials, clock: Clock) -> Result<rustls::ClientConfig, Error> {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(credentials.server_ca.as_bytes()) {
        let cert = cert.map_err(|e| Error::Credentials(format!("server CA: {e}")))?;
        roots.add(cert)?;
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let inner = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| Error::Credentials(format!("server CA: {e}")))?;
    let certs = CertificateDer::pem_slice_iter(credentials.client_cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| Error::Credentials(format!("client certificate: {e}")))?;
    let key = PrivateKeyDer::from_pem_slice(credentials.client_key.as_bytes())
        .map_err(|e| Error::Credentials(format!("client key: {e}")))?;
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(GuestTimeVerifier { inner, clock }))
        .with_client_auth_cert(certs, key)?)
}

/// Full WebPKI verification (chain, name, signatures), with "now" taken from the guest clock.
struct GuestTimeVerifier {
    inner: Arc<WebPkiServerVerifier>,
    clock: Clock,
}

impl std::fmt::Debug for GuestTimeVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuestTimeVerifier")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl ServerCertVerifier for GuestTimeVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        _host_now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let guest_now = UnixTime::since_unix_epoch(Duration::from_secs(
            u64::try_from((self.clock)()).unwrap_or(0),
        ));
        self.inner.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            guest_now,
        )
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
