//! The install-config of profile `crc-kubevirt-v1`: one control-plane node installed in place
//! onto `/dev/vda`, cluster `crc.testing`, SNC's networks and capability set, platform `none`.

use serde::Serialize;

use super::inputs::{PullSecret, Sensitive, SshPublicKey};
use super::network::{
    BASE_DOMAIN, CLUSTER_NAME, CLUSTER_NETWORK, CLUSTER_NETWORK_HOST_PREFIX, MACHINE_NETWORK,
    NETWORK_TYPE, SERVICE_NETWORK,
};
use crate::api::common::Arch;

/// The disk bootstrap-in-place installs to: the build VM's root disk, the first virtio disk.
pub const INSTALLATION_DISK: &str = "/dev/vda";
/// What SNC enables on top of the empty baseline capability set.
pub const ENABLED_CAPABILITIES: [&str; 9] = [
    "openshift-samples",
    "marketplace",
    "Console",
    "MachineAPI",
    "ImageRegistry",
    "DeploymentConfig",
    "Build",
    "OperatorLifecycleManager",
    "Ingress",
];

/// Why the install-config cannot be rendered.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("rendering the install-config: {0}")]
    Render(String),
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct InstallConfig<'a> {
    api_version: &'static str,
    base_domain: &'static str,
    metadata: Metadata,
    compute: [MachinePool; 1],
    control_plane: MachinePool,
    networking: Networking,
    platform: Platform,
    bootstrap_in_place: BootstrapInPlace,
    capabilities: Capabilities,
    pull_secret: &'a str,
    ssh_key: &'a str,
}

#[derive(Serialize)]
struct Metadata {
    name: &'static str,
}

#[derive(Serialize)]
struct MachinePool {
    name: &'static str,
    replicas: u32,
    architecture: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Networking {
    network_type: &'static str,
    cluster_network: [ClusterNetwork; 1],
    service_network: [&'static str; 1],
    machine_network: [MachineNetwork; 1],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ClusterNetwork {
    cidr: &'static str,
    host_prefix: u8,
}

#[derive(Serialize)]
struct MachineNetwork {
    cidr: &'static str,
}

#[derive(Serialize)]
struct Platform {
    none: Empty,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BootstrapInPlace {
    installation_disk: &'static str,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Capabilities {
    baseline_capability_set: &'static str,
    additional_enabled_capabilities: [&'static str; 9],
}

/// `install-config.yaml` for a guest of `arch`, pulling with `pull_secret` and letting
/// `ssh_key` in as `core`. The result holds the pull secret, so it is [`Sensitive`].
pub fn install_config(
    arch: Arch,
    pull_secret: &PullSecret,
    ssh_key: &SshPublicKey,
) -> Result<Sensitive, Error> {
    let pool = |name, replicas| MachinePool {
        name,
        replicas,
        architecture: arch.as_str(),
    };
    let config = InstallConfig {
        api_version: "v1",
        base_domain: BASE_DOMAIN,
        metadata: Metadata { name: CLUSTER_NAME },
        compute: [pool("worker", 0)],
        control_plane: pool("master", 1),
        networking: Networking {
            network_type: NETWORK_TYPE,
            cluster_network: [ClusterNetwork {
                cidr: CLUSTER_NETWORK,
                host_prefix: CLUSTER_NETWORK_HOST_PREFIX,
            }],
            service_network: [SERVICE_NETWORK],
            machine_network: [MachineNetwork {
                cidr: MACHINE_NETWORK,
            }],
        },
        platform: Platform { none: Empty {} },
        bootstrap_in_place: BootstrapInPlace {
            installation_disk: INSTALLATION_DISK,
        },
        capabilities: Capabilities {
            baseline_capability_set: "None",
            additional_enabled_capabilities: ENABLED_CAPABILITIES,
        },
        pull_secret: pull_secret.expose(),
        ssh_key: ssh_key.as_str(),
    };
    // The serializer's error never quotes the value, but keep only its kind to be sure.
    serde_saphyr::to_string(&config)
        .map(Sensitive::new)
        .map_err(|_| Error::Render("the YAML serializer refused the install-config".into()))
}

#[cfg(test)]
mod tests {
    use super::super::golden::check_golden_text;
    use super::super::inputs::tests::{PULL_SECRET, SSH_KEY};
    use super::*;
    use serde_json::{Value, json};

    fn render(arch: Arch) -> Sensitive {
        install_config(
            arch,
            &PullSecret::parse(PULL_SECRET).unwrap(),
            &SshPublicKey::parse(SSH_KEY).unwrap(),
        )
        .unwrap()
    }

    #[test]
    fn install_config_matches_golden() {
        check_golden_text(
            "install-dir/install-config.yaml",
            render(Arch::Amd64).expose(),
        );
    }

    #[test]
    fn install_config_reads_back_with_the_secret_verbatim() {
        let rendered = render(Arch::Arm64);
        let value: Value = serde_saphyr::from_str(rendered.expose()).unwrap();
        assert_eq!(value["pullSecret"], PULL_SECRET);
        assert_eq!(value["sshKey"], SSH_KEY);
        assert_eq!(value["controlPlane"]["architecture"], "arm64");
        assert_eq!(value["controlPlane"]["replicas"], 1);
        assert_eq!(value["compute"][0]["replicas"], 0);
        assert_eq!(value["bootstrapInPlace"]["installationDisk"], "/dev/vda");
        assert_eq!(
            format!(
                "{}.{}",
                value["metadata"]["name"].as_str().unwrap(),
                value["baseDomain"].as_str().unwrap()
            ),
            "crc.testing"
        );
        assert_eq!(value["platform"], json!({"none": {}}));
        assert!(!format!("{rendered:?}").contains("PLACEHOLDER"));
    }
}
