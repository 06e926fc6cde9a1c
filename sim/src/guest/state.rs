//! The guest-state model: what an RHCOS/CRC guest's disk holds, as far as the operator can
//! observe it over SSH. It is serialized into the disk image itself (see [`super::disk`]), so
//! whatever copies the disk — a CDI clone, `qemu-img convert`, the publish Job — copies the guest.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::{Deserialize, Serialize};

/// Version of this model inside the JSON; bumped on incompatible changes.
pub const FORMAT_VERSION: u32 = 1;

/// The node IP SNC pins on the dummy `eth10` and in the kubelet's node-IP drop-in.
pub const NODE_IP: &str = "192.168.126.11";
/// The node name SNC's DHCP lease gives the guest, hard-coded by CRC's units.
pub const NODE_NAME: &str = "crc";

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
/// Where the RHCOS root partition (`vda4`) starts: after BIOS-BOOT (1 MiB at 1 MiB), EFI-SYSTEM
/// (127 MiB) and boot (384 MiB).
pub const ROOT_PARTITION_START: u64 = 513 * MIB;
const DAY: i64 = 86_400;

/// Everything a guest keeps on its disk.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct GuestState {
    /// [`FORMAT_VERSION`].
    pub format: u32,
    /// OpenShift version installed on the disk, `None` for a blank RHCOS or a live ISO.
    pub openshift_version: Option<String>,
    /// Static hostname (`/etc/hostname`, `hostnamectl`).
    pub hostname: String,
    /// Login users by name.
    pub users: BTreeMap<String, User>,
    /// Installed systemd units by full name (`kubelet.service`); absent means "not-found".
    pub units: BTreeMap<String, Unit>,
    /// Regular files by absolute path (resolver and dnsmasq config, the pull secret, kubeconfigs,
    /// drop-ins… are all files).
    pub files: BTreeMap<String, File>,
    /// Directories created explicitly (`mkdir`); parents of files exist implicitly.
    pub directories: BTreeSet<String>,
    /// Kubelet facts not visible as files.
    pub kubelet: KubeletState,
    /// Container images in the CRI-O/podman cache.
    pub image_cache: Vec<String>,
    /// Certificates by the path of their PEM file (`openssl x509 -in PATH` answers from here).
    pub certificates: BTreeMap<String, Certificate>,
    /// Seconds the guest's clock runs ahead (negative: behind) of the VM's RTC, persisted.
    pub clock_adjust_seconds: i64,
    /// Root partition and filesystem sizes (growpart / xfs_growfs).
    pub root: RootDisk,
    /// The sshd host key (OpenSSH private key text), generated on first boot.
    pub ssh_host_key: Option<String>,
    /// Set by sealing: the disk is a golden-disk candidate.
    pub sealed: bool,
    /// Bytes held by the systemd journal (`journalctl --vacuum-*` shrinks it).
    pub journal_bytes: u64,
    /// Bytes freed on the root filesystem but not yet trimmed (`fstrim` zeroes it).
    pub untrimmed_bytes: u64,
    /// Persistent NetworkManager DNS override (`nmcli con modify` without `--temporary`).
    pub nm_dns: Option<NmDns>,
    /// Present on a live ISO (a cdrom image): the embedded Ignition config (JSON).
    pub live_iso: Option<String>,
    /// How many times this disk booted.
    pub boot_count: u64,
    /// Key material of the installed cluster's API (shared by every clone of the disk, like
    /// real CRC); `None` before OpenShift is installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pki: Option<crate::openshift::GuestPki>,
    /// Journal lines by unit (`journalctl -u UNIT`), for units that log something the operator
    /// may need to read (a failed bootstrap).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub journal: BTreeMap<String, Vec<String>>,
    /// Set on a disk that went through the simulated bootstrap-in-place install (not on disks
    /// made directly, like [`Self::sealed_crc`]): what the guest cluster needs to know about it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install: Option<InstallState>,
    /// The install to this disk began and did not finish: the disk does not boot.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub install_incomplete: bool,
    /// The guest cluster's API objects that clients wrote, as its etcd would hold them: whole
    /// objects (`apiVersion`, `kind`, `metadata` with name, namespace, labels, annotations and
    /// finalizers, and every other top-level field but `status`), sorted by
    /// `apiVersion/kind/namespace/name`. Saved when the cluster stops, restored into a cluster
    /// that starts on a new etcd prefix (a copy of the disk); see `openshift::persist`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub api_objects: Vec<serde_json::Value>,
    /// podman's containers by name (`/var/lib/containers` outlives a boot; a running one stops
    /// at power-off). See [`super::exec::containers`].
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub containers: BTreeMap<String, Container>,
    /// The keys in etcd's data directory (`/var/lib/etcd`) of an installed node; values are not
    /// modelled. See [`super::exec::containers`].
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    pub etcd_keys: BTreeSet<String>,
    /// What etcd's data directory holds of values that are no longer current. See
    /// [`EtcdHistory`].
    #[serde(default, skip_serializing_if = "EtcdHistory::is_empty")]
    pub etcd_history: EtcdHistory,
}

