//! Compatibility with the Go operator and its clients, against a real API server with the
//! supervision tree in process: objects shaped the way upstream's Go API types serialise them
//! (every non-pointer struct as `{}` when unset, zero values omitted, `ttl: "0s"` / `"0"`) and
//! objects carrying the full status the Go operator wrote are accepted, reconciled without an
//! error condition, and keep the status fields only the Go operator writes.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::actors::Context;
use guestcluster::actors::root::{self, TreeConfig};
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::instance::InstancePhase;
use guestcluster::api::labels::{FIELD_MANAGER, FINALIZER_CLEANUP, FINALIZER_RELEASE};
use guestcluster::api::lease::LeasePhase;
use guestcluster::api::{CRCBundle, ClusterInstance, ClusterLease, ClusterPool};
use guestcluster::kubevirt::VirtualMachine;
use guestcluster::metrics::Metrics;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::{Resource, ResourceExt};
use serde_json::{Value, json};
use support::{deployed, platform_resource as resource, wait_for};

/// The CRCBundle a template with `crcVersion: 4.16.0` selects.
const BUNDLE: &str = "crc-4.16.0-amd64";
/// The field manager of the Go operator's status updates.
const GO_MANAGER: &str = "manager";
/// The archive digest the Go operator recorded for the bundle.
const BUNDLE_SHA256: &str = "6b0cbd9d2a1d9c3d8e4b7f3c1a0e9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e";
/// A status the Go operator wrote a long time ago.
const LONG_AGO: &str = "2025-01-02T03:04:05Z";

/// Reasons that report a failure rather than progress or a policy decision.
const ERROR_REASONS: &[&str] = &[
    reasons::RECONCILE_ERROR,
    reasons::PREP_JOB_FAILED,
    reasons::INVALID_PULL_SECRET,
    reasons::MISSING_BUNDLE_SSH_KEY,
    reasons::BOOT_KEY_UNAVAILABLE,
    reasons::API_ENDPOINT_CONFLICT,
    reasons::AGENT_JOB_FAILED,
    reasons::RESOURCE_OWNERSHIP_CONFLICT,
    reasons::KUBECONFIG_UNAVAILABLE,
    reasons::HANDOFF_INVALID,
    reasons::CLEANUP_ERROR,
    reasons::POOL_NOT_SET,
    reasons::RESOURCE_REPLACED,
    reasons::RESOURCE_LOST,
];

fn dynamic<K: Resource<DynamicType = ()>>(client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

/// An object as Go's encoding/json writes one of upstream's types: `metadata.creationTimestamp`
/// is a zero `metav1.Time` (`null`), and the non-pointer `status` struct is always present.
fn go_object(kind: &str, name: &str, spec: Value, status: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "kind": kind,
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "metadata": {"name": name, "creationTimestamp": null},
        "spec": spec,
        "status": status,
    }))
    .expect("valid object")
}

/// Upstream's `ClusterTemplate` for a crcVersion pool or instance with no pull secret set:
/// `pullSecretRef` is a non-pointer `LocalObjectReference`, so Go writes `{}`; `omitempty`
/// fields at their zero value are left out.
fn go_template() -> Value {
    json!({
        "crcVersion": "4.16.0",
        "ocpVersion": "4.16.0",
        "memory": "16Gi",
        "cores": 4,
        "pullSecretRef": {},
    })
}

/// Writes `status` the way the Go operator did: an update of the status subresource by its own
/// field manager.
async fn go_status(api: &Api<DynamicObject>, name: &str, status: Value) {
    api.patch_status(
        name,
        &PatchParams {
            field_manager: Some(GO_MANAGER.into()),
            ..PatchParams::default()
        },
        &Patch::Merge(json!({"status": status})),
    )
    .await
    .unwrap_or_else(|e| panic!("the API server refused the Go operator's status of {name}: {e}"));
}

async fn create(api: &Api<DynamicObject>, obj: &DynamicObject) {
    api.create(&PostParams::default(), obj)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "the API server refused {} {} as Go writes it: {e}",
                obj.types.as_ref().map(|t| t.kind.as_str()).unwrap_or("?"),
                obj.name_any()
            )
        });
}

