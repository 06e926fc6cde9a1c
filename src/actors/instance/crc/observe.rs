//! Every read of a CRC pass, into one plain [`Observed`] value that [`crate::actors::instance::crc::plan`] decides on.
//!
//! Objects are read by name; what a pass cannot use at this point is not read (an unbound
//! instance's own objects while its bundle is not Ready: [`waits_unbound`]; the bundle's disk
//! and key once the instance holds its own copy and its clone finished, the agent's pods and
//! Events once a handoff is accepted, the cluster's Route hosts once ours exists), so a settled
//! instance costs a handful of GETs. The bundle and the cluster's Route hosts come from the shared
//! views ([`crate::actors::runtime::views`]), never from a list.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{
    Event, PersistentVolumeClaim, Pod, Secret, Service, ServiceAccount,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::actors::instance::crc::scope::{Error, Scope};
use crate::actors::instance::crc::{agent, inputs};
use crate::actors::runtime::api_error::Doing;
use crate::actors::runtime::context::Context;
use crate::actors::runtime::views::RouteHost;
use crate::api::bundle::{BundlePhase, CRCBundle};
use crate::api::common::LocalRef;
use crate::api::instance::{ClusterInstance, ClusterInstanceStatus, InstancePhase};
use crate::cdi::DataVolume;
use crate::kubevirt::{VirtualMachine, VirtualMachineInstance};
use crate::resources::instance as res;
use crate::route::Route;

/// What the API server (and, last, the guest API) showed one pass. `None` is "not there" or "not
/// read": the plan never reaches a step whose input was skipped.
#[derive(Clone, Default)]
pub struct Observed {
    pub vm: Option<VirtualMachine>,
    pub vmi: Option<VirtualMachineInstance>,
    pub data_volume: Option<DataVolume>,
    /// The golden PVC the binding names, while the clone of it has not finished.
    pub bound_pvc: Option<PersistentVolumeClaim>,
    /// The pull secret the template names (or `pull-secret`).
    pub pull_secret: Option<Secret>,
    /// Manual path: the Secret `bundleSSHKeyRef` names.
    pub manual_key: Option<Secret>,
    /// Turnkey path: the bundle the template selects, by name.
    pub bundle: Option<CRCBundle>,
    /// The disk and key the bundle's status names, when a binding or a restore may need them,
    /// looked up in the operator namespace (whatever namespace the status names: anyone who
    /// may write `crcbundles/status` could name any).
    pub bundle_pvc: Option<PersistentVolumeClaim>,
    pub bundle_key: Option<Secret>,
    /// Where they were looked up: the operator namespace.
    pub bundle_namespace: String,
    /// The instance's own copy of the boot key.
    pub boot_key_copy: Option<Secret>,
    pub agent_role: Option<Role>,
    pub network_policy: Option<NetworkPolicy>,
    pub agent_account: Option<ServiceAccount>,
    pub agent_binding: Option<RoleBinding>,
    pub service: Option<Service>,
    pub route: Option<Route>,
    pub identity: Option<Secret>,
    /// The instance's own guest SSH key.
    pub guest_key: Option<Secret>,
    /// `ingresses.config.openshift.io/cluster` `spec.domain`, while our Route does not exist.
    pub ingress_domain: Option<String>,
    /// Every Route's host in the cluster, while ours does not exist (uniqueness before create).
    pub route_hosts: Vec<RouteHost>,
    /// The crc-agent Job of the recorded VMI UID (deleted when that VMI is replaced).
    pub recorded_agent_job: Option<Job>,
    /// The handoff Secret of the live VMI.
    pub handoff: Option<Secret>,
    /// The crc-agent Job of the live VMI, its pods and the Events that explain a pod that does
    /// not start; pods and Events only while no handoff is accepted.
    pub agent_job: Option<Job>,
    pub agent_pods: Vec<Pod>,
    pub agent_events: Vec<Event>,
    /// `<instance>-kubeconfig`.
    pub kubeconfig: Option<Secret>,
    /// The readiness probe through the Route, once the plan asked for it
    /// ([`crate::actors::instance::crc::plan::End::Probe`]): `Err` holds why it failed.
    pub probe: Option<Result<(), String>>,
}

/// A turnkey instance with no boot-key binding whose bundle is not Ready: the plan stops at the
/// bundle wait, and nothing of the instance's own can exist yet (the binding is written ahead of
/// any disk), so its VM, VMI, DataVolume and key copy are not read. A thousand instances waiting
/// for their bundles then cost one GET each per pass (the pull secret, checked first); an object
/// of someone else's under one of their names is reported once the bundle is Ready.
pub fn waits_unbound(
    instance: &ClusterInstance,
    status: &ClusterInstanceStatus,
    bundle: Option<&CRCBundle>,
) -> bool {
    let bound = status.crc.as_ref().is_some_and(|c| c.boot_key.is_some());
    let bundle_ready = bundle
        .and_then(|b| b.status.as_ref())
        .is_some_and(|s| s.phase == Some(BundlePhase::Ready));
    !inputs::is_manual(instance)
        && !bound
        && !bundle_ready
        && status.phase != Some(InstancePhase::Ready)
}

