//! A scripted [`Guest`] for unit tests of guest steps: an ordered list of expected command lines
//! with canned replies, plus an optional fallback responder. Every call is recorded.

use std::collections::VecDeque;
use std::sync::Mutex;

use super::{Command, Guest, GuestError, Output};

type Matcher = Box<dyn Fn(&str) -> bool + Send + Sync>;
type Responder = Box<dyn Fn(&Command) -> Option<Output> + Send + Sync>;

struct Expectation {
    describe: String,
    matches: Matcher,
    /// What stdin must carry, when the expectation says.
    input: Option<Vec<u8>>,
    reply: Result<Output, String>,
}

/// Answers commands from a script, in order.
///
/// A command that does not match the next expectation is offered to the fallback responder
/// (if any); otherwise `run` fails with [`GuestError::Script`] naming both lines, so a test sees
/// exactly which command diverged.
#[derive(Default)]
pub struct ScriptedGuest {
    script: Mutex<VecDeque<Expectation>>,
    fallback: Mutex<Option<Responder>>,
    calls: Mutex<Vec<String>>,
    /// What was sent on stdin, by command line, in order.
    inputs: Mutex<Vec<(String, Vec<u8>)>>,
}

impl ScriptedGuest {
    pub fn new() -> Self {
        Self::default()
    }

    /// Expects exactly this command line next.
    pub fn expect(&self, line: impl Into<String>, reply: Output) -> &Self {
        let line = line.into();
        self.push(Expectation {
            describe: line.clone(),
            matches: Box::new(move |got| got == line),
            input: None,
            reply: Ok(reply),
        })
    }

    /// Expects exactly this command line next, with exactly `input` on its stdin.
    pub fn expect_input(
        &self,
        line: impl Into<String>,
        input: impl Into<Vec<u8>>,
        reply: Output,
    ) -> &Self {
        let line = line.into();
        self.push(Expectation {
            describe: format!("{line} (with its input)"),
            matches: Box::new(move |got| got == line),
            input: Some(input.into()),
            reply: Ok(reply),
        })
    }

    /// Expects a line starting with `prefix` next.
    pub fn expect_prefix(&self, prefix: impl Into<String>, reply: Output) -> &Self {
        let prefix = prefix.into();
        self.push(Expectation {
            describe: format!("{prefix}…"),
            matches: Box::new(move |got| got.starts_with(&prefix)),
            input: None,
            reply: Ok(reply),
        })
    }

    /// Expects this line next and fails it as a broken connection would.
    pub fn expect_error(&self, line: impl Into<String>, message: impl Into<String>) -> &Self {
        let line = line.into();
        self.push(Expectation {
            describe: line.clone(),
            matches: Box::new(move |got| got == line),
            input: None,
            reply: Err(message.into()),
        })
    }

    /// Answers commands the script does not expect (return `None` to refuse them).
    pub fn fallback(
        &self,
        responder: impl Fn(&Command) -> Option<Output> + Send + Sync + 'static,
    ) -> &Self {
        if let Ok(mut slot) = self.fallback.lock() {
            *slot = Some(Box::new(responder));
        }
        self
    }

    /// What each command that had input got on its stdin, in order.
    pub fn inputs(&self) -> Vec<(String, Vec<u8>)> {
        self.inputs.lock().map(|i| i.clone()).unwrap_or_default()
    }

    /// Every command line run so far, in order.
    pub fn calls(&self) -> Vec<String> {
        self.calls.lock().map(|c| c.clone()).unwrap_or_default()
    }

    /// Expectations not consumed yet.
    pub fn remaining(&self) -> Vec<String> {
        self.script
            .lock()
            .map(|s| s.iter().map(|e| e.describe.clone()).collect())
            .unwrap_or_default()
    }

    /// Panics (test helper) when expectations are left.
    pub fn assert_done(&self) {
        let remaining = self.remaining();
        assert!(
            remaining.is_empty(),
            "expected guest commands never ran: {remaining:?}"
        );
    }

    fn push(&self, expectation: Expectation) -> &Self {
        if let Ok(mut script) = self.script.lock() {
            script.push_back(expectation);
        }
        self
    }

    fn answer(&self, command: &Command, input: &[u8]) -> Result<Output, GuestError> {
        let line = command.line();
        if let Ok(mut calls) = self.calls.lock() {
            calls.push(line.clone());
        }
        let next = {
            let mut script = self
                .script
                .lock()
                .map_err(|_| GuestError::Script("script lock poisoned".into()))?;
            match script.front() {
                Some(expectation)
                    if (expectation.matches)(&line)
                        && expectation.input.as_deref().is_none_or(|i| i == input) =>
                {
                    script.pop_front()
                }
                _ => None,
            }
        };
        if let Some(expectation) = next {
            return expectation.reply.map_err(GuestError::Ssh);
        }
        if let Ok(fallback) = self.fallback.lock()
            && let Some(responder) = fallback.as_ref()
            && let Some(output) = responder(command)
        {
            return Ok(output);
        }
        let expected = self
            .remaining()
            .first()
            .cloned()
            .unwrap_or_else(|| "nothing more".to_string());
        Err(GuestError::Script(format!(
            "unexpected command `{command}`; expected `{expected}`"
        )))
    }
}

impl Guest for ScriptedGuest {
    async fn run_with_input(&self, command: &Command, input: &[u8]) -> Result<Output, GuestError> {
        if !input.is_empty()
            && let Ok(mut inputs) = self.inputs.lock()
        {
            inputs.push((command.line(), input.to_vec()));
        }
        self.answer(command, input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_in_order_and_records_calls() {
        let guest = ScriptedGuest::new();
        guest
            .expect("hostname", Output::ok("crc\n"))
            .expect_prefix("sudo systemctl", Output::ok(""));
        let out = guest.run(&Command::new(["hostname"])).await.unwrap();
        assert_eq!(out.stdout_text(), "crc\n");
        guest
            .run(&Command::sudo(["systemctl", "start", "kubelet"]))
            .await
            .unwrap();
        assert_eq!(
            guest.calls(),
            vec!["hostname", "sudo systemctl start kubelet"]
        );
        guest.assert_done();
    }

    #[tokio::test]
    async fn unexpected_commands_fail_unless_the_fallback_answers() {
        let guest = ScriptedGuest::new();
        guest.expect("hostname", Output::ok("crc\n"));
        let err = guest.run(&Command::new(["date"])).await.unwrap_err();
        assert!(err.to_string().contains("expected `hostname`"), "{err}");
        guest.fallback(|c| (c.line() == "date +%s").then(|| Output::ok("42\n")));
        let out = guest.run(&Command::new(["date", "+%s"])).await.unwrap();
        assert_eq!(out.stdout_text(), "42\n");
    }

    #[tokio::test]
    async fn scripted_errors_surface_as_session_errors() {
        let guest = ScriptedGuest::new();
        guest.expect_error("sudo poweroff", "connection reset");
        let err = guest.run(&Command::sudo(["poweroff"])).await.unwrap_err();
        assert!(matches!(err, GuestError::Ssh(_)));
    }
}
