//! The data work of CDI's worker pods: blank images, sparse copies, HTTP downloads and
//! qcow2 conversion, worded in failures like CDI's importer (containerized-data-importer v1.65.0
//! `cmd/cdi-importer/importer.go`, `pkg/importer/data-processor.go`).

use std::path::Path;

use tokio::io::AsyncReadExt;

/// Why a worker's container exits 1: its termination message, worded like CDI's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
}

impl Failure {
    /// An I/O or tool failure while processing data (`handleImport`).
    pub fn processing(detail: impl std::fmt::Display) -> Self {
        Self {
            message: format!("Unable to process data: {detail}"),
        }
    }

    /// The source cannot be reached (`errorCannotConnectDataSource`).
    pub fn connecting(detail: impl std::fmt::Display) -> Self {
        Self {
            message: format!("Unable to connect to http data source: {detail}"),
        }
    }
}

/// A file of `len` bytes with nothing allocated.
pub async fn sparse_file(path: &Path, len: u64) -> Result<(), Failure> {
    let file = tokio::fs::File::create(path)
        .await
        .map_err(|e| Failure::processing(format!("creating {}: {e}", path.display())))?;
    file.set_len(len)
        .await
        .map_err(|e| Failure::processing(format!("sizing {}: {e}", path.display())))
}

/// `cp --sparse=always`: zero runs stay holes, so a mostly empty 64Gi disk copies in moments.
pub async fn copy_sparse(from: &Path, to: &Path) -> Result<(), Failure> {
    let mut cp = tokio::process::Command::new("cp");
    cp.arg("--sparse=always")
        .arg("--reflink=auto")
        .arg(from)
        .arg(to);
    run_tool(cp, "cp").await
}

/// CDI expands an image to fill its volume; growing a file is sparse.
pub async fn grow_to(path: &Path, target: u64) -> Result<(), Failure> {
    let len = file_len(path).await?;
    if len >= target {
        return Ok(());
    }
    let file = tokio::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .await
        .map_err(|e| Failure::processing(format!("opening {}: {e}", path.display())))?;
    file.set_len(target)
        .await
        .map_err(|e| Failure::processing(format!("growing {}: {e}", path.display())))
}

/// An imported image must fit its volume (CDI's importer refuses otherwise), then fills it.
pub async fn fit_into(path: &Path, target: u64) -> Result<(), Failure> {
    let virtual_size = file_len(path).await?;
    if virtual_size > target {
        return Err(Failure::processing(format!(
            "Virtual image size {virtual_size} is larger than the reported available storage \
             {target}. A larger PVC is required."
        )));
    }
    grow_to(path, target).await
}

pub async fn file_len(path: &Path) -> Result<u64, Failure> {
    tokio::fs::metadata(path)
        .await
        .map(|m| m.len())
        .map_err(|e| Failure::processing(format!("{}: {e}", path.display())))
}

/// Image formats the importer recognises by their first bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ImageKind {
    Qcow2,
    Gzip,
    Xz,
    Raw,
}

fn image_kind(head: &[u8]) -> ImageKind {
    if head.starts_with(b"QFI\xfb") {
        ImageKind::Qcow2
    } else if head.starts_with(&[0x1f, 0x8b]) {
        ImageKind::Gzip
    } else if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        ImageKind::Xz
    } else {
        ImageKind::Raw
    }
}

/// Turns a downloaded image into raw at `raw`: qcow2 through `qemu-img convert` (as CDI does),
/// raw by rename.
pub async fn to_raw(download: &Path, raw: &Path) -> Result<(), Failure> {
    let mut head = [0u8; 8];
    let mut file = tokio::fs::File::open(download)
        .await
        .map_err(|e| Failure::processing(format!("opening {}: {e}", download.display())))?;
    let read = file.read(&mut head).await.unwrap_or(0);
    drop(file);
    match image_kind(&head[..read]) {
        ImageKind::Qcow2 => {
            let mut convert = tokio::process::Command::new("qemu-img");
            convert
                .args(["convert", "-f", "qcow2", "-O", "raw"])
                .arg(download)
                .arg(raw);
            run_tool(convert, "qemu-img").await
        }
        kind @ (ImageKind::Gzip | ImageKind::Xz) => Err(Failure::processing(format!(
            "the simulation does not decompress images ({kind:?}); serve a raw or qcow2 image"
        ))),
        ImageKind::Raw => tokio::fs::rename(download, raw)
            .await
            .map_err(|e| Failure::processing(format!("moving the download into place: {e}"))),
    }
}

