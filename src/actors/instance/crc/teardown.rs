//! Ordered teardown of a CRC instance's backing (`docs/operations.md`, "Deleting an instance"):
//! observe what is left, take the next step of [`super::teardown_plan`], look again. Only objects
//! the instance controls (or whose parent's UID it recorded) are touched, and every delete
//! carries a UID precondition, so a same-named object created by someone else is never removed.
//! Shared bundle artifacts and the user's Secrets are never touched.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ListParams, PropagationPolicy};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::actors::instance::crc::teardown_plan::{self, Obj, Remaining, Step, Vm};
use crate::actors::runtime::api_error::{ApiError, Doing};
use crate::actors::runtime::context::Context;
use crate::api::instance::ClusterInstance;
use crate::api::labels;
use crate::cdi::DataVolume;
use crate::kubevirt::{self, VirtualMachine, VirtualMachineInstance};
use crate::resources::common::controller_uid;
use crate::resources::instance as res;
use crate::route::Route;
use crate::write;

/// How soon teardown looks again after a step (2 s). Watches on the owned kinds usually come
/// first; the timer stays because teardown also waits for deletions that are not watched (the
/// VM's virt-launcher pods, unlabelled handoff Secrets).
pub const STEP_REQUEUE: Duration = Duration::from_secs(2);

/// Errors of a teardown pass; reported as `Terminating=True reason=CleanupError`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Api(#[from] ApiError),
}

/// Where the teardown is.
pub enum Progress {
    /// A step was taken or is awaited; its description.
    Pending(String),
    /// Nothing is left: the finalizer may go.
    Done,
}

/// One teardown pass.
pub async fn run(instance: &ClusterInstance, ctx: &Arc<Context>) -> Result<Progress, Error> {
    let t = Teardown::new(instance, ctx);
    let remaining = t.observe().await?;
    let step = teardown_plan::next(&remaining);
    t.act(&step).await?;
    Ok(match step {
        Step::Done => Progress::Done,
        step => Progress::Pending(describe(&step)),
    })
}

