//! The typed subset of an Ignition (spec 3) config that profile `crc-kubevirt-v1` writes: the
//! guest files' builders ([`super::guest_files`]) fill it, [`super::ignition`] patches the
//! installer's live Ignition with it.

use serde::{Deserialize, Serialize};

/// The Ignition spec version the profile writes (MachineConfigs and the generator Ignition).
pub const SPEC_VERSION: &str = "3.2.0";

/// An Ignition config (the parts the profile writes).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Config {
    pub ignition: Version,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub passwd: Option<Passwd>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<Storage>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub systemd: Option<Systemd>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Version {
    pub version: String,
}

impl Default for Version {
    fn default() -> Self {
        Self {
            version: SPEC_VERSION.to_owned(),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Passwd {
    pub users: Vec<User>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct User {
    pub name: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ssh_authorized_keys: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Storage {
    pub files: Vec<File>,
}

/// A file Ignition writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct File {
    pub path: String,
    /// Decimal, as Ignition's JSON wants it (`0o644` = 420).
    pub mode: u32,
    pub overwrite: bool,
    pub contents: Resource,
}

impl File {
    /// A file holding `text`, replacing whatever is there.
    pub fn text(path: &str, mode: u32, text: &str) -> Self {
        Self {
            path: path.to_owned(),
            mode,
            overwrite: true,
            contents: Resource {
                source: data_url(text.as_bytes()),
            },
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub source: String,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Systemd {
    pub units: Vec<Unit>,
}

/// A systemd unit: enabled, masked, or only given drop-ins.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Unit {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mask: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropins: Vec<Dropin>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Dropin {
    pub name: String,
    pub contents: String,
}

impl Config {
    /// `files` and `units` in a config of the profile's spec version (empty parts omitted).
    pub fn of(files: Vec<File>, units: Vec<Unit>) -> Self {
        Self {
            ignition: Version::default(),
            passwd: None,
            storage: (!files.is_empty()).then_some(Storage { files }),
            systemd: (!units.is_empty()).then_some(Systemd { units }),
        }
    }

    pub(super) fn files(&self) -> &[File] {
        self.storage.as_ref().map_or(&[], |s| &s.files)
    }

    pub(super) fn units(&self) -> &[Unit] {
        self.systemd.as_ref().map_or(&[], |s| &s.units)
    }
}

/// An RFC 2397 `data:` URL of `bytes`, percent-encoded so the golden files stay readable.
pub fn data_url(bytes: &[u8]) -> String {
    let mut url = String::from("data:,");
    for &b in bytes {
        if b.is_ascii_alphanumeric() || b"-_.~/=:".contains(&b) {
            url.push(char::from(b));
        } else {
            url.push_str(&format!("%{b:02X}"));
        }
    }
    url
}

/// The bytes of an RFC 2397 `data:` URL, base64 (`;base64,`) or percent-encoded, as Ignition
/// reads them; `None` for anything else.
pub fn decode_data_url(url: &str) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let (meta, data) = url.strip_prefix("data:")?.split_once(',')?;
    if meta.ends_with(";base64") {
        return base64::engine::general_purpose::STANDARD.decode(data).ok();
    }
    let bytes = data.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn data_urls_round_trip_and_base64_ones_decode() {
        for text in [&b"a=b c\n"[..], b"100%;#", b"{}"] {
            assert_eq!(decode_data_url(&data_url(text)).as_deref(), Some(text));
        }
        assert_eq!(
            decode_data_url("data:text/plain;charset=utf-8;base64,aGk=").as_deref(),
            Some(&b"hi"[..])
        );
        assert_eq!(decode_data_url("data:,%ZZ"), None);
        assert_eq!(decode_data_url("https://example.com"), None);
    }

    #[test]
    fn data_urls_decode_to_the_text() {
        assert_eq!(data_url(b"a=b c\n"), "data:,a=b%20c%0A");
        assert_eq!(data_url(b"100%;#"), "data:,100%25%3B%23");
    }
}
