//! HTTP(S) downloads with timeouts, retries with backoff, and resume by `Range`.
//!
//! One connection per request (hyper's HTTP/1 client over tokio, TLS by rustls with the
//! system's CA bundle), redirects followed. A download into a file resumes from the file's
//! length; the decisions on an answer are the pure [`classify`] and [`backoff_delay`].

use std::future::poll_fn;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use http::{Request, StatusCode, Uri, header};
use hyper::body::{Body as _, Incoming};
use hyper_util::rt::TokioIo;
use sha2::{Digest as _, Sha256};
use tokio::io::{AsyncRead, AsyncSeekExt as _, AsyncWrite, AsyncWriteExt as _, BufWriter};

use super::PrepError;
use super::checksum;
use super::progress::Progress;
use crate::jobs::exit::Failure as _;

const MAX_REDIRECTS: usize = 10;
/// Write buffer of a download.
const WRITE_BUFFER: usize = 1 << 20;
/// CA bundles tried in order when `SSL_CERT_FILE` is not set (Debian, RHEL/UBI, others).
const DEFAULT_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/cert.pem",
];

/// Timeouts and retries of HTTP requests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpOptions {
    /// `HTTP_CONNECT_TIMEOUT_SECONDS` (default 30): TCP connect and TLS handshake, each.
    pub connect_timeout: Duration,
    /// `HTTP_READ_TIMEOUT_SECONDS` (default 60): waiting for response headers or the next
    /// piece of the body.
    pub read_timeout: Duration,
    /// `DOWNLOAD_ATTEMPTS` (default 5): requests per file before giving up; every attempt after
    /// a cut resumes where the last one stopped.
    pub attempts: u32,
    /// `DOWNLOAD_RETRY_BACKOFF_MS` (default 2000): wait before the second attempt, doubling
    /// up to `max_backoff` (60 s).
    pub backoff: Duration,
    pub max_backoff: Duration,
    /// `SSL_CERT_FILE`: PEM CA bundle for https (default: the system bundle).
    pub ca_file: Option<PathBuf>,
}

impl Default for HttpOptions {
    fn default() -> Self {
        HttpOptions {
            connect_timeout: Duration::from_secs(30),
            read_timeout: Duration::from_secs(60),
            attempts: 5,
            backoff: Duration::from_secs(2),
            max_backoff: Duration::from_secs(60),
            ca_file: None,
        }
    }
}

/// How an answer to `GET` from byte `from` continues a download.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer {
    /// 200: the whole file (a range was ignored): write from byte 0. `total` from Content-Length.
    Whole { total: Option<u64> },
    /// 206 from the requested byte: append. `total` from Content-Range (or Content-Length).
    Rest { total: Option<u64> },
    /// 416 for a request at the end of the file: the local file is already complete.
    Complete { total: u64 },
    /// The local bytes cannot be continued (416 elsewhere, 206 from another byte): start from 0.
    StartOver(String),
    /// Worth another attempt later (5xx, 408, 429).
    Retry(String),
    /// Will not get better.
    Fail(String),
}

/// Decides how the answer to a request for bytes `from..` continues the download.
pub fn classify(
    from: u64,
    status: u16,
    content_length: Option<u64>,
    content_range: Option<&str>,
) -> Answer {
    let range = content_range.and_then(parse_content_range);
    match status {
        200 => Answer::Whole {
            total: content_length,
        },
        206 => match range {
            Some(ContentRange {
                first: Some(first),
                total,
            }) if first == from => Answer::Rest {
                total: total.or(content_length.map(|len| from + len)),
            },
            _ if from > 0 => Answer::StartOver(format!(
                "the server answered the range request from byte {from} with Content-Range {}",
                content_range.unwrap_or("(none)")
            )),
            _ => Answer::Fail(format!(
                "206 Partial Content to a request without a range (Content-Range {})",
                content_range.unwrap_or("(none)")
            )),
        },
        416 => match range.and_then(|r| r.total) {
            Some(total) if total == from && from > 0 => Answer::Complete { total },
            total if from > 0 => Answer::StartOver(format!(
                "the server cannot continue at byte {from} (file size {})",
                total.map_or("unknown".to_owned(), |t| t.to_string())
            )),
            _ => Answer::Fail("416 Range Not Satisfiable".into()),
        },
        408 | 429 | 500..=599 => Answer::Retry(status_text(status)),
        _ => Answer::Fail(status_text(status)),
    }
}

fn status_text(status: u16) -> String {
    match StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("HTTP {status} {reason}"),
        None => format!("HTTP {status}"),
    }
}

