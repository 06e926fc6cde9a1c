use super::config::parse_bytes;
use super::*;
use crate::contract::bundle_prep::REASONS;
use std::collections::HashMap;

fn env(extra: &[(&str, &str)]) -> HashMap<String, String> {
    let mut env: HashMap<String, String> = [
        (
            "BUNDLE_URL",
            "https://mirror.example/crc/4.16.0/crc_libvirt_4.16.0_amd64.crcbundle",
        ),
        (
            "SHA256_URL",
            "https://mirror.example/crc/4.16.0/sha256sum.txt",
        ),
        ("NAMESPACE", "guestcluster-system"),
        ("BUNDLE_NAME", "crc-4.16.0-amd64"),
        ("BUNDLE_UID", "0b7c-uid"),
        ("SSH_SECRET_NAME", "crc-4.16.0-amd64-ssh-key"),
        ("METADATA_CONFIGMAP_NAME", "crc-4.16.0-amd64-metadata"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    for (k, v) in extra {
        env.insert(k.to_string(), v.to_string());
    }
    env
}

#[test]
fn the_stage_comes_from_prep_stage_and_defaults_to_both() {
    let stage = |extra: &[(&str, &str)]| {
        let env = env(extra);
        Config::from_lookup(|k| env.get(k).cloned()).map(|c| c.stage)
    };
    assert_eq!(stage(&[]).unwrap(), Stage::All);
    assert_eq!(stage(&[(ENV_STAGE, "fetch")]).unwrap(), Stage::Fetch);
    assert_eq!(stage(&[(ENV_STAGE, "publish")]).unwrap(), Stage::Publish);
    let err = stage(&[(ENV_STAGE, "both")]).unwrap_err();
    assert!(err.to_string().contains("PREP_STAGE"), "{err}");
}

#[test]
fn config_has_upstream_defaults() {
    let env = env(&[]);
    let config = Config::from_lookup(|k| env.get(k).cloned()).unwrap();
    assert_eq!(config.golden_dir, Path::new("/golden"));
    assert_eq!(config.scratch_dir, Path::new("/work"));
    assert_eq!(config.limits.bundle, 64 << 30);
    assert_eq!(config.http, HttpOptions::default());
}

#[test]
fn config_reads_limits_and_names_what_is_missing_or_wrong() {
    let env1 = env(&[
        ("MAX_BUNDLE_BYTES", "2Gi"),
        ("DOWNLOAD_ATTEMPTS", "3"),
        ("GOLDEN_DIR", "/g"),
    ]);
    let config = Config::from_lookup(|k| env1.get(k).cloned()).unwrap();
    assert_eq!(config.limits.bundle, 2 << 30);
    assert_eq!(config.http.attempts, 3);
    assert_eq!(config.golden_dir, Path::new("/g"));

    let err =
        Config::from_lookup(|k| (k == "BUNDLE_URL").then(|| "http://x/y".into())).unwrap_err();
    assert_eq!(err.reason(), "InvalidConfig");
    assert!(err.to_string().contains("SHA256_URL, NAMESPACE"), "{err}");

    let env2 = env(&[("MAX_BUNDLE_BYTES", "lots")]);
    let err = Config::from_lookup(|k| env2.get(k).cloned()).unwrap_err();
    assert!(err.to_string().contains("MAX_BUNDLE_BYTES"), "{err}");
}

#[tokio::test]
async fn plain_http_is_refused_without_the_opt_in_before_any_request() {
    let dir = tempfile::tempdir().unwrap();
    let golden = dir.path().join("g").display().to_string();
    let scratch = dir.path().join("s").display().to_string();
    let env = env(&[
        // Nothing listens there: a request would fail differently.
        (
            "BUNDLE_URL",
            "http://127.0.0.1:9/crc_libvirt_4.16.0_amd64.crcbundle?t=secret",
        ),
        ("GOLDEN_DIR", &golden),
        ("SCRATCH_DIR", &scratch),
    ]);
    let config = Config::from_lookup(|k| env.get(k).cloned()).unwrap();
    assert!(!config.allow_http);
    let err = run(&config).await.err().unwrap();
    let text = err.to_string();
    assert!(text.contains("set spec.allowHTTP: true"), "{text}");
    assert!(!text.contains("secret"), "{text}");
}

#[test]
fn byte_counts_take_binary_suffixes() {
    assert_eq!(parse_bytes("123"), Some(123));
    assert_eq!(parse_bytes("64Gi"), Some(64 << 30));
    assert_eq!(parse_bytes("1Ki"), Some(1024));
    assert_eq!(parse_bytes("1G"), None);
    assert_eq!(parse_bytes("99999999Ti"), None);
}

#[test]
fn names_come_from_the_url_path() {
    let name =
        archive_file_name("https://m.example/a/crc_libvirt_4.16.0_amd64.crcbundle?x=1").unwrap();
    assert_eq!(name, "crc_libvirt_4.16.0_amd64.crcbundle");
    assert_eq!(archive_dir_name(&name), "crc_libvirt_4.16.0_amd64");
    assert_eq!(archive_dir_name("bundle.tar"), "bundle.tar");
    assert_eq!(
        archive_file_name("https://m.example/dir/")
            .unwrap_err()
            .reason(),
        "InvalidConfig"
    );
}

#[test]
fn the_version_must_be_present() {
    let ok = br#"{"clusterInfo": {"openshiftVersion": "4.16.0"}}"#;
    assert_eq!(ocp_version(ok).unwrap(), "4.16.0");
    for bad in [
        &br#"{"clusterInfo": {}}"#[..],
        br#"{"clusterInfo": {"openshiftVersion": ""}}"#,
        br#"{"clusterInfo": {"openshiftVersion": null}}"#,
        br#"{"clusterInfo": {"openshiftVersion": "null"}}"#,
        br#"{"clusterInfo": {"openshiftVersion": 4}}"#,
        br#"{}"#,
        b"not json",
    ] {
        assert_eq!(
            ocp_version(bad).unwrap_err().reason(),
            "BundleInfoUnreadable"
        );
    }
}

#[test]
fn keys_are_checked_but_never_shown() {
    let key =
        "-----BEGIN OPENSSH PRIVATE KEY-----\nsecretmaterial\n-----END OPENSSH PRIVATE KEY-----\n";
    let parsed = private_key(key.as_bytes().to_vec()).unwrap();
    assert!(!format!("{parsed:?}").contains("secretmaterial"));
    for bad in [&b""[..], b"   \n", b"ssh-ed25519 AAAA public", b"\xff\xfe"] {
        let err = private_key(bad.to_vec()).unwrap_err();
        assert_eq!(err.reason(), "KeyUnreadable");
    }
}

#[test]
fn every_error_has_a_listed_reason_and_its_own_exit_code() {
    let errors = [
        PrepError::InvalidConfig(String::new()),
        PrepError::Http {
            url: String::new(),
            message: String::new(),
        },
        PrepError::DownloadInterrupted {
            url: String::new(),
            attempts: 1,
            last: String::new(),
        },
        PrepError::ChecksumMissing {
            file: String::new(),
            checksums_url: String::new(),
            detail: String::new(),
        },
        PrepError::ChecksumMismatch {
            file: String::new(),
            expected: String::new(),
            actual: String::new(),
        },
        PrepError::TooLarge {
            what: String::new(),
            limit: 0,
            setting: "",
        },
        PrepError::ArchiveInvalid(String::new()),
        PrepError::MissingMember {
            member: String::new(),
        },
        PrepError::UnsafeMember {
            member: String::new(),
            why: String::new(),
        },
        PrepError::BundleInfoUnreadable(String::new()),
        PrepError::KeyUnreadable(String::new()),
        PrepError::ConvertFailed(String::new()),
        PrepError::PublishFailed(String::new()),
        PrepError::Storage {
            what: String::new(),
            source: std::io::Error::other("x"),
        },
    ];
    let reasons: Vec<&str> = errors.iter().map(PrepError::reason).collect();
    assert_eq!(reasons, REASONS);
    let codes: Vec<u8> = errors.iter().map(PrepError::exit_code).collect();
    assert_eq!(codes, (10..10 + REASONS.len() as u8).collect::<Vec<_>>());
    let mismatch = PrepError::ChecksumMismatch {
        file: "f".into(),
        expected: "aa".into(),
        actual: "bb".into(),
    };
    assert_eq!(
        mismatch.termination_message(),
        "ChecksumMismatch: f has SHA-256 bb, but the checksum file lists aa"
    );
}
