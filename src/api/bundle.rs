//! `CRCBundle`: a golden CRC disk in the operator namespace, either downloaded from a published
//! `.crcbundle` (`spec.version`) or built in the cluster from an OpenShift release image
//! (`spec.build`).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Affinity, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Arch, LocalRef, ObjectIdentity};

/// Default size of the golden PVC (upstream default).
pub const DEFAULT_GOLDEN_VOLUME_SIZE: &str = "35Gi";

/// Desired state of a CRCBundle. Set exactly one source: `version` (download) or `build`.
#[derive(CustomResource, KubeSchema, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[kube(
    group = "guestcluster.opdev.io",
    version = "v1alpha1",
    kind = "CRCBundle",
    plural = "crcbundles",
    shortname = "crcb",
    status = "CRCBundleStatus",
    doc = "CRCBundle is a golden OpenShift Local (CRC) disk that ClusterInstances clone. It is either downloaded from a published .crcbundle (spec.version) or built in the cluster from an OpenShift release image (spec.build).",
    // Upstream's columns first, in upstream's order (scripts read them by position); ours after.
    printcolumn(name = "Version", type_ = "string", json_path = ".spec.version"),
    printcolumn(name = "Arch", type_ = "string", json_path = ".spec.arch"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "OCPVersion",
        type_ = "string",
        json_path = ".status.ocpVersion"
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    printcolumn(name = "Source", type_ = "string", json_path = ".status.source"),
    printcolumn(name = "Stage", type_ = "string", json_path = ".status.build.stage"),
    printcolumn(
        name = "Disk SHA256",
        type_ = "string",
        json_path = ".status.diskSHA256Short"
    )
)]
#[x_kube(
    validation = Rule::new("has(self.version) != has(self.build)")
        .message("set exactly one source: spec.version (download a published CRC bundle) or spec.build (build one from an OpenShift release image)"),
    validation = Rule::new("(has(self.allowHTTP) && self.allowHTTP) || ((!has(self.bundleURL) || !self.bundleURL.lowerAscii().startsWith('http://')) && (!has(self.sha256URL) || !self.sha256URL.lowerAscii().startsWith('http://')))")
        .message("spec.bundleURL and spec.sha256URL must be https: a plain-http download can be altered on the way (the checksum comes over the same channel); set spec.allowHTTP: true to accept that, e.g. for a mirror inside the cluster"),
    validation = Rule::new("!has(self.build) || (!has(self.bundleURL) && !has(self.sha256URL))")
        .message("spec.bundleURL and spec.sha256URL only apply to the download source (spec.version); remove them from a bundle with spec.build"),
    validation = Rule::new("!has(self.build) || !isQuantity(self.goldenVolumeSize) || !isQuantity(self.build.vm.diskSize) || quantity(self.goldenVolumeSize).compareTo(quantity(self.build.vm.diskSize)) >= 0")
        .message("spec.goldenVolumeSize must be at least spec.build.vm.diskSize (default 64Gi), so the built disk fits the golden volume"),
    validation = Rule::new("has(self.build) == has(oldSelf.build)")
        .message("the source of a CRCBundle cannot change after creation (spec.build cannot be added or removed); create a new CRCBundle instead"),
    validation = Rule::new("!has(self.build) || (self.arch == oldSelf.arch && self.goldenVolumeSize == oldSelf.goldenVolumeSize && (has(self.storageClassName) ? has(oldSelf.storageClassName) && self.storageClassName == oldSelf.storageClassName : !has(oldSelf.storageClassName)))")
        .message("spec.arch, spec.storageClassName and spec.goldenVolumeSize of a built CRCBundle are immutable; create a new CRCBundle to change the recipe")
)]
#[serde(rename_all = "camelCase")]
pub struct CRCBundleSpec {
    /// Download source: the CRC (OpenShift Local) bundle version to download, e.g. `4.16.0`.
    /// Mutually exclusive with `build`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1))]
    pub version: Option<String>,

    /// CPU architecture of the bundle.
    #[serde(default)]
    pub arch: Arch,

    /// Download source only: URL of the `.crcbundle` archive, overriding the default mirror URL
    /// `https://mirror.openshift.com/pub/openshift-v4/clients/crc/bundles/openshift/<version>/crc_libvirt_<version>_<arch>.crcbundle`.
    /// The archive's top-level directory must equal the file name without `.crcbundle`.
    #[serde(default, rename = "bundleURL", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub bundle_url: Option<String>,

