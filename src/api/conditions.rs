//! Condition types and reasons, and the pure helper that merges a condition into a list.
//!
//! Reasons are part of the API: users alert on them and the docs explain each one
//! (`docs/operations.md`). Every error enum in the operator maps its variants to one of these.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

/// Condition types.
pub mod types {
    /// The object is usable (bundle: consumers may clone it; instance: guest handed off).
    pub const READY: &str = "Ready";
    // CRCBundle build stages (`docs/operations.md`, "CRCBundle (build source)"), one condition
    // each.
    pub const PREPARED: &str = "Prepared";
    pub const INSTALLED: &str = "Installed";
    pub const CUSTOMIZED: &str = "Customized";
    pub const SEALED: &str = "Sealed";
    pub const PUBLISHED: &str = "Published";
    pub const VALIDATED: &str = "Validated";
    // ClusterInstance.
    pub const VERSION_MISMATCH: &str = "VersionMismatch";
    /// The bundle the instance is bound to now publishes another disk (rebuilt under its name).
    pub const STALE: &str = "Stale";
    pub const GUEST_API_REACHABLE: &str = "GuestAPIReachable";
    pub const CRC_AGENT: &str = "CRCAgent";
    pub const TERMINATING: &str = "Terminating";
    pub const PROVISIONING_ALLOWED: &str = "ProvisioningAllowed";
    pub const HYPER_CONVERGED_READY: &str = "HyperConvergedReady";
    pub const MULTI_CLUSTER_ENGINE_READY: &str = "MultiClusterEngineReady";
    // ClusterPool.
    pub const CAPACITY_AVAILABLE: &str = "CapacityAvailable";
    /// The bundle the pool's template selects is Ready (its instances wait for it otherwise).
    pub const BUNDLE_AVAILABLE: &str = "BundleAvailable";
    // ClusterLease.
    pub const BOUND: &str = "Bound";
}

