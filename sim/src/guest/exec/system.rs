//! System programs: `systemctl`, `journalctl`, `hostname`/`hostnamectl`, `date`, `chronyc`,
//! power (`poweroff`, `reboot`, `shutdown`, `halt`), `id`, `uname`.

use super::{Ctx, Effect, Machine, Run, containers, net};
use crate::guest::state::Unit;
use crate::guest::time;

/// Unit name as systemd completes it: `kubelet` → `kubelet.service`.
pub fn unit_name(name: &str) -> String {
    const SUFFIXES: &[&str] = &[
        ".service", ".socket", ".target", ".timer", ".mount", ".path", ".slice", ".scope",
    ];
    if SUFFIXES.iter().any(|s| name.ends_with(s)) {
        name.to_string()
    } else {
        format!("{name}.service")
    }
}

/// chronyd synchronising: when its NTP servers are reachable the guest clock steps to true
/// (host) time; otherwise nothing changes.
pub fn sync_clock(machine: &mut Machine) {
    if machine.runtime.ntp_reachable {
        machine.runtime.clock_step_seconds =
            -(machine.runtime.clock_offset_seconds + machine.state.clock_adjust_seconds);
    }
}

fn needs_root(ctx: &Ctx<'_>, action: &str, unit: &str) -> Option<Run> {
    (!ctx.root).then(|| {
        Run::fail(
            1,
            format!("Failed to {action} {unit}: Interactive authentication required."),
        )
    })
}

pub fn systemctl(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut now = false;
    let mut value_only = false;
    let mut properties: Vec<String> = Vec::new();
    let mut words = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "--now" => now = true,
            "--value" => value_only = true,
            "--quiet" | "-q" | "--no-pager" | "--no-block" | "--system" => {}
            "-p" | "--property" => {
                if let Some(p) = iter.next() {
                    properties.extend(p.split(',').map(str::to_string));
                }
            }
            a if a.starts_with("--property=") => {
                properties.extend(a["--property=".len()..].split(',').map(str::to_string));
            }
            "--user" => return Run::fail(1, "systemctl --user is not simulated"),
            a if a.starts_with('-') => {
                return Run::fail(1, format!("systemctl: unsupported option {a}"));
            }
            a => words.push(a.to_string()),
        }
    }
    let Some((verb, units)) = words.split_first() else {
        return Run::fail(1, "systemctl: listing units is not simulated");
    };
    let units: Vec<String> = units.iter().map(|u| unit_name(u)).collect();
    match verb.as_str() {
        "daemon-reload" | "reset-failed" => match needs_root(ctx, verb, "daemon") {
            Some(denied) => denied,
            None => Run::ok(),
        },
        "start" | "stop" | "restart" | "try-restart" | "reload" | "reload-or-restart" => {
            for unit in &units {
                let run = change_activity(ctx, verb, unit);
                if run.code != 0 {
                    return run;
                }
            }
            Run::ok()
        }
        "enable" | "disable" => {
            for unit in &units {
                let run = change_enablement(ctx, verb == "enable", unit);
                if run.code != 0 {
                    return run;
                }
                if now {
                    let verb = if verb == "enable" { "start" } else { "stop" };
                    let run = change_activity(ctx, verb, unit);
                    if run.code != 0 {
                        return run;
                    }
                }
            }
            Run::ok()
        }
        "mask" | "unmask" => {
            for unit in &units {
                if let Some(denied) = needs_root(ctx, verb, unit) {
                    return denied;
                }
                let mask = verb == "mask";
                let state = ctx.state_mut();
                let entry = state.units.entry(unit.clone()).or_default();
                entry.masked = mask;
                // A unit that only existed as a mask disappears when unmasked.
                if !mask && *entry == Unit::default() {
                    state.units.remove(unit);
                }
            }
            Run::ok()
        }
        "is-active" => status_query(ctx, &units, |u| match u {
            Some(u) if u.active => ("active", true),
            Some(u) if u.failed => ("failed", false),
            _ => ("inactive", false),
        })
        .with_code_if_false(3),
        "is-failed" => status_query(ctx, &units, |u| match u {
            Some(u) if u.failed => ("failed", true),
            Some(u) if u.active => ("active", false),
            _ => ("inactive", false),
        })
        .with_code_if_false(1),
        "is-enabled" => status_query(ctx, &units, |u| match u {
            Some(u) if u.masked => ("masked", false),
            Some(u) if u.enabled => ("enabled", true),
            Some(_) => ("disabled", false),
            None => ("not-found", false),
        })
        .with_code_if_false(1),
        "show" => show(ctx, &units, &properties, value_only),
        "status" => {
            let Some(unit) = units.first() else {
                return Run::fail(1, "systemctl status: unit required");
            };
            match ctx.state().units.get(unit) {
                None => Run::fail(4, format!("Unit {unit} could not be found.")),
                Some(u) => {
                    let active = if u.active {
                        "active (running)"
                    } else if u.failed {
                        "failed (Result: exit-code)"
                    } else {
                        "inactive (dead)"
                    };
                    let code = if u.active { 0 } else { 3 };
                    Run::out(format!("● {unit}\n     Active: {active}\n")).with_code(code)
                }
            }
        }
        "poweroff" | "halt" => power(ctx, "poweroff", &[]),
        "reboot" => power(ctx, "reboot", &[]),
        "is-system-running" => Run::out("running\n"),
        other => Run::fail(1, format!("systemctl {other} is not simulated")),
    }
}

