//! The Validate stage in the guest (`docs/architecture.md`, "The build source"): before anything
//! is injected into a fresh clone of the golden disk, read what sealing promised — no pull secret
//! on the node, the kubelet disabled, the node IP image cached (the disk cannot pull it), the
//! certificates `crc start` checks valid 25 days by the guest's own clock. The
//! startup path that follows is the crc-agent's ([`crate::agent::startup_path`]).

use super::build::{
    KUBELET_CLIENT_CERT, KUBELET_SERVER_CERT, MIN_VALIDITY_SECONDS, certificate_window,
};
use super::cluster::Patience;
use super::scrub::KUBELET_PULL_SECRET;
use super::seal::EMPTY_PULL_SECRET;
use super::{Command, Guest, GuestError};

/// The API server's aggregator client certificate on the node. The node keeps the static pods'
/// certificates under `/etc/kubernetes/static-pod-resources/<component>-certs/`
/// (`/etc/kubernetes/static-pod-certs` is only the path inside the API server's container).
pub const AGGREGATOR_CLIENT_CERT: &str =
    "/etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/aggregator-client/tls.crt";

/// The certificates `crc start` checks before it starts a cluster (crc
/// `pkg/crc/cluster/cluster.go`, `CheckCertsValidity`): an expired one sends it down its
/// certificate-recovery path, so each must hold the bundle's 25 days.
pub const CHECKED_CERTS: [&str; 3] = [
    KUBELET_CLIENT_CERT,
    KUBELET_SERVER_CERT,
    AGGREGATOR_CLIENT_CERT,
];

/// Why the clone does not hold what sealing promised; [`Error::reason`] is its helper reason.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{step}: {source}")]
    Guest {
        step: &'static str,
        source: GuestError,
    },
    #[error("{0}")]
    Scrub(#[from] super::scrub::Error),
    #[error("the golden disk does not hold what sealing promised: {0}")]
    Broken(String),
}

impl Error {
    pub fn reason(&self) -> &'static str {
        match self {
            Error::Guest { .. } => "GuestStepFailed",
            Error::Scrub(err) => err.reason(),
            Error::Broken(_) => "SealBroken",
        }
    }
}

/// One certificate's window by guest time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    pub path: String,
    /// `notAfter` − guest now, seconds.
    pub remaining: i64,
    /// `openssl x509 -checkend` for 25 days passed in the guest.
    pub checkend: bool,
}

impl Window {
    fn passes(&self) -> bool {
        self.checkend && self.remaining >= MIN_VALIDITY_SECONDS
    }
}

/// What a fresh clone holds, as read in it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Promises {
    pub pull_secret_empty: bool,
    pub kubelet_disabled: bool,
    pub node_ip_image_cached: bool,
    pub certificates: Vec<Window>,
    /// The MachineConfigs in the disk's etcd whose pull secret is not `{}` (names only).
    pub machine_configs_with_pull_secret: Vec<String>,
}

impl Promises {
    /// What is broken, or `None` when every promise holds.
    pub fn broken(&self) -> Option<String> {
        let mut broken = Vec::new();
        if !self.pull_secret_empty {
            broken.push(format!("{KUBELET_PULL_SECRET} is not {EMPTY_PULL_SECRET}"));
        }
        if !self.kubelet_disabled {
            broken.push("the kubelet is enabled".to_owned());
        }
        if !self.node_ip_image_cached {
            broken.push(
                "the node IP image (baremetal-runtimecfg) is not cached and cannot be pulled"
                    .to_owned(),
            );
        }
        if !self.machine_configs_with_pull_secret.is_empty() {
            broken.push(format!(
                "MachineConfigs in etcd carry a pull secret: {}",
                self.machine_configs_with_pull_secret.join(", ")
            ));
        }
        if self.certificates.is_empty() {
            broken.push("no certificate found to check".to_owned());
        }
        for cert in self.certificates.iter().filter(|c| !c.passes()) {
            broken.push(format!(
                "{} is valid {} more days by guest time, not 25",
                cert.path,
                cert.remaining / 86_400
            ));
        }
        (!broken.is_empty()).then(|| broken.join("; "))
    }

    /// The shortest certificate window, in days, for the condition message.
    pub fn shortest_days(&self) -> i64 {
        self.certificates
            .iter()
            .map(|c| c.remaining / 86_400)
            .min()
            .unwrap_or(0)
    }
}

