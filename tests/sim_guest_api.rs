//! A simulated guest's OpenShift API: started when the guest's kubelet starts, reached by a kube
//! client whose connections are SSH tunnels into the guest, with TLS verified at guest time; the
//! simulated operators move as a real single-node cluster's would, and approved kubelet CSRs are
//! issued real certificates.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use guestcluster::guest::api::{self, Credentials};
use guestcluster::guest::cluster::{Patience, approve_csrs};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, keys};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use sim::guest::state::GuestState;
use sim::guest::{BootDisk, BootSpec, DiskKind, disk};
use sim::{Options, Sim, Timings};
use support::wait_for;
use testenv::ControlPlane;
use x509_parser::prelude::FromDer as _;

const VERSION: &str = "4.22.7";
const CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
const SERVING_SIGNER: &str = "kubernetes.io/kubelet-serving";

/// A kubelet client CSR for `system:node:crc` filed by whoever the caller is (not the node).
fn foreign_node_csr() -> CertificateSigningRequest {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(rcgen::DnType::CommonName, "system:node:crc");
    dn.push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name = dn;
    let pem = params.serialize_request(&key).unwrap().pem().unwrap();
    serde_json::from_value(serde_json::json!({
        "metadata": {"generateName": "foreign-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "signerName": CLIENT_SIGNER,
            "usages": ["digital signature", "client auth"],
        }
    }))
    .unwrap()
}

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

/// A sealed CRC disk booted as a VMI would boot it, its kubelet started as the crc-agent starts
/// it, and a client of its API through SSH tunnels at guest time.
struct Booted {
    _root: tempfile::TempDir,
    guests: Arc<Sim>,
    ssh: Arc<SshGuest>,
    credentials: Credentials,
    client: kube::Client,
    uid: &'static str,
}

