//! Reaching a guest API the way its users do: by the published kubeconfig, whose server is the
//! instance's Route host (`https://<host>:443`) and whose CA is the instance's self-signed serving
//! certificate. Used by the operator's readiness probe and by anyone holding the kubeconfig.
//!
//! Two details differ from a stock kube client:
//!
//! - **The server certificate is pinned.** The serving certificate is its own trust root and is
//!   marked as a CA (as the Go operator issues it); WebPKI refuses a CA certificate as the end
//!   entity, so the client accepts exactly the certificates in the kubeconfig's CA data, checked
//!   for the host name and validity, with the handshake signature verified against them.
//! - **A proxy is honoured** (`GUESTCLUSTER_ROUTE_PROXY`, else `HTTPS_PROXY`, with `NO_PROXY`):
//!   Route hosts of a management cluster are often reachable only through a proxy, and the
//!   simulated router is one.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use http_body_util::{BodyExt as _, Limited};
use kube::config::Kubeconfig;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;

use super::connect::{self, BoxError, Dial, Io};
use crate::text;

/// Errors of reaching a guest API by its published kubeconfig.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubeconfig: {0}")]
    Kubeconfig(String),
    #[error("TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    #[error("client: {0}")]
    Client(String),
    #[error("GET {url}: {message}")]
    Probe { url: String, message: String },
    #[error("GET {url}: no answer within {timeout:?}")]
    ProbeTimeout { url: String, timeout: Duration },
}

/// Proxy for Route hosts only (the operator's own API traffic never uses it).
pub const ROUTE_PROXY_ENV: &str = "GUESTCLUSTER_ROUTE_PROXY";

/// How connections to Route hosts are made.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteAccess {
    /// `host:port` of an HTTP proxy that accepts `CONNECT`.
    proxy: Option<String>,
    /// Host suffixes (or exact hosts) reached directly even with a proxy.
    no_proxy: Vec<String>,
}

impl RouteAccess {
    /// Direct TCP connections.
    pub fn direct() -> Self {
        Self::default()
    }

    /// Every connection through the `CONNECT` proxy at `addr` (`host:port` or `http://host:port`).
    pub fn via_proxy(addr: &str) -> Self {
        Self {
            proxy: Some(strip_scheme(addr)),
            no_proxy: Vec::new(),
        }
    }

