//! Admission of a new pod under the `restricted-v2` SCC, the one every authenticated user and
//! service account may use: the pod's unset security settings are filled in from its namespace's
//! ranges, then the pod is checked against the SCC. A pod that fails is refused with the plugin's
//! message, listing the other default SCCs as not usable (the simulation grants none of them).
//!
//! Upstream: `openshift/apiserver-library-go` `pkg/securitycontextconstraints/sccadmission`
//! (the message) and `sccmatching`, `user`, `group`, `capabilities` (the strategies), and the
//! `restricted-v2` definition in `openshift/cluster-kube-apiserver-operator`
//! `bindata/bootkube/scc-manifests/0000_20_kube-apiserver-operator_00_scc-restricted-v2.yaml`
//! (docs/simulation.md cites the versions).

use serde_json::{Map, Value, json};

use super::{Block, NamespaceRanges, POD_SCC};

pub const NAME: &str = "restricted-v2";

/// The default SCCs of an OpenShift 4.22 cluster other than `restricted-v2`, in the order the
/// plugin lists them (by priority, then name), none usable by a pod's service account here.
const NOT_USABLE: [&str; 10] = [
    "anyuid",
    "hostaccess",
    "hostmount-anyuid",
    "hostnetwork",
    "hostnetwork-v2",
    "machine-api-termination-handler",
    "node-exporter",
    "nonroot",
    "nonroot-v2",
    "privileged",
];
/// `restricted` (v1) comes after `restricted-v2` in the list: same priority, more permissive.
const NOT_USABLE_AFTER: [&str; 1] = ["restricted"];

const HOST_NAMESPACES: [(&str, &str); 3] = [
    ("hostNetwork", "Host network"),
    ("hostPID", "Host PID"),
    ("hostIPC", "Host IPC"),
];

/// The one capability `restricted-v2` lets a container add.
const ALLOWED_CAPABILITY: &str = "NET_BIND_SERVICE";
/// Volume types `restricted-v2` allows.
const ALLOWED_VOLUMES: [&str; 8] = [
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

/// A JSON patch (RFC 6902) operation.
pub type PatchOp = Value;

/// CDI's SCC (containerized-data-importer v1.65.0 `pkg/operator/controller/scc.go`, `setSCC`):
/// created by cdi-operator on OpenShift for its controller's and cron job's service accounts,
/// so the worker pods they create (user 107, fsGroup 107) are admitted.
pub const CDI_SCC: &str = "containerized-data-importer";
/// The users of [`CDI_SCC`] (`ensureSCCExists`): `cdi-sa` and `cdi-cronjob` of CDI's namespace.
fn cdi_scc_users() -> [String; 2] {
    let namespace = testenv::KUBEVIRT_NAMESPACE;
    ["cdi-sa", "cdi-cronjob"].map(|a| format!("system:serviceaccount:{namespace}:{a}"))
}

/// What tells two SCCs apart here: their user, fsGroup and supplemental-group strategies and the
/// capability a container may add.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Strategies {
    name: &'static str,
    /// `MustRunAsRange` (the namespace's UIDs) or `MustRunAsNonRoot`.
    user_in_range: bool,
    /// `MustRunAs` the namespace's first group, or `RunAsAny` (unset in the SCC).
    fs_group_must_run_as: bool,
    /// `MustRunAs` the namespace's groups, or `RunAsAny`.
    supplemental_must_run_as: bool,
    allowed_capability: Option<&'static str>,
}

const RESTRICTED_V2: Strategies = Strategies {
    name: NAME,
    user_in_range: true,
    fs_group_must_run_as: true,
    supplemental_must_run_as: false,
    allowed_capability: Some(ALLOWED_CAPABILITY),
};

const CONTAINERIZED_DATA_IMPORTER: Strategies = Strategies {
    name: CDI_SCC,
    user_in_range: false,
    fs_group_must_run_as: false,
    supplemental_must_run_as: true,
    allowed_capability: None,
};

