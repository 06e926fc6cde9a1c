//! `oc adm release` and `openshift-install`, found on `PATH` (`oc`) or where `oc` extracted it
//! (`openshift-install`): what a release image resolves to and which RHCOS live ISO it installs
//! with. The parsers are pure and tested on the tools' output shapes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::run::{self, RunError};

/// The program name looked up on `PATH`.
pub const OC: &str = "oc";
/// The installer binary's name where `oc adm release extract` writes it.
pub const OPENSHIFT_INSTALL: &str = "openshift-install";

/// Pulling a release's metadata or its installer image can take minutes on a slow registry.
const OC_TIMEOUT: Duration = Duration::from_secs(20 * 60);
/// `openshift-install version` and `coreos print-stream-json` read embedded data only.
const INSTALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Why a release question has no answer.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    #[error(transparent)]
    Run(#[from] RunError),
    #[error("{what} printed unexpected output: {detail}")]
    BadOutput { what: &'static str, detail: String },
}

/// What `oc adm release info -o json` says about a release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseInfo {
    /// `sha256:…`.
    pub digest: String,
    pub version: String,
}

#[derive(Deserialize)]
struct InfoJson {
    digest: String,
    metadata: InfoMetadata,
}

#[derive(Deserialize)]
struct InfoMetadata {
    version: String,
}

pub fn parse_release_info(json: &str) -> Result<ReleaseInfo, ReleaseError> {
    let info: InfoJson = serde_json::from_str(json).map_err(|e| ReleaseError::BadOutput {
        what: "oc adm release info",
        detail: e.to_string(),
    })?;
    if !is_digest(&info.digest) || info.metadata.version.is_empty() {
        return Err(ReleaseError::BadOutput {
            what: "oc adm release info",
            detail: format!(
                "digest {:?} / version {:?}",
                info.digest, info.metadata.version
            ),
        });
    }
    Ok(ReleaseInfo {
        digest: info.digest,
        version: info.metadata.version,
    })
}

fn is_digest(text: &str) -> bool {
    text.strip_prefix("sha256:")
        .is_some_and(|hex| hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The repository of a pull spec: without its tag or digest (`quay.io/a/b:4.22` → `quay.io/a/b`;
/// a registry port is kept).
pub fn repository(pullspec: &str) -> &str {
    let without_digest = pullspec.split('@').next().unwrap_or(pullspec);
    match without_digest.rfind(':') {
        Some(colon) if !without_digest[colon..].contains('/') => &without_digest[..colon],
        _ => without_digest,
    }
}

/// The release repositories the operator builds from (`--build-release-repositories`). A
/// release is code: the installer Job runs the `openshift-install` extracted from it, with the
/// pull secret mounted. An entry is a repository (`quay.io/openshift-release-dev/ocp-release`),
/// or a prefix ending in `/` for every repository under it, or `*` for any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReleaseRepositories(Vec<String>);

/// The OpenShift release repositories: GA and candidate releases, and nightlies.
pub const OPENSHIFT_RELEASE_REPOSITORIES: &str =
    "quay.io/openshift-release-dev/ocp-release,quay.io/openshift-release-dev/ocp-release-nightly";

impl ReleaseRepositories {
    /// From a comma-separated list; blank entries are ignored.
    pub fn parse(list: &str) -> Self {
        Self(
            list.split(',')
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// Whether the repository of `pullspec` is one of these.
    pub fn allows(&self, pullspec: &str) -> bool {
        let repository = repository(pullspec);
        self.0.iter().any(|entry| {
            entry == "*"
                || entry == repository
                || (entry.ends_with('/') && repository.starts_with(entry.as_str()))
        })
    }

    /// The list as configured, for messages.
    pub fn list(&self) -> String {
        self.0.join(", ")
    }
}

impl Default for ReleaseRepositories {
    fn default() -> Self {
        Self::parse(OPENSHIFT_RELEASE_REPOSITORIES)
    }
}

/// The pull spec that names exactly `digest`: every later step uses it, so a tag moved
/// meanwhile changes nothing.
pub fn pinned(pullspec: &str, digest: &str) -> String {
    format!("{}@{digest}", repository(pullspec))
}

/// `oc adm release info -a <auth> -o json <image>`.
pub async fn info(image: &str, auth: &Path) -> Result<ReleaseInfo, ReleaseError> {
    let auth = auth.display().to_string();
    let out = run::output(
        Path::new(OC),
        // `--`: the image is an operand, whatever it starts with.
        &[
            "adm", "release", "info", "-a", &auth, "-o", "json", "--", image,
        ],
        OC_TIMEOUT,
    )
    .await?;
    parse_release_info(&out)
}

/// `oc adm release extract --command=openshift-install --to=<dir> -a <auth> <image>`; returns
/// the installer's path.
pub async fn extract_installer(
    image: &str,
    auth: &Path,
    dir: &Path,
) -> Result<PathBuf, ReleaseError> {
    let (auth, to) = (
        auth.display().to_string(),
        format!("--to={}", dir.display()),
    );
    run::output(
        Path::new(OC),
        &[
            "adm",
            "release",
            "extract",
            "--command=openshift-install",
            &to,
            "-a",
            &auth,
            "--",
            image,
        ],
        OC_TIMEOUT,
    )
    .await?;
    Ok(dir.join(OPENSHIFT_INSTALL))
}

/// What `openshift-install version` prints: its version and the release it installs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InstallerVersion {
    pub version: String,
    /// `<repository>@sha256:…`.
    pub release_image: String,
}

pub fn parse_installer_version(text: &str) -> Result<InstallerVersion, ReleaseError> {
    let field = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .map(|v| v.trim().to_owned())
            .filter(|v| !v.is_empty())
    };
    match (field("openshift-install "), field("release image ")) {
        (Some(version), Some(release_image)) => Ok(InstallerVersion {
            version,
            release_image,
        }),
        _ => Err(ReleaseError::BadOutput {
            what: "openshift-install version",
            detail: text.lines().next().unwrap_or_default().to_owned(),
        }),
    }
}

pub async fn installer_version(installer: &Path) -> Result<InstallerVersion, ReleaseError> {
    let out = run::output(installer, &["version"], INSTALL_TIMEOUT).await?;
    parse_installer_version(&out)
}

/// The RHCOS live ISO of one architecture, from the installer's stream metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LiveIso {
    pub location: String,
    pub sha256: String,
    /// The RHCOS release.
    pub release: String,
}

/// The stream JSON's architecture name for a Kubernetes one.
pub fn stream_arch(arch: &str) -> &str {
    match arch {
        "amd64" => "x86_64",
        "arm64" => "aarch64",
        other => other,
    }
}

pub fn parse_stream(json: &str, arch: &str) -> Result<LiveIso, ReleaseError> {
    let bad = |detail: String| ReleaseError::BadOutput {
        what: "openshift-install coreos print-stream-json",
        detail,
    };
    let value: serde_json::Value = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    let arch = stream_arch(arch);
    let metal = &value["architectures"][arch]["artifacts"]["metal"];
    let disk = &metal["formats"]["iso"]["disk"];
    let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_owned);
    match (
        text(&disk["location"]),
        text(&disk["sha256"]),
        text(&metal["release"]),
    ) {
        (Some(location), Some(sha256), Some(release))
            if sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok(LiveIso {
                location,
                sha256: sha256.to_ascii_lowercase(),
                release,
            })
        }
        _ => Err(bad(format!("no metal ISO with a SHA-256 for {arch}"))),
    }
}

