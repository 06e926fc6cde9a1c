//! The CRC backing of a ClusterInstance (upstream §3.2–§3.7), once its gates are open.
//!
//! One pass walks the backing in creation order and stops at the first thing that is not there
//! yet, records why in the status, and is triggered again by the change it waits for (or the
//! provisioning requeue):
//!
//! ```text
//! identity of VM/DV ─ VMI replaced? ─ pull secret ─ boot key (bind → copy) ─ DataVolume ─ VM
//!   ─ VM ready, VMI running ─ agent RBAC ─ Service ─ Route (host) ─ identity Secret
//!   ─ handoff? else agent Job + diagnosis ─ /readyz through the Route ─ kubeconfig → Ready
//! ```
//!
//! Every step is "observe, then create what is missing" against the API server, so a pass
//! started at any point after a crash converges to the same objects. What must be durable before
//! an object exists is written to the status first (the boot-key binding before any disk, the
//! API endpoint before the Route), and the pass stops so that write lands before the create.
//! Decisions with rules of their own are pure functions in the submodules.

pub mod agent;
pub mod boot_key;
pub mod teardown;
pub mod teardown_plan;

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Event, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::rbac::v1::{ClusterRole, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use kube::{Resource, ResourceExt};

use super::Context;
use super::apply;
use crate::api::bundle::CRCBundle;
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{
    CRCBackingStatus, CRCBootKeyStatus, ClusterInstance, ClusterInstanceStatus, InstancePhase,
};
use crate::api::template::DEFAULT_PULL_SECRET;
use crate::cdi::DataVolume;
use crate::identity::{self, Identity};
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::resources::instance::{self as res, AgentJobInputs, RootDiskSource, VmProfile};
use crate::route::Route;

/// How soon a provisioning instance looks again when nothing it waits for has a watch.
pub const PROVISIONING_REQUEUE: Duration = Duration::from_secs(20);
/// How often a Ready instance re-checks its guest (upstream: 60 s).
pub const READY_RECHECK: Duration = Duration::from_secs(60);
/// After a write-ahead status change: look again as soon as it has landed.
const AFTER_RECORD: Duration = Duration::from_millis(200);
/// How soon a failed readiness probe is repeated.
const PROBE_RETRY: Duration = Duration::from_secs(5);
/// Readiness probe budget (upstream: 10 s).
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// CDI's default filesystem overhead; the volume mode is CDI's choice, so assume Filesystem.
const FILESYSTEM_OVERHEAD: f64 = 0.055;
/// Keys a manual-path `bundleSSHKeyRef` Secret may hold the key under, first found wins.
const MANUAL_KEY_NAMES: [&str; 3] = ["id_ecdsa", "ssh-privatekey", "id_rsa"];

/// Errors of a CRC pass that are not a condition of the instance: API calls that failed and
/// will be retried.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{action} {what} for ClusterInstance {instance}: {source}")]
    Api {
        instance: String,
        action: &'static str,
        what: String,
        source: Box<kube::Error>,
    },
}

/// Where a pass ended.
pub enum Outcome {
    /// Ready; look again after [`READY_RECHECK`].
    Ready,
    /// Stopped at a step; look again after the duration (watches usually come first).
    Wait(Duration),
}

/// Why a pass stopped before Ready: the `Ready=False` reason and message, and whether the
/// instance is `Failed` (which is still retried: Failed is not terminal upstream).
struct Stop {
    reason: &'static str,
    message: String,
    failed: bool,
    requeue: Duration,
}

impl Stop {
    fn pending(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            failed: false,
            requeue: PROVISIONING_REQUEUE,
        }
    }

    fn failed(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            failed: true,
            requeue: PROVISIONING_REQUEUE,
        }
    }

    fn recorded(message: impl Into<String>) -> Self {
        Self {
            reason: reasons::CRC_BACKING_PENDING,
            message: message.into(),
            failed: false,
            requeue: AFTER_RECORD,
        }
    }
}

/// A step either hands on a value or stops the pass.
type Flow<T> = Result<std::ops::ControlFlow<Stop, T>, Error>;

macro_rules! step {
    ($e:expr) => {
        match $e? {
            std::ops::ControlFlow::Continue(v) => v,
            std::ops::ControlFlow::Break(stop) => return Ok(std::ops::ControlFlow::Break(stop)),
        }
    };
}

fn go<T>(v: T) -> Flow<T> {
    Ok(std::ops::ControlFlow::Continue(v))
}

fn stop<T>(s: Stop) -> Flow<T> {
    Ok(std::ops::ControlFlow::Break(s))
}

/// One pass over the CRC backing of `instance`; `status` arrives with the gate conditions set
/// and leaves with everything this pass learned.
pub async fn reconcile(
    instance: &ClusterInstance,
    ctx: &Arc<Context>,
    status: &mut ClusterInstanceStatus,
) -> Result<Outcome, Error> {
    let now = Time(Timestamp::now());
    let mut pass = Pass::new(instance, ctx, status, now);
    let flow = pass.run().await?;
    Ok(match flow {
        std::ops::ControlFlow::Continue(()) => Outcome::Ready,
        std::ops::ControlFlow::Break(stop) => {
            pass.record_stop(&stop);
            Outcome::Wait(stop.requeue)
        }
    })
}

