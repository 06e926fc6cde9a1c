//! The pure part of the simulated KubeVirt: what the VM controller does given a VM and its VMI,
//! what the VM's status says, and the next step of a VMI given what is observed of it. Modelled
//! on KubeVirt's `syncRunStrategy`, `setPrintableStatus` and `syncStartFailureStatus`.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use guestcluster::kubevirt::{
    KubevirtCondition, PrintableStatus, RunStrategy, StartFailure, StateChangeAction,
    StateChangeRequest, VirtualMachineInstance, VmiPhase, condition_reasons, condition_types,
    find_condition,
};

// ---------------------------------------------------------------------------------------------
// VirtualMachine
// ---------------------------------------------------------------------------------------------

/// What the VM controller sees of the VM's VMI.
#[derive(Clone, Debug, PartialEq)]
pub struct VmiView {
    pub uid: String,
    pub phase: VmiPhase,
    pub deleting: bool,
    /// The VMI reached `Running` at some point.
    pub ever_ran: bool,
}

impl VmiView {
    pub fn of(vmi: &VirtualMachineInstance) -> Self {
        Self {
            uid: vmi.metadata.uid.clone().unwrap_or_default(),
            phase: vmi.phase(),
            deleting: vmi.metadata.deletion_timestamp.is_some(),
            ever_ran: vmi.phase_entered(VmiPhase::Running).is_some(),
        }
    }
}

/// What the VM controller does about the VMI.
#[derive(Clone, Debug, PartialEq)]
pub enum VmAction {
    Nothing,
    /// Create a VMI (new UID) from the template.
    Start,
    /// Delete the VMI with this UID; `add_start_request` queues a start for after it is gone
    /// (RerunOnFailure after a failure).
    Stop {
        uid: String,
        add_start_request: bool,
    },
    /// A start is due, but the start-failure back-off has this long left.
    Backoff(Duration),
}

/// Inputs of [`decide_vm`].
#[derive(Clone, Debug)]
pub struct VmInputs<'a> {
    pub strategy: RunStrategy,
    /// `status.runStrategy`: the strategy acted on last time.
    pub observed_strategy: Option<RunStrategy>,
    pub vmi: Option<&'a VmiView>,
    pub requests: &'a [StateChangeRequest],
    /// Time left of the start-failure back-off, if any.
    pub backoff_remaining: Option<Duration>,
}

/// The first request is a Stop for `vmi` (a Stop without UID means the current VMI).
pub fn has_stop_request_for(requests: &[StateChangeRequest], vmi: &VmiView) -> bool {
    requests.first().is_some_and(|r| {
        r.action == StateChangeAction::Stop && r.uid.as_deref().is_none_or(|uid| uid == vmi.uid)
    })
}

/// The first request is a Start.
pub fn has_start_request(requests: &[StateChangeRequest]) -> bool {
    requests
        .first()
        .is_some_and(|r| r.action == StateChangeAction::Start)
}

/// KubeVirt's `syncRunStrategy`.
pub fn decide_vm(input: &VmInputs<'_>) -> VmAction {
    let start = || match input.backoff_remaining {
        Some(left) if !left.is_zero() => VmAction::Backoff(left),
        _ => VmAction::Start,
    };
    let stop = |vmi: &VmiView, add_start_request| VmAction::Stop {
        uid: vmi.uid.clone(),
        add_start_request,
    };
    match input.strategy {
        RunStrategy::Always => match input.vmi {
            Some(vmi) if vmi.deleting => VmAction::Nothing,
            Some(vmi) if has_stop_request_for(input.requests, vmi) || vmi.phase.is_final() => {
                stop(vmi, false)
            }
            Some(_) => VmAction::Nothing,
            None => start(),
        },
        RunStrategy::RerunOnFailure => match input.vmi {
            Some(vmi) if vmi.deleting => VmAction::Nothing,
            Some(vmi) if has_stop_request_for(input.requests, vmi) || vmi.phase.is_final() => {
                stop(vmi, vmi.phase == VmiPhase::Failed)
            }
            Some(_) => VmAction::Nothing,
            // Coming from another strategy starts the VM; after a success it stays stopped.
            None if !has_start_request(input.requests)
                && input.observed_strategy == Some(RunStrategy::RerunOnFailure) =>
            {
                VmAction::Nothing
            }
            None => start(),
        },
        RunStrategy::Manual => match input.vmi {
            Some(vmi) if vmi.deleting => VmAction::Nothing,
            Some(vmi) if has_stop_request_for(input.requests, vmi) => stop(vmi, false),
            // A start request while the last VMI has ended: what `virtctl start` does (stop the
            // old one, then start).
            Some(vmi) if vmi.phase.is_final() && has_start_request(input.requests) => {
                stop(vmi, false)
            }
            Some(_) => VmAction::Nothing,
            None if has_start_request(input.requests) => VmAction::Start,
            None => VmAction::Nothing,
        },
        RunStrategy::Halted => match input.vmi {
            Some(vmi) if !vmi.deleting => stop(vmi, false),
            _ => VmAction::Nothing,
        },
        RunStrategy::Once => match input.vmi {
            None if input.observed_strategy != Some(RunStrategy::Once) => VmAction::Start,
            _ => VmAction::Nothing,
        },
        RunStrategy::Unknown => VmAction::Nothing,
    }
}

/// `status.stateChangeRequests` after this pass: requests that are done (or that the simulation
/// does not understand) are dropped from the front. `vmi` is what was observed at the start of
/// the pass, as in KubeVirt.
pub fn trim_requests(
    requests: &[StateChangeRequest],
    vmi: Option<&VmiView>,
    added_start: bool,
) -> Vec<StateChangeRequest> {
    let mut rest = requests;
    while let Some(first) = rest.first() {
        let done = match first.action {
            StateChangeAction::Stop => match (vmi, &first.uid) {
                (None, _) => true,
                (Some(vmi), Some(uid)) => *uid != vmi.uid,
                (Some(vmi), None) => vmi.deleting,
            },
            StateChangeAction::Start => vmi.is_some_and(|v| !v.deleting && !v.phase.is_final()),
            StateChangeAction::Unknown => true,
        };
        if !done {
            break;
        }
        rest = &rest[1..];
    }
    let mut out = rest.to_vec();
    if added_start {
        out.push(StateChangeRequest {
            action: StateChangeAction::Start,
            ..StateChangeRequest::default()
        });
    }
    out
}

