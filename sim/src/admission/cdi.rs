//! CDI's admission of DataVolumes (`datavolume-validate.cdi.kubevirt.io`, on create and update):
//! an unchanged spec on update, the target storage and its size, exactly one source (or
//! `sourceRef`, or external population) and the source's own fields. Messages and field paths
//! are CDI's (v1.66); like CDI, the first failing group of rules ends the check.

use serde_json::Value;

use super::{Amount, CauseType, Denial, FieldPath, Verdict, is_set, items, quantity, text};

/// Source fields of a DataVolume, exactly one of which must be set.
const SOURCES: [&str; 10] = [
    "http", "s3", "gcs", "registry", "pvc", "upload", "blank", "imageio", "vddk", "snapshot",
];
const ACCESS_MODES: [&str; 4] = [
    "ReadWriteOnce",
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOncePod",
];
/// `DNS1123SubdomainMaxLength`: the longest name CDI accepts.
const MAX_NAME_LEN: usize = 253;
/// CDI refuses disks smaller than KubeVirt accepts.
const MIN_SIZE: u64 = 1 << 20;

/// The admission of `dv`; `old` is the stored object on an update.
pub fn validate(dv: &Value, old: Option<&Value>) -> Verdict {
    if let Some(old) = old
        && dv["spec"] != old["spec"]
    {
        return Err(vec![Denial::new(
            CauseType::FieldValueDuplicate,
            "DataVolume.Spec",
            "Cannot update DataVolume Spec",
        )]);
    }
    if text(&dv["metadata"], "name").len() > MAX_NAME_LEN {
        return Err(vec![name_too_long()]);
    }
    let denials = spec(&FieldPath::new("spec"), &dv["spec"]);
    if denials.is_empty() {
        Ok(())
    } else {
        Err(denials)
    }
}

fn name_too_long() -> Denial {
    Denial::invalid(
        "",
        format!("Name cannot be longer than {MAX_NAME_LEN} characters"),
    )
}

/// `validateDataVolumeSpec`.
fn spec(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let (pvc, storage) = (is_set(spec, "pvc"), is_set(spec, "storage"));
    if !pvc && !storage {
        return vec![Denial::invalid(
            field.child("PVC"),
            "Missing Data volume PVC",
        )];
    }
    if pvc && storage {
        return vec![Denial::invalid(
            field.children(&["PVC", "Storage"]),
            "Duplicate storage definition, both target storage and target pvc defined",
        )];
    }
    let target = if pvc { &spec["pvc"] } else { &spec["storage"] };
    if let Some(denial) = size(field, spec, pvc, target) {
        return vec![denial];
    }
    if text(target, "storageClassName").len() > MAX_NAME_LEN {
        return vec![name_too_long()];
    }
    if let Some(denial) = access_modes(field, pvc, items(target, "accessModes")) {
        return vec![denial];
    }
    if is_set(target, "dataSource") || is_set(target, "dataSourceRef") {
        return external_population(field, spec, target);
    }
    let (source, source_ref) = (is_set(spec, "source"), is_set(spec, "sourceRef"));
    if source == source_ref {
        return vec![Denial::invalid(
            field.child("source"),
            "Data volume should have either Source or SourceRef, or be externally populated",
        )];
    }
    if source_ref {
        return source_ref_rules(field, &spec["sourceRef"])
            .into_iter()
            .collect();
    }
    source_rules(field, spec)
}

/// `validateStorageSize`: a size above zero and at least 1 MiB; only a clone (or `sourceRef`)
/// through `storage` may leave it out, taking the source's.
fn size(field: &FieldPath, spec: &Value, pvc: bool, target: &Value) -> Option<Denial> {
    let name = if pvc { "PVC" } else { "Storage" };
    let path = field.children(&[name, "resources", "requests", "size"]);
    let is_clone = is_set(spec, "sourceRef")
        || is_set(&spec["source"], "pvc")
        || is_set(&spec["source"], "snapshot");
    match target["resources"]["requests"].get("storage") {
        Some(requested) => match quantity(Some(requested)) {
            Some(Amount::Negative | Amount::Bytes(0)) => Some(Denial::invalid(
                path,
                format!("{name} size can't be equal or less than zero"),
            )),
            Some(Amount::Bytes(n)) if n < MIN_SIZE => Some(Denial::invalid(
                path,
                format!("{name} size should be at least 1MiB"),
            )),
            _ => None,
        },
        None if pvc || !is_clone => Some(Denial::invalid(path, format!("{name} size is missing"))),
        None => None,
    }
}