/// One line per unit from `describe`; overall success when every unit answers `true`.
struct Query {
    run: Run,
    all: bool,
}

impl Query {
    fn with_code_if_false(self, code: u32) -> Run {
        if self.all {
            self.run
        } else {
            self.run.with_code(code)
        }
    }
}

fn status_query(
    ctx: &Ctx<'_>,
    units: &[String],
    describe: impl Fn(Option<&Unit>) -> (&'static str, bool),
) -> Query {
    let mut out = String::new();
    let mut all = !units.is_empty();
    for unit in units {
        let (word, ok) = describe(ctx.state().units.get(unit));
        out.push_str(word);
        out.push('\n');
        all &= ok;
    }
    Query {
        run: Run::out(out),
        all,
    }
}

fn show(ctx: &Ctx<'_>, units: &[String], properties: &[String], value_only: bool) -> Run {
    let mut out = String::new();
    for unit in units {
        let state = ctx.state().units.get(unit);
        for property in properties {
            let value = match (property.as_str(), state) {
                ("LoadState", None) => "not-found",
                ("LoadState", Some(u)) if u.masked => "masked",
                ("LoadState", Some(_)) => "loaded",
                ("ActiveState", Some(u)) if u.active => "active",
                ("ActiveState", Some(u)) if u.failed => "failed",
                ("ActiveState", _) => "inactive",
                ("SubState", Some(u)) if u.active => "running",
                ("SubState", Some(u)) if u.failed => "failed",
                ("SubState", _) => "dead",
                ("UnitFileState", Some(u)) if u.masked => "masked",
                ("UnitFileState", Some(u)) if u.enabled => "enabled",
                ("UnitFileState", Some(_)) => "disabled",
                ("UnitFileState", None) => "",
                ("Id", _) => unit.as_str(),
                (other, _) => {
                    return Run::fail(
                        1,
                        format!("systemctl show: property {other} is not simulated"),
                    );
                }
            };
            if value_only {
                out.push_str(&format!("{value}\n"));
            } else {
                out.push_str(&format!("{property}={value}\n"));
            }
        }
    }
    Run::out(out)
}

fn change_enablement(ctx: &mut Ctx<'_>, enable: bool, unit: &str) -> Run {
    let action = if enable { "enable" } else { "disable" };
    if let Some(denied) = needs_root(ctx, action, unit) {
        return denied;
    }
    match ctx.state().units.get(unit) {
        None => Run::fail(
            1,
            format!("Failed to {action} unit: Unit file {unit} does not exist."),
        ),
        Some(u) if u.masked && enable => Run::fail(
            1,
            format!("Failed to enable unit: Unit file /etc/systemd/system/{unit} is masked."),
        ),
        Some(_) => {
            if let Some(u) = ctx.state_mut().units.get_mut(unit) {
                u.enabled = enable;
            }
            Run::ok()
        }
    }
}

fn change_activity(ctx: &mut Ctx<'_>, verb: &str, unit: &str) -> Run {
    if let Some(denied) = needs_root(ctx, verb, unit) {
        return denied;
    }
    let Some(current) = ctx.state().units.get(unit).cloned() else {
        return Run::fail(
            5,
            format!("Failed to {verb} {unit}: Unit {unit} not found."),
        );
    };
    let start = match verb {
        "stop" => false,
        "try-restart" if !current.active => return Run::ok(),
        _ => true,
    };
    if start && current.masked {
        return Run::fail(
            1,
            format!("Failed to {verb} {unit}: Unit {unit} is masked."),
        );
    }
    if start && let Err(reason) = start_check(ctx, unit) {
        return Run::fail(
            1,
            format!(
                "Job for {unit} failed because the control process exited with error code.\n{reason}"
            ),
        );
    }
    if let Some(u) = ctx.state_mut().units.get_mut(unit) {
        u.active = start;
        u.failed = false;
        if start {
            u.starts = u.starts.wrapping_add(1);
        }
    }
    let restarted = verb != "start" && verb != "stop";
    if !start || (restarted && current.active) {
        ctx.effect(Effect::UnitStopped(unit.to_string()));
    }
    if start {
        ctx.effect(Effect::UnitStarted(unit.to_string()));
        after_start(ctx, unit);
    }
    Run::ok()
}

/// What a unit verifies before it runs (a failure may leave traces in the journal).
fn start_check(ctx: &mut Ctx<'_>, unit: &str) -> Result<(), String> {
    match unit {
        "dnsmasq.service" => net::check_dnsmasq_config(ctx.machine()),
        // The kubelet waits for nodeip-configuration.
        "kubelet.service" => containers::node_ip_pull(ctx.state_mut()).map_err(|image| {
            let now = ctx.now.0;
            containers::node_ip_failed(ctx.state_mut(), now, &image)
        }),
        _ => Ok(()),
    }
}

/// What a started unit does at once.
fn after_start(ctx: &mut Ctx<'_>, unit: &str) {
    match unit {
        "NetworkManager.service" => net::write_resolv_conf(ctx.machine_mut()),
        "chronyd.service" => sync_clock(ctx.machine_mut()),
        // Runtime only: nothing to persist.
        "kubelet.service" => containers::kubelet_started(ctx.machine),
        _ => {}
    }
}

pub fn journalctl(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut vacuum = None;
    let mut rotate = false;
    let mut usage = false;
    let mut units = Vec::new();
    let mut lines = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-u" | "--unit" => match iter.next() {
                Some(unit) => units.push(unit_name(unit)),
                None => return Run::fail(1, "journalctl: option requires an argument -- 'u'"),
            },
            a if a.starts_with("--unit=") => units.push(unit_name(&a["--unit=".len()..])),
            "-n" | "--lines" => match iter.next().and_then(|n| n.parse::<usize>().ok()) {
                Some(n) => lines = Some(n),
                None => return Run::fail(1, "journalctl: -n needs a number"),
            },
            a if a.starts_with("--lines=") => match a["--lines=".len()..].parse::<usize>() {
                Ok(n) => lines = Some(n),
                Err(_) => return Run::fail(1, "journalctl: --lines needs a number"),
            },
            "--no-pager" | "-b" | "--boot" | "-q" | "--quiet" => {}
            "--rotate" => rotate = true,
            "--disk-usage" => usage = true,
            a if a.starts_with("--vacuum-time=") || a.starts_with("--vacuum-files=") => {
                vacuum = Some(0)
            }
            a if a.starts_with("--vacuum-size=") => {
                vacuum = Some(parse_size(&a["--vacuum-size=".len()..]).unwrap_or(0))
            }
            _ => {}
        }
    }
    if !units.is_empty() {
        return unit_journal(ctx, &units, lines);
    }
    if usage {
        let mib = ctx.state().journal_bytes as f64 / (1u64 << 20) as f64;
        return Run::out(format!(
            "Archived and active journals take up {mib:.1}M in the file system.\n"
        ));
    }
    if !rotate && vacuum.is_none() {
        return Run::out("-- No entries --\n");
    }
    if !ctx.root {
        return Run::fail(1, "Failed to open journal directory: Permission denied");
    }
    let Some(keep) = vacuum else {
        return Run::ok();
    };
    let before = ctx.state().journal_bytes;
    let after = before.min(keep);
    let state = ctx.state_mut();
    state.journal_bytes = after;
    state.untrimmed_bytes += before - after;
    let mut run = Run::ok();
    run.stderr = format!(
        "Vacuuming done, freed {}B of archived journals from /var/log/journal.\n",
        before - after
    )
    .into_bytes();
    run
}