pub async fn live_iso(installer: &Path, arch: &str) -> Result<LiveIso, ReleaseError> {
    let out = run::output(installer, &["coreos", "print-stream-json"], INSTALL_TIMEOUT).await?;
    parse_stream(&out, arch)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn release_info_gives_digest_and_version() {
        let json = format!(
            r#"{{"image":"quay.io/x/r:4.22","digest":"{DIGEST}","metadata":{{"kind":"cincinnati-metadata-v0","version":"4.22.3"}}}}"#
        );
        assert_eq!(
            parse_release_info(&json).unwrap(),
            ReleaseInfo {
                digest: DIGEST.into(),
                version: "4.22.3".into()
            }
        );
        assert!(
            parse_release_info(r#"{"digest":"sha256:12","metadata":{"version":"4"}}"#).is_err()
        );
        assert!(parse_release_info("not json").is_err());
    }

    #[test]
    fn a_pull_spec_is_pinned_to_its_digest() {
        assert_eq!(
            pinned("quay.io/a/b:4.22", DIGEST),
            format!("quay.io/a/b@{DIGEST}")
        );
        assert_eq!(
            pinned("registry:5000/a/b:tag", DIGEST),
            format!("registry:5000/a/b@{DIGEST}")
        );
        assert_eq!(
            pinned("registry:5000/a/b", DIGEST),
            format!("registry:5000/a/b@{DIGEST}")
        );
        assert_eq!(
            pinned(&format!("quay.io/a/b@{DIGEST}"), DIGEST),
            format!("quay.io/a/b@{DIGEST}")
        );
    }

    #[test]
    fn installer_version_names_its_release() {
        let text = format!(
            "openshift-install 4.22.3\nbuilt from commit 00\nrelease image quay.io/a/b@{DIGEST}\nrelease architecture amd64\n"
        );
        let version = parse_installer_version(&text).unwrap();
        assert_eq!(version.version, "4.22.3");
        assert_eq!(version.release_image, format!("quay.io/a/b@{DIGEST}"));
        assert!(parse_installer_version("something else\n").is_err());
    }

    #[test]
    fn stream_json_gives_the_iso_of_the_architecture() {
        let sha = "ab".repeat(32);
        let json = format!(
            r#"{{"architectures":{{"x86_64":{{"artifacts":{{"metal":{{"release":"9.6.1","formats":{{"iso":{{"disk":{{"location":"https://x/rhcos.iso","sha256":"{sha}"}}}}}}}}}}}}}}}}"#
        );
        let iso = parse_stream(&json, "amd64").unwrap();
        assert_eq!(iso.location, "https://x/rhcos.iso");
        assert_eq!(iso.sha256, sha);
        assert_eq!(iso.release, "9.6.1");
        assert!(parse_stream(&json, "arm64").is_err(), "no aarch64 entry");
    }

    #[test]
    fn release_repositories_allow_exact_repositories_prefixes_and_star() {
        let default = ReleaseRepositories::default();
        assert!(default.allows("quay.io/openshift-release-dev/ocp-release:4.22.3-x86_64"));
        assert!(default.allows(&format!(
            "quay.io/openshift-release-dev/ocp-release-nightly@{DIGEST}"
        )));
        assert!(!default.allows("quay.io/openshift-release-dev/ocp-release-evil:4.22"));
        assert!(!default.allows("quay.io/example/ocp-release:4.22"));
        let mirror = ReleaseRepositories::parse(" mirror.example:5000/ocp/ , ,quay.io/a/b");
        assert!(mirror.allows("mirror.example:5000/ocp/release:4.22"));
        assert!(!mirror.allows("mirror.example:5000/other/release:4.22"));
        assert!(mirror.allows("quay.io/a/b:1"));
        assert!(ReleaseRepositories::parse("*").allows("anything/at/all:1"));
        assert!(!ReleaseRepositories::parse("").allows("quay.io/a/b:1"));
    }
}