    /// From `GUESTCLUSTER_ROUTE_PROXY`, else `HTTPS_PROXY`/`https_proxy`, and
    /// `NO_PROXY`/`no_proxy`. The dedicated variable exists because the kube client, when it
    /// loads a kubeconfig, refuses any `HTTPS_PROXY` without its `http-proxy` feature.
    pub fn from_env() -> Self {
        let var = |names: &[&str]| {
            names
                .iter()
                .find_map(|n| std::env::var(n).ok().filter(|v| !v.trim().is_empty()))
        };
        Self {
            proxy: var(&[ROUTE_PROXY_ENV, "HTTPS_PROXY", "https_proxy"]).map(|p| strip_scheme(&p)),
            no_proxy: var(&["NO_PROXY", "no_proxy"])
                .map(|v| {
                    v.split(',')
                        .map(|s| s.trim().trim_start_matches('*').to_owned())
                        .filter(|s| !s.is_empty())
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// The proxy for `host`, if one is to be used.
    fn proxy_for(&self, host: &str) -> Option<&str> {
        let bypass = self.no_proxy.iter().any(|entry| {
            let suffix = entry.trim_start_matches('.');
            host == suffix || host.ends_with(&format!(".{suffix}"))
        });
        self.proxy.as_deref().filter(|_| !bypass)
    }

    /// A client for the guest API described by `kubeconfig` (its current context).
    pub fn client(&self, kubeconfig: &[u8]) -> Result<kube::Client, Error> {
        let target = Target::parse(kubeconfig)?;
        let tls = target.tls_config()?;
        let dial = Arc::new(RouteDial {
            proxy: self.proxy_for(&target.host).map(str::to_owned),
            host: target.host.clone(),
            port: target.port,
        });
        connect::client(dial, &target.host, &target.base_uri(), tls).map_err(Error::Client)
    }

    /// `GET /readyz` as the kubeconfig's user; `Ok` on a 2xx answer within `timeout`. At most
    /// [`MAX_PROBE_BODY`] bytes of the answer are read, and a failure's message carries an
    /// excerpt of it: the guest writes the answer, and a guest can be anyone's.
    pub async fn probe_readyz(&self, kubeconfig: &[u8], timeout: Duration) -> Result<(), Error> {
        let target = Target::parse(kubeconfig)?;
        let url = format!("{}/readyz", target.base_uri());
        let client = self.client(kubeconfig)?;
        let request = http::Request::get("/readyz")
            .body(kube::client::Body::from(Vec::new()))
            .map_err(|e| Error::Client(e.to_string()))?;
        let answer = async {
            let response = client.send(request).await.map_err(|e| e.to_string())?;
            let status = response.status();
            let body = Limited::new(response.into_body(), MAX_PROBE_BODY)
                .collect()
                .await
                .map_err(|_| {
                    format!("{status}, with an answer longer than {MAX_PROBE_BODY} bytes")
                })?
                .to_bytes();
            if status.is_success() {
                Ok(())
            } else {
                Err(format!("{status}\n{}", String::from_utf8_lossy(&body)))
            }
        };
        match tokio::time::timeout(timeout, answer).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(Error::Probe {
                url,
                message: probe_failure(&e),
            }),
            Err(_) => Err(Error::ProbeTimeout { url, timeout }),
        }
    }
}

/// Most bytes of a guest's `/readyz` answer the probe reads (a real one is a few KiB).
pub const MAX_PROBE_BODY: usize = 64 * 1024;

/// A failing `/readyz` answers with a line per check (`[+]ping ok`, `[-]etcd failed: …`). A
/// condition message stays one line and names what is failing: the failed checks when there
/// are such lines, else the error itself on one line.
fn probe_failure(error: &str) -> String {
    let failed: Vec<&str> = error
        .lines()
        .filter_map(|line| line.trim().strip_prefix("[-]"))
        .map(|check| check.split_once(' ').map_or(check, |(name, _)| name))
        .collect();
    if failed.is_empty() {
        return text::excerpt(error);
    }
    text::excerpt(&format!("not ready, failing checks: {}", failed.join(", ")))
}

fn strip_scheme(addr: &str) -> String {
    let rest = addr
        .strip_prefix("http://")
        .or_else(|| addr.strip_prefix("https://"))
        .unwrap_or(addr);
    rest.trim_end_matches('/').to_owned()
}

/// What a kubeconfig's current context says about the server and the user.
struct Target {
    host: String,
    port: u16,
    ca_pem: Vec<u8>,
    client_cert_pem: Vec<u8>,
    client_key_pem: Vec<u8>,
}

impl Target {
    fn parse(kubeconfig: &[u8]) -> Result<Self, Error> {
        let bad = |m: &str| Error::Kubeconfig(m.to_owned());
        let text = std::str::from_utf8(kubeconfig).map_err(|_| bad("not UTF-8"))?;
        let config = Kubeconfig::from_yaml(text).map_err(|e| Error::Kubeconfig(e.to_string()))?;
        let context = match &config.current_context {
            Some(name) => config.contexts.iter().find(|c| &c.name == name),
            None => config.contexts.first(),
        }
        .and_then(|c| c.context.as_ref());
        let cluster_name = context.map(|c| c.cluster.as_str());
        let user_name = context.and_then(|c| c.user.as_deref());
        let cluster = match cluster_name {
            Some(name) => config.clusters.iter().find(|c| c.name == name),
            None => config.clusters.first(),
        }
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| bad("no cluster"))?;
        let user = match user_name {
            Some(name) => config.auth_infos.iter().find(|u| u.name == name),
            None => config.auth_infos.first(),
        }
        .and_then(|u| u.auth_info.as_ref())
        .ok_or_else(|| bad("no user"))?;
        let server = cluster.server.as_deref().ok_or_else(|| bad("no server"))?;
        let uri: http::Uri = server
            .parse()
            .map_err(|e| Error::Kubeconfig(format!("server {server}: {e}")))?;
        let host = uri
            .host()
            .ok_or_else(|| bad("server has no host"))?
            .to_owned();
        let port = uri.port_u16().unwrap_or(443);
        let decode = |field: &str, value: Option<&str>| -> Result<Vec<u8>, Error> {
            let value = value.ok_or_else(|| Error::Kubeconfig(format!("no {field}")))?;
            base64::engine::general_purpose::STANDARD
                .decode(value.trim())
                .map_err(|e| Error::Kubeconfig(format!("{field}: {e}")))
        };
        use secrecy::ExposeSecret as _;
        Ok(Self {
            host,
            port,
            ca_pem: decode(
                "certificate-authority-data",
                cluster.certificate_authority_data.as_deref(),
            )?,
            client_cert_pem: decode(
                "client-certificate-data",
                user.client_certificate_data.as_deref(),
            )?,
            client_key_pem: decode(
                "client-key-data",
                user.client_key_data.as_ref().map(|k| k.expose_secret()),
            )?,
        })
    }

    fn base_uri(&self) -> String {
        format!("https://{}:{}", self.host, self.port)
    }

    fn tls_config(&self) -> Result<rustls::ClientConfig, Error> {
        let pinned = CertificateDer::pem_slice_iter(&self.ca_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Kubeconfig(format!("certificate-authority-data: {e}")))?;
        if pinned.is_empty() {
            return Err(Error::Kubeconfig(
                "certificate-authority-data holds no certificate".into(),
            ));
        }
        let certs = CertificateDer::pem_slice_iter(&self.client_cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::Kubeconfig(format!("client-certificate-data: {e}")))?;
        let key = PrivateKeyDer::from_pem_slice(&self.client_key_pem)
            .map_err(|e| Error::Kubeconfig(format!("client-key-data: {e}")))?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        Ok(
            rustls::ClientConfig::builder_with_provider(provider.clone())
                .with_safe_default_protocol_versions()?
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(PinnedVerifier { pinned, provider }))
                .with_client_auth_cert(certs, key)?,
        )
    }
}

/// Accepts exactly the pinned certificates, for the right name and only while valid.
#[derive(Debug)]
pub(super) struct PinnedVerifier {
    pub(super) pinned: Vec<CertificateDer<'static>>,
    pub(super) provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for PinnedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self
            .pinned
            .iter()
            .any(|p| p.as_ref() == end_entity.as_ref())
        {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::UnknownIssuer,
            ));
        }
        check_name_and_validity(end_entity, server_name, now)?;
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The name and validity window of a pinned certificate, read with x509-parser because WebPKI
/// will not treat a CA certificate as an end entity.
fn check_name_and_validity(
    cert: &CertificateDer<'_>,
    server_name: &ServerName<'_>,
    now: UnixTime,
) -> Result<(), rustls::Error> {
    let bad = rustls::Error::InvalidCertificate;
    let (_, parsed) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|_| bad(rustls::CertificateError::BadEncoding))?;
    let now = i64::try_from(now.as_secs()).unwrap_or(i64::MAX);
    let validity = parsed.validity();
    if now < validity.not_before.timestamp() {
        return Err(bad(rustls::CertificateError::NotValidYet));
    }
    if now > validity.not_after.timestamp() {
        return Err(bad(rustls::CertificateError::Expired));
    }
    let ServerName::DnsName(wanted) = server_name else {
        return Err(bad(rustls::CertificateError::NotValidForName));
    };
    let wanted = wanted.as_ref().to_ascii_lowercase();
    let names: Vec<String> = parsed
        .subject_alternative_name()
        .ok()
        .flatten()
        .map(|san| {
            san.value
                .general_names
                .iter()
                .filter_map(|n| match n {
                    x509_parser::extensions::GeneralName::DNSName(d) => {
                        Some(d.to_ascii_lowercase())
                    }
                    _ => None,
                })
                .collect()
        })
        .unwrap_or_default();
    if names.contains(&wanted) {
        Ok(())
    } else {
        Err(bad(rustls::CertificateError::NotValidForName))
    }
}

