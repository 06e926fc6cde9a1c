//! `guestcluster bundle-prep` as a process against bundles served over HTTP and the shared
//! control plane: the golden disk, the key Secret and the metadata ConfigMap on success;
//! resume after cut connections and reuse of an earlier run's download; and for every flawed
//! input a failure whose termination message names the reason, with nothing published.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::path::PathBuf;
use std::process::Output;

use guestcluster::api::{CRCBundle, CRCBundleSpec};
use guestcluster::contract::bundle_prep::REASONS;
use guestcluster::jobs::bundle_prep;
use guestcluster::tools::qemu_img;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::Resource as _;
use kube::api::{Api, PostParams};
use sim::bundles::{self, Bundle, BundleSpec, Flaw};
use sim::file_server::{Fault, FileServer};
use sim::guest::disk;
use testenv::ControlPlane;

const VERSION: &str = "4.16.0";

/// A bundle on a file server, a CRCBundle to own what is published, and the Job's volumes.
struct Fixture {
    dir: tempfile::TempDir,
    server: FileServer,
    bundle: Bundle,
    bundle_path: String,
    client: kube::Client,
    namespace: String,
    bundle_name: String,
    bundle_uid: String,
}

impl Fixture {
    async fn new(spec: BundleSpec, fault: Fault) -> Fixture {
        Self::padded(spec, fault, 0).await
    }

    /// With `pad` bytes of a zstd skippable frame after the archive's frame: the test bundle
    /// compresses to a few KiB, and the file server's HTTP stack drops what it still buffers
    /// (up to a few hundred KiB) when the body is cut, so only a cut well into a large archive
    /// reliably delivers bytes to resume from.
    async fn padded(spec: BundleSpec, fault: Fault, pad: usize) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let mirror = dir.path().join("mirror");
        let mut bundle = tokio::task::spawn_blocking(move || bundles::build(&mirror, &spec))
            .await
            .unwrap()
            .expect("build the test bundle (needs qemu-img)");
        if pad > 0 {
            pad_archive(&mut bundle, pad);
        }
        let server = FileServer::start("127.0.0.1".parse().unwrap())
            .await
            .unwrap();
        let bundle_path = format!("openshift/{VERSION}/{}", bundle.file_name);
        server.publish(&bundle_path, bundle.archive.clone(), fault);
        server.publish(
            &format!("openshift/{VERSION}/sha256sum.txt"),
            bundle.sha256sum_txt.clone(),
            Fault::None,
        );

