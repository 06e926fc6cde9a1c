//! The crc-agent's settings, from the environment the operator's Job sets (the Go agent's
//! variables plus the instance key's path, [`crate::contract::agent`]).

use std::path::PathBuf;
use std::time::Duration;

use crate::contract::agent::{
    ENV_API_HOSTNAME, ENV_GUEST_KEY_PATH, ENV_IDENTITY_PATH, ENV_INSTANCE_NAME,
    ENV_INSTANCE_NAMESPACE, ENV_INSTANCE_UID, ENV_PULL_SECRET_PATH, ENV_SSH_HOST, ENV_SSH_KEY_PATH,
    ENV_SSH_USER, ENV_VM_NAME, ENV_VMI_UID,
};
use crate::guest::cluster::{BCRYPT_COST, Patience, Patiences};

pub const DEFAULT_SSH_USER: &str = "core";
pub const DEFAULT_SSH_KEY_PATH: &str = "/etc/crc-agent/ssh/id_ecdsa";
pub const DEFAULT_GUEST_KEY_PATH: &str = "/etc/crc-agent/guest-key/ssh-privatekey";
pub const DEFAULT_IDENTITY_PATH: &str = "/etc/crc-agent/identity";
pub const DEFAULT_PULL_SECRET_PATH: &str = "/etc/crc-agent/pull-secret/.dockerconfigjson";
pub const SSH_PORT: u16 = 22;

/// A missing or unusable setting.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0} is required")]
    Missing(&'static str),
    #[error("{name} is not valid: {reason}")]
    Invalid { name: &'static str, reason: String },
}

/// How long the agent waits for what (tests shorten these).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Step 1: sshd accepting connections (upstream: every 10 s for 5 min).
    pub ssh_port: Patience,
    /// SSH dial + authentication (upstream: 30 s).
    pub ssh_connect_timeout: Duration,
    /// One command in the guest (upstream: no limit). Every command is also cut at the run's
    /// deadline.
    pub ssh_command_timeout: Duration,
    /// How long the startup path may take in all; its commands and waits stop there and the
    /// run fails with the step's reason, before the Job's own deadline kills the pod without one.
    pub run_deadline: Duration,
    /// Steps 8 and 10–18.
    pub patiences: Patiences,
    /// bcrypt work factor of the htpasswd lines.
    pub bcrypt_cost: u32,
    /// Pause before the VMI watch is re-established after an error (upstream: 1 s).
    pub watch_retry: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            ssh_port: Patience::new(Duration::from_secs(10), Duration::from_secs(300)),
            ssh_connect_timeout: Duration::from_secs(30),
            ssh_command_timeout: Duration::from_secs(600),
            // The agent Job's `activeDeadlineSeconds` (2700) less a minute to report.
            run_deadline: Duration::from_secs(2640),
            patiences: Patiences::upstream(),
            bcrypt_cost: BCRYPT_COST,
            watch_retry: Duration::from_secs(1),
        }
    }
}

/// Everything the agent is told.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Config {
    pub instance_name: String,
    pub instance_namespace: String,
    /// Owner of the handoff Secret; empty for Jobs of older operators (legacy ownership rules).
    pub instance_uid: String,
    pub vm_name: String,
    /// The VMI's address (pod IP).
    pub ssh_host: String,
    pub ssh_port: u16,
    pub vmi_uid: String,
    pub ssh_user: String,
    /// The bundle key: optional, since a guest that already authorizes only the instance key
    /// does not need it (its Secret is then not mounted).
    pub ssh_key_path: PathBuf,
    /// The instance key: required.
    pub guest_key_path: PathBuf,
    pub identity_path: PathBuf,
    pub pull_secret_path: PathBuf,
    /// The Route host the handoff kubeconfig points at.
    pub api_hostname: String,
    pub settings: Settings,
}

