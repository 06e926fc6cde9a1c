//! A small HTTP file server for downloads in tests and the demo (the stand-in for
//! mirror.openshift.com and for RHCOS ISO locations): `Range` requests for resumable downloads,
//! and injectable faults (an error status, a connection cut mid-body).
//!
//! It speaks just enough HTTP/1.1 by hand (one request per connection, `Connection: close`) so
//! that a cut is exact: the head and the first `after` body bytes are written and flushed before
//! the connection closes. An HTTP library that ends a response on a body error drops its
//! unflushed buffer with the connection, so a client would see anything from zero to `after`
//! bytes, and a "resume" from byte 0 is no resume.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncSeekExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What goes wrong when a file is requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Serve normally.
    None,
    /// Answer with this HTTP status and no body.
    Status(u16),
    /// Close the connection after exactly this many body bytes (fewer than the announced
    /// `Content-Length`), on the first `times` requests; later requests are served normally (a
    /// flaky network that a resuming client gets through).
    Cut { after: u64, times: u32 },
}

#[derive(Clone, Debug)]
struct Entry {
    file: PathBuf,
    fault: Fault,
    requests: u32,
    /// Requests wait until this shows `true` (or its sender is gone): [`FileServer::hold`].
    hold: Option<tokio::sync::watch::Receiver<bool>>,
}

/// Holds the requests of one path until released (or dropped): a download that is in flight
/// for as long as a test needs, without sleeping.
pub struct Hold(tokio::sync::watch::Sender<bool>);

impl Hold {
    /// Lets held and later requests through.
    pub fn release(&self) {
        self.0.send_replace(true);
    }
}

type Table = Arc<Mutex<HashMap<String, Entry>>>;

/// A running file server; stops (with every open connection) when dropped.
pub struct FileServer {
    addr: SocketAddr,
    table: Table,
    task: tokio::task::JoinHandle<()>,
}

impl FileServer {
    /// Listens on a free port of `ip` (`127.0.0.1` for tests).
    pub async fn start(ip: std::net::IpAddr) -> std::io::Result<FileServer> {
        let listener = TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let table: Table = Arc::default();
        let task = tokio::spawn(accept(listener, table.clone()));
        Ok(FileServer { addr, table, task })
    }

    /// Serves `file` at `/<url_path>` with `fault`; returns its URL.
    pub fn publish(&self, url_path: &str, file: PathBuf, fault: Fault) -> String {
        let key = url_path.trim_start_matches('/').to_owned();
        self.lock().insert(
            key.clone(),
            Entry {
                file,
                fault,
                requests: 0,
                hold: None,
            },
        );
        self.url(&key)
    }

    /// The URL of `/<url_path>` (published or not).
    pub fn url(&self, url_path: &str) -> String {
        format!("http://{}/{}", self.addr, url_path.trim_start_matches('/'))
    }

    /// Holds every request of the published `/<url_path>` (counted on arrival) until the
    /// returned [`Hold`] is released or dropped.
    pub fn hold(&self, url_path: &str) -> Hold {
        let (tx, rx) = tokio::sync::watch::channel(false);
        if let Some(entry) = self.lock().get_mut(url_path.trim_start_matches('/')) {
            entry.hold = Some(rx);
        }
        Hold(tx)
    }

