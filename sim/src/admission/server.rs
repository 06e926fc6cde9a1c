//! SCC admission served over HTTPS on loopback and registered with the API server as a mutating
//! webhook: `failurePolicy: Fail`, `sideEffects: None`, a URL instead of a Service (the API
//! server runs on this host) and a CA of our own in `caBundle`.
//!
//! The server has a thread and runtime of its own, so a busy simulation (disk copies, guests)
//! never delays the API server's calls. [`install`] returns once the API server calls every
//! webhook (a dry-run create of a bad object is refused by it), so an object created after the
//! simulation started is always checked. [`uninstall`] removes the registrations, so a control
//! plane without a simulation accepts everything again; while registered and not served
//! (between a simulation's stop and its restart), pod creates fail as on a cluster whose API
//! server lost the plugin. KubeVirt's and CDI's webhooks are their own
//! (`testenv::ControlPlane::kubevirt`, `testenv::ControlPlane::cdi`).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::header::CONTENT_TYPE;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::TokioIo;
use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta,
};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio_rustls::TlsAcceptor;

use super::review::{self, Webhook};
use crate::scc::Namespaces;

/// Field manager of the registrations.
pub const FIELD_MANAGER: &str = "guestcluster-sim";
/// SCC admission's registration (OpenShift flavour only).
pub const SCC_CONFIGURATION: &str = "sim-security-context-constraints";
/// Label marking the registrations as the simulation's.
const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "guestcluster-sim");

/// How long the API server may take to start calling a new registration.
const EFFECTIVE_WITHIN: Duration = Duration::from_secs(60);
const PROBE_INTERVAL: Duration = Duration::from_millis(100);
/// A TLS handshake that takes longer is dropped.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest AdmissionReview read (an object and its old version, each within etcd's limit).
const MAX_BODY: usize = 16 << 20;
/// How long SCC admission waits for a namespace's ranges (the registration's timeout is 10 s).
const SCC_RANGE_WAIT: Duration = Duration::from_secs(8);
/// Namespace of the dry-run probes (every API server has it).
const PROBE_NAMESPACE: &str = "default";

/// Errors of serving and registering the webhooks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("admission webhook certificates: {0}")]
    Certificates(#[from] rcgen::Error),
    #[error("admission webhook TLS: {0}")]
    Tls(#[from] rustls::Error),
    #[error("admission webhook server: {0}")]
    Io(#[from] std::io::Error),
    #[error("registering the admission webhooks: {0}")]
    Kube(#[from] kube::Error),
    #[error("the API server did not call webhook {webhook} within {waited:?} (last probe: {last})")]
    NotEffective {
        webhook: &'static str,
        waited: Duration,
        last: String,
    },
}

/// The running HTTPS server; dropping it stops it.
pub struct AdmissionServer {
    addr: SocketAddr,
    ca_pem: String,
    stop: Option<oneshot::Sender<()>>,
}

/// What the connections share.
#[derive(Clone)]
struct Shared {
    namespaces: Namespaces,
}

impl AdmissionServer {
    /// Serves every [`Webhook`] on a free loopback port with a fresh CA; SCC admission reads
    /// namespaces' ranges from `namespaces`.
    pub fn start(namespaces: Namespaces) -> Result<Self, Error> {
        let (ca_pem, cert, key) = certificates()?;
        let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)?;
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        listener.set_nonblocking(true)?;
        let addr = listener.local_addr()?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let (stop, stopped) = oneshot::channel();
        std::thread::Builder::new()
            .name("sim-admission".into())
            .spawn(move || {
                runtime.block_on(async move {
                    let shared = Shared { namespaces };
                    match TcpListener::from_std(listener) {
                        Ok(listener) => tokio::select! {
                            _ = stopped => {}
                            () = serve(listener, acceptor, shared) => {}
                        },
                        Err(err) => tracing::error!("admission webhook server: {err}"),
                    }
                });
            })?;
        Ok(Self {
            addr,
            ca_pem,
            stop: Some(stop),
        })
    }

    /// `https://127.0.0.1:<port>`.
    pub fn base_url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The CA the serving certificate chains to, for `caBundle`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }
}

impl Drop for AdmissionServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A fresh CA and a serving certificate for `127.0.0.1` signed by it: (CA PEM, chain, key).
fn certificates() -> Result<(String, CertificateDer<'static>, PrivateKeyDer<'static>), rcgen::Error>
{
    let mut ca_params = CertificateParams::default();
    ca_params.distinguished_name = common_name("guestcluster-sim admission CA");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate()?;
    let ca_pem = ca_params.self_signed(&ca_key)?.pem();
    let issuer = Issuer::new(ca_params, ca_key);

    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()])?;
    params.distinguished_name = common_name("guestcluster-sim admission");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    let key = KeyPair::generate()?;
    let cert = params.signed_by(&key, &issuer)?;
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((ca_pem, cert.der().clone(), key))
}