struct Pass<'a> {
    instance: &'a ClusterInstance,
    ctx: &'a Arc<Context>,
    status: &'a mut ClusterInstanceStatus,
    now: Time,
    name: String,
    ns: String,
    uid: String,
}

/// The guest's disk key, as the agent Job mounts it.
struct BootKey {
    secret: String,
    data_key: String,
}

impl<'a> Pass<'a> {
    fn new(
        instance: &'a ClusterInstance,
        ctx: &'a Arc<Context>,
        status: &'a mut ClusterInstanceStatus,
        now: Time,
    ) -> Self {
        Self {
            name: instance.name_any(),
            ns: instance.namespace().unwrap_or_default(),
            uid: instance.uid().unwrap_or_default(),
            instance,
            ctx,
            status,
            now,
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn err(
        &self,
        action: &'static str,
        what: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> Error {
        let (instance, what) = (self.name.clone(), what.into());
        move |source| Error::Api {
            instance,
            action,
            what,
            source: Box::new(source),
        }
    }

    fn crc(&mut self) -> &mut CRCBackingStatus {
        self.status.crc.get_or_insert_with(Default::default)
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
        obj.meta()
            .owner_references
            .iter()
            .flatten()
            .any(|o| o.controller == Some(true) && o.uid == self.uid)
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

    async fn get<K>(&self, api: &Api<K>, name: &str) -> Result<Option<K>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        api.get_opt(name)
            .await
            .map_err(self.err("reading", format!("{} {name}", K::kind(&()))))
    }

    async fn create<K>(&self, api: &Api<K>, obj: &K) -> Result<(), Error>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + serde::Serialize
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
    {
        let what = format!(
            "{} {}",
            K::kind(&()),
            obj.meta().name.as_deref().unwrap_or_default()
        );
        apply::create(api, obj)
            .await
            .map_err(self.err("creating", what.clone()))?;
        tracing::info!(clusterinstance = %self.name, namespace = %self.ns, "created {what}");
        Ok(())
    }

    async fn run(&mut self) -> Flow<()> {
        let vm_name = self
            .status
            .crc
            .as_ref()
            .and_then(|c| c.vm_name.clone())
            .unwrap_or_else(|| res::vm_name(&self.name));
        let dv_name = self
            .status
            .crc
            .as_ref()
            .and_then(|c| c.data_volume_name.clone())
            .unwrap_or_else(|| res::root_disk_name(&self.name));

        // Backing identity: the VM and DataVolume must be ours; their UIDs are kept for teardown.
        let vm = self.get(&self.api::<VirtualMachine>(), &vm_name).await?;
        let dv = self.get(&self.api::<DataVolume>(), &dv_name).await?;
        if let Some(vm) = &vm {
            if !self.controlled(vm) {
                return stop(self.conflict(vm));
            }
            self.crc().vm_uid = vm.uid();
        }
        if let Some(dv) = &dv {
            if !self.controlled(dv) {
                return stop(self.conflict(dv));
            }
            self.crc().data_volume_uid = dv.uid();
        }
        let vmi = self
            .get(&self.api::<VirtualMachineInstance>(), &vm_name)
            .await?;
        step!(self.check_vmi_identity(vmi.as_ref()).await);

        let pull_secret = step!(self.pull_secret().await);
        let (boot_key, disk_source, storage_class) = match self.instance.spec.template.crc_version()
        {
            None if self.instance.spec.template.crc_bundle_ref.is_none() => {
                step!(self.manual_source().await)
            }
            _ => step!(self.turnkey_source(dv.as_ref(), &vm_name, &dv_name).await),
        };
        let Some(dv) = dv else {
            step!(self.create_data_volume(disk_source, storage_class).await);
            return stop(Stop::recorded(format!("creating DataVolume {dv_name}")));
        };
        step!(self.check_data_volume(&dv).await);
        let Some(vm) = vm else {
            step!(self.create_vm(&dv_name).await);
            return stop(Stop::recorded(format!("creating VirtualMachine {vm_name}")));
        };
        let (vmi_uid, vmi_ip) = step!(self.running_vmi(&vm, vmi.as_ref(), &dv));

        step!(self.agent_access().await);
        self.ensure_service(&vm_name).await?;
        let host = step!(self.ensure_route().await);
        step!(self.ensure_identity(&host).await);

        let handoff_name = res::handoff_secret_name(&self.name, &vmi_uid);
        let handoff = self
            .get(&self.api::<Secret>(), &handoff_name)
            .await?
            .and_then(|s| agent::accept_handoff(&s, &self.name, &self.uid, &vmi_uid));
        let Some(handoff) = handoff else {
            let inputs = AgentJobInputs {
                image: self.ctx.jobs.image.clone(),
                vmi_uid: vmi_uid.clone(),
                vm_name: vm_name.clone(),
                ssh_host: vmi_ip,
                api_hostname: host.clone(),
                pull_secret_name: pull_secret,
                ssh_key_secret_name: boot_key.secret,
                ssh_key_data_key: boot_key.data_key,
            };
            return self.agent(&inputs).await;
        };
        self.condition(
            types::CRC_AGENT,
            "True",
            reasons::HANDOFF_RECEIVED,
            &format!("the crc-agent published {handoff_name}"),
        );
        if let Err(err) = self
            .ctx
            .guests
            .route_access
            .probe_readyz(&handoff.kubeconfig, PROBE_TIMEOUT)
            .await
        {
            let message = format!("the guest API is not ready through its Route: {err}");
            self.condition(
                types::GUEST_API_REACHABLE,
                "False",
                reasons::GUEST_API_UNAVAILABLE,
                &message,
            );
            // The guest API restarts once more for its named certificate right around the
            // handoff: look again soon rather than after the full provisioning interval.
            return stop(Stop {
                requeue: PROBE_RETRY,
                ..Stop::pending(reasons::GUEST_API_UNAVAILABLE, message)
            });
        }
        self.condition(
            types::GUEST_API_REACHABLE,
            "True",
            reasons::GUEST_API_READY,
            &format!("GET https://{host}/readyz succeeded"),
        );
        step!(self.publish_kubeconfig(&handoff).await);
        self.mark_ready(&handoff.ocp_version, &host);
        go(())
    }

    /// A replaced or vanished VMI invalidates the handoff: the old agent Job and the published
    /// kubeconfig go, and the next pass starts over for the new VMI (keeping identity, Route and
    /// key, so the kubeconfig's CA and host stay valid).
    async fn check_vmi_identity(&mut self, vmi: Option<&VirtualMachineInstance>) -> Flow<()> {
        let recorded = self
            .status
            .crc
            .as_ref()
            .and_then(|c| c.vmi_uid.clone())
            .filter(|u| !u.is_empty());
        let live = vmi.and_then(|v| v.uid());
        let running = vmi
            .and_then(|v| v.status.as_ref())
            .is_some_and(|s| s.phase == Some(VmiPhase::Running));
        let was_ready = self.status.phase == Some(InstancePhase::Ready);
        let reason = match (&recorded, &live) {
            (Some(r), Some(l)) if r != l => Some(reasons::VMI_REPLACED),
            _ if was_ready && live.is_none() => Some(reasons::VMI_UNAVAILABLE),
            _ if was_ready && !running => Some(reasons::VMI_UNAVAILABLE),
            _ => None,
        };
        let Some(reason) = reason else {
            return go(());
        };
        if let Some(old) = &recorded {
            let job = res::agent_job_name(&self.name, old);
            match self
                .api::<Job>()
                .delete(&job, &DeleteParams::foreground())
                .await
            {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(self.err("deleting", format!("Job {job}"))(e)),
            }
        }
        let kubeconfig = res::kubeconfig_secret_name(&self.name);
        apply::delete(&self.api::<Secret>(), &kubeconfig)
            .await
            .map_err(self.err("deleting", format!("Secret {kubeconfig}")))?;
        let message = match reason {
            reasons::VMI_REPLACED => format!(
                "VirtualMachineInstance {} was replaced ({} → {}); the guest is configured again",
                self.name,
                recorded.as_deref().unwrap_or_default(),
                live.as_deref().unwrap_or_default()
            ),
            _ => format!(
                "VirtualMachineInstance {} is not running; waiting for KubeVirt to start it again",
                self.name
            ),
        };
        tracing::info!(clusterinstance = %self.name, namespace = %self.ns, %reason, "handoff invalidated");
        self.crc().vmi_uid = live.filter(|_| running);
        self.status.kubeconfig_secret_ref = None;
        conditions::remove(&mut self.status.conditions, types::CRC_AGENT);
        stop(Stop {
            reason,
            message,
            failed: false,
            requeue: AFTER_RECORD,
        })
    }

    async fn pull_secret(&self) -> Flow<String> {
        let name = self
            .instance
            .spec
            .template
            .pull_secret_ref
            .as_ref()
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| DEFAULT_PULL_SECRET.to_owned());
        let secret = self.get(&self.api::<Secret>(), &name).await?;
        let ok = secret
            .as_ref()
            .and_then(|s| s.data.as_ref())
            .and_then(|d| d.get(res::PULL_SECRET_KEY))
            .is_some_and(|ByteString(b)| !b.is_empty());
        if ok {
            go(name)
        } else {
            stop(Stop::failed(
                reasons::INVALID_PULL_SECRET,
                format!(
                    "pull secret {}/{name} is missing or has no {}: create it with \
                     `kubectl -n {} create secret generic {name} --type=kubernetes.io/dockerconfigjson \
                     --from-file=.dockerconfigjson=<file>`",
                    self.ns,
                    res::PULL_SECRET_KEY,
                    self.ns
                ),
            ))
        }
    }

    /// Manual path: the key from `bundleSSHKeyRef`, the disk imported from `releaseImage`.
    async fn manual_source(&self) -> Flow<(BootKey, RootDiskSource, Option<String>)> {
        let template = &self.instance.spec.template;
        let Some(url) = template.release_image.clone().filter(|u| !u.is_empty()) else {
            return stop(Stop::failed(
                reasons::RECONCILE_ERROR,
                "the template names no disk: set crcVersion, crcBundleRef, or releaseImage with bundleSSHKeyRef",
            ));
        };
        let missing = |detail: String| {
            Stop::failed(
                reasons::MISSING_BUNDLE_SSH_KEY,
                format!(
                    "{detail}: the manual path needs bundleSSHKeyRef naming a Secret with one of {}",
                    MANUAL_KEY_NAMES.join(", ")
                ),
            )
        };
        let Some(secret_name) = template
            .bundle_ssh_key_ref
            .as_ref()
            .map(|r| r.name.clone())
            .filter(|n| !n.is_empty())
        else {
            return stop(missing("bundleSSHKeyRef is not set".into()));
        };
        let secret = self.get(&self.api::<Secret>(), &secret_name).await?;
        let data_key = secret.as_ref().and_then(|s| {
            let data = s.data.as_ref()?;
            MANUAL_KEY_NAMES
                .into_iter()
                .find(|k| data.get(*k).is_some_and(|ByteString(b)| !b.is_empty()))
        });
        let Some(data_key) = data_key else {
            return stop(missing(format!(
                "Secret {}/{secret_name} is missing or holds no key",
                self.ns
            )));
        };
        go((
            BootKey {
                secret: secret_name,
                data_key: data_key.to_owned(),
            },
            RootDiskSource::Http { url },
            template
                .storage_class_name
                .clone()
                .filter(|s| !s.is_empty()),
        ))
    }

    /// The bundle a template selects (`crcBundleRef`, else `crc-<crcVersion>-<arch>`).
    fn bundle_name(&self) -> String {
        super::resolve::bundle_name(&self.instance.spec.template).unwrap_or_default()
    }

    /// The bundle's disk and key as they are now, for binding or for proving them unchanged.
    async fn bundle_source(
        &self,
        bundle: &CRCBundle,
    ) -> Result<(Option<PersistentVolumeClaim>, Option<Secret>), Error> {
        let status = bundle.status.clone().unwrap_or_default();
        let ns = status
            .qcow2_pvc_namespace
            .clone()
            .unwrap_or_else(|| self.ctx.namespace.clone());
        let pvc = match &status.qcow2_pvc_ref {
            Some(r) => {
                self.get(
                    &Api::<PersistentVolumeClaim>::namespaced(self.ctx.client.clone(), &ns),
                    &r.name,
                )
                .await?
            }
            None => None,
        };
        let secret = match &status.ssh_key_secret_ref {
            Some(r) => {
                self.get(
                    &Api::<Secret>::namespaced(self.ctx.client.clone(), &ns),
                    &r.name,
                )
                .await?
            }
            None => None,
        };
        Ok((pvc, secret))
    }

    /// The bundle the binding names, if it still exists as that very object.
    async fn bound_bundle(&self, binding: &CRCBootKeyStatus) -> Result<Option<CRCBundle>, Error> {
        let bundle = self
            .get(
                &Api::<CRCBundle>::all(self.ctx.client.clone()),
                &self.bundle_name(),
            )
            .await?;
        Ok(bundle.filter(|b| b.uid().as_deref() == Some(binding.bundle_uid.as_str())))
    }

    /// Turnkey path: bind the boot key once (before any disk), then keep the instance's copy.
    async fn turnkey_source(
        &mut self,
        dv: Option<&DataVolume>,
        vm_name: &str,
        dv_name: &str,
    ) -> Flow<(BootKey, RootDiskSource, Option<String>)> {
        let unavailable =
            |e: boot_key::Error| Stop::pending(reasons::BOOT_KEY_UNAVAILABLE, e.to_string());
        let binding = self.status.crc.as_ref().and_then(|c| c.boot_key.clone());
        let Some(binding) = binding else {
            if self.status.phase == Some(InstancePhase::Ready) {
                return stop(unavailable(boot_key::Error::NotRecorded));
            }
            if dv.is_some() {
                return stop(unavailable(boot_key::Error::UnboundDisk {
                    name: dv_name.to_owned(),
                }));
            }
            let name = self.bundle_name();
            let bundle = self
                .get(&Api::<CRCBundle>::all(self.ctx.client.clone()), &name)
                .await?;
            let ready = bundle
                .as_ref()
                .and_then(|b| b.status.as_ref())
                .is_some_and(|s| s.phase == Some(crate::api::bundle::BundlePhase::Ready));
            let Some(bundle) = bundle.filter(|_| ready) else {
                return stop(Stop::pending(
                    reasons::CRC_BACKING_PENDING,
                    format!("waiting for CRCBundle {name} to become Ready"),
                ));
            };
            let (pvc, secret) = self.bundle_source(&bundle).await?;
            let binding = match boot_key::bind(&boot_key::Source {
                bundle: &bundle,
                pvc: pvc.as_ref(),
                secret: secret.as_ref(),
            }) {
                Ok(b) => b,
                Err(e) => return stop(unavailable(e)),
            };
            let crc = self.crc();
            crc.boot_key = Some(binding);
            crc.vm_name = Some(vm_name.to_owned());
            crc.data_volume_name = Some(dv_name.to_owned());
            return stop(Stop::recorded(format!(
                "bound to the disk and key of CRCBundle {name}"
            )));
        };

        // The instance's own copy of the key: checked when present, restored only from a source
        // provably identical to the binding.
        let copy_name = res::boot_key_secret_name(&self.name);
        let copy = self.get(&self.api::<Secret>(), &copy_name).await?;
        match copy {
            Some(copy) => {
                if let Err(e) = boot_key::check_copy(&copy, &self.uid, &binding) {
                    return stop(unavailable(e));
                }
            }
            None => {
                let bundle = self.bound_bundle(&binding).await?;
                let Some(bundle) = bundle else {
                    return stop(unavailable(boot_key::Error::Changed {
                        what: format!("CRCBundle {} is gone or was recreated", self.bundle_name()),
                    }));
                };
                let (pvc, secret) = self.bundle_source(&bundle).await?;
                let source = boot_key::Source {
                    bundle: &bundle,
                    pvc: pvc.as_ref(),
                    secret: secret.as_ref(),
                };
                if let Err(e) = boot_key::verify_unchanged(&binding, &source) {
                    return stop(unavailable(e));
                }
                let key = secret
                    .as_ref()
                    .and_then(boot_key::key_bytes)
                    .unwrap_or_default();
                self.create(&self.api(), &res::boot_key_copy(self.instance, key))
                    .await?;
            }
        }
        let storage_class = self
            .instance
            .spec
            .template
            .storage_class_name
            .clone()
            .filter(|s| !s.is_empty())
            .or_else(|| binding.storage_class_name.clone());
        go((
            BootKey {
                secret: copy_name,
                data_key: boot_key::KEY.to_owned(),
            },
            RootDiskSource::Pvc {
                namespace: binding.pvc_namespace.clone(),
                name: binding.pvc_name.clone(),
            },
            storage_class,
        ))
    }

    async fn create_data_volume(
        &mut self,
        source: RootDiskSource,
        storage_class: Option<String>,
    ) -> Flow<()> {
        let mut golden_size = None;
        if let Some(binding) = self.status.crc.as_ref().and_then(|c| c.boot_key.clone()) {
            // Right before the clone: the golden disk must still be the bound one.
            let Some(bundle) = self.bound_bundle(&binding).await? else {
                return stop(Stop::pending(
                    reasons::BOOT_KEY_UNAVAILABLE,
                    boot_key::Error::Changed {
                        what: format!("CRCBundle {} is gone or was recreated", self.bundle_name()),
                    }
                    .to_string(),
                ));
            };
            let (pvc, secret) = self.bundle_source(&bundle).await?;
            if let Err(e) = boot_key::verify_unchanged(
                &binding,
                &boot_key::Source {
                    bundle: &bundle,
                    pvc: pvc.as_ref(),
                    secret: secret.as_ref(),
                },
            ) {
                return stop(Stop::pending(reasons::BOOT_KEY_UNAVAILABLE, e.to_string()));
            }
            golden_size = bundle
                .status
                .as_ref()
                .and_then(|s| s.disk_virtual_size)
                .and_then(|s| u64::try_from(s).ok());
        }
        let (size, raised) = match res::root_disk_size(
            self.instance.spec.template.root_volume_size.as_deref(),
            golden_size,
            FILESYSTEM_OVERHEAD,
        ) {
            Ok(v) => v,
            Err(e) => {
                return stop(Stop::failed(
                    reasons::RECONCILE_ERROR,
                    format!("rootVolumeSize: {e}"),
                ));
            }
        };
        if let Some(raised) = raised {
            self.ctx
                .events
                .publish(
                    self.instance,
                    crate::actors::events::Kind::Warning,
                    "RootVolumeRaised",
                    &raised.message(),
                )
                .await;
        }
        let dv = res::root_data_volume(self.instance, source, size, storage_class);
        self.create(&self.api(), &dv).await?;
        go(())
    }

    /// An existing DataVolume must clone the bound disk, and while it is still cloning, that
    /// disk must still be the bound PVC.
    async fn check_data_volume(&self, dv: &DataVolume) -> Flow<()> {
        let Some(binding) = self.status.crc.as_ref().and_then(|c| c.boot_key.clone()) else {
            return go(());
        };
        let source = dv.spec.source.as_ref().and_then(|s| s.pvc.as_ref());
        if source.is_none_or(|p| p.namespace != binding.pvc_namespace || p.name != binding.pvc_name)
        {
            return stop(Stop::pending(
                reasons::BOOT_KEY_UNAVAILABLE,
                format!(
                    "DataVolume {} does not clone the bound golden PVC {}/{}; delete the instance",
                    dv.name_any(),
                    binding.pvc_namespace,
                    binding.pvc_name
                ),
            ));
        }
        let done = dv
            .status
            .as_ref()
            .and_then(|s| s.phase)
            .is_some_and(|p| p.is_succeeded());
        if !done {
            let pvc = self
                .get(
                    &Api::<PersistentVolumeClaim>::namespaced(
                        self.ctx.client.clone(),
                        &binding.pvc_namespace,
                    ),
                    &binding.pvc_name,
                )
                .await?;
            if pvc.and_then(|p| p.uid()).as_deref() != Some(binding.pvc_uid.as_str()) {
                return stop(Stop::pending(
                    reasons::BOOT_KEY_UNAVAILABLE,
                    boot_key::Error::Changed {
                        what: format!(
                            "golden PVC {}/{} was replaced while the clone ran",
                            binding.pvc_namespace, binding.pvc_name
                        ),
                    }
                    .to_string(),
                ));
            }
        }
        go(())
    }

    async fn create_vm(&self, dv_name: &str) -> Flow<()> {
        let profile = match self.status.crc.as_ref().and_then(|c| c.boot_key.clone()) {
            None => VmProfile::CrcDownloadV0,
            Some(binding) => {
                let Some(bundle) = self.bound_bundle(&binding).await? else {
                    return stop(Stop::pending(
                        reasons::BOOT_KEY_UNAVAILABLE,
                        format!(
                            "CRCBundle {} is gone or was recreated; its VM profile is unknown",
                            self.bundle_name()
                        ),
                    ));
                };
                match VmProfile::of_bundle(&bundle) {
                    Ok(p) => p,
                    Err(e) => return stop(Stop::failed(reasons::RECONCILE_ERROR, e.to_string())),
                }
            }
        };
        let template = &self.instance.spec.template;
        let vm = res::virtual_machine(
            self.instance,
            profile,
            dv_name,
            &template.memory,
            template.cores,
            &template.vm_node_selector,
        );
        self.create(&self.api(), &vm).await?;
        go(())
    }

    /// The VM is ready and its VMI runs with an address: its UID and IP.
    fn running_vmi(
        &mut self,
        vm: &VirtualMachine,
        vmi: Option<&VirtualMachineInstance>,
        dv: &DataVolume,
    ) -> Flow<(String, String)> {
        let ready = vm.status.as_ref().is_some_and(|s| s.ready);
        let vmi_running = vmi
            .and_then(|v| v.status.as_ref())
            .is_some_and(|s| s.phase == Some(VmiPhase::Running));
        if !ready || !vmi_running {
            let disk = dv
                .status
                .as_ref()
                .and_then(|s| s.phase.map(|p| (p, s)))
                .map(|(phase, s)| {
                    format!(
                        "{phase:?}{}",
                        s.progress
                            .as_deref()
                            .map(|p| format!(" {p}"))
                            .unwrap_or_default()
                    )
                });
            let printable = vm
                .status
                .as_ref()
                .and_then(|s| s.printable_status)
                .map(|p| format!("{p:?}"))
                .unwrap_or_else(|| "not started".into());
            return stop(Stop::pending(
                reasons::CRC_BACKING_PENDING,
                format!(
                    "waiting for VirtualMachine {} to run ({printable}; root disk {}: {})",
                    vm.name_any(),
                    dv.name_any(),
                    disk.unwrap_or_else(|| "no status yet".into())
                ),
            ));
        }
        let Some(vmi) = vmi else {
            return stop(Stop::pending(reasons::CRC_BACKING_PENDING, "no VMI"));
        };
        let uid = vmi.uid().unwrap_or_default();
        let ip = vmi
            .status
            .as_ref()
            .and_then(|s| s.interfaces.iter().find_map(|i| i.ip_address.clone()))
            .filter(|ip| !ip.is_empty());
        let Some(ip) = ip else {
            return stop(Stop::pending(
                reasons::CRC_BACKING_PENDING,
                format!(
                    "waiting for VirtualMachineInstance {} to report an IP",
                    vmi.name_any()
                ),
            ));
        };
        let crc = self.crc();
        if crc.vmi_uid.as_deref().is_none_or(str::is_empty) {
            crc.vmi_uid = Some(uid.clone());
        }
        crc.ssh_endpoint = Some(ip.clone());
        go((uid, ip))
    }

    /// The agent's ClusterRole (shared), ServiceAccount and RoleBinding (per instance).
    async fn agent_access(&self) -> Flow<()> {
        let roles: Api<ClusterRole> = Api::all(self.ctx.client.clone());
        let role_name = self.ctx.guests.agent_cluster_role.clone();
        match self.get(&roles, &role_name).await? {
            None => {
                self.create(&roles, &res::agent_cluster_role(&role_name))
                    .await?
            }
            Some(role) if !res::cluster_role_rules_match(&role) => {
                return stop(Stop::failed(
                    reasons::RECONCILE_ERROR,
                    format!(
                        "ClusterRole {role_name} exists with rules other than the crc-agent needs; \
                         delete it to have it recreated"
                    ),
                ));
            }
            Some(_) => {}
        }
        let accounts = self.api::<ServiceAccount>();
        let account_name = res::agent_account_name(&self.name);
        match self.get(&accounts, &account_name).await? {
            None => {
                self.create(&accounts, &res::agent_service_account(self.instance))
                    .await?
            }
            Some(sa) if !self.controlled(&sa) => return stop(self.conflict(&sa)),
            Some(_) => {}
        }
        let bindings = self.api::<RoleBinding>();
        let wanted = res::agent_role_binding(self.instance, &role_name);
        let binding_name = res::agent_binding_name(&self.name);
        match self.get(&bindings, &binding_name).await? {
            None => self.create(&bindings, &wanted).await?,
            Some(rb) if !self.controlled(&rb) => return stop(self.conflict(&rb)),
            Some(rb) if rb.role_ref != wanted.role_ref => {
                return stop(Stop::failed(
                    reasons::RESOURCE_OWNERSHIP_CONFLICT,
                    format!(
                        "RoleBinding {}/{binding_name} refers to {} {}; delete it to have it recreated",
                        self.ns, rb.role_ref.kind, rb.role_ref.name
                    ),
                ));
            }
            Some(rb) if rb.subjects != wanted.subjects => {
                let patch = serde_json::json!({"subjects": wanted.subjects});
                bindings
                    .patch(
                        &binding_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(self.err("repairing", format!("RoleBinding {binding_name}")))?;
            }
            Some(_) => {}
        }
        go(())
    }

    async fn ensure_service(&self, vm_name: &str) -> Result<(), Error> {
        let services = self.api::<Service>();
        if self
            .get(&services, &res::api_service_name(&self.name))
            .await?
            .is_none()
        {
            self.create(&services, &res::api_service(self.instance, vm_name))
                .await?;
        }
        Ok(())
    }

    /// The Route and its host: kept once chosen, recorded in `apiEndpoint` before the Route is
    /// created, and unique across the cluster.
    async fn ensure_route(&mut self) -> Flow<String> {
        let routes = self.api::<Route>();
        let route_name = res::api_route_name(&self.name);
        let existing = self.get(&routes, &route_name).await?;
        if let Some(route) = &existing
            && !self.controlled(route)
        {
            return stop(self.conflict(route));
        }
        let recorded = self
            .status
            .api_endpoint
            .as_deref()
            .and_then(|e| e.strip_prefix("https://"))
            .map(str::to_owned);
        let from_identity = match self
            .get(
                &self.api::<Secret>(),
                &res::identity_secret_name(&self.name),
            )
            .await?
        {
            Some(secret) => secret
                .data
                .as_ref()
                .and_then(|d| d.get(identity::SERVING_CRT))
                .and_then(|ByteString(b)| identity::serving_host(&String::from_utf8_lossy(b))),
            None => None,
        };
        let host = match existing
            .as_ref()
            .and_then(|r| r.spec.host.clone())
            .filter(|h| !h.is_empty())
            .or(from_identity)
            .or(recorded.clone())
        {
            Some(host) => host,
            None => match self.ingress_domain().await? {
                Some(domain) => match res::route_host(&self.ns, &self.name, &domain) {
                    Ok(host) => host,
                    Err(e) => {
                        return stop(Stop::failed(reasons::API_ENDPOINT_CONFLICT, e.to_string()));
                    }
                },
                None => {
                    return stop(Stop::pending(
                        reasons::CRC_BACKING_PENDING,
                        "the cluster ingress domain is unknown: ingresses.config.openshift.io/cluster \
                         has no spec.domain",
                    ));
                }
            },
        };
        if let Some(recorded) = &recorded
            && recorded != &host
        {
            return stop(Stop::failed(
                reasons::API_ENDPOINT_CONFLICT,
                format!(
                    "the API endpoint https://{recorded} recorded in status disagrees with host {host} \
                     of Route {route_name} or of the identity Secret"
                ),
            ));
        }
        // Uniqueness is checked before our Route exists; afterwards the router admits the oldest
        // Route of a host, which is ours. (Listing every Route on every pass would not scale.)
        if existing.is_some() {
            return go(host);
        }
        let all: Api<Route> = Api::all(self.ctx.client.clone());
        let taken = all
            .list(&ListParams::default())
            .await
            .map_err(self.err("listing", "Routes"))?
            .items
            .into_iter()
            .find(|r| r.spec.host.as_deref() == Some(host.as_str()));
        if let Some(other) = taken {
            return stop(Stop::failed(
                reasons::API_ENDPOINT_CONFLICT,
                format!(
                    "host {host} is already used by Route {}/{}",
                    other.namespace().unwrap_or_default(),
                    other.name_any()
                ),
            ));
        }
        if recorded.is_none() {
            self.status.api_endpoint = Some(format!("https://{host}"));
            return stop(Stop::recorded(format!(
                "API endpoint https://{host} chosen"
            )));
        }
        self.create(&routes, &res::api_route(self.instance, &host))
            .await?;
        go(host)
    }

    async fn ingress_domain(&self) -> Result<Option<String>, Error> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "Ingress"),
            "ingresses",
        );
        let api = Api::<DynamicObject>::all_with(self.ctx.client.clone(), &resource);
        let ingress = match api.get_opt("cluster").await {
            Ok(i) => i,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(self.err("reading", "ingresses.config.openshift.io/cluster")(e)),
        };
        Ok(ingress
            .and_then(|i| i.data.pointer("/spec/domain")?.as_str().map(str::to_owned))
            .filter(|d| !d.is_empty()))
    }

