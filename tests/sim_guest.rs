//! Simulated guests driven directly (no KubeVirt): disks in a tempdir, sshd on 127.77.0.x:22,
//! the production SSH client on the other end.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use guestcluster::guest::keys::{self, PrivateKey};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, GuestError};
use sim::Timings;
use sim::guest::disk::{create_disk, read_state};
use sim::guest::state::{GuestState, RootDisk, paths};
use sim::guest::{BootDisk, BootSpec, DiskKind, ExitReason, GuestError as SimError, GuestHost};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const GIB: u64 = 1 << 30;
/// Small enough that copies and conversions of the sparse images stay quick.
const DISK_SIZE: u64 = 2 * GIB;
const DAY: i64 = 86_400;
/// How long anything in these tests may take before we call it a failure.
const DEADLINE: Duration = Duration::from_secs(20);

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 77, 0, last)
}

fn key_line(key: &PrivateKey) -> String {
    keys::authorized_key_line(key.public_key(), "core").expect("key line")
}

/// A sealed CRC disk at `dir/name`, authorizing `key`.
fn sealed_disk(dir: &Path, name: &str, key: &PrivateKey) -> PathBuf {
    let path = dir.join(name);
    let mut state = GuestState::sealed_crc("4.22.1", &key_line(key));
    state.root = RootDisk::filling(DISK_SIZE);
    create_disk(&path, DISK_SIZE, Some(&state)).expect("create disk");
    path
}

/// A sparse copy, as CDI clones the volume.
fn clone_disk(from: &Path, to: &Path) {
    let status = std::process::Command::new("cp")
        .arg("--sparse=always")
        .arg(from)
        .arg(to)
        .status()
        .expect("cp");
    assert!(status.success());
}

fn spec(uid: &str, ip: Ipv4Addr, disks: Vec<BootDisk>, offset: i64) -> BootSpec {
    BootSpec {
        vmi_uid: uid.to_string(),
        namespace: "ns".to_string(),
        vm_name: "vm".to_string(),
        ip,
        disks,
        clock_offset_seconds: offset,
    }
}

fn root_disk(image: &Path) -> BootDisk {
    BootDisk {
        name: "root".to_string(),
        image: image.to_path_buf(),
        boot_order: Some(1),
        kind: DiskKind::Disk,
    }
}

async fn connect(ip: Ipv4Addr, key: &PrivateKey) -> Result<SshGuest, GuestError> {
    let options = SshOptions {
        connect_timeout: DEADLINE,
        ..SshOptions::default()
    };
    SshGuest::connect(&format!("{ip}:22"), key.clone(), &options).await
}

async fn run(guest: &SshGuest, line: &[&str]) -> guestcluster::guest::Output {
    guest
        .run(&Command::new(line.iter().copied()))
        .await
        .expect("run")
}

/// The guest's clock, `date +%s` in it.
async fn guest_seconds(guest: &SshGuest) -> i64 {
    run(guest, &["date", "+%s"])
        .await
        .stdout_text()
        .trim()
        .parse()
        .expect("date +%s prints seconds")
}

async fn host_time() -> i64 {
    sim::guest::time::host_now()
}

