//! Typed KubeVirt objects (`kubevirt.io/v1`): the fields of `VirtualMachine` and
//! `VirtualMachineInstance` the operator writes (VM profiles) or reads (status), hand-written
//! from the upstream API.
//!
//! This is **not** the whole upstream API. Deserializing an object drops the fields not modelled
//! here, so never write back an object you read (use server-side apply or a patch of the fields
//! you own). The derives set `schema = "disabled"`: these kinds are KubeVirt's, never installed
//! by us (tests install CRDs generated from the upstream API types, `testenv/src/external-crds`,
//! so a misspelled field is pruned there as on a real cluster).
//!
//! Enums read from the cluster carry an `Unknown` catch-all, so an unexpected value from a newer
//! KubeVirt does not make the whole object unreadable; the catch-all is not meant to be written.

mod domain;
mod vm;
mod vmi;

pub use domain::*;
pub use vm::*;
pub use vmi::*;

/// API group of VirtualMachine and VirtualMachineInstance.
pub const GROUP: &str = "kubevirt.io";
/// API version of VirtualMachine and VirtualMachineInstance.
pub const VERSION: &str = "v1";

/// Labels and annotations KubeVirt puts on VMIs and virt-launcher pods.
pub mod labels {
    /// `kubevirt.io=virt-launcher` marks every virt-launcher pod.
    pub const APP: &str = "kubevirt.io";
    /// Value of [`APP`] on virt-launcher pods.
    pub const VIRT_LAUNCHER: &str = "virt-launcher";
    /// On a virt-launcher pod: the UID of the VMI it runs.
    pub const CREATED_BY: &str = "kubevirt.io/created-by";
    /// Annotation on a virt-launcher pod: the name of the VMI (libvirt domain) it runs.
    pub const DOMAIN_ANNOTATION: &str = "kubevirt.io/domain";
}

/// Finalizers KubeVirt sets.
pub mod finalizers {
    /// On every VMI: removed by virt-controller once the guest is stopped and the virt-launcher
    /// pod is gone, so a deleted VMI stays visible (and its disks held) until then.
    pub const VMI_FOREGROUND_DELETE: &str = "kubevirt.io/foregroundDeleteVirtualMachine";
    /// On every VirtualMachine: removed once its VMI is gone.
    pub const VM_CONTROLLER: &str = "kubevirt.io/virtualMachineControllerFinalize";
}

/// Condition types of VirtualMachines and VMIs.
pub mod condition_types {
    /// VMI: the guest runs (KubeVirt copies this onto the VM).
    pub const READY: &str = "Ready";
    /// VMI: `False` when virt-controller cannot set the VMI up (e.g. reason `FailedPvcNotFound`).
    pub const SYNCHRONIZED: &str = "Synchronized";
    /// VMI: whether every DataVolume it uses is populated.
    pub const DATA_VOLUMES_READY: &str = "DataVolumesReady";
    /// VMI: the launcher pod's scheduling, mirrored from the pod.
    pub const POD_SCHEDULED: &str = "PodScheduled";
    /// VM: the last start or stop attempt failed.
    pub const FAILURE: &str = "Failure";
}

/// Condition reasons KubeVirt uses that the operator may look at.
pub mod condition_reasons {
    /// `Synchronized=False`: a volume's PVC (or DataVolume) does not exist.
    pub const FAILED_PVC_NOT_FOUND: &str = "FailedPvcNotFound";
    /// VM `Ready=False`: there is no VMI.
    pub const VMI_NOT_EXISTS: &str = "VMINotExists";
    /// VM `Ready=False`: the VMI has no Ready condition yet.
    pub const VMI_CONDITION_MISSING: &str = "VMIConditionMissing";
    /// `PodScheduled=False`.
    pub const UNSCHEDULABLE: &str = "Unschedulable";
}

#[cfg(test)]
mod tests;
