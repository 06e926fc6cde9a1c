//! Crash safety of the bundle's actor tree: the operator process is killed (SIGKILL) while a
//! download bundle's prep Job runs, and a new process takes over. The new bundle actor starts the
//! prep Job's child from `status.prepJob`, which follows the same Job (same UID): no second Job
//! is created and the one download finishes into a Ready bundle. The same holds for a build
//! killed mid-Prepare: the installer Job and every object of the attempt are followed, not made
//! again.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::actors::bundle::download::prep_job::PrepJob;
use guestcluster::actors::runtime::stage::Stage;
use guestcluster::api::bundle::BundlePhase;
use guestcluster::api::common::ObjectIdentity;
use guestcluster::api::{CRCBundle, CRCBundleSpec};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use sim::bundles::{self, BundleSpec, Flaw};
use sim::file_server::Fault;
use std::time::Duration;
use support::world::{OPERATOR_NS, bare_world, one_operator_at_a_time, operator_process};
use support::{Operator, wait_for, wait_long};

async fn recorded_job(api: &Api<CRCBundle>, name: &str) -> Option<ObjectIdentity> {
    let b = api.get(name).await.ok()?;
    b.status?.prep_job.filter(|j| !j.uid.is_empty())
}

/// UIDs of the Jobs and of their pods that belong to bundle `name`.
async fn jobs_and_pods(client: &kube::Client, name: &str) -> (Vec<String>, Vec<String>) {
    let jobs = Api::<Job>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels(&format!("opdev.io/crc-bundle={name}")))
        .await
        .expect("list Jobs");
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NS)
        .list(&ListParams::default().labels(&format!("job-name={name}-prep")))
        .await
        .expect("list pods");
    (
        jobs.items.iter().filter_map(|j| j.uid()).collect(),
        pods.items.iter().filter_map(|p| p.uid()).collect(),
    )
}

/// The live count of `kind` on an operator's `/metrics`.
async fn live(operator: &Operator, kind: &str) -> Option<i64> {
    let (code, text) = operator.get_metrics().await;
    if code != 200 {
        return None;
    }
    let prefix = format!("guestcluster_actors{{kind=\"{kind}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn a_restarted_operator_resumes_the_same_prep_job() {
    let world = bare_world();
    let client = support::client().await;
    let _turn = one_operator_at_a_time().await;
    let mut first = operator_process("first-operator").await;

    let name = support::unique("crc-restart");
    let dir = world.root.join("served").join(&name);
    let built = bundles::build(&dir, &BundleSpec::new("4.19.0").with_flaw(Flaw::None))
        .expect("build test bundle");
    let archive = format!("{name}/{}", built.file_name);
    let bundle_url = world
        .files
        .publish(&archive, built.archive.clone(), Fault::None);
    let hold = world.files.hold(&archive);
    let sha_url = world.files.publish(
        &format!("{name}/sha256sum.txt"),
        built.sha256sum_txt.clone(),
        Fault::None,
    );
    let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
        "version": "4.19.0", "bundleURL": bundle_url, "sha256URL": sha_url, "allowHTTP": true, "goldenVolumeSize": "1Gi"
    }))
    .unwrap();
    let api = Api::<CRCBundle>::all(client.clone());
    api.create(&PostParams::default(), &CRCBundle::new(&name, spec))
        .await
        .expect("create CRCBundle");

    let recorded = wait_long("prep Job recorded with its UID", || {
        recorded_job(&api, &name)
    })
    .await;
    wait_for("the prep Job's pod downloading", || async {
        (world.files.requests(&archive) >= 1).then_some(())
    })
    .await;
    wait_for("the first operator runs the prep Job's child", || async {
        (live(&first, PrepJob::KIND).await? >= 1).then_some(())
    })
    .await;
    let (jobs, pods) = jobs_and_pods(&client, &name).await;
    assert_eq!(jobs, std::slice::from_ref(&recorded.uid));
    assert_eq!(pods.len(), 1, "one pod: {pods:?}");

    first.kill();
    let second = operator_process("second-operator").await;
    wait_long("the second operator runs the prep Job's child", || async {
        (live(&second, PrepJob::KIND).await? >= 1).then_some(())
    })
    .await;
    // A child is started only at the end of a pass of its bundle's actor, from the identity in
    // status: the second operator has decided on the bundle. The recorded identity and the
    // cluster still hold exactly the one Job and its pod.
    assert_eq!(recorded_job(&api, &name).await, Some(recorded.clone()));
    assert_eq!(jobs_and_pods(&client, &name).await, (jobs, pods.clone()));

    hold.release();
    let b = wait_long("bundle Ready", || async {
        let b = api.get(&name).await.ok()?;
        (b.status.as_ref()?.phase == Some(BundlePhase::Ready)).then_some(b)
    })
    .await;
    assert_eq!(
        b.status.unwrap().sha256.as_deref(),
        Some(built.sha256.as_str()),
        "the one download finished the bundle"
    );
    assert!(
        !second.log().contains("CreatePrepJob"),
        "the second operator created no prep Job:\n{}",
        second.log()
    );
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}

