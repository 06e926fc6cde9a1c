//! Networking: `ip`, `nmcli`, the resolver NetworkManager writes, dnsmasq's configuration check,
//! and name resolution inside the guest (used for `direct-tcpip` tunnels).
//!
//! The NIC has the masquerade address ([`super::MASQUERADE_GUEST_IP`]); with OVN-Kubernetes
//! (`ovs-configuration.service` active) it sits on `br-ex`. DHCP gives a nameserver that knows no
//! CRC names, so `api.crc.testing` resolves only once dnsmasq is configured and running *and*
//! the resolver points at it — exactly the crc-agent's steps 4 and 5.

use std::net::Ipv4Addr;

use super::{Ctx, DHCP_NAMESERVER, MASQUERADE_GATEWAY, Machine, Run};
use crate::guest::state::{File, NmDns, paths};

fn ovn(machine: &Machine) -> bool {
    machine.unit_active("ovs-configuration.service")
}

fn nic(machine: &Machine) -> &'static str {
    if ovn(machine) { "br-ex" } else { "enp1s0" }
}

fn connections(machine: &Machine) -> Vec<&'static str> {
    if ovn(machine) {
        vec!["ovs-if-br-ex", "ovs-if-phys0", "br-ex"]
    } else {
        vec!["Wired connection 1"]
    }
}

/// `ip [-4] route get ADDR`, `ip route`, `ip addr`.
pub fn ip(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let m = ctx.machine();
    let guest = m.runtime.guest_ip;
    let dev = nic(m);
    let uid = if ctx.root {
        0
    } else {
        ctx.state().users.get(ctx.user).map_or(1000, |u| u.uid)
    };
    match words.as_slice() {
        ["route" | "r", "get", target] => {
            let Ok(target) = target.parse::<Ipv4Addr>() else {
                return Run::fail(
                    1,
                    format!("Error: any valid prefix is expected rather than \"{target}\"."),
                );
            };
            if m.local_addresses().contains(&target) {
                return Run::out(format!(
                    "local {target} dev lo table local src {target} uid {uid} \n    cache <local> \n"
                ));
            }
            Run::out(format!(
                "{target} via {MASQUERADE_GATEWAY} dev {dev} src {guest} uid {uid} \n    cache \n"
            ))
        }
        ["route" | "r"] | ["route" | "r", "show"] => Run::out(format!(
            "default via {MASQUERADE_GATEWAY} dev {dev} proto dhcp src {guest} metric 100 \n10.0.2.0/24 dev {dev} proto kernel scope link src {guest} metric 100 \n"
        )),
        ["addr" | "a" | "address", ..] => {
            let mut out = String::from(
                "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\n    inet 127.0.0.1/8 scope host lo\n",
            );
            out.push_str(&format!(
                "2: {dev}: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\n    inet {guest}/24 brd 10.0.2.255 scope global dynamic {dev}\n"
            ));
            for address in m.local_addresses() {
                if address != guest && !address.is_loopback() {
                    out.push_str(&format!(
                        "3: eth10: <BROADCAST,NOARP,UP,LOWER_UP> mtu 1500\n    inet {address}/24 scope global eth10\n"
                    ));
                }
            }
            Run::out(out)
        }
        _ => Run::fail(1, format!("ip {}: not simulated", args.join(" "))),
    }
}

/// `nmcli con modify [--temporary] NAME ipv4.dns X ipv4.dns-search Y`, `nmcli con show`.
pub fn nmcli(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let temporary = args.iter().any(|a| a == "--temporary");
    let words: Vec<&str> = args
        .iter()
        .map(String::as_str)
        .filter(|a| !a.starts_with('-'))
        .filter(|a| !matches!(*a, "NAME"))
        .collect();
    let words = match words.as_slice() {
        ["connection" | "con" | "c", rest @ ..] => rest.to_vec(),
        _ => return Run::fail(2, format!("nmcli {}: not simulated", args.join(" "))),
    };
    match words.as_slice() {
        [] | ["show"] => {
            let names = connections(ctx.machine()).join("\n");
            Run::out(format!("{names}\n"))
        }
        ["modify" | "mod" | "m", name, settings @ ..] => {
            if !connections(ctx.machine()).contains(name) {
                return Run::fail(10, format!("Error: unknown connection '{name}'."));
            }
            if !ctx.root {
                return Run::fail(
                    1,
                    format!("Error: Failed to modify connection '{name}': Insufficient privileges"),
                );
            }
            let mut dns = if temporary {
                ctx.runtime().nm_dns_temporary.clone()
            } else {
                ctx.state().nm_dns.clone()
            }
            .unwrap_or(NmDns {
                servers: Vec::new(),
                search: Vec::new(),
            });
            let mut pairs = settings.chunks(2);
            for pair in pairs.by_ref() {
                let [property, value] = pair else {
                    return Run::fail(2, "Error: value for the last property is missing.");
                };
                let list = value
                    .split([',', ' '])
                    .filter(|v| !v.is_empty())
                    .map(str::to_string)
                    .collect();
                match *property {
                    "ipv4.dns" => dns.servers = list,
                    "ipv4.dns-search" => dns.search = list,
                    other => {
                        return Run::fail(
                            2,
                            format!("Error: property '{other}' is not simulated."),
                        );
                    }
                }
            }
            if temporary {
                ctx.runtime_mut().nm_dns_temporary = Some(dns);
            } else {
                ctx.state_mut().nm_dns = Some(dns);
            }
            Run::ok()
        }
        _ => Run::fail(2, format!("nmcli {}: not simulated", args.join(" "))),
    }
}