/// Polls until nothing accepts on `ip:22`.
async fn wait_port_closed(ip: Ipv4Addr) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if tokio::net::TcpStream::connect((ip, 22)).await.is_err() {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "sshd on {ip}:22 still accepts"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn sealed_disk_accepts_the_bundle_key_and_rejects_a_foreign_one() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = keys::generate_ecdsa_p256().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &bundle);
    let host = GuestHost::new(Timings::fast());
    host.boot(spec("uid-auth", ip(1), vec![root_disk(&image)], 0))
        .await
        .expect("boot");
    assert!(host.is_running("uid-auth"));

    let guest = connect(ip(1), &bundle).await.expect("bundle key works");
    let out = run(&guest, &["hostname"]).await;
    assert_eq!((out.status, out.stdout_text()), (0, "crc\n".to_string()));
    let out = run(&guest, &["ip", "-4", "route", "get", "1.1.1.1"]).await;
    assert!(
        out.stdout_text().contains("src 10.0.2.2 "),
        "{}",
        out.stdout_text()
    );
    assert!(!out.stdout_text().contains("127.77.0.1"));

    let foreign = keys::generate_ed25519().unwrap();
    let err = connect(ip(1), &foreign)
        .await
        .err()
        .expect("foreign key refused");
    assert!(matches!(err, GuestError::AuthRejected { .. }), "{err}");

    // The agent's step 6: an appended authorized key works without a reboot.
    let added = keys::generate_ed25519().unwrap();
    let path = "/home/core/.ssh/authorized_keys";
    if !guest.exists(path).await.unwrap() {
        guest.write_file(path, b"", 0o644).await.unwrap();
    }
    guest
        .append_file(path, format!("\n{}\n", key_line(&added)).as_bytes())
        .await
        .unwrap();
    let again = connect(ip(1), &added).await.expect("added key works");
    assert_eq!(run(&again, &["whoami"]).await.stdout_text(), "core\n");
    host.shutdown_all().await;
    assert!(!host.is_running("uid-auth"));
}

#[tokio::test]
async fn state_survives_shutdown_boot_and_a_clone_of_the_disk() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &key);
    let host = GuestHost::new(Timings::fast());
    host.boot(spec("uid-persist-1", ip(2), vec![root_disk(&image)], 0))
        .await
        .unwrap();
    let guest = connect(ip(2), &key).await.unwrap();
    guest
        .write_file(
            "/etc/dnsmasq.d/crc-dnsmasq.conf",
            b"domain=crc.testing\n",
            0o644,
        )
        .await
        .unwrap();
    guest
        .run_checked(&Command::sudo(["systemctl", "enable", "dnsmasq"]))
        .await
        .unwrap();
    guest.close().await;
    host.shutdown("uid-persist-1").await;
    assert!(!host.is_running("uid-persist-1"));
    wait_port_closed(ip(2)).await;

    // The disk file carries it: a clone is a file copy.
    let clone = dir.path().join("clone.img");
    clone_disk(&image, &clone);

    for (uid, address, disk) in [
        ("uid-persist-2", ip(2), &image),
        ("uid-clone", ip(3), &clone),
    ] {
        host.boot(spec(uid, address, vec![root_disk(disk)], 0))
            .await
            .unwrap();
        let guest = connect(address, &key).await.unwrap();
        let content = guest
            .read_file("/etc/dnsmasq.d/crc-dnsmasq.conf")
            .await
            .unwrap();
        assert_eq!(content, b"domain=crc.testing\n");
        let out = run(&guest, &["systemctl", "is-enabled", "dnsmasq"]).await;
        assert_eq!(out.stdout_text(), "enabled\n");
        // The host key was generated on the first boot and travelled with the disk.
        assert!(host.state(uid).unwrap().ssh_host_key.is_some());
    }
    let original = read_state(&image).unwrap().unwrap();
    let cloned = read_state(&clone).unwrap().unwrap();
    assert_eq!(original.ssh_host_key, cloned.ssh_host_key);
    host.shutdown_all().await;
}

#[tokio::test]
async fn unknown_commands_exit_127_and_scripts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &key);
    let host = GuestHost::new(Timings::fast());
    host.boot(spec("uid-unknown", ip(4), vec![root_disk(&image)], 0))
        .await
        .unwrap();
    let guest = connect(ip(4), &key).await.unwrap();
    let out = run(&guest, &["frobnicate", "--all"]).await;
    assert_eq!(out.status, 127);
    assert!(out.stderr_text().contains("frobnicate: command not found"));
    let out = run(&guest, &["sh", "-c", "growpart /dev/vda 4"]).await;
    assert_eq!(out.status, 2);
    // A raw line with shell control flow never reaches a program.
    let out = guest
        .run_with_input(&Command::new(["true;", "false"]), b"")
        .await
        .unwrap();
    assert_eq!(out.status, 127, "`true;` is one quoted word, not a script");
    host.shutdown_all().await;
}

