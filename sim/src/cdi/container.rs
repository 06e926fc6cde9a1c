//! What a CDI worker container reads from its pod (its literal environment, its data claim) and
//! leaves behind (its termination message, its image in the volume), shared by the importer and
//! the clone's two containers.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{Value, json};

use super::data::Failure;
use crate::volumes::ClaimVolume;

/// CDI's alignment of image sizes (`util.DefaultAlignBlockSize`).
const ALIGN: u64 = 1024 * 1024;
const GIB: f64 = 1024.0 * 1024.0 * 1024.0;
/// The image being written, renamed into place once complete.
pub const PARTIAL_FILE: &str = ".disk.img.partial";
/// How a container's run ended well: its termination message.
pub type Outcome = Result<String, Failure>;

/// The value of the first container's literal environment variable `name`.
pub fn env<'a>(pod: &'a Pod, name: &str) -> Option<&'a str> {
    pod.spec
        .as_ref()?
        .containers
        .first()?
        .env
        .as_ref()?
        .iter()
        .find(|e| e.name == name)?
        .value
        .as_deref()
}

/// The claim of the pod's data volume (CDI's `cdi-data-vol`).
pub fn data_claim(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .volumes
        .as_ref()?
        .iter()
        .find(|v| v.name == "cdi-data-vol")?
        .persistent_volume_claim
        .as_ref()
        .map(|c| c.claim_name.as_str())
}

/// A bound claim's volume and the bytes it offers (its capacity, else its request).
#[derive(Clone, Debug)]
pub struct Target {
    pub volume: ClaimVolume,
    pub capacity: u64,
}

/// The termination message of a container that wrote JSON (CDI's `TerminationMessage`).
pub fn json_message(message: &str, extra: Value) -> String {
    let mut value = json!({"message": message});
    if let (Some(object), Some(extra)) = (value.as_object_mut(), extra.as_object()) {
        object.extend(extra.clone());
    }
    value.to_string()
}

/// `util.GetUsableSpace`: the image size that leaves `overhead` of `available` to the
/// filesystem, aligned down.
pub fn usable_space(overhead: f64, available: u64) -> u64 {
    let without = (available as f64 / (1.0 + overhead)).ceil() as u64;
    without / ALIGN * ALIGN
}

/// Simulated transfer time: `per_gib` for each GiB of allocated data, and at least `per_gib`.
pub fn transfer_time(per_gib: Duration, allocated_bytes: u64) -> Duration {
    per_gib.mul_f64((allocated_bytes as f64 / GIB).max(1.0))
}

/// The overhead a worker pod was given (`FILESYSTEM_OVERHEAD`, `0` when unset as in CDI).
pub fn overhead(pod: &Pod) -> f64 {
    env(pod, "FILESYSTEM_OVERHEAD")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

/// Gives the finished image to the volume: owned by the worker's user 107 (its fsGroup on the
/// volume), mode `0660` (`data-processor.go`), renamed over `disk.img` or the device.
pub async fn into_place(partial: &Path, target: &Target) -> Result<(), Failure> {
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
