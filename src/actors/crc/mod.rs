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
//! `run` below reads as that sequence; the steps live by what they build: `machine` (disk
//! source, boot key, DataVolume, VM), `exposure` (agent RBAC, Service, Route, identity) and
//! `handoff` (agent Job and diagnosis, published kubeconfig, Ready).
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
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams};
use kube::{Resource, ResourceExt};

use super::Context;
use super::apply;
use crate::api::common::LocalRef;
use crate::api::conditions::{self, reasons, types};
use crate::api::instance::{
    CRCBackingStatus, ClusterInstance, ClusterInstanceStatus, InstancePhase,
};
use crate::api::template::DEFAULT_PULL_SECRET;
use crate::cdi::DataVolume;
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance, VmiPhase};
use crate::resources::common::is_controlled_by;
use crate::resources::instance::{self as res, AgentJobInputs};

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

// After the macros: the steps of the pass, by what they build.
mod exposure;
mod handoff;
mod machine;

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
            None if self.instance.spec.template.crc_bundle_ref().is_none() => {
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
            .and_then(LocalRef::name)
            .map(str::to_owned)
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
}
