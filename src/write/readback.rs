//! Reading back what was written: the object the API server returns from a create or patch is
//! what it stored. A field that was sent but is not in it was dropped: pruned as unknown by a
//! structural schema, or ignored by a built-in type. On a real cluster that is a VM without the
//! setting we meant (the installed KubeVirt older than the field, or a builder's misspelling), so
//! [`super`] reports it. Pure: no I/O here.

use serde_json::Value;

/// Kinds compiled into kube-apiserver serialise through Go structs, whose `omitempty` drops
/// empty values without losing anything; custom resources store what was sent.
pub fn is_built_in(group: &str) -> bool {
    group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io")
}

/// What kind of write a body was sent with.
#[derive(Clone, Copy, Debug)]
pub struct Write<'a> {
    pub subresource: &'a str,
    pub built_in: bool,
}

/// Server-owned metadata: sent back as preconditions or copies, replaced by the server.
const SERVER_METADATA: [&str; 6] = [
    "resourceVersion",
    "managedFields",
    "creationTimestamp",
    "uid",
    "generation",
    "selfLink",
];

/// Paths present in `sent` and missing from `stored`. Values are not compared: defaulting and
/// normalisation (quantities, merged lists) may rewrite them; a missing key is what pruning does.
/// A status write keeps only `status`; any other write of a kind with a status subresource has
/// its `status` ignored by design, which is not a dropped field.
pub fn dropped_paths(write: &Write, sent: &Value, stored: &Value) -> Vec<String> {
    let (Value::Object(sent), Value::Object(stored)) = (sent, stored) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    for (key, value) in sent {
        let keep = match write.subresource {
            "status" => key == "status",
            "" => key != "status",
            // scale, binding, eviction…: bodies of another kind than the object.
            _ => false,
        };
        if !keep {
            continue;
        }
        let mut value = value.clone();
        if key == "metadata"
            && let Value::Object(meta) = &mut value
        {
            for server in SERVER_METADATA {
                meta.remove(server);
            }
        }
        // Every kind's metadata is Go's ObjectMeta, which omits empty values.
        let write = if key == "metadata" {
            &Write {
                built_in: true,
                ..*write
            }
        } else {
            write
        };
        missing(write, key, &value, stored.get(key), &mut found);
    }
    found
}

fn missing(
    write: &Write,
    path: &str,
    sent: &Value,
    stored: Option<&Value>,
    found: &mut Vec<String>,
) {
    // `null` deletes in a merge patch and means "unset" everywhere else.
    if sent.is_null() {
        return;
    }
    let Some(stored) = stored else {
        if !(only_deletes(sent) || write.built_in && is_empty(sent)) {
            found.push(path.to_owned());
        }
        return;
    };
    match (sent, stored) {
        (Value::Object(sent), Value::Object(stored)) => {
            // `$patch`, `$setElementOrder/…`, `$deleteFromPrimitiveList/…`: strategic merge
            // patch directives, not fields.
            for (key, value) in sent.iter().filter(|(k, _)| !k.starts_with('$')) {
                missing(
                    write,
                    &format!("{path}.{key}"),
                    value,
                    stored.get(key),
                    found,
                );
            }
        }
        (Value::Array(sent), Value::Array(stored)) => {
            for (i, value) in sent.iter().enumerate() {
                let path = format!("{path}[{i}]");
                let mut at_index = Vec::new();
                missing(write, &path, value, stored.get(i), &mut at_index);
                // Merged lists (strategic merge by key, server-side apply) may store the entry
                // at another index; it is lost only when no entry holds it.
                let elsewhere = || stored.iter().any(|other| holds(write, other, value));
                if !at_index.is_empty() && !elsewhere() {
                    found.extend(at_index);
                }
            }
        }
        _ => {}
    }
}

/// Whether `stored` holds every field of `sent` with the same value: how a list entry that moved
/// is recognised.
fn holds(write: &Write, stored: &Value, sent: &Value) -> bool {
    match (sent, stored) {
        (Value::Object(sent), Value::Object(stored)) => sent
            .iter()
            .filter(|(k, _)| !k.starts_with('$'))
            .all(|(key, value)| match stored.get(key) {
                Some(stored) => holds(write, stored, value),
                None => only_deletes(value) || (write.built_in && is_empty(value)),
            }),
        (Value::Array(sent), Value::Array(stored)) => sent
            .iter()
            .all(|value| stored.iter().any(|other| holds(write, other, value))),
        (Value::Null, _) => true,
        (sent, stored) => sent == stored,
    }
}

