//! The HTTP connector both guest API clients share: every connection is a byte stream from a
//! [`Dial`] (an SSH channel into the guest, or a TCP or proxied connection to a Route), wrapped in
//! TLS with a fixed server name. Only the way bytes reach the guest differs between clients; what
//! is verified is decided by the `rustls::ClientConfig` the caller builds.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use kube::client::ConfigExt as _;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};

/// A byte stream a TLS session can run over.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;
type DialFuture = Pin<Box<dyn Future<Output = Result<Box<dyn Io>, BoxError>> + Send>>;

/// Opens one new byte stream to the API server per HTTP connection.
pub trait Dial: Send + Sync + 'static {
    fn dial(&self) -> DialFuture;
}

/// The longest a connection (the dial and the TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest one request may wait for its response head: every caller polls, none watches,
/// so an answer that does not come is a hung peer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);
/// The most bytes of one response body read from a guest (the guest writes it; the largest real
/// answers, lists of rendered MachineConfigs, are a few MiB): as much as one guest command's
/// output may be.
pub const MAX_RESPONSE_BYTES: usize = 64 << 20;

/// A kube client for `base_uri` whose connections come from `dial` and speak TLS with
/// `server_name` as SNI and verification name. A response body longer than
/// [`MAX_RESPONSE_BYTES`] fails its request.
pub fn client(
    dial: Arc<dyn Dial>,
    server_name: &str,
    base_uri: &str,
    tls: rustls::ClientConfig,
) -> Result<kube::Client, String> {
    let server_name = ServerName::try_from(server_name.to_owned())
        .map_err(|e| format!("server name {server_name}: {e}"))?;
    let connector = TlsConnector {
        dial,
        tls: Arc::new(tls),
        server_name,
    };
    let http = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector);
    let uri = base_uri
        .parse()
        .map_err(|e: http::uri::InvalidUri| format!("{base_uri}: {e}"))?;
    let config = kube::Config::new(uri);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .map_future(|answer| async move {
            tokio::time::timeout(REQUEST_TIMEOUT, answer)
                .await
                .unwrap_or_else(|_| {
                    Err(BoxError::from(format!(
                        "no answer within {}s",
                        REQUEST_TIMEOUT.as_secs()
                    )))
                })
        })
        .map_response(|response: http::Response<hyper::body::Incoming>| {
            response.map(|body| http_body_util::Limited::new(body, MAX_RESPONSE_BYTES))
        })
        .map_err(|e: hyper_util::client::legacy::Error| -> BoxError { Box::new(e) })
        .service(http);
    Ok(kube::Client::new(service, "default"))
}

#[derive(Clone)]
struct TlsConnector {
    dial: Arc<dyn Dial>,
    tls: Arc<rustls::ClientConfig>,
    server_name: ServerName<'static>,
}

/// The connection type hyper sees.
pub struct TlsStream(TokioIo<tokio_rustls::client::TlsStream<Box<dyn Io>>>);

impl tower::Service<http::Uri> for TlsConnector {
    type Response = TlsStream;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<TlsStream, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _uri: http::Uri) -> Self::Future {
        let (dial, tls, name) = (
            self.dial.clone(),
            self.tls.clone(),
            self.server_name.clone(),
        );
        Box::pin(async move {
            let connect = async {
                let stream = dial.dial().await?;
                let stream = tokio_rustls::TlsConnector::from(tls)
                    .connect(name, stream)
                    .await?;
                Ok::<_, BoxError>(TlsStream(TokioIo::new(stream)))
            };
            tokio::time::timeout(CONNECT_TIMEOUT, connect)
                .await
                .unwrap_or_else(|_| {
                    Err(format!("no connection within {}s", CONNECT_TIMEOUT.as_secs()).into())
                })
        })
    }
}

impl Connection for TlsStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for TlsStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for TlsStream {
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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Namespace;
    use rustls::pki_types::pem::PemObject as _;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    use tokio::io::AsyncReadExt as _;

    use super::*;

    const HOST: &str = "api.example.com";

    /// Each dial is an in-memory pipe to a peer that `serve` plays.
    struct Pipe(Arc<dyn Fn(tokio::io::DuplexStream) + Send + Sync>);

    impl Dial for Pipe {
        fn dial(&self) -> DialFuture {
            let (ours, theirs) = tokio::io::duplex(64 << 10);
            (self.0)(theirs);
            Box::pin(async move { Ok(Box::new(ours) as Box<dyn Io>) })
        }
    }

    fn client_for(identity: &crate::identity::Identity, serve: Pipe) -> kube::Client {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        // The Route client's verifier: the self-signed serving certificate, pinned.
        let verifier = super::super::route::PinnedVerifier {
            pinned: vec![CertificateDer::from_pem_slice(identity.serving_crt.as_bytes()).unwrap()],
            provider: provider.clone(),
        };
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(verifier))
            .with_no_client_auth();
        client(Arc::new(serve), HOST, &format!("https://{HOST}"), tls).unwrap()
    }

    /// The error of one GET, with its whole chain of causes.
    async fn request(client: &kube::Client) -> String {
        let err = Api::<Namespace>::all(client.clone())
            .get("default")
            .await
            .unwrap_err();
        let mut text = err.to_string();
        let mut source = std::error::Error::source(&err);
        while let Some(cause) = source {
            text.push_str(&format!(": {cause}"));
            source = cause.source();
        }
        text
    }

    use kube::Api;

    // Paused time: the runtime skips ahead whenever everything waits, so the timeouts elapse at
    // once and exactly.
    #[tokio::test(start_paused = true)]
    async fn a_peer_that_never_finishes_tls_ends_at_the_connect_timeout() {
        let identity = crate::identity::generate(HOST, 1_700_000_000).unwrap();
        let silent = Pipe(Arc::new(|peer| {
            tokio::spawn(async move {
                let _held = peer;
                std::future::pending::<()>().await;
            });
        }));
        let started = tokio::time::Instant::now();
        let err = request(&client_for(&identity, silent)).await;
        assert!(err.contains("no connection within 30s"), "{err}");
        assert_eq!(started.elapsed(), CONNECT_TIMEOUT);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_is_never_answered_ends_at_the_request_timeout() {
        let identity = crate::identity::generate(HOST, 1_700_000_000).unwrap();
        let key = PrivateKeyDer::from_pem_slice(identity.serving_key.as_bytes()).unwrap();
        let cert = CertificateDer::from_pem_slice(identity.serving_crt.as_bytes()).unwrap();
        let server = Arc::new(
            rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert], key)
            .unwrap(),
        );
        // Completes TLS, reads the request, never answers.
        let mute = Pipe(Arc::new(move |peer| {
            let acceptor = tokio_rustls::TlsAcceptor::from(server.clone());
            tokio::spawn(async move {
                let mut stream = acceptor.accept(peer).await.expect("TLS handshake");
                let mut buf = [0u8; 4096];
                while stream.read(&mut buf).await.is_ok_and(|n| n > 0) {}
            });
        }));
        let started = tokio::time::Instant::now();
        let err = request(&client_for(&identity, mute)).await;
        assert!(err.contains("no answer within 60s"), "{err}");
        assert_eq!(started.elapsed(), REQUEST_TIMEOUT);
    }
}
