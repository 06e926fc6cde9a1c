//! The chart and a real `helm`, built once per machine from its pinned Go module by
//! `tools/helm/build.sh` (as the control plane is by `tools/controlplane/build.sh`).

use std::path::PathBuf;
use std::process::{Command, Output};
use std::sync::OnceLock;

/// The chart, relative to the project.
pub const CHART: &str = "helm/guestcluster-operator";

/// The `helm` binary; builds it on first use (minutes), then takes a moment.
pub fn helm_bin() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = super::project_dir().join("tools/helm/build.sh");
        let out = Command::new("bash")
            .arg(&script)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {}: {e}", script.display()));
        assert!(
            out.status.success(),
            "{} failed (it builds helm from the Go module proxy; `make helm` runs it): {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        let dir = stdout.lines().rev().find(|l| !l.trim().is_empty());
        PathBuf::from(dir.expect("build.sh prints the binary's directory").trim()).join("helm")
    })
}

/// Runs helm in the project directory with its state (cache, config, data) in a temporary
/// directory of the target dir, so nothing of a user's own helm setup takes part.
pub fn helm(args: &[&str]) -> Output {
    let home = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("helm-home");
    Command::new(helm_bin())
        .args(args)
        .current_dir(super::project_dir())
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("run helm")
}

/// Runs helm and returns its stdout; panics with stderr when it fails.
pub fn helm_ok(args: &[&str]) -> String {
    let out = helm(args);
    assert!(
        out.status.success(),
        "helm {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `helm template <release> <chart> --namespace <namespace>` with `--set`s.
pub fn template(release: &str, namespace: &str, sets: &[&str]) -> String {
    let mut args = vec!["template", release, CHART, "--namespace", namespace];
    for set in sets {
        args.extend(["--set", set]);
    }
    helm_ok(&args)
}
