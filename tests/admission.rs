//! Admission rules (OpenAPI + CEL) checked against a real kube-apiserver: for every rule, an object
//! that passes and one that is rejected with a message a person can act on.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::api::{CRCBundle, ClusterInstance, ClusterLease, ClusterPool};
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use serde_json::{Value, json};

fn bundles(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(client.clone(), &ApiResource::erase::<CRCBundle>(&()))
}

fn namespaced<K: kube::Resource<DynamicType = ()>>(
    client: &kube::Client,
    ns: &str,
) -> Api<DynamicObject> {
    Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<K>(&()))
}

fn object(kind: &str, name: &str, spec: Value) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": spec,
    }))
    .expect("valid object")
}

async fn create(
    api: &Api<DynamicObject>,
    obj: &DynamicObject,
) -> Result<DynamicObject, kube::Error> {
    api.create(&PostParams::default(), obj).await
}

/// Asserts the API server rejected the request as invalid, with `needle` in its message.
fn assert_rejected<T: std::fmt::Debug>(result: Result<T, kube::Error>, needle: &str) {
    match result {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 422, "expected 422 Invalid, got {status:?}");
            assert!(
                status.message.contains(needle),
                "rejection message does not mention {needle:?}: {}",
                status.message
            );
        }
        other => panic!("expected a rejection mentioning {needle:?}, got {other:?}"),
    }
}

fn build_spec(extra: Value) -> Value {
    let mut spec = json!({
        "goldenVolumeSize": "80Gi",
        "build": {
            "releaseImage": "quay.io/example/ocp-release@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
            "pullSecretRef": {"name": "pull"},
        },
    });
    merge(&mut spec, extra);
    spec
}

fn merge(base: &mut Value, extra: Value) {
    match (base, extra) {
        (Value::Object(base), Value::Object(extra)) => {
            for (k, v) in extra {
                match base.get_mut(&k) {
                    Some(existing) if v.is_object() => merge(existing, v),
                    _ => {
                        base.insert(k, v);
                    }
                }
            }
        }
        (base, extra) => *base = extra,
    }
}

fn template(extra: Value) -> Value {
    let mut t = json!({"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4});
    merge(&mut t, extra);
    t
}

#[tokio::test]
async fn bundle_needs_exactly_one_source() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("src");
    let both = build_spec(json!({"version": "4.16.0"}));
    assert_rejected(
        create(&api, &object("CRCBundle", &name, both)).await,
        "set exactly one source",
    );
    assert_rejected(
        create(&api, &object("CRCBundle", &name, json!({"arch": "amd64"}))).await,
        "spec.version (download a published CRC bundle) or spec.build",
    );
    create(
        &api,
        &object("CRCBundle", &name, json!({"version": "4.16.0"})),
    )
    .await
    .expect("download bundle accepted");
    create(
        &api,
        &object("CRCBundle", &format!("{name}-b"), build_spec(json!({}))),
    )
    .await
    .expect("build bundle accepted");
}

#[tokio::test]
async fn download_urls_only_with_download_source() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("urls");
    let bad = build_spec(json!({"bundleURL": "https://mirror.example/x.crcbundle"}));
    assert_rejected(
        create(&api, &object("CRCBundle", &name, bad)).await,
        "only apply to the download source",
    );
    let bad = build_spec(json!({"sha256URL": "https://mirror.example/sha256sum.txt"}));
    assert_rejected(
        create(&api, &object("CRCBundle", &name, bad)).await,
        "only apply to the download source",
    );
    let ok = json!({
        "version": "4.16.0",
        "bundleURL": "https://mirror.example/crc_libvirt_4.16.0_amd64.crcbundle",
        "sha256URL": "https://mirror.example/sha256sum.txt",
    });
    create(&api, &object("CRCBundle", &name, ok))
        .await
        .expect("mirror URLs accepted on a download bundle");
}

