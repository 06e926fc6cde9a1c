//! What CRC scenarios set up: an enabled team namespace with a pull secret, a Ready CRCBundle
//! from the world's local mirror, templates, and waiting for Ready instances.

use guestcluster::api::bundle::BundlePhase;
use guestcluster::api::instance::InstancePhase;
use guestcluster::api::{CRCBundle, CRCBundleSpec, ClusterInstance};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use sim::bundles::{self, BundleSpec, Flaw};
use sim::file_server::Fault;

use guestcluster::guest::route::RouteAccess;
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, Guest, keys};
use guestcluster::resources::instance as res;
use k8s_openapi::ByteString;
use kube::ResourceExt;

use super::wait_long;
use super::world::World;

/// A namespace enabled for guestcluster with a pull secret.
pub async fn team_namespace(client: &kube::Client) -> String {
    let ns = super::namespace(client, "team").await;
    let patch =
        serde_json::json!({"metadata": {"labels": {"guestcluster.opdev.io/enabled": "true"}}});
    Api::<Namespace>::all(client.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("enable namespace");
    let pull: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "pull-secret"},
        "type": "kubernetes.io/dockerconfigjson",
        "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"c2NlbmFyaW86cHVsbA==\"}}}"}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pull)
        .await
        .expect("pull secret");
    ns
}

/// Builds and serves a bundle of `version` and creates the CRCBundle `name` for it; returns once
/// it is Ready.
pub async fn ready_bundle(
    w: &World,
    client: &kube::Client,
    name: &str,
    version: &str,
) -> CRCBundle {
    let dir = w.root.join("served").join(name);
    let built = bundles::build(&dir, &BundleSpec::new(version).with_flaw(Flaw::None))
        .expect("build test bundle");
    let bundle_url = w.files.publish(
        &format!("{name}/{}", built.file_name),
        built.archive.clone(),
        Fault::None,
    );
    let sha_url = w.files.publish(
        &format!("{name}/sha256sum.txt"),
        built.sha256sum_txt.clone(),
        Fault::None,
    );
    let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
        "version": version, "bundleURL": bundle_url, "sha256URL": sha_url, "allowHTTP": true, "goldenVolumeSize": "1Gi"
    }))
    .unwrap();
    let api = Api::<CRCBundle>::all(client.clone());
    api.create(&PostParams::default(), &CRCBundle::new(name, spec))
        .await
        .expect("create CRCBundle");
    wait_long(&format!("CRCBundle {name} Ready"), || async {
        let b = api.get(name).await.ok()?;
        (b.status.as_ref()?.phase == Some(BundlePhase::Ready)).then_some(b)
    })
    .await
}

pub fn template(selector: serde_json::Value) -> serde_json::Value {
    let mut t = serde_json::json!({"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4});
    t.as_object_mut()
        .unwrap()
        .extend(selector.as_object().unwrap().clone());
    t
}

pub async fn ready_instance(api: &Api<ClusterInstance>, name: &str) -> ClusterInstance {
    wait_long(&format!("ClusterInstance {name} Ready"), || async {
        let i = api.get(name).await.ok()?;
        (i.status.as_ref()?.phase == Some(InstancePhase::Ready)).then_some(i)
    })
    .await
}

/// What an instance and its agent look like now, for a failure message: the instance's
/// conditions, its Jobs' conditions and its pods' phases and termination messages.
pub async fn describe(client: &kube::Client, ns: &str, name: &str) -> String {
    use k8s_openapi::api::batch::v1::Job;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::ListParams;
    let mut out = String::new();
    if let Ok(i) = Api::<ClusterInstance>::namespaced(client.clone(), ns)
        .get(name)
        .await
    {
        let status = i.status.unwrap_or_default();
        out += &format!(
            "instance {ns}/{name}: phase {:?}, crc {:?}\n",
            status.phase,
            status.crc.map(|c| (c.vmi_uid, c.ssh_endpoint))
        );
        for c in status.conditions {
            out += &format!("  {}={} {}: {}\n", c.type_, c.status, c.reason, c.message);
        }
    }
    let selector = format!("opdev.io/cluster-instance={name}");
    if let Ok(jobs) = Api::<Job>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels(&selector))
        .await
    {
        for j in jobs {
            let conditions: Vec<String> = j
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .map(|c| format!("{}={} {:?}", c.type_, c.status, c.message))
                .collect();
            out += &format!(
                "job {}: {conditions:?}\n",
                j.metadata.name.unwrap_or_default()
            );
        }
    }
    if let Ok(pods) = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
    {
        for p in pods {
            let status = p.status.unwrap_or_default();
            let messages: Vec<String> = status
                .container_statuses
                .unwrap_or_default()
                .into_iter()
                .filter_map(|c| c.state?.terminated?.message)
                .collect();
            out += &format!(
                "pod {}: {:?} {messages:?}\n",
                p.metadata.name.unwrap_or_default(),
                status.phase
            );
        }
    }
    out
}

/// Waits (long) for `check`, and on timeout panics with [`describe`] of the instance.
pub async fn wait_instance<T, F, Fut>(
    client: &kube::Client,
    ns: &str,
    name: &str,
    what: &str,
    check: F,
) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Duration::from_secs(600);
    match tokio::time::timeout(deadline, super::wait_within(what, deadline * 2, check)).await {
        Ok(value) => value,
        Err(_) => panic!(
            "timed out after {deadline:?} waiting for: {what}\n{}",
            describe(client, ns, name).await
        ),
    }
}

