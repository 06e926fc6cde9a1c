//! The simulated install path, driven directly (no KubeVirt, no control plane): a generator boot
//! of the live ISO where the extracted installer runs over SSH on the guest's clock, an install
//! boot that bootstraps in place onto `/dev/vda` and reboots into it within the same VMI, the
//! failure when the Ignition's certificates are not valid by guest time, and disks that still
//! need their ISO. The production SSH client is on the other end.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use base64::Engine as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use guestcluster::guest::keys::{self, PrivateKey};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, GuestError};
use sim::Timings;
use sim::guest::disk::{create_disk, read_state};
use sim::guest::state::paths;
use sim::guest::{
    BootDisk, BootSpec, DiskKind, ExitReason, GuestError as SimError, GuestEventKind, GuestHost,
};

const GIB: u64 = 1 << 30;
const DAY: i64 = 86_400;
const DEADLINE: Duration = Duration::from_secs(20);
const IMAGE: &str = "quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64";
const WORK: &str = "/var/tmp/guestcluster";

fn ip(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 78, 0, last)
}

fn spec(uid: &str, ip: Ipv4Addr, disks: Vec<BootDisk>, offset: i64) -> BootSpec {
    BootSpec {
        vmi_uid: uid.to_string(),
        namespace: "ns".to_string(),
        vm_name: "build".to_string(),
        ip,
        disks,
        clock_offset_seconds: offset,
    }
}

fn root_disk(image: &Path) -> BootDisk {
    BootDisk {
        name: "rootdisk".to_string(),
        image: image.to_path_buf(),
        boot_order: Some(1),
        kind: DiskKind::Disk,
    }
}

fn cdrom(image: &Path) -> BootDisk {
    BootDisk {
        name: "iso".to_string(),
        image: image.to_path_buf(),
        boot_order: Some(2),
        kind: DiskKind::Cdrom,
    }
}