#[tokio::test]
async fn plain_http_downloads_need_the_opt_in() {
    let client = support::client().await;
    let api = bundles(&client);
    for (i, urls) in [
        json!({"bundleURL": "http://mirror.local/crc_libvirt_4.16.0_amd64.crcbundle"}),
        json!({"sha256URL": "HTTP://mirror.local/sha256sum.txt"}),
    ]
    .into_iter()
    .enumerate()
    {
        let name = support::unique(&format!("http-{i}"));
        let mut spec = json!({"version": "4.16.0"});
        spec.as_object_mut()
            .unwrap()
            .extend(urls.as_object().unwrap().clone());
        assert_rejected(
            create(&api, &object("CRCBundle", &name, spec.clone())).await,
            "set spec.allowHTTP: true",
        );
        spec["allowHTTP"] = json!(true);
        create(&api, &object("CRCBundle", &name, spec))
            .await
            .expect("plain http accepted with the opt-in");
    }
}

#[tokio::test]
async fn golden_volume_must_hold_the_build_disk() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("size");
    let small = build_spec(json!({"goldenVolumeSize": "50Gi"}));
    assert_rejected(
        create(&api, &object("CRCBundle", &name, small)).await,
        "spec.goldenVolumeSize must be at least spec.build.vm.diskSize",
    );
    // The default golden size (35Gi) is smaller than the default disk (64Gi): say so, not accept.
    let defaulted = build_spec(json!({}));
    let mut defaulted_obj = object("CRCBundle", &name, defaulted);
    defaulted_obj.data["spec"]
        .as_object_mut()
        .unwrap()
        .remove("goldenVolumeSize");
    assert_rejected(
        create(&api, &defaulted_obj).await,
        "must be at least spec.build.vm.diskSize",
    );
    let exact = build_spec(json!({"goldenVolumeSize": "64Gi"}));
    create(&api, &object("CRCBundle", &name, exact))
        .await
        .expect("equal sizes accepted");
    let units =
        build_spec(json!({"goldenVolumeSize": "100G", "build": {"vm": {"diskSize": "90Gi"}}}));
    create(&api, &object("CRCBundle", &format!("{name}-u"), units))
        .await
        .expect("quantities compared across units (100G > 90Gi)");
}

/// Hardening item 2: a release image is a pull spec, never something `oc` could read as a flag.
#[tokio::test]
async fn release_images_are_pull_specs() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("release");
    for bad in [
        "--registry-config=/var/run/secrets/x",
        "-a",
        "quay.io/openshift-release-dev/ocp-release:4.22 --insecure",
        "Quay.io/Upper/case:1",
        "quay.io/openshift-release-dev/ocp-release@sha256:short",
    ] {
        let spec = build_spec(json!({"build": {"releaseImage": bad}}));
        assert_rejected(
            create(&api, &object("CRCBundle", &name, spec)).await,
            "releaseImage must be a pull spec",
        );
    }
    for (i, good) in [
        "quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64",
        "mirror.example.com:5000/ocp4/openshift4@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
        "registry.ci.openshift.org/ocp/release:4.22.0-0.nightly-2026-12-01-000000",
    ]
    .into_iter()
    .enumerate()
    {
        let spec = build_spec(json!({"build": {"releaseImage": good}}));
        create(&api, &object("CRCBundle", &format!("{name}-{i}"), spec))
            .await
            .unwrap_or_else(|e| panic!("{good} refused: {e}"));
    }
}

/// Hardening item 8: manifest ref lists are bounded and name each object once (a default kind
/// counts as written).
#[tokio::test]
async fn manifest_refs_are_bounded_and_listed_once() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("refs");
    let twice = build_spec(json!({"build": {"installationManifestRefs": [
        {"name": "mcs"}, {"name": "mcs", "kind": "ConfigMap"}]}}));
    assert_rejected(
        create(&api, &object("CRCBundle", &name, twice)).await,
        "installationManifestRefs names an object twice",
    );
    let twice = build_spec(json!({"build": {"postInstallManifestRefs": [
        {"name": "extra", "kind": "Secret"}, {"name": "extra", "kind": "Secret"}]}}));
    assert_rejected(
        create(&api, &object("CRCBundle", &name, twice)).await,
        "postInstallManifestRefs names an object twice",
    );
    let many: Vec<Value> = (0..17).map(|i| json!({"name": format!("m{i}")})).collect();
    let too_many = build_spec(
        json!({"goldenVolumeSize": "64Gi", "build": {"installationManifestRefs": many}}),
    );
    assert_rejected(
        create(&api, &object("CRCBundle", &name, too_many)).await,
        "must have at most 16 items",
    );
    // The same name as a ConfigMap and as a Secret are two objects.
    let both = build_spec(
        json!({"goldenVolumeSize": "64Gi", "build": {"installationManifestRefs": [
        {"name": "m"}, {"name": "m", "kind": "Secret"}]}}),
    );
    create(&api, &object("CRCBundle", &name, both))
        .await
        .expect("a ConfigMap and a Secret of one name are two inputs");
}

