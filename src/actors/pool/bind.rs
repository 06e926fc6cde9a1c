//! The binding decisions of a pool's actor, on live reads (`docs/operations.md`, "ClusterLease"):
//! which instance a pending lease gets, and how its kubeconfig Secret is copied into the lease's
//! name. A lease asks ([`super::ClaimRequest`]); the pool decides and answers.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};

use crate::actors::platform::NamespaceState;
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::ClusterInstance;
use crate::api::lease::{ClusterLease, ClusterLeaseStatus, LeasePhase, claimed};
use crate::resources::instance::KUBECONFIG_KEY;
use crate::resources::lease::{
    adopted_kubeconfig_copy, kubeconfig_copy, kubeconfig_secret_name, unbound_status,
};
use crate::resources::pool::is_member;

/// What a pending lease does, decided by its pool's actor on live reads.
#[derive(Debug, Clone, PartialEq)]
pub enum BindDecision {
    /// The live lease is no longer pending: nothing.
    NotPending,
    /// Record `status` (still Pending, `Bound=False`) and look again later.
    Wait(ClusterLeaseStatus),
    /// Copy the kubeconfig Secret `source_secret` of `instance`, then record `status`.
    Bind {
        instance: String,
        source_secret: String,
        status: ClusterLeaseStatus,
    },
}

/// Which instance the pending `lease` binds, given live lists of its namespace's state, its
/// pool's instances and every lease of its namespace: the first (by name) pool instance that is
/// not deleting, Ready, and claimed by no lease.
pub fn decide_bind(
    lease: &ClusterLease,
    namespace: NamespaceState,
    instances: &[ClusterInstance],
    leases: &[ClusterLease],
    now: Time,
) -> BindDecision {
    if !lease.is_pending() || lease.metadata.deletion_timestamp.is_some() {
        return BindDecision::NotPending;
    }
    let ns = lease.metadata.namespace.as_deref().unwrap_or_default();
    // A disabled namespace does not block binding existing capacity; a terminating one does.
    if matches!(
        namespace,
        NamespaceState::Terminating | NamespaceState::Missing
    ) && let Some((reason, message)) = namespace.refusal(ns)
    {
        return BindDecision::Wait(unbound_status(lease, reason, &message, now));
    }
    let Some(pool) = lease.spec.pool_ref.name() else {
        return BindDecision::Wait(unbound_status(
            lease,
            reasons::POOL_NOT_SET,
            "spec.poolRef.name is empty: name the ClusterPool (in this namespace) to lease from",
            now,
        ));
    };
    let taken = claimed(leases);
    let mut candidates: Vec<&ClusterInstance> = instances
        .iter()
        .filter(|i| is_member(pool, i))
        .filter(|i| !taken.contains(&i.name_any()))
        .filter(|i| i.bindable().is_some())
        .collect();
    candidates.sort_by_key(|i| i.name_any());
    let Some(instance) = candidates.first() else {
        return BindDecision::Wait(unbound_status(
            lease,
            reasons::WAITING_FOR_CAPACITY,
            &format!("no Ready, unclaimed instance in pool {pool}; waiting for one"),
            now,
        ));
    };
    let name = instance.name_any();
    let source_secret = instance.bindable().unwrap_or_default().to_owned();
    let istatus = instance.status.clone().unwrap_or_default();
    let mut status = lease.status.clone().unwrap_or_default();
    status.phase = Some(LeasePhase::Bound);
    status.instance_ref = Some(LocalRef::new(name.clone()));
    status.kubeconfig_secret_ref = Some(LocalRef::new(kubeconfig_secret_name(&lease.name_any())));
    status.ocp_version = istatus.ocp_version;
    status.topology = Some(istatus.topology.unwrap_or(instance.spec.type_));
    status.api_endpoint = istatus.api_endpoint;
    status.bound_time = Some(now.clone());
    conditions::set(
        &mut status.conditions,
        conditions::new(
            types::BOUND,
            true,
            reasons::INSTANCE_BOUND,
            format!("bound to ClusterInstance {name} of pool {pool}"),
            lease.metadata.generation,
            now,
        ),
    );
    BindDecision::Bind {
        instance: name,
        source_secret,
        status,
    }
}

/// What to do about the lease's kubeconfig copy `<lease>-kubeconfig`.
#[derive(Debug, Clone, PartialEq)]
pub enum CopyAction {
    Create(Secret),
    /// Replace the existing Secret (its resourceVersion is kept as a precondition).
    Replace(Secret),
    /// The copy is already right.
    Unchanged,
    /// The instance's Secret is missing or lacks the `kubeconfig` key.
    Unavailable(String),
    /// `<lease>-kubeconfig` exists and another object controls it.
    Conflict(String),
}

