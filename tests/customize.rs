//! The Customize stage's guest API side against a real kube-apiserver (standing in for a guest's:
//! the same server, the same validation): the user's post-install manifests are applied
//! server-side in dependency order, a manifest the server refuses fails at once with the object,
//! its source and the server's message, and one applied twice changes nothing.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use guestcluster::contract::installer::PostInstallManifest;
use guestcluster::guest::cluster::Patience;
use guestcluster::guest::customize::{self, Error};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;

fn manifest(key: &str, text: String) -> PostInstallManifest {
    PostInstallManifest {
        source: "team-manifests".into(),
        key: key.into(),
        text,
    }
}

const CALLS: Patience = Patience::new(Duration::from_millis(200), Duration::from_secs(10));

#[tokio::test]
async fn manifests_apply_in_order_and_a_refused_one_names_the_object_and_the_servers_message() {
    let client = support::client().await;
    let ns = support::unique("customize");
    // The ConfigMap comes first in the stream but needs the Namespace after it.
    let good = manifest(
        "settings.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: settings\n  namespace: {ns}\ndata:\n  owner: platform\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: {ns}\n"
        ),
    );
    let applied = customize::apply_user_manifests(&client, std::slice::from_ref(&good), CALLS)
        .await
        .expect("applied");
    assert_eq!(
        applied,
        vec![
            format!("Namespace {ns}"),
            format!("ConfigMap {ns}/settings")
        ]
    );
    let cm = Api::<ConfigMap>::namespaced(client.clone(), &ns)
        .get("settings")
        .await
        .unwrap();
    assert_eq!(cm.data.unwrap()["owner"], "platform");
    // Applied again: the same objects, nothing refused.
    customize::apply_user_manifests(&client, &[good], CALLS)
        .await
        .expect("idempotent");

    let refused = manifest(
        "bad.yaml",
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: Not_A_Name\n  namespace: {ns}\n"
        ),
    );
    let err = customize::apply_user_manifests(&client, &[refused], CALLS)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ManifestRejected");
    let text = err.to_string();
    assert!(
        text.contains(&format!("ConfigMap {ns}/Not_A_Name"))
            && text.contains("team-manifests/bad.yaml")
            && text.contains("Invalid value"),
        "{text}"
    );
    assert!(matches!(err, Error::Rejected { .. }));

    let unknown = manifest(
        "unknown.yaml",
        "apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: w\n".into(),
    );
    let err = customize::apply_user_manifests(&client, &[unknown], CALLS)
        .await
        .unwrap_err();
    assert_eq!(err.reason(), "ManifestRejected");
    assert!(err.to_string().contains("Widget"), "{err}");
}