    /// The identity Secret: created once, then validated on every pass, never replaced.
    async fn ensure_identity(&self, host: &str) -> Flow<()> {
        let secrets = self.api::<Secret>();
        let name = res::identity_secret_name(&self.name);
        let now = self.now.0.as_second();
        match self.get(&secrets, &name).await? {
            None => {
                let identity = match identity::generate(host, now) {
                    Ok(i) => i,
                    Err(e) => return stop(Stop::failed(reasons::RECONCILE_ERROR, e.to_string())),
                };
                self.create(
                    &secrets,
                    &res::identity_secret(self.instance, identity.to_secret_data()),
                )
                .await?;
                go(())
            }
            Some(secret) if !self.controlled(&secret) => stop(self.conflict(&secret)),
            Some(secret) => {
                let data = secret.data.clone().unwrap_or_default();
                let valid = Identity::from_secret_data(&data)
                    .and_then(|i| identity::validate(&i, host, now));
                match valid {
                    Ok(()) => go(()),
                    Err(e) => stop(Stop::failed(
                        reasons::RECONCILE_ERROR,
                        format!(
                            "identity Secret {}/{name} is not valid for {host}: {e}; it is never \
                             replaced automatically because published kubeconfigs trust it",
                            self.ns
                        ),
                    )),
                }
            }
        }
    }