fn condition(type_: &str, status: &str, reason: &str) -> Value {
    json!({"type": type_, "status": status, "reason": reason, "message": "written by the Go operator",
           "lastTransitionTime": LONG_AGO, "observedGeneration": 1})
}

/// Asserts that no condition reports a failure.
fn assert_no_error(what: &str, conds: &[Condition]) {
    for c in conds {
        assert!(
            !ERROR_REASONS.contains(&c.reason.as_str()),
            "{what}: {}={} {}: {}",
            c.type_,
            c.status,
            c.reason,
            c.message
        );
    }
}

/// The status fields `manager` owns, as the API server tracks them.
fn owned_status_fields(meta: &kube::api::ObjectMeta, manager: &str) -> Value {
    meta.managed_fields
        .iter()
        .flatten()
        .filter(|m| m.manager.as_deref() == Some(manager))
        .filter(|m| m.subresource.as_deref() == Some("status"))
        .filter_map(|m| m.fields_v1.as_ref())
        .map(|f| f.0.pointer("/f:status").cloned().unwrap_or(Value::Null))
        .next()
        .unwrap_or(Value::Null)
}

/// The bundle's golden PVC, SSH key Secret and metadata ConfigMap as the Go operator and its prep
/// Job left them: upstream's names, controlled by the bundle.
async fn prepared_bundle_objects(client: &kube::Client, operator_ns: &str, bundle: &DynamicObject) {
    let owner = json!([{
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "CRCBundle",
        "name": BUNDLE,
        "uid": bundle.uid().expect("stored bundle has a UID"),
        "controller": true,
    }]);
    let labels =
        json!({"opdev.io/managed-by": "guestcluster-operator", "opdev.io/crc-bundle": BUNDLE});
    let pvc: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": format!("{BUNDLE}-golden"), "labels": labels, "ownerReferences": owner},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "35Gi"}}},
    }))
    .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), operator_ns)
        .create(&PostParams::default(), &pvc)
        .await
        .expect("golden PVC");
    let key: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("{BUNDLE}-ssh-key"), "ownerReferences": owner},
        "type": "Opaque",
        "stringData": {"id_ecdsa": "-----BEGIN OPENSSH PRIVATE KEY-----\nnot a real key\n"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), operator_ns)
        .create(&PostParams::default(), &key)
        .await
        .expect("SSH key Secret");
    let metadata: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": format!("{BUNDLE}-metadata"), "ownerReferences": owner},
        "data": {"ocpVersion": "4.16.0", "sha256": BUNDLE_SHA256},
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), operator_ns)
        .create(&PostParams::default(), &metadata)
        .await
        .expect("metadata ConfigMap");
}

/// The instance once its CRC backing waits for the VirtualMachine it created to run: the furthest
/// a pass gets without KubeVirt actually running it.
async fn waiting_for_its_vm(api: &Api<ClusterInstance>, name: &str) -> ClusterInstance {
    wait_for(
        &format!("{name}: Ready=False CRCBackingPending, waiting for its VirtualMachine"),
        || async {
            let i = api.get(name).await.ok()?;
            let ready = conditions::find(&i.status.as_ref()?.conditions, types::READY)?;
            (ready.reason == reasons::CRC_BACKING_PENDING
                && ready.message.starts_with("waiting for VirtualMachine"))
            .then_some(i)
        },
    )
    .await
}

