//! The simulated management cluster: the parts of an OpenShift + OpenShift Virtualization cluster
//! that cannot run on a machine without a hypervisor, played against the real kube-apiserver.
//!
//! The product crate does not depend on this one (only its tests do): it talks to the API server,
//! to pods' processes and to guests over SSH exactly as it would on a real cluster. See
//! `docs/simulation.md`. The `guestcluster-sim` binary (`src/main.rs`) runs the demo and
//! `dev up`.
//!
//! | module | plays |
//! |---|---|
//! | [`volumes`] | the storage provisioner: binds PVCs, one directory (with `disk.img`) per PVC |
//! | [`cdi`] | CDI's worker pods (importer, upload server, clone source) under upstream cdi-controller |
//! | [`kubelet`] | the scheduler + kubelet of one Node: runs our Job pods as local processes |
//! | [`installer`] | what the fake `openshift-install` makes (shell and guest-native), defined once |
//! | [`tools`] | fake `oc`, `openshift-install`, `coreos-installer` put first on Job pods' `PATH` |
//! | [`network`] | pod IPs: one loopback address (127.0.0.0/8) per pod |
//! | [`kubevirt`] | KubeVirt's node side: virt-handler, the kubelet's part for virt-launcher pods |
//! | [`platform`] | HCO's configuration of the `KubeVirt`; checks KubeVirt's and CDI's control planes |
//! | [`admission`] | SCC admission, served to the real API server |
//! | [`guest`] | CRC guests: a state model stored in the disk image, an SSH server per running VMI |
//! | [`openshift`] | each running guest's OpenShift API: a kube-apiserver plus simulated operators |
//! | [`route_proxy`] | the router for passthrough Routes, as an HTTP `CONNECT` proxy |
//! | [`bundles`], [`file_server`] | `.crcbundle` archives and an HTTP server for downloads |
//! | [`handoffs`] | measures (not simulates): the operator's delay from a finished step to its next write |
//! | [`demo`] | `guestcluster-sim demo`: control plane + simulation + operator, end to end |
//! | [`product_bin`] | finds the product binary the demo's Job pods run |
// The simulation plays other controllers (KubeVirt, CDI, the kubelet, the guests' API servers)
// and writes as they do, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

pub mod admission;
pub mod bundles;
pub mod cdi;
pub mod demo;
pub mod file_server;
pub mod guest;
pub mod handoffs;
pub mod installer;
pub mod job_accounts;
pub mod kubelet;
pub mod kubevirt;
pub mod network;
pub mod openshift;
pub mod permissions;
pub mod platform;
pub mod product_bin;
pub mod quantity;
pub mod route_proxy;
pub mod scc;
pub mod storage;
pub mod timing;
pub mod tools;
pub mod volumes;

use std::path::PathBuf;
use std::sync::Arc;

pub use timing::Timings;

/// Errors of the simulation's own machinery (not of the objects it plays).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("simulation I/O at {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("simulation API call: {0}")]
    Kube(#[from] kube::Error),
    #[error("{0}")]
    Admission(#[from] admission::server::Error),
    #[error("{0}")]
    Other(String),
}

/// How to run the simulation.
#[derive(Clone, Debug)]
pub struct Options {
    /// Where volumes, pod sandboxes, logs and fake tools live.
    pub root: PathBuf,
    /// Every simulated duration.
    pub timings: Timings,
    /// Kubeconfig of the control plane; pods reach the API server it names, as their own
    /// service account (never with its credentials).
    pub kubeconfig: PathBuf,
    /// The `guestcluster` binary that runs our Job subcommands.
    pub guestcluster_bin: PathBuf,
    /// Container images whose pods run `guestcluster_bin` (our image, whatever its tag).
    pub our_image_prefix: String,
    /// Name of the one simulated Node.
    pub node_name: String,
    /// Which kind of cluster to play.
    pub flavour: Flavour,
}

/// The kind of management cluster the simulation plays (docs/simulation.md, "Flavours").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Flavour {
    /// OpenShift with OpenShift Virtualization: SecurityContextConstraints (`restricted-v2`
    /// admission, UID ranges per namespace).
    #[default]
    OpenShift,
    /// Plain Kubernetes with KubeVirt and CDI: no SCCs.
    Kubernetes,
}

impl Flavour {
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "openshift" => Some(Flavour::OpenShift),
            "kubernetes" => Some(Flavour::Kubernetes),
            _ => None,
        }
    }
}

/// What every simulated controller shares.
pub struct SimContext {
    pub client: kube::Client,
    pub options: Options,
    pub volumes: volumes::VolumeStore,
    pub network: network::IpAllocator,
    /// Which pod each container process group is, for NetworkPolicy at guests' doors.
    pub pod_groups: Arc<network::ingress::PodGroups>,
    pub guests: guest::GuestHost,
}

/// A running simulation; dropping it (or [`Sim::shutdown`]) stops every simulated controller,
/// Job process and guest. Dropping it leaves the SCC webhook (OpenShift flavour) registered but no
/// longer served, so pod creates fail until a new simulation starts; [`Sim::shutdown`]
/// unregisters it.
///
/// KubeVirt's and CDI's control planes (upstream virt-api, virt-controller, cdi-apiserver and
/// cdi-controller) are the control plane's, not the simulation's: start them with
/// `testenv::ControlPlane::kubevirt` and `cdi_controller` first.
pub struct Sim {
    pub ctx: Arc<SimContext>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// Kept until the controllers are stopped; dropping it stops serving the webhooks.
    admission: Option<admission::server::AdmissionServer>,
}