/// Reads what a pass over `instance` (with its pass-start `status`) can use.
pub async fn observe(
    instance: &ClusterInstance,
    status: &ClusterInstanceStatus,
    ctx: &Context,
) -> Result<Box<Observed>, Error> {
    let reader = Reader::new(instance, ctx);
    let name = instance.name_any();
    let crc = status.crc.clone().unwrap_or_default();
    let template = &instance.spec.template;
    let vm_name = crc.vm_name.clone().unwrap_or_else(|| res::vm_name(&name));
    let dv_name = crc
        .data_volume_name
        .clone()
        .unwrap_or_else(|| res::root_disk_name(&name));

    // On the heap: the objects of a pass add up to tens of KiB, too much to move around on an
    // async task's stack.
    let mut o = Box::<Observed>::default();
    if !inputs::is_manual(instance) {
        // From the shared bundle view: a change of the bundle wakes the instance anyway.
        o.bundle = ctx
            .views
            .bundle(&inputs::bundle_name(instance))
            .await
            .map_err(reader.view_err())?
            .map(|b| b.as_ref().clone());
    }
    o.pull_secret = reader
        .user_secret(&inputs::pull_secret_name(instance))
        .await?;
    if waits_unbound(instance, status, o.bundle.as_ref()) {
        return Ok(o);
    }
    o.vm = reader.get(&reader.ns(), &vm_name).await?;
    o.vmi = reader.get(&reader.ns(), &vm_name).await?;
    o.data_volume = reader.get(&reader.ns(), &dv_name).await?;

    if let Some(key_ref) = template
        .bundle_ssh_key_ref
        .as_ref()
        .and_then(LocalRef::name)
        && inputs::is_manual(instance)
    {
        o.manual_key = reader.user_secret(key_ref).await?;
    }
    if !inputs::is_manual(instance) {
        o.boot_key_copy = reader
            .get(&reader.ns(), &res::boot_key_secret_name(&name))
            .await?;
        let binding = crc.boot_key.as_ref();
        // The bundle's disk and key matter for a binding still to make, a copy to restore, or
        // a disk still to clone; afterwards the instance no longer depends on them.
        let needs_copy =
            !crate::actors::instance::crc::inputs::instance_keyed(&crc, o.data_volume.as_ref());
        let needs_source = binding.is_none()
            || (needs_copy && o.boot_key_copy.is_none())
            || o.data_volume.is_none();
        if needs_source && let Some(bundle) = &o.bundle {
            let bs = bundle.status.clone().unwrap_or_default();
            let ns = ctx.namespace.clone();
            o.bundle_namespace = ns.clone();
            let at: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
            if let Some(name) = bs.qcow2_pvc_ref.as_ref().and_then(LocalRef::name) {
                o.bundle_pvc = reader.get(&at, name).await?;
            }
            let at: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
            if let Some(name) = bs.ssh_key_secret_ref.as_ref().and_then(LocalRef::name) {
                o.bundle_key = reader.get(&at, name).await?;
            }
        }
        let cloning = o.data_volume.as_ref().is_some_and(|dv| {
            !dv.status
                .as_ref()
                .and_then(|s| s.phase)
                .is_some_and(|p| p.is_succeeded())
        });
        if let Some(binding) = binding
            && cloning
        {
            let at: Api<PersistentVolumeClaim> =
                Api::namespaced(ctx.client.clone(), &binding.pvc_namespace);
            o.bound_pvc = reader.get(&at, &binding.pvc_name).await?;
        }
    }

    let recorded_vmi = crc.vmi_uid.clone().filter(|u| !u.is_empty());
    // Exposure and agent matter once a guest runs; the published kubeconfig also when a
    // recorded VMI may have gone (it is then withdrawn).
    if o.vmi.is_some() || recorded_vmi.is_some() {
        o.kubeconfig = reader
            .get(&reader.ns(), &res::kubeconfig_secret_name(&name))
            .await?;
    }
    if o.vmi.is_some() {
        o.agent_role = reader
            .get(&reader.ns(), &res::agent_role_name(&name))
            .await?;
        o.agent_account = reader
            .get(&reader.ns(), &res::agent_account_name(&name))
            .await?;
        o.agent_binding = reader
            .get(&reader.ns(), &res::agent_binding_name(&name))
            .await?;
        o.service = reader
            .get(&reader.ns(), &res::api_service_name(&name))
            .await?;
        o.network_policy = reader
            .get(&reader.ns(), &res::guest_policy_name(&name))
            .await?;
        o.route = reader
            .get(&reader.ns(), &res::api_route_name(&name))
            .await?;
        o.identity = reader
            .get(&reader.ns(), &res::identity_secret_name(&name))
            .await?;
        o.guest_key = reader
            .get(&reader.ns(), &res::guest_key_secret_name(&name))
            .await?;
        if o.route.is_none() {
            o.ingress_domain = reader.ingress_domain().await?;
            o.route_hosts = ctx.views.route_hosts().await.map_err(reader.view_err())?;
        }
    }

    if let Some(uid) = &recorded_vmi {
        o.recorded_agent_job = reader
            .get(&reader.ns(), &res::agent_job_name(&name, uid))
            .await?;
    }
    if let Some(vmi_uid) = o.vmi.as_ref().and_then(|v| v.uid()) {
        o.handoff = reader
            .get(&reader.ns(), &res::handoff_secret_name(&name, &vmi_uid))
            .await?;
        let accepted = o
            .handoff
            .as_ref()
            .is_some_and(|s| agent::accept_handoff(s, &reader.uid, &vmi_uid).is_some());
        o.agent_job = if recorded_vmi.as_deref() == Some(vmi_uid.as_str()) {
            o.recorded_agent_job.clone()
        } else {
            reader
                .get(&reader.ns(), &res::agent_job_name(&name, &vmi_uid))
                .await?
        };
        if !accepted && let Some(job) = &o.agent_job {
            o.agent_pods = reader.agent_pods(job).await?;
            o.agent_events = reader.agent_events(&job.name_any(), &o.agent_pods).await?;
        }
    }
    Ok(o)
}