/// Condition reasons.
pub mod reasons {
    // CRCBundle, download source (`docs/operations.md`, "CRCBundle (download source)").
    /// Observed, no source work has started yet.
    pub const PENDING: &str = "Pending";
    pub const PREPARING: &str = "Preparing";
    pub const PREP_JOB_FAILED: &str = "PrepJobFailed";
    pub const BUNDLE_READY: &str = "BundleReady";
    /// ClusterPool `BundleAvailable=False`.
    pub const BUNDLE_NOT_READY: &str = "BundleNotReady";
    pub const BUNDLE_NOT_FOUND: &str = "BundleNotFound";
    /// The operator's configuration does not let pools have a bundle made for this crcVersion.
    pub const CRC_VERSION_NOT_ALLOWED: &str = "CRCVersionNotAllowed";
    /// Event: a bundle made for pools is deleted after its grace with no pool or instance.
    pub const BUNDLE_UNREFERENCED: &str = "BundleUnreferenced";
    pub const REPROVISIONING: &str = "Reprovisioning";
    // ClusterInstance (`docs/operations.md`, "Provisioning, in order") and topology.
    pub const TOPOLOGY_UNSUPPORTED: &str = "TopologyUnsupported";
    /// Message of [`TOPOLOGY_UNSUPPORTED`], for an instance or a pool of type `hcp`.
    pub const TOPOLOGY_UNSUPPORTED_MESSAGE: &str =
        "hosted control planes are not supported by guestcluster; use type crc";
    pub const INVALID_PULL_SECRET: &str = "InvalidPullSecret";
    pub const MISSING_BUNDLE_SSH_KEY: &str = "MissingBundleSSHKey";
    pub const BOOT_KEY_UNAVAILABLE: &str = "BootKeyUnavailable";
    pub const API_ENDPOINT_CONFLICT: &str = "APIEndpointConflict";
    pub const AGENT_JOB_FAILED: &str = "AgentJobFailed";
    pub const RECONCILE_ERROR: &str = "ReconcileError";
    // What an actor was doing when the API server refused or failed a request
    // (`actors::runtime::api_error::Doing`): the reason of the reconcile-error metric.
    pub const READ_FAILED: &str = "ReadFailed";
    pub const STATUS_WRITE_FAILED: &str = "StatusWriteFailed";
    pub const FINALIZER_UPDATE_FAILED: &str = "FinalizerUpdateFailed";
    pub const CREATE_FAILED: &str = "CreateFailed";
    pub const UPDATE_FAILED: &str = "UpdateFailed";
    pub const DELETE_FAILED: &str = "DeleteFailed";
    pub const RESOURCE_OWNERSHIP_CONFLICT: &str = "ResourceOwnershipConflict";
    pub const CRC_BACKING_PENDING: &str = "CRCBackingPending";
    /// KubeVirt says why the instance's VM cannot start (a disk QEMU cannot open, a missing
    /// volume, a refused VMI); it keeps retrying.
    pub const VM_START_BLOCKED: &str = "VMStartBlocked";
    pub const GUEST_API_UNAVAILABLE: &str = "GuestAPIUnavailable";
    pub const KUBECONFIG_UNAVAILABLE: &str = "KubeconfigUnavailable";
    pub const VMI_UNAVAILABLE: &str = "VMIUnavailable";
    pub const VMI_REPLACED: &str = "VMIReplaced";
    pub const VMI_IDENTITY_UNKNOWN: &str = "VMIIdentityUnknown";
    pub const BACKING_RESOURCES_AVAILABLE: &str = "BackingResourcesAvailable";
    pub const OCP_VERSION_MISMATCH: &str = "OCPVersionMismatch";
    pub const OCP_VERSION_MATCHES: &str = "OCPVersionMatches";
    /// `Stale`: the bound bundle publishes the disk the instance was cloned from, or another.
    pub const BUNDLE_CURRENT: &str = "BundleCurrent";
    pub const BUNDLE_REBUILT: &str = "BundleRebuilt";
    pub const GUEST_API_READY: &str = "GuestAPIReady";
    pub const CLEANUP_IN_PROGRESS: &str = "CleanupInProgress";
    pub const CLEANUP_ERROR: &str = "CleanupError";
    pub const CLEANUP_TIMED_OUT: &str = "CleanupTimedOut";
    // `CRCAgent` diagnostics (`docs/operations.md`, "Provisioning, in order"); the reason is
    // mirrored into `Ready`.
    pub const HANDOFF_RECEIVED: &str = "HandoffReceived";
    pub const HANDOFF_PENDING: &str = "HandoffPending";
    pub const HANDOFF_INVALID: &str = "HandoffInvalid";
    pub const AGENT_PREREQUISITE_MISSING: &str = "AgentPrerequisiteMissing";
    pub const AGENT_POD_BLOCKED: &str = "AgentPodBlocked";
    pub const AGENT_RETRYING: &str = "AgentRetrying";
    pub const AGENT_POD_CREATION_FAILED: &str = "AgentPodCreationFailed";
    pub const AGENT_POD_PENDING: &str = "AgentPodPending";
    pub const AGENT_WORKING: &str = "AgentWorking";
    // Namespace policy (`docs/operations.md`, "Gates").
    pub const NAMESPACE_UNAVAILABLE: &str = "NamespaceUnavailable";
    pub const NAMESPACE_TERMINATING: &str = "NamespaceTerminating";
    pub const NAMESPACE_DISABLED: &str = "NamespaceDisabled";
    pub const NAMESPACE_ENABLED: &str = "NamespaceEnabled";
    pub const PROVISIONING_AUTHORIZED: &str = "ProvisioningAuthorized";
    // ClusterPool `CapacityAvailable` (`docs/operations.md`, "ClusterPool").
    pub const MAX_SIZE_TOO_SMALL: &str = "MaxSizeTooSmall";
    pub const AT_CAPACITY: &str = "AtCapacity";
    pub const CAPACITY_SUFFICIENT: &str = "CapacitySufficient";
    // ClusterLease `Bound` (`docs/operations.md`, "ClusterLease"); errors use
    // `KubeconfigUnavailable`, `ResourceOwnershipConflict` and the namespace reasons.
    pub const WAITING_FOR_CAPACITY: &str = "WaitingForCapacity";
    /// `spec.poolRef.name` is empty (Go clients may write `poolRef: {}`).
    pub const POOL_NOT_SET: &str = "PoolNotSet";
    pub const INSTANCE_BOUND: &str = "InstanceBound";
    // ClusterLease `Bound`: binding is asked of the pool's actor, which is missing.
    pub const POOL_NOT_FOUND: &str = "PoolNotFound";
    pub const POOL_UNAVAILABLE: &str = "PoolUnavailable";
    // Platform gate (`docs/operations.md`, "Gates").
    pub const OPERAND_READY: &str = "OperandReady";
    pub const OPERAND_NOT_FOUND: &str = "OperandNotFound";
    pub const MULTIPLE_OPERANDS_FOUND: &str = "MultipleOperandsFound";
    pub const OPERAND_NOT_READY: &str = "OperandNotReady";
    pub const STATUS_STALE: &str = "StatusStale";
    // Build source (`docs/operations.md`, "CRCBundle (build source)").
    pub const RESOURCE_REPLACED: &str = "ResourceReplaced";
    pub const RESOURCE_LOST: &str = "ResourceLost";
    /// Admit: a referenced Secret or ConfigMap does not exist.
    pub const INPUT_NOT_FOUND: &str = "InputNotFound";
    /// Admit: a referenced Secret or ConfigMap does not consent to this bundle's use (its label
    /// `guestcluster.opdev.io/build-input` is missing or names another bundle).
    pub const INPUT_NOT_SHARED: &str = "InputNotShared";
    /// Admit: the release image's repository is not one the operator builds from
    /// (`--build-release-repositories`).
    pub const RELEASE_NOT_ALLOWED: &str = "ReleaseNotAllowed";
    /// Admit: the referenced manifests together exceed what the installer Secret has room for.
    pub const INPUTS_TOO_LARGE: &str = "InputsTooLarge";
    /// Admit: a referenced object lacks the key the build reads (or has no data at all).
    pub const INPUT_KEY_MISSING: &str = "InputKeyMissing";
    /// Admit: a manifest key is not a stream of named Kubernetes objects.
    pub const INVALID_MANIFEST: &str = "InvalidManifest";
    /// An input changed after its digest was recorded in `status.inputs`.
    pub const INPUTS_CHANGED: &str = "InputsChanged";
    /// A build attempt is working on a stage; the message says which and on what.
    pub const BUILDING: &str = "Building";
    /// The installer Job failed; the message carries its termination message.
    pub const INSTALLER_JOB_FAILED: &str = "InstallerJobFailed";
    /// A build helper Job failed; the message carries its step and termination message.
    pub const HELPER_JOB_FAILED: &str = "HelperJobFailed";
    /// Customize: the guest API refused one of the user's post-install manifests; the message
    /// names the object and carries the server's message.
    pub const MANIFEST_REJECTED: &str = "ManifestRejected";
    /// The disk Job failed; the message carries its termination message.
    pub const DISK_JOB_FAILED: &str = "DiskJobFailed";
    /// The build ran past `spec.build.deadline`.
    pub const BUILD_DEADLINE_EXCEEDED: &str = "BuildDeadlineExceeded";
    /// A stage finished.
    pub const STAGE_SUCCEEDED: &str = "StageSucceeded";
    // Event-only reasons (notable decisions, not conditions).
    /// The root disk was made larger than `rootVolumeSize` to hold the golden disk.
    pub const ROOT_VOLUME_RAISED: &str = "RootVolumeRaised";
}

