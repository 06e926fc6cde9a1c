//! A build's guests on the pod network: while the build VM runs, a pod of the operator namespace
//! that is not the attempt's helper cannot open its SSH port (where a build guest's
//! machine-config server and API are too), while the helpers that install it can, and the node
//! still can. The simulation enforces NetworkPolicy at the guests' doors as a network plugin does
//! (`sim::network::ingress`, `docs/simulation.md`).
//!
//! This binary's world gives a MachineConfig rollout two minutes, so the build stays in
//! Customize, with its VM running, while the probes run.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use guestcluster::api::CRCBundle;
use guestcluster::api::bundle::BuildStage;
use guestcluster::kubevirt::VirtualMachineInstance;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use tokio::io::AsyncReadExt;

use support::build::{create_build, good_inputs};
use support::world::{IMAGE, OPERATOR_NS, world_with_timings};
use support::{wait_for, wait_long};

/// Whether this process (the node) reads an SSH banner from `ip:22`.
async fn node_reaches(ip: &str) -> bool {
    let attempt = async {
        let mut stream = tokio::net::TcpStream::connect((ip, 22)).await.ok()?;
        let mut banner = [0u8; 4];
        stream.read_exact(&mut banner).await.ok()?;
        (&banner == b"SSH-").then_some(())
    };
    tokio::time::timeout(Duration::from_secs(10), attempt)
        .await
        .ok()
        .flatten()
        .is_some()
}

/// Runs a pod `name` with `labels` in the operator namespace that tries, for ten seconds, to
/// read an SSH banner from `ip:22`; whether it did.
async fn pod_reaches(
    client: &kube::Client,
    name: &str,
    labels: serde_json::Value,
    ip: &str,
) -> bool {
    let script = format!(
        "for i in $(seq 20); do \
           if exec 3<>/dev/tcp/{ip}/22 && [ \"$(timeout 2 head -c 4 <&3)\" = SSH- ]; then \
             echo reached; exit 0; fi; sleep 0.5; \
         done; echo refused; exit 1"
    );
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "probe", "image": IMAGE,
                            "command": ["/bin/bash", "-c", script]}],
        },
    }))
    .expect("probe pod");
    let pods = Api::<Pod>::namespaced(client.clone(), OPERATOR_NS);
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("create probe pod");
    let phase = wait_long(&format!("probe pod {name} to end"), || async {
        let phase = pods.get(name).await.ok()?.status?.phase?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    pods.delete(name, &DeleteParams::default())
        .await
        .expect("delete probe pod");
    phase == "Succeeded"
}

#[tokio::test]
async fn only_the_attempts_helpers_reach_a_build_guest() {
    world_with_timings(|| sim::Timings {
        rollout: Duration::from_secs(120),
        ..sim::Timings::fast()
    });
    let client = support::client().await;
    let name = support::unique("build-net");
    good_inputs(&client, &name).await;
    create_build(&client, &name, "2h").await;
    let bundles = Api::<CRCBundle>::all(client.clone());

    // Customize runs on the installed guest, which the helpers of every earlier boot reached.
    let vmi = wait_long("the build in Customize on its installed VMI", || async {
        let build = bundles.get(&name).await.ok()?.status?.build?;
        (build.stage == Some(BuildStage::Customize)).then_some(())?;
        build.vmi_uid
    })
    .await;
    let vmis = Api::<VirtualMachineInstance>::namespaced(client.clone(), OPERATOR_NS);
    let ip = wait_for("the build VMI's address", || async {
        let found = vmis.get(&format!("{name}-b1-build")).await.ok()?;
        (found.metadata.uid.as_deref() == Some(vmi.as_str())).then_some(())?;
        found.status?.interfaces.first()?.ip_address.clone()
    })
    .await;
    assert!(node_reaches(&ip).await, "the build guest serves SSH");

    // Any pod of the namespace, even one of the same attempt that is not its helper.
    let installer_like = serde_json::json!({
        "opdev.io/crc-bundle": name,
        "guestcluster.opdev.io/build-attempt": "1",
        "opdev.io/component": "build-installer",
    });
    let stranger = pod_reaches(
        &client,
        &format!("{name}-stranger"),
        serde_json::json!({}),
        &ip,
    )
    .await;
    let sibling = pod_reaches(&client, &format!("{name}-sibling"), installer_like, &ip).await;
    // The verdicts count only if the guest was up all along.
    let build = bundles
        .get(&name)
        .await
        .unwrap()
        .status
        .unwrap()
        .build
        .unwrap();
    assert_eq!(
        (build.stage, build.vmi_uid.as_deref()),
        (Some(BuildStage::Customize), Some(vmi.as_str())),
        "the probes ran while the build VMI served Customize"
    );
    assert!(node_reaches(&ip).await, "the build guest still serves SSH");
    assert!(
        !stranger,
        "a pod of the operator namespace reached the build guest's SSH port"
    );
    assert!(
        !sibling,
        "a non-helper pod of the attempt reached the build guest's SSH port"
    );

    bundles
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete CRCBundle");
}
