//! The generated files committed in the repository (`crds/*.yaml`, `docs/api.md`, the external
//! CRDs of the test control plane) match what the code and the pinned generators render, so that a
//! change to `src/api` or to a pin cannot be merged without regenerating them; and the objects the
//! golden files of `src/resources` render pass KubeVirt's and CDI's admission rules and are
//! stored unchanged by the real schemas on the test control plane.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::process::Command;

use guestcluster::{api, apidocs, crdgen};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn crds_match_the_api() {
    let dir: PathBuf = repo().join("crds");
    let mut drifted = crdgen::drift(&dir).expect("rendering the CRDs");
    // Files that are no longer rendered (a removed or renamed kind) are drift too.
    let rendered: Vec<String> = (crdgen::render_all().expect("rendering the CRDs"))
        .into_iter()
        .map(|f| f.file_name)
        .collect();
    for entry in std::fs::read_dir(&dir).expect("reading crds/") {
        let name = entry
            .expect("reading crds/")
            .file_name()
            .to_string_lossy()
            .into_owned();
        if name.ends_with(".yaml") && !rendered.contains(&name) {
            drifted.push(format!("{name} (not rendered any more)"));
        }
    }
    assert!(
        drifted.is_empty(),
        "generated CRDs drifted from src/api: {}; run `make crds`",
        drifted.join(", ")
    );
}

#[test]
fn api_reference_matches_the_api() {
    let path = repo().join("docs/api.md");
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    let rendered = apidocs::render(&api::crds());
    if committed != rendered {
        let line = committed
            .lines()
            .zip(rendered.lines())
            .take_while(|(a, b)| a == b)
            .count()
            + 1;
        panic!(
            "generated docs/api.md drifted from src/api (first difference at line {line}); run `make crds`"
        );
    }
}

/// Where the test control plane embeds the external CRDs from.
const EXTERNAL_CRDS: &str = "testenv/src/external-crds";

/// Runs `tools/external-crds/generate.sh` into a temporary directory and compares. The first run
/// on a machine builds the generator from the pinned Go modules (cached under
/// `~/.cache/guestcluster`, like the control plane); later runs reuse its output.
#[test]
fn external_crds_match_the_generator() {
    let out = tempfile::tempdir().expect("tempdir");
    let script = repo().join("tools/external-crds/generate.sh");
    let run = Command::new("bash")
        .arg(&script)
        .arg(out.path())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        run.status.success(),
        "{} failed ({}):\n{}",
        script.display(),
        run.status,
        String::from_utf8_lossy(&run.stderr)
    );
    let committed = yaml_files(&repo().join(EXTERNAL_CRDS));
    let generated = yaml_files(out.path());
    let mut drifted: Vec<String> = Vec::new();
    for (name, text) in &generated {
        match committed.iter().find(|(n, _)| n == name) {
            Some((_, committed)) if committed == text => {}
            Some(_) => drifted.push(name.clone()),
            None => drifted.push(format!("{name} (not committed)")),
        }
    }
    for (name, _) in &committed {
        if !generated.iter().any(|(n, _)| n == name) {
            drifted.push(format!("{name} (not generated any more)"));
        }
    }
    assert!(
        drifted.is_empty(),
        "{EXTERNAL_CRDS} drifted from tools/external-crds: {}; run `make external-crds`",
        drifted.join(", ")
    );
}

/// (file name, contents) of every `*.yaml` in `dir`, sorted by name.
fn yaml_files(dir: &Path) -> Vec<(String, String)> {
    let mut files: Vec<(String, String)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "yaml"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("file name")
                .to_string_lossy()
                .into_owned();
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
            (name, text)
        })
        .collect();
    files.sort();
    files
}

/// Every Kubernetes object in the golden files of `src/resources` (and their subdirectories),
/// with the file it came from. A golden `.yaml` file holds a list of objects or one object;
/// other golden files (the install-config, Ignition) hold no object to admit.
fn golden_objects() -> Vec<(PathBuf, serde_json::Value)> {
    fn walk(dir: &Path, out: &mut Vec<(PathBuf, serde_json::Value)>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
            .map(|entry| entry.expect("directory entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                walk(&path, out);
                continue;
            }
            if path.extension().is_none_or(|ext| ext != "yaml") {
                continue;
            }
            let text = std::fs::read_to_string(&path).expect("reading a golden file");
            let value: serde_json::Value = serde_saphyr::from_str(&text)
                .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
            match value {
                serde_json::Value::Array(objects) => {
                    out.extend(objects.into_iter().map(|o| (path.clone(), o)));
                }
                object if object.get("kind").is_some() => out.push((path.clone(), object)),
                _ => {}
            }
        }
    }
    let mut objects = Vec::new();
    walk(&repo().join("src/resources/golden"), &mut objects);
    objects
}

fn describe(path: &Path, object: &serde_json::Value) -> String {
    format!(
        "{} {} ({})",
        object["kind"].as_str().unwrap_or_default(),
        object["metadata"]["name"].as_str().unwrap_or_default(),
        path.display()
    )
}

