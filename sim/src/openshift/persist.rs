//! What a guest cluster's clients wrote, carried in the disk.
//!
//! A real node keeps its etcd on its disk, so a copy of the disk (a CDI clone, the golden disk)
//! carries every object written to its cluster. Here every cluster's data lives in the control
//! plane's etcd under a prefix per disk *path*, so a copy would start from the baseline. To model
//! the real thing, the objects clients wrote are saved into the guest state
//! ([`GuestState::api_objects`](crate::guest::GuestState::api_objects)) when the cluster stops,
//! and created again when a cluster starts on a prefix that holds nothing yet.
//!
//! "Written by a client" is told by `metadata.managedFields`: an object counts when some manager
//! other than the API server itself and the simulation's own controllers wrote its main resource
//! (status writes say nothing about what the disk must carry). Objects restored here are written
//! by [`RESTORE_MANAGER`], which counts as a client, so a copy of a copy carries them too.

use std::time::Duration;

use kube::api::{Api, DynamicObject, ListParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::{ApiCapabilities, ApiResource, Discovery, Scope, verbs};
use serde_json::{Map, Value, json};

/// The field manager of restored objects.
pub const RESTORE_MANAGER: &str = "guestcluster-sim-restore";

/// Managers that are not clients: the API server's own bootstrap writes (namespaces, RBAC,
/// priority classes, `default/kubernetes`) and the simulation's controllers.
const SYSTEM_MANAGERS: &[&str] = &[super::cluster::MANAGER, "kube-apiserver"];
/// The API server's priority-and-fairness bootstrap writes under managers named after it.
const SYSTEM_MANAGER_PREFIXES: &[&str] = &["api-priority-and-fairness-config-"];

/// Resources a disk never carries, as `(group, plural)` (`*`: the whole group): records of the
/// moment (events, leases, CSRs) and what controllers derive (endpoints).
const NOT_CARRIED: &[(&str, &str)] = &[
    ("", "events"),
    ("", "endpoints"),
    ("events.k8s.io", "*"),
    ("coordination.k8s.io", "*"),
    ("certificates.k8s.io", "certificatesigningrequests"),
    ("discovery.k8s.io", "endpointslices"),
];

/// Metadata that belongs to an object's content; the rest is the API server's (uid,
/// resourceVersion, generation, timestamps, managedFields) or names objects of this etcd only
/// (ownerReferences by UID).
const KEPT_METADATA: [&str; 5] = ["name", "namespace", "labels", "annotations", "finalizers"];

/// How long a CRD restored before its custom resources gets to be served.
const CRD_ESTABLISHED: Duration = Duration::from_secs(30);

/// Why objects could not be saved or restored.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("guest API: {0}")]
    Kube(#[from] kube::Error),
    #[error("object {key}: {reason}")]
    Object { key: String, reason: String },
}

/// Whether a served resource is one a disk carries: a real collection (list and create) that is
/// not a record of the moment.
pub fn carried(resource: &ApiResource, caps: &ApiCapabilities) -> bool {
    caps.supports_operation(verbs::LIST)
        && caps.supports_operation(verbs::CREATE)
        && !NOT_CARRIED.iter().any(|&(group, plural)| {
            group == resource.group && (plural == "*" || plural == resource.plural)
        })
}

fn is_system(manager: &str) -> bool {
    SYSTEM_MANAGERS.contains(&manager)
        || SYSTEM_MANAGER_PREFIXES
            .iter()
            .any(|prefix| manager.starts_with(prefix))
}

/// Whether a client wrote the object (its main resource, not only its status). An object no
/// manager claims at all is a client's too: applying nothing but a name (a bare Namespace)
/// records no fields, while the API server and the simulation always own some of theirs.
/// Objects being deleted are on their way out and are not carried.
pub fn client_written(object: &Value) -> bool {
    let metadata = &object["metadata"];
    if !metadata["deletionTimestamp"].is_null() {
        return false;
    }
    let mut managers = metadata["managedFields"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|field| field["subresource"].as_str().unwrap_or_default().is_empty())
        .map(|field| field["manager"].as_str().unwrap_or_default())
        .peekable();
    managers.peek().is_none() || managers.any(|manager| !is_system(manager))
}

/// The object as the disk carries it: its content without `status` and with only the metadata
/// of [`KEPT_METADATA`].
pub fn trim(object: &Value) -> Value {
    let mut out = Map::new();
    for (field, value) in object.as_object().into_iter().flatten() {
        match field.as_str() {
            "status" => {}
            "metadata" => {
                let kept: Map<String, Value> = value
                    .as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(k, v)| KEPT_METADATA.contains(&k.as_str()) && !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect();
                out.insert(field.clone(), Value::Object(kept));
            }
            _ => {
                out.insert(field.clone(), value.clone());
            }
        }
    }
    Value::Object(out)
}

/// `apiVersion/kind/namespace/name` (namespace empty for cluster-scoped objects).
pub fn key(object: &Value) -> String {
    let text = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    format!(
        "{}/{}/{}/{}",
        text(&object["apiVersion"]),
        text(&object["kind"]),
        text(&object["metadata"]["namespace"]),
        text(&object["metadata"]["name"])
    )
}

/// `existing` (an object of this etcd) changed to `saved`'s content: every top-level field but
/// `metadata` and `status` from `saved`, its labels, annotations and finalizers too; identity
/// (uid, resourceVersion for the update's precondition) and status stay, the latter being the
/// controllers' to set.
pub fn updated(existing: &Value, saved: &Value) -> Value {
    let mut out: Map<String, Value> = saved
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "metadata" && k.as_str() != "status")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut metadata = existing["metadata"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    for field in ["labels", "annotations", "finalizers"] {
        match saved["metadata"].get(field) {
            Some(value) => metadata.insert(field.to_owned(), value.clone()),
            None => metadata.remove(field),
        };
    }
    metadata.remove("managedFields");
    out.insert("metadata".to_owned(), Value::Object(metadata));
    if let Some(status) = existing.get("status") {
        out.insert("status".to_owned(), status.clone());
    }
    Value::Object(out)
}

/// Saves `objects` as the disk's current ones. Each value they replace or delete stays in etcd's
/// history as a revision ([`GuestState::etcd_history`](crate::guest::GuestState::etcd_history))
/// until a compaction. Revisions are counted per save: values written and replaced within one
/// run of the cluster leave none here, where a real etcd keeps each.
pub fn save_into(state: &mut crate::guest::GuestState, objects: Vec<Value>) {
    let current: std::collections::HashMap<String, &Value> =
        objects.iter().map(|o| (key(o), o)).collect();
    let history = &mut state.etcd_history;
    for old in &state.api_objects {
        if current.get(&key(old)) != Some(&old) {
            history.revision += 1;
            history.revisions.push(crate::guest::state::Replaced {
                replaced_at: history.revision,
                value: old.clone(),
            });
        }
    }
    state.api_objects = objects;
}

/// The order objects are restored in: namespaces, then CRDs (their custom resources need them),
/// then everything else by key.
fn restore_rank(object: &Value) -> u8 {
    match (object["apiVersion"].as_str(), object["kind"].as_str()) {
        (Some("v1"), Some("Namespace")) => 0,
        (Some(v), Some("CustomResourceDefinition")) if v.starts_with("apiextensions.k8s.io/") => 1,
        _ => 2,
    }
}

async fn discover(client: &kube::Client) -> Result<Discovery, kube::Error> {
    // Aggregated discovery takes two requests instead of one per group; older servers lack it.
    match Discovery::new(client.clone()).run_aggregated().await {
        Ok(discovery) => Ok(discovery),
        Err(_) => Discovery::new(client.clone()).run().await,
    }
}

/// Every object of the cluster that a client wrote, trimmed and sorted by [`key`].
pub async fn snapshot(client: &kube::Client) -> Result<Vec<Value>, Error> {
    let discovery = discover(client).await?;
    let mut objects = Vec::new();
    for group in discovery.groups() {
        for (resource, caps) in group.recommended_resources() {
            if !carried(&resource, &caps) {
                continue;
            }
            let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
            let list = match api.list(&ListParams::default()).await {
                Ok(list) => list,
                // A CRD deleted since discovery.
                Err(kube::Error::Api(status)) if status.code == 404 => continue,
                Err(err) => return Err(err.into()),
            };
            for item in list.items {
                let mut value = serde_json::to_value(&item).map_err(|e| Error::Object {
                    key: format!("{}/{}", resource.api_version, resource.kind),
                    reason: e.to_string(),
                })?;
                // List items do not always carry their type.
                if let Some(map) = value.as_object_mut() {
                    map.insert("apiVersion".into(), resource.api_version.clone().into());
                    map.insert("kind".into(), resource.kind.clone().into());
                }
                if client_written(&value) {
                    objects.push(trim(&value));
                }
            }
        }
    }
    objects.sort_by_key(key);
    Ok(objects)
}

/// Creates `objects` (saved by [`snapshot`]) in the cluster; one that exists (the baseline's) is
/// changed to the saved content ([`updated`]). An object that cannot be restored (its kind is
/// not served, the API server refuses it) is logged and skipped: the cluster still starts, as a
/// real one with an unreadable object would. Returns how many were restored.
pub async fn restore(client: &kube::Client, objects: &[Value]) -> Result<usize, Error> {
    let mut ordered: Vec<&Value> = objects.iter().collect();
    ordered.sort_by_key(|o| (restore_rank(o), key(o)));
    let split = ordered.partition_point(|o| restore_rank(o) < 2);
    let (first, rest) = ordered.split_at(split);
    let mut restored = 0;
    let mut discovery = discover(client).await?;
    for object in first {
        restored += usize::from(put_logged(client, &discovery, object).await);
    }
    let crds: Vec<&str> = first
        .iter()
        .filter(|o| restore_rank(o) == 1)
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    if !crds.is_empty() {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let api: Api<CustomResourceDefinition> = Api::all(client.clone());
        for name in crds {
            let established = kube::runtime::wait::conditions::is_crd_established();
            let wait = kube::runtime::wait::await_condition(api.clone(), name, established);
            if tokio::time::timeout(CRD_ESTABLISHED, wait).await.is_err() {
                tracing::warn!(crd = name, "restored CRD not established in time");
            }
        }
        discovery = discover(client).await?;
    }
    for object in rest {
        restored += usize::from(put_logged(client, &discovery, object).await);
    }
    Ok(restored)
}

async fn put_logged(client: &kube::Client, discovery: &Discovery, object: &Value) -> bool {
    match put(client, discovery, object).await {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!("guest cluster: not restoring {}: {err}", key(object));
            false
        }
    }
}

