//! A container as a local process: its own process group (so a stop reaches everything it
//! started, like a container's cgroup), output to the pod's log file, and no way to outlive the
//! simulation (`PR_SET_PDEATHSIG`, and a kill of the group when dropped).

use std::os::unix::process::ExitStatusExt;
use std::process::Stdio;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use super::plan::{Credentials, ProcessPlan};
use super::status::Terminated;

/// One running (or ended) container process.
pub struct Process {
    container: String,
    child: tokio::process::Child,
    /// The process group (= the leader's pid); `None` if the pid was not reported.
    group: Option<libc::pid_t>,
    started: Timestamp,
    result: Option<Terminated>,
    log: std::path::PathBuf,
    termination_log: std::path::PathBuf,
    fallback_to_logs: bool,
    memory_limit: Option<u64>,
}

/// How often a container's memory is compared with its limit. The kernel charges a cgroup on
/// every allocation; sampling misses a spike shorter than this.
const MEMORY_SAMPLE: Duration = Duration::from_millis(250);

/// The process group and resident set size (in pages) of a `/proc/<pid>/stat` line: fields 5
/// and 24, counted after the command name, which may itself hold spaces and parentheses.
fn group_and_rss(stat: &str) -> Option<(libc::pid_t, u64)> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state (3), ppid (4), pgrp (5), …, rss (24).
    Some((fields.get(2)?.parse().ok()?, fields.get(21)?.parse().ok()?))
}

/// Bytes resident in the processes of `group` now (anonymous and file-backed pages alike; the
/// kernel would reclaim clean page cache before killing, which RSS barely holds).
fn group_rss(group: libc::pid_t) -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|stat| group_and_rss(&stat))
        .filter(|(g, _)| *g == group)
        .map(|(_, pages)| pages * page)
        .sum()
}

/// Returns once the processes of `group` hold more than `limit` bytes.
async fn exceeds(group: libc::pid_t, limit: u64) {
    loop {
        tokio::time::sleep(MEMORY_SAMPLE).await;
        if group_rss(group) > limit {
            return;
        }
    }
}

/// The container's termination message, as a kubelet reads it: the file (at most 4096 bytes),
/// else, with `fallback`, the last 80 lines (at most 2048 bytes) of the log.
fn termination_message(
    file: &std::path::Path,
    log: &std::path::Path,
    fallback: bool,
) -> Option<String> {
    let from_file = std::fs::read(file)
        .ok()
        .filter(|m| !m.is_empty())
        .map(|mut m| {
            m.truncate(4096);
            String::from_utf8_lossy(&m).into_owned()
        });
    from_file.or_else(|| {
        if !fallback {
            return None;
        }
        let text = std::fs::read_to_string(log).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(80)..].join("\n");
        let start = tail.len().saturating_sub(2048);
        let start = (start..tail.len())
            .find(|i| tail.is_char_boundary(*i))
            .unwrap_or(tail.len());
        Some(tail[start..].to_owned()).filter(|m| !m.is_empty())
    })
}

impl Process {
    /// Starts the planned process; an error is a container that could not start.
    pub fn spawn(plan: &ProcessPlan) -> std::io::Result<Self> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&plan.log)?;
        let mut command = tokio::process::Command::new(&plan.program);
        command
            .args(&plan.args)
            .env_clear()
            .envs(plan.env.iter().map(|(k, v)| (k, v)))
            .current_dir(&plan.cwd)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .process_group(0)
            .kill_on_drop(true);
        if let Some(credentials) = &plan.credentials {
            run_as(&mut command, credentials);
        }
        die_with_parent(&mut command);
        let child = command.spawn()?;
        let group = child.id().and_then(|id| libc::pid_t::try_from(id).ok());
        Ok(Self {
            container: plan.container.clone(),
            child,
            group,
            started: Timestamp::now(),
            result: None,
            log: plan.log.clone(),
            termination_log: plan.termination_log.clone(),
            fallback_to_logs: plan.fallback_to_logs,
            memory_limit: plan.memory_limit,
        })
    }

    /// The container's process group (its leader's pid), if the pid was reported.
    pub fn group(&self) -> Option<libc::pid_t> {
        self.group
    }

    pub fn started(&self) -> Timestamp {
        self.started
    }

    /// Waits for the process to end; cancel-safe, and returns the same result once ended.
    pub async fn wait(&mut self) -> Terminated {
        if let Some(result) = &self.result {
            return result.clone();
        }
        // A container over its memory limit is killed as the kernel's OOM killer would kill
        // its cgroup, and the runtime says so.
        let over_limit = async {
            match (self.group, self.memory_limit) {
                (Some(group), Some(limit)) => exceeds(group, limit).await,
                _ => std::future::pending().await,
            }
        };
        let ended = tokio::select! {
            status = self.child.wait() => Some(status),
            () = over_limit => None,
        };
        let oom_killed = ended.is_none();
        let status = match ended {
            Some(status) => status,
            None => {
                self.signal(libc::SIGKILL);
                self.child.wait().await
            }
        };
        let code = match status {
            Ok(status) => exit_code(status),
            // Cannot happen for our own unreaped child; report it like an unknown death.
            Err(_) => 137,
        };
        // The container is over: whatever it left running in its group goes too.
        self.signal(libc::SIGKILL);
        let mut result = Terminated::exited(&self.container, code, self.started, Timestamp::now());
        if oom_killed {
            result.reason = "OOMKilled".into();
        }
        result.message = termination_message(
            &self.termination_log,
            &self.log,
            code != 0 && self.fallback_to_logs,
        );
        self.result = Some(result.clone());
        result
    }

    /// Sends `signal` to the whole process group.
    pub fn signal(&self, signal: libc::c_int) {
        if let Some(group) = self.group {
            // SAFETY: kill(2) has no memory-safety preconditions. A negative pid addresses the
            // group we created; its id cannot be reused while any member is alive.
            unsafe {
                libc::kill(-group, signal);
            }
        }
    }
}