#[tokio::test]
async fn quantities_enums_and_durations_are_checked() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("fmt");
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                json!({"version": "4.16.0", "goldenVolumeSize": "lots"}),
            ),
        )
        .await,
        "goldenVolumeSize must be a Kubernetes quantity",
    );
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                json!({"version": "4.16.0", "arch": "s390x"}),
            ),
        )
        .await,
        "supported values: \"amd64\", \"arm64\"",
    );
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                build_spec(json!({"build": {"deadline": "forever"}})),
            ),
        )
        .await,
        "deadline must be a positive duration",
    );
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                build_spec(json!({"build": {"vm": {"memory": "a lot"}}})),
            ),
        )
        .await,
        "memory must be a Kubernetes quantity",
    );
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                build_spec(json!({"build": {"vm": {"cores": 0}}})),
            ),
        )
        .await,
        "should be greater than or equal to 1",
    );
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                build_spec(json!({"build": {"profile": "crc-libvirt"}})),
            ),
        )
        .await,
        "supported values: \"crc-kubevirt-v1\"",
    );
    assert_rejected(
        create(
            &api,
            &object(
                "CRCBundle",
                &name,
                build_spec(
                    json!({"build": {"installationManifestRefs": [{"name": "m", "kind": "Pod"}]}}),
                ),
            ),
        )
        .await,
        "supported values: \"ConfigMap\", \"Secret\"",
    );
}

#[tokio::test]
async fn defaults_are_applied() {
    let client = support::client().await;
    let typed: Api<CRCBundle> = Api::all(client.clone());
    let api = bundles(&client);
    let download = support::unique("def");
    create(
        &api,
        &object("CRCBundle", &download, json!({"version": "4.16.0"})),
    )
    .await
    .unwrap();
    let got = typed.get(&download).await.unwrap();
    assert_eq!(got.spec.arch.as_str(), "amd64");
    assert_eq!(got.spec.golden_volume_size, "35Gi");

    let built = support::unique("def-b");
    create(&api, &object("CRCBundle", &built, build_spec(json!({}))))
        .await
        .unwrap();
    let build = typed
        .get(&built)
        .await
        .unwrap()
        .spec
        .build
        .expect("build kept");
    assert_eq!(build.profile.as_str(), "crc-kubevirt-v1");
    assert_eq!(
        (
            build.vm.cores,
            build.vm.memory.as_str(),
            build.vm.disk_size.as_str()
        ),
        (6, "16Gi", "64Gi")
    );
    assert_eq!(build.deadline, "8h");
}

#[tokio::test]
async fn build_recipe_is_immutable() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("immut");
    create(
        &api,
        &object(
            "CRCBundle",
            &name,
            build_spec(json!({"storageClassName": "fast"})),
        ),
    )
    .await
    .unwrap();
    let patch = |spec: Value| {
        let api = api.clone();
        let name = name.clone();
        async move {
            api.patch(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": spec})),
            )
            .await
        }
    };
    assert_rejected(
        patch(json!({"build": {"vm": {"cores": 12}}})).await,
        "spec.build is immutable",
    );
    assert_rejected(
        patch(json!({"build": {"releaseImage": "quay.io/example/other:4.22"}})).await,
        "guestcluster.opdev.io/retry",
    );
    for change in [
        json!({"arch": "arm64"}),
        json!({"storageClassName": "slow"}),
        json!({"storageClassName": null}),
        json!({"goldenVolumeSize": "90Gi"}),
    ] {
        assert_rejected(patch(change).await, "of a built CRCBundle are immutable");
    }
    assert_rejected(
        patch(json!({"build": null, "version": "4.16.0"})).await,
        "spec.build cannot be added or removed",
    );
    // Metadata stays editable: the retry annotation is how a failed recipe is retried.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"guestcluster.opdev.io/retry": "1"}}})),
    )
    .await
    .expect("retry annotation accepted");
}

