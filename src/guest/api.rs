//! A Kubernetes client for a guest's OpenShift API, reached only through the guest: every TCP
//! connection is an SSH `direct-tcpip` channel to `api.crc.testing:6443` (resolved by the guest's
//! own DNS), and TLS is verified against the guest's CA **at the guest's clock** — the guest may
//! run a day behind or ahead on purpose, and its certificates are valid by its own time.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt as _;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};

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
    let tls = Arc::new(tls_config(credentials, clock)?);
    let connector = TunnelConnector { ssh, tls };
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    let uri = format!("https://{API_HOST}:{API_PORT}")
        .parse()
        .map_err(|e: http::uri::InvalidUri| Error::Client(e.to_string()))?;
    let config = kube::Config::new(uri);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .map_err(
            |e: hyper_util::client::legacy::Error| -> Box<dyn std::error::Error + Send + Sync> {
                Box::new(e)
            },
        )
        .service(http);
    Ok(kube::Client::new(service, "default"))
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

/// Opens a TLS connection over a fresh SSH channel for every HTTP connection.
#[derive(Clone)]
struct TunnelConnector {
    ssh: Arc<SshGuest>,
    tls: Arc<rustls::ClientConfig>,
}

type TlsTunnel = tokio_rustls::client::TlsStream<russh::ChannelStream<russh::client::Msg>>;

/// The connection type hyper sees.
pub struct TunnelStream(TokioIo<TlsTunnel>);

impl tower::Service<http::Uri> for TunnelConnector {
    type Response = TunnelStream;
    type Error = Box<dyn std::error::Error + Send + Sync>;
    type Future = Pin<Box<dyn Future<Output = Result<TunnelStream, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let (ssh, tls) = (self.ssh.clone(), self.tls.clone());
        Box::pin(async move {
            let channel = ssh.open_tunnel(API_HOST, API_PORT).await?;
            let name = ServerName::try_from(API_HOST)?;
            let stream = tokio_rustls::TlsConnector::from(tls)
                .connect(name, channel)
                .await?;
            Ok(TunnelStream(TokioIo::new(stream)))
        })
    }
}

impl Connection for TunnelStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for TunnelStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TunnelStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}