#[derive(Debug, PartialEq, Eq)]
struct ContentRange {
    /// First byte, `None` for `bytes */N`.
    first: Option<u64>,
    total: Option<u64>,
}

/// `bytes 100-199/200`, `bytes 100-199/*`, `bytes */200`.
fn parse_content_range(value: &str) -> Option<ContentRange> {
    let (range, total) = value.trim().strip_prefix("bytes ")?.split_once('/')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    let first = match range.trim() {
        "*" => None,
        r => {
            let (first, last) = r.split_once('-')?;
            let (first, last): (u64, u64) = (first.parse().ok()?, last.parse().ok()?);
            if last < first || total.is_some_and(|t| last >= t) {
                return None;
            }
            Some(first)
        }
    };
    Some(ContentRange { first, total })
}

/// The wait before attempt `attempt + 1` after attempt `attempt` (1-based) failed.
pub fn backoff_delay(attempt: u32, initial: Duration, max: Duration) -> Duration {
    let factor = 1u32
        .checked_shl(attempt.saturating_sub(1))
        .unwrap_or(u32::MAX);
    initial.saturating_mul(factor).min(max)
}

/// A finished download.
#[derive(Debug)]
pub struct Downloaded {
    pub len: u64,
    /// Hex SHA-256 of the file.
    pub sha256: String,
    /// Bytes of an earlier run that are part of the file.
    pub reused: u64,
}

/// Why one attempt failed.
enum Failure {
    /// Another attempt may succeed.
    Transient(String),
    /// Stop.
    Fatal(PrepError),
}

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// The download's file, with the hash of its content so far.
struct Sink {
    writer: BufWriter<tokio::fs::File>,
    hasher: Sha256,
    len: u64,
    reused: u64,
}

impl Sink {
    async fn write(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.writer.write_all(data).await?;
        self.hasher.update(data);
        self.len += data.len() as u64;
        Ok(())
    }

    async fn start_over(&mut self) -> std::io::Result<()> {
        self.writer.flush().await?;
        let file = self.writer.get_mut();
        file.set_len(0).await?;
        file.seek(std::io::SeekFrom::Start(0)).await?;
        self.hasher = Sha256::new();
        self.len = 0;
        self.reused = 0;
        Ok(())
    }
}

/// An HTTP(S) client for the Job's downloads.
pub struct Client {
    options: HttpOptions,
    tls: OnceLock<Result<tokio_rustls::TlsConnector, String>>,
}

impl Client {
    pub fn new(options: HttpOptions) -> Client {
        Client {
            options,
            tls: OnceLock::new(),
        }
    }

