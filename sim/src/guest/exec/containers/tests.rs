//! The seal's image-cache preparation and etcd scrub on an installed node, done right and wrong.

use super::{
    ETCD_MANIFEST, INSTALL_ONLY, KUBELET, LEASES, NODE_IP_UNIT, NODE_IP_UNIT_FILE, OTHER_KEYS,
    PODS, payload_image, sha256_hex,
};
use crate::guest::exec::testing::*;
use crate::guest::exec::{Machine, Runtime};
use crate::guest::install;
use crate::guest::state::GuestState;
use crate::installer::native::test_ignition;

const VERSION: &str = "4.22.3";
const RELEASE_IMAGE: &str = "quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64";
const SEAL_PULL_SECRET: &str = "echo e30= | base64 -d | sudo tee /var/lib/kubelet/config.json";

/// The installed disk of a bootstrap in place, booted (its kubelet enabled and running).
fn installed() -> Machine {
    let ignition = test_ignition(NOW, KEY, "/dev/vda");
    let (live, warnings) = GuestState::live_environment(&GuestState::live_iso(&ignition)).unwrap();
    assert!(warnings.is_empty(), "{warnings:?}");
    let state = install::installed_state(&live, NOW + 120, 64 * GIB).unwrap();
    boot(state)
}

fn boot(state: GuestState) -> Machine {
    Machine::power_on(state, Runtime::new(64 * GIB, 0, false))
}

fn ok(m: &mut Machine, line: &str) -> String {
    let out = run(m, line);
    assert_eq!(out.code, 0, "{line}: {}", stderr(&out));
    stdout(&out)
}

/// The digest reference of the unit's first `ExecStart`, its continuation lines (`\`) joined as
/// systemd joins them.
fn runtimecfg_image(m: &mut Machine) -> String {
    let unit = ok(m, &format!("sudo cat {NODE_IP_UNIT_FILE}"));
    let joined = unit.replace("\\\n", " ");
    let exec = joined
        .lines()
        .find(|l| l.starts_with("ExecStart="))
        .unwrap();
    exec.split(|c: char| c.is_whitespace() || c == '"')
        .find(|w| w.contains("@sha256:"))
        .unwrap()
        .to_owned()
}

