//! What observing the operator costs: counting every message for `guestcluster_mailbox_depth`,
//! and rendering `/dashboard` for a large inventory.
//!
//! Absolute times depend on the machine; state results as ratios against the baselines measured
//! in the same run: `mailbox/cast/1000` (1000 messages through an actor with ractor's plain
//! `cast`, the cost the counter adds to) and `baseline/serialize_instances/<n>` (serde_json of the
//! `n` ClusterInstances the page shows, what any JSON API of the same data would pay).
//!
//! `cargo bench --bench observability`.
// The baseline sends with ractor's own `cast`, which the product reaches only through the counter.
#![allow(clippy::disallowed_methods)]

use std::hint::black_box;
use std::time::Duration;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use guestcluster::actors::runtime::mailbox;
use guestcluster::api::ClusterInstance;
use guestcluster::operator::dashboard::{ActorNode, Snapshot, render};
use guestcluster::operator::inventory::{Inventory, instance_row};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::json;

const MESSAGES: u32 = 1000;

/// Counts the messages it handles and reports when it has seen [`MESSAGES`].
struct Counter {
    counted: bool,
}

impl Actor for Counter {
    type Msg = u32;
    type State = (u32, std::sync::mpsc::Sender<()>);
    type Arguments = std::sync::mpsc::Sender<()>;

    async fn pre_start(
        &self,
        _: ActorRef<u32>,
        done: Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        Ok((0, done))
    }

    async fn handle(
        &self,
        myself: ActorRef<u32>,
        _: u32,
        (seen, done): &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if self.counted {
            mailbox::taken(&myself);
        }
        *seen += 1;
        if *seen == MESSAGES {
            *seen = 0;
            done.send(())?;
        }
        Ok(())
    }
}

fn mailbox_counting(c: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = c.benchmark_group("mailbox");
    for counted in [false, true] {
        let (tx, rx) = std::sync::mpsc::channel();
        let (actor, _) = runtime
            .block_on(Actor::spawn(None, Counter { counted }, tx))
            .expect("spawn");
        let name = if counted { "post" } else { "cast" };
        group.bench_function(BenchmarkId::new(name, MESSAGES), |b| {
            b.iter(|| {
                for n in 0..MESSAGES {
                    if counted {
                        mailbox::post(&actor, n).expect("post");
                    } else {
                        actor.cast(n).expect("cast");
                    }
                }
                rx.recv().expect("all handled");
            })
        });
        actor.stop(None);
    }
    group.finish();
}

fn instance(n: usize) -> ClusterInstance {
    serde_json::from_value(json!({
        "apiVersion": "guestcluster.opdev.io/v1alpha1",
        "kind": "ClusterInstance",
        "metadata": { "name": format!("ci-{n}"), "namespace": "team-a", "uid": format!("uid-{n}") },
        "spec": {
            "type": "crc",
            "template": { "ocpVersion": "4.22.7", "crcVersion": "2.50.0", "memory": "16Gi", "cores": 4 },
        },
        "status": {
            "phase": "Ready",
            "conditions": [{
                "type": "Ready", "status": "True", "reason": "BackingResourcesAvailable",
                "message": format!("the guest API at https://api-ci-{n}.apps.example is ready; kubeconfig in Secret ci-{n}-kubeconfig"),
                "lastTransitionTime": "2026-12-01T10:00:00Z",
            }],
        },
    }))
    .expect("a valid instance")
}

fn dashboard_render(c: &mut Criterion) {
    for n in [10, 100, 1000] {
        let instances: Vec<ClusterInstance> = (0..n).map(instance).collect();
        c.bench_with_input(
            BenchmarkId::new("baseline/serialize_instances", n),
            &instances,
            |b, instances| b.iter(|| serde_json::to_string(black_box(instances)).expect("json")),
        );
        let snapshot = Snapshot {
            inventory: Inventory {
                instances: instances.iter().map(instance_row).collect(),
                ..Inventory::default()
            },
            actors: Some(ActorNode {
                name: "root".into(),
                object: None,
                children: vec![ActorNode {
                    name: "supervisor/clusterinstance".into(),
                    object: None,
                    children: instances
                        .iter()
                        .map(|i| ActorNode {
                            name: format!(
                                "clusterinstance/{}",
                                i.metadata.uid.as_deref().unwrap_or_default()
                            ),
                            object: Some(format!(
                                "team-a/{}",
                                i.metadata.name.as_deref().unwrap_or_default()
                            )),
                            children: Vec::new(),
                        })
                        .collect(),
                }],
            }),
        };
        c.bench_with_input(
            BenchmarkId::new("dashboard/render", n),
            &snapshot,
            |b, s| b.iter(|| render(black_box(s))),
        );
    }
}

fn config() -> Criterion {
    Criterion::default()
        .sample_size(20)
        .measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_secs(1))
}

criterion_group! {
    name = observability;
    config = config();
    targets = mailbox_counting, dashboard_render
}
criterion_main!(observability);
