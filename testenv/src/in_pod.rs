//! Running an upstream component's Deployment as a process, the way its pod would run: as its
//! ServiceAccount (a bound token at the in-cluster path, in a mount namespace of its own), with
//! its container's command line and literal environment, its webhooks called at a loopback URL,
//! and what its operator would create applied with server-side apply. Shared by KubeVirt's
//! (`kubevirt.rs`) and CDI's (`cdi.rs`) installs; each passes the [`Error`] variant it reports
//! with.

// This plays upstream operators and writes as they do, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kube::discovery::Scope;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use serde_json::{Value, json};

use super::process::ManagedProcess;
use super::{ControlPlane, Error, fsutil};

/// Where client-go's in-cluster config (and KubeVirt's and CDI's namespace lookups) read a pod's
/// credentials.
pub(crate) const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// ServiceAccount tokens last as long as a test run could (a day); nothing rotates them.
const TOKEN_SECONDS: i64 = 24 * 3600;
/// How long a CRD gets to become Established.
const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(180);

/// How a component reports a failure (`Error::KubeVirt`, `Error::Cdi`).
pub(crate) type Fail = fn(String) -> Error;

/// Server-side apply of one object of any kind, found through discovery, as `manager`.
pub(crate) async fn apply(
    client: &kube::Client,
    object: &Value,
    manager: &str,
    fail: Fail,
) -> Result<(), Error> {
    let api_version = object["apiVersion"].as_str().unwrap_or_default();
    let kind = object["kind"].as_str().unwrap_or_default();
    let name = object["metadata"]["name"].as_str().unwrap_or_default();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let (resource, capabilities) = kube::discovery::pinned_kind(client, &gvk)
        .await
        .map_err(|e| fail(format!("discovering {api_version} {kind}: {e}")))?;
    let api: Api<DynamicObject> =
        match (capabilities.scope, object["metadata"]["namespace"].as_str()) {
            (Scope::Namespaced, Some(namespace)) => {
                Api::namespaced_with(client.clone(), namespace, &resource)
            }
            _ => Api::all_with(client.clone(), &resource),
        };
    api.patch(
        name,
        &PatchParams::apply(manager).force(),
        &Patch::Apply(object),
    )
    .await
    .map_err(|e| fail(format!("applying {kind} {name}: {e}")))?;
    Ok(())
}

pub(crate) async fn wait_established(client: &kube::Client, name: &str) -> Result<(), Error> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let deadline = Instant::now() + ESTABLISHED_TIMEOUT;
    loop {
        let established = api.get_opt(name).await.ok().flatten().is_some_and(|crd| {
            crd.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
        });
        if established {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(Error::CrdNotEstablished {
                name: name.to_owned(),
                detail: format!("not Established after {ESTABLISHED_TIMEOUT:?}"),
            });
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The Service every webhook of a configuration calls, if they all call one.
pub(crate) fn served_by(configuration: &Value) -> Option<&str> {
    let mut services = configuration["webhooks"]
        .as_array()?
        .iter()
        .map(|w| w["clientConfig"]["service"]["name"].as_str());
    let first = services.next()??;
    services.all(|s| s == Some(first)).then_some(first)
}

/// A webhook configuration with each webhook's Service reference turned into a loopback URL of
/// the same path, and `caBundle` set to the CA of the serving certificate.
pub(crate) fn served_at(configuration: &Value, port: u16, ca_pem: &str) -> Value {
    use base64::Engine as _;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    let mut configuration = configuration.clone();
    if let Some(webhooks) = configuration["webhooks"].as_array_mut() {
        for webhook in webhooks {
            let path = webhook["clientConfig"]["service"]["path"]
                .as_str()
                .unwrap_or("/")
                .to_owned();
            webhook["clientConfig"] = json!({
                "url": format!("https://127.0.0.1:{port}{path}"),
                "caBundle": ca,
            });
        }
    }
    configuration
}

/// The container's literal environment (values from fields or resources are a pod's own).
pub(crate) fn environment(container: &Value) -> Vec<(String, String)> {
    container["env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            Some((
                e["name"].as_str()?.to_owned(),
                e["value"].as_str()?.to_owned(),
            ))
        })
        .collect()
}

/// A Deployment's container, to run as a process.
pub(crate) struct Container<'a> {
    /// The process's name, for logs and errors.
    pub name: &'static str,
    pub program: &'a Path,
    pub args: &'a [String],
    pub env: &'a [(String, String)],
    /// What its ServiceAccount mounts (see [`ControlPlane::write_credentials`]).
    pub credentials: &'a Path,
    pub log: PathBuf,
}