/// Creates one saved object, or changes the existing one to its content.
async fn put(client: &kube::Client, discovery: &Discovery, saved: &Value) -> Result<(), Error> {
    let key = key(saved);
    let fail = |reason: String| Error::Object {
        key: key.clone(),
        reason,
    };
    let (api_version, kind, name) = match (
        saved["apiVersion"].as_str(),
        saved["kind"].as_str(),
        saved["metadata"]["name"].as_str(),
    ) {
        (Some(v), Some(k), Some(n)) => (v, k, n),
        _ => return Err(fail("no apiVersion, kind or name".into())),
    };
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let (resource, caps) = discovery
        .resolve_gvk(&GroupVersionKind::gvk(group, version, kind))
        .ok_or_else(|| fail("the kind is not served".into()))?;
    let api = match (&caps.scope, saved["metadata"]["namespace"].as_str()) {
        (Scope::Namespaced, Some(namespace)) => {
            ensure_namespace(client, namespace).await?;
            Api::<DynamicObject>::namespaced_with(client.clone(), namespace, &resource)
        }
        (Scope::Namespaced, None) => return Err(fail("namespaced, without a namespace".into())),
        (Scope::Cluster, _) => Api::<DynamicObject>::all_with(client.clone(), &resource),
    };
    let params = PostParams {
        dry_run: false,
        field_manager: Some(RESTORE_MANAGER.into()),
    };
    let object: DynamicObject =
        serde_json::from_value(saved.clone()).map_err(|e| fail(e.to_string()))?;
    match api.create(&params, &object).await {
        Ok(_) => return Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => {}
        Err(err) => return Err(err.into()),
    }
    let existing = serde_json::to_value(api.get(name).await?).map_err(|e| fail(e.to_string()))?;
    let body: DynamicObject =
        serde_json::from_value(updated(&existing, saved)).map_err(|e| fail(e.to_string()))?;
    api.replace(name, &params, &body).await?;
    Ok(())
}