fn guest_err(step: &'static str) -> impl Fn(GuestError) -> Error {
    move |source| Error::Guest { step, source }
}

async fn window<G: Guest>(guest: &G, path: &str, guest_now: i64) -> Result<Window, Error> {
    let (remaining, checkend) = certificate_window(guest, path, guest_now)
        .await
        .map_err(|e| Error::Broken(e.to_string()))?;
    Ok(Window {
        path: path.to_owned(),
        remaining,
        checkend,
    })
}

/// Masks chronyd on the throwaway clone, so its next boot keeps the clock KubeVirt gives it:
/// with the default pool reachable, chronyd steps the clock at boot (RHCOS `makestep 1.0 3`),
/// which would pull the aged boot's +20 days back to real time. Never on a disk that is kept.
pub async fn hold_clock<G: Guest>(guest: &G) -> Result<(), Error> {
    guest
        .run_checked(&Command::sudo(["systemctl", "mask", "chronyd.service"]))
        .await
        .map(drop)
        .map_err(|source| Error::Guest {
            step: "mask chronyd on the validation clone",
            source,
        })
}

/// etcd's key prefix of MachineConfigs (custom resources, stored as JSON).
pub const MACHINE_CONFIGS_IN_ETCD: &str =
    "/kubernetes.io/machineconfiguration.openshift.io/machineconfigs/";

/// The MachineConfigs of the disk's etcd that carry a pull secret, read by a throwaway etcd
/// before the cluster starts: once `crc start` injects a pull secret the MCO renders it in, so
/// only the untouched clone tells whether the golden disk itself carries one.
pub async fn machine_configs_with_pull_secret<G: Guest>(
    guest: &G,
    ready: Patience,
) -> Result<Vec<String>, Error> {
    super::scrub::start_throwaway_etcd(guest).await?;
    let read = super::scrub::values(guest, MACHINE_CONFIGS_IN_ETCD, ready).await;
    // Stopped whatever happened: the kubelet's etcd needs the data directory.
    let stopped = super::scrub::stop_throwaway_etcd(guest).await;
    let values = read?;
    stopped?;
    let mut configs = Vec::with_capacity(values.len());
    for (key, value) in values {
        // Never the value in the message: it may hold the very secret looked for.
        let config = serde_json::from_str(&value).map_err(|e| {
            Error::Broken(format!(
                "etcd's {key} is not a MachineConfig in JSON ({:?} error at line {}, column {})",
                e.classify(),
                e.line(),
                e.column()
            ))
        })?;
        configs.push(config);
    }
    Ok(super::seal::holding_pull_secret(&configs))
}

