//! The download source end to end: a CRCBundle with a mirror URL → the prep Job (the real
//! `guestcluster bundle-prep`, run by the simulated kubelet) → the golden PVC's raw disk, the key
//! Secret and the metadata ConfigMap → `Ready`; each bad input ends `Failed` with its reason; a
//! lost key is restored; the prep Job's child actor is restarted from the recorded identity, and
//! a prep Job deleted mid-preparation is made again (upstream's contract for download bundles).
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::actors::bundle::download::prep_job::PrepJob;
use guestcluster::actors::runtime::stage::Stage;
use guestcluster::api::bundle::BundlePhase;
use guestcluster::api::common::ObjectIdentity;
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::{CRCBundle, CRCBundleSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use sim::bundles::{self, BundleSpec, Flaw};
use sim::file_server::Fault;
use support::wait_for;
use support::world::{OPERATOR_NS, world};

/// Builds a bundle with `flaw`, serves it, and creates a CRCBundle pointing at it.
/// `fault` is chosen knowing the archive's size.
async fn create_bundle(
    client: &kube::Client,
    version: &str,
    flaw: Flaw,
    fault: impl Fn(u64) -> Fault,
) -> (String, bundles::Bundle) {
    create_bundle_of(client, BundleSpec::new(version).with_flaw(flaw), fault).await
}

/// [`create_bundle`] of any simulated bundle (`goldenVolumeSize` 1Gi).
async fn create_bundle_of(
    client: &kube::Client,
    built: BundleSpec,
    fault: impl Fn(u64) -> Fault,
) -> (String, bundles::Bundle) {
    let w = world();
    let version = built.version.clone();
    let name = support::unique(&format!("crc-{version}"));
    let dir = w.root.join("served").join(&name);
    let bundle = bundles::build(&dir, &built).expect("build test bundle");
    let size = std::fs::metadata(&bundle.archive).expect("archive").len();
    let bundle_url = w.files.publish(
        &format!("{name}/{}", bundle.file_name),
        bundle.archive.clone(),
        fault(size),
    );
    let sha_url = w.files.publish(
        &format!("{name}/sha256sum.txt"),
        bundle.sha256sum_txt.clone(),
        Fault::None,
    );
    let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
        "version": version, "bundleURL": bundle_url, "sha256URL": sha_url, "allowHTTP": true, "goldenVolumeSize": "1Gi"
    }))
    .unwrap();
    Api::<CRCBundle>::all(client.clone())
        .create(&PostParams::default(), &CRCBundle::new(&name, spec))
        .await
        .expect("create CRCBundle");
    (name, bundle)
}

/// The recorded prep Job (`status.prepJob`) once its UID is recorded.
async fn recorded_job(api: &Api<CRCBundle>, name: &str) -> Option<ObjectIdentity> {
    let b = api.get(name).await.ok()?;
    b.status?.prep_job.filter(|j| !j.uid.is_empty())
}

async fn phase(api: &Api<CRCBundle>, name: &str, phase: BundlePhase) -> Option<CRCBundle> {
    let b = api.get(name).await.ok()?;
    (b.status.as_ref()?.phase == Some(phase)).then_some(b)
}

