//! The kubelet's volume ownership for a pod's `fsGroup` (`SetVolumeOwnership` in
//! `pkg/volume/volume_linux.go`, Kubernetes v1.35): every entry under the volume is given the
//! group and the group's permission bits; directories are also searchable and set-group-ID so
//! files made later inherit the group. Symbolic links keep their mode. Only ever adds bits.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use super::plan::Ownership;

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
    use std::os::unix::fs::MetadataExt;

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
}