    /// Download source only: URL of the `sha256sum.txt` file that lists the archive's file name
    /// with its SHA-256, overriding the default next to the default bundle URL.
    #[serde(default, rename = "sha256URL", skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2048))]
    pub sha256_url: Option<String>,

    /// Download source only: accept `http://` in `bundleURL` and `sha256URL`. Off by default: the
    /// archive and its checksum would come over one unauthenticated channel. A redirect from
    /// https to http is refused either way.
    #[serde(
        default,
        rename = "allowHTTP",
        skip_serializing_if = "std::ops::Not::not"
    )]
    pub allow_http: bool,

    /// StorageClass of the golden PVC (and of the temporary volumes that produce it). Empty
    /// means the cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,

    /// Size of the golden PVC, a Kubernetes quantity. For built bundles it must be at least
    /// `build.vm.diskSize`.
    #[serde(default = "default_golden_volume_size")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("goldenVolumeSize must be a Kubernetes quantity such as 35Gi"))]
    pub golden_volume_size: String,

    /// Build source: build the golden disk in the cluster from an OpenShift release image, with
    /// KubeVirt VMs and Jobs. Mutually exclusive with `version`. Immutable: a changed recipe
    /// means a new CRCBundle; retry a failed build of the same recipe with the annotation
    /// `guestcluster.opdev.io/retry`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.build is immutable; create a new CRCBundle to change the recipe, or set the annotation guestcluster.opdev.io/retry to retry this one"))]
    pub build: Option<BuildSpec>,
}

fn default_golden_volume_size() -> String {
    DEFAULT_GOLDEN_VOLUME_SIZE.to_owned()
}

/// How to build a CRC golden disk from an OpenShift release image.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildSpec {
    /// OpenShift release image pull spec, e.g. `quay.io/openshift-release-dev/ocp-release@sha256:…`.
    /// A tag is resolved to a digest once, when the build starts (see `status.release`). Its
    /// repository must be one the operator builds from (`--build-release-repositories`; by
    /// default the OpenShift release repositories): a release is code the build runs.
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([a-z0-9.-]*[a-z0-9])?(:[0-9]+)?(/[a-z0-9]+([._-]+[a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9._-]{0,127})?(@sha256:[a-f0-9]{64})?$')").message("releaseImage must be a pull spec such as quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64 or quay.io/openshift-release-dev/ocp-release@sha256:<64 hex digits>"))]
    pub release_image: String,

    /// Secret in the operator namespace with a `.dockerconfigjson` key that can pull the release
    /// image and its payload, labelled `guestcluster.opdev.io/build-input` with this bundle's name
    /// or `all` (an unlabelled Secret is no build's input). Its contents never appear in status,
    /// events, logs or the disk.
    #[x_kube(validation = Rule::new("self.name != ''").message("build.pullSecretRef.name must name a Secret in the operator namespace"))]
    pub pull_secret_ref: LocalRef,

    /// The versioned, code-defined build recipe: VM shape, install-config, CRC manifests and guest
    /// steps.
    #[serde(default)]
    pub profile: BuildProfile,

    /// ConfigMaps (or Secrets) in the operator namespace whose data keys are YAML manifests added
    /// to the installation (for example MachineConfigs). A key may hold several documents. Each
    /// must carry the label `guestcluster.opdev.io/build-input` with this bundle's name or `all`;
    /// at most 16, each once, and the manifests of both lists together at most 512 KiB.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(r, self.exists_one(o, o.name == r.name && o.kind == r.kind))").message("installationManifestRefs names an object twice; list each ConfigMap or Secret once"))]
    pub installation_manifest_refs: Vec<ManifestRef>,

    /// ConfigMaps (or Secrets) in the operator namespace whose data keys are YAML manifests applied
    /// to the installed cluster before it is sealed. Labelled and bounded as
    /// `installationManifestRefs`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new("self.all(r, self.exists_one(o, o.name == r.name && o.kind == r.kind))").message("postInstallManifestRefs names an object twice; list each ConfigMap or Secret once"))]
    pub post_install_manifest_refs: Vec<ManifestRef>,

    /// Shape of the build VM and size of its disk (which becomes the golden disk).
    #[serde(default)]
    pub vm: BuildVm,

    /// Where the build VM and Jobs may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub placement: Option<Placement>,

    /// Upper bound for the whole build, a duration such as `6h` or `90m`.
    #[serde(default = "default_deadline")]
    #[x_kube(validation = Rule::new("self.matches('^([0-9]+(\\\\.[0-9]+)?(ns|us|ms|s|m|h))+$') && duration(self) > duration('0s')").message("deadline must be a positive duration such as 6h or 90m"))]
    pub deadline: String,
}

