//! The watch caches of the supervised kinds, for readers outside the tree: the dashboard shows
//! what the actors decide on, without a request of its own to the API server.

use std::any::{Any, TypeId};
use std::sync::Arc;

use dashmap::DashMap;
use kube::Resource;
use kube::runtime::reflector::Store;

/// One [`Store`] per object type, published by its kind's supervisor (again on a restart).
#[derive(Default)]
pub struct Caches {
    stores: DashMap<TypeId, Box<dyn Any + Send + Sync>>,
}

impl Caches {
    /// Makes `store` the cache of `K`, replacing an earlier one.
    pub fn publish<K>(&self, store: Store<K>)
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        self.stores.insert(TypeId::of::<K>(), Box::new(store));
    }

    /// Every cached object of `K`, in no particular order; empty until the kind's supervisor
    /// started.
    pub fn objects<K>(&self) -> Vec<Arc<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        self.stores
            .get(&TypeId::of::<K>())
            .and_then(|store| store.downcast_ref::<Store<K>>().map(Store::state))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;

    use super::*;

    fn config_map(name: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.to_owned());
        cm.metadata.namespace = Some("ns".to_owned());
        cm
    }

    #[test]
    fn objects_are_read_from_the_published_store_of_their_type() {
        let caches = Caches::default();
        assert!(caches.objects::<ConfigMap>().is_empty());
        let (store, mut writer) = reflector::store::<ConfigMap>();
        caches.publish(store);
        writer.apply_watcher_event(&Event::Apply(config_map("a")));
        let names: Vec<_> = caches
            .objects::<ConfigMap>()
            .iter()
            .map(|cm| cm.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a"]);
        assert!(
            caches
                .objects::<k8s_openapi::api::core::v1::Secret>()
                .is_empty()
        );
    }
}
