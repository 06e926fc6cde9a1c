//! What the simulated `openshift-install` makes, defined once for both of its implementations:
//! the POSIX shell fake that Job pods run (`tools/openshift-install.sh`, on the host's clock) and
//! the Rust-native one a guest runs when it executes the extracted launcher ([`native`], on the
//! guest's clock).
//!
//! Shared, so the two cannot drift:
//! - [`INSTALLER_CERTS`], the certificates the installer mints, is written for the shell fake as
//!   `<root>/tools/lib/installer-certs` ([`certs_table`]);
//! - the certificate record format ([`CERT_MAGIC`], [`render_record`], [`parse_record`]) and the
//!   launcher marker ([`LAUNCHER_MARKER`]) are substituted into the scripts when they are installed;
//! - `native`'s unit tests run both implementations on the same inputs and compare the Ignition.
//!
//! A certificate here is its metadata (the simulation models no real X.509 for these): a text
//! record whose `notBefore` is the minting process's clock, as the real installer stamps its
//! certificates with the current time and no margin.

pub mod native;

use crate::guest::state::Certificate;

/// First line of a simulated certificate record.
pub const CERT_MAGIC: &str = "GUESTCLUSTER-SIM-CERT v1";
/// The line `oc adm release extract` writes into the launcher it extracts.
pub const LAUNCHER_MARKER: &str = "# openshift-install extracted by the simulation's fake oc";
/// Where the Ignition carries the installer's certificates (`<dir>/tls/<name>.crt` in the
/// install directory).
pub const IGNITION_TLS_DIR: &str = "/opt/openshift/tls";
/// The Rust-native installer's real key material for the installed cluster's API (PEM, JSON of
/// `openshift::GuestPki`), which the shell fake cannot make.
pub const IGNITION_GUEST_PKI: &str = "/opt/openshift/tls/sim-guest-pki.json";
/// The file carrying the release version in the Ignition.
pub const IGNITION_RELEASE_VERSION: &str = "/opt/openshift/release-version";
/// The file carrying the release image in the Ignition.
pub const IGNITION_RELEASE_IMAGE: &str = "/opt/openshift/release-image";
/// Simulation-specific: where the Ignition carries `OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP`, which
/// the real installer renders into the bootstrap kubelet's `--node-ip` (openshift/installer
/// `pkg/asset/ignition/bootstrap/common.go`; an address that does not parse is skipped).
pub const IGNITION_BOOTSTRAP_NODE_IP: &str = "/opt/openshift/bootstrap-node-ip";
/// The variable the installer reads it from.
pub const BOOTSTRAP_NODE_IP_ENV: &str = "OPENSHIFT_INSTALL_BOOTSTRAP_NODE_IP";
/// The file carrying `bootstrapInPlace.installationDisk` in the Ignition.
pub const IGNITION_INSTALLATION_DISK: &str = "/opt/openshift/installation-disk";

const HOUR: i64 = 3600;
const DAY: i64 = 24 * HOUR;
const TEN_YEARS: i64 = 3650 * DAY;

/// Which command mints a certificate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// `create manifests` (the cluster's root CA); `create single-node-ignition-config` mints it
    /// too when no manifests were created first.
    Manifests,
    /// `create single-node-ignition-config`.
    Ignition,
}

impl Stage {
    fn name(self) -> &'static str {
        match self {
            Stage::Manifests => "manifests",
            Stage::Ignition => "ignition",
        }
    }
}

/// One certificate the installer mints.
#[derive(Clone, Copy, Debug)]
pub struct InstallerCert {
    /// File name without `.crt` under `<dir>/tls/` and [`IGNITION_TLS_DIR`].
    pub name: &'static str,
    pub subject: &'static str,
    pub issuer: &'static str,
    /// Seconds from `notBefore` to `notAfter`.
    pub lifetime: i64,
    pub stage: Stage,
}

