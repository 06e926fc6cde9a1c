//! Users and file owners: the kubelet's volume ownership for a pod's `fsGroup`, and whether a
//! process of another user (QEMU, CDI's pods) may open a file.
//!
//! Ownership is `SetVolumeOwnership` of `pkg/volume/volume_linux.go` (Kubernetes): every entry
//! under the volume is given the group and the group's permission bits; directories are also
//! searchable and set-group-ID so files made later inherit the group. Symbolic links keep their
//! mode. Only ever adds bits.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

/// A volume the kubelet gives a pod's `fsGroup`: every file and directory under `dir`
/// group-owned by `group`, readable (and, unless `read_only`, writable) by it, directories also
/// searchable and set-group-ID so new files inherit the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership {
    pub dir: std::path::PathBuf,
    pub group: u32,
    pub read_only: bool,
}

/// A process's user and groups, for [`may_open`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub uid: u32,
    pub groups: Vec<u32>,
}

/// QEMU in virt-launcher, and CDI's importer, upload and clone pods: UID 107, group 107 (their
/// `fsGroup`).
pub fn qemu() -> User {
    User {
        uid: QEMU_ID,
        groups: vec![QEMU_ID],
    }
}

/// KubeVirt's and CDI's non-root user and group (`util.NonRootUID`, `common.QemuSubGid`).
pub const QEMU_ID: u32 = 107;

/// Whether `user` may open `path` for reading (and writing, with `write`), as the kernel decides
/// for a process without capabilities: search permission on every directory above it, then the
/// owner's, the group's or everyone's bits of the file. `Err` names what is missing, as the
/// process would see it (`Permission denied`).
pub fn may_open(path: &Path, user: &User, write: bool) -> Result<(), String> {
    let denied = |what: &Path| Err(format!("{}: Permission denied", what.display()));
    let allowed = |meta: &std::fs::Metadata, bits: u32| {
        let mode = meta.mode();
        let class = if meta.uid() == user.uid {
            (mode >> 6) & 0o7
        } else if user.groups.contains(&meta.gid()) {
            (mode >> 3) & 0o7
        } else {
            mode & 0o7
        };
        class & bits == bits
    };
    if user.uid == 0 {
        return Ok(());
    }
    for dir in path.ancestors().skip(1) {
        match std::fs::metadata(dir) {
            Ok(meta) if allowed(&meta, 0o1) => {}
            Ok(_) => return denied(dir),
            Err(err) => return Err(format!("{}: {err}", dir.display())),
        }
    }
    let meta = std::fs::metadata(path).map_err(|err| format!("{}: {err}", path.display()))?;
    let bits = if write { 0o6 } else { 0o4 };
    if allowed(&meta, bits) {
        Ok(())
    } else {
        denied(path)
    }
}

/// Group read and write (a writable volume).
const RW_MASK: u32 = 0o660;
/// Group read (a read-only volume: Secret, ConfigMap, projected).
const RO_MASK: u32 = 0o440;
/// Directories: searchable by owner and group.
const EXEC_MASK: u32 = 0o110;
const SET_GID: u32 = 0o2000;

/// Gives `ownership.dir` and everything under it to `ownership.group`.
pub fn apply(ownership: &Ownership) -> std::io::Result<()> {
    walk(&ownership.dir, ownership)
}

fn walk(path: &Path, ownership: &Ownership) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    std::os::unix::fs::lchown(path, None, Some(ownership.group))?;
    if meta.file_type().is_symlink() {
        return Ok(());
    }
    let mut mask = if ownership.read_only {
        RO_MASK
    } else {
        RW_MASK
    };
    if meta.is_dir() {
        mask |= EXEC_MASK | SET_GID;
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode | mask != mode {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode | mask))?;
    }
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            walk(&entry?.path(), ownership)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_writable_volume_becomes_the_groups_and_a_read_only_one_readable_by_it() {
        let dir = tempfile::tempdir().expect("tempdir");
        let volume = dir.path().join("v");
        std::fs::create_dir_all(volume.join("sub")).unwrap();
        std::fs::write(volume.join("sub/disk.img"), b"x").unwrap();
        std::fs::set_permissions(
            volume.join("sub/disk.img"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        apply(&Ownership {
            dir: volume.clone(),
            group: 4321,
            read_only: false,
        })
        .unwrap();
        let file = std::fs::metadata(volume.join("sub/disk.img")).unwrap();
        assert_eq!((file.gid(), file.mode() & 0o7777), (4321, 0o660));
        let sub = std::fs::metadata(volume.join("sub")).unwrap();
        assert_eq!(sub.gid(), 4321);
        assert_eq!(sub.mode() & 0o2770, 0o2770);

        std::fs::set_permissions(
            volume.join("sub/disk.img"),
            std::fs::Permissions::from_mode(0o400),
        )
        .unwrap();
        apply(&Ownership {
            dir: volume.clone(),
            group: 4322,
            read_only: true,
        })
        .unwrap();
        let file = std::fs::metadata(volume.join("sub/disk.img")).unwrap();
        assert_eq!((file.gid(), file.mode() & 0o777), (4322, 0o440));
    }

    #[test]
    fn qemu_opens_what_its_user_or_group_or_everyone_may() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let disk = dir.path().join("disk.img");
        std::fs::write(&disk, b"x").unwrap();
        let set = |mode: u32, uid: u32, gid: u32| {
            std::os::unix::fs::chown(&disk, Some(uid), Some(gid)).unwrap();
            std::fs::set_permissions(&disk, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        set(0o600, 1000650000, 1000650000);
        let refused = may_open(&disk, &qemu(), false).unwrap_err();
        assert!(
            refused.ends_with("disk.img: Permission denied"),
            "{refused}"
        );
        set(0o644, 1000650000, 1000650000);
        assert!(may_open(&disk, &qemu(), false).is_ok());
        assert!(may_open(&disk, &qemu(), true).is_err());
        set(0o660, 1000650000, QEMU_ID);
        assert!(may_open(&disk, &qemu(), true).is_ok());
        set(0o660, QEMU_ID, QEMU_ID);
        assert!(may_open(&disk, &qemu(), true).is_ok());
        // A directory above that the user cannot search hides the file.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(may_open(&disk, &qemu(), false).is_err());
    }
}