fn common_name(cn: &str) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, cn);
    dn
}

async fn serve(listener: TcpListener, acceptor: TlsAcceptor, shared: Shared) {
    loop {
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(err) => {
                tracing::debug!("admission webhook server: accept: {err}");
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let shared = shared.clone();
        tokio::spawn(async move {
            let Ok(Ok(tls)) = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await
            else {
                return;
            };
            let served = hyper::server::conn::http1::Builder::new()
                .serve_connection(
                    TokioIo::new(tls),
                    hyper::service::service_fn(|request| respond(request, shared.clone())),
                )
                .await;
            if let Err(err) = served {
                tracing::debug!("admission webhook server: connection: {err}");
            }
        });
    }
}

async fn respond(
    request: Request<Incoming>,
    shared: Shared,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let namespaces = &shared.namespaces;
    let Some(webhook) = Webhook::from_path(request.uri().path()) else {
        return Ok(plain(
            StatusCode::NOT_FOUND,
            "no webhook at this path".into(),
        ));
    };
    if request.method() != Method::POST {
        return Ok(plain(
            StatusCode::METHOD_NOT_ALLOWED,
            "webhooks take POST".into(),
        ));
    }
    let body = match Limited::new(request.into_body(), MAX_BODY).collect().await {
        Ok(body) => body.to_bytes(),
        Err(err) => return Ok(plain(StatusCode::BAD_REQUEST, err.to_string())),
    };
    if webhook == Webhook::SecurityContextConstraints {
        await_ranges(&body, namespaces).await;
    }
    let answer = review::answer(webhook, &body, namespaces);
    Ok(match answer {
        Ok(answer) => {
            if answer["response"]["allowed"] == false {
                tracing::info!(
                    webhook = webhook.name(),
                    "simulated admission denied: {}",
                    answer["response"]["status"]["message"]
                );
            }
            let mut response = Response::new(Full::new(Bytes::from(answer.to_string())));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            response
        }
        Err(err) => plain(StatusCode::BAD_REQUEST, err.to_string()),
    })
}

/// SCC admission waits for a new namespace's ranges (upstream polls its namespace cache every
/// second for up to 10 s); here a little less than the webhook's timeout.
async fn await_ranges(body: &[u8], namespaces: &Namespaces) {
    let review: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
    let namespace = review["request"]["namespace"].as_str().unwrap_or_default();
    let started = Instant::now();
    while namespaces
        .get(namespace)
        .is_none_or(|r| r.uids.is_none() || r.mcs.is_none())
        && started.elapsed() < SCC_RANGE_WAIT
    {
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

fn plain(status: StatusCode, text: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(text)));
    *response.status_mut() = status;
    response
}

/// How the API server calls `webhook`: our URL, our CA.
fn client_config(webhook: Webhook, base_url: &str, ca_pem: &str) -> WebhookClientConfig {
    WebhookClientConfig {
        url: Some(format!("{base_url}{}", webhook.path())),
        ca_bundle: Some(ByteString(ca_pem.as_bytes().to_vec())),
        service: None,
    }
}

/// SCC admission's registration: every new pod but virt-launcher's (KubeVirt's own SCC,
/// `kubevirt-controller`, admits those upstream; it is not modelled), `failurePolicy: Fail`.
pub fn scc_configuration(base_url: &str, ca_pem: &str) -> MutatingWebhookConfiguration {
    let webhook = Webhook::SecurityContextConstraints;
    let strings = |list: &[&str]| Some(list.iter().map(|s| s.to_string()).collect());
    MutatingWebhookConfiguration {
        metadata: ObjectMeta {
            name: Some(SCC_CONFIGURATION.to_owned()),
            labels: Some([(MANAGED_BY.0.to_owned(), MANAGED_BY.1.to_owned())].into()),
            ..Default::default()
        },
        webhooks: Some(vec![MutatingWebhook {
            name: webhook.name().to_owned(),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: client_config(webhook, base_url, ca_pem),
            failure_policy: Some("Fail".to_owned()),
            side_effects: "None".to_owned(),
            timeout_seconds: Some(10),
            // Runs again if a later mutating webhook changed the pod, as a plugin would see it.
            reinvocation_policy: Some("IfNeeded".to_owned()),
            object_selector: Some(LabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: guestcluster::kubevirt::labels::APP.to_owned(),
                    operator: "NotIn".to_owned(),
                    values: strings(&[guestcluster::kubevirt::labels::VIRT_LAUNCHER]),
                }]),
                match_labels: None,
            }),
            rules: Some(vec![RuleWithOperations {
                operations: strings(&["CREATE"]),
                api_groups: strings(&[""]),
                api_versions: strings(&["v1"]),
                resources: strings(&["pods"]),
                scope: None,
            }]),
            ..Default::default()
        }]),
    }
}

