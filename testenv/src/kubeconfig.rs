//! The admin kubeconfig: written for kubectl and kube-controller-manager, and read back to build
//! our own clients, so all three use exactly the same credentials and CA.

use std::path::Path;

use kube::config::{
    AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
    NamedContext,
};

use super::certs::{ADMIN_USER, PkiFiles};
use super::{Error, fsutil};

/// Name of the cluster and context in the kubeconfig.
pub const CONTEXT: &str = "guestcluster-dev";

/// Writes a kubeconfig that references the PKI files by absolute path (they live next to it in
/// the state directory and go away together).
pub(crate) fn write(path: &Path, server_url: &str, pki: &PkiFiles) -> Result<(), Error> {
    let text = serde_saphyr::to_string(&admin(server_url, pki))
        .map_err(|e| Error::KubeconfigSerialize(e.to_string()))?;
    fsutil::write_private(path, &text)
}

/// The client configuration of the kubeconfig at `path` (TLS verified against its CA).
pub(crate) async fn load(path: &Path) -> Result<kube::Config, Error> {
    let error = |source| Error::Kubeconfig {
        path: path.to_path_buf(),
        source,
    };
    let kubeconfig = Kubeconfig::read_from(path).map_err(error)?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(error)
}

fn admin(server_url: &str, pki: &PkiFiles) -> Kubeconfig {
    let display = |p: &Path| p.display().to_string();
    Kubeconfig {
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        clusters: vec![NamedCluster {
            name: CONTEXT.into(),
            cluster: Some(Cluster {
                server: Some(server_url.into()),
                certificate_authority: Some(display(&pki.ca_cert)),
                ..Cluster::default()
            }),
            ..NamedCluster::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: ADMIN_USER.into(),
            auth_info: Some(AuthInfo {
                client_certificate: Some(display(&pki.admin_cert)),
                client_key: Some(display(&pki.admin_key)),
                ..AuthInfo::default()
            }),
            ..NamedAuthInfo::default()
        }],
        contexts: vec![NamedContext {
            name: CONTEXT.into(),
            context: Some(Context {
                cluster: CONTEXT.into(),
                user: Some(ADMIN_USER.into()),
                ..Context::default()
            }),
            ..NamedContext::default()
        }],
        current_context: Some(CONTEXT.into()),
        ..Kubeconfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn written_kubeconfig_loads_with_ca_and_client_identity() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (pki, _) = super::super::certs::generate(&dir.path().join("pki")).expect("pki");
        let path = dir.path().join("kubeconfig");
        write(&path, "https://127.0.0.1:6443", &pki).expect("write");

        let config = load(&path).await.expect("load");
        assert_eq!(config.cluster_url.to_string(), "https://127.0.0.1:6443/");
        assert_eq!(config.root_cert.map(|certs| certs.len()), Some(1));
        assert!(!config.accept_invalid_certs);
        assert!(config.auth_info.client_certificate.is_some());
    }
}
