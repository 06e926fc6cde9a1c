//! Guest operations over SSH, shared by the crc-agent and the build helper.
//!
//! Everything the operator does inside a CRC guest goes through the [`Guest`] trait: run a
//! command, read a file, write a file. Implementations: [`ssh::SshGuest`] (russh, the bundle's
//! `id_ecdsa` key) and, in unit tests only, `fake::ScriptedGuest` for the guest steps.
//!
//! # Why guest commands are simple
//!
//! A [`Command`] is one program with arguments, optionally run through `sudo`, optionally piped
//! into the next (`sudo cat <file> | sha256sum`). Nothing else is ever sent:
//! no `;`, `&&`, `if`, redirections, `$(…)` or `sh -c` scripts. Decisions — which partition to
//! grow, whether a certificate is still fresh, whether a unit exists — are made in Rust from
//! command output. That keeps every step unit-testable against a scripted guest, keeps errors
//! attributable to one program, and lets the simulated guest (`sim::guest`) execute exactly what
//! production sends; a shell script would need a shell interpreter in the simulation and would
//! hide logic from tests.
//!
//! Files are written without sftp: `sudo install -m MODE -D /dev/null PATH`, then `sudo tee
//! PATH` with the contents on its stdin. Upstream's crc-agent sends them base64-encoded as an
//! `echo` argument, which the guest's process list shows to anyone who looks: keys, kubeconfigs
//! and pull secrets never go on a command line here.

pub mod api;
pub mod build;
pub mod cluster;
pub mod command;
pub mod connect;
pub mod csr;
pub mod csr_signer;
pub mod customize;
#[cfg(test)]
pub(crate) mod fake;
pub mod htpasswd;
pub mod keys;
pub mod kubeconfig;
pub mod route;
pub mod scrub;
pub mod seal;
pub mod signers;
pub mod ssh;
pub mod steps;
pub mod validate;

use std::future::Future;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

pub use command::{Command, Stage, quote};

/// What a guest command returned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Output {
    /// Exit status of the pipeline (its last program), as sshd reports it.
    pub status: u32,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
}

impl Output {
    /// Exit status 0 with this stdout.
    pub fn ok(stdout: impl Into<Vec<u8>>) -> Self {
        Self {
            status: 0,
            stdout: stdout.into(),
            stderr: Vec::new(),
        }
    }

    /// A non-zero exit with this stderr.
    pub fn failed(status: u32, stderr: impl Into<Vec<u8>>) -> Self {
        Self {
            status,
            stdout: Vec::new(),
            stderr: stderr.into(),
        }
    }

    pub fn success(&self) -> bool {
        self.status == 0
    }

    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    pub fn stderr_text(&self) -> String {
        String::from_utf8_lossy(&self.stderr).into_owned()
    }
}

/// Failures of guest operations.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    #[error("cannot reach guest SSH at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    #[error("guest SSH at {addr} not reachable within {seconds}s")]
    Timeout { addr: String, seconds: u64 },
    #[error("guest refused public-key authentication for user {user}")]
    AuthRejected { user: String },
    #[error("SSH private key: {0}")]
    Key(String),
    #[error("SSH session: {0}")]
    Ssh(String),
    /// `stderr` is its end, on one line ([`crate::text::tail_excerpt`]): a guest's output can be
    /// of any size, and this message reaches conditions.
    #[error("`{command}` exited with status {status}: {stderr}")]
    Failed {
        command: String,
        status: u32,
        stderr: String,
    },
    #[error("`{command}` ended without an exit status (connection lost or guest powered off)")]
    NoExitStatus { command: String },
    #[error("`{command}` did not finish within {seconds}s")]
    CommandTimeout { command: String, seconds: u64 },
    #[error("`{command}` printed more than {limit} bytes; stopped reading")]
    OutputTooLarge { command: String, limit: usize },
    #[error("tunnel to {host}:{port} through the guest refused: {reason}")]
    Tunnel {
        host: String,
        port: u16,
        reason: String,
    },
    #[error("scripted guest: {0}")]
    Script(String),
}

impl GuestError {
    /// [`GuestError::Failed`] of `command` with the end of its `stderr`.
    pub fn failed(command: &Command, status: u32, stderr: &[u8]) -> Self {
        GuestError::Failed {
            command: command.to_string(),
            status,
            stderr: crate::text::tail_excerpt(&String::from_utf8_lossy(stderr)),
        }
    }
}

/// A guest we can run simple commands in.
pub trait Guest: Send + Sync {
    /// Runs one simple command with `input` on its stdin (then EOF) and reports its exit status
    /// and output.
    fn run_with_input(
        &self,
        command: &Command,
        input: &[u8],
    ) -> impl Future<Output = Result<Output, GuestError>> + Send;

    /// Runs one simple command with nothing on its stdin.
    fn run(&self, command: &Command) -> impl Future<Output = Result<Output, GuestError>> + Send {
        self.run_with_input(command, &[])
    }

    /// [`Guest::run_with_input`], a non-zero exit turned into [`GuestError::Failed`].
    fn run_checked_with_input(
        &self,
        command: &Command,
        input: &[u8],
    ) -> impl Future<Output = Result<Output, GuestError>> + Send {
        async move {
            let output = self.run_with_input(command, input).await?;
            if output.success() {
                Ok(output)
            } else {
                Err(GuestError::failed(command, output.status, &output.stderr))
            }
        }
    }

