//! `ClusterTemplate`: what one guest cluster looks like. Embedded in `ClusterPool.spec.template`
//! (copied verbatim into each instance) and `ClusterInstance.spec.template`.

use std::collections::BTreeMap;

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::common::{Arch, LocalRef};

/// Default root disk of a CRC instance.
pub const DEFAULT_CRC_ROOT_VOLUME_SIZE: &str = "80Gi";
/// Default root disk of an HCP worker.
pub const DEFAULT_HCP_ROOT_VOLUME_SIZE: &str = "32Gi";
/// Pull secret used when `pullSecretRef` is empty (in the instance namespace).
pub const DEFAULT_PULL_SECRET: &str = "pull-secret";

/// The shape of one guest cluster.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, KubeSchema)]
#[x_kube(
    validation = Rule::new("!(has(self.crcVersion) && size(self.crcVersion) > 0 && has(self.crcBundleRef))")
        .message("set either crcVersion (a published CRC bundle, downloaded as CRCBundle crc-<crcVersion>-<arch>) or crcBundleRef (an existing CRCBundle by name), not both")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterTemplate {
    /// CRC only: the published CRC bundle version to run. Selects (and, from a pool, creates) the
    /// CRCBundle `crc-<crcVersion>-<crcArch>`. When set, `releaseImage` and `bundleSSHKeyRef` are
    /// ignored. Mutually exclusive with `crcBundleRef`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc_version: Option<String>,

    /// CRC only: an existing CRCBundle (downloaded or built) to run, by name. A pool with
    /// `crcBundleRef` never creates a bundle. Mutually exclusive with `crcVersion`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self.name != ''").message("crcBundleRef.name must name a CRCBundle; remove crcBundleRef to use crcVersion or the manual path"))]
    pub crc_bundle_ref: Option<LocalRef>,

    /// CPU architecture of the CRC bundle. Empty means amd64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crc_arch: Option<Arch>,

    /// CRC manual path: HTTP(S) URL of an extracted `crc.qcow2` disk. HCP: the OpenShift release
    /// pull spec.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub release_image: Option<String>,

    /// The OpenShift version the guest is expected to run; a different observed version is
    /// reported by the `VersionMismatch` condition.
    #[schemars(length(min = 1))]
    pub ocp_version: String,

    /// HCP only: NodePool replicas (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub node_pool_replicas: Option<i32>,

    /// HCP only: control plane availability policy.
    #[serde(default)]
    pub controller_availability_policy: AvailabilityPolicy,

    /// Memory per VM (the CRC VM or an HCP worker), a quantity such as 16Gi.
    #[x_kube(validation = Rule::new("isQuantity(self)").message("memory must be a Kubernetes quantity such as 16Gi"))]
    pub memory: String,

    /// vCPUs per VM.
    #[schemars(range(min = 1))]
    pub cores: i32,

    /// Root disk size, a quantity. Default 80Gi for CRC (raised to the golden disk's virtual size
    /// when smaller, with an Event) and 32Gi for HCP workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == '' || isQuantity(self)").message("rootVolumeSize must be a Kubernetes quantity such as 80Gi"))]
    pub root_volume_size: Option<String>,

    /// Secret in the instance namespace with `.dockerconfigjson`, injected into the guest.
    /// Empty means the Secret `pull-secret`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret_ref: Option<LocalRef>,

    /// HCP: an ImageDigestMirrorSet source. Not used by CRC instances.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idms_ref: Option<LocalRef>,

    /// CRC manual path: Secret in the instance namespace with the disk's SSH private key under
    /// `id_ecdsa`, `ssh-privatekey` or `id_rsa` (first found wins).
    #[serde(
        default,
        rename = "bundleSSHKeyRef",
        skip_serializing_if = "Option::is_none"
    )]
    pub bundle_ssh_key_ref: Option<LocalRef>,

    /// HCP only: Secret with an `id_rsa.pub` key authorized on the workers.
    #[serde(
        default,
        rename = "hcpWorkerSSHKeyRef",
        skip_serializing_if = "Option::is_none"
    )]
    pub hcp_worker_ssh_key_ref: Option<LocalRef>,

    /// Node labels the guest VM (CRC) or NodePool (HCP) must be scheduled on.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vm_node_selector: BTreeMap<String, String>,

    /// StorageClass of the VM root disk; also used for a CRCBundle a pool creates. Empty means the
    /// cluster default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_class_name: Option<String>,
}

/// HCP control plane availability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub enum AvailabilityPolicy {
    #[default]
    SingleReplica,
    HighlyAvailable,
}

impl ClusterTemplate {
    /// The bundle architecture, with the runtime default (amd64) applied.
    pub fn arch(&self) -> Arch {
        self.crc_arch.unwrap_or_default()
    }

    /// `crcVersion` when set to a non-empty value.
    pub fn crc_version(&self) -> Option<&str> {
        self.crc_version.as_deref().filter(|v| !v.is_empty())
    }

    /// The CRCBundle `crcBundleRef` names, when set.
    pub fn crc_bundle_ref(&self) -> Option<&str> {
        self.crc_bundle_ref.as_ref().and_then(LocalRef::name)
    }
}