/// The objects of bundle `name`'s build attempts, by kind and UID.
async fn build_objects(client: &kube::Client, name: &str) -> Vec<String> {
    let selector = ListParams::default().labels(&format!("opdev.io/crc-bundle={name}"));
    let mut out = Vec::new();
    macro_rules! uids {
        ($kind:ty) => {
            for o in Api::<$kind>::namespaced(client.clone(), OPERATOR_NS)
                .list(&selector)
                .await
                .expect("list")
                .items
            {
                out.push(format!(
                    "{} {} {}",
                    stringify!($kind),
                    o.name_any(),
                    o.uid().unwrap_or_default()
                ));
            }
        };
    }
    uids!(Job);
    uids!(k8s_openapi::api::core::v1::Secret);
    uids!(k8s_openapi::api::core::v1::PersistentVolumeClaim);
    uids!(k8s_openapi::api::core::v1::ServiceAccount);
    uids!(guestcluster::kubevirt::VirtualMachine);
    uids!(guestcluster::cdi::DataVolume);
    out.sort();
    out
}

/// For a hang: the bundle's status, the operator's last log lines and the tail of every pod log
/// of the bundle's build.
async fn where_the_build_stands(
    api: &Api<CRCBundle>,
    name: &str,
    world: &support::world::World,
    operator: &Operator,
) -> String {
    let tail = |text: &str, lines: usize| {
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    };
    let status = api
        .get(name)
        .await
        .map(|b| serde_json::to_string_pretty(&b.status).unwrap_or_default())
        .unwrap_or_else(|e| format!("(bundle unreadable: {e})"));
    let mut out = format!(
        "status: {status}\n--- operator log (end) ---\n{}\n",
        tail(&operator.log(), 60)
    );
    let pods = world.root.join("sim").join("pods");
    let mut dirs: Vec<_> = std::fs::read_dir(&pods)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|d| d.file_name().to_string_lossy().contains(name))
        .collect();
    dirs.sort_by_key(|d| d.file_name());
    for dir in dirs {
        for log in std::fs::read_dir(dir.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            if log.path().extension().is_some_and(|e| e == "log") {
                let text = std::fs::read_to_string(log.path()).unwrap_or_default();
                out.push_str(&format!(
                    "--- {} ---\n{}\n",
                    log.path().display(),
                    tail(&text, 30)
                ));
            }
        }
    }
    out
}