/// `spec.pvc` needs exactly one known access mode; `spec.storage` may have none or several,
/// all known.
fn access_modes(field: &FieldPath, pvc: bool, modes: &[Value]) -> Option<Denial> {
    let path = field.children(&["PVC", "accessModes"]);
    let unsupported = |mode: &str| {
        Denial::invalid(
            &path,
            format!(
                "Unsupported value: \"{mode}\": supported values: \"ReadOnlyMany\", \
                 \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
            ),
        )
    };
    let known = |m: &Value| m.as_str().is_some_and(|m| ACCESS_MODES.contains(&m));
    let first = modes.first().and_then(Value::as_str).unwrap_or_default();
    if pvc {
        return match modes.len() {
            0 => Some(Denial::invalid(
                &path,
                "Required value: at least 1 access mode is required",
            )),
            1 if known(&modes[0]) => None,
            1 => Some(unsupported(first)),
            _ => Some(Denial::invalid(&path, "PVC multiple accessModes")),
        };
    }
    // CDI names the first mode whichever one is unknown.
    (!modes.iter().all(known)).then(|| unsupported(first))
}

/// `validateExternalPopulation`: a populator fills the claim, so no source, and the two
/// references are well formed.
fn external_population(field: &FieldPath, spec: &Value, target: &Value) -> Vec<Denial> {
    let mut denials = Vec::new();
    if is_set(spec, "source") || is_set(spec, "sourceRef") {
        denials.push(Denial::invalid(
            field.child("source"),
            "External population is incompatible with Source and SourceRef",
        ));
    }
    let (data_source, data_source_ref) = (&target["dataSource"], &target["dataSourceRef"]);
    if !data_source.is_null() && !data_source_ref.is_null() {
        // CDI compares the two references with a deep equality across their different Go types,
        // which never holds: both together are always refused.
        denials.push(Denial::invalid(
            "",
            "DataSourceRef and DataSource must match",
        ));
    }
    if !data_source.is_null() {
        denials.extend(reference(
            &field.child("dataSource"),
            data_source,
            "DataSource",
        ));
    }
    if !data_source_ref.is_null() {
        if !text(data_source_ref, "namespace").is_empty() {
            denials.push(Denial::invalid(
                format!("{}.namespace[]", field.child("dataSourceRef")),
                "Invalid value: DataSourceRef namespace not supported",
            ));
        }
        denials.extend(reference(
            &field.child("dataSourceRef"),
            data_source_ref,
            "DataSourceRef",
        ));
    }
    denials
}

fn reference(field: &FieldPath, reference: &Value, what: &str) -> Vec<Denial> {
    let mut denials = Vec::new();
    let kind = text(reference, "kind");
    if text(reference, "name").is_empty() {
        denials.push(Denial::invalid(
            format!("{field}.name[]"),
            format!("Required value: {what} name"),
        ));
    }
    if kind.is_empty() {
        denials.push(Denial::invalid(
            field.child("kind"),
            format!("Required value: {what} kind"),
        ));
    }
    if text(reference, "apiGroup").is_empty() && kind != "PersistentVolumeClaim" {
        denials.push(Denial::invalid(
            format!("{field}.apiGroup[]"),
            format!("Required value: {what} apiGroup when kind is not 'PersistentVolumeClaim'"),
        ));
    }
    denials
}

/// `validateSourceRef`: a named DataSource.
fn source_ref_rules(field: &FieldPath, source_ref: &Value) -> Option<Denial> {
    let kind = text(source_ref, "kind");
    if kind.is_empty() {
        return Some(Denial::invalid(
            field.children(&["sourceRef", "Kind"]),
            "Missing sourceRef kind",
        ));
    }
    if kind != "DataSource" {
        return Some(Denial::invalid(
            field.children(&["sourceRef", "Kind"]),
            format!("Unsupported sourceRef kind {kind}, currently only DataSource is supported"),
        ));
    }
    if text(source_ref, "name").is_empty() {
        return Some(Denial::invalid(
            field.children(&["sourceRef", "Name"]),
            "Missing sourceRef name",
        ));
    }
    None
}

