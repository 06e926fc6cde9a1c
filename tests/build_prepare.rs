//! The build source's first stages end to end: a CRCBundle with `spec.build` → Admit (inputs
//! digested into status before anything exists) → Prepare (the real `guestcluster installer`
//! run by the simulated kubelet against the fake `oc`, `openshift-install` and
//! `coreos-installer`) → the ISO volume holds the stock live ISO with the generator Ignition, the
//! work volume the staging directory; bad inputs fail Admit with their reason and a retry
//! annotation starts a new attempt; a missed deadline fails the attempt and deletes its
//! temporary objects.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::collections::BTreeMap;

use guestcluster::actors::bundle::build_source::admit::{data_sha256, hex_sha256};
use guestcluster::api::CRCBundle;
use guestcluster::api::bundle::{BuildStage, BundlePhase};
use guestcluster::api::conditions::{self, reasons, types};
use guestcluster::api::labels::{BUILD_INPUT, RETRY_ANNOTATION};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret, ServiceAccount};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use support::wait_for;
use support::world::{OPERATOR_NS, world};

use support::build::*;

#[tokio::test]
async fn a_build_is_admitted_and_prepared() {
    let client = support::client().await;
    let w = world();
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("build");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "6h").await;

    let b = wait_for("Prepared=True", || {
        condition(
            &api,
            &name,
            types::PREPARED,
            "True",
            reasons::STAGE_SUCCEEDED,
        )
    })
    .await;
    let status = b.status.clone().unwrap();
    let build = status.build.clone().unwrap();
    assert_eq!(build.attempt, Some(1));
    // The build goes on into Install at once (tests/build_install.rs follows it there).
    assert!(
        build.stage >= Some(BuildStage::Install),
        "{:?}",
        build.stage
    );
    assert_eq!(status.phase, Some(BundlePhase::Building));
    assert_eq!(status.vm_profile.as_deref(), Some("crc-kubevirt-v1"));
    assert_eq!(
        status.ocp_version.as_deref(),
        Some("4.22.3"),
        "from the release metadata"
    );

    // Inputs: digests only, of exactly what was given.
    let inputs = status.inputs.clone().unwrap();
    assert_eq!(
        inputs.pull_secret_sha256,
        Some(hex_sha256(PULL_SECRET.as_bytes()))
    );
    let mc = &inputs.installation_manifests[0];
    assert_eq!(
        (mc.name.as_str(), mc.kind.as_str()),
        (format!("{name}-mcs").as_str(), "ConfigMap")
    );
    assert_eq!(
        mc.sha256,
        data_sha256(&BTreeMap::from([(
            "mc.yaml".to_owned(),
            MACHINE_CONFIG.as_bytes().to_vec()
        )]))
    );
    let text = serde_json::to_string(&b).unwrap();
    assert!(
        !text.contains("c2NlbmFyaW86c2VjcmV0"),
        "no pull secret in the bundle"
    );

    // The release: resolved once, pinned by digest.
    let release = status.release.clone().unwrap();
    assert_eq!(release.image, "quay.io/example/ocp-release:4.22.3-x86_64");
    let digest = release.digest.expect("digest recorded");
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{digest}"
    );
    let calls = std::fs::read_to_string(w.root.join("sim/tools/calls.log")).unwrap();
    assert!(
        calls.contains("--command=openshift-install")
            && calls.contains(&format!("quay.io/example/ocp-release@{digest}")),
        "the installer is extracted from the pinned release:\n{calls}"
    );

    // Every temporary object: recorded with its UID, labelled with the attempt, ours.
    let resources = build.resources.unwrap();
    let recorded = [
        ("ServiceAccount", resources.service_account.clone()),
        ("Secret", resources.installer_auth_secret.clone()),
        ("PersistentVolumeClaim", resources.work_pvc.clone()),
        ("PersistentVolumeClaim", resources.iso_pvc.clone()),
        ("Job", resources.installer_job.clone()),
    ];
    for (kind, identity) in &recorded {
        let identity = identity
            .clone()
            .unwrap_or_else(|| panic!("{kind} recorded"));
        assert!(
            !identity.uid.is_empty(),
            "{kind} {} has its UID",
            identity.name
        );
        assert!(
            identity.name.starts_with(&format!("{name}-b1-")),
            "{identity:?}"
        );
    }
    let sa = Api::<ServiceAccount>::namespaced(client.clone(), OPERATOR_NS)
        .get(&resources.service_account.unwrap().name)
        .await
        .unwrap();
    assert_eq!(sa.automount_service_account_token, Some(false));
    assert_eq!(
        sa.metadata.labels.unwrap()["guestcluster.opdev.io/build-attempt"],
        "1"
    );
    let job = Api::<Job>::namespaced(client.clone(), OPERATOR_NS)
        .get(&resources.installer_job.clone().unwrap().name)
        .await
        .unwrap();
    assert_eq!(job.metadata.uid, Some(resources.installer_job.unwrap().uid));

    // The bundle's key: generated by the operator, and the only key the generator guest admits.
    let key = Api::<Secret>::namespaced(client.clone(), OPERATOR_NS)
        .get(&format!("{name}-ssh-key"))
        .await
        .expect("key Secret");
    let data = key.data.unwrap();
    assert!(data.contains_key("id_ecdsa"));
    let public = String::from_utf8(data["id_ecdsa.pub"].0.clone()).unwrap();
    assert!(public.starts_with("ecdsa-sha2-nistp256 "), "{public}");

    let iso = volume_dir(&client, &resources.iso_pvc.unwrap().name)
        .await
        .join("disk.img");
    let ignition = sim::tools::read_embedded_ignition(&iso)
        .expect("a simulated live ISO")
        .expect("with an embedded Ignition");
    let users = &ignition["passwd"]["users"];
    assert_eq!(users[0]["name"], "core");
    assert_eq!(
        users[0]["sshAuthorizedKeys"][0].as_str().unwrap().trim(),
        public.trim(),
        "the generator guest admits the bundle's key"
    );
    let units = serde_json::to_string(&ignition["systemd"]).unwrap();
    assert!(units.contains("chronyd"), "chronyd masked: {units}");

    // The staging directory: install-config, the profile's manifests and the user's, and no
    // address other than the profile's own.
    let staging = volume_dir(&client, &resources.work_pvc.unwrap().name)
        .await
        .join("staging");
    let config = std::fs::read_to_string(staging.join("install-config.yaml")).unwrap();
    assert!(config.contains("installationDisk: /dev/vda"), "{config}");
    assert!(config.contains(public.split_whitespace().nth(1).unwrap()));
    let user =
        std::fs::read_to_string(staging.join(format!("openshift/99-user-{name}-mcs-mc.yaml")))
            .unwrap();
    assert_eq!(user, MACHINE_CONFIG);
    assert!(
        std::fs::read_dir(staging.join("openshift"))
            .unwrap()
            .count()
            >= 3,
        "the profile's MachineConfigs are staged too"
    );
    assert!(
        !staging.join("manifests/cluster-config.yaml").exists(),
        "the Job does not run `create manifests` (certificates-and-time.md §1)"
    );
}