#[tokio::test]
async fn download_bundle_cannot_gain_a_build() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("gain");
    create(
        &api,
        &object(
            "CRCBundle",
            &name,
            json!({"version": "4.16.0", "goldenVolumeSize": "80Gi"}),
        ),
    )
    .await
    .unwrap();
    let add_build =
        json!({"spec": {"version": null, "build": build_spec(json!({}))["build"].clone()}});
    assert_rejected(
        api.patch(&name, &PatchParams::default(), &Patch::Merge(add_build))
            .await,
        "spec.build cannot be added or removed",
    );
    // A download bundle's mirror may still be changed (upstream ignores such edits anyway).
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"bundleURL": "https://mirror.example/b.crcbundle"}})),
    )
    .await
    .expect("download spec edits accepted");
}

#[tokio::test]
async fn template_selects_one_bundle() {
    let client = support::client().await;
    let ns = support::namespace(&client, "tmpl").await;
    let api = namespaced::<ClusterInstance>(&client, &ns);
    let both = json!({"type": "crc", "template": template(json!({"crcVersion": "4.22.7", "crcBundleRef": {"name": "custom"}}))});
    assert_rejected(
        create(&api, &object("ClusterInstance", "both", both)).await,
        "set either crcVersion",
    );
    let by_ref = json!({"type": "crc", "template": template(json!({"crcBundleRef": {"name": "crc-4-22-custom-a"}}))});
    create(&api, &object("ClusterInstance", "by-ref", by_ref))
        .await
        .expect("crcBundleRef accepted");
    let by_version = json!({"type": "crc", "template": template(json!({"crcVersion": "4.22.7"}))});
    create(&api, &object("ClusterInstance", "by-version", by_version))
        .await
        .expect("crcVersion accepted");

    let pools = namespaced::<ClusterPool>(&client, &ns);
    let both = json!({"type": "crc", "maxSize": 1, "template": template(json!({"crcVersion": "4.22.7", "crcBundleRef": {"name": "x"}}))});
    assert_rejected(
        create(&pools, &object("ClusterPool", "both", both)).await,
        "not both",
    );
}

#[tokio::test]
async fn template_fields_are_validated() {
    let client = support::client().await;
    let ns = support::namespace(&client, "tmplf").await;
    let api = namespaced::<ClusterInstance>(&client, &ns);
    let cases = [
        (json!({"cores": 0}), "should be greater than or equal to 1"),
        (
            json!({"memory": "sixteen"}),
            "memory must be a Kubernetes quantity",
        ),
        (
            json!({"rootVolumeSize": "big"}),
            "rootVolumeSize must be a Kubernetes quantity",
        ),
        (
            json!({"crcArch": "ppc64le"}),
            "supported values: \"amd64\", \"arm64\"",
        ),
        (json!({"ocpVersion": ""}), "should be at least 1 chars long"),
        (
            json!({"controllerAvailabilityPolicy": "Sometimes"}),
            "supported values: \"SingleReplica\", \"HighlyAvailable\"",
        ),
    ];
    for (i, (change, needle)) in cases.into_iter().enumerate() {
        let spec = json!({"type": "crc", "template": template(change)});
        assert_rejected(
            create(&api, &object("ClusterInstance", &format!("bad-{i}"), spec)).await,
            needle,
        );
    }
    let missing = json!({"type": "crc", "template": {"ocpVersion": "4.22.7", "cores": 4}});
    assert_rejected(
        create(&api, &object("ClusterInstance", "missing", missing)).await,
        "spec.template.memory: Required value",
    );
    let bad_type = json!({"type": "openshift", "template": template(json!({}))});
    assert_rejected(
        create(&api, &object("ClusterInstance", "type", bad_type)).await,
        "supported values: \"crc\", \"hcp\"",
    );
}

