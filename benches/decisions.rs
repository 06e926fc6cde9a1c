//! The operator's per-reconcile decision cost at scale: the pure decision functions the actors
//! call once per reconcile, fed inputs shaped like their unit tests' (mixed phases, leases), at
//! 10, 100 and 1000 pool members where the input is a list.
//!
//! Absolute times depend on the machine; state results as ratios against the baselines measured
//! in the same run: `baseline/clone_instances/<n>` (cloning the same `Vec<ClusterInstance>` the
//! list decisions read) and `baseline/serialize_instance` (serde_json of one member). Every
//! routine's output is dropped inside the timed loop, the clone's included.
//!
//! `make bench` (or `cargo bench --bench decisions`); one group: `cargo bench --bench decisions
//! -- pool_decide`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use guestcluster::actors::bundle::download;
use guestcluster::actors::instance::crc::agent;
use guestcluster::actors::instance::crc::boot_key::{self, KEY};
use guestcluster::actors::instance::crc::teardown_plan::{self, Obj, Remaining, Vm};
use guestcluster::actors::instance::gates as instance_gates;
use guestcluster::actors::platform::{NamespaceState, Platform, platform_gate};
use guestcluster::actors::pool::bind as pool_bind;
use guestcluster::actors::pool::decide as pool_decide;
use guestcluster::actors::runtime::stage::Observation;
use guestcluster::api::bundle::{BundlePhase, BundleSource, CRCBundleSpec, CRCBundleStatus};
use guestcluster::api::common::ObjectIdentity;
use guestcluster::api::conditions::{self, types};
use guestcluster::api::instance::{ClusterInstanceStatus, InstancePhase};
use guestcluster::api::labels::FINALIZER_RELEASE;
use guestcluster::api::lease::LeasePhase;
use guestcluster::api::{
    CRCBundle, ClusterInstance, ClusterLease, ClusterLeaseStatus, ClusterPool, LocalRef,
};
use guestcluster::kubevirt::RunStrategy;
use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Event, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::DynamicObject;
use serde_json::json;

/// Pool sizes the list decisions are measured at.
const SIZES: [usize; 3] = [10, 100, 1000];
const NOW: i64 = 1_700_000_000;
const IDLE_GRACE: Duration = Duration::from_secs(120);

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(secs).expect("valid timestamp")
}

fn pool(min: i32, max: i32, spares: i32) -> ClusterPool {
    serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterPool",
        "metadata": {"name": "p", "namespace": "ns", "uid": "pool-uid", "generation": 3},
        "spec": {"type": "crc", "minSize": min, "maxSize": max, "warmSpares": spares,
                 "template": {"crcVersion": "4.22.7", "ocpVersion": "4.22.7",
                              "memory": "16Gi", "cores": 4}},
    }))
    .expect("valid ClusterPool")
}

/// Member `p-<i>` of pool `p`, built as the pool would create it. Phases by `i % 10`: six Ready
/// and idle for an hour (with a published kubeconfig), one Ready for 10 s only, one
/// Provisioning, one Failed, one Ready but deleting.
fn member(i: usize) -> ClusterInstance {
    let name = format!("p-{i}");
    let mut instance = guestcluster::resources::pool::new_instance(&pool(0, 1, 0), &name);
    let offset = i64::try_from(i).expect("small index");
    instance.metadata.uid = Some(format!("uid-{name}"));
    instance.metadata.creation_timestamp = Some(Time(at(NOW - 10_000 + offset)));
    let (phase, ready_at) = match i % 10 {
        6 => (InstancePhase::Ready, Some(NOW - 10)),
        7 => (InstancePhase::Provisioning, None),
        8 => (InstancePhase::Failed, None),
        _ => (InstancePhase::Ready, Some(NOW - 3600)),
    };
    if i % 10 == 9 {
        instance.metadata.deletion_timestamp = Some(Time(at(NOW)));
    }
    let ready = phase == InstancePhase::Ready;
    instance.status = Some(ClusterInstanceStatus {
        phase: Some(phase),
        ocp_version: Some("4.22.7".into()),
        api_endpoint: ready.then(|| format!("https://api.{name}.example:6443")),
        kubeconfig_secret_ref: ready.then(|| LocalRef::new(format!("{name}-kubeconfig"))),
        conditions: ready_at
            .map(|t| {
                vec![conditions::new(
                    types::READY,
                    true,
                    "GuestReady",
                    "the guest API answers",
                    Some(1),
                    Time(at(t)),
                )]
            })
            .unwrap_or_default(),
        ..ClusterInstanceStatus::default()
    });
    instance
}

