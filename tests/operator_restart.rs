//! Crash safety end to end: the operator process is killed (SIGKILL) while a pool's instances
//! are being provisioned and a new process takes over. Every instance still becomes Ready, and
//! there is exactly one DataVolume, one VirtualMachine and one agent Job per VMI for each — the
//! write-ahead status and create-if-missing steps make the restart converge without duplicates.
//! No secret of the run shows in statuses, Events, termination messages or logs. Also prints the
//! run time and the operator's peak memory.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::BTreeMap;
use std::time::Instant;

use guestcluster::api::instance::InstancePhase;
use guestcluster::api::{ClusterInstance, ClusterPool};
use guestcluster::cdi::DataVolume;
use guestcluster::kubevirt::VirtualMachine;
use k8s_openapi::api::batch::v1::Job;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use support::crc::{ready_bundle, team_namespace, template};
use support::wait_long;
use support::world::{OPERATOR_NS, bare_world, operator_process};

/// Objects of `K` in `ns` per `opdev.io/cluster-instance` label.
async fn per_instance<K>(client: &kube::Client, ns: &str) -> BTreeMap<String, Vec<String>>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let mut map: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for obj in Api::<K>::namespaced(client.clone(), ns)
        .list(&ListParams::default().labels("opdev.io/cluster-instance"))
        .await
        .expect("list")
        .items
    {
        let owner = obj.labels()["opdev.io/cluster-instance"].clone();
        map.entry(owner).or_default().push(obj.name_any());
    }
    map
}

#[tokio::test]
async fn instances_become_ready_without_duplicates_when_the_operator_is_killed_mid_provisioning() {
    let world = bare_world();
    let client = support::client().await;
    let started = Instant::now();
    let mut first = operator_process("first-operator").await;
    let bundle = support::unique("restart-bundle");
    ready_bundle(world, &client, &bundle, "4.22.7").await;
    let ns = team_namespace(&client).await;
    let pool: ClusterPool = serde_json::from_value(serde_json::json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1", "kind": "ClusterPool",
        "metadata": {"name": "ci"},
        "spec": {"type": "crc", "minSize": 2, "maxSize": 2,
                 "template": template(serde_json::json!({"crcBundleRef": {"name": bundle}}))}
    }))
    .unwrap();
    Api::<ClusterPool>::namespaced(client.clone(), &ns)
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();

    // Kill it once provisioning is under way: a disk is being cloned or a VM exists.
    wait_long("provisioning under way", || async {
        let dvs = per_instance::<DataVolume>(&client, &ns).await;
        (!dvs.is_empty()).then_some(())
    })
    .await;
    let first_peak = first.peak_rss_kib();
    first.kill();
    eprintln!(
        "killed the operator {:?} after start, mid-provisioning",
        started.elapsed()
    );

    let second = operator_process("second-operator").await;
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let ready = wait_long("both instances Ready after the restart", || async {
        let list = instances.list(&ListParams::default()).await.ok()?.items;
        let ready: Vec<ClusterInstance> = list
            .iter()
            .filter(|i| i.status.as_ref().and_then(|s| s.phase) == Some(InstancePhase::Ready))
            .cloned()
            .collect();
        (list.len() == 2 && ready.len() == 2).then_some(ready)
    })
    .await;
    eprintln!(
        "both instances Ready {:?} after the first operator started; peak RSS: first {:?} KiB, second {:?} KiB",
        started.elapsed(),
        first_peak,
        second.peak_rss_kib()
    );

    let dvs = per_instance::<DataVolume>(&client, &ns).await;
    let vms = per_instance::<VirtualMachine>(&client, &ns).await;
    let jobs = per_instance::<Job>(&client, &ns).await;
    for instance in &ready {
        let name = instance.name_any();
        assert_eq!(
            dvs.get(&name).map(Vec::len),
            Some(1),
            "{name}: DataVolumes {dvs:?}"
        );
        assert_eq!(vms.get(&name).map(Vec::len), Some(1), "{name}: VMs {vms:?}");
        let vmi_uid = instance
            .status
            .as_ref()
            .and_then(|s| s.crc.as_ref())
            .and_then(|c| c.vmi_uid.clone())
            .expect("VMI recorded");
        assert_eq!(
            jobs.get(&name).cloned().unwrap_or_default(),
            vec![guestcluster::resources::instance::agent_job_name(
                &name, &vmi_uid
            )],
            "{name}: exactly one agent Job, for the running VMI"
        );
    }

    // No secret of the scenario (pull secret, bundle key, guest keys, identities, kubeconfigs)
    // is in a status, an Event, a termination message, the operators' logs or a Job's log.
    let namespaces = [ns.as_str(), OPERATOR_NS];
    let needles = support::leaks::needles(&client, &namespaces).await;
    for secret in [
        "pull-secret",
        "-crc-guest-key",
        "-crc-identity",
        "-ssh-key",
        "-kubeconfig",
    ] {
        assert!(
            needles.iter().any(|(name, _)| name.contains(secret)),
            "no needle from a {secret} Secret: {needles:?}"
        );
    }
    let logs = [first.log_path().to_owned(), second.log_path().to_owned()];
    let haystack = support::leaks::haystack(&client, &namespaces, &[&world.root], &logs).await;
    for log in ["crc-agent.log", "bundle-prep.log", "operator.log"] {
        assert!(
            haystack.iter().any(|(place, _)| place.ends_with(log)),
            "no {log} among the logs searched"
        );
    }
    support::leaks::assert_none(&needles, &haystack);

    // `--log-format json`: one JSON object per line, and what an object's actor logs names the
    // object and the actor.
    let mut spans = BTreeMap::<String, usize>::new();
    let logs = format!("{}\n{}", first.log(), second.log());
    for line in logs.lines().filter(|l| !l.trim().is_empty()) {
        let entry: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {line}"));
        assert!(
            entry["level"].is_string() && entry["message"].is_string(),
            "{line}"
        );
        let Some(span) = entry.get("span") else {
            continue;
        };
        for field in ["kind", "name", "actor"] {
            assert!(
                span[field].as_str().is_some_and(|v| !v.is_empty()),
                "{field} missing: {line}"
            );
        }
        *spans
            .entry(span["kind"].as_str().unwrap().to_owned())
            .or_default() += 1;
    }
    for kind in ["clusterinstance", "clusterpool"] {
        assert!(
            spans.contains_key(kind),
            "no line from a {kind} actor: {spans:?}"
        );
    }
}
