//! What every actor shares: the API client, where the operator lives, metrics and readiness.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use crate::metrics::Metrics;
use crate::resources::bundle::JobSettings;

/// Shared, read-mostly state of the operator process.
pub struct Context {
    pub client: kube::Client,
    /// Namespace of the operator; bundles' PVCs, Secrets and Jobs live here.
    pub namespace: String,
    pub metrics: Metrics,
    pub readiness: Readiness,
    /// Image and service accounts of the Jobs the operator creates.
    pub jobs: JobSettings,
}

impl Context {
    pub fn new(
        client: kube::Client,
        namespace: impl Into<String>,
        metrics: Metrics,
        jobs: JobSettings,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            namespace: namespace.into(),
            metrics,
            readiness: Readiness::default(),
            jobs,
        })
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