async fn boot_sealed(uid: &'static str, ip: Ipv4Addr, timings: Timings) -> Booted {
    let cp = ControlPlane::shared().await.expect("control plane");
    let root = tempfile::tempdir().unwrap();
    cp.kubevirt().await.expect("KubeVirt");
    cp.cdi_controller().await.expect("CDI's control plane");
    let mut sim = Sim::start(
        cp.client().unwrap(),
        Options {
            root: root.path().join("sim"),
            timings,
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

    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "test").unwrap();
    let image = root.path().join("disk.img");
    disk::create_disk(
        &image,
        256 << 20,
        Some(&GuestState::sealed_crc(VERSION, &line)),
    )
    .unwrap();
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
    Booted {
        _root: root,
        guests,
        ssh,
        credentials,
        client,
        uid,
    }
}

#[tokio::test]
async fn a_tunnelled_client_reaches_the_guest_api_at_guest_time() {
    // Operators warm up for long enough that the CSRs are approved (and issued) before the
    // cluster is Available: issuing must not keep the operators from moving.
    let Booted {
        _root,
        guests,
        ssh,
        credentials,
        client,
        uid,
    } = boot_sealed(
        "vmi-guest-api-1",
        Ipv4Addr::new(127, 79, 0, 1),
        Timings {
            operators: Duration::from_secs(5),
            ..Timings::fast()
        },
    )
    .await;

    // The API comes up once the kubelet runs, with the kubelet's client and serving CSRs.
    let versions = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "ClusterVersion"),
            "clusterversions",
        ),
    );
    let is_available = |obj: &DynamicObject| {
        obj.data["status"]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Available" && c["status"] == "True")
            })
    };
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let pending = wait_for("both kubelet CSRs through the tunnel", || async {
        let items = csrs.list(&ListParams::default()).await.ok()?.items;
        let signed_by = |signer: &str| items.iter().any(|c| c.spec.signer_name == signer);
        (signed_by(CLIENT_SIGNER) && signed_by(SERVING_SIGNER)).then_some(items)
    })
    .await;
    assert_eq!(pending.len(), 2, "one CSR per kubelet signer");
    assert!(
        !is_available(&versions.get("version").await.unwrap()),
        "the operators are still warming up when the CSRs are approved"
    );

    // The crc-agent approves them; the simulated kube-controller-manager issues certificates the
    // API server accepts: the requested subject and key, signed by the cluster's CSR signer.
    // Anyone else asking for the node's client certificate is not the node: left pending.
    let foreign = csrs
        .create(&Default::default(), &foreign_node_csr())
        .await
        .expect("a CSR in the admin's name");
    let foreign_name = foreign.metadata.name.clone().unwrap();
    let quick = Patience::new(Duration::from_millis(200), Duration::from_secs(30));
    let approvals = approve_csrs(&client, "crc", quick).await.unwrap();
    assert_eq!(approvals.approved, 2);
    let refused: Vec<_> = approvals.refused.iter().map(|(name, _)| name).collect();
    assert_eq!(
        refused,
        [&foreign_name],
        "the foreign CSR is refused, with why"
    );
    let issued = wait_for("certificates for the approved CSRs", || async {
        let items = csrs.list(&ListParams::default()).await.ok()?.items;
        let (theirs, kubelets): (Vec<_>, Vec<_>) = items
            .into_iter()
            .partition(|c| c.metadata.name.as_deref() == Some(foreign_name.as_str()));
        let undecided = theirs[0].status.as_ref().is_none_or(|s| {
            s.conditions.iter().flatten().all(|c| c.type_ != "Approved") && s.certificate.is_none()
        });
        assert!(
            undecided,
            "the foreign CSR stays pending: {:?}",
            theirs[0].status
        );
        let items = kubelets;
        items
            .iter()
            .all(|c| {
                c.status
                    .as_ref()
                    .and_then(|s| s.certificate.as_ref())
                    .is_some_and(|cert| !cert.0.is_empty())
            })
            .then_some(items)
    })
    .await;
    let mut issuers = Vec::new();
    for csr in &issued {
        let pem = &csr.status.as_ref().unwrap().certificate.as_ref().unwrap().0;
        let (rest, block) = x509_parser::pem::parse_x509_pem(pem).expect("a PEM block");
        assert_eq!(block.label, "CERTIFICATE");
        assert!(rest.iter().all(u8::is_ascii_whitespace), "one certificate");
        let cert = block.parse_x509().expect("an X.509 certificate");
        assert_eq!(
            cert.subject().to_string(),
            "CN=system:node:crc, O=system:nodes"
        );
        let (_, request) = x509_parser::pem::parse_x509_pem(&csr.spec.request.0).unwrap();
        let (_, request) = x509_parser::certification_request::X509CertificationRequest::from_der(
            &request.contents,
        )
        .unwrap();
        assert_eq!(
            cert.public_key().raw,
            request.certification_request_info.subject_pki.raw,
            "the certificate is for the requested key"
        );
        let usage = cert
            .extended_key_usage()
            .unwrap()
            .expect("extended key usage")
            .value;
        match csr.spec.signer_name.as_str() {
            CLIENT_SIGNER => assert!(usage.client_auth && !usage.server_auth),
            _ => assert!(usage.server_auth && !usage.client_auth),
        }
        issuers.push(cert.issuer().to_string());
    }
    // As OpenShift's kube-controller-manager does, one cluster signer signs every
    // `kubernetes.io/*` signer's certificates: its `csr-signer`, as the operator handed it over.
    let kcm_signer = Api::<k8s_openapi::api::core::v1::Secret>::namespaced(
        client.clone(),
        "openshift-kube-controller-manager",
    )
    .get("csr-signer")
    .await
    .expect("the kube-controller-manager's csr-signer");
    let pem = &kcm_signer.data.as_ref().unwrap()["tls.crt"].0;
    let (_, block) = x509_parser::pem::parse_x509_pem(pem).expect("a PEM block");
    let signer = block.parse_x509().expect("an X.509 certificate");
    let signer = signer.subject().to_string();
    assert!(signer.starts_with("CN=kube-csr-signer_@"), "{signer}");
    assert_eq!(
        issuers,
        [signer.clone(), signer],
        "both issued by the csr-signer"
    );

    // The cluster still converges like a real one: every operator, then the version, Available.
    let operators = Api::<DynamicObject>::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "ClusterOperator"),
            "clusteroperators",
        ),
    );
    wait_for("every ClusterOperator Available after the CSRs", || async {
        let items = operators.list(&ListParams::default()).await.ok()?.items;
        (items.len() == sim::openshift::cluster::OPERATORS.len() && items.iter().all(is_available))
            .then_some(())
    })
    .await;
    let available = wait_for("ClusterVersion Available through the tunnel", || async {
        let version = versions.get("version").await.ok()?;
        is_available(&version).then_some(version)
    })
    .await;
    assert_eq!(available.data["status"]["desired"]["version"], VERSION);

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

fn machine_configs(client: &kube::Client) -> Api<DynamicObject> {
    Api::all_with(
        client.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("machineconfiguration.openshift.io", "v1", "MachineConfig"),
            "machineconfigs",
        ),
    )
}