#[tokio::test]
async fn pool_sizes_are_consistent() {
    let client = support::client().await;
    let ns = support::namespace(&client, "pool").await;
    let api = namespaced::<ClusterPool>(&client, &ns);
    let pool = |max: i64, min: i64, spares: i64| json!({"type": "crc", "maxSize": max, "minSize": min, "warmSpares": spares, "template": template(json!({"crcVersion": "4.22.7"}))});
    assert_rejected(
        create(&api, &object("ClusterPool", "p1", pool(1, 2, 0))).await,
        "maxSize must be greater than or equal to minSize",
    );
    assert_rejected(
        create(&api, &object("ClusterPool", "p2", pool(2, 0, 3))).await,
        "maxSize must be greater than or equal to warmSpares",
    );
    assert_rejected(
        create(&api, &object("ClusterPool", "p3", pool(0, 0, 0))).await,
        "should be greater than or equal to 1",
    );
    assert_rejected(
        create(&api, &object("ClusterPool", "p4", pool(2, -1, 0))).await,
        "should be greater than or equal to 0",
    );
    create(&api, &object("ClusterPool", "ok", pool(3, 3, 3)))
        .await
        .expect("equal sizes accepted");

    let typed: Api<ClusterPool> = Api::namespaced(client.clone(), &ns);
    let mut minimal = pool(2, 0, 0);
    minimal
        .as_object_mut()
        .unwrap()
        .retain(|k, _| k != "minSize" && k != "warmSpares");
    create(&api, &object("ClusterPool", "defaults", minimal))
        .await
        .unwrap();
    let got = typed.get("defaults").await.unwrap();
    assert_eq!((got.spec.min_size, got.spec.warm_spares), (0, 0));
}

#[tokio::test]
async fn lease_ttl_is_what_go_parses() {
    let client = support::client().await;
    let ns = support::namespace(&client, "lease").await;
    let api = namespaced::<ClusterLease>(&client, &ns);
    let lease = |name: &str, ttl: &str| {
        object(
            "ClusterLease",
            name,
            json!({"poolRef": {"name": "p"}, "ttl": ttl}),
        )
    };
    // Go's time.ParseDuration grammar: sign, fractions, every unit spelling, a lone 0, and
    // metav1.Duration's own output (2h0m0s, 0s).
    let accepted = [
        "0",
        "-0",
        "0s",
        "2h0m0s",
        "1h30m",
        "+2h",
        ".5h",
        "1.h",
        "-5m",
        "1µs",
        "1μs",
        "1us",
        "7ns",
        "9223372036854775807ns",
        "-9223372036854775808ns",
    ];
    for (i, ttl) in accepted.into_iter().enumerate() {
        create(&api, &lease(&format!("ok-{i}"), ttl))
            .await
            .unwrap_or_else(|e| panic!("ttl {ttl:?} refused: {e}"));
    }
    let rejected = [
        "",
        "two hours",
        "5",
        "00",
        "1d",
        "1H",
        "+-1s",
        ".s",
        " 1s",
        "1e3s",
    ];
    for (i, ttl) in rejected.into_iter().enumerate() {
        assert_rejected(
            create(&api, &lease(&format!("bad-{i}"), ttl)).await,
            "ttl must be a Go duration such as 2h, 90m or 1h30m; 0 means no TTL",
        );
    }
    // Well formed but beyond an int64 of nanoseconds: Go refuses it, and so does CEL's
    // duration() (its error names our message too).
    for (i, ttl) in ["9223372036854775808ns", "2562048h"]
        .into_iter()
        .enumerate()
    {
        assert_rejected(
            create(&api, &lease(&format!("big-{i}"), ttl)).await,
            "ttl must be a Go duration",
        );
    }
    assert_rejected(
        create(
            &api,
            &object("ClusterLease", "nopool", json!({"ttl": "2h"})),
        )
        .await,
        "spec.poolRef: Required value",
    );
}

