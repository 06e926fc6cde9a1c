//! The importer pod's container (containerized-data-importer v1.65.0
//! `cmd/cdi-importer/importer.go`): `IMPORTER_SOURCE` `none` creates a blank image,
//! `http` downloads `IMPORTER_ENDPOINT`; both size the image to what the volume offers.
//!
//! A Filesystem volume gets `disk.img` of the usable space: the smaller of the volume's free
//! space and `IMPORTER_IMAGE_SIZE`, less `FILESYSTEM_OVERHEAD` and rounded down to 1 MiB
//! (`createBlankImage`, `DataProcessor.resize`, `util.GetUsableSpace`); a Block volume is the
//! device itself (a blank one without preallocation is left as it is: "exactly an empty PVC").

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::Shared;
use super::container::{
    self, Outcome, PARTIAL_FILE, Target, into_place, overhead, transfer_time, usable_space,
};
use super::data::{self, Failure};
use crate::quantity::parse_quantity;
use crate::volumes::VolumeMode;

/// A download before conversion.
const DOWNLOAD_FILE: &str = ".download";
/// The importer's message once done (`completeMessage`).
const COMPLETE: &str = "Import Complete";

pub async fn run(shared: &Shared, pod: &Pod, target: &Target) -> Outcome {
    let source = container::env(pod, "IMPORTER_SOURCE").unwrap_or_default();
    let requested = container::env(pod, "IMPORTER_IMAGE_SIZE").and_then(parse_quantity);
    let preallocation = container::env(pod, "IMPORTER_PREALLOCATION") == Some("true");
    let available = requested.map_or(target.capacity, |r| r.min(target.capacity));
    let size = match target.volume.mode {
        VolumeMode::Filesystem => usable_space(overhead(pod), available),
        VolumeMode::Block => target.capacity,
    };
    match source {
        "none" => {
            if target.volume.mode == VolumeMode::Filesystem || preallocation {
                let partial = target.volume.dir.join(PARTIAL_FILE);
                data::sparse_file(&partial, size).await?;
                into_place(&partial, target).await?;
            }
            tokio::time::sleep(transfer_time(shared.ctx.options.timings.import, 0)).await;
            Ok(container::json_message(
                COMPLETE,
                json!({"preallocationApplied": preallocation}),
            ))
        }
        "http" => {
            let url = container::env(pod, "IMPORTER_ENDPOINT").unwrap_or_default();
            let dir = &target.volume.dir;
            let download = dir.join(DOWNLOAD_FILE);
            let partial = dir.join(PARTIAL_FILE);
            let moved = data::http::download_to(url, &download).await;
            let moved = match moved {
                Ok(moved) => moved,
                Err(failure) => {
                    let _ = tokio::fs::remove_file(&download).await;
                    return Err(failure);
                }
            };
            let converted = data::to_raw(&download, &partial).await;
            let _ = tokio::fs::remove_file(&download).await;
            converted?;
            data::fit_into(&partial, size).await?;
            tokio::time::sleep(transfer_time(shared.ctx.options.timings.import, moved)).await;
            into_place(&partial, target).await?;
            Ok(container::json_message(
                COMPLETE,
                json!({"scratchSpaceRequired": false, "preallocationApplied": false}),
            ))
        }
        other => Err(Failure {
            message: format!("Unknown data source: {other}"),
        }),
    }
}
