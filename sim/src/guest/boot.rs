//! Firmware: which disk boots. Disks are tried by `bootOrder` (lowest first, disks without one
//! after, in spec order); a blank disk falls through to the next; a cdrom boots only when it is
//! a live ISO; a disk with an installed system boots it (a live ISO attached as a disk boots too:
//! RHCOS ISOs are hybrid images).
//!
//! Two image formats boot: a disk carrying a [`GuestState`] (see [`super::disk`]) and the text
//! ISO the fake `coreos-installer` writes (`sim::tools`: a magic first line and an `ignition:`
//! line), which is a live ISO with that Ignition config.

use std::io::Read;
use std::path::{Path, PathBuf};

use super::disk::{self, DiskError};
use super::state::GuestState;
use super::{BootDisk, DiskKind};
use crate::tools;

/// What the firmware found.
#[derive(Debug)]
pub enum Boot {
    /// An installed system; its state is written back to `path`.
    Disk {
        path: PathBuf,
        state: GuestState,
        disk_bytes: u64,
    },
    /// A live ISO; nothing is written back. `install_target` is `/dev/vda`: the first `Disk`.
    Live {
        iso: PathBuf,
        state: GuestState,
        install_target: Option<PathBuf>,
        disk_bytes: u64,
    },
}

/// Picks the boot disk; `notes` say why disks before it were skipped.
pub fn choose(disks: &[BootDisk]) -> (Option<Boot>, Vec<String>) {
    choose_with(disks, read_image, |p| {
        std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
    })
}

/// What a disk image holds: a guest state, the fake tools' live ISO (as a state with
/// `live_iso`), or nothing (blank).
pub fn read_image(path: &Path) -> Result<Option<GuestState>, DiskError> {
    if !is_tools_iso(path)? {
        return disk::read_state(path);
    }
    let ignition = tools::read_embedded_ignition(path).map_err(|err| DiskError::Corrupt {
        path: path.to_path_buf(),
        reason: err.to_string(),
    })?;
    // A live ISO without an embedded config still boots, with nobody allowed in.
    let config = ignition.map_or_else(|| "{}".to_string(), |value| value.to_string());
    Ok(Some(GuestState::live_iso(&config)))
}

fn is_tools_iso(path: &Path) -> Result<bool, DiskError> {
    let io = |source| DiskError::Io {
        path: path.to_path_buf(),
        source,
    };
    let magic = format!("{}\n", tools::ISO_MAGIC);
    let mut head = Vec::with_capacity(magic.len());
    std::fs::File::open(path)
        .map_err(io)?
        .take(magic.len() as u64)
        .read_to_end(&mut head)
        .map_err(io)?;
    Ok(head == magic.as_bytes())
}

