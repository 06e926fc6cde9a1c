//! The one place the simulated KubeVirt talks to the guest simulation (`sim::guest`): boot a
//! guest from disk images, power it off, ask whether it runs, and hear when it stops.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;

use tokio::sync::broadcast;

use super::decide::Exit;
use crate::SimContext;

/// One disk or CD-ROM handed to the guest, in `domain.devices.disks` order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootDisk {
    pub name: String,
    pub image: PathBuf,
    pub boot_order: Option<u32>,
    pub cdrom: bool,
}

/// What a guest is started with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BootRequest {
    pub vmi_uid: String,
    pub namespace: String,
    pub vm_name: String,
    /// The virt-launcher pod's IP: the guest's SSH server listens there.
    pub ip: Ipv4Addr,
    pub disks: Vec<BootDisk>,
    pub clock_offset_seconds: i64,
}

/// Handle on the guest simulation.
pub struct Guests {
    ctx: Arc<SimContext>,
}

impl Guests {
    pub fn new(ctx: Arc<SimContext>) -> Self {
        Self { ctx }
    }

    /// Starts the guest; returns once it accepts SSH, or why it did not boot.
    pub async fn boot(&self, request: BootRequest) -> Result<(), String> {
        use crate::guest::{BootDisk as GuestDisk, BootSpec, DiskKind};
        let spec = BootSpec {
            vmi_uid: request.vmi_uid,
            namespace: request.namespace,
            vm_name: request.vm_name,
            ip: request.ip,
            disks: request
                .disks
                .into_iter()
                .map(|d| GuestDisk {
                    name: d.name,
                    image: d.image,
                    boot_order: d.boot_order,
                    kind: if d.cdrom {
                        DiskKind::Cdrom
                    } else {
                        DiskKind::Disk
                    },
                })
                .collect(),
            clock_offset_seconds: request.clock_offset_seconds,
        };
        self.ctx
            .guests
            .boot(spec)
            .await
            .map_err(|err| err.to_string())
    }

    /// Graceful (ACPI) power-off; returns once the guest is off. Does nothing for a guest that
    /// does not run. The guest simulation reports no exit for it: `true` when it was running.
    pub async fn shutdown(&self, vmi_uid: &str) -> bool {
        let was_running = self.is_running(vmi_uid);
        self.ctx.guests.shutdown(vmi_uid).await;
        was_running
    }

    pub fn is_running(&self, vmi_uid: &str) -> bool {
        self.ctx.guests.is_running(vmi_uid)
    }

    /// Every guest that stops from now on: its VMI UID and how it ended.
    pub fn subscribe_exits(&self) -> Exits {
        Exits(self.ctx.guests.subscribe_exits())
    }
}

/// Receiver of guest exits.
pub struct Exits(broadcast::Receiver<crate::guest::GuestExit>);

impl Exits {
    /// The next exit; `None` once the guest simulation is gone. Missed exits (a lagging
    /// receiver) are skipped: the VMI controller treats a guest that is not running as crashed.
    pub async fn next(&mut self) -> Option<(String, Exit)> {
        use crate::guest::ExitReason;
        loop {
            match self.0.recv().await {
                Ok(exit) => {
                    let reason = match exit.reason {
                        ExitReason::PoweredOff => Exit::PoweredOff,
                        ExitReason::Crashed(message) => Exit::Crashed(message),
                    };
                    return Some((exit.vmi_uid, reason));
                }
                Err(broadcast::error::RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "simulated KubeVirt missed guest exits");
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}
