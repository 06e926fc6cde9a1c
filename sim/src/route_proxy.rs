//! The management cluster's router for passthrough Routes, played as an HTTP `CONNECT` proxy.
//!
//! On OpenShift a passthrough Route sends TLS for `spec.host` straight to the Service's endpoints.
//! Here clients reach Route hosts through this proxy via the standard `HTTPS_PROXY` setting: a
//! `CONNECT <host>:443` is resolved Route → Service → a ready pod selected by the Service → the
//! pod's address, and bytes are relayed untouched, so TLS is end to end.
//!
//! The router reads pods rather than EndpointSlices because simulated pods have loopback
//! addresses, which the API server refuses in EndpointSlices.

use std::net::SocketAddr;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde::Deserialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Why a `CONNECT` could not be served; the text goes back to the client in the 502/404 body.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("malformed proxy request: {0}")]
    BadRequest(String),
    #[error("no Route has host {0}")]
    NoRoute(String),
    #[error("Route {route} points at Service {service}, which does not exist")]
    NoService { route: String, service: String },
    #[error("Service {0} has no ready endpoint for the Route's port")]
    NoEndpoint(String),
    #[error("looking up the Route: {0}")]
    Kube(#[from] kube::Error),
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
}

/// A running proxy; aborts its accept loop when dropped.
pub struct RouteProxy {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl RouteProxy {
    /// Listens on a free loopback port.
    pub async fn start(client: kube::Client) -> Result<RouteProxy, Error> {
        let listener = TcpListener::bind(("127.0.0.1", 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            loop {
                let Ok((conn, _)) = listener.accept().await else {
                    continue;
                };
                let client = client.clone();
                tokio::spawn(async move {
                    if let Err(err) = serve(conn, &client).await {
                        tracing::debug!("route proxy: {err}");
                    }
                });
            }
        });
        Ok(RouteProxy { addr, task })
    }

    /// The proxy URL for `HTTPS_PROXY`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for RouteProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(mut conn: TcpStream, client: &kube::Client) -> Result<(), Error> {
    let head = read_head(&mut conn).await?;
    let host = match parse_connect(&head) {
        Ok(host) => host,
        Err(err) => {
            reply(&mut conn, "400 Bad Request", &err.to_string()).await?;
            return Err(err);
        }
    };
    let target = match resolve(client, &host).await {
        Ok(target) => target,
        Err(err) => {
            let status = match err {
                Error::NoRoute(_) => "404 Not Found",
                _ => "502 Bad Gateway",
            };
            reply(&mut conn, status, &err.to_string()).await?;
            return Err(err);
        }
    };
    let mut upstream = match TcpStream::connect(target).await {
        Ok(upstream) => upstream,
        Err(err) => {
            reply(
                &mut conn,
                "502 Bad Gateway",
                &format!("connecting to {target}: {err}"),
            )
            .await?;
            return Err(err.into());
        }
    };
    conn.write_all(b"HTTP/1.1 200 Connection Established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut conn, &mut upstream).await?;
    Ok(())
}

async fn reply(conn: &mut TcpStream, status: &str, body: &str) -> std::io::Result<()> {
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(response.as_bytes()).await
}

/// Reads the request head byte by byte, so nothing of the tunnelled stream is consumed.
async fn read_head(conn: &mut TcpStream) -> Result<String, Error> {
    const LIMIT: usize = 8192;
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= LIMIT {
            return Err(Error::BadRequest("request head too long".into()));
        }
        head.push(conn.read_u8().await?);
    }
    String::from_utf8(head).map_err(|_| Error::BadRequest("request head is not UTF-8".into()))
}

/// The host of a `CONNECT host:port HTTP/1.x` request line.
pub fn parse_connect(head: &str) -> Result<String, Error> {
    let line = head.lines().next().unwrap_or_default();
    let mut parts = line.split_whitespace();
    match (parts.next(), parts.next(), parts.next()) {
        (Some("CONNECT"), Some(authority), Some(version)) if version.starts_with("HTTP/1.") => {
            authority
                .rsplit_once(':')
                .map(|(host, _port)| host.to_owned())
                .ok_or_else(|| {
                    Error::BadRequest(format!("CONNECT target without a port: {authority}"))
                })
        }
        _ => Err(Error::BadRequest(format!(
            "only CONNECT is supported, got {line:?}"
        ))),
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RouteSpec {
    #[serde(default)]
    host: String,
    to: RouteTarget,
    #[serde(default)]
    port: Option<RoutePort>,
}

#[derive(Deserialize)]
struct RouteTarget {
    name: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RoutePort {
    target_port: k8s_openapi::apimachinery::pkg::util::intstr::IntOrString,
}

fn route_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("route.openshift.io", "v1", "Route"),
        "routes",
    )
}

/// Route host → the address of a ready pod behind the Route's Service port.
async fn resolve(client: &kube::Client, host: &str) -> Result<SocketAddr, Error> {
    let routes: Api<DynamicObject> = Api::all_with(client.clone(), &route_resource());
    let (namespace, route_name, spec) = routes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find_map(|route| {
            let spec: RouteSpec = serde_json::from_value(route.data.get("spec")?.clone()).ok()?;
            (spec.host == host).then(|| {
                let ns = route.metadata.namespace.clone().unwrap_or_default();
                (ns, route.metadata.name.clone().unwrap_or_default(), spec)
            })
        })
        .ok_or_else(|| Error::NoRoute(host.to_owned()))?;
    let service_name = format!("{namespace}/{}", spec.to.name);
    let service = Api::<Service>::namespaced(client.clone(), &namespace)
        .get_opt(&spec.to.name)
        .await?
        .ok_or_else(|| Error::NoService {
            route: format!("{namespace}/{route_name}"),
            service: spec.to.name.clone(),
        })?;
    let service_spec = service.spec.unwrap_or_default();
    let selector = service_spec.selector.unwrap_or_default();
    let target = target_port(
        service_spec.ports.as_deref().unwrap_or_default(),
        spec.port.as_ref().map(|p| &p.target_port),
    )
    .ok_or_else(|| Error::NoEndpoint(service_name.clone()))?;
    if selector.is_empty() {
        return Err(Error::NoEndpoint(service_name));
    }
    let labels = selector
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",");
    let pods = Api::<Pod>::namespaced(client.clone(), &namespace)
        .list(&ListParams::default().labels(&labels))
        .await?;
    pods.items
        .iter()
        .find_map(|pod| ready_address(pod, &target))
        .ok_or(Error::NoEndpoint(service_name))
}

/// The Service port's `targetPort` for the port a Route names (by name or number; else the
/// first port).
fn target_port(
    ports: &[k8s_openapi::api::core::v1::ServicePort],
    route: Option<&IntOrString>,
) -> Option<IntOrString> {
    let port = match route {
        Some(IntOrString::String(name)) => ports
            .iter()
            .find(|p| p.name.as_deref() == Some(name.as_str())),
        Some(IntOrString::Int(number)) => ports
            .iter()
            .find(|p| p.port == *number || p.target_port == Some(IntOrString::Int(*number))),
        None => ports.first(),
    }?;
    Some(
        port.target_port
            .clone()
            .unwrap_or(IntOrString::Int(port.port)),
    )
}

/// The address of a running, ready `pod` for `target` (a number, or a container port name).
fn ready_address(pod: &Pod, target: &IntOrString) -> Option<SocketAddr> {
    let status = pod.status.as_ref()?;
    let ready = status
        .conditions
        .iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if pod.metadata.deletion_timestamp.is_some()
        || status.phase.as_deref() != Some("Running")
        || !ready
    {
        return None;
    }
    let port = match target {
        IntOrString::Int(port) => *port,
        IntOrString::String(name) => {
            pod.spec
                .as_ref()?
                .containers
                .iter()
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| p.name.as_deref() == Some(name.as_str()))?
                .container_port
        }
    };
    let ip = status.pod_ip.as_ref()?.parse().ok()?;
    Some(SocketAddr::new(ip, u16::try_from(port).ok()?))
}