/// `journalctl -u UNIT… [-n N]`: the units' lines (the last `N`), or `-- No entries --`.
fn unit_journal(ctx: &Ctx<'_>, units: &[String], lines: Option<usize>) -> Run {
    let mut all: Vec<&String> = units
        .iter()
        .filter_map(|u| ctx.state().journal.get(u))
        .flatten()
        .collect();
    if let Some(n) = lines {
        all.drain(..all.len().saturating_sub(n));
    }
    if all.is_empty() {
        return Run::out("-- No entries --\n");
    }
    Run::out(all.iter().map(|l| format!("{l}\n")).collect::<String>())
}

/// `500M`, `1G`, `4096` → bytes.
fn parse_size(text: &str) -> Option<u64> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let factor = match unit {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        _ => return None,
    };
    Some(n * factor)
}

pub fn hostname(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    match args {
        [] => Run::out(format!("{}\n", ctx.state().hostname)),
        [name] if !name.starts_with('-') => {
            if !ctx.root {
                return Run::fail(1, "hostname: you must be root to change the host name");
            }
            ctx.state_mut().hostname = name.clone();
            Run::ok()
        }
        _ => Run::out(format!("{}\n", ctx.state().hostname)),
    }
}

pub fn hostnamectl(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    match args.first().map(String::as_str) {
        Some("set-hostname") => match args.get(1) {
            Some(name) if ctx.root => {
                ctx.state_mut().hostname = name.clone();
                Run::ok()
            }
            Some(_) => Run::fail(
                1,
                "Could not set static hostname: Interactive authentication required.",
            ),
            None => Run::fail(1, "hostnamectl set-hostname: name required"),
        },
        Some("hostname") => Run::out(format!("{}\n", ctx.state().hostname)),
        Some("status") if args.len() > 1 => Run::out(format!("{}\n", ctx.state().hostname)),
        _ => Run::out(format!(" Static hostname: {}\n", ctx.state().hostname)),
    }
}

