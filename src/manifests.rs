//! Applying YAML manifests of any kind with server-side apply, resolving kinds by discovery.
//!
//! Used for the samples (demo, tests), and by the build helper for the profile's post-install
//! objects and the user's post-install manifests in the guest cluster.

use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::{Discovery, Scope};

/// Errors of parsing or applying manifests.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("parsing YAML: {0}")]
    Parse(String),
    #[error("manifest {index} has no apiVersion/kind")]
    MissingType { index: usize },
    #[error("manifest {kind} {name:?} has no metadata.name")]
    MissingName { kind: String, name: Option<String> },
    #[error("invalid apiVersion {api_version:?}: {message}")]
    ApiVersion {
        api_version: String,
        message: String,
    },
    #[error("the API server does not serve {kind} ({api_version}); is its CRD installed?")]
    UnknownKind { api_version: String, kind: String },
    #[error("discovering API resources: {0}")]
    Discovery(#[source] kube::Error),
    #[error("applying {kind} {name}: {source}")]
    Apply {
        kind: String,
        name: String,
        source: kube::Error,
    },
}

/// Parses a (multi-document) YAML stream into objects, skipping empty documents.
pub fn parse(text: &str) -> Result<Vec<DynamicObject>, Error> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| Error::Parse(e.to_string()))?;
    docs.into_iter()
        .filter(|d| !d.is_null())
        .enumerate()
        .map(|(index, doc)| {
            let obj: DynamicObject =
                serde_json::from_value(doc).map_err(|e| Error::Parse(e.to_string()))?;
            if obj.types.is_none() {
                return Err(Error::MissingType { index });
            }
            Ok(obj)
        })
        .collect()
}

/// Puts Namespaces and CRDs first (stable otherwise), so what depends on them finds them.
pub fn dependency_order(objects: &mut [DynamicObject]) {
    objects.sort_by_key(|o| {
        let kind = o
            .types
            .as_ref()
            .map(|t| t.kind.as_str())
            .unwrap_or_default();
        !matches!(kind, "Namespace" | "CustomResourceDefinition")
    });
}

/// Applies `objects` in [`dependency_order`].
pub async fn apply_all(
    client: &kube::Client,
    mut objects: Vec<DynamicObject>,
    field_manager: &str,
) -> Result<Vec<DynamicObject>, Error> {
    dependency_order(&mut objects);
    let discovery = discover(client).await?;
    let mut applied = Vec::with_capacity(objects.len());
    for obj in &objects {
        applied.push(apply(client, &discovery, obj, field_manager).await?);
    }
    Ok(applied)
}

/// What the API server serves, to resolve kinds with [`apply`].
pub async fn discover(client: &kube::Client) -> Result<Discovery, Error> {
    Discovery::new(client.clone())
        .run()
        .await
        .map_err(Error::Discovery)
}

/// Server-side applies `obj` (forcing ownership of its fields) as `field_manager`.
pub async fn apply(
    client: &kube::Client,
    discovery: &Discovery,
    obj: &DynamicObject,
    field_manager: &str,
) -> Result<DynamicObject, Error> {
    let types = obj.types.clone().unwrap_or_default();
    let gvk = GroupVersionKind::try_from(&types).map_err(|e| Error::ApiVersion {
        api_version: types.api_version.clone(),
        message: e.to_string(),
    })?;
    let (resource, caps) = discovery
        .resolve_gvk(&gvk)
        .ok_or_else(|| Error::UnknownKind {
            api_version: types.api_version.clone(),
            kind: types.kind.clone(),
        })?;
    let name = obj
        .metadata
        .name
        .clone()
        .ok_or_else(|| Error::MissingName {
            kind: types.kind.clone(),
            name: None,
        })?;
    let api: Api<DynamicObject> = match (&caps.scope, &obj.metadata.namespace) {
        (Scope::Namespaced, Some(ns)) => Api::namespaced_with(client.clone(), ns, &resource),
        (Scope::Namespaced, None) => Api::default_namespaced_with(client.clone(), &resource),
        (Scope::Cluster, _) => Api::all_with(client.clone(), &resource),
    };
    api.patch(
        &name,
        &PatchParams::apply(field_manager).force(),
        &Patch::Apply(obj),
    )
    .await
    .map_err(|source| Error::Apply {
        kind: types.kind.clone(),
        name,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_multi_document_streams() {
        let objs = parse("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n").unwrap();
        assert_eq!(objs.len(), 2);
        assert_eq!(objs[1].types.as_ref().unwrap().kind, "Namespace");
    }

    #[test]
    fn rejects_documents_without_kind() {
        assert!(matches!(
            parse("metadata: {name: a}\n"),
            Err(Error::MissingType { index: 0 })
        ));
    }
}
