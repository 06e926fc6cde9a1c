//! The user Secrets instances read by name (a namespace's pull secret, a `bundleSSHKeyRef`
//! Secret): read once per change instead of once per instance pass. A thousand instances of one
//! namespace share one pull secret; without this, each of their passes is a GET of it.
//!
//! Every Secret is already watched, metadata only, to wake the instances that name it
//! (`instance.rs`); each of its events calls [`UserSecrets::changed`], which forgets the copy
//! of that Secret. A read takes the copy while no event came after it; otherwise it GETs and
//! keeps the result — unless an event arrived while the GET was in flight (the copy might
//! predate it). A copy older than [`MAX_AGE`] is read again, so a watch that stalls cannot keep
//! a stale copy for long. Absence is kept too: an instance waiting for its pull secret to be
//! created costs nothing until it is. Copies live in the operator's memory only.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use k8s_openapi::api::core::v1::Secret;
use kube::Api;

/// The longest a copy is used without a read; the kind supervisors' resync period.
pub const MAX_AGE: Duration = Duration::from_secs(300);

#[derive(Default)]
pub struct UserSecrets {
    entries: DashMap<(String, String), Entry>,
}

#[derive(Default)]
struct Entry {
    /// Bumped by every watch event of the Secret.
    generation: u64,
    /// What a read of this generation found (`None` inside: no such Secret), and when.
    copy: Option<(Option<Arc<Secret>>, Instant)>,
}

impl UserSecrets {
    /// A watch event (created, changed, deleted) of Secret `namespace/name`.
    pub fn changed(&self, namespace: &str, name: &str) {
        // Only Secrets read through here have an entry; the others' events cost a lookup.
        if let Some(mut entry) = self
            .entries
            .get_mut(&(namespace.to_owned(), name.to_owned()))
        {
            entry.generation += 1;
            entry.copy = None;
        }
    }

    /// Secret `name` of `api`'s namespace `namespace`, from the copy when it is current.
    pub async fn get(
        &self,
        api: &Api<Secret>,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Secret>>, kube::Error> {
        let key = (namespace.to_owned(), name.to_owned());
        let generation = {
            let entry = self.entries.entry(key.clone()).or_default();
            if let Some((copy, at)) = &entry.copy
                && at.elapsed() < MAX_AGE
            {
                return Ok(copy.clone());
            }
            entry.generation
        };
        let read = api.get_opt(name).await?.map(Arc::new);
        if let Some(mut entry) = self.entries.get_mut(&key)
            && entry.generation == generation
        {
            entry.copy = Some((read.clone(), Instant::now()));
        }
        Ok(read)
    }

    /// How many Secrets have a copy (for tests and metrics).
    pub fn copies(&self) -> usize {
        self.entries.iter().filter(|e| e.copy.is_some()).count()
    }
}

impl std::fmt::Debug for UserSecrets {
    // Never the Secrets' contents.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UserSecrets")
            .field("copies", &self.copies())
            .finish()
    }
}