/// Runs `run` again while exec fails with ETXTBSY: the scripts are written by this process
/// while other tests' threads fork, and a child holds the (close-on-exec) write descriptor from
/// its fork until its own exec — the kernel refuses to execute a file open for writing.
fn spawn_retrying(run: impl Fn() -> std::io::Result<std::process::Output>) -> std::process::Output {
    let mut attempts = 0;
    loop {
        match run() {
            Err(err) if err.raw_os_error() == Some(libc::ETXTBSY) && attempts < 50 => {
                attempts += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            result => return result.expect("running a fake tool"),
        }
    }
}

/// The fake tools, run as a Job pod runs them (host clock).
struct Pod {
    root: PathBuf,
}

impl Pod {
    fn new(dir: &Path) -> Self {
        let root = dir.join("sim");
        sim::tools::install(&root).unwrap();
        Pod { root }
    }

    fn run(&self, program: &Path, args: &[&str]) -> String {
        let path = format!(
            "{}:{}",
            sim::tools::bin_dir(&self.root).display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let out = spawn_retrying(|| {
            std::process::Command::new(program)
                .args(args)
                .env_clear()
                .env("PATH", &path)
                .output()
        });
        assert!(
            out.status.success(),
            "{program:?} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    fn tool(&self, name: &str) -> PathBuf {
        sim::tools::bin_dir(&self.root).join(name)
    }

    /// `oc adm release extract --command=openshift-install`: the launcher's path.
    fn extract(&self) -> PathBuf {
        let to = self.root.join("extracted");
        self.run(
            &self.tool("oc"),
            &[
                "adm",
                "release",
                "extract",
                "--command=openshift-install",
                &format!("--to={}", to.display()),
                IMAGE,
            ],
        );
        to.join("openshift-install")
    }

    /// `coreos-installer iso ignition embed` into a copy of the stock live ISO.
    fn iso_with(&self, ignition: &str, out: &Path) {
        let ign = out.with_extension("ign");
        std::fs::write(&ign, ignition).unwrap();
        let base = sim::tools::tools_dir(&self.root).join("rhcos-live.iso");
        self.run(
            &self.tool("coreos-installer"),
            &[
                "iso",
                "ignition",
                "embed",
                "-i",
                &ign.display().to_string(),
                "-o",
                &out.display().to_string(),
                &base.display().to_string(),
            ],
        );
    }
}

fn install_config(key: &str) -> String {
    format!(
        "apiVersion: v1\nbaseDomain: testing\nmetadata:\n  name: crc\ncontrolPlane:\n  name: master\n  replicas: 1\nbootstrapInPlace:\n  installationDisk: /dev/vda\npullSecret: '{{\"auths\":{{\"quay.io\":{{\"auth\":\"eDp5\"}}}}}}'\nsshKey: '{key}'\n"
    )
}

/// The installer's live Ignition with chronyd masked, as the build patches it: with NTP in reach,
/// chronyd would step the guest's day-behind clock to real time, past the day-long certificates.
fn with_chronyd_masked(ignition: &str) -> String {
    let mut patched: serde_json::Value = serde_json::from_str(ignition).unwrap();
    patched["systemd"]["units"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "chronyd.service", "mask": true}));
    patched.to_string()
}

fn generator_ignition(key: &str) -> String {
    serde_json::json!({
        "ignition": {"version": "3.2.0"},
        "passwd": {"users": [{"name": "core", "sshAuthorizedKeys": [key]}]},
        "systemd": {"units": [{"name": "chronyd.service", "mask": true}]},
    })
    .to_string()
}

async fn connect(ip: Ipv4Addr, key: &PrivateKey) -> SshGuest {
    let options = SshOptions {
        connect_timeout: DEADLINE,
        ..SshOptions::default()
    };
    SshGuest::connect(&format!("{ip}:22"), key.clone(), &options)
        .await
        .expect("ssh")
}

async fn ok(guest: &SshGuest, argv: &[&str]) -> String {
    guest
        .run_checked(&Command::new(argv.iter().copied()))
        .await
        .expect("command")
        .stdout_text()
}

async fn sudo(guest: &SshGuest, argv: &[&str]) -> String {
    guest
        .run_checked(&Command::sudo(argv.iter().copied()))
        .await
        .expect("command")
        .stdout_text()
}

async fn tee(guest: &SshGuest, path: &str, data: &[u8]) {
    let out = guest
        .run_with_input(&Command::sudo(["tee", path]), data)
        .await
        .expect("tee");
    assert_eq!(out.status, 0, "tee {path}: {}", out.stderr_text());
}

async fn guest_now(guest: &SshGuest) -> i64 {
    ok(guest, &["date", "-u", "+%s"])
        .await
        .trim()
        .parse()
        .unwrap()
}

async fn wait_for<T, F: std::future::Future<Output = Option<T>>>(
    what: &str,
    mut check: impl FnMut() -> F,
) -> T {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The generator boot, as the build helper drives it: the Ignition, kubeconfig and password.
async fn generate(guest: &SshGuest, launcher: &[u8], config: &str) -> (String, String, String) {
    sudo(guest, &["mkdir", "-p", &format!("{WORK}/install")]).await;
    tee(guest, &format!("{WORK}/openshift-install"), launcher).await;
    sudo(
        guest,
        &["chmod", "0755", &format!("{WORK}/openshift-install")],
    )
    .await;
    tee(
        guest,
        &format!("{WORK}/install/install-config.yaml"),
        config.as_bytes(),
    )
    .await;
    let installer = format!("{WORK}/openshift-install");
    let dir = format!("{WORK}/install");
    for step in ["manifests", "single-node-ignition-config"] {
        sudo(
            guest,
            &[
                "env",
                "OPENSHIFT_INSTALL_EXPERIMENTAL_DISABLE_IMAGE_POLICY=true",
                &format!("OPENSHIFT_INSTALL_RELEASE_IMAGE_OVERRIDE={IMAGE}"),
                &installer,
                "create",
                step,
                "--dir",
                &dir,
            ],
        )
        .await;
    }
    let ignition = sudo(
        guest,
        &["cat", &format!("{dir}/bootstrap-in-place-for-live-iso.ign")],
    )
    .await;
    let kubeconfig = sudo(guest, &["base64", "-w0", &format!("{dir}/auth/kubeconfig")]).await;
    let password = sudo(guest, &["cat", &format!("{dir}/auth/kubeadmin-password")]).await;
    (ignition, kubeconfig, password)
}

async fn power_off(host: &GuestHost, guest: SshGuest, uid: &str) {
    let mut exits = host.subscribe_exits();
    match guest.run(&Command::sudo(["poweroff"])).await {
        Ok(out) => assert_eq!(out.status, 0),
        Err(GuestError::NoExitStatus { .. } | GuestError::Ssh(_)) => {}
        Err(err) => panic!("poweroff: {err}"),
    }
    let exit = tokio::time::timeout(DEADLINE, async {
        loop {
            let exit = exits.recv().await.unwrap();
            if exit.vmi_uid == uid {
                return exit;
            }
        }
    })
    .await
    .expect("powered off");
    assert_eq!(exit.reason, ExitReason::PoweredOff);
}

#[tokio::test]
async fn generator_boot_then_install_boot_installs_to_vda_and_reboots_into_it() {
    let dir = tempfile::tempdir().unwrap();
    let pod = Pod::new(dir.path());
    let launcher = std::fs::read(pod.extract()).unwrap();
    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "build").unwrap();
    let root = dir.path().join("root.img");
    create_disk(&root, 4 * GIB, None).unwrap();
    let generator_iso = dir.path().join("generator.iso");
    pod.iso_with(&generator_ignition(&line), &generator_iso);
    let host = GuestHost::new(Timings::fast());

    // Generator boot: a day behind, blank root first, the live ISO second.
    host.boot(spec(
        "uid-generator",
        ip(1),
        vec![root_disk(&root), cdrom(&generator_iso)],
        -DAY,
    ))
    .await
    .expect("the blank root falls through to the ISO");
    let guest = connect(ip(1), &key).await;
    let host_now = sim::guest::time::host_now();
    let generated_at = guest_now(&guest).await;
    assert!((host_now - DAY - generated_at).abs() <= 5, "a day behind");
    let (ignition, kubeconfig, password) =
        generate(&guest, &launcher, &install_config(&line)).await;
    assert!(!kubeconfig.is_empty() && !password.trim().is_empty());
    let value: serde_json::Value = serde_json::from_str(&ignition).unwrap();
    let files = sim::tools::ignition_files(&value).unwrap();
    let signer =
        sim::installer::parse_record(&files["/opt/openshift/tls/kubelet-signer.crt"].contents)
            .unwrap();
    assert!(
        (signer.not_before - generated_at).abs() <= 5,
        "stamped with the guest's clock, not the pod's"
    );
    power_off(&host, guest, "uid-generator").await;
    assert_eq!(read_state(&root).unwrap(), None, "/var/tmp was memory");

    // The pod patches it as the profile does (here: the chronyd mask) and embeds it into a copy
    // of the ISO; the install boot, still a day behind.
    let mut patched: serde_json::Value = serde_json::from_str(&ignition).unwrap();
    patched["systemd"]["units"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "chronyd.service", "mask": true}));
    let install_iso = dir.path().join("install.iso");
    pod.iso_with(&patched.to_string(), &install_iso);
    let mut events = host.subscribe_events();
    host.boot(spec(
        "uid-install",
        ip(2),
        vec![root_disk(&root), cdrom(&install_iso)],
        -DAY,
    ))
    .await
    .unwrap();
    assert_eq!(host.boot_disk("uid-install"), None, "running the live ISO");
    let mut rebooted = false;
    tokio::time::timeout(DEADLINE, async {
        loop {
            let event = events.recv().await.unwrap();
            if event.vmi_uid != "uid-install" {
                continue;
            }
            match event.kind {
                GuestEventKind::Rebooting => rebooted = true,
                GuestEventKind::Booted if rebooted => return,
                _ => {}
            }
        }
    })
    .await
    .expect("the install reboots into the installed disk");
    assert_eq!(host.boot_disk("uid-install"), Some(root.clone()));
    let installed = read_state(&root).unwrap().expect("installed to /dev/vda");
    assert_eq!(installed.openshift_version.as_deref(), Some("4.22.3"));
    assert!(
        installed.units["chronyd.service"].masked,
        "the Ignition's mask"
    );
    // The installed cluster starts with the installer's manifests: the pull secret among them.
    let pull = installed
        .api_objects
        .iter()
        .find(|o| o["kind"] == "Secret" && o["metadata"]["name"] == "pull-secret")
        .expect("the installer's pull-secret manifest");
    let data = pull["data"][".dockerconfigjson"].as_str().unwrap();
    assert!(
        String::from_utf8(
            base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap()
        )
        .unwrap()
        .contains("auths"),
        "{pull}"
    );

    let guest = connect(ip(2), &key).await;
    let now = guest_now(&guest).await;
    assert!(
        (sim::guest::time::host_now() - DAY - now).abs() <= 5,
        "the reboot kept the VMI's clock offset"
    );
    let client = paths::KUBELET_CLIENT_CERT;
    let issuer = sudo(
        &guest,
        &["openssl", "x509", "-noout", "-issuer", "-in", client],
    )
    .await;
    assert_eq!(issuer, "issuer=CN=kubelet-signer, OU=openshift\n");
    let check = guest
        .run(&Command::sudo([
            "openssl",
            "x509",
            "-noout",
            "-checkend",
            "2160000",
            "-in",
            client,
        ]))
        .await
        .unwrap();
    assert_eq!(
        check.status, 1,
        "the installer's day-long kubelet certificate"
    );
    let active = ok(&guest, &["systemctl", "is-enabled", "kubelet"]).await;
    assert_eq!(active, "enabled\n");
    drop(guest);
    host.shutdown("uid-install").await;

    // The installed disk boots on its own, on real time.
    host.boot(spec("uid-cold", ip(3), vec![root_disk(&root)], 0))
        .await
        .expect("the installed disk boots without its ISO");
    host.shutdown("uid-cold").await;
}

