//! Block devices and filesystems: `lsblk`, `growpart`, `xfs_growfs`, `fstrim`, `mount -o
//! remount`, `/sys/class/block/*/partition`, `/dev/disk/by-partlabel/*`.
//!
//! The boot disk is `/dev/vda` with the RHCOS layout: `vda1` BIOS-BOOT, `vda2` EFI-SYSTEM, `vda3`
//! boot (ext4, `/boot`), `vda4` root (XFS, `/sysroot`, with `/var` and `/etc` bind-mounted
//! read-write from it). Its size is the disk image's size, so a clone onto a bigger volume shows
//! a bigger disk whose root partition has not grown yet. Under a live ISO `/dev/vda` is the blank
//! install target and the ISO is `/dev/sr0`.

use super::{Ctx, Run};
use crate::guest::state::usable_end;

const MIB: u64 = 1 << 20;
const SECTOR: u64 = 512;
const XFS_BLOCK: u64 = 4096;

/// One block device as lsblk shows it.
struct Device {
    name: &'static str,
    parent: Option<&'static str>,
    bytes: u64,
    kind: &'static str,
    partlabel: &'static str,
    fstype: &'static str,
    mountpoint: &'static str,
    partn: Option<u32>,
}

fn devices(ctx: &Ctx<'_>) -> Vec<Device> {
    let disk = ctx.runtime().disk_bytes;
    let mut list = vec![Device {
        name: "vda",
        parent: None,
        bytes: disk,
        kind: "disk",
        partlabel: "",
        fstype: "",
        mountpoint: "",
        partn: None,
    }];
    if ctx.runtime().live {
        list.push(Device {
            name: "sr0",
            parent: None,
            bytes: 1 << 30,
            kind: "rom",
            partlabel: "",
            fstype: "iso9660",
            mountpoint: "/run/media/iso",
            partn: None,
        });
        return list;
    }
    let part = |name, partn, bytes, partlabel, fstype, mountpoint| Device {
        name,
        parent: Some("vda"),
        bytes,
        kind: "part",
        partlabel,
        fstype,
        mountpoint,
        partn: Some(partn),
    };
    list.push(part("vda1", 1, MIB, "BIOS-BOOT", "", ""));
    list.push(part("vda2", 2, 127 * MIB, "EFI-SYSTEM", "vfat", ""));
    list.push(part("vda3", 3, 384 * MIB, "boot", "ext4", "/boot"));
    list.push(part(
        "vda4",
        4,
        ctx.state().root.partition_bytes,
        "root",
        "xfs",
        "/sysroot",
    ));
    list
}

fn partition_start(ctx: &Ctx<'_>, partn: u32) -> u64 {
    match partn {
        1 => MIB,
        2 => 2 * MIB,
        3 => 129 * MIB,
        _ => ctx.state().root.partition_start,
    }
}

/// `/dev/disk/by-partlabel/LABEL` → `/dev/vdaN`.
pub fn partlabel_target(ctx: &Ctx<'_>, path: &str) -> Option<String> {
    let label = path.strip_prefix("/dev/disk/by-partlabel/")?;
    devices(ctx)
        .into_iter()
        .find(|d| d.kind == "part" && d.partlabel == label)
        .map(|d| format!("/dev/{}", d.name))
}

/// `/sys/class/block/<dev>/{partition,size,start}`.
pub fn sys_block_file(ctx: &Ctx<'_>, path: &str) -> Option<Vec<u8>> {
    let rest = path.strip_prefix("/sys/class/block/")?;
    let (name, attribute) = rest.split_once('/')?;
    let device = devices(ctx).into_iter().find(|d| d.name == name)?;
    let value = match (attribute, device.partn) {
        ("partition", Some(n)) => u64::from(n),
        ("size", _) => device.bytes / SECTOR,
        ("start", Some(n)) => partition_start(ctx, n) / SECTOR,
        _ => return None,
    };
    Some(format!("{value}\n").into_bytes())
}

fn human(bytes: u64) -> String {
    let units = [
        ("T", 1u64 << 40),
        ("G", 1 << 30),
        ("M", 1 << 20),
        ("K", 1 << 10),
    ];
    for (suffix, size) in units {
        if bytes >= size {
            let value = bytes as f64 / size as f64;
            return if (value - value.round()).abs() < 0.05 {
                format!("{}{suffix}", value.round())
            } else {
                format!("{value:.1}{suffix}")
            };
        }
    }
    format!("{bytes}B")
}

