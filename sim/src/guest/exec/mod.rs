//! The guest's command interpreter: a pure function from (machine, guest time, user, command
//! line) to exit status, output and effects. No I/O: the SSH server persists the state when a
//! command changed it and carries out the effects (power-off, reboot).
//!
//! Programs are grouped by what they touch: [`fs`] (files), [`system`] (units, clock, journal,
//! power), [`storage`] (block devices, growpart, xfs_growfs), [`net`] (routes, NetworkManager,
//! name resolution), [`openssl`] (certificate checks), [`containers`] (podman, crictl, the
//! pods of an installed node), [`crio`] (CRI-O's storage across boots), [`etcd`] (etcdctl over an installed node's data directory). An unknown program exits 127 and is
//! reported in [`Output::unknown_commands`] so the host can log it loudly.

pub mod containers;
pub mod crio;
pub mod etcd;
pub mod fs;
pub mod installer;
pub mod net;
pub mod oc;
pub mod openssl;
pub mod search;
pub mod storage;
pub mod system;

use std::net::Ipv4Addr;

use super::shell::{self, Pipeline, SimpleCommand};
use super::state::{GuestState, NmDns};
use super::time::GuestTime;

/// The address a KubeVirt masquerade binding gives the guest (`vmNetworkCIDR` 10.0.2.0/24):
/// the same for every VMI, never the pod IP.
pub const MASQUERADE_GUEST_IP: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 2);
/// The masquerade gateway.
pub const MASQUERADE_GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 0, 2, 1);
/// The nameserver DHCP hands the guest (the pod's cluster DNS), which knows no CRC names.
pub const DHCP_NAMESERVER: &str = "172.30.0.10";

/// A running guest: its persistent state plus what only lives until power-off.
#[derive(Clone, Debug)]
pub struct Machine {
    pub state: GuestState,
    pub runtime: Runtime,
}

/// Facts of the current boot, lost at power-off.
#[derive(Clone, Debug)]
pub struct Runtime {
    /// Virtual size of `/dev/vda` (the boot disk, or the install target under a live ISO).
    pub disk_bytes: u64,
    /// The VM's RTC offset from host time (KubeVirt `domain.clock` offset).
    pub clock_offset_seconds: i64,
    /// Clock steps made this boot (chrony synchronisation, `date -s`).
    pub clock_step_seconds: i64,
    /// `/sysroot` remounted read-write (`mount -o remount,rw /sysroot`).
    pub sysroot_writable: bool,
    /// `nmcli con modify --temporary` DNS override.
    pub nm_dns_temporary: Option<NmDns>,
    /// Running the live ISO: nothing is persisted, `/dev/vda` is the (blank) install target.
    pub live: bool,
    /// The guest's address on its NIC.
    pub guest_ip: Ipv4Addr,
    /// chronyd can reach NTP servers: it steps the clock to true (host) time when it starts.
    /// Off by default: the guest clock then follows the VM's RTC (host + offset), which is what
    /// the build's time control relies on and what a cluster without NTP egress does.
    pub ntp_reachable: bool,
    /// The kubelet's pod sandboxes run: from its start on an installed disk until `crictl rmp`
    /// or power-off (stopping the kubelet leaves them running).
    pub pods_running: bool,
    /// What plays the node's `oc` this boot (see [`oc`]); none when the simulation serves no
    /// guest APIs.
    pub oc: Option<oc::OcBackend>,
}

impl Runtime {
    pub fn new(disk_bytes: u64, clock_offset_seconds: i64, live: bool) -> Self {
        Self {
            disk_bytes,
            clock_offset_seconds,
            clock_step_seconds: 0,
            sysroot_writable: false,
            nm_dns_temporary: None,
            live,
            guest_ip: MASQUERADE_GUEST_IP,
            ntp_reachable: false,
            pods_running: false,
            oc: None,
        }
    }
}

impl Machine {
    /// Powers on a disk's state: everything a boot resets or derives (running units, `/run`,
    /// the resolver NetworkManager writes, chrony's first synchronisation).
    pub fn power_on(mut state: GuestState, runtime: Runtime) -> Self {
        state.boot_count += 1;
        for unit in state.units.values_mut() {
            unit.active = unit.enabled && !unit.masked;
            unit.failed = false;
        }
        state
            .files
            .retain(|path, _| !path.starts_with("/run/") && !path.starts_with("/tmp/"));
        state
            .directories
            .retain(|path| !path.starts_with("/run/") && !path.starts_with("/tmp/"));
        let mut machine = Self { state, runtime };
        if machine.unit_active("NetworkManager.service") {
            net::write_resolv_conf(&mut machine);
        }
        if machine.unit_active("chronyd.service") {
            system::sync_clock(&mut machine);
        }
        crio::boot(&mut machine);
        containers::boot(&mut machine);
        machine
    }