fn lease(
    name: &str,
    pool: &str,
    phase: Option<LeasePhase>,
    instance: Option<&str>,
) -> ClusterLease {
    let mut lease: ClusterLease = serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterLease",
        "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                     "generation": 1, "finalizers": [FINALIZER_RELEASE]},
        "spec": {"poolRef": {"name": pool}},
    }))
    .expect("valid ClusterLease");
    if phase.is_some() || instance.is_some() {
        lease.status = Some(ClusterLeaseStatus {
            phase,
            instance_ref: instance.map(LocalRef::new),
            ..ClusterLeaseStatus::default()
        });
    }
    lease
}

/// `n` members of pool `p` and the namespace's leases: a Bound lease on every third member, a
/// Pending lease of `p` per twenty members, and a Bound lease of another pool per ten.
fn fleet(n: usize) -> (Vec<ClusterInstance>, Vec<ClusterLease>) {
    let instances: Vec<ClusterInstance> = (0..n).map(member).collect();
    let mut leases: Vec<ClusterLease> = (0..n)
        .step_by(3)
        .map(|i| {
            lease(
                &format!("l-{i}"),
                "p",
                Some(LeasePhase::Bound),
                Some(&format!("p-{i}")),
            )
        })
        .collect();
    leases.extend((0..n / 20).map(|i| lease(&format!("wait-{i}"), "p", None, None)));
    leases.extend((0..n / 10).map(|i| {
        lease(
            &format!("o-{i}"),
            "other",
            Some(LeasePhase::Bound),
            Some(&format!("other-{i}")),
        )
    }));
    (instances, leases)
}

fn config() -> Criterion {
    Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20)
}

/// The same-run baselines the decisions are stated against.
fn baselines(c: &mut Criterion) {
    let mut group = c.benchmark_group("baseline");
    for n in SIZES {
        let (instances, _) = fleet(n);
        group.bench_with_input(
            BenchmarkId::new("clone_instances", n),
            &instances,
            |b, instances| b.iter(|| black_box(instances).clone()),
        );
    }
    let one = member(0);
    group.bench_function("serialize_instance", |b| {
        b.iter(|| serde_json::to_vec(black_box(&one)).expect("serializable"))
    });
    group.finish();
}

fn pool_decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("pool_decide");
    for n in SIZES {
        let (instances, leases) = fleet(n);
        let size = i32::try_from(n).expect("small pool");
        let policy = guestcluster::actors::pool::bundles::PoolBundles {
            crc_versions: guestcluster::actors::pool::bundles::VersionPatterns::parse("*"),
            ..Default::default()
        };
        let observed = || pool_decide::Observed {
            namespace: NamespaceState::Enabled,
            bundle: pool_decide::BundleState::Ready,
            instances: &instances,
            leases: &leases,
            now: at(NOW),
            idle_grace: IDLE_GRACE,
            pool_bundles: &policy,
        };
        // More available members than spares and demand: trims the newest idle one.
        let shrinking = pool(0, 4 * size, 1);
        let check = pool_decide::decide(&shrinking, observed());
        assert!(check.delete.is_some(), "scale_down deletes at {n}");
        group.bench_with_input(BenchmarkId::new("scale_down", n), &shrinking, |b, p| {
            b.iter(|| pool_decide::decide(black_box(p), observed()))
        });
        // minSize above the member count: creates the next free name.
        let growing = pool(2 * size, 4 * size, 0);
        let check = pool_decide::decide(&growing, observed());
        assert!(check.create.is_some(), "scale_up creates at {n}");
        group.bench_with_input(BenchmarkId::new("scale_up", n), &growing, |b, p| {
            b.iter(|| pool_decide::decide(black_box(p), observed()))
        });
    }
    group.finish();
}

fn lease_decisions(c: &mut Criterion) {
    let mut group = c.benchmark_group("lease_decide");
    let pending = lease("new", "p", None, None);
    let now = Time(at(NOW));
    for n in SIZES {
        let (instances, mut leases) = fleet(n);
        leases.push(pending.clone());
        let check = pool_bind::decide_bind(
            &pending,
            NamespaceState::Enabled,
            &instances,
            &leases,
            now.clone(),
        );
        assert!(
            matches!(check, pool_bind::BindDecision::Bind { .. }),
            "binds at {n}"
        );
        group.bench_with_input(
            BenchmarkId::new("decide_bind", n),
            &(instances, leases),
            |b, (instances, leases)| {
                b.iter(|| {
                    pool_bind::decide_bind(
                        black_box(&pending),
                        NamespaceState::Enabled,
                        instances,
                        leases,
                        now.clone(),
                    )
                })
            },
        );
    }
    group.finish();
}

