//! What the shared views classify for every kind: the namespace policy state of a namespace and
//! the platform gate (KubeVirt, CDI and HyperConverged present and healthy). Pure decisions over
//! what the views hold; the instance and pool actors turn them into their conditions.

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::DynamicObject;
use serde_json::Value;

use crate::api::conditions::reasons;
use crate::api::labels::NAMESPACE_ENABLED;

/// What the namespace policy sees of the instance's namespace (live read).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NamespaceState {
    Missing,
    Terminating,
    Disabled,
    Enabled,
}

impl NamespaceState {
    /// Classifies a read of the namespace (`None`: it does not exist).
    pub fn of(ns: Option<&Namespace>) -> Self {
        let Some(ns) = ns else {
            return Self::Missing;
        };
        let phase_terminating = ns
            .status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .is_some_and(|p| p == "Terminating");
        match Self::of_meta(Some(&ns.metadata)) {
            Self::Enabled | Self::Disabled if phase_terminating => Self::Terminating,
            state => state,
        }
    }

    /// Classifies the namespace's metadata, as the shared Namespace view holds it: a
    /// terminating namespace always carries its deletion timestamp.
    pub fn of_meta(meta: Option<&ObjectMeta>) -> Self {
        let Some(meta) = meta else {
            return Self::Missing;
        };
        if meta.deletion_timestamp.is_some() {
            return Self::Terminating;
        }
        let enabled = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(NAMESPACE_ENABLED))
            .is_some_and(|v| v == "true");
        if enabled {
            Self::Enabled
        } else {
            Self::Disabled
        }
    }

    /// The namespace policy for new work in namespace `ns` (instances and pools alike): `None`
    /// when enabled, else the `ProvisioningAllowed=False` reason and message.
    pub fn refusal(self, ns: &str) -> Option<(&'static str, String)> {
        match self {
            Self::Missing => Some((
                reasons::NAMESPACE_UNAVAILABLE,
                format!("namespace {ns} is unavailable"),
            )),
            Self::Terminating => Some((
                reasons::NAMESPACE_TERMINATING,
                format!("namespace {ns} is terminating; no new work starts"),
            )),
            Self::Disabled => Some((
                reasons::NAMESPACE_DISABLED,
                format!(
                    "namespace {ns} is not enabled for guestcluster: label it {NAMESPACE_ENABLED}=true"
                ),
            )),
            Self::Enabled => None,
        }
    }
}

/// The platform operands as listed (all namespaces). `hyperconverged` is empty when none exist or
/// the kind is not served.
#[derive(Clone, Debug, Default)]
pub struct Platform {
    pub kubevirt: Vec<DynamicObject>,
    pub cdi: Vec<DynamicObject>,
    pub hyperconverged: Vec<DynamicObject>,
}

/// Outcome of the platform gate, recorded as `HyperConvergedReady`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlatformGate {
    pub ready: bool,
    pub reason: &'static str,
    pub message: String,
}

impl PlatformGate {
    fn blocked(reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            ready: false,
            reason,
            message: message.into(),
        }
    }
}

fn condition_value(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data
        .pointer("/status/conditions")?
        .as_array()?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(type_))?
        .get("status")?
        .as_str()
        .map(str::to_owned)
}

fn condition_is(obj: &DynamicObject, type_: &str, status: &str) -> bool {
    condition_value(obj, type_).as_deref() == Some(status)
}

/// KubeVirt or CDI: `status.phase == Deployed` or `Available=True`.
fn operand_healthy(obj: &DynamicObject) -> bool {
    obj.data.pointer("/status/phase").and_then(Value::as_str) == Some("Deployed")
        || condition_is(obj, "Available", "True")
}

fn describe(obj: &DynamicObject) -> String {
    match &obj.metadata.namespace {
        Some(ns) => format!("{ns}/{}", obj.metadata.name.as_deref().unwrap_or_default()),
        None => obj.metadata.name.clone().unwrap_or_default(),
    }
}

