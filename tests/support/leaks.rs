//! Looks for secret material where it must never appear: the statuses of our objects, Events,
//! pods' termination messages, and log files (the operator's and every Job pod's). The needles
//! come from the Secrets themselves, so whatever the scenario created is covered.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Event, Pod, Secret};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};

/// Distinctive pieces of every secret value in `namespaces`: a chunk of each private key's
/// base64 body, the `auth` tokens of pull secrets, and the client keys inside kubeconfigs.
/// Certificates and public keys are not secret and are left out.
pub async fn needles(client: &kube::Client, namespaces: &[&str]) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for ns in namespaces {
        let secrets = Api::<Secret>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list Secrets");
        for secret in secrets.items {
            let name = format!("{ns}/{}", secret.metadata.name.clone().unwrap_or_default());
            for (key, value) in secret.data.unwrap_or_default() {
                let text = String::from_utf8_lossy(&value.0).into_owned();
                for needle in secret_pieces(&key, &text) {
                    found.push((format!("{name}[{key}]"), needle));
                }
            }
        }
    }
    found
}

/// The pieces of one Secret value that would betray it.
fn secret_pieces(key: &str, text: &str) -> Vec<String> {
    if key.ends_with(".crt") || key.ends_with("publickey") || key == "ocpVersion" {
        return Vec::new();
    }
    let mut pieces: Vec<String> = pem_piece(text).into_iter().collect();
    // Pull secrets: each registry's auth token.
    if let Ok(json) = serde_json::from_str::<serde_json::Value>(text)
        && let Some(auths) = json.get("auths").and_then(|a| a.as_object())
    {
        pieces.extend(
            auths
                .values()
                .filter_map(|a| a.get("auth").and_then(|v| v.as_str()))
                .map(str::to_owned),
        );
    }
    // Kubeconfigs: the client key, and how it is written in the file.
    if let Ok(kubeconfig) = guestcluster::guest::kubeconfig::Kubeconfig::parse(text)
        && let Ok((_, client_key)) = kubeconfig.client_credentials()
    {
        pieces.extend(pem_piece(&client_key));
        let encoded = kubeconfig.value()["users"][0]["user"]["client-key-data"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        pieces.extend(encoded.get(128..168).map(str::to_owned));
    }
    pieces.retain(|p| p.len() >= 16);
    pieces
}

/// 40 characters from inside a PEM private key's body, past the prefix every key of its kind
/// shares (the format's magic, the algorithm's identifiers).
fn pem_piece(text: &str) -> Option<String> {
    if !text.contains("PRIVATE KEY-----") {
        return None;
    }
    let body: String = text
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .map(str::trim)
        .collect();
    body.get(64..104).map(str::to_owned)
}

/// Everything a leak could land in: the statuses of our kinds (all namespaces), Events and pod
/// termination messages in `namespaces`, and the `*.log` files under `log_dirs` plus `logs`.
pub async fn haystack(
    client: &kube::Client,
    namespaces: &[&str],
    log_dirs: &[&Path],
    logs: &[PathBuf],
) -> Vec<(String, String)> {
    let mut hay = Vec::new();
    for (kind, plural) in [
        ("CRCBundle", "crcbundles"),
        ("ClusterInstance", "clusterinstances"),
        ("ClusterPool", "clusterpools"),
        ("ClusterLease", "clusterleases"),
    ] {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("guestcluster.opdev.io", "v1alpha1", kind),
            plural,
        );
        let objects = Api::<DynamicObject>::all_with(client.clone(), &resource)
            .list(&ListParams::default())
            .await
            .expect("list our objects");
        for o in objects.items {
            let name = format!("{kind} {}", o.metadata.name.clone().unwrap_or_default());
            hay.push((name, o.data["status"].to_string()));
        }
    }
    for ns in namespaces {
        let events = Api::<Event>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list Events");
        for e in events.items {
            let text = format!(
                "{} {}",
                e.reason.unwrap_or_default(),
                e.message.unwrap_or_default()
            );
            hay.push((format!("Event in {ns}"), text));
        }
        let pods = Api::<Pod>::namespaced(client.clone(), ns)
            .list(&ListParams::default())
            .await
            .expect("list Pods");
        for p in pods.items {
            let name = format!("pod {ns}/{}", p.metadata.name.clone().unwrap_or_default());
            for status in p
                .status
                .and_then(|s| s.container_statuses)
                .unwrap_or_default()
            {
                let messages = [status.state, status.last_state]
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.terminated)
                    .filter_map(|t| t.message);
                for message in messages {
                    hay.push((format!("{name} termination message"), message));
                }
            }
        }
    }
    let mut files: Vec<PathBuf> = logs.to_vec();
    for dir in log_dirs {
        collect_logs(dir, &mut files);
    }
    assert!(
        !files.is_empty(),
        "no log files found under {log_dirs:?}: the leak check would prove nothing"
    );
    for file in files {
        if let Ok(bytes) = std::fs::read(&file) {
            hay.push((
                file.display().to_string(),
                String::from_utf8_lossy(&bytes).into_owned(),
            ));
        }
    }
    hay
}

fn collect_logs(dir: &Path, into: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_logs(&path, into);
        } else if path.extension().is_some_and(|e| e == "log") {
            into.push(path);
        }
    }
}

/// Fails naming every needle found and where.
pub fn assert_none(needles: &[(String, String)], haystack: &[(String, String)]) {
    assert!(!needles.is_empty(), "no secret material to look for");
    let leaks: Vec<String> = needles
        .iter()
        .flat_map(|(secret, needle)| {
            haystack
                .iter()
                .filter(move |(_, text)| text.contains(needle.as_str()))
                .map(move |(place, _)| format!("{secret} found in {place}"))
        })
        .collect();
    assert!(
        leaks.is_empty(),
        "secret material leaked:\n{}",
        leaks.join("\n")
    );
}
