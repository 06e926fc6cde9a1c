//! Renders the API reference `docs/api.md` from the CRDs of [`crate::api`].
//!
//! Like `crds/`, the file is generated, never edited by hand: `make crds` rewrites it (through
//! `guestcluster crdgen --api-docs docs/api.md`) and the test suite fails when it drifts.
//!
//! The walk is over the OpenAPI v3 schema of each CRD version: one Markdown table per object level
//! (`spec`, `spec.build`, `spec.build.vm`, `status.build.resources`, …), with the CEL admission rules
//! listed below the table of the level that declares them. Kubernetes types embedded in the API
//! (Affinity, Toleration, Condition) are named, not expanded: `kubectl explain` documents them.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, JSONSchemaProps,
    JSONSchemaPropsOrArray, JSONSchemaPropsOrBool, ValidationRule,
};

const INTRO: &str = "This reference is generated from the CustomResourceDefinitions of `src/api` (the schemas \
committed under `crds/`) by `guestcluster crdgen --api-docs docs/api.md`. Do not edit it: change the doc \
comments and attributes of the API types and run `make crds` to regenerate it. Each kind lists its \
`kubectl get` columns, then one table per object level of `spec` and `status`; the admission rules \
(CEL, enforced by the API server, no webhook) follow the table of the level that declares them. \
`kubectl explain <plural>.<field>` shows the same descriptions.";

/// The Markdown API reference of `crds`, in their order.
pub fn render(crds: &[CustomResourceDefinition]) -> String {
    let mut doc = Doc::default();
    doc.para("# guestcluster API reference");
    doc.para(INTRO);
    doc.para("## Kinds");
    doc.line("| Kind | Scope | Short names | Plural |");
    doc.line("|---|---|---|---|");
    for crd in crds {
        let names = &crd.spec.names;
        let short_names = names
            .short_names
            .iter()
            .flatten()
            .map(|n| code(n))
            .collect::<Vec<_>>();
        doc.line(format!(
            "| [{kind}](#{anchor}) | {scope} | {short} | {plural} |",
            kind = names.kind,
            anchor = names.kind.to_lowercase(),
            scope = crd.spec.scope,
            short = short_names.join(", "),
            plural = code(&names.plural),
        ));
    }
    doc.blank();
    for crd in crds {
        doc.para(format!("## {}", crd.spec.names.kind));
        for version in &crd.spec.versions {
            render_version(&mut doc, crd, version);
        }
    }
    doc.0
}

fn render_version(
    doc: &mut Doc,
    crd: &CustomResourceDefinition,
    version: &CustomResourceDefinitionVersion,
) {
    let plural = &crd.spec.names.plural;
    doc.para(format!("`apiVersion: {}/{}`", crd.spec.group, version.name));
    let root = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref());
    if let Some(description) = root.and_then(|r| r.description.as_deref()) {
        doc.para(inline(description));
    }
    if let Some(columns) = version
        .additional_printer_columns
        .as_ref()
        .filter(|c| !c.is_empty())
    {
        doc.para(format!("`kubectl get {plural}` columns (besides `NAME`):"));
        doc.line("| Column | Type | JSONPath |");
        doc.line("|---|---|---|");
        for column in columns {
            let wide = if column.priority.unwrap_or(0) > 0 {
                " (`-o wide`)"
            } else {
                ""
            };
            doc.line(format!(
                "| {}{wide} | {} | {} |",
                cell(&column.name),
                column.type_,
                cell(&code(&column.json_path))
            ));
        }
        doc.blank();
    }
    let Some(root) = root else { return };
    render_rules(doc, own_rules(root));
    let mut levels = Vec::new();
    collect_levels("", root, &mut levels);
    for level in levels {
        render_level(doc, &level);
    }
}

/// One table: the fields of an object level, shared by sibling fields of the same shape (such as
/// several references), whose paths it lists as `parent.{a, b}`.
struct Level<'a> {
    path: String,
    schemas: Vec<&'a JSONSchemaProps>,
}