fn names(objs: &[Obj]) -> String {
    objs.iter()
        .map(|o| o.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn describe(step: &Step) -> String {
    match step {
        Step::DeleteJobs(jobs) => format!("deleting crc-agent Jobs {}", names(jobs)),
        Step::DeleteAgentAccess(objs) => format!(
            "deleting the agent's {}",
            objs.iter()
                .map(|k| format!("{} {}", k.kind, k.obj.name))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Step::DeleteBootKey(o) => format!("deleting the boot-key copy {}", o.name),
        Step::HaltVm(o) => format!("halting VirtualMachine {}", o.name),
        Step::WaitForVmi(o) => format!("waiting for VirtualMachineInstance {} to stop", o.name),
        Step::DeleteLauncherPods(pods) => format!("deleting virt-launcher pods {}", names(pods)),
        Step::DeleteVm(o) => format!("deleting VirtualMachine {}", o.name),
        Step::DeleteDataVolume(o) => format!("deleting DataVolume {}", o.name),
        Step::DeletePvc(o) => format!("deleting PersistentVolumeClaim {}", o.name),
        Step::DeleteHandoffs(objs) => format!("deleting handoff Secrets {}", names(objs)),
        Step::DeleteExposure(objs) => format!(
            "deleting {}",
            objs.iter()
                .map(|k| format!("{} {}", k.kind, k.obj.name))
                .collect::<Vec<_>>()
                .join(" and ")
        ),
        Step::Done => "done".into(),
    }
}

struct Teardown<'a> {
    instance: &'a ClusterInstance,
    ctx: &'a Arc<Context>,
    name: String,
    ns: String,
    uid: String,
}

fn obj<K: Resource>(k: &K) -> Obj {
    Obj {
        name: k.meta().name.clone().unwrap_or_default(),
        uid: k.meta().uid.clone().unwrap_or_default(),
        deleting: k.meta().deletion_timestamp.is_some(),
    }
}

impl<'a> Teardown<'a> {
    fn new(instance: &'a ClusterInstance, ctx: &'a Arc<Context>) -> Self {
        Self {
            instance,
            ctx,
            name: instance.name_any(),
            ns: instance.namespace().unwrap_or_default(),
            uid: instance.uid().unwrap_or_default(),
        }
    }

    fn api<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.ctx.client.clone(), &self.ns)
    }

    fn err(&self, doing: Doing, what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        let err = ApiError::on("ClusterInstance", &self.name, doing, what);
        move |source| Error::Api(err(source))
    }

    /// `name`, if it exists and its controller is `owner` (one of the given UIDs).
    async fn owned<K>(&self, name: &str, owners: &[&str]) -> Result<Option<K>, Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let found = self
            .api::<K>()
            .get_opt(name)
            .await
            .map_err(self.err(Doing::Read, format!("{} {name}", K::kind(&()))))?;
        Ok(found
            .filter(|k| controller_uid(k).is_some_and(|u| !u.is_empty() && owners.contains(&u))))
    }

    async fn observe(&self) -> Result<Remaining, Error> {
        let crc = self
            .instance
            .status
            .as_ref()
            .and_then(|s| s.crc.clone())
            .unwrap_or_default();
        let me = [self.uid.as_str()];
        let vm_name = crc
            .vm_name
            .clone()
            .unwrap_or_else(|| res::vm_name(&self.name));
        let dv_name = crc
            .data_volume_name
            .clone()
            .unwrap_or_else(|| res::root_disk_name(&self.name));

        let jobs = self
            .api::<Job>()
            .list(&ListParams::default())
            .await
            .map_err(self.err(Doing::Read, "Jobs"))?
            .items
            .into_iter()
            .filter(|j| {
                let labelled = j.labels().get(labels::MANAGED_BY).map(String::as_str)
                    == Some(labels::MANAGED_BY_OPERATOR)
                    && j.labels().get(labels::CLUSTER_INSTANCE) == Some(&self.name);
                controller_uid(j) == Some(self.uid.as_str()) || labelled
            })
            .map(|j| obj(&j))
            .collect();

        let vm: Option<VirtualMachine> = self.owned(&vm_name, &me).await?;
        let vm_uids: Vec<String> = vm
            .as_ref()
            .and_then(|v| v.uid())
            .into_iter()
            .chain(crc.vm_uid.clone())
            .collect();
        let vm_uids: Vec<&str> = vm_uids.iter().map(String::as_str).collect();
        let vmi: Option<VirtualMachineInstance> = self.owned(&vm_name, &vm_uids).await?;
        let vmi_uids: Vec<String> = vmi
            .as_ref()
            .and_then(|v| v.uid())
            .into_iter()
            .chain(crc.vmi_uid.clone())
            .collect();
        // KubeVirt's own label, so launcher pods of VMs made before the VM's template carried
        // `guestcluster.opdev.io/vm` are found too; the VMI UIDs below pick this VM's.
        let launcher_pods = self
            .api::<Pod>()
            .list(&ListParams::default().labels(&format!(
                "{}={}",
                kubevirt::labels::APP,
                kubevirt::labels::VIRT_LAUNCHER,
            )))
            .await
            .map_err(self.err(Doing::Read, "virt-launcher pods"))?
            .items
            .into_iter()
            .filter(|p| controller_uid(p).is_some_and(|u| vmi_uids.iter().any(|v| v == u)))
            .map(|p| obj(&p))
            .collect();
        let dv: Option<DataVolume> = self.owned(&dv_name, &me).await?;
        let dv_uids: Vec<String> = dv
            .as_ref()
            .and_then(|d| d.uid())
            .into_iter()
            .chain(crc.data_volume_uid.clone())
            .collect();
        let dv_uids: Vec<&str> = dv_uids.iter().map(String::as_str).collect();
        let pvc: Option<PersistentVolumeClaim> = self.owned(&dv_name, &dv_uids).await?;

        let handoffs = self
            .api::<Secret>()
            .list(&ListParams::default().labels(&format!(
                "{}={},{}={}",
                labels::MANAGED_BY,
                labels::MANAGED_BY_AGENT,
                labels::CLUSTER_INSTANCE,
                self.name
            )))
            .await
            .map_err(self.err(Doing::Read, "handoff Secrets"))?
            .items
            .into_iter()
            .filter(|s| {
                let owners = s.owner_references();
                owners.is_empty() || owners.iter().any(|o| o.uid == self.uid)
            })
            .map(|s| obj(&s))
            .collect();

        Ok(Remaining {
            jobs,
            role: self
                .owned::<Role>(&res::agent_role_name(&self.name), &me)
                .await?
                .map(|k| obj(&k)),
            role_binding: self
                .owned::<RoleBinding>(&res::agent_binding_name(&self.name), &me)
                .await?
                .map(|k| obj(&k)),
            service_account: self
                .owned::<ServiceAccount>(&res::agent_account_name(&self.name), &me)
                .await?
                .map(|k| obj(&k)),
            boot_key: self
                .owned::<Secret>(&res::boot_key_secret_name(&self.name), &me)
                .await?
                .map(|k| obj(&k)),
            vm: vm.map(|v| Vm {
                obj: obj(&v),
                spec_run_strategy: v.spec.effective_run_strategy(),
            }),
            vmi: vmi.map(|v| obj(&v)),
            launcher_pods,
            data_volume: dv.map(|d| obj(&d)),
            pvc: pvc.map(|p| obj(&p)),
            handoffs,
            route: self
                .owned::<Route>(&res::api_route_name(&self.name), &me)
                .await?
                .map(|k| obj(&k)),
            service: self
                .owned::<Service>(&res::api_service_name(&self.name), &me)
                .await?
                .map(|k| obj(&k)),
        })
    }

    async fn delete<K>(&self, target: &Obj, propagation: PropagationPolicy) -> Result<(), Error>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        if target.deleting {
            return Ok(());
        }
        write::delete_exact(&self.api::<K>(), &target.name, &target.uid, propagation)
            .await
            .map_err(self.err(Doing::Delete, format!("{} {}", K::kind(&()), target.name)))?;
        tracing::info!(
            clusterinstance = %self.name,
            namespace = %self.ns,
            "deleted {} {}",
            K::kind(&()),
            target.name
        );
        Ok(())
    }

    async fn act(&self, step: &Step) -> Result<(), Error> {
        use PropagationPolicy::{Background, Foreground};
        match step {
            Step::DeleteJobs(jobs) => {
                // Foreground: the Job stays until its pods are gone, and so the key and account
                // they use are not deleted under them.
                for job in jobs {
                    self.delete::<Job>(job, Foreground).await?;
                }
            }
            Step::DeleteAgentAccess(objs) => {
                for k in objs {
                    match k.kind {
                        "Role" => self.delete::<Role>(&k.obj, Background).await?,
                        "RoleBinding" => self.delete::<RoleBinding>(&k.obj, Background).await?,
                        _ => self.delete::<ServiceAccount>(&k.obj, Background).await?,
                    }
                }
            }
            Step::DeleteBootKey(o) => self.delete::<Secret>(o, Background).await?,
            Step::HaltVm(o) => {
                let patch = serde_json::json!({"spec": {"runStrategy": "Halted", "running": null}});
                write::merge_patch(&self.api::<VirtualMachine>(), &o.name, &patch)
                    .await
                    .map_err(self.err(Doing::Update, format!("VirtualMachine {}", o.name)))?;
                tracing::info!(clusterinstance = %self.name, namespace = %self.ns, "halting VirtualMachine {}", o.name);
            }
            Step::WaitForVmi(_) => {}
            Step::DeleteLauncherPods(pods) => {
                for pod in pods {
                    self.delete::<Pod>(pod, Background).await?;
                }
            }
            Step::DeleteVm(o) => self.delete::<VirtualMachine>(o, Background).await?,
            Step::DeleteDataVolume(o) => self.delete::<DataVolume>(o, Background).await?,
            Step::DeletePvc(o) => self.delete::<PersistentVolumeClaim>(o, Background).await?,
            Step::DeleteHandoffs(objs) => {
                for o in objs {
                    self.delete::<Secret>(o, Background).await?;
                }
            }
            Step::DeleteExposure(objs) => {
                for k in objs {
                    match k.kind {
                        "Route" => self.delete::<Route>(&k.obj, Background).await?,
                        _ => self.delete::<Service>(&k.obj, Background).await?,
                    }
                }
            }
            Step::Done => {}
        }
        Ok(())
    }
}