/// The values etcd's data directory still holds besides the current objects
/// ([`GuestState::api_objects`]), as etcd's MVCC store and bbolt keep them: every write makes a
/// revision and keeps the value it replaced until a compaction (etcd `mvcc/kvstore.go`); a
/// compaction frees the old values' pages, but their bytes stay in the database file until a
/// defragmentation rewrites it (bbolt reuses free pages, it does not zero them); the replaced
/// file's blocks then hold them on the filesystem until a trim discards its free space.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct EtcdHistory {
    /// The store's revision: one more per write.
    pub revision: u64,
    /// The revision of the last compaction.
    pub compacted: u64,
    /// Replaced values not compacted yet, each with the revision that replaced it.
    pub revisions: Vec<Replaced>,
    /// Compacted values still in the database file's free pages.
    pub free_pages: Vec<serde_json::Value>,
    /// Values in the blocks of a database file a defragmentation replaced, until a trim.
    pub released: Vec<serde_json::Value>,
}

/// A value a write replaced (or deleted), as etcd keeps it for reads at older revisions.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Replaced {
    pub replaced_at: u64,
    pub value: serde_json::Value,
}

impl EtcdHistory {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// Bytes a value takes in the database (its JSON, as custom resources are stored).
    pub fn size(values: &[serde_json::Value]) -> u64 {
        values.iter().map(|v| v.to_string().len() as u64).sum()
    }
}

/// A podman container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    pub image: String,
    /// Running now (only the throwaway etcd runs; `podman create` leaves a container stopped).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub running: bool,
    /// `podman run --rm`: removed when it stops.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub remove_on_stop: bool,
}

/// What an installed cluster's disk records about its install and its certificate signers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InstallState {
    /// The installer's stamp: `notBefore` of the certificates it minted (its caller's clock).
    pub stamp: i64,
    /// The cluster's CSR signer now: the installer's `kubelet-signer` until the kube-controller-
    /// manager operator makes a new one (after its signer Secrets are deleted).
    pub csr_signer: Certificate,
    /// The signer Secrets were created in the guest API (a missing one was deleted since).
    #[serde(default)]
    pub signer_secrets_created: bool,
    /// Guest time the cluster first reported Available; `None` while installing.
    #[serde(default)]
    pub completed_at: Option<i64>,
    /// The release image installed (the cluster-version operator's pod runs it).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub release_image: String,
}

impl Default for GuestState {
    fn default() -> Self {
        Self {
            format: FORMAT_VERSION,
            openshift_version: None,
            hostname: "localhost".to_string(),
            users: BTreeMap::new(),
            units: BTreeMap::new(),
            files: BTreeMap::new(),
            directories: BTreeSet::new(),
            kubelet: KubeletState::default(),
            image_cache: Vec::new(),
            certificates: BTreeMap::new(),
            clock_adjust_seconds: 0,
            root: RootDisk::default(),
            ssh_host_key: None,
            sealed: false,
            journal_bytes: 0,
            untrimmed_bytes: 0,
            nm_dns: None,
            live_iso: None,
            boot_count: 0,
            pki: None,
            journal: BTreeMap::new(),
            install: None,
            install_incomplete: false,
            api_objects: Vec::new(),
            containers: BTreeMap::new(),
            etcd_keys: BTreeSet::new(),
            etcd_history: EtcdHistory::default(),
        }
    }
}

