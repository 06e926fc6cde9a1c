//! CRC instances end to end, on the real control plane with the simulated cluster and the
//! operator tree: a downloaded bundle → a pool of two → both Ready, with guests configured by the
//! real crc-agent Jobs and kubeconfigs that reach each guest API through its Route; a lease
//! bound and expired → the instance torn down in order and replaced; a replaced VMI → a new agent
//! Job → Ready again; the boot-key copy restored, and refused once the bundle's key changed.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Instant;

use futures::StreamExt;
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::instance::InstancePhase;
use guestcluster::api::{ClusterInstance, ClusterLease, ClusterPool};
use guestcluster::kubevirt::{VirtualMachine, VirtualMachineInstance};
use guestcluster::resources::instance as res;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event};
use sim::bundles::{self, BundleSpec};
use sim::file_server::Fault;
use support::crc::{
    assert_configured, ready_bundle, ready_instance, team_namespace, template, wait_instance,
};
use support::world::{OPERATOR_NS, world};
use support::{wait_for, wait_long};

#[tokio::test]
async fn a_pool_of_two_becomes_ready_and_a_lease_expiry_replaces_its_instance() {
    let client = support::client().await;
    let started = Instant::now();
    // The pool's crcVersion selects the published bundle crc-<version>-amd64; it is created here
    // from the local mirror first, so the pool finds it instead of creating one for the internet.
    let version = "4.22.7";
    ready_bundle(world(), &client, &format!("crc-{version}-amd64"), version).await;
    let ns = team_namespace(&client).await;
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), &ns);
    let pool: ClusterPool = serde_json::from_value(serde_json::json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterPool",
        "metadata": {"name": "ci"},
        "spec": {"type": "crc", "minSize": 2, "maxSize": 3,
                 "template": template(serde_json::json!({"crcVersion": version}))}
    }))
    .unwrap();
    let recorder = sim::handoffs::Recorder::start(&client);
    pools.create(&PostParams::default(), &pool).await.unwrap();

    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let ready = wait_long("two Ready pool instances", || async {
        let ready = support::ready_instances(&instances, &ListParams::default()).await?;
        (ready.len() == 2).then_some(ready)
    })
    .await;
    eprintln!("pool of two Ready after {:?}", started.elapsed());
    // Every step each instance waited for was seen, and the operator wrote after it; the delays
    // are reported (the scale benchmark states them), not asserted.
    let handoffs = recorder.handoffs();
    drop(recorder);
    for instance in &ready {
        let subject = format!("ClusterInstance {ns}/{}", instance.name_any());
        for step in [
            "DataVolume succeeded",
            "VMI running",
            "handoff Secret published",
        ] {
            assert!(
                handoffs
                    .iter()
                    .any(|h| h.subject == subject && h.step == step),
                "no hand-off after {step} of {subject}: {handoffs:#?}"
            );
        }
    }
    eprintln!(
        "{}",
        sim::handoffs::Summary::of(&handoffs).expect("hand-offs were seen")
    );
    for instance in &ready {
        let status = instance.status.clone().unwrap();
        assert_eq!(status.ocp_version.as_deref(), Some(version));
        assert!(conditions::is_true(
            &status.conditions,
            types::GUEST_API_REACHABLE
        ));
        assert!(
            status
                .api_endpoint
                .as_deref()
                .is_some_and(|e| e.ends_with(support::world::INGRESS_DOMAIN)),
            "the API endpoint is a Route host: {:?}",
            status.api_endpoint
        );
        assert!(status.crc.unwrap().boot_key.is_some());
        assert_configured(&client, &ns, instance).await;
    }
    // Clones of one disk, each with client signers of its own: a lessee of one cannot sign in to
    // the other (both ways).
    support::crc::assert_signers_not_shared(&client, &ns, &ready[0], &ready[1]).await;
    support::crc::assert_signers_not_shared(&client, &ns, &ready[1], &ready[0]).await;

    // A lease takes one instance for a short TTL; on expiry the instance is deleted — its
    // teardown ordered — and the pool replaces it.
    let leases: Api<ClusterLease> = Api::namespaced(client.clone(), &ns);
    let lease: ClusterLease = serde_json::from_value(serde_json::json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterLease",
        "metadata": {"name": "job-1"},
        "spec": {"poolRef": {"name": "ci"}, "ttl": "5s", "requestedBy": "scenario"}
    }))
    .unwrap();
    eprintln!("every guest is configured; leasing one");
    let order = TeardownRecorder::start(&client, &ns);
    leases.create(&PostParams::default(), &lease).await.unwrap();
    eprintln!("lease created");
    let bound = wait_for("lease bound", || async {
        let l = leases.get("job-1").await.ok()?;
        l.status.as_ref()?.instance_ref.clone()
    })
    .await
    .name;
    let copy = Api::<Secret>::namespaced(client.clone(), &ns)
        .get("job-1-kubeconfig")
        .await
        .expect("the lease's kubeconfig copy");
    assert!(copy.data.unwrap().contains_key("kubeconfig"));
    eprintln!("lease bound to {bound}");
    let bound_uid = instances.get(&bound).await.unwrap().uid();
    wait_long("lease expired and its instance gone", || async {
        let lease_gone = leases.get_opt("job-1").await.ok()?.is_none();
        // The pool reuses the smallest free name: "gone" means this UID is gone.
        let instance_gone = instances
            .get_opt(&bound)
            .await
            .ok()?
            .is_none_or(|i| i.uid() != bound_uid);
        (lease_gone && instance_gone).then_some(())
    })
    .await;
    eprintln!("lease expired, {bound} deleted");
    order.assert_ordered(&bound).await;
    wait_long("the pool has two Ready instances again", || async {
        let ready = support::ready_instances(&instances, &ListParams::default())
            .await?
            .iter()
            .filter(|i| i.uid() != bound_uid)
            .count();
        (ready == 2).then_some(())
    })
    .await;
    eprintln!("replacement Ready after {:?}", started.elapsed());
}