/// Every VirtualMachine the operator's builders render (the golden files their unit tests keep
/// in step) passes upstream virt-api's webhooks, and so does a VMI of each one's template, created
/// (server-side dry run) on the control plane with KubeVirt installed; every DataVolume passes
/// upstream cdi-apiserver's webhooks the same way.
#[tokio::test]
async fn rendered_vms_and_data_volumes_pass_kubevirt_and_cdi_admission() {
    use kube::api::{ApiResource, DynamicObject, PostParams};

    let cp = testenv::ControlPlane::shared()
        .await
        .unwrap_or_else(|e| panic!("test control plane unavailable: {e}"));
    cp.kubevirt()
        .await
        .unwrap_or_else(|e| panic!("KubeVirt unavailable: {e}"));
    cp.cdi()
        .await
        .unwrap_or_else(|e| panic!("CDI's API server unavailable: {e}"));
    let client = cp.client().expect("admin client");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let vms = ApiResource::erase::<guestcluster::kubevirt::VirtualMachine>(&());
    let vmis = ApiResource::erase::<guestcluster::kubevirt::VirtualMachineInstance>(&());
    let dvs = ApiResource::erase::<guestcluster::cdi::DataVolume>(&());
    // A golden object in `default`, without its owner (which does not exist here).
    let in_default = |object: &serde_json::Value| -> DynamicObject {
        let mut object = object.clone();
        object["metadata"]["namespace"] = "default".into();
        object["metadata"]
            .as_object_mut()
            .expect("metadata")
            .remove("ownerReferences");
        serde_json::from_value(object).expect("an object")
    };
    let dry_run_create = |resource: &ApiResource, object: DynamicObject| {
        let api = kube::Api::<DynamicObject>::namespaced_with(client.clone(), "default", resource);
        let dry_run = dry_run.clone();
        async move { api.create(&dry_run, &object).await }
    };
    let mut checked = Vec::new();
    for (path, object) in golden_objects() {
        let what = describe(&path, &object);
        match object["kind"].as_str() {
            Some("VirtualMachine") => {
                dry_run_create(&vms, in_default(&object))
                    .await
                    .unwrap_or_else(|e| panic!("virt-api refuses {what}: {e}"));
                let vmi: DynamicObject = serde_json::from_value(serde_json::json!({
                    "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                    "metadata": {"name": object["metadata"]["name"],
                                 "labels": object["spec"]["template"]["metadata"]["labels"]},
                    "spec": object["spec"]["template"]["spec"],
                }))
                .expect("a VMI object");
                dry_run_create(&vmis, vmi)
                    .await
                    .unwrap_or_else(|e| panic!("virt-api refuses the VMI of {what}: {e}"));
            }
            Some("DataVolume") => {
                // CDI authorizes a clone in the source's namespace, which must exist.
                if let Some(source) = object["spec"]["source"]["pvc"]["namespace"].as_str() {
                    let namespace: k8s_openapi::api::core::v1::Namespace =
                        serde_json::from_value(serde_json::json!({"metadata": {"name": source}}))
                            .expect("a namespace");
                    match kube::Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
                        .create(&PostParams::default(), &namespace)
                        .await
                    {
                        Ok(_) => {}
                        Err(kube::Error::Api(status)) if status.code == 409 => {}
                        Err(err) => panic!("creating namespace {source}: {err}"),
                    }
                }
                dry_run_create(&dvs, in_default(&object))
                    .await
                    .unwrap_or_else(|e| panic!("cdi-apiserver refuses {what}: {e}"));
            }
            _ => continue,
        }
        checked.push(what);
    }
    for expected in [
        "VirtualMachine crc-1 ",
        "DataVolume ",
        "crc-4-22-custom-a-build",
    ] {
        assert!(
            checked.iter().any(|c| c.contains(expected)),
            "the golden files render {expected:?}: {checked:?}"
        );
    }
}

/// The same objects, created (server-side dry run) on the test control plane, whose KubeVirt and
/// CDI CRDs are generated from the upstream API types: their spec comes back exactly as sent, so
/// no field the builders write is unknown to KubeVirt or CDI (the API server would prune it) or
/// of the wrong type (it would refuse the object).
#[tokio::test]
async fn rendered_vms_and_data_volumes_are_stored_as_rendered() {
    use k8s_openapi::api::core::v1::Namespace;
    use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};

    let cp = testenv::ControlPlane::shared()
        .await
        .unwrap_or_else(|e| panic!("test control plane unavailable: {e}"));
    let client = cp.client().expect("admin client");
    let namespace: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "golden-schema-"},
    }))
    .unwrap();
    let namespace = kube::Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("creating a namespace")
        .metadata
        .name
        .expect("a generated namespace name");
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let mut checked = 0;
    for (path, object) in golden_objects() {
        let gvk = match object["kind"].as_str() {
            Some("VirtualMachine") => GroupVersionKind::gvk("kubevirt.io", "v1", "VirtualMachine"),
            Some("DataVolume") => GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
            _ => continue,
        };
        let what = describe(&path, &object);
        let resource = ApiResource::from_gvk(&gvk);
        let api: kube::Api<DynamicObject> =
            kube::Api::namespaced_with(client.clone(), &namespace, &resource);
        let mut sent: DynamicObject = serde_json::from_value(object.clone()).expect("an object");
        sent.metadata.namespace = Some(namespace.clone());
        // The owners do not exist here; the dry run needs no garbage collection.
        sent.metadata.owner_references = None;
        let stored = api
            .create(&dry_run, &sent)
            .await
            .unwrap_or_else(|e| panic!("{what} refused by the schema: {e}"));
        assert_eq!(
            stored.data["spec"], object["spec"],
            "{what} stored differently"
        );
        checked += 1;
    }
    assert!(checked >= 7, "checked {checked} golden VMs and DataVolumes");
    kube::Api::<Namespace>::all(client)
        .delete(&namespace, &Default::default())
        .await
        .expect("deleting the namespace");
}
