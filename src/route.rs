//! Typed OpenShift Routes (`route.openshift.io/v1`): the fields the operator writes (an
//! instance's API Route) or reads (host, admission), hand-written from the upstream API.
//!
//! As with [`crate::kubevirt`], this is **not** the whole upstream API: deserializing drops the
//! fields not modelled here, so never write back an object you read. The derive sets
//! `schema = "disabled"` (OpenShift owns the CRD; tests install the one generated from
//! openshift/api, `testenv/src/external-crds`). Enums read from the cluster carry an `Unknown`
//! catch-all.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use serde::{Deserialize, Serialize};

/// API group of Routes.
pub const GROUP: &str = "route.openshift.io";
/// API version of Routes.
pub const VERSION: &str = "v1";

/// `status.ingress[].conditions[].type` set by a router that accepted the Route.
pub const CONDITION_ADMITTED: &str = "Admitted";

/// A Route: exposes a Service through the cluster's routers under a host name.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "route.openshift.io",
    version = "v1",
    kind = "Route",
    plural = "routes",
    namespaced,
    status = "RouteStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    /// The host name routed. Setting it explicitly needs `routes/custom-host`; unset, the router
    /// generates one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The backend.
    #[serde(default)]
    pub to: RouteTargetReference,
    /// Which port of the backend Service.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<RoutePort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

/// `spec.to`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteTargetReference {
    /// `Service`.
    pub kind: String,
    pub name: String,
    /// Share of traffic (0–256).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

/// `spec.port`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RoutePort {
    /// A Service port name or number.
    pub target_port: IntOrString,
}

/// `spec.tls`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    pub termination: TlsTermination,
    /// What happens to plain HTTP requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_edge_termination_policy: Option<InsecureEdgeTerminationPolicy>,
}

/// `tls.termination`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TlsTermination {
    /// TLS ends at the router.
    Edge,
    /// The router forwards the TLS stream untouched (by SNI); the backend terminates it.
    Passthrough,
    /// TLS ends at the router and a new TLS connection goes to the backend.
    Reencrypt,
    /// A value this code does not know (read-only).
    #[serde(other)]
    Unknown,
}

/// `tls.insecureEdgeTerminationPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum InsecureEdgeTerminationPolicy {
    /// No plain HTTP.
    None,
    Allow,
    Redirect,
    /// A value this code does not know (read-only).
    #[serde(other)]
    Unknown,
}

/// Observed state of a Route (written by the routers).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    /// One entry per router (shard) that looked at the Route.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<RouteIngress>,
}

/// `status.ingress[]`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteIngress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_canonical_hostname: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wildcard_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RouteIngressCondition>,
}

/// `status.ingress[].conditions[]` (type `Admitted`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RouteIngressCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// E.g. `HostAlreadyClaimed` when another Route owns the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl RouteIngress {
    /// Whether this router admitted the Route.
    pub fn is_admitted(&self) -> bool {
        self.conditions
            .iter()
            .any(|c| c.type_ == CONDITION_ADMITTED && c.status == "True")
    }
}

impl Route {
    /// `spec.host`, if set and non-empty.
    pub fn host(&self) -> Option<&str> {
        self.spec.host.as_deref().filter(|h| !h.is_empty())
    }

    /// Whether some router admitted the Route for its current `spec.host`.
    pub fn is_admitted(&self) -> bool {
        let host = self.host();
        self.status.as_ref().is_some_and(|s| {
            s.ingress
                .iter()
                .any(|i| i.is_admitted() && (host.is_none() || i.host.as_deref() == host))
        })
    }