/// `spec.build.deadline` unless set: room for a build on real hardware, whose install alone
/// takes 40–90 minutes; the stages summed at the upper end of each take about 6 h, and
/// `tests/e2e_deadlines.rs` keeps a quarter on top of that (`docs/operations.md`, "CRCBundle
/// (build source)").
pub const DEFAULT_BUILD_DEADLINE: &str = "8h";

fn default_deadline() -> String {
    DEFAULT_BUILD_DEADLINE.to_owned()
}

/// A build recipe version.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BuildProfile {
    /// Single-node OpenShift on KubeVirt with masquerade networking, the node IP pinned to
    /// 192.168.126.11 and in-guest dnsmasq for the CRC names.
    #[default]
    #[serde(rename = "crc-kubevirt-v1")]
    CrcKubevirtV1,
}

impl BuildProfile {
    pub fn as_str(self) -> &'static str {
        match self {
            BuildProfile::CrcKubevirtV1 => "crc-kubevirt-v1",
        }
    }
}

/// A ConfigMap or Secret in the operator namespace holding manifests.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestRef {
    /// Name of the ConfigMap or Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Kind of the object holding the manifests.
    #[serde(default)]
    pub kind: ManifestSourceKind,
}

/// Kind of a manifest source object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum ManifestSourceKind {
    #[default]
    ConfigMap,
    Secret,
}

/// Build VM shape.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildVm {
    /// vCPUs of the build VM.
    #[serde(default = "default_cores")]
    #[schemars(range(min = 1))]
    pub cores: i32,
    /// Memory of the build VM, a quantity.
    #[serde(default = "default_memory")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("memory must be a Kubernetes quantity such as 16Gi"))]
    pub memory: String,
    /// Size of the build VM's root disk, which becomes the golden disk, a quantity.
    #[serde(default = "default_disk_size")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("diskSize must be a Kubernetes quantity such as 64Gi"))]
    pub disk_size: String,
}

impl Default for BuildVm {
    fn default() -> Self {
        Self {
            cores: default_cores(),
            memory: default_memory(),
            disk_size: default_disk_size(),
        }
    }
}

fn default_cores() -> i32 {
    6
}
fn default_memory() -> String {
    "16Gi".to_owned()
}
fn default_disk_size() -> String {
    "64Gi".to_owned()
}

/// Scheduling constraints for the build's VMs and Jobs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// Node labels the build VM and Jobs must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations for the build VM and Jobs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Affinity for the build VM and Jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<Affinity>,
}