/// Object references are declared like Kubernetes' LocalObjectReference, as upstream declares
/// them: `name` may be omitted (it defaults to "") because Go clients write an unset non-pointer
/// reference as `{}`. Only our own references, which have no meaning without a name, require one.
#[tokio::test]
async fn references_may_be_empty_like_upstreams() {
    let client = support::client().await;
    let ns = support::namespace(&client, "refs").await;
    let instances = namespaced::<ClusterInstance>(&client, &ns);
    let empty_refs = json!({
        "type": "crc",
        "poolRef": {},
        "template": template(json!({
            "crcVersion": "4.22.7",
            "pullSecretRef": {},
            "bundleSSHKeyRef": {},
            "idmsRef": {},
            "hcpWorkerSSHKeyRef": {},
        })),
    });
    let stored = create(&instances, &object("ClusterInstance", "empty", empty_refs))
        .await
        .expect("empty references accepted");
    assert_eq!(stored.data["spec"]["poolRef"], json!({"name": ""}));
    for field in [
        "pullSecretRef",
        "bundleSSHKeyRef",
        "idmsRef",
        "hcpWorkerSSHKeyRef",
    ] {
        assert_eq!(
            stored.data["spec"]["template"][field],
            json!({"name": ""}),
            "{field} defaulted"
        );
    }
    let leases = namespaced::<ClusterLease>(&client, &ns);
    create(
        &leases,
        &object("ClusterLease", "nopoolname", json!({"poolRef": {}})),
    )
    .await
    .expect("a lease with poolRef {} is accepted, as upstream accepts it");

    let by_empty_ref = json!({"type": "crc", "template": template(json!({"crcBundleRef": {}}))});
    assert_rejected(
        create(
            &instances,
            &object("ClusterInstance", "bundle-ref", by_empty_ref),
        )
        .await,
        "crcBundleRef.name must name a CRCBundle",
    );
    let bundles = bundles(&client);
    let no_secret = build_spec(json!({"build": {"pullSecretRef": {"name": ""}}}));
    assert_rejected(
        create(
            &bundles,
            &object("CRCBundle", &support::unique("nosecret"), no_secret),
        )
        .await,
        "build.pullSecretRef.name must name a Secret",
    );
}

/// `status.hyperShift` and `status.provisioning.legacy`, written by the Go operator only, are in
/// the schema: the API server keeps them instead of pruning them.
#[tokio::test]
async fn go_operator_status_fields_are_kept() {
    let client = support::client().await;
    let ns = support::namespace(&client, "gostatus").await;
    let api = namespaced::<ClusterInstance>(&client, &ns);
    create(
        &api,
        &object(
            "ClusterInstance",
            "hcp",
            json!({"type": "hcp", "template": template(json!({}))}),
        ),
    )
    .await
    .unwrap();
    let status = json!({
        "hyperShift": {
            "hostedClusterName": "hcp",
            "hostedClusterNamespace": "clusters",
            "nodePoolNames": ["hcp-workers"],
        },
        "provisioning": {"startedAt": "2026-01-02T03:04:05Z", "legacy": true},
        "kubeconfigSecretRef": {},
    });
    let got = api
        .patch_status(
            "hcp",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": status})),
        )
        .await
        .expect("upstream status accepted");
    assert_eq!(got.data["status"]["hyperShift"], status["hyperShift"]);
    assert_eq!(got.data["status"]["provisioning"]["legacy"], true);
    assert_eq!(
        got.data["status"]["kubeconfigSecretRef"],
        json!({"name": ""})
    );
}

