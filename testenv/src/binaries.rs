//! Locating the binaries built from pinned upstream Go modules: the control plane's
//! (`tools/controlplane/build.sh`), KubeVirt's (`tools/kubevirt/build.sh`) and CDI's
//! (`tools/cdi/build.sh`).

use std::path::{Path, PathBuf};

use tokio::process::Command;

use super::Error;

/// Overrides the control plane's build script: a directory holding all of its binaries.
pub const BIN_DIR_ENV: &str = "GUESTCLUSTER_CONTROLPLANE_BIN";

/// Binaries built together by one script.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BinarySet {
    /// What they are, for messages.
    pub what: &'static str,
    /// Environment variable naming a directory to use instead of the build script's.
    pub env: &'static str,
    pub required: &'static [&'static str],
    /// The build script, relative to the project root.
    pub script: &'static str,
    /// The make target that runs the script.
    pub make_target: &'static str,
}

pub(crate) const CONTROL_PLANE: BinarySet = BinarySet {
    what: "control plane",
    env: BIN_DIR_ENV,
    required: &[
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kubectl",
    ],
    script: "tools/controlplane/build.sh",
    make_target: "controlplane",
};

pub(crate) const KUBEVIRT: BinarySet = BinarySet {
    what: "KubeVirt control plane",
    env: "GUESTCLUSTER_KUBEVIRT_BIN",
    required: &["virt-controller", "virt-api", "kubevirt-install"],
    script: "tools/kubevirt/build.sh",
    make_target: "kubevirt",
};

pub(crate) const CDI: BinarySet = BinarySet {
    what: "CDI control plane",
    env: "GUESTCLUSTER_CDI_BIN",
    required: &["cdi-controller", "cdi-apiserver", "cdi-install"],
    script: "tools/cdi/build.sh",
    make_target: "cdi",
};

/// Resolves the control plane's binary directory: an explicit one, else
/// `$GUESTCLUSTER_CONTROLPLANE_BIN`, else the last stdout line of the build script (which builds
/// on first use and is instant after).
pub(crate) async fn locate(explicit: Option<&Path>, project_dir: &Path) -> Result<PathBuf, Error> {
    if let Some(dir) = explicit {
        return checked(&CONTROL_PLANE, dir.to_path_buf(), "Options::bin_dir");
    }
    locate_set(&CONTROL_PLANE, project_dir).await
}

/// Resolves the directory of `set`: its environment variable, else its build script's.
pub(crate) async fn locate_set(set: &BinarySet, project_dir: &Path) -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os(set.env) {
        return checked(set, PathBuf::from(dir), set.env);
    }
    let dir = run_build_script(set, project_dir).await?;
    checked(set, dir, set.script)
}

async fn run_build_script(set: &BinarySet, project_dir: &Path) -> Result<PathBuf, Error> {
    let missing = |reason| missing(set, reason);
    let script = project_dir.join(set.script);
    if !script.is_file() {
        return Err(missing(format!("{} does not exist", script.display())));
    }
    tracing::info!(script = %script.display(), "locating {} binaries (the first build takes minutes)", set.what);
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
fn checked(set: &BinarySet, dir: PathBuf, source: &str) -> Result<PathBuf, Error> {
    let absent: Vec<&str> = set
        .required
        .iter()
        .copied()
        .filter(|name| !is_executable(&dir.join(name)))
        .collect();
    if absent.is_empty() {
        Ok(dir)
    } else {
        Err(missing(
            set,
            format!(
                "{} (from {source}) lacks {}",
                dir.display(),
                absent.join(", ")
            ),
        ))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn missing(set: &BinarySet, reason: String) -> Error {
    Error::BinariesMissing {
        what: set.what,
        reason,
        make_target: set.make_target,
        script: set.script,
        env: set.env,
        required: set.required.join(", "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn incomplete_dir_names_what_is_missing_and_how_to_build() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err =
            checked(&CONTROL_PLANE, dir.path().to_path_buf(), BIN_DIR_ENV).expect_err("empty dir");
        let text = err.to_string();
        assert!(text.contains("kube-apiserver"), "{text}");
        assert!(text.contains("make controlplane"), "{text}");
    }

    #[tokio::test]
    async fn missing_build_script_is_reported() {
        let dir = tempfile::tempdir().expect("tempdir");
        let err = run_build_script(&KUBEVIRT, dir.path())
            .await
            .expect_err("no script");
        assert!(err.to_string().contains("make kubevirt"), "{err}");
        assert!(
            err.to_string().contains("GUESTCLUSTER_KUBEVIRT_BIN"),
            "{err}"
        );
    }
}