/// What the product reads: the image of the container named `etcd` in etcd's static pod.
fn etcd_image(m: &mut Machine) -> String {
    let pod: serde_json::Value =
        serde_json::from_str(&ok(m, &format!("sudo cat {ETCD_MANIFEST}"))).unwrap();
    pod["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "etcd")
        .unwrap()["image"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn etcd_run(image: &str) -> String {
    format!(
        "sudo podman run -d --rm --name etcd-scrub --network host --privileged --entrypoint etcd -v /var/lib/etcd:/store {image} --data-dir /store"
    )
}

/// SNC's no-op `crio-wipe.service` in place of the vendor's (as the product writes it, over SSH).
fn write_snc_crio_wipe(m: &mut Machine) {
    m.state.files.insert(
        crate::guest::exec::crio::WIPE_OVERRIDE.to_owned(),
        crate::guest::state::File::root(
            "[Unit]\nDescription=Dummy crio-wipe service\nBefore=crio.service\nRequiresMountsFor=/var/lib/containers\n\n[Service]\nExecStart=/bin/true\nType=oneshot\n\n[Install]\nWantedBy=multi-user.target\n",
            0o644,
        ),
    );
}

/// `etcdctl get --prefix --keys-only PREFIX`, without etcdctl's empty line after each key.
fn keys(m: &mut Machine, prefix: &str) -> Vec<String> {
    let text = ok(
        m,
        &format!("sudo podman exec etcd-scrub etcdctl get --prefix --keys-only {prefix}"),
    );
    text.lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_installed_node_names_its_images_and_holds_etcd_records() {
    let mut m = installed();
    let runtimecfg = runtimecfg_image(&mut m);
    assert_eq!(runtimecfg, payload_image("baremetal-runtimecfg", VERSION));
    assert_eq!(
        runtimecfg,
        format!(
            "quay.io/openshift-release-dev/ocp-v4.0-art-dev@sha256:{}",
            sha256_hex("baremetal-runtimecfg:4.22.3")
        )
    );
    let etcd = etcd_image(&mut m);
    assert_eq!(etcd, payload_image("etcd", VERSION));
    assert_ne!(etcd, runtimecfg);
    for image in [RELEASE_IMAGE, &runtimecfg, &etcd] {
        assert!(m.state.image_cache.iter().any(|i| i == image), "{image}");
    }
    for component in INSTALL_ONLY {
        assert!(
            m.state
                .image_cache
                .contains(&payload_image(component, VERSION))
        );
    }
    assert_eq!(
        ok(&mut m, "systemctl is-enabled nodeip-configuration"),
        "enabled\n"
    );
    assert_eq!(
        m.state.install.as_ref().unwrap().release_image,
        RELEASE_IMAGE
    );
    // The kubelet started at boot: the pods run.
    let pods = ok(&mut m, "sudo crictl pods -q");
    assert_eq!(pods.lines().count(), PODS.len());
    assert!(pods.lines().all(|id| id.len() == 64));
    assert!(
        (30..80).contains(&m.state.etcd_keys.len()),
        "{}",
        m.state.etcd_keys.len()
    );

    // The new fields survive the disk's JSON, and disks without them read as before.
    let json = serde_json::to_vec(&m.state).unwrap();
    assert_eq!(
        serde_json::from_slice::<GuestState>(&json).unwrap(),
        m.state
    );
    let sealed = serde_json::to_value(GuestState::sealed_crc_at(VERSION, KEY, NOW)).unwrap();
    assert!(sealed.get("containers").is_none() && sealed.get("etcdKeys").is_none());
}

#[test]
fn a_correct_seal_keeps_what_the_next_boot_needs() {
    let mut m = installed();
    let runtimecfg = runtimecfg_image(&mut m);

    // Pin, prune, unpin.
    let id = ok(
        &mut m,
        &format!(
            "sudo podman create --authfile /var/lib/kubelet/config.json --name baremetal_runtimecfg {runtimecfg}"
        ),
    );
    assert_eq!(id.trim().len(), 64, "{id}");
    assert_eq!(
        ok(&mut m, "sudo podman ps -a --format '{{.Names}}'"),
        "baremetal_runtimecfg\n"
    );
    assert_eq!(ok(&mut m, "sudo podman ps --format '{{.Names}}'"), "");
    let pruned = ok(&mut m, "sudo crictl rmi --prune");
    let expected: String = INSTALL_ONLY
        .iter()
        .map(|c| format!("Deleted: {}\n", payload_image(c, VERSION)))
        .collect();
    assert_eq!(pruned, expected, "only what the install alone used");
    for image in [RELEASE_IMAGE, &runtimecfg, &etcd_image(&mut m)] {
        assert!(m.state.image_cache.iter().any(|i| i == image), "{image}");
    }
    assert_eq!(
        ok(&mut m, "sudo podman rm baremetal_runtimecfg"),
        "baremetal_runtimecfg\n"
    );
    assert_eq!(ok(&mut m, "sudo podman ps -a --format '{{.Names}}'"), "");
    ok(&mut m, &format!("sudo podman image exists {runtimecfg}"));

    // The pods outlive the kubelet until removed.
    ok(&mut m, SEAL_PULL_SECRET);
    ok(&mut m, "sudo systemctl stop kubelet");
    assert_eq!(
        ok(&mut m, "sudo crictl pods -q").lines().count(),
        PODS.len()
    );
    let removed = ok(&mut m, "sudo crictl rmp --all --force");
    assert_eq!(
        removed
            .lines()
            .filter(|l| l.starts_with("Removed sandbox"))
            .count(),
        PODS.len()
    );
    assert_eq!(ok(&mut m, "sudo crictl pods -q"), "");

    // The etcd scrub.
    let etcd = etcd_image(&mut m);
    assert_eq!(ok(&mut m, &etcd_run(&etcd)).trim().len(), 64);
    let listing = ok(
        &mut m,
        "sudo podman exec etcd-scrub etcdctl get --prefix --keys-only /kubernetes.io/leases/",
    );
    assert!(
        listing.starts_with("/kubernetes.io/leases/kube-node-lease/crc\n\n"),
        "a key, then etcdctl's empty line: {listing}"
    );
    let pods = keys(&mut m, "/kubernetes.io/pods/");
    let mut namespaces: Vec<&str> = pods
        .iter()
        .filter_map(|k| k.strip_prefix("/kubernetes.io/pods/")?.split('/').next())
        .filter(|ns| !ns.starts_with("openshift-network"))
        .collect();
    namespaces.dedup();
    assert!(namespaces.len() >= 8, "{namespaces:?}");
    for namespace in namespaces {
        let count = ok(
            &mut m,
            &format!(
                "sudo podman exec etcd-scrub etcdctl del --prefix /kubernetes.io/pods/{namespace}/"
            ),
        );
        assert_ne!(count, "0\n", "{namespace}");
    }
    assert_eq!(
        ok(
            &mut m,
            "sudo podman exec etcd-scrub etcdctl del --prefix=true /kubernetes.io/leases/"
        ),
        format!("{}\n", LEASES.len())
    );
    assert_eq!(
        ok(
            &mut m,
            "sudo podman exec etcd-scrub etcdctl del /kubernetes.io/leases/kube-node-lease/crc"
        ),
        "0\n"
    );
    let left = keys(&mut m, "/kubernetes.io/pods/");
    assert_eq!(
        left,
        [
            "/kubernetes.io/pods/openshift-network-diagnostics/network-check-target-5xk9d",
            "/kubernetes.io/pods/openshift-network-operator/network-operator-6c9d7b8f5-hx8vn",
        ]
    );
    assert!(keys(&mut m, "/kubernetes.io/leases/").is_empty());
    for kept in OTHER_KEYS {
        assert!(m.state.etcd_keys.contains(*kept), "{kept}");
    }
    assert!(
        m.state
            .etcd_keys
            .contains("/kubernetes.io/namespaces/openshift-etcd")
    );
    assert_eq!(ok(&mut m, "sudo podman stop etcd-scrub"), "etcd-scrub\n");
    assert_eq!(ok(&mut m, "sudo podman ps -a --format '{{.Names}}'"), "");
    ok(&mut m, "sudo systemctl disable kubelet");
    // SNC's no-op crio-wipe: a clone killed without a clean stop keeps its images.
    write_snc_crio_wipe(&mut m);
    m.shut_down();

    // A clone boots and its kubelet starts without pulling.
    let mut clone = boot(m.state.clone());
    assert_eq!(clone.state.pull_secret(), Some(&b"{}"[..]));
    ok(&mut clone, "sudo systemctl start kubelet");
    assert_eq!(
        ok(&mut clone, "sudo crictl pods -q").lines().count(),
        PODS.len()
    );
    assert_eq!(
        ok(&mut clone, "systemctl is-active nodeip-configuration"),
        "active\n"
    );
    // Enabled again, it starts at boot too, even after the clone was killed.
    ok(&mut clone, "sudo systemctl enable kubelet");
    let again = boot(clone.state.clone());
    assert!(again.unit_active("kubelet.service"));
}

#[test]
fn a_prune_without_the_pin_leaves_a_sealed_disk_without_a_node_ip() {
    let mut m = installed();
    let runtimecfg = runtimecfg_image(&mut m);
    let pruned = ok(&mut m, "sudo crictl rmi --prune");
    assert!(
        pruned.contains(&format!("Deleted: {runtimecfg}\n")),
        "{pruned}"
    );
    assert_eq!(
        run(&mut m, &format!("sudo podman image exists {runtimecfg}")).code,
        1
    );
    // With the install's pull secret nodeip-configuration pulls it back when it runs again.
    ok(&mut m, "sudo systemctl restart kubelet");
    ok(&mut m, &format!("sudo podman image exists {runtimecfg}"));
    let pruned = ok(&mut m, "sudo crictl rmi --prune");
    assert_eq!(pruned, format!("Deleted: {runtimecfg}\n"));
    ok(&mut m, SEAL_PULL_SECRET);
    let out = run(
        &mut m,
        &format!("sudo podman create --name baremetal_runtimecfg {runtimecfg}"),
    );
    assert_eq!(out.code, 125);
    assert!(stderr(&out).contains("image not known"), "{}", stderr(&out));
    ok(&mut m, "sudo systemctl disable kubelet");

    let mut clone = boot(m.state.clone());
    let out = run(&mut clone, "sudo systemctl start kubelet");
    assert_eq!(out.code, 1);
    let error = stderr(&out);
    assert!(
        error.contains("nodeip-configuration.service") && error.contains(&runtimecfg),
        "{error}"
    );
    assert!(!clone.unit_active("kubelet.service"));
    assert_eq!(ok(&mut clone, "sudo crictl pods -q"), "");
    assert_eq!(
        ok(&mut clone, "systemctl is-failed nodeip-configuration"),
        "failed\n"
    );
    let journal = ok(&mut clone, "journalctl -u nodeip-configuration --no-pager");
    assert!(journal.contains(&runtimecfg), "{journal}");

    // Booting with the kubelet enabled fails the same way.
    let mut state = m.state.clone();
    state.units.get_mut("kubelet.service").unwrap().enabled = true;
    let clone = boot(state);
    assert!(!clone.unit_active("kubelet.service"));
    assert!(clone.state.units[NODE_IP_UNIT].failed);
    assert!(!clone.runtime.pods_running);
}

#[test]
fn etcd_cannot_start_while_the_pods_run() {
    let mut m = installed();
    let etcd = etcd_image(&mut m);
    ok(&mut m, "sudo systemctl stop kubelet");
    let out = run(&mut m, &etcd_run(&etcd));
    assert_eq!(out.code, 1);
    assert!(
        stderr(&out).contains("listen tcp 127.0.0.1:2379: bind: address already in use"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        ok(&mut m, "sudo podman ps -a --format '{{.Names}}'"),
        "",
        "--rm"
    );

    // Removed while the kubelet runs, the pods come back at once.
    ok(&mut m, "sudo systemctl start kubelet");
    ok(&mut m, "sudo crictl rmp -af");
    assert_ne!(ok(&mut m, "sudo crictl pods -q"), "");
    ok(&mut m, "sudo systemctl stop kubelet");
    ok(&mut m, "sudo crictl rmp -fa");
    assert_eq!(ok(&mut m, "sudo crictl pods -q"), "");
    // The spellings the product may use.
    let line = format!(
        "sudo podman run -d --rm --name etcd-scrub --network=host --privileged --entrypoint=etcd --volume /var/lib/etcd:/store {etcd} --data-dir /store"
    );
    ok(&mut m, &line);
    let out = run(&mut m, &etcd_run(&etcd));
    assert_eq!(out.code, 125, "the name is taken");
    assert_eq!(ok(&mut m, "sudo podman rm -f etcd-scrub"), "etcd-scrub\n");
    // A boot stops every container; a `--rm` one goes.
    ok(&mut m, &etcd_run(&etcd));
    let rebooted = boot(m.state.clone());
    assert!(rebooted.state.containers.is_empty());
}

#[test]
fn what_is_not_modelled_fails_loudly() {
    let mut m = installed();
    let etcd = etcd_image(&mut m);
    for (line, code) in [
        ("podman ps -a --format '{{.Names}}'", 125),
        ("sudo podman pull quay.io/x", 125),
        ("sudo podman ps -a", 125),
        ("sudo podman ps --format '{{.ID}}'", 125),
        ("sudo podman create --pull=never --name x quay.io/x", 125),
        ("sudo podman create --name x quay.io/not-cached", 125),
        ("sudo podman rm nothere", 1),
        ("sudo podman stop nothere", 125),
        (
            "sudo podman exec nothere etcdctl get --prefix --keys-only /",
            125,
        ),
        ("crictl pods -q", 1),
        ("sudo crictl images", 1),
        ("sudo crictl pods", 1),
        ("sudo crictl rmp", 1),
        ("sudo crictl rmp -a", 1),
        ("sudo crictl rmp 0123abcd", 1),
    ] {
        let out = run(&mut m, line);
        assert_eq!(out.code, code, "{line}: {}", stderr(&out));
        assert!(!stderr(&out).is_empty(), "{line}");
        assert_eq!(out.unknown_commands, Vec::<String>::new());
    }
    let out = run(&mut m, "sudo podman create --name x quay.io/not-cached");
    assert!(stderr(&out).contains("pull"), "{}", stderr(&out));

    ok(&mut m, "sudo systemctl stop kubelet");
    ok(&mut m, "sudo crictl rmp -a -f");
    for (flags, why) in [
        (
            "--rm --name e --network host --privileged --entrypoint etcd -v /var/lib/etcd:/store",
            "not detached",
        ),
        (
            "-d --rm --name e --privileged --entrypoint etcd -v /var/lib/etcd:/store",
            "no host network",
        ),
        (
            "-d --rm --name e --network host --privileged -v /var/lib/etcd:/store",
            "no etcd entrypoint",
        ),
        (
            "-d --rm --name e --network host --privileged --entrypoint etcd -v /tmp:/store",
            "not /var/lib/etcd",
        ),
        (
            "-d --rm --name e --network host --privileged --entrypoint etcd -v /var/lib/etcd:/data",
            "not the data dir",
        ),
        (
            "-d --rm --name e --network host --privileged --entrypoint etcd -p 2379:2379 -v /var/lib/etcd:/store",
            "unknown flag",
        ),
    ] {
        let out = run(
            &mut m,
            &format!("sudo podman run {flags} {etcd} --data-dir /store"),
        );
        assert_eq!(out.code, 125, "{why}: {}", stderr(&out));
    }
    let unprivileged =
        "sudo podman run -d --rm --name e --network host --entrypoint etcd -v /var/lib/etcd:/store";
    let out = run(&mut m, &format!("{unprivileged} {etcd} --data-dir /store"));
    assert_eq!(out.code, 1);
    assert!(stderr(&out).contains("permission denied"));

    ok(&mut m, &etcd_run(&etcd));
    for (line, code) in [
        ("sudo podman exec etcd-scrub etcdctl get --prefix /", 1),
        ("sudo podman exec etcd-scrub etcdctl put /a b", 1),
        ("sudo podman exec etcd-scrub etcdctl del --from-key /", 1),
        ("sudo podman exec etcd-scrub sh", 125),
        ("sudo podman rm etcd-scrub", 2),
    ] {
        let out = run(&mut m, line);
        assert_eq!(out.code, code, "{line}: {}", stderr(&out));
    }
    let before = m.state.etcd_keys.clone();
    ok(&mut m, "sudo podman stop etcd-scrub");
    assert_eq!(m.state.etcd_keys, before, "nothing deleted by the refusals");
    let out = run(
        &mut m,
        "sudo podman exec etcd-scrub etcdctl get --prefix --keys-only /",
    );
    assert_eq!(out.code, 125, "stopped and removed");
}

#[test]
fn sealed_fixtures_have_no_pods_and_start_as_before() {
    let mut m = sealed();
    ok(&mut m, "sudo systemctl start kubelet");
    assert_eq!(ok(&mut m, "sudo crictl pods -q"), "");
    assert!(m.state.etcd_keys.is_empty());
}

#[test]
fn a_replaced_value_leaves_the_disk_only_through_compaction_defragmentation_and_a_trim() {
    use crate::openshift::persist::save_into;
    let mut m = installed();
    let secret = |data: &str| {
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "pull-secret", "namespace": "openshift-config"},
            "data": {".dockerconfigjson": data}})
    };
    let other = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "stays", "namespace": "default"}});
    save_into(&mut m.state, vec![secret("c2VjcmV0"), other.clone()]);
    let kept = m.state.etcd_history.revisions.len();
    save_into(&mut m.state, vec![secret("e30="), other.clone()]);
    let on_disk = |m: &Machine| {
        serde_json::to_string(&m.state)
            .unwrap()
            .contains("c2VjcmV0")
    };
    assert!(on_disk(&m), "the old revision is kept");
    assert_eq!(
        m.state.etcd_history.revisions.len(),
        kept + 1,
        "an unchanged object makes none"
    );

    let etcd = etcd_image(&mut m);
    ok(&mut m, "sudo systemctl stop kubelet");
    ok(&mut m, "sudo crictl rmp -fa");
    ok(&mut m, &etcd_run(&etcd));
    let status = |m: &mut Machine| -> serde_json::Value {
        let text = ok(
            m,
            "sudo podman exec etcd-scrub etcdctl endpoint status -w json",
        );
        serde_json::from_str::<serde_json::Value>(&text).unwrap()[0]["Status"].clone()
    };
    let before = status(&mut m);
    let revision = before["header"]["revision"].as_u64().unwrap();
    assert_eq!(before["dbSize"], before["dbSizeInUse"]);

    // A defragmentation or a trim alone frees nothing: the value is still a revision.
    ok(&mut m, "sudo podman exec etcd-scrub etcdctl defrag");
    ok(&mut m, "sudo fstrim -v /var");
    assert!(on_disk(&m));
    let out = run(
        &mut m,
        &format!(
            "sudo podman exec etcd-scrub etcdctl compact {}",
            revision + 1
        ),
    );
    assert_eq!(out.code, 1);
    assert!(stderr(&out).contains("future revision"), "{}", stderr(&out));
    assert_eq!(
        ok(
            &mut m,
            &format!("sudo podman exec etcd-scrub etcdctl compact {revision}")
        ),
        format!("compacted revision {revision}\n")
    );
    let out = run(
        &mut m,
        &format!("sudo podman exec etcd-scrub etcdctl compact {revision}"),
    );
    assert!(
        stderr(&out).contains("has been compacted"),
        "{}",
        stderr(&out)
    );
    // Compacted: in the database's free pages, which the status shows.
    let compacted = status(&mut m);
    assert!(compacted["dbSize"].as_u64() > compacted["dbSizeInUse"].as_u64());
    assert!(on_disk(&m));
    // A trim before the defragmentation does not reach the pages of a file in use.
    ok(&mut m, "sudo fstrim -v /var");
    assert!(on_disk(&m));
    ok(&mut m, "sudo podman exec etcd-scrub etcdctl defrag");
    assert!(
        on_disk(&m),
        "the old database file's blocks hold it until a trim"
    );
    let status = status(&mut m);
    assert_eq!(status["dbSize"], status["dbSizeInUse"]);
    let out = run(&mut m, "sudo fstrim -v /");
    assert_eq!(out.code, 1, "the composefs root");
    ok(&mut m, "sudo fstrim -v /var");
    assert!(!on_disk(&m));
    assert!(m.state.etcd_history.released.is_empty());
}