    /// A clean stop of the OS (shutdown, power-off, reboot), before its state is flushed.
    pub fn shut_down(&mut self) {
        crio::shutdown(self);
    }

    /// The guest's wall clock when the host's reads `host_unix`.
    pub fn guest_time(&self, host_unix: i64) -> GuestTime {
        GuestTime(
            host_unix
                + self.runtime.clock_offset_seconds
                + self.state.clock_adjust_seconds
                + self.runtime.clock_step_seconds,
        )
    }

    pub fn unit_active(&self, name: &str) -> bool {
        self.state.units.get(name).is_some_and(|u| u.active)
    }

    /// Addresses the guest owns (dnsmasq may listen on them; tunnels to them stay inside).
    pub fn local_addresses(&self) -> Vec<Ipv4Addr> {
        let mut addresses = vec![Ipv4Addr::LOCALHOST, self.runtime.guest_ip];
        // SNC's dummy `eth10` exists on installed OpenShift nodes.
        if self.state.openshift_version.is_some()
            && let Ok(node_ip) = self.state.kubelet.node_ip.parse()
        {
            addresses.push(node_ip);
        }
        // Addresses NetworkManager keyfiles give (the profile's dummy interface, live or installed).
        for keyfile in net::keyfiles(&self.state) {
            if let Some(address) = keyfile.address
                && !addresses.contains(&address)
            {
                addresses.push(address);
            }
        }
        addresses
    }
}

/// Something the host must do after a command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    PowerOff,
    Reboot,
    UnitStarted(String),
    UnitStopped(String),
}

/// What a command line produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    pub code: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    pub effects: Vec<Effect>,
    /// The persistent state changed: write it through to the disk.
    pub changed: bool,
    /// Programs the guest does not know (exit 127).
    pub unknown_commands: Vec<String>,
}

/// The result of one program.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Run {
    pub code: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Run {
    pub fn ok() -> Self {
        Self::default()
    }

    pub fn out(stdout: impl Into<Vec<u8>>) -> Self {
        Self {
            stdout: stdout.into(),
            ..Self::default()
        }
    }

    pub fn fail(code: u32, message: impl AsRef<str>) -> Self {
        let mut stderr = message.as_ref().as_bytes().to_vec();
        if !stderr.ends_with(b"\n") {
            stderr.push(b'\n');
        }
        Self {
            code,
            stdout: Vec::new(),
            stderr,
        }
    }

    pub fn with_code(mut self, code: u32) -> Self {
        self.code = code;
        self
    }
}

/// What one program sees.
pub struct Ctx<'a> {
    machine: &'a mut Machine,
    pub now: GuestTime,
    pub user: &'a str,
    /// Running through `sudo` (or as root).
    pub root: bool,
    effects: Vec<Effect>,
    changed: bool,
}

impl Ctx<'_> {
    pub fn machine(&self) -> &Machine {
        self.machine
    }

    pub fn state(&self) -> &GuestState {
        &self.machine.state
    }

    /// The state, for a change that must be persisted.
    pub fn state_mut(&mut self) -> &mut GuestState {
        self.changed = true;
        &mut self.machine.state
    }

    pub fn runtime(&self) -> &Runtime {
        &self.machine.runtime
    }

    pub fn runtime_mut(&mut self) -> &mut Runtime {
        &mut self.machine.runtime
    }

    /// Both halves, for changes that span them; counts as a persistent change.
    pub fn machine_mut(&mut self) -> &mut Machine {
        self.changed = true;
        self.machine
    }

    pub fn effect(&mut self, effect: Effect) {
        self.effects.push(effect);
    }

    /// The home directory (the working directory of an SSH command).
    pub fn home(&self) -> String {
        super::state::User::home(self.user)
    }
}

/// Runs one command line as `user` with `stdin`.
pub fn exec(machine: &mut Machine, now: GuestTime, user: &str, line: &str, stdin: &[u8]) -> Output {
    match shell::parse(line) {
        Ok(pipeline) => exec_pipeline(machine, now, user, &pipeline, stdin),
        Err(err) => Output {
            code: 2,
            stderr: format!("simulated guest: {err}\n").into_bytes(),
            ..Output::default()
        },
    }
}

