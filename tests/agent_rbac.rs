//! What an instance's crc-agent may do, asked of a real API server's RBAC (SubjectAccessReview)
//! with the Role and RoleBinding the operator makes for two instances in one namespace: each
//! agent watches its own VMI and writes its own handoff, and reads nothing else — not the
//! other instance's handoff, identity or key copy, not its own identity or key copy (its pod
//! gets those as volumes), and cannot list Secrets.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use guestcluster::api::{ClusterInstance, ClusterInstanceSpec};
use guestcluster::resources::instance as res;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, PostParams};
use serde_json::json;

/// Whether `user` may `verb` `resource` (named `name`, or all) in `ns`.
async fn allowed(
    client: &kube::Client,
    user: &str,
    ns: &str,
    verb: &str,
    (group, resource): (&str, &str),
    name: Option<&str>,
) -> bool {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(user.to_owned()),
            groups: Some(vec![
                "system:serviceaccounts".to_owned(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".to_owned(),
            ]),
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.to_owned()),
                verb: Some(verb.to_owned()),
                group: Some(group.to_owned()),
                resource: Some(resource.to_owned()),
                name: name.map(str::to_owned),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .expect("a SubjectAccessReview");
    answer.status.expect("an answer").allowed
}

#[tokio::test]
async fn an_agent_reaches_its_own_vmi_and_handoff_and_no_other_secret() {
    let client = support::client().await;
    let ns = support::unique("agents");
    let namespace: Namespace = serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .unwrap();
    let instances = Api::<ClusterInstance>::namespaced(client.clone(), &ns);
    let spec: ClusterInstanceSpec = serde_json::from_value(json!({
        "type": "crc",
        "template": {"crcVersion": "4.16.0", "ocpVersion": "4.16.0", "memory": "16Gi", "cores": 4},
    }))
    .unwrap();
    let mut made = Vec::new();
    for name in ["alpha", "beta"] {
        // Read back: the builders need the instance's UID for their owner references.
        let instance = instances
            .create(
                &PostParams::default(),
                &ClusterInstance::new(name, spec.clone()),
            )
            .await
            .unwrap();
        let vmi_uid = format!("{name}-vmi-uid");
        Api::<Role>::namespaced(client.clone(), &ns)
            .create(
                &PostParams::default(),
                &res::agent_role(&instance, &vmi_uid),
            )
            .await
            .unwrap();
        Api::<RoleBinding>::namespaced(client.clone(), &ns)
            .create(&PostParams::default(), &res::agent_role_binding(&instance))
            .await
            .unwrap();
        made.push((name, vmi_uid));
    }

    const SECRETS: (&str, &str) = ("", "secrets");
    const VMIS: (&str, &str) = ("kubevirt.io", "virtualmachineinstances");
    for ((me, my_vmi), (other, other_vmi)) in [
        (made[0].clone(), made[1].clone()),
        (made[1].clone(), made[0].clone()),
    ] {
        let user = format!("system:serviceaccount:{ns}:{}", res::agent_account_name(me));
        let may = |verb: &'static str, what: (&'static str, &'static str), name: Option<String>| {
            let (client, user, ns) = (client.clone(), user.clone(), ns.clone());
            async move { allowed(&client, &user, &ns, verb, what, name.as_deref()).await }
        };
        let my_handoff = res::handoff_secret_name(me, &my_vmi);
        for verb in ["get", "list", "watch"] {
            assert!(
                may(verb, VMIS, Some(me.to_owned())).await,
                "{me}: {verb} its VMI"
            );
            assert!(
                !may(verb, VMIS, Some(other.to_owned())).await,
                "{me}: {verb} {other}'s VMI"
            );
        }
        assert!(
            may("create", SECRETS, None).await,
            "{me}: create its handoff"
        );
        for verb in ["get", "update"] {
            assert!(
                may(verb, SECRETS, Some(my_handoff.clone())).await,
                "{me}: {verb} its handoff"
            );
        }
        assert!(!may("list", SECRETS, None).await, "{me}: list Secrets");
        assert!(
            !may("delete", SECRETS, Some(my_handoff.clone())).await,
            "{me}: delete"
        );
        for secret in [
            res::handoff_secret_name(other, &other_vmi),
            res::identity_secret_name(other),
            res::boot_key_secret_name(other),
            res::guest_key_secret_name(other),
            res::identity_secret_name(me),
            res::guest_key_secret_name(me),
            res::boot_key_secret_name(me),
            res::kubeconfig_secret_name(me),
        ] {
            for verb in ["get", "update"] {
                assert!(
                    !may(verb, SECRETS, Some(secret.clone())).await,
                    "{me}: {verb} Secret {secret}"
                );
            }
        }
    }
}
