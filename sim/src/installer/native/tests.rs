//! The Rust-native installer against the shell fake: same inputs, equivalent outputs.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use super::*;
use crate::installer::{parse_launcher, parse_record};
use crate::tools;

const IMAGE: &str = "quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64";
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
networking:
  networkType: OVNKubernetes
  clusterNetwork:
  - cidr: 10.217.0.0/22
    hostPrefix: 23
  serviceNetwork:
  - 10.217.4.0/23
  machineNetwork:
  - cidr: 192.168.126.0/24
bootstrapInPlace:
  installationDisk: /dev/vda
pullSecret: '{\"auths\":{\"quay.io\":{\"auth\":\"eDp5\"}}}'
sshKey: 'ecdsa-sha2-nistp256 AAAAE2VjZHNh build@crc'
";

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// The shell fake, as a Job pod runs it: extracted by `oc`, run with a clean environment.
fn run_shell(root: &Path, dir: &Path, env: &[(&str, &str)]) -> String {
    tools::install(root).unwrap();
    let bin = root.join("extracted");
    let path = format!(
        "{}:{}",
        tools::bin_dir(root).display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |program: &Path, args: &[&str]| {
        let out = Command::new(program)
            .args(args)
            .env_clear()
            .env("PATH", &path)
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{program:?} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(
        &tools::bin_dir(root).join("oc"),
        &[
            "adm",
            "release",
            "extract",
            "--command=openshift-install",
            &format!("--to={}", bin.display()),
            IMAGE,
        ],
    );
    let installer = bin.join("openshift-install");
    let dir_arg = format!("--dir={}", dir.display());
    run(&installer, &["create", "manifests", &dir_arg]);
    write(
        &dir.join("openshift/99-custom.yaml"),
        "kind: MachineConfig\n",
    );
    run(
        &installer,
        &["create", "single-node-ignition-config", &dir_arg],
    );
    std::fs::read_to_string(installer).unwrap()
}

fn run_native(fs: &mut HostFs, launcher: &Launcher, env: &BTreeMap<String, String>, now: i64) {
    let call = Invocation {
        launcher,
        env,
        cwd: "/root",
        now,
        seed: 7,
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    run(
        fs,
        &call,
        &args(&["create", "manifests", "--dir", "/var/tmp/install"]),
    )
    .unwrap();
    fs.write(
        "/var/tmp/install/openshift/99-custom.yaml",
        b"kind: MachineConfig\n",
        0o644,
    )
    .unwrap();
    run(
        fs,
        &call,
        &args(&[
            "create",
            "single-node-ignition-config",
            "--dir=/var/tmp/install",
        ]),
    )
    .unwrap();
}

/// Files of an Ignition by path; certificate records with their lifetime instead of their
/// timestamps.
fn normalized(ignition: &str) -> BTreeMap<String, (Option<u32>, String)> {
    let value: Value = serde_json::from_str(ignition).unwrap();
    tools::ignition_files(&value)
        .unwrap()
        .into_iter()
        .map(|(path, file)| {
            let text = match parse_record(&file.contents) {
                Some(c) => format!(
                    "{} by {} for {}",
                    c.subject,
                    c.issuer,
                    c.not_after - c.not_before
                ),
                None => String::from_utf8_lossy(&file.contents).into_owned(),
            };
            (path, (file.mode, text))
        })
        .collect()
}

fn stamps(ignition: &str) -> Vec<i64> {
    let value: Value = serde_json::from_str(ignition).unwrap();
    tools::ignition_files(&value)
        .unwrap()
        .values()
        .filter_map(|f| parse_record(&f.contents))
        .map(|c| c.not_before)
        .collect()
}

#[test]
fn both_installers_make_the_same_ignition_but_for_the_clock() {
    let shell_root = tempfile::tempdir().unwrap();
    let shell_dir = shell_root.path().join("install");
    write(&shell_dir.join("install-config.yaml"), INSTALL_CONFIG);
    let before = crate::guest::time::host_now();
    let launcher_text = run_shell(shell_root.path(), &shell_dir, &[]);
    let after = crate::guest::time::host_now();
    let launcher = parse_launcher(launcher_text.as_bytes()).expect("the extracted launcher");
    assert_eq!(launcher.release_version, "4.22.3");

    let guest_root = tempfile::tempdir().unwrap();
    let mut fs = HostFs {
        root: guest_root.path().to_path_buf(),
    };
    fs.write(
        "/var/tmp/install/install-config.yaml",
        INSTALL_CONFIG.as_bytes(),
        0o644,
    )
    .unwrap();
    let yesterday = before - 86_400;
    run_native(&mut fs, &launcher, &BTreeMap::new(), yesterday);

    let shell_ign =
        std::fs::read_to_string(shell_dir.join("bootstrap-in-place-for-live-iso.ign")).unwrap();
    let native_ign = String::from_utf8(
        fs.read("/var/tmp/install/bootstrap-in-place-for-live-iso.ign")
            .unwrap(),
    )
    .unwrap();
    let mut native = normalized(&native_ign);
    let pki = native
        .remove(IGNITION_GUEST_PKI)
        .expect("the native installer carries the API key material");
    assert_eq!(pki.0, Some(0o600));
    assert_eq!(
        normalized(&shell_ign),
        native,
        "same files, modes, contents"
    );
    assert!(native.contains_key("/opt/openshift/tls/root-ca.crt"));
    let network = &native["/opt/openshift/manifests/cluster-network-02-config.yml"].1;
    assert!(
        network.contains("- cidr: 10.217.0.0/22\n    hostPrefix: 23\n")
            && network.contains("serviceNetwork:\n  - 10.217.4.0/23\n"),
        "{network}"
    );
    let infrastructure = &native["/opt/openshift/manifests/cluster-infrastructure-02-config.yml"].1;
    assert!(infrastructure.contains("controlPlaneTopology: SingleReplica\n"));
    assert!(native.contains_key("/opt/openshift/tls/kubelet-signer.crt"));
    assert!(native.contains_key("/opt/openshift/openshift/99-custom.yaml"));

    // The rest of the document is the same too.
    let strip = |text: &str| {
        let mut value: Value = serde_json::from_str(text).unwrap();
        value["storage"]["files"] = Value::Null;
        value
    };
    assert_eq!(strip(&shell_ign), strip(&native_ign));

    // Each stamped with its caller's clock.
    assert!(
        stamps(&shell_ign)
            .iter()
            .all(|s| (before..=after).contains(s))
    );
    assert!(stamps(&native_ign).iter().all(|s| *s == yesterday));

    // The same leftovers and auth files.
    for gone in [
        "manifests",
        "openshift",
        ".openshift_install_state",
        "install-config.yaml",
    ] {
        assert!(!shell_dir.join(gone).exists(), "{gone}");
        assert!(
            !fs.root.join("var/tmp/install").join(gone).exists(),
            "{gone}"
        );
    }
    for file in [
        "auth/kubeconfig",
        "auth/kubeadmin-password",
        "metadata.json",
        "tls/root-ca.crt",
    ] {
        assert!(shell_dir.join(file).is_file(), "{file}");
        assert!(
            fs.root.join("var/tmp/install").join(file).is_file(),
            "{file}"
        );
    }
    let shell_meta: Value =
        serde_json::from_slice(&std::fs::read(shell_dir.join("metadata.json")).unwrap()).unwrap();
    let native_meta: Value =
        serde_json::from_slice(&fs.read("/var/tmp/install/metadata.json").unwrap()).unwrap();
    assert_eq!(shell_meta["clusterName"], native_meta["clusterName"]);
    assert_eq!(shell_meta["infraID"], native_meta["infraID"]);
    let password = fs.read("/var/tmp/install/auth/kubeadmin-password").unwrap();
    assert_eq!(
        password.len(),
        std::fs::read(shell_dir.join("auth/kubeadmin-password"))
            .unwrap()
            .len()
    );
    let kubeconfig =
        String::from_utf8(fs.read("/var/tmp/install/auth/kubeconfig").unwrap()).unwrap();
    assert!(kubeconfig.contains("server: https://api.crc.testing:6443"));
}

#[test]
fn the_release_override_names_the_release_in_both() {
    let override_image = "registry.example/ocp@sha256:2222";
    let shell_root = tempfile::tempdir().unwrap();
    let shell_dir = shell_root.path().join("install");
    write(&shell_dir.join("install-config.yaml"), INSTALL_CONFIG);
    let launcher_text = run_shell(
        shell_root.path(),
        &shell_dir,
        &[("OPENSHIFT_INSTALL_RELEASE_IMAGE_OVERRIDE", override_image)],
    );
    let launcher = parse_launcher(launcher_text.as_bytes()).unwrap();
    let shell_ign =
        std::fs::read_to_string(shell_dir.join("bootstrap-in-place-for-live-iso.ign")).unwrap();

    let guest_root = tempfile::tempdir().unwrap();
    let mut fs = HostFs {
        root: guest_root.path().to_path_buf(),
    };
    fs.write(
        "/var/tmp/install/install-config.yaml",
        INSTALL_CONFIG.as_bytes(),
        0o644,
    )
    .unwrap();
    let env = BTreeMap::from([(RELEASE_OVERRIDE_ENV.to_owned(), override_image.to_owned())]);
    run_native(&mut fs, &launcher, &env, 1_700_000_000);
    let native_ign = String::from_utf8(
        fs.read("/var/tmp/install/bootstrap-in-place-for-live-iso.ign")
            .unwrap(),
    )
    .unwrap();
    let expected = format!("{override_image}\n");
    assert_eq!(normalized(&shell_ign)[IGNITION_RELEASE_IMAGE].1, expected);
    assert_eq!(normalized(&native_ign)[IGNITION_RELEASE_IMAGE].1, expected);
}

#[test]
fn usage_and_failures_exit_like_the_shell_fake() {
    let root = tempfile::tempdir().unwrap();
    let mut fs = HostFs {
        root: root.path().to_path_buf(),
    };
    let launcher = Launcher {
        release_image: IMAGE.into(),
        release_version: "4.22.3".into(),
        release_digest: "sha256:11".into(),
    };
    let env = BTreeMap::new();
    let call = Invocation {
        launcher: &launcher,
        env: &env,
        cwd: "/home/core",
        now: 0,
        seed: 1,
    };
    let args = |a: &[&str]| a.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let err = run(&mut fs, &call, &args(&["destroy", "cluster"])).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let err = run(&mut fs, &call, &args(&["create", "manifests", "--bogus"])).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let err = run(
        &mut fs,
        &call,
        &args(&["create", "manifests", "--dir", "x"]),
    )
    .unwrap_err();
    assert_eq!(err.exit_code(), 1);
    assert!(
        err.to_string().contains("/home/core/x/install-config.yaml"),
        "{err}"
    );
    fs.write(
        "/home/core/x/install-config.yaml",
        INSTALL_CONFIG
            .replace("  installationDisk: /dev/vda\n", "")
            .as_bytes(),
        0o644,
    )
    .unwrap();
    let err = run(
        &mut fs,
        &call,
        &args(&["create", "single-node-ignition-config", "--dir", "x"]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("installationDisk"), "{err}");
    let out = run(&mut fs, &call, &args(&["version"])).unwrap();
    assert_eq!(
        out.lines().nth(2),
        Some("release image quay.io/openshift-release-dev/ocp-release@sha256:11")
    );
}

#[test]
fn yaml_helpers_read_like_the_shell_fake() {
    assert_eq!(
        yaml_top("sshKey", INSTALL_CONFIG).as_deref(),
        Some("ecdsa-sha2-nistp256 AAAAE2VjZHNh build@crc")
    );
    assert_eq!(
        yaml_top("baseDomain", INSTALL_CONFIG).as_deref(),
        Some("testing")
    );
    assert_eq!(
        yaml_top("sshKey", "sshKey: |\n  ssh-ed25519 K\n").as_deref(),
        Some("ssh-ed25519 K")
    );
    assert_eq!(
        yaml_top(
            "sshKey",
            "sshKey: >-\n  ecdsa-sha2-nistp256\n  AAAA core\nnext: 1\n"
        )
        .as_deref(),
        Some("ecdsa-sha2-nistp256 AAAA core"),
        "a folded block, as the profile's install-config writes a long key"
    );
    assert_eq!(yaml_top("name", INSTALL_CONFIG), None);
    assert_eq!(
        yaml_any("installationDisk", INSTALL_CONFIG).as_deref(),
        Some("/dev/vda")
    );
    assert_eq!(cluster_name(INSTALL_CONFIG).as_deref(), Some("crc"));
    assert_eq!(cluster_name("metadata:\n  labels: {}\nname: x\n"), None);
}

#[test]
fn quoted_scalars_come_back_as_a_yaml_parser_reads_them() {
    let config =
        "pullSecret: \"{\\\"auths\\\":{\\\"a\\\\\\\\b\\\":{}}}\"\nsshKey: 'it''s'\nplain: x\n";
    assert_eq!(
        yaml_top("pullSecret", config).as_deref(),
        Some(r#"{"auths":{"a\\b":{}}}"#)
    );
    assert_eq!(yaml_top("sshKey", config).as_deref(), Some("it's"));
    assert_eq!(yaml_top("plain", config).as_deref(), Some("x"));
}