pub fn date(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let now = ctx.now.0;
    let mut iter = args
        .iter()
        .filter(|a| !matches!(a.as_str(), "-u" | "--utc"));
    match iter.next().map(String::as_str) {
        None => Run::out(format!("{}\n", time::date_default(now))),
        Some(format) if format.starts_with('+') => match time::strftime(now, &format[1..]) {
            Some(text) => Run::out(format!("{text}\n")),
            None => Run::fail(1, format!("date: format {format} is not simulated")),
        },
        Some("-s") | Some("--set") => {
            let Some(target) = iter
                .next()
                .and_then(|t| t.strip_prefix('@'))
                .and_then(|t| t.parse::<i64>().ok())
            else {
                return Run::fail(1, "date: only `date -s @SECONDS` is simulated");
            };
            if !ctx.root {
                return Run::fail(1, "date: cannot set date: Operation not permitted");
            }
            ctx.runtime_mut().clock_step_seconds += target - now;
            Run::out(format!("{}\n", time::date_default(target)))
        }
        Some(other) => Run::fail(1, format!("date: {other} is not simulated")),
    }
}

pub fn chronyc(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    if !ctx.machine().unit_active("chronyd.service") {
        return Run::fail(1, "506 Cannot talk to daemon");
    }
    match args.first().map(String::as_str) {
        Some("makestep") | Some("waitsync") => {
            if !ctx.root && args[0] == "makestep" {
                return Run::fail(1, "501 Not authorised");
            }
            sync_clock(ctx.machine_mut());
            Run::out("200 OK\n")
        }
        Some("tracking") | None => Run::out(if ctx.runtime().ntp_reachable {
            "Reference ID    : 7F7F0101 ()\nStratum         : 3\nSystem time     : 0.000000001 seconds fast of NTP time\nLeap status     : Normal\n"
        } else {
            "Reference ID    : 00000000 ()\nStratum         : 0\nSystem time     : 0.000000000 seconds fast of NTP time\nLeap status     : Not synchronised\n"
        }),
        Some("sources") => Run::out(
            "MS Name/IP address         Stratum Poll Reach LastRx Last sample\n^* ntp.simulated                 2   6   377    10     +0ns[ +0ns] +/- 1ms\n",
        ),
        Some(other) => Run::fail(1, format!("chronyc: {other} is not simulated")),
    }
}

