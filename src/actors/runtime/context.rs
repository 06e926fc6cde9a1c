//! What every actor shares: the API client, where the operator lives, metrics and readiness.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::actors::runtime::own_writes::OwnWrites;
use crate::actors::runtime::user_secrets::UserSecrets;
use crate::actors::runtime::views::Views;
use crate::events::Events;
use crate::guest::route::RouteAccess;
use crate::metrics::Metrics;
use crate::resources::bundle::JobSettings;
use crate::resources::pool::PoolBundles;

/// Shared, read-mostly state of the operator process.
pub struct Context {
    pub client: kube::Client,
    /// Namespace of the operator; bundles' PVCs, Secrets and Jobs live here.
    pub namespace: String,
    pub metrics: Metrics,
    pub readiness: Readiness,
    /// Image and service accounts of the Jobs the operator creates.
    pub jobs: JobSettings,
    /// Timings of the controllers (tests shorten them).
    pub tuning: Tuning,
    /// How guests are reached and what their agents get.
    pub guests: GuestSettings,
    /// Kubernetes Events about our objects.
    pub events: Events,
    /// Watch-fed views of what many objects read (platform, Namespaces, bundles, Route hosts),
    /// started with the supervision tree.
    pub views: Views,
    /// The resourceVersion of each object's last status write by this process, so reconciles
    /// decide on the watch cache once it shows that write.
    pub own_writes: OwnWrites,
    /// The user Secrets instances read by name, read once per change.
    pub user_secrets: UserSecrets,
    /// Which bundles pools may have created, where, and how long unused ones stay.
    pub pool_bundles: PoolBundles,
    /// The supervised kinds' watch caches, for the dashboard.
    pub caches: crate::actors::runtime::caches::Caches,
}

impl Context {
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        metrics: Metrics,
        jobs: JobSettings,
    ) -> Arc<Self> {
        Self::with_tuning(client, namespace, metrics, jobs, Tuning::default())
    }

    /// [`Context::new`] with other [`Tuning`].
    pub fn with_tuning(
        client: kube::Client,
        namespace: impl Into<String>,
        metrics: Metrics,
        jobs: JobSettings,
        tuning: Tuning,
    ) -> Arc<Self> {
        Self::build(
            client,
            namespace,
            metrics,
            jobs,
            tuning,
            GuestSettings::from_env(),
            PoolBundles::default(),
        )
    }

    /// Every setting explicit.
    pub fn build(
        client: kube::Client,
        namespace: impl Into<String>,
        metrics: Metrics,
        jobs: JobSettings,
        tuning: Tuning,
        guests: GuestSettings,
        pool_bundles: PoolBundles,
    ) -> Arc<Self> {
        metrics.count_live_actors_with(crate::actors::runtime::names::live_actor_counts);
        metrics.count_mailboxes_with(crate::actors::runtime::mailbox::depths);
        Arc::new(Self {
            events: Events::new(client.clone()),
            guests,
            client,
            namespace: namespace.into(),
            metrics,
            readiness: Readiness::default(),
            jobs,
            tuning,
            views: Views::default(),
            own_writes: OwnWrites::default(),
            user_secrets: UserSecrets::default(),
            pool_bundles,
            caches: Default::default(),
        })
    }
}

/// How the operator reaches guest APIs.
#[derive(Clone, Debug)]
pub struct GuestSettings {
    /// How Route hosts are reached for the readiness probe (`HTTPS_PROXY` is honoured).
    pub route_access: RouteAccess,
}

impl GuestSettings {
    /// From the environment: `HTTPS_PROXY`/`NO_PROXY`. (`CRC_AGENT_CLUSTER_ROLE`, upstream's
    /// shared agent ClusterRole, is not read: each agent has its own Role.)
    pub fn from_env() -> Self {
        Self {
            route_access: RouteAccess::from_env(),
        }
    }
}

/// Timings of the controllers; the defaults are upstream's.
#[derive(Clone, Debug)]
pub struct Tuning {
    /// How long a Ready, unclaimed pool instance must have been idle before scale-down may
    /// delete it (upstream: 2 minutes).
    pub pool_idle_grace: Duration,
}

impl Default for Tuning {
    fn default() -> Self {
        Self {
            pool_idle_grace: Duration::from_secs(120),
        }
    }
}

/// Which watches have completed their initial list; `/readyz` reports ready when all expected
/// kinds have.
#[derive(Clone, Default)]
pub struct Readiness {
    synced: Arc<Mutex<HashSet<&'static str>>>,
}

impl Readiness {
    pub fn mark_synced(&self, kind: &'static str) {
        self.lock().insert(kind);
    }

    pub fn is_synced(&self, kind: &str) -> bool {
        self.lock().contains(kind)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashSet<&'static str>> {
        // The set stays consistent even if a holder panicked: inserts are atomic.
        self.synced
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
