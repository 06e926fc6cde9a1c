//! The crc-agent end to end: `agent::run` against a sealed CRC guest of the simulation (real SSH,
//! a real guest kube-apiserver) and the real management API — the handoff Secret is published
//! and the guest is configured as upstream's agent leaves it; a VMI that is not the agent's
//! (replaced, deleted) ends the run successfully without publishing.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::net::Ipv4Addr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use guestcluster::agent::{self, Config, Outcome, Settings, publish};
use guestcluster::guest::api::{self, Credentials};
use guestcluster::guest::cluster::{self, Patience, Patiences};
use guestcluster::guest::kubeconfig::Kubeconfig;
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{htpasswd, keys};
use guestcluster::identity::{self, Identity};
use guestcluster::kubevirt::VirtualMachineInstance;
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use sim::guest::state::GuestState;
use sim::guest::{BootDisk, BootSpec, DiskKind, GuestHost, disk};
use sim::{Options, SimContext, Timings, network, openshift, volumes};
use testenv::ControlPlane;

const VERSION: &str = "4.22.7";
const PULL_SECRET: &[u8] = br#"{"auths":{"registry.example.com":{"auth":"dXNlcjpwYXNz"}}}"#;

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// Short waits: the simulation moves in milliseconds.
fn fast_settings() -> Settings {
    let quick = Patience::new(Duration::from_millis(200), Duration::from_secs(60));
    Settings {
        ssh_port: quick,
        ssh_connect_timeout: Duration::from_secs(10),
        ssh_command_timeout: Duration::from_secs(60),
        run_deadline: Duration::from_secs(600),
        patiences: Patiences::uniform(quick),
        bcrypt_cost: 4,
        watch_retry: Duration::from_millis(200),
    }
}

/// The ClusterInstance the handoff belongs to (nothing reconciles it here); returns its UID.
async fn create_instance(client: &kube::Client, namespace: &str, name: &str) -> String {
    let instances = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        namespace,
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("guestcluster.opdev.io", "v1alpha1", "ClusterInstance"),
            "clusterinstances",
        ),
    );
    let object: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterInstance",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"type": "crc", "template": {
            "crcVersion": "4.22.7", "ocpVersion": VERSION, "memory": "16Gi", "cores": 4,
        }},
    }))
    .unwrap();
    instances
        .create(&PostParams::default(), &object)
        .await
        .expect("create ClusterInstance")
        .metadata
        .uid
        .unwrap()
}

/// A VMI object in `Running` (the guest itself is booted by the test); returns its UID.
async fn create_running_vmi(client: &kube::Client, namespace: &str, name: &str) -> String {
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), namespace);
    let vmi: VirtualMachineInstance = serde_json::from_value(json!({
        "apiVersion": "kubevirt.io/v1",
        "kind": "VirtualMachineInstance",
        "metadata": {"name": name, "namespace": namespace},
        // What KubeVirt's admission requires of a VMI (this binary runs no webhooks).
        "spec": {"domain": {"devices": {}, "resources": {"requests": {"memory": "1Gi"}}}},
    }))
    .unwrap();
    let created = vmis
        .create(&PostParams::default(), &vmi)
        .await
        .expect("create VMI");
    vmis.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await
    .expect("VMI Running");
    created.metadata.uid.unwrap()
}

/// The agent's mounted inputs: bundle key, instance key, identity, pull secret.
fn write_inputs(
    dir: &Path,
    bundle_key: &keys::PrivateKey,
    guest_key: &keys::PrivateKey,
    identity: &Identity,
) {
    std::fs::create_dir_all(dir.join("ssh")).unwrap();
    std::fs::write(
        dir.join("ssh/id_ecdsa"),
        keys::to_openssh(bundle_key).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("guest-key"), keys::to_openssh(guest_key).unwrap()).unwrap();
    std::fs::create_dir_all(dir.join("identity")).unwrap();
    for (key, value) in identity.to_secret_data() {
        std::fs::write(dir.join("identity").join(key), value.0).unwrap();
    }
    std::fs::write(dir.join("pull-secret"), PULL_SECRET).unwrap();
}