/// A login user.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct User {
    pub uid: u32,
    /// `crypt(3)` hash, `None` for a locked password (RHCOS `core`).
    pub password_hash: Option<String>,
    /// Passwordless sudo (RHCOS `core` has it).
    pub sudo: bool,
}

impl User {
    /// The user's home directory.
    pub fn home(name: &str) -> String {
        if name == "root" {
            "/root".to_string()
        } else {
            format!("/home/{name}")
        }
    }

    /// Where Ignition (and the MachineConfig daemon) keep a user's keys on RHCOS:
    /// `~/.ssh/authorized_keys.d/ignition`. sshd reads every file of that directory besides
    /// `~/.ssh/authorized_keys`.
    pub fn provisioned_keys_path(name: &str) -> String {
        format!("{}/.ssh/authorized_keys.d/ignition", Self::home(name))
    }
}

/// One installed systemd unit.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Unit {
    pub enabled: bool,
    /// Running now; recomputed at every boot from `enabled && !masked`.
    pub active: bool,
    pub masked: bool,
    /// Its last run failed (`systemctl is-active` says `failed`); cleared when it starts again.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub failed: bool,
    /// How often `systemctl` started it (a restart counts): what a process watching it sees
    /// of a restart too quick to observe it down.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub starts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Unit {
    pub fn enabled_running() -> Self {
        Self {
            enabled: true,
            active: true,
            masked: false,
            failed: false,
            starts: 0,
        }
    }

    pub fn disabled() -> Self {
        Self::default()
    }
}

/// A regular file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct File {
    pub content: Content,
    /// Permission bits, e.g. `0o644`.
    pub mode: u32,
    pub owner: String,
}

impl File {
    pub fn new(content: impl Into<Vec<u8>>, mode: u32, owner: &str) -> Self {
        Self {
            content: Content(content.into()),
            mode,
            owner: owner.to_string(),
        }
    }

    pub fn root(content: impl Into<Vec<u8>>, mode: u32) -> Self {
        Self::new(content, mode, "root")
    }
}

/// File bytes, stored as `{"text": …}` when UTF-8 (readable in the JSON) and `{"base64": …}`
/// otherwise.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Content(pub Vec<u8>);

#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
enum ContentRepr {
    Text(String),
    Base64(String),
}

impl Serialize for Content {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match std::str::from_utf8(&self.0) {
            Ok(text) => ContentRepr::Text(text.to_string()),
            Err(_) => ContentRepr::Base64(BASE64.encode(&self.0)),
        }
        .serialize(serializer)
    }
}

impl<'de> Deserialize<'de> for Content {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        match ContentRepr::deserialize(deserializer)? {
            ContentRepr::Text(text) => Ok(Content(text.into_bytes())),
            ContentRepr::Base64(text) => guestcluster::guest::decode_base64(text)
                .map(Content)
                .map_err(serde::de::Error::custom),
        }
    }
}

/// Kubelet facts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct KubeletState {
    pub node_name: String,
    pub node_ip: String,
}

impl Default for KubeletState {
    fn default() -> Self {
        Self {
            node_name: NODE_NAME.to_string(),
            node_ip: NODE_IP.to_string(),
        }
    }
}

/// A certificate's validity, as `openssl x509` reports it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Certificate {
    /// Unix seconds.
    pub not_before: i64,
    /// Unix seconds.
    pub not_after: i64,
    pub issuer: String,
    pub subject: String,
}

/// The root partition (`/dev/vda4`, partlabel `root`, XFS mounted at `/sysroot`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct RootDisk {
    pub partition_start: u64,
    pub partition_bytes: u64,
    pub filesystem_bytes: u64,
}

impl Default for RootDisk {
    fn default() -> Self {
        // An RHCOS image as shipped: a ~16 GiB disk whose root fills it.
        let bytes = 16 * GIB - ROOT_PARTITION_START - MIB;
        Self {
            partition_start: ROOT_PARTITION_START,
            partition_bytes: bytes,
            filesystem_bytes: bytes,
        }
    }
}

impl RootDisk {
    /// Partition and filesystem filling a disk of `disk_bytes` (what a finished install or a
    /// grown root looks like).
    pub fn filling(disk_bytes: u64) -> Self {
        let bytes = usable_end(disk_bytes).saturating_sub(ROOT_PARTITION_START);
        Self {
            partition_start: ROOT_PARTITION_START,
            partition_bytes: bytes,
            filesystem_bytes: bytes,
        }
    }

