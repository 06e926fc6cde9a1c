//! The scheduler and kubelet of the one simulated Node (docs/simulation.md, "Node, scheduling
//! and pods").
//!
//! - `node`: the Node object, its Lease and Ready heartbeat.
//! - `pods`: the level-triggered loop: binds unbound pods to the node, starts a `worker` per
//!   pod of our image, forwards deletions, marks pods of a previous kubelet lost.
//! - `worker`: one pod's life: `plan` (pure: pod spec → sandbox files and processes, with
//!   `$(VAR)` expansion in `expand`, and path rewriting), `process` (local processes), `status`
//!   (pure: pod status patches), and finishing the deletion.
//!
//! Who owns which pod on the node:
//!
//! | pod | bound by | run and status by | deletion finished by |
//! |---|---|---|---|
//! | every container image starts with `our_image_prefix` | kubelet | kubelet | kubelet |
//! | virt-launcher (label `kubevirt.io=virt-launcher`) | kubelet | `sim::kubevirt` | `sim::kubevirt` |
//! | anything else | kubelet | nobody (stays `Pending`) | kubelet, at once |

mod expand;
mod node;

mod plan;
mod pods;
mod process;
pub(crate) mod status;
mod worker;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

pub use node::{LEASE_NAMESPACE, NODE_IP, SIM_NODE_LABEL};
pub use plan::{OUR_BINARY_NAME, is_our_binary, sandbox_dir};
pub(crate) use pods::patch_status;

use super::{Error, Options, SimContext};

/// Label (key, value) of virt-launcher pods: `sim::kubevirt` runs them, not the kubelet.
pub const LAUNCHER_LABEL: (&str, &str) = ("kubevirt.io", "virt-launcher");

/// Whether `pod` is a virt-launcher pod (left to `sim::kubevirt` except for binding).
pub fn is_launcher_pod(pod: &Pod) -> bool {
    let (key, value) = LAUNCHER_LABEL;
    pod.metadata
        .labels
        .as_ref()
        .and_then(|labels| labels.get(key))
        .is_some_and(|v| v == value)
}

/// Whether the kubelet runs `pod` as local processes: not a launcher pod, and every container's
/// image starts with `our_image_prefix`.
pub fn runs_pod(options: &Options, pod: &Pod) -> bool {
    let containers = pod.spec.iter().flat_map(|s| &s.containers);
    let mut images = containers.map(|c| c.image.as_deref().unwrap_or_default());
    !is_launcher_pod(pod)
        && !options.our_image_prefix.is_empty()
        && images.all(|image| image.starts_with(&options.our_image_prefix))
        && pod.spec.as_ref().is_some_and(|s| !s.containers.is_empty())
}

/// Installs the fake tools, registers the Node, then heartbeats and runs pods until aborted.
/// Aborting it kills every process it started.
pub async fn run(ctx: Arc<SimContext>) -> Result<(), Error> {
    let root = ctx.options.root.clone();
    let tools_bin = tokio::task::spawn_blocking(move || super::tools::install(&root))
        .await
        .map_err(|e| Error::Other(format!("installing the fake tools: {e}")))??;
    node::register(&ctx).await;
    tokio::try_join!(
        node::heartbeat(ctx.clone()),
        pods::run(ctx.clone(), tools_bin)
    )?;
    Ok(())
}