/// The namespace of a restored object, created bare when it is missing (one a controller
/// creates later, after the start): etcd would hold it.
async fn ensure_namespace(client: &kube::Client, name: &str) -> Result<(), Error> {
    let api = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    if api.get_opt(name).await?.is_some() {
        return Ok(());
    }
    let namespace = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}),
    )
    .map_err(|e| Error::Object {
        key: format!("v1/Namespace//{name}"),
        reason: e.to_string(),
    })?;
    let params = PostParams {
        dry_run: false,
        field_manager: Some(RESTORE_MANAGER.into()),
    };
    match api.create(&params, &namespace).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn managed(entries: &[(&str, Option<&str>)]) -> Value {
        let fields: Vec<Value> = entries
            .iter()
            .map(|(manager, subresource)| match subresource {
                Some(s) => json!({"manager": manager, "operation": "Apply", "subresource": s}),
                None => json!({"manager": manager, "operation": "Apply"}),
            })
            .collect();
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "x", "namespace": "ns", "managedFields": fields}})
    }

    #[test]
    fn clients_are_every_manager_but_the_api_server_and_the_simulation() {
        assert!(client_written(&managed(&[("crc-agent", None)])));
        assert!(client_written(&managed(&[
            (super::super::cluster::MANAGER, None),
            ("kubectl", None)
        ])));
        assert!(client_written(&managed(&[(RESTORE_MANAGER, None)])));
        // An Update without a field manager is recorded under the user agent's name, or none.
        assert!(client_written(&managed(&[("", None)])));
        assert!(!client_written(&managed(&[(
            super::super::cluster::MANAGER,
            None
        )])));
        assert!(!client_written(&managed(&[("kube-apiserver", None)])));
        assert!(!client_written(&managed(&[(
            "api-priority-and-fairness-config-producer-v1",
            None
        )])));
    }

    #[test]
    fn an_object_nobody_claims_is_a_clients() {
        assert!(client_written(&managed(&[])));
        assert!(client_written(
            &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "bare"}})
        ));
        assert!(!client_written(&managed(&[
            (super::super::cluster::MANAGER, Some("status")),
            ("kube-apiserver", None)
        ])));
    }

    #[test]
    fn status_writes_and_deleted_objects_do_not_count() {
        assert!(!client_written(&managed(&[
            (super::super::cluster::MANAGER, None),
            ("crc-agent", Some("status"))
        ])));
        let mut deleting = managed(&[("crc-agent", None)]);
        deleting["metadata"]["deletionTimestamp"] = json!("2025-01-01T00:00:00Z");
        assert!(!client_written(&deleting));
    }

    #[test]
    fn resources_of_the_moment_are_not_carried() {
        let caps = |ops: &[&str]| ApiCapabilities {
            scope: Scope::Namespaced,
            subresources: Vec::new(),
            operations: ops.iter().map(|s| s.to_string()).collect(),
        };
        let all = caps(&[verbs::LIST, verbs::CREATE, verbs::GET]);
        let resource = |group: &str, kind: &str, plural: &str| {
            ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v1", kind), plural)
        };
        assert!(carried(&resource("", "ConfigMap", "configmaps"), &all));
        assert!(carried(
            &resource("config.openshift.io", "ClusterVersion", "clusterversions"),
            &all
        ));
        for (group, kind, plural) in [
            ("", "Event", "events"),
            ("events.k8s.io", "Event", "events"),
            ("coordination.k8s.io", "Lease", "leases"),
            (
                "certificates.k8s.io",
                "CertificateSigningRequest",
                "certificatesigningrequests",
            ),
            ("", "Endpoints", "endpoints"),
            ("discovery.k8s.io", "EndpointSlice", "endpointslices"),
        ] {
            assert!(!carried(&resource(group, kind, plural), &all), "{plural}");
        }
        // Virtual resources: create-only reviews, list-only component statuses.
        let review = resource("authentication.k8s.io", "TokenReview", "tokenreviews");
        assert!(!carried(&review, &caps(&[verbs::CREATE])));
        let statuses = resource("", "ComponentStatus", "componentstatuses");
        assert!(!carried(&statuses, &caps(&[verbs::LIST, verbs::GET])));
    }

    #[test]
    fn trimming_drops_server_metadata_and_status() {
        let object = json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {
                "name": "s", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "generation": 3, "creationTimestamp": "2025-01-01T00:00:00Z",
                "managedFields": [{"manager": "crc-agent"}],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-2"}],
                "labels": {"a": "b"}, "annotations": {"c": "d"}, "finalizers": ["example.com/f"]
            },
            "data": {"k": "dg=="},
            "status": {"whatever": true}
        });
        assert_eq!(
            trim(&object),
            json!({
                "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                "metadata": {"name": "s", "namespace": "ns", "labels": {"a": "b"},
                             "annotations": {"c": "d"}, "finalizers": ["example.com/f"]},
                "data": {"k": "dg=="}
            })
        );
        assert_eq!(key(&object), "v1/Secret/ns/s");
    }

    #[test]
    fn an_existing_object_takes_the_saved_content_and_keeps_its_status() {
        let existing = json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
            "metadata": {"name": "version", "uid": "u", "resourceVersion": "7",
                         "labels": {"old": "x"}, "managedFields": [{"manager": "m"}]},
            "spec": {"channel": "stable", "clusterID": "0000"},
            "extra": 1,
            "status": {"desired": {"version": "4.22.7"}}
        });
        let saved = json!({
            "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
            "metadata": {"name": "version", "annotations": {"new": "y"}},
            "spec": {"channel": "stable", "clusterID": "1234"}
        });
        assert_eq!(
            updated(&existing, &saved),
            json!({
                "apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                "metadata": {"name": "version", "uid": "u", "resourceVersion": "7",
                             "annotations": {"new": "y"}},
                "spec": {"channel": "stable", "clusterID": "1234"},
                "status": {"desired": {"version": "4.22.7"}}
            })
        );
    }

    #[test]
    fn namespaces_and_crds_are_restored_first() {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}});
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "z"}});
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                         "metadata": {"name": "b"}});
        let mut objects = [&cm, &crd, &ns];
        objects.sort_by_key(|o| (restore_rank(o), key(o)));
        assert_eq!(objects, [&ns, &crd, &cm]);
    }
}