    pub fn partition_end(&self) -> u64 {
        self.partition_start + self.partition_bytes
    }
}

/// Last byte a partition may use on a GPT disk of `disk_bytes`: 1 MiB alignment, with room for
/// the backup GPT at the end.
pub fn usable_end(disk_bytes: u64) -> u64 {
    (disk_bytes / MIB).saturating_sub(1) * MIB
}

/// A NetworkManager DNS override on the OVN bridge connection (`ovs-if-br-ex`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NmDns {
    pub servers: Vec<String>,
    pub search: Vec<String>,
}

/// Well-known guest paths.
pub mod paths {
    pub const PULL_SECRET: &str = "/var/lib/kubelet/config.json";
    pub const KUBECONFIG: &str = "/opt/kubeconfig";
    pub const KUBELET_CLIENT_CERT: &str = "/var/lib/kubelet/pki/kubelet-client-current.pem";
    pub const KUBELET_SERVER_CERT: &str = "/var/lib/kubelet/pki/kubelet-server-current.pem";
    pub const DNSMASQ_DIR: &str = "/etc/dnsmasq.d";
    pub const DNSMASQ_CONF: &str = "/etc/dnsmasq.conf";
    pub const RESOLV_CONF: &str = "/etc/resolv.conf";
    pub const HOSTS: &str = "/etc/hosts";
    pub const NODE_IP_DROPIN: &str = "/etc/systemd/system/kubelet.service.d/80-nodeip.conf";
    /// The kubelet's bootstrap kubeconfig (the cred-manager keeps a working one here).
    pub const BOOTSTRAP_KUBECONFIG: &str = "/etc/kubernetes/kubeconfig";
    /// Simulation-specific: the client certificate of the installer's bootstrap kubeconfig, as
    /// its own certificate path (gone once the cred-manager replaced the kubeconfig).
    pub const KUBELET_BOOTSTRAP_CERT: &str = "/etc/kubernetes/kubelet-bootstrap-client.crt";
    /// Where an installed node keeps its static pods' certificates, which the cluster's
    /// operators rotate (cluster-kube-apiserver-operator's installer writes
    /// `<component>-certs/secrets/<secret>/tls.crt` and `…/configmaps/<configmap>/ca-bundle.crt`;
    /// `/etc/kubernetes/static-pod-certs` is only the in-container mount of that directory).
    pub const STATIC_POD_RESOURCES: &str = "/etc/kubernetes/static-pod-resources";
    /// The API server's aggregator client certificate, one of the three `crc start` checks.
    pub const AGGREGATOR_CLIENT_CERT: &str = "/etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/aggregator-client/tls.crt";
    /// The node's own kubeconfig for its API server: cluster-kube-apiserver-operator's
    /// `node-kubeconfigs` Secret, installed with the API server's other resources.
    pub const NODE_LOCALHOST_KUBECONFIG: &str = "/etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/node-kubeconfigs/localhost.kubeconfig";
}

impl GuestState {
    /// The kubelet's pull secret on disk, if any.
    pub fn pull_secret(&self) -> Option<&[u8]> {
        self.files
            .get(paths::PULL_SECRET)
            .map(|f| f.content.0.as_slice())
    }

    /// Adds `key` to the user's provisioned keys ([`User::provisioned_keys_path`], `0600`,
    /// owned by the user), as Ignition does; a key already there is not added twice.
    pub fn provision_key(&mut self, user: &str, key: &str) {
        let key = key.trim();
        let path = User::provisioned_keys_path(user);
        let mut dir = String::new();
        for part in parent_dir(&path).split('/').filter(|p| !p.is_empty()) {
            dir = format!("{dir}/{part}");
            self.directories.insert(dir.clone());
        }
        let file = self
            .files
            .entry(path)
            .or_insert_with(|| File::new(Vec::new(), 0o600, user));
        let text = String::from_utf8_lossy(&file.content.0).into_owned();
        if !text.lines().any(|l| l.trim() == key) {
            file.content
                .0
                .extend_from_slice(format!("{key}\n").as_bytes());
        }
    }