/// A kind whose status carries conditions and the generation they describe.
pub trait Conditioned {
    /// The status conditions (empty without a status).
    fn conditions(&self) -> &[Condition];
    /// `status.observedGeneration`.
    fn observed_generation(&self) -> Option<i64>;
}

macro_rules! conditioned {
    ($($kind:ty),*) => {$(
        impl Conditioned for $kind {
            fn conditions(&self) -> &[Condition] {
                self.status.as_ref().map_or(&[], |s| s.conditions.as_slice())
            }
            fn observed_generation(&self) -> Option<i64> {
                self.status.as_ref().and_then(|s| s.observed_generation)
            }
        }
    )*};
}

conditioned!(super::CRCBundle, super::ClusterInstance, super::ClusterPool);

/// A lease has no `status.observedGeneration`: its `Bound` condition's stands in.
impl Conditioned for super::ClusterLease {
    fn conditions(&self) -> &[Condition] {
        self.status
            .as_ref()
            .map_or(&[], |s| s.conditions.as_slice())
    }
    fn observed_generation(&self) -> Option<i64> {
        find(self.conditions(), types::BOUND).and_then(|c| c.observed_generation)
    }
}

/// Whether `object` has condition `type_` with `status` and `reason`, recorded (like the status
/// itself) for the object's current generation.
pub fn holds<K: Conditioned + kube::Resource>(
    object: &K,
    type_: &str,
    status: &str,
    reason: &str,
) -> bool {
    let generation = object.meta().generation;
    find(object.conditions(), type_).is_some_and(|c| {
        c.status == status && c.reason == reason && c.observed_generation == generation
    }) && object.observed_generation() == generation
}

