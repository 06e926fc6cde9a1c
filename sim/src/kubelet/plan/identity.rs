//! Who a container's process is: its user, primary group and supplementary groups, as a
//! container runtime derives them from the pod's and the container's security context, and
//! which volumes the kubelet gives the pod's `fsGroup` (docs/simulation.md, "Users and file
//! owners").

use k8s_openapi::api::core::v1::{Container, PodSecurityContext, PodSpec, SecurityContext};

use super::PlanError;

/// The user of our image when a pod names none (`USER 1001:0` in the `Containerfile`: any UID,
/// group 0, as OpenShift expects of images).
pub const IMAGE_USER: u32 = 1001;
/// The image's group; also the primary group of a UID the image's `/etc/passwd` does not list,
/// as CRI-O and containerd give it.
pub const IMAGE_GROUP: u32 = 0;

/// The credentials a container process runs with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    /// Supplementary groups: the primary group, `fsGroup` and `supplementalGroups`, sorted.
    pub groups: Vec<u32>,
}

fn pod_context(spec: &PodSpec) -> PodSecurityContext {
    spec.security_context.clone().unwrap_or_default()
}

fn id(value: i64, field: &str) -> Result<u32, PlanError> {
    u32::try_from(value).map_err(|_| PlanError::Invalid(format!("{field} {value} is not a UID")))
}

/// The pod's `fsGroup`, which the kubelet applies to the volumes that support ownership.
pub fn fs_group(spec: &PodSpec) -> Result<Option<u32>, PlanError> {
    pod_context(spec)
        .fs_group
        .map(|g| id(g, "fsGroup"))
        .transpose()
}

/// The container's credentials: the container's `runAsUser`/`runAsGroup` over the pod's over
/// the image's; `fsGroup` and `supplementalGroups` as supplementary groups. A container that
/// must not run as root (`runAsNonRoot`) and would is refused, with the kubelet's message.
pub fn credentials(spec: &PodSpec, container: &Container) -> Result<Credentials, PlanError> {
    let pod = pod_context(spec);
    let own: SecurityContext = container.security_context.clone().unwrap_or_default();
    let uid = match own.run_as_user.or(pod.run_as_user) {
        Some(uid) => id(uid, "runAsUser")?,
        None => IMAGE_USER,
    };
    let gid = match own.run_as_group.or(pod.run_as_group) {
        Some(gid) => id(gid, "runAsGroup")?,
        None => IMAGE_GROUP,
    };
    if own.run_as_non_root.or(pod.run_as_non_root) == Some(true) && uid == 0 {
        return Err(PlanError::Invalid(format!(
            "container has runAsNonRoot and image will run as root (container: {})",
            container.name
        )));
    }
    let mut groups = vec![gid];
    groups.extend(fs_group(spec)?);
    for group in pod.supplemental_groups.iter().flatten() {
        groups.push(id(*group, "supplementalGroups")?);
    }
    groups.sort_unstable();
    groups.dedup();
    Ok(Credentials { uid, gid, groups })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(pod: serde_json::Value, container: serde_json::Value) -> PodSpec {
        serde_json::from_value(json!({
            "securityContext": pod,
            "containers": [{"name": "main", "securityContext": container}],
        }))
        .expect("pod spec")
    }

    fn of(pod: serde_json::Value, container: serde_json::Value) -> Result<Credentials, PlanError> {
        let spec = spec(pod, container);
        credentials(&spec, &spec.containers[0])
    }

    #[test]
    fn a_pod_that_names_no_user_runs_as_the_image_user_in_group_0() {
        assert_eq!(
            of(json!({}), json!({})).unwrap(),
            Credentials {
                uid: 1001,
                gid: 0,
                groups: vec![0]
            }
        );
    }

    #[test]
    fn the_container_wins_over_the_pod_and_groups_add_up() {
        let creds = of(
            json!({"runAsUser": 1000650000, "fsGroup": 1000650000, "supplementalGroups": [107]}),
            json!({"runAsUser": 1000650001, "runAsGroup": 5}),
        )
        .unwrap();
        assert_eq!(creds.uid, 1000650001);
        assert_eq!(creds.gid, 5);
        assert_eq!(creds.groups, vec![5, 107, 1000650000]);
    }

    #[test]
    fn run_as_non_root_refuses_root() {
        let refused = of(json!({"runAsNonRoot": true}), json!({"runAsUser": 0})).unwrap_err();
        assert!(refused.to_string().contains("runAsNonRoot"), "{refused}");
        assert_eq!(refused.reason(), "CreateContainerConfigError");
        assert_eq!(of(json!({}), json!({"runAsUser": 0})).unwrap().uid, 0);
    }
}
