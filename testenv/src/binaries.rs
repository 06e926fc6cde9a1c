//! Locating the control-plane binaries built by `tools/controlplane/build.sh`.

use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::Error;

/// Overrides the build script: a directory holding all of [`REQUIRED`].
pub const BIN_DIR_ENV: &str = "GUESTCLUSTER_CONTROLPLANE_BIN";

const REQUIRED: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kubectl",
];

/// The build script, relative to the project root.
const BUILD_SCRIPT: &str = "tools/controlplane/build.sh";

/// Resolves the binary directory: an explicit one, else `$GUESTCLUSTER_CONTROLPLANE_BIN`, else
/// the last stdout line of the build script (which builds on first use and is instant after).
pub(crate) async fn locate(explicit: Option<&Path>, project_dir: &Path) -> Result<PathBuf, Error> {
    if let Some(dir) = explicit {
        return checked(dir.to_path_buf(), "Options::bin_dir");
    }
    if let Some(dir) = std::env::var_os(BIN_DIR_ENV) {
        return checked(PathBuf::from(dir), BIN_DIR_ENV);
    }
    let dir = run_build_script(project_dir).await?;
    checked(dir, BUILD_SCRIPT)
}

async fn run_build_script(project_dir: &Path) -> Result<PathBuf, Error> {
    let script = project_dir.join(BUILD_SCRIPT);
    if !script.is_file() {
        return Err(missing(format!("{} does not exist", script.display())));
    }
    tracing::info!(script = %script.display(), "locating control plane binaries (the first build takes minutes)");
    let output = Command::new("bash")
        .arg(&script)
        .current_dir(project_dir)
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| missing(format!("cannot run {}: {e}", script.display())))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(missing(format!(
            "{} failed ({}):\n{}",
            script.display(),
            output.status,
            stderr.trim_end()
        )));
    }
    let stdout = String::from_utf8_lossy(&output.stdout);
    match stdout.lines().rev().find(|line| !line.trim().is_empty()) {
        Some(line) => Ok(PathBuf::from(line.trim())),
        None => Err(missing(format!(
            "{} printed no directory",
            script.display()
        ))),
    }
}

/// Accepts `dir` only if every required binary is there, naming `source` otherwise.
fn checked(dir: PathBuf, source: &str) -> Result<PathBuf, Error> {
    let absent: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|name| !is_executable(&dir.join(name)))
        .collect();
    if absent.is_empty() {
        Ok(dir)
    } else {
        Err(missing(format!(
            "{} (from {source}) lacks {}",
            dir.display(),
            absent.join(", ")
        )))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn missing(reason: String) -> Error {
    Error::BinariesMissing { reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_dir_names_what_is_missing_and_how_to_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = checked(dir.path().to_path_buf(), BIN_DIR_ENV).expect_err("empty dir");
        let text = err.to_string();
        assert!(text.contains("kube-apiserver"), "{text}");
        assert!(text.contains("make controlplane"), "{text}");
    }

    #[tokio::test]
    async fn missing_build_script_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = run_build_script(dir.path()).await.expect_err("no script");
        assert!(err.to_string().contains("make controlplane"), "{err}");
    }
}