fn ready(b: &CRCBundle) -> (String, String, String) {
    let c = conditions::find(&b.status.as_ref().unwrap().conditions, types::READY).unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn a_downloaded_bundle_becomes_ready_and_heals() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let (name, built) = create_bundle(&client, "4.16.0", Flaw::None, |size| Fault::Cut {
        after: size / 2,
        times: 1,
    })
    .await;

    let b = wait_for("bundle Ready", || phase(&api, &name, BundlePhase::Ready)).await;
    let status = b.status.clone().unwrap();
    assert_eq!(ready(&b).1, reasons::BUNDLE_READY);
    assert_eq!(status.ocp_version.as_deref(), Some("4.16.0"));
    assert_eq!(status.sha256.as_deref(), Some(built.sha256.as_str()));
    assert_eq!(
        status.disk_sha256.as_deref(),
        Some(built.raw_disk_sha256.as_str()),
        "the golden disk is the raw disk of the bundle"
    );
    assert_eq!(status.qcow2_pvc_namespace.as_deref(), Some(OPERATOR_NS));
    assert_eq!(status.vm_profile.as_deref(), Some("crc-download-v0"));
    let golden = status.qcow2_pvc_ref.unwrap().name;
    let secret_name = status.ssh_key_secret_ref.unwrap().name;

    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NS);
    let key = secrets.get(&secret_name).await.unwrap().data.unwrap()["id_ecdsa"]
        .0
        .clone();
    assert_eq!(
        key,
        built.private_key.as_bytes(),
        "the key Secret holds the bundle's key"
    );
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), OPERATOR_NS);
    assert!(pvcs.get_opt(&golden).await.unwrap().is_some());
    wait_for("scratch PVC and prep Job cleaned up", || async {
        let scratch = pvcs.get_opt(&format!("{name}-scratch")).await.ok()?;
        let job = Api::<Job>::namespaced(client.clone(), OPERATOR_NS)
            .get_opt(&format!("{name}-prep"))
            .await
            .ok()?;
        (scratch.is_none() && job.is_none()).then_some(())
    })
    .await;
    assert!(
        world()
            .files
            .requests(&format!("{name}/{}", built.file_name))
            >= 2,
        "the cut download was retried"
    );

    // Self-healing: the key disappears → the bundle is prepared again and comes back Ready.
    secrets
        .delete(&secret_name, &DeleteParams::default())
        .await
        .unwrap();
    wait_for("bundle leaves Ready when its key is gone", || async {
        let b = api.get(&name).await.ok()?;
        (b.status?.phase != Some(BundlePhase::Ready)).then_some(())
    })
    .await;
    wait_for("bundle Ready again with its key", || async {
        let b = phase(&api, &name, BundlePhase::Ready).await?;
        secrets.get_opt(&secret_name).await.ok()??;
        Some(b)
    })
    .await;

    // Deleting the bundle takes everything it owns with it (real garbage collection).
    api.delete(&name, &DeleteParams::default()).await.unwrap();
    wait_for("owned objects collected", || async {
        let gone = pvcs.get_opt(&golden).await.ok()?.is_none()
            && secrets.get_opt(&secret_name).await.ok()?.is_none()
            && Api::<ConfigMap>::namespaced(client.clone(), OPERATOR_NS)
                .get_opt(&format!("{name}-metadata"))
                .await
                .ok()?
                .is_none();
        gone.then_some(())
    })
    .await;
}

