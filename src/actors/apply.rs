//! The few API writes every object actor makes, each idempotent: a server-side apply of `status`
//! (field manager `guestcluster-operator`), a create that accepts an existing object, a delete that
//! accepts a missing one.

use kube::api::{
    Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions, PropagationPolicy,
};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::labels::FIELD_MANAGER;

/// Server-side applies `status` to the object `name`, taking ownership of every field in it.
pub async fn status<K>(api: &Api<K>, name: &str, status: &impl Serialize) -> Result<(), kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
    .map(drop)
}

/// Creates `obj`; an existing one is fine (the next reconcile looks at it).
pub async fn create<K>(api: &Api<K>, obj: &K) -> Result<(), kube::Error>
where
    K: Resource + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
{
    match api.create(&PostParams::default(), obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes `name` in the background; a missing one is fine.
pub async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
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
