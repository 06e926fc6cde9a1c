//! Ignition (spec 3) for profile `crc-kubevirt-v1`: the typed subset the profile writes, the
//! generator boot's minimal Ignition, and the patches applied to the installer's live Ignition
//! (docs/design/certificates-and-time.md, docs/design/network.md).

use serde::Serialize;
use serde_json::Value;

use super::guest_files;
use super::ignition_config::{Config, Passwd, User};
use super::inputs::{Sensitive, SshPublicKey};

/// The user RHCOS logs SSH in as.
pub const CORE_USER: &str = "core";

/// Why the installer's live Ignition cannot be patched. No variant carries its contents (they
/// hold the pull secret and private keys).
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("the live Ignition is not a JSON object")]
    NotAnObject,
    #[error("the live Ignition has no ignition.version")]
    NoVersion,
    #[error("the live Ignition is spec {0}; only spec 3.x can be patched")]
    UnsupportedVersion(String),
    #[error("the live Ignition's {0} is not a list")]
    NotAList(&'static str),
    #[error("the live Ignition's {0} is not an object")]
    NotAnObjectAt(&'static str),
}

/// The Ignition embedded in the stock live ISO for the generator boot: the build's SSH key for
/// `core`, and chronyd masked so the guest keeps the day-behind clock KubeVirt gave it. Nothing
/// in it has a validity period, so the installer Job may create it on real time.
pub fn generator_ignition(build_key: &SshPublicKey) -> Config {
    let mut config = guest_files::chronyd_mask();
    config.passwd = Some(Passwd {
        users: vec![User {
            name: CORE_USER.to_owned(),
            ssh_authorized_keys: vec![build_key.as_str().to_owned()],
        }],
    });
    config
}

/// What the profile adds to the installer's live Ignition
/// (`bootstrap-in-place-for-live-iso.ign`): chronyd masked, the node IP on the dummy interface
/// with the kubelet drop-in, and dnsmasq for the CRC names — the same files the MachineConfigs
/// give the installed system.
pub fn live_patches() -> Config {
    let parts = [
        guest_files::chronyd_mask(),
        guest_files::node_ip(),
        guest_files::dnsmasq(),
    ];
    Config::of(
        parts.iter().flat_map(|c| c.files().to_vec()).collect(),
        parts.iter().flat_map(|c| c.units().to_vec()).collect(),
    )
}

/// The installer's live Ignition `installer_json` with [`live_patches`] merged in: a file of
/// the same path or a unit of the same name is replaced, everything else is kept as it was.
/// Patching a patched Ignition changes nothing.
pub fn patch_live_ignition(installer_json: &str) -> Result<Sensitive, Error> {
    let mut config: Value = serde_json::from_str(installer_json).map_err(|_| Error::NotAnObject)?;
    let root = config.as_object_mut().ok_or(Error::NotAnObject)?;
    let version = root
        .get("ignition")
        .and_then(|i| i.get("version"))
        .and_then(Value::as_str)
        .ok_or(Error::NoVersion)?;
    if !version.starts_with("3.") {
        return Err(Error::UnsupportedVersion(version.to_owned()));
    }
    let patches = live_patches();
    let files = list_at(root, "storage", "files")?;
    for file in patches.files() {
        replace_or_push(files, "path", &file.path, to_value(file));
    }
    let units = list_at(root, "systemd", "units")?;
    for unit in patches.units() {
        replace_or_push(units, "name", &unit.name, to_value(unit));
    }
    Ok(Sensitive::new(to_json(&config)))
}

fn to_value<T: Serialize>(value: &T) -> Value {
    serde_json::to_value(value).expect("Ignition types serialize to JSON")
}

fn to_json(value: &Value) -> String {
    serde_json::to_string(value).expect("a JSON value serializes")
}

/// `root.<section>.<list>`, created empty when missing.
fn list_at<'a>(
    root: &'a mut serde_json::Map<String, Value>,
    section: &'static str,
    list: &'static str,
) -> Result<&'a mut Vec<Value>, Error> {
    let section_value = root
        .entry(section)
        .or_insert_with(|| Value::Object(Default::default()));
    let section_map = section_value
        .as_object_mut()
        .ok_or(Error::NotAnObjectAt(section))?;
    section_map
        .entry(list)
        .or_insert_with(|| Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or(Error::NotAList(list))
}