#[tokio::test]
async fn a_blank_first_disk_falls_through_to_the_live_iso() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let root = dir.path().join("root.img");
    create_disk(&root, 64 * GIB, None).unwrap();
    let iso = dir.path().join("iso.img");
    let ignition = serde_json::json!({
        "ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": [key_line(&key)]}]},
        "systemd": {"units": [{"name": "chronyd.service", "mask": true}]},
    });
    create_disk(
        &iso,
        GIB,
        Some(&GuestState::live_iso(&ignition.to_string())),
    )
    .unwrap();
    let disks = vec![
        root_disk(&root),
        BootDisk {
            name: "iso".to_string(),
            image: iso.clone(),
            boot_order: Some(2),
            kind: DiskKind::Cdrom,
        },
    ];
    let host = GuestHost::new(Timings::fast());
    host.boot(spec("uid-live", ip(5), disks, 0)).await.unwrap();
    assert_eq!(host.install_target("uid-live"), Some(root.clone()));
    let guest = connect(ip(5), &key).await.expect("ignition key works");
    let out = run(&guest, &["lsblk", "-dn", "-o", "NAME,TYPE"]).await;
    assert_eq!(out.stdout_text(), "vda disk\nsr0 rom\n");
    let out = run(&guest, &["systemctl", "is-enabled", "chronyd"]).await;
    assert_eq!(out.stdout_text(), "masked\n");
    // The live system writes nothing back: ISO and target are untouched.
    guest
        .write_file("/etc/marker", b"live", 0o644)
        .await
        .unwrap();
    host.shutdown("uid-live").await;
    assert_eq!(read_state(&root).unwrap(), None);
    let iso_state = read_state(&iso).unwrap().unwrap();
    assert!(iso_state.files.is_empty() && iso_state.ssh_host_key.is_none());
}

#[tokio::test]
async fn no_bootable_disk_is_a_boot_error() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root.img");
    create_disk(&root, GIB, None).unwrap();
    let host = GuestHost::new(Timings::fast());
    let err = host
        .boot(spec("uid-none", ip(6), vec![root_disk(&root)], 0))
        .await
        .unwrap_err();
    assert!(matches!(err, SimError::NoBootableDisk { .. }), "{err}");
    assert!(!host.is_running("uid-none"));
}

#[tokio::test]
async fn chronyd_on_a_pod_network_steps_an_offset_clock_back_unless_masked() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "ntp.img", &key);
    // As a real pod network: NTP is reachable unless told otherwise.
    let host = GuestHost::new(Timings::fast());
    let offset = 20 * DAY;
    host.boot(spec("uid-ntp", ip(8), vec![root_disk(&image)], offset))
        .await
        .unwrap();
    let guest = connect(ip(8), &key).await.unwrap();
    let now = guest_seconds(&guest).await;
    assert!(
        (now - host_time().await).abs() < DAY,
        "chronyd stepped the +20 days back"
    );
    // Masked, the next boot keeps the offset.
    guest
        .run_checked(&Command::sudo(["systemctl", "mask", "chronyd.service"]))
        .await
        .unwrap();
    drop(guest);
    host.shutdown("uid-ntp").await;
    host.boot(spec("uid-ntp-2", ip(8), vec![root_disk(&image)], offset))
        .await
        .unwrap();
    let guest = connect(ip(8), &key).await.unwrap();
    let now = guest_seconds(&guest).await;
    assert!(
        (now - host_time().await - offset).abs() < 60,
        "the masked clone keeps its clock"
    );
    drop(guest);
    host.shutdown("uid-ntp-2").await;
}