/// A merge patch's `{"a": {"b": null}}` removes and adds nothing.
fn only_deletes(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Object(o) => !o.is_empty() && o.values().all(only_deletes),
        _ => false,
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const CUSTOM: Write = Write {
        subresource: "",
        built_in: false,
    };

    #[test]
    fn a_pruned_field_is_reported_with_its_path() {
        let sent = json!({"spec": {"template": {"spec": {"domain": {
            "clock": {"utc": {"offsetSeconds": -86400}, "timzone": "UTC"},
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}},
                                  {"name": "iso", "cdrom": {"bus": "sata", "tray": "closed"}}]}}}}}});
        let stored = json!({"spec": {"template": {"spec": {"domain": {
            "clock": {"utc": {"offsetSeconds": -86400}},
            "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}},
                                  {"name": "iso", "cdrom": {"bus": "sata"}}]}}}}}});
        assert_eq!(
            dropped_paths(&CUSTOM, &sent, &stored),
            vec![
                "spec.template.spec.domain.clock.timzone",
                "spec.template.spec.domain.devices.disks[1].cdrom.tray",
            ]
        );
    }

    #[test]
    fn defaults_and_rewritten_values_are_not_findings() {
        let sent = json!({"metadata": {"name": "a", "resourceVersion": "7"},
                          "spec": {"size": "1024Mi", "list": [{"a": 1}]}});
        let stored = json!({"metadata": {"name": "a", "resourceVersion": "8", "uid": "u"},
                            "spec": {"size": "1Gi", "list": [{"a": 1, "b": 2}], "defaulted": true}});
        assert!(dropped_paths(&CUSTOM, &sent, &stored).is_empty());
    }

    #[test]
    fn merged_list_entries_may_move() {
        let sent = json!({"spec": {"containers": [{"name": "b", "image": "x"}],
                                   "$setElementOrder/containers": [{"name": "b"}]}});
        let stored = json!({"spec": {"containers": [{"name": "a"}, {"name": "b", "image": "x"}]}});
        assert!(dropped_paths(&CUSTOM, &sent, &stored).is_empty());
        let pruned = json!({"spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        assert_eq!(
            dropped_paths(&CUSTOM, &sent, &pruned),
            vec!["spec.containers[0].image"]
        );
    }

    #[test]
    fn a_missing_list_entry_is_reported() {
        let sent = json!({"spec": {"ports": [{"port": 1}, {"port": 2}]}});
        let stored = json!({"spec": {"ports": [{"port": 1}]}});
        assert_eq!(
            dropped_paths(&CUSTOM, &sent, &stored),
            vec!["spec.ports[1]"]
        );
    }

    #[test]
    fn status_counts_only_in_status_writes() {
        let sent = json!({"spec": {"x": 1}, "status": {"phase": "Ready"}});
        let main = dropped_paths(&CUSTOM, &sent, &json!({"spec": {"x": 1}}));
        assert!(
            main.is_empty(),
            "status of a main-resource write is ignored: {main:?}"
        );
        let status = Write {
            subresource: "status",
            ..CUSTOM
        };
        assert!(dropped_paths(&status, &sent, &json!({"spec": {}})).contains(&"status".into()));
        assert!(
            dropped_paths(&status, &sent, &json!({"status": {"phase": "Ready"}})).is_empty(),
            "a status write's spec is not its business"
        );
    }

    #[test]
    fn built_in_kinds_may_omit_empty_values_but_not_others() {
        let built_in = Write {
            subresource: "",
            built_in: true,
        };
        let sent = json!({"spec": {"hostNetwork": false, "volumes": [], "unknown": "x"}});
        assert_eq!(
            dropped_paths(&built_in, &sent, &json!({"spec": {}})),
            vec!["spec.unknown"]
        );
        assert_eq!(
            dropped_paths(&CUSTOM, &sent, &json!({"spec": {}})).len(),
            3,
            "a custom resource keeps empty values"
        );
    }

    #[test]
    fn metadata_omits_empty_values_for_every_kind() {
        let sent = json!({"metadata": {"finalizers": [], "labels": {"a": "b"}}});
        assert_eq!(
            dropped_paths(&CUSTOM, &sent, &json!({"metadata": {}})),
            vec!["metadata.labels"]
        );
    }

    #[test]
    fn nulls_delete_and_are_not_findings() {
        let sent = json!({"metadata": {"annotations": {"gone": null}}});
        assert!(dropped_paths(&CUSTOM, &sent, &json!({"metadata": {}})).is_empty());
    }
}
