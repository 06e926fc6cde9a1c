//! The crc-agent's first guest steps, from the guest IP to the kubelet start in upstream's order
//! (`docs/architecture.md`, "Guest operations"), each an idempotent async function over any
//! [`Guest`]. Every decision is made here from simple command output; nothing but simple commands
//! is sent to the guest.

use std::net::Ipv4Addr;

use super::{Command, Guest, GuestError, write_command};

/// Where dnsmasq reads the CRC names from.
pub const DNSMASQ_CONF: &str = "/etc/dnsmasq.d/crc-dnsmasq.conf";
/// The guest resolver configuration.
pub const RESOLV_CONF: &str = "/etc/resolv.conf";
/// `core`'s authorized keys file.
pub const AUTHORIZED_KEYS: &str = "/home/core/.ssh/authorized_keys";
/// The OVN-Kubernetes bridge connection NetworkManager manages.
pub const OVS_CONNECTION: &str = "ovs-if-br-ex";

/// A failed guest step; the variant names the step.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    #[error("detect guest IP: {0}")]
    GuestIp(#[source] GuestError),
    #[error("detect guest IP: no `src` address in `ip -4 route get 1.1.1.1` output {0:?}")]
    NoGuestIp(String),
    #[error("grow root: {0}")]
    GrowRoot(#[source] GuestError),
    #[error("grow root: {0}")]
    GrowRootLayout(String),
    #[error("grow root: `growpart {disk} {partition}` exited with status {status}: {output}")]
    Growpart {
        disk: String,
        partition: u32,
        status: u32,
        output: String,
    },
    #[error("configure dnsmasq: {0}")]
    Dnsmasq(#[source] GuestError),
    #[error("configure resolver: {0}")]
    Resolver(#[source] GuestError),
    #[error("authorize the instance SSH key: {0}")]
    AuthorizeKey(#[source] GuestError),
    #[error("revoke the install-time SSH keys: {0}")]
    RevokeKeys(#[source] GuestError),
    #[error("start kubelet: {0}")]
    Kubelet(#[source] GuestError),
}

/// Step 2: the guest's own address (the token after `src` in `ip -4 route get 1.1.1.1`) — with
/// KubeVirt's masquerade binding an internal NAT address, not the pod IP.
pub async fn guest_ip<G: Guest>(guest: &G) -> Result<Ipv4Addr, StepError> {
    let output = guest
        .run_checked(&Command::new(["ip", "-4", "route", "get", "1.1.1.1"]))
        .await
        .map_err(StepError::GuestIp)?;
    let text = output.stdout_text();
    parse_route_src(&text).ok_or(StepError::NoGuestIp(text))
}

fn parse_route_src(text: &str) -> Option<Ipv4Addr> {
    let mut words = text.split_whitespace();
    while let Some(word) = words.next() {
        if word == "src" {
            return words.next()?.parse().ok();
        }
    }
    None
}

/// Step 3: grows the root partition to the end of its disk and the XFS on it.
///
/// `growpart` exit 1 (`NOCHANGE`) means already grown. Upstream runs the remount and
/// `xfs_growfs` in a private mount namespace (`unshare --mount sh -c …`); without shell scripts
/// the same end state is reached by remounting `/sysroot` read-write, growing, and remounting it
/// read-only again, as RHCOS keeps it.
pub async fn grow_root<G: Guest>(guest: &G) -> Result<(), StepError> {
    let part = guest
        .run_checked(&Command::new([
            "readlink",
            "-f",
            "/dev/disk/by-partlabel/root",
        ]))
        .await
        .map_err(StepError::GrowRoot)?
        .stdout_text();
    let part = part.trim();
    let part_name = part
        .strip_prefix("/dev/")
        .filter(|n| !n.is_empty() && !n.contains('/'))
        .ok_or_else(|| {
            StepError::GrowRootLayout(format!("root partition {part:?} is not /dev/<name>"))
        })?
        .to_string();
    let disk = guest
        .run_checked(&Command::new(["lsblk", "-no", "PKNAME", part]))
        .await
        .map_err(StepError::GrowRoot)?
        .stdout_text();
    let disk = disk.trim().trim_start_matches("/dev/");
    if disk.is_empty() || disk.contains(char::is_whitespace) || disk.contains('/') {
        return Err(StepError::GrowRootLayout(format!(
            "no single parent disk for {part}: {disk:?}"
        )));
    }
    let number_path = format!("/sys/class/block/{part_name}/partition");
    let number = guest
        .run_checked(&Command::new(["cat", number_path.as_str()]))
        .await
        .map_err(StepError::GrowRoot)?
        .stdout_text();
    let partition: u32 = number.trim().parse().map_err(|_| {
        StepError::GrowRootLayout(format!("{number_path} is not a number: {number:?}"))
    })?;
    let disk = format!("/dev/{disk}");
    let grown = guest
        .run(&Command::sudo([
            "growpart".to_string(),
            disk.clone(),
            partition.to_string(),
        ]))
        .await
        .map_err(StepError::GrowRoot)?;
    match grown.status {
        0 | 1 => {}
        status => {
            let output = format!("{}{}", grown.stdout_text(), grown.stderr_text());
            return Err(StepError::Growpart {
                disk,
                partition,
                status,
                output: output.trim().to_string(),
            });
        }
    }
    guest
        .run_checked(&Command::sudo(["mount", "-o", "remount,rw", "/sysroot"]))
        .await
        .map_err(StepError::GrowRoot)?;
    let grown = guest
        .run_checked(&Command::sudo(["xfs_growfs", "/sysroot"]))
        .await
        .map_err(StepError::GrowRoot);
    let restored = guest
        .run_checked(&Command::sudo(["mount", "-o", "remount,ro", "/sysroot"]))
        .await
        .map_err(StepError::GrowRoot);
    grown?;
    restored?;
    Ok(())
}

/// The dnsmasq configuration upstream writes for the CRC names.
pub fn dnsmasq_config(ip: Ipv4Addr) -> String {
    format!(
        "listen-address={ip}\nexpand-hosts\nlog-queries\nlocal=/crc.testing/\ndomain=crc.testing\naddress=/apps-crc.testing/{ip}\naddress=/api.crc.testing/{ip}\naddress=/api-int.crc.testing/{ip}\n"
    )
}

/// Step 4: dnsmasq answers the CRC names with the guest address.
pub async fn configure_dnsmasq<G: Guest>(guest: &G, ip: Ipv4Addr) -> Result<(), StepError> {
    guest
        .write_file(DNSMASQ_CONF, dnsmasq_config(ip).as_bytes(), 0o644)
        .await
        .map_err(StepError::Dnsmasq)?;
    for verb in ["enable", "start"] {
        guest
            .run_checked(&Command::sudo(["systemctl", verb, "dnsmasq"]))
            .await
            .map_err(StepError::Dnsmasq)?;
    }
    Ok(())
}

fn resolv_conf(ip: Ipv4Addr) -> String {
    format!("search crc.testing\nnameserver {ip}\n")
}

/// Whether a resolver configuration asks `ip` first.
fn resolver_uses(text: &str, ip: Ipv4Addr) -> bool {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .map(str::trim)
        .next()
        .is_some_and(|server| server.parse::<Ipv4Addr>() == Ok(ip))
}

async fn write_resolv_conf<G: Guest>(guest: &G, ip: Ipv4Addr) -> Result<(), StepError> {
    guest
        .write_file(RESOLV_CONF, resolv_conf(ip).as_bytes(), 0o644)
        .await
        .map_err(StepError::Resolver)
}

/// Step 5: the guest's resolver asks its dnsmasq. Without OVN-Kubernetes the resolver file is
/// written directly; with it, NetworkManager gets a temporary DNS override on `ovs-if-br-ex`
/// and is restarted (it rewrites the resolver). If the rewritten resolver does not ask the
/// guest address first, or the connection is unknown, the file is written directly.
pub async fn configure_resolver<G: Guest>(guest: &G, ip: Ipv4Addr) -> Result<(), StepError> {
    let load_state = guest
        .run_checked(&Command::new([
            "systemctl",
            "show",
            "ovs-configuration.service",
            "-p",
            "LoadState",
            "--value",
        ]))
        .await
        .map_err(StepError::Resolver)?
        .stdout_text();
    if load_state.trim() == "not-found" {
        return write_resolv_conf(guest, ip).await;
    }
    guest
        .run_checked(&Command::sudo([
            "systemctl",
            "start",
            "ovs-configuration.service",
        ]))
        .await
        .map_err(StepError::Resolver)?;
    let modify = Command::sudo([
        "nmcli".to_string(),
        "con".to_string(),
        "modify".to_string(),
        "--temporary".to_string(),
        OVS_CONNECTION.to_string(),
        "ipv4.dns".to_string(),
        ip.to_string(),
        "ipv4.dns-search".to_string(),
        "crc.testing".to_string(),
    ]);
    let modified = guest.run(&modify).await.map_err(StepError::Resolver)?;
    let said = format!("{}{}", modified.stdout_text(), modified.stderr_text());
    if said.to_lowercase().contains("unknown connection") {
        return write_resolv_conf(guest, ip).await;
    }
    if !modified.success() {
        return Err(StepError::Resolver(GuestError::failed(
            &modify,
            modified.status,
            said.as_bytes(),
        )));
    }
    guest
        .run_checked(&Command::sudo([
            "systemctl",
            "restart",
            "NetworkManager.service",
        ]))
        .await
        .map_err(StepError::Resolver)?;
    let written = guest
        .read_file(RESOLV_CONF)
        .await
        .map_err(StepError::Resolver)?;
    if !resolver_uses(&String::from_utf8_lossy(&written), ip) {
        write_resolv_conf(guest, ip).await?;
    }
    Ok(())
}

/// Where RHCOS keeps the keys Ignition and the MachineConfig daemon provisioned: a fresh clone's
/// bundle key is there.
pub const PROVISIONED_KEYS_DIR: &str = "/home/core/.ssh/authorized_keys.d";
/// Written beside `authorized_keys`, then renamed over it.
const AUTHORIZED_KEYS_NEW: &str = "/home/core/.ssh/authorized_keys.new";

/// Step 6: `core`'s `authorized_keys` holds exactly `public_key_line` (the instance's key), and
/// nothing is written when it already does. The file is written beside and renamed over, so an
/// agent killed half-way never leaves the guest without a key; the keys provisioned at install
/// stay until [`revoke_provisioned_keys`], after the new key has logged in.
pub async fn authorize_only<G: Guest>(guest: &G, public_key_line: &str) -> Result<(), StepError> {
    let line = public_key_line.trim();
    let failed = StepError::AuthorizeKey;
    if guest.exists(AUTHORIZED_KEYS).await.map_err(failed)? {
        let current = guest.read_file(AUTHORIZED_KEYS).await.map_err(failed)?;
        let text = String::from_utf8_lossy(&current);
        let lines: Vec<&str> = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .collect();
        if lines == [line] {
            return Ok(());
        }
    }
    guest
        .run_checked(&Command::sudo([
            "install",
            "-m",
            "0600",
            "-o",
            "core",
            "-g",
            "core",
            "-D",
            "/dev/null",
            AUTHORIZED_KEYS_NEW,
        ]))
        .await
        .map_err(failed)?;
    guest
        .run_checked_with_input(
            &write_command(AUTHORIZED_KEYS_NEW, false),
            format!("{line}\n").as_bytes(),
        )
        .await
        .map_err(failed)?;
    guest
        .run_checked(&Command::sudo([
            "mv",
            "-f",
            AUTHORIZED_KEYS_NEW,
            AUTHORIZED_KEYS,
        ]))
        .await
        .map_err(failed)?;
    Ok(())
}

/// Step 9, once the instance key has logged in: the keys provisioned at install (the bundle's)
/// are removed, so only the instance key opens the guest.
pub async fn revoke_provisioned_keys<G: Guest>(guest: &G) -> Result<(), StepError> {
    guest
        .run_checked(&Command::sudo(["rm", "-rf", PROVISIONED_KEYS_DIR]))
        .await
        .map_err(StepError::RevokeKeys)?;
    Ok(())
}

/// Step 7: reloads units and starts the kubelet (starting a running unit is a no-op).
pub async fn start_kubelet<G: Guest>(guest: &G) -> Result<(), StepError> {
    guest
        .run_checked(&Command::sudo(["systemctl", "daemon-reload"]))
        .await
        .map_err(StepError::Kubelet)?;
    guest
        .run_checked(&Command::sudo(["systemctl", "start", "kubelet"]))
        .await
        .map_err(StepError::Kubelet)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Output;
    use super::super::fake::ScriptedGuest;
    use super::*;

    const IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
    const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample agent";

    fn expect_write(guest: &ScriptedGuest, path: &str, data: &str) {
        guest.expect(
            format!("sudo install -m 0644 -D /dev/null {path}"),
            Output::ok(""),
        );
        guest.expect_input(write_command(path, false).line(), data, Output::ok(""));
    }

    #[tokio::test]
    async fn guest_ip_is_the_route_source() {
        let guest = ScriptedGuest::new();
        guest.expect(
            "ip -4 route get 1.1.1.1",
            Output::ok("1.1.1.1 via 10.0.2.1 dev br-ex src 10.0.2.2 uid 1000 \n    cache \n"),
        );
        assert_eq!(guest_ip(&guest).await.unwrap(), IP);
        guest.assert_done();
    }

    #[tokio::test]
    async fn empty_route_output_is_an_error() {
        let guest = ScriptedGuest::new();
        guest.expect("ip -4 route get 1.1.1.1", Output::ok(""));
        let err = guest_ip(&guest).await.unwrap_err();
        assert!(matches!(err, StepError::NoGuestIp(_)), "{err}");
    }

    fn expect_layout(guest: &ScriptedGuest) {
        guest
            .expect(
                "readlink -f /dev/disk/by-partlabel/root",
                Output::ok("/dev/vda4\n"),
            )
            .expect("lsblk -no PKNAME /dev/vda4", Output::ok("vda\n"))
            .expect("cat /sys/class/block/vda4/partition", Output::ok("4\n"));
    }

    fn expect_xfs(guest: &ScriptedGuest) {
        guest
            .expect("sudo mount -o remount,rw /sysroot", Output::ok(""))
            .expect(
                "sudo xfs_growfs /sysroot",
                Output::ok("data blocks changed\n"),
            )
            .expect("sudo mount -o remount,ro /sysroot", Output::ok(""));
    }

    #[tokio::test]
    async fn grow_root_grows_partition_then_filesystem() {
        let guest = ScriptedGuest::new();
        expect_layout(&guest);
        guest.expect(
            "sudo growpart /dev/vda 4",
            Output::ok("CHANGED: partition=4\n"),
        );
        expect_xfs(&guest);
        grow_root(&guest).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn growpart_nochange_is_fine() {
        let guest = ScriptedGuest::new();
        expect_layout(&guest);
        guest.expect(
            "sudo growpart /dev/vda 4",
            Output {
                status: 1,
                stdout: b"NOCHANGE: partition 4 is size 100. it cannot be grown\n".to_vec(),
                stderr: Vec::new(),
            },
        );
        expect_xfs(&guest);
        grow_root(&guest).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn growpart_failure_stops_the_step() {
        let guest = ScriptedGuest::new();
        expect_layout(&guest);
        guest.expect(
            "sudo growpart /dev/vda 4",
            Output::failed(2, "FAILED: failed to dump sfdisk info"),
        );
        let err = grow_root(&guest).await.unwrap_err();
        assert!(
            matches!(
                err,
                StepError::Growpart {
                    status: 2,
                    partition: 4,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("sfdisk"), "{err}");
        guest.assert_done();
    }

    #[tokio::test]
    async fn xfs_failure_still_remounts_read_only() {
        let guest = ScriptedGuest::new();
        expect_layout(&guest);
        guest
            .expect("sudo growpart /dev/vda 4", Output::ok(""))
            .expect("sudo mount -o remount,rw /sysroot", Output::ok(""))
            .expect("sudo xfs_growfs /sysroot", Output::failed(1, "boom"))
            .expect("sudo mount -o remount,ro /sysroot", Output::ok(""));
        let err = grow_root(&guest).await.unwrap_err();
        assert!(matches!(err, StepError::GrowRoot(_)), "{err}");
        guest.assert_done();
    }

    #[tokio::test]
    async fn dnsmasq_gets_the_upstream_lines_and_starts() {
        let config = dnsmasq_config(IP);
        assert_eq!(
            config,
            "listen-address=10.0.2.2\nexpand-hosts\nlog-queries\nlocal=/crc.testing/\ndomain=crc.testing\naddress=/apps-crc.testing/10.0.2.2\naddress=/api.crc.testing/10.0.2.2\naddress=/api-int.crc.testing/10.0.2.2\n"
        );
        let guest = ScriptedGuest::new();
        expect_write(&guest, DNSMASQ_CONF, &config);
        guest
            .expect("sudo systemctl enable dnsmasq", Output::ok(""))
            .expect("sudo systemctl start dnsmasq", Output::ok(""));
        configure_dnsmasq(&guest, IP).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn dnsmasq_start_failure_names_the_step() {
        let guest = ScriptedGuest::new();
        expect_write(&guest, DNSMASQ_CONF, &dnsmasq_config(IP));
        guest
            .expect("sudo systemctl enable dnsmasq", Output::ok(""))
            .expect("sudo systemctl start dnsmasq", Output::failed(1, "bind"));
        let err = configure_dnsmasq(&guest, IP).await.unwrap_err();
        assert!(matches!(err, StepError::Dnsmasq(_)));
        assert!(err.to_string().starts_with("configure dnsmasq"), "{err}");
    }

    const LOAD_STATE: &str = "systemctl show ovs-configuration.service -p LoadState --value";
    const NMCLI: &str = "sudo nmcli con modify --temporary ovs-if-br-ex ipv4.dns 10.0.2.2 ipv4.dns-search crc.testing";

    #[tokio::test]
    async fn resolver_without_ovn_is_written_directly() {
        let guest = ScriptedGuest::new();
        guest.expect(LOAD_STATE, Output::ok("not-found\n"));
        expect_write(
            &guest,
            RESOLV_CONF,
            "search crc.testing\nnameserver 10.0.2.2\n",
        );
        configure_resolver(&guest, IP).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn resolver_with_ovn_goes_through_network_manager() {
        let guest = ScriptedGuest::new();
        guest
            .expect(LOAD_STATE, Output::ok("loaded\n"))
            .expect(
                "sudo systemctl start ovs-configuration.service",
                Output::ok(""),
            )
            .expect(NMCLI, Output::ok(""))
            .expect(
                "sudo systemctl restart NetworkManager.service",
                Output::ok(""),
            )
            .expect(
                "sudo cat /etc/resolv.conf",
                Output::ok(
                    "# Generated by NetworkManager\nsearch crc.testing\nnameserver 10.0.2.2\n",
                ),
            );
        configure_resolver(&guest, IP).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn resolver_rewritten_elsewhere_is_replaced() {
        let guest = ScriptedGuest::new();
        guest
            .expect(LOAD_STATE, Output::ok("loaded\n"))
            .expect(
                "sudo systemctl start ovs-configuration.service",
                Output::ok(""),
            )
            .expect(NMCLI, Output::ok(""))
            .expect(
                "sudo systemctl restart NetworkManager.service",
                Output::ok(""),
            )
            .expect(
                "sudo cat /etc/resolv.conf",
                Output::ok("nameserver 10.0.2.3\n"),
            );
        expect_write(
            &guest,
            RESOLV_CONF,
            "search crc.testing\nnameserver 10.0.2.2\n",
        );
        configure_resolver(&guest, IP).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn unknown_connection_falls_back_to_resolv_conf() {
        let guest = ScriptedGuest::new();
        guest
            .expect(LOAD_STATE, Output::ok("loaded\n"))
            .expect(
                "sudo systemctl start ovs-configuration.service",
                Output::ok(""),
            )
            .expect(
                NMCLI,
                Output::failed(10, "Error: unknown connection 'ovs-if-br-ex'."),
            );
        expect_write(
            &guest,
            RESOLV_CONF,
            "search crc.testing\nnameserver 10.0.2.2\n",
        );
        configure_resolver(&guest, IP).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn other_nmcli_failures_are_errors() {
        let guest = ScriptedGuest::new();
        guest
            .expect(LOAD_STATE, Output::ok("loaded\n"))
            .expect(
                "sudo systemctl start ovs-configuration.service",
                Output::ok(""),
            )
            .expect(NMCLI, Output::failed(1, "Insufficient privileges"));
        let err = configure_resolver(&guest, IP).await.unwrap_err();
        assert!(matches!(err, StepError::Resolver(_)), "{err}");
        guest.assert_done();
    }

    const WRITE_NEW: &str =
        "sudo install -m 0600 -o core -g core -D /dev/null /home/core/.ssh/authorized_keys.new";
    const RENAME: &str =
        "sudo mv -f /home/core/.ssh/authorized_keys.new /home/core/.ssh/authorized_keys";

    #[tokio::test]
    async fn the_instance_key_replaces_every_other_line_through_a_rename() {
        let guest = ScriptedGuest::new();
        guest
            .expect(
                "sudo test -e /home/core/.ssh/authorized_keys",
                Output::ok(""),
            )
            .expect(
                "sudo cat /home/core/.ssh/authorized_keys",
                Output::ok(format!("ssh-ecdsa bundle\n{KEY}\n")),
            )
            .expect(WRITE_NEW, Output::ok(""))
            .expect(
                write_command("/home/core/.ssh/authorized_keys.new", false).line(),
                Output::ok(""),
            )
            .expect(RENAME, Output::ok(""));
        authorize_only(&guest, KEY).await.unwrap();
        guest.assert_done();
        assert_eq!(guest.inputs()[0].1, format!("{KEY}\n").into_bytes());
    }

    #[tokio::test]
    async fn a_missing_file_is_written_the_same_way() {
        let guest = ScriptedGuest::new();
        guest
            .expect(
                "sudo test -e /home/core/.ssh/authorized_keys",
                Output::failed(1, ""),
            )
            .expect(WRITE_NEW, Output::ok(""))
            .expect(
                write_command("/home/core/.ssh/authorized_keys.new", false).line(),
                Output::ok(""),
            )
            .expect(RENAME, Output::ok(""));
        authorize_only(&guest, KEY).await.unwrap();
        guest.assert_done();
    }

    #[tokio::test]
    async fn a_file_holding_exactly_the_key_is_left_alone() {
        let guest = ScriptedGuest::new();
        guest
            .expect(
                "sudo test -e /home/core/.ssh/authorized_keys",
                Output::ok(""),
            )
            .expect(
                "sudo cat /home/core/.ssh/authorized_keys",
                Output::ok(format!("\n{KEY}\n")),
            );
        authorize_only(&guest, &format!("{KEY}\n")).await.unwrap();
        guest.assert_done();
        assert_eq!(guest.calls().len(), 2);
    }

    #[tokio::test]
    async fn provisioned_keys_are_removed_with_their_directory() {
        let guest = ScriptedGuest::new();
        guest.expect(
            "sudo rm -rf /home/core/.ssh/authorized_keys.d",
            Output::failed(1, "Read-only file system"),
        );
        let err = revoke_provisioned_keys(&guest).await.unwrap_err();
        assert!(matches!(err, StepError::RevokeKeys(_)), "{err}");
    }

    #[tokio::test]
    async fn kubelet_reloads_then_starts() {
        let guest = ScriptedGuest::new();
        guest
            .expect("sudo systemctl daemon-reload", Output::ok(""))
            .expect("sudo systemctl start kubelet", Output::ok(""));
        start_kubelet(&guest).await.unwrap();
        guest.assert_done();
        let failing = ScriptedGuest::new();
        failing
            .expect("sudo systemctl daemon-reload", Output::ok(""))
            .expect(
                "sudo systemctl start kubelet",
                Output::failed(5, "not found"),
            );
        let err = start_kubelet(&failing).await.unwrap_err();
        assert!(matches!(err, StepError::Kubelet(_)), "{err}");
    }
}
