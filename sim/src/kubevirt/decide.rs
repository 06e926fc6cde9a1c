//! The pure part of the simulated virt-handler: the next step for a VMI on this node, given what
//! is observed of it, its launcher pod and its guest. Everything else a VMI goes through (its
//! creation by the VM controller, `Pending` → `Scheduling` → `Scheduled`, the launcher pod, the
//! `Ready` condition, failing it when its pod goes, the finalizers) is upstream virt-controller's.

use std::time::Duration;

use guestcluster::kubevirt::VmiPhase;

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
        !self.deleting && !self.ended() && self.ip.is_some()
    }
}

/// How a guest ended, as this process saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Exit {
    PoweredOff,
    Crashed(String),
    /// Its virt-launcher pod was deleted: virt-launcher shut the domain down on its way out.
    PodDeleted,
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
    /// virt-controller handed the VMI to this node (`status.nodeName`).
    pub on_this_node: bool,
    pub pods: &'a [PodView],
    pub guest: GuestView,
    /// While `Scheduled`: how long until the guest may be started (`Timings.vm_start`).
    pub start_remaining: Duration,
}

/// One step of virt-handler (and of virt-launcher, whose exit ends its pod).
#[derive(Clone, Debug, PartialEq)]
pub enum VmiStep {
    /// Nothing to do until something changes.
    Nothing,
    /// Gracefully power the guest off.
    ShutdownGuest,
    /// Set a final phase.
    Finish {
        phase: VmiPhase,
        reason: String,
        message: String,
    },
    /// Wait before starting the guest.
    WaitStart(Duration),
    /// Start the guest.
    Boot { pod: PodView },
    /// The guest runs: phase `Running`.
    MarkRunning { pod: PodView },
    /// The VMI ended; virt-launcher exits, so its pod's `compute` container ends with this phase.
    FinishPod { pod: String, phase: VmiPhase },
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
        Exit::PodDeleted => finish(
            VmiPhase::Failed,
            "LauncherPodGone",
            "the virt-launcher pod was deleted",
        ),
    }
}

