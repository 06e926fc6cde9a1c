//! The gates a ClusterInstance passes before any backing object exists (`docs/operations.md`,
//! "Gates"): topology, namespace policy and platform. Pure decisions: the actor
//! (`instance/mod.rs`) observes, these functions decide the next status, the actor records it.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::actors::platform::{NamespaceState, PlatformGate};
use crate::api::common::ClusterType;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{
    ClusterInstance, ClusterInstanceStatus, InstancePhase, ProvisioningStatus,
};

/// What the actor observed for one reconcile (from the shared views); the platform gate is only
/// read once the namespace policy allows provisioning.
#[derive(Clone, Debug)]
pub struct Observed {
    pub namespace: NamespaceState,
    pub platform: Option<PlatformGate>,
}

/// The next status. A blocked gate needs no timer: the namespace and the platform are watched,
/// and a change of either wakes the instances it concerns ([`crate::actors::runtime::views`]).
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    pub status: ClusterInstanceStatus,
    /// Every gate passed: the CRC backing may proceed.
    pub open: bool,
}

/// Message of `Ready=False reason=TopologyUnsupported`.
pub const HCP_MESSAGE: &str = reasons::TOPOLOGY_UNSUPPORTED_MESSAGE;

/// Whether the platform gate `gate` would change what `instance` recorded: its
/// `HyperConvergedReady` condition differs. An instance without that condition has not reached
/// the platform gate (its first pass, or the namespace policy, comes first) and does not depend on
/// the platform yet.
pub fn platform_outdated(instance: &ClusterInstance, gate: &PlatformGate) -> bool {
    let Some(recorded) = instance
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, types::HYPER_CONVERGED_READY))
    else {
        return false;
    };
    let status = if gate.ready { "True" } else { "False" };
    recorded.status != status || recorded.reason != gate.reason || recorded.message != gate.message
}

