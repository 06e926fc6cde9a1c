//! What this process last wrote: the resourceVersion of each object's last status write, so a
//! reconcile can tell whether its watch cache has seen that write.
//!
//! An object actor decides on its watch cache unless the cache may predate a write of its own:
//! after a status write at version V, a cached copy older than V (the watch event is still on
//! its way) could lose write-ahead fields if decided on, so the actor reads the object live
//! instead. Versions are compared as Kubernetes 1.35 made them comparable (KEP-5504); a copy at
//! V or later has seen the write. A cache that shows V, or an object this process never
//! wrote, needs no read: its first list came after every earlier writer had stopped (leader
//! election), and later changes by others arrive as watch events.
//!
//! This keeps a settled object's periodic pass (resync, a view change that does not concern it)
//! free of API requests, and so the one pass the watch event of our own status write triggers:
//! it decides on the cache, finds the status already right and writes nothing.
//!
//! An actor uses the pair [`OwnWrites::current`] (what to decide on) and
//! [`OwnWrites::record_status`] (write the status and remember the version it left); nothing
//! else needs to touch the record.

use std::borrow::Cow;

use dashmap::DashMap;
use kube::{Api, Resource, ResourceExt};

use crate::events::Events;
use crate::write::{self, Guard, Recorded};

/// Object UID → resourceVersion of this process's last status write of it.
#[derive(Default)]
pub struct OwnWrites(DashMap<String, String>);