/// Runs an external tool; it is killed if the population is abandoned (DataVolume deleted).
async fn run_tool(mut command: tokio::process::Command, name: &str) -> Result<(), Failure> {
    let output = command
        .kill_on_drop(true)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(|e| {
            Failure::processing(format!(
                "{name}: {e} (the simulation needs {name} on PATH; qemu-img is in Debian's qemu-utils)"
            ))
        })?;
    if output.status.success() {
        Ok(())
    } else {
        Err(Failure::processing(format!(
            "{name}: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )))
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP

/// A minimal HTTP/1.0 client: plain http only, redirects followed, body streamed to a file.
/// HTTP/1.0 keeps responses free of chunked encoding; CDI's sources here are local test servers.
pub mod http {
    use std::path::Path;
    use std::time::Duration;

    use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};

    use super::Failure;

    const MAX_REDIRECTS: usize = 5;
    const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
    const HEAD_TIMEOUT: Duration = Duration::from_secs(30);

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct HttpUrl {
        /// `host[:port]` as written, for the Host header.
        authority: String,
        host: String,
        port: u16,
        path: String,
    }

    fn parse_http_url(url: &str) -> Result<HttpUrl, String> {
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(if url.starts_with("https://") {
                "https is not supported by the simulation; serve the image over http://".to_owned()
            } else {
                format!("unsupported URL {url:?}")
            });
        };
        let rest = rest.split('#').next().unwrap_or_default();
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) if rest[i..].starts_with('?') => (&rest[..i], format!("/{}", &rest[i..])),
            Some(i) => (&rest[..i], rest[i..].to_owned()),
            None => (rest, "/".to_owned()),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (host, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("bad host in {url:?}"))?;
            (host, after.strip_prefix(':'))
        } else {
            match authority.rsplit_once(':') {
                Some((host, port)) => (host, Some(port)),
                None => (authority, None),
            }
        };
        let port = match port {
            Some(p) => p.parse().map_err(|_| format!("bad port in {url:?}"))?,
            None => 80,
        };
        if host.is_empty() {
            return Err(format!("no host in {url:?}"));
        }
        Ok(HttpUrl {
            authority: authority.to_owned(),
            host: host.to_owned(),
            port,
            path,
        })
    }

    #[derive(Clone, Debug, PartialEq, Eq)]
    struct ResponseHead {
        code: u16,
        reason: String,
        content_length: Option<u64>,
        location: Option<String>,
        chunked: bool,
    }

    /// Parses a status line and header lines (without the blank line).
    fn parse_head(lines: &[String]) -> Result<ResponseHead, String> {
        let status = lines.first().ok_or("empty response")?;
        let mut parts = status.trim_end().splitn(3, ' ');
        let version = parts.next().unwrap_or_default();
        if !version.starts_with("HTTP/") {
            return Err(format!("not an HTTP response: {status:?}"));
        }
        let code = parts
            .next()
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("bad status line {status:?}"))?;
        let reason = parts.next().unwrap_or_default().to_owned();
        let mut head = ResponseHead {
            code,
            reason,
            content_length: None,
            location: None,
            chunked: false,
        };
        for line in &lines[1..] {
            let Some((name, value)) = line.split_once(':') else {
                continue;
            };
            let value = value.trim();
            match name.trim().to_ascii_lowercase().as_str() {
                "content-length" => head.content_length = value.parse().ok(),
                "location" => head.location = Some(value.to_owned()),
                "transfer-encoding" => {
                    head.chunked = value.to_ascii_lowercase().contains("chunked")
                }
                _ => {}
            }
        }
        Ok(head)
    }

    /// The absolute URL a redirect points to.
    fn resolve_location(base: &HttpUrl, location: &str) -> String {
        if location.contains("://") {
            location.to_owned()
        } else if location.starts_with('/') {
            format!("http://{}{location}", base.authority)
        } else {
            let dir = base
                .path
                .rsplit_once('/')
                .map(|(d, _)| d)
                .unwrap_or_default();
            format!("http://{}{dir}/{location}", base.authority)
        }
    }

    enum Fetched {
        Body(u64),
        Redirect(String),
    }

    /// Downloads `url` into `dest`; returns the bytes written.
    pub async fn download_to(url: &str, dest: &Path) -> Result<u64, Failure> {
        let mut url = url.to_owned();
        for _ in 0..=MAX_REDIRECTS {
            match fetch(&url, dest).await? {
                Fetched::Body(bytes) => return Ok(bytes),
                Fetched::Redirect(next) => url = next,
            }
        }
        Err(Failure::connecting(format!(
            "more than {MAX_REDIRECTS} redirects"
        )))
    }

    async fn fetch(url: &str, dest: &Path) -> Result<Fetched, Failure> {
        let target = parse_http_url(url).map_err(Failure::connecting)?;
        let connect = tokio::net::TcpStream::connect((target.host.as_str(), target.port));
        let mut stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| {
                Failure::connecting(format!("connecting to {} timed out", target.authority))
            })?
            .map_err(|e| Failure::connecting(format!("{}: {e}", target.authority)))?;
        let request = format!(
            "GET {} HTTP/1.0\r\nHost: {}\r\nUser-Agent: guestcluster-sim-cdi\r\nAccept: */*\r\n\r\n",
            target.path, target.authority
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(Failure::connecting)?;
        let mut reader = tokio::io::BufReader::new(stream);
        let head = tokio::time::timeout(HEAD_TIMEOUT, read_head(&mut reader))
            .await
            .map_err(|_| Failure::connecting("no response headers in time"))??;
        if (300..400).contains(&head.code)
            && let Some(location) = &head.location
        {
            return Ok(Fetched::Redirect(resolve_location(&target, location)));
        }
        if head.code != 200 {
            return Err(Failure::connecting(format!(
                "expected status code 200, got {}. Status: {} {}",
                head.code, head.code, head.reason
            )));
        }
        if head.chunked {
            return Err(Failure::connecting(
                "chunked responses are not supported by the simulation",
            ));
        }
        let written = write_body(&mut reader, head.content_length, dest).await?;
        match head.content_length {
            Some(expected) if expected != written => Err(Failure::connecting(format!(
                "body ended after {written} of {expected} bytes"
            ))),
            _ => Ok(Fetched::Body(written)),
        }
    }

    async fn read_head<R: tokio::io::AsyncBufRead + Unpin>(
        reader: &mut R,
    ) -> Result<ResponseHead, Failure> {
        let mut lines = Vec::new();
        loop {
            let mut line = String::new();
            let read = reader
                .read_line(&mut line)
                .await
                .map_err(Failure::connecting)?;
            if read == 0 || line.trim_end().is_empty() {
                break;
            }
            if lines.len() > 200 {
                return Err(Failure::connecting("response headers too long"));
            }
            lines.push(line.trim_end().to_owned());
        }
        parse_head(&lines).map_err(Failure::connecting)
    }

    async fn write_body<R: tokio::io::AsyncRead + Unpin>(
        reader: &mut R,
        content_length: Option<u64>,
        dest: &Path,
    ) -> Result<u64, Failure> {
        let mut file = tokio::fs::File::create(dest)
            .await
            .map_err(|e| Failure::processing(format!("creating {}: {e}", dest.display())))?;
        let mut body = reader.take(content_length.unwrap_or(u64::MAX));
        let written = tokio::io::copy(&mut body, &mut file)
            .await
            .map_err(|e| Failure::connecting(format!("reading the body: {e}")))?;
        file.flush()
            .await
            .map_err(|e| Failure::processing(format!("writing {}: {e}", dest.display())))?;
        Ok(written)
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn http_urls_parse_with_default_port_and_path() {
            assert_eq!(
                parse_http_url("http://127.0.0.1:8080/images/disk.qcow2"),
                Ok(HttpUrl {
                    authority: "127.0.0.1:8080".into(),
                    host: "127.0.0.1".into(),
                    port: 8080,
                    path: "/images/disk.qcow2".into(),
                })
            );
            let plain = parse_http_url("http://example.test").expect("url");
            assert_eq!((plain.port, plain.path.as_str()), (80, "/"));
            let v6 = parse_http_url("http://[::1]:81/x?y=1#frag").expect("url");
            assert_eq!((v6.host.as_str(), v6.port), ("::1", 81));
            assert_eq!(v6.path, "/x?y=1");
            assert!(
                parse_http_url("https://x/")
                    .expect_err("https")
                    .contains("https")
            );
            assert!(parse_http_url("ftp://x/").is_err());
        }

        #[test]
        fn response_heads_parse() {
            let lines: Vec<String> = [
                "HTTP/1.1 302 Found",
                "Content-Length: 0",
                "location: /elsewhere",
            ]
            .map(String::from)
            .to_vec();
            let head = parse_head(&lines).expect("head");
            assert_eq!(head.code, 302);
            assert_eq!(head.reason, "Found");
            assert_eq!(head.content_length, Some(0));
            assert_eq!(head.location.as_deref(), Some("/elsewhere"));
            assert!(!head.chunked);
            assert!(parse_head(&["garbage".to_owned()]).is_err());
        }

        #[test]
        fn redirects_resolve_against_the_request() {
            let base = parse_http_url("http://h:1/a/b.img").expect("url");
            assert_eq!(resolve_location(&base, "http://o/x"), "http://o/x");
            assert_eq!(resolve_location(&base, "/x"), "http://h:1/x");
            assert_eq!(resolve_location(&base, "c.img"), "http://h:1/a/c.img");
        }
    }
}
