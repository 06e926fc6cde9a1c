//! A simulated guest's OpenShift API: started when the guest's kubelet starts, reached by a kube
//! client whose connections are SSH tunnels into the guest, with TLS verified at guest time; the
//! simulated operators move as a real single-node cluster's would.

mod support;

use std::net::Ipv4Addr;
use std::sync::Arc;

use base64::Engine as _;
use guestcluster::guest::api::{self, Credentials};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, keys};
use guestcluster::sim::guest::state::GuestState;
use guestcluster::sim::guest::{BootDisk, BootSpec, DiskKind, disk};
use guestcluster::sim::{Options, Sim, Timings};
use guestcluster::testenv::ControlPlane;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use support::wait_for;

const VERSION: &str = "4.22.7";

fn kubeconfig_field(kubeconfig: &str, field: &str) -> String {
    let value: serde_json::Value =
        serde_saphyr::from_str(kubeconfig).expect("guest kubeconfig is YAML");
    let (section, key) = match field {
        "ca" => ("clusters", "certificate-authority-data"),
        "cert" => ("users", "client-certificate-data"),
        _ => ("users", "client-key-data"),
    };
    let inner = if section == "clusters" {
        "cluster"
    } else {
        "user"
    };
    let encoded = value[section][0][inner][key]
        .as_str()
        .expect("field present");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_tunnelled_client_reaches_the_guest_api_at_guest_time() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let root = tempfile::tempdir().unwrap();
    let mut sim = Sim::start(
        cp.client().unwrap(),
        Options {
            root: root.path().join("sim"),
            timings: Timings::fast(),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            guestcluster_bin: env!("CARGO_BIN_EXE_guestcluster").into(),
            our_image_prefix: "quay.io/opdev/guestcluster".into(),
            node_name: "sim-node".into(),
        },
    )
    .await
    .unwrap();
    sim.serve_guest_apis(cp.apiserver_launcher());

    // A sealed CRC disk, booted as a VMI would boot it.
    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "test").unwrap();
    let image = root.path().join("disk.img");
    disk::create_disk(
        &image,
        256 << 20,
        Some(&GuestState::sealed_crc(VERSION, &line)),
    )
    .unwrap();
    let ip = Ipv4Addr::new(127, 79, 0, 1);
    let uid = "vmi-guest-api-1";
    sim.ctx
        .guests
        .boot(BootSpec {
            vmi_uid: uid.into(),
            namespace: "test".into(),
            vm_name: "crc".into(),
            ip,
            disks: vec![BootDisk {
                name: "rootdisk".into(),
                image: image.clone(),
                boot_order: Some(1),
                kind: DiskKind::Disk,
            }],
            clock_offset_seconds: 0,
        })
        .await
        .expect("the sealed disk boots");

    // What the crc-agent does first: DNS for the CRC names inside the guest, then the kubelet.
    let ssh = Arc::new(
        SshGuest::connect(&format!("{ip}:22"), key, &SshOptions::default())
            .await
            .unwrap(),
    );
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

    // The guest's own kubeconfig names the CA and an admin identity.
    let kubeconfig = String::from_utf8(ssh.read_file("/opt/kubeconfig").await.unwrap()).unwrap();
    let credentials = Credentials {
        server_ca: kubeconfig_field(&kubeconfig, "ca"),
        client_cert: kubeconfig_field(&kubeconfig, "cert"),
        client_key: kubeconfig_field(&kubeconfig, "key"),
    };
    let guests = Arc::new(sim);
    let clock_sim = guests.clone();
    let clock: api::Clock =
        Arc::new(move || clock_sim.ctx.guests.guest_time(uid).unwrap_or_default());
    let client = api::client(ssh.clone(), &credentials, clock).unwrap();

    // The API comes up once the kubelet runs; the cluster converges like a real one.
    let versions = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "ClusterVersion"),
            "clusterversions",
        ),
    );
    let available = wait_for("ClusterVersion Available through the tunnel", || async {
        let version = versions.get("version").await.ok()?;
        let available = version.data["status"]["conditions"]
            .as_array()?
            .iter()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        available.then_some(version)
    })
    .await;
    assert_eq!(available.data["status"]["desired"]["version"], VERSION);
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let pending = csrs.list(&ListParams::default()).await.unwrap().items;
    let signers: Vec<_> = pending
        .iter()
        .map(|c| c.spec.signer_name.as_str())
        .collect();
    assert!(
        signers.contains(&"kubernetes.io/kube-apiserver-client-kubelet"),
        "{signers:?}"
    );
    assert!(
        signers.contains(&"kubernetes.io/kubelet-serving"),
        "{signers:?}"
    );

    // The same server judged at a clock 40 days on: its 30-day certificate has expired.
    let late_sim = guests.clone();
    let late: api::Clock =
        Arc::new(move || late_sim.ctx.guests.guest_time(uid).unwrap_or_default() + 40 * 86_400);
    let late_client = api::client(ssh.clone(), &credentials, late).unwrap();
    let err = kube::Api::<DynamicObject>::all_with(
        late_client,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "ClusterVersion"),
            "clusterversions",
        ),
    )
    .get("version")
    .await
    .expect_err("an expired certificate (by guest time) is refused");
    assert!(
        format!("{err:?}").to_lowercase().contains("expired"),
        "{err:?}"
    );

    // Stopping the kubelet takes the API down with it.
    ssh.run_checked(&Command::sudo(["systemctl", "stop", "kubelet"]))
        .await
        .unwrap();
    wait_for("guest API gone after kubelet stop", || async {
        versions.get("version").await.is_err().then_some(())
    })
    .await;
    guests.ctx.guests.shutdown_all().await;
}