fn operand(kind: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "metadata": {"name": kind.to_lowercase(), "namespace": "openshift-cnv"},
        "status": {"phase": "Deployed",
                   "conditions": [{"type": "Available", "status": "True"}]},
    }))
    .expect("valid operand")
}

/// A new instance passing every gate: enabled namespace, KubeVirt, CDI and a current, available
/// HyperConverged.
fn instance_gates_decision(c: &mut Criterion) {
    let mut instance: ClusterInstance = serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterInstance",
        "metadata": {"name": "one", "namespace": "team", "generation": 3},
        "spec": {"type": "crc", "template": {"crcVersion": "4.22.7", "ocpVersion": "4.22.7",
                                             "memory": "16Gi", "cores": 4}},
    }))
    .expect("valid ClusterInstance");
    instance.metadata.generation = Some(3);
    let hco: DynamicObject = serde_json::from_value(json!({
        "metadata": {"name": "kubevirt-hyperconverged", "namespace": "openshift-cnv",
                     "generation": 4},
        "status": {"observedGeneration": 4, "conditions": [
            {"type": "Available", "status": "True"},
            {"type": "Progressing", "status": "False"},
            {"type": "Degraded", "status": "False"},
        ]},
    }))
    .expect("valid HyperConverged");
    let observed = instance_gates::Observed {
        namespace: NamespaceState::Enabled,
        // The platform view computes the gate once per platform change, not per pass.
        platform: Some(platform_gate(&Platform {
            kubevirt: vec![operand("KubeVirt")],
            cdi: vec![operand("CDI")],
            hyperconverged: vec![hco],
        })),
    };
    let now = Time(at(NOW));
    assert!(instance_gates::decide(&instance, &observed, now.clone()).open);
    c.bench_function("instance_gates/decide", |b| {
        b.iter(|| instance_gates::decide(black_box(&instance), &observed, now.clone()))
    });
}

/// A preparing download bundle whose prep Job succeeded: publishes Ready.
fn download_decision(c: &mut Criterion) {
    let spec: CRCBundleSpec =
        serde_json::from_value(json!({"version": "4.22.7"})).expect("valid CRCBundleSpec");
    let mut bundle = CRCBundle::new("crc-4.22.7-amd64", spec);
    bundle.metadata.generation = Some(1);
    bundle.status = Some(CRCBundleStatus {
        phase: Some(BundlePhase::Preparing),
        source: Some(BundleSource::Download),
        prep_job: Some(ObjectIdentity {
            name: "crc-4.22.7-amd64-prep".into(),
            uid: "job-uid".into(),
        }),
        ..CRCBundleStatus::default()
    });
    let metadata: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "crc-4.22.7-amd64-metadata"},
        "data": {"ocpVersion": "4.22.7", "sha256": "a".repeat(64),
                 "diskSHA256": "0123456789abcdef".repeat(4), "diskVirtualSize": "33285996544"},
    }))
    .expect("valid ConfigMap");
    let observed = download::Observed {
        golden_pvc: true,
        scratch_pvc: Some("scratch-uid".into()),
        job: guestcluster::actors::runtime::stage::JobState::Seen(Observation::Done(String::new())),
        ssh_secret: true,
        metadata: Some(metadata),
    };
    let now = Time(at(NOW));
    let check = download::decide(&bundle, &observed, "guestcluster-system", now.clone());
    assert_eq!(
        check.status.phase,
        Some(BundlePhase::Ready),
        "download publishes"
    );
    c.bench_function("download/decide", |b| {
        b.iter(|| {
            download::decide(
                black_box(&bundle),
                &observed,
                "guestcluster-system",
                now.clone(),
            )
        })
    });
}

fn obj(name: &str) -> Obj {
    Obj {
        name: name.into(),
        uid: format!("{name}-uid"),
        deleting: false,
    }
}

/// The first pass of a teardown (everything left; deletes the agent Jobs) and the last one (only
/// the Service left; every earlier step is checked first).
fn teardown_decision(c: &mut Criterion) {
    let everything = Remaining {
        jobs: vec![obj("job")],
        role: Some(obj("role")),
        role_binding: Some(obj("rb")),
        service_account: Some(obj("sa")),
        boot_key: Some(obj("key")),
        vm: Some(Vm {
            obj: obj("vm"),
            spec_run_strategy: RunStrategy::Always,
        }),
        vmi: Some(obj("vmi")),
        launcher_pods: vec![obj("pod")],
        data_volume: Some(obj("dv")),
        pvc: Some(obj("pvc")),
        handoffs: vec![obj("handoff")],
        route: Some(obj("route")),
        service: Some(obj("svc")),
    };
    let last = Remaining {
        service: Some(obj("svc")),
        ..Remaining::default()
    };
    let mut group = c.benchmark_group("teardown_plan/next");
    group.bench_function("everything", |b| {
        b.iter(|| teardown_plan::next(black_box(&everything)))
    });
    group.bench_function("last_step", |b| {
        b.iter(|| teardown_plan::next(black_box(&last)))
    });
    group.finish();
}

