//! The operator's HTTP endpoints: `/healthz` and `/readyz` for probes, `/metrics` for Prometheus,
//! and the read-only `/dashboard` on a listener of its own. The dashboard names every tenant's
//! namespaces, instances and lease holders, so its listener is loopback unless configured
//! otherwise (reach it with `kubectl port-forward`); `/metrics` names no object.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::actors::Context;

/// What the probe endpoints look at.
#[derive(Clone)]
pub struct ProbeState {
    pub ctx: Arc<Context>,
    /// Whether this replica leads; a standby is ready as soon as it runs.
    pub leading: Arc<AtomicBool>,
    /// Kinds whose watches must have listed once before a leader reports ready.
    pub kinds: &'static [&'static str],
}

impl ProbeState {
    fn unsynced(&self) -> Vec<&'static str> {
        if !self.leading.load(Ordering::Relaxed) {
            return Vec::new();
        }
        self.kinds
            .iter()
            .copied()
            .filter(|k| !self.ctx.readiness.is_synced(k))
            .collect()
    }
}

/// Routes for the health probe listener.
pub fn probes(state: ProbeState) -> Router {
    Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(state)
}

/// Routes for the metrics listener.
pub fn metrics(ctx: Arc<Context>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(ctx)
}

/// Routes for the dashboard listener.
pub fn dashboard(ctx: Arc<Context>) -> Router {
    Router::new()
        .route("/dashboard", get(serve_dashboard))
        .with_state(ctx)
}

async fn readyz(State(state): State<ProbeState>) -> impl IntoResponse {
    let unsynced = state.unsynced();
    if unsynced.is_empty() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("waiting for the initial list of: {}", unsynced.join(", ")),
        )
    }
}

async fn serve_metrics(State(ctx): State<Arc<Context>>) -> impl IntoResponse {
    super::inventory::record(&ctx);
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        ctx.metrics.encode(),
    )
}

async fn serve_dashboard(State(ctx): State<Arc<Context>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
        super::dashboard::page(&ctx),
    )
}

/// Binds `addr` and serves `app` until the task is aborted. Returns the bound address (useful
/// with port 0).
pub async fn serve(
    addr: SocketAddr,
    app: Router,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let task = tokio::spawn(async move {
        if let Err(err) = axum::serve(listener, app).await {
            tracing::error!(%bound, "HTTP server stopped: {err}");
        }
    });
    Ok((bound, task))
}