/// The back-off before the `count`th consecutive restart after early failures: `base`
/// doubling, at most 64 × `base` (KubeVirt: 10 s doubling up to 5 min, with jitter).
pub fn start_backoff(count: i64, base: Duration) -> Duration {
    let exponent = u32::try_from(count.clamp(1, 7) - 1).unwrap_or(0);
    base * 2u32.pow(exponent)
}

/// KubeVirt's `syncStartFailureStatus`: a VMI that failed without ever running counts as a start
/// failure (once per VMI); one that ran or succeeded resets the count.
pub fn next_start_failure(
    previous: Option<&StartFailure>,
    vmi: Option<&VmiView>,
    now: Timestamp,
    base: Duration,
) -> Option<StartFailure> {
    let Some(vmi) = vmi.filter(|v| v.phase.is_final()) else {
        return previous.cloned();
    };
    if previous.is_some_and(|p| p.last_failed_vmi_uid.as_deref() == Some(vmi.uid.as_str())) {
        return previous.cloned();
    }
    if vmi.phase == VmiPhase::Failed && !vmi.ever_ran {
        let count = previous.map_or(0, |p| p.consecutive_fail_count) + 1;
        let delay = start_backoff(count, base);
        let retry_after = now
            .checked_add(k8s_openapi::jiff::SignedDuration::try_from(delay).unwrap_or_default())
            .unwrap_or(now);
        return Some(StartFailure {
            consecutive_fail_count: count,
            last_failed_vmi_uid: Some(vmi.uid.clone()),
            retry_after_timestamp: Some(Time(retry_after)),
        });
    }
    None
}

/// Time left before `retry_after`, if it is in the future.
pub fn backoff_remaining(failure: Option<&StartFailure>, now: Timestamp) -> Option<Duration> {
    let retry_after = failure?.retry_after_timestamp.as_ref()?.0;
    let left = now.duration_until(retry_after);
    Duration::try_from(left).ok().filter(|d| !d.is_zero())
}

/// KubeVirt's `isSetToStart`.
pub fn is_set_to_start(
    strategy: RunStrategy,
    vmi: Option<&VmiView>,
    requests: &[StateChangeRequest],
) -> bool {
    match strategy {
        RunStrategy::Always => true,
        RunStrategy::Halted | RunStrategy::Unknown => false,
        RunStrategy::Manual => match vmi {
            Some(vmi) => !has_stop_request_for(requests, vmi),
            None => has_start_request(requests),
        },
        RunStrategy::RerunOnFailure => vmi.is_none_or(|v| v.phase != VmiPhase::Succeeded),
        RunStrategy::Once => vmi.is_none(),
    }
}

/// What the VM's volumes look like, for the printable status.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VolumeSummary {
    /// A DataVolume is still being populated.
    pub provisioning: bool,
    /// A DataVolume failed.
    pub data_volume_failed: bool,
    /// A PVC exists but is not bound.
    pub unbound: bool,
}

/// Inputs of [`printable_status`].
#[derive(Clone, Debug)]
pub struct StatusInputs<'a> {
    pub vm_deleting: bool,
    pub strategy: RunStrategy,
    pub vmi: Option<&'a VirtualMachineInstance>,
    pub action: &'a VmAction,
    pub requests: &'a [StateChangeRequest],
    pub volumes: VolumeSummary,
    pub start_failure: Option<&'a StartFailure>,
}

/// KubeVirt's `setPrintableStatus`: the first matching status wins.
pub fn printable_status(input: &StatusInputs<'_>) -> PrintableStatus {
    let view = input.vmi.map(VmiView::of);
    let vmi = view.as_ref();
    let start_expected = *input.action == VmAction::Start;
    let stop_expected = matches!(input.action, VmAction::Stop { .. });
    let final_ = vmi.is_some_and(|v| v.phase.is_final());
    let vmi_condition = |type_: &str, reason: &str| {
        input.vmi.is_some_and(|v| {
            v.condition(type_)
                .is_some_and(|c| c.status == "False" && c.reason.as_deref() == Some(reason))
        })
    };

    if input.vm_deleting {
        return PrintableStatus::Terminating;
    }
    if vmi.is_some_and(|v| !v.phase.is_final() && (v.deleting || stop_expected)) {
        return PrintableStatus::Stopping;
    }
    if vmi.is_some_and(|v| v.phase == VmiPhase::Running) {
        return PrintableStatus::Running;
    }
    if vmi_condition(
        condition_types::SYNCHRONIZED,
        condition_reasons::FAILED_PVC_NOT_FOUND,
    ) {
        return PrintableStatus::ErrorPvcNotFound;
    }
    if input.volumes.data_volume_failed {
        return PrintableStatus::DataVolumeError;
    }
    if vmi_condition(
        condition_types::POD_SCHEDULED,
        condition_reasons::UNSCHEDULABLE,
    ) {
        return PrintableStatus::ErrorUnschedulable;
    }
    if input.volumes.provisioning {
        return PrintableStatus::Provisioning;
    }
    if input.volumes.unbound && is_set_to_start(input.strategy, vmi, input.requests) {
        return PrintableStatus::WaitingForVolumeBinding;
    }
    let starting = match vmi {
        None => start_expected,
        Some(v) => matches!(
            v.phase,
            VmiPhase::Unset | VmiPhase::Pending | VmiPhase::Scheduling | VmiPhase::Scheduled
        ),
    };
    if starting {
        return PrintableStatus::Starting;
    }
    let crash_loop = (vmi.is_none() || final_)
        && !start_expected
        && input
            .start_failure
            .is_some_and(|f| f.consecutive_fail_count > 0)
        && matches!(
            input.strategy,
            RunStrategy::Always | RunStrategy::RerunOnFailure | RunStrategy::Once
        );
    if crash_loop {
        return PrintableStatus::CrashLoopBackOff;
    }
    let stopped = match vmi {
        Some(v) => v.phase.is_final(),
        None => !start_expected,
    };
    if stopped {
        return PrintableStatus::Stopped;
    }
    PrintableStatus::Unknown
}

