//! A small HTTP file server for downloads in tests and the demo (the stand-in for
//! mirror.openshift.com and for RHCOS ISO locations): `Range` requests for resumable downloads,
//! and injectable faults (an error status, a connection cut mid-body).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

/// What goes wrong when a file is requested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Serve normally.
    None,
    /// Answer with this HTTP status and no body.
    Status(u16),
    /// Cut the connection after this many body bytes, on the first `times` requests; later
    /// requests are served normally (a flaky network that a resuming client gets through).
    Cut { after: u64, times: u32 },
}

#[derive(Clone, Debug)]
struct Entry {
    file: PathBuf,
    fault: Fault,
    requests: u32,
}

type Table = Arc<Mutex<HashMap<String, Entry>>>;

/// A running file server; stops when dropped.
pub struct FileServer {
    addr: SocketAddr,
    table: Table,
    task: tokio::task::JoinHandle<()>,
}

impl FileServer {
    /// Listens on a free port of `ip` (`127.0.0.1` for tests).
    pub async fn start(ip: std::net::IpAddr) -> std::io::Result<FileServer> {
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let table: Table = Arc::default();
        let app = Router::new()
            .route("/{*path}", get(serve))
            .with_state(table.clone());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
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
            },
        );
        self.url(&key)
    }

    /// The URL of `/<url_path>` (published or not).
    pub fn url(&self, url_path: &str) -> String {
        format!("http://{}/{}", self.addr, url_path.trim_start_matches('/'))
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

async fn serve(
    State(table): State<Table>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    let entry = {
        let mut table = table.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(entry) = table.get_mut(&path) else {
            return StatusCode::NOT_FOUND.into_response();
        };
        entry.requests += 1;
        entry.clone()
    };
    if let Fault::Status(code) = entry.fault {
        return StatusCode::from_u16(code)
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR)
            .into_response();
    }
    let Ok(mut file) = tokio::fs::File::open(&entry.file).await else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let Ok(len) = file.metadata().await.map(|m| m.len()) else {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    };
    let start = match range_start(&headers, len) {
        Ok(start) => start,
        Err(()) => {
            return (
                StatusCode::RANGE_NOT_SATISFIABLE,
                [(header::CONTENT_RANGE, format!("bytes */{len}"))],
            )
                .into_response();
        }
    };
    if file.seek(std::io::SeekFrom::Start(start)).await.is_err() {
        return StatusCode::INTERNAL_SERVER_ERROR.into_response();
    }
    let cut = match entry.fault {
        Fault::Cut { after, times } if entry.requests <= times => Some(after),
        _ => None,
    };
    let body = Body::from_stream(chunks(file, len - start, cut));
    let mut response = Response::new(body);
    let h = response.headers_mut();
    h.insert(header::CONTENT_LENGTH, (len - start).into());
    h.insert(
        header::ACCEPT_RANGES,
        header::HeaderValue::from_static("bytes"),
    );
    if start > 0 {
        *response.status_mut() = StatusCode::PARTIAL_CONTENT;
        if let Ok(v) = format!("bytes {start}-{}/{len}", len - 1).parse() {
            response.headers_mut().insert(header::CONTENT_RANGE, v);
        }
    }
    response
}

/// The first byte asked for by a `Range: bytes=N-` header (other forms are served whole).
fn range_start(headers: &HeaderMap, len: u64) -> Result<u64, ()> {
    let Some(spec) = headers
        .get(header::RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("bytes="))
    else {
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

/// The file's bytes in chunks; with `cut`, an I/O error after that many bytes, which makes the
/// server drop the connection mid-body.
fn chunks(
    file: tokio::fs::File,
    remaining: u64,
    cut: Option<u64>,
) -> impl futures::Stream<Item = std::io::Result<Bytes>> {
    futures::stream::unfold(
        (file, remaining, cut, 0u64),
        |(mut file, remaining, cut, sent)| async move {
            if remaining == 0 {
                return None;
            }
            if cut.is_some_and(|limit| sent >= limit) {
                let err = std::io::Error::new(
                    std::io::ErrorKind::ConnectionAborted,
                    "simulated connection cut",
                );
                return Some((Err(err), (file, 0, cut, sent)));
            }
            let budget = cut.map_or(remaining, |limit| (limit - sent).min(remaining));
            let mut buf = vec![0u8; budget.min(64 * 1024) as usize];
            match file.read(&mut buf).await {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    let n = n as u64;
                    Some((Ok(Bytes::from(buf)), (file, remaining - n, cut, sent + n)))
                }
                Err(e) => Some((Err(e), (file, 0, cut, sent))),
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_open_ended_ranges() {
        let mut h = HeaderMap::new();
        assert_eq!(range_start(&h, 10), Ok(0));
        h.insert(header::RANGE, "bytes=4-".parse().unwrap());
        assert_eq!(range_start(&h, 10), Ok(4));
        h.insert(header::RANGE, "bytes=10-".parse().unwrap());
        assert_eq!(range_start(&h, 10), Err(()));
    }
}
