//! What makes a guest reachable and its agent possible: the agent's RBAC, the API Service and
//! passthrough Route (host chosen once, recorded before the Route exists), and the identity
//! Secret the kubeconfigs trust.

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use kube::ResourceExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};

use super::{Error, Flow, Pass, Stop, go, stop};
use crate::api::conditions::reasons;
use crate::identity::{self, Identity};
use crate::resources::instance as res;
use crate::route::Route;

impl Pass<'_> {
    /// The agent's ClusterRole (shared), ServiceAccount and RoleBinding (per instance).
    pub(super) async fn agent_access(&self) -> Flow<()> {
        let roles: Api<ClusterRole> = Api::all(self.ctx.client.clone());
        let role_name = self.ctx.guests.agent_cluster_role.clone();
        match self.get(&roles, &role_name).await? {
            None => {
                self.create(&roles, &res::agent_cluster_role(&role_name))
                    .await?
            }
            Some(role) if !res::cluster_role_rules_match(&role) => {
                return stop(Stop::failed(
                    reasons::RECONCILE_ERROR,
                    format!(
                        "ClusterRole {role_name} exists with rules other than the crc-agent needs; \
                         delete it to have it recreated"
                    ),
                ));
            }
            Some(_) => {}
        }
        let accounts = self.api::<ServiceAccount>();
        let account_name = res::agent_account_name(&self.name);
        match self.get(&accounts, &account_name).await? {
            None => {
                self.create(&accounts, &res::agent_service_account(self.instance))
                    .await?
            }
            Some(sa) if !self.controlled(&sa) => return stop(self.conflict(&sa)),
            Some(_) => {}
        }
        let bindings = self.api::<RoleBinding>();
        let wanted = res::agent_role_binding(self.instance, &role_name);
        let binding_name = res::agent_binding_name(&self.name);
        match self.get(&bindings, &binding_name).await? {
            None => self.create(&bindings, &wanted).await?,
            Some(rb) if !self.controlled(&rb) => return stop(self.conflict(&rb)),
            Some(rb) if rb.role_ref != wanted.role_ref => {
                return stop(Stop::failed(
                    reasons::RESOURCE_OWNERSHIP_CONFLICT,
                    format!(
                        "RoleBinding {}/{binding_name} refers to {} {}; delete it to have it recreated",
                        self.ns, rb.role_ref.kind, rb.role_ref.name
                    ),
                ));
            }
            Some(rb) if rb.subjects != wanted.subjects => {
                let patch = serde_json::json!({"subjects": wanted.subjects});
                bindings
                    .patch(
                        &binding_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(self.err("repairing", format!("RoleBinding {binding_name}")))?;
            }
            Some(_) => {}
        }
        go(())
    }

    pub(super) async fn ensure_service(&self, vm_name: &str) -> Result<(), Error> {
        let services = self.api::<Service>();
        if self
            .get(&services, &res::api_service_name(&self.name))
            .await?
            .is_none()
        {
            self.create(&services, &res::api_service(self.instance, vm_name))
                .await?;
        }
        Ok(())
    }

    /// The Route and its host: kept once chosen, recorded in `apiEndpoint` before the Route is
    /// created, and unique across the cluster.
    pub(super) async fn ensure_route(&mut self) -> Flow<String> {
        let routes = self.api::<Route>();
        let route_name = res::api_route_name(&self.name);
        let existing = self.get(&routes, &route_name).await?;
        if let Some(route) = &existing
            && !self.controlled(route)
        {
            return stop(self.conflict(route));
        }
        let recorded = self
            .status
            .api_endpoint
            .as_deref()
            .and_then(|e| e.strip_prefix("https://"))
            .map(str::to_owned);
        let from_identity = match self
            .get(
                &self.api::<Secret>(),
                &res::identity_secret_name(&self.name),
            )
            .await?
        {
            Some(secret) => secret
                .data
                .as_ref()
                .and_then(|d| d.get(identity::SERVING_CRT))
                .and_then(|ByteString(b)| identity::serving_host(&String::from_utf8_lossy(b))),
            None => None,
        };
        let host = match existing
            .as_ref()
            .and_then(|r| r.spec.host.clone())
            .filter(|h| !h.is_empty())
            .or(from_identity)
            .or(recorded.clone())
        {
            Some(host) => host,
            None => match self.ingress_domain().await? {
                Some(domain) => match res::route_host(&self.ns, &self.name, &domain) {
                    Ok(host) => host,
                    Err(e) => {
                        return stop(Stop::failed(reasons::API_ENDPOINT_CONFLICT, e.to_string()));
                    }
                },
                None => {
                    return stop(Stop::pending(
                        reasons::CRC_BACKING_PENDING,
                        "the cluster ingress domain is unknown: ingresses.config.openshift.io/cluster \
                         has no spec.domain",
                    ));
                }
            },
        };
        if let Some(recorded) = &recorded
            && recorded != &host
        {
            return stop(Stop::failed(
                reasons::API_ENDPOINT_CONFLICT,
                format!(
                    "the API endpoint https://{recorded} recorded in status disagrees with host {host} \
                     of Route {route_name} or of the identity Secret"
                ),
            ));
        }
        // Uniqueness is checked before our Route exists; afterwards the router admits the oldest
        // Route of a host, which is ours. (Listing every Route on every pass would not scale.)
        if existing.is_some() {
            return go(host);
        }
        let all: Api<Route> = Api::all(self.ctx.client.clone());
        let taken = all
            .list(&ListParams::default())
            .await
            .map_err(self.err("listing", "Routes"))?
            .items
            .into_iter()
            .find(|r| r.spec.host.as_deref() == Some(host.as_str()));
        if let Some(other) = taken {
            return stop(Stop::failed(
                reasons::API_ENDPOINT_CONFLICT,
                format!(
                    "host {host} is already used by Route {}/{}",
                    other.namespace().unwrap_or_default(),
                    other.name_any()
                ),
            ));
        }
        if recorded.is_none() {
            self.status.api_endpoint = Some(format!("https://{host}"));
            return stop(Stop::recorded(format!(
                "API endpoint https://{host} chosen"
            )));
        }
        self.create(&routes, &res::api_route(self.instance, &host))
            .await?;
        go(host)
    }

    pub(super) async fn ingress_domain(&self) -> Result<Option<String>, Error> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "Ingress"),
            "ingresses",
        );
        let api = Api::<DynamicObject>::all_with(self.ctx.client.clone(), &resource);
        let ingress = match api.get_opt("cluster").await {
            Ok(i) => i,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(self.err("reading", "ingresses.config.openshift.io/cluster")(e)),
        };
        Ok(ingress
            .and_then(|i| i.data.pointer("/spec/domain")?.as_str().map(str::to_owned))
            .filter(|d| !d.is_empty()))
    }

    /// The identity Secret: created once, then validated on every pass, never replaced.
    pub(super) async fn ensure_identity(&self, host: &str) -> Flow<()> {
        let secrets = self.api::<Secret>();
        let name = res::identity_secret_name(&self.name);
        let now = self.now.0.as_second();
        match self.get(&secrets, &name).await? {
            None => {
                let identity = match identity::generate(host, now) {
                    Ok(i) => i,
                    Err(e) => return stop(Stop::failed(reasons::RECONCILE_ERROR, e.to_string())),
                };
                self.create(
                    &secrets,
                    &res::identity_secret(self.instance, identity.to_secret_data()),
                )
                .await?;
                go(())
            }
            Some(secret) if !self.controlled(&secret) => stop(self.conflict(&secret)),
            Some(secret) => {
                let data = secret.data.clone().unwrap_or_default();
                let valid = Identity::from_secret_data(&data)
                    .and_then(|i| identity::validate(&i, host, now));
                match valid {
                    Ok(()) => go(()),
                    Err(e) => stop(Stop::failed(
                        reasons::RECONCILE_ERROR,
                        format!(
                            "identity Secret {}/{name} is not valid for {host}: {e}; it is never \
                             replaced automatically because published kubeconfigs trust it",
                            self.ns
                        ),
                    )),
                }
            }
        }
    }
}
