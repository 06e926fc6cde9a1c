//! The embedded test control plane behaves like a real cluster where the operator depends on
//! it: RBAC is enforced, the CRDs (ours and the external ones generated from upstream types) are
//! served with their schemas applied, the controller
//! manager garbage-collects and finalizes namespaces, and the kubeconfig works with kubectl.
//!
//! All tests but one share the per-binary control plane and isolate themselves in namespaces
//! named by the server (`generateName`).
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, ServiceAccount};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use testenv::{ControlPlane, Options};

/// Generous: controllers on a loaded two-core CI machine can take many seconds to react.
const DEADLINE: Duration = Duration::from_secs(90);

async fn control_plane() -> &'static ControlPlane {
    // Display, not Debug: the message says how to build missing binaries.
    ControlPlane::shared()
        .await
        .unwrap_or_else(|e| panic!("test control plane unavailable: {e}"))
}

fn client(cp: &ControlPlane) -> Client {
    cp.client().unwrap_or_else(|e| panic!("admin client: {e}"))
}

/// Creates a namespace with a server-generated name starting with `prefix`.
async fn namespace(client: &Client, prefix: &str) -> String {
    let namespace = Namespace {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap_or_else(|e| panic!("creating namespace {prefix}-*: {e}"))
        .name_any()
}

/// Polls `check` until it yields a value; on timeout panics with the last observation.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        match check().await {
            Ok(value) => return value,
            Err(observed) if started.elapsed() > DEADLINE => {
                panic!("{what}: not true after {DEADLINE:?}; last observed: {observed}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

#[tokio::test]
async fn rbac_denies_a_user_without_bindings() {
    let cp = control_plane().await;
    let admin = client(cp);

    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some("testenv-nobody".into()),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some("default".into()),
                verb: Some("list".into()),
                resource: Some("configmaps".into()),
                ..ResourceAttributes::default()
            }),
            ..SubjectAccessReviewSpec::default()
        },
        ..SubjectAccessReview::default()
    };
    let answered = Api::<SubjectAccessReview>::all(admin)
        .create(&PostParams::default(), &review)
        .await
        .expect("SubjectAccessReview");
    let status = answered.status.expect("SubjectAccessReview status");
    assert!(
        !status.allowed,
        "unbound user may list configmaps: {status:?}"
    );

    let mut config = cp.config();
    config.auth_info.impersonate = Some("testenv-nobody".into());
    let nobody = Client::try_from(config).expect("impersonating client");
    match Api::<ConfigMap>::namespaced(nobody, "default")
        .list(&Default::default())
        .await
    {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("expected 403 Forbidden for an unbound user, got {other:?}"),
    }
}

#[tokio::test]
async fn external_and_project_crds_are_established() {
    let cp = control_plane().await;
    let crds = Api::<CustomResourceDefinition>::all(client(cp));
    let mut expected: Vec<String> = [
        "virtualmachines.kubevirt.io",
        "virtualmachineinstances.kubevirt.io",
        "kubevirts.kubevirt.io",
        "datavolumes.cdi.kubevirt.io",
        "datasources.cdi.kubevirt.io",
        "cdis.cdi.kubevirt.io",
        "routes.route.openshift.io",
        "ingresses.config.openshift.io",
        "hyperconvergeds.hco.kubevirt.io",
    ]
    .map(String::from)
    .into();
    expected.extend(project_crd_names());

    for name in expected {
        let crd = crds
            .get(&name)
            .await
            .unwrap_or_else(|e| panic!("CRD {name} is not installed: {e}"));
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        assert!(established, "CRD {name} is not Established");
    }
}

/// Names of the CRDs in the project's `crds/` directory (file names are `<group>_<plural>.yaml`).
fn project_crd_names() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("crds");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let text = std::fs::read_to_string(entry.path()).ok()?;
            let crd: CustomResourceDefinition = serde_saphyr::from_str(&text).ok()?;
            crd.metadata.name
        })
        .collect()
}

