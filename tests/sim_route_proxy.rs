//! The simulated router: `CONNECT <route host>:443` reaches the Route's Service endpoint.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use kube::api::{Api, DynamicObject, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;
use sim::route_proxy::RouteProxy;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn connect(proxy: &RouteProxy, host: &str) -> (String, tokio::net::TcpStream) {
    let mut conn = tokio::net::TcpStream::connect(proxy.addr()).await.unwrap();
    conn.write_all(format!("CONNECT {host}:443 HTTP/1.1\r\nHost: {host}:443\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8];
        if conn.read(&mut byte).await.unwrap() == 0 {
            break;
        }
        head.push(byte[0]);
    }
    (String::from_utf8_lossy(&head).into_owned(), conn)
}

#[tokio::test]
async fn connect_reaches_the_routes_service_endpoint() {
    let client = support::client().await;
    let ns = support::namespace(&client, "route").await;

    // The "pod": an echo server on loopback.
    let echo = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = echo.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut conn, _)) = echo.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 64];
                while let Ok(n) = conn.read(&mut buf).await {
                    if n == 0 || conn.write_all(&buf[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });

    let create = |kind: &str, plural: &str, group: &str, version: &str, body: serde_json::Value| {
        let api: Api<DynamicObject> = Api::namespaced_with(
            client.clone(),
            &ns,
            &ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk(group, version, kind),
                plural,
            ),
        );
        async move {
            api.create(
                &PostParams::default(),
                &serde_json::from_value(body).unwrap(),
            )
            .await
            .unwrap()
        }
    };
    create("Service", "services", "", "v1", json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "i1-crc-api"},
        "spec": {"selector": {"app": "i1"}, "ports": [{"name": "https", "port": 443, "targetPort": port}]}}))
    .await;
    // A pod on a node no kubelet serves; its status is written here, as its kubelet would.
    create("Pod", "pods", "", "v1", json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "i1-launcher", "labels": {"app": "i1"}},
        "spec": {"nodeName": "elsewhere", "containers": [{"name": "compute", "image": "virt-launcher"}]}}))
    .await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> = Api::namespaced(client.clone(), &ns);
    let status = json!({"status": {"phase": "Running", "podIP": "127.0.0.1", "podIPs": [{"ip": "127.0.0.1"}],
        "conditions": [{"type": "Ready", "status": "True"}]}});
    pods.patch_status(
        "i1-launcher",
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await
    .unwrap();
    let host = format!("i1-crc-api-{ns}.apps.mgmt.example");
    create("Route", "routes", "route.openshift.io", "v1", json!({"apiVersion": "route.openshift.io/v1", "kind": "Route", "metadata": {"name": "i1-crc-api"},
        "spec": {"host": host, "to": {"kind": "Service", "name": "i1-crc-api"}, "port": {"targetPort": "https"}, "tls": {"termination": "passthrough"}}}))
    .await;

    let proxy = RouteProxy::start(client.clone()).await.unwrap();
    let (head, mut tunnel) = connect(&proxy, &host).await;
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    tunnel.write_all(b"ping").await.unwrap();
    let mut pong = [0u8; 4];
    tunnel.read_exact(&mut pong).await.unwrap();
    assert_eq!(&pong, b"ping", "bytes are relayed both ways");

    let (head, _) = connect(&proxy, "unknown.apps.mgmt.example").await;
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
}
