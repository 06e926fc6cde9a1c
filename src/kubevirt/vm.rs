//! `VirtualMachine`: the spec the operator writes and the status KubeVirt reports.

use super::*;
use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::CustomResource;
use serde::{Deserialize, Serialize};

// ---------------------------------------------------------------------------------------------
// VirtualMachine
// ---------------------------------------------------------------------------------------------

/// A VirtualMachine: keeps (or not) a VirtualMachineInstance running from its template.
#[derive(CustomResource, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "kubevirt.io",
    version = "v1",
    kind = "VirtualMachine",
    plural = "virtualmachines",
    namespaced,
    status = "VirtualMachineStatus",
    schema = "disabled",
    derive = "PartialEq"
)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineSpec {
    /// Whether and when a VMI runs. Takes precedence; set this or `running`, not both.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<RunStrategy>,
    /// Legacy switch: `true` = `Always`, `false` = `Halted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<bool>,
    /// What every VMI of this VM is created from.
    #[serde(default)]
    pub template: VirtualMachineInstanceTemplateSpec,
}

impl VirtualMachineSpec {
    /// The run strategy in force, as KubeVirt reads it: `runStrategy`, else `running`
    /// (`true` = `Always`), else `Halted`.
    pub fn effective_run_strategy(&self) -> RunStrategy {
        match (self.run_strategy, self.running) {
            (Some(strategy), _) => strategy,
            (None, Some(true)) => RunStrategy::Always,
            (None, Some(false) | None) => RunStrategy::Halted,
        }
    }
}

/// `spec.runStrategy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum RunStrategy {
    /// A VMI always runs; a VMI that ends (or is stopped) is replaced by a new one.
    Always,
    /// A VMI runs until it succeeds; a failed VMI is replaced, a succeeded one is not.
    RerunOnFailure,
    /// Started and stopped only by requests (`virtctl start/stop`).
    Manual,
    /// No VMI runs.
    Halted,
    /// One VMI is started; it is not restarted whatever its outcome.
    Once,
    /// A value this code does not know (read-only).
    #[serde(other)]
    Unknown,
}

impl RunStrategy {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStrategy::Always => "Always",
            RunStrategy::RerunOnFailure => "RerunOnFailure",
            RunStrategy::Manual => "Manual",
            RunStrategy::Halted => "Halted",
            RunStrategy::Once => "Once",
            RunStrategy::Unknown => "Unknown",
        }
    }
}

impl std::fmt::Display for RunStrategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.template` of a VirtualMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineInstanceTemplateSpec {
    /// Labels and annotations copied onto every VMI (and from there onto its launcher pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<ObjectMeta>,
    #[serde(default)]
    pub spec: VirtualMachineInstanceSpec,
}

/// Observed state of a VirtualMachine (written by KubeVirt).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VirtualMachineStatus {
    /// A VMI of this VM exists (in any phase).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub created: bool,
    /// The VMI runs and is Ready.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ready: bool,
    /// One-word summary, as `kubectl get vm` prints it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub printable_status: Option<PrintableStatus>,
    /// The run strategy KubeVirt last acted on. After changing `spec.runStrategy`, wait until
    /// this equals it before relying on the new behaviour.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_strategy: Option<RunStrategy>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<KubevirtCondition>,
    /// Pending start/stop requests (what `virtctl start/stop/restart` writes), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub state_change_requests: Vec<StateChangeRequest>,
    /// Consecutive VMIs that failed before running; drives the restart back-off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_failure: Option<StartFailure>,
    /// The VM's `metadata.generation` when KubeVirt last synced it with a VMI.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub desired_generation: Option<i64>,
    /// The `metadata.generation` the current VMI was created from (its
    /// `kubevirt.io/vm-generation` annotation; kubevirt v1.9.0 `vm.go` `syncGenerationInfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// `status.printableStatus` of a VirtualMachine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum PrintableStatus {
    Stopped,
    Provisioning,
    Starting,
    Running,
    Paused,
    Stopping,
    Terminating,
    CrashLoopBackOff,
    Migrating,
    ErrorUnschedulable,
    ErrImagePull,
    ImagePullBackOff,
    ErrorPvcNotFound,
    DataVolumeError,
    WaitingForVolumeBinding,
    WaitingForReceiver,
    /// KubeVirt's `Unknown`, and any value this code does not know.
    #[serde(other)]
    Unknown,
}

