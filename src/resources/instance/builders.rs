//! The instance's backing objects other than the VM (`docs/architecture.md`, "ClusterInstance"):
//! agent RBAC, boot-key copy, root DataVolume, API Service and Route, identity and kubeconfig
//! Secrets, and the crc-agent Job.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{
    EnvVar, KeyToPath, PodSpec, PodTemplateSpec, Secret, SecretVolumeSource, Service,
    ServiceAccount, ServicePort, ServiceSpec, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::{
    agent_account_name, agent_binding_name, agent_job_name, agent_role_name, api_route_name,
    api_service_name, boot_key_secret_name, guest_key_secret_name, guest_policy_name,
    handoff_secret_name, identity_secret_name, instance_labels, kubeconfig_secret_name, owned_meta,
    root_disk_name,
};
use crate::api::ClusterInstance;
use crate::api::labels;
use crate::cdi::{
    DataVolume, DataVolumeSourceSpec, DataVolumeSpec, HttpSource, PvcSource, StorageResources,
    StorageSpec,
};
use crate::contract::agent;
use crate::kubevirt;
use crate::resources::common::{JobResources, PodUsers, job_container, restricted_pod, tmp_volume};
use crate::route::{
    InsecureEdgeTerminationPolicy, Route, RoutePort, RouteSpec, RouteTargetReference, TlsConfig,
    TlsTermination,
};

/// Port (and Service port name) of the guest API.
pub const API_PORT: i32 = 6443;
pub const API_PORT_NAME: &str = "api";
/// Route weight of the API Service.
pub const API_ROUTE_WEIGHT: i32 = 100;

/// Key of the private key in the boot-key copy (and the file name the agent reads).
pub const BOOT_KEY_DATA_KEY: &str = "id_ecdsa";
/// Keys of the guest key Secret (type `kubernetes.io/ssh-auth`): the OpenSSH private key and its
/// `authorized_keys` line.
pub const GUEST_KEY_PRIVATE: &str = "ssh-privatekey";
pub const GUEST_KEY_PUBLIC: &str = "ssh-publickey";
/// Keys of the identity Secret.
pub const IDENTITY_KEYS: [&str; 5] = [
    "client-ca.crt",
    "client.crt",
    "client.key",
    "serving.crt",
    "serving.key",
];
/// Keys of the published kubeconfig Secret: those of the agent's handoff Secret it is made from
/// (which also has `vmiUID`).
pub use crate::contract::agent::{KUBECONFIG_KEY, OCP_VERSION_KEY, VMI_UID_KEY};
/// The pull secret's key.
pub const PULL_SECRET_KEY: &str = ".dockerconfigjson";

/// crc-agent Job limits (upstream: backoffLimit 2, 45 min).
pub const AGENT_BACKOFF_LIMIT: i32 = 2;
pub const AGENT_DEADLINE_SECONDS: i64 = 2700;
/// The agent's container name.
pub const AGENT_CONTAINER: &str = "crc-agent";
/// Where the agent Job mounts its Secrets.
pub const AGENT_PULL_SECRET_DIR: &str = "/etc/crc-agent/pull-secret";
pub const AGENT_SSH_DIR: &str = "/etc/crc-agent/ssh";
pub const AGENT_IDENTITY_DIR: &str = "/etc/crc-agent/identity";
pub const AGENT_GUEST_KEY_DIR: &str = "/etc/crc-agent/guest-key";

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The agent's rules for the instance's VMI `vmi_uid`, by name: watch that VMI, create its
/// handoff Secret and read and update it. Nothing else: not the identity, the key copy or any
/// other instance's Secrets, which its pod gets as volumes or never needs. (`create` cannot be
/// limited by name in RBAC; the handoff the operator accepts must name the instance and the VMI
/// and be controlled by the instance, so a created Secret of another name is ignored.)
fn agent_rules(instance: &str, vmi_uid: &str) -> Vec<PolicyRule> {
    vec![
        PolicyRule {
            api_groups: Some(strings(&[kubevirt::GROUP])),
            resources: Some(strings(&["virtualmachineinstances"])),
            resource_names: Some(vec![instance.to_owned()]),
            verbs: strings(&["get", "list", "watch"]),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(strings(&[""])),
            resources: Some(strings(&["secrets"])),
            verbs: strings(&["create"]),
            ..Default::default()
        },
        PolicyRule {
            api_groups: Some(strings(&[""])),
            resources: Some(strings(&["secrets"])),
            resource_names: Some(vec![handoff_secret_name(instance, vmi_uid)]),
            verbs: strings(&["get", "update"]),
            ..Default::default()
        },
    ]
}