/// `lsblk [-n] [-d] [-p] [-b] [-o COLS] [DEVICE…]`.
pub fn lsblk(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut header = true;
    let mut nodeps = false;
    let mut paths = false;
    let mut bytes = false;
    let mut columns = vec![
        "NAME".to_string(),
        "SIZE".to_string(),
        "TYPE".to_string(),
        "MOUNTPOINTS".to_string(),
    ];
    let mut targets = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        if let Some(cols) = arg.strip_prefix("--output=") {
            columns = cols.split(',').map(|c| c.to_uppercase()).collect();
        } else if arg.starts_with("--") {
            match arg.as_str() {
                "--noheadings" => header = false,
                "--nodeps" => nodeps = true,
                "--paths" => paths = true,
                "--bytes" => bytes = true,
                "--list" | "--raw" => {}
                other => return Run::fail(1, format!("lsblk: unsupported option {other}")),
            }
        } else if let Some(flags) = arg.strip_prefix('-') {
            for flag in flags.chars() {
                match flag {
                    'n' => header = false,
                    'd' => nodeps = true,
                    'p' => paths = true,
                    'b' => bytes = true,
                    'l' | 'r' => {}
                    'o' => match iter.next() {
                        Some(cols) => columns = cols.split(',').map(|c| c.to_uppercase()).collect(),
                        None => return Run::fail(1, "lsblk: option requires an argument -- 'o'"),
                    },
                    other => return Run::fail(1, format!("lsblk: unsupported option -{other}")),
                }
            }
        } else {
            targets.push(arg.clone());
        }
    }
    let all = devices(ctx);
    let mut rows: Vec<&Device> = Vec::new();
    if targets.is_empty() {
        rows = all
            .iter()
            .filter(|d| !nodeps || d.parent.is_none())
            .collect();
    }
    for target in &targets {
        let name = target.trim_start_matches("/dev/");
        let Some(device) = all.iter().find(|d| d.name == name) else {
            return Run::fail(32, format!("lsblk: {target}: not a block device"));
        };
        rows.push(device);
        if !nodeps {
            rows.extend(all.iter().filter(|d| d.parent == Some(device.name)));
        }
    }
    let prefix = if paths { "/dev/" } else { "" };
    let mut out = String::new();
    if header {
        out.push_str(&columns.join(" "));
        out.push('\n');
    }
    for device in rows {
        let mut values = Vec::new();
        for column in &columns {
            let value = match column.as_str() {
                "NAME" | "KNAME" => format!("{prefix}{}", device.name),
                "PATH" => format!("/dev/{}", device.name),
                "PKNAME" => device
                    .parent
                    .map(|p| format!("{prefix}{p}"))
                    .unwrap_or_default(),
                "SIZE" if bytes => device.bytes.to_string(),
                "SIZE" => human(device.bytes),
                "TYPE" => device.kind.to_string(),
                "MOUNTPOINT" | "MOUNTPOINTS" => device.mountpoint.to_string(),
                "PARTLABEL" => device.partlabel.to_string(),
                "FSTYPE" => device.fstype.to_string(),
                "PARTN" => device.partn.map(|n| n.to_string()).unwrap_or_default(),
                other => return Run::fail(1, format!("lsblk: unknown column: {other}")),
            };
            values.push(value);
        }
        out.push_str(values.join(" ").trim_end());
        out.push('\n');
    }
    Run::out(out)
}

/// `growpart DISK PARTITION`: 0 grown, 1 `NOCHANGE`, 2 failure (cloud-utils semantics).
pub fn growpart(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let [disk, partn] = args else {
        return Run::fail(2, "growpart: usage: growpart DISK PARTITION-NUMBER");
    };
    if !ctx.root {
        return Run::fail(2, format!("FAILED: failed to dump sfdisk info for {disk}"));
    }
    if disk != "/dev/vda" || ctx.runtime().live {
        return Run::fail(2, format!("FAILED: {disk}: not a partitioned disk"));
    }
    let Ok(partn) = partn.parse::<u32>() else {
        return Run::fail(
            2,
            format!("FAILED: partition-number must be a number ({partn})"),
        );
    };
    let Some(device) = devices(ctx).into_iter().find(|d| d.partn == Some(partn)) else {
        return Run::fail(2, format!("FAILED: failed to get start for {disk}{partn}"));
    };
    let start = partition_start(ctx, partn);
    let end = start + device.bytes;
    let limit = if partn == 4 {
        usable_end(ctx.runtime().disk_bytes)
    } else {
        // Followed by another partition: nothing to gain.
        end
    };
    if end >= limit {
        return Run::out(format!(
            "NOCHANGE: partition {partn} is size {}. it cannot be grown\n",
            device.bytes / SECTOR
        ))
        .with_code(1);
    }
    let new_bytes = limit - start;
    ctx.state_mut().root.partition_bytes = new_bytes;
    Run::out(format!(
        "CHANGED: partition={partn} start={} old: size={} end={} new: size={} end={}\n",
        start / SECTOR,
        device.bytes / SECTOR,
        end / SECTOR,
        new_bytes / SECTOR,
        limit / SECTOR
    ))
}