    /// How many requests `/<url_path>` has received.
    pub fn requests(&self, url_path: &str) -> u32 {
        self.lock()
            .get(url_path.trim_start_matches('/'))
            .map_or(0, |e| e.requests)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for FileServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections until aborted; the connections' tasks live in a set owned here, so they
/// end with the server.
async fn accept(listener: TcpListener, table: Table) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    connections.spawn(serve(stream, table.clone()));
                }
                Err(err) => {
                    // Out of file descriptors and the like: back off instead of spinning.
                    tracing::warn!(%err, "file server: accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// The longest request head read; real clients send a few hundred bytes.
const MAX_HEAD: usize = 16 * 1024;

async fn serve(mut stream: TcpStream, table: Table) {
    let Some(head) = read_head(&mut stream).await else {
        return;
    };
    let reply = match parse_head(&head) {
        None => Reply::status(400),
        Some(request) if request.method != "GET" && request.method != "HEAD" => Reply::status(405),
        Some(request) => answer(&table, &request).await,
    };
    let _ = write_reply(&mut stream, &reply).await;
    // A lingering close: the peer reads everything written before our FIN instead of a reset
    // that a late byte from it would provoke.
    let _ = stream.shutdown().await;
    let _ = tokio::io::copy(
        &mut (&mut stream).take(MAX_HEAD as u64),
        &mut tokio::io::sink(),
    )
    .await;
}

/// The request head (up to the blank line), or `None` when the peer closes or sends too much.
async fn read_head(stream: &mut TcpStream) -> Option<String> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            buf.truncate(end);
            return String::from_utf8(buf).ok();
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

#[derive(Debug, PartialEq, Eq)]
struct RequestHead {
    method: String,
    /// The path without its leading `/` and without a query.
    path: String,
    range: Option<String>,
}

fn parse_head(head: &str) -> Option<RequestHead> {
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let method = request_line.next()?.to_owned();
    let target = request_line.next()?;
    request_line.next().filter(|v| v.starts_with("HTTP/1."))?;
    let path = target.split('?').next()?.trim_start_matches('/').to_owned();
    let range = lines
        .filter_map(|line| line.split_once(':'))
        .find(|(name, _)| name.trim().eq_ignore_ascii_case("range"))
        .map(|(_, value)| value.trim().to_owned());
    Some(RequestHead {
        method,
        path,
        range,
    })
}

/// What to write back: a status, the headers that describe the body, and which bytes of the file
/// to send.
#[derive(Debug, PartialEq, Eq)]
struct Reply {
    status: u16,
    content_length: u64,
    content_range: Option<String>,
    head_only: bool,
    file: Option<(PathBuf, Span)>,
}

/// Bytes of the file to send: from `start`, `send` of them (fewer than announced on a cut).
#[derive(Debug, PartialEq, Eq)]
struct Span {
    start: u64,
    send: u64,
}

impl Reply {
    fn status(status: u16) -> Reply {
        Reply {
            status,
            content_length: 0,
            content_range: None,
            head_only: false,
            file: None,
        }
    }
}

async fn answer(table: &Table, request: &RequestHead) -> Reply {
    let entry = {
        let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = table.get_mut(&request.path) else {
            return Reply::status(404);
        };
        entry.requests += 1;
        entry.clone()
    };
    if let Some(mut hold) = entry.hold.clone() {
        // A dropped `Hold` releases too.
        let _ = hold.wait_for(|released| *released).await;
    }
    if let Fault::Status(code) = entry.fault {
        return Reply::status(if (100..1000).contains(&code) {
            code
        } else {
            500
        });
    }
    let Ok(len) = tokio::fs::metadata(&entry.file).await.map(|m| m.len()) else {
        return Reply::status(404);
    };
    let cut = cut(&entry);
    let mut reply = plan(entry.file, len, request.range.as_deref(), cut);
    reply.head_only = request.method == "HEAD";
    reply
}

/// The cut that applies to this request, if any (`requests` already counts it).
fn cut(entry: &Entry) -> Option<u64> {
    match entry.fault {
        Fault::Cut { after, times } if entry.requests <= times => Some(after),
        _ => None,
    }
}

/// The reply for a file of `len` bytes under an optional `Range` header and cut.
fn plan(file: PathBuf, len: u64, range: Option<&str>, cut: Option<u64>) -> Reply {
    let Ok(start) = range_start(range, len) else {
        return Reply {
            content_range: Some(format!("bytes */{len}")),
            ..Reply::status(416)
        };
    };
    let content_length = len - start;
    Reply {
        status: if start > 0 { 206 } else { 200 },
        content_length,
        content_range: (start > 0).then(|| format!("bytes {start}-{}/{len}", len - 1)),
        head_only: false,
        file: Some((
            file,
            Span {
                start,
                send: cut.map_or(content_length, |after| after.min(content_length)),
            },
        )),
    }
}

/// The first byte asked for by a `Range: bytes=N-` header (other forms are served whole).
fn range_start(range: Option<&str>, len: u64) -> Result<u64, ()> {
    let Some(spec) = range.and_then(|v| v.strip_prefix("bytes=")) else {
        return Ok(0);
    };
    match spec.split_once('-') {
        Some((from, "")) => match from.parse::<u64>() {
            Ok(from) if from < len || (from == 0 && len == 0) => Ok(from),
            _ => Err(()),
        },
        _ => Ok(0),
    }
}

async fn write_reply(stream: &mut TcpStream, reply: &Reply) -> std::io::Result<()> {
    let reason = http::StatusCode::from_u16(reply.status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("");
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-length: {}\r\naccept-ranges: bytes\r\nconnection: close\r\n",
        reply.status, reply.content_length
    );
    if let Some(range) = &reply.content_range {
        head.push_str(&format!("content-range: {range}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    if let (Some((path, span)), false) = (&reply.file, reply.head_only) {
        let mut file = tokio::fs::File::open(path).await?;
        file.seek(std::io::SeekFrom::Start(span.start)).await?;
        let copied = tokio::io::copy(&mut file.take(span.send), stream).await?;
        if copied < span.send {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_open_ended_ranges() {
        assert_eq!(range_start(None, 10), Ok(0));
        assert_eq!(range_start(Some("bytes=4-"), 10), Ok(4));
        assert_eq!(range_start(Some("bytes=10-"), 10), Err(()));
        assert_eq!(range_start(Some("bytes=2-5"), 10), Ok(0), "served whole");
    }

    #[test]
    fn parses_a_request_head() {
        let head = "GET /b/blob?x=1 HTTP/1.1\r\nHost: h\r\nrAnGe: bytes=5-";
        assert_eq!(
            parse_head(head),
            Some(RequestHead {
                method: "GET".into(),
                path: "b/blob".into(),
                range: Some("bytes=5-".into()),
            })
        );
        assert_eq!(parse_head("GET /x"), None, "no HTTP version");
    }

    #[test]
    fn a_cut_sends_fewer_bytes_than_announced() {
        let file = PathBuf::from("f");
        let cut = plan(file.clone(), 100, Some("bytes=10-"), Some(30));
        assert_eq!(cut.status, 206);
        assert_eq!(cut.content_length, 90);
        assert_eq!(cut.content_range.as_deref(), Some("bytes 10-99/100"));
        assert_eq!(
            cut.file,
            Some((
                file.clone(),
                Span {
                    start: 10,
                    send: 30
                }
            ))
        );

        let beyond = plan(file.clone(), 100, None, Some(500));
        assert_eq!((beyond.status, beyond.content_length), (200, 100));
        assert_eq!(
            beyond.file,
            Some((
                file.clone(),
                Span {
                    start: 0,
                    send: 100
                }
            ))
        );

        let unsatisfiable = plan(file, 100, Some("bytes=100-"), None);
        assert_eq!(unsatisfiable.status, 416);
        assert_eq!(unsatisfiable.content_range.as_deref(), Some("bytes */100"));
    }

    #[test]
    fn only_the_first_requests_are_cut() {
        let entry = |requests| Entry {
            file: PathBuf::from("f"),
            fault: Fault::Cut { after: 7, times: 2 },
            requests,
            hold: None,
        };
        assert_eq!(cut(&entry(1)), Some(7));
        assert_eq!(cut(&entry(2)), Some(7));
        assert_eq!(cut(&entry(3)), None);
    }
}