    /// Downloads `url` into `dest`, continuing from the bytes already in `dest`; at most `max`
    /// bytes (`MAX_BUNDLE_BYTES`).
    pub async fn download(
        &self,
        url: &str,
        dest: &Path,
        max: u64,
    ) -> Result<Downloaded, PrepError> {
        let storage = |what: &str| PrepError::storage(format!("{what} {}", dest.display()));
        let existing = match tokio::fs::metadata(dest).await {
            Ok(meta) => meta.len(),
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => 0,
            Err(err) => return Err(storage("inspecting")(err)),
        };
        let hasher = if existing > 0 {
            tracing::info!(
                "found {existing} bytes of an earlier download in {}; resuming",
                dest.display()
            );
            let path = dest.to_path_buf();
            tokio::task::spawn_blocking(move || {
                checksum::sha256_prefix(&path, Some(existing), false)
            })
            .await
            .map_err(|e| storage("hashing")(std::io::Error::other(e)))?
            .map_err(storage("hashing"))?
            .0
        } else {
            Sha256::new()
        };
        let mut file = tokio::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(dest)
            .await
            .map_err(storage("opening"))?;
        file.seek(std::io::SeekFrom::Start(existing))
            .await
            .map_err(storage("seeking in"))?;
        let mut sink = Sink {
            writer: BufWriter::with_capacity(WRITE_BUFFER, file),
            hasher,
            len: existing,
            reused: existing,
        };

        let attempts = self.options.attempts.max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            let result = self.attempt(url, &mut sink, max).await;
            sink.writer.flush().await.map_err(storage("writing"))?;
            match result {
                Ok(()) => {
                    sink.writer
                        .get_mut()
                        .sync_all()
                        .await
                        .map_err(storage("syncing"))?;
                    return Ok(Downloaded {
                        len: sink.len,
                        sha256: checksum::hex(sink.hasher),
                        reused: sink.reused,
                    });
                }
                Err(Failure::Fatal(err)) => return Err(err),
                Err(Failure::Transient(why)) => {
                    last = why;
                    if attempt < attempts {
                        let wait =
                            backoff_delay(attempt, self.options.backoff, self.options.max_backoff);
                        tracing::warn!(
                            "download interrupted at {} bytes ({last}); attempt {} of {attempts} in {:.1}s",
                            sink.len,
                            attempt + 1,
                            wait.as_secs_f64()
                        );
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
        Err(PrepError::DownloadInterrupted {
            url: url.to_owned(),
            attempts,
            last,
        })
    }

    /// One request continuing the download in `sink`.
    async fn attempt(&self, url: &str, sink: &mut Sink, max: u64) -> Result<(), Failure> {
        loop {
            let from = sink.len;
            let response = self.get(url, from).await?;
            let headers = response.headers();
            let content_length = headers
                .get(header::CONTENT_LENGTH)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse().ok());
            let content_range = headers
                .get(header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok());
            let answer = classify(
                from,
                response.status().as_u16(),
                content_length,
                content_range,
            );
            let storage = |err| Failure::Fatal(PrepError::storage("writing the download")(err));
            let total = match answer {
                Answer::Whole { total } => {
                    if from > 0 {
                        tracing::info!(
                            "the server sent the whole file instead of bytes {from}-; starting over"
                        );
                        sink.start_over().await.map_err(storage)?;
                    }
                    total
                }
                Answer::Rest { total } => {
                    tracing::info!("resuming the download at byte {from}");
                    total
                }
                Answer::Complete { total } => {
                    tracing::info!("the download is already complete ({total} bytes)");
                    return too_large(total, max).map_err(Failure::Fatal);
                }
                Answer::StartOver(why) => {
                    tracing::info!("{why}; starting over");
                    sink.start_over().await.map_err(storage)?;
                    continue;
                }
                Answer::Retry(why) => return Err(Failure::Transient(why)),
                Answer::Fail(why) => {
                    return Err(Failure::Fatal(PrepError::Http {
                        url: url.to_owned(),
                        message: why,
                    }));
                }
            };
            if let Some(total) = total {
                too_large(total, max).map_err(Failure::Fatal)?;
            }
            let mut progress = Progress::new(total, sink.len);
            let mut body = response.into_body();
            loop {
                let Some(data) = self.next_data(&mut body).await? else {
                    break;
                };
                let after = sink.len + data.len() as u64;
                too_large(after, max).map_err(Failure::Fatal)?;
                if total.is_some_and(|total| after > total) {
                    return Err(Failure::Transient(format!(
                        "the server sent more than the announced {} bytes",
                        total.unwrap_or_default()
                    )));
                }
                sink.write(&data).await.map_err(storage)?;
                if let Some(line) = progress.update(sink.len) {
                    tracing::info!("downloaded {line}");
                }
            }
            return match total {
                Some(total) if sink.len != total => Err(Failure::Transient(format!(
                    "the connection ended at {} of {total} bytes",
                    sink.len
                ))),
                _ => Ok(()),
            };
        }
    }

    /// The next piece of a body; `None` at its end.
    async fn next_data(&self, body: &mut Incoming) -> Result<Option<hyper::body::Bytes>, Failure> {
        loop {
            let frame = tokio::time::timeout(
                self.options.read_timeout,
                poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)),
            )
            .await
            .map_err(|_| {
                Failure::Transient(format!(
                    "no data for {}s",
                    self.options.read_timeout.as_secs()
                ))
            })?;
            match frame {
                None => return Ok(None),
                Some(Err(err)) => return Err(Failure::Transient(describe(&err))),
                Some(Ok(frame)) => {
                    if let Ok(data) = frame.into_data() {
                        return Ok(Some(data));
                    }
                }
            }
        }
    }

    /// A small file (the checksum list), at most `max` bytes.
    pub async fn fetch_small(
        &self,
        url: &str,
        max: u64,
        setting: &'static str,
    ) -> Result<Vec<u8>, PrepError> {
        let attempts = self.options.attempts.max(1);
        let mut last = String::new();
        for attempt in 1..=attempts {
            match self.fetch_once(url, max, setting).await {
                Ok(bytes) => return Ok(bytes),
                Err(Failure::Fatal(err)) => return Err(err),
                Err(Failure::Transient(why)) => {
                    last = why;
                    if attempt < attempts {
                        let wait =
                            backoff_delay(attempt, self.options.backoff, self.options.max_backoff);
                        tracing::warn!(
                            "fetching {url} failed ({last}); attempt {} of {attempts} in {:.1}s",
                            attempt + 1,
                            wait.as_secs_f64()
                        );
                        tokio::time::sleep(wait).await;
                    }
                }
            }
        }
        Err(PrepError::DownloadInterrupted {
            url: url.to_owned(),
            attempts,
            last,
        })
    }