/// Observed state of a CRCBundle.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct CRCBundleStatus {
    /// Lifecycle phase: Pending, Preparing, Building, Ready or Failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<BundlePhase>,

    /// Which source produced (or is producing) the disk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<BundleSource>,

    /// The golden PVC, set once Ready. Its `/disk.img` is a **raw** disk image: the field name is
    /// historical and kept for compatibility.
    #[serde(
        default,
        rename = "qcow2PVCRef",
        skip_serializing_if = "Option::is_none"
    )]
    pub qcow2_pvc_ref: Option<LocalRef>,

    /// Namespace of the golden PVC and key Secret (the operator namespace).
    #[serde(
        default,
        rename = "qcow2PVCNamespace",
        skip_serializing_if = "Option::is_none"
    )]
    pub qcow2_pvc_namespace: Option<String>,

    /// Secret holding the bundle's SSH private key under the key `id_ecdsa`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ssh_key_secret_ref: Option<LocalRef>,

    /// OpenShift version inside the disk (download: from crc-bundle-info.json; build: from the
    /// release payload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ocp_version: Option<String>,

    /// Download source only: verified SHA-256 of the downloaded `.crcbundle` archive.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,

    /// Hex SHA-256 of the raw golden `/disk.img`.
    #[serde(
        default,
        rename = "diskSHA256",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_sha256: Option<String>,

    /// First 12 hex digits of `diskSHA256`, for the printer column (JSONPath cannot shorten).
    #[serde(
        default,
        rename = "diskSHA256Short",
        skip_serializing_if = "Option::is_none"
    )]
    pub disk_sha256_short: Option<String>,

    /// Virtual size of the golden disk in bytes; instance root disks are at least this big.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_virtual_size: Option<i64>,

    /// VM profile instances must boot this disk with: `crc-download-v0` for downloaded bundles,
    /// the build profile (e.g. `crc-kubevirt-v1`) for built ones.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm_profile: Option<String>,

    /// Download source: the prep Job of the current preparation. Its name is recorded before the
    /// Job is created and its UID right after; the Job's child actor is started again from it
    /// after an operator restart, so the same Job is followed rather than a second one created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prep_job: Option<ObjectIdentity>,

    /// Build source: the release the disk was built from, with the tag resolved to a digest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release: Option<ReleaseStatus>,

    /// Build source: digests of the inputs, recorded when the build starts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<BuildInputs>,

    /// Build source: the current (or last) build attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub build: Option<BuildStatus>,

    /// The `metadata.generation` this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    /// A bundle the operator created for pools: since when no pool or instance refers to it.
    /// It is deleted once that lasted the operator's grace (`--pool-bundle-gc-grace-seconds`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unreferenced_since: Option<Time>,

    /// `Ready`, plus one condition per build stage: Prepared, Installed, Customized, Sealed,
    /// Published, Validated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(merge_strategy = ListMerge::Map(vec!["type".into()]))]
    pub conditions: Vec<Condition>,
}

/// Lifecycle phase of a CRCBundle.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BundlePhase {
    Pending,
    Preparing,
    Building,
    Ready,
    Failed,
}

/// Which source a bundle uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum BundleSource {
    Download,
    Build,
}

/// A release image resolved to a digest.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReleaseStatus {
    /// The pull spec as given in `spec.build.releaseImage`.
    pub image: String,
    /// The digest the pull spec resolved to when the build started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
}

/// Digests of a build's inputs (never their contents).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildInputs {
    /// SHA-256 of the pull secret's `.dockerconfigjson`.
    #[serde(
        default,
        rename = "pullSecretSHA256",
        skip_serializing_if = "Option::is_none"
    )]
    pub pull_secret_sha256: Option<String>,
    /// Installation manifest sources with the SHA-256 of their data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub installation_manifests: Vec<ManifestDigest>,
    /// Post-install manifest sources with the SHA-256 of their data.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_install_manifests: Vec<ManifestDigest>,
    /// The build profile.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
}

/// A manifest source and the digest of its data.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ManifestDigest {
    /// Name of the ConfigMap or Secret.
    pub name: String,
    /// `ConfigMap` or `Secret`.
    pub kind: String,
    /// SHA-256 over the object's data keys and values, in key order.
    pub sha256: String,
}

/// One build attempt.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildStatus {
    /// Attempt id, also the `guestcluster.opdev.io/build-attempt` label of every temporary object.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<i32>,
    /// The value of the annotation `guestcluster.opdev.io/retry` when the attempt started; a
    /// failed attempt is retried when the annotation takes another value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<String>,
    /// Current stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stage: Option<BuildStage>,
    /// When the attempt started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(description = "When the attempt started.")]
    pub started_at: Option<Time>,
    /// When the attempt ended (Ready or Failed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(description = "When the attempt ended (Ready or Failed).")]
    pub finished_at: Option<Time>,
    /// Name and UID of every temporary object of the attempt, recorded before or with creation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<BuildResources>,
    /// Where the Install stage is: which boot of the build VM runs, or the cold restart between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_step: Option<InstallStep>,
    /// Where the Validate stage is: which boot of the validation clone runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_boot: Option<ValidationBoot>,
    /// UID of the VMI the guest work is scoped to.
    #[serde(default, rename = "vmiUID", skip_serializing_if = "Option::is_none")]
    pub vmi_uid: Option<String>,
    /// Human-readable progress or failure detail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Stages of a bundle build, in order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum BuildStage {
    Admit,
    Prepare,
    Install,
    Customize,
    Seal,
    Publish,
    Validate,
    Ready,
    Failed,
}