/// The agent's Role for VMI `vmi_uid`, in the instance namespace, owned by the instance.
pub fn agent_role(instance: &ClusterInstance, vmi_uid: &str) -> Role {
    let name = instance.name_any();
    Role {
        metadata: owned_meta(instance, &agent_role_name(&name)),
        rules: Some(agent_rules(&name, vmi_uid)),
    }
}

/// Whether two rule lists grant the same (order of rules and of the entries within a rule
/// aside).
pub fn rules_match(existing: &[PolicyRule], wanted: &[PolicyRule]) -> bool {
    type Normal = (
        BTreeSet<String>,
        BTreeSet<String>,
        BTreeSet<String>,
        BTreeSet<String>,
        BTreeSet<String>,
    );
    fn normal(rules: &[PolicyRule]) -> Vec<Normal> {
        let set =
            |v: &Option<Vec<String>>| -> BTreeSet<String> { v.iter().flatten().cloned().collect() };
        let mut out: Vec<Normal> = rules
            .iter()
            .map(|r| {
                (
                    set(&r.api_groups),
                    set(&r.resources),
                    r.verbs.iter().cloned().collect(),
                    set(&r.resource_names),
                    set(&r.non_resource_urls),
                )
            })
            .collect();
        out.sort();
        out
    }
    normal(existing) == normal(wanted)
}

/// The instance's agent ServiceAccount `<prefix>-crc-agent-<h12>`.
pub fn agent_service_account(instance: &ClusterInstance) -> ServiceAccount {
    ServiceAccount {
        metadata: owned_meta(instance, &agent_account_name(&instance.name_any())),
        ..Default::default()
    }
}

/// The RoleBinding of the agent ServiceAccount to its Role, in the instance namespace.
pub fn agent_role_binding(instance: &ClusterInstance) -> RoleBinding {
    let name = instance.name_any();
    RoleBinding {
        metadata: owned_meta(instance, &agent_binding_name(&name)),
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".to_owned()),
            kind: "Role".to_owned(),
            name: agent_role_name(&name),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: agent_account_name(&name),
            namespace: instance.namespace(),
            api_group: None,
        }]),
    }
}

fn opaque_secret(
    instance: &ClusterInstance,
    name: &str,
    data: BTreeMap<String, ByteString>,
) -> Secret {
    Secret {
        metadata: owned_meta(instance, name),
        type_: Some("Opaque".to_owned()),
        data: Some(data),
        ..Default::default()
    }
}

/// The instance-owned copy of the bundle's SSH key, `<instance>-crc-boot-key` (key `id_ecdsa`).
pub fn boot_key_copy(instance: &ClusterInstance, key: &[u8]) -> Secret {
    opaque_secret(
        instance,
        &boot_key_secret_name(&instance.name_any()),
        BTreeMap::from([(BOOT_KEY_DATA_KEY.to_owned(), ByteString(key.to_vec()))]),
    )
}

/// The guest key Secret `<instance>-crc-guest-key` (type `kubernetes.io/ssh-auth`): the key the
/// crc-agent leaves as the only one the guest authorizes.
pub fn guest_key_secret(
    instance: &ClusterInstance,
    private_openssh: &str,
    public_line: &str,
) -> Secret {
    let data = BTreeMap::from([
        (
            GUEST_KEY_PRIVATE.to_owned(),
            ByteString(private_openssh.as_bytes().to_vec()),
        ),
        (
            GUEST_KEY_PUBLIC.to_owned(),
            ByteString(public_line.as_bytes().to_vec()),
        ),
    ]);
    Secret {
        type_: Some("kubernetes.io/ssh-auth".to_owned()),
        ..opaque_secret(instance, &guest_key_secret_name(&instance.name_any()), data)
    }
}

