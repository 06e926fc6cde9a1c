//! The write primitives: create, replace, merge patch, apply, delete by UID and finalizers, each
//! read back ([`super::readback`]) where the server answers with the stored object.
#![allow(clippy::disallowed_methods)]

use std::sync::LazyLock;

use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::core::Request;
use kube::{Resource, ResourceExt};
use prometheus_client::metrics::counter::Counter;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::readback;

/// Creates `obj`; an existing one is fine (the next reconcile looks at it).
pub async fn create<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    create_new(api, obj).await.map(drop)
}

/// [`create`], saying whether this call created it (`false`: one of that name existed).
pub async fn create_new<K>(api: &Api<K>, obj: &K) -> Result<bool, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    Ok(create_stored(api, obj).await?.is_some())
}

/// [`create`], returning the UID of the object under `obj`'s name afterwards: the one this call
/// created, or the one that existed (the caller judges whether that one is its own). `None`
/// when a namesake vanished between the conflict and the read.
pub async fn create_uid<K>(api: &Api<K>, obj: &K) -> Result<Option<String>, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match create_stored(api, obj).await? {
        Some(stored) => Ok(stored["metadata"]["uid"].as_str().map(str::to_owned)),
        None => {
            let name = obj.meta().name.clone().unwrap_or_default();
            Ok(api.get_opt(&name).await?.and_then(|o| o.meta().uid.clone()))
        }
    }
}

/// Creates `obj` and returns what was stored; `None` when one of that name existed.
async fn create_stored<K>(api: &Api<K>, obj: &K) -> Result<Option<Value>, kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let sent = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
    let body = serde_json::to_vec(&sent).map_err(kube::Error::SerdeError)?;
    let request = Request::new(api.resource_url()).create(&PostParams::default(), body);
    match send_read_back(api, request, &sent, "").await {
        Ok(stored) => Ok(Some(stored)),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(None),
        Err(e) => Err(e),
    }
}

/// Replaces `obj` (as read, with its resourceVersion): a change since the read fails with a
/// conflict, which the caller's next pass reads again rather than overwriting it.
pub async fn replace<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let sent = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
    let body = serde_json::to_vec(&sent).map_err(kube::Error::SerdeError)?;
    let request =
        Request::new(api.resource_url()).replace(&obj.name_any(), &PostParams::default(), body);
    send_read_back(api, request, &sent, "").await.map(drop)
}

/// Deletes `name` only if it still is the object with `uid` (a UID precondition): a namesake
/// created since is never touched. Gone, or replaced, is fine.
pub async fn delete_exact<K>(
    api: &Api<K>,
    name: &str,
    uid: &str,
    propagation: PropagationPolicy,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let params = DeleteParams {
        propagation_policy: Some(propagation),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// A JSON merge patch of `name` (e.g. repairing a field of an object we control).
pub async fn merge_patch<K>(
    api: &Api<K>,
    name: &str,
    patch: &serde_json::Value,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let request =
        Request::new(api.resource_url()).patch(name, &PatchParams::default(), &Patch::Merge(patch));
    send_read_back(api, request, patch, "").await.map(drop)
}

/// Server-side applies `obj` as `name` with `field_manager`, forced: the fields in `obj` become
/// that manager's, whoever held them. For objects a Job publishes as a whole.
pub async fn apply<K>(
    api: &Api<K>,
    name: &str,
    obj: &K,
    field_manager: &str,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    let sent = serde_json::to_value(obj).map_err(kube::Error::SerdeError)?;
    let request = Request::new(api.resource_url()).patch(
        name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(&sent),
    );
    send_read_back(api, request, &sent, "").await.map(drop)
}

/// Fields the API server dropped from our writes, since the process started.
static DROPPED_FIELDS: LazyLock<Counter> = LazyLock::new(Counter::default);

/// The counter behind `guestcluster_dropped_fields_total`, for the metrics registry.
pub fn dropped_fields_counter() -> Counter {
    DROPPED_FIELDS.clone()
}

/// Sends `request` (a create or patch of `sent` on `subresource`, "" for the object itself) and
/// returns the stored object, after reporting every field of `sent` it lacks.
pub(super) async fn send_read_back<K>(
    api: &Api<K>,
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    sent: &Value,
    subresource: &str,
) -> Result<Value, kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let request = request.map_err(kube::Error::BuildRequest)?;
    let stored: Value = api.clone().into_client().request(request).await?;
    let api_version = stored["apiVersion"].as_str().unwrap_or_default();
    let group = api_version.rsplit_once('/').map_or("", |(group, _)| group);
    let write = readback::Write {
        subresource,
        built_in: readback::is_built_in(group),
    };
    let dropped = readback::dropped_paths(&write, sent, &stored);
    if !dropped.is_empty() {
        DROPPED_FIELDS.inc_by(dropped.len() as u64);
        tracing::warn!(
            kind = stored["kind"].as_str().unwrap_or_default(),
            api_version,
            namespace = stored["metadata"]["namespace"].as_str().unwrap_or_default(),
            name = stored["metadata"]["name"].as_str().unwrap_or_default(),
            fields = %dropped.join(", "),
            "{DROPPED_MESSAGE}"
        );
    }
    Ok(stored)
}

/// The log message of a dropped field: what the operator wanted is not on the cluster.
pub const DROPPED_MESSAGE: &str = "the API server dropped fields it was sent (unknown to the \
    installed version of this kind: upgrade it, or report the operator's builder as wrong)";

/// Adds (`add`) or removes our finalizer `finalizer` on `obj`, guarded by the resourceVersion it
/// was read at: a concurrent change fails with a conflict and is retried on the next trigger.
/// An object already gone while being deleted is fine (nothing is left to release).
pub async fn finalizer<K>(
    api: &Api<K>,
    obj: &K,
    finalizer: &str,
    add: bool,
) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut finalizers: Vec<String> = obj
        .finalizers()
        .iter()
        .filter(|f| *f != finalizer)
        .cloned()
        .collect();
    if add {
        finalizers.push(finalizer.to_owned());
    }
    let patch = serde_json::json!({"metadata": {
        "resourceVersion": obj.resource_version(),
        "finalizers": finalizers,
    }});
    match api
        .patch(
            &obj.name_any(),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status))
            if status.code == 404 && obj.meta().deletion_timestamp.is_some() =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}