#[tokio::test]
async fn an_ignition_made_on_the_pods_clock_fails_bootstrap_in_a_guest_a_day_behind() {
    let dir = tempfile::tempdir().unwrap();
    let pod = Pod::new(dir.path());
    let launcher = pod.extract();
    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "build").unwrap();
    // The obvious port: the Job runs the installer on real time.
    let install = dir.path().join("install");
    std::fs::create_dir_all(&install).unwrap();
    std::fs::write(install.join("install-config.yaml"), install_config(&line)).unwrap();
    let dir_arg = format!("--dir={}", install.display());
    pod.run(&launcher, &["create", "manifests", &dir_arg]);
    pod.run(
        &launcher,
        &["create", "single-node-ignition-config", &dir_arg],
    );
    let ignition =
        std::fs::read_to_string(install.join("bootstrap-in-place-for-live-iso.ign")).unwrap();
    let iso = dir.path().join("install.iso");
    pod.iso_with(&with_chronyd_masked(&ignition), &iso);
    let root = dir.path().join("root.img");
    create_disk(&root, 4 * GIB, None).unwrap();

    let host = GuestHost::new(Timings::fast());
    host.boot(spec(
        "uid-shifted",
        ip(4),
        vec![root_disk(&root), cdrom(&iso)],
        -DAY,
    ))
    .await
    .unwrap();
    let guest = connect(ip(4), &key).await;
    let journal = wait_for("bootkube's failure in its journal", || async {
        let text = ok(
            &guest,
            &["journalctl", "-u", "bootkube", "-n", "10", "--no-pager"],
        )
        .await;
        text.contains("Failed with result").then_some(text)
    })
    .await;
    assert!(
        journal.contains("x509: certificate has expired or is not yet valid: current time"),
        "{journal}"
    );
    assert!(journal.contains("is before"), "{journal}");
    let out = guest
        .run(&Command::new(["systemctl", "is-active", "bootkube"]))
        .await
        .unwrap();
    assert_eq!((out.status, out.stdout_text()), (3, "failed\n".to_string()));
    assert_eq!(read_state(&root).unwrap(), None, "nothing was installed");
    assert!(host.is_running("uid-shifted"), "the live system stays up");
    drop(guest);
    host.shutdown("uid-shifted").await;
    assert_eq!(read_state(&root).unwrap(), None);
    let err = host
        .boot(spec("uid-shifted-2", ip(5), vec![root_disk(&root)], 0))
        .await
        .unwrap_err();
    assert!(matches!(err, SimError::NoBootableDisk { .. }), "{err}");
}

