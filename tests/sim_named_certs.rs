//! The external API path of a simulated CRC instance, end to end: a VirtualMachine's guest API is
//! reached through the management cluster's Route (the simulated router), TLS end to end with the
//! serving certificate the crc-agent installs as a `namedCertificate`; the guest's pull secret
//! follows `openshift-config/pull-secret`; a restarted simulation does not hand out addresses
//! that objects of the previous one still show.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::net::Ipv4Addr;
use std::sync::Arc;

use base64::Engine as _;
use futures::StreamExt as _;
use guestcluster::guest::api::{self, Credentials};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, keys};
use guestcluster::kubevirt::VirtualMachineInstance;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::runtime::{WatchStreamExt as _, watcher};
use kube::{Client, ResourceExt};
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde_json::json;
use sim::guest::disk::create_disk;
use sim::guest::state::GuestState;
use sim::route_proxy::RouteProxy;
use sim::{Options, Sim, Timings};
use support::wait_for;
use testenv::ControlPlane;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const VERSION: &str = "4.22.7";
const VM: &str = "crc-1";

fn resource(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, kind), plural)
}

fn kubeconfig_field(kubeconfig: &str, section: &str, inner: &str, key: &str) -> String {
    let value: serde_json::Value =
        serde_saphyr::from_str(kubeconfig).expect("guest kubeconfig is YAML");
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

/// The `Progressing` condition of a ClusterOperator.
fn progressing(op: &DynamicObject) -> Option<bool> {
    op.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Progressing")
        .map(|c| c["status"] == "True")
}

async fn create(client: &Client, ns: &str, ar: &ApiResource, body: serde_json::Value) {
    Api::<DynamicObject>::namespaced_with(client.clone(), ns, ar)
        .create(
            &PostParams::default(),
            &serde_json::from_value(body).unwrap(),
        )
        .await
        .unwrap();
}

/// `CONNECT host:443` through the simulated router; the stream after a `200`.
async fn connect(proxy: &RouteProxy, host: &str) -> Result<tokio::net::TcpStream, String> {
    let mut conn = tokio::net::TcpStream::connect(proxy.addr())
        .await
        .map_err(|e| e.to_string())?;
    conn.write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        head.push(conn.read_u8().await.map_err(|e| e.to_string())?);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    if head.starts_with("HTTP/1.1 200") {
        Ok(conn)
    } else {
        Err(head)
    }
}

/// TLS with SNI `host` through the router, trusting only `server_cert`, authenticated with the
/// client certificate; returns the certificate the server presented and its answer to
/// `GET /readyz`.
async fn readyz_through_route(
    proxy: &RouteProxy,
    host: &str,
    server_cert: &str,
    client_cert: &str,
    client_key: &str,
) -> Result<(Vec<u8>, String), String> {
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from_pem_slice(server_cert.as_bytes()).unwrap())
        .unwrap();
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(client_cert.as_bytes())
            .collect::<Result<_, _>>()
            .unwrap();
    let key = PrivateKeyDer::from_pem_slice(client_key.as_bytes()).unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_client_auth_cert(chain, key)
    .unwrap();
    let conn = connect(proxy, host).await?;
    let mut tls = tokio_rustls::TlsConnector::from(Arc::new(config))
        .connect(ServerName::try_from(host.to_owned()).unwrap(), conn)
        .await
        .map_err(|e| format!("TLS handshake: {e}"))?;
    let served = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    tls.write_all(
        format!("GET /readyz HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .map_err(|e| e.to_string())?;
    let mut response = Vec::new();
    // The server closes after the answer (`Connection: close`); a TLS close without
    // close_notify still leaves the full answer read.
    let _ = tls.read_to_end(&mut response).await;
    Ok((served, String::from_utf8_lossy(&response).into_owned()))
}

#[tokio::test]
async fn the_route_reaches_the_guest_api_with_its_named_certificate() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let client = cp.client().unwrap();
    let root = tempfile::tempdir().unwrap();
    let options = Options {
        root: root.path().join("sim"),
        timings: Timings::fast(),
        kubeconfig: cp.kubeconfig_path().to_path_buf(),
        guestcluster_bin: env!("CARGO_BIN_EXE_guestcluster").into(),
        our_image_prefix: "quay.io/opdev/guestcluster".into(),
        node_name: "sim-node".into(),
        flavour: Default::default(),
    };
    cp.kubevirt().await.expect("KubeVirt");
    cp.cdi_controller().await.expect("CDI's control plane");
    let mut sim = Sim::start(client.clone(), options.clone()).await.unwrap();
    sim.serve_guest_apis(cp.apiserver_launcher());
    let ns = support::namespace(&client, "named-certs").await;

    // A VirtualMachine booting a sealed CRC disk from a PVC.
    let key = keys::generate_ecdsa_p256().unwrap();
    let line = keys::authorized_key_line(key.public_key(), "test").unwrap();
    let pvc: PersistentVolumeClaim =
        serde_json::from_value(json!({"metadata": {"name": "crc-root"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}))
        .unwrap();
    Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pvc)
        .await
        .unwrap();
    let image = wait_for("the PVC bound", || async {
        sim.ctx
            .volumes
            .claim_disk_path(&client, &ns, "crc-root")
            .await
            .ok()
            .flatten()
    })
    .await;
    create_disk(
        &image,
        256 << 20,
        Some(&GuestState::sealed_crc(VERSION, &line)),
    )
    .unwrap();
    create(&client, &ns, &resource("kubevirt.io", "v1", "VirtualMachine", "virtualmachines"), json!({
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "metadata": {"name": VM},
        "spec": {"runStrategy": "Always", "template": {"metadata": {"labels": {"app": "crc", guestcluster::api::labels::VM: VM}}, "spec": {
            "domain": {"resources": {"requests": {"memory": "1Gi"}},
                       "devices": {"disks": [{"name": "root", "disk": {"bus": "virtio"}}]}},
            "volumes": [{"name": "root", "persistentVolumeClaim": {"claimName": "crc-root"}}]}}}}))
    .await;
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &ns);
    let vmi = wait_for("the VMI Running with an IP", || async {
        vmis.get_opt(VM)
            .await
            .ok()
            .flatten()
            .filter(|v| v.is_ready() && v.first_ip().is_some())
    })
    .await;
    let vmi_uid = vmi.uid().unwrap();
    let ip: Ipv4Addr = vmi.first_ip().unwrap().parse().unwrap();

    // What a Service selecting the VM finds: one launcher pod, at the address the guest has.
    let launchers = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{}={VM}", guestcluster::api::labels::VM)))
        .await
        .unwrap()
        .items;
    assert_eq!(launchers.len(), 1, "one launcher pod labelled with the VM");
    let pod_ip = launchers[0].status.as_ref().unwrap().pod_ip.clone();
    assert_eq!(pod_ip.as_deref(), Some(ip.to_string().as_str()));

    // The crc-agent's first steps: DNS for the CRC names inside the guest, then the kubelet.
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
    let kubeconfig = String::from_utf8(ssh.read_file("/opt/kubeconfig").await.unwrap()).unwrap();
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
    let clock_ctx = sim.ctx.clone();
    let clock_uid = vmi_uid.clone();
    let clock: api::Clock =
        Arc::new(move || clock_ctx.guests.guest_time(&clock_uid).unwrap_or_default());
    let guest = api::client(ssh.clone(), &credentials, clock).unwrap();
    let secrets: Api<Secret> = Api::namespaced(guest.clone(), "openshift-config");
    wait_for("the guest API through the tunnel", || async {
        secrets.get("pull-secret").await.ok()
    })
    .await;

    // The pull secret the agent merges into the cluster lands in the guest, as the MCO writes it.
    let auths = json!({"auths": {"registry.example": {"auth": "dXNlcjpwYXNz"}}}).to_string();
    secrets
        .patch(
            "pull-secret",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {".dockerconfigjson":
                base64::engine::general_purpose::STANDARD.encode(&auths)}})),
        )
        .await
        .unwrap();
    wait_for("the pull secret mirrored into the guest", || async {
        let state = sim.ctx.guests.state(&vmi_uid)?;
        (state.pull_secret() == Some(auths.as_bytes())).then_some(())
    })
    .await;

    // Every state of ClusterOperator kube-apiserver from now on, to see the rollout progress.
    let operators = Api::<DynamicObject>::all_with(
        guest.clone(),
        &resource(
            "config.openshift.io",
            "v1",
            "ClusterOperator",
            "clusteroperators",
        ),
    );
    let (seen_tx, mut seen_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut states = watcher(
        operators.clone(),
        watcher::Config::default().fields("metadata.name=kube-apiserver"),
    )
    .default_backoff()
    .applied_objects()
    .boxed();
    let watch = tokio::spawn(async move {
        while let Some(event) = states.next().await {
            if let Ok(op) = event {
                let _ = seen_tx.send(progressing(&op));
            }
        }
    });
    seen_rx
        .recv()
        .await
        .expect("the watch delivers the current state");

    // The external serving certificate for the Route host, as the crc-agent installs it.
    let host = format!("api-{VM}-{ns}.apps.mgmt.example");
    let external = rcgen::generate_simple_self_signed(vec![host.clone()]).unwrap();
    let (cert_pem, key_pem) = (external.cert.pem(), external.signing_key.serialize_pem());
    let tls_secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "external-api-serving-cert", "namespace": "openshift-config"},
        "type": "kubernetes.io/tls",
        "stringData": {"tls.crt": cert_pem, "tls.key": key_pem}}))
    .unwrap();
    secrets
        .create(&PostParams::default(), &tls_secret)
        .await
        .unwrap();
    Api::<DynamicObject>::all_with(
        guest.clone(),
        &resource("config.openshift.io", "v1", "APIServer", "apiservers"),
    )
    .patch(
        "cluster",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"servingCerts": {"namedCertificates": [
            {"names": [host], "servingCertificate": {"name": "external-api-serving-cert"}}]}}})),
    )
    .await
    .unwrap();

    // The management side: the operator's Service and passthrough Route for the VM.
    let service = format!("{VM}-crc-api");
    create(&client, &ns, &resource("", "v1", "Service", "services"), json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": service},
        "spec": {"selector": {guestcluster::api::labels::VM: VM}, "ports": [{"name": "https", "port": 6443, "targetPort": 6443}]}}))
    .await;
    create(
        &client,
        &ns,
        &resource("route.openshift.io", "v1", "Route", "routes"),
        json!({
        "apiVersion": "route.openshift.io/v1", "kind": "Route", "metadata": {"name": service},
        "spec": {"host": host, "to": {"kind": "Service", "name": service},
                 "port": {"targetPort": "https"}, "tls": {"termination": "passthrough"}}}),
    )
    .await;
    let proxy = RouteProxy::start(client.clone()).await.unwrap();

    // Once the rollout is done the guest serves the external certificate for the Route host.
    let expected = CertificateDer::from_pem_slice(cert_pem.as_bytes())
        .unwrap()
        .to_vec();
    let started = std::time::Instant::now();
    let answer = loop {
        match readyz_through_route(
            &proxy,
            &host,
            &cert_pem,
            &credentials.client_cert,
            &credentials.client_key,
        )
        .await
        {
            // The restarted server takes TLS connections before it is ready: 500 until then.
            Ok(answer) if answer.0 == expected && answer.1.starts_with("HTTP/1.1 200") => {
                break answer;
            }
            Ok((_, answer)) => assert!(
                started.elapsed() < support::DEADLINE,
                "not served the named certificate and ready after {:?}: {answer}",
                support::DEADLINE
            ),
            Err(err) => assert!(
                started.elapsed() < support::DEADLINE,
                "no answer through the Route after {:?}: {err}",
                support::DEADLINE
            ),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert_eq!(answer.0, expected, "the served certificate is the Secret's");
    assert!(answer.1.starts_with("HTTP/1.1 200"), "{}", answer.1);
    assert!(answer.1.ends_with("ok"), "{}", answer.1);

    // The restarted server kept its data, and the tunnelled client (SNI api.crc.testing, the
    // guest CA) reconnects to the default certificate.
    let kept = wait_for("the guest API again through the tunnel", || async {
        secrets.get("external-api-serving-cert").await.ok()
    })
    .await;
    assert_eq!(kept.type_.as_deref(), Some("kubernetes.io/tls"));
    wait_for("kube-apiserver done progressing", || async {
        let op = operators.get("kube-apiserver").await.ok()?;
        (progressing(&op) == Some(false)).then_some(())
    })
    .await;
    watch.abort();
    let mut reasons = Vec::new();
    while let Ok(state) = seen_rx.try_recv() {
        reasons.push(state);
    }
    assert!(
        reasons.contains(&Some(true)),
        "kube-apiserver was Progressing during the rollout: {reasons:?}"
    );

    // A restarted simulation keeps clear of the addresses the old objects still show.
    sim.shutdown().await;
    let restarted = Sim::start(client.clone(), options).await.unwrap();
    assert!(
        restarted.ctx.network.is_allocated(ip),
        "{ip} of the dead launcher pod is reserved"
    );
    assert_ne!(restarted.ctx.network.allocate(), ip);
    restarted.shutdown().await;
}