        let client = support::client().await;
        let namespace = support::namespace(&client, "bundle-prep").await;
        let bundle_name = support::unique("crc-4.16.0-amd64");
        let spec: CRCBundleSpec =
            serde_json::from_value(serde_json::json!({"version": VERSION})).unwrap();
        let created = Api::<CRCBundle>::all(client.clone())
            .create(&PostParams::default(), &CRCBundle::new(&bundle_name, spec))
            .await
            .expect("create the CRCBundle");
        let bundle_uid = created.meta().uid.clone().expect("a UID");
        Fixture {
            dir,
            server,
            bundle,
            bundle_path,
            client,
            namespace,
            bundle_name,
            bundle_uid,
        }
    }

    fn golden(&self) -> PathBuf {
        self.dir.path().join("golden")
    }

    fn scratch(&self) -> PathBuf {
        self.dir.path().join("scratch")
    }

    fn termination_log(&self) -> PathBuf {
        self.dir.path().join("termination-log")
    }

    fn secret_name(&self) -> String {
        format!("{}-ssh-key", self.bundle_name)
    }

    fn configmap_name(&self) -> String {
        format!("{}-metadata", self.bundle_name)
    }

    /// Runs `guestcluster bundle-prep` with the env the operator's Job sets, plus `extra`.
    async fn run(&self, extra: &[(&str, &str)]) -> Run {
        let kubeconfig = ControlPlane::shared()
            .await
            .unwrap()
            .kubeconfig_path()
            .to_path_buf();
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_guestcluster"));
        command
            .arg("bundle-prep")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("RUST_LOG", "info")
            .env("KUBECONFIG", kubeconfig)
            // The test server speaks plain http, as a mirror inside a cluster may.
            .env("ALLOW_HTTP", "true")
            .env("BUNDLE_URL", self.server.url(&self.bundle_path))
            .env(
                "SHA256_URL",
                self.server
                    .url(&format!("openshift/{VERSION}/sha256sum.txt")),
            )
            .env("NAMESPACE", &self.namespace)
            .env("BUNDLE_NAME", &self.bundle_name)
            .env("BUNDLE_UID", &self.bundle_uid)
            .env("SSH_SECRET_NAME", self.secret_name())
            .env("METADATA_CONFIGMAP_NAME", self.configmap_name())
            .env("GOLDEN_DIR", self.golden())
            .env("SCRATCH_DIR", self.scratch())
            .env("TERMINATION_MESSAGE_PATH", self.termination_log())
            .env("DOWNLOAD_RETRY_BACKOFF_MS", "20")
            .env("HTTP_READ_TIMEOUT_SECONDS", "20");
        for (key, value) in extra {
            command.env(key, value);
        }
        let _ = std::fs::remove_file(self.termination_log());
        let output: Output = command
            .output()
            .await
            .expect("run guestcluster bundle-prep");
        Run {
            code: output.status.code(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
            message: std::fs::read_to_string(self.termination_log()).unwrap_or_default(),
        }
    }

    async fn secret(&self) -> Option<Secret> {
        Api::<Secret>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&self.secret_name())
            .await
            .unwrap()
    }

    async fn config_map(&self) -> Option<ConfigMap> {
        Api::<ConfigMap>::namespaced(self.client.clone(), &self.namespace)
            .get_opt(&self.configmap_name())
            .await
            .unwrap()
    }

    fn archive_len(&self) -> u64 {
        std::fs::metadata(&self.bundle.archive).unwrap().len()
    }

    /// Asserts a successful run left the golden disk and the published objects right.
    async fn assert_prepared(&self, run: &Run) {
        assert_eq!(run.code, Some(0), "bundle-prep failed:\n{}", run.stderr);
        assert!(run.message.starts_with("Prepared: "), "{}", run.message);
        assert!(run.last_line().starts_with("Prepared: "), "{}", run.stderr);

        let disk_img = self.golden().join("disk.img");
        let info = qemu_img::info(&disk_img).await.unwrap();
        assert_eq!(info.format, "raw");
        assert_eq!(info.virtual_size, 256 << 20);
        assert!(!self.golden().join(bundle_prep::PARTIAL_DISK_FILE).exists());
        let state = disk::read_state(&disk_img)
            .unwrap()
            .expect("the disk carries the guest");
        assert_eq!(state.openshift_version.as_deref(), Some(VERSION));
        assert!(state.sealed);
        let (disk_sha256, _) = {
            let disk_img = disk_img.clone();
            tokio::task::spawn_blocking(move || bundles::sha256_file(&disk_img).map(|d| (d, ())))
                .await
                .unwrap()
                .unwrap()
        };
        assert_eq!(disk_sha256, self.bundle.raw_disk_sha256);

        let secret = self.secret().await.expect("the key Secret");
        assert_eq!(secret.type_.as_deref(), Some("Opaque"));
        let key = &secret.data.as_ref().unwrap()["id_ecdsa"].0;
        assert_eq!(key, self.bundle.private_key.as_bytes());
        self.assert_owned(secret.meta());
        let cm = self.config_map().await.expect("the metadata ConfigMap");
        let data = cm.data.clone().unwrap();
        assert_eq!(data["ocpVersion"], VERSION);
        assert_eq!(data["sha256"], self.bundle.sha256);
        assert_eq!(data["diskSHA256"], self.bundle.raw_disk_sha256);
        assert_eq!(data["diskVirtualSize"], (256u64 << 20).to_string());
        self.assert_owned(cm.meta());

        let key_body = self.bundle.private_key.lines().nth(1).unwrap();
        assert!(
            !run.stderr.contains(key_body),
            "the log shows the private key"
        );
        let left: Vec<_> = std::fs::read_dir(self.scratch())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "scratch not cleaned: {left:?}");
    }

    fn assert_owned(&self, meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) {
        let owners = meta.owner_references.as_ref().expect("ownerReferences");
        assert_eq!(owners.len(), 1);
        let owner = &owners[0];
        assert_eq!(owner.api_version, "guestcluster.opdev.io/v1alpha1");
        assert_eq!(owner.kind, "CRCBundle");
        assert_eq!(owner.name, self.bundle_name);
        assert_eq!(owner.uid, self.bundle_uid);
        assert_eq!(owner.controller, Some(true));
        let fields = meta.managed_fields.as_ref().unwrap();
        assert!(
            fields
                .iter()
                .any(|f| f.manager.as_deref() == Some(bundle_prep::FIELD_MANAGER))
        );
    }

    /// Asserts a failed run named `reason` and left nothing behind.
    async fn assert_failed(&self, run: &Run, reason: &str) {
        let index = REASONS
            .iter()
            .position(|r| *r == reason)
            .expect("a listed reason");
        assert_eq!(
            run.code,
            Some(10 + index as i32),
            "expected {reason}:\n{}",
            run.stderr
        );
        assert!(
            run.message.starts_with(&format!("{reason}: ")),
            "termination message: {}",
            run.message
        );
        assert!(
            run.last_line().starts_with(&format!("{reason}: ")),
            "stderr:\n{}",
            run.stderr
        );
        assert!(self.secret().await.is_none(), "a Secret was published");
        assert!(
            self.config_map().await.is_none(),
            "a ConfigMap was published"
        );
        for name in ["disk.img", bundle_prep::PARTIAL_DISK_FILE] {
            assert!(
                !self.golden().join(name).exists(),
                "{name} left in the golden volume"
            );
        }
    }
}