/// TCP to the Route host, or a `CONNECT` tunnel through the proxy.
struct RouteDial {
    proxy: Option<String>,
    host: String,
    port: u16,
}

impl Dial for RouteDial {
    fn dial(
        &self,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<Box<dyn Io>, BoxError>> + Send>>
    {
        let (proxy, host, port) = (self.proxy.clone(), self.host.clone(), self.port);
        Box::pin(async move {
            let target = format!("{host}:{port}");
            let Some(proxy) = proxy else {
                return Ok(Box::new(TcpStream::connect(&target).await?) as Box<dyn Io>);
            };
            let mut stream = TcpStream::connect(&proxy).await?;
            stream
                .write_all(
                    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes(),
                )
                .await?;
            let mut reader = BufReader::new(stream);
            let mut status = String::new();
            reader.read_line(&mut status).await?;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).await? == 0 || line == "\r\n" || line == "\n" {
                    break;
                }
            }
            let code = status.split_whitespace().nth(1).unwrap_or_default();
            if code != "200" {
                return Err(
                    format!("proxy {proxy} refused CONNECT {target}: {}", status.trim()).into(),
                );
            }
            // The proxy sends nothing after its header until TLS starts, so the reader's buffer
            // is empty and the inner stream can be used as is.
            Ok(Box::new(reader.into_inner()) as Box<dyn Io>)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failing_readyz_is_summarised_by_its_failed_checks() {
        let body = "ApiError: [+]ping ok\n[+]etcd ok\n\
            [-]poststarthook/rbac/bootstrap-roles failed: reason withheld\n\
            [-]poststarthook/scheduling/bootstrap-system-priority-classes failed: reason withheld\n\
            [+]shutdown ok\nreadyz check failed";
        assert_eq!(
            probe_failure(body),
            "not ready, failing checks: poststarthook/rbac/bootstrap-roles, \
             poststarthook/scheduling/bootstrap-system-priority-classes"
        );
        assert_eq!(
            probe_failure("ServiceError: client error\n (Connect)"),
            "ServiceError: client error (Connect)"
        );
    }

    #[test]
    fn no_proxy_matches_hosts_and_suffixes() {
        let access = RouteAccess {
            proxy: Some("127.0.0.1:3128".into()),
            no_proxy: vec![".internal".into(), "api.example".into()],
        };
        assert_eq!(access.proxy_for("a.internal"), None);
        assert_eq!(access.proxy_for("api.example"), None);
        assert_eq!(
            access.proxy_for("api-x.apps.example"),
            Some("127.0.0.1:3128")
        );
        assert_eq!(RouteAccess::direct().proxy_for("x"), None);
    }

    #[test]
    fn proxy_urls_lose_their_scheme() {
        assert_eq!(
            RouteAccess::via_proxy("http://127.0.0.1:9/")
                .proxy
                .as_deref(),
            Some("127.0.0.1:9")
        );
    }
}
