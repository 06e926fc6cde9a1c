//! What a CRC pass does next: a pure function from the instance, its status and what the pass
//! [observed](crate::actors::instance::crc::observe::Observed) to the actions to take and the status to record.
//!
//! The walk follows the backing in creation order and stops at the first thing not there yet:
//!
//! ```text
//! identity of VM/DV ─ VMI replaced? ─ pull secret ─ boot key (bind → copy) ─ DataVolume ─ VM
//!   ─ VM ready, VMI running ─ agent RBAC ─ Service ─ Route (host) ─ identity Secret
//!   ─ handoff? else agent Job + diagnosis ─ /readyz through the Route ─ kubeconfig → Ready
//! ```
//!
//! Creates that nothing later in the same pass depends on are planned and the walk goes on; what
//! must be durable before an object exists (the boot-key binding before any disk, the API
//! endpoint before the Route, the VMI UID before its agent Job) ends the walk with only the
//! status change, so the write lands before the create of the next pass.

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{PolicyRule, Role, RoleBinding, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{Resource, ResourceExt};

use crate::actors::instance::crc::inputs::{
    bundle_name, instance_keyed, is_manual, pull_secret_name,
};
use crate::actors::instance::crc::observe::Observed;
use crate::actors::instance::crc::{agent, boot_key};
use crate::api::bundle::{BundlePhase, CRCBundle};
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{
    CRCBackingStatus, CRCBootKeyStatus, ClusterInstance, ClusterInstanceStatus, InstancePhase,
};
use crate::cdi::DataVolume;
use crate::guest::kubeconfig::Kubeconfig;
use crate::identity::{self, Identity};
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::resources::common::is_controlled_by;
use crate::resources::instance::{self as res, AgentJobInputs, RootDiskSource, VmProfile};
use crate::route::Route;
use disk::disk_progress;

/// How soon a provisioning instance looks again when what it waits for is not watched (20 s, as
/// upstream polls): a user's pull secret or `bundleSSHKeyRef` Secret, the bundle's golden PVC and
/// key Secret, the cluster ingress config, another owner's conflicting object, the agent's pods
/// and Events. Waits for what is watched (the bundle, the DataVolume, VM, VMI, the agent Job and
/// handoff Secret) have no timer: their watch events wake the instance.
pub const UNWATCHED_RECHECK: Duration = Duration::from_secs(20);
/// After a write-ahead status change: look again as soon as it has landed (200 ms; the status
/// write's own watch event usually comes first).
pub const AFTER_RECORD: Duration = Duration::from_millis(200);
/// How soon a failed readiness probe is repeated: the guest API restarts once more for its
/// named certificate right around the handoff.
pub const PROBE_RETRY: Duration = Duration::from_secs(5);
/// CDI's default filesystem overhead; the volume mode is CDI's choice, so assume Filesystem.
pub const FILESYSTEM_OVERHEAD: f64 = 0.055;
/// Keys a manual-path `bundleSSHKeyRef` Secret may hold the key under, first found wins.
pub const MANUAL_KEY_NAMES: [&str; 3] = ["id_ecdsa", "ssh-privatekey", "id_rsa"];

/// Operator settings the plan builds with.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Image of the crc-agent Job.
    pub job_image: String,
    pub pod_users: crate::resources::common::PodUsers,
}

/// Everything a plan is made from.
pub struct Input<'a> {
    pub instance: &'a ClusterInstance,
    /// The status as the gates left it this pass.
    pub status: &'a ClusterInstanceStatus,
    pub observed: &'a Observed,
    pub now: Time,
    pub settings: &'a Settings,
}

/// The next actions, the status to record once they succeeded, and where the walk ended.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub status: ClusterInstanceStatus,
    pub end: End,
}

/// Where the walk ended.
#[derive(Clone, Debug, PartialEq)]
pub enum End {
    /// Everything is in place: Ready.
    Ready,
    /// Stopped before Ready.
    Stop(Stop),
    /// Everything before the readiness probe is in place and the probe has not run: run it
    /// through the Route with this kubeconfig, put the result into
    /// [`Observed::probe`](crate::actors::instance::crc::observe::Observed::probe) and plan again.
    Probe { kubeconfig: Vec<u8> },
}