/// One source, a content type that fits it, and the source's own fields.
fn source_rules(field: &FieldPath, spec: &Value) -> Vec<Denial> {
    let source = &spec["source"];
    match SOURCES.iter().filter(|k| is_set(source, k)).count() {
        0 => {
            return vec![Denial::invalid(
                field.child("source"),
                "Missing Data volume source",
            )];
        }
        1 => {}
        _ => {
            return vec![Denial::invalid(
                field.child("source"),
                "Multiple Data volume sources",
            )];
        }
    }
    let content_type = text(spec, "contentType");
    if !["", "kubevirt", "archive"].contains(&content_type) {
        return vec![Denial::invalid(
            field.child("contentType"),
            "ContentType not one of: kubevirt, archive",
        )];
    }
    for (key, kind) in [("http", "HTTP"), ("s3", "S3"), ("gcs", "GCS")] {
        if is_set(source, key)
            && let Some(problem) = url_problem(text(&source[key], "url"))
        {
            return vec![Denial::invalid(
                field.children(&["source", kind, "url"]),
                format!("{} {problem}", field.child("source")),
            )];
        }
    }
    if is_set(source, "blank") && content_type == "archive" {
        return vec![Denial::invalid(
            field.child("contentType"),
            "SourceType cannot be blank and the contentType be archive",
        )];
    }
    if is_set(source, "registry") {
        if !["", "kubevirt"].contains(&content_type) {
            return vec![Denial::invalid(
                field.child("contentType"),
                "ContentType must be kubevirt when Source is Registry",
            )];
        }
        if let Some(denial) = registry(field, &source["registry"]) {
            return vec![denial];
        }
    }
    if is_set(source, "imageio") {
        let imageio = &source["imageio"];
        let path = field.children(&["source", "Imageio"]);
        if text(imageio, "secretRef").is_empty() || text(imageio, "diskId").is_empty() {
            return vec![Denial::invalid(
                &path,
                format!("{path} source Imageio is not valid"),
            )];
        }
        if text(imageio, "certConfigMap").is_empty()
            && imageio["insecureSkipVerify"].as_bool() != Some(true)
        {
            return vec![Denial::invalid(
                &path,
                format!("{path} source Imageio requires CertConfigMap or InsecureSkipVerify"),
            )];
        }
        if let Some(problem) = url_problem(text(imageio, "url")) {
            return vec![Denial::invalid(
                field.children(&["source", "ImageIO", "url"]),
                format!("{} {problem}", field.child("source")),
            )];
        }
    }
    if is_set(source, "vddk") {
        let vddk = &source["vddk"];
        if ["secretRef", "uuid", "backingFile", "thumbprint"]
            .iter()
            .any(|k| text(vddk, k).is_empty())
        {
            let path = field.children(&["source", "VDDK"]);
            return vec![Denial::invalid(
                &path,
                format!("{path} source VDDK is not valid"),
            )];
        }
    }
    for (key, kind, what) in [("pvc", "PVC", "PVC"), ("snapshot", "Snapshot", "snapshot")] {
        let reference = &source[key];
        if is_set(source, key)
            && (text(reference, "namespace").is_empty() || text(reference, "name").is_empty())
        {
            let path = field.children(&["source", kind]);
            return vec![Denial::invalid(
                &path,
                format!("{path} source {what} is not valid"),
            )];
        }
    }
    Vec::new()
}

/// What is wrong with an import URL (`validateSourceURL`): empty, not an absolute URL, or a
/// scheme other than `http`, `https` and `gs`.
fn url_problem(url: &str) -> Option<String> {
    if url.is_empty() {
        return Some("source URL is empty".to_owned());
    }
    let scheme = match scheme_of(url) {
        Some(scheme) => scheme,
        // Go's ParseRequestURI takes a bare absolute path, without a scheme.
        None if url.starts_with('/') => "",
        None => return Some(format!("Invalid source URL: {url}")),
    };
    (!["http", "https", "gs"].contains(&scheme))
        .then(|| format!("Invalid source URL scheme: {url}"))
}

/// The scheme of `url` (`http` of `http://…`), when it has a well-formed one.
fn scheme_of(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    (first_ok && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))).then_some(scheme)
}

/// `validateDataVolumeSourceRegistry`: a URL (docker or oci-archive) or an image stream pulled
/// by the node.
fn registry(field: &FieldPath, registry: &Value) -> Option<Denial> {
    let path = |leaf: &str| field.children(&["source", "Registry", leaf]);
    let url = registry.get("url").and_then(Value::as_str);
    let image_stream = registry.get("imageStream").and_then(Value::as_str);
    if url.is_some() == image_stream.is_some() {
        return Some(Denial::invalid(
            field.children(&["source", "Registry"]),
            "Source registry should have either URL or ImageStream",
        ));
    }
    if let Some(url) = url
        && !matches!(scheme_of(url), Some("docker" | "oci-archive"))
    {
        return Some(Denial::invalid(
            path("URL"),
            format!("Illegal registry source URL scheme {url}"),
        ));
    }
    let pull_method = registry.get("pullMethod").and_then(Value::as_str);
    if let Some(method) = pull_method
        && !["pod", "node"].contains(&method)
    {
        return Some(Denial::invalid(
            path("importMethod"),
            format!("ImportMethod {method} is neither pod, node or \"\""),
        ));
    }
    match image_stream {
        Some("") => Some(Denial::invalid(
            path("importMethod"),
            "Source registry ImageStream is not valid",
        )),
        Some(_) if pull_method != Some("node") => Some(Denial::invalid(
            path("importMethod"),
            "Source registry ImageStream is supported only with node pull import method",
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
