//! The Seal stage in the guest (`docs/architecture.md`, "The build source"; `docs/decisions.md`,
//! "Customize, Seal, Publish, Validate, Ready"): what SNC's `snc.sh` and `createdisk.sh` do
//! before a disk is exported, done in the guest and never to the disk from outside.
//! First through the guest API while it runs — the cred-manager and the chronyd mask removed, the
//! pull secret emptied and its rollout to the node's `/var/lib/kubelet/config.json`, the old
//! renderings that still carry it pruned, the installer's temporary kubeadmin login deleted —
//! then over SSH: `/opt/kubeconfig`, the image
//! cache pruned ([`scrub`]), the kubelet stopped and disabled, etcd scrubbed, journal and logs
//! emptied, free space trimmed, and what the disk now promises read back from the guest before
//! it is powered off.

use base64::Engine as _;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};

use super::build::{CRED_MANAGER, MCO_NAMESPACE};
use super::cluster::{self, KUBECONFIG_MODE, KUBECONFIG_PATH, Patience, retry};
use super::customize::{self, mc_api};
use super::scrub::{self, KUBELET_PULL_SECRET};
use super::{Command, Guest, GuestError};
use crate::resources::profile::ignition_config::decode_data_url;
use crate::resources::profile::manifests::CHRONYD_MASK_MC;

/// The pull secret a sealed cluster keeps: no credentials (SNC's `pull-secret.yaml`).
pub const EMPTY_PULL_SECRET: &str = "{}";
/// The installer's temporary kubeadmin login (SNC deletes it once htpasswd users exist).
pub const INSTALLER_LOGIN: (&str, &str) = ("kube-system", "kubeadmin");

/// Why sealing failed; [`Error::reason`] is its helper reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Cluster(#[from] cluster::Error),
    #[error("{0}")]
    Rollout(#[from] customize::Error),
    #[error("{step}: {source}")]
    Guest {
        step: &'static str,
        source: GuestError,
    },
    #[error("{0}")]
    Scrub(#[from] scrub::Error),
    #[error("the guest does not hold what sealing promises: {0}")]
    Incomplete(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Cluster(_) => "GuestAPIUnavailable",
            Error::Rollout(err) => err.reason(),
            Error::Guest { .. } => "GuestStepFailed",
            Error::Scrub(err) => err.reason(),
            Error::Incomplete(_) => "SealIncomplete",
        }
    }
}

fn guest_err(step: &'static str) -> impl Fn(GuestError) -> Error {
    move |source| Error::Guest { step, source }
}

/// As SNC does: `openshift-config/pull-secret` becomes `{}`, the MachineConfig rollout writes it
/// to the node, and the node's file is read back until it is `{}`.
pub async fn remove_pull_secret<G: Guest>(
    client: &kube::Client,
    guest: &G,
    calls: Patience,
    rollout: Patience,
) -> Result<(), Error> {
    let step = "empty the cluster's pull secret";
    let secrets: Api<Secret> = Api::namespaced(client.clone(), cluster::OPENSHIFT_CONFIG);
    let encoded = base64::engine::general_purpose::STANDARD.encode(EMPTY_PULL_SECRET);
    let body = serde_json::json!({"data": {cluster::PULL_SECRET_KEY: encoded}});
    let (params, patch) = (PatchParams::default(), Patch::Merge(&body));
    retry(step, calls, || {
        secrets.patch(cluster::PULL_SECRET, &params, &patch)
    })
    .await?;
    customize::wait_pool(client, rollout).await?;
    retry("the node's pull secret emptied", rollout, || async {
        let text = guest
            .read_file(KUBELET_PULL_SECRET)
            .await
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&text).trim() == EMPTY_PULL_SECRET {
            Ok(())
        } else {
            // Never the content: it is the pull secret until the rollout lands.
            Err(format!(
                "{KUBELET_PULL_SECRET} is not {EMPTY_PULL_SECRET} yet"
            ))
        }
    })
    .await?;
    Ok(())
}

/// Deletes a guest object by name, a missing one being done.
async fn delete_named<K>(
    api: &Api<K>,
    name: &str,
    step: &'static str,
    calls: Patience,
) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    // The guest cluster's own objects, deleted by name as SNC does (`oc delete`): the
    // operator's write path with its UID preconditions is for the operator's objects.
    let params = DeleteParams::default();
    #[allow(clippy::disallowed_methods)]
    let delete = || api.delete(name, &params);
    retry(step, calls, || async {
        match delete().await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
            Err(err) => Err(err),
        }
    })
    .await?;
    retry(step, calls, || async {
        match api.get_opt(name).await {
            Ok(None) => Ok(()),
            Ok(Some(_)) => Err(format!("{name} is still there")),
            Err(err) => Err(err.to_string()),
        }
    })
    .await?;
    Ok(())
}

