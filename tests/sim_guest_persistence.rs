//! A guest cluster's objects live on its disk: what clients wrote to the guest API is saved into
//! the disk when the cluster goes down (the VM shutting down, the kubelet stopping), a copy of
//! the disk (as a clone makes it) starts with those objects, a fresh disk does not, and the same
//! disk booted again keeps its own cluster rather than restoring over it.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use guestcluster::guest::api::{self, Credentials};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, keys};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use russh::keys::PrivateKey;
use serde_json::{Value, json};
use sim::guest::state::GuestState;
use sim::guest::{BootDisk, BootSpec, DiskKind, disk};
use sim::{Options, Sim, Timings};
use support::wait_for;
use testenv::ControlPlane;

const VERSION: &str = "4.22.7";
/// The field manager of this test's writes: a client, like the crc-agent or the operator.
const CLIENT: &str = "persistence-test";
const NAMESPACE: &str = "team-persist";
const CLUSTER_ID: &str = "5f0c2b1e-8d7a-4c3b-9e21-0a1b2c3d4e5f";
const BASELINE_CLUSTER_ID: &str = "00000000-0000-0000-0000-000000000000";

struct Fixture {
    sim: Arc<Sim>,
    key: PrivateKey,
    root: PathBuf,
}

/// A booted guest with its kubelet running, and a client of its API through SSH.
struct Booted {
    uid: String,
    client: kube::Client,
}

impl Fixture {
    async fn boot(&self, uid: &str, ip: Ipv4Addr, image: &Path) -> Booted {
        self.sim
            .ctx
            .guests
            .boot(BootSpec {
                vmi_uid: uid.into(),
                namespace: "test".into(),
                vm_name: uid.into(),
                ip,
                disks: vec![BootDisk {
                    name: "rootdisk".into(),
                    image: image.to_path_buf(),
                    boot_order: Some(1),
                    kind: DiskKind::Disk,
                }],
                clock_offset_seconds: 0,
            })
            .await
            .unwrap_or_else(|e| panic!("{} boots: {e}", image.display()));
        let ssh = Arc::new(
            SshGuest::connect(
                &format!("{ip}:22"),
                self.key.clone(),
                &SshOptions::default(),
            )
            .await
            .unwrap(),
        );
        // What the crc-agent does first: DNS for the CRC names inside the guest, then the kubelet.
        let dnsmasq = "listen-address=10.0.2.2\nexpand-hosts\nlocal=/crc.testing/\ndomain=crc.testing\naddress=/api.crc.testing/10.0.2.2\naddress=/api-int.crc.testing/10.0.2.2\naddress=/apps-crc.testing/10.0.2.2\n";
        ssh.write_file("/etc/dnsmasq.d/crc-dnsmasq.conf", dnsmasq.as_bytes(), 0o644)
            .await
            .unwrap();
        ssh.run_checked(&Command::sudo(["systemctl", "start", "dnsmasq"]))
            .await
            .unwrap();
        ssh.write_file(
            "/etc/resolv.conf",
            b"search crc.testing\nnameserver 10.0.2.2\n",
            0o644,
        )
        .await
        .unwrap();
        ssh.run_checked(&Command::sudo(["systemctl", "start", "kubelet"]))
            .await
            .unwrap();
        let pki = disk::read_state(image)
            .unwrap()
            .and_then(|s| s.pki)
            .expect("an installed disk carries its PKI");
        let credentials = Credentials {
            server_ca: pki.server_ca_cert,
            client_cert: pki.admin_cert,
            client_key: pki.admin_key,
        };
        let clock_sim = self.sim.clone();
        let clock_uid = uid.to_owned();
        let clock: api::Clock = Arc::new(move || {
            clock_sim
                .ctx
                .guests
                .guest_time(&clock_uid)
                .unwrap_or_default()
        });
        let client = api::client(ssh, &credentials, clock).unwrap();
        let versions = cluster_versions(&client);
        wait_for(&format!("the guest API of {uid}"), || async {
            versions.get("version").await.ok().map(drop)
        })
        .await;
        Booted {
            uid: uid.to_owned(),
            client,
        }
    }

    fn sealed_disk(&self, name: &str) -> PathBuf {
        let line = keys::authorized_key_line(self.key.public_key(), "test").unwrap();
        let image = self.root.join(name);
        disk::create_disk(
            &image,
            256 << 20,
            Some(&GuestState::sealed_crc(VERSION, &line)),
        )
        .unwrap();
        image
    }
}

fn cluster_versions(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "ClusterVersion"),
            "clusterversions",
        ),
    )
}

