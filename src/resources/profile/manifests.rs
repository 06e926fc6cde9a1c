//! The manifests profile `crc-kubevirt-v1` adds to the installation before the Ignition is
//! created (SNC's, ported; docs/design/network.md lists them), and the two changes it makes to
//! manifests the installer generates (CVO overrides, ingress domain).

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::{Value, json};

use super::guest_files;
use super::ignition_config::Config;
use super::network::{APPS_DOMAIN, CLUSTER_MTU, NETWORK_TYPE};

/// MachineConfig names; the seal stage deletes the chronyd mask by this name.
pub const CHRONYD_MASK_MC: &str = "99-master-crc-chronyd-mask";
pub const NODE_IP_MC: &str = "99-master-crc-node-ip";
pub const DNSMASQ_MC: &str = "99-master-crc-dnsmasq";
pub const CONSOLE_MC: &str = "99-master-crc-console";
pub const NODE_SIZING_MC: &str = "99-master-crc-node-sizing";
/// The installer-generated manifests the profile changes (paths in the install directory).
pub const CVO_OVERRIDES_FILE: &str = "manifests/cvo-overrides.yaml";
pub const INGRESS_CONFIG_FILE: &str = "manifests/cluster-ingress-02-config.yml";

/// Why an installer-generated manifest cannot be changed. No variant quotes the manifest.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("{file} is not YAML")]
    NotYaml { file: &'static str },
    #[error("{file} is a {found}, expected a {expected}")]
    WrongKind {
        file: &'static str,
        expected: &'static str,
        found: String,
    },
    #[error("{file}: {field} is not {what}")]
    Malformed {
        file: &'static str,
        field: &'static str,
        what: &'static str,
    },
    #[error("rendering {file}: {reason}")]
    Render { file: String, reason: String },
}

/// The directory of the install directory a manifest goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ManifestDir {
    /// `manifests/`: cluster manifests.
    Manifests,
    /// `openshift/`: MachineConfigs and other OpenShift manifests.
    Openshift,
}

impl ManifestDir {
    pub fn as_str(self) -> &'static str {
        match self {
            ManifestDir::Manifests => "manifests",
            ManifestDir::Openshift => "openshift",
        }
    }
}

/// One manifest file the profile adds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManifestFile {
    pub dir: ManifestDir,
    pub name: String,
    pub yaml: String,
}