fn config(
    dir: &Path,
    namespace: &str,
    name: &str,
    instance_uid: &str,
    vmi_uid: &str,
    ip: Ipv4Addr,
    host: &str,
) -> Config {
    Config {
        instance_name: name.into(),
        instance_namespace: namespace.into(),
        instance_uid: instance_uid.into(),
        vm_name: name.into(),
        ssh_host: ip.to_string(),
        ssh_port: 22,
        vmi_uid: vmi_uid.into(),
        ssh_user: "core".into(),
        ssh_key_path: dir.join("ssh/id_ecdsa"),
        guest_key_path: dir.join("guest-key"),
        identity_path: dir.join("identity"),
        pull_secret_path: dir.join("pull-secret"),
        api_hostname: host.into(),
        settings: fast_settings(),
    }
}

/// Guests and their API servers, without the rest of the simulation: the VMI objects here are
/// made by the test, and simulated KubeVirt would claim them.
fn guest_world(cp: &ControlPlane, root: &Path) -> Arc<SimContext> {
    let timings = Timings::fast();
    let ctx = Arc::new(SimContext {
        client: cp.client().unwrap(),
        options: Options {
            root: root.join("sim"),
            timings: timings.clone(),
            kubeconfig: cp.kubeconfig_path().to_path_buf(),
            guestcluster_bin: env!("CARGO_BIN_EXE_guestcluster").into(),
            our_image_prefix: "quay.io/opdev/guestcluster".into(),
            node_name: "sim-node".into(),
            flavour: Default::default(),
        },
        volumes: volumes::VolumeStore::new(root.join("volumes")),
        network: network::IpAllocator::default(),
        pod_groups: Default::default(),
        guests: GuestHost::new(timings),
    });
    tokio::spawn(openshift::link::run(ctx.clone(), cp.apiserver_launcher()));
    ctx
}

/// The first success of `attempt`, retried until the support deadline.
async fn eventually<T, E, F, Fut>(what: &str, mut attempt: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    support::wait_for(what, || {
        let result = attempt();
        async move { result.await.ok() }
    })
    .await
}

fn secret_text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