#[tokio::test]
async fn each_bad_input_fails_with_its_reason() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let cases = [
        (Flaw::WrongChecksum, Fault::None, "ChecksumMismatch"),
        (Flaw::UnlistedInChecksums, Fault::None, "ChecksumMissing"),
        (
            Flaw::MissingMember("crc.qcow2"),
            Fault::None,
            "MissingMember",
        ),
        (Flaw::PathTraversal, Fault::None, "UnsafeMember"),
        (Flaw::NoVersion, Fault::None, "BundleInfoUnreadable"),
        (Flaw::None, Fault::Status(404), "HttpError"),
    ];
    let mut created = Vec::new();
    for (flaw, fault, reason) in cases {
        let (name, _) = create_bundle(&client, "4.17.0", flaw, |_| fault).await;
        created.push((name, reason));
    }
    // A disk larger than the golden volume (1Gi) fails before a byte of it is written.
    let larger = BundleSpec {
        disk_virtual_size: 2 << 30,
        ..BundleSpec::new("4.17.0")
    };
    let (name, _) = create_bundle_of(&client, larger, |_| Fault::None).await;
    created.push((name, "spec.goldenVolumeSize"));
    for (name, reason) in &created {
        let b = wait_for(&format!("{name} Failed"), || {
            phase(&api, name, BundlePhase::Failed)
        })
        .await;
        let (status, condition_reason, message) = ready(&b);
        assert_eq!(
            (status.as_str(), condition_reason.as_str()),
            ("False", reasons::PREP_JOB_FAILED)
        );
        assert!(
            message.contains(reason),
            "{name}: expected {reason} in {message:?}"
        );
        let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NS);
        assert!(
            secrets
                .get_opt(&format!("{name}-ssh-key"))
                .await
                .unwrap()
                .is_none(),
            "{name}: no key published"
        );
        // A failed bundle keeps its Job (for its logs) but not its scratch volume: deleted (it
        // goes once no pod holds it).
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), OPERATOR_NS);
        wait_for(&format!("{name}'s scratch PVC released"), || async {
            pvcs.get_opt(&format!("{name}-scratch"))
                .await
                .ok()?
                .is_none_or(|p| p.metadata.deletion_timestamp.is_some())
                .then_some(())
        })
        .await;
    }

    // Deleting the failed Job retries (and fails again, for the same reason).
    let (name, reason) = &created[0];
    let jobs: Api<Job> = Api::namespaced(client.clone(), OPERATOR_NS);
    let first = jobs
        .get(&format!("{name}-prep"))
        .await
        .unwrap()
        .metadata
        .uid;
    jobs.delete(&format!("{name}-prep"), &DeleteParams::background())
        .await
        .unwrap();
    wait_for("a new prep Job", || async {
        let job = jobs.get_opt(&format!("{name}-prep")).await.ok()??;
        (job.metadata.uid != first).then_some(())
    })
    .await;
    let b = wait_for("Failed again", || async {
        let b = phase(&api, name, BundlePhase::Failed).await?;
        let job = jobs.get_opt(&format!("{name}-prep")).await.ok()??;
        (job.metadata.uid != first).then_some(b)
    })
    .await;
    assert!(ready(&b).2.contains(reason));

    // Nothing leaks: deleting the bundles collects their PVCs and Jobs.
    for (name, _) in &created {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), OPERATOR_NS);
    for (name, _) in &created {
        wait_for(&format!("{name}'s objects collected"), || async {
            let pvc = pvcs.get_opt(&format!("{name}-golden")).await.ok()?;
            let job = jobs.get_opt(&format!("{name}-prep")).await.ok()?;
            (pvc.is_none() && job.is_none()).then_some(())
        })
        .await;
    }
}