/// The VM's conditions: `Ready` from the VMI (or why there is none), then the VMI's other
/// conditions; a condition whose status and reason did not change keeps its timestamps.
pub fn vm_conditions(
    previous: &[KubevirtCondition],
    vmi: Option<&VirtualMachineInstance>,
    now: &Time,
) -> Vec<KubevirtCondition> {
    let vmi_conditions = vmi
        .and_then(|v| v.status.as_ref())
        .map(|s| s.conditions.as_slice())
        .unwrap_or_default();
    let ready = match (vmi, find_condition(vmi_conditions, condition_types::READY)) {
        (None, _) => condition(
            condition_types::READY,
            false,
            condition_reasons::VMI_NOT_EXISTS,
            "VMI does not exist",
            now,
        ),
        (Some(_), None) => condition(
            condition_types::READY,
            false,
            condition_reasons::VMI_CONDITION_MISSING,
            "VMI is missing the Ready condition",
            now,
        ),
        (Some(_), Some(c)) => c.clone(),
    };
    let mut out = vec![ready];
    out.extend(
        vmi_conditions
            .iter()
            .filter(|c| c.type_ != condition_types::READY)
            .cloned(),
    );
    out.into_iter()
        .map(|c| keep_timestamps(previous, c))
        .collect()
}

/// A condition with both timestamps `now`.
pub fn condition(
    type_: &str,
    status: bool,
    reason: &str,
    message: &str,
    now: &Time,
) -> KubevirtCondition {
    KubevirtCondition {
        type_: type_.into(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.into()),
        message: (!message.is_empty()).then(|| message.into()),
        last_probe_time: None,
        last_transition_time: Some(now.clone()),
    }
}

/// `new`, with the timestamps of the same condition in `previous` when only the timestamps
/// differ, so an unchanged status is written once.
pub fn keep_timestamps(
    previous: &[KubevirtCondition],
    new: KubevirtCondition,
) -> KubevirtCondition {
    match find_condition(previous, &new.type_) {
        Some(old)
            if old.status == new.status
                && old.reason == new.reason
                && old.message == new.message =>
        {
            old.clone()
        }
        _ => new,
    }
}

/// Replaces (or adds) the condition of `new.type_` in `conditions`, keeping timestamps when
/// nothing but timestamps changed.
pub fn set_condition(conditions: &mut Vec<KubevirtCondition>, new: KubevirtCondition) {
    let new = keep_timestamps(conditions, new);
    match conditions.iter_mut().find(|c| c.type_ == new.type_) {
        Some(slot) => *slot = new,
        None => conditions.push(new),
    }
}

/// Reason of the VM's `Failure` condition when a start was refused (KubeVirt's
/// `failedCreateReason`).
pub const FAILED_CREATE: &str = "FailedCreate";
/// How KubeVirt words a start the API server refused, before the server's message.
const START_REFUSED_PREFIX: &str = "Failure while starting VMI: ";

/// The VM's `Failure` condition when the API server refused to create its VMI, as KubeVirt
/// reports the sync error (`Failure while starting VMI: <error>`).
pub fn start_refused(message: &str, now: &Time) -> KubevirtCondition {
    condition(
        condition_types::FAILURE,
        true,
        FAILED_CREATE,
        &format!("{START_REFUSED_PREFIX}{message}"),
        now,
    )
}

/// The refusal reported in `previous`, kept while the VM is still to be started and has no VMI:
/// the next attempt replaces it, a VMI that gets created clears it (KubeVirt drops the
/// condition after a sync without error).
pub fn pending_start_refusal(
    previous: &[KubevirtCondition],
    action: &VmAction,
    vmi_exists: bool,
) -> Option<KubevirtCondition> {
    if *action != VmAction::Start || vmi_exists {
        return None;
    }
    find_condition(previous, condition_types::FAILURE)
        .filter(|c| c.status == "True" && c.reason.as_deref() == Some(FAILED_CREATE))
        .filter(|c| {
            c.message
                .as_deref()
                .is_some_and(|m| m.starts_with(START_REFUSED_PREFIX))
        })
        .cloned()
}

// ---------------------------------------------------------------------------------------------
// VirtualMachineInstance
// ---------------------------------------------------------------------------------------------

/// A volume the VMI cannot use yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VolumeWait {
    /// Neither the PVC nor (for a dataVolume volume) the DataVolume exists.
    NotFound { claim: String },
    /// The DataVolume is being populated (its phase).
    Provisioning { data_volume: String, phase: String },
    /// The DataVolume failed.
    DataVolumeFailed {
        data_volume: String,
        message: String,
    },
    /// The PVC exists but is not bound.
    Unbound { claim: String },
}

impl VolumeWait {
    /// The VMI condition that reports this wait.
    pub fn condition(&self, namespace: &str, now: &Time) -> KubevirtCondition {
        match self {
            VolumeWait::NotFound { claim } => condition(
                condition_types::SYNCHRONIZED,
                false,
                condition_reasons::FAILED_PVC_NOT_FOUND,
                &format!("PVC {namespace}/{claim} does not exist, waiting for it to appear"),
                now,
            ),
            VolumeWait::Provisioning { data_volume, phase } => condition(
                condition_types::DATA_VOLUMES_READY,
                false,
                "NotReady",
                &format!("DataVolume {data_volume} is not ready (phase {phase})"),
                now,
            ),
            VolumeWait::DataVolumeFailed {
                data_volume,
                message,
            } => condition(
                condition_types::DATA_VOLUMES_READY,
                false,
                "Failed",
                &format!("DataVolume {data_volume} failed: {message}"),
                now,
            ),
            VolumeWait::Unbound { claim } => condition(
                condition_types::SYNCHRONIZED,
                false,
                "PvcNotBound",
                &format!("PVC {namespace}/{claim} is not bound"),
                now,
            ),
        }
    }
}

