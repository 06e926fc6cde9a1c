use serde_json::{Value, json};

use super::*;

fn dv(spec: Value) -> Value {
    json!({"metadata": {"name": "crc-1-rootdisk", "namespace": "team-a"}, "spec": spec})
}

fn sized(source: Value) -> Value {
    json!({"source": source, "storage": {"resources": {"requests": {"storage": "80Gi"}}}})
}

/// The one denial of `spec`.
fn denial(spec: Value) -> Denial {
    let mut denials = validate(&dv(spec), None).expect_err("refused");
    assert_eq!(denials.len(), 1, "{denials:?}");
    denials.remove(0)
}

#[test]
fn the_operators_data_volumes_pass() {
    let clone = json!({
        "source": {"pvc": {"namespace": "guestcluster-system", "name": "crc-4.16.0-amd64-golden"}},
        "storage": {"resources": {"requests": {"storage": "80Gi"}}, "storageClassName": "fast"},
    });
    assert_eq!(validate(&dv(clone), None), Ok(()));
    let import = sized(json!({"http": {"url": "https://example.com/crc.qcow2"}}));
    assert_eq!(validate(&dv(import), None), Ok(()));
    assert_eq!(validate(&dv(sized(json!({"blank": {}}))), None), Ok(()));
}

#[test]
fn exactly_one_of_source_and_source_ref() {
    let neither = json!({"storage": {"resources": {"requests": {"storage": "1Gi"}}}});
    let d = denial(neither);
    assert_eq!(
        d.message,
        "Data volume should have either Source or SourceRef, or be externally populated"
    );
    assert_eq!(d.field, "spec.source");
    let mut both = sized(json!({"blank": {}}));
    both["sourceRef"] = json!({"kind": "DataSource", "name": "rhcos"});
    assert_eq!(
        denial(both).message,
        "Data volume should have either Source or SourceRef, or be externally populated"
    );
}

#[test]
fn exactly_one_source_kind() {
    assert_eq!(
        denial(sized(json!({}))).message,
        "Missing Data volume source"
    );
    let two = sized(json!({"blank": {}, "http": {"url": "http://x/y"}}));
    assert_eq!(denial(two).message, "Multiple Data volume sources");
}

#[test]
fn a_source_ref_names_a_data_source() {
    let with_ref = |r: Value| json!({"sourceRef": r, "storage": {}});
    assert_eq!(
        validate(
            &dv(with_ref(json!({"kind": "DataSource", "name": "rhcos"}))),
            None
        ),
        Ok(())
    );
    let d = denial(with_ref(json!({"name": "rhcos"})));
    assert_eq!(
        (d.field.as_str(), d.message.as_str()),
        ("spec.sourceRef.Kind", "Missing sourceRef kind")
    );
    assert_eq!(
        denial(with_ref(
            json!({"kind": "PersistentVolumeClaim", "name": "x"})
        ))
        .message,
        "Unsupported sourceRef kind PersistentVolumeClaim, currently only DataSource is supported"
    );
    assert_eq!(
        denial(with_ref(json!({"kind": "DataSource"}))).message,
        "Missing sourceRef name"
    );
}

#[test]
fn target_storage_is_pvc_or_storage() {
    let d = denial(json!({"source": {"blank": {}}}));
    assert_eq!(
        (d.field.as_str(), d.message.as_str()),
        ("spec.PVC", "Missing Data volume PVC")
    );
    let both = json!({
        "source": {"blank": {}},
        "pvc": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "storage": {"resources": {"requests": {"storage": "1Gi"}}},
    });
    assert_eq!(
        denial(both).message,
        "Duplicate storage definition, both target storage and target pvc defined"
    );
}

#[test]
fn a_size_is_required_above_zero_and_at_least_a_mebibyte() {
    let with_size = |size: Value| json!({"source": {"blank": {}}, "storage": {"resources": {"requests": {"storage": size}}}});
    let d = denial(with_size(json!("0")));
    assert_eq!(d.message, "Storage size can't be equal or less than zero");
    assert_eq!(d.field, "spec.Storage.resources.requests.size");
    assert_eq!(
        denial(with_size(json!("-1Gi"))).message,
        "Storage size can't be equal or less than zero"
    );
    assert_eq!(
        denial(with_size(json!("512Ki"))).message,
        "Storage size should be at least 1MiB"
    );
    assert_eq!(validate(&dv(with_size(json!("1Mi"))), None), Ok(()));
    assert_eq!(validate(&dv(with_size(json!(1048576))), None), Ok(()));
    assert_eq!(
        denial(json!({"source": {"blank": {}}, "storage": {}})).message,
        "Storage size is missing"
    );
    let pvc = json!({"source": {"blank": {}}, "pvc": {"accessModes": ["ReadWriteOnce"]}});
    let d = denial(pvc);
    assert_eq!(d.message, "PVC size is missing");
    assert_eq!(d.field, "spec.PVC.resources.requests.size");
}