/// As SNC does: the cred-manager DaemonSet goes (the cluster's certificates are rotated), with
/// the account and role it ran as, and the chronyd mask with its rollout (an instance keeps real
/// time).
pub async fn remove_build_helpers(
    client: &kube::Client,
    calls: Patience,
    rollout: Patience,
) -> Result<(), Error> {
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    delete_named(
        &daemonsets,
        CRED_MANAGER,
        "delete the kubelet-bootstrap-cred-manager",
        calls,
    )
    .await?;
    let step = "delete the cred-manager's account and role";
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    delete_named(&bindings, CRED_MANAGER, step, calls).await?;
    let roles: Api<Role> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    delete_named(&roles, CRED_MANAGER, step, calls).await?;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), MCO_NAMESPACE);
    delete_named(&accounts, CRED_MANAGER, step, calls).await?;
    let configs = mc_api(client, "MachineConfig", "machineconfigs");
    delete_named(&configs, CHRONYD_MASK_MC, "delete the chronyd mask", calls).await?;
    customize::wait_pool(client, rollout).await?;
    Ok(())
}

/// As SNC does once the pull secret is emptied (`oc adm prune renderedmachineconfigs --confirm`;
/// openshift/oc `pkg/cli/admin/prune/renderedmachineconfigs`): every rendered MachineConfig no
/// pool targets or runs is deleted. Each rendering made before carries the build's pull secret
/// in `/var/lib/kubelet/config.json`, and the MCO never deletes one: without this every lessee of
/// the disk could read it. Returns how many went.
pub async fn prune_rendered_configs(
    client: &kube::Client,
    calls: Patience,
) -> Result<usize, Error> {
    let pools = mc_api(client, "MachineConfigPool", "machineconfigpools");
    let configs = mc_api(client, "MachineConfig", "machineconfigs");
    let (pools, all) = retry("list the pools and MachineConfigs", calls, || async {
        let pools = pools.list(&Default::default()).await?;
        let all = configs.list_metadata(&Default::default()).await?;
        Ok::<_, kube::Error>((pools.items, all.items))
    })
    .await?;
    let names: Vec<String> = all.iter().filter_map(|c| c.metadata.name.clone()).collect();
    let unused = unused_renderings(&pools, &names);
    for name in &unused {
        delete_named(
            &configs,
            name,
            "prune an unused rendered MachineConfig",
            calls,
        )
        .await?;
    }
    Ok(unused.len())
}

/// The rendered MachineConfigs (`rendered-…`) no pool names in `spec.configuration` or
/// `status.configuration`.
pub fn unused_renderings(pools: &[DynamicObject], configs: &[String]) -> Vec<String> {
    let in_use: std::collections::BTreeSet<&str> = pools
        .iter()
        .flat_map(|p| [&p.data["spec"], &p.data["status"]])
        .filter_map(|part| part["configuration"]["name"].as_str())
        .collect();
    configs
        .iter()
        .filter(|name| name.starts_with("rendered-") && !in_use.contains(name.as_str()))
        .cloned()
        .collect()
}

/// The MachineConfigs whose `/var/lib/kubelet/config.json` is anything but `{}`: what a sealed
/// cluster must not carry. Only names are returned, never the content.
pub fn holding_pull_secret(configs: &[DynamicObject]) -> Vec<String> {
    configs
        .iter()
        .filter(|config| {
            config.data["spec"]["config"]["storage"]["files"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|file| file["path"] == KUBELET_PULL_SECRET)
                .any(|file| {
                    let decoded = file["contents"]["source"]
                        .as_str()
                        .and_then(decode_data_url);
                    decoded.is_none_or(|bytes| {
                        String::from_utf8_lossy(&bytes).trim() != EMPTY_PULL_SECRET
                    })
                })
        })
        .filter_map(|config| config.metadata.name.clone())
        .collect()
}