/// A start or stop request in `status.stateChangeRequests`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateChangeRequest {
    pub action: StateChangeAction,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, String>,
    /// For `Stop`: the VMI to stop.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum StateChangeAction {
    #[default]
    Start,
    Stop,
    #[serde(other)]
    Unknown,
}

/// `status.startFailure` of a VirtualMachine.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StartFailure {
    #[serde(default)]
    pub consecutive_fail_count: i64,
    /// KubeVirt spells it `lastFailedVMIUID`, not camel case.
    #[serde(
        default,
        rename = "lastFailedVMIUID",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_failed_vmi_uid: Option<String>,
    /// No new VMI is started before this time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_timestamp: Option<Time>,
}

/// A condition as KubeVirt writes it (both timestamps may be null, unlike `meta/v1.Condition`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct KubevirtCondition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default)]
    pub last_probe_time: Option<Time>,
    #[serde(default)]
    pub last_transition_time: Option<Time>,
}

impl KubevirtCondition {
    pub fn is_true(&self) -> bool {
        self.status == "True"
    }
}

/// The condition of type `type_`, if present.
pub fn find_condition<'a>(
    conditions: &'a [KubevirtCondition],
    type_: &str,
) -> Option<&'a KubevirtCondition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// `<reason>: <message>` of a condition, either part left out when empty.
pub(super) fn describe(condition: &KubevirtCondition) -> String {
    let parts = [condition.reason.as_deref(), condition.message.as_deref()];
    let parts: Vec<&str> = parts
        .into_iter()
        .flatten()
        .filter(|p| !p.is_empty())
        .collect();
    parts.join(": ")
}

impl VirtualMachine {
    /// KubeVirt's `Failure` condition, as `<reason>: <message>`: the VMI could not be created
    /// (`FailedCreate`, `Failure while starting VMI: …`).
    pub fn start_failure(&self) -> Option<String> {
        let conditions = self.status.as_ref().map(|s| s.conditions.as_slice());
        find_condition(conditions.unwrap_or_default(), condition_types::FAILURE)
            .filter(|c| c.is_true())
            .map(describe)
    }

    /// `status.ready`: the VMI runs and is Ready.
    pub fn is_ready(&self) -> bool {
        self.status.as_ref().is_some_and(|s| s.ready)
    }

    /// `status.printableStatus`, if written.
    pub fn printable_status(&self) -> Option<PrintableStatus> {
        self.status.as_ref().and_then(|s| s.printable_status)
    }

    /// `status.runStrategy`: the strategy KubeVirt last acted on.
    pub fn observed_run_strategy(&self) -> Option<RunStrategy> {
        self.status.as_ref().and_then(|s| s.run_strategy)
    }

    /// Whether KubeVirt has nothing left to stop: it acted on `Halted`, or the VM never had a
    /// VMI. KubeVirt records `status.runStrategy` only once a VMI was created ("so that we can
    /// tell if the VM got started at least once", kubevirt v1.9.0
    /// `pkg/virt-controller/watch/vm/vm.go` `updateStatus`), so a VM halted before its first
    /// VMI never shows `Halted` there: one whose `dataVolumeTemplates` are not ready yet, or
    /// whose VMI create was refused (a quota; `tests/build_teardown.rs`). Volumes that are not
    /// templates do not hold the VMI back (`handleDataVolumes`).
    pub fn halt_acted_on(&self) -> bool {
        match &self.status {
            Some(status) => match status.run_strategy {
                Some(strategy) => strategy == RunStrategy::Halted,
                None => !status.created,
            },
            None => true,
        }
    }
}