/// The identity Secret `<instance>-crc-identity` (keys [`IDENTITY_KEYS`], content from
/// `crate::identity`).
pub fn identity_secret(instance: &ClusterInstance, data: BTreeMap<String, ByteString>) -> Secret {
    opaque_secret(instance, &identity_secret_name(&instance.name_any()), data)
}

/// The published kubeconfig `<instance>-kubeconfig` (keys `kubeconfig`, `ocpVersion`).
pub fn kubeconfig_secret(
    instance: &ClusterInstance,
    kubeconfig: &[u8],
    ocp_version: &str,
) -> Secret {
    opaque_secret(
        instance,
        &kubeconfig_secret_name(&instance.name_any()),
        BTreeMap::from([
            (KUBECONFIG_KEY.to_owned(), ByteString(kubeconfig.to_vec())),
            (
                OCP_VERSION_KEY.to_owned(),
                ByteString(ocp_version.as_bytes().to_vec()),
            ),
        ]),
    )
}

/// Where the root disk's content comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RootDiskSource {
    /// Turnkey: clone the bundle's golden PVC (across namespaces).
    Pvc { namespace: String, name: String },
    /// Manual path: import `template.releaseImage`.
    Http { url: String },
}

/// The root DataVolume `<instance>-rootdisk` (create-only): `spec.storage` with only the size and
/// the StorageClass (CDI's StorageProfile picks access and volume modes) and no annotations, so
/// CDI chooses CSI clone, snapshot or host-assisted copy.
pub fn root_data_volume(
    instance: &ClusterInstance,
    source: RootDiskSource,
    size: Quantity,
    storage_class: Option<String>,
) -> DataVolume {
    let source = match source {
        RootDiskSource::Pvc { namespace, name } => DataVolumeSourceSpec {
            pvc: Some(PvcSource { namespace, name }),
            ..Default::default()
        },
        RootDiskSource::Http { url } => DataVolumeSourceSpec {
            http: Some(HttpSource { url }),
            ..Default::default()
        },
    };
    DataVolume {
        metadata: owned_meta(instance, &root_disk_name(&instance.name_any())),
        spec: DataVolumeSpec {
            source: Some(source),
            storage: Some(StorageSpec {
                resources: Some(StorageResources {
                    requests: BTreeMap::from([("storage".to_owned(), size)]),
                }),
                storage_class_name: storage_class.filter(|s| !s.is_empty()),
                access_modes: None,
                volume_mode: None,
            }),
        },
        status: None,
    }
}

