//! What wakes an object actor besides its own object: changes of objects it owns, of related
//! objects, and of the shared views, each turned into the owner's UID.

use std::fmt::Debug;

use futures::StreamExt;
use kube::api::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::broadcast;

use crate::actors::runtime::context::Context;
use crate::actors::runtime::views::Change;

/// A stream of owner UIDs: "something this object owns changed".
pub type OwnerEvents = futures::stream::BoxStream<'static, String>;

/// Owner UIDs of the objects of kind `K` that `api` sees change (created, updated or deleted),
/// for owners of kind `owner_kind` (by controller owner reference).
pub fn owner_events<K>(api: Api<PartialObjectMeta<K>>, owner_kind: &'static str) -> OwnerEvents
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    labelled_owner_events(api, owner_kind, None)
}

/// [`owner_events`] for only the objects matching the label selector `labels`, so a watch of a
/// busy kind (Secrets, Jobs) carries only what we label rather than the whole cluster's traffic.
///
/// Metadata only: an owner event needs the owner references, so neither a Secret's data nor a
/// Job's pod template is ever decoded or held.
pub fn labelled_owner_events<K>(
    api: Api<PartialObjectMeta<K>>,
    owner_kind: &'static str,
    labels: Option<&str>,
) -> OwnerEvents
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let config = match labels {
        Some(selector) => watcher::Config::default().labels(selector),
        None => watcher::Config::default(),
    };
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let owner = match event {
                Ok(
                    watcher::Event::Apply(obj)
                    | watcher::Event::Delete(obj)
                    | watcher::Event::InitApply(obj),
                ) => obj
                    .owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true) && r.kind == owner_kind)
                    .map(|r| r.uid.clone()),
                _ => None,
            };
            futures::future::ready(owner)
        })
        .boxed()
}

/// "These objects of kind `K` care about a change": the objects in `namespace` (every
/// namespace when `None`) for which `matches` holds (as the supervisor's watch cache has them).
pub struct Related<K> {
    pub namespace: Option<String>,
    pub matches: Box<dyn Fn(&K) -> bool + Send + Sync>,
}

impl<K> Related<K> {
    pub fn new(namespace: String, matches: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self {
        Self {
            namespace: Some(namespace),
            matches: Box::new(matches),
        }
    }

    /// The objects in any namespace for which `matches` holds (for cluster-scoped causes, such
    /// as a CRCBundle or the platform).
    pub fn anywhere(matches: impl Fn(&K) -> bool + Send + Sync + 'static) -> Self {
        Self {
            namespace: None,
            matches: Box::new(matches),
        }
    }
}

impl<K> Debug for Related<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Related")
            .field("namespace", &self.namespace)
            .finish_non_exhaustive()
    }
}

/// A stream of [`Related`] selections of a kind's objects.
pub type RelatedEvents<K> = futures::stream::BoxStream<'static, Related<K>>;

/// Watches kind `R` through `api` and maps every changed (created, updated or deleted) object
/// to the objects of kind `K` that care, with `map` (`None`: nobody cares).
pub fn related_events<R, K>(
    api: Api<R>,
    map: impl Fn(&R) -> Option<Related<K>> + Send + 'static,
) -> RelatedEvents<K>
where
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K: 'static,
{
    related_events_selected(api, watcher::Config::default(), map)
}

/// [`related_events`] of the objects `config` selects (a label selector keeps a busy kind's
/// other objects off the wire).
pub fn related_events_selected<R, K>(
    api: Api<R>,
    config: watcher::Config,
    map: impl Fn(&R) -> Option<Related<K>> + Send + 'static,
) -> RelatedEvents<K>
where
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K: 'static,
{
    watcher(api, config)
        .default_backoff()
        .filter_map(move |event| {
            let related = match event {
                Ok(
                    watcher::Event::Apply(obj)
                    | watcher::Event::Delete(obj)
                    | watcher::Event::InitApply(obj),
                ) => map(&obj),
                _ => None,
            };
            futures::future::ready(related)
        })
        .boxed()
}