/// The outcome of admitting `pod`, created by `user`, in a namespace with `ranges`: the patch
/// that fills in its settings, or the message it is refused with. The SCCs `user` may use are
/// tried in order (`restricted-v2`, then CDI's for CDI's accounts); the first that validates
/// admits the pod.
/// A namespace without ranges refuses every pod, naming the annotation (upstream waits up to
/// 10 s for it first; the webhook does that, see `admission::server`).
pub fn admit(
    namespace: &str,
    pod: &Value,
    ranges: Option<&NamespaceRanges>,
    user: &str,
) -> Result<Vec<PatchOp>, String> {
    let mut usable = vec![RESTRICTED_V2];
    if cdi_scc_users().iter().any(|u| u == user) {
        usable.push(CONTAINERIZED_DATA_IMPORTER);
    }
    let mut errors = Vec::new();
    for strategies in usable {
        let provider = Provider::new(ranges.cloned().unwrap_or_default(), strategies)
            .map_err(|error| format!("error fetching namespace {namespace:?}: {error}"))?;
        let mut pod = pod.clone();
        let patch = provider.default(&mut pod);
        let refused = provider.validate(&pod);
        if refused.is_empty() {
            return Ok(patch);
        }
        errors.extend(refused);
    }
    Err(refusal(errors))
}

/// The plugin's message: each SCC's errors, the unusable ones forbidden.
fn refusal(usable: Vec<String>) -> String {
    let forbidden =
        |name: &&str| format!("provider {name:?}: Forbidden: not usable by user or serviceaccount");
    let all: Vec<String> = NOT_USABLE
        .iter()
        .map(forbidden)
        .chain(usable)
        .chain(NOT_USABLE_AFTER.iter().map(forbidden))
        .collect();
    format!(
        "unable to validate against any security context constraint: [{}]",
        all.join(", ")
    )
}

/// An SCC with a namespace's ranges.
struct Provider {
    strategies: Strategies,
    uids: Block,
    groups: Block,
    level: String,
}

impl Provider {
    fn new(ranges: NamespaceRanges, strategies: Strategies) -> Result<Self, String> {
        let uid_text = ranges
            .uids
            .ok_or_else(|| format!("unable to find annotation {}", super::UID_RANGE))?;
        let uids = Block::parse(&uid_text)
            .ok_or_else(|| format!("unable to parse annotation {}", super::UID_RANGE))?;
        // The group strategy falls back to the UID range when the group annotation is missing.
        let groups = match ranges.groups {
            Some(text) => Block::parse(&text).ok_or_else(|| {
                format!("unable to parse annotation {}", super::SUPPLEMENTAL_GROUPS)
            })?,
            None => uids,
        };
        let level = ranges
            .mcs
            .ok_or_else(|| format!("unable to find annotation {}", super::MCS))?;
        Ok(Self {
            strategies,
            uids,
            groups,
            level,
        })
    }

    /// Fills in what the pod leaves to the SCC; returns the JSON patch that does the same.
    fn default(&self, pod: &mut Value) -> Vec<PatchOp> {
        let mut patch = Vec::new();
        let spec = &mut pod["spec"];
        let mut context = object(&spec["securityContext"]);
        let pod_user = context.get("runAsUser").cloned();
        if self.strategies.fs_group_must_run_as {
            context
                .entry("fsGroup")
                .or_insert_with(|| json!(self.groups.first));
        }
        if self.strategies.supplemental_must_run_as {
            context
                .entry("supplementalGroups")
                .or_insert_with(|| json!([self.groups.first]));
        }
        let selinux = context.entry("seLinuxOptions").or_insert_with(|| json!({}));
        if selinux.get("level").is_none() {
            selinux["level"] = json!(self.level);
        }
        context
            .entry("seccompProfile")
            .or_insert_with(|| json!({"type": "RuntimeDefault"}));
        spec["securityContext"] = Value::Object(context.clone());
        patch.push(json!({"op": "add", "path": "/spec/securityContext", "value": context}));
        for list in ["initContainers", "containers"] {
            let Some(containers) = spec[list].as_array_mut() else {
                continue;
            };
            for (i, container) in containers.iter_mut().enumerate() {
                let mut own = object(&container["securityContext"]);
                if own.get("runAsUser").is_none()
                    && pod_user.is_none()
                    && self.strategies.user_in_range
                {
                    own.insert("runAsUser".into(), json!(self.uids.first));
                }
                let user = own.get("runAsUser").or(pod_user.as_ref());
                // `MustRunAsNonRoot` generates no user but requires the flag.
                if user.and_then(Value::as_i64).is_some_and(|u| u > 0)
                    || !self.strategies.user_in_range
                {
                    own.entry("runAsNonRoot").or_insert(json!(true));
                }
                own.entry("allowPrivilegeEscalation")
                    .or_insert(json!(false));
                let caps = own
                    .entry("capabilities")
                    .or_insert_with(|| json!({}))
                    .as_object_mut();
                if let Some(caps) = caps {
                    let drop = caps.entry("drop").or_insert_with(|| json!([]));
                    if let Some(drop) = drop.as_array_mut()
                        && !drop.iter().any(|d| d == "ALL")
                    {
                        drop.push(json!("ALL"));
                    }
                }
                container["securityContext"] = Value::Object(own.clone());
                patch.push(json!({
                    "op": "add",
                    "path": format!("/spec/{list}/{i}/securityContext"),
                    "value": own,
                }));
            }
        }
        let annotations = &mut pod["metadata"]["annotations"];
        let name = self.strategies.name;
        if annotations.is_object() {
            annotations[POD_SCC] = json!(name);
            patch.push(json!({
                "op": "add",
                "path": format!("/metadata/annotations/{}", POD_SCC.replace('/', "~1")),
                "value": name,
            }));
        } else {
            *annotations = json!({POD_SCC: name});
            patch.push(
                json!({"op": "add", "path": "/metadata/annotations", "value": {POD_SCC: name}}),
            );
        }
        patch
    }