/// The ClusterIP Service `<instance>-crc-api`: port `api` 6443 of the VM's launcher pod.
pub fn api_service(instance: &ClusterInstance, vm_name: &str) -> Service {
    Service {
        metadata: owned_meta(instance, &api_service_name(&instance.name_any())),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(BTreeMap::from([(
                labels::VM.to_owned(),
                vm_name.to_owned(),
            )])),
            ports: Some(vec![ServicePort {
                name: Some(API_PORT_NAME.to_owned()),
                protocol: Some("TCP".to_owned()),
                port: API_PORT,
                target_port: Some(IntOrString::Int(API_PORT)),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    }
}

/// The namespaces whose pods may reach a guest's API port: OpenShift labels its router's
/// namespace so (`openshift-ingress`), and a passthrough Route is the only way in we publish.
pub const ROUTER_NAMESPACE_LABEL: (&str, &str) = ("network.openshift.io/policy-group", "ingress");
/// The guest's SSH port.
pub const SSH_PORT: i32 = 22;

/// The NetworkPolicy around the guest of `vm_name` (its virt-launcher pod): SSH only from the
/// instance's own crc-agent pods, the API only from the router's namespace, nothing else.
pub fn guest_network_policy(instance: &ClusterInstance, vm_name: &str) -> NetworkPolicy {
    let name = instance.name_any();
    let port = |port: i32| NetworkPolicyPort {
        protocol: Some("TCP".to_owned()),
        port: Some(IntOrString::Int(port)),
        ..Default::default()
    };
    let agent_pods = BTreeMap::from([
        (labels::CLUSTER_INSTANCE.to_owned(), name.clone()),
        (
            labels::COMPONENT.to_owned(),
            labels::COMPONENT_CRC_AGENT.to_owned(),
        ),
    ]);
    let (router_key, router_value) = ROUTER_NAMESPACE_LABEL;
    NetworkPolicy {
        metadata: owned_meta(instance, &guest_policy_name(&name)),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    labels::VM.to_owned(),
                    vm_name.to_owned(),
                )])),
                ..Default::default()
            }),
            policy_types: Some(vec!["Ingress".to_owned()]),
            ingress: Some(vec![
                NetworkPolicyIngressRule {
                    ports: Some(vec![port(SSH_PORT)]),
                    from: Some(vec![NetworkPolicyPeer {
                        pod_selector: Some(LabelSelector {
                            match_labels: Some(agent_pods),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                },
                NetworkPolicyIngressRule {
                    ports: Some(vec![port(API_PORT)]),
                    from: Some(vec![NetworkPolicyPeer {
                        namespace_selector: Some(LabelSelector {
                            match_labels: Some(BTreeMap::from([(
                                router_key.to_owned(),
                                router_value.to_owned(),
                            )])),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                },
            ]),
            ..Default::default()
        }),
    }
}

/// The passthrough Route `<instance>-crc-api` for `host` to the API Service. Labelled with the
/// instance namespace as well, so a Route event can be mapped back to its instance.
pub fn api_route(instance: &ClusterInstance, host: &str) -> Route {
    let name = instance.name_any();
    let mut metadata = owned_meta(instance, &api_route_name(&name));
    metadata.labels.get_or_insert_default().insert(
        labels::CLUSTER_INSTANCE_NAMESPACE.to_owned(),
        instance.namespace().unwrap_or_default(),
    );
    Route {
        metadata,
        spec: RouteSpec {
            host: Some(host.to_owned()),
            to: RouteTargetReference {
                kind: "Service".to_owned(),
                name: api_service_name(&name),
                weight: Some(API_ROUTE_WEIGHT),
            },
            port: Some(RoutePort {
                target_port: IntOrString::String(API_PORT_NAME.to_owned()),
            }),
            tls: Some(TlsConfig {
                termination: TlsTermination::Passthrough,
                insecure_edge_termination_policy: Some(InsecureEdgeTerminationPolicy::None),
            }),
        },
        status: None,
    }
}

/// What the crc-agent Job of one VMI needs besides the instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AgentJobInputs {
    /// The image holding the agent (`CRC_AGENT_IMAGE`).
    pub image: String,
    /// Who the Job's pod runs as (`--platform`).
    pub pod_users: PodUsers,
    /// The VMI this Job serves; part of the Job name.
    pub vmi_uid: String,
    /// The VirtualMachine (and VMI) name.
    pub vm_name: String,
    /// The VMI's IP: where the guest's SSH server listens.
    pub ssh_host: String,
    /// The Route host the guest API is served under.
    pub api_hostname: String,
    /// The pull Secret (whole Secret mounted; key `.dockerconfigjson`).
    pub pull_secret_name: String,
    /// The Secret with the guest's SSH key: the boot-key copy (turnkey) or `bundleSSHKeyRef`
    /// (manual).
    pub ssh_key_secret_name: String,
    /// The key of the private key in that Secret (`id_ecdsa`, `ssh-privatekey` or `id_rsa`);
    /// mounted as the file `id_ecdsa`.
    pub ssh_key_data_key: String,
}

/// The crc-agent Job of one VMI, `<prefix>-crc-agent-<h12(vmiUID)>`: `guestcluster agent` with
/// the pull secret, the SSH key and the identity mounted read-only, as the instance's agent
/// ServiceAccount.
pub fn agent_job(instance: &ClusterInstance, inputs: &AgentJobInputs) -> Job {
    let name = instance.name_any();
    let namespace = instance.namespace().unwrap_or_default();
    let uid = instance.metadata.uid.clone().unwrap_or_default();
    let env = [
        (agent::ENV_INSTANCE_NAME, name.as_str()),
        (agent::ENV_INSTANCE_NAMESPACE, namespace.as_str()),
        (agent::ENV_INSTANCE_UID, uid.as_str()),
        (agent::ENV_VM_NAME, inputs.vm_name.as_str()),
        (agent::ENV_SSH_HOST, inputs.ssh_host.as_str()),
        (agent::ENV_VMI_UID, inputs.vmi_uid.as_str()),
        (
            agent::ENV_SSH_KEY_PATH,
            &format!("{AGENT_SSH_DIR}/{BOOT_KEY_DATA_KEY}"),
        ),
        (
            agent::ENV_GUEST_KEY_PATH,
            &format!("{AGENT_GUEST_KEY_DIR}/{GUEST_KEY_PRIVATE}"),
        ),
        (agent::ENV_IDENTITY_PATH, AGENT_IDENTITY_DIR),
        (
            agent::ENV_PULL_SECRET_PATH,
            &format!("{AGENT_PULL_SECRET_DIR}/{PULL_SECRET_KEY}"),
        ),
        (agent::ENV_API_HOSTNAME, inputs.api_hostname.as_str()),
    ]
    .into_iter()
    .map(|(name, value)| EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        ..Default::default()
    })
    .collect();
    let secret_volume = |volume: &str, secret: &str, items: Option<Vec<KeyToPath>>| Volume {
        name: volume.to_owned(),
        secret: Some(SecretVolumeSource {
            secret_name: Some(secret.to_owned()),
            items,
            ..Default::default()
        }),
        ..Default::default()
    };
    let only = |key: &str, path: &str| {
        Some(vec![KeyToPath {
            key: key.to_owned(),
            path: path.to_owned(),
            ..Default::default()
        }])
    };
    // The bundle key is optional: once the guest authorizes only the instance key, the
    // operator deletes the instance's copy and the agent does without it.
    let mut bundle_key = secret_volume(
        "bundle-ssh-key",
        &inputs.ssh_key_secret_name,
        only(&inputs.ssh_key_data_key, BOOT_KEY_DATA_KEY),
    );
    if let Some(secret) = bundle_key.secret.as_mut() {
        secret.optional = Some(true);
    }
    let mount = |volume: &str, path: &str| VolumeMount {
        name: volume.to_owned(),
        mount_path: path.to_owned(),
        read_only: Some(true),
        ..Default::default()
    };
    let mut labels = instance_labels(&name);
    labels.insert(
        labels::COMPONENT.to_owned(),
        labels::COMPONENT_CRC_AGENT.to_owned(),
    );
    Job {
        metadata: owned_meta(instance, &agent_job_name(&name, &inputs.vmi_uid)),
        spec: Some(JobSpec {
            backoff_limit: Some(AGENT_BACKOFF_LIMIT),
            active_deadline_seconds: Some(AGENT_DEADLINE_SECONDS),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    service_account_name: Some(agent_account_name(&name)),
                    security_context: Some(restricted_pod(inputs.pod_users, &[])),
                    containers: vec![job_container(
                        AGENT_CONTAINER,
                        &inputs.image,
                        "agent",
                        env,
                        vec![
                            mount("pull-secret", AGENT_PULL_SECRET_DIR),
                            mount("bundle-ssh-key", AGENT_SSH_DIR),
                            mount("guest-key", AGENT_GUEST_KEY_DIR),
                            mount("identity", AGENT_IDENTITY_DIR),
                        ],
                        JobResources::LIGHT,
                    )],
                    volumes: Some(vec![
                        secret_volume("pull-secret", &inputs.pull_secret_name, None),
                        bundle_key,
                        secret_volume(
                            "guest-key",
                            &guest_key_secret_name(&name),
                            only(GUEST_KEY_PRIVATE, GUEST_KEY_PRIVATE),
                        ),
                        secret_volume("identity", &identity_secret_name(&name), None),
                        tmp_volume(),
                    ]),
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        status: None,
    }
}