/// What is observed of one virt-launcher pod of the VMI.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodView {
    pub name: String,
    pub uid: String,
    pub deleting: bool,
    /// Bound to a node.
    pub node: Option<String>,
    /// `status.podIP`, set once the pod runs.
    pub ip: Option<String>,
    /// `status.phase`.
    pub phase: Option<String>,
}

impl PodView {
    fn ended(&self) -> bool {
        matches!(self.phase.as_deref(), Some("Succeeded" | "Failed"))
    }

    fn usable(&self) -> bool {
        !self.deleting && !self.ended()
    }
}

/// How a guest ended, as this process saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    PoweredOff,
    Crashed(String),
}

/// The guest of a VMI, as far as this process knows.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GuestView {
    /// Not running in this process, and no exit seen: never booted here, or booted by a
    /// previous run of the simulation.
    Absent,
    Running,
    Exited(Exit),
}

/// Everything [`next_vmi_step`] decides on.
#[derive(Clone, Debug)]
pub struct VmiObservation<'a> {
    pub phase: VmiPhase,
    pub deleting: bool,
    pub has_finalizer: bool,
    /// Only looked at while the VMI waits to be scheduled: the first volume it cannot use.
    pub volume_wait: Option<&'a VolumeWait>,
    pub pods: &'a [PodView],
    pub guest: GuestView,
    /// While `Scheduled`: how long until the guest may be started (`Timings.vm_start`).
    pub start_remaining: Duration,
}

/// One step of the VMI controller (virt-controller + virt-handler in one).
#[derive(Clone, Debug, PartialEq)]
pub enum VmiStep {
    /// Nothing to do until something changes.
    Nothing,
    AddFinalizer,
    /// Gracefully power the guest off.
    ShutdownGuest,
    /// Set a final phase.
    Finish {
        phase: VmiPhase,
        reason: String,
        message: String,
    },
    /// Delete the virt-launcher pods (the launcher's kubelet finishes the deletion).
    DeletePods,
    /// Wait until the virt-launcher pods are gone (their PVCs are held until then).
    WaitPodsGone,
    RemoveFinalizer,
    /// Report why the VMI cannot be scheduled yet.
    WaitVolumes(VolumeWait),
    CreatePod,
    /// Accept the VMI: phase `Pending`.
    MarkPending,
    /// Adopt an existing pod: phase `Scheduling`.
    MarkScheduling,
    /// Wait for the pod to be bound and running.
    WaitPod,
    /// The pod runs with an IP: phase `Scheduled`.
    MarkScheduled {
        pod: PodView,
    },
    /// Wait before starting the guest.
    WaitStart(Duration),
    /// Start the guest.
    Boot {
        pod: PodView,
    },
    /// The guest runs: phase `Running`.
    MarkRunning {
        pod: PodView,
    },
    /// The VMI ended; its pod's container exits with this phase.
    FinishPod {
        pod: String,
        phase: VmiPhase,
    },
}

fn finish(phase: VmiPhase, reason: &str, message: &str) -> VmiStep {
    VmiStep::Finish {
        phase,
        reason: reason.into(),
        message: message.into(),
    }
}

fn finish_after_exit(exit: &Exit) -> VmiStep {
    match exit {
        Exit::PoweredOff => finish(
            VmiPhase::Succeeded,
            "GuestShutdown",
            "the guest powered off",
        ),
        Exit::Crashed(message) => finish(VmiPhase::Failed, "GuestCrashed", message),
    }
}

/// The next step of a VMI.
pub fn next_vmi_step(obs: &VmiObservation<'_>) -> VmiStep {
    let pod_deleting = obs.pods.iter().any(|p| p.deleting);
    if obs.deleting {
        if obs.guest == GuestView::Running {
            // A launcher pod already being deleted powers the guest off itself.
            return if pod_deleting {
                VmiStep::WaitPodsGone
            } else {
                VmiStep::ShutdownGuest
            };
        }
        if matches!(obs.phase, VmiPhase::Scheduled | VmiPhase::Running) {
            return match &obs.guest {
                GuestView::Exited(Exit::Crashed(message)) => {
                    finish(VmiPhase::Failed, "GuestCrashed", message)
                }
                _ => finish(VmiPhase::Succeeded, "Deleted", "the VMI was deleted"),
            };
        }
        if obs.pods.iter().any(|p| !p.deleting) {
            return VmiStep::DeletePods;
        }
        if !obs.pods.is_empty() {
            return VmiStep::WaitPodsGone;
        }
        if obs.has_finalizer {
            return VmiStep::RemoveFinalizer;
        }
        return VmiStep::Nothing;
    }
    if !obs.has_finalizer && !obs.phase.is_final() {
        return VmiStep::AddFinalizer;
    }
    let pod = obs.pods.iter().find(|p| p.usable()).cloned();
    let pod_lost = || {
        let message = if pod_deleting {
            "the virt-launcher pod was deleted"
        } else if obs.pods.is_empty() {
            "the virt-launcher pod disappeared"
        } else {
            "the virt-launcher pod ended"
        };
        finish(VmiPhase::Failed, "LauncherPodGone", message)
    };
    match obs.phase {
        VmiPhase::Succeeded | VmiPhase::Failed => {
            if obs.guest == GuestView::Running && !pod_deleting {
                return VmiStep::ShutdownGuest;
            }
            match pod {
                Some(pod) => VmiStep::FinishPod {
                    pod: pod.name,
                    phase: obs.phase,
                },
                None => VmiStep::Nothing,
            }
        }
        VmiPhase::Unset => VmiStep::MarkPending,
        VmiPhase::Pending => {
            if !obs.pods.is_empty() {
                return VmiStep::MarkScheduling;
            }
            match obs.volume_wait {
                Some(wait) => VmiStep::WaitVolumes(wait.clone()),
                None => VmiStep::CreatePod,
            }
        }
        VmiPhase::Scheduling => match pod {
            None => pod_lost(),
            Some(pod) if pod.node.is_some() && pod.ip.is_some() => VmiStep::MarkScheduled { pod },
            Some(_) => VmiStep::WaitPod,
        },
        VmiPhase::Scheduled => match (pod, &obs.guest) {
            (None, _) => pod_lost(),
            (Some(pod), GuestView::Running) => VmiStep::MarkRunning { pod },
            (Some(_), GuestView::Exited(exit)) => finish_after_exit(exit),
            (Some(_), GuestView::Absent) if !obs.start_remaining.is_zero() => {
                VmiStep::WaitStart(obs.start_remaining)
            }
            (Some(pod), GuestView::Absent) => VmiStep::Boot { pod },
        },
        VmiPhase::Running => match (pod, &obs.guest) {
            (None, _) => pod_lost(),
            (Some(_), GuestView::Exited(exit)) => finish_after_exit(exit),
            (Some(_), GuestView::Absent) => finish(
                VmiPhase::Failed,
                "GuestNotRunning",
                "the guest is not running (the simulation was restarted or lost it)",
            ),
            (Some(_), GuestView::Running) => VmiStep::Nothing,
        },
        VmiPhase::Unknown => VmiStep::Nothing,
    }
}