#[tokio::test]
async fn guest_clock_is_host_time_plus_offset_and_certificates_follow_it() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &key);
    let host = GuestHost::new(Timings::fast());
    // The clock as KubeVirt sets it, with nothing to step it (NTP out of reach).
    host.set_ntp_reachable(false);
    let offset = 40 * DAY;
    host.boot(spec("uid-clock", ip(7), vec![root_disk(&image)], offset))
        .await
        .unwrap();
    let guest = connect(ip(7), &key).await.unwrap();
    let before = host_time().await;
    let guest_now = guest_seconds(&guest).await;
    let after = host_time().await;
    assert!(
        (before + offset..=after + offset).contains(&guest_now),
        "guest {guest_now}, host {before}..{after}, offset {offset}"
    );
    // Issued now for 30 days: expired by guest time.
    let checkend = Command::sudo([
        "openssl",
        "x509",
        "-noout",
        "-checkend",
        "0",
        "-in",
        paths::KUBELET_CLIENT_CERT,
    ]);
    let out = guest.run(&checkend).await.unwrap();
    assert_eq!(
        (out.status, out.stdout_text()),
        (1, "Certificate will expire\n".into())
    );
    host.shutdown("uid-clock").await;

    // The same disk with no offset: 25 more days are fine.
    host.boot(spec("uid-clock-2", ip(7), vec![root_disk(&image)], 0))
        .await
        .unwrap();
    let guest = connect(ip(7), &key).await.unwrap();
    let out = guest
        .run(&Command::sudo([
            "openssl",
            "x509",
            "-noout",
            "-checkend",
            "2160000",
            "-in",
            paths::KUBELET_SERVER_CERT,
        ]))
        .await
        .unwrap();
    assert_eq!(out.status, 0, "{}", out.stdout_text());
    host.shutdown_all().await;
}

#[tokio::test]
async fn poweroff_emits_an_exit_and_stops_sshd() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &key);
    let host = GuestHost::new(Timings::fast());
    let mut exits = host.subscribe_exits();
    host.boot(spec("uid-off", ip(8), vec![root_disk(&image)], 0))
        .await
        .unwrap();
    let guest = connect(ip(8), &key).await.unwrap();
    guest
        .write_file("/etc/sealed-marker", b"1", 0o644)
        .await
        .unwrap();
    // The connection may end before the exit status arrives, as on a real guest.
    match guest.run(&Command::sudo(["poweroff"])).await {
        Ok(out) => assert_eq!(out.status, 0),
        Err(GuestError::NoExitStatus { .. } | GuestError::Ssh(_)) => {}
        Err(other) => panic!("poweroff: {other}"),
    }
    let exit = tokio::time::timeout(DEADLINE, exits.recv())
        .await
        .expect("exit within the deadline")
        .expect("exit event");
    assert_eq!(exit.vmi_uid, "uid-off");
    assert_eq!(exit.reason, ExitReason::PoweredOff);
    assert!(!host.is_running("uid-off"));
    wait_port_closed(ip(8)).await;
    let state = read_state(&image).unwrap().unwrap();
    assert_eq!(state.file("/etc/sealed-marker"), Some(&b"1"[..]));
}

#[tokio::test]
async fn reboot_brings_sshd_back_with_the_same_disk() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &key);
    let host = GuestHost::new(Timings::fast());
    let mut events = host.subscribe_events();
    host.boot(spec("uid-reboot", ip(9), vec![root_disk(&image)], 0))
        .await
        .unwrap();
    let guest = connect(ip(9), &key).await.unwrap();
    let _ = guest.run(&Command::sudo(["systemctl", "reboot"])).await;
    // Booted (first), Rebooting, Booted (again).
    let mut seen = Vec::new();
    while seen
        .iter()
        .filter(|k| matches!(k, sim::guest::GuestEventKind::Booted))
        .count()
        < 2
    {
        let event = tokio::time::timeout(DEADLINE, events.recv())
            .await
            .expect("events within the deadline")
            .expect("event");
        if event.vmi_uid == "uid-reboot" {
            seen.push(event.kind);
        }
    }
    assert!(seen.contains(&sim::guest::GuestEventKind::Rebooting));
    assert!(host.is_running("uid-reboot"));
    let guest = connect(ip(9), &key).await.unwrap();
    assert_eq!(run(&guest, &["hostname"]).await.stdout_text(), "crc\n");
    assert_eq!(host.state("uid-reboot").unwrap().boot_count, 2);
    host.shutdown_all().await;
}