/// Appends a skippable frame (magic 0x184D2A50) of `len` pseudo-random bytes to the archive and
/// lists the new digest.
fn pad_archive(bundle: &mut Bundle, len: usize) {
    let mut frame = 0x184D_2A50u32.to_le_bytes().to_vec();
    frame.extend(u32::try_from(len).unwrap().to_le_bytes());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    frame.extend((0..len).map(|_| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x as u8
    }));
    let mut archive = std::fs::read(&bundle.archive).unwrap();
    archive.extend(frame);
    std::fs::write(&bundle.archive, archive).unwrap();
    let digest = bundles::sha256_file(&bundle.archive).unwrap();
    let listing = std::fs::read_to_string(&bundle.sha256sum_txt).unwrap();
    std::fs::write(
        &bundle.sha256sum_txt,
        listing.replace(&bundle.sha256, &digest),
    )
    .unwrap();
    bundle.sha256 = digest;
}

struct Run {
    code: Option<i32>,
    stderr: String,
    message: String,
}

impl Run {
    fn last_line(&self) -> &str {
        self.stderr.trim_end().lines().last().unwrap_or_default()
    }
}

#[tokio::test]
async fn prepares_the_golden_disk_and_publishes_key_and_metadata() {
    let fx = Fixture::new(BundleSpec::new(VERSION), Fault::None).await;
    let run = fx.run(&[]).await;
    fx.assert_prepared(&run).await;
    eprintln!("{}", run.message);
    assert_eq!(fx.server.requests(&fx.bundle_path), 1);
}

/// The prep Job's two containers: `fetch` (no API token) leaves the disk, the key and the facts,
/// and publishes nothing; `publish` makes the Secret and ConfigMap from them and cleans scratch.
#[tokio::test]
async fn fetch_and_publish_run_as_separate_stages() {
    let fx = Fixture::new(BundleSpec::new(VERSION), Fault::None).await;
    let fetched = fx.run(&[("PREP_STAGE", "fetch")]).await;
    assert_eq!(fetched.code, Some(0), "fetch failed:\n{}", fetched.stderr);
    assert!(fx.golden().join("disk.img").exists());
    assert!(fx.secret().await.is_none(), "fetch writes no Secret");
    assert!(fx.config_map().await.is_none(), "fetch writes no ConfigMap");
    let key = fx.scratch().join("prepared-key");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&key).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o600, "the key is the pod user's alone");

    let published = fx.run(&[("PREP_STAGE", "publish")]).await;
    fx.assert_prepared(&published).await;
    assert_eq!(
        fx.server.requests(&fx.bundle_path),
        1,
        "publish downloads nothing"
    );
}

#[tokio::test]
async fn resumes_a_cut_download_and_converges_when_run_again() {
    let fx = Fixture::padded(BundleSpec::new(VERSION), Fault::None, 8 << 20).await;
    let cut = fx.archive_len() / 2;
    let fault = Fault::Cut {
        after: cut,
        times: 1,
    };
    fx.server
        .publish(&fx.bundle_path, fx.bundle.archive.clone(), fault);
    let run = fx.run(&[]).await;
    fx.assert_prepared(&run).await;
    assert!(fx.server.requests(&fx.bundle_path) >= 2);
    assert!(
        run.stderr.contains("download interrupted at"),
        "{}",
        run.stderr
    );
    let resumed_at: u64 = run
        .stderr
        .split("resuming the download at byte ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no Range request after the cut:\n{}", run.stderr));
    assert!(
        resumed_at > 0 && resumed_at <= cut,
        "resumed at {resumed_at}, cut at {cut}"
    );

    // Run again after success (as on a re-provisioning): the same result.
    let again = fx.run(&[]).await;
    fx.assert_prepared(&again).await;
}

