//! Where the product binary is: the simulated kubelet runs our Jobs' pods with it, so the demo
//! needs the real `guestcluster` executable, not this crate's own.
//!
//! Cargo puts every binary of a workspace into the same `target/<profile>/` directory, so after
//! `cargo build -p guestcluster` (what `make demo` does first) it sits next to
//! `guestcluster-sim`. An explicit path (flag or `$GUESTCLUSTER_BIN`) wins.

use std::path::{Path, PathBuf};

/// The product binary's file name.
pub const NAME: &str = "guestcluster";
/// Environment variable naming the product binary (the `--guestcluster-bin` flag's fallback).
pub const ENV: &str = "GUESTCLUSTER_BIN";

/// The product binary was not found.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the product binary {} (from --guestcluster-bin or ${ENV}) is not an executable file",
        .0.display()
    )]
    NotExecutable(PathBuf),
    #[error(
        "the product binary `{NAME}` is not next to this program (looked for {}); build it first \
         with `cargo build -p guestcluster` (`make demo` does) or name it with \
         --guestcluster-bin or ${ENV}",
        .0.display()
    )]
    NotBuilt(PathBuf),
    #[error("locating this program's own executable: {0}")]
    OwnExe(#[source] std::io::Error),
}

/// `explicit` if given, else `guestcluster` in the directory of this process's executable.
pub fn locate(explicit: Option<&Path>) -> Result<PathBuf, Error> {
    let own = match explicit {
        Some(_) => None,
        None => Some(std::env::current_exe().map_err(Error::OwnExe)?),
    };
    resolve(explicit, own.as_deref(), is_executable_file)
}

/// The decision of [`locate`], with the file check passed in.
fn resolve(
    explicit: Option<&Path>,
    own_exe: Option<&Path>,
    is_executable: impl Fn(&Path) -> bool,
) -> Result<PathBuf, Error> {
    if let Some(path) = explicit {
        return if is_executable(path) {
            Ok(path.to_path_buf())
        } else {
            Err(Error::NotExecutable(path.to_path_buf()))
        };
    }
    let beside = own_exe
        .and_then(Path::parent)
        .unwrap_or(Path::new("."))
        .join(NAME);
    if is_executable(&beside) {
        Ok(beside)
    } else {
        Err(Error::NotBuilt(beside))
    }
}

fn is_executable_file(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_explicit_path_wins_and_must_exist() {
        let found = resolve(Some(Path::new("/opt/gc")), None, |p| {
            p == Path::new("/opt/gc")
        });
        assert_eq!(found.unwrap(), PathBuf::from("/opt/gc"));
        let missing = resolve(Some(Path::new("/opt/gc")), None, |_| false).unwrap_err();
        assert!(matches!(missing, Error::NotExecutable(p) if p == Path::new("/opt/gc")));
    }

    #[test]
    fn otherwise_the_binary_next_to_ours() {
        let own = Path::new("/w/target/debug/guestcluster-sim");
        let expected = PathBuf::from("/w/target/debug/guestcluster");
        assert_eq!(
            resolve(None, Some(own), |p| p == expected).unwrap(),
            expected
        );
        let err = resolve(None, Some(own), |_| false).unwrap_err();
        assert!(matches!(&err, Error::NotBuilt(p) if *p == expected));
        let message = err.to_string();
        assert!(
            message.contains("cargo build -p guestcluster") && message.contains(ENV),
            "{message}"
        );
    }

    #[test]
    fn a_real_file_check() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join(NAME);
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        assert!(!is_executable_file(&file), "not executable yet");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(is_executable_file(&file));
        assert!(!is_executable_file(dir.path()), "a directory is no binary");
    }
}