/// Runs a parsed pipeline: each stage reads the previous one's stdout; the status is the last
/// stage's (no `pipefail`, like the login shell).
pub fn exec_pipeline(
    machine: &mut Machine,
    now: GuestTime,
    user: &str,
    pipeline: &Pipeline,
    stdin: &[u8],
) -> Output {
    let mut output = Output::default();
    let mut input = stdin.to_vec();
    for command in &pipeline.stages {
        let mut ctx = Ctx {
            machine: &mut *machine,
            now,
            user,
            root: user == "root",
            effects: Vec::new(),
            changed: false,
        };
        let run = run_simple(&mut ctx, command, &input, &mut output.unknown_commands);
        output.effects.append(&mut ctx.effects);
        output.changed |= ctx.changed;
        output.stderr.extend_from_slice(&run.stderr);
        output.code = run.code;
        input = run.stdout;
    }
    output.stdout = input;
    output
}

/// Whether the pipeline's first program reads stdin (the SSH server then waits for EOF).
pub fn reads_stdin(pipeline: &Pipeline) -> bool {
    pipeline.stages.first().is_some_and(|first| {
        let args = &first.argv[1..];
        let operands = args.iter().filter(|a| !a.starts_with('-')).count();
        match first.argv[0].as_str() {
            "tee" => true,
            "cat" | "base64" | "sha256sum" => operands == 0,
            _ => false,
        }
    })
}

fn run_simple(
    ctx: &mut Ctx<'_>,
    command: &SimpleCommand,
    stdin: &[u8],
    unknown: &mut Vec<String>,
) -> Run {
    if command.sudo {
        let allowed = ctx.root || ctx.state().users.get(ctx.user).is_some_and(|u| u.sudo);
        if !allowed {
            return Run::fail(1, format!("{} is not in the sudoers file.", ctx.user));
        }
        ctx.root = true;
    }
    let program = command.argv[0].as_str();
    let args = &command.argv[1..];
    match program {
        "sh" | "bash" | "dash" | "zsh" => Run::fail(
            2,
            format!(
                "{program}: refused by the simulated guest: shell scripts are not accepted, send simple commands"
            ),
        ),
        "cat" => fs::cat(ctx, args, stdin),
        "tee" => fs::tee(ctx, args, stdin),
        "install" => fs::install(ctx, args),
        "base64" => fs::base64(ctx, args, stdin),
        "sha256sum" => fs::sha256sum(ctx, args, stdin),
        "echo" => fs::echo(args),
        "test" => fs::test(ctx, args),
        "[" => fs::bracket(ctx, args),
        "ls" => fs::ls(ctx, args),
        "mkdir" => fs::mkdir(ctx, args),
        "rm" => fs::rm(ctx, args),
        "mv" => fs::mv(ctx, args),
        "chmod" => fs::chmod(ctx, args),
        "chown" => fs::chown(ctx, args),
        "readlink" => fs::readlink(ctx, args),
        "find" => fs::find(ctx, args),
        "grep" => search::grep(ctx, args, stdin),
        "true" => Run::ok(),
        "false" => Run::ok().with_code(1),
        "hostname" => system::hostname(ctx, args),
        "hostnamectl" => system::hostnamectl(ctx, args),
        "date" => system::date(ctx, args),
        "systemctl" => system::systemctl(ctx, args),
        "journalctl" => system::journalctl(ctx, args),
        "chronyc" => system::chronyc(ctx, args),
        "poweroff" | "halt" | "reboot" | "shutdown" => system::power(ctx, program, args),
        "sync" => Run::ok(),
        "env" => {
            let (env, rest) = installer::split_env(args);
            match rest.split_first() {
                None => Run::out(
                    env.iter()
                        .map(|(k, v)| format!("{k}={v}\n"))
                        .collect::<String>(),
                ),
                Some((program, args)) if program.contains('/') => {
                    installer::exec_file(ctx, program, args, &env)
                }
                // Builtins read no environment.
                Some(_) => {
                    let inner = SimpleCommand {
                        sudo: false,
                        argv: rest.to_vec(),
                    };
                    run_simple(ctx, &inner, stdin, unknown)
                }
            }
        }
        path if path.contains('/') => installer::exec_file(ctx, path, args, &Default::default()),
        "whoami" => Run::out(format!("{}\n", if ctx.root { "root" } else { ctx.user })),
        "id" => system::id(ctx, args),
        "uname" => system::uname(args),
        "lsblk" => storage::lsblk(ctx, args),
        "growpart" => storage::growpart(ctx, args),
        "xfs_growfs" => storage::xfs_growfs(ctx, args),
        "fstrim" => storage::fstrim(ctx, args),
        "mount" => storage::mount(ctx, args),
        "ip" => net::ip(ctx, args),
        "nmcli" => net::nmcli(ctx, args),
        "getent" => net::getent(ctx, args),
        "oc" | "kubectl" => oc::oc(ctx, args),
        "openssl" => openssl::openssl(ctx, args, stdin),
        "podman" => containers::podman(ctx, args),
        "crictl" => containers::crictl(ctx, args),
        other => {
            unknown.push(other.to_string());
            Run::fail(127, format!("bash: {other}: command not found"))
        }
    }
}