#[tokio::test]
async fn a_disk_whose_install_did_not_finish_needs_its_iso() {
    let dir = tempfile::tempdir().unwrap();
    let pod = Pod::new(dir.path());
    let launcher = std::fs::read(pod.extract()).unwrap();
    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "build").unwrap();
    let root = dir.path().join("root.img");
    create_disk(&root, 4 * GIB, None).unwrap();
    let generator_iso = dir.path().join("generator.iso");
    pod.iso_with(&generator_ignition(&line), &generator_iso);
    // Installs take long enough here to stop one halfway.
    let host = GuestHost::new(Timings {
        install: Duration::from_secs(30),
        ..Timings::fast()
    });
    host.boot(spec(
        "uid-gen-2",
        ip(6),
        vec![root_disk(&root), cdrom(&generator_iso)],
        -DAY,
    ))
    .await
    .unwrap();
    let guest = connect(ip(6), &key).await;
    let (ignition, _, _) = generate(&guest, &launcher, &install_config(&line)).await;
    power_off(&host, guest, "uid-gen-2").await;
    let install_iso = dir.path().join("install.iso");
    pod.iso_with(&with_chronyd_masked(&ignition), &install_iso);

    // A blank root without the ISO does not boot.
    let err = host
        .boot(spec("uid-blank", ip(7), vec![root_disk(&root)], -DAY))
        .await
        .unwrap_err();
    assert!(matches!(err, SimError::NoBootableDisk { .. }), "{err}");

    host.boot(spec(
        "uid-halfway",
        ip(7),
        vec![root_disk(&root), cdrom(&install_iso)],
        -DAY,
    ))
    .await
    .unwrap();
    wait_for("the install writing /dev/vda", || async {
        read_state(&root)
            .ok()
            .flatten()
            .is_some_and(|s| s.install_incomplete)
            .then_some(())
    })
    .await;
    host.shutdown("uid-halfway").await;
    let err = host
        .boot(spec("uid-halfway-2", ip(8), vec![root_disk(&root)], -DAY))
        .await
        .unwrap_err();
    match err {
        SimError::NoBootableDisk { notes, .. } => {
            assert!(notes.contains("installation not finished"), "{notes}")
        }
        other => panic!("{other}"),
    }
}