async fn cluster_id(client: &kube::Client) -> String {
    let version = cluster_versions(client).get("version").await.unwrap();
    version.data["spec"]["clusterID"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn saved_objects(image: &Path) -> Vec<Value> {
    disk::read_state(image)
        .unwrap()
        .expect("the disk holds a guest")
        .api_objects
}

/// The saved objects' keys but the guest MCO's own MachineConfigs (which every disk carries,
/// as a real etcd does; checked once below and in `tests/sim_guest_api.rs`).
fn saved_keys(objects: &[Value]) -> Vec<String> {
    objects
        .iter()
        .filter(|o| o["kind"] != "MachineConfig")
        .map(|o| {
            format!(
                "{}/{}/{}",
                o["kind"].as_str().unwrap_or_default(),
                o["metadata"]["namespace"].as_str().unwrap_or_default(),
                o["metadata"]["name"].as_str().unwrap_or_default()
            )
        })
        .collect()
}

fn config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": name, "namespace": NAMESPACE, "labels": {"app": "persist"}},
           "data": data})
}

async fn apply<K>(api: &Api<K>, name: &str, body: &Value)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(CLIENT).force(),
        &Patch::Apply(body),
    )
    .await
    .unwrap_or_else(|e| panic!("apply {name}: {e}"));
}