#[tokio::test]
async fn the_agent_configures_a_sealed_guest_and_publishes_the_handoff() {
    // `RUST_LOG=guestcluster=debug` shows the agent's steps.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
    let cp = ControlPlane::shared().await.expect("control plane");
    let client = cp.client().unwrap();
    let namespace = support::namespace(&client, "agent").await;
    let name = "crc-a";
    let host = "api-crc-a-0123456789abcdef.apps.example.com";
    let root = tempfile::tempdir().unwrap();

    let instance_uid = create_instance(&client, &namespace, name).await;
    let vmi_uid = create_running_vmi(&client, &namespace, name).await;

    let bundle_key = keys::generate_ecdsa_p256().unwrap();
    let bundle_line = keys::authorized_key_line(bundle_key.public_key(), "bundle").unwrap();
    let image = root.path().join("disk.img");
    disk::create_disk(
        &image,
        256 << 20,
        Some(&GuestState::sealed_crc(VERSION, &bundle_line)),
    )
    .unwrap();
    let ctx = guest_world(cp, root.path());
    let ip = Ipv4Addr::new(127, 83, 0, 1);
    ctx.guests
        .boot(BootSpec {
            vmi_uid: vmi_uid.clone(),
            namespace: namespace.clone(),
            vm_name: name.into(),
            ip,
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

    let identity = identity::generate(host, now() - 60).unwrap();
    let guest_key = keys::generate_ed25519().unwrap();
    write_inputs(root.path(), &bundle_key, &guest_key, &identity);
    let config = config(
        root.path(),
        &namespace,
        name,
        &instance_uid,
        &vmi_uid,
        ip,
        host,
    );

    let outcome = agent::run(&config, client.clone())
        .await
        .unwrap_or_else(|e| panic!("agent failed: {} {e}", e.reason()));
    let secret_name = publish::secret_name(name, &vmi_uid);
    assert_eq!(
        outcome,
        Outcome::Published {
            secret: secret_name.clone(),
            ocp_version: VERSION.into()
        }
    );

    // The handoff: contract labels, owner, data.
    let handoff = Api::<Secret>::namespaced(client.clone(), &namespace)
        .get(&secret_name)
        .await
        .expect("handoff Secret");
    let labels = handoff.metadata.labels.clone().unwrap();
    assert_eq!(labels["opdev.io/managed-by"], "crc-agent");
    assert_eq!(labels["opdev.io/cluster-instance"], name);
    let owners = handoff.metadata.owner_references.clone().unwrap();
    assert_eq!(owners.len(), 1);
    assert_eq!(owners[0].uid, instance_uid);
    assert_eq!(owners[0].block_owner_deletion, None);
    assert_eq!(secret_text(&handoff, "vmiUID"), vmi_uid);
    assert_eq!(secret_text(&handoff, "ocpVersion"), VERSION);
    let kubeconfig_text = secret_text(&handoff, "kubeconfig");
    kube::config::Kubeconfig::from_yaml(&kubeconfig_text)
        .expect("the handoff kubeconfig is what kube clients read");
    let kubeconfig = Kubeconfig::parse(&kubeconfig_text).unwrap();
    for cluster in kubeconfig.value()["clusters"].as_array().unwrap() {
        assert_eq!(cluster["cluster"]["server"], format!("https://{host}:443"));
    }
    assert_eq!(kubeconfig.server_ca().unwrap(), identity.serving_crt);
    let (client_cert, client_key) = kubeconfig.client_credentials().unwrap();
    assert_eq!(client_cert, identity.client_crt);

    // The guest's kubeconfig now authenticates with the identity (step 8).
    let state = ctx.guests.state(&vmi_uid).expect("guest running");
    let guest_kubeconfig = Kubeconfig::parse(
        std::str::from_utf8(state.file(cluster::KUBECONFIG_PATH).unwrap()).unwrap(),
    )
    .unwrap();
    assert_eq!(
        guest_kubeconfig.client_credentials().unwrap(),
        (identity.client_crt.clone(), identity.client_key.clone())
    );
    let server_ca = guest_kubeconfig.server_ca().unwrap();

    // Only the instance key opens the guest now: authorized_keys holds it alone and Ignition's
    // fragment with the bundle key is gone.
    let guest_line = keys::authorized_key_line(guest_key.public_key(), "crc-instance").unwrap();
    assert_eq!(
        String::from_utf8_lossy(state.file("/home/core/.ssh/authorized_keys").unwrap()),
        format!("{guest_line}\n")
    );
    assert_eq!(state.provisioned_keys("core"), Vec::<String>::new());
    let refused = SshGuest::connect(
        &format!("{ip}:22"),
        bundle_key.clone(),
        &SshOptions::default(),
    )
    .await
    .err()
    .expect("the bundle key is refused");
    assert!(
        matches!(
            refused,
            guestcluster::guest::GuestError::AuthRejected { .. }
        ),
        "{refused}"
    );

    // The handoff's user works against the guest API (through a tunnel; the Route path is the
    // operator's readiness probe, tested with it).
    let ssh = Arc::new(
        SshGuest::connect(&format!("{ip}:22"), guest_key, &SshOptions::default())
            .await
            .expect("the instance key logs in"),
    );
    let clock_ctx = ctx.clone();
    let clock_uid = vmi_uid.clone();
    let clock: api::Clock =
        Arc::new(move || clock_ctx.guests.guest_time(&clock_uid).unwrap_or_default());
    let guest = api::client(
        ssh.clone(),
        &Credentials {
            server_ca,
            client_cert,
            client_key,
        },
        clock,
    )
    .unwrap();
    // The guest API server restarts for the namedCertificates rollout the agent started, so
    // reads are retried until it is back.
    let namespaces = Api::<Namespace>::all(guest.clone());
    let one = ListParams::default().limit(1);
    eventually("the handoff identity is admitted by the guest API", || {
        namespaces.list(&one)
    })
    .await;

    let config_secrets = Api::<Secret>::namespaced(guest.clone(), "openshift-config");
    let htpass = eventually("htpass-secret", || config_secrets.get("htpass-secret")).await;
    let htpass = secret_text(&htpass, "htpasswd");
    let users: Vec<&str> = htpass.lines().filter_map(|l| l.split(':').next()).collect();
    assert!(users.contains(&htpasswd::KUBEADMIN), "{users:?}");
    let developer = htpass
        .lines()
        .find_map(|l| l.strip_prefix("developer:"))
        .expect("developer line");
    assert!(bcrypt::verify("developer", developer).unwrap());
    let pull = eventually("pull-secret", || config_secrets.get("pull-secret")).await;
    assert_eq!(pull.data.unwrap()[".dockerconfigjson"].0, PULL_SECRET);
    let external = eventually("external-api-serving-cert", || {
        config_secrets.get("external-api-serving-cert")
    })
    .await;
    assert_eq!(external.type_.as_deref(), Some("kubernetes.io/tls"));
    assert_eq!(secret_text(&external, "tls.crt"), identity.serving_crt);

    let csr_api = Api::<CertificateSigningRequest>::all(guest.clone());
    let all = ListParams::default();
    let csrs = eventually("CSRs", || csr_api.list(&all)).await.items;
    assert!(!csrs.is_empty());
    for csr in &csrs {
        let approved = csr
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| {
                c.iter().any(|c| {
                    c.type_ == "Approved" && c.reason.as_deref() == Some("CRCAgentApproval")
                })
            });
        assert!(approved, "{:?} not approved", csr.metadata.name);
    }

    let apiservers = Api::<DynamicObject>::all_with(
        guest.clone(),
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "APIServer"),
            "apiservers",
        ),
    );
    let apiserver = eventually("apiservers/cluster", || apiservers.get("cluster")).await;
    assert_eq!(
        apiserver.data["spec"]["servingCerts"]["namedCertificates"],
        json!([{"names": [host], "servingCertificate": {"name": "external-api-serving-cert"}}])
    );

    // A retried Job (same VMI) finds its own handoff and leaves it valid; it needs no bundle
    // key, as after the operator removed the instance's copy.
    std::fs::remove_file(root.path().join("ssh/id_ecdsa")).unwrap();
    let again = agent::run(&config, client.clone())
        .await
        .unwrap_or_else(|e| panic!("second run failed: {} {e}", e.reason()));
    assert!(matches!(again, Outcome::Published { .. }), "{again:?}");

    ssh.close().await;
    ctx.guests.shutdown_all().await;
}