/// `poweroff`, `halt`, `reboot`, `shutdown [-h|-P|-r] [now]`.
pub fn power(ctx: &mut Ctx<'_>, program: &str, args: &[String]) -> Run {
    let reboot = program == "reboot" || (program == "shutdown" && args.iter().any(|a| a == "-r"));
    if !ctx.root {
        return Run::fail(
            1,
            "Call to PowerOff failed: Interactive authentication required.",
        );
    }
    ctx.effect(if reboot {
        Effect::Reboot
    } else {
        Effect::PowerOff
    });
    Run::ok()
}

pub fn id(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (name, uid) = if ctx.root {
        ("root".to_string(), 0)
    } else {
        let uid = ctx.state().users.get(ctx.user).map_or(1000, |u| u.uid);
        (ctx.user.to_string(), uid)
    };
    match args.first().map(String::as_str) {
        Some("-u") => Run::out(format!("{uid}\n")),
        Some("-un") | Some("-nu") => Run::out(format!("{name}\n")),
        _ => Run::out(format!(
            "uid={uid}({name}) gid={uid}({name}) groups={uid}({name})\n"
        )),
    }
}

/// The RHCOS 9.6 kernel (`uname -r`).
const KERNEL_RELEASE: &str = "5.14.0-570.el9_6.x86_64";

/// `/proc/cmdline`. The live ISO boots with its volume label in `coreos.liveiso=` (the
/// ISO's `EFI/redhat/grub.cfg`, which coreos-installer's `iso kargs` edits and
/// assisted-image-service strips for its minimal ISO); an installed disk boots its ostree
/// deployment with the `ignition.platform.id=metal … rw rootflags=prjquota` arguments
/// coreos-assembler's image build sets.
pub fn kernel_cmdline(machine: &Machine) -> String {
    if machine.runtime.live {
        format!(
            "BOOT_IMAGE=/images/pxeboot/vmlinuz random.trust_cpu=on rd.luks.options=discard ignition.firstboot ignition.platform.id=metal coreos.liveiso={LIVE_ISO_LABEL}\n"
        )
    } else {
        format!(
            "BOOT_IMAGE=(hd0,gpt3)/boot/ostree/rhcos-{DEPLOYMENT}/vmlinuz-{KERNEL_RELEASE} ignition.platform.id=metal ostree=/ostree/boot.1/rhcos/{DEPLOYMENT}/0 root=UUID={ROOT_UUID} rw rootflags=prjquota boot=UUID={BOOT_UUID}\n"
        )
    }
}

/// The live ISO's volume label.
const LIVE_ISO_LABEL: &str = "rhcos-9.6.20251023-0";
/// The installed system's ostree deployment checksum and filesystem UUIDs.
const DEPLOYMENT: &str = "5c1f0b8f2c6e4f7a9d3b1e0c8a7f6d5e4c3b2a1908f7e6d5c4b3a29180f7e6d5";
const ROOT_UUID: &str = "910678ff-f77e-4a7d-8d53-86f2ac47a823";
const BOOT_UUID: &str = "5a5e4b1c-6a2d-4c2e-9f4b-2c5d1e6f7a80";