/// Records, by etcd revision, when teardown steps of instances in a namespace happened.
struct TeardownRecorder {
    events: std::sync::Arc<std::sync::Mutex<Vec<(u64, String, String)>>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl TeardownRecorder {
    fn start(client: &kube::Client, ns: &str) -> Self {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        macro_rules! watch {
            ($kind:ty, $label:expr, $what:expr) => {{
                let api: Api<$kind> = Api::namespaced(client.clone(), ns);
                let events = events.clone();
                tasks.push(tokio::spawn(async move {
                    let mut stream = watcher::watcher(api, watcher::Config::default()).boxed();
                    while let Some(Ok(event)) = stream.next().await {
                        let record = match &event {
                            Event::Delete(obj) => Some((obj, "deleted")),
                            Event::Apply(obj) => Some((obj, "applied")),
                            _ => None,
                        };
                        if let Some((obj, how)) = record {
                            let what: Option<String> = $what(obj, how);
                            if let Some(what) = what {
                                let rv = obj
                                    .resource_version()
                                    .and_then(|v| v.parse().ok())
                                    .unwrap_or(0);
                                let owner = obj
                                    .labels()
                                    .get("opdev.io/cluster-instance")
                                    .cloned()
                                    .unwrap_or_else(|| obj.name_any());
                                events.lock().unwrap().push((rv, owner, what));
                            }
                        }
                    }
                    let _ = $label;
                }));
            }};
        }
        watch!(Job, "jobs", |_: &Job, how: &str| (how == "deleted")
            .then(|| "job deleted".to_owned()));
        watch!(VirtualMachine, "vms", |vm: &VirtualMachine, how: &str| {
            let halted = vm.spec.run_strategy.map(|r| r.as_str()) == Some("Halted");
            (how == "applied" && halted).then(|| "vm halted".to_owned())
        });
        watch!(
            guestcluster::cdi::DataVolume,
            "dvs",
            |_: &guestcluster::cdi::DataVolume, how: &str| (how == "deleted")
                .then(|| "disk deleted".to_owned())
        );
        Self { events, tasks }
    }

    /// The agent Jobs were deleted, and the VM was halted before its disk was deleted. (The
    /// boot-key copy went at the handoff; the order of a teardown that still finds one — Jobs
    /// first — is `teardown_plan`'s unit test.)
    async fn assert_ordered(self, instance: &str) {
        let first = |what: &str| {
            self.events
                .lock()
                .unwrap()
                .iter()
                .filter(|(_, owner, w)| owner == instance && w == what)
                .map(|(rv, _, _)| *rv)
                .min()
        };
        let seen = wait_for("teardown events observed", || async {
            Some((
                first("job deleted")?,
                first("vm halted")?,
                first("disk deleted")?,
            ))
        })
        .await;
        let (_job, halted, disk) = seen;
        assert!(halted < disk, "the VM is halted before its disk is deleted");
        for task in self.tasks {
            task.abort();
        }
    }
}

/// A standalone instance running the bundle `bundle`.
async fn standalone(client: &kube::Client, ns: &str, name: &str, bundle: &str) -> ClusterInstance {
    let api: Api<ClusterInstance> = Api::namespaced(client.clone(), ns);
    let instance: ClusterInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterInstance",
        "metadata": {"name": name},
        "spec": {"type": "crc", "template": template(serde_json::json!({"crcBundleRef": {"name": bundle}}))}
    }))
    .unwrap();
    api.create(&PostParams::default(), &instance).await.unwrap();
    ready_instance(&api, name).await
}