#[tokio::test]
async fn a_vmi_that_is_not_the_agents_ends_the_run_without_publishing() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let client = cp.client().unwrap();
    let namespace = support::namespace(&client, "agent-scope").await;
    let name = "crc-b";
    let host = "api-crc-b.apps.example.com";
    let root = tempfile::tempdir().unwrap();
    let instance_uid = create_instance(&client, &namespace, name).await;
    let vmi_uid = create_running_vmi(&client, &namespace, name).await;
    let bundle_key = keys::generate_ecdsa_p256().unwrap();
    write_inputs(
        root.path(),
        &bundle_key,
        &keys::generate_ed25519().unwrap(),
        &identity::generate(host, now() - 60).unwrap(),
    );
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);

    // Started for another (older) VMI of the same name: nothing to do.
    let stale = config(
        root.path(),
        &namespace,
        name,
        &instance_uid,
        "an-older-vmi",
        Ipv4Addr::new(127, 83, 0, 2),
        host,
    );
    let outcome = agent::run(&stale, client.clone()).await.unwrap();
    assert!(
        matches!(&outcome, Outcome::VmiGone { reason } if reason.contains("replaced")),
        "{outcome:?}"
    );

    // Working for the right VMI: its "guest" accepts TCP but never speaks SSH, so the agent
    // sits in step 1 until the VMI is deleted, which must end the work.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut current = config(
        root.path(),
        &namespace,
        name,
        &instance_uid,
        &vmi_uid,
        Ipv4Addr::LOCALHOST,
        host,
    );
    current.ssh_port = listener.local_addr().unwrap().port();
    current.settings.ssh_connect_timeout = Duration::from_secs(600);
    let run = tokio::spawn({
        let client = client.clone();
        async move { agent::run(&current, client).await }
    });
    // The port probe, then the SSH connection that will never be answered.
    let mut held = Vec::new();
    for _ in 0..2 {
        let (stream, _) = tokio::time::timeout(support::DEADLINE, listener.accept())
            .await
            .expect("the agent reaches its guest")
            .unwrap();
        held.push(stream);
    }
    let vmis: Api<VirtualMachineInstance> = Api::namespaced(client.clone(), &namespace);
    vmis.delete(name, &Default::default()).await.unwrap();
    let outcome = tokio::time::timeout(support::DEADLINE, run)
        .await
        .expect("the run ends once its VMI is gone")
        .unwrap()
        .unwrap();
    assert!(matches!(&outcome, Outcome::VmiGone { .. }), "{outcome:?}");
    let published = secrets.list(&ListParams::default()).await.unwrap().items;
    assert!(
        published.iter().all(|s| !s
            .metadata
            .name
            .as_deref()
            .unwrap_or_default()
            .contains("raw-kubeconfig")),
        "nothing published"
    );
}

