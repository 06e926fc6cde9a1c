//! The Validate stage in the guest (`docs/architecture.md`, "The build source"): before anything
//! is injected into a fresh clone of the golden disk, read what sealing promised — no pull secret
//! on the node, the kubelet disabled, the node IP image cached (the disk cannot pull it), the
//! kubelet's and the control plane's certificates valid 25 days by the guest's own clock. The
//! startup path that follows is the crc-agent's ([`crate::agent::startup_path`]).

use super::build::{
    KUBELET_CLIENT_CERT, KUBELET_SERVER_CERT, MIN_VALIDITY_SECONDS, certificate_window,
};
use super::scrub::KUBELET_PULL_SECRET;
use super::seal::EMPTY_PULL_SECRET;
use super::{Command, Guest, GuestError};

/// Where an installed system keeps the control plane's certificates (`*.crt`).
pub const CONTROL_PLANE_CERTS: &str = "/etc/kubernetes/static-pod-certs";

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

/// Reads the promises in a clone that nothing has touched yet.
pub async fn read_promises<G: Guest>(guest: &G) -> Result<Promises, Error> {
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
    let listed = guest
        .run_checked(&Command::sudo([
            "find",
            CONTROL_PLANE_CERTS,
            "-type",
            "f",
            "-name",
            "*.crt",
        ]))
        .await
        .map_err(guest_err("list the control plane's certificates"))?
        .stdout_text();
    let mut paths = vec![
        KUBELET_CLIENT_CERT.to_owned(),
        KUBELET_SERVER_CERT.to_owned(),
    ];
    paths.extend(
        listed
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned),
    );
    let mut certificates = Vec::with_capacity(paths.len());
    for path in &paths {
        certificates.push(window(guest, path, guest_now).await?);
    }
    Ok(Promises {
        pull_secret_empty: String::from_utf8_lossy(&pull_secret).trim() == EMPTY_PULL_SECRET,
        kubelet_disabled: enabled.trim() == "disabled",
        node_ip_image_cached: super::scrub::node_ip_image_cached(guest).await?,
        certificates,
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
        };
        assert_eq!(good.broken(), None);
        assert_eq!(good.shortest_days(), 26);
        let bad = Promises {
            pull_secret_empty: false,
            kubelet_disabled: false,
            node_ip_image_cached: false,
            certificates: vec![window("/a.crt", 24, true), window("/b.crt", 29, false)],
        };
        let text = bad.broken().unwrap();
        for part in [
            "config.json",
            "enabled",
            "runtimecfg",
            "/a.crt is valid 24",
            "/b.crt",
        ] {
            assert!(text.contains(part), "{text}");
        }
        let none = Promises {
            certificates: Vec::new(),
            ..good
        };
        assert!(none.broken().unwrap().contains("no certificate"));
    }
}
