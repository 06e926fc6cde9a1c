//! The guest's htpasswd identity provider data, as upstream's crc-agent writes it: `kubeadmin`
//! with a fresh random password and `developer`/`developer`, bcrypt-hashed, merged into whatever
//! other users the Secret already holds.

/// The cluster administrator user CRC creates.
pub const KUBEADMIN: &str = "kubeadmin";
/// The unprivileged user CRC creates, whose password is its name.
pub const DEVELOPER: &str = "developer";
pub const DEVELOPER_PASSWORD: &str = "developer";

const ALNUM: &[u8; 62] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";

/// Why the htpasswd data could not be made.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no system randomness for the kubeadmin password")]
    Random,
    #[error("bcrypt: {0}")]
    Hash(#[from] bcrypt::BcryptError),
    #[error("user name {0:?} cannot appear in an htpasswd file")]
    BadUser(String),
}

/// A kubeadmin password shaped like CRC's: `XXXXX-XXXXX-XXXXX-XXXXX`, alphanumeric.
pub fn kubeadmin_password() -> Result<String, Error> {
    let random = rustls::crypto::ring::default_provider().secure_random;
    let mut out = String::with_capacity(23);
    let mut produced = 0;
    let mut buf = [0u8; 32];
    while produced < 20 {
        random.fill(&mut buf).map_err(|_| Error::Random)?;
        for byte in buf {
            // 248 = 4 × 62: dropping the rest keeps every character equally likely.
            if byte >= 248 || produced == 20 {
                continue;
            }
            if produced > 0 && produced % 5 == 0 {
                out.push('-');
            }
            out.push(char::from(ALNUM[usize::from(byte % 62)]));
            produced += 1;
        }
    }
    Ok(out)
}

/// One `user:hash` line. `$2a$` like Go's `bcrypt.GenerateFromPassword`, which the OpenShift
/// htpasswd provider has always read.
pub fn line(user: &str, password: &str, cost: u32) -> Result<String, Error> {
    if user.is_empty() || user.contains([':', '\n', '\r']) {
        return Err(Error::BadUser(user.to_string()));
    }
    let hash = bcrypt::hash_with_result(password, cost)?.format_for_version(bcrypt::Version::TwoA);
    Ok(format!("{user}:{hash}"))
}

/// `existing` with the lines of the users in `lines` replaced (or appended, in order); every other
/// user's line is kept as it was. Blank lines are dropped.
pub fn merge(existing: &str, lines: &[String]) -> String {
    let user_of = |line: &str| line.split(':').next().unwrap_or_default().to_string();
    let replaced: Vec<String> = lines.iter().map(|l| user_of(l)).collect();
    let mut out: Vec<&str> = existing
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !replaced.contains(&user_of(l)))
        .collect();
    out.extend(lines.iter().map(String::as_str));
    let mut text = out.join("\n");
    text.push('\n');
    text
}

/// The new htpasswd data: `existing` with `kubeadmin` (`kubeadmin_password`) and `developer`.
pub fn with_crc_users(
    existing: &str,
    kubeadmin_password: &str,
    cost: u32,
) -> Result<String, Error> {
    let lines = [
        line(KUBEADMIN, kubeadmin_password, cost)?,
        line(DEVELOPER, DEVELOPER_PASSWORD, cost)?,
    ];
    Ok(merge(existing, &lines))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// bcrypt's minimum: the format is what matters here, not the work factor.
    const FAST: u32 = 4;

    fn hash_of<'a>(text: &'a str, user: &str) -> &'a str {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{user}:")))
            .unwrap_or_else(|| panic!("no line for {user} in {text}"))
    }

    #[test]
    fn kubeadmin_password_has_crc_shape() {
        let a = kubeadmin_password().unwrap();
        assert_eq!(a.len(), 23);
        let groups: Vec<&str> = a.split('-').collect();
        assert_eq!(groups.len(), 4);
        assert!(
            groups
                .iter()
                .all(|g| g.len() == 5 && g.bytes().all(|b| b.is_ascii_alphanumeric()))
        );
        assert_ne!(a, kubeadmin_password().unwrap());
    }

    #[test]
    fn lines_verify_with_bcrypt() {
        let text = with_crc_users("", "abcde-fghij-klmno-pqrst", FAST).unwrap();
        assert_eq!(text.lines().count(), 2);
        let admin = hash_of(&text, KUBEADMIN);
        assert!(admin.starts_with("$2a$04$"), "{admin}");
        assert!(bcrypt::verify("abcde-fghij-klmno-pqrst", admin).unwrap());
        assert!(bcrypt::verify(DEVELOPER_PASSWORD, hash_of(&text, DEVELOPER)).unwrap());
        assert!(!bcrypt::verify("wrong", admin).unwrap());
    }

    #[test]
    fn merge_keeps_other_users_and_replaces_ours() {
        let existing = "alice:$2y$05$aaa\nkubeadmin:$2y$05$old\n\nbob:$apr1$bbb\n";
        let text = with_crc_users(existing, "pw", FAST).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 4, "{text}");
        assert_eq!(lines[0], "alice:$2y$05$aaa");
        assert_eq!(lines[1], "bob:$apr1$bbb");
        assert!(lines[2].starts_with("kubeadmin:$2a$"));
        assert!(lines[3].starts_with("developer:$2a$"));
        assert!(!text.contains("$old"));
        assert!(text.ends_with('\n'));
    }

    #[test]
    fn bad_user_names_are_refused() {
        assert!(matches!(line("a:b", "x", FAST), Err(Error::BadUser(_))));
        assert!(matches!(line("", "x", FAST), Err(Error::BadUser(_))));
    }
}