    async fn fetch_once(
        &self,
        url: &str,
        max: u64,
        setting: &'static str,
    ) -> Result<Vec<u8>, Failure> {
        let large = || {
            Failure::Fatal(PrepError::TooLarge {
                what: url.to_owned(),
                limit: max,
                setting,
            })
        };
        let response = self.get(url, 0).await?;
        let status = response.status().as_u16();
        match classify(0, status, None, None) {
            Answer::Whole { .. } => {}
            Answer::Retry(why) => return Err(Failure::Transient(why)),
            Answer::Fail(why) | Answer::StartOver(why) => {
                return Err(Failure::Fatal(PrepError::Http {
                    url: url.to_owned(),
                    message: why,
                }));
            }
            Answer::Rest { .. } | Answer::Complete { .. } => {
                return Err(Failure::Fatal(PrepError::Http {
                    url: url.to_owned(),
                    message: status_text(status),
                }));
            }
        }
        let announced = response
            .headers()
            .get(header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        if announced.is_some_and(|len| len > max) {
            return Err(large());
        }
        let mut body = response.into_body();
        let mut bytes = Vec::new();
        while let Some(data) = self.next_data(&mut body).await? {
            if (bytes.len() + data.len()) as u64 > max {
                return Err(large());
            }
            bytes.extend_from_slice(&data);
        }
        if announced.is_some_and(|len| len != bytes.len() as u64) {
            return Err(Failure::Transient(format!(
                "the connection ended at {} of {} bytes",
                bytes.len(),
                announced.unwrap_or_default()
            )));
        }
        Ok(bytes)
    }

    /// `GET url` from byte `from`, following redirects.
    async fn get(&self, url: &str, from: u64) -> Result<http::Response<Incoming>, Failure> {
        let fail = |message: String| {
            Failure::Fatal(PrepError::Http {
                url: url.to_owned(),
                message,
            })
        };
        let mut uri: Uri = url.parse().map_err(|e| fail(format!("not a URL: {e}")))?;
        for _ in 0..=MAX_REDIRECTS {
            let response = self.send(&uri, from).await?;
            let status = response.status().as_u16();
            if matches!(status, 301 | 302 | 303 | 307 | 308) {
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok());
                if let Some(location) = location {
                    let next = resolve(&uri, location).ok_or_else(|| {
                        fail(format!(
                            "redirect to an unusable location {:?}",
                            shown(location)
                        ))
                    })?;
                    // Once on TLS, never off it: a redirect cannot downgrade the transfer.
                    if uri.scheme_str() == Some("https") && next.scheme_str() != Some("https") {
                        return Err(fail(format!(
                            "redirect from https to {} refused",
                            shown(&next.to_string())
                        )));
                    }
                    uri = next;
                    continue;
                }
            }
            return Ok(response);
        }
        Err(fail(format!("more than {MAX_REDIRECTS} redirects")))
    }