#[tokio::test]
async fn a_replaced_vmi_gets_a_new_agent_and_becomes_ready_again() {
    let client = support::client().await;
    let bundle = support::unique("vmi-bundle");
    ready_bundle(world(), &client, &bundle, "4.22.7").await;
    let ns = team_namespace(&client).await;
    let started = Instant::now();
    let first = standalone(&client, &ns, "crc-a", &bundle).await;
    eprintln!("standalone instance Ready after {:?}", started.elapsed());
    let old_uid = first.status.unwrap().crc.unwrap().vmi_uid.unwrap();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let copy_name = res::boot_key_secret_name("crc-a");
    copy_deleted(&secrets, &copy_name).await;

    // KubeVirt restarts a deleted VMI of a runStrategy Always VM with a new UID. Its disk
    // authorizes only the instance key, which the new agent logs in with.
    Api::<VirtualMachineInstance>::namespaced(client.clone(), &ns)
        .delete("crc-a", &DeleteParams::default())
        .await
        .expect("delete the VMI");
    let api: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let again = wait_instance(
        &client,
        &ns,
        "crc-a",
        "Ready again for a new VMI",
        || async {
            let i = api.get("crc-a").await.ok()?;
            let status = i.status.clone()?;
            let uid = status.crc.as_ref()?.vmi_uid.clone()?;
            (status.phase == Some(InstancePhase::Ready) && uid != old_uid).then_some(i)
        },
    )
    .await;
    let new_uid = again.status.clone().unwrap().crc.unwrap().vmi_uid.unwrap();
    let jobs = Api::<Job>::namespaced(client.clone(), &ns);
    assert!(
        jobs.get_opt(&res::agent_job_name("crc-a", &new_uid))
            .await
            .unwrap()
            .is_some(),
        "a new agent Job ran for the new VMI"
    );
    assert!(
        jobs.get_opt(&res::agent_job_name("crc-a", &old_uid))
            .await
            .unwrap()
            .is_none(),
        "the old VMI's agent Job was removed"
    );
    assert!(
        secrets.get_opt(&copy_name).await.unwrap().is_none(),
        "recovery needed no copy of the bundle key"
    );
    assert_configured(&client, &ns, &again).await;
}

