//! Running one external program with a deadline, its output captured and bounded: what the
//! tool modules share.

use std::ffi::OsStr;
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

/// How much of a failing run's stderr an error keeps (its tail: where tools say why).
const STDERR_TAIL: usize = 2000;
/// Largest stdout a caller of [`output`] gets; anything longer is a tool gone wrong.
const STDOUT_MAX: usize = 16 << 20;

/// Why a tool run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot run {program}: {source} (is it installed and on PATH?)")]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("{program} {command} did not finish within {timeout:?}")]
    TimedOut {
        program: String,
        command: String,
        timeout: Duration,
    },
    #[error("{program} {command} exited with {status}: {stderr}")]
    Failed {
        program: String,
        command: String,
        status: std::process::ExitStatus,
        stderr: String,
    },
    #[error("{program} printed more than {STDOUT_MAX} bytes")]
    TooMuchOutput { program: String },
    #[error("{path}, left by an earlier {program} run, could not be removed: {source}")]
    LeftoverOutput {
        program: String,
        path: String,
        source: std::io::Error,
    },
    #[error("{program} wrote {path}, which could not be made readable: {source}")]
    OutputMode {
        program: String,
        path: String,
        source: std::io::Error,
    },
}

/// Runs `program args…` and returns its stdout; killed when `timeout` passes.
pub async fn output<S: AsRef<OsStr>>(
    program: &Path,
    args: &[S],
    timeout: Duration,
) -> Result<String, RunError> {
    let name = program.display().to_string();
    let command = args
        .iter()
        .map(|a| a.as_ref().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| RunError::Spawn {
            program: name.clone(),
            source,
        })?;
    let out = match tokio::time::timeout(timeout, child.wait_with_output()).await {
        Ok(result) => result.map_err(|source| RunError::Spawn {
            program: name.clone(),
            source,
        })?,
        Err(_) => {
            return Err(RunError::TimedOut {
                program: name,
                command,
                timeout,
            });
        }
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr);
        let start = stderr.len().saturating_sub(STDERR_TAIL);
        let start = (start..stderr.len())
            .find(|i| stderr.is_char_boundary(*i))
            .unwrap_or(stderr.len());
        return Err(RunError::Failed {
            program: name,
            command,
            status: out.status,
            stderr: stderr[start..].trim().to_owned(),
        });
    }
    if out.stdout.len() > STDOUT_MAX {
        return Err(RunError::TooMuchOutput { program: name });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
