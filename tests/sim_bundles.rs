//! The download source's test inputs: bundles shaped like the published ones (and their flawed
//! variants), served over HTTP with resumable ranges and injectable faults.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

use std::io::Read;
use std::path::Path;

use sim::bundles::{self, BundleSpec, Flaw};
use sim::file_server::{Fault, FileServer};
use sim::guest::disk;

fn members(archive: &Path) -> Vec<(String, Vec<u8>)> {
    let compressed = std::fs::File::open(archive).unwrap();
    let decoder = ruzstd::decoding::StreamingDecoder::new(compressed).unwrap();
    let mut tar = tar::Archive::new(decoder);
    tar.entries()
        .unwrap()
        .map(|e| {
            let mut e = e.unwrap();
            let path = String::from_utf8_lossy(&e.path_bytes()).into_owned();
            let mut data = Vec::new();
            e.read_to_end(&mut data).unwrap();
            (path, data)
        })
        .collect()
}

#[test]
fn a_bundle_has_the_upstream_layout_and_a_sealed_disk() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = bundles::build(dir.path(), &BundleSpec::new("4.22.7")).unwrap();
    assert_eq!(bundle.file_name, "crc_libvirt_4.22.7_amd64.crcbundle");
    let listed = std::fs::read_to_string(&bundle.sha256sum_txt).unwrap();
    assert!(
        listed.contains(&format!("{}  {}", bundle.sha256, bundle.file_name)),
        "{listed}"
    );

    let members = members(&bundle.archive);
    let names: Vec<&str> = members.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "crc_libvirt_4.22.7_amd64/crc.qcow2",
            "crc_libvirt_4.22.7_amd64/id_ecdsa_crc",
            "crc_libvirt_4.22.7_amd64/crc-bundle-info.json"
        ]
    );
    let info: serde_json::Value = serde_json::from_slice(&members[2].1).unwrap();
    assert_eq!(info["clusterInfo"]["openshiftVersion"], "4.22.7");
    assert_eq!(members[1].1, bundle.private_key.as_bytes());

    // The qcow2 converts (with the real qemu-img) to a raw disk carrying the sealed guest.
    let qcow2 = dir.path().join("crc.qcow2");
    std::fs::write(&qcow2, &members[0].1).unwrap();
    assert!(members[0].1.starts_with(b"QFI\xfb"), "a real qcow2 image");
    let raw = dir.path().join("disk.img");
    let status = std::process::Command::new("qemu-img")
        .args(["convert", "-f", "qcow2", "-O", "raw"])
        .arg(&qcow2)
        .arg(&raw)
        .status()
        .unwrap();
    assert!(status.success());
    assert_eq!(bundles::sha256_file(&raw).unwrap(), bundle.raw_disk_sha256);
    let state = disk::read_state(&raw)
        .unwrap()
        .expect("the disk carries guest state");
    assert_eq!(state.openshift_version.as_deref(), Some("4.22.7"));
    assert!(state.sealed);
    let key = guestcluster::guest::keys::parse_private_key(&bundle.private_key).unwrap();
    let line =
        guestcluster::guest::keys::authorized_key_line(key.public_key(), "crc-bundle").unwrap();
    assert!(
        state.provisioned_keys("core").contains(&line),
        "core authorizes the bundle key"
    );
}

#[test]
fn flaws_produce_the_bad_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let build = |flaw| {
        bundles::build(
            &dir.path().join(format!("{flaw:?}")),
            &BundleSpec::new("4.22.7").with_flaw(flaw),
        )
        .unwrap()
    };

    let wrong = build(Flaw::WrongChecksum);
    let listed = std::fs::read_to_string(&wrong.sha256sum_txt).unwrap();
    assert!(!listed.contains(&wrong.sha256) && listed.contains(&wrong.file_name));

    let unlisted = build(Flaw::UnlistedInChecksums);
    assert!(
        !std::fs::read_to_string(&unlisted.sha256sum_txt)
            .unwrap()
            .contains(&unlisted.file_name)
    );

    let missing = build(Flaw::MissingMember("id_ecdsa_crc"));
    assert!(
        members(&missing.archive)
            .iter()
            .all(|(n, _)| !n.ends_with("id_ecdsa_crc"))
    );

    let traversal = build(Flaw::PathTraversal);
    assert!(
        members(&traversal.archive)
            .iter()
            .any(|(n, _)| n.ends_with("/../escape"))
    );

    let no_version = build(Flaw::NoVersion);
    let info = members(&no_version.archive)
        .into_iter()
        .find(|(n, _)| n.ends_with(".json"))
        .unwrap()
        .1;
    let info: serde_json::Value = serde_json::from_slice(&info).unwrap();
    assert!(info["clusterInfo"].get("openshiftVersion").is_none());
}

async fn get(url: &str, from: u64) -> (u16, Vec<u8>, bool) {
    let (host, path) = url.trim_start_matches("http://").split_once('/').unwrap();
    let mut stream = tokio::net::TcpStream::connect(host).await.unwrap();
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!(
        "GET /{path} HTTP/1.1\r\nHost: {host}\r\nRange: bytes={from}-\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = Vec::new();
    let complete = stream.read_to_end(&mut response).await.is_ok();
    let split = response.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let head = String::from_utf8_lossy(&response[..split]).into_owned();
    let code = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|l| {
            l.strip_prefix("content-length: ")
                .or_else(|| l.strip_prefix("Content-Length: "))
        })
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let body = response[split + 4..].to_vec();
    (code, body.clone(), complete && body.len() == length)
}

#[tokio::test]
async fn the_file_server_resumes_and_injects_faults() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blob");
    let data: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    std::fs::write(&file, &data).unwrap();
    let server = FileServer::start("127.0.0.1".parse().unwrap())
        .await
        .unwrap();

    let url = server.publish(
        "b/blob",
        file.clone(),
        Fault::Cut {
            after: 70_000,
            times: 1,
        },
    );
    let (code, first, complete) = get(&url, 0).await;
    assert_eq!(code, 200);
    assert!(!complete, "the first transfer is cut");
    assert_eq!(
        first.len(),
        70_000,
        "a cut delivers exactly the bytes before it"
    );
    let (code, rest, complete) = get(&url, first.len() as u64).await;
    assert_eq!(code, 206);
    assert!(complete);
    assert_eq!(
        [first, rest].concat(),
        data,
        "a resumed download is byte-identical"
    );
    assert_eq!(server.requests("b/blob"), 2);

    let missing = server.publish("b/gone", file, Fault::Status(404));
    assert_eq!(get(&missing, 0).await.0, 404);
    assert_eq!(get(&server.url("never/published"), 0).await.0, 404);
}

/// A held path answers nothing until released, then serves the whole file.
#[tokio::test]
async fn the_file_server_holds_requests_until_released() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("blob");
    std::fs::write(&file, b"held bytes").unwrap();
    let server = FileServer::start("127.0.0.1".parse().unwrap())
        .await
        .unwrap();
    let url = server.publish("h/blob", file, Fault::None);
    let hold = server.hold("h/blob");
    let request = tokio::spawn(async move { get(&url, 0).await });
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while server.requests("h/blob") == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the request never arrived"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(!request.is_finished(), "a held request is not answered");
    hold.release();
    let (code, body, complete) = request.await.unwrap();
    assert_eq!(
        (code, body.as_slice(), complete),
        (200, &b"held bytes"[..], true)
    );
}