impl Drop for Process {
    /// A dropped process belongs to a stopped simulation: nothing of it may keep running.
    fn drop(&mut self) {
        if self.result.is_none() {
            self.signal(libc::SIGKILL);
        }
    }
}

/// A runtime's exit code: the process's own, or 128 + the signal that killed it.
fn exit_code(status: std::process::ExitStatus) -> i32 {
    status
        .code()
        .or_else(|| status.signal().map(|s| 128 + s))
        .unwrap_or(137)
}

/// Waits for every process; cancel-safe (ended processes keep their result).
pub async fn wait_all(processes: &mut [Process]) -> Vec<Terminated> {
    let mut results = Vec::with_capacity(processes.len());
    for process in processes.iter_mut() {
        results.push(process.wait().await);
    }
    results
}

/// SIGTERM to every process, SIGKILL to whatever is left after `grace`, as a kubelet stops a pod.
pub async fn stop_all(processes: &mut [Process], grace: Duration) -> Vec<Terminated> {
    for process in processes.iter() {
        if process.result.is_none() {
            process.signal(libc::SIGTERM);
        }
    }
    if tokio::time::timeout(grace, wait_all(processes))
        .await
        .is_err()
    {
        for process in processes.iter() {
            process.signal(libc::SIGKILL);
        }
    }
    wait_all(processes).await
}