/// The levels under `parent` (at `path`), depth first, in the schema's (alphabetical) field order.
fn collect_levels<'a>(path: &str, parent: &'a JSONSchemaProps, levels: &mut Vec<Level<'a>>) {
    let mut groups: Vec<(Vec<&str>, String, Vec<&JSONSchemaProps>)> = Vec::new();
    for (name, field) in properties(parent) {
        let Some((suffix, level)) = level_of(field) else {
            continue;
        };
        match groups
            .iter_mut()
            .find(|(_, s, members)| *s == suffix && same_shape(members[0], level))
        {
            Some((names, _, members)) => {
                names.push(name);
                members.push(level);
            }
            None => groups.push((vec![name], suffix, vec![level])),
        }
    }
    for (names, suffix, schemas) in groups {
        let names = match names.as_slice() {
            [name] => name.to_string(),
            _ => format!("{{{}}}", names.join(", ")),
        };
        let path = match path {
            "" => format!("{names}{suffix}"),
            _ => format!("{path}.{names}{suffix}"),
        };
        let first = schemas[0];
        levels.push(Level {
            path: path.clone(),
            schemas,
        });
        collect_levels(&path, first, levels);
    }
}

/// The object whose table documents `field`, with the path suffix leading to it: the field itself,
/// its items (`[]`) or its map values (`.*`). None for leaves and embedded Kubernetes types.
fn level_of(field: &JSONSchemaProps) -> Option<(String, &JSONSchemaProps)> {
    if embedded(field).is_some() {
        None
    } else if properties(field).next().is_some() {
        Some((String::new(), field))
    } else {
        let (suffix, element) = element(field)?;
        level_of(element).map(|(rest, level)| (format!("{suffix}{rest}"), level))
    }
}

/// Equal apart from the description and nullability, which the parent's table shows.
fn same_shape(a: &JSONSchemaProps, b: &JSONSchemaProps) -> bool {
    let shape = |s: &JSONSchemaProps| JSONSchemaProps {
        description: None,
        nullable: None,
        ..s.clone()
    };
    shape(a) == shape(b)
}

fn render_level(doc: &mut Doc, Level { path, schemas }: &Level) {
    let level = schemas[0];
    doc.para(format!("### `{path}`"));
    if let Some(description) = (level.description.as_deref())
        .filter(|d| schemas.iter().all(|s| s.description.as_deref() == Some(*d)))
    {
        doc.para(inline(description));
    }
    doc.line("| Field | Type | Required | Default | Constraints | Description |");
    doc.line("|---|---|---|---|---|---|");
    let required = level.required.as_deref().unwrap_or_default();
    let mut rules = own_rules(level);
    for (name, field) in properties(level) {
        let default = field.default.as_ref().map(|d| match &d.0 {
            serde_json::Value::String(s) if !s.is_empty() => code(s),
            other => code(&other.to_string()),
        });
        doc.line(format!(
            "| `{name}` | {} | {} | {} | {} | {} |",
            cell(&type_name(field)),
            if required.contains(name) { "yes" } else { "no" },
            cell(&default.unwrap_or_default()),
            cell(&constraints(field)),
            cell(field.description.as_deref().unwrap_or_default()),
        ));
        rules.extend(field_rules(name, field));
    }
    doc.blank();
    render_rules(doc, rules);
}

/// Rules of `schema` itself, not attributed to a field.
fn own_rules(schema: &JSONSchemaProps) -> Vec<(Option<String>, &ValidationRule)> {
    schema
        .x_kubernetes_validations
        .iter()
        .flatten()
        .map(|r| (None, r))
        .collect()
}

/// Rules of a field that has no table of its own (a leaf, or an array of leaves), named by field.
fn field_rules<'a>(
    name: &str,
    field: &'a JSONSchemaProps,
) -> Vec<(Option<String>, &'a ValidationRule)> {
    let mut rules = Vec::new();
    let (mut label, mut schema) = (name.to_owned(), Some(field));
    while let Some(current) =
        schema.filter(|s| embedded(s).is_none() && properties(s).next().is_none())
    {
        rules.extend(
            current
                .x_kubernetes_validations
                .iter()
                .flatten()
                .map(|r| (Some(label.clone()), r)),
        );
        schema = element(current).map(|(suffix, element)| {
            label.push_str(suffix);
            element
        });
    }
    rules
}

fn render_rules(doc: &mut Doc, rules: Vec<(Option<String>, &ValidationRule)>) {
    if rules.is_empty() {
        return;
    }
    doc.para("Admission rules:");
    for (field, rule) in rules {
        let field = field.map(|f| format!("`{f}`: ")).unwrap_or_default();
        let message = match (&rule.message, &rule.message_expression) {
            (Some(message), _) => inline(message),
            (None, Some(expression)) => format!("message computed by {}", code(expression)),
            (None, None) => "rule failed".to_owned(),
        };
        doc.line(format!("- {field}{message} — {}", code(&rule.rule)));
    }
    doc.blank();
}

