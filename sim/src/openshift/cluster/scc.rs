//! SCC admission of the pods the simulated guest plays (today the cred-manager's), as the
//! guest's API server would admit them: a pod that asks for a privileged container is admitted
//! only by an SCC with `allowPrivilegedContainer: true`, and of the SCCs the kube-apiserver
//! operator ships only `privileged` has it. That SCC names users and groups a service account
//! is not in (`system:admin`, the build controller; `system:cluster-admins`, `system:nodes`,
//! `system:masters`), so a service account's pod needs `use` of it through RBAC, which the
//! ClusterRole `system:openshift:scc:privileged` grants and nothing binds by default.
//!
//! Upstream: openshift/cluster-kube-apiserver-operator becb0af `bindata/bootkube/scc-manifests/
//! 0000_20_kube-apiserver-operator_00_scc-privileged.yaml` and `…_00_cr-scc-privileged.yaml`;
//! the refusal's wording from openshift/apiserver-library-go `sccadmission` (docs/simulation.md).

use k8s_openapi::api::authorization::v1::ResourceAttributes;
use k8s_openapi::api::core::v1::PodSpec;

/// The only shipped SCC that admits a privileged container.
pub const PRIVILEGED: &str = "privileged";

/// The SCC a pod needs beyond `restricted-v2` (which every authenticated account may use), if
/// any: `privileged` for a pod with a privileged container. Pods that need only host paths,
/// host namespaces or root (which `hostmount-anyuid`, `hostaccess` or `anyuid` would admit) are
/// not judged here: the guest plays no such pod.
pub fn required(pod: &PodSpec) -> Option<&'static str> {
    let privileged = pod
        .containers
        .iter()
        .chain(pod.init_containers.iter().flatten())
        .any(|c| {
            c.security_context
                .as_ref()
                .and_then(|s| s.privileged)
                .unwrap_or(false)
        });
    privileged.then_some(PRIVILEGED)
}

/// The `use` of SCC `name` by a pod of `namespace`, as the admission plugin asks RBAC.
pub fn use_of(name: &str, namespace: &str) -> ResourceAttributes {
    ResourceAttributes {
        namespace: Some(namespace.to_owned()),
        verb: Some("use".to_owned()),
        group: Some("security.openshift.io".to_owned()),
        resource: Some("securitycontextconstraints".to_owned()),
        name: Some(name.to_owned()),
        ..ResourceAttributes::default()
    }
}

/// The refusal of a DaemonSet's pod whose account may not use `scc`, worded as the plugin's.
pub fn refusal(daemonset: &str, scc: &str) -> String {
    format!(
        "pods \"{daemonset}-\" is forbidden: unable to validate against any security context constraint: \
         [provider \"restricted-v2\": Forbidden: not usable by user or serviceaccount for this pod: \
         .containers[0].privileged: Invalid value: true: Privileged containers are not allowed, \
         provider \"{scc}\": Forbidden: not usable by user or serviceaccount]"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(value: serde_json::Value) -> PodSpec {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_a_privileged_container_needs_the_privileged_scc() {
        let plain = pod(json!({"containers": [{"name": "a"}]}));
        assert_eq!(required(&plain), None);
        let root = pod(json!({"containers": [{"name": "a", "securityContext": {"runAsUser": 0}}]}));
        assert_eq!(
            required(&root),
            None,
            "root alone is anyuid's, not judged here"
        );
        let privileged = pod(json!({"containers": [
            {"name": "a"},
            {"name": "b", "securityContext": {"privileged": true}}
        ]}));
        assert_eq!(required(&privileged), Some(PRIVILEGED));
        let init = pod(json!({
            "containers": [{"name": "a"}],
            "initContainers": [{"name": "i", "securityContext": {"privileged": true}}]
        }));
        assert_eq!(required(&init), Some(PRIVILEGED));
        let unprivileged =
            pod(json!({"containers": [{"name": "a", "securityContext": {"privileged": false}}]}));
        assert_eq!(required(&unprivileged), None);
    }

    #[test]
    fn the_use_asked_of_rbac_names_the_scc_and_namespace() {
        let attributes = use_of(PRIVILEGED, "ns");
        assert_eq!(
            (
                attributes.verb.as_deref(),
                attributes.group.as_deref(),
                attributes.resource.as_deref(),
                attributes.name.as_deref(),
                attributes.namespace.as_deref()
            ),
            (
                Some("use"),
                Some("security.openshift.io"),
                Some("securitycontextconstraints"),
                Some("privileged"),
                Some("ns")
            )
        );
        assert!(refusal("ds", PRIVILEGED).contains("provider \"privileged\": Forbidden"));
    }
}
