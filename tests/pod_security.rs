//! Every Job the operator makes runs under Pod Security `restricted`: a real kube-apiserver's
//! PodSecurity admission, enforcing `restricted` in a namespace, admits a pod of each Job's
//! template. The Jobs are the builders' own output, as golden-checked in `src/resources/golden/`
//! (the unit tests fail when a builder and its golden file differ).
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

const GOLDEN: [&str; 5] = [
    "bundle-download.yaml",
    "instance-crc.yaml",
    "instance-manual.yaml",
    "crc-kubevirt-v1/build/attempt-objects.yaml",
    "crc-kubevirt-v1/build/install-objects.yaml",
];

/// The Jobs in one golden file, by name.
fn jobs(file: &str) -> Vec<Job> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("src/resources/golden")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    let objects: Vec<Value> = serde_saphyr::from_str(&text).expect("golden YAML");
    objects
        .into_iter()
        .filter(|o| o["kind"] == "Job")
        .map(|o| serde_json::from_value(o).expect("a Job"))
        .collect()
}

#[tokio::test]
async fn every_job_is_admitted_where_pod_security_restricted_is_enforced() {
    let client = support::client().await;
    let ns = support::unique("restricted");
    let namespace: Namespace = serde_json::from_value(json!({
        "metadata": {"name": ns, "labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }}
    }))
    .unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &namespace)
        .await
        .expect("a restricted namespace");
    let pods = Api::<Pod>::namespaced(client.clone(), &ns);
    let accounts = Api::<ServiceAccount>::namespaced(client.clone(), &ns);
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };

    // A pod that breaks the profile is refused here: the check can fail.
    let privileged: Pod = serde_json::from_value(json!({
        "metadata": {"name": "privileged"},
        "spec": {"containers": [{"name": "c", "image": "busybox",
            "securityContext": {"privileged": true}}]}
    }))
    .unwrap();
    let refused = pods.create(&dry_run, &privileged).await;
    assert!(
        matches!(&refused, Err(kube::Error::Api(s)) if s.code == 403 && s.message.contains("restricted")),
        "{refused:?}"
    );

    let mut checked = Vec::new();
    for file in GOLDEN {
        for job in jobs(file) {
            let name = job.metadata.name.clone().unwrap_or_default();
            let template = job.spec.unwrap().template;
            let spec = template.spec.expect("a pod spec");
            // The ServiceAccount admission plugin wants the pod's account to exist.
            if let Some(account) = &spec.service_account_name {
                let sa: ServiceAccount =
                    serde_json::from_value(json!({"metadata": {"name": account}})).unwrap();
                match accounts.create(&PostParams::default(), &sa).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {}
                    Err(e) => panic!("ServiceAccount {account}: {e}"),
                }
            }
            let pod = Pod {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.clone()),
                    labels: template.metadata.and_then(|m| m.labels),
                    ..Default::default()
                },
                spec: Some(spec),
                status: None,
            };
            if let Err(err) = pods.create(&dry_run, &pod).await {
                panic!("a pod of Job {name} ({file}) is not admitted under restricted: {err}");
            }
            checked.push(name);
        }
    }
    // Prep, the agent (twice), the installer, the helper steps and the disk copy.
    assert!(checked.len() >= 10, "{checked:?}");
    for part in ["-prep", "-crc-agent-", "-installer", "-seal-", "-disk"] {
        assert!(
            checked.iter().any(|n| n.contains(part)),
            "no {part} Job among {checked:?}"
        );
    }
}