impl Config {
    /// Reads the process environment.
    pub fn from_env() -> Result<Self, Error> {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Reads settings through `lookup` (unset and empty are the same).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, Error> {
        let get = |name: &str| {
            lookup(name)
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
        };
        let required = |name: &'static str| get(name).ok_or(Error::Missing(name));
        let or = |name: &str, default: &str| get(name).unwrap_or_else(|| default.to_string());
        let config = Config {
            instance_name: required(ENV_INSTANCE_NAME)?,
            instance_namespace: required(ENV_INSTANCE_NAMESPACE)?,
            instance_uid: or(ENV_INSTANCE_UID, ""),
            vm_name: or(ENV_VM_NAME, ""),
            ssh_host: required(ENV_SSH_HOST)?,
            ssh_port: SSH_PORT,
            vmi_uid: required(ENV_VMI_UID)?,
            ssh_user: or(ENV_SSH_USER, DEFAULT_SSH_USER),
            ssh_key_path: or(ENV_SSH_KEY_PATH, DEFAULT_SSH_KEY_PATH).into(),
            guest_key_path: or(ENV_GUEST_KEY_PATH, DEFAULT_GUEST_KEY_PATH).into(),
            identity_path: or(ENV_IDENTITY_PATH, DEFAULT_IDENTITY_PATH).into(),
            pull_secret_path: or(ENV_PULL_SECRET_PATH, DEFAULT_PULL_SECRET_PATH).into(),
            api_hostname: required(ENV_API_HOSTNAME)?,
            settings: Settings::default(),
        };
        if config.ssh_host.contains(char::is_whitespace) {
            return Err(Error::Invalid {
                name: ENV_SSH_HOST,
                reason: format!("{:?} is not a host", config.ssh_host),
            });
        }
        Ok(config)
    }

    /// `host:port` of the guest's sshd (IPv6 addresses bracketed).
    pub fn ssh_addr(&self) -> String {
        if self.ssh_host.contains(':') && !self.ssh_host.starts_with('[') {
            format!("[{}]:{}", self.ssh_host, self.ssh_port)
        } else {
            format!("{}:{}", self.ssh_host, self.ssh_port)
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    const REQUIRED: [(&str, &str); 5] = [
        (ENV_INSTANCE_NAME, "demo"),
        (ENV_INSTANCE_NAMESPACE, "team"),
        (ENV_SSH_HOST, "10.128.0.7"),
        (ENV_VMI_UID, "uid-1"),
        (ENV_API_HOSTNAME, "api-demo.apps.example.com"),
    ];

    #[test]
    fn defaults_follow_upstream() {
        let config = Config::from_lookup(env(&REQUIRED)).unwrap();
        assert_eq!(config.ssh_user, "core");
        assert_eq!(config.ssh_key_path, PathBuf::from(DEFAULT_SSH_KEY_PATH));
        assert_eq!(config.guest_key_path, PathBuf::from(DEFAULT_GUEST_KEY_PATH));
        assert_eq!(config.identity_path, PathBuf::from(DEFAULT_IDENTITY_PATH));
        assert_eq!(
            config.pull_secret_path,
            PathBuf::from(DEFAULT_PULL_SECRET_PATH)
        );
        assert_eq!(config.instance_uid, "");
        assert_eq!(config.ssh_addr(), "10.128.0.7:22");
        assert_eq!(config.settings, Settings::default());
        assert_eq!(config.settings.patiences, Patiences::upstream());
    }

    #[test]
    fn every_required_variable_is_named_when_missing() {
        for (missing, _) in REQUIRED {
            let pairs: Vec<_> = REQUIRED
                .iter()
                .copied()
                .filter(|(k, _)| *k != missing)
                .chain([(missing, "  ")])
                .collect();
            let err = Config::from_lookup(env(&pairs)).unwrap_err();
            assert!(err.to_string().contains(missing), "{err}");
        }
    }

    #[test]
    fn overrides_are_read() {
        let mut pairs = REQUIRED.to_vec();
        pairs.extend([
            (ENV_INSTANCE_UID, "owner-uid"),
            (ENV_VM_NAME, "demo-vm"),
            (ENV_SSH_USER, "admin"),
            (ENV_SSH_KEY_PATH, "/k"),
            (ENV_GUEST_KEY_PATH, "/g"),
            (ENV_IDENTITY_PATH, "/i"),
            (ENV_PULL_SECRET_PATH, "/p"),
            (ENV_SSH_HOST, "fd00::7"),
        ]);
        let config = Config::from_lookup(env(&pairs)).unwrap();
        assert_eq!(config.instance_uid, "owner-uid");
        assert_eq!(config.vm_name, "demo-vm");
        assert_eq!(config.ssh_user, "admin");
        assert_eq!(config.ssh_key_path, PathBuf::from("/k"));
        assert_eq!(config.guest_key_path, PathBuf::from("/g"));
        assert_eq!(config.identity_path, PathBuf::from("/i"));
        assert_eq!(config.pull_secret_path, PathBuf::from("/p"));
        assert_eq!(config.ssh_addr(), "[fd00::7]:22");
    }
}
