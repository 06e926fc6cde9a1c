//! NetworkPolicy ingress as a network plugin enforces it, for the TCP connections the simulated
//! guests accept. Semantics from the `networking.k8s.io/v1` API reference and the Kubernetes
//! "Network Policies" concept page (k8s.io/api v0.37 `networking/v1/types.go`;
//! kubernetes.io/docs/concepts/services-networking/network-policies), cited in
//! `docs/simulation.md`:
//!
//! - a pod is isolated for ingress once any policy of its namespace selects it and has
//!   `Ingress` among its `policyTypes` (absent `policyTypes`: every policy affects ingress);
//! - an isolated pod accepts a connection only when a rule of one selecting policy admits both
//!   the port and the source; a policy without rules admits nothing;
//! - empty `ports` or `from` match everything; a port's protocol defaults to TCP, `endPort`
//!   makes a range, and a named port is resolved against the target's container ports (a
//!   virt-launcher pod declares none for its guest, so it never matches here);
//! - a peer with `podSelector` alone means pods of the policy's namespace, `namespaceSelector`
//!   alone every pod of the selected namespaces, both together the selected pods of the
//!   selected namespaces; `ipBlock` matches the source address outside its `except`s;
//! - traffic from the node the pod runs on is always allowed, and a pod cannot block itself.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

pub type Labels = BTreeMap<String, String>;

/// A pod as policies see it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub labels: Labels,
    pub namespace_labels: Labels,
    pub ip: Option<Ipv4Addr>,
}

/// Where a connection comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Source {
    /// A process of the node itself (not in any pod): always allowed.
    Node,
    Pod(PodView),
}

/// Whether `policies` (any namespace; only the target's count) let `source` open a TCP
/// connection to `port` of `target`.
pub fn admits(policies: &[NetworkPolicy], target: &PodView, source: &Source, port: u16) -> bool {
    let Source::Pod(from) = source else {
        return true;
    };
    if from.namespace == target.namespace && from.name == target.name {
        return true;
    }
    let mut isolated = false;
    for policy in policies.iter().filter(|p| selects(p, target)) {
        isolated = true;
        let namespace = policy.metadata.namespace.as_deref().unwrap_or_default();
        let rules = policy.spec.as_ref().and_then(|s| s.ingress.as_deref());
        let admitted = rules.unwrap_or_default().iter().any(|rule| {
            let ports = rule.ports.as_deref().unwrap_or_default();
            let peers = rule.from.as_deref().unwrap_or_default();
            (ports.is_empty() || ports.iter().any(|p| port_matches(p, port)))
                && (peers.is_empty() || peers.iter().any(|p| peer_matches(p, namespace, from)))
        });
        if admitted {
            return true;
        }
    }
    !isolated
}

/// A policy of the target's namespace that selects it for ingress.
pub fn selects(policy: &NetworkPolicy, target: &PodView) -> bool {
    let Some(spec) = &policy.spec else {
        return false;
    };
    let ingress = spec
        .policy_types
        .as_ref()
        .is_none_or(|types| types.iter().any(|t| t == "Ingress"));
    policy.metadata.namespace.as_deref() == Some(target.namespace.as_str())
        && ingress
        && spec
            .pod_selector
            .as_ref()
            .is_none_or(|s| selector_matches(s, &target.labels))
}

fn port_matches(rule: &NetworkPolicyPort, port: u16) -> bool {
    if rule.protocol.as_deref().unwrap_or("TCP") != "TCP" {
        return false;
    }
    match &rule.port {
        None => true,
        Some(IntOrString::Int(first)) => {
            let last = rule.end_port.unwrap_or(*first);
            (*first..=last).contains(&i32::from(port))
        }
        // Named ports name the target's container ports; a launcher declares none for its guest.
        Some(IntOrString::String(_)) => false,
    }
}