#[tokio::test]
async fn samples_are_accepted_as_written() {
    let client = support::client().await;
    let applied = support::apply_samples(&client)
        .await
        .expect("every sample is accepted");
    let kinds: Vec<&str> = applied
        .iter()
        .map(|o| o.types.as_ref().unwrap().kind.as_str())
        .collect();
    for kind in [
        "Namespace",
        "CRCBundle",
        "ClusterPool",
        "ClusterInstance",
        "ClusterLease",
    ] {
        assert!(kinds.contains(&kind), "samples include a {kind}: {kinds:?}");
    }
    // The mission's first example, exactly as users will write it.
    let built: Api<CRCBundle> = Api::all(client.clone());
    let bundle = built
        .get("crc-4-22-custom-a")
        .await
        .expect("the built-bundle example exists");
    let build = bundle.spec.build.expect("build source");
    assert_eq!((build.vm.cores, build.vm.memory.as_str()), (8, "24Gi"));
    assert_eq!(
        build.installation_manifest_refs[0].name,
        "custom-machineconfigs"
    );
}

#[tokio::test]
async fn status_is_a_subresource() {
    let client = support::client().await;
    let api = bundles(&client);
    let name = support::unique("status");
    create(
        &api,
        &object("CRCBundle", &name, json!({"version": "4.16.0"})),
    )
    .await
    .unwrap();
    // Status written through the main resource is dropped...
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Ready"}})),
    )
    .await
    .unwrap();
    assert!(api.get(&name).await.unwrap().data.get("status").is_none());
    // ...and accepted through /status, validated by the schema.
    let status = json!({"apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "CRCBundle", "status": {"phase": "Preparing", "observedGeneration": 1}});
    let got = api
        .patch_status(
            &name,
            &PatchParams::apply("admission-test"),
            &Patch::Apply(status),
        )
        .await
        .unwrap();
    assert_eq!(got.data["status"]["phase"], "Preparing");
    let bad = json!({"apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "CRCBundle", "status": {"phase": "Sleeping"}});
    assert_rejected(
        api.patch_status(
            &name,
            &PatchParams::apply("admission-test"),
            &Patch::Apply(bad),
        )
        .await,
        "supported values",
    );
}

#[tokio::test]
async fn kubectl_get_shows_printer_columns() {
    let client = support::client().await;
    let ns = support::namespace(&client, "cols").await;
    let expect = [
        (
            "crcb",
            None,
            // Upstream's columns first, in upstream's order; ours after them.
            "NAME VERSION ARCH PHASE OCPVERSION AGE SOURCE STAGE DISK SHA256",
        ),
        (
            "cpool",
            Some(&ns),
            "NAME TYPE MAX TOTAL TERMINATING AVAILABLE LEASED CAPACITY AGE",
        ),
        (
            "cinst",
            Some(&ns),
            "NAME TYPE PHASE VERSION TOPOLOGY LEASE AGE",
        ),
        (
            "clease",
            Some(&ns),
            "NAME PHASE INSTANCE VERSION TOPOLOGY AGE",
        ),
    ];
    let pools = namespaced::<ClusterPool>(&client, &ns);
    create(&pools, &object("ClusterPool", "p", json!({"type": "crc", "maxSize": 2, "template": template(json!({"crcVersion": "4.22.7"}))})))
        .await
        .unwrap();
    let instances = namespaced::<ClusterInstance>(&client, &ns);
    create(
        &instances,
        &object(
            "ClusterInstance",
            "i",
            json!({"type": "crc", "template": template(json!({}))}),
        ),
    )
    .await
    .unwrap();
    let leases = namespaced::<ClusterLease>(&client, &ns);
    create(
        &leases,
        &object("ClusterLease", "l", json!({"poolRef": {"name": "p"}})),
    )
    .await
    .unwrap();
    let bundles = bundles(&client);
    create(
        &bundles,
        &object(
            "CRCBundle",
            &support::unique("cols"),
            json!({"version": "4.16.0"}),
        ),
    )
    .await
    .unwrap();

    for (short, ns, header) in expect {
        let mut args = vec!["get", short];
        if let Some(ns) = ns {
            args.extend(["-n", ns.as_str()]);
        }
        let out = support::kubectl(&args).await;
        let first = out.lines().next().unwrap_or_default();
        let columns = first.split_whitespace().collect::<Vec<_>>().join(" ");
        assert_eq!(
            columns, header,
            "kubectl get {short} header; full output:\n{out}"
        );
        assert!(
            out.lines().count() >= 2,
            "kubectl get {short} lists the object:\n{out}"
        );
    }
}