    /// Every way the (defaulted) pod breaks the SCC, worded as the plugin words them.
    fn validate(&self, pod: &Value) -> Vec<String> {
        let mut errors = Vec::new();
        let spec = &pod["spec"];
        let context = &spec["securityContext"];
        let name = self.strategies.name;
        let pod_path = format!("provider {name}: .spec.securityContext");
        // `MustRunAs` with the namespace's block: exactly its first ID.
        if let Some(group) = context["fsGroup"].as_i64()
            && self.strategies.fs_group_must_run_as
            && group != i64::from(self.groups.first)
        {
            errors.push(format!(
                "{pod_path}.fsGroup: Invalid value: []int64{{{group}}}: {group} is not an allowed group"
            ));
        }
        if self.strategies.supplemental_must_run_as {
            for group in context["supplementalGroups"]
                .as_array()
                .into_iter()
                .flatten()
            {
                let group = group.as_i64().unwrap_or_default();
                if !self.groups.contains(group) {
                    errors.push(format!(
                        "{pod_path}.supplementalGroups: Invalid value: []int64{{{group}}}: {group} is not an allowed group"
                    ));
                }
            }
        }
        self.check_user(&pod_path, context, &mut errors);
        if let Some(level) = context["seLinuxOptions"]["level"].as_str()
            && level != self.level
        {
            errors.push(format!(
                "{pod_path}.seLinuxOptions.level: Invalid value: {level:?}: must be {}",
                self.level
            ));
        }
        host_namespaces(&pod_path, spec, &mut errors);
        for (i, volume) in spec["volumes"].as_array().into_iter().flatten().enumerate() {
            let kind = volume
                .as_object()
                .into_iter()
                .flat_map(|v| v.keys())
                .find(|k| *k != "name");
            if let Some(kind) = kind
                && !ALLOWED_VOLUMES.contains(&kind.as_str())
            {
                errors.push(format!(
                    "spec.volumes[{i}]: Invalid value: {kind:?}: {kind} volumes are not allowed to be used"
                ));
            }
        }
        for list in ["initContainers", "containers"] {
            for (i, container) in spec[list].as_array().into_iter().flatten().enumerate() {
                let path = format!("provider {name}: .{list}[{i}]");
                self.validate_container(&path, spec, container, &mut errors);
            }
        }
        // Identical messages appear once (the aggregate de-duplicates).
        let mut seen = std::collections::BTreeSet::new();
        errors.retain(|e| seen.insert(e.clone()));
        errors
    }

    /// `MustRunAsRange`: a `runAsUser` set in `context` lies in the namespace's range;
    /// `MustRunAsNonRoot`: it is not root.
    fn check_user(&self, path: &str, context: &Value, errors: &mut Vec<String>) {
        if !self.strategies.user_in_range {
            if context["runAsUser"].as_i64() == Some(0) {
                errors.push(format!(
                    "{path}.runAsUser: Invalid value: 0: running with the root UID is forbidden"
                ));
            }
            return;
        }
        if let Some(user) = context["runAsUser"].as_i64()
            && !self.uids.contains(user)
        {
            errors.push(format!(
                "{path}.runAsUser: Invalid value: {user}: must be in the ranges: [{}, {}]",
                self.uids.first,
                self.uids.last()
            ));
        }
    }