impl ManifestFile {
    /// The path in the install directory, e.g. `openshift/99-master-crc-node-ip.yaml`.
    pub fn path(&self) -> String {
        format!("{}/{}", self.dir.as_str(), self.name)
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MachineConfig {
    api_version: &'static str,
    kind: &'static str,
    metadata: Metadata,
    spec: MachineConfigSpec,
}

#[derive(Serialize)]
struct Metadata {
    name: &'static str,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    labels: BTreeMap<&'static str, &'static str>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct MachineConfigSpec {
    config: Config,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    kernel_arguments: Vec<&'static str>,
}

fn machine_config(
    name: &'static str,
    config: Config,
    kernel_arguments: Vec<&'static str>,
) -> MachineConfig {
    MachineConfig {
        api_version: "machineconfiguration.openshift.io/v1",
        kind: "MachineConfig",
        metadata: Metadata {
            name,
            labels: BTreeMap::from([("machineconfiguration.openshift.io/role", "master")]),
        },
        spec: MachineConfigSpec {
            config,
            kernel_arguments,
        },
    }
}

fn yaml<T: Serialize>(file: &str, object: &T) -> Result<String, Error> {
    serde_saphyr::to_string(object).map_err(|e| Error::Render {
        file: file.to_owned(),
        reason: e.to_string(),
    })
}

/// Every manifest the profile adds, in the order they are written.
pub fn profile_manifests() -> Result<Vec<ManifestFile>, Error> {
    let machine_configs = [
        machine_config(CHRONYD_MASK_MC, guest_files::chronyd_mask(), Vec::new()),
        machine_config(NODE_IP_MC, guest_files::node_ip(), Vec::new()),
        machine_config(DNSMASQ_MC, guest_files::dnsmasq(), Vec::new()),
        // SNC's consoles: virtio console first, the serial console KubeVirt attaches last, so
        // `virtctl console` shows the kernel's output.
        machine_config(
            CONSOLE_MC,
            Config::of(Vec::new(), Vec::new()),
            vec!["console=hvc0", "console=ttyS0"],
        ),
        machine_config(NODE_SIZING_MC, guest_files::node_sizing(), Vec::new()),
    ];
    let mut files = vec![network_operator_config()?];
    for mc in machine_configs {
        let name = format!("{}.yaml", mc.metadata.name);
        files.push(ManifestFile {
            dir: ManifestDir::Openshift,
            yaml: yaml(&name, &mc)?,
            name,
        });
    }
    Ok(files)
}

/// `manifests/cluster-network-03-config.yml`: OVN-Kubernetes with the profile's fixed MTU, so
/// the disk does not take the MTU of the pod it was built in (SNC's file sets OpenShift SDN,
/// which current releases no longer have).
fn network_operator_config() -> Result<ManifestFile, Error> {
    let name = "cluster-network-03-config.yml".to_owned();
    let object = json!({
        "apiVersion": "operator.openshift.io/v1",
        "kind": "Network",
        "metadata": {"name": "cluster"},
        "spec": {"defaultNetwork": {
            "type": NETWORK_TYPE,
            "ovnKubernetesConfig": {"mtu": CLUSTER_MTU},
        }},
    });
    Ok(ManifestFile {
        dir: ManifestDir::Manifests,
        yaml: yaml(&name, &object)?,
        name,
    })
}

/// One entry of ClusterVersion `spec.overrides`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CvoOverride {
    pub kind: &'static str,
    pub group: &'static str,
    pub namespace: &'static str,
    pub name: &'static str,
}

/// The operators SNC keeps the CVO from ever creating (monitoring, cloud credentials, cluster
/// autoscaler, cloud controller manager): each operator's Deployment and ClusterOperator.
pub const CVO_OVERRIDES: [CvoOverride; 8] = {
    const fn deployment(namespace: &'static str, name: &'static str) -> CvoOverride {
        CvoOverride {
            kind: "Deployment",
            group: "apps",
            namespace,
            name,
        }
    }
    const fn operator(name: &'static str) -> CvoOverride {
        CvoOverride {
            kind: "ClusterOperator",
            group: "config.openshift.io",
            namespace: "",
            name,
        }
    }
    [
        deployment("openshift-monitoring", "cluster-monitoring-operator"),
        operator("monitoring"),
        deployment(
            "openshift-cloud-credential-operator",
            "cloud-credential-operator",
        ),
        operator("cloud-credential"),
        deployment("openshift-machine-api", "cluster-autoscaler-operator"),
        operator("cluster-autoscaler"),
        deployment(
            "openshift-cloud-controller-manager-operator",
            "cluster-cloud-controller-manager-operator",
        ),
        operator("cloud-controller-manager"),
    ]
};

/// Parses an installer manifest and checks its kind.
fn parse_manifest(file: &'static str, text: &str, kind: &'static str) -> Result<Value, Error> {
    let value: Value = serde_saphyr::from_str(text).map_err(|_| Error::NotYaml { file })?;
    let found = value
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if found != kind {
        return Err(Error::WrongKind {
            file,
            expected: kind,
            found: found.to_owned(),
        });
    }
    Ok(value)
}

fn spec_of<'a>(
    file: &'static str,
    value: &'a mut Value,
) -> Result<&'a mut serde_json::Map<String, Value>, Error> {
    let root = value.as_object_mut().ok_or(Error::Malformed {
        file,
        field: "the document",
        what: "a mapping",
    })?;
    root.entry("spec")
        .or_insert_with(|| json!({}))
        .as_object_mut()
        .ok_or(Error::Malformed {
            file,
            field: "spec",
            what: "a mapping",
        })
}

/// The installer's `manifests/cvo-overrides.yaml` (ClusterVersion `version`) with
/// [`CVO_OVERRIDES`] marked unmanaged: an existing entry for the same object is set unmanaged,
/// a missing one is added; everything else is kept. Applying it twice changes nothing.
pub fn merge_cvo_overrides(installer_yaml: &str) -> Result<String, Error> {
    let file = CVO_OVERRIDES_FILE;
    let mut value = parse_manifest(file, installer_yaml, "ClusterVersion")?;
    let overrides = spec_of(file, &mut value)?
        .entry("overrides")
        .or_insert_with(|| json!([]))
        .as_array_mut()
        .ok_or(Error::Malformed {
            file,
            field: "spec.overrides",
            what: "a list",
        })?;
    for o in CVO_OVERRIDES {
        let same = |v: &Value| {
            let field = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default();
            field("kind") == o.kind
                && field("group") == o.group
                && field("namespace") == o.namespace
                && field("name") == o.name
        };
        match overrides.iter_mut().find(|v| same(v)) {
            Some(existing) => existing["unmanaged"] = json!(true),
            None => overrides.push(json!({
                "kind": o.kind,
                "group": o.group,
                "namespace": o.namespace,
                "name": o.name,
                "unmanaged": true,
            })),
        }
    }
    yaml(file, &value)
}

/// The installer's `manifests/cluster-ingress-02-config.yml` (Ingress `cluster`) with CRC's apps
/// domain, `apps-crc.testing`, instead of the installer's `apps.crc.testing`.
pub fn set_ingress_domain(installer_yaml: &str) -> Result<String, Error> {
    let file = INGRESS_CONFIG_FILE;
    let mut value = parse_manifest(file, installer_yaml, "Ingress")?;
    spec_of(file, &mut value)?.insert("domain".into(), json!(APPS_DOMAIN));
    yaml(file, &value)
}

#[cfg(test)]
mod tests {
    use super::super::golden::check_golden_text;
    use super::*;

