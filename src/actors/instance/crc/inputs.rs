//! What an instance's template and recorded backing select, read by both the observation and
//! the plan of a CRC pass: the bundle, the manual path, the user Secrets, whether the disk is
//! keyed to the instance.

use crate::api::common::LocalRef;
use crate::api::instance::{CRCBackingStatus, ClusterInstance};
use crate::cdi::DataVolume;

/// The bundle a template selects (`crcBundleRef`, else `crc-<crcVersion>-<arch>`).
pub fn bundle_name(instance: &ClusterInstance) -> String {
    crate::actors::resolve::bundle_name(&instance.spec.template).unwrap_or_default()
}

/// The manual path: neither `crcVersion` nor `crcBundleRef`, the disk comes from `releaseImage`.
pub fn is_manual(instance: &ClusterInstance) -> bool {
    let template = &instance.spec.template;
    template.crc_version().is_none() && template.crc_bundle_ref().is_none()
}

/// The user Secrets (in the instance's namespace) whose creation or change can unblock it: the
/// pull secret, and on the manual path the `bundleSSHKeyRef` Secret.
pub fn user_secret_names(instance: &ClusterInstance) -> [Option<String>; 2] {
    let manual_key = is_manual(instance)
        .then(|| {
            instance
                .spec
                .template
                .bundle_ssh_key_ref
                .as_ref()
                .and_then(LocalRef::name)
                .map(str::to_owned)
        })
        .flatten();
    [Some(pull_secret_name(instance)), manual_key]
}

/// The pull secret the template names, or upstream's default.
pub fn pull_secret_name(instance: &ClusterInstance) -> String {
    instance
        .spec
        .template
        .pull_secret_ref
        .as_ref()
        .and_then(LocalRef::name)
        .map(str::to_owned)
        .unwrap_or_else(|| crate::api::template::DEFAULT_PULL_SECRET.to_owned())
}

/// Whether the observed root disk's guest authorizes only the instance key: the crc-agent
/// revoked the bundle key on that very DataVolume (by UID). A replaced disk is a fresh clone
/// again, which needs the bundle key.
pub fn instance_keyed(crc: &CRCBackingStatus, data_volume: Option<&DataVolume>) -> bool {
    let uid = data_volume.and_then(|dv| dv.metadata.uid.as_deref());
    uid.is_some() && crc.instance_key_data_volume_uid.as_deref() == uid
}
