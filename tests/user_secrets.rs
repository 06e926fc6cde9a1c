//! The shared copies of user Secrets (`actors::runtime::user_secrets`) against a real API server: a
//! Secret is read once and then served from its copy until a watch event says it changed;
//! absence is kept the same way.
// Tests act as users: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::actors::runtime::user_secrets::UserSecrets;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, DeleteParams, PostParams};

fn secret(name: &str, value: &str) -> Secret {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "stringData": {"v": value},
    }))
    .unwrap()
}

fn value(s: &Secret) -> Vec<u8> {
    s.data.as_ref().unwrap()["v"].0.clone()
}

#[tokio::test]
async fn a_copy_serves_until_its_secret_changes() {
    let client = support::client().await;
    let ns = support::namespace(&client, "user-secrets").await;
    let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let copies = UserSecrets::default();

    // Absent, and kept absent until an event.
    assert!(copies.get(&api, &ns, "pull").await.unwrap().is_none());
    api.create(&PostParams::default(), &secret("pull", "one"))
        .await
        .unwrap();
    assert!(
        copies.get(&api, &ns, "pull").await.unwrap().is_none(),
        "no event yet: the kept absence answers"
    );
    copies.changed(&ns, "pull");
    let read = copies.get(&api, &ns, "pull").await.unwrap().unwrap();
    assert_eq!(value(&read), b"one");

    // Deleted behind its back: the copy still answers (no request), until the event.
    api.delete("pull", &DeleteParams::default()).await.unwrap();
    let kept = copies.get(&api, &ns, "pull").await.unwrap().unwrap();
    assert_eq!(value(&kept), b"one");
    copies.changed(&ns, "pull");
    assert!(copies.get(&api, &ns, "pull").await.unwrap().is_none());

    // Another Secret's event forgets nothing else.
    copies.changed(&ns, "other");
    assert_eq!(copies.copies(), 1);
}