#[tokio::test]
async fn tunnels_reach_registered_ports_once_the_guest_resolves_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let image = sealed_disk(dir.path(), "disk.img", &key);
    let host = GuestHost::new(Timings::fast());
    host.boot(spec("uid-tunnel", ip(10), vec![root_disk(&image)], 0))
        .await
        .unwrap();
    // A stand-in for the guest's API server: echoes one line.
    let api = tokio::net::TcpListener::bind((ip(11), 0)).await.unwrap();
    let api_addr: SocketAddr = api.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = api.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                if let Ok(n) = socket.read(&mut buf).await {
                    let _ = socket.write_all(&buf[..n]).await;
                }
            });
        }
    });
    host.register_port("uid-tunnel", 6443, api_addr);
    let guest = connect(ip(10), &key).await.unwrap();

    // Before the agent's DNS steps the guest cannot resolve the name.
    let err = guest
        .open_tunnel("api.crc.testing", 6443)
        .await
        .err()
        .expect("unresolvable");
    assert!(matches!(err, GuestError::Tunnel { .. }), "{err}");

    let conf = "listen-address=10.0.2.2\nlocal=/crc.testing/\naddress=/api.crc.testing/10.0.2.2\n";
    guest
        .write_file("/etc/dnsmasq.d/crc-dnsmasq.conf", conf.as_bytes(), 0o644)
        .await
        .unwrap();
    guest
        .write_file(
            "/etc/resolv.conf",
            b"search crc.testing\nnameserver 10.0.2.2\n",
            0o644,
        )
        .await
        .unwrap();
    guest
        .run_checked(&Command::sudo(["systemctl", "start", "dnsmasq"]))
        .await
        .unwrap();
    let mut stream = guest.open_tunnel("api.crc.testing", 6443).await.unwrap();
    stream.write_all(b"ping").await.unwrap();
    let mut reply = [0u8; 4];
    tokio::time::timeout(DEADLINE, stream.read_exact(&mut reply))
        .await
        .expect("echo within the deadline")
        .unwrap();
    assert_eq!(&reply, b"ping");
    // Nothing registered on that port.
    assert!(guest.open_tunnel("api.crc.testing", 22623).await.is_err());
    host.shutdown_all().await;
}

#[tokio::test]
async fn qemu_img_round_trip_keeps_the_state() {
    let dir = tempfile::tempdir().unwrap();
    let key = keys::generate_ed25519().unwrap();
    let raw = sealed_disk(dir.path(), "disk.img", &key);
    let qcow2 = dir.path().join("disk.qcow2");
    let back = dir.path().join("back.img");
    let convert = |args: &[&std::ffi::OsStr]| {
        let status = std::process::Command::new("qemu-img")
            .arg("convert")
            .args(args)
            .status()
            .expect("qemu-img is installed (apt-get install qemu-utils)");
        assert!(status.success());
    };
    convert(&[
        "-f".as_ref(),
        "raw".as_ref(),
        "-O".as_ref(),
        "qcow2".as_ref(),
        raw.as_os_str(),
        qcow2.as_os_str(),
    ]);
    convert(&[
        "-f".as_ref(),
        "qcow2".as_ref(),
        "-O".as_ref(),
        "raw".as_ref(),
        qcow2.as_os_str(),
        back.as_os_str(),
    ]);
    assert_eq!(read_state(&back).unwrap(), read_state(&raw).unwrap());
    assert_eq!(
        std::fs::metadata(&back).unwrap().len(),
        std::fs::metadata(&raw).unwrap().len()
    );
}