/// SSH into an instance's guest with the instance's own copy of the boot key.
pub async fn guest_ssh(client: &kube::Client, ns: &str, instance: &ClusterInstance) -> SshGuest {
    // After the handoff only the instance's own key opens the guest.
    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&res::guest_key_secret_name(&instance.name_any()))
        .await
        .expect("the instance's guest key");
    let ByteString(key) = secret.data.unwrap()[res::GUEST_KEY_PRIVATE].clone();
    let key = keys::parse_private_key(&String::from_utf8(key).unwrap()).expect("key parses");
    let ip = instance
        .status
        .as_ref()
        .and_then(|s| s.crc.as_ref())
        .and_then(|c| c.ssh_endpoint.clone())
        .expect("ssh endpoint recorded");
    SshGuest::connect(&format!("{ip}:22"), key, &SshOptions::default())
        .await
        .expect("SSH into the guest")
}

pub async fn guest_text(ssh: &SshGuest, argv: &[&str]) -> String {
    let command = Command::sudo(argv.iter().copied());
    let output = tokio::time::timeout(std::time::Duration::from_secs(60), ssh.run(&command))
        .await
        .unwrap_or_else(|_| panic!("guest command {argv:?} did not answer"))
        .expect("guest command");
    eprintln!("guest {argv:?}: status {}", output.status);
    output.stdout_text()
}

/// The instance's guest is reachable as published and protected as meant, on the launcher pod
/// upstream virt-controller rendered for its VMI: the API Service selects that pod and it is
/// ready (so the Service has an endpoint there, the one the Route sends to), and the guest's
/// NetworkPolicy selects it (so the policy protects it).
pub async fn assert_guest_exposed(client: &kube::Client, ns: &str, instance: &ClusterInstance) {
    use guestcluster::kubevirt::VirtualMachineInstance;
    use k8s_openapi::api::core::v1::{Pod, Service};
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let name = instance.name_any();
    let vmi = Api::<VirtualMachineInstance>::namespaced(client.clone(), ns)
        .get(&res::vm_name(&name))
        .await
        .expect("the instance's VMI");
    let pods = Api::<Pod>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().labels(&format!(
            "kubevirt.io=virt-launcher,kubevirt.io/created-by={}",
            vmi.uid().unwrap_or_default()
        )))
        .await
        .expect("launcher pods");
    let pod = pods
        .items
        .iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .unwrap_or_else(|| panic!("{name}: no launcher pod of its VMI"));
    let labels = pod.labels().clone();
    let ready = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let service = Api::<Service>::namespaced(client.clone(), ns)
        .get(&res::api_service_name(&name))
        .await
        .expect("the API Service");
    let selector = service.spec.and_then(|s| s.selector).unwrap_or_default();
    let selected = !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v));
    assert!(
        selected && ready,
        "{name}: Service {} has no endpoint at the launcher pod {} (selector {selector:?}, \
         pod labels {labels:?}, ready {ready})",
        res::api_service_name(&name),
        pod.name_any()
    );
    let policy = Api::<NetworkPolicy>::namespaced(client.clone(), ns)
        .get(&res::guest_policy_name(&name))
        .await
        .expect("the guest NetworkPolicy");
    let view = sim::network::policy::PodView {
        namespace: ns.to_owned(),
        name: pod.name_any(),
        labels: labels.clone(),
        ..Default::default()
    };
    assert!(
        sim::network::policy::selects(&policy, &view),
        "{name}: NetworkPolicy {} does not select the launcher pod {} (labels {labels:?})",
        res::guest_policy_name(&name),
        pod.name_any()
    );
}

