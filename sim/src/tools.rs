//! Fake `oc`, `openshift-install` and `coreos-installer` for Job pods (docs/simulation.md, "Fake
//! tools"). Production code calls these tools through one narrow module each; in the simulation
//! the kubelet puts `<root>/tools/bin` first on every Job process's `PATH`, so the product code
//! runs unchanged against small POSIX shell scripts that print the same shapes as the real tools.
//!
//! Layout under `<root>/tools/`:
//!
//! | path | what |
//! |---|---|
//! | `bin/oc`, `bin/coreos-installer` | on `PATH` |
//! | `libexec/openshift-install` | not on `PATH`: `oc adm release extract` writes a launcher for it |
//! | `lib/common.sh` | shared by the scripts |
//! | `lib/installer-certs` | the certificates the installer mints ([`crate::installer::certs_table`]) |
//! | `config.env` | optional settings ([`ToolsConfig`]); the process environment overrides them |
//! | `rhcos-live.iso` | the simulated RHCOS live ISO that the stream JSON points to |
//! | `calls.log` | one line per tool invocation, for debugging |

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::Error;
use crate::installer;

const COMMON: &str = include_str!("tools/common.sh");
const OC: &str = include_str!("tools/oc.sh");
const OPENSHIFT_INSTALL: &str = include_str!("tools/openshift-install.sh");
const COREOS_INSTALLER: &str = include_str!("tools/coreos-installer.sh");

/// First line of every simulated live ISO.
pub const ISO_MAGIC: &str = "GUESTCLUSTER-SIM-ISO v1";
/// Prefix of the ISO line that carries the embedded Ignition config (JSON on the rest of the line).
pub const ISO_IGNITION_PREFIX: &str = "ignition: ";

/// A simulated ISO larger than this is not one the fake tools wrote.
const ISO_MAX_BYTES: u64 = 64 << 20;

/// Where the tools of a simulation rooted at `root` live.
pub fn tools_dir(root: &Path) -> PathBuf {
    root.join("tools")
}

/// The directory the kubelet puts first on Job processes' `PATH`.
pub fn bin_dir(root: &Path) -> PathBuf {
    tools_dir(root).join("bin")
}

/// Settings of the fake tools, written to `<root>/tools/config.env`. `None` keeps the scripts'
/// default; an environment variable of the same name in the calling process wins over both.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ToolsConfig {
    /// `SIM_RELEASE_VERSION`: version of a release pullspec without a `X.Y.Z-<arch>` tag
    /// (default `4.22.0`).
    pub release_version: Option<String>,
    /// `SIM_RELEASE_DIGEST`: digest of a release pullspec given by tag (default: derived from the
    /// pullspec). A pullspec by digest always reports its own digest.
    pub release_digest: Option<String>,
    /// `SIM_RHCOS_VERSION`: RHCOS release in the stream JSON (default `9.6.20250101-0`).
    pub rhcos_version: Option<String>,
    /// `SIM_RHCOS_ISO_URL`: the ISO `location` in the stream JSON (default: a `file://` URL of
    /// `<root>/tools/rhcos-live.iso`). Point it at an HTTP server that serves that file when the
    /// code under test downloads over HTTP.
    pub rhcos_iso_url: Option<String>,
    /// `SIM_TOOLS_FAIL`: any call whose `<tool> <args>` starts with this fails.
    pub fail: Option<String>,
    /// `SIM_TOOLS_FAIL_EXIT`: the exit code of such a failure (default 1).
    pub fail_exit: Option<i32>,
}

impl ToolsConfig {
    fn render(&self) -> String {
        let exit = self.fail_exit.map(|code| code.to_string());
        let settings = [
            ("SIM_RELEASE_VERSION", &self.release_version),
            ("SIM_RELEASE_DIGEST", &self.release_digest),
            ("SIM_RHCOS_VERSION", &self.rhcos_version),
            ("SIM_RHCOS_ISO_URL", &self.rhcos_iso_url),
            ("SIM_TOOLS_FAIL", &self.fail),
            ("SIM_TOOLS_FAIL_EXIT", &exit),
        ];
        let mut out =
            String::from("# Settings of the simulation's fake tools (sim::tools::ToolsConfig).\n");
        for (name, value) in settings {
            if let Some(value) = value {
                // Only set when the environment did not: the environment wins.
                out.push_str(&format!(
                    "[ -n \"${{{name}+set}}\" ] || {name}={}\n",
                    shell_quote(value)
                ));
            }
        }
        out
    }
}

/// Installs the fake tools and the simulated live ISO under `<root>/tools` (idempotent: the
/// scripts are rewritten, `config.env` is left alone). Returns the directory for `PATH`.
pub fn install(root: &Path) -> Result<PathBuf, Error> {
    let dir = tools_dir(root);
    let quoted_dir = shell_quote(&dir.to_string_lossy());
    let scripts = [
        ("lib/common.sh", COMMON, 0o644),
        ("bin/oc", OC, 0o755),
        ("bin/coreos-installer", COREOS_INSTALLER, 0o755),
        ("libexec/openshift-install", OPENSHIFT_INSTALL, 0o755),
    ];
    for (path, text, mode) in scripts {
        let text = text
            .replace("@TOOLS_DIR@", &quoted_dir)
            .replace("@CERT_MAGIC@", &shell_quote(installer::CERT_MAGIC))
            .replace(
                "@LAUNCHER_MARKER@",
                &shell_quote(installer::LAUNCHER_MARKER),
            );
        write_atomically(&dir.join(path), text.as_bytes(), mode)?;
    }
    write_atomically(
        &dir.join("lib/installer-certs"),
        installer::certs_table().as_bytes(),
        0o644,
    )?;
    let iso = dir.join("rhcos-live.iso");
    if !iso.exists() {
        write_atomically(&iso, base_iso().as_bytes(), 0o644)?;
    }
    // Every pod's user appends to the call log: made writable by all, never truncated.
    let calls = dir.join("calls.log");
    let io = |source| Error::Io {
        path: calls.clone(),
        source,
    };
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&calls)
        .map_err(io)?;
    std::fs::set_permissions(&calls, std::fs::Permissions::from_mode(0o666)).map_err(io)?;
    Ok(bin_dir(root))
}