/// A field of a kubeconfig (base64 data, decoded).
fn kubeconfig_field(kubeconfig: &str, section: &str, inner: &str, key: &str) -> String {
    use base64::Engine as _;
    let value: serde_json::Value = serde_saphyr::from_str(kubeconfig).expect("kubeconfig YAML");
    let encoded = value[section][0][inner][key].as_str().expect("field");
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(encoded)
            .unwrap(),
    )
    .unwrap()
}

fn dynamic(
    client: &kube::Client,
    group: &str,
    kind: &str,
    plural: &str,
) -> kube::Api<kube::api::DynamicObject> {
    kube::Api::all_with(
        client.clone(),
        &kube::core::ApiResource::from_gvk_with_plural(
            &kube::core::GroupVersionKind::gvk(group, "v1", kind),
            plural,
        ),
    )
}

fn condition(obj: &kube::api::DynamicObject, type_: &str) -> Option<(String, String)> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .map(|c| {
            (
                c["status"].as_str().unwrap_or_default().to_owned(),
                c["message"].as_str().unwrap_or_default().to_owned(),
            )
        })
}

/// A build through the install boot, with or without SNC's certificate steps, then the cold
/// restart at offset 0; returns the guest's verdict on the kubelet certificates (the 25-day
/// check) and the CSR signer they came from.
async fn build(
    sim: &std::sync::Arc<sim::Sim>,
    pod: &Pod,
    dir: &Path,
    n: u8,
    snc_steps: bool,
) -> (bool, String) {
    use guestcluster::guest::api::{self, Credentials};
    use guestcluster::guest::cluster::{Patience, approve_csrs};
    use std::sync::Arc;

    let host = &sim.ctx.guests;
    let launcher = std::fs::read(pod.extract()).unwrap();
    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "build").unwrap();
    let root = dir.join(format!("root-{n}.img"));
    create_disk(&root, 4 * GIB, None).unwrap();
    let generator_iso = dir.join(format!("generator-{n}.iso"));
    pod.iso_with(&generator_ignition(&line), &generator_iso);

    let uid = format!("gen-{n}");
    host.boot(spec(
        &uid,
        ip(20 + n),
        vec![root_disk(&root), cdrom(&generator_iso)],
        -DAY,
    ))
    .await
    .unwrap();
    let guest = connect(ip(20 + n), &key).await;
    let (ignition, kubeconfig, _) = generate(&guest, &launcher, &install_config(&line)).await;
    power_off(host, guest, &uid).await;
    use base64::Engine as _;
    let kubeconfig = String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(kubeconfig.trim())
            .unwrap(),
    )
    .unwrap();

    // The profile's live patches, reduced to what the test needs: chronyd masked, and the API
    // names resolving to the node IP inside the guest.
    let mut patched: serde_json::Value = serde_json::from_str(&ignition).unwrap();
    patched["systemd"]["units"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({"name": "chronyd.service", "mask": true}));
    patched["storage"]["files"].as_array_mut().unwrap().push(serde_json::json!({
        "path": "/etc/hosts", "mode": 420, "overwrite": true,
        "contents": {"source": "data:,127.0.0.1%20localhost%0A192.168.126.11%20api.crc.testing%20api-int.crc.testing%0A"}}));
    let install_iso = dir.join(format!("install-{n}.iso"));
    pod.iso_with(&patched.to_string(), &install_iso);

    let uid = format!("install-{n}");
    let mut events = host.subscribe_events();
    host.boot(spec(
        &uid,
        ip(30 + n),
        vec![root_disk(&root), cdrom(&install_iso)],
        -DAY,
    ))
    .await
    .unwrap();
    let mut rebooted = false;
    tokio::time::timeout(DEADLINE, async {
        loop {
            let event = events.recv().await.unwrap();
            match event.kind {
                GuestEventKind::Rebooting if event.vmi_uid == uid => rebooted = true,
                GuestEventKind::Booted if rebooted && event.vmi_uid == uid => return,
                _ => {}
            }
        }
    })
    .await
    .expect("installed and rebooted");

    // The installer's admin kubeconfig reaches the installed cluster, TLS checked at guest time.
    let credentials = Credentials {
        server_ca: kubeconfig_field(
            &kubeconfig,
            "clusters",
            "cluster",
            "certificate-authority-data",
        ),
        client_cert: kubeconfig_field(&kubeconfig, "users", "user", "client-certificate-data"),
        client_key: kubeconfig_field(&kubeconfig, "users", "user", "client-key-data"),
    };
    let ssh = Arc::new(connect(ip(30 + n), &key).await);
    let clock_sim = sim.clone();
    let clock_uid = uid.clone();
    let clock: api::Clock = Arc::new(move || {
        clock_sim
            .ctx
            .guests
            .guest_time(&clock_uid)
            .unwrap_or_default()
    });
    let client = api::client(ssh.clone(), &credentials, clock).unwrap();
    let versions = dynamic(
        &client,
        "config.openshift.io",
        "ClusterVersion",
        "clusterversions",
    );
    let progress = wait_for("install progress on the ClusterVersion", || async {
        let cv = versions.get("version").await.ok()?;
        let (status, message) = condition(&cv, "Progressing")?;
        (status == "True" && condition(&cv, "Available")?.0 == "False").then_some(message)
    })
    .await;
    assert!(
        progress.starts_with("Working towards 4.22.3: "),
        "{progress}"
    );
    wait_for("the install to complete", || async {
        let cv = versions.get("version").await.ok()?;
        (condition(&cv, "Available")?.0 == "True" && condition(&cv, "Progressing")?.0 == "False")
            .then_some(())
    })
    .await;
    let operators = dynamic(
        &client,
        "config.openshift.io",
        "ClusterOperator",
        "clusteroperators",
    );
    let all = operators.list(&Default::default()).await.unwrap().items;
    assert!(
        all.iter()
            .all(|op| condition(op, "Available").is_some_and(|c| c.0 == "True"))
    );
    let client_pem = paths::KUBELET_CLIENT_CERT;
    let installer_issuer = sudo(
        &ssh,
        &["openssl", "x509", "-noout", "-issuer", "-in", client_pem],
    )
    .await;
    assert_eq!(installer_issuer, "issuer=CN=kubelet-signer, OU=openshift\n");

    // SNC's certificate steps: the cred-manager (the build's: its account, role and DaemonSet),
    // then a new CSR signer.
    let mco = "openshift-machine-config-operator";
    let (account, role, binding) = guestcluster::guest::build::cred_manager_access();
    let post = Default::default();
    kube::Api::<k8s_openapi::api::core::v1::ServiceAccount>::namespaced(client.clone(), mco)
        .create(&post, &account)
        .await
        .unwrap();
    // First without the `use` of the privileged SCC: SCC admission keeps its pod from running,
    // though its account may mint the token.
    let roles = kube::Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), mco);
    let mut token_only = role.clone();
    token_only.rules.as_mut().unwrap().retain(|rule| {
        !rule
            .resources
            .iter()
            .flatten()
            .any(|r| r == "securitycontextconstraints")
    });
    assert_eq!(token_only.rules.as_ref().unwrap().len(), 1);
    roles.create(&post, &token_only).await.unwrap();
    kube::Api::<k8s_openapi::api::rbac::v1::RoleBinding>::namespaced(client.clone(), mco)
        .create(&post, &binding)
        .await
        .unwrap();
    kube::Api::<k8s_openapi::api::apps::v1::DaemonSet>::namespaced(client.clone(), mco)
        .create(&post, &guestcluster::guest::build::cred_manager())
        .await
        .unwrap();
    let log = sim
        .ctx
        .options
        .root
        .join("guest-apis")
        .join(&uid)
        .join("controllers.log");
    wait_for(
        "the cred-manager's pod refused by SCC admission",
        || async {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            text.contains(
                "Privileged containers are not allowed, provider \"privileged\": Forbidden",
            )
            .then_some(())
        },
    )
    .await;
    assert!(
        host.state(&uid)
            .is_some_and(|s| s.certificates.contains_key(paths::KUBELET_BOOTSTRAP_CERT)),
        "a refused cred-manager replaces nothing"
    );
    roles
        .replace(guestcluster::guest::build::CRED_MANAGER, &post, &{
            let mut role = role;
            role.metadata.resource_version = roles
                .get(guestcluster::guest::build::CRED_MANAGER)
                .await
                .unwrap()
                .metadata
                .resource_version;
            role
        })
        .await
        .unwrap();
    let secrets = kube::Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        client.clone(),
        "openshift-kube-controller-manager-operator",
    );
    let signer_of = |secret: k8s_openapi::api::core::v1::Secret| {
        let data = secret.data.unwrap_or_default();
        String::from_utf8(data["tls.crt"].0.clone()).unwrap()
    };
    let first_signer = wait_for("the signer Secrets", || async {
        secrets
            .get_opt("csr-signer")
            .await
            .ok()
            .flatten()
            .map(signer_of)
    })
    .await;
    assert!(
        first_signer.contains("subject: CN=kubelet-signer, OU=openshift"),
        "{first_signer}"
    );
    if snc_steps {
        for name in ["csr-signer-signer", "csr-signer"] {
            secrets.delete(name, &Default::default()).await.unwrap();
        }
        let replaced = wait_for("a new CSR signer", || async {
            let signer = secrets
                .get_opt("csr-signer")
                .await
                .ok()
                .flatten()
                .map(signer_of)?;
            (!signer.contains("CN=kubelet-signer")).then_some(signer)
        })
        .await;
        // The operator's signer is a real one: its key signs what the cluster issues next.
        let cn = sim::openshift::pki::common_name(&replaced);
        assert!(
            cn.as_deref()
                .is_some_and(|cn| cn.starts_with("kube-csr-signer_@")),
            "{cn:?}: {replaced}"
        );
    }
    wait_for("the cred-manager's kubeconfig on the node", || async {
        host.state(&uid)
            .is_some_and(|s| !s.certificates.contains_key(paths::KUBELET_BOOTSTRAP_CERT))
            .then_some(())
    })
    .await;
    drop(client);
    drop(ssh);

    // The cold restart: a new VMI, the root disk alone, offset 0.
    host.shutdown(&uid).await;
    let uid = format!("cold-{n}");
    host.boot(spec(&uid, ip(40 + n), vec![root_disk(&root)], 0))
        .await
        .expect("the installed disk boots alone");
    let ssh = Arc::new(connect(ip(40 + n), &key).await);
    let now = guest_now(&ssh).await;
    assert!(
        (sim::guest::time::host_now() - now).abs() <= 5,
        "back on real time"
    );
    let clock_sim = sim.clone();
    let clock_uid = uid.clone();
    let clock: api::Clock = Arc::new(move || {
        clock_sim
            .ctx
            .guests
            .guest_time(&clock_uid)
            .unwrap_or_default()
    });
    let client = api::client(ssh.clone(), &credentials, clock).unwrap();

    // The day-long control-plane certificates rotate by guest time.
    let lb = paths::AGGREGATOR_CLIENT_CERT;
    wait_for("the control plane's rotation", || async {
        let state = host.state(&uid)?;
        let cert = state.certificates.get(lb)?;
        (cert.not_before >= now && cert.not_after - cert.not_before == 30 * DAY).then_some(())
    })
    .await;

    // The helper's loop: approve CSRs until both kubelet certificates pass the 25-day check,
    // or (without SNC's steps) until the signer has refused to issue.
    let quick = Patience::new(Duration::from_millis(200), Duration::from_secs(10));
    let csrs = kube::Api::<k8s_openapi::api::certificates::v1::CertificateSigningRequest>::all(
        client.clone(),
    );
    let checkend = |path: &'static str| {
        let ssh = ssh.clone();
        async move {
            ssh.run(&Command::sudo([
                "openssl",
                "x509",
                "-noout",
                "-checkend",
                "2160000",
                "-in",
                path,
            ]))
            .await
            .unwrap()
            .status
                == 0
        }
    };
    let passed = wait_for("the kubelet certificates' outcome", || async {
        let _ = approve_csrs(&client, "crc", quick).await;
        if checkend(paths::KUBELET_CLIENT_CERT).await && checkend(paths::KUBELET_SERVER_CERT).await
        {
            return Some(true);
        }
        let items = csrs.list(&Default::default()).await.ok()?.items;
        let refused = items.iter().any(|csr| {
            csr.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.type_ == "Failed"
                            && c.reason.as_deref() == Some("SignerValidationFailure")
                    })
                })
        });
        refused.then_some(false)
    })
    .await;
    let issuer = sudo(
        &ssh,
        &["openssl", "x509", "-noout", "-issuer", "-in", client_pem],
    )
    .await;
    drop(client);
    drop(ssh);
    host.shutdown(&uid).await;
    (passed, issuer)
}