fn peer_matches(peer: &NetworkPolicyPeer, policy_namespace: &str, from: &PodView) -> bool {
    if let Some(block) = &peer.ip_block {
        return from.ip.is_some_and(|ip| in_block(block, ip));
    }
    match (&peer.pod_selector, &peer.namespace_selector) {
        (Some(pods), None) => {
            from.namespace == policy_namespace && selector_matches(pods, &from.labels)
        }
        (None, Some(namespaces)) => selector_matches(namespaces, &from.namespace_labels),
        (Some(pods), Some(namespaces)) => {
            selector_matches(namespaces, &from.namespace_labels)
                && selector_matches(pods, &from.labels)
        }
        // Rejected by validation; matches nothing.
        (None, None) => false,
    }
}

fn in_block(block: &IPBlock, ip: Ipv4Addr) -> bool {
    let inside = |cidr: &str| {
        let Some((net, bits)) = cidr.split_once('/') else {
            return false;
        };
        let (Ok(net), Ok(bits)) = (net.parse::<Ipv4Addr>(), bits.parse::<u32>()) else {
            return false;
        };
        let mask = u32::MAX.checked_shl(32 - bits.min(32)).unwrap_or(0);
        u32::from(ip) & mask == u32::from(net) & mask
    };
    inside(&block.cidr) && !block.except.iter().flatten().any(|e| inside(e))
}