#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    pub const KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGq8 core";
    /// 2026-12-02T12:23:44Z.
    pub const NOW: i64 = 1_796_214_224;
    pub const GIB: u64 = 1 << 30;

    /// A booted sealed CRC guest on a 64 GiB disk, certificates issued at `NOW`.
    pub fn sealed() -> Machine {
        let state = GuestState::sealed_crc_at("4.22.1", KEY, NOW);
        Machine::power_on(state, Runtime::new(64 * GIB, 0, false))
    }

    /// Runs a line as `core` at `NOW`.
    pub fn run(machine: &mut Machine, line: &str) -> Output {
        exec(machine, GuestTime(NOW), "core", line, b"")
    }

    pub fn stdout(output: &Output) -> String {
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub fn stderr(output: &Output) -> String {
        String::from_utf8_lossy(&output.stderr).into_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn pipelines_feed_stdout_forward_and_report_the_last_status() {
        let mut m = sealed();
        let out = run(&mut m, "echo aGVsbG8= | base64 --decode");
        assert_eq!((out.code, stdout(&out)), (0, "hello".to_string()));
        let out = run(&mut m, "false | true");
        assert_eq!(out.code, 0);
        let out = run(&mut m, "true | false");
        assert_eq!(out.code, 1);
    }

    #[test]
    fn unknown_programs_exit_127_and_are_reported() {
        let mut m = sealed();
        let out = run(&mut m, "frobnicate --now");
        assert_eq!(out.code, 127);
        assert!(stderr(&out).contains("frobnicate: command not found"));
        assert_eq!(out.unknown_commands, vec!["frobnicate"]);
    }

    #[test]
    fn scripts_and_shells_are_refused_with_status_2() {
        let mut m = sealed();
        for line in [
            "sudo sh -ceu 'growpart /dev/vda 4'",
            "bash -c id",
            "a && b",
            "x; y",
        ] {
            let out = run(&mut m, line);
            assert_eq!(out.code, 2, "{line}: {}", stderr(&out));
            assert!(!out.changed);
        }
    }

    #[test]
    fn sudo_needs_a_sudoer() {
        let mut m = sealed();
        m.state.users.get_mut("core").unwrap().sudo = false;
        let out = run(&mut m, "sudo cat /etc/hostname");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("sudoers"));
    }

    #[test]
    fn reads_stdin_only_for_stdin_readers_first() {
        let parse = |l| shell::parse(l).unwrap();
        assert!(reads_stdin(&parse("sudo tee /x")));
        assert!(reads_stdin(&parse("base64 --decode")));
        assert!(reads_stdin(&parse("cat")));
        assert!(!reads_stdin(&parse("cat /x")));
        assert!(!reads_stdin(&parse("echo x | tee /y")));
    }

    #[test]
    fn boot_recomputes_units_and_clears_run() {
        let mut state = GuestState::sealed_crc_at("4.22.1", KEY, NOW);
        state.units.get_mut("kubelet.service").unwrap().active = true;
        state
            .files
            .insert("/run/x".into(), crate::guest::state::File::root("x", 0o644));
        let m = Machine::power_on(state, Runtime::new(64 * GIB, 0, false));
        assert!(!m.unit_active("kubelet.service"));
        assert!(m.unit_active("crio.service"));
        assert!(!m.state.files.contains_key("/run/x"));
        assert_eq!(m.state.boot_count, 1);
    }

    #[test]
    fn guest_time_adds_offset_adjustment_and_steps() {
        let mut state = GuestState::sealed_crc_at("4.22.1", KEY, NOW);
        state.set_unit(
            "chronyd.service",
            crate::guest::state::Unit {
                enabled: false,
                active: false,
                masked: true,
                ..Default::default()
            },
        );
        state.clock_adjust_seconds = 5;
        let m = Machine::power_on(state, Runtime::new(GIB, -86_400, false));
        assert_eq!(m.guest_time(NOW), GuestTime(NOW - 86_400 + 5));
    }

    #[test]
    fn chronyd_synchronises_the_clock_at_boot_only_with_ntp() {
        let state = GuestState::sealed_crc_at("4.22.1", KEY, NOW);
        let m = Machine::power_on(state.clone(), Runtime::new(GIB, -86_400, false));
        assert_eq!(m.guest_time(NOW), GuestTime(NOW - 86_400));
        let mut runtime = Runtime::new(GIB, -86_400, false);
        runtime.ntp_reachable = true;
        let m = Machine::power_on(state, runtime);
        assert_eq!(m.guest_time(NOW), GuestTime(NOW));
    }
}
