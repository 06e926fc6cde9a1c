//! Shared, watch-fed views of what many objects read: the platform operands (KubeVirt, CDI,
//! HyperConverged, as the outcome of the platform gate), Namespaces (metadata only: the policy
//! label and deletion), CRCBundles by name and by version, Route hosts, and which lease claims
//! which instance.
//!
//! One watch per kind for the whole process, started with the supervision tree
//! ([`crate::actors::root::start`]); reconciles read from memory instead of GETting or listing on every
//! pass. Each view says when it has completed its first list ([`Views::ready`]): until then an
//! empty view means "not known yet", never "absent". A kind the API server does not serve (no
//! KubeVirt CRD, no Route CRD) is an empty, synced view; its watch keeps retrying with backoff,
//! so the view fills once the CRD appears.
//!
//! Every change that can alter a dependent's decision is published as a [`Change`]; the kind
//! supervisors map it to exactly the objects that depend on it ([`crate::actors::ObjectActor::woken_by`]).
//! Changes that cannot alter a decision (a Namespace annotation, a bundle's progress towards
//! Ready) wake nobody: [`namespace_changed`], [`bundle_changed`].

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::{broadcast, watch};
use tokio::task::JoinHandle;

use crate::actors::platform::{NamespaceState, Platform, PlatformGate, platform_gate};
use crate::api::bundle::CRCBundle;
use crate::api::common::Arch;
use crate::api::lease::ClusterLease;
use crate::resources::bundle::published_bundle_name;
use crate::route::Route;

/// How long a reconcile waits for a view's first list before it fails (and is retried with
/// backoff): the views start with the tree, so this only runs out while the API server is
/// unreachable.
pub const SYNC_TIMEOUT: Duration = Duration::from_secs(30);

/// Changes buffered per subscriber; one that falls further behind is told so
/// ([`broadcast::error::RecvError::Lagged`]) and wakes all its objects instead.
const CHANGES_BUFFER: usize = 4096;

/// Errors of the views.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the {view} view has not completed its first list within {}s", SYNC_TIMEOUT.as_secs())]
    NotSynced { view: &'static str },
}

/// A change of a view that may alter the decisions of the objects depending on it.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// The Namespace `name` appeared, went, was (un)labelled or started terminating.
    Namespace(String),
    /// The CRCBundle `name` appeared, went, was recreated or started deleting, became or ceased
    /// to be Ready, or changed what it publishes while Ready.
    Bundle(String),
    /// The outcome of the platform gate changed to this.
    Platform(PlatformGate),
    /// A Route changed; `owner` is the UID of the ClusterInstance that controls it, if any.
    Route { owner: Option<String> },
    /// Which lease claims the instances `instances` in `namespace` may have changed (a lease
    /// bound, released, or started deleting).
    Lease {
        namespace: String,
        instances: Vec<String>,
    },
}

/// The shared views of the operator process.
pub struct Views {
    namespaces: Store<PartialObjectMeta<Namespace>>,
    bundles: Store<CRCBundle>,
    routes: Store<Route>,
    /// Which lease claims which instance, kept with the lease view's store.
    lease_index: Arc<RwLock<LeaseIndex>>,
    platform: watch::Receiver<Option<PlatformGate>>,
    synced: Synced,
    changes: broadcast::Sender<Change>,
    /// What [`Views::start`] needs, taken by it.
    pending: Mutex<Option<Pending>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

/// The write halves of the views, until they are started.
struct Pending {
    namespaces: reflector::store::Writer<PartialObjectMeta<Namespace>>,
    bundles: reflector::store::Writer<CRCBundle>,
    routes: reflector::store::Writer<Route>,
    leases: reflector::store::Writer<ClusterLease>,
    platform: watch::Sender<Option<PlatformGate>>,
    synced: SyncedWriters,
}

#[derive(Clone)]
struct Synced {
    namespaces: watch::Receiver<bool>,
    bundles: watch::Receiver<bool>,
    routes: watch::Receiver<bool>,
    leases: watch::Receiver<bool>,
}

struct SyncedWriters {
    namespaces: watch::Sender<bool>,
    bundles: watch::Sender<bool>,
    routes: watch::Sender<bool>,
    leases: watch::Sender<bool>,
}

/// Which view a reconcile is about to read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Namespaces,
    Bundles,
    Routes,
    Leases,
    Platform,
}