/// What a NetworkManager keyfile under `/etc/NetworkManager/system-connections/` adds: the
/// `[ipv4]` section's `address1` and `dns` servers with their `dns-priority` (NetworkManager's
/// default 100). Keyfiles not owned by root or readable by others are ignored, as
/// NetworkManager does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyfile {
    pub address: Option<Ipv4Addr>,
    pub dns: Vec<String>,
    pub dns_priority: i64,
}

pub fn keyfiles(state: &crate::guest::state::GuestState) -> Vec<Keyfile> {
    const DIR: &str = "/etc/NetworkManager/system-connections/";
    state
        .files
        .iter()
        .filter(|(path, file)| {
            path.starts_with(DIR)
                && path.ends_with(".nmconnection")
                && file.owner == "root"
                && file.mode & 0o077 == 0
        })
        .map(|(_, file)| {
            let text = String::from_utf8_lossy(&file.content.0);
            let mut section = "";
            let mut keyfile = Keyfile {
                address: None,
                dns: Vec::new(),
                dns_priority: 100,
            };
            for line in text.lines().map(str::trim) {
                if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                    section = if name == "ipv4" { "ipv4" } else { "" };
                    continue;
                }
                let Some((key, value)) = line.split_once('=') else {
                    continue;
                };
                if section != "ipv4" {
                    continue;
                }
                match key.trim() {
                    "address1" => {
                        keyfile.address = value
                            .split(['/', ','])
                            .next()
                            .and_then(|a| a.trim().parse().ok());
                    }
                    "dns" => {
                        keyfile.dns = value
                            .split(';')
                            .map(str::trim)
                            .filter(|s| !s.is_empty())
                            .map(str::to_owned)
                            .collect();
                    }
                    "dns-priority" => {
                        keyfile.dns_priority = value.trim().parse().unwrap_or(100);
                    }
                    _ => {}
                }
            }
            keyfile
        })
        .collect()
}

/// NetworkManager (re)writing `/etc/resolv.conf` from the connections' DNS: keyfile servers
/// whose `dns-priority` is below the default first, then the NIC's (an `nmcli` override, else
/// DHCP's nameserver), then keyfile servers of a higher priority value.
pub fn write_resolv_conf(machine: &mut Machine) {
    let dns = machine
        .runtime
        .nm_dns_temporary
        .clone()
        .or_else(|| machine.state.nm_dns.clone());
    let mut text = String::from("# Generated by NetworkManager\n");
    let mut keyed = keyfiles(&machine.state);
    keyed.sort_by_key(|k| k.dns_priority);
    let servers = |first: bool| -> Vec<String> {
        keyed
            .iter()
            .filter(|k| (k.dns_priority < 100) == first)
            .flat_map(|k| k.dns.clone())
            .collect()
    };
    let (before, after) = (servers(true), servers(false));
    let nic = match dns {
        Some(dns) if !dns.servers.is_empty() => {
            if !dns.search.is_empty() {
                text.push_str(&format!("search {}\n", dns.search.join(" ")));
            }
            dns.servers
        }
        _ => vec![DHCP_NAMESERVER.to_string()],
    };
    for server in before.into_iter().chain(nic).chain(after) {
        text.push_str(&format!("nameserver {server}\n"));
    }
    machine
        .state
        .files
        .insert(paths::RESOLV_CONF.to_string(), File::root(text, 0o644));
}