/// `status` value of a condition.
pub fn status_str(status: bool) -> &'static str {
    if status { "True" } else { "False" }
}

/// A condition stamped with the generation it describes.
pub fn new(
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    observed_generation: Option<i64>,
    now: Time,
) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: status_str(status).to_owned(),
        reason: reason.to_owned(),
        message: message.into(),
        observed_generation,
        last_transition_time: now,
    }
}

/// Puts `cond` into `conditions`, replacing the one of the same type.
///
/// `lastTransitionTime` only moves when the status flips, as Kubernetes API conventions require;
/// a changed reason or message alone is not a transition.
pub fn set(conditions: &mut Vec<Condition>, mut cond: Condition) {
    match conditions.iter_mut().find(|c| c.type_ == cond.type_) {
        Some(existing) => {
            if existing.status == cond.status {
                cond.last_transition_time = existing.last_transition_time.clone();
            }
            *existing = cond;
        }
        None => conditions.push(cond),
    }
}

/// Drops the condition of the given type, if present.
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) {
    conditions.retain(|c| c.type_ != type_);
}

/// The condition of the given type, if present.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of the given type is present with status `True`.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    #[test]
    fn transition_time_moves_only_when_status_flips() {
        let mut conds = vec![];
        set(
            &mut conds,
            new(types::READY, false, reasons::PENDING, "a", Some(1), at(10)),
        );
        set(
            &mut conds,
            new(
                types::READY,
                false,
                reasons::PREPARING,
                "b",
                Some(2),
                at(20),
            ),
        );
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].reason, reasons::PREPARING);
        assert_eq!(conds[0].observed_generation, Some(2));
        assert_eq!(conds[0].last_transition_time, at(10));

        set(
            &mut conds,
            new(
                types::READY,
                true,
                reasons::BUNDLE_READY,
                "c",
                Some(2),
                at(30),
            ),
        );
        assert_eq!(conds[0].last_transition_time, at(30));
        assert!(is_true(&conds, types::READY));
        assert!(!is_true(&conds, types::VALIDATED));
    }

    #[test]
    fn other_types_are_kept() {
        let mut conds = vec![];
        set(
            &mut conds,
            new(types::READY, false, reasons::PENDING, "", None, at(1)),
        );
        set(
            &mut conds,
            new(types::PREPARED, true, "Done", "", None, at(2)),
        );
        assert_eq!(conds.len(), 2);
        assert_eq!(
            find(&conds, types::PREPARED).map(|c| c.reason.as_str()),
            Some("Done")
        );
    }
}