/// A MachineConfig of `role` writing `text` to `path`.
fn machine_config(name: &str, role: &str, path: &str, text: &str) -> DynamicObject {
    let source = format!(
        "data:;base64,{}",
        base64::engine::general_purpose::STANDARD.encode(text)
    );
    serde_json::from_value(serde_json::json!({
        "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
        "metadata": {"name": name, "labels": {"machineconfiguration.openshift.io/role": role}},
        "spec": {"config": {"ignition": {"version": "3.5.0"},
                            "storage": {"files": [{"path": path, "mode": 420, "contents": {"source": source}}]}}}
    }))
    .unwrap()
}

/// The pull secret a rendering carries in `/var/lib/kubelet/config.json`.
fn rendered_pull_secret(config: &DynamicObject) -> String {
    let files = config.data["spec"]["config"]["storage"]["files"]
        .as_array()
        .unwrap();
    let file = files
        .iter()
        .find(|f| f["path"] == "/var/lib/kubelet/config.json")
        .expect("the rendering carries the pull secret");
    let source = file["contents"]["source"].as_str().unwrap();
    let (_, data) = source.split_once(";base64,").unwrap();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap(),
    )
    .unwrap()
}

/// The guest's Machine Config Operator keeps its objects as upstream's does: renderings are
/// MachineConfig objects that stay, the pool selects its sources by role, and a rollout is
/// reported done once the node runs the targeted rendering. The product's rollout wait must end
/// on such a pool, and what it waited for must be on the node.
#[tokio::test]
async fn a_machine_config_rolls_out_onto_the_node_beside_renderings_that_stay() {
    use guestcluster::guest::customize;
    let booted = boot_sealed(
        "vmi-guest-mco-1",
        Ipv4Addr::new(127, 79, 0, 2),
        Timings::fast(),
    )
    .await;
    let (client, ssh) = (&booted.client, &booted.ssh);
    let configs = machine_configs(client);
    let rollout = Patience::new(Duration::from_millis(100), Duration::from_secs(60));
    let first = customize::wait_pool(client, rollout)
        .await
        .expect("the pool runs its first rendering");
    assert!(first.starts_with("rendered-master-"), "{first}");

    // A master MachineConfig, and a worker one the master pool must not take.
    let post = kube::api::PostParams::default();
    configs
        .create(
            &post,
            &machine_config(
                "99-master-note",
                "master",
                "/etc/guest-note",
                "from the pool\n",
            ),
        )
        .await
        .unwrap();
    configs
        .create(
            &post,
            &machine_config("99-worker-note", "worker", "/etc/worker-note", "not here\n"),
        )
        .await
        .unwrap();
    let second = customize::wait_pool(client, rollout)
        .await
        .expect("the pool rolls out a rendering with the master MachineConfig");
    assert_ne!(second, first);
    assert_eq!(
        ssh.read_file("/etc/guest-note").await.unwrap(),
        b"from the pool\n"
    );
    assert!(
        ssh.read_file("/etc/worker-note").await.is_err(),
        "the worker's MachineConfig is not the master pool's"
    );

    // The pull secret reaches the node through a new rendering; the old renderings stay, each
    // with the pull secret it was made with.
    let wanted = r#"{"auths":{"registry.example":{"auth":"dXNlcjpzZWNyZXQ="}}}"#;
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "openshift-config");
    let body = serde_json::json!({"data": {".dockerconfigjson":
        base64::engine::general_purpose::STANDARD.encode(wanted)}});
    secrets
        .patch(
            "pull-secret",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&body),
        )
        .await
        .unwrap();
    wait_for("the node's pull secret replaced", || async {
        let text = ssh.read_file("/var/lib/kubelet/config.json").await.ok()?;
        (text == wanted.as_bytes()).then_some(())
    })
    .await;
    let third = customize::wait_pool(client, rollout).await.unwrap();
    assert!(third != second && third != first, "{third}");
    let rendered: Vec<String> = configs
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter_map(|c| c.metadata.name.clone())
        .filter(|n| n.starts_with("rendered-master-"))
        .collect();
    for name in [&first, &second, &third] {
        assert!(rendered.contains(name), "{name} kept: {rendered:?}");
    }
    assert_eq!(
        rendered_pull_secret(&configs.get(&third).await.unwrap()),
        wanted
    );
    assert_ne!(
        rendered_pull_secret(&configs.get(&first).await.unwrap()),
        wanted,
        "an old rendering keeps the pull secret it was made with"
    );
    booted.guests.ctx.guests.shutdown_all().await;
}