/// The installer's first CSR signer: it issues the kubelet's first certificates and stays the
/// cluster's CSR signer until the kube-controller-manager operator replaces it.
pub const KUBELET_SIGNER: &str = "kubelet-signer";
/// The client certificate of the kubelet's bootstrap kubeconfig.
pub const KUBELET_BOOTSTRAP_CLIENT: &str = "kubelet-client";

/// The certificates the simulated installer mints, with real-life lifetimes: the signers 10
/// years, the bootstrap and day-long ones 24 hours.
pub const INSTALLER_CERTS: &[InstallerCert] = &[
    cert(
        "root-ca",
        "CN=root-ca, OU=openshift",
        "CN=root-ca, OU=openshift",
        TEN_YEARS,
        Stage::Manifests,
    ),
    cert(
        "admin-kubeconfig-signer",
        "CN=admin-kubeconfig-signer, OU=openshift",
        "CN=admin-kubeconfig-signer, OU=openshift",
        TEN_YEARS,
        Stage::Ignition,
    ),
    cert(
        "kube-apiserver-lb-signer",
        "CN=kube-apiserver-lb-signer, OU=openshift",
        "CN=kube-apiserver-lb-signer, OU=openshift",
        TEN_YEARS,
        Stage::Ignition,
    ),
    cert(
        "kube-apiserver-lb-server",
        "CN=api.crc.testing",
        "CN=kube-apiserver-lb-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
    cert(
        "kube-apiserver-internal-lb-server",
        "CN=api-int.crc.testing",
        "CN=kube-apiserver-lb-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
    cert(
        "kube-apiserver-localhost-signer",
        "CN=kube-apiserver-localhost-signer, OU=openshift",
        "CN=kube-apiserver-localhost-signer, OU=openshift",
        TEN_YEARS,
        Stage::Ignition,
    ),
    cert(
        "kube-apiserver-localhost-server",
        "CN=127.0.0.1",
        "CN=kube-apiserver-localhost-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
    cert(
        "aggregator-signer",
        "CN=aggregator-signer, OU=openshift",
        "CN=aggregator-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
    cert(
        "aggregator-client",
        "CN=system:openshift-aggregator",
        "CN=aggregator-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
    cert(
        "kubelet-bootstrap-kubeconfig-signer",
        "CN=kubelet-bootstrap-kubeconfig-signer, OU=openshift",
        "CN=kubelet-bootstrap-kubeconfig-signer, OU=openshift",
        TEN_YEARS,
        Stage::Ignition,
    ),
    cert(
        KUBELET_BOOTSTRAP_CLIENT,
        "O=system:serviceaccounts:openshift-machine-config-operator, CN=system:serviceaccount:openshift-machine-config-operator:node-bootstrapper",
        "CN=kubelet-bootstrap-kubeconfig-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
    cert(
        KUBELET_SIGNER,
        "CN=kubelet-signer, OU=openshift",
        "CN=kubelet-signer, OU=openshift",
        DAY,
        Stage::Ignition,
    ),
];

const fn cert(
    name: &'static str,
    subject: &'static str,
    issuer: &'static str,
    lifetime: i64,
    stage: Stage,
) -> InstallerCert {
    InstallerCert {
        name,
        subject,
        issuer,
        lifetime,
        stage,
    }
}

/// The table the shell fake reads (`lib/installer-certs`): `name|subject|issuer|lifetime|stage`.
pub fn certs_table() -> String {
    INSTALLER_CERTS
        .iter()
        .map(|c| {
            format!(
                "{}|{}|{}|{}|{}\n",
                c.name,
                c.subject,
                c.issuer,
                c.lifetime,
                c.stage.name()
            )
        })
        .collect()
}

/// A certificate record, as both installers write it.
pub fn render_record(cert: &Certificate) -> String {
    format!(
        "{CERT_MAGIC}\nsubject: {}\nissuer: {}\nnotBefore: {}\nnotAfter: {}\n",
        cert.subject, cert.issuer, cert.not_before, cert.not_after
    )
}

/// The certificate a record describes; `None` when `bytes` is not a record.
pub fn parse_record(bytes: &[u8]) -> Option<Certificate> {
    let text = std::str::from_utf8(bytes).ok()?;
    let mut lines = text.lines();
    if lines.next()? != CERT_MAGIC {
        return None;
    }
    let (mut subject, mut issuer, mut not_before, mut not_after) = (None, None, None, None);
    for line in lines {
        let (key, value) = line.split_once(": ")?;
        match key {
            "subject" => subject = Some(value.to_owned()),
            "issuer" => issuer = Some(value.to_owned()),
            "notBefore" => not_before = value.parse().ok(),
            "notAfter" => not_after = value.parse().ok(),
            _ => {}
        }
    }
    Some(Certificate {
        not_before: not_before?,
        not_after: not_after?,
        issuer: issuer?,
        subject: subject?,
    })
}

/// What the extracted launcher says about its release.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Launcher {
    pub release_image: String,
    pub release_version: String,
    pub release_digest: String,
}

/// Reads a launcher written by the fake `oc adm release extract`; `None` for any other file.
pub fn parse_launcher(bytes: &[u8]) -> Option<Launcher> {
    let text = std::str::from_utf8(bytes).ok()?;
    if !text.lines().any(|l| l == LAUNCHER_MARKER) {
        return None;
    }
    let value = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .and_then(shell_unquote)
    };
    Some(Launcher {
        release_image: value("SIM_INSTALL_RELEASE_IMAGE")?,
        release_version: value("SIM_INSTALL_RELEASE_VERSION")?,
        release_digest: value("SIM_INSTALL_RELEASE_DIGEST")?,
    })
}

/// Undoes the tools' `shell_quote`: `'…'` pieces, with `\'` between them.
fn shell_unquote(word: &str) -> Option<String> {
    let mut out = String::new();
    let mut rest = word;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('\'') {
            let end = after.find('\'')?;
            out.push_str(&after[..end]);
            rest = &after[end + 1..];
        } else if let Some(after) = rest.strip_prefix("\\'") {
            out.push('\'');
            rest = after;
        } else {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip() {
        let cert = Certificate {
            not_before: 1_700_000_000,
            not_after: 1_700_086_400,
            issuer: "CN=kubelet-signer, OU=openshift".into(),
            subject: "CN=kubelet-signer, OU=openshift".into(),
        };
        assert_eq!(
            parse_record(render_record(&cert).as_bytes()),
            Some(cert.clone())
        );
        assert_eq!(parse_record(b"-----BEGIN CERTIFICATE-----\n"), None);
        let truncated = render_record(&cert).replace("notAfter: 1700086400\n", "");
        assert_eq!(parse_record(truncated.as_bytes()), None);
    }

    #[test]
    fn launchers_are_recognised_and_unquoted() {
        let text = format!(
            "#!/bin/sh\n{LAUNCHER_MARKER}\nSIM_INSTALL_RELEASE_IMAGE='quay.io/x/it'\\''s:4.22.1-x86_64'\nSIM_INSTALL_RELEASE_VERSION='4.22.1'\nSIM_INSTALL_RELEASE_DIGEST='sha256:ab'\nexec '/t/libexec/openshift-install' \"$@\"\n"
        );
        let launcher = parse_launcher(text.as_bytes()).expect("a launcher");
        assert_eq!(launcher.release_image, "quay.io/x/it's:4.22.1-x86_64");
        assert_eq!(launcher.release_version, "4.22.1");
        assert_eq!(launcher.release_digest, "sha256:ab");
        assert_eq!(parse_launcher(b"#!/bin/sh\nexec true\n"), None);
    }

    #[test]
    fn the_table_has_one_line_per_certificate() {
        let table = certs_table();
        assert_eq!(table.lines().count(), INSTALLER_CERTS.len());
        assert!(table.contains("root-ca|CN=root-ca, OU=openshift|"));
        assert!(
            INSTALLER_CERTS
                .iter()
                .all(|c| !c.subject.contains('|') && !c.issuer.contains('|'))
        );
    }
}