/// dnsmasq's configuration lines (`/etc/dnsmasq.conf` and `/etc/dnsmasq.d/*.conf`).
fn dnsmasq_lines(machine: &Machine) -> Vec<String> {
    let dir = format!("{}/", paths::DNSMASQ_DIR);
    machine
        .state
        .files
        .iter()
        .filter(|(path, _)| {
            path.as_str() == paths::DNSMASQ_CONF
                || (path.starts_with(&dir) && path.ends_with(".conf"))
        })
        .flat_map(|(_, file)| {
            String::from_utf8_lossy(&file.content.0)
                .lines()
                .map(|l| l.trim().to_string())
                .collect::<Vec<_>>()
        })
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

fn listen_addresses(lines: &[String]) -> Vec<String> {
    lines
        .iter()
        .filter_map(|l| l.strip_prefix("listen-address="))
        .flat_map(|v| v.split(',').map(|a| a.trim().to_string()))
        .collect()
}

/// dnsmasq refuses to start when told to listen on an address the guest does not own (a pod
/// IP written into the configuration, for example).
pub fn check_dnsmasq_config(machine: &Machine) -> Result<(), String> {
    let local = machine.local_addresses();
    for address in listen_addresses(&dnsmasq_lines(machine)) {
        let owned = address
            .parse::<Ipv4Addr>()
            .is_ok_and(|a| local.contains(&a));
        if !owned {
            return Err(format!(
                "dnsmasq: failed to create listening socket for {address}: Cannot assign requested address"
            ));
        }
    }
    Ok(())
}

/// `getent hosts NAME…`: one `ADDRESS NAME` line per name the guest resolves (glibc's format:
/// the address padded to 15 columns); exit status 2 when some name does not resolve, as glibc's
/// `getent` reports a key it did not find.
pub fn getent(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let Some((database, keys)) = args.split_first() else {
        return Run::fail(1, "Usage: getent [OPTION...] database [key ...]");
    };
    if database != "hosts" {
        return Run::fail(1, format!("getent: database {database} is not simulated"));
    }
    let mut run = Run::ok();
    for key in keys {
        match resolve(ctx.machine(), key) {
            Some(address) => run
                .stdout
                .extend_from_slice(format!("{address:<15} {key}\n").as_bytes()),
            None => run.code = 2,
        }
    }
    run
}

/// Resolves `host` as a process in the guest would: `/etc/hosts`, then the nameservers of
/// `/etc/resolv.conf` — only a running dnsmasq on a guest address knows anything (the DHCP
/// nameserver knows no CRC name and the sim has no Internet).
pub fn resolve(machine: &Machine, host: &str) -> Option<Ipv4Addr> {
    let host = host.trim_end_matches('.').to_ascii_lowercase();
    if let Ok(address) = host.parse::<Ipv4Addr>() {
        return Some(address);
    }
    if host == "localhost" {
        return Some(Ipv4Addr::LOCALHOST);
    }
    if let Some(hosts) = machine.state.file(paths::HOSTS) {
        for line in String::from_utf8_lossy(hosts).lines() {
            let mut fields = line.split_whitespace();
            if let Some(Ok(address)) = fields.next().map(str::parse::<Ipv4Addr>)
                && fields.any(|name| name.eq_ignore_ascii_case(&host))
            {
                return Some(address);
            }
        }
    }
    let resolv = machine.state.file(paths::RESOLV_CONF)?;
    let local = machine.local_addresses();
    let asks_local_dnsmasq = String::from_utf8_lossy(resolv).lines().any(|line| {
        line.strip_prefix("nameserver")
            .and_then(|a| a.trim().parse::<Ipv4Addr>().ok())
            .is_some_and(|a| local.contains(&a) && dnsmasq_serves(machine, a))
    });
    if !asks_local_dnsmasq {
        return None;
    }
    dnsmasq_answer(&dnsmasq_lines(machine), &host)
}

fn dnsmasq_serves(machine: &Machine, address: Ipv4Addr) -> bool {
    if !machine.unit_active("dnsmasq.service") {
        return false;
    }
    let listen = listen_addresses(&dnsmasq_lines(machine));
    listen.is_empty() || listen.iter().any(|l| *l == address.to_string())
}

/// dnsmasq's answer from `address=/domain/ip` (longest domain wins, subdomains included) and
/// `host-record=name,ip`.
fn dnsmasq_answer(lines: &[String], host: &str) -> Option<Ipv4Addr> {
    let mut best: Option<(usize, Ipv4Addr)> = None;
    for line in lines {
        if let Some(rest) = line.strip_prefix("address=/") {
            let mut parts = rest.split('/');
            let (Some(domain), Some(address)) = (parts.next(), parts.next()) else {
                continue;
            };
            let domain = domain.to_ascii_lowercase();
            let matches = host == domain || host.ends_with(&format!(".{domain}"));
            if let (true, Ok(address)) = (matches, address.parse::<Ipv4Addr>())
                && best.is_none_or(|(len, _)| domain.len() > len)
            {
                best = Some((domain.len(), address));
            }
        } else if let Some(rest) = line.strip_prefix("host-record=") {
            let fields: Vec<&str> = rest.split(',').collect();
            if let Some((last, names)) = fields.split_last()
                && names.iter().any(|n| n.eq_ignore_ascii_case(host))
                && let Ok(address) = last.parse::<Ipv4Addr>()
            {
                return Some(address);
            }
        }
    }
    best.map(|(_, address)| address)
}

#[cfg(test)]
mod tests {
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD as BASE64;

    use super::super::testing::*;
    use super::*;

    /// The crc-agent's dnsmasq file for guest IP 10.0.2.2 (upstream §5.3 step 4).
    const AGENT_DNSMASQ: &str = "listen-address=10.0.2.2\nexpand-hosts\nlog-queries\nlocal=/crc.testing/\ndomain=crc.testing\naddress=/apps-crc.testing/10.0.2.2\naddress=/api.crc.testing/10.0.2.2\naddress=/api-int.crc.testing/10.0.2.2\n";

    fn write(m: &mut Machine, path: &str, text: &str) {
        let line = format!(
            "echo {} | base64 --decode | sudo tee {path}",
            BASE64.encode(text)
        );
        assert_eq!(run(m, &line).code, 0);
    }

    #[test]
    fn route_get_reports_the_masquerade_address() {
        let mut m = sealed();
        let out = run(&mut m, "ip -4 route get 1.1.1.1");
        assert_eq!(
            stdout(&out),
            "1.1.1.1 via 10.0.2.1 dev br-ex src 10.0.2.2 uid 1000 \n    cache \n"
        );
    }

    #[test]
    fn crc_names_resolve_only_after_the_agent_dns_steps() {
        let mut m = sealed();
        assert_eq!(resolve(&m, "api.crc.testing"), None);
        write(&mut m, "/etc/dnsmasq.d/crc-dnsmasq.conf", AGENT_DNSMASQ);
        assert_eq!(run(&mut m, "sudo systemctl enable dnsmasq").code, 0);
        assert_eq!(run(&mut m, "sudo systemctl start dnsmasq").code, 0);
        // dnsmasq runs, but the resolver still asks DHCP's nameserver.
        assert_eq!(resolve(&m, "api.crc.testing"), None);
        let out = run(
            &mut m,
            "systemctl show ovs-configuration.service -p LoadState --value",
        );
        assert_eq!(stdout(&out), "loaded\n");
        assert_eq!(
            run(&mut m, "sudo systemctl start ovs-configuration.service").code,
            0
        );
        let out = run(
            &mut m,
            "sudo nmcli con modify --temporary ovs-if-br-ex ipv4.dns 10.0.2.2 ipv4.dns-search crc.testing",
        );
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert_eq!(
            run(&mut m, "sudo systemctl restart NetworkManager.service").code,
            0
        );
        let ip = Ipv4Addr::new(10, 0, 2, 2);
        assert_eq!(resolve(&m, "api.crc.testing"), Some(ip));
        assert_eq!(
            resolve(&m, "console-openshift-console.apps-crc.testing"),
            Some(ip)
        );
        assert_eq!(resolve(&m, "example.com"), None);
        assert_eq!(resolve(&m, "localhost"), Some(Ipv4Addr::LOCALHOST));
    }

    #[test]
    fn a_resolv_conf_written_directly_also_works() {
        let mut m = sealed();
        write(&mut m, "/etc/dnsmasq.d/crc-dnsmasq.conf", AGENT_DNSMASQ);
        run(&mut m, "sudo systemctl start dnsmasq");
        write(
            &mut m,
            "/etc/resolv.conf",
            "search crc.testing\nnameserver 10.0.2.2\n",
        );
        assert_eq!(
            resolve(&m, "api-int.crc.testing"),
            Some(Ipv4Addr::new(10, 0, 2, 2))
        );
    }

    #[test]
    fn nmcli_knows_its_connections() {
        let mut m = sealed();
        run(&mut m, "sudo systemctl stop ovs-configuration");
        let out = run(
            &mut m,
            "sudo nmcli con modify --temporary ovs-if-br-ex ipv4.dns 10.0.2.2",
        );
        assert_eq!(out.code, 10);
        assert!(stderr(&out).contains("unknown connection"));
    }

    #[test]
    fn dnsmasq_answers_longest_match_and_host_records() {
        let lines: Vec<String> = [
            "address=/testing/1.1.1.1",
            "address=/crc.testing/2.2.2.2",
            "host-record=special.example,3.3.3.3",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            dnsmasq_answer(&lines, "api.crc.testing"),
            Some(Ipv4Addr::new(2, 2, 2, 2))
        );
        assert_eq!(
            dnsmasq_answer(&lines, "other.testing"),
            Some(Ipv4Addr::new(1, 1, 1, 1))
        );
        assert_eq!(
            dnsmasq_answer(&lines, "special.example"),
            Some(Ipv4Addr::new(3, 3, 3, 3))
        );
        assert_eq!(dnsmasq_answer(&lines, "nope.example"), None);
    }
}