impl OwnWrites {
    /// The copy of `cached` to decide on: `cached` itself when the watch cache cannot predate
    /// this process's last status write of it (no request), else the object read live. `None`
    /// when it is gone or a namesake replaced it (the supervisor stops or retriggers the actor).
    pub async fn current<'a, K: Recorded>(
        &self,
        api: &Api<K>,
        cached: &'a K,
    ) -> Result<Option<Cow<'a, K>>, kube::Error> {
        if !self.may_be_stale(cached) {
            return Ok(Some(Cow::Borrowed(cached)));
        }
        let live = api
            .get_opt(&cached.name_any())
            .await?
            .filter(|o| o.uid() == cached.uid());
        Ok(live.map(Cow::Owned))
    }

    /// Records `status` for `obj` ([`write::record_status`]; the status is the actor's alone)
    /// and remembers the version the write left, so [`Self::current`] knows when the cache has
    /// caught up. Returns whether a write was sent.
    pub async fn record_status<K: Recorded>(
        &self,
        api: &Api<K>,
        obj: &K,
        status: &K::Status,
        events: &Events,
    ) -> Result<bool, kube::Error> {
        let written = write::record_status(api, obj, status, Guard::None, events).await?;
        let sent = written.is_some();
        if let (Some(written), Some(uid)) = (written, obj.uid()) {
            self.wrote(&uid, written.resource_version.as_deref());
        }
        Ok(sent)
    }

    /// Remembers that this process wrote `obj`'s status, leaving it at `version`.
    fn wrote(&self, uid: &str, version: Option<&str>) {
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
    fn may_be_stale<K: Resource>(&self, cached: &K) -> bool {
        let Some(uid) = cached.uid() else {
            return true;
        };
        let Some(written) = self.0.get(&uid) else {
            return false;
        };
        let cached = cached.resource_version().unwrap_or_default();
        match compare_versions(&cached, &written) {
            // Our write or a later change (another writer's finalizer, labels): the cache has
            // seen our write, and a periodic pass needs no read.
            Some(order) => order == std::cmp::Ordering::Less,
            // Not comparable: only our own version proves the cache fresh.
            None => cached != *written,
        }
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

/// Orders two resourceVersions of objects of one resource, as client-go's
/// `CompareResourceVersion` does (KEP-5504, stable in Kubernetes 1.35): both decimal integers
/// without leading zeros, the longer one the later, else the lexicographically greater one.
/// `None` when either is not such a number: a server that does not make them comparable.
fn compare_versions(a: &str, b: &str) -> Option<std::cmp::Ordering> {
    let number = |v: &str| {
        !v.is_empty() && v.bytes().all(|c| c.is_ascii_digit()) && (v == "0" || !v.starts_with('0'))
    };
    (number(a) && number(b)).then(|| a.len().cmp(&b.len()).then_with(|| a.cmp(b)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    use crate::api::bundle::{CRCBundle, CRCBundleStatus};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::client::Body;
    use serde_json::json;

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
            !written.may_be_stale(&at("u", "10")),
            "changed by someone since our write: the cache has seen it"
        );
        assert!(!written.may_be_stale(&at("other", "1")));
        written.forget("u");
        assert!(!written.may_be_stale(&at("u", "5")));
    }

    #[test]
    fn versions_compare_as_client_go_compares_them() {
        use std::cmp::Ordering::*;
        assert_eq!(compare_versions("9", "10"), Some(Less));
        assert_eq!(compare_versions("10", "10"), Some(Equal));
        assert_eq!(compare_versions("123", "45"), Some(Greater));
        assert_eq!(compare_versions("0", "1"), Some(Less));
        for odd in ["", "01", "1a", "-1"] {
            assert_eq!(compare_versions(odd, "5"), None, "{odd:?}");
        }
        // Not comparable: only our own version proves the cache fresh.
        let written = OwnWrites::default();
        written.wrote("u", Some("x7"));
        assert!(!written.may_be_stale(&at("u", "x7")));
        assert!(written.may_be_stale(&at("u", "x9")));
    }

    #[test]
    fn an_unknown_written_version_never_trusts_the_cache() {
        let written = OwnWrites::default();
        written.wrote("u", None);
        assert!(written.may_be_stale(&at("u", "7")));
        assert!(written.may_be_stale(&ConfigMap::default()), "no uid");
    }

    fn bundle(uid: &str, version: &str, sha: Option<&str>) -> CRCBundle {
        serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "CRCBundle",
            "metadata": {"name": "b", "uid": uid, "resourceVersion": version},
            "spec": {"goldenVolumeSize": "35Gi"},
            "status": {"sha256": sha},
        }))
        .expect("bundle")
    }

    /// An API server that answers every request with `stored` (as the object after a status
    /// patch, at version "8") and records each request's method and path.
    fn server(stored: CRCBundle) -> (Api<CRCBundle>, Arc<Mutex<Vec<String>>>) {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let log = seen.clone();
        let service = tower::service_fn(move |req: http::Request<Body>| {
            log.lock()
                .unwrap()
                .push(format!("{} {}", req.method(), req.uri().path()));
            let mut answer = serde_json::to_value(&stored).expect("json");
            if req.method() == http::Method::PATCH {
                answer["metadata"]["resourceVersion"] = json!("8");
            }
            let body = serde_json::to_vec(&answer).expect("json");
            async move { Ok::<_, std::convert::Infallible>(http::Response::new(Body::from(body))) }
        });
        let client = kube::Client::new(service, "default");
        (Api::all(client), seen)
    }

    #[tokio::test]
    async fn the_cache_is_used_until_our_write_then_read_live_until_it_shows_it() {
        let cached = bundle("u", "5", None);
        let (api, requests) = server(bundle("u", "5", Some("abc")));
        let events = Events::new(api.clone().into_client());
        let written = OwnWrites::default();

        let current = written.current(&api, &cached).await.unwrap().unwrap();
        assert!(matches!(current, Cow::Borrowed(_)), "never written: cached");
        assert!(requests.lock().unwrap().is_empty());

        let status = CRCBundleStatus {
            sha256: Some("abc".into()),
            ..Default::default()
        };
        assert!(
            written
                .record_status(&api, &cached, &status, &events)
                .await
                .unwrap()
        );
        let unchanged = bundle("u", "8", Some("abc"));
        assert!(
            !written
                .record_status(&api, &unchanged, &status, &events)
                .await
                .unwrap(),
            "nothing to change: not sent"
        );
        assert_eq!(requests.lock().unwrap().len(), 1, "one status patch");

        let current = written.current(&api, &cached).await.unwrap().unwrap();
        assert!(matches!(current, Cow::Owned(_)), "cache predates the write");
        assert_eq!(
            current.status.as_ref().unwrap().sha256.as_deref(),
            Some("abc")
        );
        assert_eq!(requests.lock().unwrap().len(), 2, "one GET");

        let caught_up = bundle("u", "8", Some("abc"));
        let current = written.current(&api, &caught_up).await.unwrap().unwrap();
        assert!(matches!(current, Cow::Borrowed(_)), "cache shows the write");
        assert_eq!(requests.lock().unwrap().len(), 2);
    }

    #[tokio::test]
    async fn a_replaced_namesake_is_no_current_copy() {
        let cached = bundle("u", "5", None);
        let (api, _) = server(bundle("other", "9", None));
        let written = OwnWrites::default();
        written.wrote("u", Some("7"));
        assert!(written.current(&api, &cached).await.unwrap().is_none());
    }
}