/// [`related_events`] for the changes that matter: an object wakes the objects that care only
/// when `key` of it differs from the key it had at its last event (and when it is created or
/// deleted). A status write that changes nothing `key` reads (a condition's message, a count)
/// wakes nobody, so two kinds that wake each other on their status writes cannot keep each
/// other busy.
pub fn related_changes<R, K, Key>(
    api: Api<R>,
    key: impl Fn(&R) -> Key + Send + 'static,
    map: impl Fn(&R) -> Option<Related<K>> + Send + 'static,
) -> RelatedEvents<K>
where
    R: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K: 'static,
    Key: PartialEq + Send + 'static,
{
    let mut changes = Changes::default();
    watcher(api, watcher::Config::default())
        .default_backoff()
        .filter_map(move |event| {
            let related = match event {
                Ok(watcher::Event::Init) => {
                    changes.relisting();
                    None
                }
                Ok(watcher::Event::InitDone) => {
                    changes.relisted();
                    None
                }
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => changes
                    .changed(obj.uid().unwrap_or_default(), key(&obj))
                    .then(|| map(&obj))
                    .flatten(),
                Ok(watcher::Event::Delete(obj)) => {
                    changes.gone(&obj.uid().unwrap_or_default());
                    map(&obj)
                }
                Err(_) => None,
            };
            futures::future::ready(related)
        })
        .boxed()
}

/// The key each object had at its last event, by UID.
struct Changes<Key> {
    keys: std::collections::HashMap<String, Key>,
    /// The UIDs a relist in progress has listed so far. An object deleted while the watch was
    /// down gets no Delete event, only its absence from the relist: its key is dropped when
    /// the relist ends, so the map holds no more than the objects that exist.
    relisted: Option<std::collections::HashSet<String>>,
}

impl<Key> Default for Changes<Key> {
    fn default() -> Self {
        Self {
            keys: std::collections::HashMap::new(),
            relisted: None,
        }
    }
}

impl<Key: PartialEq> Changes<Key> {
    /// Records `key` for `uid`; whether it differs from the one recorded before (a first event
    /// differs).
    fn changed(&mut self, uid: String, key: Key) -> bool {
        if let Some(listed) = self.relisted.as_mut() {
            listed.insert(uid.clone());
        }
        match self.keys.get(&uid) {
            Some(previous) if *previous == key => false,
            _ => {
                self.keys.insert(uid, key);
                true
            }
        }
    }

    fn gone(&mut self, uid: &str) {
        self.keys.remove(uid);
    }

    /// A (re)list starts: what it lists is what exists.
    fn relisting(&mut self) {
        self.relisted = Some(std::collections::HashSet::new());
    }

    /// The list is complete: objects it did not list are gone.
    fn relisted(&mut self) {
        if let Some(listed) = self.relisted.take() {
            self.keys.retain(|uid, _| listed.contains(uid));
        }
    }
}

/// Owner UIDs that `owner` finds in the changes of the shared views (e.g. the ClusterInstance
/// controlling a changed Route), as [`OwnerEvents`]: the owners are woken from the one shared
/// watch of that kind rather than a watch of their own.
pub fn view_owner_events(ctx: &Context, owner: fn(&Change) -> Option<String>) -> OwnerEvents {
    futures::stream::unfold(ctx.views.subscribe(), move |mut changes| async move {
        loop {
            match changes.recv().await {
                Ok(change) => {
                    if let Some(uid) = owner(&change) {
                        return Some((uid, changes));
                    }
                }
                // Lost triggers are covered by the periodic resync.
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_changed_key_is_a_change() {
        let mut changes = Changes::default();
        assert!(changes.changed("a".into(), (1, false)), "first seen");
        assert!(
            !changes.changed("a".into(), (1, false)),
            "same key: a status write"
        );
        assert!(changes.changed("a".into(), (2, false)), "new generation");
        assert!(changes.changed("b".into(), (2, false)), "another object");
        changes.gone("a");
        assert!(
            changes.changed("a".into(), (2, false)),
            "made again after a delete"
        );
    }

    #[test]
    fn a_relist_forgets_objects_deleted_while_the_watch_was_down() {
        let mut changes = Changes::default();
        assert!(changes.changed("kept".into(), 1));
        assert!(changes.changed("deleted unseen".into(), 1));
        changes.relisting();
        assert!(
            !changes.changed("kept".into(), 1),
            "unchanged across the relist"
        );
        changes.relisted();
        assert_eq!(changes.keys.len(), 1, "only what the relist listed stays");
        assert!(changes.keys.contains_key("kept"));
        assert!(
            changes.changed("deleted unseen".into(), 1),
            "made again with the same name: new to us"
        );
        // Events outside a relist do not prune.
        changes.relisted();
        assert_eq!(changes.keys.len(), 2);
    }
}
