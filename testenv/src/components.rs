//! Command lines of etcd, kube-apiserver and kube-controller-manager, kept as pure functions so
//! the flags can be read (and tested) in one place.

use std::path::Path;

use super::Error;
use super::certs::PkiFiles;

/// The Service CIDR; its first address (10.96.0.1) is in the serving certificate.
pub(crate) const SERVICE_CIDR: &str = "10.96.0.0/16";

/// The `iss` of service-account tokens, the conventional in-cluster issuer.
const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// Loopback ports for one control plane.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
}

impl Ports {
    /// Free ports outside the kernel's ephemeral range ([`crate::ports`]). All listeners are held
    /// until every port is chosen so the three are distinct; another process can still take one
    /// before our component binds it, which the caller handles by retrying the start.
    pub(crate) fn pick() -> Result<Self, Error> {
        let listeners = (0..3)
            .map(|_| crate::ports::reserve())
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::NoFreePort)?;
        let ports = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(Error::NoFreePort)?;
        Ok(Self {
            etcd_client: ports[0],
            etcd_peer: ports[1],
            apiserver: ports[2],
        })
    }

    pub(crate) fn etcd_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.etcd_client)
    }

    pub(crate) fn server_url(&self) -> String {
        format!("https://127.0.0.1:{}", self.apiserver)
    }
}

fn flag(name: &str, value: impl std::fmt::Display) -> String {
    format!("--{name}={value}")
}

fn path_flag(name: &str, path: &Path) -> String {
    flag(name, path.display())
}

/// A single-member etcd over plain HTTP: it listens on loopback only and holds throwaway data.
pub(crate) fn etcd_args(data_dir: &Path, ports: &Ports) -> Vec<String> {
    let client = ports.etcd_url();
    let peer = format!("http://127.0.0.1:{}", ports.etcd_peer);
    vec![
        flag("name", "testenv"),
        path_flag("data-dir", data_dir),
        flag("listen-client-urls", &client),
        flag("advertise-client-urls", &client),
        flag("listen-peer-urls", &peer),
        flag("initial-advertise-peer-urls", &peer),
        flag("initial-cluster", format!("testenv={peer}")),
        flag("initial-cluster-state", "new"),
        // Durability is worthless for test data, and fsync dominates etcd latency on CI disks.
        "--unsafe-no-fsync".into(),
    ]
}

pub(crate) fn apiserver_args(pki: &PkiFiles, ports: &Ports, cert_dir: &Path) -> Vec<String> {
    vec![
        flag("etcd-servers", ports.etcd_url()),
        flag("bind-address", "127.0.0.1"),
        flag("advertise-address", "127.0.0.1"),
        // The lease reconciler publishes the advertise address as the endpoint of the
        // `kubernetes` Service and refuses to start with a loopback one ("may not be in the
        // loopback range"). Nothing runs in-cluster to use that endpoint, so skip it.
        flag("endpoint-reconciler-type", "none"),
        flag("secure-port", ports.apiserver),
        // Ignored because the serving cert is given, but its default is /var/run/kubernetes,
        // which must never be touched by a test.
        path_flag("cert-dir", cert_dir),
        path_flag("tls-cert-file", &pki.serving_cert),
        path_flag("tls-private-key-file", &pki.serving_key),
        path_flag("client-ca-file", &pki.ca_cert),
        // Without this the apiserver defaults to AlwaysAllow and RBAC bugs go unnoticed.
        flag("authorization-mode", "Node,RBAC"),
        flag("service-account-issuer", SERVICE_ACCOUNT_ISSUER),
        path_flag("service-account-key-file", &pki.service_account_public_key),
        path_flag("service-account-signing-key-file", &pki.service_account_key),
        flag("service-cluster-ip-range", SERVICE_CIDR),
        // Real clusters (kubeadm, OpenShift) allow privileged pods; without it the apiserver
        // rejects them outright and tests would diverge from production.
        flag("allow-privileged", true),
        flag("profiling", false),
        // As kubeadm and OpenShift configure it: the apiserver then publishes the request-header
        // settings in kube-system/extension-apiserver-authentication, which virt-api refuses to
        // start without.
        path_flag("requestheader-client-ca-file", &pki.front_proxy_ca_cert),
        flag("requestheader-allowed-names", "front-proxy-client"),
        flag("requestheader-username-headers", "X-Remote-User"),
        flag("requestheader-group-headers", "X-Remote-Group"),
        flag("requestheader-extra-headers-prefix", "X-Remote-Extra-"),
    ]
}

pub(crate) fn controller_manager_args(pki: &PkiFiles, kubeconfig: &Path) -> Vec<String> {
    vec![
        path_flag("kubeconfig", kubeconfig),
        // A single instance; leader election would only delay the start by a lease acquisition.
        flag("leader-elect", false),
        // Controllers act as the admin identity, so no per-controller ServiceAccount tokens
        // have to be minted before they can run.
        flag("use-service-account-credentials", false),
        path_flag("service-account-private-key-file", &pki.service_account_key),
        path_flag("root-ca-file", &pki.ca_cert),
        path_flag("cluster-signing-cert-file", &pki.ca_cert),
        path_flag("cluster-signing-key-file", &pki.ca_key),
        // Nothing scrapes its metrics or health endpoints, and serving needs a port.
        flag("secure-port", 0),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picked_ports_are_distinct() {
        let ports = Ports::pick().expect("free ports");
        assert_ne!(ports.etcd_client, ports.etcd_peer);
        assert_ne!(ports.etcd_client, ports.apiserver);
        assert_ne!(ports.etcd_peer, ports.apiserver);
    }

    #[test]
    fn apiserver_enforces_rbac_and_binds_loopback_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (pki, _) = super::super::certs::generate(dir.path()).expect("pki");
        let ports = Ports {
            etcd_client: 1,
            etcd_peer: 2,
            apiserver: 3,
        };
        let args = apiserver_args(&pki, &ports, dir.path());
        assert!(args.contains(&"--authorization-mode=Node,RBAC".to_string()));
        assert!(args.contains(&"--bind-address=127.0.0.1".to_string()));
        assert!(args.contains(&"--secure-port=3".to_string()));
        assert!(args.contains(&"--etcd-servers=http://127.0.0.1:1".to_string()));
    }
}