/// The platform gate: KubeVirt and CDI present and healthy; HyperConverged, when any exists,
/// exactly one, current and available.
pub fn platform_gate(platform: &Platform) -> PlatformGate {
    let missing: Vec<&str> = [
        ("KubeVirt", platform.kubevirt.is_empty()),
        ("CDI", platform.cdi.is_empty()),
    ]
    .into_iter()
    .filter_map(|(name, missing)| missing.then_some(name))
    .collect();
    if !missing.is_empty() {
        return PlatformGate::blocked(
            reasons::OPERAND_NOT_FOUND,
            format!("{} not found", missing.join(" and ")),
        );
    }
    let unhealthy: Vec<&str> = [("KubeVirt", &platform.kubevirt), ("CDI", &platform.cdi)]
        .into_iter()
        .filter(|(_, objs)| !objs.iter().any(operand_healthy))
        .map(|(name, _)| name)
        .collect();
    if !unhealthy.is_empty() {
        return PlatformGate::blocked(
            reasons::OPERAND_NOT_READY,
            format!("{} not deployed", unhealthy.join(" and ")),
        );
    }
    match platform.hyperconverged.as_slice() {
        [] => PlatformGate {
            ready: true,
            reason: reasons::OPERAND_READY,
            message: "KubeVirt and CDI are deployed".into(),
        },
        [hco] => hyperconverged_gate(hco),
        many => PlatformGate::blocked(
            reasons::MULTIPLE_OPERANDS_FOUND,
            format!(
                "{} HyperConverged objects found ({}); exactly one is supported",
                many.len(),
                many.iter().map(describe).collect::<Vec<_>>().join(", ")
            ),
        ),
    }
}

