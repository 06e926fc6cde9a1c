//! How every Job body starts and ends: its settings from the environment, a small runtime, and
//! the result turned into the termination message the operator reads back and an exit code.

use std::future::Future;
use std::process::ExitCode;

use crate::contract::termination;

/// What a Job's error enum tells the operator about itself.
pub trait Failure: std::fmt::Display + Sized {
    /// The condition reason, one of the Job's `REASONS`.
    fn reason(&self) -> &'static str;
    /// The process exit code (the Jobs whose reasons are numbered say which).
    fn exit_code(&self) -> ExitCode {
        ExitCode::FAILURE
    }
    /// A read or write of the Job's own files or volumes failed (its `StorageError`).
    fn storage_error(what: String, source: std::io::Error) -> Self;

    /// For `map_err`: the storage error of doing `what`.
    fn storage(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Self {
        let what = what.into();
        move |source| Self::storage_error(what, source)
    }

    /// The runtime could not start (no threads, no file descriptors).
    fn runtime_failed(err: std::io::Error) -> Self {
        Self::storage_error("starting the async runtime".into(), err)
    }
}

/// A required setting: present and not blank, or `<NAME> is required`.
pub fn required(lookup: &impl Fn(&str) -> Option<String>, name: &str) -> Result<String, String> {
    lookup(name)
        .filter(|value| !value.trim().is_empty())
        .ok_or_else(|| format!("{name} is required"))
}

/// Runs `body` with `config` on a two-worker runtime; on success writes `summary(outcome)` as
/// the termination message (what the operator parses), on failure `<Reason>: <message>`; the
/// same line is the last one on stderr (the pod log ends with what the Job concluded).
pub fn run<C, T, E, F>(
    config: Result<C, E>,
    body: impl FnOnce(C) -> F,
    summary: impl FnOnce(&T) -> String,
) -> ExitCode
where
    E: Failure,
    F: Future<Output = Result<T, E>>,
{
    let result = config.and_then(|config| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(E::runtime_failed)?
            .block_on(body(config))
    });
    let (line, code) = match &result {
        Ok(outcome) => (summary(outcome), ExitCode::SUCCESS),
        Err(err) => (termination::message(err.reason(), err), err.exit_code()),
    };
    eprintln!("{line}");
    termination::write(&line);
    code
}