/// `xfs_growfs MOUNTPOINT`: grows the root XFS to its partition.
pub fn xfs_growfs(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let Some(mountpoint) = args.iter().find(|a| !a.starts_with('-')) else {
        return Run::fail(1, "Usage: xfs_growfs [options] mountpoint");
    };
    let writable = match mountpoint.trim_end_matches('/') {
        "/sysroot" => ctx.runtime().sysroot_writable,
        // Read-write bind mounts of the same filesystem.
        "/var" | "/etc" => true,
        // The composefs/ostree root is read-only.
        "" => false,
        _ => {
            return Run::fail(
                1,
                format!("xfs_growfs: {mountpoint} is not a mounted XFS filesystem"),
            );
        }
    };
    if ctx.runtime().live {
        return Run::fail(
            1,
            format!("xfs_growfs: {mountpoint} is not a mounted XFS filesystem"),
        );
    }
    if !ctx.root {
        return Run::fail(
            1,
            format!("xfs_growfs: cannot open {mountpoint}: Permission denied"),
        );
    }
    if !writable {
        return Run::fail(
            1,
            "xfs_growfs: XFS_IOC_FSGROWFSDATA xfsctl failed: Read-only file system",
        );
    }
    let root = ctx.state().root.clone();
    let mut out = format!(
        "meta-data=/dev/vda4              isize=512    agcount=4, agsize={} blks\ndata     =                       bsize={XFS_BLOCK}   blocks={}\n",
        root.filesystem_bytes / XFS_BLOCK / 4,
        root.filesystem_bytes / XFS_BLOCK
    );
    if root.filesystem_bytes < root.partition_bytes {
        out.push_str(&format!(
            "data blocks changed from {} to {}\n",
            root.filesystem_bytes / XFS_BLOCK,
            root.partition_bytes / XFS_BLOCK
        ));
        ctx.state_mut().root.filesystem_bytes = root.partition_bytes;
    }
    Run::out(out)
}

/// `fstrim [-v] MOUNTPOINT`: discards the root XFS's freed blocks, through `/var`, `/sysroot` or
/// `/etc`; `/` is a composefs overlay and refuses.
pub fn fstrim(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    if !ctx.root {
        return Run::fail(1, "fstrim: cannot open: Permission denied");
    }
    let verbose = args.iter().any(|a| a == "-v" || a == "--verbose");
    let target = args
        .iter()
        .find(|a| !a.starts_with('-'))
        .map_or("/", String::as_str);
    match target.trim_end_matches('/') {
        // RHCOS mounts `/` as composefs: an overlayfs over an EROFS image, which has no FITRIM.
        "" => {
            return Run::fail(1, "fstrim: /: the discard operation is not supported");
        }
        // The root XFS, and the bind mounts of it.
        "/var" | "/sysroot" | "/etc" => {}
        _ => return Run::fail(1, format!("fstrim: {target}: not a mount point")),
    }
    let trimmed = ctx.state().untrimmed_bytes;
    if trimmed > 0 {
        ctx.state_mut().untrimmed_bytes = 0;
    }
    // A defragmented etcd's old database file was in the discarded blocks.
    if !ctx.state().etcd_history.released.is_empty() {
        ctx.state_mut().etcd_history.released.clear();
    }
    if verbose {
        Run::out(format!(
            "{target}: {} ({trimmed} bytes) trimmed\n",
            human(trimmed)
        ))
    } else {
        Run::ok()
    }
}