/// While its download is held, the prep Job's child actor is killed (restarted from the recorded
/// identity, still the same Job) and then the Job is deleted: a download bundle makes it again
/// under a newly recorded UID, as upstream does, and becomes Ready.
#[tokio::test]
async fn the_prep_job_child_restarts_from_status_and_a_deleted_job_is_made_again() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let jobs: Api<Job> = Api::namespaced(client.clone(), OPERATOR_NS);
    let w = world();
    let (name, built) = create_bundle(&client, "4.18.0", Flaw::None, |_| Fault::None).await;
    let archive = format!("{name}/{}", built.file_name);
    let hold = w.files.hold(&archive);
    let uid = api.get(&name).await.unwrap().uid().unwrap();

    let first = wait_for("prep Job recorded with its UID", || {
        recorded_job(&api, &name)
    })
    .await;
    let job = jobs.get(&first.name).await.unwrap();
    assert_eq!(job.metadata.uid.as_deref(), Some(first.uid.as_str()));
    wait_for("the prep Job's pod downloading", || async {
        (w.files.requests(&archive) >= 1).then_some(())
    })
    .await;

    // The child is registered under the bundle's UID and counted; killed, it is restarted by
    // its parent and follows the same recorded Job.
    let child_name = format!("{}/{uid}", PrepJob::KIND);
    let child = wait_for("prep Job child registered", || async {
        ractor::registry::where_is(child_name.clone())
    })
    .await;
    assert!(w.metrics.live_actors(PrepJob::KIND) >= 1);
    let restarts = w.metrics.restarts(PrepJob::KIND);
    child.kill();
    wait_for("prep Job child restarted", || async {
        ractor::registry::where_is(child_name.clone()).filter(|c| c.get_id() != child.get_id())
    })
    .await;
    assert!(w.metrics.restarts(PrepJob::KIND) > restarts);
    assert_eq!(recorded_job(&api, &name).await, Some(first.clone()));
    let listed = jobs
        .list(&ListParams::default().labels(&format!("opdev.io/crc-bundle={name}")))
        .await
        .unwrap();
    assert_eq!(
        listed.items.iter().map(|j| j.uid()).collect::<Vec<_>>(),
        [Some(first.uid.clone())],
        "one prep Job, the recorded one"
    );

    // Deleted mid-preparation: made again under a new UID, never failing the bundle.
    jobs.delete(&first.name, &DeleteParams::background())
        .await
        .unwrap();
    let second = wait_for("a new prep Job recorded", || async {
        recorded_job(&api, &name)
            .await
            .filter(|j| j.uid != first.uid)
    })
    .await;
    let job = wait_for("the new prep Job exists", || async {
        jobs.get_opt(&second.name).await.ok()?
    })
    .await;
    assert_eq!(job.metadata.uid.as_deref(), Some(second.uid.as_str()));
    let b = api.get(&name).await.unwrap();
    assert_eq!(b.status.unwrap().phase, Some(BundlePhase::Preparing));

    hold.release();
    let b = wait_for("bundle Ready", || phase(&api, &name, BundlePhase::Ready)).await;
    assert_eq!(ready(&b).1, reasons::BUNDLE_READY);
    wait_for("prep Job cleaned up and forgotten", || async {
        let b = api.get(&name).await.ok()?;
        let gone = jobs.get_opt(&second.name).await.ok()?.is_none();
        (gone && b.status?.prep_job.is_none()).then_some(())
    })
    .await;
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// A pod anyone created with the prep Job's name in its `job-name` labels, finished later than
/// the Job's own pod with a message of its own, is not the Job's pod: the bundle fails with the
/// prep Job's reason, and the planted message is nowhere in its status (hardening item 7: a
/// Job's pods are the ones its controller made, selected by the Job's UID).
#[tokio::test]
async fn a_pod_that_only_claims_the_prep_jobs_name_is_not_its_pod() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let (name, _) = create_bundle(&client, "4.17.0", Flaw::WrongChecksum, |_| Fault::None).await;
    let job = format!("{name}-prep");
    let planted = "PlantedReason: written by a pod that is not the Job's";
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    let decoy: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{job}-decoy"),
            "labels": {"job-name": job, "batch.kubernetes.io/job-name": job},
        },
        "spec": {
            // Bound to a node that is not the simulated kubelet's: nothing runs it, so the
            // status written below stays.
            "nodeName": "not-a-node",
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "prep", "image": "registry.example/decoy:1",
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &decoy).await.unwrap();
    let finished = "2099-01-01T00:00:00Z";
    let status = serde_json::json!({"status": {"phase": "Failed", "containerStatuses": [{
        "name": "prep", "image": "registry.example/decoy:1", "imageID": "", "ready": false,
        "restartCount": 0,
        "state": {"terminated": {"exitCode": 1, "reason": "Error", "message": planted,
                                 "startedAt": finished, "finishedAt": finished}},
    }]}});
    pods.patch_status(
        &format!("{job}-decoy"),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();

    let b = wait_for(&format!("{name} Failed"), || {
        phase(&api, &name, BundlePhase::Failed)
    })
    .await;
    let message = ready(&b).2;
    assert!(
        message.contains("ChecksumMismatch"),
        "the prep Job's own reason: {message:?}"
    );
    let status = serde_json::to_string(&b.status).unwrap();
    assert!(
        !status.contains("PlantedReason"),
        "the planted message reached the status: {status}"
    );

    pods.delete(&format!("{job}-decoy"), &DeleteParams::default())
        .await
        .unwrap();
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}