/// Starts `container` as its pod would run it: in a mount namespace of its own with its
/// credentials at [`SERVICE_ACCOUNT_DIR`], and the API server in
/// `KUBERNETES_SERVICE_HOST`/`_PORT`.
pub(crate) async fn spawn(
    container: Container<'_>,
    server_url: &str,
    fail: Fail,
) -> Result<ManagedProcess, Error> {
    // The mount point must exist on the host; it stays empty there.
    std::fs::create_dir_all(SERVICE_ACCOUNT_DIR)
        .map_err(fsutil::io_error(Path::new(SERVICE_ACCOUNT_DIR)))?;
    let (host, port) = server_url
        .trim_start_matches("https://")
        .rsplit_once(':')
        .ok_or_else(|| fail(format!("API server URL {server_url} has no port")))?;
    let mut words = vec![
        "--mount".to_owned(),
        "--propagation".to_owned(),
        "private".to_owned(),
        "--".to_owned(),
        "/bin/sh".to_owned(),
        "-c".to_owned(),
        r#"mount --bind "$1" "$2" && shift 2 && exec env "$@""#.to_owned(),
        "sh".to_owned(),
        container.credentials.display().to_string(),
        SERVICE_ACCOUNT_DIR.to_owned(),
        format!("KUBERNETES_SERVICE_HOST={host}"),
        format!("KUBERNETES_SERVICE_PORT={port}"),
    ];
    words.extend(container.env.iter().map(|(k, v)| format!("{k}={v}")));
    words.push(container.program.display().to_string());
    words.extend(container.args.iter().cloned());
    ManagedProcess::spawn(container.name, Path::new("unshare"), &words, container.log).await
}

pub(crate) fn free_port() -> Result<u16, Error> {
    crate::ports::pick().map_err(Error::NoFreePort)
}

/// A CA made for one install, and certificates it signs into `dir` (`<file>.crt`, `<file>.key`).
pub(crate) struct CertificateAuthority {
    pub ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
    dir: PathBuf,
}

impl CertificateAuthority {
    pub(crate) fn generate(dir: &Path, common: &str) -> Result<Self, Error> {
        fsutil::create_dir(dir)?;
        let ca_key = KeyPair::generate()?;
        let mut ca_params = CertificateParams::default();
        ca_params.distinguished_name = common_name(common);
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_pem = ca_params.self_signed(&ca_key)?.pem();
        Ok(Self {
            ca_pem,
            issuer: Issuer::new(ca_params, ca_key),
            dir: dir.to_path_buf(),
        })
    }

    /// Signs a certificate for `names` (and CN `file`) and writes it and its key.
    pub(crate) fn sign(
        &self,
        file: &str,
        names: Vec<String>,
        usage: ExtendedKeyUsagePurpose,
    ) -> Result<(), Error> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(names)?;
        params.distinguished_name = common_name(file);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let cert = params.signed_by(&key, &self.issuer)?;
        fsutil::write_public(&self.path(&format!("{file}.crt")), &cert.pem())?;
        fsutil::write_private(&self.path(&format!("{file}.key")), &key.serialize_pem())
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The names a Service's serving certificate carries here: loopback, and the Service's own.
pub(crate) fn service_names(service: &str, namespace: &str) -> Vec<String> {
    vec![
        "127.0.0.1".to_owned(),
        format!("{service}.{namespace}.svc"),
        format!("{service}.{namespace}.pod.cluster.local"),
    ]
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

impl ControlPlane {
    /// Writes what a pod of `account` mounts at [`SERVICE_ACCOUNT_DIR`]: a bound token, the
    /// cluster CA and the namespace.
    pub(crate) async fn write_credentials(
        &self,
        client: &kube::Client,
        namespace: &str,
        account: &str,
        dir: &Path,
        fail: Fail,
    ) -> Result<(), Error> {
        fsutil::create_dir(dir)?;
        let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
        let request = TokenRequest {
            spec: Some(TokenRequestSpec {
                audiences: None,
                expiration_seconds: Some(TOKEN_SECONDS),
                ..Default::default()
            }),
            ..Default::default()
        };
        let token = accounts
            .create_token_request(account, &PostParams::default(), &request)
            .await
            .map_err(|e| fail(format!("a token for {namespace}/{account}: {e}")))?
            .status
            .and_then(|s| s.token)
            .ok_or_else(|| fail(format!("no token for {namespace}/{account}")))?;
        fsutil::write_private(&dir.join("token"), &token)?;
        fsutil::write_public(&dir.join("ca.crt"), self.ca_pem())?;
        fsutil::write_public(&dir.join("namespace"), namespace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhooks_are_called_at_loopback_with_upstreams_paths() {
        let configuration = json!({"webhooks": [
            {"name": "virtualmachine-validator.kubevirt.io",
             "clientConfig": {"service": {"namespace": "kubevirt", "name": "virt-api", "path": "/virtualmachines-validate"}}},
        ]});
        assert_eq!(served_by(&configuration), Some("virt-api"));
        let served = served_at(&configuration, 4443, "PEM");
        assert_eq!(
            served["webhooks"][0]["clientConfig"],
            json!({"url": "https://127.0.0.1:4443/virtualmachines-validate", "caBundle": "UEVN"})
        );
    }
}
