//! The importer pod's container (containerized-data-importer v1.65.0
//! `cmd/cdi-importer/importer.go`): `IMPORTER_SOURCE` `none` creates a blank image,
//! `http` downloads `IMPORTER_ENDPOINT`; both size the image to what the volume offers.
//!
//! A Filesystem volume gets `disk.img` of the usable space: the smaller of the volume's free
//! space and `IMPORTER_IMAGE_SIZE`, less `FILESYSTEM_OVERHEAD` and rounded down to 1 MiB
//! (`createBlankImage`, `DataProcessor.resize`, `util.GetUsableSpace`); a Block volume is the
//! device itself (a blank one without preallocation is left as it is: "exactly an empty PVC").

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::Shared;
use super::data::{self, Failure};
use super::pod::{self, Outcome, Target};
use crate::quantity::parse_quantity;
use crate::volumes::VolumeMode;

/// CDI's alignment of image sizes (`util.DefaultAlignBlockSize`).
const ALIGN: u64 = 1024 * 1024;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// The image being written, renamed into place once complete.
pub(super) const PARTIAL_FILE: &str = ".disk.img.partial";
/// A download before conversion.
const DOWNLOAD_FILE: &str = ".download";
/// The importer's message once done (`completeMessage`).
const COMPLETE: &str = "Import Complete";

/// `util.GetUsableSpace`: the image size that leaves `overhead` of `available` to the
/// filesystem, aligned down.
pub(super) fn usable_space(overhead: f64, available: u64) -> u64 {
    let without = (available as f64 / (1.0 + overhead)).ceil() as u64;
    without / ALIGN * ALIGN
}

/// Simulated transfer time: `per_gib` for each GiB of allocated data, and at least `per_gib`.
pub(super) fn transfer_time(per_gib: Duration, allocated_bytes: u64) -> Duration {
    per_gib.mul_f64((allocated_bytes as f64 / GIB).max(1.0))
}

/// The overhead a worker pod was given (`FILESYSTEM_OVERHEAD`, `0` when unset as in CDI).
pub(super) fn overhead(pod: &Pod) -> f64 {
    pod::env(pod, "FILESYSTEM_OVERHEAD")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

pub async fn run(shared: &Shared, pod: &Pod, target: &Target) -> Outcome {
    let source = pod::env(pod, "IMPORTER_SOURCE").unwrap_or_default();
    let requested = pod::env(pod, "IMPORTER_IMAGE_SIZE").and_then(parse_quantity);
    let preallocation = pod::env(pod, "IMPORTER_PREALLOCATION") == Some("true");
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
            Ok(pod::json_message(
                COMPLETE,
                json!({"preallocationApplied": preallocation}),
            ))
        }
        "http" => {
            let url = pod::env(pod, "IMPORTER_ENDPOINT").unwrap_or_default();
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
            Ok(pod::json_message(
                COMPLETE,
                json!({"scratchSpaceRequired": false, "preallocationApplied": false}),
            ))
        }
        other => Err(Failure {
            message: format!("Unknown data source: {other}"),
        }),
    }
}

/// Gives the finished image to the volume: owned by the worker's user 107 (its fsGroup on the
/// volume), mode `0660` (`data-processor.go`), renamed over `disk.img` or the device.
pub(super) async fn into_place(partial: &Path, target: &Target) -> Result<(), Failure> {
    let ownership = crate::permissions::Ownership {
        dir: target.volume.dir.clone(),
        group: crate::permissions::QEMU_ID,
        read_only: false,
    };
    crate::permissions::apply(&ownership)
        .map_err(|e| Failure::processing(format!("applying fsGroup 107: {e}")))?;
    std::os::unix::fs::chown(partial, Some(crate::permissions::QEMU_ID), None)
        .and_then(|()| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(partial, std::fs::Permissions::from_mode(0o660))
        })
        .map_err(|e| Failure::processing(format!("owning {}: {e}", partial.display())))?;
    tokio::fs::rename(partial, target.volume.content())
        .await
        .map_err(|e| Failure::processing(format!("renaming the image into place: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usable_space_is_cdis_reverse_of_the_inflated_request() {
        // A 1Gi DataVolume's Filesystem PVC asks for ceil(1Gi × 1.055) bytes; the importer
        // gives the image back the 1Gi.
        let inflated = (1024.0 * 1024.0 * 1024.0 * 1.055f64).ceil() as u64;
        assert_eq!(usable_space(0.055, inflated), 1024 * 1024 * 1024);
        assert_eq!(usable_space(0.0, 64 * ALIGN + 5), 64 * ALIGN);
    }
}
