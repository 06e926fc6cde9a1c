//! bootkube's check and the installed system, from an Ignition of the guest's own installer.

use super::*;
use crate::guest::exec::{Runtime, testing};
use crate::installer::native::test_ignition;
use base64::Engine as _;

const STAMP: i64 = testing::NOW;
const GIB: u64 = 1 << 30;

fn live(ignition: &str) -> Machine {
    let (state, warnings) = GuestState::live_environment(&GuestState::live_iso(ignition)).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    Machine::power_on(state, Runtime::new(64 * GIB, 0, true))
}

#[test]
fn a_bootstrap_in_place_ignition_is_recognised() {
    let m = live(&test_ignition(STAMP, testing::KEY, "/dev/vda"));
    assert!(is_bootstrap_in_place(&m.state));
    let plain = live(r#"{"ignition":{"version":"3.2.0"}}"#);
    assert!(!is_bootstrap_in_place(&plain.state));
}

#[test]
fn certificates_not_yet_valid_fail_bootkube_visibly() {
    let mut m = live(&test_ignition(STAMP, testing::KEY, "/dev/vda"));
    // The guest runs a day behind the clock that made the Ignition.
    let err = bootkube(&mut m, STAMP - 86_400, true).unwrap_err();
    assert!(
        err.contains("x509: certificate has expired or is not yet valid: current time 2026-12-01T12:23:44Z is before 2026-12-02T12:23:44Z"),
        "{err}"
    );
    let unit = &m.state.units[BOOTKUBE];
    assert!(unit.failed && !unit.active);
    let out = testing::run(&mut m, "systemctl is-active bootkube");
    assert_eq!(
        (out.code, testing::stdout(&out)),
        (3, "failed\n".to_owned())
    );
    let out = testing::run(&mut m, "journalctl -u bootkube -n 3 --no-pager");
    let text = testing::stdout(&out);
    assert_eq!(text.lines().count(), 3, "{text}");
    assert!(
        text.contains("x509: certificate has expired or is not yet valid"),
        "{text}"
    );
    assert!(
        text.starts_with("Dec 01 12:23:44 localhost bootkube.sh[2270]: "),
        "{text}"
    );

    // A day and more later, the day-long ones have expired.
    let mut m = live(&test_ignition(STAMP, testing::KEY, "/dev/vda"));
    let err = bootkube(&mut m, STAMP + 2 * 86_400, true).unwrap_err();
    assert!(err.contains("is after 2026-12-03T12:23:44Z"), "{err}");
}

#[test]
fn a_node_ip_off_the_default_nic_needs_the_bootstrap_node_ip() {
    use crate::installer::native::test_ignition_with_env;
    // The node IP on SNC's dummy NIC, as the kubelet's drop-in says: another address than the
    // default route's (the masquerade NIC).
    let with_dropin = |ignition: String| {
        let mut value: serde_json::Value = serde_json::from_str(&ignition).unwrap();
        let dropin = "[Service]\nEnvironment=\"KUBELET_NODE_IP=192.168.126.11\" \"KUBELET_NODE_IPS=192.168.126.11\"\n";
        value["storage"]["files"].as_array_mut().unwrap().push(serde_json::json!({
            "path": paths::NODE_IP_DROPIN, "mode": 420,
            "contents": {"source": format!("data:,{}", dropin.replace('"', "%22").replace('\n', "%0A").replace(' ', "%20"))}}));
        value.to_string()
    };
    let mut m = live(&with_dropin(test_ignition(STAMP, testing::KEY, "/dev/vda")));
    let err = bootkube(&mut m, STAMP + 60, true).unwrap_err();
    assert!(
        err.contains("https://10.0.2.2:2380") && err.contains("node's IP is 192.168.126.11"),
        "{err}"
    );
    let set = |ip: &str| {
        with_dropin(test_ignition_with_env(
            STAMP,
            testing::KEY,
            "/dev/vda",
            &[("OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP", ip)],
        ))
    };
    bootkube(&mut live(&set("192.168.126.11")), STAMP + 60, true).unwrap();
    // The installer skips an address that does not parse.
    assert!(bootkube(&mut live(&set("node-ip")), STAMP + 60, true).is_err());
    // Without the drop-in the kubelet takes the default NIC's address, as the bootstrap does.
    bootkube(
        &mut live(&test_ignition(STAMP, testing::KEY, "/dev/vda")),
        STAMP + 60,
        true,
    )
    .unwrap();
}

#[test]
fn the_installation_disk_must_be_the_first_disk() {
    let mut m = live(&test_ignition(STAMP, testing::KEY, "/dev/sdb"));
    let err = bootkube(&mut m, STAMP + 60, true).unwrap_err();
    assert!(err.contains("/dev/sdb not found"), "{err}");
    let mut m = live(&test_ignition(STAMP, testing::KEY, "/dev/vda"));
    assert!(
        bootkube(&mut m, STAMP + 60, false).is_err(),
        "no disk at all"
    );
}

#[test]
fn the_installed_system_carries_the_cluster_and_the_ignition() {
    let mut ignition: serde_json::Value =
        serde_json::from_str(&test_ignition(STAMP, testing::KEY, "/dev/vda")).unwrap();
    // The build's live patches: chronyd masked, a dnsmasq file.
    ignition["systemd"]["units"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "chronyd.service", "mask": true}));
    ignition["storage"]["files"].as_array_mut().unwrap().push(
        serde_json::json!({"path": "/etc/dnsmasq.d/crc-dnsmasq.conf", "mode": 420,
            "contents": {"source": "data:,listen-address%3D192.168.126.11%0A"}}),
    );
    let mut m = live(&ignition.to_string());
    let now = STAMP + 120;
    bootkube(&mut m, now, true).unwrap();
    let state = installed_state(&m.state, now, 64 * GIB).unwrap();

    assert_eq!(state.openshift_version.as_deref(), Some("4.22.3"));
    assert_eq!(state.provisioned_keys("core"), vec![testing::KEY]);
    assert!(state.units["chronyd.service"].masked);
    assert!(state.units["kubelet.service"].enabled);
    assert!(!state.units.contains_key(BOOTKUBE));
    assert!(state.file("/etc/dnsmasq.d/crc-dnsmasq.conf").is_some());
    assert!(!state.files.keys().any(|p| p.starts_with("/opt/openshift")));
    assert!(
        !state
            .certificates
            .keys()
            .any(|p| p.starts_with("/opt/openshift"))
    );
    assert_eq!(
        state.pull_secret(),
        Some(&br#"{"auths":{"quay.io":{"auth":"eDp5"}}}"#[..])
    );
    assert!(state.pki.is_some() && state.live_iso.is_none() && !state.install_incomplete);
    assert_eq!(state.root, RootDisk::filling(64 * GIB));

    let install = state.install.as_ref().unwrap();
    assert_eq!(install.stamp, STAMP);
    assert_eq!(
        install.csr_signer.subject,
        "CN=kubelet-signer, OU=openshift"
    );
    assert_eq!(install.csr_signer.not_after, STAMP + 86_400);
    let client = &state.certificates[paths::KUBELET_CLIENT_CERT];
    assert_eq!(
        (client.not_before, client.not_after, client.issuer.as_str()),
        (now, STAMP + 86_400, "CN=kubelet-signer, OU=openshift"),
        "issued by the installer's signer, until it expires"
    );
    assert_eq!(
        state.certificates[paths::KUBELET_SERVER_CERT].not_after,
        STAMP + 86_400
    );
    let lb = &state.certificates[&node_cert_path("kube-apiserver-lb-server").unwrap()];
    assert_eq!((lb.not_before, lb.not_after), (STAMP, STAMP + 86_400));
    assert!(
        state
            .certificates
            .contains_key(paths::KUBELET_BOOTSTRAP_CERT)
    );
    assert!(
        !state
            .certificates
            .keys()
            .any(|p| p.ends_with("/kubelet-signer.crt"))
    );
}