/// Why a walk stopped before Ready: the `Ready=False` reason and message, whether the instance
/// is `Failed` (still retried: Failed is not terminal upstream), and when to look again (`None`:
/// when a watch event says what it waits for changed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stop {
    pub reason: &'static str,
    pub message: String,
    pub failed: bool,
    pub requeue: Option<Duration>,
}

impl Stop {
    /// Waiting for something that is not watched: look again after [`UNWATCHED_RECHECK`].
    fn pending(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            failed: false,
            requeue: Some(UNWATCHED_RECHECK),
        }
    }

    /// Waiting for something watched (the bundle, an owned object, the VMI): no timer.
    fn watched(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            requeue: None,
            ..Self::pending(reason, message)
        }
    }

    /// Failed: upstream retries, and the cause (a Secret, a conflicting object) is mostly not
    /// watched, so after [`UNWATCHED_RECHECK`].
    fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            failed: true,
            ..Self::pending(reason, message)
        }
    }

    /// Failed on a user's Secret (the pull secret, `bundleSSHKeyRef`): Secrets in the
    /// instance's namespace are watched by name (metadata only), so creating or fixing it wakes
    /// the instance; no timer.
    fn failed_on_secret(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            requeue: None,
            ..Self::failed(reason, message)
        }
    }

    /// A write-ahead status change that must land before the next create.
    fn recorded(message: impl Into<String>) -> Self {
        Self {
            requeue: Some(AFTER_RECORD),
            ..Self::pending(reasons::CRC_BACKING_PENDING, message)
        }
    }
}

/// One API write (or Event) of a pass, performed in order by [`crate::actors::instance::crc::act`].
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// Create this object (an existing one is fine: the next pass looks at it).
    Create(New),
    /// Generate the instance's client CA, client and serving certificates for `host` and create
    /// the identity Secret (key generation is not a decision, so it happens in `act`).
    CreateIdentity { host: String },
    /// Generate the instance's ed25519 guest key and create its Secret (generation happens in
    /// `act`, like the identity's).
    CreateGuestKey,
    /// Delete an object the instance controls, with its UID as precondition.
    Delete(Delete),
    /// Bring the agent's Role to these rules.
    RepairRole {
        name: String,
        rules: Vec<PolicyRule>,
    },
    /// Put the agent's subjects back into its RoleBinding.
    RepairRoleBinding {
        name: String,
        subjects: Vec<Subject>,
    },
    /// Bring `<instance>-kubeconfig` to this content (owner, labels, data).
    UpdateKubeconfig(Box<Secret>),
    /// A Warning Event about the instance.
    Warn {
        reason: &'static str,
        message: String,
    },
}

/// A new object of a pass.
#[derive(Clone, Debug, PartialEq)]
pub enum New {
    Secret(Box<Secret>),
    DataVolume(Box<DataVolume>),
    VirtualMachine(Box<VirtualMachine>),
    Role(Box<Role>),
    NetworkPolicy(Box<NetworkPolicy>),
    ServiceAccount(Box<ServiceAccount>),
    RoleBinding(Box<RoleBinding>),
    Service(Box<Service>),
    Route(Box<Route>),
    Job(Box<Job>),
}

/// An object to delete, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delete {
    pub kind: DeleteKind,
    pub name: String,
    pub uid: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteKind {
    /// A crc-agent Job, in the foreground: it stays until its pods are gone.
    AgentJob,
    /// A Secret.
    Secret,
    /// The agent's RoleBinding.
    RoleBinding,
}

/// The next step of the CRC backing of `input.instance`.
pub fn plan(input: &Input<'_>) -> Plan {
    let mut walk = Walk::new(input);
    let end = match walk.run() {
        Ok(end) => end,
        Err(stop) => {
            walk.record_stop(&stop);
            End::Stop(stop)
        }
    };
    walk.record_freshness();
    Plan {
        actions: walk.actions,
        status: walk.status,
        end,
    }
}

/// A step hands on a value or stops the walk.
type Flow<T> = Result<T, Stop>;

/// The guest's disk key, as the agent Job mounts it.
struct BootKey {
    secret: String,
    data_key: String,
}

/// Where the root disk comes from.
struct DiskSource {
    key: BootKey,
    disk: RootDiskSource,
    storage_class: Option<String>,
}