/// Reads the promises in a clone that nothing has touched yet.
pub async fn read_promises<G: Guest>(guest: &G, ready: Patience) -> Result<Promises, Error> {
    let pull_secret = guest
        .read_file(KUBELET_PULL_SECRET)
        .await
        .map_err(guest_err("read the node's pull secret"))?;
    let enabled = guest
        .run(&Command::new(["systemctl", "is-enabled", "kubelet"]))
        .await
        .map_err(guest_err("read the kubelet's state"))?
        .stdout_text();
    let guest_now: i64 = {
        let text = guest
            .run_checked(&Command::new(["date", "-u", "+%s"]))
            .await
            .map_err(guest_err("read the guest clock"))?
            .stdout_text();
        text.trim()
            .parse()
            .map_err(|_| Error::Broken(format!("`date -u +%s` printed {:?}", text.trim())))?
    };
    let mut certificates = Vec::with_capacity(CHECKED_CERTS.len());
    for path in CHECKED_CERTS {
        certificates.push(window(guest, path, guest_now).await?);
    }
    Ok(Promises {
        pull_secret_empty: String::from_utf8_lossy(&pull_secret).trim() == EMPTY_PULL_SECRET,
        kubelet_disabled: enabled.trim() == "disabled",
        node_ip_image_cached: super::scrub::node_ip_image_cached(guest).await?,
        certificates,
        machine_configs_with_pull_secret: machine_configs_with_pull_secret(guest, ready).await?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(path: &str, days: i64, checkend: bool) -> Window {
        Window {
            path: path.into(),
            remaining: days * 86_400,
            checkend,
        }
    }

    #[test]
    fn every_broken_promise_is_named() {
        let good = Promises {
            pull_secret_empty: true,
            kubelet_disabled: true,
            node_ip_image_cached: true,
            certificates: vec![window("/a.crt", 29, true), window("/b.crt", 26, true)],
            machine_configs_with_pull_secret: Vec::new(),
        };
        assert_eq!(good.broken(), None);
        assert_eq!(good.shortest_days(), 26);
        let bad = Promises {
            pull_secret_empty: false,
            kubelet_disabled: false,
            node_ip_image_cached: false,
            certificates: vec![window("/a.crt", 24, true), window("/b.crt", 29, false)],
            machine_configs_with_pull_secret: vec!["rendered-master-old".to_owned()],
        };
        let text = bad.broken().unwrap();
        for part in [
            "config.json",
            "enabled",
            "runtimecfg",
            "/a.crt is valid 24",
            "/b.crt",
            "carry a pull secret: rendered-master-old",
        ] {
            assert!(text.contains(part), "{text}");
        }
        let none = Promises {
            certificates: Vec::new(),
            ..good
        };
        assert!(none.broken().unwrap().contains("no certificate"));
    }

    #[tokio::test]
    async fn the_clone_is_read_for_the_certificates_crc_start_checks() {
        use crate::guest::Output;
        use crate::guest::fake::ScriptedGuest;
        let guest = ScriptedGuest::new();
        guest.expect("sudo cat /var/lib/kubelet/config.json", Output::ok("{}\n"));
        guest.expect("systemctl is-enabled kubelet", Output::ok("disabled\n"));
        guest.expect("date -u +%s", Output::ok("1000\n"));
        for path in CHECKED_CERTS {
            guest.expect(
                format!("sudo openssl x509 -noout -checkend 2160000 -in {path}"),
                Output::ok(""),
            );
            guest.expect(
                format!("sudo openssl x509 -noout -enddate -in {path}"),
                Output::ok("notAfter=Feb  1 00:00:00 1970 GMT\n"),
            );
        }
        guest.expect(
            "sudo cat /etc/systemd/system/nodeip-configuration.service",
            Output::ok("ExecStart=/usr/bin/podman run q.io/r@sha256:1 node-ip\n"),
        );
        guest.expect("sudo podman image exists q.io/r@sha256:1", Output::ok(""));
        crate::guest::scrub::expect_throwaway_etcd_start(&guest);
        let get =
            format!("sudo podman exec etcd-scrub etcdctl get --prefix {MACHINE_CONFIGS_IN_ETCD}");
        // Not up yet, then up: one sealed rendering, one that still carries a pull secret.
        guest.expect(&get, Output::failed(1, "connection refused"));
        let config = |name: &str, source: &str| {
            serde_json::json!({"apiVersion": "machineconfiguration.openshift.io/v1",
                "kind": "MachineConfig", "metadata": {"name": name},
                "spec": {"config": {"storage": {"files": [
                    {"path": "/var/lib/kubelet/config.json", "contents": {"source": source}}]}}}})
            .to_string()
        };
        guest.expect(
            &get,
            Output::ok(format!(
                "{MACHINE_CONFIGS_IN_ETCD}rendered-master-a\n{}\n{MACHINE_CONFIGS_IN_ETCD}rendered-master-b\n{}\n",
                config("rendered-master-a", "data:,%7B%7D"),
                config("rendered-master-b", "data:;base64,eyJhdXRocyI6e319")
            )),
        );
        guest.expect("sudo podman stop etcd-scrub", Output::ok("etcd-scrub\n"));
        let patience = Patience::new(
            std::time::Duration::from_millis(1),
            std::time::Duration::from_secs(5),
        );
        let promises = read_promises(&guest, patience).await.unwrap();
        guest.assert_done();
        assert_eq!(
            promises.machine_configs_with_pull_secret,
            ["rendered-master-b"]
        );
        let paths: Vec<&str> = promises
            .certificates
            .iter()
            .map(|c| c.path.as_str())
            .collect();
        assert_eq!(
            paths,
            [
                "/var/lib/kubelet/pki/kubelet-client-current.pem",
                "/var/lib/kubelet/pki/kubelet-server-current.pem",
                "/etc/kubernetes/static-pod-resources/kube-apiserver-certs/secrets/aggregator-client/tls.crt",
            ]
        );
        assert_eq!(
            promises.shortest_days(),
            30,
            "31 days from 1000 s after the epoch"
        );
    }
}