#[tokio::test]
async fn objects_clients_wrote_travel_with_copies_of_the_disk() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let root = tempfile::tempdir().unwrap();
    cp.kubevirt().await.expect("KubeVirt");
    cp.cdi_controller().await.expect("CDI's control plane");
    let mut sim = Sim::start(
        cp.client().unwrap(),
        Options {
            root: root.path().join("sim"),
            timings: Timings::fast(),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            guestcluster_bin: env!("CARGO_BIN_EXE_guestcluster").into(),
            our_image_prefix: "quay.io/opdev/guestcluster".into(),
            node_name: "sim-node".into(),
            flavour: Default::default(),
        },
    )
    .await
    .unwrap();
    sim.serve_guest_apis(cp.apiserver_launcher());
    let fixture = Fixture {
        sim: Arc::new(sim),
        key: keys::generate_ecdsa_p256().unwrap(),
        root: root.path().to_path_buf(),
    };
    let guests = &fixture.sim.ctx.guests;

    // A client writes to the first guest's cluster: new objects, and a change to one of the
    // baseline's.
    let original = fixture.sealed_disk("original.img");
    let first = fixture
        .boot("vmi-persist-1", Ipv4Addr::new(127, 79, 3, 1), &original)
        .await;
    let namespaces: Api<Namespace> = Api::all(first.client.clone());
    apply(
        &namespaces,
        NAMESPACE,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await;
    let config_maps: Api<ConfigMap> = Api::namespaced(first.client.clone(), NAMESPACE);
    apply(
        &config_maps,
        "settings",
        &config_map("settings", json!({"mode": "golden"})),
    )
    .await;
    apply(
        &cluster_versions(&first.client),
        "version",
        &json!({"apiVersion": "config.openshift.io/v1", "kind": "ClusterVersion",
                "metadata": {"name": "version"}, "spec": {"clusterID": CLUSTER_ID}}),
    )
    .await;
    assert!(
        saved_objects(&original).is_empty(),
        "nothing is saved while the cluster runs"
    );

    // The VM shuts down: by the time it is off, the disk carries what the client wrote, and
    // nothing the API server or the simulation made on their own.
    guests.shutdown(&first.uid).await;
    assert!(!guests.is_running(&first.uid));
    let saved = saved_objects(&original);
    assert_eq!(
        saved_keys(&saved),
        [
            "ClusterVersion//version".to_owned(),
            format!("ConfigMap/{NAMESPACE}/settings"),
            format!("Namespace//{NAMESPACE}"),
        ],
        "{saved:#?}"
    );
    let configs: Vec<&str> = saved
        .iter()
        .filter(|o| o["kind"] == "MachineConfig")
        .filter_map(|o| o["metadata"]["name"].as_str())
        .collect();
    assert!(
        configs.contains(&"00-master") && configs.iter().any(|n| n.starts_with("rendered-master-")),
        "the MCO's MachineConfigs travel with the disk: {configs:?}"
    );
    let of_kind = |kind: &str| saved.iter().find(|o| o["kind"] == kind).unwrap();
    let version = of_kind("ClusterVersion");
    assert_eq!(version["spec"]["clusterID"], CLUSTER_ID);
    assert_eq!(version["spec"]["channel"], "stable", "the whole spec");
    assert!(version.get("status").is_none(), "{version}");
    let settings = of_kind("ConfigMap");
    assert_eq!(settings["data"], json!({"mode": "golden"}));
    assert_eq!(settings["metadata"]["labels"], json!({"app": "persist"}));
    for field in [
        "uid",
        "resourceVersion",
        "managedFields",
        "creationTimestamp",
    ] {
        assert!(settings["metadata"].get(field).is_none(), "{field}");
    }

    // A copy of the disk (what a clone is) boots with those objects in its cluster.
    let copy = root.path().join("copy.img");
    std::fs::copy(&original, &copy).unwrap();
    let second = fixture
        .boot("vmi-persist-2", Ipv4Addr::new(127, 79, 3, 2), &copy)
        .await;
    let copied: Api<ConfigMap> = Api::namespaced(second.client.clone(), NAMESPACE);
    let settings = copied
        .get("settings")
        .await
        .expect("the copy has the ConfigMap");
    assert_eq!(
        settings
            .data
            .unwrap_or_default()
            .get("mode")
            .map(String::as_str),
        Some("golden")
    );
    assert_eq!(
        settings
            .metadata
            .labels
            .unwrap_or_default()
            .get("app")
            .map(String::as_str),
        Some("persist")
    );
    Api::<Namespace>::all(second.client.clone())
        .get(NAMESPACE)
        .await
        .expect("the copy has the Namespace");
    assert_eq!(cluster_id(&second.client).await, CLUSTER_ID);
    // The simulation still owns the status of a restored baseline object.
    wait_for("the copy's ClusterVersion reports a status", || async {
        let version = cluster_versions(&second.client).get("version").await.ok()?;
        version.data["status"]["desired"]["version"]
            .as_str()
            .map(drop)
    })
    .await;

    // Stopping the kubelet saves too, while the VM runs; restored objects still count as the
    // clients', so a copy of the copy carries them.
    apply(
        &copied,
        "written-on-copy",
        &config_map("written-on-copy", json!({"from": "copy"})),
    )
    .await;
    let ssh_stop = Command::sudo(["systemctl", "stop", "kubelet"]);
    let ip = Ipv4Addr::new(127, 79, 3, 2);
    let ssh = SshGuest::connect(
        &format!("{ip}:22"),
        fixture.key.clone(),
        &SshOptions::default(),
    )
    .await
    .unwrap();
    ssh.run_checked(&ssh_stop).await.unwrap();
    let expected = [
        "ClusterVersion//version".to_owned(),
        format!("ConfigMap/{NAMESPACE}/settings"),
        format!("ConfigMap/{NAMESPACE}/written-on-copy"),
        format!("Namespace//{NAMESPACE}"),
    ];
    wait_for("the kubelet stop saved the copy's objects", || async {
        let state = guests.state(&second.uid)?;
        (saved_keys(&state.api_objects) == expected).then_some(())
    })
    .await;
    assert_eq!(
        saved_keys(&saved_objects(&copy)),
        expected,
        "written through"
    );
    guests.shutdown(&second.uid).await;
    assert_eq!(saved_keys(&saved_objects(&copy)), expected);

    // The same disk booted again finds its own cluster: nothing is restored over it, even what
    // the state carries and etcd does not.
    let mut state = disk::read_state(&original).unwrap().unwrap();
    state
        .api_objects
        .push(config_map("only-in-state", json!({})));
    disk::write_state(&original, &state).unwrap();
    let again = fixture
        .boot("vmi-persist-3", Ipv4Addr::new(127, 79, 3, 3), &original)
        .await;
    let again_maps: Api<ConfigMap> = Api::namespaced(again.client.clone(), NAMESPACE);
    assert!(again_maps.get("settings").await.is_ok());
    assert!(
        again_maps.get_opt("only-in-state").await.unwrap().is_none(),
        "a disk's own cluster is not restored over"
    );
    guests.shutdown(&again.uid).await;

    // A fresh disk has the baseline only; of all its cluster holds, only what a client wrote is
    // saved, not what the API server and the simulation made.
    let fresh = fixture.sealed_disk("fresh.img");
    let baseline = fixture
        .boot("vmi-persist-4", Ipv4Addr::new(127, 79, 3, 4), &fresh)
        .await;
    assert!(
        Api::<Namespace>::all(baseline.client.clone())
            .get_opt(NAMESPACE)
            .await
            .unwrap()
            .is_none()
    );
    assert_eq!(cluster_id(&baseline.client).await, BASELINE_CLUSTER_ID);
    let marker = json!({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": "fresh-marker", "namespace": "openshift-config"}});
    apply(
        &Api::<ConfigMap>::namespaced(baseline.client.clone(), "openshift-config"),
        "fresh-marker",
        &marker,
    )
    .await;
    guests.shutdown(&baseline.uid).await;
    assert_eq!(
        saved_keys(&saved_objects(&fresh)),
        ["ConfigMap/openshift-config/fresh-marker"]
    );
    guests.shutdown_all().await;
}