    /// The lines of the user's provisioned keys file (none when it is gone).
    pub fn provisioned_keys(&self, user: &str) -> Vec<String> {
        self.file(&User::provisioned_keys_path(user))
            .map(|b| {
                String::from_utf8_lossy(b)
                    .lines()
                    .filter(|l| !l.trim().is_empty())
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default()
    }

    /// A file's bytes.
    pub fn file(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(|f| f.content.0.as_slice())
    }

    /// Adds or replaces a unit.
    pub fn set_unit(&mut self, name: &str, unit: Unit) {
        self.units.insert(name.to_string(), unit);
    }

    /// Adds a certificate and a placeholder PEM file at `path`.
    pub fn add_certificate(&mut self, path: &str, certificate: Certificate) {
        let pem = format!(
            "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
            BASE64.encode(format!("simulated certificate {}", certificate.subject).as_bytes())
        );
        self.files.insert(path.to_string(), File::root(pem, 0o600));
        self.certificates.insert(path.to_string(), certificate);
    }

    /// A plain RHCOS system: user `core` (passwordless sudo) with `authorized_key`, the units
    /// every RHCOS node has, NetworkManager-managed resolver, dnsmasq installed but unconfigured.
    pub fn rhcos(authorized_key: &str) -> Self {
        let mut state = Self::rhcos_without_users();
        state.hostname = NODE_NAME.to_string();
        state.users.insert(
            "core".to_string(),
            User {
                uid: 1000,
                password_hash: None,
                sudo: true,
            },
        );
        state.provision_key("core", authorized_key);
        state
    }

    /// The system part of [`Self::rhcos`]; users come from Ignition.
    pub fn rhcos_without_users() -> Self {
        let mut state = GuestState {
            journal_bytes: 4 * MIB,
            ..Default::default()
        };
        for unit in [
            "sshd.service",
            "NetworkManager.service",
            "chronyd.service",
            "crio.service",
            "systemd-journald.service",
        ] {
            state.set_unit(unit, Unit::enabled_running());
        }
        state.set_unit("dnsmasq.service", Unit::disabled());
        state.files.insert(
            "/etc/os-release".to_string(),
            File::root(
                "NAME=\"Red Hat Enterprise Linux CoreOS\"\nID=\"rhcos\"\nVARIANT_ID=coreos\n",
                0o644,
            ),
        );
        state.files.insert(
            paths::DNSMASQ_CONF.to_string(),
            File::root(
                "# dnsmasq default configuration\nconf-dir=/etc/dnsmasq.d\n",
                0o644,
            ),
        );
        state.directories.insert(paths::DNSMASQ_DIR.to_string());
        state.files.insert(
            paths::HOSTS.to_string(),
            File::root(
                "127.0.0.1   localhost localhost.localdomain\n::1         localhost localhost.localdomain\n",
                0o644,
            ),
        );
        state
    }

    /// What an SNC-sealed CRC disk carries, with certificates issued now.
    pub fn sealed_crc(version: &str, authorized_key: &str) -> Self {
        Self::sealed_crc_at(version, authorized_key, super::time::host_now())
    }

    /// What an SNC-sealed CRC disk carries (snc-reference §3, §5), with certificates issued at
    /// `reference` (unix seconds):
    /// - kubelet disabled and stopped; CRI-O, NetworkManager, chronyd (mask removed), sshd,
    ///   `ovs-configuration` (OVN-Kubernetes) enabled; dnsmasq installed, disabled, and
    ///   unconfigured (no `/etc/dnsmasq.d/crc-dnsmasq.conf`);
    /// - no pull secret: `/var/lib/kubelet/config.json` is `{}`;
    /// - `/opt/kubeconfig` with one cluster (`https://api-int.crc.testing:6443`) and its CA;
    /// - the kubelet node-IP drop-in (`KUBELET_NODE_IP=192.168.126.11`);
    /// - kubelet client and serving certificates valid 30 days from `reference`;
    /// - user `core` with the bundle key; an image cache; a vacuumed journal; `sealed` set.
    pub fn sealed_crc_at(version: &str, authorized_key: &str, reference: i64) -> Self {
        let mut state = Self::rhcos(authorized_key);
        state.openshift_version = Some(version.to_string());
        state.sealed = true;
        state.journal_bytes = 0;
        state.set_unit("kubelet.service", Unit::disabled());
        for unit in ["ovs-configuration.service", "podman.socket"] {
            state.set_unit(unit, Unit::enabled_running());
        }
        state
            .files
            .insert(paths::PULL_SECRET.to_string(), File::root("{}", 0o600));
        // Generating P-256 keys cannot fail with rcgen's ring backend; a broken PKI would show
        // up as an unreachable guest API, not silently.
        let pki = crate::openshift::GuestPki::generate(reference, 30).ok();
        if let Some(pki) = &pki {
            state.files.insert(
                paths::KUBECONFIG.to_string(),
                File::root(sealed_kubeconfig(pki), 0o600),
            );
            add_localhost_kubeconfig(&mut state, pki);
        }
        state.pki = pki;
        state.files.insert(
            paths::NODE_IP_DROPIN.to_string(),
            File::root(
                format!("[Service]\nEnvironment=\"KUBELET_NODE_IP={NODE_IP}\"\n"),
                0o644,
            ),
        );
        state.files.insert(
            "/etc/sysconfig/crc-env".to_string(),
            File::root("CRC_SELF_SUFFICIENT=0\n", 0o644),
        );
        // Issued by the disk's CSR signer, whose key the disk's cluster carries.
        let signer = state
            .pki
            .as_ref()
            .and_then(|p| p.csr_signer.as_ref())
            .map_or_else(
                || format!("CN=kube-csr-signer_@{}", reference - DAY),
                |s| format!("CN={}", s.cn),
            );
        for (path, subject) in [
            (
                paths::KUBELET_CLIENT_CERT,
                format!("O=system:nodes, CN=system:node:{NODE_NAME}"),
            ),
            (
                paths::KUBELET_SERVER_CERT,
                format!("O=system:nodes, CN=system:node:{NODE_NAME}"),
            ),
        ] {
            state.add_certificate(
                path,
                Certificate {
                    not_before: reference,
                    not_after: reference + 30 * DAY,
                    issuer: signer.clone(),
                    subject,
                },
            );
        }
        state.image_cache = vec![
            format!("quay.io/openshift-release-dev/ocp-release:{version}-x86_64"),
            "quay.io/crcont/routes-controller:latest".to_string(),
        ];
        state
    }

    /// A live ISO (cdrom image) carrying `ignition` (JSON): boots the live environment.
    pub fn live_iso(ignition: &str) -> Self {
        GuestState {
            hostname: "localhost".to_string(),
            live_iso: Some(ignition.to_string()),
            ..Default::default()
        }
    }

    /// The system a live ISO boots into: RHCOS with the ISO's Ignition applied (its users and
    /// keys, files, units). Returns Ignition warnings (skipped parts) alongside.
    pub fn live_environment(
        iso: &GuestState,
    ) -> Result<(Self, Vec<String>), super::ignition::IgnitionError> {
        let mut state = Self::rhcos_without_users();
        state.hostname = "localhost".to_string();
        state.live_iso = iso.live_iso.clone();
        let warnings = match &iso.live_iso {
            Some(config) => super::ignition::apply(&mut state, config)?,
            None => Vec::new(),
        };
        Ok((state, warnings))
    }
}

/// `/opt/kubeconfig` of a sealed disk: the installer's admin kubeconfig (one cluster, CA data,
/// a client certificate), as SNC copies it in.
/// `/opt/kubeconfig` of a sealed disk: the API's CA and the `system:admin` client certificate.
/// `localhost.kubeconfig` of the `node-kubeconfigs` Secret (cluster-kube-apiserver-operator
/// `pkg/operator/nodekubeconfigcontroller`): `https://localhost:6443` as `system:admin` with a
/// certificate of the node-system-admin signer, which the API server trusts apart from the
/// admin kubeconfig's CA (so replacing that CA leaves it working). `None` if a key cannot be
/// made, which leaves the node without the file rather than with a broken one.
pub fn localhost_kubeconfig(pki: &crate::openshift::GuestPki) -> Option<String> {
    let (cert, key) = pki.client_cert("system:admin", "system:masters").ok()?;
    let ca = BASE64.encode(pki.server_ca_cert.as_bytes());
    let (cert, key) = (
        BASE64.encode(cert.as_bytes()),
        BASE64.encode(key.as_bytes()),
    );
    Some(format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://localhost:6443\n  name: localhost\ncontexts:\n- context:\n    cluster: localhost\n    user: system:admin\n  name: system:admin\ncurrent-context: system:admin\nusers:\n- name: system:admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n"
    ))
}

/// Writes the node's [`localhost_kubeconfig`] (root, `0600`).
pub fn add_localhost_kubeconfig(state: &mut GuestState, pki: &crate::openshift::GuestPki) {
    if let Some(text) = localhost_kubeconfig(pki) {
        state.files.insert(
            paths::NODE_LOCALHOST_KUBECONFIG.to_string(),
            File::root(text, 0o600),
        );
    }
}

fn sealed_kubeconfig(pki: &crate::openshift::GuestPki) -> String {
    let ca = BASE64.encode(pki.server_ca_cert.as_bytes());
    let cert = BASE64.encode(pki.admin_cert.as_bytes());
    let key = BASE64.encode(pki.admin_key.as_bytes());
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- cluster:\n    certificate-authority-data: {ca}\n    server: https://api-int.crc.testing:6443\n  name: crc\ncontexts:\n- context:\n    cluster: crc\n    user: admin\n  name: admin\ncurrent-context: admin\nusers:\n- name: admin\n  user:\n    client-certificate-data: {cert}\n    client-key-data: {key}\n"
    )
}

