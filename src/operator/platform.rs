//! Which platform the operator runs on, where that changes what its Jobs may ask for: OpenShift's
//! `restricted-v2` SCC assigns pods their UID and `fsGroup` and refuses any other, plain
//! Kubernetes leaves them to the pod (docs/decisions.md, "Pod users").

use crate::resources::common::PodUsers;

/// The API group that serves SecurityContextConstraints: present exactly on OpenShift.
pub const SCC_GROUP: &str = "security.openshift.io";

/// The platform, as `--platform` names it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    /// Asks the API server whether it serves SecurityContextConstraints.
    #[default]
    Auto,
    #[value(name = "openshift")]
    OpenShift,
    Kubernetes,
}

impl Platform {
    /// Who the Jobs' pods run as on a platform that `serves_scc` (or not).
    pub fn pod_users(self, serves_scc: bool) -> PodUsers {
        match self {
            Platform::OpenShift => PodUsers::Assigned,
            Platform::Kubernetes => PodUsers::Fixed,
            Platform::Auto if serves_scc => PodUsers::Assigned,
            Platform::Auto => PodUsers::Fixed,
        }
    }

    /// [`Self::pod_users`], asking the API server only when `Auto` needs to know.
    pub async fn resolve(self, client: &kube::Client) -> Result<PodUsers, kube::Error> {
        let serves_scc = match self {
            Platform::Auto => serves_scc(client).await?,
            _ => false,
        };
        Ok(self.pod_users(serves_scc))
    }
}

/// Whether the API server serves [`SCC_GROUP`].
pub async fn serves_scc(client: &kube::Client) -> Result<bool, kube::Error> {
    let groups = client.list_api_groups().await?;
    Ok(groups.groups.iter().any(|g| g.name == SCC_GROUP))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_platform_with_sccs_assigns_users() {
        assert_eq!(Platform::Auto.pod_users(true), PodUsers::Assigned);
        assert_eq!(Platform::Auto.pod_users(false), PodUsers::Fixed);
        assert_eq!(Platform::OpenShift.pod_users(false), PodUsers::Assigned);
        assert_eq!(Platform::Kubernetes.pod_users(true), PodUsers::Fixed);
    }
}