/// The next step for a VMI.
pub fn next_vmi_step(obs: &VmiObservation<'_>) -> VmiStep {
    if !obs.on_this_node {
        return VmiStep::Nothing;
    }
    let pod_deleting = obs.pods.iter().any(|p| p.deleting);
    let pod = obs.pods.iter().find(|p| p.usable()).cloned();
    let finish_pod = |pod: Option<PodView>| match pod {
        Some(pod) => VmiStep::FinishPod {
            pod: pod.name,
            phase: obs.phase,
        },
        None => VmiStep::Nothing,
    };
    if obs.phase.is_final() {
        if obs.guest == GuestView::Running && !pod_deleting {
            return VmiStep::ShutdownGuest;
        }
        return finish_pod(pod);
    }
    if obs.deleting {
        // A launcher pod already being deleted powers the guest off itself.
        if obs.guest == GuestView::Running && !pod_deleting {
            return VmiStep::ShutdownGuest;
        }
        if obs.guest == GuestView::Running {
            return VmiStep::Nothing;
        }
        if matches!(obs.phase, VmiPhase::Scheduled | VmiPhase::Running) {
            return match &obs.guest {
                GuestView::Exited(Exit::Crashed(message)) => {
                    finish(VmiPhase::Failed, "GuestCrashed", message)
                }
                _ => finish(VmiPhase::Succeeded, "Deleted", "the VMI was deleted"),
            };
        }
        return VmiStep::Nothing;
    }
    match obs.phase {
        VmiPhase::Scheduled => match (pod, &obs.guest) {
            // virt-controller fails a Scheduled VMI whose pod is gone.
            (None, _) => VmiStep::Nothing,
            (Some(pod), GuestView::Running) => VmiStep::MarkRunning { pod },
            (Some(_), GuestView::Exited(exit)) => finish_after_exit(exit),
            (Some(_), GuestView::Absent) if !obs.start_remaining.is_zero() => {
                VmiStep::WaitStart(obs.start_remaining)
            }
            (Some(pod), GuestView::Absent) => VmiStep::Boot { pod },
        },
        VmiPhase::Running => match &obs.guest {
            GuestView::Exited(exit) => finish_after_exit(exit),
            GuestView::Absent => finish(
                VmiPhase::Failed,
                "GuestNotRunning",
                "the guest is not running (the simulation was restarted or lost it)",
            ),
            GuestView::Running => VmiStep::Nothing,
        },
        _ => VmiStep::Nothing,
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
    use guestcluster::kubevirt::DiskBus;

    fn pod(ip: Option<&str>) -> PodView {
        PodView {
            name: "virt-launcher-vm-abcde".into(),
            uid: "p1".into(),
            deleting: false,
            node: Some("node".into()),
            ip: ip.map(String::from),
            phase: Some("Running".into()),
        }
    }

    fn observe(phase: VmiPhase, pods: &[PodView], guest: GuestView, deleting: bool) -> VmiStep {
        next_vmi_step(&VmiObservation {
            phase,
            deleting,
            on_this_node: true,
            pods,
            guest,
            start_remaining: Duration::ZERO,
        })
    }

    #[test]
    fn a_scheduled_vmi_boots_then_runs() {
        let pods = [pod(Some("127.10.0.5"))];
        let waiting = next_vmi_step(&VmiObservation {
            phase: VmiPhase::Scheduled,
            deleting: false,
            on_this_node: true,
            pods: &pods,
            guest: GuestView::Absent,
            start_remaining: Duration::from_secs(2),
        });
        assert_eq!(waiting, VmiStep::WaitStart(Duration::from_secs(2)));
        assert_eq!(
            observe(VmiPhase::Scheduled, &pods, GuestView::Absent, false),
            VmiStep::Boot {
                pod: pods[0].clone()
            }
        );
        assert_eq!(
            observe(VmiPhase::Scheduled, &pods, GuestView::Running, false),
            VmiStep::MarkRunning {
                pod: pods[0].clone()
            }
        );
        assert_eq!(
            observe(VmiPhase::Running, &pods, GuestView::Running, false),
            VmiStep::Nothing
        );
    }

    #[test]
    fn only_vmis_handed_to_this_node_with_a_running_pod_are_touched() {
        let pods = [pod(Some("127.10.0.5"))];
        let elsewhere = next_vmi_step(&VmiObservation {
            phase: VmiPhase::Scheduled,
            deleting: false,
            on_this_node: false,
            pods: &pods,
            guest: GuestView::Absent,
            start_remaining: Duration::ZERO,
        });
        assert_eq!(elsewhere, VmiStep::Nothing);
        for phase in [VmiPhase::Pending, VmiPhase::Scheduling] {
            assert_eq!(
                observe(phase, &pods, GuestView::Absent, false),
                VmiStep::Nothing
            );
        }
        assert_eq!(
            observe(VmiPhase::Scheduled, &[pod(None)], GuestView::Absent, false),
            VmiStep::Nothing,
            "no IP yet"
        );
    }

    #[test]
    fn a_vmi_ends_with_its_guest() {
        let pods = [pod(Some("127.10.0.5"))];
        assert_eq!(
            observe(
                VmiPhase::Running,
                &pods,
                GuestView::Exited(Exit::PoweredOff),
                false
            ),
            finish(
                VmiPhase::Succeeded,
                "GuestShutdown",
                "the guest powered off"
            )
        );
        assert_eq!(
            observe(
                VmiPhase::Running,
                &pods,
                GuestView::Exited(Exit::Crashed("panic".into())),
                false
            ),
            finish(VmiPhase::Failed, "GuestCrashed", "panic")
        );
        assert!(matches!(
            observe(VmiPhase::Running, &pods, GuestView::Absent, false),
            VmiStep::Finish { reason, .. } if reason == "GuestNotRunning"
        ));
        assert_eq!(
            observe(
                VmiPhase::Succeeded,
                &pods,
                GuestView::Exited(Exit::PoweredOff),
                false
            ),
            VmiStep::FinishPod {
                pod: pods[0].name.clone(),
                phase: VmiPhase::Succeeded
            }
        );
        assert_eq!(
            observe(VmiPhase::Failed, &pods, GuestView::Running, false),
            VmiStep::ShutdownGuest,
            "a VMI virt-controller failed (its pod went away) takes its guest down"
        );
    }

    #[test]
    fn deletion_stops_the_guest_then_ends_the_vmi() {
        let pods = [pod(Some("127.10.0.5"))];
        assert_eq!(
            observe(VmiPhase::Running, &pods, GuestView::Running, true),
            VmiStep::ShutdownGuest
        );
        let deleting_pod = [PodView {
            deleting: true,
            ..pods[0].clone()
        }];
        assert_eq!(
            observe(VmiPhase::Running, &deleting_pod, GuestView::Running, true),
            VmiStep::Nothing,
            "the launcher pod's deletion powers the guest off"
        );
        assert_eq!(
            observe(
                VmiPhase::Running,
                &deleting_pod,
                GuestView::Exited(Exit::PoweredOff),
                true
            ),
            finish(VmiPhase::Succeeded, "Deleted", "the VMI was deleted")
        );
        assert_eq!(
            observe(VmiPhase::Pending, &[], GuestView::Absent, true),
            VmiStep::Nothing
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
            ["vda", "sda", "vdb", "sdb"]
        );
    }
}
