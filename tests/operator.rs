//! The operator skeleton against a real API server: bundle actors start, write status and stop
//! with their bundles; a killed actor is restarted; the operator process elects a leader, serves
//! probes and metrics, and shuts down gracefully on SIGTERM.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use guestcluster::actors::bundle::BundleActor;
use guestcluster::actors::root::{self, TreeConfig};
use guestcluster::actors::{Context, ObjectActor, object_actor_name};
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::{CRCBundle, CRCBundleSpec};
use guestcluster::metrics::Metrics;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use ractor::registry;
use serde_json::json;
use support::wait_for;

fn download_bundle(name: &str) -> CRCBundle {
    let spec: CRCBundleSpec = serde_json::from_value(json!({"version": "4.16.0"})).unwrap();
    CRCBundle::new(name, spec)
}

fn actor_of(uid: &str) -> Option<ractor::ActorCell> {
    registry::where_is(object_actor_name(BundleActor::KIND, uid))
}

/// Both operators of this test binary (the in-process tree and the operator process) work in
/// this namespace, so they decide alike and never fight over a bundle's status.
const OPERATOR_NS: &str = "operator-test";

/// The bundle once its actor recorded `generation` (the download source is then Preparing: no
/// simulated cluster runs the prep Job in this test).
async fn observed_at_generation(
    api: &Api<CRCBundle>,
    name: &str,
    generation: i64,
) -> Option<CRCBundle> {
    let b = api.get(name).await.ok()?;
    let status = b.status.as_ref()?;
    let ready = conditions::find(&status.conditions, types::READY)?;
    (status.observed_generation == Some(generation)
        && ready.status == "False"
        && ready.reason == reasons::PREPARING
        && ready.observed_generation == Some(generation))
    .then_some(b)
}

/// One tree per test process (actor names are global), so the in-process scenario is one test.
#[tokio::test]
async fn bundle_actors_follow_bundles_and_restart_when_killed() {
    let client = support::client().await;
    let metrics = Metrics::default();
    let ctx = Context::new(
        client.clone(),
        OPERATOR_NS,
        metrics.clone(),
        Default::default(),
    );
    let config = TreeConfig {
        backoff: guestcluster::actors::runtime::backoff::Backoff {
            base: Duration::from_millis(50),
            ..Default::default()
        },
        ..Default::default()
    };
    let tree = root::start(ctx, config).await.expect("tree starts");
    let api: Api<CRCBundle> = Api::all(client.clone());

    // Created: an actor appears and records the honest initial state.
    let name = support::unique("actor");
    let created = api
        .create(&PostParams::default(), &download_bundle(&name))
        .await
        .unwrap();
    let uid = created.uid().unwrap();
    let bundle = wait_for("bundle status at generation 1", || {
        observed_at_generation(&api, &name, 1)
    })
    .await;
    assert_eq!(
        bundle.status.unwrap().source,
        Some(guestcluster::api::bundle::BundleSource::Download)
    );
    let first = wait_for("bundle actor registered", || async { actor_of(&uid) }).await;
    // Other tests in this binary create bundles too, so count only ours.
    assert!(metrics.live_actors(BundleActor::KIND) >= 1);

    // Killed: the supervisor restarts it (new actor id) and counts the restart.
    let restarts = metrics.restarts(BundleActor::KIND);
    first.kill();
    let second = wait_for("bundle actor restarted", || async {
        actor_of(&uid).filter(|a| a.get_id() != first.get_id())
    })
    .await;
    assert_eq!(metrics.restarts(BundleActor::KIND), restarts + 1);

    // The restarted actor works: a spec change is observed at the new generation.
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"bundleURL": "https://mirror.example/b.crcbundle"}})),
    )
    .await
    .unwrap();
    wait_for("bundle status at generation 2", || {
        observed_at_generation(&api, &name, 2)
    })
    .await;
    assert_eq!(actor_of(&uid).map(|a| a.get_id()), Some(second.get_id()));

    // A killed kind supervisor is restarted by the root; the new one re-lists and brings the
    // bundle's actor back.
    let supervisor_name = guestcluster::actors::supervisor_name(BundleActor::KIND);
    let supervisor =
        registry::where_is(supervisor_name.clone()).expect("bundle supervisor registered");
    supervisor.kill();
    wait_for("bundle supervisor restarted", || async {
        registry::where_is(supervisor_name.clone()).filter(|s| s.get_id() != supervisor.get_id())
    })
    .await;
    wait_for("bundle actor respawned by the new supervisor", || async {
        actor_of(&uid).filter(|a| a.get_id() != second.get_id())
    })
    .await;
    // (The new supervisor could only register the name because the orphan was stopped.)
    assert_eq!(second.get_status(), ractor::ActorStatus::Stopped);

    // Deleted: the actor stops and is not restarted.
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("bundle actor stopped", || async {
        actor_of(&uid).is_none().then_some(())
    })
    .await;
    assert_eq!(
        metrics.restarts(BundleActor::KIND),
        restarts + 1,
        "a deleted bundle's actor is not restarted"
    );

    tree.stop_and_wait(None, Some(Duration::from_secs(10)))
        .await
        .unwrap();
}