struct Reader<'a> {
    scope: Scope<'a>,
    uid: String,
}

impl<'a> Reader<'a> {
    fn new(instance: &ClusterInstance, ctx: &'a Context) -> Self {
        Self {
            scope: Scope::new(instance, ctx),
            uid: instance.uid().unwrap_or_default(),
        }
    }

    fn ns<K>(&self) -> Api<K>
    where
        K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        self.scope.ns()
    }

    fn err(&self, what: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
        self.scope.err(Doing::Read, what)
    }

    fn view_err(&self) -> impl FnOnce(crate::actors::runtime::views::Error) -> Error {
        let instance = self.scope.name.clone();
        move |source| Error::View { instance, source }
    }

    async fn get<K>(&self, api: &Api<K>, name: &str) -> Result<Option<K>, Error>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    {
        api.get_opt(name)
            .await
            .map_err(self.err(format!("{} {name}", K::kind(&()))))
    }

    /// A user Secret of the instance's namespace, through the shared copy
    /// ([`crate::actors::runtime::user_secrets`]).
    async fn user_secret(&self, name: &str) -> Result<Option<Secret>, Error> {
        let ctx = self.scope.ctx;
        ctx.user_secrets
            .get(&self.ns(), &self.scope.namespace, name)
            .await
            .map(|s| s.map(|s| s.as_ref().clone()))
            .map_err(self.err(format!("Secret {name}")))
    }

    async fn ingress_domain(&self) -> Result<Option<String>, Error> {
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("config.openshift.io", "v1", "Ingress"),
            "ingresses",
        );
        let api = Api::<DynamicObject>::all_with(self.scope.ctx.client.clone(), &resource);
        let ingress = match api.get_opt("cluster").await {
            Ok(i) => i,
            Err(kube::Error::Api(s)) if s.code == 404 => None,
            Err(e) => return Err(self.err("ingresses.config.openshift.io/cluster")(e)),
        };
        Ok(ingress
            .and_then(|i| i.data.pointer("/spec/domain")?.as_str().map(str::to_owned))
            .filter(|d| !d.is_empty()))
    }

    async fn agent_pods(&self, job: &Job) -> Result<Vec<Pod>, Error> {
        crate::actors::job_pods::of(&self.scope.ctx.client, &self.scope.namespace, job)
            .await
            .map_err(self.err(format!("pods of Job {}", job.name_any())))
    }

    /// Events that explain a pod that is not created (the Job's, while it has no pod) or does
    /// not start (a Pending pod's); a running or finished agent needs none, so none are read.
    async fn agent_events(&self, job: &str, pods: &[Pod]) -> Result<Vec<Event>, Error> {
        let names: Vec<String> = if pods.is_empty() {
            vec![job.to_owned()]
        } else {
            pods.iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Pending"))
                .map(|p| p.name_any())
                .collect()
        };
        let mut events = Vec::new();
        for name in names {
            let selector = format!("involvedObject.name={name}");
            events.extend(
                self.ns::<Event>()
                    .list(&ListParams::default().fields(&selector))
                    .await
                    .map_err(self.err(format!("Events of {name}")))?
                    .items,
            );
        }
        Ok(events)
    }
}
