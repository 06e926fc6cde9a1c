//! The fake tools, run as the Job processes run them.

use std::path::Path;
use std::process::{Command, Output};

use super::*;

const DIGEST: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const BY_DIGEST: &str = "quay.io/example/ocp-release@sha256:1111111111111111111111111111111111111111111111111111111111111111";
const BY_TAG: &str = "quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64";

struct Tools {
    root: tempfile::TempDir,
}

impl Tools {
    fn new() -> Self {
        let root = tempfile::tempdir().expect("tempdir");
        install(root.path()).expect("install tools");
        Self { root }
    }

    fn root(&self) -> &Path {
        self.root.path()
    }

    fn work(&self) -> PathBuf {
        let dir = self.root().join("work");
        std::fs::create_dir_all(&dir).expect("work dir");
        dir
    }

    /// Runs `program` (a name on the tools' PATH or a path) with a clean environment.
    fn run(&self, program: &str, args: &[&str]) -> Output {
        self.run_with(program, args, &[])
    }

    fn run_with(&self, program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let path = format!(
            "{}:{}",
            bin_dir(self.root()).display(),
            std::env::var("PATH").unwrap_or_default()
        );
        Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", path)
            .envs(env.iter().copied())
            .current_dir(self.work())
            .output()
            .expect("run fake tool")
    }

    fn ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        assert!(
            out.status.success(),
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).expect("utf-8 output")
    }

    fn json(&self, program: &str, args: &[&str]) -> serde_json::Value {
        let out = self.ok(program, args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{program} {args:?}: {e}\n{out}"))
    }

    /// `oc adm release extract` into `<work>/bin`; returns the installer's path.
    fn extract_installer(&self, image: &str) -> String {
        let to = self.work().join("bin");
        self.ok(
            "oc",
            &[
                "adm",
                "release",
                "extract",
                "--command=openshift-install",
                &format!("--to={}", to.display()),
                image,
            ],
        );
        to.join("openshift-install").display().to_string()
    }
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
    std::fs::write(path, text).expect("write");
}

const INSTALL_CONFIG: &str = "\
apiVersion: v1
baseDomain: testing
metadata:
  name: crc
compute:
- name: worker
  replicas: 0
controlPlane:
  name: master
  replicas: 1
platform:
  none: {}
bootstrapInPlace:
  installationDisk: /dev/vda
pullSecret: '{\"auths\":{\"quay.io\":{\"auth\":\"eDp5\"}}}'
sshKey: 'ecdsa-sha2-nistp256 AAAAE2VjZHNh build@crc'
";

#[test]
fn release_info_by_digest_reports_the_digest_and_the_configured_version() {
    let tools = Tools::new();
    write_config(
        tools.root(),
        &ToolsConfig {
            release_version: Some("4.22.7".into()),
            ..ToolsConfig::default()
        },
    )
    .expect("config");
    let info = tools.json("oc", &["adm", "release", "info", BY_DIGEST, "-o", "json"]);
    assert_eq!(info["digest"], DIGEST);
    assert_eq!(info["metadata"]["version"], "4.22.7");
    assert_eq!(info["image"], BY_DIGEST);
}

#[test]
fn release_info_by_tag_derives_the_version_and_a_stable_digest() {
    let tools = Tools::new();
    let first = tools.json("oc", &["adm", "release", "info", "--output=json", BY_TAG]);
    let second = tools.json("oc", &["adm", "release", "info", "-o=json", BY_TAG]);
    assert_eq!(first["metadata"]["version"], "4.22.3");
    let digest = first["digest"].as_str().expect("digest");
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    assert_eq!(first["digest"], second["digest"]);
}

#[test]
fn the_environment_overrides_the_config_file() {
    let tools = Tools::new();
    write_config(
        tools.root(),
        &ToolsConfig {
            release_digest: Some(DIGEST.into()),
            release_version: Some("4.22.1".into()),
            ..ToolsConfig::default()
        },
    )
    .expect("config");
    let image = "quay.io/example/release:latest";
    let out = tools.run_with(
        "oc",
        &["adm", "release", "info", image, "-o", "json"],
        &[("SIM_RELEASE_VERSION", "4.23.0")],
    );
    let info: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(info["metadata"]["version"], "4.23.0");
    assert_eq!(info["digest"], DIGEST);
}