    /// A container's errors: its effective settings, and the pod's host namespaces and every
    /// container's host ports again, as the plugin visits them per container.
    fn validate_container(
        &self,
        path: &str,
        spec: &Value,
        container: &Value,
        errors: &mut Vec<String>,
    ) {
        let own = &container["securityContext"];
        let context = path;
        host_namespaces(path, spec, errors);
        self.check_user(path, own, errors);
        if own["privileged"] == true {
            errors.push(format!(
                "{context}.privileged: Invalid value: true: Privileged containers are not allowed"
            ));
        }
        if own["allowPrivilegeEscalation"] == true {
            errors.push(format!(
                "{context}.allowPrivilegeEscalation: Invalid value: true: Allowing privilege escalation for containers is not allowed"
            ));
        }
        for cap in own["capabilities"]["add"].as_array().into_iter().flatten() {
            let name = cap.as_str().unwrap_or_default();
            if Some(name) != self.strategies.allowed_capability {
                errors.push(format!(
                    "{context}.capabilities.add: Invalid value: {name:?}: capability may not be added"
                ));
            }
        }
        let every_port = spec["containers"].as_array().into_iter().flatten();
        for port in every_port.flat_map(|c| c["ports"].as_array().into_iter().flatten()) {
            if let Some(host_port) = port["hostPort"].as_i64().filter(|p| *p != 0) {
                errors.push(format!(
                    "{path}.hostPort: Invalid value: {host_port}: Host ports are not allowed to be used"
                ));
            }
        }
    }
}

/// The pod's host network, PID and IPC namespaces, refused (reported at `path`).
fn host_namespaces(path: &str, spec: &Value, errors: &mut Vec<String>) {
    for (flag, what) in HOST_NAMESPACES {
        if spec[flag] == true {
            errors.push(format!(
                "{path}.{flag}: Invalid value: true: {what} is not allowed to be used"
            ));
        }
    }
}