impl View {
    fn name(self) -> &'static str {
        match self {
            Self::Namespaces => "Namespace",
            Self::Bundles => "CRCBundle",
            Self::Routes => "Route",
            Self::Leases => "ClusterLease",
            Self::Platform => "platform",
        }
    }
}

impl Default for Views {
    fn default() -> Self {
        let (namespaces_w, namespaces) = store();
        let (bundles_w, bundles) = store();
        let (routes_w, routes) = store();
        let (leases_w, _) = store();
        let (platform_tx, platform) = watch::channel(None);
        let (ns_tx, ns_rx) = watch::channel(false);
        let (b_tx, b_rx) = watch::channel(false);
        let (r_tx, r_rx) = watch::channel(false);
        let (l_tx, l_rx) = watch::channel(false);
        let (changes, _) = broadcast::channel(CHANGES_BUFFER);
        Self {
            namespaces,
            bundles,
            routes,
            lease_index: Arc::default(),
            platform,
            synced: Synced {
                namespaces: ns_rx,
                bundles: b_rx,
                routes: r_rx,
                leases: l_rx,
            },
            changes,
            pending: Mutex::new(Some(Pending {
                namespaces: namespaces_w,
                bundles: bundles_w,
                routes: routes_w,
                leases: leases_w,
                platform: platform_tx,
                synced: SyncedWriters {
                    namespaces: ns_tx,
                    bundles: b_tx,
                    routes: r_tx,
                    leases: l_tx,
                },
            })),
            tasks: Mutex::new(Vec::new()),
        }
    }
}

fn store<K>() -> (reflector::store::Writer<K>, Store<K>)
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    ObjectRef<K>: Hash + Eq,
{
    let writer = reflector::store::Writer::default();
    let reader = writer.as_reader();
    (writer, reader)
}

impl Views {
    /// Starts the watches (once; later calls do nothing).
    pub fn start(&self, client: &kube::Client) {
        let Some(p) = lock(&self.pending).take() else {
            return;
        };
        let changes = self.changes.clone();
        let lease_index = self.lease_index.clone();
        let mut tasks = lock(&self.tasks);
        tasks.push(spawn_view(
            client,
            // Metadata only: the policy needs the label and the deletion timestamp.
            |n: &mut PartialObjectMeta<Namespace>| n.metadata.managed_fields = None,
            p.namespaces,
            p.synced.namespaces,
            changes.clone(),
            |old, new| {
                let name = old.or(new).map(|n| n.name_any())?;
                namespace_changed(old.map(|n| &n.metadata), new.map(|n| &n.metadata))
                    .then_some(Change::Namespace(name))
            },
        ));
        tasks.push(spawn_view(
            client,
            |b: &mut CRCBundle| b.meta_mut().managed_fields = None,
            p.bundles,
            p.synced.bundles,
            changes.clone(),
            |old, new| {
                let name = old.or(new).map(|b| b.name_any())?;
                bundle_changed(old, new).then_some(Change::Bundle(name))
            },
        ));
        tasks.push(spawn_view(
            client,
            trim_route,
            p.routes,
            p.synced.routes,
            changes.clone(),
            |old, new| {
                let route = old.or(new)?;
                let owner = route
                    .owner_references()
                    .iter()
                    .find(|r| r.controller == Some(true) && r.kind == "ClusterInstance")
                    .map(|r| r.uid.clone());
                Some(Change::Route { owner })
            },
        ));
        tasks.push(spawn_view(
            client,
            |l: &mut ClusterLease| l.meta_mut().managed_fields = None,
            p.leases,
            p.synced.leases,
            changes.clone(),
            move |old, new| {
                let lease = old.or(new)?;
                let namespace = lease.namespace()?;
                write(&lease_index).set(
                    &namespace,
                    &lease.name_any(),
                    new.and_then(ClusterLease::claim),
                );
                let instances = lease_claims_changed(old, new);
                (!instances.is_empty()).then_some(Change::Lease {
                    namespace,
                    instances,
                })
            },
        ));
        tasks.push(tokio::spawn(run_platform(
            client.clone(),
            p.platform,
            changes,
        )));
    }

    /// Stops the watches.
    pub fn stop(&self) {
        for task in lock(&self.tasks).drain(..) {
            task.abort();
        }
    }