/// The type column: `string (date-time)`, `array of object`, `map of string`, `Kubernetes Affinity`, …
fn type_name(schema: &JSONSchemaProps) -> String {
    if let Some(name) = embedded(schema) {
        return format!("Kubernetes {name}");
    }
    if schema.x_kubernetes_int_or_string == Some(true) {
        return "integer or string".to_owned();
    }
    let mut name = match (schema.type_.as_deref(), element(schema)) {
        (Some("array"), Some((_, items))) => format!("array of {}", type_name(items)),
        (Some("object"), Some((_, values))) => format!("map of {}", type_name(values)),
        (Some(type_), _) => type_.to_owned(),
        (None, _) => "any".to_owned(),
    };
    if let Some(format) = &schema.format {
        name.push_str(&format!(" ({format})"));
    }
    let values: Vec<String> = (schema.enum_.iter().flatten())
        .filter(|v| !v.0.is_null())
        .map(|v| {
            code(
                v.0.as_str()
                    .map_or_else(|| v.0.to_string(), str::to_owned)
                    .as_str(),
            )
        })
        .collect();
    if !values.is_empty() {
        name.push_str(&format!(", enum: {}", values.join(", ")));
    }
    name
}

fn constraints(schema: &JSONSchemaProps) -> String {
    let bound = |value: Option<f64>, exclusive: Option<bool>, inclusive: &str, strict: &str| {
        value.map(|v| {
            format!(
                "{}: {v}",
                if exclusive == Some(true) {
                    strict
                } else {
                    inclusive
                }
            )
        })
    };
    let count = |name: &str, value: Option<i64>| value.map(|v| format!("{name}: {v}"));
    [
        bound(
            schema.minimum,
            schema.exclusive_minimum,
            "minimum",
            "greater than",
        ),
        bound(
            schema.maximum,
            schema.exclusive_maximum,
            "maximum",
            "less than",
        ),
        count("minLength", schema.min_length),
        count("maxLength", schema.max_length),
        schema
            .pattern
            .as_ref()
            .map(|p| format!("pattern: {}", code(p))),
        count("minItems", schema.min_items),
        count("maxItems", schema.max_items),
    ]
    .into_iter()
    .flatten()
    .collect::<Vec<_>>()
    .join(", ")
}

/// The Kubernetes type `schema` embeds, if any: recognised by the opening words of the upstream
/// description (kept on list items) or, for Affinity (whose description is the field's), its fields.
fn embedded(schema: &JSONSchemaProps) -> Option<&'static str> {
    const BY_DESCRIPTION: [(&str, &str); 2] = [
        ("Condition contains details for one aspect", "Condition"),
        ("The pod this Toleration is attached to", "Toleration"),
    ];
    let description = schema.description.as_deref().unwrap_or_default();
    (BY_DESCRIPTION.iter())
        .find(|(prefix, _)| description.starts_with(prefix))
        .map(|(_, name)| *name)
        .or_else(|| {
            properties(schema)
                .any(|(name, _)| name == "nodeAffinity")
                .then_some("Affinity")
        })
}

/// The schema of an array's items (`[]`) or of a map's values (`.*`).
fn element(schema: &JSONSchemaProps) -> Option<(&'static str, &JSONSchemaProps)> {
    match (&schema.items, &schema.additional_properties) {
        (Some(JSONSchemaPropsOrArray::Schema(items)), _) => Some(("[]", items)),
        (_, Some(JSONSchemaPropsOrBool::Schema(values))) => Some((".*", values)),
        _ => None,
    }
}

fn properties(schema: &JSONSchemaProps) -> impl Iterator<Item = (&String, &JSONSchemaProps)> {
    schema.properties.iter().flatten()
}

