//! Objects of a CRC ClusterInstance, in the instance namespace (`docs/architecture.md`,
//! "ClusterInstance"): names, the root DataVolume and its size, the VirtualMachine, agent RBAC,
//! the API Service and Route, the boot-key copy, identity and kubeconfig Secrets, and the
//! crc-agent Job.
//!
//! Every namespaced object carries the common instance labels and a controller owner reference
//! to the instance (which must have been read from the API: it needs a UID).

mod builders;
mod names;
mod size;
mod vm;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

pub use builders::*;
pub use names::*;
pub use size::{Raised, parse_quantity_bytes, root_disk_size};
pub use vm::{ROOT_DISK, VmProfile, root_disk, root_volume, virtual_machine};

use super::common::controller_ref;
use crate::api::ClusterInstance;
use crate::api::labels;

/// Why an instance object cannot be built.
#[derive(Debug, thiserror::Error, Clone, PartialEq)]
pub enum Error {
    /// The ingress domain leaves no room for a host label.
    #[error("no room for an API host of instance {name:?} under the ingress domain {domain:?}")]
    NoRoomForHost { name: String, domain: String },
    #[error("invalid quantity {0:?}")]
    InvalidQuantity(String),
    #[error("filesystem overhead {0} is not a fraction in [0, 1)")]
    InvalidFilesystemOverhead(f64),
    #[error("unknown VM profile {0:?}")]
    UnknownVmProfile(String),
    #[error("CRCBundle {0} is built but records no vmProfile")]
    MissingVmProfile(String),
}

/// The labels every operator-created object of an instance carries.
pub fn instance_labels(instance: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::MANAGED_BY.to_owned(),
            labels::MANAGED_BY_OPERATOR.to_owned(),
        ),
        (labels::CLUSTER_INSTANCE.to_owned(), instance.to_owned()),
    ])
}