    /// A receiver of every [`Change`] from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Change> {
        self.changes.subscribe()
    }

    /// Waits until `view` has completed its first list (at most [`SYNC_TIMEOUT`]).
    pub async fn ready(&self, view: View) -> Result<(), Error> {
        let wait = async {
            match view {
                View::Platform => {
                    let mut rx = self.platform.clone();
                    rx.wait_for(Option::is_some).await.map(drop)
                }
                View::Namespaces => wait_true(&self.synced.namespaces).await,
                View::Bundles => wait_true(&self.synced.bundles).await,
                View::Routes => wait_true(&self.synced.routes).await,
                View::Leases => wait_true(&self.synced.leases).await,
            }
        };
        match tokio::time::timeout(SYNC_TIMEOUT, wait).await {
            Ok(Ok(())) => Ok(()),
            // Timed out, or the views were stopped with the tree.
            _ => Err(Error::NotSynced { view: view.name() }),
        }
    }

    /// The namespace policy's view of the Namespace `name`.
    pub async fn namespace(&self, name: &str) -> Result<NamespaceState, Error> {
        self.ready(View::Namespaces).await?;
        let ns = self.namespaces.get(&ObjectRef::new(name));
        Ok(NamespaceState::of_meta(ns.as_ref().map(|n| &n.metadata)))
    }

    /// The CRCBundle `name`.
    pub async fn bundle(&self, name: &str) -> Result<Option<Arc<CRCBundle>>, Error> {
        self.ready(View::Bundles).await?;
        Ok(self.bundles.get(&ObjectRef::new(name)))
    }

    /// The CRCBundle that publishes CRC `version` for `arch`: the one of the published name,
    /// else any bundle declaring that version and arch (oldest name first, for a stable answer).
    pub async fn bundle_of_version(
        &self,
        version: &str,
        arch: Arch,
    ) -> Result<Option<Arc<CRCBundle>>, Error> {
        self.ready(View::Bundles).await?;
        Ok(bundle_of_version(&self.bundles.state(), version, arch))
    }

    /// The outcome of the platform gate.
    pub async fn platform(&self) -> Result<PlatformGate, Error> {
        self.ready(View::Platform).await?;
        Ok(self
            .platform
            .borrow()
            .clone()
            .expect("ready means a platform gate was computed"))
    }

    /// Every Route's host (namespace, name, host), for the uniqueness check before a create.
    pub async fn route_hosts(&self) -> Result<Vec<RouteHost>, Error> {
        self.ready(View::Routes).await?;
        Ok(self
            .routes
            .state()
            .iter()
            .filter_map(|r| {
                Some(RouteHost {
                    namespace: r.namespace().unwrap_or_default(),
                    name: r.name_any(),
                    host: r.spec.host.clone().filter(|h| !h.is_empty())?,
                })
            })
            .collect())
    }
}

/// A Route somewhere in the cluster, as the host-uniqueness check needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RouteHost {
    pub namespace: String,
    pub name: String,
    pub host: String,
}