    /// Runs a command and turns a non-zero exit into [`GuestError::Failed`].
    fn run_checked(
        &self,
        command: &Command,
    ) -> impl Future<Output = Result<Output, GuestError>> + Send {
        self.run_checked_with_input(command, &[])
    }

    /// The bytes of a file, read as root (`sudo cat PATH`).
    fn read_file(&self, path: &str) -> impl Future<Output = Result<Vec<u8>, GuestError>> + Send {
        async move {
            let output = self.run_checked(&Command::sudo(["cat", path])).await?;
            Ok(output.stdout)
        }
    }

    /// Whether a path exists (`sudo test -e PATH`: 0 yes, 1 no, anything else an error).
    fn exists(&self, path: &str) -> impl Future<Output = Result<bool, GuestError>> + Send {
        async move {
            let command = Command::sudo(["test", "-e", path]);
            let output = self.run(&command).await?;
            match output.status {
                0 => Ok(true),
                1 => Ok(false),
                status => Err(GuestError::failed(&command, status, &output.stderr)),
            }
        }
    }

    /// Replaces a file (creating parent directories) with `data` and `mode`, as root:
    /// `install -m MODE -D /dev/null PATH`, then the data through `base64 --decode | tee`.
    fn write_file(
        &self,
        path: &str,
        data: &[u8],
        mode: u32,
    ) -> impl Future<Output = Result<(), GuestError>> + Send {
        async move {
            let mode = format!("{:04o}", mode & 0o7777);
            self.run_checked(&Command::sudo([
                "install",
                "-m",
                &mode,
                "-D",
                "/dev/null",
                path,
            ]))
            .await?;
            self.run_checked_with_input(&write_command(path, false), data)
                .await?;
            Ok(())
        }
    }

    /// Appends `data` to a file as root (`… | sudo tee -a PATH`); the file must exist.
    fn append_file(
        &self,
        path: &str,
        data: &[u8],
    ) -> impl Future<Output = Result<(), GuestError>> + Send {
        async move {
            self.run_checked_with_input(&write_command(path, true), data)
                .await?;
            Ok(())
        }
    }
}

/// `sudo tee [-a] PATH`, the data on its stdin: file contents (keys, kubeconfigs, pull secrets)
/// never appear on a command line, where the guest's process list would show them.
pub fn write_command(path: &str, append: bool) -> Command {
    let tee: Vec<&str> = if append {
        vec!["tee", "-a", path]
    } else {
        vec!["tee", path]
    };
    Command::sudo(tee)
}

/// Decodes standard base64 (RFC 4648, padded) as GNU `base64 --decode` reads what we send:
/// ASCII whitespace (the line breaks of `base64` or `echo`) is ignored.
pub fn decode_base64(text: impl AsRef<[u8]>) -> Result<Vec<u8>, base64::DecodeError> {
    let compact: Vec<u8> = text
        .as_ref()
        .iter()
        .copied()
        .filter(|c| !c.is_ascii_whitespace())
        .collect();
    BASE64.decode(compact)
}

#[cfg(test)]
mod tests {
    use super::fake::ScriptedGuest;
    use super::*;

    #[test]
    fn decode_base64_ignores_line_breaks_and_rejects_garbage() {
        assert_eq!(decode_base64("Zm9v\nYmFy\n").unwrap(), b"foobar");
        assert_eq!(decode_base64(" Zg==\r\n").unwrap(), b"f");
        assert_eq!(decode_base64("").unwrap(), b"");
        assert!(decode_base64("Zm9v*").is_err());
        assert!(decode_base64("Zm9").is_err());
        assert!(decode_base64("Zg==Zg==").is_err());
        for len in 0..64usize {
            let data: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(decode_base64(BASE64.encode(&data)).unwrap(), data);
        }
    }

    #[tokio::test]
    async fn write_file_installs_then_sends_the_data_on_stdin_never_as_arguments() {
        let guest = ScriptedGuest::new();
        guest.expect("sudo install -m 0600 -D /dev/null /etc/x", Output::ok(""));
        guest.expect("sudo tee /etc/x", Output::ok(""));
        let data = vec![b'a'; 200 * 1024];
        guest.write_file("/etc/x", &data, 0o600).await.unwrap();
        guest.assert_done();
        assert_eq!(guest.inputs(), [("sudo tee /etc/x".to_owned(), data)]);
        assert!(guest.calls().iter().all(|line| line.len() < 100));
    }

    #[tokio::test]
    async fn run_checked_reports_status_and_stderr() {
        let guest = ScriptedGuest::new();
        guest.expect(
            "sudo cat /missing",
            Output::failed(1, "cat: /missing: No such file"),
        );
        let err = guest.read_file("/missing").await.unwrap_err();
        assert!(matches!(err, GuestError::Failed { status: 1, .. }), "{err}");
        assert!(err.to_string().contains("No such file"));
    }

    #[tokio::test]
    async fn exists_maps_test_status() {
        let guest = ScriptedGuest::new();
        guest.expect("sudo test -e /a", Output::ok(""));
        guest.expect("sudo test -e /b", Output::failed(1, ""));
        guest.expect("sudo test -e /c", Output::failed(2, "bad"));
        assert!(guest.exists("/a").await.unwrap());
        assert!(!guest.exists("/b").await.unwrap());
        assert!(guest.exists("/c").await.is_err());
    }
}
