//! The crc-agent's first guest steps against a simulated sealed CRC guest over real SSH: they
//! succeed in upstream order, succeed again unchanged, and leave a guest whose resolver answers
//! the CRC names with its own address.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::net::Ipv4Addr;

use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{keys, steps};
use sim::Timings;
use sim::guest::state::GuestState;
use sim::guest::{BootDisk, BootSpec, DiskKind, GuestHost, disk};
use tokio::io::AsyncWriteExt;

const VERSION: &str = "4.22.7";

async fn run_all(ssh: &SshGuest, agent_key: &str) -> Ipv4Addr {
    let ip = steps::guest_ip(ssh).await.expect("guest IP");
    steps::grow_root(ssh).await.expect("grow root");
    steps::configure_dnsmasq(ssh, ip).await.expect("dnsmasq");
    steps::configure_resolver(ssh, ip).await.expect("resolver");
    steps::authorize_only(ssh, agent_key).await.expect("key");
    steps::start_kubelet(ssh).await.expect("kubelet");
    ip
}

#[tokio::test]
async fn agent_steps_configure_a_sealed_guest_idempotently() {
    let root = tempfile::tempdir().unwrap();
    let bundle_key = keys::generate_ecdsa_p256().unwrap();
    let bundle_line = keys::authorized_key_line(bundle_key.public_key(), "bundle").unwrap();
    let agent_key = keys::generate_ed25519().unwrap();
    let agent_line = keys::authorized_key_line(agent_key.public_key(), "crc-agent").unwrap();
    let image = root.path().join("disk.img");
    disk::create_disk(
        &image,
        256 << 20,
        Some(&GuestState::sealed_crc(VERSION, &bundle_line)),
    )
    .unwrap();

    let host = GuestHost::new(Timings::fast());
    let address = Ipv4Addr::new(127, 81, 0, 1);
    let uid = "vmi-agent-steps-1";
    host.boot(BootSpec {
        vmi_uid: uid.into(),
        namespace: "test".into(),
        vm_name: "crc".into(),
        ip: address,
        disks: vec![BootDisk {
            name: "rootdisk".into(),
            image,
            boot_order: Some(1),
            kind: DiskKind::Disk,
        }],
        clock_offset_seconds: 0,
    })
    .await
    .expect("the sealed disk boots");
    let ssh = SshGuest::connect(&format!("{address}:22"), bundle_key, &SshOptions::default())
        .await
        .unwrap();

    let ip = run_all(&ssh, &agent_line).await;
    assert_eq!(ip, Ipv4Addr::new(10, 0, 2, 2));
    assert_eq!(run_all(&ssh, &agent_line).await, ip, "second run");

    let state = host.state(uid).expect("guest running");
    assert_eq!(
        String::from_utf8_lossy(state.file(steps::DNSMASQ_CONF).expect("dnsmasq config")),
        steps::dnsmasq_config(ip)
    );
    for unit in ["dnsmasq.service", "kubelet.service"] {
        let unit_state = &state.units[unit];
        assert!(unit_state.active, "{unit} active: {unit_state:?}");
    }
    assert!(state.units["dnsmasq.service"].enabled);
    let keys_file =
        String::from_utf8_lossy(state.file(steps::AUTHORIZED_KEYS).expect("authorized_keys"))
            .into_owned();
    assert_eq!(
        keys_file,
        format!("{}\n", agent_line.trim()),
        "the agent key alone"
    );
    let resolver =
        String::from_utf8_lossy(state.file(steps::RESOLV_CONF).expect("resolv.conf")).into_owned();
    assert!(resolver.contains("nameserver 10.0.2.2"), "{resolver}");
    assert!(resolver.contains("search crc.testing"), "{resolver}");
    assert!(state.root.filesystem_bytes >= state.root.partition_bytes);

    // The guest itself resolves api.crc.testing through its dnsmasq: a tunnel to a port
    // registered on the guest address reaches the listener behind it.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    host.register_port(uid, 7443, listener.local_addr().unwrap());
    let mut tunnel = ssh
        .open_tunnel("api.crc.testing", 7443)
        .await
        .unwrap_or_else(|e| panic!("tunnel to api.crc.testing: {e}"));
    tokio::time::timeout(std::time::Duration::from_secs(60), listener.accept())
        .await
        .expect("the tunnel reaches the registered port in time")
        .expect("accept");
    tunnel.shutdown().await.ok();

    // The agent's own key now logs in.
    let again = SshGuest::connect(&format!("{address}:22"), agent_key, &SshOptions::default())
        .await
        .expect("the authorized agent key logs in");
    assert_eq!(steps::guest_ip(&again).await.unwrap(), ip);
    again.close().await;
    ssh.close().await;
    host.shutdown_all().await;
}