#[test]
fn crio_wipe_empties_the_image_store_after_an_unclean_stop_unless_overridden() {
    use crate::guest::exec::crio::{CLEAN_SHUTDOWN, WIPE_OVERRIDE};
    let m = installed();
    let cached = m.state.image_cache.len();
    assert!(cached > 0);
    assert!(
        !m.state.files.contains_key(CLEAN_SHUTDOWN),
        "removed at CRI-O's start"
    );

    // A clean stop, then a boot: nothing wiped.
    let mut stopped = m.clone();
    stopped.shut_down();
    assert!(stopped.state.files.contains_key(CLEAN_SHUTDOWN));
    assert_eq!(boot(stopped.state).state.image_cache.len(), cached);

    // Killed (no clean stop): the next boot's crio-wipe removes the storage. With the
    // kubelet's credentials, nodeip-configuration's podman and CRI-O (for the pods) pull back
    // what the node runs; the install's leftovers stay gone.
    let mut wiped = boot(m.state.clone());
    assert!(wiped.state.journal["crio-wipe.service"][0].contains("unclean shutdown"));
    let runtimecfg = runtimecfg_image(&mut wiped);
    assert!(wiped.state.image_cache.contains(&runtimecfg));
    let etcd = etcd_image(&mut wiped);
    assert!(wiped.state.image_cache.contains(&etcd));
    for leftover in INSTALL_ONLY {
        assert!(
            !wiped
                .state
                .image_cache
                .contains(&payload_image(leftover, VERSION))
        );
    }
    assert!(wiped.unit_active(KUBELET));
    // With the pull secret sealed to `{}`, nothing comes back and the kubelet does not start.
    let mut sealed = m.clone();
    ok(&mut sealed, SEAL_PULL_SECRET);
    let sealed = boot(sealed.state);
    assert!(sealed.state.image_cache.is_empty());
    assert!(!sealed.unit_active(KUBELET));
    assert!(sealed.state.units[NODE_IP_UNIT].failed);

    // SNC's no-op unit in its place keeps it.
    let mut m = m;
    write_snc_crio_wipe(&mut m);
    assert_eq!(boot(m.state.clone()).state.image_cache.len(), cached);
    // An override that still wipes is no override.
    m.state.files.insert(
        WIPE_OVERRIDE.to_owned(),
        crate::guest::state::File::root("[Service]\nExecStart=/usr/bin/crio \\\n  wipe\n", 0o644),
    );
    ok(&mut m, SEAL_PULL_SECRET);
    assert!(boot(m.state).state.image_cache.is_empty());
}