#[tokio::test]
async fn a_restarted_operator_resumes_the_same_installer_job() {
    use guestcluster::actors::bundle::build_source::stages::prepare::InstallerJob;
    use guestcluster::api::conditions::{self, reasons, types};

    let world = bare_world();
    let client = support::client().await;
    // The installer Job downloads the live ISO from the file server, which holds it: the Job is
    // mid-Prepare when the operator is killed.
    let sim_root = world.root.join("sim");
    sim::tools::install(&sim_root).expect("fake tools");
    let iso_path = format!("{}/rhcos-live.iso", support::unique("iso"));
    let iso_url = world.files.publish(
        &iso_path,
        sim::tools::tools_dir(&sim_root).join("rhcos-live.iso"),
        Fault::None,
    );
    let hold = world.files.hold(&iso_path);
    sim::tools::write_config(
        &sim_root,
        &sim::tools::ToolsConfig {
            rhcos_iso_url: Some(iso_url),
            ..Default::default()
        },
    )
    .expect("tools config");

    let _turn = one_operator_at_a_time().await;
    let mut first = operator_process("first-build-operator").await;
    let name = support::unique("build-restart");
    let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-pull"),
                     "labels": {"guestcluster.opdev.io/build-input": name}},
        "stringData": {".dockerconfigjson": "{\"auths\":{\"quay.io\":{\"auth\":\"eDp5\"}}}"}
    }))
    .unwrap();
    Api::namespaced(client.clone(), OPERATOR_NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("pull secret");
    // Small disks: the disk Job hashes every byte of the image, holes included.
    let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
        "goldenVolumeSize": "8Gi",
        "build": {"releaseImage": "quay.io/example/ocp-release:4.22.1-x86_64",
            "pullSecretRef": {"name": format!("{name}-pull")},
            "vm": {"diskSize": "8Gi"}}
    }))
    .unwrap();
    let api = Api::<CRCBundle>::all(client.clone());
    api.create(&PostParams::default(), &CRCBundle::new(&name, spec))
        .await
        .expect("create CRCBundle");

    let recorded = wait_long("installer Job recorded with its UID", || async {
        let b = api.get(&name).await.ok()?;
        b.status?
            .build?
            .resources
            .filter(|r| r.installer_job.as_ref().is_some_and(|j| !j.uid.is_empty()))
    })
    .await;
    wait_for("the installer downloading the live ISO", || async {
        (world.files.requests(&iso_path) >= 1).then_some(())
    })
    .await;
    wait_for(
        "the first operator runs the installer Job's child",
        || async { (live(&first, InstallerJob::KIND).await? >= 1).then_some(()) },
    )
    .await;
    let objects = build_objects(&client, &name).await;
    assert_eq!(objects.len(), 6, "{objects:#?}");

    first.kill();
    let second = operator_process("second-build-operator").await;
    wait_long(
        "the second operator runs the installer Job's child",
        || async { (live(&second, InstallerJob::KIND).await? >= 1).then_some(()) },
    )
    .await;
    let b = api.get(&name).await.unwrap();
    assert_eq!(b.status.unwrap().build.unwrap().resources, Some(recorded));
    assert_eq!(
        build_objects(&client, &name).await,
        objects,
        "no object made twice"
    );

    hold.release();
    let b = wait_long("Prepared=True", || async {
        let b = api.get(&name).await.ok()?;
        let c = conditions::find(&b.status.as_ref()?.conditions, types::PREPARED)?;
        (c.status == "True" && c.reason == reasons::STAGE_SUCCEEDED).then_some(b)
    })
    .await;
    assert_eq!(b.status.unwrap().build.unwrap().attempt, Some(1));
    // The build goes on into Install at once: the Prepare objects are the same ones.
    let now = build_objects(&client, &name).await;
    assert!(
        objects.iter().all(|o| now.contains(o)),
        "the same objects finished the stage: {objects:#?} vs {now:#?}"
    );
    for prepare in [
        "ServiceAccount",
        "InstallerSecret",
        "WorkPvc",
        "IsoPvc",
        "InstallerJob",
    ] {
        assert!(
            !second.log().contains(&format!("Create({prepare})")),
            "the second operator created no Prepare object:\n{}",
            second.log()
        );
    }

    // Killed again in the install boot: the third operator follows the same VM, root disk and
    // helper Job, and the build finishes with one of each.
    let install_helper = wait_long("the install boot's helper Job recorded", || async {
        let b = api.get(&name).await.ok()?;
        let build = b.status?.build?;
        (build.install_step == Some(guestcluster::api::bundle::InstallStep::Install))
            .then_some(())?;
        build
            .resources?
            .helper_job
            .filter(|j| !j.uid.is_empty() && j.name.contains("-install-"))
    })
    .await;
    let mut second = second;
    second.kill();
    let before = build_objects(&client, &name).await;
    let third = operator_process("third-build-operator").await;
    let b = wait_long("Installed=True", || async {
        let b = api.get(&name).await.ok()?;
        let c = conditions::find(&b.status.as_ref()?.conditions, types::INSTALLED)?;
        (c.status == "True" && c.reason == reasons::STAGE_SUCCEEDED).then_some(b)
    })
    .await;
    let build = b.status.unwrap().build.unwrap();
    assert_eq!(build.attempt, Some(1));
    let after = build_objects(&client, &name).await;
    for kind in ["VirtualMachine", "DataVolume"] {
        let of = |list: &[String]| -> Vec<String> {
            list.iter()
                .filter(|o| {
                    o.split_whitespace()
                        .next()
                        .is_some_and(|k| k.rsplit("::").next() == Some(kind))
                })
                .cloned()
                .collect()
        };
        assert_eq!(of(&before).len(), 1, "{before:#?}");
        assert_eq!(of(&after), of(&before), "one {kind}, the same one");
    }
    assert!(
        before.iter().any(|o| o.contains(&install_helper.uid)),
        "the install helper Job existed when the operator was killed: {before:#?}"
    );
    for install in [
        "BuildVm",
        "RootDataVolume",
        "InstallIsoPvc",
        "CredentialsSecret",
    ] {
        assert!(
            !third.log().contains(&format!("Create({install})")),
            "the third operator made no second {install}:\n{}",
            third.log()
        );
    }

    // Killed in Customize, Seal, Publish and Validate: each next operator follows the recorded
    // Job of the step (the same UID finishes it), and the build goes on with one of everything.
    type Slot = fn(&guestcluster::api::bundle::BuildResources) -> Option<&ObjectIdentity>;
    let helper: Slot = |r| r.helper_job.as_ref();
    let disk: Slot = |r| r.disk_job.as_ref();
    let mut previous = third;
    let mut logs = Vec::new();
    for (step, slot, done, next_name) in [
        (
            "-customize-",
            helper,
            types::CUSTOMIZED,
            "fourth-build-operator",
        ),
        ("-seal-", helper, types::SEALED, "fifth-build-operator"),
        ("-disk", disk, types::PUBLISHED, "sixth-build-operator"),
        (
            "-validate-",
            helper,
            types::VALIDATED,
            "seventh-build-operator",
        ),
    ] {
        let recorded = wait_long(&format!("the {step} Job recorded"), || async {
            let b = api.get(&name).await.ok()?;
            let resources = b.status?.build?.resources?;
            slot(&resources)
                .filter(|j| !j.uid.is_empty() && j.name.contains(step))
                .cloned()
        })
        .await;
        // Every Job of the step that exists from here on (the step's Job is deleted as soon as
        // the next step names its own, so a later listing could miss a second one).
        let seen = std::sync::Arc::new(std::sync::Mutex::new(std::collections::BTreeSet::new()));
        let listed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watch = {
            use futures::StreamExt;
            use kube::runtime::watcher::{self, Event};
            let (seen, listed, step) = (seen.clone(), listed.clone(), step.to_owned());
            let jobs = Api::<Job>::namespaced(client.clone(), OPERATOR_NS);
            let config = watcher::Config::default().labels(&format!("opdev.io/crc-bundle={name}"));
            tokio::spawn(async move {
                let mut stream = std::pin::pin!(watcher::watcher(jobs, config));
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(Event::Apply(job) | Event::InitApply(job))
                            if job.name_any().contains(&step) =>
                        {
                            seen.lock().unwrap().insert(job.uid().unwrap_or_default());
                        }
                        Ok(Event::InitDone) => {
                            listed.store(true, std::sync::atomic::Ordering::SeqCst)
                        }
                        _ => {}
                    }
                }
            })
        };
        // From the first listing on, no Job of the step can come and go unseen.
        wait_for(&format!("the {step} Jobs listed"), || async {
            listed
                .load(std::sync::atomic::Ordering::SeqCst)
                .then_some(())
        })
        .await;
        previous.kill();
        logs.push(previous.log());
        let next = operator_process(next_name).await;
        // The step is done by the Job that was recorded, never by a second one.
        let finished = tokio::time::timeout(
            Duration::from_secs(590),
            wait_long(&format!("{done}=True"), || async {
                let b = api.get(&name).await.ok()?;
                let c = conditions::find(&b.status.as_ref()?.conditions, done)?;
                (c.status == "True").then_some(())
            }),
        )
        .await;
        if finished.is_err() {
            panic!(
                "{done} not True after 590 s\n{}",
                where_the_build_stands(&api, &name, world, &next).await
            );
        }
        watch.abort();
        // The recorded Job may be gone already when listed (its step done); no other ever was.
        let uids = seen.lock().unwrap().clone();
        assert!(
            uids.iter().all(|uid| *uid == recorded.uid),
            "one {step} Job, the recorded {}: {uids:?}",
            recorded.uid
        );
        previous = next;
    }
    let b = wait_long("Ready=True", || async {
        let b = api.get(&name).await.ok()?;
        let c = conditions::find(&b.status.as_ref()?.conditions, types::READY)?;
        (c.status == "True" && c.reason == reasons::BUNDLE_READY).then_some(b)
    })
    .await;
    assert_eq!(b.status.unwrap().build.unwrap().attempt, Some(1));

    // Killed in Ready, while the attempt's temporary objects are released: the next operator
    // finishes the release and publishes nothing twice.
    previous.kill();
    logs.push(previous.log());
    let last = operator_process("eighth-build-operator").await;
    let golden = format!("PersistentVolumeClaim {name}-golden ");
    wait_long("every temporary object released", || async {
        let left = build_objects(&client, &name).await;
        left.iter()
            .all(|o| o.contains("::Secret ") || o.contains(&golden))
            .then_some(())
    })
    .await;
    let left = build_objects(&client, &name).await;
    assert!(
        left.iter().any(|o| o.contains(&golden)),
        "the golden PVC stays: {left:#?}"
    );
    logs.push(last.log());
    let all = logs.concat();
    for once in [
        "Create(DiskJob)",
        "Create(ValidationDataVolume)",
        "Create(ValidationVm)",
        "CreateGoldenPvc",
        "PublishMetadata",
        "PublishDataSource",
    ] {
        let made = all.matches(once).count();
        assert_eq!(
            made, 1,
            "{once} done {made} times across the operators:\n{all}"
        );
    }
    api.delete(&name, &DeleteParams::default()).await.unwrap();
}