#[tokio::test]
async fn the_handoff_is_published_once_and_never_over_a_foreign_secret() {
    let cp = ControlPlane::shared().await.expect("control plane");
    let client = cp.client().unwrap();
    let namespace = support::namespace(&client, "agent-publish").await;
    let name = "crc-c";
    let instance_uid = create_instance(&client, &namespace, name).await;
    let owner = publish::Owner {
        instance_name: name.into(),
        namespace: namespace.clone(),
        instance_uid: instance_uid.clone(),
    };
    let handoff = publish::Handoff {
        kubeconfig: "apiVersion: v1\nkind: Config\n".into(),
        ocp_version: VERSION.into(),
        vmi_uid: "vmi-c-1".into(),
    };
    let secrets = Api::<Secret>::namespaced(client.clone(), &namespace);

    let secret = publish::publish(&client, &owner, &handoff).await.unwrap();
    let first = secrets.get(&secret).await.unwrap();
    // A retry with the same result changes nothing; a new result updates the data.
    publish::publish(&client, &owner, &handoff).await.unwrap();
    assert_eq!(
        secrets
            .get(&secret)
            .await
            .unwrap()
            .metadata
            .resource_version,
        first.metadata.resource_version
    );
    let newer = publish::Handoff {
        ocp_version: "4.22.8".into(),
        ..handoff.clone()
    };
    publish::publish(&client, &owner, &newer).await.unwrap();
    assert_eq!(
        secret_text(&secrets.get(&secret).await.unwrap(), "ocpVersion"),
        "4.22.8"
    );

    // A Secret of that name owned by another (older) instance is left alone.
    let other = publish::Owner {
        instance_uid: "0f0f0f0f-0000-4000-8000-000000000000".into(),
        ..owner.clone()
    };
    let err = publish::publish(&client, &other, &handoff)
        .await
        .expect_err("a foreign handoff is not overwritten");
    assert!(matches!(err, publish::Error::Foreign { .. }), "{err}");
    assert_eq!(
        secret_text(&secrets.get(&secret).await.unwrap(), "ocpVersion"),
        "4.22.8"
    );
}
