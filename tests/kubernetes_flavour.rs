//! The download and build flows on a plain-Kubernetes-flavoured simulated cluster: no
//! SecurityContextConstraints, so the operator's Jobs name the image's user 1001 and `fsGroup`
//! 1001 themselves (Pod Security `restricted`), and every file handed from one pod to another
//! (the installer's ISO to QEMU, CDI's root disk to the disk Job, the golden disk to CDI) still
//! opens. The other scenarios run on the OpenShift flavour.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::api::bundle::{BuildStage, BundlePhase};
use guestcluster::api::{CRCBundle, ClusterInstance};
use kube::api::{Api, ListParams};
use support::build::{create_build, good_inputs};
use support::crc::{
    agent_pod_users, assert_configured, create_instance, create_pool, ready_bundle, ready_instance,
    team_namespace, template,
};
use support::world::kubernetes_world;

#[tokio::test]
async fn downloaded_and_built_bundles_serve_pools_on_plain_kubernetes() {
    let client = support::client().await;
    let world = kubernetes_world();
    assert!(
        !guestcluster::operator::platform::serves_scc(&client)
            .await
            .expect("discovery"),
        "a plain Kubernetes cluster serves no SecurityContextConstraints"
    );

    let name = support::unique("plain");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "30m").await;
    let downloaded = format!("{name}-download");
    ready_bundle(world, &client, &downloaded, "4.22.7").await;
    let bundles: Api<CRCBundle> = Api::all(client.clone());
    let built = support::wait_long("the built bundle Ready", || async {
        let b = bundles.get(&name).await.ok()?;
        let status = b.status.as_ref()?;
        let stage = status.build.as_ref().and_then(|b| b.stage);
        assert_ne!(
            stage,
            Some(BuildStage::Failed),
            "the build failed: {status:?}"
        );
        (status.phase == Some(BundlePhase::Ready)).then_some(b)
    })
    .await;

    let ns = team_namespace(&client).await;
    let ocp = built.status.and_then(|s| s.ocp_version).unwrap_or_default();
    let built_template =
        template(serde_json::json!({"crcBundleRef": {"name": name}, "ocpVersion": ocp}));
    create_pool(&client, &ns, "built", 1, built_template).await;
    let downloaded_template = template(serde_json::json!({"crcBundleRef": {"name": downloaded}}));
    create_instance(&client, &ns, "downloaded", downloaded_template).await;
    let instances: Api<ClusterInstance> = Api::namespaced(client.clone(), &ns);
    let from_pool = support::wait_long("a Ready instance of the built bundle's pool", || async {
        let params = ListParams::default().labels("opdev.io/pool=built");
        let ready = support::ready_instances(&instances, &params).await?;
        (ready.len() == 1).then_some(ready)
    })
    .await;
    assert_configured(&client, &ns, &from_pool[0]).await;
    let other = ready_instance(&instances, "downloaded").await;
    assert_configured(&client, &ns, &other).await;

    let users = agent_pod_users(&client, &ns).await;
    assert!(!users.is_empty(), "the agents' pods are listed");
    for user in users {
        assert_eq!(
            user,
            (Some(1001), Some(1001), None),
            "the image's user, unassigned"
        );
    }
    assert_eq!(
        support::crc::volume_modes(&client, &ns).await,
        std::collections::BTreeSet::from(["Filesystem".to_owned()]),
        "the hostpath class offers Filesystem only"
    );
}