fn replace_or_push(list: &mut Vec<Value>, key: &str, id: &str, value: Value) {
    match list
        .iter_mut()
        .find(|v| v.get(key).and_then(Value::as_str) == Some(id))
    {
        Some(existing) => *existing = value,
        None => list.push(value),
    }
}

#[cfg(test)]
mod tests {
    use super::super::golden::check_golden_text;
    use super::super::inputs::tests::SSH_KEY;
    use super::*;
    use serde_json::json;

    /// The shape of an installer's live Ignition: its own files and units, a pull secret, and a
    /// chronyd unit the profile must override.
    fn installer_ignition() -> String {
        json!({
            "ignition": {"version": "3.2.0"},
            "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": ["ssh-ed25519 AAAA build"]}]},
            "storage": {"files": [
                {"path": "/root/.docker/config.json", "mode": 384, "overwrite": true,
                 "contents": {"source": "data:,PLACEHOLDER-PULL-SECRET"}},
                {"path": "/usr/local/bin/bootkube.sh", "mode": 365,
                 "contents": {"source": "data:,%23!/bin/bash"}},
            ]},
            "systemd": {"units": [
                {"name": "bootkube.service", "enabled": true, "contents": "[Unit]\n"},
                {"name": "chronyd.service", "enabled": true},
            ]},
        })
        .to_string()
    }

    fn pretty(text: &str) -> String {
        let value: Value = serde_json::from_str(text).unwrap();
        serde_json::to_string_pretty(&value).unwrap() + "\n"
    }

    #[test]
    fn generator_ignition_matches_golden() {
        let key = SshPublicKey::parse(SSH_KEY).unwrap();
        let config = generator_ignition(&key);
        check_golden_text(
            "ignition/generator.ign",
            &(serde_json::to_string_pretty(&config).unwrap() + "\n"),
        );
    }

    #[test]
    fn patched_live_ignition_matches_golden_and_keeps_the_installers_content() {
        let patched = patch_live_ignition(&installer_ignition()).unwrap();
        check_golden_text("ignition/live-patched.ign", &pretty(patched.expose()));
        let value: Value = serde_json::from_str(patched.expose()).unwrap();
        let units = value["systemd"]["units"].as_array().unwrap();
        let chronyd: Vec<_> = units
            .iter()
            .filter(|u| u["name"] == "chronyd.service")
            .collect();
        assert_eq!(chronyd, [&json!({"name": "chronyd.service", "mask": true})]);
        assert!(units.iter().any(|u| u["name"] == "bootkube.service"));
        let files = value["storage"]["files"].as_array().unwrap();
        assert_eq!(files[0]["path"], "/root/.docker/config.json");
        assert_eq!(value["passwd"]["users"][0]["name"], "core");
        // Patching again changes nothing, and the result is never printed.
        let again = patch_live_ignition(patched.expose()).unwrap();
        assert_eq!(again.expose(), patched.expose());
        assert!(!format!("{again:?}").contains("PLACEHOLDER"));
    }

    #[test]
    fn an_ignition_without_storage_or_systemd_gets_them() {
        let patched = patch_live_ignition(r#"{"ignition":{"version":"3.4.0"}}"#).unwrap();
        let value: Value = serde_json::from_str(patched.expose()).unwrap();
        assert_eq!(
            value["storage"]["files"].as_array().unwrap().len(),
            live_patches().files().len()
        );
        assert_eq!(value["ignition"]["version"], "3.4.0");
    }

    #[test]
    fn what_cannot_be_patched_is_refused_without_its_contents() {
        let cases = [
            ("PLACEHOLDER", Error::NotAnObject),
            ("[]", Error::NotAnObject),
            (r#"{"passwd":{}}"#, Error::NoVersion),
            (
                r#"{"ignition":{"version":"2.2.0"}}"#,
                Error::UnsupportedVersion("2.2.0".into()),
            ),
            (
                r#"{"ignition":{"version":"3.2.0"},"storage":{"files":{}}}"#,
                Error::NotAList("files"),
            ),
            (
                r#"{"ignition":{"version":"3.2.0"},"systemd":[]}"#,
                Error::NotAnObjectAt("systemd"),
            ),
        ];
        for (input, expected) in cases {
            assert_eq!(patch_live_ignition(input).unwrap_err(), expected, "{input}");
        }
    }
}