/// A label selector over `labels`, as `metav1.LabelSelectorAsSelector` reads it: every
/// `matchLabels` pair and every requirement must hold; the empty selector matches everything.
pub fn selector_matches(selector: &LabelSelector, labels: &Labels) -> bool {
    let pairs = selector.match_labels.iter().flatten();
    let requirements = selector.match_expressions.iter().flatten();
    pairs
        .clone()
        .all(|(key, value)| labels.get(key) == Some(value))
        && requirements.into_iter().all(|r| {
            let values = r.values.as_deref().unwrap_or_default();
            let value = labels.get(&r.key);
            match r.operator.as_str() {
                "In" => value.is_some_and(|v| values.contains(v)),
                "NotIn" => value.is_none_or(|v| !values.contains(v)),
                "Exists" => value.is_some(),
                "DoesNotExist" => value.is_none(),
                // Rejected by validation; matches nothing.
                _ => false,
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Labels {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn pod(namespace: &str, name: &str, pairs: &[(&str, &str)]) -> PodView {
        PodView {
            namespace: namespace.into(),
            name: name.into(),
            labels: labels(pairs),
            namespace_labels: labels(&[("kubernetes.io/metadata.name", namespace)]),
            ip: Some(Ipv4Addr::new(127, 10, 0, 9)),
        }
    }

    fn policy(namespace: &str, spec: serde_json::Value) -> NetworkPolicy {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": namespace},
            "spec": spec,
        }))
        .expect("policy")
    }

    fn ssh_from_helpers() -> NetworkPolicy {
        policy(
            "ops",
            json!({
                "podSelector": {"matchLabels": {"guestcluster.opdev.io/vm": "build"}},
                "policyTypes": ["Ingress"],
                "ingress": [{"ports": [{"protocol": "TCP", "port": 22}],
                             "from": [{"podSelector": {"matchLabels": {"role": "helper"}}}]}],
            }),
        )
    }

    #[test]
    fn an_unselected_pod_accepts_everything() {
        let guest = pod("ops", "launcher", &[("guestcluster.opdev.io/vm", "other")]);
        let stranger = Source::Pod(pod("ops", "x", &[]));
        assert!(admits(&[ssh_from_helpers()], &guest, &stranger, 22623));
    }

    #[test]
    fn a_selected_pod_accepts_only_what_a_rule_admits() {
        let guest = pod("ops", "launcher", &[("guestcluster.opdev.io/vm", "build")]);
        let helper = Source::Pod(pod("ops", "h", &[("role", "helper")]));
        let stranger = Source::Pod(pod("ops", "x", &[("role", "other")]));
        let policies = [ssh_from_helpers()];
        assert!(admits(&policies, &guest, &helper, 22));
        assert!(!admits(&policies, &guest, &helper, 22623), "port");
        assert!(!admits(&policies, &guest, &stranger, 22), "source");
        assert!(admits(&policies, &guest, &Source::Node, 22623), "the node");
        // A helper-labelled pod of another namespace is not the policy namespace's.
        let elsewhere = Source::Pod(pod("tenant", "h", &[("role", "helper")]));
        assert!(!admits(&policies, &guest, &elsewhere, 22));
    }

    #[test]
    fn a_policy_of_another_namespace_or_for_egress_only_does_not_isolate() {
        let guest = pod("ops", "launcher", &[("guestcluster.opdev.io/vm", "build")]);
        let stranger = Source::Pod(pod("ops", "x", &[]));
        let mut other = ssh_from_helpers();
        other.metadata.namespace = Some("tenant".into());
        assert!(admits(&[other], &guest, &stranger, 22));
        let egress = policy(
            "ops",
            json!({"podSelector": {}, "policyTypes": ["Egress"], "egress": []}),
        );
        assert!(admits(&[egress], &guest, &stranger, 22));
    }

    #[test]
    fn a_policy_without_rules_denies_and_policies_add_up() {
        let guest = pod("ops", "launcher", &[("guestcluster.opdev.io/vm", "build")]);
        let helper = Source::Pod(pod("ops", "h", &[("role", "helper")]));
        let deny_all = policy("ops", json!({"podSelector": {}}));
        assert!(!admits(
            std::slice::from_ref(&deny_all),
            &guest,
            &helper,
            22
        ));
        assert!(admits(&[deny_all, ssh_from_helpers()], &guest, &helper, 22));
    }

    #[test]
    fn namespace_selectors_ip_blocks_and_port_ranges() {
        let guest = pod("ops", "launcher", &[]);
        let router = Source::Pod(pod("openshift-ingress", "r", &[]));
        let by_namespace = policy(
            "ops",
            json!({"podSelector": {}, "ingress": [{
                "ports": [{"port": 6443, "endPort": 6445}],
                "from": [{"namespaceSelector": {"matchLabels":
                    {"kubernetes.io/metadata.name": "openshift-ingress"}}}]}]}),
        );
        assert!(admits(
            std::slice::from_ref(&by_namespace),
            &guest,
            &router,
            6444
        ));
        assert!(!admits(
            std::slice::from_ref(&by_namespace),
            &guest,
            &router,
            22
        ));
        let named = policy(
            "ops",
            json!({"podSelector": {}, "ingress": [{"ports": [{"port": "ssh"}]}]}),
        );
        assert!(!admits(&[named], &guest, &router, 22), "no named port");
        let block = policy(
            "ops",
            json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock":
                {"cidr": "127.10.0.0/16", "except": ["127.10.0.8/29"]}}]}]}),
        );
        assert!(
            !admits(std::slice::from_ref(&block), &guest, &router, 22),
            "in except"
        );
        let Source::Pod(mut moved) = router else {
            unreachable!()
        };
        moved.ip = Some(Ipv4Addr::new(127, 10, 1, 1));
        assert!(admits(&[block], &guest, &Source::Pod(moved), 22));
    }

    #[test]
    fn a_pod_cannot_block_itself() {
        let guest = pod("ops", "launcher", &[]);
        let deny_all = policy("ops", json!({"podSelector": {}}));
        assert!(admits(&[deny_all], &guest, &Source::Pod(guest.clone()), 22));
    }

    #[test]
    fn selectors_read_expressions_as_upstream_does() {
        let selector = LabelSelector {
            match_labels: Some(labels(&[("a", "1")])),
            match_expressions: Some(vec![
                LabelSelectorRequirement {
                    key: "b".into(),
                    operator: "In".into(),
                    values: Some(vec!["x".into(), "y".into()]),
                },
                LabelSelectorRequirement {
                    key: "c".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                },
                LabelSelectorRequirement {
                    key: "d".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["z".into()]),
                },
            ]),
        };
        assert!(selector_matches(
            &selector,
            &labels(&[("a", "1"), ("b", "y")])
        ));
        assert!(!selector_matches(
            &selector,
            &labels(&[("a", "1"), ("b", "q")])
        ));
        assert!(!selector_matches(
            &selector,
            &labels(&[("a", "1"), ("b", "x"), ("c", "")])
        ));
        assert!(!selector_matches(
            &selector,
            &labels(&[("a", "1"), ("b", "x"), ("d", "z")])
        ));
        assert!(selector_matches(&LabelSelector::default(), &Labels::new()));
    }
}
