//! SSH keys for guests, through russh's bundled `ssh-key`.
//!
//! CRC bundles ship `id_ecdsa_crc` (published by us under the Secret key `id_ecdsa`) as written
//! by `ssh-keygen`: the OpenSSH format today, PEM/PKCS#8 for older tools. Both parse here, for
//! ECDSA (P-256/384/521) and ed25519.

use std::path::Path;

use russh::keys::ssh_key::{Algorithm, EcdsaCurve, LineEnding};
pub use russh::keys::{PrivateKey, PublicKey};

/// Why a key could not be read or made.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("reading SSH key {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("parsing SSH private key: {0}")]
    Parse(String),
    #[error("encrypted SSH private keys are not supported")]
    Encrypted,
    #[error("generating SSH key: {0}")]
    Generate(String),
    #[error("encoding SSH key: {0}")]
    Encode(String),
}

/// Parses an unencrypted private key (OpenSSH, SEC1 `EC PRIVATE KEY` or PKCS#8 PEM).
pub fn parse_private_key(text: &str) -> Result<PrivateKey, KeyError> {
    let key = russh::keys::decode_secret_key(text, None).map_err(|e| match e {
        russh::keys::Error::KeyIsEncrypted => KeyError::Encrypted,
        other => KeyError::Parse(other.to_string()),
    })?;
    if key.is_encrypted() {
        return Err(KeyError::Encrypted);
    }
    Ok(key)
}

/// Reads and parses a private key file.
pub fn load_private_key(path: &Path) -> Result<PrivateKey, KeyError> {
    let text = std::fs::read_to_string(path).map_err(|source| KeyError::Read {
        path: path.display().to_string(),
        source,
    })?;
    parse_private_key(&text)
}

/// A fresh ed25519 key (the crc-agent's per-instance key).
pub fn generate_ed25519() -> Result<PrivateKey, KeyError> {
    generate(Algorithm::Ed25519)
}

/// A fresh ECDSA P-256 key.
pub fn generate_ecdsa_p256() -> Result<PrivateKey, KeyError> {
    generate(Algorithm::Ecdsa {
        curve: EcdsaCurve::NistP256,
    })
}

fn generate(algorithm: Algorithm) -> Result<PrivateKey, KeyError> {
    PrivateKey::random(&mut russh::keys::key::safe_rng(), algorithm)
        .map_err(|e| KeyError::Generate(e.to_string()))
}

/// The private key in OpenSSH format (what `ssh-keygen` writes).
pub fn to_openssh(key: &PrivateKey) -> Result<String, KeyError> {
    key.to_openssh(LineEnding::LF)
        .map(|text| text.to_string())
        .map_err(|e| KeyError::Encode(e.to_string()))
}

/// One `authorized_keys` line for the key, with `comment`.
pub fn authorized_key_line(key: &PublicKey, comment: &str) -> Result<String, KeyError> {
    let mut key = key.clone();
    key.set_comment(comment);
    key.to_openssh()
        .map_err(|e| KeyError::Encode(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openssh_keys_round_trip() {
        for key in [generate_ecdsa_p256().unwrap(), generate_ed25519().unwrap()] {
            let text = to_openssh(&key).unwrap();
            assert!(text.starts_with("-----BEGIN OPENSSH PRIVATE KEY-----"));
            let parsed = parse_private_key(&text).unwrap();
            assert_eq!(parsed.public_key().key_data(), key.public_key().key_data());
        }
    }

    #[test]
    fn pkcs8_pem_ecdsa_parses() {
        let key = generate_ecdsa_p256().unwrap();
        let mut pem = Vec::new();
        russh::keys::encode_pkcs8_pem(&key, &mut pem).unwrap();
        let parsed = parse_private_key(std::str::from_utf8(&pem).unwrap()).unwrap();
        assert_eq!(parsed.public_key().key_data(), key.public_key().key_data());
    }

    #[test]
    fn authorized_key_line_carries_comment() {
        let key = generate_ed25519().unwrap();
        let line = authorized_key_line(key.public_key(), "core").unwrap();
        assert!(line.starts_with("ssh-ed25519 "));
        assert!(line.ends_with(" core"));
    }

    #[test]
    fn garbage_is_a_parse_error() {
        assert!(matches!(
            parse_private_key("not a key"),
            Err(KeyError::Parse(_))
        ));
    }
}
