//! Recording the status of one of our kinds: one server-side apply, an Event when the main
//! condition's reason changed, one log line.
#![allow(clippy::disallowed_methods)]

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::core::Request;
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::api::send_read_back;
use crate::api::conditions::{self, types};
use crate::api::labels::FIELD_MANAGER;
use crate::api::{CRCBundle, ClusterInstance, ClusterLease, ClusterPool};
use crate::events::Events;

/// One of our kinds, whose status the operator records.
pub trait Recorded:
    Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug
{
    type Status: Serialize + PartialEq + Clone;
    /// The condition whose changes of reason are Events (`kubectl describe` shows the stages).
    const MAIN_CONDITION: &'static str;
    fn status(&self) -> Option<&Self::Status>;
    fn status_conditions(status: &Self::Status) -> &[Condition];
    /// The status as we apply it: fields other writers own are left out, so our apply never
    /// takes them over (or drops them).
    fn applied(status: &Self::Status) -> Self::Status {
        status.clone()
    }
}

macro_rules! recorded {
    ($($kind:ty => $status:ty, $main:expr;)*) => {$(
        impl Recorded for $kind {
            type Status = $status;
            const MAIN_CONDITION: &'static str = $main;
            fn status(&self) -> Option<&$status> {
                self.status.as_ref()
            }
            fn status_conditions(status: &$status) -> &[Condition] {
                &status.conditions
            }
        }
    )*};
}

recorded! {
    CRCBundle => crate::api::CRCBundleStatus, types::READY;
    ClusterPool => crate::api::ClusterPoolStatus, types::CAPACITY_AVAILABLE;
    ClusterLease => crate::api::ClusterLeaseStatus, types::BOUND;
}

/// The Go operator's `hyperShift` and `provisioning.legacy` stay its own.
impl Recorded for ClusterInstance {
    type Status = crate::api::ClusterInstanceStatus;
    const MAIN_CONDITION: &'static str = types::READY;
    fn status(&self) -> Option<&Self::Status> {
        self.status.as_ref()
    }
    fn status_conditions(status: &Self::Status) -> &[Condition] {
        &status.conditions
    }
    fn applied(status: &Self::Status) -> Self::Status {
        status.as_applied()
    }
}

/// What a status write is guarded by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Guard {
    /// Nothing: the status is ours alone.
    None,
    /// The resourceVersion the object was read at: a change meanwhile fails with a conflict and
    /// is looked at again rather than overwritten.
    ReadVersion,
}

/// Records `status` for `obj` (as it was read) when it differs from what `obj` has: one
/// server-side apply owning every field in it, an Event when the main condition's reason or
/// status changed, one log line. Returns what was written: `None` when nothing needed writing,
/// else the resourceVersion the write left the object at (when the server said).
pub async fn record_status<K: Recorded>(
    api: &Api<K>,
    obj: &K,
    status: &K::Status,
    guard: Guard,
    events: &Events,
) -> Result<Option<Written>, kube::Error> {
    if obj.status() == Some(status) {
        return Ok(None);
    }
    let mut patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": K::applied(status),
    });
    if guard == Guard::ReadVersion {
        patch["metadata"] = serde_json::json!({"resourceVersion": obj.resource_version()});
    }
    let name = obj.name_any();
    let request = Request::new(api.resource_url()).patch_subresource(
        "status",
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    );
    let stored = send_read_back(api, request, &patch, "status").await?;
    let written = Written {
        resource_version: stored["metadata"]["resourceVersion"]
            .as_str()
            .map(str::to_owned),
    };
    let before = obj.status().map(K::status_conditions).unwrap_or_default();
    let after = K::status_conditions(status);
    events
        .transition(obj, K::MAIN_CONDITION, before, after)
        .await;
    let main = conditions::find(after, K::MAIN_CONDITION);
    tracing::info!(
        kind = K::kind(&()).as_ref(),
        namespace = obj.namespace().unwrap_or_default(),
        name = %name,
        condition = K::MAIN_CONDITION,
        status = main.map(|c| c.status.as_str()).unwrap_or_default(),
        reason = main.map(|c| c.reason.as_str()).unwrap_or_default(),
        "status recorded"
    );
    Ok(Some(written))
}

/// A status write that was sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Written {
    /// The object's resourceVersion after the write.
    pub resource_version: Option<String>,
}