/// The copy of `source` (the instance's kubeconfig Secret, `None` when missing) the lease needs,
/// given the `existing` `<lease>-kubeconfig`: type Opaque, the source's data, controlled by the
/// lease. An existing Secret without a controller is adopted, one controlled by another object
/// is a conflict.
pub fn copy_kubeconfig(
    lease: &ClusterLease,
    source_name: &str,
    source: Option<&Secret>,
    existing: Option<&Secret>,
) -> CopyAction {
    let name = kubeconfig_secret_name(&lease.name_any());
    let Some(data) = source
        .and_then(|s| s.data.as_ref())
        .filter(|d| d.contains_key(KUBECONFIG_KEY))
    else {
        return CopyAction::Unavailable(format!(
            "Secret {source_name} of the instance is missing or has no key {KUBECONFIG_KEY}"
        ));
    };
    let Some(owner) = lease.controller_owner_ref(&()) else {
        return CopyAction::Unavailable("the lease has no UID yet".to_owned());
    };
    let Some(existing) = existing else {
        return CopyAction::Create(kubeconfig_copy(lease, owner, data));
    };
    if let Some(other) = existing
        .owner_references()
        .iter()
        .find(|r| r.controller == Some(true) && r.uid != owner.uid)
    {
        return CopyAction::Conflict(format!(
            "Secret {name} exists and is controlled by {} {}",
            other.kind, other.name
        ));
    }
    let ours = existing
        .owner_references()
        .iter()
        .any(|r| r.uid == owner.uid);
    let same_data = existing.data.as_ref() == Some(data);
    let opaque = existing.type_.as_deref().unwrap_or("Opaque") == "Opaque";
    if ours && same_data {
        return CopyAction::Unchanged;
    }
    if !opaque {
        // The type of a Secret is immutable.
        return CopyAction::Conflict(format!(
            "Secret {name} exists with type {}",
            existing.type_.as_deref().unwrap_or_default()
        ));
    }
    CopyAction::Replace(adopted_kubeconfig_copy(existing, owner, data))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use std::collections::{BTreeMap, BTreeSet};

    use k8s_openapi::ByteString;

    use super::*;
    use crate::api::common::ClusterType;
    use crate::api::common::LocalRef;
    use crate::api::instance::ClusterInstanceStatus;
    use crate::api::instance::InstancePhase;
    use crate::api::labels::{MANAGED_BY, MANAGED_BY_OPERATOR, POOL};
    use crate::api::lease::fixtures::lease;
    use crate::resources::lease::kubeconfig_data;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(secs).unwrap()
    }

    fn now() -> Time {
        Time(at(1_700_000_000))
    }

    fn instance(name: &str, pool: &str, ready: bool) -> ClusterInstance {
        let mut i: ClusterInstance = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterInstance",
            "metadata": {"name": name, "namespace": "ns",
                         "labels": {POOL: pool, MANAGED_BY: MANAGED_BY_OPERATOR}},
            "spec": {"type": "crc", "poolRef": {"name": pool},
                     "template": {"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}},
        }))
        .unwrap();
        i.status = Some(ClusterInstanceStatus {
            phase: Some(if ready {
                InstancePhase::Ready
            } else {
                InstancePhase::Provisioning
            }),
            kubeconfig_secret_ref: ready.then(|| LocalRef::new(format!("{name}-kubeconfig"))),
            ocp_version: Some("4.22.7".into()),
            api_endpoint: Some(format!("https://api.{name}.example")),
            ..ClusterInstanceStatus::default()
        });
        i
    }

    fn bound_condition(status: &ClusterLeaseStatus) -> (&str, &str) {
        let c = conditions::find(&status.conditions, types::BOUND).unwrap();
        (c.status.as_str(), c.reason.as_str())
    }

    #[test]
    fn binds_first_ready_unclaimed_instance_of_its_pool() {
        let l = lease("l", None, None);
        let mut deleting = instance("p-0", "p", true);
        deleting.metadata.deletion_timestamp = Some(now());
        let mut foreign = instance("a-0", "other", true);
        foreign.metadata.name = Some("a-0".into());
        let mut unmanaged = instance("b-0", "p", true);
        unmanaged.labels_mut().remove(MANAGED_BY);
        let instances = [
            instance("p-4", "p", true),
            deleting,
            foreign,
            unmanaged,
            instance("p-1", "p", false),
            instance("p-2", "p", true),
            instance("p-3", "p", true),
        ];
        let other_lease = lease("x", Some(LeasePhase::Bound), Some("p-2"));
        let leases = [l.clone(), other_lease];
        let d = decide_bind(&l, NamespaceState::Enabled, &instances, &leases, now());
        let BindDecision::Bind {
            instance,
            source_secret,
            status,
        } = d
        else {
            panic!("expected a bind, got {d:?}");
        };
        assert_eq!(instance, "p-3");
        assert_eq!(source_secret, "p-3-kubeconfig");
        assert_eq!(status.phase, Some(LeasePhase::Bound));
        assert_eq!(status.instance_ref, Some(LocalRef::new("p-3")));
        assert_eq!(
            status.kubeconfig_secret_ref,
            Some(LocalRef::new("l-kubeconfig"))
        );
        assert_eq!(status.ocp_version.as_deref(), Some("4.22.7"));
        assert_eq!(status.topology, Some(ClusterType::Crc));
        assert_eq!(
            status.api_endpoint.as_deref(),
            Some("https://api.p-3.example")
        );
        assert_eq!(status.bound_time, Some(now()));
        assert_eq!(bound_condition(&status), ("True", reasons::INSTANCE_BOUND));
    }

    #[test]
    fn an_empty_pool_ref_binds_nothing() {
        // Go clients write an unset reference as `{}`; a standalone instance has `poolRef: {}`
        // too, and a lease naming no pool must not take it.
        let mut l = lease("l", None, None);
        l.spec.pool_ref = LocalRef::default();
        let mut standalone = instance("s", "", true);
        standalone.spec.pool_ref = Some(LocalRef::default());
        let d = decide_bind(&l, NamespaceState::Enabled, &[standalone], &[], now());
        let BindDecision::Wait(status) = d else {
            panic!("expected a wait, got {d:?}");
        };
        assert_eq!(status.phase, Some(LeasePhase::Pending));
        assert_eq!(bound_condition(&status), ("False", reasons::POOL_NOT_SET));
    }

    #[test]
    fn empty_refs_in_status_name_nothing() {
        let l = lease("l", Some(LeasePhase::Bound), Some(""));
        assert_eq!(l.instance(), None);
        assert!(claimed(&[l]).is_empty());
        let mut ready = instance("p-0", "p", true);
        ready.status.as_mut().unwrap().kubeconfig_secret_ref = Some(LocalRef::default());
        assert_eq!(ready.bindable(), None);
    }

    #[test]
    fn deleting_leases_still_claim_their_instance() {
        let l = lease("l", None, None);
        let mut going = lease("x", Some(LeasePhase::Bound), Some("p-0"));
        going.metadata.deletion_timestamp = Some(now());
        let d = decide_bind(
            &l,
            NamespaceState::Enabled,
            &[instance("p-0", "p", true)],
            &[going],
            now(),
        );
        let BindDecision::Wait(status) = d else {
            panic!("expected to wait, got {d:?}");
        };
        assert_eq!(status.phase, Some(LeasePhase::Pending));
        assert_eq!(
            bound_condition(&status),
            ("False", reasons::WAITING_FOR_CAPACITY)
        );
    }

    #[test]
    fn waits_without_capacity_and_keeps_the_transition_time() {
        let l = lease("l", None, None);
        let first = decide_bind(
            &l,
            NamespaceState::Enabled,
            &[instance("p-0", "p", false)],
            &[],
            now(),
        );
        let BindDecision::Wait(status) = first else {
            panic!("expected to wait, got {first:?}");
        };
        let mut again = l.clone();
        again.status = Some(status.clone());
        let later = Time(at(1_700_000_100));
        let BindDecision::Wait(second) =
            decide_bind(&again, NamespaceState::Enabled, &[], &[], later)
        else {
            panic!("expected to wait");
        };
        assert_eq!(second, status, "an unchanged status is not rewritten");
    }

    #[test]
    fn terminating_namespace_blocks_binding_disabled_does_not() {
        let l = lease("l", None, None);
        let ready = [instance("p-0", "p", true)];
        for (state, reason) in [
            (NamespaceState::Terminating, reasons::NAMESPACE_TERMINATING),
            (NamespaceState::Missing, reasons::NAMESPACE_UNAVAILABLE),
        ] {
            let d = decide_bind(&l, state, &ready, &[], now());
            let BindDecision::Wait(status) = d else {
                panic!("expected to wait, got {d:?}");
            };
            assert_eq!(bound_condition(&status), ("False", reason));
        }
        let d = decide_bind(&l, NamespaceState::Disabled, &ready, &[], now());
        assert!(matches!(d, BindDecision::Bind { .. }), "{d:?}");
    }

    #[test]
    fn a_bound_or_deleting_lease_is_not_bound_again() {
        let ready = [instance("p-0", "p", true)];
        let b = lease("l", Some(LeasePhase::Bound), Some("p-1"));
        assert_eq!(
            decide_bind(&b, NamespaceState::Enabled, &ready, &[], now()),
            BindDecision::NotPending
        );
        let mut d = lease("l", None, None);
        d.metadata.deletion_timestamp = Some(now());
        assert_eq!(
            decide_bind(&d, NamespaceState::Enabled, &ready, &[], now()),
            BindDecision::NotPending
        );
    }

    #[test]
    fn a_lease_claims_the_instance_it_names_until_it_is_deleting() {
        let mut deleting = lease("a", Some(LeasePhase::Bound), Some("p-0"));
        deleting.metadata.deletion_timestamp = Some(now());
        let leases = [
            deleting,
            lease("b", Some(LeasePhase::Bound), Some("p-1")),
            lease("c", Some(LeasePhase::Pending), None),
        ];
        let claims: Vec<_> = leases.iter().map(ClusterLease::claim).collect();
        assert_eq!(claims, [None, Some("p-1"), None]);
        assert_eq!(
            claimed(&leases),
            BTreeSet::from(["p-0".to_owned(), "p-1".to_owned()]),
            "a deleting lease still holds its instance"
        );
    }

    fn secret(data: Option<BTreeMap<String, ByteString>>, owner_uid: Option<&str>) -> Secret {
        let mut s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "l-kubeconfig", "namespace": "ns", "resourceVersion": "7"},
            "type": "Opaque",
        }))
        .unwrap();
        s.data = data;
        if let Some(uid) = owner_uid {
            s.metadata.owner_references = Some(vec![
                serde_json::from_value(json!({"apiVersion": "v1", "kind": "Other",
                    "name": "o", "uid": uid, "controller": true}))
                .unwrap(),
            ]);
        }
        s
    }

    #[test]
    fn kubeconfig_copy_is_created_owned_by_the_lease() {
        let l = lease("l", None, None);
        let source = secret(Some(kubeconfig_data("cfg")), None);
        let CopyAction::Create(s) = copy_kubeconfig(&l, "p-0-kubeconfig", Some(&source), None)
        else {
            panic!("expected a create");
        };
        assert_eq!(s.name_any(), "l-kubeconfig");
        assert_eq!(s.namespace().as_deref(), Some("ns"));
        assert_eq!(s.type_.as_deref(), Some("Opaque"));
        assert_eq!(s.data, Some(kubeconfig_data("cfg")));
        let owner = &s.owner_references()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("ClusterLease", "uid-l", Some(true))
        );
    }

    #[test]
    fn kubeconfig_copy_missing_source_or_key_is_unavailable() {
        let l = lease("l", None, None);
        assert!(matches!(
            copy_kubeconfig(&l, "p-0-kubeconfig", None, None),
            CopyAction::Unavailable(_)
        ));
        let wrong_key = secret(
            Some(BTreeMap::from([("other".into(), ByteString(vec![1]))])),
            None,
        );
        assert!(matches!(
            copy_kubeconfig(&l, "p-0-kubeconfig", Some(&wrong_key), None),
            CopyAction::Unavailable(_)
        ));
    }

    #[test]
    fn kubeconfig_copy_refuses_a_foreign_controller_and_adopts_or_updates_others() {
        let l = lease("l", None, None);
        let source = secret(Some(kubeconfig_data("new")), None);
        let foreign = secret(Some(kubeconfig_data("old")), Some("someone-else"));
        assert!(matches!(
            copy_kubeconfig(&l, "src", Some(&source), Some(&foreign)),
            CopyAction::Conflict(_)
        ));
        let ours_same = secret(Some(kubeconfig_data("new")), Some("uid-l"));
        assert_eq!(
            copy_kubeconfig(&l, "src", Some(&source), Some(&ours_same)),
            CopyAction::Unchanged
        );
        let ours_stale = secret(Some(kubeconfig_data("old")), Some("uid-l"));
        let CopyAction::Replace(r) = copy_kubeconfig(&l, "src", Some(&source), Some(&ours_stale))
        else {
            panic!("expected a replace");
        };
        assert_eq!(r.data, Some(kubeconfig_data("new")));
        assert_eq!(r.resource_version().as_deref(), Some("7"));
        assert_eq!(r.owner_references().len(), 1);
        let unowned = secret(Some(kubeconfig_data("old")), None);
        let CopyAction::Replace(r) = copy_kubeconfig(&l, "src", Some(&source), Some(&unowned))
        else {
            panic!("expected an adoption");
        };
        assert_eq!(r.owner_references()[0].uid, "uid-l");
        let mut typed = secret(Some(kubeconfig_data("old")), None);
        typed.type_ = Some("kubernetes.io/tls".into());
        assert!(matches!(
            copy_kubeconfig(&l, "src", Some(&source), Some(&typed)),
            CopyAction::Conflict(_)
        ));
    }
}