struct Walk<'a> {
    instance: &'a ClusterInstance,
    o: &'a Observed,
    now: Time,
    settings: &'a Settings,
    name: String,
    ns: String,
    uid: String,
    status: ClusterInstanceStatus,
    actions: Vec<Action>,
}

impl<'a> Walk<'a> {
    fn new(input: &Input<'a>) -> Self {
        let instance = input.instance;
        Self {
            instance,
            o: input.observed,
            now: input.now.clone(),
            settings: input.settings,
            name: instance.name_any(),
            ns: instance.namespace().unwrap_or_default(),
            uid: instance.uid().unwrap_or_default(),
            status: input.status.clone(),
            actions: Vec::new(),
        }
    }

    fn crc(&mut self) -> &mut CRCBackingStatus {
        self.status.crc.get_or_insert_with(Default::default)
    }

    /// Whether the observed root disk's guest authorizes only the instance key.
    fn keyed(&self) -> bool {
        self.status
            .crc
            .as_ref()
            .is_some_and(|crc| instance_keyed(crc, self.o.data_volume.as_ref()))
    }

    fn binding(&self) -> Option<&CRCBootKeyStatus> {
        self.status.crc.as_ref().and_then(|c| c.boot_key.as_ref())
    }

    fn condition(&mut self, type_: &str, status: &str, reason: &str, message: &str) {
        let mut cond = conditions::new(
            type_,
            status == "True",
            reason,
            message,
            self.instance.metadata.generation,
            self.now.clone(),
        );
        cond.status = status.to_owned();
        conditions::set(&mut self.status.conditions, cond);
    }

    fn record_stop(&mut self, stop: &Stop) {
        self.status.phase = Some(if stop.failed {
            InstancePhase::Failed
        } else {
            InstancePhase::Provisioning
        });
        self.condition(types::READY, "False", stop.reason, &stop.message);
    }

    fn controlled<K: Resource>(&self, obj: &K) -> bool {
        is_controlled_by(obj, &self.uid)
    }

    fn conflict<K: Resource<DynamicType = ()>>(&self, obj: &K) -> Stop {
        Stop::failed(
            reasons::RESOURCE_OWNERSHIP_CONFLICT,
            format!(
                "{} {}/{} exists but is not controlled by ClusterInstance {}; delete or rename it",
                K::kind(&()),
                self.ns,
                obj.meta().name.as_deref().unwrap_or_default(),
                self.name
            ),
        )
    }

    fn create(&mut self, new: New) {
        self.actions.push(Action::Create(new));
    }