#[tokio::test]
async fn virtual_machine_schema_prunes_unknown_fields_and_refuses_invalid_objects() {
    let cp = control_plane().await;
    let admin = client(cp);
    let ns = namespace(&admin, "testenv-vm").await;
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachine",
    ));
    let vms: Api<DynamicObject> = Api::namespaced_with(admin.clone(), &ns, &resource);
    let spec = json!({
        "runStrategy": "Halted",
        "template": {"spec": {
            "domain": {"cpu": {"cores": 4}, "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "root"}}],
        }},
    });
    let mut sent = spec.clone();
    // Misplaced: `cores` belongs under `domain.cpu`, and `notAField` exists nowhere.
    sent["template"]["spec"]["domain"]["cores"] = json!(4);
    sent["notAField"] = json!(true);
    let mut vm = DynamicObject::new("crc", &resource).within(&ns);
    vm.data = json!({ "spec": sent });
    vms.create(&PostParams::default(), &vm)
        .await
        .expect("create VirtualMachine");

    let status = json!({"status": {"printableStatus": "Stopped", "ready": false, "notAField": 1}});
    vms.patch_status(
        "crc",
        &Default::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .expect("patch VirtualMachine status subresource");

    let read = vms.get("crc").await.expect("read VirtualMachine back");
    assert_eq!(read.data["spec"], spec, "unknown spec fields are pruned");
    assert_eq!(read.data["status"]["printableStatus"], "Stopped");
    assert_eq!(read.data["status"].get("notAField"), None);

    // A template without devices is what KubeVirt's schema refuses outright.
    let mut invalid = DynamicObject::new("no-devices", &resource).within(&ns);
    invalid.data = json!({"spec": {"template": {"spec": {"domain": {}}}}});
    match vms.create(&PostParams::default(), &invalid).await {
        Err(kube::Error::Api(status)) if status.code == 422 => assert!(
            status
                .message
                .contains("spec.template.spec.domain.devices: Required value"),
            "{}",
            status.message
        ),
        other => panic!("expected 422 Invalid for a domain without devices, got {other:?}"),
    }
    delete_namespace(&admin, &ns).await;
}

#[tokio::test]
async fn garbage_collector_deletes_dependents_of_a_deleted_owner() {
    let cp = control_plane().await;
    let admin = client(cp);
    let ns = namespace(&admin, "testenv-gc").await;
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), &ns);

    let owner = configmaps
        .create(&PostParams::default(), &config_map("owner", None))
        .await
        .expect("create owner");
    let reference = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: owner.name_any(),
        uid: owner.uid().expect("owner uid"),
        ..OwnerReference::default()
    };
    configmaps
        .create(
            &PostParams::default(),
            &config_map("dependent", Some(reference)),
        )
        .await
        .expect("create dependent");

    configmaps
        .delete("owner", &DeleteParams::background())
        .await
        .expect("delete owner");
    eventually("dependent ConfigMap is garbage-collected", || async {
        match configmaps.get_opt("dependent").await {
            Ok(None) => Ok(()),
            Ok(Some(cm)) => Err(format!(
                "dependent still exists (ownerReferences {:?}, deletionTimestamp {:?})",
                cm.metadata.owner_references, cm.metadata.deletion_timestamp
            )),
            Err(e) => Err(format!("reading dependent: {e}")),
        }
    })
    .await;
    delete_namespace(&admin, &ns).await;
}

fn config_map(name: &str, owner: Option<OwnerReference>) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            owner_references: owner.map(|o| vec![o]),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    }
}

#[tokio::test]
async fn controller_manager_creates_service_accounts_and_finalizes_namespaces() {
    let cp = control_plane().await;
    let admin = client(cp);
    let ns = namespace(&admin, "testenv-ns").await;
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), &ns);
    eventually("default ServiceAccount is created", || async {
        match accounts.get_opt("default").await {
            Ok(Some(_)) => Ok(()),
            Ok(None) => Err("absent".to_string()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;

    delete_namespace(&admin, &ns).await;
    let namespaces: Api<Namespace> = Api::all(admin);
    eventually("deleted namespace is finalized and removed", || async {
        match namespaces.get_opt(&ns).await {
            Ok(None) => Ok(()),
            Ok(Some(n)) => Err(format!("still present, status {:?}", n.status)),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

async fn delete_namespace(client: &Client, name: &str) {
    Api::<Namespace>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap_or_else(|e| panic!("deleting namespace {name}: {e}"));
}

#[tokio::test]
async fn kubeconfig_works_with_the_built_kubectl() {
    let cp = control_plane().await;
    let output = tokio::process::Command::from(cp.kubectl())
        .args(["get", "namespaces", "-o", "name"])
        .output()
        .await
        .expect("run kubectl");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kubectl get namespaces failed ({}): {}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.lines().any(|l| l == "namespace/default"), "{stdout}");

    let output = tokio::process::Command::from(cp.kubectl())
        .args(["get", "vm", "--all-namespaces"])
        .output()
        .await
        .expect("run kubectl");
    assert!(
        output.status.success(),
        "short name vm is not served: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// A private control plane (not the shared one) stops its processes and deletes its state
/// directory on shutdown. Without the controller manager, to keep the extra start cheap.
#[tokio::test]
async fn shutdown_stops_processes_and_removes_state() {
    let opts = Options {
        controller_manager: false,
        ..Options::default()
    };
    let cp = ControlPlane::start(opts)
        .await
        .unwrap_or_else(|e| panic!("starting a private control plane: {e}"));
    let state = cp.state_dir().to_path_buf();
    let url = cp.server_url().to_string();
    assert!(state.join("kubeconfig").is_file());
    assert!(cp.check_running().is_ok());
    let port: u16 = url
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("port in server URL");

    cp.shutdown().await.expect("shutdown");
    assert!(
        !state.exists(),
        "state dir {} survived shutdown",
        state.display()
    );
    let connect = tokio::net::TcpStream::connect(("127.0.0.1", port)).await;
    assert!(connect.is_err(), "kube-apiserver still listens on {url}");
}
