//! Child processes that cannot outlive the process that started them.
//!
//! Each child gets `PR_SET_PDEATHSIG(SIGKILL)`. Linux sends that signal when the *thread* that
//! forked the child exits, not the process, and tokio test threads come and go, so every child is
//! forked by one spawner thread that lives until the process exits.

use std::fs::File;
use std::io;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::{Error, fsutil};

/// How often a stopping process is checked for exit.
const EXIT_POLL: Duration = Duration::from_millis(20);

struct SpawnRequest {
    command: Command,
    reply: oneshot::Sender<io::Result<Child>>,
}

/// The channel to the spawner thread, started on first use. The thread is never joined: it must
/// outlive every child, and it dies with the process.
fn spawner() -> io::Result<&'static mpsc::Sender<SpawnRequest>> {
    static SPAWNER: OnceLock<mpsc::Sender<SpawnRequest>> = OnceLock::new();
    if let Some(sender) = SPAWNER.get() {
        return Ok(sender);
    }
    let (sender, receiver) = mpsc::channel::<SpawnRequest>();
    // Two racing callers may both build a thread; the loser's thread sees its channel closed
    // and exits before it ever forks, so no child depends on it.
    thread::Builder::new()
        .name("testenv-spawner".into())
        .spawn(move || {
            for mut request in receiver {
                // A requester that gave up (its future was cancelled) cannot own the child, so
                // it must not be left running.
                if let Err(Ok(mut orphan)) = request.reply.send(request.command.spawn()) {
                    kill_and_reap(&mut orphan);
                }
            }
        })?;
    Ok(SPAWNER.get_or_init(|| sender))
}

/// A running control-plane component whose output goes to a log file.
#[derive(Debug)]
pub(crate) struct ManagedProcess {
    name: &'static str,
    log: PathBuf,
    /// `None` once the process has been stopped and reaped.
    child: Option<Child>,
}

impl ManagedProcess {
    /// Starts `program` with `args`, stdout and stderr appended to `log`, in its own process
    /// group (so a terminal's Ctrl-C reaches only us and we stop the components in order).
    pub(crate) async fn spawn(
        name: &'static str,
        program: &Path,
        args: &[String],
        log: PathBuf,
    ) -> Result<Self, Error> {
        let spawn_error = |source| Error::Spawn {
            name,
            program: program.to_path_buf(),
            source,
        };
        let out = File::create(&log).map_err(fsutil::io_error(&log))?;
        let err = out.try_clone().map_err(fsutil::io_error(&log))?;
        let mut command = Command::new(program);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        die_with_parent(&mut command);

        let (reply, response) = oneshot::channel();
        spawner()
            .map_err(spawn_error)?
            .send(SpawnRequest { command, reply })
            .map_err(|_| spawn_error(io::Error::other("spawner thread is gone")))?;
        let child = response
            .await
            .map_err(|_| spawn_error(io::Error::other("spawner thread dropped the request")))?
            .map_err(spawn_error)?;
        tracing::debug!(name, pid = child.id(), log = %log.display(), "started");
        Ok(Self {
            name,
            log,
            child: Some(child),
        })
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    pub(crate) fn log(&self) -> &Path {
        &self.log
    }

    /// The exit status if the process has exited (or was already stopped).
    pub(crate) fn exit_status(&mut self) -> Option<String> {
        match self.child.as_mut().map(Child::try_wait) {
            None => Some("stopped".into()),
            Some(Ok(Some(status))) => Some(status.to_string()),
            Some(Ok(None)) => None,
            Some(Err(e)) => Some(format!("cannot be waited for: {e}")),
        }
    }

    /// Fails with the log tail if the process has exited.
    pub(crate) fn ensure_running(&mut self) -> Result<(), Error> {
        match self.exit_status() {
            None => Ok(()),
            Some(status) => Err(Error::Exited {
                name: self.name,
                status,
                log: self.log.clone(),
                tail: fsutil::tail(&self.log, 30),
            }),
        }
    }

    /// Asks the process to exit with SIGTERM and SIGKILLs it after `grace`. Blocks until reaped.
    pub(crate) fn stop(&mut self, grace: Duration) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        signal(&child, libc::SIGTERM);
        let deadline = Instant::now() + grace;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(Some(status)) => return self.log_stopped(status),
                Ok(None) => thread::sleep(EXIT_POLL),
                Err(_) => break,
            }
        }
        tracing::warn!(
            name = self.name,
            ?grace,
            "did not exit after SIGTERM, killing"
        );
        kill_and_reap(&mut child);
    }

    /// SIGKILLs the process without grace and reaps it, for paths that must not block long.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            kill_and_reap(&mut child);
        }
    }

    fn log_stopped(&self, status: ExitStatus) {
        tracing::debug!(name = self.name, %status, "stopped");
    }
}

impl Drop for ManagedProcess {
    /// A process dropped without `stop` belongs to a failed or abandoned start: kill it at once.
    fn drop(&mut self) {
        self.kill();
    }
}

fn kill_and_reap(child: &mut Child) {
    // Errors mean the process is already gone; there is nothing else to do about them.
    let _ = child.kill();
    let _ = child.wait();
}

fn signal(child: &Child, signal: libc::c_int) {
    let Ok(pid) = libc::pid_t::try_from(child.id()) else {
        return;
    };
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our unreaped child, so it
    // cannot have been reused by another process.
    unsafe {
        libc::kill(pid, signal);
    }
}

/// Makes the child receive SIGKILL when the forking thread (the spawner) dies.
fn die_with_parent(command: &mut Command) {
    // SAFETY: getpid(2) is always safe; it runs before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (prctl, getppid, _exit) without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl, in which case the signal was
            // never armed; the child has been reparented and must not run on its own.
            if libc::getppid() != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn stop_terminates_and_reaps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut process = ManagedProcess::spawn(
            "sleep",
            Path::new("/bin/sleep"),
            &["60".to_string()],
            dir.path().join("sleep.log"),
        )
        .await
        .expect("spawn sleep");
        assert!(process.ensure_running().is_ok());
        process.stop(Duration::from_secs(5));
        assert_eq!(process.exit_status().as_deref(), Some("stopped"));
    }

    #[tokio::test]
    async fn exited_process_reports_log_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut process = ManagedProcess::spawn(
            "sh",
            Path::new("/bin/sh"),
            &["-c".to_string(), "echo boom; exit 3".to_string()],
            dir.path().join("sh.log"),
        )
        .await
        .expect("spawn sh");
        let deadline = Instant::now() + Duration::from_secs(10);
        let err = loop {
            match process.ensure_running() {
                Err(e) => break e,
                Ok(()) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(10)).await
                }
                Ok(()) => panic!("sh did not exit within 10s"),
            }
        };
        let text = err.to_string();
        assert!(text.contains("boom") && text.contains('3'), "{text}");
    }
}