impl Sim {
    /// Starts every simulated controller against `client`'s cluster, which must have KubeVirt
    /// installed (`testenv::ControlPlane::kubevirt`).
    pub async fn start(client: kube::Client, options: Options) -> Result<Sim, Error> {
        std::fs::create_dir_all(&options.root).map_err(|source| Error::Io {
            path: options.root.clone(),
            source,
        })?;
        // The sandboxes and volumes below are reached by every pod's user.
        let open = <std::fs::Permissions as std::os::unix::fs::PermissionsExt>::from_mode(0o755);
        std::fs::set_permissions(&options.root, open).map_err(|source| Error::Io {
            path: options.root.clone(),
            source,
        })?;
        searchable(&options.root)?;
        searchable(&options.guestcluster_bin)?;
        platform::ensure(&client).await?;
        storage::apply_classes(&client, options.flavour).await?;
        if options.flavour == Flavour::OpenShift {
            scc::crd::ensure(&client).await?;
        }
        // Before any controller allocates: pods and VMIs of an earlier run keep their addresses.
        let network = network::IpAllocator::default();
        network::reserve_existing(&client, &network).await?;
        // Served and registered before any controller writes (as KubeVirt's and CDI's are before
        // their operators report Deployed), and never left registered by a failed start.
        let namespaces = scc::Namespaces::default();
        let openshift = options.flavour == Flavour::OpenShift;
        let mut tasks = Vec::new();
        // Before admission: SCC admission waits for a namespace's ranges (the probe's too).
        if openshift {
            tasks.push(spawn(
                "scc-allocator",
                scc::allocator::run(client.clone(), namespaces.clone()),
            ));
        }
        let admission = match admission::server::AdmissionServer::start(namespaces) {
            Ok(admission) => admission,
            Err(err) => {
                tasks.iter().for_each(|t| t.abort());
                return Err(err.into());
            }
        };
        if let Err(err) = admission::server::install(&client, &admission, openshift).await {
            tasks.iter().for_each(|t| t.abort());
            if let Err(cleanup) = admission::server::uninstall(&client).await {
                tracing::warn!("simulation start: {cleanup}");
            }
            return Err(err.into());
        }
        let pod_groups = Arc::new(network::ingress::PodGroups::default());
        let ingress = network::ingress::Ingress::new(client.clone(), pod_groups.clone());
        let ctx = Arc::new(SimContext {
            volumes: volumes::VolumeStore::new(options.root.join("volumes")),
            network,
            pod_groups,
            guests: guest::GuestHost::on_pod_network(options.timings.clone(), ingress),
            client,
            options,
        });
        tasks.extend([
            spawn("volumes", volumes::run(ctx.clone())),
            spawn("cdi", cdi::run(ctx.clone())),
            spawn("kubelet", kubelet::run(ctx.clone())),
            spawn("kubevirt", kubevirt::run(ctx.clone())),
        ]);
        Ok(Sim {
            ctx,
            tasks,
            admission: Some(admission),
        })
    }

    /// Serves each guest's OpenShift API while its kubelet runs, with API servers started by
    /// `launcher` on the control plane's etcd (see [`openshift`]), and gives the guests an `oc`
    /// (the launcher's `kubectl`) that reaches them.
    pub fn serve_guest_apis(&mut self, launcher: testenv::ApiServerLauncher) {
        self.ctx.guests.set_kubectl(launcher.kubectl());
        self.tasks.push(spawn(
            "guest-apis",
            openshift::link::run(self.ctx.clone(), launcher),
        ));
    }

    /// Stops every simulated controller, Job process and guest, and unregisters the admission
    /// webhooks (a control plane without a simulation admits everything, as before it started).
    pub async fn shutdown(mut self) {
        self.stop_tasks();
        self.ctx.guests.shutdown_all().await;
        if let Err(err) = admission::server::uninstall(&self.ctx.client).await {
            tracing::warn!("simulation shutdown: {err}");
        }
        self.admission = None;
    }

    fn stop_tasks(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
    }
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.stop_tasks();
    }
}

/// Pods run as their own users and reach their sandboxes, volumes and our binary by host paths:
/// each directory above `path` that others cannot search (a test's private temporary directory,
/// a home directory) gets search permission only (`go+x`: no listing). The group too: a pod's
/// primary group is 0, and a directory of group 0 without `g+x` stops it whatever `o+x` says.
fn searchable(path: &std::path::Path) -> Result<(), Error> {
    use std::os::unix::fs::PermissionsExt;
    let io = |path: &std::path::Path| {
        let path = path.to_owned();
        move |source| Error::Io { path, source }
    };
    let path = std::fs::canonicalize(path).map_err(io(path))?;
    for dir in path.ancestors().skip(1) {
        let mode = std::fs::metadata(dir)
            .map_err(io(dir))?
            .permissions()
            .mode();
        if mode & 0o011 != 0o011 {
            tracing::info!(dir = %dir.display(), "simulation: made searchable for pods' users");
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode | 0o011))
                .map_err(io(dir))?;
        }
    }
    Ok(())
}

fn spawn(
    name: &'static str,
    controller: impl std::future::Future<Output = Result<(), Error>> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(err) = controller.await {
            tracing::error!(controller = name, "simulated controller stopped: {err}");
        }
    })
}