    /// The first `Admitted=False` condition, if any router rejected the Route.
    pub fn rejection(&self) -> Option<&RouteIngressCondition> {
        self.status.as_ref().and_then(|s| {
            s.ingress.iter().find_map(|i| {
                i.conditions
                    .iter()
                    .find(|c| c.type_ == CONDITION_ADMITTED && c.status == "False")
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn passthrough_route_serializes_as_openshift_expects() {
        let route = Route::new(
            "crc-1-crc-api",
            RouteSpec {
                host: Some("api-crc-1-0123456789abcdef.apps.example.com".into()),
                to: RouteTargetReference {
                    kind: "Service".into(),
                    name: "crc-1-crc-api".into(),
                    weight: Some(100),
                },
                port: Some(RoutePort {
                    target_port: IntOrString::String("api".into()),
                }),
                tls: Some(TlsConfig {
                    termination: TlsTermination::Passthrough,
                    insecure_edge_termination_policy: Some(InsecureEdgeTerminationPolicy::None),
                }),
            },
        );
        let value = serde_json::to_value(&route).unwrap();
        assert_eq!(value["apiVersion"], "route.openshift.io/v1");
        assert_eq!(value["kind"], "Route");
        assert_eq!(
            value["spec"],
            json!({
                "host": "api-crc-1-0123456789abcdef.apps.example.com",
                "to": {"kind": "Service", "name": "crc-1-crc-api", "weight": 100},
                "port": {"targetPort": "api"},
                "tls": {"termination": "passthrough", "insecureEdgeTerminationPolicy": "None"},
            })
        );
        let back: Route = serde_json::from_value(value).unwrap();
        assert_eq!(back.spec, route.spec);
        assert!(!back.is_admitted());
    }

    #[test]
    fn admission_is_read_from_the_ingress_conditions() {
        let route: Route = serde_json::from_value(json!({
            "apiVersion": "route.openshift.io/v1", "kind": "Route",
            "metadata": {"name": "r", "namespace": "ns"},
            "spec": {"host": "a.example.com", "to": {"kind": "Service", "name": "s"},
                     "tls": {"termination": "passthrough"}},
            "status": {"ingress": [
                {"host": "a.example.com", "routerName": "default",
                 "conditions": [{"type": "Admitted", "status": "True",
                                 "lastTransitionTime": "2025-01-01T00:00:00Z"}]},
            ]},
        }))
        .unwrap();
        assert!(route.is_admitted());
        assert!(route.rejection().is_none());
        assert_eq!(route.host(), Some("a.example.com"));

        let rejected: Route = serde_json::from_value(json!({
            "apiVersion": "route.openshift.io/v1", "kind": "Route",
            "metadata": {"name": "r"},
            "spec": {"host": "a.example.com", "to": {"kind": "Service", "name": "s"}},
            "status": {"ingress": [
                {"host": "a.example.com", "conditions": [
                    {"type": "Admitted", "status": "False", "reason": "HostAlreadyClaimed"}]},
            ]},
        }))
        .unwrap();
        assert!(!rejected.is_admitted());
        assert_eq!(
            rejected.rejection().unwrap().reason.as_deref(),
            Some("HostAlreadyClaimed")
        );
    }

    #[test]
    fn admission_for_an_old_host_does_not_count() {
        let route: Route = serde_json::from_value(json!({
            "apiVersion": "route.openshift.io/v1", "kind": "Route",
            "metadata": {"name": "r"},
            "spec": {"host": "new.example.com", "to": {"kind": "Service", "name": "s"}},
            "status": {"ingress": [{"host": "old.example.com",
                "conditions": [{"type": "Admitted", "status": "True"}]}]},
        }))
        .unwrap();
        assert!(!route.is_admitted());
    }

    #[test]
    fn unknown_enum_values_do_not_break_reading() {
        let tls: TlsConfig = serde_json::from_value(
            json!({"termination": "quantum", "insecureEdgeTerminationPolicy": "Teleport"}),
        )
        .unwrap();
        assert_eq!(tls.termination, TlsTermination::Unknown);
        assert_eq!(
            tls.insecure_edge_termination_policy,
            Some(InsecureEdgeTerminationPolicy::Unknown)
        );
    }
}