fn object(value: &Value) -> Map<String, Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const USER: &str = "system:serviceaccount:team:default";

    #[test]
    fn cdis_accounts_get_cdis_scc_for_worker_pods_of_user_107_others_do_not() {
        // An importer pod as cdi-controller makes it: user and fsGroup 107, non-root.
        let importer = pod(
            json!({"runAsUser": 107, "fsGroup": 107, "runAsNonRoot": true}),
            json!({"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}),
        );
        let cdi = format!(
            "system:serviceaccount:{}:cdi-sa",
            testenv::KUBEVIRT_NAMESPACE
        );
        let patch = admit("team", &importer, Some(&ranges()), &cdi).expect("CDI's SCC admits");
        let admitted = patched(importer.clone(), &patch);
        assert_eq!(admitted["metadata"]["annotations"][POD_SCC], CDI_SCC);
        // MustRunAs supplemental groups: the namespace's first group; fsGroup stays 107.
        assert_eq!(
            admitted["spec"]["securityContext"]["supplementalGroups"],
            json!([1000650000])
        );
        assert_eq!(admitted["spec"]["securityContext"]["fsGroup"], 107);
        let refused = admit("team", &importer, Some(&ranges()), USER).unwrap_err();
        assert!(
            refused.contains("runAsUser: Invalid value: 107"),
            "{refused}"
        );
        let root = pod(json!({"runAsUser": 0}), json!({}));
        let refused = admit("team", &root, Some(&ranges()), &cdi).unwrap_err();
        assert!(
            refused.contains("provider containerized-data-importer: .spec.securityContext.runAsUser: Invalid value: 0: running with the root UID is forbidden"),
            "{refused}"
        );
    }

    fn ranges() -> NamespaceRanges {
        NamespaceRanges {
            uids: Some("1000650000/10000".into()),
            groups: Some("1000650000/10000".into()),
            mcs: Some("s0:c26,c5".into()),
        }
    }

    fn pod(context: Value, container: Value) -> Value {
        json!({
            "metadata": {"name": "p", "namespace": "team"},
            "spec": {
                "securityContext": context,
                "containers": [{"name": "main", "image": "x", "securityContext": container}],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
            }
        })
    }

    /// The pod after the patch, applied by hand (the ops are whole-member `add`s).
    fn patched(mut pod: Value, patch: &[PatchOp]) -> Value {
        for op in patch {
            let path = op["path"].as_str().unwrap();
            let pointer: Vec<String> = path
                .split('/')
                .skip(1)
                .map(|p| p.replace("~1", "/"))
                .collect();
            let (last, parents) = pointer.split_last().unwrap();
            let mut target = &mut pod;
            for part in parents {
                target = match target {
                    Value::Array(items) => &mut items[part.parse::<usize>().unwrap()],
                    other => &mut other[part.as_str()],
                };
            }
            target[last.as_str()] = op["value"].clone();
        }
        pod
    }

    #[test]
    fn unset_settings_are_filled_in_from_the_namespace() {
        let original = pod(json!({"runAsNonRoot": true}), json!({}));
        let patch = admit("team", &original, Some(&ranges()), USER).expect("admitted");
        let pod = patched(original, &patch);
        let context = &pod["spec"]["securityContext"];
        assert_eq!(context["fsGroup"], 1000650000);
        assert_eq!(context["seLinuxOptions"]["level"], "s0:c26,c5");
        assert_eq!(context["seccompProfile"]["type"], "RuntimeDefault");
        let own = &pod["spec"]["containers"][0]["securityContext"];
        assert_eq!(own["runAsUser"], 1000650000);
        assert_eq!(own["allowPrivilegeEscalation"], false);
        assert_eq!(own["capabilities"]["drop"], json!(["ALL"]));
        assert_eq!(pod["metadata"]["annotations"][POD_SCC], NAME);
    }

    #[test]
    fn a_fixed_user_and_group_outside_the_range_are_refused_by_name() {
        let refused = admit(
            "team",
            &pod(json!({"runAsUser": 1001, "fsGroup": 1001}), json!({})),
            Some(&ranges()),
            USER,
        )
        .unwrap_err();
        assert!(
            refused.starts_with("unable to validate against any security context constraint: [provider \"anyuid\": Forbidden: not usable by user or serviceaccount, "),
            "{refused}"
        );
        assert!(
            refused.contains("provider restricted-v2: .spec.securityContext.fsGroup: Invalid value: []int64{1001}: 1001 is not an allowed group"),
            "{refused}"
        );
        assert!(
            refused.contains(
                "provider restricted-v2: .spec.securityContext.runAsUser: Invalid value: 1001: must be in the ranges: [1000650000, 1000659999]"
            ),
            "{refused}"
        );
        assert!(refused.ends_with(
            "provider \"restricted\": Forbidden: not usable by user or serviceaccount]"
        ));
    }

    #[test]
    fn privilege_capabilities_and_host_namespaces_are_refused() {
        let mut bad = pod(
            json!({}),
            json!({"privileged": true, "capabilities": {"add": ["NET_ADMIN", "NET_BIND_SERVICE"]}}),
        );
        bad["spec"]["hostNetwork"] = json!(true);
        bad["spec"]["volumes"] = json!([{"name": "h", "hostPath": {"path": "/"}}]);
        let refused = admit("team", &bad, Some(&ranges()), USER).unwrap_err();
        for expected in [
            "provider restricted-v2: .containers[0].privileged: Invalid value: true: Privileged containers are not allowed",
            "provider restricted-v2: .containers[0].capabilities.add: Invalid value: \"NET_ADMIN\": capability may not be added",
            "provider restricted-v2: .spec.securityContext.hostNetwork: Invalid value: true: Host network is not allowed to be used",
            "provider restricted-v2: .containers[0].hostNetwork: Invalid value: true: Host network is not allowed to be used",
            "spec.volumes[0]: Invalid value: \"hostPath\": hostPath volumes are not allowed to be used",
        ] {
            assert!(refused.contains(expected), "{expected} in {refused}");
        }
        assert!(!refused.contains("NET_BIND_SERVICE"));
    }

    #[test]
    fn a_namespace_without_ranges_refuses_every_pod() {
        let refused = admit("team", &pod(json!({}), json!({})), None, USER).unwrap_err();
        assert_eq!(
            refused,
            "error fetching namespace \"team\": unable to find annotation openshift.io/sa.scc.uid-range"
        );
    }

    #[test]
    fn users_inside_the_range_are_kept() {
        let original = pod(
            json!({"fsGroup": 1000650000}),
            json!({"runAsUser": 1000650009}),
        );
        let pod = patched(
            original.clone(),
            &admit("team", &original, Some(&ranges()), USER).unwrap(),
        );
        assert_eq!(pod["spec"]["securityContext"]["fsGroup"], 1000650000);
        assert_eq!(
            pod["spec"]["containers"][0]["securityContext"]["runAsUser"],
            1000650009
        );
    }
}
