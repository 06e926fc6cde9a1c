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

/// A kube client for `base_uri` whose connections come from `dial` and speak TLS with
/// `server_name` as SNI and verification name.
/// The longest a connection (the dial and the TLS handshake) may take.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest one request may wait for its response head: every caller polls, none watches,
/// so an answer that does not come is a hung peer.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

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
