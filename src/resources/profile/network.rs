//! The addresses and names of profile `crc-kubevirt-v1` (docs/design/network.md). Every artefact
//! of the profile takes them from here; none takes an address observed at run time, so no
//! launcher-pod IP can reach the installed cluster.

use std::net::Ipv4Addr;

/// Cluster name: with [`BASE_DOMAIN`] the cluster is `crc.testing`.
pub const CLUSTER_NAME: &str = "crc";
/// Base domain of the guest cluster.
pub const BASE_DOMAIN: &str = "testing";
/// The guest's hostname, and so its node name (CRC's units expect `node/crc`).
pub const HOSTNAME: &str = "crc";
/// The API names and the apps domain CRC uses (the apps domain is spelled with a dash).
pub const API_HOST: &str = "api.crc.testing";
pub const API_INT_HOST: &str = "api-int.crc.testing";
pub const APPS_DOMAIN: &str = "apps-crc.testing";
/// The domain dnsmasq keeps local (never forwarded).
pub const LOCAL_DOMAIN: &str = "crc.testing";

/// The node IP, on the dummy interface [`DUMMY_INTERFACE`]: what every CRC name resolves to.
pub const NODE_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 126, 11);
/// Prefix length of the node IP's network (= the machine network).
pub const NODE_PREFIX: u8 = 24;
/// The dummy interface holding the node IP (SNC's name).
pub const DUMMY_INTERFACE: &str = "eth10";
/// NetworkManager connection id of the dummy interface.
pub const DUMMY_CONNECTION: &str = "crc-node-ip";

/// The guest side of KubeVirt's masquerade binding. Pinned: the guest address (`.2`) is
/// recorded by the installed system and must be the same in every clone.
pub const VM_NETWORK_CIDR: &str = "10.0.2.0/24";
/// install-config networks (SNC's).
pub const MACHINE_NETWORK: &str = "192.168.126.0/24";
pub const CLUSTER_NETWORK: &str = "10.217.0.0/22";
pub const CLUSTER_NETWORK_HOST_PREFIX: u8 = 23;
pub const SERVICE_NETWORK: &str = "10.217.4.0/23";
/// The guest cluster's network plugin.
pub const NETWORK_TYPE: &str = "OVNKubernetes";
/// The guest cluster's MTU: the default OpenShift pod MTU (1400) less the guest's own Geneve
/// overhead (100), so the disk does not inherit the MTU of the pod it was built in.
pub const CLUSTER_MTU: u32 = 1300;

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(cidr: &str) -> (u32, u32) {
        let (ip, len) = cidr.split_once('/').unwrap();
        let ip: Ipv4Addr = ip.parse().unwrap();
        let len: u32 = len.parse().unwrap();
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        assert_eq!(u32::from(ip) & !mask, 0, "{cidr} is a network address");
        (u32::from(ip), mask)
    }

    fn overlap(a: &str, b: &str) -> bool {
        let ((ia, ma), (ib, mb)) = (v4(a), v4(b));
        let mask = ma & mb;
        ia & mask == ib & mask
    }

    #[test]
    fn networks_are_disjoint_and_the_node_ip_is_in_the_machine_network() {
        // The guest's own networks, and OVN-Kubernetes' internal defaults (join, transit,
        // masquerade), none of which the masquerade CIDR may shadow.
        let nets = [
            VM_NETWORK_CIDR,
            MACHINE_NETWORK,
            CLUSTER_NETWORK,
            SERVICE_NETWORK,
            "100.64.0.0/16",
            "100.88.0.0/16",
            "169.254.0.0/17",
        ];
        for (i, a) in nets.iter().enumerate() {
            for b in &nets[i + 1..] {
                assert!(!overlap(a, b), "{a} overlaps {b}");
            }
        }
        let (net, mask) = v4(MACHINE_NETWORK);
        assert_eq!(u32::from(NODE_IP) & mask, net);
        assert_eq!(mask.count_ones(), u32::from(NODE_PREFIX));
        assert!(API_HOST.ends_with(LOCAL_DOMAIN) && API_INT_HOST.ends_with(LOCAL_DOMAIN));
        assert_eq!(format!("{CLUSTER_NAME}.{BASE_DOMAIN}"), LOCAL_DOMAIN);
    }
}
