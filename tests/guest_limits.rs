//! A guest cannot exhaust the operator (hardening item 4). A guest's API server is anyone's who
//! leases it — cluster-admin in the guest, holding its serving key — so what it answers the
//! readiness probe is read only up to 64 KiB, and a condition carries an excerpt of it.
//!
//! The guest here is a TLS server with the simulated guest's key material that answers `/readyz`
//! as a hostile one would.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use guestcluster::guest::route::{Error, MAX_PROBE_BODY, RouteAccess};
use guestcluster::text::EXCERPT_CHARS;
use rustls::pki_types::pem::PemObject as _;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A guest API whose `/readyz` answers `503` with `body`, then keeps the connection open without
/// ending the answer when `endless`. Returns its kubeconfig.
async fn hostile_guest(body: Vec<u8>, endless: bool) -> String {
    let pki = sim::openshift::GuestPki::generate(sim::guest::time::host_now() - 3600, 30)
        .expect("guest PKI");
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.serving_cert.as_bytes())
            .collect::<Result<_, _>>()
            .expect("serving certificate");
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key.as_bytes()).expect("serving key");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("protocol versions")
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .expect("server config");
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("address").port();
    let body = Arc::new(body);
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, body) = (acceptor.clone(), body.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") {
                    if tls.read(&mut byte).await.unwrap_or(0) == 0 {
                        return;
                    }
                    head.push(byte[0]);
                }
                let length = if endless {
                    // Announces more than it sends: the answer never ends.
                    body.len() * 1024
                } else {
                    body.len()
                };
                let answer = format!(
                    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: {length}\r\n\r\n"
                );
                if tls.write_all(answer.as_bytes()).await.is_err()
                    || tls.write_all(&body).await.is_err()
                {
                    return;
                }
                let _ = tls.flush().await;
                // Hold the connection until the client gives up on it.
                let mut rest = [0u8; 64];
                while tls.read(&mut rest).await.unwrap_or(0) > 0 {}
            });
        }
    });
    let b64 = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: guest\n  cluster:\n    server: https://localhost:{port}\n    certificate-authority-data: {}\nusers:\n- name: admin\n  user:\n    client-certificate-data: {}\n    client-key-data: {}\ncontexts:\n- name: guest\n  context:\n    cluster: guest\n    user: admin\ncurrent-context: guest\n",
        // The Route's kubeconfig pins the guest's serving certificate itself.
        b64(&pki.serving_cert),
        b64(&pki.admin_cert),
        b64(&pki.admin_key),
    )
}

/// The probe's failure message, or a panic naming what came instead.
async fn probe_failure(kubeconfig: &str) -> String {
    match RouteAccess::direct()
        .probe_readyz(kubeconfig.as_bytes(), Duration::from_secs(20))
        .await
    {
        Err(Error::Probe { message, .. }) => message,
        other => panic!("expected a failed probe with a message, got {other:?}"),
    }
}

#[tokio::test]
async fn an_answer_longer_than_64_kib_is_not_read_to_its_end() {
    // 1 MiB sent, 1 GiB announced, and the connection held open: reading to the end would
    // wait for the probe's timeout (and hold the answer in memory meanwhile).
    let kubeconfig = hostile_guest(vec![b'x'; 1 << 20], true).await;
    let message = probe_failure(&kubeconfig).await;
    assert!(
        message.contains(&format!("longer than {MAX_PROBE_BODY} bytes")),
        "{message}"
    );
}

#[tokio::test]
async fn a_failing_answer_reaches_the_condition_as_an_excerpt() {
    // Under the limit, but thousands of failing checks with long names.
    let body: String = (0..1000)
        .map(|i| {
            format!(
                "[-]check-{i:04}-{} failed: reason withheld\n",
                "y".repeat(8)
            )
        })
        .collect();
    assert!(body.len() < MAX_PROBE_BODY);
    let kubeconfig = hostile_guest(body.into_bytes(), false).await;
    let message = probe_failure(&kubeconfig).await;
    assert!(
        message.starts_with("not ready, failing checks: check-0000-"),
        "{message}"
    );
    assert!(
        message.len() <= EXCERPT_CHARS + '…'.len_utf8(),
        "{} bytes: {message}",
        message.len()
    );
}
