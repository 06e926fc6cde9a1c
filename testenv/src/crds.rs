//! CRD installation: the project's generated CRDs plus the CRDs of the external kinds the
//! operator touches (KubeVirt, CDI, OpenShift, HCO), generated from the upstream API types by
//! `tools/external-crds` so the API server prunes and validates what we write as a real cluster
//! would.

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::{Api, Client};

use super::Error;

/// Field manager of every object the test environment applies.
pub const FIELD_MANAGER: &str = "guestcluster-testenv";

/// (origin shown in errors, embedded text) of one external CRD file.
macro_rules! external {
    ($file:literal) => {
        (
            concat!("testenv/src/external-crds/", $file),
            include_str!(concat!("external-crds/", $file)),
        )
    };
}

/// The external CRDs; the header of each file names its source and version.
const EXTERNAL: &[(&str, &str)] = &[
    external!("kubevirt.io_virtualmachines.yaml"),
    external!("kubevirt.io_virtualmachineinstances.yaml"),
    external!("kubevirt.io_kubevirts.yaml"),
    external!("cdi.kubevirt.io_datavolumes.yaml"),
    external!("cdi.kubevirt.io_datasources.yaml"),
    external!("cdi.kubevirt.io_cdis.yaml"),
    external!("cdi.kubevirt.io_storageprofiles.yaml"),
    external!("cdi.kubevirt.io_cdiconfigs.yaml"),
    external!("route.openshift.io_routes.yaml"),
    external!("config.openshift.io_ingresses.yaml"),
    external!("hco.kubevirt.io_hyperconvergeds.yaml"),
];

/// Every CRD to install: the embedded external ones, then `*.yaml` in `project_dir` (sorted, so
/// errors are reproducible). A missing project directory means "nothing generated yet".
pub(crate) fn load(project_dir: &Path) -> Result<Vec<CustomResourceDefinition>, Error> {
    let mut crds = Vec::new();
    for (origin, text) in EXTERNAL {
        crds.extend(parse(Path::new(origin), text)?);
    }
    for path in project_files(project_dir)? {
        let text = std::fs::read_to_string(&path).map_err(super::fsutil::io_error(&path))?;
        crds.extend(parse(&path, &text)?);
    }
    Ok(crds)
}

fn project_files(dir: &Path) -> Result<Vec<PathBuf>, Error> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(dir = %dir.display(), "CRD directory does not exist; installing only external CRDs");
            return Ok(Vec::new());
        }
        Err(e) => return Err(super::fsutil::io_error(dir)(e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry.map_err(super::fsutil::io_error(dir))?.path();
        if path.extension().is_some_and(|ext| ext == "yaml") && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Parses every document of a YAML stream as a CRD. Anything else is an error rather than being
/// skipped: a typo'd kind would otherwise silently leave a type uninstalled.
fn parse(path: &Path, text: &str) -> Result<Vec<CustomResourceDefinition>, Error> {
    let invalid = |reason: String| Error::CrdFile {
        path: path.to_path_buf(),
        reason,
    };
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple(text).map_err(|e| invalid(e.to_string()))?;
    let mut crds = Vec::new();
    for (index, document) in documents.into_iter().enumerate() {
        if document.is_null() {
            continue;
        }
        let kind = document
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or("<none>");
        if kind != "CustomResourceDefinition" {
            return Err(invalid(format!(
                "document {index} has kind {kind}; only CustomResourceDefinition is supported"
            )));
        }
        let crd = serde_json::from_value(document)
            .map_err(|e| invalid(format!("document {index}: {e}")))?;
        crds.push(crd);
    }
    Ok(crds)
}

/// Server-side applies every CRD, then waits until all are `Established`.
pub(crate) async fn install(
    client: &Client,
    crds: &[CustomResourceDefinition],
    timeout: Duration,
) -> Result<(), Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crds {
        let name = crd_name(crd)?;
        api.patch(name, &params, &Patch::Apply(crd))
            .await
            .map_err(|source| Error::ApplyCrd {
                name: name.to_string(),
                source: Box::new(source),
            })?;
    }
    try_join_all(crds.iter().map(|crd| wait_established(&api, crd, timeout))).await?;
    Ok(())
}

fn crd_name(crd: &CustomResourceDefinition) -> Result<&str, Error> {
    crd.metadata.name.as_deref().ok_or_else(|| Error::CrdFile {
        path: PathBuf::from(format!("<CRD of group {}>", crd.spec.group)),
        reason: "metadata.name is missing".into(),
    })
}

async fn wait_established(
    api: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
    timeout: Duration,
) -> Result<(), Error> {
    let name = crd_name(crd)?;
    let established = await_condition(api.clone(), name, conditions::is_crd_established());
    match tokio::time::timeout(timeout, established).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(Error::CrdNotEstablished {
            name: name.to_string(),
            detail: format!("watch failed: {e}"),
        }),
        Err(_) => Err(Error::CrdNotEstablished {
            name: name.to_string(),
            detail: format!(
                "not Established within {timeout:?}; {}",
                conditions_of(api, name).await
            ),
        }),
    }
}