pub fn uname(args: &[String]) -> Run {
    match args.first().map(String::as_str) {
        Some("-r") => Run::out(format!("{KERNEL_RELEASE}\n")),
        Some("-m") => Run::out("x86_64\n"),
        Some("-n") => Run::out("crc\n"),
        _ => Run::out("Linux\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Effect, GuestTime, exec};

    #[test]
    fn kubelet_starts_only_with_sudo_and_reports_an_effect() {
        let mut m = sealed();
        let out = run(&mut m, "systemctl start kubelet");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("authentication required"));
        assert_eq!(run(&mut m, "sudo systemctl daemon-reload").code, 0);
        let out = run(&mut m, "sudo systemctl start kubelet");
        assert_eq!(out.code, 0);
        assert_eq!(
            out.effects,
            vec![Effect::UnitStarted("kubelet.service".into())]
        );
        assert_eq!(
            stdout(&run(&mut m, "systemctl is-active kubelet")),
            "active\n"
        );
        // Started, not enabled: a reboot would not start it.
        let out = run(&mut m, "systemctl is-enabled kubelet");
        assert_eq!((out.code, stdout(&out)), (1, "disabled\n".to_string()));
    }

    #[test]
    fn enable_disable_mask_and_show() {
        let mut m = sealed();
        assert_eq!(run(&mut m, "sudo systemctl enable dnsmasq").code, 0);
        assert!(m.state.units["dnsmasq.service"].enabled);
        assert_eq!(run(&mut m, "sudo systemctl disable kubelet --now").code, 0);
        assert_eq!(run(&mut m, "sudo systemctl mask chronyd").code, 0);
        let out = run(&mut m, "sudo systemctl start chronyd");
        assert!(stderr(&out).contains("masked"));
        let out = run(
            &mut m,
            "systemctl show ovs-configuration.service -p LoadState --value",
        );
        assert_eq!(stdout(&out), "loaded\n");
        let out = run(&mut m, "systemctl show nope.service -p LoadState --value");
        assert_eq!(stdout(&out), "not-found\n");
        let out = run(&mut m, "systemctl show chronyd --property=LoadState");
        assert_eq!(stdout(&out), "LoadState=masked\n");
        let out = run(&mut m, "sudo systemctl start nope");
        assert_eq!(out.code, 5);
        assert_eq!(run(&mut m, "sudo systemctl enable nope").code, 1);
        assert_eq!(run(&mut m, "sudo systemctl unmask chronyd").code, 0);
        assert!(!m.state.units["chronyd.service"].masked);
    }

    #[test]
    fn dnsmasq_refuses_to_listen_on_a_foreign_address() {
        let mut m = sealed();
        run(
            &mut m,
            "echo bGlzdGVuLWFkZHJlc3M9MTAuMTI4LjAuNQo= | base64 -d | sudo tee /etc/dnsmasq.d/crc-dnsmasq.conf",
        );
        let out = run(&mut m, "sudo systemctl start dnsmasq");
        assert_eq!(
            out.code, 1,
            "listen-address=10.128.0.5 is not a guest address"
        );
        assert!(!m.unit_active("dnsmasq.service"));
    }

    #[test]
    fn date_prints_guest_time_and_can_be_set() {
        let mut m = sealed();
        let out = run(&mut m, "date +%s");
        assert_eq!(stdout(&out), format!("{NOW}\n"));
        assert_eq!(
            stdout(&run(&mut m, "date")),
            "Wed Dec  2 12:23:44 UTC 2026\n"
        );
        assert_eq!(run(&mut m, "sudo date -s @100").code, 0);
        assert_eq!(m.guest_time(NOW), GuestTime(100));
        // No NTP: chrony cannot correct the clock.
        assert_eq!(run(&mut m, "sudo chronyc makestep").code, 0);
        assert_eq!(m.guest_time(NOW), GuestTime(100));
        m.runtime.ntp_reachable = true;
        assert_eq!(run(&mut m, "sudo chronyc makestep").code, 0);
        assert_eq!(m.guest_time(NOW), GuestTime(NOW));
    }

    #[test]
    fn journal_vacuum_and_power() {
        let mut m = sealed();
        m.state.journal_bytes = 1 << 20;
        assert_eq!(run(&mut m, "journalctl --vacuum-time=1s").code, 1);
        assert_eq!(run(&mut m, "sudo journalctl --rotate").code, 0);
        assert_eq!(run(&mut m, "sudo journalctl --vacuum-time=1s").code, 0);
        assert_eq!(m.state.journal_bytes, 0);
        let out = run(&mut m, "sudo poweroff");
        assert_eq!(out.effects, vec![Effect::PowerOff]);
        let out = run(&mut m, "sudo shutdown -h now");
        assert_eq!(out.effects, vec![Effect::PowerOff]);
        let out = run(&mut m, "sudo systemctl reboot");
        assert_eq!(out.effects, vec![Effect::Reboot]);
        let out = run(&mut m, "poweroff");
        assert!(out.effects.is_empty());
        assert_eq!(out.code, 1);
    }

    #[test]
    fn hostnamectl_and_identity() {
        let mut m = sealed();
        assert_eq!(
            stdout(&run(&mut m, "hostnamectl status --transient")),
            "crc\n"
        );
        assert_eq!(run(&mut m, "sudo hostnamectl set-hostname crc2").code, 0);
        assert_eq!(stdout(&run(&mut m, "hostname")), "crc2\n");
        assert_eq!(stdout(&run(&mut m, "id -u")), "1000\n");
        assert_eq!(stdout(&run(&mut m, "sudo id -u")), "0\n");
        let out = exec(&mut m, GuestTime(NOW), "core", "sudo whoami", b"");
        assert_eq!(stdout(&out), "root\n");
    }
}