#[test]
fn the_throwaway_etcd_serves_custom_resources_as_json_and_built_in_kinds_as_keys() {
    let mut m = installed();
    let config = serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1",
        "kind": "MachineConfig", "metadata": {"name": "rendered-master-1"},
        "spec": {"config": {"ignition": {"version": "3.5.0"}}}});
    let secret = serde_json::json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pull-secret", "namespace": "openshift-config"}});
    m.state.api_objects = vec![config.clone(), secret];
    let etcd = etcd_image(&mut m);
    ok(&mut m, "sudo systemctl stop kubelet");
    ok(&mut m, "sudo crictl rmp -fa");
    ok(&mut m, &etcd_run(&etcd));
    let prefix = "/kubernetes.io/machineconfiguration.openshift.io/machineconfigs/";
    let text = ok(
        &mut m,
        &format!("sudo podman exec etcd-scrub etcdctl get --prefix {prefix}"),
    );
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], format!("{prefix}rendered-master-1"));
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(lines[1]).unwrap(),
        config
    );
    assert_eq!(lines.len(), 2);
    let out = run(
        &mut m,
        "sudo podman exec etcd-scrub etcdctl get --prefix /kubernetes.io/secrets/",
    );
    assert_eq!(out.code, 1, "protobuf values are not modelled");
    assert_eq!(
        keys(&mut m, "/kubernetes.io/secrets/"),
        ["/kubernetes.io/secrets/openshift-config/pull-secret"]
    );
    // A delete takes the object out, and keeps its value as a revision.
    let before = m.state.etcd_history.revisions.len();
    assert_eq!(
        ok(
            &mut m,
            &format!("sudo podman exec etcd-scrub etcdctl del --prefix {prefix}")
        ),
        "1\n"
    );
    assert_eq!(m.state.api_objects.len(), 1);
    assert_eq!(m.state.etcd_history.revisions.len(), before + 1);
}