    /// What the installer writes into `manifests/cvo-overrides.yaml` (shape only).
    const INSTALLER_CVO: &str = "apiVersion: config.openshift.io/v1
kind: ClusterVersion
metadata:
  name: version
  namespace: openshift-cluster-version
spec:
  channel: stable-4.22
  clusterID: 5f3c1e0b-7d2a-4e7b-9c1d-2f3a4b5c6d7e
  overrides:
  - kind: ClusterOperator
    group: config.openshift.io
    namespace: ''
    name: monitoring
    unmanaged: false
";

    /// What the installer writes into `manifests/cluster-ingress-02-config.yml`.
    const INSTALLER_INGRESS: &str = "apiVersion: config.openshift.io/v1
kind: Ingress
metadata:
  creationTimestamp: null
  name: cluster
spec:
  domain: apps.crc.testing
status: {}
";

    #[test]
    fn every_profile_manifest_matches_golden() {
        let files = profile_manifests().unwrap();
        let paths: Vec<String> = files.iter().map(ManifestFile::path).collect();
        assert_eq!(
            paths,
            [
                "manifests/cluster-network-03-config.yml",
                "openshift/99-master-crc-chronyd-mask.yaml",
                "openshift/99-master-crc-node-ip.yaml",
                "openshift/99-master-crc-dnsmasq.yaml",
                "openshift/99-master-crc-console.yaml",
                "openshift/99-master-crc-node-sizing.yaml",
            ]
        );
        for file in &files {
            check_golden_text(&format!("install-dir/{}", file.path()), &file.yaml);
        }
    }

    #[test]
    fn patched_installer_manifests_match_golden() {
        let cvo = merge_cvo_overrides(INSTALLER_CVO).unwrap();
        check_golden_text(&format!("install-dir/{CVO_OVERRIDES_FILE}"), &cvo);
        let ingress = set_ingress_domain(INSTALLER_INGRESS).unwrap();
        check_golden_text(&format!("install-dir/{INGRESS_CONFIG_FILE}"), &ingress);
    }

    #[test]
    fn cvo_overrides_are_complete_once_and_keep_the_installers_fields() {
        let merged = merge_cvo_overrides(INSTALLER_CVO).unwrap();
        assert_eq!(merge_cvo_overrides(&merged).unwrap(), merged);
        let value: Value = serde_saphyr::from_str(&merged).unwrap();
        let overrides = value["spec"]["overrides"].as_array().unwrap();
        assert_eq!(overrides.len(), CVO_OVERRIDES.len());
        assert!(overrides.iter().all(|o| o["unmanaged"] == true));
        assert_eq!(value["spec"]["channel"], "stable-4.22");
        assert_eq!(value["metadata"]["namespace"], "openshift-cluster-version");
        // A ClusterVersion without overrides (or without a spec) gets them all.
        let bare = merge_cvo_overrides("apiVersion: config.openshift.io/v1\nkind: ClusterVersion\nmetadata:\n  name: version\n").unwrap();
        let value: Value = serde_saphyr::from_str(&bare).unwrap();
        assert_eq!(value["spec"]["overrides"].as_array().unwrap().len(), 8);
    }

    #[test]
    fn the_ingress_domain_is_crcs() {
        let value: Value =
            serde_saphyr::from_str(&set_ingress_domain(INSTALLER_INGRESS).unwrap()).unwrap();
        assert_eq!(value["spec"]["domain"], "apps-crc.testing");
        assert_eq!(value["metadata"]["name"], "cluster");
    }

    #[test]
    fn installer_manifests_of_the_wrong_shape_are_refused() {
        assert_eq!(
            merge_cvo_overrides(INSTALLER_INGRESS).unwrap_err(),
            Error::WrongKind {
                file: CVO_OVERRIDES_FILE,
                expected: "ClusterVersion",
                found: "Ingress".into()
            }
        );
        assert_eq!(
            set_ingress_domain("kind: Ingress\nspec: [1]\n").unwrap_err(),
            Error::Malformed {
                file: INGRESS_CONFIG_FILE,
                field: "spec",
                what: "a mapping"
            }
        );
        assert_eq!(
            merge_cvo_overrides("kind: ClusterVersion\nspec:\n  overrides: {}\n").unwrap_err(),
            Error::Malformed {
                file: CVO_OVERRIDES_FILE,
                field: "spec.overrides",
                what: "a list"
            }
        );
        assert_eq!(
            set_ingress_domain("kind: [unclosed").unwrap_err(),
            Error::NotYaml {
                file: INGRESS_CONFIG_FILE
            }
        );
    }

    #[test]
    fn machine_configs_are_for_masters_at_the_profiles_ignition_version() {
        for file in profile_manifests().unwrap() {
            let value: Value = serde_saphyr::from_str(&file.yaml).unwrap();
            if value["kind"] != "MachineConfig" {
                continue;
            }
            assert_eq!(
                value["metadata"]["labels"]["machineconfiguration.openshift.io/role"], "master",
                "{}",
                file.name
            );
            assert_eq!(
                value["spec"]["config"]["ignition"]["version"], "3.2.0",
                "{}",
                file.name
            );
        }
    }
}
