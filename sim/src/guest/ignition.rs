//! Applying an Ignition config (spec 3.x) to a guest state, as the live ISO does at first boot:
//! users and their SSH keys, files and directories with `data:` URLs, systemd units (enable,
//! mask, contents). Remote sources and compressed contents are skipped with a warning: the
//! configs our installer produces embed everything.

use serde_json::Value;

use super::state::{File, GuestState, User};

/// Why a config could not be applied at all.
#[derive(Debug, thiserror::Error)]
pub enum IgnitionError {
    #[error("ignition config is not JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("ignition config: {0}")]
    Invalid(String),
}

/// Applies `config` to `state`; returns warnings for parts that were skipped.
pub fn apply(state: &mut GuestState, config: &str) -> Result<Vec<String>, IgnitionError> {
    let config: Value = serde_json::from_str(config)?;
    if !config.is_object() {
        return Err(IgnitionError::Invalid("top level must be an object".into()));
    }
    let mut warnings = Vec::new();
    for user in array(&config, &["passwd", "users"]) {
        let Some(name) = user.get("name").and_then(Value::as_str) else {
            warnings.push("passwd user without a name".to_string());
            continue;
        };
        let next_uid = 1000 + state.users.len() as u32;
        let entry = state.users.entry(name.to_string()).or_insert_with(|| User {
            uid: if name == "core" { 1000 } else { next_uid },
            sudo: name == "core",
            ..User::default()
        });
        if let Some(hash) = user.get("passwordHash").and_then(Value::as_str) {
            entry.password_hash = Some(hash.to_string());
        }
        for key in array(user, &["sshAuthorizedKeys"]) {
            if let Some(key) = key.as_str() {
                state.provision_key(name, key);
            }
        }
    }
    for dir in array(&config, &["storage", "directories"]) {
        if let Some(path) = dir.get("path").and_then(Value::as_str) {
            state.directories.insert(path.to_string());
        }
    }
    for file in array(&config, &["storage", "files"]) {
        let Some(path) = file.get("path").and_then(Value::as_str) else {
            warnings.push("storage file without a path".to_string());
            continue;
        };
        let mode = file
            .get("mode")
            .and_then(Value::as_u64)
            .map_or(0o644, |m| m as u32);
        let mut content = Vec::new();
        let mut parts = Vec::new();
        if let Some(contents) = file.get("contents") {
            parts.push(contents);
        }
        parts.extend(array(file, &["append"]));
        let mut skipped = false;
        for part in parts {
            match part_bytes(part) {
                Ok(bytes) => content.extend(bytes),
                Err(reason) => {
                    warnings.push(format!("{path}: {reason}"));
                    skipped = true;
                }
            }
        }
        if !skipped {
            // A certificate the simulated installer minted: `openssl` and the cluster see it.
            match crate::installer::parse_record(&content) {
                Some(cert) => {
                    state.certificates.insert(path.to_string(), cert);
                }
                None => {
                    state.certificates.remove(path);
                }
            }
            state
                .files
                .insert(path.to_string(), File::root(content, mode));
        }
    }
    for unit in array(&config, &["systemd", "units"]) {
        let Some(name) = unit.get("name").and_then(Value::as_str) else {
            warnings.push("systemd unit without a name".to_string());
            continue;
        };
        let entry = state.units.entry(name.to_string()).or_default();
        if let Some(enabled) = unit.get("enabled").and_then(Value::as_bool) {
            entry.enabled = enabled;
        }
        if let Some(mask) = unit.get("mask").and_then(Value::as_bool) {
            entry.masked = mask;
        }
        if let Some(contents) = unit.get("contents").and_then(Value::as_str) {
            state.files.insert(
                format!("/etc/systemd/system/{name}"),
                File::root(contents, 0o644),
            );
        }
    }
    Ok(warnings)
}

fn array<'a>(value: &'a Value, path: &[&str]) -> Vec<&'a Value> {
    let mut current = value;
    for key in path {
        match current.get(key) {
            Some(next) => current = next,
            None => return Vec::new(),
        }
    }
    current
        .as_array()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}

/// The bytes of one `contents`/`append` entry.
fn part_bytes(part: &Value) -> Result<Vec<u8>, String> {
    if part
        .get("compression")
        .and_then(Value::as_str)
        .is_some_and(|c| !c.is_empty())
    {
        return Err("compressed contents are not simulated".to_string());
    }
    match part.get("source").and_then(Value::as_str) {
        None => Ok(Vec::new()),
        Some(source) => decode_data_url(source),
    }
}

/// `data:[<mediatype>][;base64],<data>` (RFC 2397).
pub fn decode_data_url(url: &str) -> Result<Vec<u8>, String> {
    let Some(rest) = url.strip_prefix("data:") else {
        return Err(format!("source {url:.40} is not a data URL"));
    };
    let Some((meta, data)) = rest.split_once(',') else {
        return Err("data URL without ','".to_string());
    };
    if meta.split(';').any(|p| p == "base64") {
        guestcluster::guest::decode_base64(data).map_err(|e| e.to_string())
    } else {
        percent_decode(data)
    }
}

fn percent_decode(text: &str) -> Result<Vec<u8>, String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| format!("bad percent escape at {i}"))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn applies_users_files_and_units() {
        let config = r#"{
            "ignition": {"version": "3.2.0"},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA k"]}]},
            "storage": {
                "directories": [{"path": "/etc/extra"}],
                "files": [
                    {"path": "/etc/a", "mode": 384, "contents": {"source": "data:,hello%20world"}},
                    {"path": "/etc/b", "contents": {"source": "data:text/plain;base64,aGk="},
                     "append": [{"source": "data:,%21"}]},
                    {"path": "/etc/c", "contents": {"source": "https://example.com/x"}}
                ]
            },
            "systemd": {"units": [
                {"name": "chronyd.service", "mask": true},
                {"name": "x.service", "enabled": true, "contents": "[Unit]\n"}
            ]}
        }"#;
        let mut state = GuestState::default();
        let warnings = apply(&mut state, config).unwrap();
        assert_eq!(state.provisioned_keys("core"), vec!["ssh-ed25519 AAAA k"]);
        assert!(state.users["core"].sudo);
        assert_eq!(state.file("/etc/a"), Some(&b"hello world"[..]));
        assert_eq!(state.files["/etc/a"].mode, 0o600);
        assert_eq!(state.file("/etc/b"), Some(&b"hi!"[..]));
        assert!(state.file("/etc/c").is_none());
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(state.units["chronyd.service"].masked);
        assert!(state.units["x.service"].enabled);
        assert!(state.file("/etc/systemd/system/x.service").is_some());
        assert!(state.directories.contains("/etc/extra"));
    }

    #[test]
    fn rejects_non_json() {
        assert!(apply(&mut GuestState::default(), "not json").is_err());
        assert!(apply(&mut GuestState::default(), "[]").is_err());
    }
}