/// One tree per test process (actor names are global), so every object is in this one test.
#[tokio::test]
async fn objects_written_by_the_go_operator_and_its_clients_are_reconciled() {
    let client = support::client().await;
    let operator_ns = support::ensure_namespace(&client, "compat-operator").await;
    let ns = support::unique("compat");
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns,
        "labels": {"guestcluster.opdev.io/enabled": "true"}}}))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("namespace");

    // The platform and the namespace's default pull secret, as a working installation has them.
    let kv_ar = resource("kubevirt.io", "v1", "KubeVirt", "kubevirts");
    let cdi_ar = resource("cdi.kubevirt.io", "v1beta1", "CDI", "cdis");
    deployed(
        &Api::namespaced_with(client.clone(), &ns, &kv_ar),
        &kv_ar,
        "kubevirt",
    )
    .await;
    let cdi_api = Api::<DynamicObject>::all_with(client.clone(), &cdi_ar);
    let cdi_name = support::unique("cdi");
    deployed(&cdi_api, &cdi_ar, &cdi_name).await;
    let pull: Secret = serde_json::from_value(json!({
        "metadata": {"name": "pull-secret"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{}}"},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pull)
        .await
        .expect("pull secret");

    // A CRCBundle the Go operator prepared: its spec as Go writes it, its full Ready status, and
    // the golden PVC and key Secret its prep Job left behind.
    let bundles =
        Api::<DynamicObject>::all_with(client.clone(), &ApiResource::erase::<CRCBundle>(&()));
    create(
        &bundles,
        &go_object(
            "CRCBundle",
            BUNDLE,
            json!({"version": "4.16.0", "arch": "amd64", "goldenVolumeSize": "35Gi"}),
            json!({}),
        ),
    )
    .await;
    prepared_bundle_objects(&client, &operator_ns, &bundles.get(BUNDLE).await.unwrap()).await;
    go_status(
        &bundles,
        BUNDLE,
        json!({
            "phase": "Ready",
            "qcow2PVCRef": {"name": format!("{BUNDLE}-golden")},
            "qcow2PVCNamespace": operator_ns,
            "sshKeySecretRef": {"name": format!("{BUNDLE}-ssh-key")},
            "ocpVersion": "4.16.0",
            "sha256": BUNDLE_SHA256,
            "conditions": [condition("Ready", "True", "BundleReady")],
        }),
    )
    .await;

    let instances_dyn = dynamic::<ClusterInstance>(&client, &ns);
    // A standalone instance as a Go client creates it: `poolRef: {}` and `pullSecretRef: {}`
    // (non-pointer structs), and the zero status with its non-pointer `kubeconfigSecretRef`.
    create(
        &instances_dyn,
        &go_object(
            "ClusterInstance",
            "standalone",
            json!({"type": "crc", "poolRef": {}, "template": go_template()}),
            json!({"kubeconfigSecretRef": {}}),
        ),
    )
    .await;
    // A crc instance the Go operator had authorized (with its legacy-adoption flag) and named the
    // backing objects of (write-ahead, under upstream's names), but not created them yet.
    create(
        &instances_dyn,
        &go_object(
            "ClusterInstance",
            "migrated",
            json!({"type": "crc", "poolRef": {}, "template": go_template()}),
            json!({}),
        ),
    )
    .await;
    go_status(
        &instances_dyn,
        "migrated",
        json!({
            "phase": "Provisioning",
            "kubeconfigSecretRef": {},
            "crc": {"vmName": "migrated", "dataVolumeName": "migrated-rootdisk"},
            "provisioning": {"startedAt": LONG_AGO, "legacy": true},
            "observedGeneration": 1,
            "conditions": [
                condition("ProvisioningAllowed", "True", "ProvisioningAuthorized"),
                condition("Ready", "False", "CRCBackingPending"),
            ],
        }),
    )
    .await;
    // An hcp instance the Go operator provisioned: the only record of its HostedCluster and
    // NodePools is `status.hyperShift`.
    let hyper_shift = json!({
        "hostedClusterName": "hosted",
        "hostedClusterNamespace": "clusters",
        "nodePoolNames": ["hosted-workers"],
    });
    create(
        &instances_dyn,
        &go_object(
            "ClusterInstance",
            "hosted",
            json!({"type": "hcp", "poolRef": {}, "template": {
                "releaseImage": "quay.io/openshift-release-dev/ocp-release:4.16.10-multi",
                "ocpVersion": "4.16.10", "memory": "8Gi", "cores": 2, "pullSecretRef": {}}}),
            json!({}),
        ),
    )
    .await;
    go_status(
        &instances_dyn,
        "hosted",
        json!({
            "phase": "Ready",
            "ocpVersion": "4.16.10",
            "topology": "hcp",
            "apiEndpoint": "https://api.hosted.example:6443",
            "kubeconfigSecretRef": {"name": "hosted-kubeconfig"},
            "hyperShift": hyper_shift,
            "provisioning": {"startedAt": LONG_AGO, "legacy": false},
            "observedGeneration": 1,
            "conditions": [condition("Ready", "True", "ClusterReady")],
        }),
    )
    .await;

    // A pool as Go writes it (minSize and warmSpares 0 are omitted), a pending lease with the
    // TTL a zero `metav1.Duration` serialises to, and a lease the Go operator bound long ago with
    // `ttl: "0"` — no TTL, so it must stay.
    let pools_dyn = dynamic::<ClusterPool>(&client, &ns);
    create(
        &pools_dyn,
        &go_object(
            "ClusterPool",
            "pool",
            json!({"type": "crc", "maxSize": 2, "template": go_template()}),
            json!({}),
        ),
    )
    .await;
    let leases_dyn = dynamic::<ClusterLease>(&client, &ns);
    create(
        &leases_dyn,
        &go_object(
            "ClusterLease",
            "waiting",
            json!({"poolRef": {"name": "pool"}, "ttl": "0s", "requestedBy": "ci-job-1"}),
            json!({}),
        ),
    )
    .await;
    create(
        &leases_dyn,
        &go_object(
            "ClusterLease",
            "kept",
            json!({"poolRef": {"name": "pool"}, "ttl": "0"}),
            json!({}),
        ),
    )
    .await;
    go_status(
        &leases_dyn,
        "kept",
        json!({
            "phase": "Bound",
            "instanceRef": {"name": "retired-instance"},
            "kubeconfigSecretRef": {"name": "kept-kubeconfig"},
            "ocpVersion": "4.16.0",
            "topology": "crc",
            "apiEndpoint": "https://api.retired.example",
            "boundTime": LONG_AGO,
            "conditions": [condition("Bound", "True", "InstanceBound")],
        }),
    )
    .await;

    // Everything was accepted as written; now the operator takes over.
    let ctx = Context::new(
        client.clone(),
        operator_ns.clone(),
        Metrics::default(),
        Default::default(),
    );
    let tree = root::start(ctx, TreeConfig::default())
        .await
        .expect("tree starts");

    // The bundle stays Ready: its golden PVC and key are where the Go operator left them.
    let typed_bundles: Api<CRCBundle> = Api::all(client.clone());
    let bundle = wait_for("the bundle is reconciled", || async {
        let b = typed_bundles.get(BUNDLE).await.ok()?;
        let status = b.status.as_ref()?;
        (status.observed_generation == b.metadata.generation && status.source.is_some())
            .then_some(b)
    })
    .await;
    let status = bundle.status.as_ref().unwrap();
    assert!(
        conditions::is_true(&status.conditions, types::READY),
        "{status:?}"
    );
    assert_eq!(
        status.qcow2_pvc_ref.as_ref().and_then(|r| r.name()),
        Some(format!("{BUNDLE}-golden").as_str())
    );
    assert_no_error("CRCBundle", &status.conditions);

    // Both crc instances get as far as a pass can without KubeVirt running their VM.
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let vms: Api<VirtualMachine> = Api::namespaced(client.clone(), &ns);
    for name in ["standalone", "migrated"] {
        let i = waiting_for_its_vm(&instances, name).await;
        assert!(i.finalizers().iter().any(|f| f == FINALIZER_CLEANUP));
        let status = i.status.as_ref().unwrap();
        assert_eq!(status.phase, Some(InstancePhase::Provisioning), "{name}");
        assert_no_error(name, &status.conditions);
        assert!(
            conditions::is_true(&status.conditions, types::HYPER_CONVERGED_READY),
            "{name}: {status:?}"
        );
        let binding = status
            .crc
            .as_ref()
            .and_then(|c| c.boot_key.as_ref())
            .unwrap_or_else(|| panic!("{name} bound its boot key"));
        assert_eq!(Some(binding.bundle_uid.clone()), bundle.uid(), "{name}");
        assert_eq!(binding.pvc_name, format!("{BUNDLE}-golden"));
        assert!(
            vms.get_opt(name).await.unwrap().is_some(),
            "{name}: VirtualMachine created"
        );
        assert_eq!(i.spec.pool_ref.as_ref().and_then(|r| r.name()), None);
    }
    // The migrated instance keeps its recorded names, its authorization and the Go operator's
    // adoption flag.
    let migrated = instances.get("migrated").await.unwrap();
    let status = migrated.status.as_ref().unwrap();
    let provisioning = status.provisioning.as_ref().unwrap();
    assert_eq!(
        (provisioning.started_at.0.to_string(), provisioning.legacy),
        ("2025-01-02T03:04:05Z".to_owned(), Some(true))
    );
    let crc = status.crc.as_ref().unwrap();
    assert_eq!(
        (crc.vm_name.as_deref(), crc.data_volume_name.as_deref()),
        (Some("migrated"), Some("migrated-rootdisk"))
    );
    let ours = owned_status_fields(&migrated.metadata, FIELD_MANAGER);
    assert!(
        ours.pointer("/f:provisioning/f:startedAt").is_some(),
        "{ours}"
    );
    assert!(ours.pointer("/f:provisioning/f:legacy").is_none(), "{ours}");

    // hcp: reported unsupported, as documented; the HostedCluster's names are still there and
    // were never taken over by our status writes.
    let hosted = support::with_condition(
        &instances,
        "hosted",
        types::READY,
        "False",
        reasons::TOPOLOGY_UNSUPPORTED,
    )
    .await;
    let raw = instances_dyn.get("hosted").await.unwrap();
    assert_eq!(raw.data["status"]["hyperShift"], hyper_shift);
    assert_eq!(raw.data["status"]["provisioning"]["legacy"], false);
    let ours = owned_status_fields(&hosted.metadata, FIELD_MANAGER);
    assert!(ours.pointer("/f:conditions").is_some(), "{ours}");
    assert!(ours.pointer("/f:hyperShift").is_none(), "{ours}");
    assert!(ours.pointer("/f:provisioning/f:legacy").is_none(), "{ours}");
    let go = owned_status_fields(&hosted.metadata, GO_MANAGER);
    assert!(
        go.pointer("/f:hyperShift/f:nodePoolNames").is_some(),
        "{go}"
    );

    // The pending lease makes the pool create an instance for it, which provisions like the
    // standalone one; the lease waits for it to become Ready.
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), &ns);
    let pool = wait_for("the pool created an instance for the lease", || async {
        let p = pools.get("pool").await.ok()?;
        (p.status.as_ref()?.total_instances == Some(1)).then_some(p)
    })
    .await;
    let status = pool.status.as_ref().unwrap();
    assert_no_error("ClusterPool", &status.conditions);
    let capacity = conditions::find(&status.conditions, types::CAPACITY_AVAILABLE).unwrap();
    assert_eq!(
        (capacity.status.as_str(), capacity.reason.as_str()),
        ("True", reasons::CAPACITY_SUFFICIENT)
    );
    let member = waiting_for_its_vm(&instances, "pool-0").await;
    assert_no_error("pool-0", &member.status.as_ref().unwrap().conditions);
    assert_eq!(
        member
            .spec
            .template
            .pull_secret_ref
            .as_ref()
            .and_then(|r| r.name()),
        None,
        "the template is copied verbatim, empty pullSecretRef included"
    );

    let leases: Api<ClusterLease> = Api::namespaced(client.clone(), &ns);
    let waiting = support::with_condition(
        &leases,
        "waiting",
        types::BOUND,
        "False",
        reasons::WAITING_FOR_CAPACITY,
    )
    .await;
    assert!(waiting.finalizers().iter().any(|f| f == FINALIZER_RELEASE));
    assert_eq!(
        waiting.status.as_ref().and_then(|s| s.phase),
        Some(LeasePhase::Pending)
    );
    // By now the operator has long handled the bound lease (its finalizer came first); with
    // `ttl: "0"` it is not expired, however old its binding.
    let kept = wait_for("the bound lease carries our finalizer", || async {
        let l = leases.get("kept").await.ok()?;
        l.finalizers()
            .iter()
            .any(|f| f == FINALIZER_RELEASE)
            .then_some(l)
    })
    .await;
    let status = kept.status.as_ref().unwrap();
    assert_eq!(status.phase, Some(LeasePhase::Bound));
    assert_eq!(
        status.instance_ref.as_ref().and_then(|r| r.name()),
        Some("retired-instance")
    );
    assert_no_error("ClusterLease kept", &status.conditions);

    tree.stop(None);
    cdi_api
        .delete(&cdi_name, &DeleteParams::default())
        .await
        .expect("delete CDI");
}