/// Every MachineConfig read back: none may carry a pull secret.
pub async fn check_machine_configs(client: &kube::Client, calls: Patience) -> Result<(), Error> {
    let configs = mc_api(client, "MachineConfig", "machineconfigs");
    let params = kube::api::ListParams::default();
    let all = retry("list the MachineConfigs", calls, || configs.list(&params)).await?;
    let holding = holding_pull_secret(&all.items);
    if holding.is_empty() {
        return Ok(());
    }
    Err(Error::Incomplete(format!(
        "MachineConfig {} still carries a pull secret in {KUBELET_PULL_SECRET}",
        holding.join(", ")
    )))
}

/// As SNC does: the installer's temporary kubeadmin login goes; the htpasswd users stay.
pub async fn remove_installer_login(client: &kube::Client, calls: Patience) -> Result<(), Error> {
    let (namespace, name) = INSTALLER_LOGIN;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), namespace);
    delete_named(
        &secrets,
        name,
        "delete the installer's kubeadmin login",
        calls,
    )
    .await
}

/// What [`seal_disk`] removed, for the condition message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scrubbed {
    pub images: usize,
    pub pod_namespaces: usize,
    /// The revision etcd was compacted at, then defragmented.
    pub etcd_revision: u64,
}

/// As SNC's `snc.sh` and `createdisk.sh` do: `/opt/kubeconfig` (the admin kubeconfig the
/// guest's units use), the image cache pruned to what the cluster runs, the kubelet stopped and
/// disabled (with SNC's no-op `crio-wipe.service`, so a clone that is killed keeps its images),
/// etcd's pod records and leases scrubbed and its history compacted and defragmented
/// away, the journal and `/var/log` emptied, free space trimmed so the export copies only data.
pub async fn seal_disk<G: Guest>(
    guest: &G,
    admin_kubeconfig: &[u8],
    etcd_ready: Patience,
) -> Result<Scrubbed, Error> {
    guest
        .write_file(KUBECONFIG_PATH, admin_kubeconfig, KUBECONFIG_MODE)
        .await
        .map_err(guest_err("write /opt/kubeconfig"))?;
    let run = |step: &'static str, argv: &'static [&'static str]| async move {
        guest
            .run_checked(&Command::sudo(argv.iter().copied()))
            .await
            .map_err(guest_err(step))
    };
    // While the kubelet runs: its pods' images are in use and survive the prune.
    let images = scrub::prune_images(guest).await?;
    scrub::keep_image_store(guest).await?;
    run("disable the kubelet", &["systemctl", "disable", "kubelet"]).await?;
    run("stop the kubelet", &["systemctl", "stop", "kubelet"]).await?;
    let etcd = scrub::scrub_etcd(guest, etcd_ready).await?;
    run("rotate the journal", &["journalctl", "--rotate"]).await?;
    run("vacuum the journal", &["journalctl", "--vacuum-time=1s"]).await?;
    run(
        "delete the logs",
        &[
            "find", "/var/log", "-type", "f", "-name", "*.log", "-delete",
        ],
    )
    .await?;
    // Through `/var`, a bind mount of the root XFS: `/` is a composefs overlay, which cannot
    // discard. After etcd's defragmentation, so the old database file's blocks go too.
    run("trim free space", &["fstrim", "-v", "/var"]).await?;
    run("flush to disk", &["sync"]).await?;
    Ok(Scrubbed {
        images,
        pod_namespaces: etcd.pod_namespaces,
        etcd_revision: etcd.revision,
    })
}

/// What the sealed disk holds, read back from the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sealed {
    pub pull_secret_empty: bool,
    /// `systemctl is-enabled kubelet` says `disabled`.
    pub kubelet_disabled: bool,
    pub kubelet_inactive: bool,
    pub opt_kubeconfig: bool,
    /// The image `nodeip-configuration.service` needs at boot survived the prune.
    pub node_ip_image_cached: bool,
    /// `crio-wipe.service` is the no-op one: a stop that is not clean keeps the image store.
    pub image_store_kept: bool,
}

impl Sealed {
    /// What is missing, or `None` when the disk is sealed.
    pub fn missing(&self) -> Option<String> {
        let missing: Vec<&str> = [
            (self.pull_secret_empty, "the node's pull secret is not {}"),
            (self.kubelet_disabled, "the kubelet is enabled"),
            (self.kubelet_inactive, "the kubelet is running"),
            (self.opt_kubeconfig, "/opt/kubeconfig is missing"),
            (
                self.node_ip_image_cached,
                "the node IP image (baremetal-runtimecfg) is not cached",
            ),
            (
                self.image_store_kept,
                "crio-wipe.service would empty the image store after a stop that is not clean",
            ),
        ]
        .into_iter()
        .filter(|(ok, _)| !ok)
        .map(|(_, what)| what)
        .collect();
        (!missing.is_empty()).then(|| missing.join("; "))
    }
}

