//! What CRC scenarios set up: an enabled team namespace with a pull secret, a Ready CRCBundle
//! from the world's local mirror, templates, and waiting for Ready instances.

use guestcluster::api::bundle::BundlePhase;
use guestcluster::api::instance::InstancePhase;
use guestcluster::api::{CRCBundle, CRCBundleSpec, ClusterInstance};
use guestcluster::sim::bundles::{self, BundleSpec, Flaw};
use guestcluster::sim::file_server::Fault;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};

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
        "version": version, "bundleURL": bundle_url, "sha256URL": sha_url, "goldenVolumeSize": "1Gi"
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
