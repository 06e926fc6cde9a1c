//! The secrets and keys the profile's artefacts are built from, checked once, and the wrapper
//! for artefacts that carry them: neither prints its contents through `Debug` or `Display`, so
//! a stray `{:?}` in a log line cannot leak the pull secret.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};

/// Why an input is refused. No variant carries the input's contents.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum Error {
    #[error("the pull secret is not a JSON object")]
    PullSecretNotJson,
    #[error("the pull secret has no registry under \"auths\"")]
    PullSecretNoAuths,
    #[error("the SSH public key is not one line of the form \"<type> <base64> [comment]\"")]
    SshKeyMalformed,
    #[error("the SSH public key type {0:?} is not supported")]
    SshKeyType(String),
}

/// A registry pull secret (`.dockerconfigjson`): a JSON object whose `auths` names at least one
/// registry. Kept as text, exactly as given, because the installer wants it verbatim.
#[derive(Clone)]
pub struct PullSecret(SecretString);

impl PullSecret {
    pub fn parse(text: &str) -> Result<Self, Error> {
        let value: serde_json::Value =
            serde_json::from_str(text).map_err(|_| Error::PullSecretNotJson)?;
        let auths = value
            .as_object()
            .ok_or(Error::PullSecretNotJson)?
            .get("auths")
            .and_then(serde_json::Value::as_object)
            .ok_or(Error::PullSecretNoAuths)?;
        if auths.is_empty() {
            return Err(Error::PullSecretNoAuths);
        }
        Ok(Self(SecretString::from(text.trim())))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for PullSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PullSecret([redacted])")
    }
}

/// Key types `openshift-install` and RHCOS's sshd accept.
const SSH_KEY_TYPES: [&str; 5] = [
    "ecdsa-sha2-nistp256",
    "ecdsa-sha2-nistp384",
    "ecdsa-sha2-nistp521",
    "ssh-ed25519",
    "ssh-rsa",
];

/// One OpenSSH public key line (`<type> <base64> [comment]`), trimmed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshPublicKey(String);

impl SshPublicKey {
    pub fn parse(text: &str) -> Result<Self, Error> {
        let line = text.trim();
        if line.is_empty() || line.contains('\n') {
            return Err(Error::SshKeyMalformed);
        }
        let mut fields = line.split_whitespace();
        let (Some(kind), Some(body)) = (fields.next(), fields.next()) else {
            return Err(Error::SshKeyMalformed);
        };
        if !SSH_KEY_TYPES.contains(&kind) {
            return Err(Error::SshKeyType(kind.to_owned()));
        }
        let base64 = |c: char| c.is_ascii_alphanumeric() || "+/=".contains(c);
        if !body.chars().all(base64) {
            return Err(Error::SshKeyMalformed);
        }
        Ok(Self(line.to_owned()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// A rendered artefact that carries secrets (the install-config, the live Ignition): its text
/// is reached only through [`Sensitive::expose`].
pub struct Sensitive(SecretString);

impl Sensitive {
    pub(super) fn new(text: String) -> Self {
        Self(SecretString::from(text))
    }

    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sensitive([redacted, {} bytes])", self.expose().len())
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A placeholder pull secret, as the golden files show it.
    pub const PULL_SECRET: &str =
        r#"{"auths":{"quay.io":{"auth":"PLACEHOLDER","email":"builder@example.com"}}}"#;
    /// A placeholder build key.
    pub const SSH_KEY: &str = "ecdsa-sha2-nistp521 AAAAE2VjZHNhLXNoYTItbmlzdHA1MjEAAAAIbmlzdHA1MjEAAACFBAPLACEHOLDER core";

    #[test]
    fn pull_secret_is_checked_and_never_printed() {
        let secret = PullSecret::parse(&format!("{PULL_SECRET}\n")).unwrap();
        assert_eq!(secret.expose(), PULL_SECRET);
        assert!(!format!("{secret:?}").contains("PLACEHOLDER"));
        assert_eq!(
            PullSecret::parse("not json PLACEHOLDER").unwrap_err(),
            Error::PullSecretNotJson
        );
        assert_eq!(
            PullSecret::parse("[1]").unwrap_err(),
            Error::PullSecretNotJson
        );
        for no_auths in [r#"{}"#, r#"{"auths":{}}"#, r#"{"auths":[]}"#] {
            assert_eq!(
                PullSecret::parse(no_auths).unwrap_err(),
                Error::PullSecretNoAuths,
                "{no_auths}"
            );
        }
        let err = PullSecret::parse(r#"{"auths": PLACEHOLDER"#).unwrap_err();
        assert!(!err.to_string().contains("PLACEHOLDER"));
    }

    #[test]
    fn ssh_key_is_one_openssh_line() {
        assert_eq!(
            SshPublicKey::parse(&format!(" {SSH_KEY}\n"))
                .unwrap()
                .as_str(),
            SSH_KEY
        );
        assert_eq!(
            SshPublicKey::parse("ssh-ed25519 AAAA").unwrap().as_str(),
            "ssh-ed25519 AAAA"
        );
        assert_eq!(SshPublicKey::parse("").unwrap_err(), Error::SshKeyMalformed);
        assert_eq!(
            SshPublicKey::parse("ssh-ed25519").unwrap_err(),
            Error::SshKeyMalformed
        );
        assert_eq!(
            SshPublicKey::parse("ssh-ed25519 AA\nssh-ed25519 BB").unwrap_err(),
            Error::SshKeyMalformed
        );
        assert_eq!(
            SshPublicKey::parse("ssh-ed25519 AA$A").unwrap_err(),
            Error::SshKeyMalformed
        );
        assert_eq!(
            SshPublicKey::parse("ssh-dss AAAA").unwrap_err(),
            Error::SshKeyType("ssh-dss".into())
        );
    }

    #[test]
    fn sensitive_text_is_not_printed() {
        let text = Sensitive::new("pullSecret: PLACEHOLDER".into());
        assert_eq!(text.expose(), "pullSecret: PLACEHOLDER");
        assert_eq!(format!("{text:?}"), "Sensitive([redacted, 23 bytes])");
    }
}