/// Reads back what sealing promises.
pub async fn check_sealed<G: Guest>(guest: &G) -> Result<Sealed, Error> {
    let pull_secret = guest
        .read_file(KUBELET_PULL_SECRET)
        .await
        .map_err(guest_err("read the node's pull secret"))?;
    let word = |argv: [&'static str; 3]| async move {
        guest
            .run(&Command::new(argv))
            .await
            .map(|o| o.stdout_text().trim().to_owned())
            .map_err(guest_err("read the kubelet's state"))
    };
    let enabled = word(["systemctl", "is-enabled", "kubelet"]).await?;
    let active = word(["systemctl", "is-active", "kubelet"]).await?;
    let opt_kubeconfig = guest
        .exists(KUBECONFIG_PATH)
        .await
        .map_err(guest_err("look for /opt/kubeconfig"))?;
    Ok(Sealed {
        pull_secret_empty: String::from_utf8_lossy(&pull_secret).trim() == EMPTY_PULL_SECRET,
        kubelet_disabled: enabled == "disabled",
        kubelet_inactive: active != "active",
        opt_kubeconfig,
        node_ip_image_cached: scrub::node_ip_image_cached(guest).await?,
        image_store_kept: scrub::image_store_kept(guest).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::Output;
    use crate::guest::fake::ScriptedGuest;

    fn object(value: serde_json::Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn only_renderings_no_pool_targets_or_runs_are_pruned() {
        let pool = object(serde_json::json!({
            "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfigPool",
            "metadata": {"name": "master"},
            "spec": {"configuration": {"name": "rendered-master-new"}},
            "status": {"configuration": {"name": "rendered-master-running"}}}));
        let names = [
            "00-master",
            "99-master-user",
            "rendered-master-old",
            "rendered-master-running",
            "rendered-master-new",
        ]
        .map(String::from);
        assert_eq!(
            unused_renderings(&[pool], &names),
            vec!["rendered-master-old".to_owned()]
        );
    }

    #[test]
    fn a_machine_config_with_any_pull_secret_but_the_empty_one_is_named() {
        let config = |name: &str, source: &str| {
            object(serde_json::json!({
                "apiVersion": "machineconfiguration.openshift.io/v1", "kind": "MachineConfig",
                "metadata": {"name": name},
                "spec": {"config": {"storage": {"files": [
                    {"path": "/etc/other", "contents": {"source": "data:,x"}},
                    {"path": KUBELET_PULL_SECRET, "contents": {"source": source}}]}}}}))
        };
        let configs = [
            config("rendered-master-sealed", "data:,%7B%7D"),
            config("00-master", "data:;base64,e30K"),
            config("rendered-master-old", "data:;base64,eyJhdXRocyI6e319"),
            config("rendered-master-odd", "not a data URL"),
        ];
        assert_eq!(
            holding_pull_secret(&configs),
            vec![
                "rendered-master-old".to_owned(),
                "rendered-master-odd".to_owned()
            ]
        );
    }

    #[tokio::test]
    async fn a_sealed_guest_is_read_back_and_a_running_kubelet_is_named() {
        let guest = ScriptedGuest::new();
        guest.expect("sudo cat /var/lib/kubelet/config.json", Output::ok("{}\n"));
        guest.expect("systemctl is-enabled kubelet", Output::ok("disabled\n"));
        guest.expect("systemctl is-active kubelet", Output::failed(3, ""));
        guest.expect("sudo test -e /opt/kubeconfig", Output::ok(""));
        guest.expect(
            "sudo cat /etc/systemd/system/nodeip-configuration.service",
            Output::ok("ExecStart=/usr/bin/podman run q.io/r@sha256:1 node-ip\n"),
        );
        guest.expect("sudo podman image exists q.io/r@sha256:1", Output::ok(""));
        guest.expect(
            "sudo test -e /etc/systemd/system/crio-wipe.service",
            Output::ok(""),
        );
        guest.expect(
            "sudo cat /etc/systemd/system/crio-wipe.service",
            Output::ok(scrub::NOOP_CRIO_WIPE),
        );
        let sealed = check_sealed(&guest).await.unwrap();
        assert_eq!(sealed.missing(), None);

        let running = Sealed {
            kubelet_inactive: false,
            ..sealed
        };
        assert_eq!(running.missing().as_deref(), Some("the kubelet is running"));
    }
}
