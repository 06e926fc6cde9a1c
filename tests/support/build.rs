//! A build-sourced CRCBundle's inputs and the reads its scenarios share.
#![allow(dead_code)]

use std::collections::BTreeMap;

use guestcluster::api::conditions;
use guestcluster::api::{CRCBundle, CRCBundleSpec};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Secret};
use kube::api::{Api, PostParams};

use super::world::{OPERATOR_NS, world};

pub const PULL_SECRET: &str = r#"{"auths":{"quay.io":{"auth":"c2NlbmFyaW86c2VjcmV0"}}}"#;
/// The credential inside [`PULL_SECRET`]: found nowhere it must not be.
pub const PULL_SECRET_AUTH: &str = "c2NlbmFyaW86c2VjcmV0";
/// The installation manifest of the scenarios: a MachineConfig whose file the install puts on
/// the node.
pub const MACHINE_CONFIG: &str = "apiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-scenario\n  labels:\n    machineconfiguration.openshift.io/role: master\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n      - path: /etc/scenario-installed\n        mode: 420\n        contents:\n          source: data:,installed\n";
/// Where [`MACHINE_CONFIG`] writes, and what.
pub const INSTALLED_FILE: (&str, &str) = ("/etc/scenario-installed", "installed");

/// The consent label every build input of the scenarios carries: any bundle may use it.
pub fn shared() -> Option<BTreeMap<String, String>> {
    shared_with(guestcluster::api::labels::BUILD_INPUT_ALL)
}

/// The consent label naming `bundle` (or `all`).
pub fn shared_with(bundle: &str) -> Option<BTreeMap<String, String>> {
    Some(BTreeMap::from([(
        guestcluster::api::labels::BUILD_INPUT.to_owned(),
        bundle.to_owned(),
    )]))
}

/// A pull secret any bundle may use.
pub async fn pull_secret(client: &kube::Client, name: &str, data: &str) {
    pull_secret_labelled(client, name, data, shared()).await;
}

/// A pull secret with `labels`.
pub async fn pull_secret_labelled(
    client: &kube::Client,
    name: &str,
    data: &str,
    labels: Option<BTreeMap<String, String>>,
) {
    // The world makes the operator namespace: a test may get here before any other starts it.
    world();
    let secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels,
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            ".dockerconfigjson".to_owned(),
            ByteString(data.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), OPERATOR_NS)
        .create(&PostParams::default(), &secret)
        .await
        .expect("create pull secret");
}

pub async fn manifests(client: &kube::Client, name: &str, key: &str, text: &str) {
    world();
    let cm = ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_owned()),
            labels: shared(),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(key.to_owned(), text.to_owned())])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), OPERATOR_NS)
        .create(&PostParams::default(), &cm)
        .await
        .expect("create manifests ConfigMap");
}

/// The post-install manifests of the scenarios: a namespace with a marker ConfigMap, and a
/// MachineConfig whose file lands on the node through a rollout.
pub const POST_INSTALL: &str = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: scenario\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: scenario-marker\n  namespace: scenario\ndata:\n  built: \"yes\"\n---\napiVersion: machineconfiguration.openshift.io/v1\nkind: MachineConfig\nmetadata:\n  name: 99-scenario-post\n  labels:\n    machineconfiguration.openshift.io/role: master\nspec:\n  config:\n    ignition:\n      version: 3.2.0\n    storage:\n      files:\n      - path: /etc/scenario-post-install\n        mode: 420\n        contents:\n          source: data:,customized\n";
/// Where [`POST_INSTALL`]'s MachineConfig writes, and what.
pub const POST_INSTALL_FILE: (&str, &str) = ("/etc/scenario-post-install", "customized");

/// A valid pull secret `<name>-pull`, the installation manifest ConfigMap `<name>-mcs` and the
/// post-install manifest ConfigMap `<name>-post`.
pub async fn good_inputs(client: &kube::Client, name: &str) {
    pull_secret(client, &format!("{name}-pull"), PULL_SECRET).await;
    manifests(client, &format!("{name}-mcs"), "mc.yaml", MACHINE_CONFIG).await;
    manifests(client, &format!("{name}-post"), "extra.yaml", POST_INSTALL).await;
}

/// Creates CRCBundle `name` building from Secret `<name>-pull` and ConfigMap `<name>-mcs`.
pub async fn create_build(client: &kube::Client, name: &str, deadline: &str) {
    let (secret, manifests) = (format!("{name}-pull"), format!("{name}-mcs"));
    // Small disks: the disk Job hashes every byte of the image, holes included.
    let spec: CRCBundleSpec = serde_json::from_value(serde_json::json!({
        "goldenVolumeSize": "8Gi",
        "build": {
            "releaseImage": "quay.io/example/ocp-release:4.22.3-x86_64",
            "pullSecretRef": {"name": secret},
            "installationManifestRefs": [{"name": manifests}],
            "postInstallManifestRefs": [{"name": format!("{name}-post")}],
            "vm": {"diskSize": "8Gi"},
            "deadline": deadline,
        }
    }))
    .unwrap();
    Api::<CRCBundle>::all(client.clone())
        .create(&PostParams::default(), &CRCBundle::new(name, spec))
        .await
        .expect("create CRCBundle");
}

pub async fn condition(
    api: &Api<CRCBundle>,
    name: &str,
    type_: &str,
    status: &str,
    reason: &str,
) -> Option<CRCBundle> {
    let b = api.get(name).await.ok()?;
    let c = conditions::find(&b.status.as_ref()?.conditions, type_)?;
    (c.status == status && c.reason == reason).then_some(b)
}

pub fn message(b: &CRCBundle, type_: &str) -> String {
    conditions::find(&b.status.as_ref().unwrap().conditions, type_)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The host directory of the PVC `name` (the simulation's volume store).
pub async fn volume_dir(client: &kube::Client, name: &str) -> std::path::PathBuf {
    let pvc = Api::<PersistentVolumeClaim>::namespaced(client.clone(), OPERATOR_NS)
        .get(name)
        .await
        .expect("PVC");
    world()
        .root
        .join("sim/volumes")
        .join(pvc.metadata.uid.expect("uid"))
}

/// The objects of an attempt still there, by the name part they share (`<bundle>-b<n>-`).
pub async fn attempt_objects(client: &kube::Client, part: &str) -> Vec<String> {
    async fn left<K>(client: &kube::Client, part: &str) -> Vec<String>
    where
        K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        kube::Api::<K>::namespaced(client.clone(), OPERATOR_NS)
            .list_metadata(&Default::default())
            .await
            .unwrap()
            .items
            .into_iter()
            .filter_map(|o| o.metadata.name)
            .filter(|n| n.contains(part))
            .collect()
    }
    let mut remaining = Vec::new();
    remaining.extend(left::<k8s_openapi::api::batch::v1::Job>(client, part).await);
    remaining.extend(left::<guestcluster::kubevirt::VirtualMachine>(client, part).await);
    remaining.extend(left::<guestcluster::cdi::DataVolume>(client, part).await);
    remaining.extend(left::<PersistentVolumeClaim>(client, part).await);
    remaining.extend(left::<Secret>(client, part).await);
    remaining.extend(left::<k8s_openapi::api::core::v1::ServiceAccount>(client, part).await);
    remaining.extend(left::<k8s_openapi::api::rbac::v1::Role>(client, part).await);
    remaining.extend(left::<k8s_openapi::api::rbac::v1::RoleBinding>(client, part).await);
    remaining.extend(left::<k8s_openapi::api::networking::v1::NetworkPolicy>(client, part).await);
    remaining
}