/// What the crc-agent did in a guest, seen from inside it and through its published kubeconfig
/// over the Route.
pub async fn assert_configured(client: &kube::Client, ns: &str, instance: &ClusterInstance) {
    let name = instance.name_any();
    assert_guest_exposed(client, ns, instance).await;
    let ssh = guest_ssh(client, ns, instance).await;
    let dnsmasq = guest_text(&ssh, &["cat", "/etc/dnsmasq.d/crc-dnsmasq.conf"]).await;
    assert!(
        dnsmasq.contains("address=/api.crc.testing/"),
        "{name}: dnsmasq answers the CRC names: {dnsmasq}"
    );
    let kubelet = guest_text(&ssh, &["systemctl", "is-active", "kubelet"]).await;
    assert_eq!(kubelet.trim(), "active", "{name}: kubelet runs");
    let pull = guest_text(&ssh, &["cat", "/var/lib/kubelet/config.json"]).await;
    assert!(
        pull.contains("quay.io"),
        "{name}: the instance's pull secret reached the guest: {pull}"
    );

    let secret = Api::<Secret>::namespaced(client.clone(), ns)
        .get(&res::kubeconfig_secret_name(&name))
        .await
        .expect("published kubeconfig");
    let ByteString(kubeconfig) = secret.data.unwrap()["kubeconfig"].clone();
    let guest = RouteAccess::via_proxy(&super::world::world().router.to_string())
        .client(&kubeconfig)
        .expect("client from the published kubeconfig");
    let htpass = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        Api::<Secret>::namespaced(guest.clone(), "openshift-config").get("htpass-secret"),
    )
    .await
    .expect("the guest API answers in time")
    .expect("the guest API answers through the Route with the published kubeconfig");
    let ByteString(htpasswd) = htpass.data.unwrap()["htpasswd"].clone();
    let htpasswd = String::from_utf8(htpasswd).unwrap();
    assert!(
        htpasswd.contains("kubeadmin:") && htpasswd.contains("developer:"),
        "{name}: users were created: {htpasswd}"
    );
    eprintln!("{name}: guest API reached through the Route");
}

/// Who the crc-agent pods of `ns` ran as, as admitted: `(runAsUser, fsGroup, SCC)` of each, the
/// user from the container (where SCC admission puts it) else the pod.
pub async fn agent_pod_users(
    client: &kube::Client,
    ns: &str,
) -> Vec<(Option<i64>, Option<i64>, Option<String>)> {
    let selector = format!(
        "{}={}",
        guestcluster::api::labels::COMPONENT,
        guestcluster::api::labels::COMPONENT_CRC_AGENT
    );
    let pods = Api::<k8s_openapi::api::core::v1::Pod>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default().labels(&selector))
        .await
        .expect("list agent pods");
    pods.items
        .iter()
        .map(|pod| {
            let spec = pod.spec.as_ref().expect("pod spec");
            let context = spec.security_context.clone().unwrap_or_default();
            let container = spec.containers[0]
                .security_context
                .clone()
                .unwrap_or_default();
            (
                container.run_as_user.or(context.run_as_user),
                context.fs_group,
                pod.annotations().get("openshift.io/scc").cloned(),
            )
        })
        .collect()
}

/// Creates the ClusterPool `ns/name` of exactly `size` instances from `template`.
pub async fn create_pool(
    client: &kube::Client,
    ns: &str,
    name: &str,
    size: i32,
    template: serde_json::Value,
) {
    let pool: guestcluster::api::ClusterPool = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "crc", "minSize": size, "maxSize": size, "template": template}
    }))
    .unwrap();
    Api::<guestcluster::api::ClusterPool>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pool)
        .await
        .expect("create the pool");
}

/// Creates the ClusterInstance `ns/name` from `template`.
pub async fn create_instance(
    client: &kube::Client,
    ns: &str,
    name: &str,
    template: serde_json::Value,
) {
    let instance: ClusterInstance = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": ns},
        "spec": {"type": "crc", "template": template}
    }))
    .unwrap();
    Api::<ClusterInstance>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &instance)
        .await
        .expect("create the instance");
}