/// [`choose`] with the disk reads injected (unit tests).
pub fn choose_with(
    disks: &[BootDisk],
    read: impl Fn(&Path) -> Result<Option<GuestState>, DiskError>,
    size: impl Fn(&Path) -> u64,
) -> (Option<Boot>, Vec<String>) {
    let mut order: Vec<(usize, &BootDisk)> = disks.iter().enumerate().collect();
    order.sort_by_key(|(i, d)| (d.boot_order.is_none(), d.boot_order, *i));
    let install_target = disks
        .iter()
        .find(|d| matches!(d.kind, DiskKind::Disk))
        .map(|d| d.image.clone());
    let mut notes = Vec::new();
    for (_, candidate) in order {
        let state = match read(&candidate.image) {
            Ok(Some(state)) => state,
            Ok(None) => {
                notes.push(format!("{}: blank", candidate.name));
                continue;
            }
            Err(err) => {
                notes.push(format!("{}: not bootable: {err}", candidate.name));
                continue;
            }
        };
        if state.live_iso.is_some() {
            let disk_bytes = install_target.as_deref().map(&size).unwrap_or(0);
            return (
                Some(Boot::Live {
                    iso: candidate.image.clone(),
                    state,
                    install_target,
                    disk_bytes,
                }),
                notes,
            );
        }
        if matches!(candidate.kind, DiskKind::Cdrom) {
            notes.push(format!("{}: cdrom without a live ISO", candidate.name));
            continue;
        }
        if state.install_incomplete {
            notes.push(format!(
                "{}: installation not finished (no bootable system)",
                candidate.name
            ));
            continue;
        }
        return (
            Some(Boot::Disk {
                path: candidate.image.clone(),
                disk_bytes: size(&candidate.image),
                state,
            }),
            notes,
        );
    }
    (None, notes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn disk(name: &str, order: Option<u32>, kind: DiskKind) -> BootDisk {
        BootDisk {
            name: name.into(),
            image: PathBuf::from(format!("/{name}")),
            boot_order: order,
            kind,
        }
    }

    fn reader(
        images: &'static [(&'static str, Option<&'static str>)],
    ) -> impl Fn(&Path) -> Result<Option<GuestState>, DiskError> {
        move |path| {
            let name = path.to_string_lossy();
            let entry = images.iter().find(|(n, _)| name.ends_with(n));
            Ok(match entry {
                Some((_, Some("live"))) => Some(GuestState::live_iso("{}")),
                Some((_, Some(host))) => Some(GuestState {
                    hostname: host.to_string(),
                    ..Default::default()
                }),
                _ => None,
            })
        }
    }

    #[test]
    fn a_blank_first_disk_falls_through_to_the_live_cdrom() {
        let disks = vec![
            disk("root", Some(1), DiskKind::Disk),
            disk("iso", Some(2), DiskKind::Cdrom),
        ];
        let (boot, notes) = choose_with(&disks, reader(&[("iso", Some("live"))]), |_| 7);
        match boot {
            Some(Boot::Live {
                iso,
                install_target,
                disk_bytes,
                ..
            }) => {
                assert_eq!(iso, PathBuf::from("/iso"));
                assert_eq!(install_target, Some(PathBuf::from("/root")));
                assert_eq!(disk_bytes, 7);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(notes, vec!["root: blank"]);
    }

    #[test]
    fn an_installed_disk_wins_by_boot_order() {
        let disks = vec![
            disk("iso", Some(2), DiskKind::Cdrom),
            disk("root", Some(1), DiskKind::Disk),
        ];
        let (boot, _) = choose_with(
            &disks,
            reader(&[("root", Some("crc")), ("iso", Some("live"))]),
            |_| 1,
        );
        assert!(matches!(boot, Some(Boot::Disk { state, .. }) if state.hostname == "crc"));
    }

    #[test]
    fn disks_without_order_come_last_and_nothing_bootable_is_none() {
        let disks = vec![
            disk("a", None, DiskKind::Disk),
            disk("b", Some(5), DiskKind::Disk),
        ];
        let (boot, notes) = choose_with(&disks, reader(&[]), |_| 1);
        assert!(boot.is_none());
        assert_eq!(notes, vec!["b: blank", "a: blank"]);
        let (boot, _) = choose_with(&disks, reader(&[("a", Some("x"))]), |_| 1);
        assert!(matches!(boot, Some(Boot::Disk { path, .. }) if path == Path::new("/a")));
    }

    #[test]
    fn the_fake_tools_iso_is_a_live_iso() {
        let dir = tempfile::tempdir().unwrap();
        let iso = dir.path().join("iso.img");
        let config = r#"{"passwd":{"users":[{"name":"core","sshAuthorizedKeys":["k"]}]}}"#;
        std::fs::write(
            &iso,
            format!(
                "{}\nartifact: rhcos-live.x86_64.iso\n{}{config}\n",
                tools::ISO_MAGIC,
                tools::ISO_IGNITION_PREFIX
            ),
        )
        .unwrap();
        let state = read_image(&iso).unwrap().unwrap();
        let embedded: serde_json::Value =
            serde_json::from_str(state.live_iso.as_deref().unwrap()).unwrap();
        assert_eq!(embedded["passwd"]["users"][0]["name"], "core");
        std::fs::write(&iso, format!("{}\nartifact: x\n", tools::ISO_MAGIC)).unwrap();
        assert_eq!(
            read_image(&iso).unwrap().unwrap().live_iso.as_deref(),
            Some("{}")
        );
        let blank = dir.path().join("blank.img");
        disk::create_disk(&blank, 1 << 20, None).unwrap();
        assert_eq!(read_image(&blank).unwrap(), None);
    }

    #[test]
    fn a_disk_whose_install_did_not_finish_does_not_boot() {
        let disks = vec![
            disk("root", Some(1), DiskKind::Disk),
            disk("iso", Some(2), DiskKind::Cdrom),
        ];
        let read = |path: &Path| -> Result<Option<GuestState>, DiskError> {
            Ok(Some(if path.ends_with("iso") {
                GuestState::live_iso("{}")
            } else {
                crate::guest::install::in_progress()
            }))
        };
        let (boot, notes) = choose_with(&disks[..1], read, |_| 1);
        assert!(boot.is_none());
        assert!(notes[0].contains("installation not finished"), "{notes:?}");
        let (boot, _) = choose_with(&disks, read, |_| 1);
        assert!(
            matches!(boot, Some(Boot::Live { .. })),
            "the ISO installs again"
        );
    }

    #[test]
    fn a_cdrom_with_an_installed_system_does_not_boot() {
        let disks = vec![disk("cd", Some(1), DiskKind::Cdrom)];
        let (boot, notes) = choose_with(&disks, reader(&[("cd", Some("crc"))]), |_| 1);
        assert!(boot.is_none());
        assert_eq!(notes.len(), 1);
    }
}
