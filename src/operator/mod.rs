//! `guestcluster operator`: leader election, the supervision tree, probes and metrics, and a
//! graceful shutdown on SIGTERM.

pub mod api_limits;
pub mod dashboard;
pub mod http;
pub mod inventory;
pub mod leader;
pub mod platform;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::actors::Context;
use crate::actors::root::{self, TreeConfig};
use crate::metrics::Metrics;

/// Errors that end the operator.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("binding {what} listener on {addr}: {source}")]
    Listen {
        what: &'static str,
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Leader(#[from] leader::Error),
    #[error("starting the supervision tree: {0}")]
    Spawn(#[from] ractor::SpawnErr),
    #[error(
        "asking the API server whether it serves {group} (set --platform to skip): {source}",
        group = platform::SCC_GROUP
    )]
    Platform { source: kube::Error },
}

/// How to run the operator.
#[derive(Clone, Debug)]
pub struct Options {
    /// The operator namespace (bundles' PVCs, Secrets and Jobs; the leader Lease).
    pub namespace: String,
    /// Take part in leader election; when false this process acts as leader right away.
    pub leader_elect: bool,
    /// Lease duration, renew deadline and retry period of the election.
    pub leader_timing: leader::Timing,
    /// Identity written into the Lease.
    pub identity: String,
    pub health_addr: Option<SocketAddr>,
    pub metrics_addr: Option<SocketAddr>,
    /// Where `/dashboard` listens (loopback by default: it names every tenant's objects).
    pub dashboard_addr: Option<SocketAddr>,
    pub tree: TreeConfig,
    /// Image and service accounts of the Jobs the operator creates.
    pub jobs: crate::resources::bundle::JobSettings,
    /// Decides who the Jobs' pods run as (overrides `jobs.pod_users`).
    pub platform: platform::Platform,
    /// How guest APIs are reached (Route proxy).
    pub guests: crate::actors::runtime::context::GuestSettings,
    /// Which bundles pools may have created, where, and how long unused ones stay.
    pub pool_bundles: crate::actors::pool::bundles::PoolBundles,
}

/// The operator's API clients.
#[derive(Clone)]
pub struct Clients {
    /// What the actors send, through the `--kube-api-qps` bucket.
    pub work: kube::Client,
    /// Leader election's own: a renewal never waits behind the operator's own burst in the
    /// bucket, which could end a healthy leader at its renew deadline (client-go also gives the
    /// election a client of its own).
    pub election: kube::Client,
}

impl Clients {
    /// One client for both, where no bucket is in front of it.
    pub fn shared(client: kube::Client) -> Self {
        Self {
            work: client.clone(),
            election: client,
        }
    }
}

/// Addresses the HTTP listeners actually bound (port 0 resolves to a free port).
#[derive(Clone, Debug, Default)]
pub struct Bound {
    pub health: Option<SocketAddr>,
    pub metrics: Option<SocketAddr>,
    pub dashboard: Option<SocketAddr>,
}

/// Runs the operator until `shutdown` completes (graceful) or leadership is lost (error).
/// `on_bound` is told where the listeners are once they are up.
pub async fn run(
    clients: Clients,
    options: Options,
    metrics: Metrics,
    shutdown: impl Future<Output = ()>,
    on_bound: impl FnOnce(Bound),
) -> Result<(), Error> {
    let leader_gauge = metrics.leader.clone();
    leader_gauge.set(0);
    let pod_users = options
        .platform
        .resolve(&clients.work)
        .await
        .map_err(|source| Error::Platform { source })?;
    tracing::info!(?pod_users, platform = ?options.platform, "Job pods' users");
    let ctx = Context::build(
        clients.work,
        options.namespace.clone(),
        metrics,
        crate::resources::bundle::JobSettings {
            pod_users,
            ..options.jobs.clone()
        },
        Default::default(),
        options.guests.clone(),
        options.pool_bundles.clone(),
    );
    let leading = Arc::new(AtomicBool::new(!options.leader_elect));
    let mut servers = Vec::new();
    let mut bound = Bound::default();
    if let Some(addr) = options.health_addr {
        let state = http::ProbeState {
            ctx: ctx.clone(),
            leading: leading.clone(),
            kinds: root::KIND_NAMES,
        };
        let (at, task) = http::serve(addr, http::probes(state))
            .await
            .map_err(|source| Error::Listen {
                what: "health probe",
                addr,
                source,
            })?;
        bound.health = Some(at);
        servers.push(task);
    }
    if let Some(addr) = options.metrics_addr {
        let (at, task) = http::serve(addr, http::metrics(ctx.clone()))
            .await
            .map_err(|source| Error::Listen {
                what: "metrics",
                addr,
                source,
            })?;
        bound.metrics = Some(at);
        servers.push(task);
    }
    if let Some(addr) = options.dashboard_addr {
        let (at, task) = http::serve(addr, http::dashboard(ctx.clone()))
            .await
            .map_err(|source| Error::Listen {
                what: "dashboard",
                addr,
                source,
            })?;
        bound.dashboard = Some(at);
        servers.push(task);
    }
    on_bound(bound);

    tokio::pin!(shutdown);
    let elector = options.leader_elect.then(|| {
        leader::Elector::new(
            clients.election,
            leader::Config::new(&options.namespace, &options.identity, options.leader_timing),
        )
    });
    if let Some(elector) = &elector {
        tokio::select! {
            acquired = elector.acquire() => acquired?,
            () = &mut shutdown => {
                stop_servers(servers);
                return Ok(());
            }
        }
        leading.store(true, Ordering::Relaxed);
    }

    let tree = root::start(ctx, options.tree).await?;
    leader_gauge.set(1);
    let lost = match &elector {
        Some(elector) => tokio::select! {
            lost = elector.hold() => Some(lost),
            () = &mut shutdown => None,
        },
        None => {
            shutdown.await;
            None
        }
    };
    tracing::info!("stopping the supervision tree");
    leader_gauge.set(0);
    // Children stop with their supervisor; in-flight API calls are idempotent steps, so cutting
    // them short is safe.
    let _ = tree
        .stop_and_wait(
            Some("operator shutdown".into()),
            Some(Duration::from_secs(10)),
        )
        .await;
    stop_servers(servers);
    match (lost, &elector) {
        (Some(lost), _) => Err(lost.into()),
        (None, Some(elector)) => {
            if let Err(err) = elector.release().await {
                tracing::warn!("releasing leadership: {err}");
            }
            Ok(())
        }
        (None, None) => Ok(()),
    }
}

fn stop_servers(servers: Vec<tokio::task::JoinHandle<()>>) {
    for server in servers {
        server.abort();
    }
}

/// Resolves the operator namespace like the Go operator: `OPERATOR_NAMESPACE`, else the pod's
/// service account namespace, else `default`.
pub fn namespace_from_env() -> String {
    std::env::var("OPERATOR_NAMESPACE")
        .ok()
        .filter(|ns| !ns.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|ns| ns.trim().to_owned())
        })
        .unwrap_or_else(|| "default".to_owned())
}

/// A Lease holder identity unique to this process: the pod name (or host name) plus a suffix, so
/// a restarted container never mistakes the old holder for itself.
pub fn default_identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "guestcluster-operator".to_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or_default();
    format!("{host}_{:x}{:08x}", std::process::id(), nanos)
}

/// Completes on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = ctrl_c => {},
                _ = term.recv() => {},
            }
        }
        Err(_) => {
            let _ = ctrl_c.await;
        }
    }
    tracing::info!("shutdown requested");
}
