//! A bundle the operator created on pools' behalf removes itself once nobody refers to it for
//! the policy's grace (`--pool-bundle-gc-grace-seconds`): a pool's template that selects it, or an
//! instance whose disk came from it.

use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

use crate::api::{ClusterInstance, ClusterPool};

/// Whether a pool or an instance still refers to the bundle `name` (UID `uid`): a template that
/// selects it, or an instance bound to it.
pub fn referenced(
    name: &str,
    uid: &str,
    pools: &[ClusterPool],
    instances: &[ClusterInstance],
) -> bool {
    let selects = |t| crate::actors::resolve::bundle_name(t).as_deref() == Some(name);
    pools.iter().any(|p| selects(&p.spec.template))
        || instances.iter().any(|i| {
            selects(&i.spec.template)
                || i.status
                    .as_ref()
                    .and_then(|s| s.crc.as_ref())
                    .and_then(|c| c.boot_key.as_ref())
                    .is_some_and(|b| b.bundle_uid == uid)
        })
}

/// What to do with a pool-created bundle this pass.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Collect {
    /// Referenced: keep it (and forget any earlier "unreferenced since").
    Keep,
    /// Unreferenced from now on: record the time and look again after the grace.
    Since(Time),
    /// Unreferenced, within its grace: look again after this long.
    Wait(Duration),
    /// Unreferenced for the whole grace: delete it.
    Delete,
}

/// The decision for a created bundle, from when it was last seen unreferenced (its status).
pub fn collect(since: Option<&Time>, referenced: bool, now: Timestamp, grace: Duration) -> Collect {
    if referenced {
        return Collect::Keep;
    }
    let Some(since) = since else {
        return Collect::Since(Time(now));
    };
    let elapsed = now
        .duration_since(since.0)
        .try_into()
        .unwrap_or(Duration::ZERO);
    match grace.checked_sub(elapsed) {
        Some(left) if !left.is_zero() => Collect::Wait(left),
        _ => Collect::Delete,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pool(template: serde_json::Value) -> ClusterPool {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"type": "crc", "minSize": 1, "maxSize": 1, "template": template},
        }))
        .unwrap()
    }

    fn instance(template: serde_json::Value, bound: Option<&str>) -> ClusterInstance {
        let mut i: ClusterInstance = serde_json::from_value(json!({
            "metadata": {"name": "i", "namespace": "ns"},
            "spec": {"type": "crc", "template": template},
        }))
        .unwrap();
        if let Some(uid) = bound {
            i.status = Some(
                serde_json::from_value(json!({"crc": {"bootKey": {
                    "bundleUID": uid, "bundleSHA256": "", "pvcNamespace": "", "pvcName": "",
                    "pvcUID": "", "secretNamespace": "", "secretName": "", "secretUID": "",
                    "keySHA256": ""
                }}}))
                .unwrap(),
            );
        }
        i
    }

    fn template(v: serde_json::Value) -> serde_json::Value {
        let mut t = json!({"ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4});
        t.as_object_mut()
            .unwrap()
            .extend(v.as_object().unwrap().clone());
        t
    }

    #[test]
    fn a_bundle_is_referenced_by_a_selecting_template_or_a_binding() {
        let name = "crc-4.22.7-amd64";
        let by_version = template(json!({"crcVersion": "4.22.7"}));
        let other = template(json!({"crcVersion": "4.21.3"}));
        let by_ref = template(json!({"crcBundleRef": {"name": name}}));
        assert!(referenced(name, "u", &[pool(by_version.clone())], &[]));
        assert!(referenced(name, "u", &[], &[instance(by_ref, None)]));
        assert!(!referenced(
            name,
            "u",
            &[pool(other.clone())],
            &[instance(other.clone(), None)]
        ));
        // An instance whose template moved on but whose disk came from the bundle still needs it.
        assert!(referenced(
            name,
            "u",
            &[],
            &[instance(other.clone(), Some("u"))]
        ));
        assert!(!referenced(
            name,
            "u",
            &[],
            &[instance(other, Some("older-uid"))]
        ));
    }

    #[test]
    fn an_unreferenced_bundle_goes_after_its_grace() {
        let grace = Duration::from_secs(60);
        let t0 = Timestamp::from_second(1_000_000).unwrap();
        let at = |s: i64| Timestamp::from_second(1_000_000 + s).unwrap();
        assert_eq!(collect(None, true, t0, grace), Collect::Keep);
        assert_eq!(
            collect(Some(&Time(t0)), true, at(120), grace),
            Collect::Keep
        );
        assert_eq!(collect(None, false, t0, grace), Collect::Since(Time(t0)));
        assert_eq!(
            collect(Some(&Time(t0)), false, at(20), grace),
            Collect::Wait(Duration::from_secs(40))
        );
        assert_eq!(
            collect(Some(&Time(t0)), false, at(60), grace),
            Collect::Delete
        );
        assert_eq!(
            collect(Some(&Time(t0)), false, at(600), grace),
            Collect::Delete
        );
    }
}