/// The directory part of an absolute path (`/` for a top-level entry).
fn parent_dir(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_serializes_text_or_base64() {
        let text = serde_json::to_value(Content(b"hello".to_vec())).unwrap();
        assert_eq!(text, serde_json::json!({"text": "hello"}));
        let binary = serde_json::to_value(Content(vec![0xff, 0x00])).unwrap();
        assert_eq!(binary, serde_json::json!({"base64": "/wA="}));
        let back: Content = serde_json::from_value(binary).unwrap();
        assert_eq!(back.0, vec![0xff, 0x00]);
    }

    #[test]
    fn sealed_crc_has_what_the_agent_checks() {
        let state = GuestState::sealed_crc_at("4.22.1", "ssh-ed25519 AAAA core", 1_000_000);
        assert!(state.sealed);
        assert_eq!(state.openshift_version.as_deref(), Some("4.22.1"));
        assert_eq!(state.pull_secret(), Some(&b"{}"[..]));
        assert!(state.file(paths::KUBECONFIG).is_some());
        let kubelet = &state.units["kubelet.service"];
        assert!(!kubelet.enabled && !kubelet.active);
        let dnsmasq = &state.units["dnsmasq.service"];
        assert!(!dnsmasq.enabled);
        assert!(!state.files.keys().any(|p| p.starts_with("/etc/dnsmasq.d/")));
        assert_eq!(
            state.provisioned_keys("core"),
            vec!["ssh-ed25519 AAAA core"]
        );
        let cert = &state.certificates[paths::KUBELET_CLIENT_CERT];
        assert_eq!(cert.not_after - cert.not_before, 30 * DAY);
        assert!(state.files.contains_key(paths::KUBELET_CLIENT_CERT));
    }

    #[test]
    fn state_round_trips_through_json() {
        let state = GuestState::sealed_crc_at("4.22.1", "ssh-ed25519 AAAA core", 1_000_000);
        let json = serde_json::to_vec(&state).unwrap();
        let back: GuestState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, state);
    }

    #[test]
    fn api_objects_are_left_out_when_empty_and_round_trip_when_not() {
        let state = GuestState::sealed_crc_at("4.22.1", "ssh-ed25519 AAAA core", 1_000_000);
        let json = serde_json::to_value(&state).unwrap();
        assert!(
            json.get("apiObjects").is_none(),
            "disks without objects read as before"
        );
        let carrying = GuestState {
            api_objects: vec![serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "a", "namespace": "b"}, "data": {"k": "v"}})],
            ..state
        };
        let json = serde_json::to_vec(&carrying).unwrap();
        let back: GuestState = serde_json::from_slice(&json).unwrap();
        assert_eq!(back, carrying);
    }

    #[test]
    fn root_filling_leaves_room_for_the_backup_gpt() {
        let root = RootDisk::filling(64 * GIB);
        assert_eq!(root.partition_end(), 64 * GIB - MIB);
        assert_eq!(root.filesystem_bytes, root.partition_bytes);
    }
}
