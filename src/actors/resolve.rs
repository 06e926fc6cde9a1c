//! The one template resolver (`docs/architecture.md`, "ClusterInstance"): which CRCBundle a
//! ClusterTemplate runs. Pools use it to know which bundle to ensure, instances to bind their
//! boot key, and recovery to find the bound bundle again.

use crate::api::template::ClusterTemplate;
pub use crate::resources::bundle::published_bundle_name;

/// The CRCBundle a template selects: `crcBundleRef` by name, else the published bundle of
/// `crcVersion`; `None` for the manual path (neither set).
pub fn bundle_name(template: &ClusterTemplate) -> Option<String> {
    if let Some(name) = template.crc_bundle_ref() {
        return Some(name.to_owned());
    }
    template
        .crc_version()
        .map(|v| published_bundle_name(v, template.arch()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::common::LocalRef;

    fn template(version: Option<&str>, bundle: Option<&str>) -> ClusterTemplate {
        let mut t: ClusterTemplate = serde_json::from_value(serde_json::json!({
            "ocpVersion": "4.22.7", "memory": "16Gi", "cores": 4
        }))
        .unwrap();
        t.crc_version = version.map(str::to_owned);
        t.crc_bundle_ref = bundle.map(|name| LocalRef { name: name.into() });
        t
    }

    #[test]
    fn a_template_selects_its_bundle() {
        assert_eq!(
            bundle_name(&template(Some("4.22.7"), None)).as_deref(),
            Some("crc-4.22.7-amd64")
        );
        assert_eq!(
            bundle_name(&template(None, Some("custom"))).as_deref(),
            Some("custom")
        );
        assert_eq!(bundle_name(&template(Some(""), None)), None);
        assert_eq!(bundle_name(&template(None, None)), None);
    }
}
