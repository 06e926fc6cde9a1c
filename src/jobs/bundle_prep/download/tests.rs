use super::*;

#[test]
fn a_plain_answer_is_the_whole_file() {
    assert_eq!(
        classify(0, 200, Some(10), None),
        Answer::Whole { total: Some(10) }
    );
    assert_eq!(classify(0, 200, None, None), Answer::Whole { total: None });
}

#[test]
fn a_range_ignored_by_the_server_starts_over_from_zero() {
    assert_eq!(
        classify(4, 200, Some(10), None),
        Answer::Whole { total: Some(10) }
    );
}

#[test]
fn a_partial_answer_from_the_requested_byte_resumes() {
    assert_eq!(
        classify(4, 206, Some(6), Some("bytes 4-9/10")),
        Answer::Rest { total: Some(10) }
    );
    assert_eq!(
        classify(4, 206, Some(6), Some("bytes 4-9/*")),
        Answer::Rest { total: Some(10) }
    );
}

#[test]
fn a_partial_answer_from_elsewhere_starts_over() {
    assert!(matches!(
        classify(4, 206, Some(8), Some("bytes 2-9/10")),
        Answer::StartOver(_)
    ));
    assert!(matches!(
        classify(4, 206, Some(6), None),
        Answer::StartOver(_)
    ));
    assert!(matches!(
        classify(4, 206, Some(6), Some("bytes 4-12/10")),
        Answer::StartOver(_)
    ));
    assert!(matches!(
        classify(0, 206, Some(6), Some("bytes 4-9/10")),
        Answer::Fail(_)
    ));
}

#[test]
fn unsatisfiable_at_the_end_means_complete_elsewhere_start_over() {
    assert_eq!(
        classify(10, 416, None, Some("bytes */10")),
        Answer::Complete { total: 10 }
    );
    assert!(matches!(
        classify(12, 416, None, Some("bytes */10")),
        Answer::StartOver(_)
    ));
    assert!(matches!(
        classify(12, 416, None, None),
        Answer::StartOver(_)
    ));
    assert!(matches!(
        classify(0, 416, None, Some("bytes */0")),
        Answer::Fail(_)
    ));
}

#[test]
fn server_trouble_is_retried_client_errors_are_not() {
    for status in [408, 429, 500, 502, 503, 504] {
        assert!(
            matches!(classify(0, status, None, None), Answer::Retry(_)),
            "{status}"
        );
    }
    assert_eq!(
        classify(0, 404, None, None),
        Answer::Fail("HTTP 404 Not Found".into())
    );
    for status in [401, 403, 410, 302] {
        assert!(
            matches!(classify(3, status, None, None), Answer::Fail(_)),
            "{status}"
        );
    }
}

#[test]
fn content_ranges_parse() {
    let r = |first, total| Some(ContentRange { first, total });
    assert_eq!(parse_content_range("bytes 0-9/10"), r(Some(0), Some(10)));
    assert_eq!(parse_content_range("bytes */10"), r(None, Some(10)));
    assert_eq!(parse_content_range("bytes 5-9/*"), r(Some(5), None));
    for bad in [
        "",
        "bytes 9-5/10",
        "bytes 0-10/10",
        "items 0-1/2",
        "bytes a-b/c",
        "bytes 1/2",
    ] {
        assert_eq!(parse_content_range(bad), None, "{bad}");
    }
}

#[test]
fn backoff_doubles_up_to_the_maximum() {
    let s = Duration::from_secs;
    let delays: Vec<Duration> = (1..=7).map(|a| backoff_delay(a, s(2), s(60))).collect();
    assert_eq!(delays, [s(2), s(4), s(8), s(16), s(32), s(60), s(60)]);
    assert_eq!(backoff_delay(200, s(2), s(60)), s(60));
}

#[test]
fn redirects_resolve_against_the_request() {
    let base: Uri = "https://mirror.example/pub/crc/4.16/f.crcbundle"
        .parse()
        .unwrap();
    let r = |l| resolve(&base, l).map(|u| u.to_string());
    assert_eq!(
        r("https://cdn.example/x?sig=1").as_deref(),
        Some("https://cdn.example/x?sig=1")
    );
    assert_eq!(
        r("//cdn.example/x").as_deref(),
        Some("https://cdn.example/x")
    );
    assert_eq!(
        r("/other/f").as_deref(),
        Some("https://mirror.example/other/f")
    );
    assert_eq!(
        r("g.crcbundle").as_deref(),
        Some("https://mirror.example/pub/crc/4.16/g.crcbundle")
    );
}

/// A one-route HTTPS server (rustls) answering every request with `body`.
async fn https_server(body: &'static str) -> (u16, tempfile::TempDir) {
    https_server_answering(format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    ))
    .await
}

/// A one-route HTTPS server (rustls) answering every request with `response`.
async fn https_server_answering(response: String) -> (u16, tempfile::TempDir) {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::default();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca_params.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca_params, ca_key);
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca_pem).unwrap();

    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![leaf.der().clone()],
        rustls::pki_types::PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
    )
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, response) = (acceptor.clone(), response.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let mut request = Vec::new();
                let mut buf = [0u8; 1024];
                while !request.ends_with(b"\r\n\r\n") {
                    match tls.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = tls.write_all(response.as_bytes()).await;
                let _ = tls.shutdown().await;
            });
        }
    });
    (port, dir)
}

#[tokio::test]
async fn a_redirect_from_https_to_http_is_refused_and_its_query_never_shown() {
    let (port, dir) = https_server_answering(
        "HTTP/1.1 302 Found\r\nLocation: http://user:pw@127.0.0.1:9/b.crcbundle?token=s3cret\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            .to_owned(),
    )
    .await;
    let client = Client::new(HttpOptions {
        ca_file: Some(dir.path().join("ca.pem")),
        backoff: Duration::from_secs(3600),
        ..HttpOptions::default()
    });
    let url = format!("https://localhost:{port}/b.crcbundle?X-Amz-Signature=abc");
    let err = client.fetch_small(&url, 100, "MAX").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("redirect from https to http"), "{text}");
    for secret in ["s3cret", "X-Amz-Signature", "pw@"] {
        assert!(!text.contains(secret), "{secret} shown: {text}");
    }
}

#[test]
fn urls_are_shown_without_credentials_query_or_fragment() {
    for (url, want) in [
        (
            "https://m.example/a/b.crcbundle",
            "https://m.example/a/b.crcbundle",
        ),
        ("https://m.example/b?sig=1&x=2", "https://m.example/b?…"),
        (
            "https://u:p@m.example:8443/b#frag",
            "https://m.example:8443/b",
        ),
        ("https://m.example", "https://m.example"),
        ("not a url?x", "not a url?…"),
    ] {
        assert_eq!(shown(url), want, "{url}");
    }
}

#[tokio::test]
async fn https_is_verified_against_the_configured_cas() {
    let (port, dir) = https_server("hello").await;
    let url = format!("https://localhost:{port}/sha256sum.txt");
    let trusting = Client::new(HttpOptions {
        ca_file: Some(dir.path().join("ca.pem")),
        ..HttpOptions::default()
    });
    let body = trusting.fetch_small(&url, 100, "MAX").await.unwrap();
    assert_eq!(body, b"hello");

    // The system CAs do not know this server: a failure at once, not a retry.
    let system = Client::new(HttpOptions {
        backoff: Duration::from_secs(3600),
        ..HttpOptions::default()
    });
    let err = system.fetch_small(&url, 100, "MAX").await.unwrap_err();
    assert_eq!(err.reason(), "HttpError", "{err}");

    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    assert!(tls_connector(Some(&empty)).is_err());
}