async fn lease_holder(api: &Api<Lease>) -> Option<String> {
    api.get_opt("28494864.opdev.io")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

#[tokio::test]
async fn operator_process_elects_a_leader_serves_probes_and_stops_gracefully() {
    let client = support::client().await;
    let ns = support::ensure_namespace(&client, OPERATOR_NS).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);

    let mut first = support::Operator::start(&ns).await;
    let leader = wait_for("first operator leads", || lease_holder(&leases)).await;
    assert!(leader.starts_with("first-operator"), "holder {leader}");
    wait_for("first operator ready", || async {
        (first.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(first.get("/healthz").await, (200, "ok".to_owned()));

    // The leader runs the tree: a bundle gets an actor, visible in /metrics.
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("proc");
    api.create(&PostParams::default(), &download_bundle(&name))
        .await
        .unwrap();
    wait_for("bundle observed by the operator process", || {
        observed_at_generation(&api, &name, 1)
    })
    .await;
    let (code, metrics) = first.get_metrics().await;
    assert_eq!(code, 200);
    assert!(
        metrics.contains("guestcluster_actors{kind=\"crcbundle\"}"),
        "metrics:\n{metrics}"
    );
    assert!(
        metrics.contains("guestcluster_actor_restarts_total"),
        "metrics:\n{metrics}"
    );
    // It leads, times its reconciles and counts its API requests by verb and code.
    for series in [
        "guestcluster_leader 1",
        "guestcluster_reconcile_duration_seconds_count{kind=\"crcbundle\",result=\"ok\"}",
        "guestcluster_api_requests_total{verb=\"WATCH\",code=\"200\"}",
        "guestcluster_api_requests_total{verb=\"GET\",code=\"200\"}",
        // Objects per kind and the phase their status reports, from the watch cache.
        "guestcluster_objects{kind=\"crcbundle\",phase=\"",
        // Messages waiting per actor kind: the root handled its start-up messages long ago.
        "guestcluster_mailbox_depth{kind=\"supervisor\"}",
        "guestcluster_mailbox_depth{kind=\"root\"} 0",
    ] {
        assert!(metrics.contains(series), "no {series} in:\n{metrics}");
    }

    // A second replica stands by: ready, but not the holder.
    let mut second = support::Operator::start_named(&ns, "second-operator").await;
    wait_for("standby ready", || async {
        (second.get("/readyz").await.0 == 200).then_some(())
    })
    .await;
    assert_eq!(
        lease_holder(&leases).await.as_deref(),
        Some(leader.as_str())
    );

    // SIGTERM: the leader exits 0 and releases the lease, so the standby takes over at once.
    assert_eq!(
        first.terminate().await,
        Some(0),
        "graceful exit; log:\n{}",
        first.log()
    );
    let next = wait_for("standby takes over", || async {
        lease_holder(&leases)
            .await
            .filter(|h| h.starts_with("second-operator"))
    })
    .await;
    assert_ne!(next, leader);
    assert_eq!(
        second.terminate().await,
        Some(0),
        "graceful exit; log:\n{}",
        second.log()
    );
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// Leader timings that do not fit together stop the operator before it touches the cluster,
/// with a message naming what is wrong; a duration it cannot read names the flag.
#[test]
fn leader_timings_that_do_not_fit_are_refused_at_start() {
    let run = |args: &[&str]| {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_guestcluster"))
            .args([
                "operator",
                "--health-probe-bind-address=0",
                "--metrics-bind-address=0",
            ])
            .args(args)
            // Nowhere to connect: a refusal must come before any API request.
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .expect("run guestcluster operator");
        assert!(!out.status.success(), "started with {args:?}");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(&[
        "--leader-elect-lease-duration=10s",
        "--leader-elect-renew-deadline=10s",
    ]);
    assert!(
        err.contains("renew deadline (10s) must be shorter than the lease duration (10s)"),
        "{err}"
    );
    let err = run(&["--leader-elect-lease-duration=2500ms"]);
    assert!(err.contains("whole number of seconds"), "{err}");
    let err = run(&["--leader-elect-retry-period=soon"]);
    assert!(
        err.contains("--leader-elect-retry-period") && err.contains("15s, 500ms or 1m30s"),
        "{err}"
    );
}

/// Leader election has a client of its own: with the actors' bucket spent (one request, then
/// one an hour), a candidate still takes its Lease at once, and the actors' next request is
/// still waiting for its token.
#[tokio::test]
async fn leader_election_does_not_wait_behind_the_operators_own_requests() {
    use guestcluster::operator::api_limits::{self, ApiLimits};
    use guestcluster::operator::leader;
    use kube::api::ListParams;

    let client = support::client().await;
    let ns = support::namespace(&client, "election").await;
    let limits = ApiLimits {
        qps: 1.0 / 3600.0,
        burst: 1,
    };
    let clients =
        api_limits::clients(support::config().await, limits, &Metrics::default()).expect("clients");
    let leases = Api::<Lease>::namespaced(clients.work.clone(), &ns);
    leases
        .list(&ListParams::default())
        .await
        .expect("the bucket's one token");
    let queued = tokio::spawn(async move { leases.list(&ListParams::default()).await });

    let elector = leader::Elector::new(
        clients.election,
        leader::Config::new(&ns, "candidate", leader::Timing::default()),
    );
    tokio::time::timeout(support::DEADLINE, elector.acquire())
        .await
        .expect("the election's requests waited for the actors' bucket")
        .expect("Lease acquired");
    let held = Api::<Lease>::namespaced(client, &ns)
        .get("28494864.opdev.io")
        .await
        .expect("the Lease");
    assert_eq!(
        held.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("candidate")
    );
    assert!(
        !queued.is_finished(),
        "the actors' second request got through: the bucket was not spent"
    );
    queued.abort();
}