    /// One request on a new connection.
    async fn send(&self, uri: &Uri, from: u64) -> Result<http::Response<Incoming>, Failure> {
        let fail = |message: String| {
            Failure::Fatal(PrepError::Http {
                url: uri.to_string(),
                message,
            })
        };
        let https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => return Err(fail("only http:// and https:// URLs are supported".into())),
        };
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| fail("the URL has no host".into()))?;
        let bare_host = host.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        let connect_timeout = self.options.connect_timeout;
        let timed_out = |what: &str| {
            Failure::Transient(format!(
                "{what} {host}:{port} timed out after {}s",
                connect_timeout.as_secs()
            ))
        };

        let tcp = tokio::time::timeout(
            connect_timeout,
            tokio::net::TcpStream::connect((bare_host, port)),
        )
        .await
        .map_err(|_| timed_out("connecting to"))?
        .map_err(|e| Failure::Transient(format!("connecting to {host}:{port}: {e}")))?;
        let _ = tcp.set_nodelay(true);
        let io: Box<dyn Io> = if https {
            let connector = self.tls().map_err(fail)?;
            let name = rustls::pki_types::ServerName::try_from(bare_host.to_owned())
                .map_err(|e| fail(format!("invalid TLS server name {bare_host:?}: {e}")))?;
            let tls = tokio::time::timeout(connect_timeout, connector.connect(name, tcp))
                .await
                .map_err(|_| timed_out("TLS handshake with"))?
                .map_err(|e| {
                    let message = format!("TLS handshake with {host}: {e}");
                    let rejected = e
                        .get_ref()
                        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
                        .is_some_and(|inner| {
                            matches!(
                                inner,
                                rustls::Error::InvalidCertificate(_)
                                    | rustls::Error::AlertReceived(_)
                            )
                        });
                    if rejected {
                        fail(message)
                    } else {
                        Failure::Transient(message)
                    }
                })?;
            Box::new(tls)
        } else {
            Box::new(tcp)
        };

        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| Failure::Transient(describe(&e)))?;
        tokio::spawn(async move {
            let _ = connection.await;
        });
        let authority = match uri.port_u16() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let mut request = Request::get(uri.path_and_query().map_or("/", |p| p.as_str()))
            .header(header::HOST, authority)
            .header(
                header::USER_AGENT,
                concat!("guestcluster-bundle-prep/", env!("CARGO_PKG_VERSION")),
            )
            .header(header::ACCEPT_ENCODING, "identity");
        if from > 0 {
            request = request.header(header::RANGE, format!("bytes={from}-"));
        }
        let request = request
            .body(String::new())
            .map_err(|e| fail(format!("building the request: {e}")))?;
        tokio::time::timeout(self.options.read_timeout, sender.send_request(request))
            .await
            .map_err(|_| {
                Failure::Transient(format!(
                    "no response from {host}:{port} within {}s",
                    self.options.read_timeout.as_secs()
                ))
            })?
            .map_err(|e| Failure::Transient(describe(&e)))
    }

    fn tls(&self) -> Result<tokio_rustls::TlsConnector, String> {
        self.tls
            .get_or_init(|| tls_connector(self.options.ca_file.as_deref()))
            .clone()
    }
}

fn too_large(size: u64, max: u64) -> Result<(), PrepError> {
    if size > max {
        return Err(PrepError::TooLarge {
            what: format!("the bundle ({size} bytes or more)"),
            limit: max,
            setting: "MAX_BUNDLE_BYTES",
        });
    }
    Ok(())
}

/// A rustls connector trusting the CAs of `ca_file` or the system bundle.
fn tls_connector(ca_file: Option<&Path>) -> Result<tokio_rustls::TlsConnector, String> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject as _;

    let path = match ca_file {
        Some(path) => path.to_path_buf(),
        None => DEFAULT_CA_FILES
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .ok_or_else(|| {
                format!(
                    "no CA bundle for https (tried {}; set SSL_CERT_FILE)",
                    DEFAULT_CA_FILES.join(", ")
                )
            })?,
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&path)
        .and_then(|certs| certs.collect())
        .map_err(|e| format!("reading CA bundle {}: {e}", path.display()))?;
    let mut roots = rustls::RootCertStore::empty();
    let (added, _) = roots.add_parsable_certificates(certs);
    if added == 0 {
        return Err(format!(
            "CA bundle {} holds no usable certificate",
            path.display()
        ));
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| format!("TLS configuration: {e}"))?
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// `url` as it may be shown in status, Events and logs: without user information, query or
/// fragment, which may carry credentials (a pre-signed mirror URL's signature, a token).
pub fn shown(url: &str) -> String {
    let (without_fragment, _) = url.split_once('#').unwrap_or((url, ""));
    let (base, query) = without_fragment
        .split_once('?')
        .map_or((without_fragment, false), |(b, _)| (b, true));
    let base = match base.split_once("://") {
        Some((scheme, rest)) => {
            let (authority, path) = rest.split_once('/').map_or((rest, ""), |(a, p)| (a, p));
            let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
            let slash = if rest.contains('/') { "/" } else { "" };
            format!("{scheme}://{host}{slash}{path}")
        }
        None => base.to_owned(),
    };
    if query { format!("{base}?…") } else { base }
}

/// The target of a redirect from `base`.
fn resolve(base: &Uri, location: &str) -> Option<Uri> {
    let location = location.trim();
    if let Ok(uri) = location.parse::<Uri>()
        && uri.scheme().is_some()
    {
        return Some(uri);
    }
    let scheme = base.scheme_str()?;
    let authority = base.authority()?.as_str();
    let text = if let Some(rest) = location.strip_prefix("//") {
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let dir = base.path().rsplit_once('/').map_or("", |(dir, _)| dir);
        format!("{scheme}://{authority}{dir}/{location}")
    };
    text.parse().ok()
}

/// An error with its sources.
fn describe(err: &(dyn std::error::Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        let more = inner.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = inner.source();
    }
    text
}

#[cfg(test)]
mod tests;