impl Views {
    /// `status.leaseRef` of the instance `instance` in `namespace`: the lease that claims it.
    pub async fn lease_of(
        &self,
        namespace: &str,
        instance: &str,
    ) -> Result<Option<crate::api::common::LocalRef>, Error> {
        self.ready(View::Leases).await?;
        Ok(read(&self.lease_index)
            .lease_of(namespace, instance)
            .map(crate::api::common::LocalRef::new))
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Both guarded values stay consistent even if a holder panicked: each use is one take/push.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

// The lease index stays consistent even if a holder panicked: each write is one `set`.
fn read<T>(m: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    m.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(m: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    m.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Which lease claims each instance ([`ClusterLease::claim`]), by namespace and instance name, so an
/// instance's `status.leaseRef` is one lookup rather than a walk over every lease. Fed by the
/// lease view's watch events; each lease's last known claim is kept, so replaying an event (a
/// relist) changes nothing.
#[derive(Debug, Default)]
struct LeaseIndex {
    /// (namespace, lease) → the instance it claims.
    claim_of: HashMap<(String, String), String>,
    /// (namespace, instance) → the leases claiming it: one, unless two leases wrongly name the
    /// same instance (then the lowest name answers, for a stable `leaseRef`).
    claimed_by: HashMap<(String, String), BTreeSet<String>>,
}

impl LeaseIndex {
    /// The lease `lease` in `namespace` now claims `instance` (`None`: nothing; deleting or
    /// gone).
    fn set(&mut self, namespace: &str, lease: &str, instance: Option<&str>) {
        let key = (namespace.to_owned(), lease.to_owned());
        if self.claim_of.get(&key).map(String::as_str) == instance {
            return;
        }
        if let Some(before) = self.claim_of.remove(&key) {
            let by = (namespace.to_owned(), before);
            if let Some(leases) = self.claimed_by.get_mut(&by) {
                leases.remove(lease);
                if leases.is_empty() {
                    self.claimed_by.remove(&by);
                }
            }
        }
        if let Some(instance) = instance {
            self.claimed_by
                .entry((namespace.to_owned(), instance.to_owned()))
                .or_default()
                .insert(lease.to_owned());
            self.claim_of.insert(key, instance.to_owned());
        }
    }

    /// The lease that claims `instance` in `namespace`.
    fn lease_of(&self, namespace: &str, instance: &str) -> Option<&str> {
        self.claimed_by
            .get(&(namespace.to_owned(), instance.to_owned()))?
            .first()
            .map(String::as_str)
    }
}

async fn wait_true(rx: &watch::Receiver<bool>) -> Result<(), watch::error::RecvError> {
    let mut rx = rx.clone();
    rx.wait_for(|synced| *synced).await.map(drop)
}

/// Whether a Namespace change can alter the namespace policy of what lives in it.
pub fn namespace_changed(
    old: Option<&kube::api::ObjectMeta>,
    new: Option<&kube::api::ObjectMeta>,
) -> bool {
    NamespaceState::of_meta(old) != NamespaceState::of_meta(new)
        || old.and_then(|m| m.uid.as_ref()) != new.and_then(|m| m.uid.as_ref())
}

/// Whether a CRCBundle change can alter what an instance or pool decides: the bundle appeared,
/// went, was recreated or started deleting, became or ceased to be Ready, or — while Ready —
/// changed what it publishes ([`BundleSeen`]). Its progress towards Ready (phase `Preparing` or
/// `Building`, a prep Job, digests still being computed) wakes nobody.
pub fn bundle_changed(old: Option<&CRCBundle>, new: Option<&CRCBundle>) -> bool {
    old.map(BundleSeen::of) != new.map(BundleSeen::of)
}

/// What a dependent's decision reads of a CRCBundle. Pools read only its existence; an instance
/// binds to a Ready bundle's disk and key (`crc::boot_key::bind`), boots its VM profile
/// (`VmProfile::of_bundle`) and sizes its root disk from it, so these fields count only once the
/// bundle is Ready.
#[derive(Debug, PartialEq)]
struct BundleSeen<'a> {
    uid: Option<&'a str>,
    deleting: bool,
    /// `Some` exactly while the bundle is Ready.
    published: Option<Published<'a>>,
}

/// What a Ready bundle publishes to the instances built from it.
#[derive(Debug, PartialEq)]
struct Published<'a> {
    source: Option<crate::api::bundle::BundleSource>,
    sha256: Option<&'a str>,
    disk_sha256: Option<&'a str>,
    disk_virtual_size: Option<i64>,
    qcow2_pvc_ref: Option<&'a crate::api::common::LocalRef>,
    qcow2_pvc_namespace: Option<&'a str>,
    ssh_key_secret_ref: Option<&'a crate::api::common::LocalRef>,
    vm_profile: Option<&'a str>,
    arch: Arch,
    storage_class_name: Option<&'a str>,
}

impl<'a> BundleSeen<'a> {
    fn of(bundle: &'a CRCBundle) -> Self {
        let status = bundle.status.as_ref();
        let published = status
            .filter(|s| s.phase == Some(crate::api::bundle::BundlePhase::Ready))
            .map(|s| Published {
                source: s.source,
                sha256: s.sha256.as_deref(),
                disk_sha256: s.disk_sha256.as_deref(),
                disk_virtual_size: s.disk_virtual_size,
                qcow2_pvc_ref: s.qcow2_pvc_ref.as_ref(),
                qcow2_pvc_namespace: s.qcow2_pvc_namespace.as_deref(),
                ssh_key_secret_ref: s.ssh_key_secret_ref.as_ref(),
                vm_profile: s.vm_profile.as_deref(),
                arch: bundle.spec.arch,
                storage_class_name: bundle.spec.storage_class_name.as_deref(),
            });
        Self {
            uid: bundle.metadata.uid.as_deref(),
            deleting: bundle.metadata.deletion_timestamp.is_some(),
            published,
        }
    }
}

/// The instances whose claiming lease a lease change may alter: the one it claimed and the one
/// it claims, when the claim or the lease's deletion changed.
pub fn lease_claims_changed(old: Option<&ClusterLease>, new: Option<&ClusterLease>) -> Vec<String> {
    let (before, after) = (
        old.and_then(ClusterLease::claim),
        new.and_then(ClusterLease::claim),
    );
    if before == after {
        return Vec::new();
    }
    before.into_iter().chain(after).map(str::to_owned).collect()
}

/// See [`Views::bundle_of_version`].
pub fn bundle_of_version(
    bundles: &[Arc<CRCBundle>],
    version: &str,
    arch: Arch,
) -> Option<Arc<CRCBundle>> {
    let published = published_bundle_name(version, arch);
    if let Some(b) = bundles.iter().find(|b| b.name_any() == published) {
        return Some(b.clone());
    }
    bundles
        .iter()
        .filter(|b| b.spec.version.as_deref() == Some(version) && b.spec.arch == arch)
        .min_by_key(|b| b.name_any())
        .cloned()
}

/// What the Route view keeps: who controls a Route and its host. Certificates and keys in
/// `spec.tls` never stay in memory.
fn trim_route(route: &mut Route) {
    let meta = &mut route.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    route.spec.tls = None;
    route.status = None;
}

/// Starts the view of every `K` in the cluster: one watch, each object trimmed by `trim` before
/// it is stored in `writer`, each change published as `changed` makes it ([`run`]).
fn spawn_view<K>(
    client: &kube::Client,
    trim: fn(&mut K),
    writer: reflector::store::Writer<K>,
    synced: watch::Sender<bool>,
    changes: broadcast::Sender<Change>,
    changed: impl Fn(Option<&K>, Option<&K>) -> Option<Change> + Send + 'static,
) -> JoinHandle<()>
where
    K: Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq + Clone,
{
    let events = watcher(Api::<K>::all(client.clone()), watcher::Config::default())
        .default_backoff()
        .map(move |e| e.map(|e| e.modify(trim)));
    tokio::spawn(run(events, writer, synced, changes, changed))
}

/// Feeds `writer` from `events` and publishes what `changed` makes of each (old, new) pair,
/// after the store shows the new state. A kind the API server does not serve is an empty,
/// synced view.
async fn run<K, S>(
    events: S,
    mut writer: reflector::store::Writer<K>,
    synced: watch::Sender<bool>,
    changes: broadcast::Sender<Change>,
    changed: impl Fn(Option<&K>, Option<&K>) -> Option<Change>,
) where
    K: Resource<DynamicType = ()> + Clone + Debug + Send + Sync + 'static,
    ObjectRef<K>: Hash + Eq + Clone,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let store = writer.as_reader();
    futures::pin_mut!(events);
    // A relist is applied to the store at its end; its changes are published then.
    let mut relist: Option<(HashSet<ObjectRef<K>>, Vec<Change>)> = None;
    let publish = |out: Vec<Change>| {
        for change in out {
            // No subscribers (the tree is not running) is fine.
            let _ = changes.send(change);
        }
    };
    while let Some(event) = events.next().await {
        let event = match event {
            Ok(event) => event,
            Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                // Not served: empty, and synced. The watch retries with backoff.
                let gone: Vec<Change> = store
                    .state()
                    .iter()
                    .filter_map(|old| changed(Some(old), None))
                    .collect();
                writer.apply_watcher_event(&watcher::Event::Init);
                writer.apply_watcher_event(&watcher::Event::InitDone);
                synced.send_replace(true);
                publish(gone);
                continue;
            }
            Err(err) => {
                tracing::warn!(
                    kind = K::kind(&()).as_ref(),
                    "view watch error (retrying with backoff): {err}"
                );
                continue;
            }
        };
        match &event {
            watcher::Event::Init => relist = Some((HashSet::new(), Vec::new())),
            watcher::Event::InitApply(obj) => {
                let key = ObjectRef::from_obj(obj);
                let old = store.get(&key);
                if let Some((seen, out)) = &mut relist {
                    out.extend(changed(old.as_deref(), Some(obj)));
                    seen.insert(key);
                }
            }
            watcher::Event::InitDone => {
                let (seen, mut out) = relist.take().unwrap_or_default();
                for old in store.state() {
                    if !seen.contains(&ObjectRef::from_obj(old.as_ref())) {
                        out.extend(changed(Some(&old), None));
                    }
                }
                writer.apply_watcher_event(&event);
                synced.send_replace(true);
                publish(out);
                continue;
            }
            watcher::Event::Apply(obj) => {
                let old = store.get(&ObjectRef::from_obj(obj));
                writer.apply_watcher_event(&event);
                publish(changed(old.as_deref(), Some(obj)).into_iter().collect());
                continue;
            }
            watcher::Event::Delete(obj) => {
                let old = store.get(&ObjectRef::from_obj(obj));
                writer.apply_watcher_event(&event);
                publish(changed(old.as_deref(), None).into_iter().collect());
                continue;
            }
        }
        writer.apply_watcher_event(&event);
    }
}