/// Metadata of an instance-owned object `name`: the instance namespace, the common labels and a
/// controller owner reference.
fn owned_meta(instance: &ClusterInstance, name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.to_owned()),
        namespace: instance.namespace(),
        labels: Some(instance_labels(&instance.name_any())),
        owner_references: controller_ref(instance).map(|r| vec![r]),
        ..Default::default()
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::api::ClusterInstanceSpec;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use serde_json::json;

    pub const INSTANCE_UID: &str = "0b5f3c1e-7d2a-4e7b-9c1d-2f3a4b5c6d7e";
    pub const VMI_UID: &str = "6f1c1e64-2b1a-4c55-9a3e-0d4f5c7b8a90";

    /// The sample instance `crc-1` in `team-a`.
    pub fn instance() -> ClusterInstance {
        let spec: ClusterInstanceSpec = serde_json::from_value(json!({
            "type": "crc",
            "template": {"crcVersion": "4.16.0", "ocpVersion": "4.16.0",
                         "memory": "16Gi", "cores": 4,
                         "vmNodeSelector": {"kubernetes.io/arch": "amd64"}},
        }))
        .unwrap();
        let mut instance = ClusterInstance::new("crc-1", spec);
        instance.metadata.namespace = Some("team-a".into());
        instance.metadata.uid = Some(INSTANCE_UID.into());
        instance
    }

    fn agent_inputs(host: &str) -> AgentJobInputs {
        AgentJobInputs {
            image: "quay.io/opdev/guestcluster:v0.1.0".into(),
            pod_users: Default::default(),
            vmi_uid: VMI_UID.into(),
            vm_name: "crc-1".into(),
            ssh_host: "10.128.0.7".into(),
            api_hostname: host.into(),
            pull_secret_name: "pull-secret".into(),
            ssh_key_secret_name: boot_key_secret_name("crc-1"),
            ssh_key_data_key: BOOT_KEY_DATA_KEY.into(),
        }
    }

    fn check_golden(file: &str, objects: serde_json::Value) {
        let rendered = serde_saphyr::to_string(&objects).unwrap();
        let golden_path = format!("{}/src/resources/golden/{file}", env!("CARGO_MANIFEST_DIR"));
        if std::env::var_os("UPDATE_GOLDEN").is_some() {
            std::fs::write(&golden_path, &rendered).unwrap();
        }
        let golden = std::fs::read_to_string(&golden_path).unwrap_or_else(|_| {
            panic!("missing {golden_path}; run `UPDATE_GOLDEN=1 cargo test --lib resources` and review it")
        });
        assert_eq!(
            rendered, golden,
            "builders changed; review and run `UPDATE_GOLDEN=1 cargo test --lib resources`"
        );
    }

    #[test]
    fn turnkey_instance_matches_golden_yaml() {
        let i = instance();
        let template = &i.spec.template;
        let host = route_host("team-a", "crc-1", "apps.mgmt.example.com").unwrap();
        let (size, raised) =
            root_disk_size(template.root_volume_size.as_deref(), Some(31 << 30), 0.055).unwrap();
        assert!(raised.is_none());
        let dv = root_data_volume(
            &i,
            RootDiskSource::Pvc {
                namespace: "guestcluster-system".into(),
                name: "crc-4.16.0-amd64-golden".into(),
            },
            size,
            Some("fast".into()),
        );
        let vm = virtual_machine(
            &i,
            VmProfile::CrcDownloadV0,
            &root_disk_name("crc-1"),
            &template.memory,
            template.cores,
            &template.vm_node_selector,
        );
        let identity = identity_secret(
            &i,
            IDENTITY_KEYS
                .iter()
                .map(|k| ((*k).to_owned(), ByteString(format!("<{k}>").into_bytes())))
                .collect(),
        );
        let objects = json!([
            agent_role(&i, VMI_UID),
            agent_service_account(&i),
            agent_role_binding(&i),
            boot_key_copy(&i, b"-----BEGIN EC PRIVATE KEY-----\n"),
            guest_key_secret(
                &i,
                "-----BEGIN OPENSSH PRIVATE KEY-----\n",
                "ssh-ed25519 AAAA crc-instance",
            ),
            dv,
            vm,
            api_service(&i, &vm_name("crc-1")),
            guest_network_policy(&i, &vm_name("crc-1")),
            api_route(&i, &host),
            identity,
            agent_job(&i, &agent_inputs(&host)),
            kubeconfig_secret(&i, b"apiVersion: v1\nkind: Config\n", "4.16.0"),
        ]);
        check_golden("instance-crc.yaml", objects);
    }

    #[test]
    fn manual_instance_matches_golden_yaml() {
        let i = instance();
        let host = route_host("team-a", "crc-1", "apps.mgmt.example.com").unwrap();
        let dv = root_data_volume(
            &i,
            RootDiskSource::Http {
                url: "https://example.com/crc.qcow2".into(),
            },
            Quantity("100Gi".into()),
            None,
        );
        let inputs = AgentJobInputs {
            ssh_key_secret_name: "my-bundle-key".into(),
            ssh_key_data_key: "ssh-privatekey".into(),
            ..agent_inputs(&host)
        };
        check_golden("instance-manual.yaml", json!([dv, agent_job(&i, &inputs)]));
    }

    #[test]
    fn every_namespaced_object_is_labelled_and_controlled_by_the_instance() {
        let i = instance();
        let metas = [
            agent_service_account(&i).metadata,
            agent_role(&i, VMI_UID).metadata,
            agent_role_binding(&i).metadata,
            boot_key_copy(&i, b"k").metadata,
            identity_secret(&i, BTreeMap::new()).metadata,
            kubeconfig_secret(&i, b"k", "4.16.0").metadata,
            api_service(&i, "crc-1").metadata,
            api_route(&i, "h").metadata,
            agent_job(&i, &agent_inputs("h")).metadata,
            virtual_machine(
                &i,
                VmProfile::CrcDownloadV0,
                "d",
                "1Gi",
                1,
                &BTreeMap::new(),
            )
            .metadata,
            root_data_volume(
                &i,
                RootDiskSource::Http { url: "u".into() },
                Quantity("1Gi".into()),
                None,
            )
            .metadata,
        ];
        for meta in metas {
            let name = meta.name.clone().unwrap();
            assert_eq!(meta.namespace.as_deref(), Some("team-a"), "{name}");
            let labels = meta.labels.unwrap();
            assert_eq!(
                labels[labels::MANAGED_BY],
                "guestcluster-operator",
                "{name}"
            );
            assert_eq!(labels[labels::CLUSTER_INSTANCE], "crc-1", "{name}");
            let owners = meta.owner_references.unwrap();
            assert_eq!(owners.len(), 1, "{name}");
            assert_eq!(owners[0].uid, INSTANCE_UID, "{name}");
            assert_eq!(owners[0].kind, "ClusterInstance", "{name}");
            assert_eq!(owners[0].controller, Some(true), "{name}");
            assert!(meta.annotations.is_none(), "{name}");
        }
        let route_labels = api_route(&i, "h").metadata.labels.unwrap();
        assert_eq!(route_labels[labels::CLUSTER_INSTANCE_NAMESPACE], "team-a");
    }

    #[test]
    fn data_volume_uses_spec_storage_without_modes_or_annotations() {
        let i = instance();
        let dv = root_data_volume(
            &i,
            RootDiskSource::Pvc {
                namespace: "ops".into(),
                name: "golden".into(),
            },
            Quantity("80Gi".into()),
            Some(String::new()),
        );
        let value = serde_json::to_value(&dv).unwrap();
        assert_eq!(value["metadata"]["name"], "crc-1-rootdisk");
        assert!(value["metadata"].get("annotations").is_none());
        assert_eq!(
            value["spec"],
            json!({
                "source": {"pvc": {"namespace": "ops", "name": "golden"}},
                "storage": {"resources": {"requests": {"storage": "80Gi"}}},
            })
        );
    }

    #[test]
    fn agent_job_env_and_mounts_are_exact() {
        let job = agent_job(&instance(), &agent_inputs("api.example.com"));
        let value = serde_json::to_value(&job).unwrap();
        let container = &value["spec"]["template"]["spec"]["containers"][0];
        let env: Vec<(String, String)> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["name"].as_str().unwrap().to_owned(),
                    e["value"].as_str().unwrap().to_owned(),
                )
            })
            .collect();
        let expected = [
            ("INSTANCE_NAME", "crc-1"),
            ("INSTANCE_NAMESPACE", "team-a"),
            ("INSTANCE_UID", INSTANCE_UID),
            ("CRC_VM_NAME", "crc-1"),
            ("CRC_SSH_HOST", "10.128.0.7"),
            ("CRC_VMI_UID", VMI_UID),
            ("CRC_SSH_KEY_PATH", "/etc/crc-agent/ssh/id_ecdsa"),
            (
                "CRC_GUEST_KEY_PATH",
                "/etc/crc-agent/guest-key/ssh-privatekey",
            ),
            ("CRC_IDENTITY_PATH", "/etc/crc-agent/identity"),
            (
                "PULL_SECRET_PATH",
                "/etc/crc-agent/pull-secret/.dockerconfigjson",
            ),
            ("CRC_API_HOSTNAME", "api.example.com"),
            // The writable scratch directory under a read-only root filesystem.
            ("TMPDIR", "/tmp"),
            ("HOME", "/tmp"),
        ]
        .map(|(k, v)| (k.to_owned(), v.to_owned()));
        assert_eq!(env, expected);
        assert!(
            container["volumeMounts"]
                .as_array()
                .unwrap()
                .iter()
                .all(|m| m["readOnly"] == true || m["mountPath"] == "/tmp")
        );
        assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(value["spec"]["backoffLimit"], 2);
        assert_eq!(value["spec"]["activeDeadlineSeconds"], 2700);
        assert_eq!(
            value["spec"]["template"]["spec"]["serviceAccountName"],
            agent_account_name("crc-1")
        );
        assert_eq!(value["metadata"]["name"], agent_job_name("crc-1", VMI_UID));
    }

    #[test]
    fn the_agent_role_names_its_vmi_and_handoff_and_compares_ignoring_order() {
        let role = agent_role(&instance(), VMI_UID);
        let rules = role.rules.clone().unwrap();
        let named = |resource: &str, verb: &str| {
            rules
                .iter()
                .filter(|r| {
                    r.resources.as_ref().unwrap().contains(&resource.to_owned())
                        && r.verbs.contains(&verb.to_owned())
                })
                .map(|r| r.resource_names.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(
            named("virtualmachineinstances", "watch"),
            [Some(vec!["crc-1".to_owned()])]
        );
        assert_eq!(
            named("secrets", "get"),
            [Some(vec![handoff_secret_name("crc-1", VMI_UID)])]
        );
        assert_eq!(named("secrets", "update"), named("secrets", "get"));
        assert_eq!(named("secrets", "create"), [None], "create cannot be named");
        assert!(named("secrets", "list").is_empty());

        assert!(rules_match(&rules, &rules));
        let mut reordered = rules.clone();
        reordered.reverse();
        reordered[0].verbs.reverse();
        assert!(rules_match(&reordered, &rules));
        let mut extra_verb = rules.clone();
        extra_verb[1].verbs.push("delete".into());
        assert!(!rules_match(&extra_verb, &rules));
        let next_vmi = agent_role(&instance(), "another-vmi").rules.unwrap();
        assert!(!rules_match(&next_vmi, &rules), "a new VMI, a new handoff");
    }

    #[test]
    fn the_guest_admits_ssh_from_its_own_agent_pods_and_the_api_from_the_router_only() {
        let i = instance();
        let policy = serde_json::to_value(guest_network_policy(&i, "crc-1")).unwrap();
        let rules = policy["spec"]["ingress"].as_array().unwrap();
        assert_eq!(rules.len(), 2);
        assert_eq!(policy["spec"]["policyTypes"], json!(["Ingress"]));
        let ssh = &rules[0];
        assert_eq!(ssh["ports"], json!([{"port": 22, "protocol": "TCP"}]));
        let agent = serde_json::to_value(agent_job(&i, &agent_inputs("api.example.com"))).unwrap();
        let pod_labels = agent["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap();
        for (key, value) in ssh["from"][0]["podSelector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(
                pod_labels.get(key),
                Some(value),
                "the agent pod carries {key}"
            );
        }
        let api = &rules[1];
        assert_eq!(api["ports"], json!([{"port": 6443, "protocol": "TCP"}]));
        assert_eq!(
            api["from"][0]["namespaceSelector"]["matchLabels"],
            json!({"network.openshift.io/policy-group": "ingress"})
        );
    }

    #[test]
    fn role_binding_binds_the_instance_account() {
        let binding = agent_role_binding(&instance());
        assert_eq!(binding.role_ref.kind, "Role");
        assert_eq!(binding.role_ref.name, agent_role_name("crc-1"));
        let subject = &binding.subjects.unwrap()[0];
        assert_eq!(subject.kind, "ServiceAccount");
        assert_eq!(subject.name, agent_account_name("crc-1"));
        assert_eq!(subject.namespace.as_deref(), Some("team-a"));
    }
}
