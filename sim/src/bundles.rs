//! Builds `.crcbundle` archives shaped like the published ones, for the download source's tests
//! and the demo: a zstd-compressed tar whose top-level directory is the file name without
//! `.crcbundle`, holding `crc.qcow2` (made with the real `qemu-img`, its disk carrying the
//! guest-state model of a sealed CRC guest), `id_ecdsa_crc` and `crc-bundle-info.json`; plus a
//! `sha256sum.txt`. Flaws produce the bad inputs the download source must reject.

use std::path::{Path, PathBuf};
use std::process::Command;

use sha2::{Digest as _, Sha256};

use super::guest::disk;
use super::guest::state::GuestState;
use guestcluster::guest::keys;

/// What is wrong with a built bundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flaw {
    None,
    /// `sha256sum.txt` lists a different digest for the archive.
    WrongChecksum,
    /// `sha256sum.txt` does not list the archive at all.
    UnlistedInChecksums,
    /// The archive lacks this member (`crc.qcow2`, `id_ecdsa_crc` or `crc-bundle-info.json`).
    MissingMember(&'static str),
    /// An extra member escapes the extraction directory (`../escape`).
    PathTraversal,
    /// An extra member is a symbolic link.
    Symlink,
    /// `crc-bundle-info.json` has no `clusterInfo.openshiftVersion`.
    NoVersion,
}

/// Errors of building a bundle.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("building bundle at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("qemu-img failed ({0}); install Debian's qemu-utils")]
    QemuImg(String),
    #[error(transparent)]
    Disk(#[from] disk::DiskError),
    #[error(transparent)]
    Key(#[from] keys::KeyError),
}

/// A built bundle.
#[derive(Clone, Debug)]
pub struct Bundle {
    /// `crc_libvirt_<version>_<arch>.crcbundle`.
    pub file_name: String,
    pub archive: PathBuf,
    /// The bundle's `crc.qcow2` on its own (an extracted disk, as the manual path serves it).
    pub qcow2: PathBuf,
    pub sha256sum_txt: PathBuf,
    /// Hex SHA-256 of the archive.
    pub sha256: String,
    /// The bundle's private key (OpenSSH format), as shipped in `id_ecdsa_crc`.
    pub private_key: String,
    pub version: String,
    /// Hex SHA-256 of the raw disk inside (what `qemu-img convert` to raw yields).
    pub raw_disk_sha256: String,
}

/// Options of a bundle build.
#[derive(Clone, Debug)]
pub struct BundleSpec {
    pub version: String,
    pub arch: String,
    /// Virtual size of the disk (sparse; only the state header is allocated).
    pub disk_virtual_size: u64,
    pub flaw: Flaw,
}

impl BundleSpec {
    pub fn new(version: &str) -> Self {
        Self {
            version: version.to_owned(),
            arch: "amd64".to_owned(),
            disk_virtual_size: 256 << 20,
            flaw: Flaw::None,
        }
    }

    pub fn with_flaw(mut self, flaw: Flaw) -> Self {
        self.flaw = flaw;
        self
    }

    /// `crc_libvirt_<version>_<arch>`, the archive's top-level directory.
    pub fn base_name(&self) -> String {
        format!("crc_libvirt_{}_{}", self.version, self.arch)
    }
}

/// Builds the bundle into `dir` (created).
pub fn build(dir: &Path, spec: &BundleSpec) -> Result<Bundle, Error> {
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { path, source }
    };
    std::fs::create_dir_all(dir).map_err(io(dir))?;
    let work = dir.join(format!(".{}-work", spec.base_name()));
    std::fs::create_dir_all(&work).map_err(io(&work))?;

    let key = keys::generate_ecdsa_p256()?;
    let private_key = keys::to_openssh(&key)?;
    let authorized = keys::authorized_key_line(key.public_key(), "crc-bundle")?;
    let state = GuestState::sealed_crc(&spec.version, &authorized);

    let raw = work.join("crc.raw");
    disk::create_disk(&raw, spec.disk_virtual_size, Some(&state))?;
    let raw_disk_sha256 = sha256_file(&raw).map_err(io(&raw))?;
    let qcow2 = work.join("crc.qcow2");
    qemu_img(&["convert", "-f", "raw", "-O", "qcow2"], &raw, &qcow2)?;

    let info = bundle_info(spec);
    let base = spec.base_name();
    let mut members: Vec<(String, Member)> = vec![
        (format!("{base}/crc.qcow2"), Member::File(qcow2.clone())),
        (
            format!("{base}/id_ecdsa_crc"),
            Member::Bytes(private_key.clone().into_bytes()),
        ),
        (
            format!("{base}/crc-bundle-info.json"),
            Member::Bytes(info.into_bytes()),
        ),
    ];
    match spec.flaw {
        Flaw::MissingMember(name) => {
            members.retain(|(path, _)| !path.ends_with(&format!("/{name}")))
        }
        Flaw::PathTraversal => members.push((
            format!("{base}/../escape"),
            Member::Bytes(b"outside".to_vec()),
        )),
        Flaw::Symlink => members.push((
            format!("{base}/link"),
            Member::Symlink("/etc/passwd".into()),
        )),
        _ => {}
    }

    let file_name = format!("{base}.crcbundle");
    let archive = dir.join(&file_name);
    let tar = write_tar(&members).map_err(io(&archive))?;
    let compressed = ruzstd::encoding::compress_to_vec(
        tar.as_slice(),
        ruzstd::encoding::CompressionLevel::Fastest,
    );
    std::fs::write(&archive, compressed).map_err(io(&archive))?;
    let sha256 = sha256_file(&archive).map_err(io(&archive))?;

    let listed = match spec.flaw {
        Flaw::WrongChecksum => format!("{}  {file_name}\n", "0".repeat(64)),
        Flaw::UnlistedInChecksums => String::new(),
        _ => format!("{sha256}  {file_name}\n"),
    };
    let sha256sum_txt = dir.join("sha256sum.txt");
    let other = format!(
        "{}  crc_vfkit_{}_arm64.crcbundle\n",
        "1".repeat(64),
        spec.version
    );
    std::fs::write(&sha256sum_txt, format!("{other}{listed}")).map_err(io(&sha256sum_txt))?;
    // The bare disk too: what the manual path (`template.releaseImage`) imports.
    let bare_qcow2 = dir.join(format!("{base}.qcow2"));
    std::fs::rename(&qcow2, &bare_qcow2).map_err(io(&bare_qcow2))?;
    std::fs::remove_dir_all(&work).map_err(io(&work))?;

    Ok(Bundle {
        file_name,
        archive,
        qcow2: bare_qcow2,
        sha256sum_txt,
        sha256,
        private_key,
        version: spec.version.clone(),
        raw_disk_sha256,
    })
}