/// Markdown text on one line: whitespace collapsed, `<` escaped outside code spans (so that
/// placeholders such as `crc-<version>` are not taken for HTML tags and dropped).
fn inline(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    (text.split('`').enumerate())
        .map(|(i, part)| {
            if i % 2 == 0 {
                part.replace('<', "\\<")
            } else {
                part.to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join("`")
}

/// [`inline`] text fit for a table cell: pipes escaped (GitHub needs that inside code spans too).
fn cell(text: &str) -> String {
    inline(text).replace('|', "\\|")
}

/// A code span around `text`, on one line.
fn code(text: &str) -> String {
    let text = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.contains('`') {
        format!("`` {text} ``")
    } else {
        format!("`{text}`")
    }
}

/// The Markdown being written.
#[derive(Default)]
struct Doc(String);

impl Doc {
    fn line(&mut self, line: impl AsRef<str>) {
        self.0.push_str(line.as_ref());
        self.0.push('\n');
    }

    fn blank(&mut self) {
        self.0.push('\n');
    }

    /// A line followed by a blank line.
    fn para(&mut self, line: impl AsRef<str>) {
        self.line(line);
        self.blank();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn docs() -> String {
        render(&crate::api::crds())
    }

    /// The table of `path` (from its heading to the next heading).
    fn section(doc: &str, path: &str) -> String {
        let heading = format!("### `{path}`\n");
        let start = doc
            .find(&heading)
            .unwrap_or_else(|| panic!("no table for {path}"));
        let rest = &doc[start + heading.len()..];
        rest[..rest.find("\n#").unwrap_or(rest.len())].to_owned()
    }

    #[test]
    fn lists_every_kind_with_scope_and_short_names() {
        let doc = docs();
        assert!(
            doc.contains("| [CRCBundle](#crcbundle) | Cluster | `crcb` | `crcbundles` |"),
            "{doc}"
        );
        assert!(
            doc.contains("| [ClusterPool](#clusterpool) | Namespaced | `cpool` | `clusterpools` |")
        );
        for kind in [
            "CRCBundle",
            "ClusterInstance",
            "ClusterLease",
            "ClusterPool",
        ] {
            assert!(
                doc.contains(&format!("\n## {kind}\n")),
                "no section for {kind}"
            );
        }
    }

    #[test]
    fn nested_levels_have_tables() {
        let doc = docs();
        for path in [
            "spec",
            "spec.build",
            "spec.build.vm",
            "spec.build.{installationManifestRefs, postInstallManifestRefs}[]",
            "status.build.resources",
            "status.build.resources.{buildVM, credentialsSecret, diskJob, guestPolicy, helperAccount, \
             helperJob, helperRole, helperRoleBinding, installISOPVC, installerAuthSecret, installerJob, isoPVC, \
             rootDataVolume, serviceAccount, validationDataVolume, validationJob, validationVM, workPVC}",
            "status.inputs.{installationManifests, postInstallManifests}[]",
        ] {
            section(&doc, path);
        }
        assert!(
            section(&doc, "spec.build.vm")
                .contains("| `cores` | integer (int32) | no | `6` | minimum: 1 |")
        );
    }

    #[test]
    fn defaults_enums_and_required_appear() {
        let spec = section(&docs(), "spec.build");
        assert!(
            spec.contains("| `deadline` | string | no | `8h` |"),
            "{spec}"
        );
        assert!(
            spec.contains("| `releaseImage` | string | yes |  | minLength: 1, maxLength: 512 |"),
            "{spec}"
        );
        assert!(spec.contains("enum: `crc-kubevirt-v1`"), "{spec}");
    }

    #[test]
    fn cel_rules_are_listed_where_declared() {
        let doc = docs();
        let spec = section(&doc, "spec");
        assert!(
            spec.contains(
                "- set exactly one source: spec.version (download a published CRC bundle)"
            ),
            "{spec}"
        );
        assert!(spec.contains("`has(self.version) != has(self.build)`"));
        assert!(spec.contains(
            "- `goldenVolumeSize`: goldenVolumeSize must be a Kubernetes quantity such as 35Gi"
        ));
        assert!(section(&doc, "spec.build").contains("- spec.build is immutable;"));
        assert!(
            section(&doc, "spec.build.vm")
                .contains("- `diskSize`: diskSize must be a Kubernetes quantity")
        );
    }

    #[test]
    fn embedded_kubernetes_types_are_named_not_expanded() {
        let doc = docs();
        assert!(
            section(&doc, "spec.build.placement").contains("| `affinity` | Kubernetes Affinity |")
        );
        assert!(
            section(&doc, "spec.build.placement")
                .contains("| `tolerations` | array of Kubernetes Toleration |")
        );
        assert!(
            section(&doc, "status").contains("| `conditions` | array of Kubernetes Condition |")
        );
        assert!(!doc.contains("nodeAffinity") && !doc.contains("lastTransitionTime"));
        assert!(!doc.contains("status.conditions[]"));
    }

    #[test]
    fn cells_stay_on_one_line_and_escape_markdown() {
        assert_eq!(cell("a |b\n  c `x|y` <v>"), "a \\|b c `x\\|y` \\<v>");
        assert_eq!(code("a `b`"), "`` a `b` ``");
        for line in docs().lines().filter(|l| l.starts_with("| `")) {
            assert_eq!(
                line.matches('|').count() - line.matches("\\|").count(),
                7,
                "{line}"
            );
        }
    }
}