/// The `volumeMode`s of the PVCs in `ns` (a team namespace holds the instances' root disks).
pub async fn volume_modes(client: &kube::Client, ns: &str) -> std::collections::BTreeSet<String> {
    Api::<k8s_openapi::api::core::v1::PersistentVolumeClaim>::namespaced(client.clone(), ns)
        .list(&kube::api::ListParams::default())
        .await
        .expect("list PVCs")
        .items
        .into_iter()
        .filter_map(|pvc| pvc.spec?.volume_mode)
        .collect()
}

/// The client-certificate signers a clone of a disk starts with and an instance must not share:
/// namespace and Secret.
pub const CLIENT_SIGNERS: [(&str, &str); 4] = [
    (
        "openshift-kube-apiserver-operator",
        "node-system-admin-signer",
    ),
    (
        "openshift-kube-apiserver-operator",
        "kube-control-plane-signer",
    ),
    (
        "openshift-kube-controller-manager-operator",
        "csr-signer-signer",
    ),
    ("openshift-kube-controller-manager-operator", "csr-signer"),
];

/// A lessee of instance `a` (cluster-admin in its guest) reads each client signer there and
/// makes a `system:masters` certificate with it; instance `b`'s guest API, reached through its
/// Route, must refuse that certificate (issue 29, item 9).
pub async fn assert_signers_not_shared(
    client: &kube::Client,
    ns: &str,
    a: &ClusterInstance,
    b: &ClusterInstance,
) {
    use guestcluster::guest::kubeconfig::Kubeconfig;
    let published = |instance: &ClusterInstance| {
        let secrets = Api::<Secret>::namespaced(client.clone(), ns);
        let name = res::kubeconfig_secret_name(&instance.name_any());
        async move {
            let secret = secrets.get(&name).await.expect("published kubeconfig");
            let ByteString(bytes) = secret.data.unwrap()["kubeconfig"].clone();
            String::from_utf8(bytes).unwrap()
        }
    };
    let (of_a, of_b) = (published(a).await, published(b).await);
    let access = RouteAccess::via_proxy(&super::world::world().router.to_string());
    let guest_a = access.client(of_a.as_bytes()).expect("a's kubeconfig");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    for (namespace, name) in CLIENT_SIGNERS {
        let signers = Api::<Secret>::namespaced(guest_a.clone(), namespace);
        let secret = tokio::time::timeout(std::time::Duration::from_secs(60), signers.get(name))
            .await
            .expect("a's guest API answers")
            .unwrap_or_else(|e| panic!("{name} of {}: {e}", a.name_any()));
        let data = secret.data.unwrap();
        let text = |key: &str| String::from_utf8(data[key].0.clone()).unwrap();
        let signer = sim::openshift::pki::Signer {
            cn: sim::openshift::pki::common_name(&text("tls.crt")).unwrap_or_else(|| {
                panic!("{namespace}/{name} of {} holds a certificate", a.name_any())
            }),
            cert: text("tls.crt"),
            key: text("tls.key"),
        };
        let (cert, key) = signer
            .client_cert("mallory", "system:masters", now - 86_400, now + 86_400)
            .unwrap();
        let mut forged = Kubeconfig::parse(&of_b).unwrap();
        forged.set_client(&cert, &key).unwrap();
        let guest_b = access
            .client(forged.to_yaml().unwrap().as_bytes())
            .expect("b's kubeconfig with the forged certificate");
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(60),
            Api::<Namespace>::all(guest_b).list(&kube::api::ListParams::default().limit(1)),
        )
        .await
        .expect("b's guest API answers");
        match answer {
            Err(kube::Error::Api(status)) if status.code == 401 => {}
            other => panic!(
                "{}'s guest API accepted a system:masters certificate made with {}'s {name}: {:?}",
                b.name_any(),
                a.name_any(),
                other.map(|list| list.items.len())
            ),
        }
    }
    // Its own kubelet still signs in: it was given a certificate from the instance's own CSR
    // signer before the disk's stopped being trusted.
    let guest_b = access.client(of_b.as_bytes()).expect("b's kubeconfig");
    let node = tokio::time::timeout(
        std::time::Duration::from_secs(60),
        Api::<k8s_openapi::api::core::v1::Node>::all(guest_b).get("crc"),
    )
    .await
    .expect("b's guest API answers")
    .expect("b's Node");
    let ready = node
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .expect("a Ready condition");
    assert_eq!(
        ready.status,
        "True",
        "{}'s Node is not Ready: {:?}",
        b.name_any(),
        ready.message
    );
    eprintln!(
        "{} refuses certificates made with {}'s client signers; its own Node is Ready",
        b.name_any(),
        a.name_any()
    );
}