    fn run(&mut self) -> Flow<End> {
        let o = self.o;
        let crc = self.status.crc.clone().unwrap_or_default();
        let vm_name = crc.vm_name.unwrap_or_else(|| res::vm_name(&self.name));
        let dv_name = crc
            .data_volume_name
            .unwrap_or_else(|| res::root_disk_name(&self.name));

        // Backing identity: the VM and DataVolume must be ours; their UIDs are kept for teardown.
        if let Some(vm) = &o.vm {
            if !self.controlled(vm) {
                return Err(self.conflict(vm));
            }
            self.crc().vm_uid = vm.uid();
        }
        if let Some(dv) = &o.data_volume {
            if !self.controlled(dv) {
                return Err(self.conflict(dv));
            }
            self.crc().data_volume_uid = dv.uid();
        }
        self.check_vmi_identity()?;

        let pull_secret = self.pull_secret()?;
        let source = if is_manual(self.instance) {
            self.manual_source()?
        } else {
            self.turnkey_source(&vm_name, &dv_name)?
        };
        let Some(dv) = &o.data_volume else {
            self.create_data_volume(&dv_name, source.disk, source.storage_class)?;
            return Err(Stop::recorded(format!("creating DataVolume {dv_name}")));
        };
        self.check_data_volume(dv)?;
        let Some(vm) = &o.vm else {
            self.create_vm(&vm_name, &dv_name)?;
            return Err(Stop::recorded(format!("creating VirtualMachine {vm_name}")));
        };
        let (vmi_uid, vmi_ip) = self.running_vmi(vm, o.vmi.as_ref(), dv)?;

        self.agent_access(&vmi_uid)?;
        match &o.service {
            None => {
                let service = res::api_service(self.instance, &vm_name);
                self.create(New::Service(Box::new(service)));
            }
            // A Service of that name selects pods for the Route; someone else's is not ours to
            // point the guest API at.
            Some(service) if !self.controlled(service) => return Err(self.conflict(service)),
            Some(_) => {}
        }
        match &o.network_policy {
            None => {
                let policy = res::guest_network_policy(self.instance, &vm_name);
                self.create(New::NetworkPolicy(Box::new(policy)));
            }
            Some(policy) if !self.controlled(policy) => return Err(self.conflict(policy)),
            Some(_) => {}
        }
        let host = self.ensure_route()?;
        let identity = self.ensure_identity(&host)?;
        self.ensure_guest_key()?;

        let handoff_name = res::handoff_secret_name(&self.name, &vmi_uid);
        let handoff = o
            .handoff
            .as_ref()
            .and_then(|s| agent::accept_handoff(s, &self.uid, &vmi_uid));
        let Some(handoff) = handoff else {
            let inputs = AgentJobInputs {
                image: self.settings.job_image.clone(),
                pod_users: self.settings.pod_users,
                vmi_uid,
                vm_name,
                ssh_host: vmi_ip,
                api_hostname: host,
                pull_secret_name: pull_secret,
                ssh_key_secret_name: source.key.secret,
                ssh_key_data_key: source.key.data_key,
            };
            return Err(self.agent(&inputs));
        };
        self.condition(
            types::CRC_AGENT,
            "True",
            reasons::HANDOFF_RECEIVED,
            &format!("the crc-agent published {handoff_name}"),
        );
        // The agent publishes only after revoking the bundle key: this disk's guest now opens
        // to the instance key alone, and the next pass lets the copy of the bundle key go.
        let dv_uid = o.data_volume.as_ref().and_then(|dv| dv.uid());
        if dv_uid.is_some() {
            self.crc().instance_key_data_volume_uid = dv_uid;
        }
        // The handoff says the guest is configured and which version it runs; the kubeconfig
        // is the operator's own, from the identity and the Route.
        let Some(identity) = identity else {
            return Err(Stop::recorded(format!(
                "creating identity Secret {}",
                res::identity_secret_name(&self.name)
            )));
        };
        let kubeconfig = Kubeconfig::for_route(&host, &identity)
            .to_yaml()
            .map_err(|e| Stop::failed(reasons::RECONCILE_ERROR, e.to_string()))?
            .into_bytes();
        match &o.probe {
            None => return Ok(End::Probe { kubeconfig }),
            Some(Err(err)) => {
                let message = format!("the guest API is not ready through its Route: {err}");
                self.condition(
                    types::GUEST_API_REACHABLE,
                    "False",
                    reasons::GUEST_API_UNAVAILABLE,
                    &message,
                );
                return Err(Stop {
                    requeue: Some(PROBE_RETRY),
                    ..Stop::pending(reasons::GUEST_API_UNAVAILABLE, message)
                });
            }
            Some(Ok(())) => self.condition(
                types::GUEST_API_REACHABLE,
                "True",
                reasons::GUEST_API_READY,
                &format!("GET https://{host}/readyz succeeded"),
            ),
        }
        self.publish_kubeconfig(&kubeconfig, &handoff.ocp_version)?;
        self.mark_ready(&handoff.ocp_version, &host);
        Ok(End::Ready)
    }