#[test]
fn the_installed_cluster_starts_with_every_install_manifest() {
    let mut ignition: serde_json::Value =
        serde_json::from_str(&test_ignition(STAMP, testing::KEY, "/dev/vda")).unwrap();
    let mc = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-user\n  labels:\n    machineconfiguration.openshift.io/role: master\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: extra\n  namespace: default\n";
    ignition["storage"]["files"].as_array_mut().unwrap().push(
        serde_json::json!({"path": "/opt/openshift/openshift/99-user.yaml", "mode": 420,
            "contents": {"source": format!("data:;base64,{}",
                base64::engine::general_purpose::STANDARD.encode(mc))}}),
    );
    let mut m = live(&ignition.to_string());
    bootkube(&mut m, STAMP + 120, true).unwrap();
    let state = installed_state(&m.state, STAMP + 120, 64 * GIB).unwrap();
    let names: Vec<(&str, &str)> = state
        .api_objects
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap(),
                o["metadata"]["name"].as_str().unwrap(),
            )
        })
        .collect();
    assert!(names.contains(&("MachineConfig", "99-user")), "{names:?}");
    assert!(names.contains(&("ConfigMap", "extra")), "{names:?}");
    // The installer's own: the cluster's pull secret, from the install-config.
    assert!(names.contains(&("Secret", "pull-secret")), "{names:?}");

    // A manifest that is not YAML of objects fails the install with its path.
    let mut bad = ignition.clone();
    bad["storage"]["files"].as_array_mut().unwrap().push(
        serde_json::json!({"path": "/opt/openshift/manifests/broken.yaml", "mode": 420,
            "contents": {"source": "data:,just%20text"}}),
    );
    let mut m = live(&bad.to_string());
    bootkube(&mut m, STAMP + 120, true).unwrap();
    let err = installed_state(&m.state, STAMP + 120, 64 * GIB).unwrap_err();
    assert!(err.to_string().contains("broken.yaml"), "{err}");
}
