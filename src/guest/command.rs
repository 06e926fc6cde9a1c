//! Guest command lines: one program with arguments, optional `sudo`, optionally piped into the
//! next — rendered with POSIX shell quoting because the guest's sshd hands the line to the login
//! shell.

use std::fmt;

/// One program invocation of a [`Command`] pipeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// Run as root through `sudo` (the guest user `core` has passwordless sudo on RHCOS).
    pub sudo: bool,
    /// Program and arguments, unquoted.
    pub argv: Vec<String>,
    /// The arguments carry secret or bulky data (file contents): shown as `<redacted>` in logs
    /// and errors.
    pub sensitive: bool,
}

/// A simple command: a pipeline of [`Stage`]s, nothing else (no `;`, `&&`, redirections or
/// substitutions — see the module docs of [`crate::guest`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    stages: Vec<Stage>,
}

impl Command {
    /// `argv[0] argv[1] …` as the SSH user.
    pub fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Self {
            stages: vec![Stage {
                sudo: false,
                argv: argv.into_iter().map(Into::into).collect(),
                sensitive: false,
            }],
        }
    }

    /// `sudo argv[0] argv[1] …`.
    pub fn sudo<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut command = Self::new(argv);
        for stage in &mut command.stages {
            stage.sudo = true;
        }
        command
    }

    /// Marks every stage as carrying secret or bulky arguments (redacted in [`fmt::Display`]).
    pub fn sensitive(mut self) -> Self {
        for stage in &mut self.stages {
            stage.sensitive = true;
        }
        self
    }

    /// `self | next`.
    pub fn pipe(mut self, next: Command) -> Self {
        self.stages.extend(next.stages);
        self
    }

    pub fn stages(&self) -> &[Stage] {
        &self.stages
    }

    /// The exact line sent to the guest.
    pub fn line(&self) -> String {
        self.render(false)
    }

    fn render(&self, redact: bool) -> String {
        let mut out = String::new();
        for (i, stage) in self.stages.iter().enumerate() {
            if i > 0 {
                out.push_str(" | ");
            }
            if stage.sudo {
                out.push_str("sudo ");
            }
            for (j, arg) in stage.argv.iter().enumerate() {
                if j > 0 {
                    out.push(' ');
                }
                if redact && stage.sensitive && j > 0 {
                    out.push_str("<redacted>");
                    break;
                }
                out.push_str(&quote(arg));
            }
        }
        out
    }
}

/// Redacted rendering, for logs and error messages.
impl fmt::Display for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.render(true))
    }
}

/// Quotes one word for a POSIX shell: unchanged when it only holds characters no shell treats
/// specially, single-quoted otherwise.
pub fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_@%+=:,./-".contains(&b));
    if plain {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_pipelines_with_sudo_and_quoting() {
        let command = Command::new(["echo", "aGk="])
            .pipe(Command::new(["base64", "--decode"]))
            .pipe(Command::sudo(["tee", "/etc/my file"]));
        assert_eq!(
            command.line(),
            "echo aGk= | base64 --decode | sudo tee '/etc/my file'"
        );
    }

    #[test]
    fn quotes_special_characters() {
        assert_eq!(quote(""), "''");
        assert_eq!(quote("plain-word_1.2/x"), "plain-word_1.2/x");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote("a;b"), "'a;b'");
        assert_eq!(quote("$(x)"), "'$(x)'");
    }

    #[test]
    fn display_redacts_sensitive_stages() {
        let command = Command::new(["echo", "c2VjcmV0"])
            .sensitive()
            .pipe(Command::sudo(["tee", "/opt/kubeconfig"]));
        assert_eq!(
            command.to_string(),
            "echo <redacted> | sudo tee /opt/kubeconfig"
        );
        assert!(command.line().contains("c2VjcmV0"));
    }
}
