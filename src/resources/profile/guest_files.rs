//! The files and units profile `crc-kubevirt-v1` puts into the guest, rendered once and used
//! twice: in the live Ignition (the install-time system) and in MachineConfigs (the installed
//! system). See docs/design/network.md and docs/design/certificates-and-time.md.

use super::ignition_config::{Config, Dropin, File, Unit};
use super::network::{
    API_HOST, API_INT_HOST, APPS_DOMAIN, DUMMY_CONNECTION, DUMMY_INTERFACE, LOCAL_DOMAIN, NODE_IP,
    NODE_PREFIX,
};

/// The dummy interface's NetworkManager profile (NetworkManager ignores keyfiles others can read).
pub const NODE_IP_KEYFILE: &str = "/etc/NetworkManager/system-connections/crc-node-ip.nmconnection";
/// The kubelet drop-in pinning the node IP. It sorts after `nodeip-configuration`'s
/// `20-nodenet.conf`, so it wins.
pub const KUBELET_NODE_IP_DROPIN: &str = "/etc/systemd/system/kubelet.service.d/80-nodeip.conf";
/// dnsmasq's configuration for the CRC names (not the crc-agent's `crc-dnsmasq.conf`, so the
/// agent's run-time file never touches a MachineConfig-managed one).
pub const DNSMASQ_CONF: &str = "/etc/dnsmasq.d/crc-kubevirt.conf";
/// The drop-in ordering dnsmasq after the network (it listens on the dummy interface's address).
pub const DNSMASQ_DROPIN: &str = "10-crc-kubevirt.conf";
/// Node sizing settings the kubelet reads (SNC's values).
pub const NODE_SIZING_ENV: &str = "/etc/node-sizing-enabled.env";

/// `mode` values, as Ignition wants them (decimal).
const MODE_PRIVATE: u32 = 0o600;
const MODE_PUBLIC: u32 = 0o644;
/// NetworkManager's default DNS priority is 100; lower is asked first.
const NODE_IP_DNS_PRIORITY: u32 = 10;

/// The dummy interface holding the node IP; its DNS server (dnsmasq on the same address) comes
/// before the DHCP-provided ones in `/etc/resolv.conf`.
pub fn node_ip_keyfile() -> String {
    format!(
        "[connection]\n\
         id={DUMMY_CONNECTION}\n\
         type=dummy\n\
         interface-name={DUMMY_INTERFACE}\n\
         autoconnect=true\n\
         \n\
         [ipv4]\n\
         method=manual\n\
         address1={NODE_IP}/{NODE_PREFIX}\n\
         never-default=true\n\
         dns={NODE_IP};\n\
         dns-priority={NODE_IP_DNS_PRIORITY}\n\
         \n\
         [ipv6]\n\
         method=disabled\n"
    )
}

/// The kubelet's node IP, whatever address the NIC has.
pub fn kubelet_node_ip_dropin() -> String {
    format!("[Service]\nEnvironment=\"KUBELET_NODE_IP={NODE_IP}\" \"KUBELET_NODE_IPS={NODE_IP}\"\n")
}

/// dnsmasq answers the CRC names with the node IP, keeps `crc.testing` local and forwards the
/// rest to the servers in `/etc/resolv.conf` (skipping itself).
pub fn dnsmasq_conf() -> String {
    format!(
        "listen-address={NODE_IP}\n\
         local=/{LOCAL_DOMAIN}/\n\
         address=/{API_HOST}/{NODE_IP}\n\
         address=/{API_INT_HOST}/{NODE_IP}\n\
         address=/{APPS_DOMAIN}/{NODE_IP}\n"
    )
}

fn dnsmasq_ordering() -> String {
    "[Unit]\nWants=NetworkManager-wait-online.service\nAfter=NetworkManager-wait-online.service\n"
        .to_owned()
}

/// SNC's node sizing: automatic sizing off, fixed reservations.
pub fn node_sizing_env() -> String {
    "NODE_SIZING_ENABLED=false\n\
     SYSTEM_RESERVED_MEMORY=350Mi\n\
     SYSTEM_RESERVED_CPU=200m\n\
     SYSTEM_RESERVED_ES=350Mi\n"
        .to_owned()
}

/// chronyd masked: nothing corrects the guest clock KubeVirt set (removed before sealing).
pub fn chronyd_mask() -> Config {
    Config::of(
        Vec::new(),
        vec![Unit {
            name: "chronyd.service".to_owned(),
            mask: Some(true),
            ..Unit::default()
        }],
    )
}

/// The node IP on the dummy interface, and the kubelet told to use it.
pub fn node_ip() -> Config {
    Config::of(
        vec![
            File::text(NODE_IP_KEYFILE, MODE_PRIVATE, &node_ip_keyfile()),
            File::text(
                KUBELET_NODE_IP_DROPIN,
                MODE_PUBLIC,
                &kubelet_node_ip_dropin(),
            ),
        ],
        Vec::new(),
    )
}

/// dnsmasq for the CRC names, enabled and ordered after the network.
pub fn dnsmasq() -> Config {
    Config::of(
        vec![File::text(DNSMASQ_CONF, MODE_PUBLIC, &dnsmasq_conf())],
        vec![Unit {
            name: "dnsmasq.service".to_owned(),
            enabled: Some(true),
            dropins: vec![Dropin {
                name: DNSMASQ_DROPIN.to_owned(),
                contents: dnsmasq_ordering(),
            }],
            ..Unit::default()
        }],
    )
}

/// SNC's node sizing file.
pub fn node_sizing() -> Config {
    Config::of(
        vec![File::text(NODE_SIZING_ENV, MODE_PUBLIC, &node_sizing_env())],
        Vec::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_crc_name_resolves_to_the_node_ip_and_nothing_else_is_named() {
        let conf = dnsmasq_conf();
        for name in [API_HOST, API_INT_HOST, APPS_DOMAIN] {
            assert!(
                conf.contains(&format!("address=/{name}/192.168.126.11\n")),
                "{conf}"
            );
        }
        let addresses: Vec<&str> = conf
            .lines()
            .filter_map(|l| l.rsplit_once('/').map(|(_, ip)| ip))
            .filter(|ip| !ip.is_empty())
            .collect();
        assert!(addresses.iter().all(|ip| *ip == "192.168.126.11"), "{conf}");
    }

    #[test]
    fn the_keyfile_is_private_and_pins_the_node_ip() {
        let config = node_ip();
        let files = &config.storage.as_ref().unwrap().files;
        assert_eq!(files[0].path, NODE_IP_KEYFILE);
        assert_eq!(files[0].mode, 0o600);
        assert!(node_ip_keyfile().contains("address1=192.168.126.11/24\n"));
        assert!(kubelet_node_ip_dropin().contains("KUBELET_NODE_IP=192.168.126.11"));
        // Lexically after nodeip-configuration's 20-nodenet.conf.
        let dropin = KUBELET_NODE_IP_DROPIN.rsplit('/').next().unwrap();
        assert!(dropin > "20-nodenet.conf");
    }
}