/// Writes the tools' settings; they apply to every later call.
pub fn write_config(root: &Path, config: &ToolsConfig) -> Result<(), Error> {
    write_atomically(
        &tools_dir(root).join("config.env"),
        config.render().as_bytes(),
        0o644,
    )
}

/// The content of the simulated RHCOS live ISO before an Ignition config is embedded.
fn base_iso() -> String {
    format!("{ISO_MAGIC}\nartifact: rhcos-live.x86_64.iso\n")
}

/// The Ignition config embedded in a simulated live ISO by the fake `coreos-installer iso
/// ignition embed`; `None` when the ISO carries none. Fails when `path` is not a simulated ISO.
pub fn read_embedded_ignition(path: &Path) -> Result<Option<serde_json::Value>, Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let mut lines = BufReader::new(file).take(ISO_MAX_BYTES).lines();
    match lines.next().transpose().map_err(io)? {
        Some(first) if first == ISO_MAGIC => {}
        _ => {
            return Err(Error::Other(format!(
                "{} is not a simulated live ISO (no {ISO_MAGIC:?} line)",
                path.display()
            )));
        }
    }
    for line in lines {
        let line = line.map_err(io)?;
        if let Some(json) = line.strip_prefix(ISO_IGNITION_PREFIX) {
            return serde_json::from_str(json)
                .map(Some)
                .map_err(|e| Error::Other(format!("{}: embedded Ignition: {e}", path.display())));
        }
    }
    Ok(None)
}

/// One `storage.files[]` entry of an Ignition config, its contents decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IgnitionFile {
    pub path: String,
    pub mode: Option<u32>,
    pub contents: Vec<u8>,
}

/// The files of an Ignition config by guest path. Contents must be `data:` URLs (base64 or
/// percent-encoded), which is all the fake installer writes.
pub fn ignition_files(
    ignition: &serde_json::Value,
) -> Result<BTreeMap<String, IgnitionFile>, Error> {
    let entries = ignition
        .pointer("/storage/files")
        .and_then(serde_json::Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let mut files = BTreeMap::new();
    for entry in entries {
        let path = entry
            .get("path")
            .and_then(serde_json::Value::as_str)
            .ok_or_else(|| Error::Other("Ignition file without a path".into()))?;
        let source = entry
            .pointer("/contents/source")
            .and_then(serde_json::Value::as_str)
            .unwrap_or("data:,");
        let contents = decode_data_url(source)
            .ok_or_else(|| Error::Other(format!("Ignition file {path}: unsupported source")))?;
        let mode = entry
            .get("mode")
            .and_then(serde_json::Value::as_u64)
            .and_then(|m| u32::try_from(m).ok());
        files.insert(
            path.to_owned(),
            IgnitionFile {
                path: path.to_owned(),
                mode,
                contents,
            },
        );
    }
    Ok(files)
}

/// Decodes an RFC 2397 `data:` URL.
fn decode_data_url(url: &str) -> Option<Vec<u8>> {
    let (header, data) = url.strip_prefix("data:")?.split_once(',')?;
    if header.ends_with(";base64") {
        decode_base64(data)
    } else {
        decode_percent(data)
    }
}

fn decode_percent(data: &str) -> Option<Vec<u8>> {
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

/// Standard base64 with optional padding (what `base64 -w0` writes).
fn decode_base64(data: &str) -> Option<Vec<u8>> {
    fn value(c: u8) -> Option<u32> {
        Some(match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        } as u32)
    }
    let data = data.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(data.len() * 3 / 4);
    for chunk in data.chunks(4) {
        let mut acc = 0u32;
        for (i, &c) in chunk.iter().enumerate() {
            acc |= value(c)? << (18 - 6 * i);
        }
        let bytes = acc.to_be_bytes();
        match chunk.len() {
            4 => out.extend_from_slice(&bytes[1..4]),
            3 => out.extend_from_slice(&bytes[1..3]),
            2 => out.push(bytes[1]),
            _ => return None,
        }
    }
    Some(out)
}

/// Single-quotes `value` for sh.
fn shell_quote(value: &str) -> String {
    format!("'{}'", value.replace('\'', r"'\''"))
}

/// Writes through a temporary file and a rename, so a process running a tool while the kubelet
/// reinstalls it never sees half a script.
fn write_atomically(path: &Path, contents: &[u8], mode: u32) -> Result<(), Error> {
    let io = |source| Error::Io {
        path: path.to_path_buf(),
        source,
    };
    let dir = path
        .parent()
        .ok_or_else(|| Error::Other(format!("{} has no parent directory", path.display())))?;
    std::fs::create_dir_all(dir).map_err(io)?;
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io)?;
    std::io::Write::write_all(&mut tmp, contents).map_err(io)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests;
