//! Performs the actions of a [`Plan`](crate::actors::instance::crc::plan::Plan), in order, through the one write path
//! ([`crate::write`]). The first failure ends the pass with an error; nothing planned after it
//! runs, and the pass's status is not recorded (the next pass plans again from what exists).

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::actors::instance::crc::plan::{Action, DeleteKind, New};
use crate::actors::instance::crc::scope::{Error, Scope};
use crate::actors::runtime::api_error::Doing;
use crate::actors::runtime::context::Context;
use crate::api::instance::ClusterInstance;
use crate::events::Kind;
use crate::guest::keys;
use crate::identity;
use crate::resources::instance as res;
use crate::write;

/// Performs `actions` for `instance`.
pub async fn act(
    instance: &ClusterInstance,
    ctx: &Context,
    actions: &[Action],
) -> Result<(), Error> {
    let actor = Actor::new(instance, ctx);
    for action in actions {
        actor.perform(action).await?;
    }
    Ok(())
}

struct Actor<'a> {
    instance: &'a ClusterInstance,
    scope: Scope<'a>,
}

impl<'a> Actor<'a> {
    fn new(instance: &'a ClusterInstance, ctx: &'a Context) -> Self {
        Self {
            instance,
            scope: Scope::new(instance, ctx),
        }
    }

    async fn create<K>(&self, api: &Api<K>, obj: &K) -> Result<(), Error>
    where
        K: Resource<DynamicType = ()> + Clone + Serialize + DeserializeOwned + std::fmt::Debug,
    {
        let what = format!("{} {}", K::kind(&()), obj.name_any());
        write::create(api, obj)
            .await
            .map_err(self.scope.err(Doing::Create, what.clone()))?;
        tracing::info!(clusterinstance = %self.scope.name, namespace = %self.scope.namespace, "created {what}");
        Ok(())
    }

    async fn perform(&self, action: &Action) -> Result<(), Error> {
        match action {
            Action::Create(new) => match new {
                New::Secret(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::DataVolume(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::VirtualMachine(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::ServiceAccount(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::RoleBinding(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::Service(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::Route(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::Job(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::Role(o) => self.create(&self.scope.ns(), o.as_ref()).await,
                New::NetworkPolicy(o) => self.create(&self.scope.ns(), o.as_ref()).await,
            },
            Action::CreateIdentity { host } => {
                let now = Timestamp::now().as_second();
                let identity = identity::generate(host, now).map_err(|source| Error::Identity {
                    instance: self.scope.name.clone(),
                    source,
                })?;
                let secret = res::identity_secret(self.instance, identity.to_secret_data());
                self.create(&self.scope.ns(), &secret).await
            }
            Action::CreateGuestKey => {
                let failed = |source| Error::GuestKey {
                    instance: self.scope.name.clone(),
                    source,
                };
                let key = keys::generate_ed25519().map_err(failed)?;
                let private = keys::to_openssh(&key).map_err(failed)?;
                let public =
                    keys::authorized_key_line(key.public_key(), "crc-instance").map_err(failed)?;
                let secret = res::guest_key_secret(self.instance, &private, &public);
                self.create(&self.scope.ns(), &secret).await
            }
            Action::Delete(target) => {
                let (kind, result) = match target.kind {
                    // Foreground: the Job stays until its pods are gone, so what they mount is
                    // not deleted under them.
                    DeleteKind::AgentJob => (
                        "Job",
                        write::delete_exact(
                            &self.scope.ns::<Job>(),
                            &target.name,
                            &target.uid,
                            PropagationPolicy::Foreground,
                        )
                        .await,
                    ),
                    DeleteKind::Secret => (
                        "Secret",
                        write::delete_exact(
                            &self.scope.ns::<Secret>(),
                            &target.name,
                            &target.uid,
                            PropagationPolicy::Background,
                        )
                        .await,
                    ),
                    DeleteKind::RoleBinding => (
                        "RoleBinding",
                        write::delete_exact(
                            &self.scope.ns::<RoleBinding>(),
                            &target.name,
                            &target.uid,
                            PropagationPolicy::Background,
                        )
                        .await,
                    ),
                };
                result.map_err(
                    self.scope
                        .err(Doing::Delete, format!("{kind} {}", target.name)),
                )?;
                tracing::info!(clusterinstance = %self.scope.name, namespace = %self.scope.namespace, "deleted {kind} {}", target.name);
                Ok(())
            }
            Action::RepairRole { name, rules } => {
                let patch = serde_json::json!({"rules": rules});
                write::merge_patch(&self.scope.ns::<Role>(), name, &patch)
                    .await
                    .map_err(self.scope.err(Doing::Update, format!("Role {name}")))
            }
            Action::RepairRoleBinding { name, subjects } => {
                let patch = serde_json::json!({"subjects": subjects});
                write::merge_patch(&self.scope.ns::<RoleBinding>(), name, &patch)
                    .await
                    .map_err(self.scope.err(Doing::Update, format!("RoleBinding {name}")))
            }
            Action::UpdateKubeconfig(wanted) => {
                let name = wanted.name_any();
                let patch = serde_json::json!({
                    "metadata": {"ownerReferences": wanted.metadata.owner_references,
                                 "labels": wanted.metadata.labels},
                    "data": wanted.data,
                });
                write::merge_patch(&self.scope.ns::<Secret>(), &name, &patch)
                    .await
                    .map_err(self.scope.err(Doing::Update, format!("Secret {name}")))
            }
            Action::Warn { reason, message } => {
                self.scope
                    .ctx
                    .events
                    .publish(self.instance, Kind::Warning, reason, message)
                    .await;
                Ok(())
            }
        }
    }
}