/// Waits until the instance's copy of the bundle key is gone (after the handoff).
async fn copy_deleted(secrets: &Api<Secret>, copy_name: &str) {
    wait_for("the boot-key copy deleted after the handoff", || async {
        secrets
            .get_opt(copy_name)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
}

/// Logs in to the instance's guest as `core` with `key` (the VMI's address is reachable from
/// the test, as from an agent pod).
async fn ssh_login(
    client: &kube::Client,
    ns: &str,
    name: &str,
    key: &str,
) -> Result<(), guestcluster::guest::GuestError> {
    let vmi = Api::<VirtualMachineInstance>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap();
    let ip = vmi.first_ip().expect("the VMI has an address").to_owned();
    let key = guestcluster::guest::keys::parse_private_key(key).unwrap();
    let options = guestcluster::guest::ssh::SshOptions::default();
    let guest =
        guestcluster::guest::ssh::SshGuest::connect(&format!("{ip}:22"), key, &options).await?;
    guest.close().await;
    Ok(())
}

fn secret_text(secret: &Secret, key: &str) -> String {
    String::from_utf8(secret.data.as_ref().unwrap()[key].0.clone()).unwrap()
}

#[tokio::test]
async fn after_the_handoff_only_the_instance_key_opens_the_guest_and_the_bundle_key_copy_is_gone() {
    let client = support::client().await;
    let bundle_name = support::unique("key-bundle");
    let bundle = ready_bundle(world(), &client, &bundle_name, "4.22.7").await;
    let ns = team_namespace(&client).await;
    let ready = standalone(&client, &ns, "crc-k", &bundle_name).await;
    let crc = ready.status.clone().unwrap().crc.unwrap();
    let binding = crc.boot_key.unwrap();
    assert_eq!(
        crc.instance_key_data_volume_uid, crc.data_volume_uid,
        "the handoff recorded the keyed disk"
    );
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);

    // The instance's own key: generated by the operator, owned by the instance.
    let guest_key = secrets
        .get(&res::guest_key_secret_name("crc-k"))
        .await
        .expect("the guest key Secret");
    assert_eq!(guest_key.type_.as_deref(), Some("kubernetes.io/ssh-auth"));
    let owner = &guest_key.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(owner.uid, ready.uid().unwrap());
    assert_eq!(owner.controller, Some(true));

    // No copy of the bundle key is left in the tenant namespace.
    let copy_name = res::boot_key_secret_name("crc-k");
    copy_deleted(&secrets, &copy_name).await;

    // The guest opens to the instance key and refuses the bundle's.
    ssh_login(
        &client,
        &ns,
        "crc-k",
        &secret_text(&guest_key, res::GUEST_KEY_PRIVATE),
    )
    .await
    .expect("the instance key logs in");
    let key_secret = bundle.status.unwrap().ssh_key_secret_ref.unwrap().name;
    let bundle_key = Api::<Secret>::namespaced(client.clone(), OPERATOR_NS)
        .get(&key_secret)
        .await
        .unwrap();
    let refused = ssh_login(&client, &ns, "crc-k", &secret_text(&bundle_key, "id_ecdsa"))
        .await
        .expect_err("the bundle key is refused");
    assert!(
        matches!(
            refused,
            guestcluster::guest::GuestError::AuthRejected { .. }
        ),
        "{refused}"
    );

    // A deleted published kubeconfig is rebuilt.
    let kubeconfig_name = res::kubeconfig_secret_name("crc-k");
    let published = secrets.get(&kubeconfig_name).await.unwrap();
    secrets
        .delete(&kubeconfig_name, &DeleteParams::default())
        .await
        .unwrap();
    let rebuilt = wait_for("the published kubeconfig rebuilt", || async {
        let s = secrets.get_opt(&kubeconfig_name).await.ok()??;
        (s.uid() != published.uid()).then_some(s)
    })
    .await;
    assert_eq!(rebuilt.data, published.data);

    // The instance no longer needs the bundle's key: it stays Ready, bound as before, with no
    // copy restored.
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let now = instances.get("crc-k").await.unwrap();
    let status = now.status.unwrap();
    assert_eq!(status.phase, Some(InstancePhase::Ready));
    assert_eq!(
        status.crc.unwrap().boot_key,
        Some(binding),
        "the binding is never rewritten"
    );
    assert!(secrets.get_opt(&copy_name).await.unwrap().is_none());
}

#[tokio::test]
async fn the_manual_path_imports_a_disk_by_url_with_the_users_key() {
    let client = support::client().await;
    let ns = team_namespace(&client).await;
    let w = world();
    let name = support::unique("manual");
    let built = bundles::build(
        &w.root.join("served").join(&name),
        &BundleSpec::new("4.22.7"),
    )
    .expect("build test bundle");
    let url = w.files.publish(
        &format!("{name}/crc.qcow2"),
        built.qcow2.clone(),
        Fault::None,
    );
    // The key under `ssh-privatekey` (a kubernetes.io/ssh-auth Secret): the agent Job remaps it.
    let key: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "crc-key"},
        "type": "kubernetes.io/ssh-auth",
        "stringData": {"ssh-privatekey": built.private_key}
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &key)
        .await
        .unwrap();
    let api: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let instance: ClusterInstance = serde_json::from_value(serde_json::json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterInstance",
        "metadata": {"name": "crc-m"},
        "spec": {"type": "crc", "template": template(serde_json::json!({
            "releaseImage": url, "bundleSSHKeyRef": {"name": "crc-key"}
        }))}
    }))
    .unwrap();
    api.create(&PostParams::default(), &instance).await.unwrap();
    let ready = ready_instance(&api, "crc-m").await;
    let crc = ready.status.clone().unwrap().crc.unwrap();
    assert!(crc.boot_key.is_none(), "the manual path binds no bundle");
    assert!(
        Api::<Secret>::namespaced(client.clone(), &ns)
            .get_opt(&res::boot_key_secret_name("crc-m"))
            .await
            .unwrap()
            .is_none(),
        "the manual path uses the user's Secret, no copy"
    );
}