fn hyperconverged_gate(hco: &DynamicObject) -> PlatformGate {
    let name = describe(hco);
    let generation = hco.metadata.generation.unwrap_or(0);
    let observed = hco
        .data
        .pointer("/status/observedGeneration")
        .and_then(Value::as_i64);
    if observed.is_none_or(|o| o < generation) {
        return PlatformGate::blocked(
            reasons::STATUS_STALE,
            format!(
                "HyperConverged {name} status describes generation {} of {generation}",
                observed.map_or_else(|| "none".to_owned(), |o| o.to_string())
            ),
        );
    }
    let problems: Vec<String> = [
        ("Available", "True"),
        ("Progressing", "False"),
        ("Degraded", "False"),
    ]
    .into_iter()
    .filter(|(type_, want)| !condition_is(hco, type_, want))
    .map(|(type_, want)| {
        let got = condition_value(hco, type_).unwrap_or_else(|| "missing".into());
        format!("{type_}={got} (want {want})")
    })
    .collect();
    if problems.is_empty() {
        PlatformGate {
            ready: true,
            reason: reasons::OPERAND_READY,
            message: format!("KubeVirt and CDI are deployed; HyperConverged {name} is available"),
        }
    } else {
        PlatformGate::blocked(
            reasons::OPERAND_NOT_READY,
            format!("HyperConverged {name}: {}", problems.join(", ")),
        )
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    use super::*;
    use serde_json::json;

    pub fn obj(v: Value) -> DynamicObject {
        serde_json::from_value(v).unwrap()
    }

    pub fn deployed(kind: &str) -> DynamicObject {
        obj(json!({"metadata": {"name": kind.to_lowercase()}, "status": {"phase": "Deployed"}}))
    }

    pub fn hco(generation: i64, observed: i64, conds: &[(&str, &str)]) -> DynamicObject {
        let conds: Vec<Value> = conds
            .iter()
            .map(|(t, s)| json!({"type": t, "status": s}))
            .collect();
        obj(json!({
            "metadata": {"name": "kubevirt-hyperconverged", "namespace": "openshift-cnv", "generation": generation},
            "status": {"observedGeneration": observed, "conditions": conds},
        }))
    }

    pub const HEALTHY: &[(&str, &str)] = &[
        ("Available", "True"),
        ("Progressing", "False"),
        ("Degraded", "False"),
    ];

    pub fn healthy_platform() -> Platform {
        Platform {
            kubevirt: vec![deployed("KubeVirt")],
            cdi: vec![deployed("CDI")],
            hyperconverged: vec![],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use k8s_openapi::jiff::Timestamp;
    use serde_json::json;

    fn at(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).unwrap())
    }

    fn ns(labels: Value, terminating: bool) -> Namespace {
        let mut v = json!({"metadata": {"name": "team", "labels": labels}});
        if terminating {
            v["status"] = json!({"phase": "Terminating"});
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn namespace_states() {
        assert_eq!(NamespaceState::of(None), NamespaceState::Missing);
        assert_eq!(
            NamespaceState::of(Some(&ns(json!({NAMESPACE_ENABLED: "true"}), true))),
            NamespaceState::Terminating
        );
        let mut deleting = ns(json!({NAMESPACE_ENABLED: "true"}), false);
        deleting.metadata.deletion_timestamp = Some(at(1));
        assert_eq!(
            NamespaceState::of(Some(&deleting)),
            NamespaceState::Terminating
        );
        assert_eq!(
            NamespaceState::of(Some(&ns(json!({}), false))),
            NamespaceState::Disabled
        );
        for value in ["True", "yes", "", "false"] {
            assert_eq!(
                NamespaceState::of(Some(&ns(json!({NAMESPACE_ENABLED: value}), false))),
                NamespaceState::Disabled,
                "label value {value:?}"
            );
        }
        assert_eq!(
            NamespaceState::of(Some(&ns(json!({NAMESPACE_ENABLED: "true"}), false))),
            NamespaceState::Enabled
        );
    }

    #[test]
    fn missing_operands_are_named() {
        let gate = platform_gate(&Platform::default());
        assert_eq!(gate.reason, reasons::OPERAND_NOT_FOUND);
        assert_eq!(gate.message, "KubeVirt and CDI not found");
        let mut p = healthy_platform();
        p.kubevirt.clear();
        let gate = platform_gate(&p);
        assert_eq!(
            (gate.ready, gate.reason, gate.message.as_str()),
            (false, reasons::OPERAND_NOT_FOUND, "KubeVirt not found")
        );
    }

    #[test]
    fn undeployed_operands_are_not_ready() {
        let mut p = healthy_platform();
        p.kubevirt = vec![obj(
            json!({"metadata": {"name": "kv"}, "status": {"phase": "Deploying"}}),
        )];
        let gate = platform_gate(&p);
        assert_eq!(
            (gate.ready, gate.reason, gate.message.as_str()),
            (false, reasons::OPERAND_NOT_READY, "KubeVirt not deployed")
        );
        // Available=True counts as healthy without a phase.
        p.kubevirt = vec![obj(
            json!({"metadata": {"name": "kv"}, "status": {"conditions": [{"type": "Available", "status": "True"}]}}),
        )];
        assert!(platform_gate(&p).ready);
    }

    #[test]
    fn hyperconverged_rows() {
        let with = |hcos: Vec<DynamicObject>| {
            let mut p = healthy_platform();
            p.hyperconverged = hcos;
            platform_gate(&p)
        };
        let ok = with(vec![hco(2, 2, HEALTHY)]);
        assert_eq!((ok.ready, ok.reason), (true, reasons::OPERAND_READY));
        let newer = with(vec![hco(2, 3, HEALTHY)]);
        assert!(newer.ready);

        let many = with(vec![hco(1, 1, HEALTHY), hco(1, 1, HEALTHY)]);
        assert_eq!(
            (many.ready, many.reason),
            (false, reasons::MULTIPLE_OPERANDS_FOUND)
        );
        let stale = with(vec![hco(3, 2, HEALTHY)]);
        assert_eq!((stale.ready, stale.reason), (false, reasons::STATUS_STALE));
        let no_status = with(vec![obj(
            json!({"metadata": {"name": "h", "namespace": "x", "generation": 1}}),
        )]);
        assert_eq!(no_status.reason, reasons::STATUS_STALE);
        for conds in [
            &[
                ("Available", "False"),
                ("Progressing", "False"),
                ("Degraded", "False"),
            ][..],
            &[
                ("Available", "True"),
                ("Progressing", "True"),
                ("Degraded", "False"),
            ][..],
            &[
                ("Available", "True"),
                ("Progressing", "False"),
                ("Degraded", "True"),
            ][..],
            &[("Available", "True")][..],
        ] {
            let gate = with(vec![hco(1, 1, conds)]);
            assert_eq!(
                (gate.ready, gate.reason),
                (false, reasons::OPERAND_NOT_READY),
                "{conds:?}"
            );
        }
    }

    #[test]
    fn namespace_metadata_alone_classifies_the_policy() {
        let enabled = ns(json!({NAMESPACE_ENABLED: "true"}), false);
        assert_eq!(
            NamespaceState::of_meta(Some(&enabled.metadata)),
            NamespaceState::Enabled
        );
        let mut deleting = enabled.clone();
        deleting.metadata.deletion_timestamp = Some(at(5));
        assert_eq!(
            NamespaceState::of_meta(Some(&deleting.metadata)),
            NamespaceState::Terminating
        );
        assert_eq!(NamespaceState::of_meta(None), NamespaceState::Missing);
    }
}