#[tokio::test]
async fn reuses_the_download_of_an_earlier_run() {
    let fx = Fixture::new(BundleSpec::new(VERSION), Fault::None).await;
    std::fs::create_dir_all(fx.scratch()).unwrap();
    let archive = std::fs::read(&fx.bundle.archive).unwrap();
    let half = archive.len() / 2;
    std::fs::write(
        fx.scratch().join(bundle_prep::ARCHIVE_FILE),
        &archive[..half],
    )
    .unwrap();
    let run = fx.run(&[]).await;
    fx.assert_prepared(&run).await;
    assert_eq!(
        fx.server.requests(&fx.bundle_path),
        1,
        "one range request finished the file"
    );
    assert!(
        run.stderr
            .contains(&format!("found {half} bytes of an earlier download")),
        "{}",
        run.stderr
    );

    // A complete download is only checked, not fetched again.
    std::fs::write(fx.scratch().join(bundle_prep::ARCHIVE_FILE), &archive).unwrap();
    let run = fx.run(&[]).await;
    fx.assert_prepared(&run).await;
    assert!(run.stderr.contains("already complete"), "{}", run.stderr);
    assert_eq!(fx.server.requests(&fx.bundle_path), 2);
}

#[tokio::test]
async fn a_wrong_partial_download_is_replaced() {
    let fx = Fixture::new(BundleSpec::new(VERSION), Fault::None).await;
    std::fs::create_dir_all(fx.scratch()).unwrap();
    let garbage = vec![0x5a; (fx.archive_len() / 2) as usize];
    std::fs::write(fx.scratch().join(bundle_prep::ARCHIVE_FILE), garbage).unwrap();
    let run = fx.run(&[]).await;
    fx.assert_prepared(&run).await;
    assert!(
        run.stderr.contains("downloading again from the start"),
        "{}",
        run.stderr
    );
    assert_eq!(fx.server.requests(&fx.bundle_path), 2);
}

/// A small disk: the failure cases never convert it.
fn flawed(flaw: Flaw) -> BundleSpec {
    let mut spec = BundleSpec::new(VERSION).with_flaw(flaw);
    spec.disk_virtual_size = 16 << 20;
    spec
}

async fn fails_with(
    spec: BundleSpec,
    fault: Fault,
    extra: &[(&str, &str)],
    reason: &str,
) -> (Fixture, Run) {
    let fx = Fixture::new(spec, fault).await;
    let run = fx.run(extra).await;
    fx.assert_failed(&run, reason).await;
    (fx, run)
}

#[tokio::test]
async fn a_wrong_checksum_fails_naming_both_digests() {
    let (fx, run) = fails_with(
        flawed(Flaw::WrongChecksum),
        Fault::None,
        &[],
        "ChecksumMismatch",
    )
    .await;
    assert!(run.message.contains(&fx.bundle.sha256), "{}", run.message);
    assert!(run.message.contains(&"0".repeat(64)), "{}", run.message);
    assert!(
        !fx.scratch().join(bundle_prep::ARCHIVE_FILE).exists(),
        "the mismatching archive is deleted"
    );
}

#[tokio::test]
async fn an_unlisted_bundle_fails_before_downloading() {
    let (fx, run) = fails_with(
        flawed(Flaw::UnlistedInChecksums),
        Fault::None,
        &[],
        "ChecksumMissing",
    )
    .await;
    assert!(
        run.message.contains(&fx.bundle.file_name),
        "{}",
        run.message
    );
    assert_eq!(fx.server.requests(&fx.bundle_path), 0);
}