/// The `Stale` condition of an instance: (status, reason).
fn staleness(i: &ClusterInstance) -> Option<(String, String)> {
    let c = conditions::find(&i.status.as_ref()?.conditions, types::STALE)?;
    Some((c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn a_bundle_made_again_under_its_name_makes_its_pools_idle_instance_stale_and_replaced() {
    let client = support::client().await;
    let bundle = support::unique("stale-bundle");
    let first_bundle = ready_bundle(world(), &client, &bundle, "4.22.7").await;
    let ns = team_namespace(&client).await;
    let pools: Api<ClusterPool> = Api::namespaced(client.clone(), &ns);
    let pool: ClusterPool = serde_json::from_value(serde_json::json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterPool",
        "metadata": {"name": "stale"},
        "spec": {"type": "crc", "minSize": 1, "maxSize": 2,
                 "template": template(serde_json::json!({"crcBundleRef": {"name": bundle}}))}
    }))
    .unwrap();
    pools.create(&PostParams::default(), &pool).await.unwrap();
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let current = |i: &ClusterInstance| {
        i.status.as_ref().and_then(|s| s.phase) == Some(InstancePhase::Ready)
            && staleness(i) == Some(("False".to_owned(), reasons::BUNDLE_CURRENT.to_owned()))
    };
    let first = wait_long("the pool's instance Ready and current", || async {
        let list = instances.list(&ListParams::default()).await.ok()?.items;
        list.into_iter().find(|i| current(i))
    })
    .await;

    // Every state the instances pass through, from here on.
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let watch = {
        let seen = seen.clone();
        let stream = watcher::watcher(instances.clone(), watcher::Config::default());
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(event) = stream.next().await {
                if let Ok(Event::Apply(i) | Event::InitApply(i)) = event {
                    seen.lock().unwrap().push((i.uid(), staleness(&i)));
                }
            }
        })
    };

    // The bundle is deleted and made again under its name from another archive (another disk).
    let bundles: Api<guestcluster::api::CRCBundle> = Api::all(client.clone());
    bundles
        .delete(&bundle, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the first CRCBundle gone", || async {
        bundles.get_opt(&bundle).await.ok()?.is_none().then_some(())
    })
    .await;
    let pool_says = |reason: &'static str| {
        let pools = pools.clone();
        async move {
            let p = pools.get("stale").await.ok()?;
            let c = conditions::find(&p.status?.conditions, types::BUNDLE_AVAILABLE)?.clone();
            (c.reason == reason).then_some(c)
        }
    };
    let missing = wait_for("the pool says its bundle is missing", || {
        pool_says(reasons::BUNDLE_NOT_FOUND)
    })
    .await;
    assert!(
        missing.message.contains("never creates"),
        "{}",
        missing.message
    );
    let second_bundle = ready_bundle(world(), &client, &bundle, "4.22.7").await;
    wait_for("the pool says its bundle is Ready", || {
        pool_says(reasons::BUNDLE_READY)
    })
    .await;
    assert_ne!(
        first_bundle.status.unwrap().sha256,
        second_bundle.status.clone().unwrap().sha256
    );

    // The idle instance is found stale, deleted by its pool, and replaced by a current one.
    let replacement = wait_long(
        "a current replacement Ready, the stale one gone",
        || async {
            let list = instances.list(&ListParams::default()).await.ok()?.items;
            let old_left = list.iter().any(|i| i.uid() == first.uid());
            let new = list
                .into_iter()
                .find(|i| i.uid() != first.uid() && current(i))?;
            (!old_left).then_some(new)
        },
    )
    .await;
    watch.abort();
    let stale = Some(("True".to_owned(), reasons::BUNDLE_REBUILT.to_owned()));
    let seen: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(uid, _)| *uid == first.uid())
        .map(|(_, s)| s.clone())
        .collect();
    assert!(
        seen.contains(&stale),
        "the first instance was marked Stale before it was replaced: {seen:?}"
    );
    let binding = replacement.status.unwrap().crc.unwrap().boot_key.unwrap();
    assert_eq!(
        Some(binding.bundle_sha256),
        second_bundle.status.unwrap().sha256,
        "the replacement is cloned from the bundle made again"
    );
}