/// Sets `ingresses.config.openshift.io/cluster` `spec.domain`: the management cluster's apps
/// domain, under which the operator makes instance Route hosts (what OpenShift's ingress
/// operator publishes on a real management cluster).
pub async fn set_ingress_domain(client: &kube::Client, domain: &str) -> Result<(), kube::Error> {
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("config.openshift.io", "v1", "Ingress"),
        "ingresses",
    );
    let ingress = serde_json::json!({
        "apiVersion": "config.openshift.io/v1", "kind": "Ingress",
        "metadata": {"name": "cluster"}, "spec": {"domain": domain}
    });
    Api::<DynamicObject>::all_with(client.clone(), &resource)
        .patch(
            "cluster",
            &kube::api::PatchParams::apply("guestcluster-sim-router").force(),
            &kube::api::Patch::Apply(&ingress),
        )
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_connect_lines() {
        assert_eq!(
            parse_connect("CONNECT api.i1.apps.example:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap(),
            "api.i1.apps.example"
        );
        assert!(parse_connect("GET / HTTP/1.1\r\n\r\n").is_err());
        assert!(parse_connect("CONNECT nohost HTTP/1.1\r\n\r\n").is_err());
    }

    #[test]
    fn picks_running_ready_pods_and_named_ports() {
        let pod = |phase: &str, ready: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"containers": [{"name": "c", "ports": [{"name": "api", "containerPort": 6443}]}]},
                "status": {"phase": phase, "podIP": "127.10.0.7", "conditions": [{"type": "Ready", "status": ready}]}
            }))
            .unwrap()
        };
        let named = IntOrString::String("api".into());
        assert_eq!(
            ready_address(&pod("Running", "True"), &named),
            "127.10.0.7:6443".parse().ok()
        );
        assert_eq!(ready_address(&pod("Running", "False"), &named), None);
        assert_eq!(
            ready_address(&pod("Pending", "True"), &IntOrString::Int(1)),
            None
        );
    }
}