#[tokio::test]
async fn a_missing_member_fails_naming_it() {
    let (_, run) = fails_with(
        flawed(Flaw::MissingMember("crc.qcow2")),
        Fault::None,
        &[],
        "MissingMember",
    )
    .await;
    assert!(
        run.message.contains("crc_libvirt_4.16.0_amd64/crc.qcow2"),
        "{}",
        run.message
    );
    let (_, run) = fails_with(
        flawed(Flaw::MissingMember("id_ecdsa_crc")),
        Fault::None,
        &[],
        "MissingMember",
    )
    .await;
    assert!(
        run.message
            .contains("crc_libvirt_4.16.0_amd64/id_ecdsa_crc"),
        "{}",
        run.message
    );
}

#[tokio::test]
async fn a_path_traversal_is_refused() {
    let (fx, run) = fails_with(
        flawed(Flaw::PathTraversal),
        Fault::None,
        &[],
        "UnsafeMember",
    )
    .await;
    assert!(run.message.contains("/../escape"), "{}", run.message);
    assert!(
        !fx.dir.path().join("scratch/escape").exists() && !fx.dir.path().join("escape").exists()
    );
    assert!(!fx.scratch().join("extracted").exists());
}

#[tokio::test]
async fn a_symlink_is_refused() {
    let (_, run) = fails_with(flawed(Flaw::Symlink), Fault::None, &[], "UnsafeMember").await;
    assert!(run.message.contains("symbolic link"), "{}", run.message);
}

#[tokio::test]
async fn a_bundle_without_version_is_refused_before_converting() {
    fails_with(
        flawed(Flaw::NoVersion),
        Fault::None,
        &[],
        "BundleInfoUnreadable",
    )
    .await;
}

#[tokio::test]
async fn an_http_error_fails_at_once() {
    let (fx, run) = fails_with(flawed(Flaw::None), Fault::Status(404), &[], "HttpError").await;
    assert!(run.message.contains("404"), "{}", run.message);
    assert_eq!(
        fx.server.requests(&fx.bundle_path),
        1,
        "a 404 is not retried"
    );
}

#[tokio::test]
async fn a_connection_cut_on_every_attempt_gives_up() {
    let spec = flawed(Flaw::None);
    let fx = Fixture::new(spec, Fault::None).await;
    let after = fx.archive_len() / 10;
    fx.server.publish(
        &fx.bundle_path,
        fx.bundle.archive.clone(),
        Fault::Cut { after, times: 99 },
    );
    let run = fx.run(&[("DOWNLOAD_ATTEMPTS", "3")]).await;
    fx.assert_failed(&run, "DownloadInterrupted").await;
    assert_eq!(fx.server.requests(&fx.bundle_path), 3);
    // The partial download stays for the next run to resume.
    let kept = std::fs::metadata(fx.scratch().join(bundle_prep::ARCHIVE_FILE))
        .unwrap()
        .len();
    assert!(kept <= 3 * after, "kept {kept} bytes");
}

#[tokio::test]
async fn a_bundle_over_the_size_limit_is_refused() {
    let (_, run) = fails_with(
        flawed(Flaw::None),
        Fault::None,
        &[("MAX_BUNDLE_BYTES", "1Ki")],
        "TooLarge",
    )
    .await;
    assert!(run.message.contains("MAX_BUNDLE_BYTES"), "{}", run.message);
}

#[tokio::test]
async fn a_failed_publication_is_retried_from_the_extraction() {
    let fx = Fixture::new(BundleSpec::new(VERSION), Fault::None).await;
    let missing = support::unique("no-such-namespace");
    let run = fx.run(&[("NAMESPACE", missing.as_str())]).await;
    assert_eq!(run.code, Some(22), "{}", run.stderr);
    assert!(
        run.message.starts_with("PublishFailed: "),
        "{}",
        run.message
    );
    assert!(fx.secret().await.is_none() && fx.config_map().await.is_none());

    let again = fx.run(&[]).await;
    fx.assert_prepared(&again).await;
    assert!(
        again
            .stderr
            .contains("reusing the extraction of an earlier run"),
        "{}",
        again.stderr
    );
    assert_eq!(fx.server.requests(&fx.bundle_path), 1, "downloaded once");
}

#[tokio::test]
async fn missing_settings_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("termination-log");
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_guestcluster"))
        .arg("bundle-prep")
        .env_clear()
        .env("TERMINATION_MESSAGE_PATH", &log)
        .env("BUNDLE_URL", "http://127.0.0.1:1/x.crcbundle")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(10));
    let message = std::fs::read_to_string(&log).unwrap();
    assert!(
        message.starts_with("InvalidConfig: missing environment variables: SHA256_URL"),
        "{message}"
    );
}
