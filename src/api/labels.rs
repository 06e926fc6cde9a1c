//! Label, annotation and finalizer keys. These strings are the compatibility contract with the
//! existing Go operator: users and tooling select on them.

/// Marks every object the operator creates; value [`MANAGED_BY_OPERATOR`].
pub const MANAGED_BY: &str = "opdev.io/managed-by";
/// Value of [`MANAGED_BY`] on operator-created objects.
pub const MANAGED_BY_OPERATOR: &str = "guestcluster-operator";
/// Value of [`MANAGED_BY`] on the handoff Secret written by the crc-agent.
pub const MANAGED_BY_AGENT: &str = "crc-agent";
/// Name of the ClusterInstance an object belongs to.
pub const CLUSTER_INSTANCE: &str = "opdev.io/cluster-instance";
/// Namespace of the ClusterInstance an object belongs to (for objects in other namespaces).
pub const CLUSTER_INSTANCE_NAMESPACE: &str = "opdev.io/cluster-instance-namespace";
/// On an instance's crc-agent pods (value [`COMPONENT_CRC_AGENT`]) and a build's Job pods (the
/// `COMPONENT_BUILD_*` values): the pods a guest's NetworkPolicy lets reach its SSH port are the
/// crc-agent's and the build helper's.
pub const COMPONENT: &str = "opdev.io/component";
pub const COMPONENT_CRC_AGENT: &str = "crc-agent";
pub const COMPONENT_BUILD_INSTALLER: &str = "build-installer";
pub const COMPONENT_BUILD_HELPER: &str = "build-helper";
pub const COMPONENT_BUILD_DISK: &str = "build-disk";
/// On every VirtualMachine the operator makes and its template: the VM's name. KubeVirt copies a
/// template's labels to each VMI and its virt-launcher pod, but labels the pod
/// `vm.kubevirt.io/name=<the guest's hostname>` (every CRC guest is `crc`), so the operator's
/// Services, NetworkPolicies and lookups find a VM's launcher pod by this label instead.
pub const VM: &str = "guestcluster.opdev.io/vm";
/// Name of the ClusterPool an instance belongs to.
pub const POOL: &str = "opdev.io/pool";
/// Name of the CRCBundle an object belongs to.
pub const CRC_BUNDLE: &str = "opdev.io/crc-bundle";
/// On a CRCBundle the operator created for ClusterPools (value [`CREATED_FOR_POOLS`]): it is
/// removed once no pool or instance refers to it for the grace the operator is configured with.
pub const CREATED_FOR: &str = "guestcluster.opdev.io/created-for";
pub const CREATED_FOR_POOLS: &str = "clusterpools";
/// Attempt id of the bundle build that created a temporary object.
pub const BUILD_ATTEMPT: &str = "guestcluster.opdev.io/build-attempt";

/// On a Secret or ConfigMap of the operator namespace: the CRCBundle that may use it as a build
/// input (its pull secret, its manifests), or [`BUILD_INPUT_ALL`] for every bundle. An object
/// without it is no build's input, whatever a bundle names.
pub const BUILD_INPUT: &str = "guestcluster.opdev.io/build-input";
/// Value of [`BUILD_INPUT`]: every CRCBundle may use the object.
pub const BUILD_INPUT_ALL: &str = "all";

/// Namespace label that allows pools and instances in the namespace (value `"true"`).
pub const NAMESPACE_ENABLED: &str = "guestcluster.opdev.io/enabled";
/// Annotation on a CRCBundle: any new value requests a new build attempt of the same recipe.
pub const RETRY_ANNOTATION: &str = "guestcluster.opdev.io/retry";

/// Finalizer on ClusterInstances: ordered teardown of the backing objects.
pub const FINALIZER_CLEANUP: &str = "guestcluster.opdev.io/cleanup";
/// Finalizer on ClusterLeases: release of the bound instance.
pub const FINALIZER_RELEASE: &str = "guestcluster.opdev.io/release";
/// Finalizer on build-sourced CRCBundles: stop Jobs and VMs before storage is deleted.
pub const FINALIZER_BUILD: &str = "guestcluster.opdev.io/build-cleanup";

/// Field manager for every server-side apply the operator performs.
pub const FIELD_MANAGER: &str = "guestcluster-operator";