/// Device names the guest sees, in disk order: `vdX` for virtio, `sdX` for every other bus
/// (KubeVirt's defaults).
pub fn device_targets(buses: &[guestcluster::kubevirt::DiskBus]) -> Vec<String> {
    let (mut vd, mut sd) = (0u8, 0u8);
    buses
        .iter()
        .map(|bus| {
            let (prefix, n) = match bus {
                guestcluster::kubevirt::DiskBus::Virtio => ("vd", &mut vd),
                _ => ("sd", &mut sd),
            };
            let name = format!("{prefix}{}", char::from(b'a' + (*n % 26)));
            *n += 1;
            name
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use guestcluster::kubevirt::{DiskBus, VirtualMachineInstanceStatus};

    fn view(phase: VmiPhase) -> VmiView {
        VmiView {
            uid: "u1".into(),
            phase,
            deleting: false,
            ever_ran: phase == VmiPhase::Running,
        }
    }

    fn inputs<'a>(
        strategy: RunStrategy,
        vmi: Option<&'a VmiView>,
        requests: &'a [StateChangeRequest],
    ) -> VmInputs<'a> {
        VmInputs {
            strategy,
            observed_strategy: Some(strategy),
            vmi,
            requests,
            backoff_remaining: None,
        }
    }

    fn stop(add_start_request: bool) -> VmAction {
        VmAction::Stop {
            uid: "u1".into(),
            add_start_request,
        }
    }

    fn request(action: StateChangeAction, uid: Option<&str>) -> StateChangeRequest {
        StateChangeRequest {
            action,
            uid: uid.map(String::from),
            ..StateChangeRequest::default()
        }
    }

    #[test]
    fn always_starts_keeps_and_replaces_ended_vmis() {
        use RunStrategy::Always;
        assert_eq!(decide_vm(&inputs(Always, None, &[])), VmAction::Start);
        let running = view(VmiPhase::Running);
        assert_eq!(
            decide_vm(&inputs(Always, Some(&running), &[])),
            VmAction::Nothing
        );
        for phase in [VmiPhase::Succeeded, VmiPhase::Failed] {
            let ended = view(phase);
            assert_eq!(decide_vm(&inputs(Always, Some(&ended), &[])), stop(false));
        }
        let deleting = VmiView {
            deleting: true,
            ..view(VmiPhase::Failed)
        };
        assert_eq!(
            decide_vm(&inputs(Always, Some(&deleting), &[])),
            VmAction::Nothing
        );
    }

    #[test]
    fn always_restart_request_stops_the_named_vmi_only() {
        let running = view(VmiPhase::Running);
        let restart = [request(StateChangeAction::Stop, Some("u1"))];
        assert_eq!(
            decide_vm(&inputs(RunStrategy::Always, Some(&running), &restart)),
            stop(false)
        );
        let other = [request(StateChangeAction::Stop, Some("old"))];
        assert_eq!(
            decide_vm(&inputs(RunStrategy::Always, Some(&running), &other)),
            VmAction::Nothing
        );
    }

    #[test]
    fn start_waits_for_the_failure_backoff() {
        let mut input = inputs(RunStrategy::Always, None, &[]);
        input.backoff_remaining = Some(Duration::from_millis(300));
        assert_eq!(
            decide_vm(&input),
            VmAction::Backoff(Duration::from_millis(300))
        );
    }

    #[test]
    fn rerun_on_failure_restarts_failed_but_not_succeeded() {
        use RunStrategy::RerunOnFailure;
        let failed = view(VmiPhase::Failed);
        assert_eq!(
            decide_vm(&inputs(RerunOnFailure, Some(&failed), &[])),
            stop(true)
        );
        let succeeded = view(VmiPhase::Succeeded);
        assert_eq!(
            decide_vm(&inputs(RerunOnFailure, Some(&succeeded), &[])),
            stop(false)
        );
        // Gone after success: stays stopped.
        assert_eq!(
            decide_vm(&inputs(RerunOnFailure, None, &[])),
            VmAction::Nothing
        );
        // Gone after failure: the queued start request starts it.
        let start = [request(StateChangeAction::Start, None)];
        assert_eq!(
            decide_vm(&inputs(RerunOnFailure, None, &start)),
            VmAction::Start
        );
        // Switched to from another strategy: starts.
        let mut switched = inputs(RerunOnFailure, None, &[]);
        switched.observed_strategy = Some(RunStrategy::Halted);
        assert_eq!(decide_vm(&switched), VmAction::Start);
        let mut fresh = inputs(RerunOnFailure, None, &[]);
        fresh.observed_strategy = None;
        assert_eq!(decide_vm(&fresh), VmAction::Start);
    }

    #[test]
    fn halted_stops_and_never_starts() {
        use RunStrategy::Halted;
        assert_eq!(decide_vm(&inputs(Halted, None, &[])), VmAction::Nothing);
        let start = [request(StateChangeAction::Start, None)];
        assert_eq!(decide_vm(&inputs(Halted, None, &start)), VmAction::Nothing);
        for phase in [VmiPhase::Pending, VmiPhase::Running, VmiPhase::Succeeded] {
            let vmi = view(phase);
            assert_eq!(decide_vm(&inputs(Halted, Some(&vmi), &[])), stop(false));
        }
    }

    #[test]
    fn manual_follows_requests_only() {
        use RunStrategy::Manual;
        assert_eq!(decide_vm(&inputs(Manual, None, &[])), VmAction::Nothing);
        let start = [request(StateChangeAction::Start, None)];
        assert_eq!(decide_vm(&inputs(Manual, None, &start)), VmAction::Start);
        let ended = view(VmiPhase::Succeeded);
        assert_eq!(
            decide_vm(&inputs(Manual, Some(&ended), &[])),
            VmAction::Nothing
        );
        assert_eq!(
            decide_vm(&inputs(Manual, Some(&ended), &start)),
            stop(false)
        );
        let running = view(VmiPhase::Running);
        let stop_request = [request(StateChangeAction::Stop, None)];
        assert_eq!(
            decide_vm(&inputs(Manual, Some(&running), &stop_request)),
            stop(false)
        );
        assert_eq!(
            decide_vm(&inputs(Manual, Some(&running), &start)),
            VmAction::Nothing
        );
    }

    #[test]
    fn once_starts_one_vmi() {
        let mut first = inputs(RunStrategy::Once, None, &[]);
        first.observed_strategy = None;
        assert_eq!(decide_vm(&first), VmAction::Start);
        assert_eq!(
            decide_vm(&inputs(RunStrategy::Once, None, &[])),
            VmAction::Nothing
        );
    }

    #[test]
    fn requests_are_trimmed_once_done() {
        let running = view(VmiPhase::Running);
        let stop_old = request(StateChangeAction::Stop, Some("u0"));
        let stop_this = request(StateChangeAction::Stop, Some("u1"));
        let start = request(StateChangeAction::Start, None);
        // [Stop(u1), Start] while u1 runs: nothing done yet.
        let queue = [stop_this.clone(), start.clone()];
        assert_eq!(trim_requests(&queue, Some(&running), false), queue.to_vec());
        // u1 gone: the stop is done, the start is not.
        assert_eq!(trim_requests(&queue, None, false), vec![start.clone()]);
        // A new VMI runs: both done.
        assert_eq!(
            trim_requests(&[stop_old, start.clone()], Some(&running), false),
            vec![]
        );
        // A start request on a final VMI waits for the replacement.
        let ended = view(VmiPhase::Failed);
        assert_eq!(
            trim_requests(std::slice::from_ref(&start), Some(&ended), false),
            vec![start.clone()]
        );
        assert_eq!(trim_requests(&[], Some(&ended), true), vec![start]);
        let unknown = request(StateChangeAction::Unknown, None);
        assert_eq!(trim_requests(&[unknown], None, false), vec![]);
    }

    #[test]
    fn early_failures_count_and_back_off() {
        let base = Duration::from_secs(1);
        let now = Timestamp::from_second(1_000_000).unwrap();
        let failed = VmiView {
            ever_ran: false,
            ..view(VmiPhase::Failed)
        };
        let first = next_start_failure(None, Some(&failed), now, base).unwrap();
        assert_eq!(first.consecutive_fail_count, 1);
        assert_eq!(
            backoff_remaining(Some(&first), now),
            Some(Duration::from_secs(1))
        );
        // The same VMI is counted once.
        let again = next_start_failure(Some(&first), Some(&failed), now, base).unwrap();
        assert_eq!(again, first);
        let failed2 = VmiView {
            uid: "u2".into(),
            ..failed.clone()
        };
        let second = next_start_failure(Some(&first), Some(&failed2), now, base).unwrap();
        assert_eq!(second.consecutive_fail_count, 2);
        assert_eq!(
            backoff_remaining(Some(&second), now),
            Some(Duration::from_secs(2))
        );
        // A VMI that ran, or succeeded, resets it.
        let ran = VmiView {
            uid: "u3".into(),
            ever_ran: true,
            ..failed
        };
        assert_eq!(
            next_start_failure(Some(&second), Some(&ran), now, base),
            None
        );
        // A VMI still running keeps it.
        let running = view(VmiPhase::Running);
        assert_eq!(
            next_start_failure(Some(&second), Some(&running), now, base),
            Some(second)
        );
        assert_eq!(start_backoff(100, base), Duration::from_secs(64));
    }

    fn vmi(phase: VmiPhase, conditions: Vec<KubevirtCondition>) -> VirtualMachineInstance {
        let mut vmi = VirtualMachineInstance::new("vm", Default::default());
        vmi.metadata.uid = Some("u1".into());
        vmi.status = Some(VirtualMachineInstanceStatus {
            phase: Some(phase),
            conditions,
            ..Default::default()
        });
        vmi
    }

    fn status_of(
        strategy: RunStrategy,
        vmi: Option<&VirtualMachineInstance>,
        action: &VmAction,
        volumes: VolumeSummary,
    ) -> PrintableStatus {
        printable_status(&StatusInputs {
            vm_deleting: false,
            strategy,
            vmi,
            action,
            requests: &[],
            volumes,
            start_failure: None,
        })
    }

    #[test]
    fn printable_status_follows_kubevirt_precedence() {
        use PrintableStatus as P;
        let none = VolumeSummary::default();
        let always = RunStrategy::Always;
        assert_eq!(status_of(always, None, &VmAction::Start, none), P::Starting);
        assert_eq!(
            status_of(RunStrategy::Halted, None, &VmAction::Nothing, none),
            P::Stopped
        );
        let pending = vmi(VmiPhase::Pending, vec![]);
        assert_eq!(
            status_of(always, Some(&pending), &VmAction::Nothing, none),
            P::Starting
        );
        let running = vmi(VmiPhase::Running, vec![]);
        assert_eq!(
            status_of(always, Some(&running), &VmAction::Nothing, none),
            P::Running
        );
        assert_eq!(
            status_of(RunStrategy::Halted, Some(&running), &stop(false), none),
            P::Stopping
        );
        let succeeded = vmi(VmiPhase::Succeeded, vec![]);
        assert_eq!(
            status_of(
                RunStrategy::RerunOnFailure,
                Some(&succeeded),
                &stop(false),
                none
            ),
            P::Stopped
        );
        let now = Time(Timestamp::from_second(0).unwrap());
        let missing = vmi(
            VmiPhase::Pending,
            vec![VolumeWait::NotFound { claim: "x".into() }.condition("ns", &now)],
        );
        assert_eq!(
            status_of(always, Some(&missing), &VmAction::Nothing, none),
            P::ErrorPvcNotFound
        );
        let provisioning = VolumeSummary {
            provisioning: true,
            ..none
        };
        assert_eq!(
            status_of(always, Some(&pending), &VmAction::Nothing, provisioning),
            P::Provisioning
        );
        let failed_dv = VolumeSummary {
            data_volume_failed: true,
            ..none
        };
        assert_eq!(
            status_of(always, Some(&pending), &VmAction::Nothing, failed_dv),
            P::DataVolumeError
        );
        let unbound = VolumeSummary {
            unbound: true,
            ..none
        };
        assert_eq!(
            status_of(always, None, &VmAction::Start, unbound),
            P::WaitingForVolumeBinding
        );
        assert_eq!(
            status_of(RunStrategy::Halted, None, &VmAction::Nothing, unbound),
            P::Stopped
        );
        let failure = StartFailure {
            consecutive_fail_count: 1,
            ..StartFailure::default()
        };
        let crash = printable_status(&StatusInputs {
            vm_deleting: false,
            strategy: always,
            vmi: None,
            action: &VmAction::Backoff(Duration::from_secs(1)),
            requests: &[],
            volumes: none,
            start_failure: Some(&failure),
        });
        assert_eq!(crash, P::CrashLoopBackOff);
        let terminating = printable_status(&StatusInputs {
            vm_deleting: true,
            strategy: always,
            vmi: Some(&running),
            action: &VmAction::Nothing,
            requests: &[],
            volumes: none,
            start_failure: None,
        });
        assert_eq!(terminating, P::Terminating);
    }

    #[test]
    fn vm_conditions_mirror_the_vmi_and_keep_timestamps() {
        let t0 = Time(Timestamp::from_second(0).unwrap());
        let t1 = Time(Timestamp::from_second(100).unwrap());
        let first = vm_conditions(&[], None, &t0);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].reason.as_deref(), Some("VMINotExists"));
        let again = vm_conditions(&first, None, &t1);
        assert_eq!(again, first, "unchanged conditions keep their timestamps");
        let ready = condition("Ready", true, "", "", &t1);
        let extra = condition("DataVolumesReady", true, "AllDVsReady", "", &t1);
        let running = vmi(VmiPhase::Running, vec![ready.clone(), extra.clone()]);
        let mirrored = vm_conditions(&again, Some(&running), &t1);
        assert_eq!(mirrored, vec![ready, extra]);
    }

    fn pod(node: Option<&str>, ip: Option<&str>) -> PodView {
        PodView {
            name: "virt-launcher-vm-abcde".into(),
            uid: "p1".into(),
            deleting: false,
            node: node.map(String::from),
            ip: ip.map(String::from),
            phase: ip.map(|_| "Running".into()),
        }
    }

    fn obs<'a>(phase: VmiPhase, pods: &'a [PodView], guest: GuestView) -> VmiObservation<'a> {
        VmiObservation {
            phase,
            deleting: false,
            has_finalizer: true,
            volume_wait: None,
            pods,
            guest,
            start_remaining: Duration::ZERO,
        }
    }

    #[test]
    fn vmi_walks_pending_to_running() {
        use GuestView::*;
        let mut o = obs(VmiPhase::Unset, &[], Absent);
        o.has_finalizer = false;
        assert_eq!(next_vmi_step(&o), VmiStep::AddFinalizer);
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Unset, &[], Absent)),
            VmiStep::MarkPending
        );
        let wait = VolumeWait::Provisioning {
            data_volume: "dv".into(),
            phase: "ImportInProgress".into(),
        };
        let mut o = obs(VmiPhase::Pending, &[], Absent);
        o.volume_wait = Some(&wait);
        assert_eq!(next_vmi_step(&o), VmiStep::WaitVolumes(wait.clone()));
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Pending, &[], Absent)),
            VmiStep::CreatePod
        );
        let unbound = [pod(None, None)];
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Pending, &unbound, Absent)),
            VmiStep::MarkScheduling
        );
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Scheduling, &unbound, Absent)),
            VmiStep::WaitPod
        );
        let bound = [pod(Some("node"), None)];
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Scheduling, &bound, Absent)),
            VmiStep::WaitPod
        );
        let up = [pod(Some("node"), Some("127.10.0.1"))];
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Scheduling, &up, Absent)),
            VmiStep::MarkScheduled { pod: up[0].clone() }
        );
        let mut o = obs(VmiPhase::Scheduled, &up, Absent);
        o.start_remaining = Duration::from_millis(40);
        assert_eq!(
            next_vmi_step(&o),
            VmiStep::WaitStart(Duration::from_millis(40))
        );
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Scheduled, &up, Absent)),
            VmiStep::Boot { pod: up[0].clone() }
        );
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Scheduled, &up, Running)),
            VmiStep::MarkRunning { pod: up[0].clone() }
        );
        assert_eq!(
            next_vmi_step(&obs(VmiPhase::Running, &up, Running)),
            VmiStep::Nothing
        );
    }

    #[test]
    fn vmi_ends_with_its_guest_or_its_pod() {
        use GuestView::*;
        let up = [pod(Some("node"), Some("127.10.0.1"))];
        let step = |phase, pods: &[PodView], guest| next_vmi_step(&obs(phase, pods, guest));
        assert!(matches!(
            step(VmiPhase::Running, &up, Exited(Exit::PoweredOff)),
            VmiStep::Finish {
                phase: VmiPhase::Succeeded,
                ..
            }
        ));
        assert!(matches!(
            step(VmiPhase::Running, &up, Exited(Exit::Crashed("oops".into()))),
            VmiStep::Finish { phase: VmiPhase::Failed, ref reason, .. } if reason == "GuestCrashed"
        ));
        // Restarted simulation: a Running VMI whose guest is not here crashed.
        assert!(matches!(
            step(VmiPhase::Running, &up, Absent),
            VmiStep::Finish { phase: VmiPhase::Failed, ref reason, .. } if reason == "GuestNotRunning"
        ));
        // The pod going away fails the VMI, whatever the guest did.
        let deleting = [PodView {
            deleting: true,
            ..up[0].clone()
        }];
        assert!(matches!(
            step(VmiPhase::Running, &deleting, Exited(Exit::PoweredOff)),
            VmiStep::Finish { phase: VmiPhase::Failed, ref reason, .. } if reason == "LauncherPodGone"
        ));
        assert!(matches!(
            step(VmiPhase::Scheduling, &[], Absent),
            VmiStep::Finish {
                phase: VmiPhase::Failed,
                ..
            }
        ));
        // After the end, the pod's container ends too.
        assert_eq!(
            step(VmiPhase::Succeeded, &up, Exited(Exit::PoweredOff)),
            VmiStep::FinishPod {
                pod: up[0].name.clone(),
                phase: VmiPhase::Succeeded
            }
        );
        let ended = [PodView {
            phase: Some("Succeeded".into()),
            ..up[0].clone()
        }];
        assert_eq!(
            step(VmiPhase::Succeeded, &ended, Exited(Exit::PoweredOff)),
            VmiStep::Nothing
        );
    }

    #[test]
    fn deletion_stops_the_guest_then_waits_for_the_pod_then_releases() {
        use GuestView::*;
        let up = [pod(Some("node"), Some("127.10.0.1"))];
        let deleting = |phase, pods: &[PodView], guest, has_finalizer| {
            next_vmi_step(&VmiObservation {
                deleting: true,
                has_finalizer,
                ..obs(phase, pods, guest)
            })
        };
        assert_eq!(
            deleting(VmiPhase::Running, &up, Running, true),
            VmiStep::ShutdownGuest
        );
        assert!(matches!(
            deleting(VmiPhase::Running, &up, Exited(Exit::PoweredOff), true),
            VmiStep::Finish {
                phase: VmiPhase::Succeeded,
                ..
            }
        ));
        assert_eq!(
            deleting(VmiPhase::Succeeded, &up, Exited(Exit::PoweredOff), true),
            VmiStep::DeletePods
        );
        let going = [PodView {
            deleting: true,
            ..up[0].clone()
        }];
        assert_eq!(
            deleting(VmiPhase::Succeeded, &going, Absent, true),
            VmiStep::WaitPodsGone
        );
        // A pod already being deleted powers the guest off itself.
        assert_eq!(
            deleting(VmiPhase::Running, &going, Running, true),
            VmiStep::WaitPodsGone
        );
        assert_eq!(
            deleting(VmiPhase::Succeeded, &[], Absent, true),
            VmiStep::RemoveFinalizer
        );
        assert_eq!(
            deleting(VmiPhase::Succeeded, &[], Absent, false),
            VmiStep::Nothing
        );
        // A VMI deleted before it was scheduled just goes.
        assert_eq!(
            deleting(VmiPhase::Pending, &[], Absent, true),
            VmiStep::RemoveFinalizer
        );
    }

    #[test]
    fn device_targets_count_per_bus() {
        assert_eq!(
            device_targets(&[
                DiskBus::Virtio,
                DiskBus::Sata,
                DiskBus::Virtio,
                DiskBus::Scsi
            ]),
            vec!["vda", "sda", "vdb", "sdb"]
        );
    }

    #[test]
    fn a_refused_start_is_reported_until_a_vmi_exists_or_no_start_is_due() {
        let now = Time(Timestamp::from_second(0).unwrap());
        let refused = start_refused(
            "admission webhook \"x\" denied the request: no memory requested",
            &now,
        );
        assert_eq!(refused.type_, condition_types::FAILURE);
        assert_eq!(refused.status, "True");
        assert_eq!(refused.reason.as_deref(), Some(FAILED_CREATE));
        assert_eq!(
            refused.message.as_deref(),
            Some(
                "Failure while starting VMI: admission webhook \"x\" denied the request: no memory requested"
            )
        );
        let previous = vec![refused.clone()];
        assert_eq!(
            pending_start_refusal(&previous, &VmAction::Start, false),
            Some(refused)
        );
        assert_eq!(
            pending_start_refusal(&previous, &VmAction::Start, true),
            None
        );
        assert_eq!(
            pending_start_refusal(&previous, &VmAction::Nothing, false),
            None
        );
        // The unknown-run-strategy failure is not a refused start.
        let other = condition(
            condition_types::FAILURE,
            true,
            FAILED_CREATE,
            "unknown spec.runStrategy",
            &now,
        );
        assert_eq!(
            pending_start_refusal(&[other], &VmAction::Start, false),
            None
        );
    }
}
