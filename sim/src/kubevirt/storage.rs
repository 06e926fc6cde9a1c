//! The `disk.img` inside the PVC behind a VMI's volume.

use kube::api::{ApiResource, GroupVersionKind};

use crate::{Error, SimContext};

/// CDI's DataVolume (`cdi.kubevirt.io/v1beta1`).
pub fn data_volume_resource() -> ApiResource {
    ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("cdi.kubevirt.io", "v1beta1", "DataVolume"),
        "datavolumes",
    )
}

/// The volume of the bound PVC `claim` (its disk is [`ClaimVolume::content`]), or why there is
/// none.
pub async fn disk_image(
    ctx: &SimContext,
    namespace: &str,
    claim: &str,
) -> Result<Result<crate::volumes::ClaimVolume, String>, Error> {
    Ok(ctx
        .volumes
        .claim_volume(&ctx.client, namespace, claim)
        .await?
        .ok_or_else(|| format!("PVC {namespace}/{claim} does not exist or is not bound")))
}
