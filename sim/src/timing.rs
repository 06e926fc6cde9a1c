//! Every simulated duration, in one place. [`Timings::fast`] makes a whole bundle build take
//! seconds (tests); [`Timings::realistic`] is slow enough to watch (demo narration);
//! [`Timings::real`] is what a real cluster takes, never run, only held against the product's
//! deadlines (`tests/e2e_deadlines.rs`).

use std::time::Duration;

#[derive(Clone, Debug)]
pub struct Timings {
    /// CDI: time to import (http) or clone (pvc) per GiB of *allocated* data, and at least this.
    pub import: Duration,
    pub clone: Duration,
    /// KubeVirt: Scheduling → Running (launcher pod start + firmware).
    pub vm_start: Duration,
    /// Guest: power-on until sshd accepts connections.
    pub boot: Duration,
    /// Guest: graceful shutdown (ACPI) until the VMI ends.
    pub shutdown: Duration,
    /// Guest: a bootstrap-in-place live ISO booted until bootkube has checked the Ignition's
    /// certificates (and fails, or starts the install).
    pub bootkube: Duration,
    /// Guest: live-ISO install of OpenShift until the installed disk is ready.
    pub install: Duration,
    /// Guest: a MachineConfig rollout (reboot of the node).
    pub rollout: Duration,
    /// Guest: kubelet start until cluster operators report Available.
    pub operators: Duration,
    /// kubelet: pod start (image pull + container start) before the process runs.
    pub pod_start: Duration,
    /// Guest: a new CSR signer's `notBefore` until the kube-controller-manager signs with it
    /// (its operator's wait for the API server to trust it). Whole seconds (guest time).
    pub csr_signer_propagation: Duration,
}

impl Timings {
    /// For tests: every step well under a second.
    pub fn fast() -> Self {
        let ms = Duration::from_millis;
        Self {
            import: ms(50),
            clone: ms(50),
            vm_start: ms(100),
            boot: ms(100),
            shutdown: ms(50),
            bootkube: ms(100),
            install: ms(300),
            rollout: ms(200),
            operators: ms(300),
            pod_start: ms(50),
            csr_signer_propagation: Duration::from_secs(1),
        }
    }

    /// For the demo: slow enough to watch, still minutes not hours.
    pub fn realistic() -> Self {
        let s = Duration::from_secs;
        Self {
            import: s(2),
            clone: s(2),
            vm_start: s(2),
            boot: s(3),
            shutdown: s(1),
            bootkube: s(5),
            install: s(10),
            rollout: s(3),
            operators: s(5),
            pod_start: s(1),
            csr_signer_propagation: s(3),
        }
    }
}

impl Timings {
    /// What a real OpenShift Virtualization cluster and a real OpenShift guest take, at the
    /// upper end. Each figure's source is in `docs/simulation.md` ("Timing"); the CDI copy rate
    /// is an estimate (upstream documents none).
    pub fn real() -> Self {
        let s = Duration::from_secs;
        let min = |m: u64| s(m * 60);
        Self {
            // A host-assisted copy at about 85 MiB/s: 80 GiB in 16 min.
            import: s(12),
            clone: s(12),
            // virt-launcher pod scheduled, its image pulled, firmware started.
            vm_start: min(2),
            // RHCOS from firmware to sshd.
            boot: min(2),
            // The kubelet stops every pod, then the OS syncs and powers off.
            shutdown: min(3),
            // The live ISO boots and pulls the release before bootkube runs.
            bootkube: min(10),
            // openshift-install allows 20 min for the API and 30 min for bootstrapping.
            install: min(50),
            // A MachineConfig rollout on a single node: drain, reboot, control plane back.
            rollout: min(20),
            // A cluster start until every operator is Available: 15–25 min.
            operators: min(25),
            // An image pulled and the container started.
            pod_start: min(2),
            // The kube-controller-manager operator's `ManageCSRSigner`: five minutes.
            csr_signer_propagation: min(5),
        }
    }
}

impl Default for Timings {
    fn default() -> Self {
        Self::fast()
    }
}
