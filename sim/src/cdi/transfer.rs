//! A host-assisted clone's two pods (containerized-data-importer v1.65.0
//! `pkg/controller/clone-controller.go`, `pkg/controller/upload-controller.go`): the upload
//! server on the target claim (`cmd/cdi-uploadserver`), and the clone source on the source claim
//! (`cmd/cdi-cloner/clone-source.go`), which streams its volume to the upload server's Service
//! named in `UPLOAD_URL` (`https://cdi-upload-<target>.<namespace>.svc/...`).
//!
//! Here the source's player copies its volume straight into the target's (sparse, grown to the
//! usable space of a Filesystem target, as the upload server resizes the image it receives),
//! then hands over to the upload server's player; both end `Clone Complete` (the clone
//! controller waits for the upload pod Succeeded and the source pod finished, in either order).

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use serde_json::json;
use tokio::sync::oneshot;

use super::Shared;
use super::container::{
    self, Outcome, PARTIAL_FILE, Target, into_place, overhead, transfer_time, usable_space,
};
use super::data::{self, Failure};
use crate::volumes::VolumeMode;

/// An upload server waiting for its clone source.
struct Waiting {
    target: Target,
    /// The image size it was given (`UPLOAD_IMAGE_SIZE`) and its overhead.
    requested: Option<u64>,
    overhead: f64,
    /// Told once the data is in; answers once the upload server's container has ended.
    done: oneshot::Sender<oneshot::Sender<()>>,
}

/// Upload servers by their Service's host name (`<service>.<namespace>.svc`).
#[derive(Default)]
pub struct Uploads {
    waiting: Mutex<HashMap<String, Waiting>>,
}

/// The host of an upload server's Service, named in the pod's `service` label (CDI derives it
/// from the pod's name, shortened to a DNS label: `naming.GetServiceNameFromResourceName`).
fn service_host(pod: &Pod) -> String {
    let service = pod
        .labels()
        .get("service")
        .cloned()
        .unwrap_or_else(|| pod.name_any());
    format!("{service}.{}.svc", pod.namespace().unwrap_or_default())
}

/// An upload server that listens: registered for its clone source before it reports Running
/// (its readiness is what the clone controller waits for before creating the source).
pub struct Listening<'a> {
    received: oneshot::Receiver<oneshot::Sender<()>>,
    _unregister: Unregister<'a>,
}

/// Starts listening as `pod`'s upload server for `target`.
pub fn listen<'a>(shared: &'a Shared, pod: &Pod, target: &Target) -> Listening<'a> {
    let (done, received) = oneshot::channel();
    let host = service_host(pod);
    let waiting = Waiting {
        target: target.clone(),
        requested: container::env(pod, "UPLOAD_IMAGE_SIZE")
            .and_then(crate::quantity::parse_quantity),
        overhead: overhead(pod),
        done,
    };
    shared
        .uploads
        .waiting
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(host.clone(), waiting);
    Listening {
        received,
        _unregister: Unregister(shared, host),
    }
}

/// The upload server: ends when its clone source has copied the data in.
pub async fn serve(listening: Listening<'_>) -> Outcome {
    let Ok(ended) = listening.received.await else {
        return Err(Failure {
            message: "the clone source went away before the data was in".into(),
        });
    };
    // The source hears back (its POST returns) as the upload server ends.
    let _ = ended.send(());
    Ok(container::json_message(
        "Clone Complete",
        json!({"preallocationApplied": false}),
    ))
}

struct Unregister<'a>(&'a Shared, String);

impl Drop for Unregister<'_> {
    fn drop(&mut self) {
        self.0
            .uploads
            .waiting
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&self.1);
    }
}

/// The clone source: copies its volume into the upload server's of `UPLOAD_URL`.
pub async fn send(shared: &Shared, pod: &Pod, source: &Target) -> Outcome {
    let url = container::env(pod, "UPLOAD_URL")
        .unwrap_or_default()
        .to_owned();
    let host = url
        .strip_prefix("https://")
        .and_then(|rest| rest.split(['/', ':']).next())
        .unwrap_or_default()
        .to_owned();
    let waiting = shared
        .uploads
        .waiting
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&host);
    let Some(waiting) = waiting else {
        return Err(Failure {
            message: format!("Error POSTing to {url}: no upload server answers at {host}"),
        });
    };
    let target = &waiting.target;
    let size = match target.volume.mode {
        VolumeMode::Filesystem => {
            let available = waiting
                .requested
                .map_or(target.capacity, |r| r.min(target.capacity));
            usable_space(waiting.overhead, available)
        }
        VolumeMode::Block => target.capacity,
    };
    let from = source.volume.content();
    let meta = tokio::fs::metadata(&from)
        .await
        .map_err(|e| Failure::processing(format!("{}: {e}", from.display())))?;
    if meta.len() > size {
        return Err(Failure::processing(format!(
            "Virtual image size {} is larger than the reported available storage {size}. A \
             larger PVC is required.",
            meta.len()
        )));
    }
    let partial = target.volume.dir.join(PARTIAL_FILE);
    data::copy_sparse(&from, &partial).await?;
    data::grow_to(&partial, size).await?;
    let per_gib = shared.ctx.options.timings.clone;
    tokio::time::sleep(transfer_time(per_gib, meta.blocks() * 512)).await;
    into_place(&partial, target).await?;
    let (ended, heard) = oneshot::channel();
    if waiting.done.send(ended).is_err() {
        return Err(Failure {
            message: format!("Unexpected end of the upload to {url}"),
        });
    }
    let _ = heard.await;
    Ok("Clone Complete".to_owned())
}
