use super::*;
use crate::api::bundle::{BundlePhase, CRCBundleSpec};
use serde_json::json;

fn meta(labels: serde_json::Value, deleting: bool) -> kube::api::ObjectMeta {
    let mut v = json!({"name": "team", "uid": "u1", "labels": labels});
    if deleting {
        v["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    }
    serde_json::from_value(v).unwrap()
}

#[test]
fn only_policy_changes_of_a_namespace_wake() {
    let plain = meta(json!({}), false);
    let enabled = meta(json!({"guestcluster.opdev.io/enabled": "true"}), false);
    let mut annotated = enabled.clone();
    annotated.annotations = Some([("a".to_owned(), "b".to_owned())].into());
    assert!(namespace_changed(None, Some(&plain)), "created");
    assert!(namespace_changed(Some(&plain), None), "deleted");
    assert!(namespace_changed(Some(&plain), Some(&enabled)), "labelled");
    assert!(
        namespace_changed(Some(&enabled), Some(&plain)),
        "unlabelled"
    );
    assert!(
        namespace_changed(Some(&enabled), Some(&meta(json!({}), true))),
        "terminating"
    );
    assert!(!namespace_changed(Some(&enabled), Some(&annotated)));
    let mut recreated = enabled.clone();
    recreated.uid = Some("u2".into());
    assert!(namespace_changed(Some(&enabled), Some(&recreated)));
}

fn bundle(name: &str, version: Option<&str>, phase: Option<BundlePhase>) -> CRCBundle {
    let spec: CRCBundleSpec =
        serde_json::from_value(json!({"goldenVolumeSize": "35Gi"})).expect("spec");
    let mut b = CRCBundle::new(name, spec);
    b.spec.version = version.map(str::to_owned);
    b.metadata.uid = Some(format!("uid-{name}"));
    b.status = phase.map(|p| crate::api::bundle::CRCBundleStatus {
        phase: Some(p),
        ..Default::default()
    });
    b
}

#[test]
fn a_bundle_wakes_its_dependents_on_identity_readiness_and_what_it_publishes_only() {
    use crate::api::common::LocalRef;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    type Edit = fn(&mut CRCBundle);
    fn st(b: &mut CRCBundle) -> &mut crate::api::bundle::CRCBundleStatus {
        b.status.get_or_insert_default()
    }
    // (what, the bundle's phase before, the change, whether it wakes dependents)
    let cases: [(&str, Option<BundlePhase>, Edit, bool); 22] = [
        (
            "first status",
            None,
            |b| st(b).phase = Some(BundlePhase::Preparing),
            false,
        ),
        (
            "pending to preparing",
            Some(BundlePhase::Pending),
            |b| st(b).phase = Some(BundlePhase::Preparing),
            false,
        ),
        (
            "preparing to building",
            Some(BundlePhase::Preparing),
            |b| st(b).phase = Some(BundlePhase::Building),
            false,
        ),
        (
            "preparing to failed",
            Some(BundlePhase::Preparing),
            |b| st(b).phase = Some(BundlePhase::Failed),
            false,
        ),
        (
            "download progress",
            Some(BundlePhase::Preparing),
            |b| st(b).sha256 = Some("abc".into()),
            false,
        ),
        (
            "prep job while preparing",
            Some(BundlePhase::Preparing),
            |b| st(b).prep_job = Some(Default::default()),
            false,
        ),
        (
            "becomes ready",
            Some(BundlePhase::Preparing),
            |b| st(b).phase = Some(BundlePhase::Ready),
            true,
        ),
        (
            "ceases to be ready",
            Some(BundlePhase::Ready),
            |b| st(b).phase = Some(BundlePhase::Preparing),
            true,
        ),
        (
            "recreated",
            Some(BundlePhase::Preparing),
            |b| b.metadata.uid = Some("uid-new".into()),
            true,
        ),
        (
            "starts deleting",
            Some(BundlePhase::Preparing),
            |b| b.metadata.deletion_timestamp = Some(Time(Timestamp::UNIX_EPOCH)),
            true,
        ),
        (
            "ready: sha256",
            Some(BundlePhase::Ready),
            |b| st(b).sha256 = Some("new".into()),
            true,
        ),
        (
            "ready: disk sha256",
            Some(BundlePhase::Ready),
            |b| st(b).disk_sha256 = Some("new".into()),
            true,
        ),
        (
            "ready: disk size",
            Some(BundlePhase::Ready),
            |b| st(b).disk_virtual_size = Some(1),
            true,
        ),
        (
            "ready: golden PVC",
            Some(BundlePhase::Ready),
            |b| {
                st(b).qcow2_pvc_ref = Some(LocalRef {
                    name: "other".into(),
                })
            },
            true,
        ),
        (
            "ready: golden PVC namespace",
            Some(BundlePhase::Ready),
            |b| st(b).qcow2_pvc_namespace = Some("elsewhere".into()),
            true,
        ),
        (
            "ready: key Secret",
            Some(BundlePhase::Ready),
            |b| {
                st(b).ssh_key_secret_ref = Some(LocalRef {
                    name: "other".into(),
                })
            },
            true,
        ),
        (
            "ready: VM profile",
            Some(BundlePhase::Ready),
            |b| st(b).vm_profile = Some("crc-kubevirt-v1".into()),
            true,
        ),
        (
            "ready: source",
            Some(BundlePhase::Ready),
            |b| st(b).source = Some(crate::api::bundle::BundleSource::Build),
            true,
        ),
        (
            "ready: storage class",
            Some(BundlePhase::Ready),
            |b| b.spec.storage_class_name = Some("fast".into()),
            true,
        ),
        (
            "ready: OpenShift version",
            Some(BundlePhase::Ready),
            |b| st(b).ocp_version = Some("4.22.7".into()),
            false,
        ),
        (
            "ready: prep job",
            Some(BundlePhase::Ready),
            |b| st(b).prep_job = Some(Default::default()),
            false,
        ),
        (
            "ready: label",
            Some(BundlePhase::Ready),
            |b| b.metadata.labels = Some([("a".to_owned(), "b".to_owned())].into()),
            false,
        ),
    ];
    for (what, phase, edit, wakes) in cases {
        let old = bundle("b", None, phase);
        let mut new = old.clone();
        edit(&mut new);
        assert_eq!(bundle_changed(Some(&old), Some(&new)), wakes, "{what}");
        assert!(
            !bundle_changed(Some(&new), Some(&new.clone())),
            "{what}: unchanged"
        );
    }
    let ready = bundle("b", None, Some(BundlePhase::Ready));
    assert!(bundle_changed(None, Some(&ready)), "appeared");
    assert!(bundle_changed(Some(&ready), None), "went");
    assert!(
        bundle_changed(None, Some(&bundle("b", None, None))),
        "appeared, no status"
    );
}

#[test]
fn a_version_finds_its_published_bundle_first_then_a_declared_one() {
    let published = Arc::new(bundle("crc-4.22.7-amd64", None, None));
    let declared_b = Arc::new(bundle("b-custom", Some("4.22.7"), None));
    let declared_a = Arc::new(bundle("a-custom", Some("4.22.7"), None));
    let other = Arc::new(bundle("c", Some("4.21.0"), None));
    let all = [declared_b.clone(), published.clone(), other.clone()];
    let found = bundle_of_version(&all, "4.22.7", Arch::Amd64).unwrap();
    assert_eq!(found.name_any(), "crc-4.22.7-amd64");
    let all = [declared_b, declared_a, other];
    let found = bundle_of_version(&all, "4.22.7", Arch::Amd64).unwrap();
    assert_eq!(found.name_any(), "a-custom", "stable: lowest name");
    assert!(bundle_of_version(&all, "4.22.7", Arch::Arm64).is_none());
    assert!(bundle_of_version(&all, "4.20.0", Arch::Amd64).is_none());
}

#[test]
fn the_lease_index_follows_each_lease_claim() {
    let mut index = LeaseIndex::default();
    assert_eq!(index.lease_of("team", "p-0"), None);
    index.set("team", "l1", Some("p-0"));
    assert_eq!(index.lease_of("team", "p-0"), Some("l1"));
    assert_eq!(index.lease_of("other", "p-0"), None, "by namespace");
    index.set("team", "l1", Some("p-0"));
    assert_eq!(index.lease_of("team", "p-0"), Some("l1"), "replayed");
    index.set("team", "l1", Some("p-1"));
    assert_eq!(index.lease_of("team", "p-0"), None, "moved on");
    assert_eq!(index.lease_of("team", "p-1"), Some("l1"));
    index.set("team", "l0", Some("p-1"));
    assert_eq!(index.lease_of("team", "p-1"), Some("l0"), "lowest name");
    index.set("team", "l0", None);
    assert_eq!(index.lease_of("team", "p-1"), Some("l1"), "released");
    index.set("team", "l1", None);
    assert_eq!(index.lease_of("team", "p-1"), None);
    assert!(index.claim_of.is_empty() && index.claimed_by.is_empty());
}

#[test]
fn route_trimming_keeps_owner_and_host_only() {
    let mut route: Route = serde_json::from_value(json!({
        "apiVersion": "route.openshift.io/v1", "kind": "Route",
        "metadata": {"name": "api", "namespace": "team", "annotations": {"a": "b"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ClusterInstance", "name": "one",
                "uid": "u1", "controller": true}]},
        "spec": {"host": "api.example", "to": {"kind": "Service", "name": "api"},
            "tls": {"termination": "edge", "key": "secret"}},
    }))
    .unwrap();
    trim_route(&mut route);
    assert_eq!(route.spec.host.as_deref(), Some("api.example"));
    assert!(route.spec.tls.is_none());
    assert!(route.metadata.annotations.is_none());
    assert_eq!(route.owner_references().len(), 1);
}