/// The next status of an instance that exists, is not being deleted and carries our finalizer.
pub fn decide(instance: &ClusterInstance, observed: &Observed, now: Time) -> Decision {
    let mut status = instance.status.clone().unwrap_or_default();
    let generation = instance.metadata.generation;
    let ns = instance.metadata.namespace.as_deref().unwrap_or_default();
    status.observed_generation = generation;
    let previous_phase = status.phase;
    status.phase = Some(InstancePhase::Provisioning);
    let cond = |type_: &str, ok: bool, reason: &str, message: &str| {
        conditions::new(type_, ok, reason, message, generation, now.clone())
    };

    if instance.spec.type_ == ClusterType::Hcp {
        conditions::set(
            &mut status.conditions,
            cond(
                types::READY,
                false,
                reasons::TOPOLOGY_UNSUPPORTED,
                HCP_MESSAGE,
            ),
        );
        return Decision {
            status,
            open: false,
        };
    }

    // Namespace policy: missing or terminating stops new work even once authorized.
    let blocked = match observed.namespace {
        NamespaceState::Disabled if status.provisioning.is_some() => None,
        state => state.refusal(ns),
    };
    if let Some((reason, message)) = blocked {
        for type_ in [types::PROVISIONING_ALLOWED, types::READY] {
            conditions::set(&mut status.conditions, cond(type_, false, reason, &message));
        }
        return Decision {
            status,
            open: false,
        };
    }
    // Durable: once written, `startedAt` never changes and the label no longer matters.
    status
        .provisioning
        .get_or_insert_with(|| ProvisioningStatus {
            started_at: now.clone(),
            legacy: None,
        });
    conditions::set(
        &mut status.conditions,
        cond(
            types::PROVISIONING_ALLOWED,
            true,
            reasons::PROVISIONING_AUTHORIZED,
            &format!("provisioning authorized by the policy of namespace {ns}"),
        ),
    );

    let Some(gate) = observed.platform.clone() else {
        // Not observed (the caller reads the platform only once provisioning is allowed).
        return Decision {
            status,
            open: false,
        };
    };
    conditions::set(
        &mut status.conditions,
        cond(
            types::HYPER_CONVERGED_READY,
            gate.ready,
            gate.reason,
            &gate.message,
        ),
    );
    if !gate.ready {
        conditions::set(
            &mut status.conditions,
            cond(
                types::READY,
                false,
                gate.reason,
                &format!("Platform dependencies are not ready: {}", gate.message),
            ),
        );
        return Decision {
            status,
            open: false,
        };
    }
    // The gates are open: the CRC backing decides the phase and `Ready` from here.
    status.phase = previous_phase.or(Some(InstancePhase::Provisioning));
    Decision { status, open: true }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::actors::platform::fixtures::*;
    use crate::actors::platform::{Platform, platform_gate};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn instance(type_: &str) -> ClusterInstance {
        let mut i: ClusterInstance = serde_json::from_value(json!({
            "apiVersion": "guestcluster.opdev.io/v1alpha1",
            "kind": "ClusterInstance",
            "metadata": {"name": "one", "namespace": "team", "generation": 3},
            "spec": {"type": type_, "template": {"crcVersion": "4.22.7", "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4}},
        }))
        .unwrap();
        i.metadata.generation = Some(3);
        i
    }

    fn observed(namespace: NamespaceState, platform: Option<Platform>) -> Observed {
        Observed {
            namespace,
            platform: platform.as_ref().map(platform_gate),
        }
    }

    fn reason_of(status: &ClusterInstanceStatus, type_: &str) -> (String, String) {
        let c = conditions::find(&status.conditions, type_)
            .unwrap_or_else(|| panic!("condition {type_} in {status:?}"));
        assert_eq!(c.observed_generation, Some(3));
        (c.status.clone(), c.reason.clone())
    }

    fn pair(status: &str, reason: &str) -> (String, String) {
        (status.to_owned(), reason.to_owned())
    }

    #[test]
    fn blocked_namespace_rows() {
        for (state, reason) in [
            (NamespaceState::Missing, reasons::NAMESPACE_UNAVAILABLE),
            (NamespaceState::Terminating, reasons::NAMESPACE_TERMINATING),
            (NamespaceState::Disabled, reasons::NAMESPACE_DISABLED),
        ] {
            let d = decide(&instance("crc"), &observed(state, None), at(10));
            assert_eq!(d.status.phase, Some(InstancePhase::Provisioning));
            assert_eq!(d.status.observed_generation, Some(3));
            assert_eq!(d.status.provisioning, None, "{state:?}");
            assert_eq!(
                reason_of(&d.status, types::PROVISIONING_ALLOWED),
                pair("False", reason)
            );
            assert_eq!(reason_of(&d.status, types::READY), pair("False", reason));
            assert!(conditions::find(&d.status.conditions, types::HYPER_CONVERGED_READY).is_none());
        }
        let d = decide(
            &instance("crc"),
            &observed(NamespaceState::Disabled, None),
            at(10),
        );
        let msg = &conditions::find(&d.status.conditions, types::READY)
            .unwrap()
            .message;
        assert!(msg.contains("guestcluster.opdev.io/enabled=true"), "{msg}");
    }

    #[test]
    fn enabled_namespace_authorizes_once() {
        let mut i = instance("crc");
        let d = decide(
            &i,
            &observed(NamespaceState::Enabled, Some(healthy_platform())),
            at(10),
        );
        assert_eq!(
            d.status.provisioning,
            Some(ProvisioningStatus {
                started_at: at(10),
                legacy: None,
            })
        );
        assert_eq!(
            reason_of(&d.status, types::PROVISIONING_ALLOWED),
            pair("True", reasons::PROVISIONING_AUTHORIZED)
        );
        // Later: startedAt never moves, and the label no longer matters.
        i.status = Some(d.status.clone());
        let again = decide(
            &i,
            &observed(NamespaceState::Enabled, Some(healthy_platform())),
            at(99),
        );
        assert_eq!(again.status, d.status, "settled status is not rewritten");
        let unlabelled = decide(
            &i,
            &observed(NamespaceState::Disabled, Some(healthy_platform())),
            at(99),
        );
        assert_eq!(unlabelled.status, d.status);
    }

    #[test]
    fn authorized_instance_still_stops_for_a_terminating_namespace() {
        let mut i = instance("crc");
        i.status = Some(
            decide(
                &i,
                &observed(NamespaceState::Enabled, Some(healthy_platform())),
                at(10),
            )
            .status,
        );
        for (state, reason) in [
            (NamespaceState::Terminating, reasons::NAMESPACE_TERMINATING),
            (NamespaceState::Missing, reasons::NAMESPACE_UNAVAILABLE),
        ] {
            let d = decide(&i, &observed(state, None), at(20));
            assert_eq!(
                reason_of(&d.status, types::PROVISIONING_ALLOWED),
                pair("False", reason)
            );
            assert_eq!(
                d.status.provisioning,
                Some(ProvisioningStatus {
                    started_at: at(10),
                    legacy: None,
                })
            );
        }
    }

    #[test]
    fn hcp_is_unsupported_and_nothing_else() {
        for state in [NamespaceState::Disabled, NamespaceState::Enabled] {
            let d = decide(&instance("hcp"), &observed(state, None), at(10));
            assert_eq!(d.status.phase, Some(InstancePhase::Provisioning));
            assert_eq!(d.status.observed_generation, Some(3));
            assert_eq!(d.status.provisioning, None);
            assert_eq!(d.status.conditions.len(), 1);
            assert_eq!(
                reason_of(&d.status, types::READY),
                pair("False", reasons::TOPOLOGY_UNSUPPORTED)
            );
            assert_eq!(d.status.conditions[0].message, HCP_MESSAGE);
        }
    }

    #[test]
    fn all_gates_pass_and_open_the_backing() {
        let d = decide(
            &instance("crc"),
            &observed(NamespaceState::Enabled, Some(healthy_platform())),
            at(10),
        );
        assert!(d.open);
        assert_eq!(d.status.phase, Some(InstancePhase::Provisioning));
        assert_eq!(
            reason_of(&d.status, types::HYPER_CONVERGED_READY),
            pair("True", reasons::OPERAND_READY)
        );
        assert!(conditions::find(&d.status.conditions, types::READY).is_none());
    }

    #[test]
    fn open_gates_keep_a_ready_phase() {
        let mut ready = instance("crc");
        ready.status = Some(ClusterInstanceStatus {
            phase: Some(InstancePhase::Ready),
            provisioning: Some(ProvisioningStatus {
                started_at: at(1),
                legacy: None,
            }),
            ..Default::default()
        });
        let d = decide(
            &ready,
            &observed(NamespaceState::Disabled, Some(healthy_platform())),
            at(10),
        );
        assert!(d.open);
        assert_eq!(d.status.phase, Some(InstancePhase::Ready));
    }

    #[test]
    fn platform_not_ready_blocks_with_its_reason() {
        let mut p = healthy_platform();
        p.cdi.clear();
        let d = decide(
            &instance("crc"),
            &observed(NamespaceState::Enabled, Some(p)),
            at(10),
        );
        assert_eq!(
            reason_of(&d.status, types::HYPER_CONVERGED_READY),
            pair("False", reasons::OPERAND_NOT_FOUND)
        );
        assert_eq!(
            reason_of(&d.status, types::READY),
            pair("False", reasons::OPERAND_NOT_FOUND)
        );
        let ready = conditions::find(&d.status.conditions, types::READY).unwrap();
        assert_eq!(
            ready.message,
            "Platform dependencies are not ready: CDI not found"
        );
        // Authorization is recorded before the platform gate.
        assert!(d.status.provisioning.is_some());
    }

    #[test]
    fn condition_transition_times_are_stable() {
        let mut i = instance("crc");
        i.status = Some(decide(&i, &observed(NamespaceState::Disabled, None), at(10)).status);
        let d = decide(&i, &observed(NamespaceState::Disabled, None), at(50));
        assert_eq!(Some(&d.status), i.status.as_ref());
        // Disabled → Enabled: ProvisioningAllowed flips, Ready stays False (time kept).
        let d = decide(
            &i,
            &observed(NamespaceState::Enabled, Some(healthy_platform())),
            at(60),
        );
        let allowed = conditions::find(&d.status.conditions, types::PROVISIONING_ALLOWED).unwrap();
        assert_eq!(allowed.last_transition_time, at(60));
        let ready = conditions::find(&d.status.conditions, types::READY).unwrap();
        assert_eq!(ready.last_transition_time, at(10));
    }

    /// A platform change wakes exactly the instances whose recorded gate it changes: not those
    /// that have not reached the gate, nor those that recorded this very outcome.
    #[test]
    fn a_platform_change_concerns_instances_whose_recorded_gate_differs() {
        let healthy = platform_gate(&healthy_platform());
        let missing = platform_gate(&Platform::default());
        let mut fresh = instance("crc");
        assert!(!platform_outdated(&fresh, &healthy), "no status yet");
        fresh.status =
            Some(decide(&fresh, &observed(NamespaceState::Disabled, None), at(10)).status);
        assert!(
            !platform_outdated(&fresh, &healthy),
            "blocked by the namespace"
        );

        let mut blocked = instance("crc");
        blocked.status = Some(
            decide(
                &blocked,
                &observed(NamespaceState::Enabled, Some(Platform::default())),
                at(10),
            )
            .status,
        );
        assert!(!platform_outdated(&blocked, &missing));
        assert!(platform_outdated(&blocked, &healthy));

        let mut open = instance("crc");
        open.status = Some(
            decide(
                &open,
                &observed(NamespaceState::Enabled, Some(healthy_platform())),
                at(10),
            )
            .status,
        );
        assert!(!platform_outdated(&open, &healthy));
        assert!(
            platform_outdated(&open, &missing),
            "a Ready instance sees the loss"
        );
    }
}