/// Makes the child drop to the container's user, group and supplementary groups before it runs
/// the program, as a container runtime does. Must come before [`die_with_parent`]: a change of
/// credentials clears the parent-death signal.
fn run_as(command: &mut tokio::process::Command, credentials: &Credentials) {
    let (uid, gid) = (credentials.uid, credentials.gid);
    let groups: Vec<libc::gid_t> = credentials.groups.clone();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (setgroups, setgid, setuid) on memory allocated before the fork.
    unsafe {
        command.pre_exec(move || {
            if libc::setgroups(groups.len(), groups.as_ptr()) != 0
                || libc::setgid(gid) != 0
                || libc::setuid(uid) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Makes the child receive SIGKILL when the thread that forked it (a runtime worker) exits.
fn die_with_parent(command: &mut tokio::process::Command) {
    // SAFETY: getpid(2) is always safe; it runs before the fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions
    // (prctl, getppid, _exit) without allocating.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent may have died between fork and prctl: then nothing would kill us.
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
    use std::path::PathBuf;

    fn plan(dir: &std::path::Path, program: &str, args: &[&str]) -> ProcessPlan {
        ProcessPlan {
            container: "main".into(),
            credentials: None,
            program: PathBuf::from(program),
            args: args.iter().map(|a| a.to_string()).collect(),
            env: vec![
                ("PATH".into(), "/usr/bin:/bin".into()),
                ("GREETING".into(), "hi".into()),
            ],
            cwd: dir.to_path_buf(),
            log: dir.join("main.log"),
            termination_log: dir.join("main.termination-log"),
            fallback_to_logs: true,
            memory_limit: None,
        }
    }

    #[test]
    fn a_stat_line_gives_the_group_and_resident_pages() {
        let line = "4242 (my (odd) name) S 1 4240 4240 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    500 12345678 321 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0";
        assert_eq!(group_and_rss(line), Some((4240, 321)));
        assert_eq!(group_and_rss("4242 (x) S 1"), None);
    }

    #[tokio::test]
    async fn a_container_over_its_memory_limit_is_oom_killed() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A shell holding 64 MiB in a variable, under a 16 MiB limit.
        let mut hungry = plan(
            dir.path(),
            "/bin/sh",
            &[
                "-c",
                "x=$(head -c 67108864 /dev/zero | tr '\\0' a); sleep 60",
            ],
        );
        hungry.memory_limit = Some(16 << 20);
        let mut process = Process::spawn(&hungry).expect("spawn");
        let result = tokio::time::timeout(Duration::from_secs(50), process.wait())
            .await
            .expect("killed long before its sleep ends");
        assert_eq!(
            (result.exit_code, result.reason.as_str()),
            (137, "OOMKilled")
        );

        let mut modest = plan(
            dir.path(),
            "/bin/sh",
            &["-c", "x=$(head -c 1024 /dev/zero | tr '\\0' a); exit 0"],
        );
        modest.memory_limit = Some(64 << 20);
        let result = Process::spawn(&modest).expect("spawn").wait().await;
        assert_eq!((result.exit_code, result.reason.as_str()), (0, "Completed"));
    }

    #[test]
    fn termination_message_prefers_the_file_then_the_log_tail() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (file, log) = (dir.path().join("t"), dir.path().join("l"));
        std::fs::write(&log, "line 1\nChecksumMismatch: bad\n").unwrap();
        assert_eq!(termination_message(&file, &log, false), None);
        assert_eq!(
            termination_message(&file, &log, true).as_deref(),
            Some("line 1\nChecksumMismatch: bad")
        );
        std::fs::write(&file, "MissingMember: crc.qcow2").unwrap();
        assert_eq!(
            termination_message(&file, &log, true).as_deref(),
            Some("MissingMember: crc.qcow2")
        );
    }

    #[tokio::test]
    async fn exit_code_and_log() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut p = Process::spawn(&plan(
            dir.path(),
            "sh",
            &[
                "-c",
                "echo \"$GREETING from $(pwd)\"; echo oops >&2; exit 3",
            ],
        ))
        .expect("spawn");
        let result = p.wait().await;
        assert_eq!((result.exit_code, result.reason.as_str()), (3, "Error"));
        let log = std::fs::read_to_string(dir.path().join("main.log")).expect("log");
        assert_eq!(log, format!("hi from {}\noops\n", dir.path().display()));
    }

    #[tokio::test]
    async fn stop_kills_the_whole_group_after_the_grace_period() {
        let dir = tempfile::tempdir().expect("tempdir");
        // An ignored SIGTERM is inherited by `sleep`: only SIGKILL after the grace period ends it.
        let mut processes = vec![
            Process::spawn(&plan(
                dir.path(),
                "sh",
                &["-c", "trap '' TERM; echo ready; sleep 600; true"],
            ))
            .expect("spawn"),
        ];
        // SIGTERM must not arrive before the trap is set.
        let log = dir.path().join("main.log");
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::fs::read_to_string(&log).unwrap_or_default().is_empty() {
            assert!(
                std::time::Instant::now() < deadline,
                "the shell never got ready"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let results = stop_all(&mut processes, Duration::from_millis(200)).await;
        assert_eq!(results[0].exit_code, 137);
    }

    #[tokio::test]
    async fn sigterm_ends_a_cooperative_process() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut processes =
            vec![Process::spawn(&plan(dir.path(), "sleep", &["600"])).expect("spawn")];
        let results = stop_all(&mut processes, Duration::from_secs(30)).await;
        assert_eq!(results[0].exit_code, 143);
    }

    #[tokio::test]
    async fn the_process_runs_as_its_user_and_groups() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut plan = plan(dir.path(), "sh", &["-c", "echo $(id -u) $(id -g) $(id -G)"]);
        plan.credentials = Some(Credentials {
            uid: 1000650000,
            gid: 0,
            groups: vec![0, 107, 1000650000],
        });
        // The log is opened by the simulation; the process only inherits the descriptor.
        let result = Process::spawn(&plan).expect("spawn").wait().await;
        assert_eq!(result.exit_code, 0);
        let log = std::fs::read_to_string(dir.path().join("main.log")).expect("log");
        assert_eq!(log.trim(), "1000650000 0 0 107 1000650000");
    }

    #[tokio::test]
    async fn a_missing_program_does_not_spawn() {
        let dir = tempfile::tempdir().expect("tempdir");
        assert!(Process::spawn(&plan(dir.path(), "no-such-program-here", &[])).is_err());
    }
}