/// Registers the webhooks of `server` (SCC admission only with `scc`) and waits until the API
/// server calls each of them.
pub async fn install(
    client: &kube::Client,
    server: &AdmissionServer,
    scc: bool,
) -> Result<(), Error> {
    let mutating: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    if scc {
        mutating
            .patch(
                SCC_CONFIGURATION,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&scc_configuration(&server.base_url(), server.ca_pem())),
            )
            .await?;
    } else {
        delete(&mutating, SCC_CONFIGURATION).await?;
    }
    for webhook in Webhook::ALL {
        match webhook {
            Webhook::SecurityContextConstraints if !scc => {}
            _ => wait_effective(client, webhook).await?,
        }
    }
    Ok(())
}

/// Removes the registrations (those already gone are fine).
pub async fn uninstall(client: &kube::Client) -> Result<(), Error> {
    delete(
        &Api::<MutatingWebhookConfiguration>::all(client.clone()),
        SCC_CONFIGURATION,
    )
    .await
}

async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(err) => Err(err.into()),
    }
}

/// Waits until a dry-run create of an object `webhook` refuses is refused by it: the API server
/// picks registrations up asynchronously.
async fn wait_effective(client: &kube::Client, webhook: Webhook) -> Result<(), Error> {
    let Some((resource, object)) = probe(webhook) else {
        return Err(Error::NotEffective {
            webhook: webhook.name(),
            waited: Duration::ZERO,
            last: "no object it refuses".to_owned(),
        });
    };
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), PROBE_NAMESPACE, &resource);
    let denied_by = format!(
        "admission webhook \"{}\" denied the request",
        webhook.name()
    );
    let params = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let started = Instant::now();
    loop {
        let last = match api.create(&params, &object).await {
            Err(kube::Error::Api(status)) if status.message.starts_with(&denied_by) => {
                return Ok(());
            }
            Err(err) => err.to_string(),
            Ok(_) => "admitted".to_owned(),
        };
        if started.elapsed() > EFFECTIVE_WITHIN {
            return Err(Error::NotEffective {
                webhook: webhook.name(),
                waited: started.elapsed(),
                last,
            });
        }
        tokio::time::sleep(PROBE_INTERVAL).await;
    }
}

/// An object `webhook` refuses (and the schema accepts).
fn probe(webhook: Webhook) -> Option<(ApiResource, DynamicObject)> {
    let (resource, body) = match webhook {
        Webhook::SecurityContextConstraints => (
            ApiResource::erase::<k8s_openapi::api::core::v1::Pod>(&()),
            // The host's network.
            json!({"spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "probe"}]}}),
        ),
    };
    let mut object = DynamicObject::new("sim-admission-probe", &resource);
    object.data = body;
    Some((resource, object))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registration_points_here() {
        let config = scc_configuration("https://127.0.0.1:4443", "PEM");
        for hook in config.webhooks.iter().flatten() {
            assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
            assert_eq!(hook.side_effects, "None");
            assert_eq!(
                hook.client_config.ca_bundle,
                Some(ByteString(b"PEM".to_vec()))
            );
            let url = hook.client_config.url.as_deref().unwrap();
            let path = url.strip_prefix("https://127.0.0.1:4443").unwrap();
            assert_eq!(
                Webhook::from_path(path).map(Webhook::name),
                Some(hook.name.as_str())
            );
        }
    }

    #[test]
    fn every_probe_is_refused_by_its_webhook() {
        for webhook in Webhook::ALL {
            let (_, object) = probe(webhook).expect("every webhook refuses its probe");
            let review = serde_json::to_vec(&json!({
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {"uid": "u", "operation": "CREATE", "namespace": PROBE_NAMESPACE,
                            "object": serde_json::to_value(&object).unwrap()},
            }))
            .unwrap();
            // The probe namespace has ranges: the probe is refused for what it asks.
            let namespaces = Namespaces::default();
            namespaces.set(
                PROBE_NAMESPACE,
                crate::scc::NamespaceRanges {
                    uids: Some("1000000000/10000".into()),
                    groups: None,
                    mcs: Some("s0:c1,c0".into()),
                },
            );
            let answer = review::answer(webhook, &review, &namespaces).unwrap();
            assert_eq!(answer["response"]["allowed"], false, "{webhook:?}");
        }
    }

    #[test]
    fn the_serving_certificate_chains_to_the_ca() {
        let (ca_pem, cert, _key) = certificates().unwrap();
        let (_, ca) = x509_parser::pem::parse_x509_pem(ca_pem.as_bytes()).unwrap();
        let ca = ca.parse_x509().unwrap();
        let (_, leaf) = x509_parser::parse_x509_certificate(&cert).unwrap();
        leaf.verify_signature(Some(ca.public_key())).unwrap();
        let san = leaf.subject_alternative_name().unwrap().unwrap();
        assert!(
            san.value
                .general_names
                .iter()
                .any(|n| matches!(n, x509_parser::extensions::GeneralName::IPAddress(ip) if *ip == [127, 0, 0, 1])),
            "{san:?}"
        );
    }
}