#[tokio::test]
async fn bad_inputs_fail_admit_and_a_retry_starts_a_new_attempt() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());

    // A missing pull secret.
    let name = support::unique("build-missing");
    manifests(&client, &format!("{name}-mcs"), "mc.yaml", MACHINE_CONFIG).await;
    manifests(&client, &format!("{name}-post"), "extra.yaml", POST_INSTALL).await;
    create_build(&client, &name, "6h").await;
    let b = wait_for("InputNotFound", || {
        condition(
            &api,
            &name,
            types::PREPARED,
            "False",
            reasons::INPUT_NOT_FOUND,
        )
    })
    .await;
    assert_eq!(b.status.as_ref().unwrap().phase, Some(BundlePhase::Failed));
    let ready = message(&b, types::READY);
    assert!(
        ready.contains(&format!("Secret {OPERATOR_NS}/{name}-pull"))
            && ready.contains(RETRY_ANNOTATION),
        "{ready}"
    );
    assert!(
        b.status
            .as_ref()
            .unwrap()
            .build
            .as_ref()
            .unwrap()
            .resources
            .is_none(),
        "nothing named before the inputs are admitted"
    );

    // Fixed, then retried: attempt 2 gets through Admit.
    pull_secret(&client, &format!("{name}-pull"), PULL_SECRET).await;
    api.patch(
        &name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {RETRY_ANNOTATION: "1"}}})),
    )
    .await
    .unwrap();
    let b = wait_for("attempt 2 prepared", || {
        condition(
            &api,
            &name,
            types::PREPARED,
            "True",
            reasons::STAGE_SUCCEEDED,
        )
    })
    .await;
    let build = b.status.unwrap().build.unwrap();
    assert_eq!(
        (build.attempt, build.retry.as_deref()),
        (Some(2), Some("1"))
    );
    assert!(
        build
            .resources
            .unwrap()
            .installer_job
            .unwrap()
            .name
            .contains("-b2-")
    );

    // A manifest that is not YAML, and a pull secret that is not one.
    let name = support::unique("build-badyaml");
    pull_secret(&client, &format!("{name}-pull"), PULL_SECRET).await;
    manifests(
        &client,
        &format!("{name}-mcs"),
        "broken.yaml",
        "kind: [unclosed",
    )
    .await;
    manifests(&client, &format!("{name}-post"), "extra.yaml", POST_INSTALL).await;
    create_build(&client, &name, "6h").await;
    let b = wait_for("InvalidManifest", || {
        condition(
            &api,
            &name,
            types::PREPARED,
            "False",
            reasons::INVALID_MANIFEST,
        )
    })
    .await;
    let prepared = message(&b, types::PREPARED);
    assert!(
        prepared.contains("\"broken.yaml\"")
            && prepared.contains(&format!("ConfigMap {OPERATOR_NS}/{name}-mcs")),
        "{prepared}"
    );

    let name = support::unique("build-badpull");
    pull_secret(&client, &format!("{name}-pull"), r#"{"auths":{}}"#).await;
    manifests(&client, &format!("{name}-mcs"), "mc.yaml", MACHINE_CONFIG).await;
    manifests(&client, &format!("{name}-post"), "extra.yaml", POST_INSTALL).await;
    create_build(&client, &name, "6h").await;
    wait_for("InvalidPullSecret", || {
        condition(
            &api,
            &name,
            types::PREPARED,
            "False",
            reasons::INVALID_PULL_SECRET,
        )
    })
    .await;
}