/// The stages as a state machine: each knows its successor and the condition it reports on.
impl BuildStage {
    /// The stages an attempt runs, in order (Ready publishes it, Failed ends it).
    pub const RUNNING: [BuildStage; 7] = [
        BuildStage::Admit,
        BuildStage::Prepare,
        BuildStage::Install,
        BuildStage::Customize,
        BuildStage::Seal,
        BuildStage::Publish,
        BuildStage::Validate,
    ];

    /// The stage a success moves the attempt on to; `None` from Ready and Failed.
    pub fn next(self) -> Option<BuildStage> {
        match self {
            BuildStage::Validate => Some(BuildStage::Ready),
            BuildStage::Ready | BuildStage::Failed => None,
            running => {
                let at = BuildStage::RUNNING.iter().position(|s| *s == running)?;
                BuildStage::RUNNING.get(at + 1).copied()
            }
        }
    }

    /// The condition the stage reports progress, success and failure on: Admit shares
    /// Prepare's, and a failure after Validate (in Ready) is reported on Validate's.
    pub fn condition(self) -> &'static str {
        use super::conditions::types;
        match self {
            BuildStage::Admit | BuildStage::Prepare => types::PREPARED,
            BuildStage::Install => types::INSTALLED,
            BuildStage::Customize => types::CUSTOMIZED,
            BuildStage::Seal => types::SEALED,
            BuildStage::Publish => types::PUBLISHED,
            BuildStage::Validate | BuildStage::Ready | BuildStage::Failed => types::VALIDATED,
        }
    }

    /// The stages that end with a condition of their own, with it, in order.
    pub fn with_conditions() -> impl Iterator<Item = (BuildStage, &'static str)> {
        BuildStage::RUNNING
            .into_iter()
            .filter(|s| *s != BuildStage::Admit)
            .map(|s| (s, s.condition()))
    }
}

/// The steps of the Install stage (`docs/design/certificates-and-time.md`), in order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum InstallStep {
    /// The live ISO with the generator Ignition, a day behind: the helper creates the
    /// single-node Ignition in the guest and embeds it into the install ISO.
    Generator,
    /// The install ISO, a day behind: bootstrap in place onto the root disk, then SNC's
    /// certificate steps.
    Install,
    /// The VM stopped, its ISO removed, its clock put back to real time, started again.
    ColdRestart,
    /// On real time from the root disk alone: kubelet CSRs approved until both kubelet
    /// certificates are valid for 25 days by guest time.
    Certificates,
}

/// The boots of the Validate stage's clone of the golden disk, in order.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
pub enum ValidationBoot {
    /// On real time, as an instance boots: what sealing promised is checked, then the crc-agent's
    /// startup path runs.
    RealTime,
    /// The same clone booted again with its clock 20 days ahead: the cluster must still come up,
    /// the proof of the certificates' window.
    Aged,
}

/// The temporary objects of a build attempt.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BuildResources {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer_job: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub installer_auth_secret: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<ObjectIdentity>,
    /// Holds the extracted installer, the staging directory and the downloaded live ISO.
    #[serde(default, rename = "workPVC", skip_serializing_if = "Option::is_none")]
    pub work_pvc: Option<ObjectIdentity>,
    #[serde(default, rename = "isoPVC", skip_serializing_if = "Option::is_none")]
    pub iso_pvc: Option<ObjectIdentity>,
    /// The live ISO with the single-node Ignition embedded, written by the generator helper.
    #[serde(
        default,
        rename = "installISOPVC",
        skip_serializing_if = "Option::is_none"
    )]
    pub install_iso_pvc: Option<ObjectIdentity>,
    /// The installer's admin kubeconfig and kubeadmin password, read from the generator guest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<ObjectIdentity>,
    /// The build helper's ServiceAccount, Role and RoleBinding (one name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_account: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_role: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_role_binding: Option<ObjectIdentity>,
    /// The NetworkPolicy around the build and validation VMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_policy: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_data_volume: Option<ObjectIdentity>,
    #[serde(default, rename = "buildVM", skip_serializing_if = "Option::is_none")]
    pub build_vm: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helper_job: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_job: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_data_volume: Option<ObjectIdentity>,
    #[serde(
        default,
        rename = "validationVM",
        skip_serializing_if = "Option::is_none"
    )]
    pub validation_vm: Option<ObjectIdentity>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation_job: Option<ObjectIdentity>,
}