/// The CRD's conditions as text, to say *why* it is not established (e.g. a name conflict).
async fn conditions_of(api: &Api<CustomResourceDefinition>, name: &str) -> String {
    match api.get(name).await {
        Ok(crd) => {
            let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
            let rendered: Vec<String> = conditions
                .iter()
                .map(|c| {
                    let message = c.message.as_deref().unwrap_or("");
                    format!("{}={} {message}", c.type_, c.status)
                })
                .collect();
            format!("conditions: [{}]", rendered.join("; "))
        }
        Err(e) => format!("cannot read it back: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn external_crds_parse_with_status_subresource_and_structural_schemas() {
        let crds = load(Path::new("/nonexistent")).expect("external CRDs parse");
        assert_eq!(crds.len(), EXTERNAL.len());
        for crd in &crds {
            let name = crd_name(crd).expect("named");
            assert_eq!(
                name,
                format!("{}.{}", crd.spec.names.plural, crd.spec.group),
                "CRD name must be <plural>.<group>"
            );
            let version = &crd.spec.versions[0];
            let subresources = version.subresources.as_ref().expect("subresources");
            assert!(
                subresources.status.is_some(),
                "{name} lacks status subresource"
            );
            let schema = version
                .schema
                .as_ref()
                .and_then(|s| s.open_api_v3_schema.as_ref())
                .expect("schema");
            let properties = schema.properties.as_ref().expect("properties");
            // Only HCO's spec is left open (its generator package says why); every other spec
            // and status is typed, so unknown fields are pruned as on a real cluster.
            for field in ["spec", "status"] {
                let open = name == "hyperconvergeds.hco.kubevirt.io" && field == "spec";
                let schema = &properties[field];
                assert_eq!(
                    schema.x_kubernetes_preserve_unknown_fields.unwrap_or(false),
                    open,
                    "{name}.{field}"
                );
                assert_eq!(
                    schema.properties.as_ref().is_some_and(|p| !p.is_empty()),
                    !open,
                    "{name}.{field} has typed properties"
                );
            }
        }
    }

    #[test]
    fn cluster_scoped_kinds_are_cluster_scoped() {
        let crds = load(Path::new("/nonexistent")).expect("external CRDs parse");
        let scope = |name: &str| {
            crds.iter()
                .find(|c| c.metadata.name.as_deref() == Some(name))
                .map(|c| c.spec.scope.clone())
        };
        assert_eq!(scope("cdis.cdi.kubevirt.io").as_deref(), Some("Cluster"));
        assert_eq!(
            scope("ingresses.config.openshift.io").as_deref(),
            Some("Cluster")
        );
        assert_eq!(
            scope("kubevirts.kubevirt.io").as_deref(),
            Some("Namespaced")
        );
        assert_eq!(
            scope("hyperconvergeds.hco.kubevirt.io").as_deref(),
            Some("Namespaced")
        );
    }

    #[test]
    fn project_dir_yaml_is_loaded_and_other_kinds_rejected() {
        let dir = tempfile::tempdir().expect("tempdir");
        let crd = include_str!("external-crds/route.openshift.io_routes.yaml")
            .replace("route.openshift.io", "example.test");
        std::fs::write(dir.path().join("a.yaml"), format!("---\n{crd}\n---\n")).expect("write");
        std::fs::write(dir.path().join("ignored.txt"), "not yaml").expect("write");
        let crds = load(dir.path()).expect("load");
        assert_eq!(crds.len(), EXTERNAL.len() + 1);

        std::fs::write(
            dir.path().join("b.yaml"),
            "apiVersion: v1\nkind: ConfigMap\n",
        )
        .expect("write");
        let err = load(dir.path()).expect_err("ConfigMap is not a CRD");
        assert!(err.to_string().contains("b.yaml"), "{err}");
    }
}