#[test]
fn a_registry_config_must_exist() {
    let tools = Tools::new();
    let out = tools.run(
        "oc",
        &[
            "adm",
            "release",
            "info",
            "-a",
            "/nonexistent",
            BY_TAG,
            "-o",
            "json",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let auth = tools.work().join("auth.json");
    write(&auth, r#"{"auths":{}}"#);
    let auth = auth.display().to_string();
    tools.json(
        "oc",
        &["adm", "release", "info", "-a", &auth, BY_TAG, "-o", "json"],
    );
}

#[test]
fn unknown_commands_and_flags_exit_2() {
    let tools = Tools::new();
    for (program, args) in [
        ("oc", vec!["get", "pods"]),
        ("oc", vec![]),
        ("oc", vec!["adm", "release", "info", BY_TAG, "-o", "yaml"]),
        ("oc", vec!["adm", "release", "info", "--bogus", BY_TAG]),
        ("coreos-installer", vec!["install", "/dev/vda"]),
    ] {
        let out = tools.run(program, &args);
        assert_eq!(out.status.code(), Some(2), "{program} {args:?}");
        assert!(!out.stderr.is_empty(), "{program} {args:?} says why");
    }
    let installer = tools.extract_installer(BY_TAG);
    assert_eq!(
        tools.run(&installer, &["destroy", "cluster"]).status.code(),
        Some(2)
    );
}

#[test]
fn openshift_install_is_only_reachable_through_extraction() {
    let tools = Tools::new();
    let out = tools.run("sh", &["-c", "command -v openshift-install"]);
    assert!(
        !out.status.success(),
        "openshift-install must not be on PATH"
    );
    let installer = tools.extract_installer(BY_DIGEST);
    let version = tools.ok(&installer, &["version"]);
    assert!(
        version.starts_with("openshift-install 4.22.0\n"),
        "{version}"
    );
    assert!(version.contains(&format!("@{DIGEST}")), "{version}");
}

#[test]
fn print_stream_json_points_at_the_iso_with_its_sha256() {
    let tools = Tools::new();
    let installer = tools.extract_installer(BY_TAG);
    let stream = tools.json(&installer, &["coreos", "print-stream-json"]);
    assert_eq!(stream["stream"], "rhcos-4.22");
    let disk = &stream["architectures"]["x86_64"]["artifacts"]["metal"]["formats"]["iso"]["disk"];
    let iso = tools_dir(tools.root()).join("rhcos-live.iso");
    assert_eq!(disk["location"], format!("file://{}", iso.display()));
    let sum = Command::new("sha256sum")
        .arg(&iso)
        .output()
        .expect("sha256sum");
    let sum = String::from_utf8_lossy(&sum.stdout);
    assert_eq!(disk["sha256"].as_str(), sum.split_whitespace().next());
}

#[test]
fn single_node_ignition_embeds_install_config_manifests_and_ssh_key() {
    let tools = Tools::new();
    let installer = tools.extract_installer(BY_DIGEST);
    let dir = tools.work().join("install");
    write(&dir.join("install-config.yaml"), INSTALL_CONFIG);
    let dir_arg = format!("--dir={}", dir.display());
    let before = crate::guest::time::host_now();
    tools.ok(&installer, &["create", "manifests", &dir_arg]);
    assert!(
        !dir.join("install-config.yaml").exists(),
        "consumed like the real installer"
    );
    assert!(dir.join("manifests/cluster-config.yaml").exists());
    let root_ca = crate::installer::parse_record(
        &std::fs::read(dir.join("tls/root-ca.crt")).expect("create manifests mints the root CA"),
    )
    .expect("a certificate record");
    assert!(root_ca.not_before >= before && root_ca.not_before <= crate::guest::time::host_now());
    assert_eq!(root_ca.not_after - root_ca.not_before, 3650 * 86_400);
    write(
        &dir.join("openshift/99-custom.yaml"),
        "kind: MachineConfig\n",
    );

    tools.ok(
        &installer,
        &[
            "create",
            "single-node-ignition-config",
            "--dir",
            &dir.display().to_string(),
        ],
    );

    let ign: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("bootstrap-in-place-for-live-iso.ign")).expect("ign"),
    )
    .expect("ignition JSON");
    assert_eq!(ign["ignition"]["version"], "3.2.0");
    assert_eq!(
        ign["passwd"]["users"][0]["sshAuthorizedKeys"][0],
        "ecdsa-sha2-nistp256 AAAAE2VjZHNh build@crc"
    );
    let files = ignition_files(&ign).expect("files");
    let text = |p: &str| String::from_utf8(files[p].contents.clone()).expect("utf-8");
    assert_eq!(text("/opt/openshift/install-config.yaml"), INSTALL_CONFIG);
    assert_eq!(
        text("/opt/openshift/openshift/99-custom.yaml"),
        "kind: MachineConfig\n"
    );
    assert!(text("/opt/openshift/manifests/cluster-config.yaml").contains("cluster-config-v1"));
    assert_eq!(text("/opt/openshift/installation-disk"), "/dev/vda\n");
    // Every installer certificate, stamped with the caller's (the pod's, the host's) clock.
    let after = crate::guest::time::host_now();
    for cert in crate::installer::INSTALLER_CERTS {
        let path = format!("/opt/openshift/tls/{}.crt", cert.name);
        let record = crate::installer::parse_record(&files[&path].contents).expect("a record");
        assert!((before..=after).contains(&record.not_before), "{path}");
        assert_eq!(
            record.not_after - record.not_before,
            cert.lifetime,
            "{path}"
        );
        assert_eq!(record.subject, cert.subject);
    }
    assert_eq!(
        crate::installer::parse_record(&files["/opt/openshift/tls/root-ca.crt"].contents),
        Some(root_ca),
        "the root CA of create manifests is kept"
    );
    assert_eq!(
        text("/opt/openshift/release-image"),
        format!("{BY_DIGEST}\n")
    );
    let kubeconfig = std::fs::read_to_string(dir.join("auth/kubeconfig")).expect("kubeconfig");
    assert!(
        kubeconfig.contains("server: https://api.crc.testing:6443"),
        "{kubeconfig}"
    );
    assert!(dir.join("auth/kubeadmin-password").exists());
    assert!(!dir.join("manifests").exists() && !dir.join("openshift").exists());
}

#[test]
fn single_node_ignition_requires_an_installation_disk() {
    let tools = Tools::new();
    let installer = tools.extract_installer(BY_DIGEST);
    let dir = tools.work().join("install");
    write(
        &dir.join("install-config.yaml"),
        &INSTALL_CONFIG.replace("  installationDisk: /dev/vda\n", ""),
    );
    let out = tools.run(
        &installer,
        &[
            "create",
            "single-node-ignition-config",
            "--dir",
            &dir.display().to_string(),
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("installationDisk"));
}

#[test]
fn iso_embed_carries_the_ignition_for_the_guest() {
    let tools = Tools::new();
    let iso = tools_dir(tools.root()).join("rhcos-live.iso");
    assert_eq!(read_embedded_ignition(&iso).expect("base ISO"), None);
    let ign = tools.work().join("config.ign");
    write(
        &ign,
        "{\"ignition\":{\"version\":\"3.2.0\"},\n\"storage\":{}}\n",
    );
    let out = tools.work().join("disk.img");
    let (ign_s, out_s, iso_s) = (
        ign.display().to_string(),
        out.display().to_string(),
        iso.display().to_string(),
    );
    tools.ok(
        "coreos-installer",
        &[
            "iso", "ignition", "embed", "-i", &ign_s, "-o", &out_s, &iso_s,
        ],
    );
    let embedded = read_embedded_ignition(&out)
        .expect("read")
        .expect("embedded");
    assert_eq!(embedded["ignition"]["version"], "3.2.0");
    assert_eq!(
        read_embedded_ignition(&iso).expect("base ISO untouched"),
        None
    );

    let again = tools.run(
        "coreos-installer",
        &["iso", "ignition", "embed", "-i", &ign_s, &out_s],
    );
    assert_eq!(
        again.status.code(),
        Some(1),
        "refuses to overwrite without -f"
    );
    tools.ok(
        "coreos-installer",
        &["iso", "ignition", "embed", "-f", "-i", &ign_s, &out_s],
    );
    let shown = tools.json("coreos-installer", &["iso", "ignition", "show", &out_s]);
    assert_eq!(shown, embedded);
}

#[test]
fn reading_ignition_from_something_else_fails() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("disk.img");
    write(&path, "not an iso\n");
    assert!(read_embedded_ignition(&path).is_err());
    assert!(read_embedded_ignition(&dir.path().join("missing")).is_err());
}

#[test]
fn a_configured_failure_fails_matching_calls_only() {
    let tools = Tools::new();
    write_config(
        tools.root(),
        &ToolsConfig {
            fail: Some("oc adm release extract".into()),
            fail_exit: Some(7),
            ..ToolsConfig::default()
        },
    )
    .expect("config");
    tools.json("oc", &["adm", "release", "info", BY_TAG, "-o", "json"]);
    let out = tools.run(
        "oc",
        &[
            "adm",
            "release",
            "extract",
            "--command=openshift-install",
            BY_TAG,
        ],
    );
    assert_eq!(out.status.code(), Some(7));
    let calls = std::fs::read_to_string(tools_dir(tools.root()).join("calls.log")).expect("log");
    assert_eq!(calls.lines().count(), 2, "{calls}");
}

#[test]
fn install_is_idempotent_and_keeps_the_config() {
    let tools = Tools::new();
    let config = ToolsConfig {
        release_version: Some("it's 4.22".into()),
        ..ToolsConfig::default()
    };
    write_config(tools.root(), &config).expect("config");
    install(tools.root()).expect("second install");
    let info = tools.json("oc", &["adm", "release", "info", BY_DIGEST, "-o", "json"]);
    assert_eq!(info["metadata"]["version"], "it's 4.22");
}

#[test]
fn decodes_data_urls() {
    assert_eq!(
        decode_data_url("data:;base64,aGVsbG8="),
        Some(b"hello".to_vec())
    );
    assert_eq!(decode_data_url("data:;base64,aGk"), Some(b"hi".to_vec()));
    assert_eq!(decode_data_url("data:,a%20b"), Some(b"a b".to_vec()));
    assert_eq!(decode_data_url("data:;base64,a"), None);
    assert_eq!(decode_data_url("https://example.com"), None);
}