/// `mount -o remount,rw|ro /sysroot` (and a listing without arguments).
pub fn mount(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    match args {
        [] => Run::out(format!(
            "/dev/vda4 on /sysroot type xfs ({})\n/dev/vda4 on /var type xfs (rw)\n/dev/vda3 on /boot type ext4 (ro)\n",
            if ctx.runtime().sysroot_writable {
                "rw"
            } else {
                "ro"
            }
        )),
        [o, options, target] if o == "-o" && target.trim_end_matches('/') == "/sysroot" => {
            let mut opts = options.split(',');
            if opts.next() != Some("remount") {
                return Run::fail(32, "mount: only `-o remount,rw|ro /sysroot` is simulated");
            }
            if !ctx.root {
                return Run::fail(32, "mount: only root can use \"--options\" option");
            }
            match opts.next() {
                Some("rw") => ctx.runtime_mut().sysroot_writable = true,
                Some("ro") => ctx.runtime_mut().sysroot_writable = false,
                _ => return Run::fail(32, "mount: remount needs rw or ro"),
            }
            Run::ok()
        }
        _ => Run::fail(32, "mount: only `-o remount,rw|ro /sysroot` is simulated"),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{Machine, Runtime};
    use crate::guest::state::{GuestState, RootDisk};

    /// A sealed disk made for 32 GiB, cloned onto a 64 GiB volume.
    fn cloned_bigger() -> Machine {
        let mut state = GuestState::sealed_crc_at("4.22.1", KEY, NOW);
        state.root = RootDisk::filling(32 * GIB);
        Machine::power_on(state, Runtime::new(64 * GIB, 0, false))
    }

    #[test]
    fn agent_root_discovery_commands() {
        let mut m = cloned_bigger();
        let out = run(&mut m, "readlink -f /dev/disk/by-partlabel/root");
        assert_eq!(stdout(&out), "/dev/vda4\n");
        let out = run(&mut m, "lsblk -no PKNAME /dev/vda4");
        assert_eq!((out.code, stdout(&out)), (0, "vda\n".to_string()));
        let out = run(&mut m, "lsblk -ndo pkname -p /dev/vda4");
        assert_eq!(stdout(&out), "/dev/vda\n");
        let out = run(&mut m, "cat /sys/class/block/vda4/partition");
        assert_eq!(stdout(&out), "4\n");
        let out = run(&mut m, "lsblk -b -d -n -o SIZE /dev/vda");
        assert_eq!(stdout(&out), format!("{}\n", 64 * GIB));
        assert_eq!(run(&mut m, "lsblk /dev/vdz").code, 32);
    }

    #[test]
    fn growpart_grows_once_then_reports_nochange() {
        let mut m = cloned_bigger();
        let out = run(&mut m, "sudo growpart /dev/vda 4");
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert!(stdout(&out).starts_with("CHANGED: partition=4"));
        assert!(out.changed);
        assert_eq!(m.state.root.partition_end(), 64 * GIB - (1 << 20));
        let out = run(&mut m, "sudo growpart /dev/vda 4");
        assert_eq!(out.code, 1);
        assert!(stdout(&out).starts_with("NOCHANGE"));
        assert_eq!(run(&mut m, "sudo growpart /dev/vda 9").code, 2);
        assert_eq!(run(&mut m, "growpart /dev/vda 4").code, 2);
    }

    #[test]
    fn xfs_growfs_needs_a_writable_mount() {
        let mut m = cloned_bigger();
        run(&mut m, "sudo growpart /dev/vda 4");
        let out = run(&mut m, "sudo xfs_growfs /sysroot");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("Read-only"));
        assert_eq!(run(&mut m, "sudo mount -o remount,rw /sysroot").code, 0);
        let out = run(&mut m, "sudo xfs_growfs /sysroot");
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert!(stdout(&out).contains("data blocks changed"));
        assert_eq!(m.state.root.filesystem_bytes, m.state.root.partition_bytes);
        // Growing again changes nothing and still succeeds.
        let out = run(&mut m, "sudo xfs_growfs /var");
        assert_eq!(out.code, 0);
        assert!(!stdout(&out).contains("changed"));
    }

    #[test]
    fn fstrim_discards_freed_bytes() {
        let mut m = sealed();
        m.state.untrimmed_bytes = 4096;
        let out = run(&mut m, "sudo fstrim -v /var");
        assert_eq!(stdout(&out), "/var: 4K (4096 bytes) trimmed\n");
        assert_eq!(m.state.untrimmed_bytes, 0);
    }

    #[test]
    fn fstrim_refuses_the_composefs_root() {
        let mut m = sealed();
        m.state.untrimmed_bytes = 4096;
        let out = run(&mut m, "sudo fstrim -v /");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("the discard operation is not supported"));
        assert_eq!(m.state.untrimmed_bytes, 4096, "nothing discarded");
    }

    #[test]
    fn live_environment_has_a_blank_target_and_a_cdrom() {
        let state = GuestState::live_iso("{}");
        let mut m = Machine::power_on(state, Runtime::new(64 * GIB, 0, true));
        let out = run(&mut m, "lsblk -dn -o NAME,TYPE");
        assert_eq!(stdout(&out), "vda disk\nsr0 rom\n");
        assert_eq!(
            run(&mut m, "readlink -f /dev/disk/by-partlabel/root").code,
            1
        );
    }
}
