//! The pod network: addresses here, NetworkPolicy enforcement at guests' doors in [`ingress`]
//! (decided by [`policy`]).
//!
//! Pod IPs. Every simulated pod (Job pods and virt-launcher pods alike) gets its own address in
//! `127.0.0.0/8`: Linux routes the whole block to `lo`, so a process can bind and be reached on
//! it without any network setup, and two pods never share an address.

pub mod ingress;
pub mod policy;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};

use guestcluster::kubevirt::VirtualMachineInstance;

/// First address handed out; `127.0.0.x` stays free for the control plane and host services.
const FIRST: u32 = u32::from_be_bytes([127, 10, 0, 1]);
/// Last usable address of `127.0.0.0/8`.
const LAST: u32 = u32::from_be_bytes([127, 255, 255, 254]);

/// Hands out one loopback address per pod. A released address is only handed out again after
/// the whole range has been used once, so a stale client of a deleted pod does not reach the
/// pod that replaced it (pod IPs change on a real cluster too).
#[derive(Default)]
pub struct IpAllocator {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    in_use: BTreeSet<u32>,
    /// The last address handed out; the search for a free one continues after it.
    cursor: Option<u32>,
}

impl IpAllocator {
    /// A fresh address not currently allocated.
    ///
    /// # Panics
    /// When all ~16 million addresses are in use at once, which no simulation comes near.
    pub fn allocate(&self) -> Ipv4Addr {
        let mut state = self.lock();
        let start = state.cursor.map_or(FIRST, next);
        let mut candidate = start;
        loop {
            if usable(candidate) && !state.in_use.contains(&candidate) {
                state.in_use.insert(candidate);
                state.cursor = Some(candidate);
                return Ipv4Addr::from(candidate);
            }
            candidate = next(candidate);
            assert!(
                candidate != start,
                "the pod IP range 127.10.0.1-127.255.255.254 is exhausted"
            );
        }
    }

    /// Marks addresses that objects of an earlier simulation still show (pod `podIP`s, VMI
    /// interface addresses) as allocated, and continues handing out after the highest of them:
    /// a restarted simulation must not give a new pod the address a dead pod still reports (a
    /// Service or Route would reach the wrong guest). Addresses outside the pod range are
    /// ignored. Whoever finds the object gone releases its address as usual; addresses nobody
    /// claims stay reserved for the life of this allocator.
    pub fn reserve(&self, ips: impl IntoIterator<Item = Ipv4Addr>) {
        let mut state = self.lock();
        for ip in ips {
            let ip = u32::from(ip);
            if (FIRST..=LAST).contains(&ip) && usable(ip) {
                state.in_use.insert(ip);
                state.cursor = Some(state.cursor.map_or(ip, |c| c.max(ip)));
            }
        }
    }

    /// Gives `ip` back; releasing an address that is not allocated does nothing.
    pub fn release(&self, ip: Ipv4Addr) {
        self.lock().in_use.remove(&u32::from(ip));
    }

    /// Whether `ip` is currently allocated.
    pub fn is_allocated(&self, ip: Ipv4Addr) -> bool {
        self.lock().in_use.contains(&u32::from(ip))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // The state is a set and a cursor, valid after any panic in between; keep using it.
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Reserves (see [`IpAllocator::reserve`]) every address shown by a pod or a VMI in the cluster:
/// run once when the simulation starts, before anything allocates.
pub async fn reserve_existing(client: &kube::Client, ips: &IpAllocator) -> Result<(), kube::Error> {
    let mut found = Vec::new();
    for pod in Api::<Pod>::all(client.clone())
        .list(&ListParams::default())
        .await?
    {
        let status = pod.status.unwrap_or_default();
        found.extend(status.pod_ip);
        found.extend(status.pod_ips.into_iter().flatten().map(|p| p.ip));
    }
    match Api::<VirtualMachineInstance>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(vmis) => {
            for vmi in vmis {
                for interface in vmi.status.unwrap_or_default().interfaces {
                    found.extend(interface.ip_address);
                    found.extend(interface.ip_addresses);
                }
            }
        }
        // No KubeVirt CRDs in this cluster: no VMIs to look at.
        Err(kube::Error::Api(status)) if status.code == 404 => {}
        Err(err) => return Err(err),
    }
    ips.reserve(found.iter().filter_map(|ip| ip.parse().ok()));
    Ok(())
}

/// The address after `ip`, wrapping from the end of the range to its start.
fn next(ip: u32) -> u32 {
    if ip >= LAST { FIRST } else { ip + 1 }
}

/// Network (`.0`) and broadcast-looking (`.255`) addresses confuse some tools; skip them.
fn usable(ip: u32) -> bool {
    !matches!(ip & 0xff, 0 | 255)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn starts_at_127_10_0_1_and_counts_up() {
        let ips = IpAllocator::default();
        assert_eq!(ips.allocate(), Ipv4Addr::new(127, 10, 0, 1));
        assert_eq!(ips.allocate(), Ipv4Addr::new(127, 10, 0, 2));
    }

    #[test]
    fn skips_dot_zero_and_dot_255() {
        let ips = IpAllocator::default();
        let all: Vec<_> = (0..600).map(|_| ips.allocate()).collect();
        assert!(all.iter().all(|ip| !matches!(ip.octets()[3], 0 | 255)));
        assert!(all.contains(&Ipv4Addr::new(127, 10, 1, 1)));
    }

    #[test]
    fn never_hands_out_an_allocated_address_twice() {
        let ips = IpAllocator::default();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            assert!(seen.insert(ips.allocate()));
        }
    }

    #[test]
    fn reserved_addresses_are_skipped_and_the_cursor_moves_past_them() {
        let ips = IpAllocator::default();
        ips.reserve([
            Ipv4Addr::new(127, 10, 0, 1),
            Ipv4Addr::new(127, 10, 0, 7),
            Ipv4Addr::new(127, 0, 0, 1),
        ]);
        assert!(ips.is_allocated(Ipv4Addr::new(127, 10, 0, 1)));
        assert!(
            !ips.is_allocated(Ipv4Addr::new(127, 0, 0, 1)),
            "outside the range"
        );
        assert_eq!(ips.allocate(), Ipv4Addr::new(127, 10, 0, 8));
        ips.release(Ipv4Addr::new(127, 10, 0, 7));
        assert!(!ips.is_allocated(Ipv4Addr::new(127, 10, 0, 7)));
    }

    #[test]
    fn a_released_address_is_not_reused_at_once() {
        let ips = IpAllocator::default();
        let first = ips.allocate();
        ips.release(first);
        assert!(!ips.is_allocated(first));
        assert_ne!(ips.allocate(), first);
    }

    #[test]
    fn wraps_around_to_released_addresses_and_skips_held_ones() {
        let ips = IpAllocator::default();
        let first = ips.allocate();
        let second = ips.allocate();
        ips.release(first);
        ips.lock().cursor = Some(LAST);
        assert_eq!(ips.allocate(), first);
        assert_eq!(ips.allocate(), Ipv4Addr::new(127, 10, 0, 3));
        assert!(ips.is_allocated(second));
    }

    #[test]
    fn is_shared_between_threads() {
        let ips = std::sync::Arc::new(IpAllocator::default());
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let ips = ips.clone();
                std::thread::spawn(move || (0..100).map(|_| ips.allocate()).collect::<Vec<_>>())
            })
            .collect();
        let mut all = std::collections::HashSet::new();
        for handle in handles {
            for ip in handle.join().expect("allocating thread") {
                assert!(all.insert(ip), "{ip} handed out twice");
            }
        }
    }
}