#[tokio::test]
async fn a_missed_deadline_fails_the_attempt_and_deletes_its_objects() {
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("build-deadline");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "3s").await;

    let b = wait_for("BuildDeadlineExceeded", || async {
        let b = api.get(&name).await.ok()?;
        let ready = conditions::find(&b.status.as_ref()?.conditions, types::READY)?;
        (ready.reason == reasons::BUILD_DEADLINE_EXCEEDED).then_some(b)
    })
    .await;
    let status = b.status.unwrap();
    assert_eq!(status.phase, Some(BundlePhase::Failed));
    let build = status.build.unwrap();
    assert_eq!(build.stage, Some(BuildStage::Failed));
    assert!(build.finished_at.is_some());
    let resources = build.resources.expect("the attempt named its objects");
    let job = resources
        .installer_job
        .expect("installer Job recorded")
        .name;
    let work = resources.work_pvc.expect("work PVC recorded").name;
    wait_for("temporary objects deleted", || async {
        let jobs = Api::<Job>::namespaced(client.clone(), OPERATOR_NS);
        let pvcs = Api::<PersistentVolumeClaim>::namespaced(client.clone(), OPERATOR_NS);
        let secrets = Api::<Secret>::namespaced(client.clone(), OPERATOR_NS);
        let job_gone = jobs
            .get_opt(&job)
            .await
            .ok()?
            .is_none_or(|j| j.metadata.deletion_timestamp.is_some());
        let pvc_gone = pvcs
            .get_opt(&work)
            .await
            .ok()?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        let secret_gone = secrets.get_opt(&job).await.ok()?.is_none();
        (job_gone && pvc_gone && secret_gone).then_some(())
    })
    .await;
    // The bundle's key is not temporary.
    assert!(
        Api::<Secret>::namespaced(client.clone(), OPERATOR_NS)
            .get_opt(&format!("{name}-ssh-key"))
            .await
            .unwrap()
            .is_some()
    );
}