#[tokio::test]
async fn certificates_rotate_by_guest_time_and_only_snc_steps_pass_the_25_day_check() {
    let cp = testenv::ControlPlane::shared()
        .await
        .expect("control plane");
    let dir = tempfile::tempdir().unwrap();
    cp.kubevirt().await.expect("KubeVirt");
    cp.cdi_controller().await.expect("CDI's control plane");
    let mut sim = sim::Sim::start(
        cp.client().unwrap(),
        sim::Options {
            root: dir.path().join("sim"),
            // Long enough to watch the operators come up one by one.
            timings: Timings {
                operators: Duration::from_secs(2),
                ..Timings::fast()
            },
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
    let sim = std::sync::Arc::new(sim);
    let pod = Pod::new(dir.path());
    let ((with, with_issuer), (without, without_issuer)) = tokio::join!(
        build(&sim, &pod, dir.path(), 1, true),
        build(&sim, &pod, dir.path(), 2, false),
    );
    assert!(
        with,
        "SNC's steps: both kubelet certificates valid 25 days by guest time"
    );
    assert!(
        with_issuer.starts_with("issuer=CN=kube-csr-signer_@"),
        "{with_issuer}"
    );
    assert!(
        !without,
        "without a new signer the kubelet cannot get 25 days"
    );
    assert_eq!(without_issuer, "issuer=CN=kubelet-signer, OU=openshift\n");
}

/// An embed interrupted after coreos-installer wrote its output, before the helper renamed it
/// into place: the retry finds that output, which coreos-installer refuses to clobber.
#[tokio::test]
async fn an_embed_retried_over_the_output_of_an_interrupted_one_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let pod = Pod::new(dir.path());
    let ignition = dir.path().join("live.ign");
    std::fs::write(&ignition, generator_ignition("ssh-ed25519 AAAA build")).unwrap();
    let iso = sim::tools::tools_dir(&pod.root).join("rhcos-live.iso");
    let output = dir.path().join(".disk.img.partial");
    std::fs::write(&output, "half an ISO").unwrap();
    guestcluster::tools::coreos_installer::embed_with(
        &pod.tool("coreos-installer"),
        &ignition,
        &iso,
        &output,
    )
    .await
    .expect("an embed over a leftover output");
    let written = std::fs::read_to_string(&output).unwrap();
    assert!(written.starts_with("GUESTCLUSTER-SIM-ISO v1"), "{written}");
    assert!(written.contains("ignition: "), "{written}");
}