/// Binding a Ready downloaded bundle (hashes a PEM-sized private key).
fn boot_key_decision(c: &mut Criterion) {
    let spec: CRCBundleSpec =
        serde_json::from_value(json!({"version": "4.22.7", "storageClassName": "fast"}))
            .expect("valid CRCBundleSpec");
    let mut bundle = CRCBundle::new("crc-4.22.7-amd64", spec);
    bundle.metadata.uid = Some("bundle-uid".into());
    bundle.status = Some(CRCBundleStatus {
        phase: Some(BundlePhase::Ready),
        source: Some(BundleSource::Download),
        qcow2_pvc_ref: Some(LocalRef::new("crc-4.22.7-amd64-golden")),
        qcow2_pvc_namespace: Some("guestcluster-system".into()),
        ssh_key_secret_ref: Some(LocalRef::new("crc-4.22.7-amd64-ssh")),
        sha256: Some("a".repeat(64)),
        disk_sha256: Some("d".repeat(64)),
        ..CRCBundleStatus::default()
    });
    // Controlled by the bundle, as its prep Job makes them.
    let owner = kube::Resource::controller_owner_ref(&bundle, &());
    let meta = |name: &str, uid: &str| ObjectMeta {
        name: Some(name.into()),
        namespace: Some("guestcluster-system".into()),
        uid: Some(uid.into()),
        owner_references: owner.clone().map(|o| vec![o]),
        ..ObjectMeta::default()
    };
    let pvc = PersistentVolumeClaim {
        metadata: meta("crc-4.22.7-amd64-golden", "pvc-1"),
        ..PersistentVolumeClaim::default()
    };
    // An ECDSA P-521 private key in PEM is about 365 bytes.
    let key = b"-----BEGIN EC PRIVATE KEY-----\n".repeat(12);
    let secret = Secret {
        metadata: meta("crc-4.22.7-amd64-ssh", "secret-1"),
        data: Some(BTreeMap::from([(KEY.into(), ByteString(key))])),
        ..Secret::default()
    };
    let source = boot_key::Source {
        bundle: &bundle,
        namespace: "guestcluster-system",
        pvc: Some(&pvc),
        secret: Some(&secret),
    };
    assert!(boot_key::bind(&source).is_ok(), "boot key binds");
    c.bench_function("boot_key/bind", |b| {
        b.iter(|| boot_key::bind(black_box(&source)))
    });
}

fn agent_pod(name: &str, phase: &str, terminated: Option<&str>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "status": {"phase": phase, "containerStatuses": [{
            "name": "crc-agent", "image": "crc-agent", "imageID": "", "ready": false,
            "restartCount": 0,
            "state": terminated.map_or_else(
                || json!({"running": {}}),
                |m| json!({"terminated": {"exitCode": 1, "message": m}}),
            ),
        }]},
    }))
    .expect("valid Pod")
}

/// A running agent Job with one failed and one running pod and a few unrelated Events: every
/// pod is inspected.
fn agent_decision(c: &mut Criterion) {
    let job: Job = serde_json::from_value(json!({
        "metadata": {"name": "crc-1-crc-agent-0123456789ab"},
        "status": {"active": 1, "failed": 1},
    }))
    .expect("valid Job");
    let pods = [
        agent_pod("agent-a", "Failed", Some("ssh: connection refused")),
        agent_pod("agent-b", "Running", None),
    ];
    let events: Vec<Event> = (0..3)
        .map(|i| {
            serde_json::from_value(json!({
                "metadata": {"name": format!("agent-b.{i}"), "namespace": "ns"},
                "involvedObject": {"kind": "Pod", "name": "agent-b"},
                "reason": "Pulled",
                "message": "image already present",
            }))
            .expect("valid Event")
        })
        .collect();
    let now = at(NOW);
    let check = agent::diagnose(&job, &pods, &events, now);
    assert_eq!(check.status, "Unknown", "agent is working: {check:?}");
    c.bench_function("agent/diagnose", |b| {
        b.iter(|| agent::diagnose(black_box(&job), &pods, &events, now))
    });
}

criterion_group! {
    name = decisions;
    config = config();
    targets = baselines, pool_decisions, lease_decisions, instance_gates_decision,
        download_decision, teardown_decision, boot_key_decision, agent_decision
}
criterion_main!(decisions);