#[test]
fn only_a_clone_through_storage_may_leave_the_size_out() {
    let clone = json!({"source": {"pvc": {"namespace": "ns", "name": "golden"}}, "storage": {}});
    assert_eq!(validate(&dv(clone), None), Ok(()));
    let snapshot = json!({"source": {"snapshot": {"namespace": "ns", "name": "s"}}, "storage": {}});
    assert_eq!(validate(&dv(snapshot), None), Ok(()));
    // Through `pvc` the size is always required.
    let clone = json!({
        "source": {"pvc": {"namespace": "ns", "name": "golden"}},
        "pvc": {"accessModes": ["ReadWriteOnce"]},
    });
    assert_eq!(denial(clone).message, "PVC size is missing");
}

#[test]
fn access_modes_of_pvc_and_storage() {
    let pvc = |modes: Value| {
        json!({"source": {"blank": {}},
               "pvc": {"accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}}})
    };
    assert_eq!(validate(&dv(pvc(json!(["ReadWriteMany"]))), None), Ok(()));
    let d = denial(pvc(json!([])));
    assert_eq!(
        d.message,
        "Required value: at least 1 access mode is required"
    );
    assert_eq!(d.field, "spec.PVC.accessModes");
    assert_eq!(
        denial(pvc(json!(["ReadWriteOnce", "ReadOnlyMany"]))).message,
        "PVC multiple accessModes"
    );
    let unsupported = "Unsupported value: \"RWO\": supported values: \"ReadOnlyMany\", \
                       \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\"";
    assert_eq!(denial(pvc(json!(["RWO"]))).message, unsupported);
    let storage = |modes: Value| {
        json!({"source": {"blank": {}},
               "storage": {"accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}}})
    };
    assert_eq!(validate(&dv(storage(json!([]))), None), Ok(()));
    assert_eq!(
        validate(
            &dv(storage(json!(["ReadWriteOnce", "ReadWriteMany"]))),
            None
        ),
        Ok(())
    );
    // CDI names the first mode, whichever is unknown.
    assert_eq!(
        denial(storage(json!(["RWO", "ReadWriteMany"]))).message,
        unsupported
    );
    assert_eq!(
        denial(storage(json!(["ReadWriteMany", "RWO"]))).message,
        unsupported.replace("\"RWO\": supported", "\"ReadWriteMany\": supported")
    );
}

#[test]
fn storage_class_names_are_bounded() {
    let spec = json!({"source": {"blank": {}}, "storage": {
        "storageClassName": "c".repeat(254),
        "resources": {"requests": {"storage": "1Gi"}},
    }});
    assert_eq!(
        denial(spec).message,
        "Name cannot be longer than 253 characters"
    );
}

#[test]
fn clone_and_snapshot_sources_name_namespace_and_name() {
    let d = denial(sized(json!({"pvc": {"namespace": "", "name": "golden"}})));
    assert_eq!(d.message, "spec.source.PVC source PVC is not valid");
    assert_eq!(d.field, "spec.source.PVC");
    assert_eq!(
        denial(sized(json!({"snapshot": {"namespace": "ns", "name": ""}}))).message,
        "spec.source.Snapshot source snapshot is not valid"
    );
}

#[test]
fn import_urls_are_absolute_http_https_or_gs() {
    let http = |url: &str| sized(json!({"http": {"url": url}}));
    for ok in [
        "http://x/disk.img",
        "https://x/disk.qcow2",
        "gs://bucket/disk",
    ] {
        assert_eq!(validate(&dv(http(ok)), None), Ok(()), "{ok}");
    }
    let d = denial(http(""));
    assert_eq!(d.message, "spec.source source URL is empty");
    assert_eq!(d.field, "spec.source.HTTP.url");
    assert_eq!(
        denial(http("example.com/disk.img")).message,
        "spec.source Invalid source URL: example.com/disk.img"
    );
    assert_eq!(
        denial(http("ftp://example.com/disk.img")).message,
        "spec.source Invalid source URL scheme: ftp://example.com/disk.img"
    );
    assert_eq!(
        denial(http("/disk.img")).message,
        "spec.source Invalid source URL scheme: /disk.img"
    );
    assert_eq!(
        denial(sized(json!({"s3": {"url": "file:///x"}}))).field,
        "spec.source.S3.url"
    );
}

#[test]
fn content_type_fits_the_source() {
    let mut spec = sized(json!({"blank": {}}));
    spec["contentType"] = json!("iso");
    assert_eq!(
        denial(spec.clone()).message,
        "ContentType not one of: kubevirt, archive"
    );
    spec["contentType"] = json!("archive");
    assert_eq!(
        denial(spec).message,
        "SourceType cannot be blank and the contentType be archive"
    );
    let mut registry = sized(json!({"registry": {"url": "docker://quay.io/x"}}));
    assert_eq!(validate(&dv(registry.clone()), None), Ok(()));
    registry["contentType"] = json!("archive");
    assert_eq!(
        denial(registry).message,
        "ContentType must be kubevirt when Source is Registry"
    );
}

#[test]
fn registry_sources() {
    let registry = |r: Value| sized(json!({"registry": r}));
    assert_eq!(
        denial(registry(json!({}))).message,
        "Source registry should have either URL or ImageStream"
    );
    assert_eq!(
        denial(registry(json!({"url": "https://quay.io/x"}))).message,
        "Illegal registry source URL scheme https://quay.io/x"
    );
    assert_eq!(
        denial(registry(
            json!({"url": "docker://quay.io/x", "pullMethod": "kubelet"})
        ))
        .message,
        "ImportMethod kubelet is neither pod, node or \"\""
    );
    assert_eq!(
        denial(registry(json!({"imageStream": "rhcos"}))).message,
        "Source registry ImageStream is supported only with node pull import method"
    );
    assert_eq!(
        validate(
            &dv(registry(
                json!({"imageStream": "rhcos", "pullMethod": "node"})
            )),
            None
        ),
        Ok(())
    );
}

#[test]
fn imageio_and_vddk_sources_need_their_fields() {
    assert_eq!(
        denial(sized(json!({"imageio": {"url": "https://x/api"}}))).message,
        "spec.source.Imageio source Imageio is not valid"
    );
    assert_eq!(
        denial(sized(
            json!({"imageio": {"url": "https://x/api", "secretRef": "s", "diskId": "d"}})
        ))
        .message,
        "spec.source.Imageio source Imageio requires CertConfigMap or InsecureSkipVerify"
    );
    assert_eq!(
        denial(sized(json!({"vddk": {"url": "https://x", "uuid": "u"}}))).message,
        "spec.source.VDDK source VDDK is not valid"
    );
}

#[test]
fn external_population_excludes_sources() {
    let populated = |target: Value| json!({"storage": target});
    let reference = json!({"apiGroup": "populator.example", "kind": "Disk", "name": "d"});
    let ok = populated(json!({"dataSourceRef": reference,
                             "resources": {"requests": {"storage": "1Gi"}}}));
    assert_eq!(validate(&dv(ok.clone()), None), Ok(()));
    let mut with_source = ok.clone();
    with_source["source"] = json!({"blank": {}});
    assert_eq!(
        denial(with_source).message,
        "External population is incompatible with Source and SourceRef"
    );
    let bad = populated(json!({"dataSource": {"kind": "Disk"},
                              "resources": {"requests": {"storage": "1Gi"}}}));
    let messages: Vec<String> = validate(&dv(bad), None)
        .unwrap_err()
        .into_iter()
        .map(|d| d.message)
        .collect();
    assert_eq!(
        messages,
        [
            "Required value: DataSource name",
            "Required value: DataSource apiGroup when kind is not 'PersistentVolumeClaim'",
        ]
    );
    let both = populated(json!({"dataSource": reference, "dataSourceRef": reference,
                               "resources": {"requests": {"storage": "1Gi"}}}));
    assert_eq!(
        denial(both).message,
        "DataSourceRef and DataSource must match"
    );
}

#[test]
fn the_spec_cannot_change() {
    let old = dv(sized(json!({"blank": {}})));
    assert_eq!(validate(&old, Some(&old)), Ok(()));
    let mut new = old.clone();
    new["metadata"]["labels"] = json!({"a": "b"});
    assert_eq!(validate(&new, Some(&old)), Ok(()), "metadata may change");
    new["spec"]["storage"]["resources"]["requests"]["storage"] = json!("100Gi");
    let denials = validate(&new, Some(&old)).unwrap_err();
    assert_eq!(
        denials,
        [Denial::new(
            CauseType::FieldValueDuplicate,
            "DataVolume.Spec",
            "Cannot update DataVolume Spec"
        )]
    );
}

#[test]
fn names_are_bounded() {
    let mut long = dv(sized(json!({"blank": {}})));
    long["metadata"]["name"] = json!("d".repeat(254));
    assert_eq!(
        validate(&long, None).unwrap_err()[0].message,
        "Name cannot be longer than 253 characters"
    );
}