enum Member {
    File(PathBuf),
    Bytes(Vec<u8>),
    Symlink(String),
}

fn write_tar(members: &[(String, Member)]) -> std::io::Result<Vec<u8>> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, member) in members {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        header.set_mtime(0);
        match member {
            Member::File(file) => {
                let data = std::fs::read(file)?;
                header.set_size(data.len() as u64);
                header.set_entry_type(tar::EntryType::Regular);
                append_raw(&mut builder, &mut header, path, &data)?;
            }
            Member::Bytes(data) => {
                header.set_size(data.len() as u64);
                header.set_entry_type(tar::EntryType::Regular);
                append_raw(&mut builder, &mut header, path, data)?;
            }
            Member::Symlink(target) => {
                header.set_size(0);
                header.set_entry_type(tar::EntryType::Symlink);
                header.set_link_name(target)?;
                append_raw(&mut builder, &mut header, path, &[])?;
            }
        }
    }
    builder.into_inner()
}

/// Appends without the tar crate's path sanitising, so flawed archives can hold `..` paths.
fn append_raw(
    builder: &mut tar::Builder<Vec<u8>>,
    header: &mut tar::Header,
    path: &str,
    data: &[u8],
) -> std::io::Result<()> {
    let name = path.as_bytes();
    let gnu = header
        .as_gnu_mut()
        .ok_or_else(|| std::io::Error::other("not a GNU header"))?;
    if name.len() > gnu.name.len() {
        return Err(std::io::Error::other(format!(
            "member name too long: {path}"
        )));
    }
    gnu.name = [0; 100];
    gnu.name[..name.len()].copy_from_slice(name);
    header.set_cksum();
    builder.append(header, data)
}

fn bundle_info(spec: &BundleSpec) -> String {
    let cluster_info = match spec.flaw {
        Flaw::NoVersion => serde_json::json!({"clusterName": "crc", "baseDomain": "testing"}),
        _ => serde_json::json!({
            "openshiftVersion": spec.version,
            "clusterName": "crc",
            "baseDomain": "testing",
            "appsDomain": "apps-crc.testing",
        }),
    };
    serde_json::json!({
        "version": "1.4",
        "type": "snc",
        "name": spec.base_name(),
        "buildInfo": {"buildTime": "2026-11-01T00:00:00Z", "openshiftInstallerVersion": spec.version},
        "clusterInfo": cluster_info,
        "nodes": [{"kind": ["master", "worker"], "hostname": "crc", "diskImage": "crc.qcow2", "internalIP": "192.168.126.11"}],
        "storage": {"diskImages": [{"name": "crc.qcow2", "format": "qcow2"}]},
        "driverInfo": {"name": "libvirt"}
    })
    .to_string()
}

fn qemu_img(args: &[&str], from: &Path, to: &Path) -> Result<(), Error> {
    let output = Command::new("qemu-img")
        .args(args)
        .arg(from)
        .arg(to)
        .output()
        .map_err(|e| Error::QemuImg(e.to_string()))?;
    if !output.status.success() {
        return Err(Error::QemuImg(
            String::from_utf8_lossy(&output.stderr).into_owned(),
        ));
    }
    Ok(())
}

/// Hex SHA-256 of a file.
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut HashWriter(&mut hasher))?;
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

struct HashWriter<'a>(&'a mut Sha256);

impl std::io::Write for HashWriter<'_> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.update(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