/// Hardening item 1: an input is a build's only when its object consents (the label
/// `guestcluster.opdev.io/build-input` names the bundle or says `all`). A Secret shared with
/// another bundle, and a ConfigMap shared with none that holds a recognisable value in a broken
/// manifest, each stop the build at Admit with `InputNotShared` — and the value is nowhere: not in
/// the status, not in an Event, not in any object the attempt would have made.
#[tokio::test]
async fn an_input_not_shared_with_the_bundle_is_not_used_or_quoted() {
    world();
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), OPERATOR_NS);
    let secrets: Api<Secret> = Api::namespaced(client.clone(), OPERATOR_NS);

    // What Admit says of a build whose inputs are set up: InputNotShared, in Prepared.
    let not_shared = |name: String| {
        let (api, client) = (api.clone(), client.clone());
        async move {
            create_build(&client, &name, "6h").await;
            let b = wait_for("InputNotShared", || {
                condition(
                    &api,
                    &name,
                    types::PREPARED,
                    "False",
                    reasons::INPUT_NOT_SHARED,
                )
            })
            .await;
            let prepared = message(&b, types::PREPARED);
            (b, prepared)
        }
    };

    // The pull secret is shared with another bundle only.
    let name = support::unique("build-other");
    pull_secret_labelled(
        &client,
        &format!("{name}-pull"),
        PULL_SECRET,
        shared_with("someone-else"),
    )
    .await;
    manifests(&client, &format!("{name}-mcs"), "mc.yaml", MACHINE_CONFIG).await;
    manifests(&client, &format!("{name}-post"), "extra.yaml", POST_INSTALL).await;
    let (_, prepared) = not_shared(name.clone()).await;
    assert!(
        prepared.contains(&format!("Secret {OPERATOR_NS}/{name}-pull"))
            && prepared.contains("\"someone-else\"")
            && prepared.contains(&format!("{BUILD_INPUT}={name}")),
        "{prepared}"
    );

    // A manifest ConfigMap shared with no bundle, holding a value in a broken manifest (a
    // parser would quote it), next to a pull secret shared with this bundle by name.
    let name = support::unique("build-unshared");
    let planted = format!("planted-{}", support::unique("value"));
    pull_secret_labelled(
        &client,
        &format!("{name}-pull"),
        PULL_SECRET,
        shared_with(&name),
    )
    .await;
    let unshared: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("{name}-mcs")},
        "data": {"mc.yaml": format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {planted}\n")},
    }))
    .unwrap();
    config_maps
        .create(&PostParams::default(), &unshared)
        .await
        .unwrap();
    manifests(&client, &format!("{name}-post"), "extra.yaml", POST_INSTALL).await;
    let (b, prepared) = not_shared(name.clone()).await;
    assert!(
        prepared.contains(&format!("ConfigMap {OPERATOR_NS}/{name}-mcs"))
            && prepared.contains("installationManifestRefs")
            && prepared.contains(&format!("no label {BUILD_INPUT}")),
        "{prepared}"
    );
    let status = serde_json::to_string(&b.status).unwrap();
    assert!(!status.contains(&planted), "in the status: {status}");
    let events = Api::<k8s_openapi::api::core::v1::Event>::all(client.clone())
        .list(&Default::default())
        .await
        .unwrap();
    for event in events.items {
        assert!(
            !event
                .message
                .as_deref()
                .unwrap_or_default()
                .contains(&planted),
            "in an Event: {event:?}"
        );
    }
    // Nothing of an attempt was made from it.
    let made = secrets
        .list(&ListParams::default().labels(&format!("opdev.io/crc-bundle={name}")))
        .await
        .unwrap();
    assert!(made.items.is_empty(), "{:?}", made.items);
}

/// Hardening item 2: a release from a repository the operator does not build from stops at
/// Admit with `ReleaseNotAllowed`, before any object of the attempt exists.
#[tokio::test]
async fn a_release_from_a_repository_not_allowed_stops_at_admit() {
    world();
    let client = support::client().await;
    let api: Api<CRCBundle> = Api::all(client.clone());
    let name = support::unique("build-release");
    pull_secret(&client, &format!("{name}-pull"), PULL_SECRET).await;
    let spec: guestcluster::api::CRCBundleSpec = serde_json::from_value(serde_json::json!({
        "goldenVolumeSize": "8Gi",
        "build": {
            "releaseImage": "quay.io/elsewhere/ocp-release:4.22.3-x86_64",
            "pullSecretRef": {"name": format!("{name}-pull")},
            "vm": {"diskSize": "8Gi"},
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &CRCBundle::new(&name, spec))
        .await
        .unwrap();
    let b = wait_for("ReleaseNotAllowed", || {
        condition(
            &api,
            &name,
            types::PREPARED,
            "False",
            reasons::RELEASE_NOT_ALLOWED,
        )
    })
    .await;
    let prepared = message(&b, types::PREPARED);
    assert!(
        prepared.contains("quay.io/elsewhere/ocp-release")
            && prepared.contains(support::world::RELEASE_REPOSITORIES),
        "{prepared}"
    );
    assert!(
        b.status.unwrap().build.unwrap().resources.is_none(),
        "nothing made before Admit"
    );
}
