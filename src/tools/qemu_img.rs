//! `qemu-img`, found on `PATH`: image inspection (`info --output=json`) and format conversion.
//!
//! Images from outside (a downloaded bundle's `crc.qcow2`) are inspected with their format given
//! explicitly (`-f`), so qemu never guesses a format from content, and [`ImageInfo::external_files`]
//! names any backing or data file such an image would make qemu open.

use std::path::Path;
use std::process::Stdio;

/// The program name looked up on `PATH`.
pub const PROGRAM: &str = "qemu-img";

/// How much of a failing run's stderr an error keeps.
const STDERR_TAIL: usize = 2000;
/// `info` reads headers: a run this long is stuck (a hung NFS mount, a crafted image).
pub const INFO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);
/// `convert` writes the whole disk: generous, but not unbounded (the Job's deadline is 2 h).
pub const CONVERT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(90 * 60);

/// Why a `qemu-img` call failed.
#[derive(Debug, thiserror::Error)]
pub enum QemuImgError {
    #[error("cannot run {PROGRAM}: {0} (is it installed and on PATH?)")]
    Spawn(#[source] std::io::Error),
    #[error("{PROGRAM} {command} exited with {status}: {stderr}")]
    Failed {
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{PROGRAM} info printed unexpected output: {0}")]
    BadOutput(String),
    #[error("{PROGRAM} {command} did not finish within {seconds}s; stopped")]
    Timeout { command: String, seconds: u64 },
}

/// What `qemu-img info --output=json` says about an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    /// `qcow2`, `raw`, …
    pub format: String,
    /// Size of the disk the guest sees, in bytes.
    pub virtual_size: u64,
    /// Bytes allocated on the host, when reported.
    pub actual_size: Option<u64>,
    /// `backing-filename`, when the image has a backing file.
    pub backing_file: Option<String>,
    /// `format-specific.data.data-file` (qcow2 external data file), when set.
    pub data_file: Option<String>,
}

impl ImageInfo {
    /// The other files qemu would open to read this image (backing file, external data file).
    pub fn external_files(&self) -> Vec<&str> {
        self.backing_file
            .iter()
            .chain(self.data_file.iter())
            .map(String::as_str)
            .collect()
    }
}

/// Parses the JSON that `qemu-img info --output=json` prints for one image.
pub fn parse_info(json: &str) -> Result<ImageInfo, QemuImgError> {
    let value: serde_json::Value =
        serde_json::from_str(json).map_err(|e| QemuImgError::BadOutput(e.to_string()))?;
    let format = value
        .get("format")
        .and_then(|v| v.as_str())
        .filter(|s| !s.is_empty())
        .ok_or_else(|| QemuImgError::BadOutput("no \"format\"".into()))?
        .to_owned();
    let virtual_size = value
        .get("virtual-size")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| QemuImgError::BadOutput("no numeric \"virtual-size\"".into()))?;
    let text = |v: Option<&serde_json::Value>| {
        v.and_then(|v| v.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    Ok(ImageInfo {
        format,
        virtual_size,
        actual_size: value.get("actual-size").and_then(serde_json::Value::as_u64),
        backing_file: text(value.get("backing-filename")),
        data_file: text(value.pointer("/format-specific/data/data-file")),
    })
}

/// `qemu-img info --output=json <path>`: the format is probed. Use [`info_as`] for images from
/// outside.
pub async fn info(path: &Path) -> Result<ImageInfo, QemuImgError> {
    info_with(path, None).await
}

/// `qemu-img info --output=json -f <format> <path>`: fails unless the image is in `format`.
pub async fn info_as(path: &Path, format: &str) -> Result<ImageInfo, QemuImgError> {
    info_with(path, Some(format)).await
}

async fn info_with(path: &Path, format: Option<&str>) -> Result<ImageInfo, QemuImgError> {
    let mut command = tokio::process::Command::new(PROGRAM);
    command.args(["info", "--output=json"]);
    if let Some(format) = format {
        command.args(["-f", format]);
    }
    command.arg(path);
    let stdout = run(command, "info", INFO_TIMEOUT).await?;
    parse_info(&String::from_utf8_lossy(&stdout))
}

/// `qemu-img convert -f <from_format> -O <to_format> <from> <to>`. The output is written in
/// place: callers that must never expose a half-written image convert to a temporary name.
pub async fn convert(
    from: &Path,
    from_format: &str,
    to: &Path,
    to_format: &str,
) -> Result<(), QemuImgError> {
    let mut command = tokio::process::Command::new(PROGRAM);
    command
        .args(["convert", "-f", from_format, "-O", to_format])
        .arg(from)
        .arg(to);
    run(command, "convert", CONVERT_TIMEOUT).await.map(drop)
}

/// Runs `command`; past `limit` the process is killed (`kill_on_drop`) and the run fails.
async fn run(
    mut command: tokio::process::Command,
    name: &str,
    limit: std::time::Duration,
) -> Result<Vec<u8>, QemuImgError> {
    let running = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(limit, running)
        .await
        .map_err(|_| QemuImgError::Timeout {
            command: name.to_owned(),
            seconds: limit.as_secs(),
        })?
        .map_err(QemuImgError::Spawn)?;
    if !output.status.success() {
        return Err(QemuImgError::Failed {
            command: name.to_owned(),
            status: output.status,
            stderr: tail(&String::from_utf8_lossy(&output.stderr)),
        });
    }
    Ok(output.stdout)
}

fn tail(text: &str) -> String {
    let text = text.trim().replace('\n', "; ");
    let start = text.len().saturating_sub(STDERR_TAIL);
    let start = (start..=text.len())
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(text.len());
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_raw_image() {
        let info = parse_info(
            r#"{"virtual-size": 10485760, "filename": "r.img", "format": "raw",
                "actual-size": 4096, "dirty-flag": false}"#,
        )
        .unwrap();
        assert_eq!(
            info,
            ImageInfo {
                format: "raw".into(),
                virtual_size: 10 << 20,
                actual_size: Some(4096),
                backing_file: None,
                data_file: None,
            }
        );
        assert!(info.external_files().is_empty());
    }

    #[test]
    fn reports_backing_and_data_files_of_a_qcow2() {
        let info = parse_info(
            r#"{"backing-filename-format": "raw", "virtual-size": 1048576, "filename": "t.qcow2",
                "cluster-size": 65536, "format": "qcow2", "actual-size": 200704,
                "format-specific": {"type": "qcow2", "data": {"compat": "1.1",
                    "data-file": "/tmp/d.raw", "data-file-raw": false, "corrupt": false}},
                "full-backing-filename": "/etc/hostname", "backing-filename": "/etc/hostname",
                "dirty-flag": false}"#,
        )
        .unwrap();
        assert_eq!(info.format, "qcow2");
        assert_eq!(info.virtual_size, 1 << 20);
        assert_eq!(info.external_files(), ["/etc/hostname", "/tmp/d.raw"]);
    }

    #[test]
    fn rejects_output_without_size_or_format() {
        for bad in [
            "not json",
            r#"{"format": "raw"}"#,
            r#"{"virtual-size": 1}"#,
            r#"{"virtual-size": -1, "format": "raw"}"#,
            r#"[{"virtual-size": 1, "format": "raw"}]"#,
        ] {
            assert!(
                matches!(parse_info(bad), Err(QemuImgError::BadOutput(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn keeps_the_end_of_long_stderr() {
        let long = format!("{}\nthe reason", "x".repeat(5000));
        let kept = tail(&long);
        assert!(kept.len() <= STDERR_TAIL && kept.ends_with("; the reason"));
    }

    #[tokio::test]
    async fn a_run_past_its_limit_is_stopped_and_says_so() {
        let mut command = tokio::process::Command::new("sleep");
        command.arg("30");
        let err = run(command, "info", std::time::Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(
            matches!(&err, QemuImgError::Timeout { command, .. } if command == "info"),
            "{err}"
        );
    }
}