/// The three platform kinds: (group, version, kind, plural).
const PLATFORM_KINDS: [(&str, &str, &str, &str); 3] = [
    ("kubevirt.io", "v1", "KubeVirt", "kubevirts"),
    ("cdi.kubevirt.io", "v1beta1", "CDI", "cdis"),
    (
        "hco.kubevirt.io",
        "v1beta1",
        "HyperConverged",
        "hyperconvergeds",
    ),
];

/// One platform kind's objects, by namespace and name.
type Objects = BTreeMap<(Option<String>, String), DynamicObject>;

/// Watches the platform kinds and publishes the gate's outcome whenever it changes; `None`
/// until every kind has been listed (or found not served).
async fn run_platform(
    client: kube::Client,
    gate: watch::Sender<Option<PlatformGate>>,
    changes: broadcast::Sender<Change>,
) {
    let streams = PLATFORM_KINDS
        .iter()
        .enumerate()
        .map(|(i, (group, version, kind, plural))| {
            let resource = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            );
            watcher(
                Api::<DynamicObject>::all_with(client.clone(), &resource),
                watcher::Config::default(),
            )
            .default_backoff()
            .map(move |e| (i, e))
            .boxed()
        });
    let events = futures::stream::select_all(streams);
    futures::pin_mut!(events);
    let mut listed: [Option<Objects>; 3] = [None, None, None];
    let mut relisting: [Option<Objects>; 3] = [None, None, None];
    while let Some((i, event)) = events.next().await {
        let key = |o: &DynamicObject| (o.namespace(), o.name_any());
        match event {
            Ok(watcher::Event::Init) => relisting[i] = Some(Objects::new()),
            Ok(watcher::Event::InitApply(o)) => {
                if let Some(objects) = &mut relisting[i] {
                    objects.insert(key(&o), o);
                }
            }
            Ok(watcher::Event::InitDone) => {
                listed[i] = Some(relisting[i].take().unwrap_or_default())
            }
            Ok(watcher::Event::Apply(o)) => {
                listed[i].get_or_insert_default().insert(key(&o), o);
            }
            Ok(watcher::Event::Delete(o)) => {
                listed[i].get_or_insert_default().remove(&key(&o));
            }
            Err(watcher::Error::InitialListFailed(kube::Error::Api(s))) if s.code == 404 => {
                listed[i] = Some(Objects::new());
            }
            Err(err) => {
                tracing::warn!(
                    kind = PLATFORM_KINDS[i].2,
                    "platform watch error (retrying with backoff): {err}"
                );
                continue;
            }
        }
        let [Some(kubevirt), Some(cdi), Some(hyperconverged)] = &listed else {
            continue;
        };
        let values = |m: &Objects| m.values().cloned().collect();
        let next = platform_gate(&Platform {
            kubevirt: values(kubevirt),
            cdi: values(cdi),
            hyperconverged: values(hyperconverged),
        });
        if gate.borrow().as_ref() != Some(&next) {
            gate.send_replace(Some(next.clone()));
            let _ = changes.send(Change::Platform(next));
        }
    }
}

#[cfg(test)]
mod tests;