    /// No handoff yet: make sure the agent Job for this VMI exists and say how it is doing.
    async fn agent(&mut self, inputs: &AgentJobInputs) -> Flow<()> {
        let jobs = self.api::<Job>();
        let job_name = res::agent_job_name(&self.name, &inputs.vmi_uid);
        let Some(job) = self.get(&jobs, &job_name).await? else {
            self.create(&jobs, &res::agent_job(self.instance, inputs))
                .await?;
            self.condition(
                types::CRC_AGENT,
                "Unknown",
                reasons::AGENT_POD_PENDING,
                &format!("crc-agent Job {job_name} created"),
            );
            return stop(Stop::pending(
                reasons::AGENT_POD_PENDING,
                format!("crc-agent Job {job_name} created"),
            ));
        };
        if !self.controlled(&job) {
            return stop(self.conflict(&job));
        }
        let pods = self
            .api::<Pod>()
            .list(
                &ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job_name}")),
            )
            .await
            .map_err(self.err("listing", format!("pods of Job {job_name}")))?
            .items;
        let missing = self.missing_prerequisite(inputs).await?;
        let events = self.agent_events(&job_name, &pods).await?;
        let diagnosis = agent::diagnose(&job, &pods, &events, missing.as_deref(), self.now.0);
        self.condition(
            types::CRC_AGENT,
            diagnosis.status,
            diagnosis.reason,
            &diagnosis.message,
        );
        stop(Stop {
            reason: diagnosis.reason,
            message: diagnosis.message,
            failed: diagnosis.failed,
            requeue: PROVISIONING_REQUEUE,
        })
    }

    /// Events about the agent Job and its pods (why a pod is not created or does not start).
    async fn agent_events(&self, job: &str, pods: &[Pod]) -> Result<Vec<Event>, Error> {
        let names: Vec<String> = std::iter::once(job.to_owned())
            .chain(pods.iter().map(|p| p.name_any()))
            .collect();
        let mut events = Vec::new();
        for name in names {
            let selector = format!("involvedObject.name={name}");
            events.extend(
                self.api::<Event>()
                    .list(&ListParams::default().fields(&selector))
                    .await
                    .map_err(self.err("listing", format!("Events of {name}")))?
                    .items,
            );
        }
        Ok(events)
    }

    /// The first object the agent pod needs that is gone (it would be stuck mounting it).
    async fn missing_prerequisite(&self, inputs: &AgentJobInputs) -> Result<Option<String>, Error> {
        let account = res::agent_account_name(&self.name);
        if self
            .get(&self.api::<ServiceAccount>(), &account)
            .await?
            .is_none()
        {
            return Ok(Some(format!("ServiceAccount {account}")));
        }
        let binding = res::agent_binding_name(&self.name);
        if self
            .get(&self.api::<RoleBinding>(), &binding)
            .await?
            .is_none()
        {
            return Ok(Some(format!("RoleBinding {binding}")));
        }
        for secret in [
            inputs.ssh_key_secret_name.clone(),
            res::identity_secret_name(&self.name),
        ] {
            if self.get(&self.api::<Secret>(), &secret).await?.is_none() {
                return Ok(Some(format!("Secret {secret}")));
            }
        }
        Ok(None)
    }

    /// `<instance>-kubeconfig` holds the handoff's kubeconfig (rebuilt if deleted or drifted).
    async fn publish_kubeconfig(&self, handoff: &agent::Handoff) -> Flow<()> {
        let secrets = self.api::<Secret>();
        let wanted =
            res::kubeconfig_secret(self.instance, &handoff.kubeconfig, &handoff.ocp_version);
        let name = res::kubeconfig_secret_name(&self.name);
        match self.get(&secrets, &name).await? {
            None => self.create(&secrets, &wanted).await?,
            Some(existing) => {
                let owners = existing.owner_references();
                if !owners.is_empty() && !self.controlled(&existing) {
                    return stop(self.conflict(&existing));
                }
                if existing.data != wanted.data || owners.is_empty() {
                    let patch = serde_json::json!({
                        "metadata": {"ownerReferences": wanted.metadata.owner_references,
                                     "labels": wanted.metadata.labels},
                        "data": wanted.data,
                    });
                    secrets
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                        .await
                        .map_err(self.err("updating", format!("Secret {name}")))?;
                }
            }
        }
        go(())
    }

    fn mark_ready(&mut self, ocp_version: &str, host: &str) {
        let name = self.name.clone();
        conditions::remove(&mut self.status.conditions, types::CRC_AGENT);
        self.status.phase = Some(InstancePhase::Ready);
        self.status.ocp_version = Some(ocp_version.to_owned()).filter(|v| !v.is_empty());
        self.status.topology = Some(self.instance.spec.type_);
        self.status.api_endpoint = Some(format!("https://{host}"));
        self.status.kubeconfig_secret_ref = Some(LocalRef {
            name: res::kubeconfig_secret_name(&name),
        });
        self.condition(
            types::READY,
            "True",
            reasons::BACKING_RESOURCES_AVAILABLE,
            &format!(
                "the guest API at https://{host} is ready; kubeconfig in Secret {}",
                res::kubeconfig_secret_name(&name)
            ),
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
