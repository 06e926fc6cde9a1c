//! What this process last wrote: the resourceVersion of each object's last status write, so a
//! reconcile can tell whether its watch cache has seen that write.
//!
//! An object actor decides on its watch cache unless the cache may predate a write of its own:
//! after a status write at version V, a cached copy whose version is not V may be older (the
//! watch event is still on its way) and could lose write-ahead fields if decided on, so the
//! actor reads the object live instead. A cache that shows V, or an object this process never
//! wrote, needs no read: its first list came after every earlier writer had stopped (leader
//! election), and later changes by others arrive as watch events.
//!
//! This keeps a settled object's periodic pass (resync, a view change that does not concern it)
//! free of API requests.

use dashmap::DashMap;
use kube::{Resource, ResourceExt};

/// Object UID → resourceVersion of this process's last status write of it.
#[derive(Default)]
pub struct OwnWrites(DashMap<String, String>);

impl OwnWrites {
    /// Remembers that this process wrote `obj`'s status, leaving it at `version`.
    pub fn wrote(&self, uid: &str, version: Option<&str>) {
        match version {
            Some(version) => {
                self.0.insert(uid.to_owned(), version.to_owned());
            }
            // Unknown version: nothing proves a cache fresh any more.
            None => {
                self.0.insert(uid.to_owned(), String::new());
            }
        }
    }

    /// Whether `cached` may predate this process's last write of it.
    pub fn may_be_stale<K: Resource>(&self, cached: &K) -> bool {
        let Some(uid) = cached.uid() else {
            return true;
        };
        self.0
            .get(&uid)
            .is_some_and(|version| cached.resource_version().as_deref() != Some(version.as_str()))
    }

    /// Whether `version` of the object `uid` is exactly what this process's last status write
    /// left: its watch event then shows nothing the last pass did not decide on.
    pub fn is_own_write(&self, uid: &str, version: Option<&str>) -> bool {
        version
            .is_some_and(|v| !v.is_empty() && self.0.get(uid).is_some_and(|own| own.as_str() == v))
    }

    /// Forgets an object whose actor stopped.
    pub fn forget(&self, uid: &str) {
        self.0.remove(uid);
    }

    /// How many objects are remembered (for tests and metrics).
    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ConfigMap;

    fn at(uid: &str, version: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.uid = Some(uid.into());
        cm.metadata.resource_version = Some(version.into());
        cm
    }

    #[test]
    fn a_cache_is_fresh_until_we_write_and_again_once_it_shows_the_write() {
        let written = OwnWrites::default();
        assert!(!written.may_be_stale(&at("u", "5")), "never written");
        written.wrote("u", Some("7"));
        assert!(
            written.may_be_stale(&at("u", "5")),
            "before our write arrived"
        );
        assert!(!written.may_be_stale(&at("u", "7")), "shows our write");
        assert!(
            written.may_be_stale(&at("u", "9")),
            "changed since: read live once"
        );
        assert!(!written.may_be_stale(&at("other", "1")));
        written.forget("u");
        assert!(!written.may_be_stale(&at("u", "5")));
    }

    #[test]
    fn an_unknown_written_version_never_trusts_the_cache() {
        let written = OwnWrites::default();
        written.wrote("u", None);
        assert!(written.may_be_stale(&at("u", "7")));
        assert!(!written.is_own_write("u", Some("")));
        assert!(written.may_be_stale(&ConfigMap::default()), "no uid");
    }
}