    /// A replaced or vanished VMI invalidates the handoff: the old agent Job and the published
    /// kubeconfig go, and the next pass starts over for the new VMI (keeping identity, Route and
    /// key, so the kubeconfig's CA and host stay valid).
    fn check_vmi_identity(&mut self) -> Flow<()> {
        let o = self.o;
        let recorded = self
            .status
            .crc
            .as_ref()
            .and_then(|c| c.vmi_uid.clone())
            .filter(|u| !u.is_empty());
        let live = o.vmi.as_ref().and_then(|v| v.uid());
        let running = is_running(o.vmi.as_ref());
        let was_ready = self.status.phase == Some(InstancePhase::Ready);
        let reason = match (&recorded, &live) {
            (Some(r), Some(l)) if r != l => reasons::VMI_REPLACED,
            _ if was_ready && (live.is_none() || !running) => reasons::VMI_UNAVAILABLE,
            _ => return Ok(()),
        };
        if let Some(job) = o
            .recorded_agent_job
            .as_ref()
            .filter(|j| self.controlled(*j))
        {
            self.actions.push(Action::Delete(Delete {
                kind: DeleteKind::AgentJob,
                name: job.name_any(),
                uid: job.uid().unwrap_or_default(),
            }));
        }
        if let Some(kubeconfig) = o.kubeconfig.as_ref().filter(|k| self.controlled(*k)) {
            self.actions.push(Action::Delete(Delete {
                kind: DeleteKind::Secret,
                name: kubeconfig.name_any(),
                uid: kubeconfig.uid().unwrap_or_default(),
            }));
        }
        let message = if reason == reasons::VMI_REPLACED {
            format!(
                "VirtualMachineInstance {} was replaced ({} → {}); the guest is configured again",
                self.name,
                recorded.as_deref().unwrap_or_default(),
                live.as_deref().unwrap_or_default()
            )
        } else {
            format!(
                "VirtualMachineInstance {} is not running; waiting for KubeVirt to start it again",
                self.name
            )
        };
        self.crc().vmi_uid = live.filter(|_| running);
        self.status.kubeconfig_secret_ref = None;
        conditions::remove(&mut self.status.conditions, types::CRC_AGENT);
        Err(Stop {
            requeue: Some(AFTER_RECORD),
            ..Stop::pending(reason, message)
        })
    }

    fn pull_secret(&self) -> Flow<String> {
        let name = pull_secret_name(self.instance);
        let ok = self
            .o
            .pull_secret
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(res::PULL_SECRET_KEY))
            .is_some_and(|ByteString(b)| !b.is_empty());
        if ok {
            return Ok(name);
        }
        Err(Stop::failed_on_secret(
            reasons::INVALID_PULL_SECRET,
            format!(
                "pull secret {ns}/{name} is missing or has no {key}: create it with \
                 `kubectl -n {ns} create secret generic {name} --type=kubernetes.io/dockerconfigjson \
                 --from-file=.dockerconfigjson=<file>`",
                ns = self.ns,
                key = res::PULL_SECRET_KEY,
            ),
        ))
    }

    fn create_vm(&mut self, vm_name: &str, dv_name: &str) -> Flow<()> {
        let profile = match self.binding() {
            None => VmProfile::CrcDownloadV0,
            Some(binding) => {
                let bundle = self.bound_bundle(binding).ok_or_else(|| {
                    Stop::pending(
                        reasons::BOOT_KEY_UNAVAILABLE,
                        format!(
                            "CRCBundle {} is gone or was recreated; its VM profile is unknown",
                            bundle_name(self.instance)
                        ),
                    )
                })?;
                VmProfile::of_bundle(bundle)
                    .map_err(|e| Stop::failed(reasons::RECONCILE_ERROR, e.to_string()))?
            }
        };
        let template = &self.instance.spec.template;
        let mut vm = res::virtual_machine(
            self.instance,
            profile,
            dv_name,
            &template.memory,
            template.cores,
            &template.vm_node_selector,
        );
        vm.metadata.name = Some(vm_name.to_owned());
        self.create(New::VirtualMachine(Box::new(vm)));
        Ok(())
    }

    /// The VM is ready and its VMI runs with an address: its UID and IP.
    fn running_vmi(
        &mut self,
        vm: &VirtualMachine,
        vmi: Option<&VirtualMachineInstance>,
        dv: &DataVolume,
    ) -> Flow<(String, String)> {
        let ready = vm.status.as_ref().is_some_and(|s| s.ready);
        // The VM and DataVolume (owned) and the VMI (labelled) wake the instance.
        let blocked = vmi
            .and_then(VirtualMachineInstance::start_blocker)
            .or_else(|| vm.start_failure());
        if let Some(blocked) = blocked.filter(|_| !ready) {
            return Err(Stop::watched(
                reasons::VM_START_BLOCKED,
                format!(
                    "KubeVirt cannot start VirtualMachine {}: {blocked}",
                    vm.name_any()
                ),
            ));
        }
        let Some(vmi) = vmi.filter(|v| ready && is_running(Some(v))) else {
            return Err(Stop::watched(
                reasons::CRC_BACKING_PENDING,
                format!(
                    "waiting for VirtualMachine {} to run ({}; root disk {}: {})",
                    vm.name_any(),
                    vm.status
                        .as_ref()
                        .and_then(|s| s.printable_status)
                        .map(|p| format!("{p:?}"))
                        .unwrap_or_else(|| "not started".into()),
                    dv.name_any(),
                    disk_progress(dv)
                ),
            ));
        };
        let uid = vmi.uid().unwrap_or_default();
        let ip = vmi
            .status
            .as_ref()
            .and_then(|s| s.interfaces.iter().find_map(|i| i.ip_address.clone()))
            .filter(|ip| !ip.is_empty());
        let Some(ip) = ip else {
            return Err(Stop::watched(
                reasons::CRC_BACKING_PENDING,
                format!(
                    "waiting for VirtualMachineInstance {} to report an IP",
                    vmi.name_any()
                ),
            ));
        };
        let crc = self.crc();
        crc.ssh_endpoint = Some(ip.clone());
        if crc.vmi_uid.as_deref().is_none_or(str::is_empty) {
            // Write-ahead: the agent Job is named after this VMI, so its UID is recorded before
            // the Job can exist; after a crash a replaced VMI still finds (and removes) its Job.
            crc.vmi_uid = Some(uid);
            return Err(Stop::recorded(format!(
                "VirtualMachineInstance {} runs at {ip}",
                vmi.name_any()
            )));
        }
        Ok((uid, ip))
    }

    /// `Stale`, once bound, whenever the bundle is Ready: whether it still publishes the disk
    /// this instance was cloned from (its pool replaces an idle stale instance).
    fn record_freshness(&mut self) {
        let (Some(binding), Some(bundle)) = (self.binding().cloned(), self.o.bundle.as_ref())
        else {
            return;
        };
        let short = |digest: &str| digest.chars().take(12).collect::<String>();
        let bundle_name = bundle.name_any();
        let (status, reason, message) = match boot_key::freshness(&binding, bundle) {
            None => return,
            Some(boot_key::Freshness::Current { digest }) => (
                "False",
                reasons::BUNDLE_CURRENT,
                format!(
                    "cloned from disk {} of CRCBundle {bundle_name}, which it still publishes",
                    short(&digest)
                ),
            ),
            Some(boot_key::Freshness::Stale { bound, published }) => (
                "True",
                reasons::BUNDLE_REBUILT,
                format!(
                    "cloned from disk {} of CRCBundle {bundle_name}, which now publishes disk {}; \
                     delete this instance for one from the current disk (its pool replaces it once idle)",
                    short(&bound),
                    short(&published)
                ),
            ),
        };
        self.condition(types::STALE, status, reason, &message);
    }

    fn mark_ready(&mut self, ocp_version: &str, host: &str) {
        let kubeconfig = res::kubeconfig_secret_name(&self.name);
        conditions::remove(&mut self.status.conditions, types::CRC_AGENT);
        self.status.phase = Some(InstancePhase::Ready);
        self.status.ocp_version = Some(ocp_version.to_owned()).filter(|v| !v.is_empty());
        self.status.topology = Some(self.instance.spec.type_);
        self.status.api_endpoint = Some(format!("https://{host}"));
        self.status.kubeconfig_secret_ref = Some(LocalRef {
            name: kubeconfig.clone(),
        });
        self.condition(
            types::READY,
            "True",
            reasons::BACKING_RESOURCES_AVAILABLE,
            &format!("the guest API at https://{host} is ready; kubeconfig in Secret {kubeconfig}"),
        );
        let wanted = self.instance.spec.template.ocp_version.clone();
        let mismatch = !wanted.is_empty() && !ocp_version.is_empty() && wanted != ocp_version;
        let (status, reason, message) = if mismatch {
            (
                "True",
                reasons::OCP_VERSION_MISMATCH,
                format!("the template asks for {wanted} but the guest runs {ocp_version}"),
            )
        } else {
            (
                "False",
                reasons::OCP_VERSION_MATCHES,
                format!("the guest runs {ocp_version}"),
            )
        };
        self.condition(types::VERSION_MISMATCH, status, reason, &message);
    }
}

fn is_running(vmi: Option<&VirtualMachineInstance>) -> bool {
    vmi.and_then(|v| v.status.as_ref())
        .is_some_and(|s| s.phase == Some(VmiPhase::Running))
}

mod access;
mod disk;

#[cfg(test)]
mod tests;
