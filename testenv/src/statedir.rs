//! State directories: where one control plane keeps its PKI, etcd data, kubeconfig and logs.
//!
//! Each directory records its owner (pid and process start time, so a recycled pid is not
//! mistaken for the owner). The shared control plane of a test binary lives in a `static` and is
//! never dropped, so its directory outlives the process; the next start removes such stale
//! directories.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::{Error, fsutil};

const OWNER_FILE: &str = "owner";

/// The cache directory shared with `tools/controlplane/build.sh` (same environment variables).
pub(crate) fn cache_root() -> Result<PathBuf, Error> {
    if let Some(dir) = std::env::var_os("GUESTCLUSTER_CACHE") {
        return Ok(PathBuf::from(dir));
    }
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(dir) => PathBuf::from(dir),
        None => std::env::var_os("HOME")
            .map(|home| PathBuf::from(home).join(".cache"))
            .ok_or(Error::NoCacheDir)?,
    };
    Ok(base.join("guestcluster"))
}

/// A state directory owned by this process.
#[derive(Debug)]
pub(crate) struct StateDir {
    path: PathBuf,
}

impl StateDir {
    /// Claims a fresh directory `<runs>/<pid>-<n>` after removing stale siblings.
    pub(crate) fn fresh(runs: &Path) -> Result<Self, Error> {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        fsutil::create_dir(runs)?;
        remove_stale(runs);
        let pid = std::process::id();
        loop {
            let path = runs.join(format!("{pid}-{}", COUNTER.fetch_add(1, Ordering::Relaxed)));
            match fs::create_dir(&path) {
                Ok(()) => return Self::claim(path),
                // Left by an earlier process with our (recycled) pid that is still alive
                // only in theory; never reuse, just take the next number.
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(fsutil::io_error(&path)(e)),
            }
        }
    }

    /// Claims a fixed directory. It must be missing, empty, or a stale state directory; one in
    /// use by a live process or holding anything else is refused rather than wiped.
    pub(crate) fn fixed(path: &Path) -> Result<Self, Error> {
        match owner_of(path) {
            Some(owner) if owner.is_alive() => {
                return Err(Error::StateDirInUse {
                    path: path.to_path_buf(),
                    pid: owner.pid,
                });
            }
            Some(_) => remove_dir(path)?,
            None if is_nonempty_dir(path) => {
                return Err(Error::StateDirForeign {
                    path: path.to_path_buf(),
                });
            }
            None => {}
        }
        fsutil::create_dir(path)?;
        Self::claim(path.to_path_buf())
    }

    fn claim(path: PathBuf) -> Result<Self, Error> {
        let owner = Owner::current().ok_or_else(|| Error::Io {
            path: PathBuf::from("/proc/self/stat"),
            source: io::Error::other("cannot read this process's start time"),
        })?;
        fsutil::write_public(&path.join(OWNER_FILE), &owner.render())?;
        Ok(Self { path })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Removes everything but the owner record, for a retried start in the same directory.
    pub(crate) fn clear(&self) -> Result<(), Error> {
        let entries = fs::read_dir(&self.path).map_err(fsutil::io_error(&self.path))?;
        for entry in entries {
            let entry = entry.map_err(fsutil::io_error(&self.path))?;
            if entry.file_name() == OWNER_FILE {
                continue;
            }
            let path = entry.path();
            let removed = if entry.file_type().is_ok_and(|t| t.is_dir()) {
                fs::remove_dir_all(&path)
            } else {
                fs::remove_file(&path)
            };
            removed.map_err(fsutil::io_error(&path))?;
        }
        Ok(())
    }

    /// Deletes the directory. Called once every process writing into it has been reaped.
    pub(crate) fn remove(&self) -> Result<(), Error> {
        remove_dir(&self.path)
    }
}

fn remove_dir(path: &Path) -> Result<(), Error> {
    match fs::remove_dir_all(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(fsutil::io_error(path)(e)),
        _ => Ok(()),
    }
}

fn is_nonempty_dir(path: &Path) -> bool {
    fs::read_dir(path).is_ok_and(|mut entries| entries.next().is_some())
}

/// Best effort: a directory that cannot be removed now is retried by the next start.
fn remove_stale(runs: &Path) {
    let Ok(entries) = fs::read_dir(runs) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if owner_of(&path).is_some_and(|owner| !owner.is_alive()) {
            match fs::remove_dir_all(&path) {
                Ok(()) => tracing::debug!(path = %path.display(), "removed stale state dir"),
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot remove stale state dir")
                }
            }
        }
    }
}

fn owner_of(dir: &Path) -> Option<Owner> {
    Owner::parse(&fs::read_to_string(dir.join(OWNER_FILE)).ok()?)
}

/// A process identity that survives pid reuse: the pid plus its start time in clock ticks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Owner {
    pid: i32,
    start_time: u64,
}

impl Owner {
    fn current() -> Option<Self> {
        let pid = i32::try_from(std::process::id()).ok()?;
        Some(Self {
            pid,
            start_time: proc_stat(pid)?.start_time,
        })
    }

    fn render(&self) -> String {
        format!("{} {}\n", self.pid, self.start_time)
    }

    fn parse(text: &str) -> Option<Self> {
        let mut fields = text.split_whitespace();
        let pid = fields.next()?.parse().ok()?;
        let start_time = fields.next()?.parse().ok()?;
        Some(Self { pid, start_time })
    }

    /// A zombie counts as dead: it has exited (and its children got their PDEATHSIG), only
    /// nobody has reaped it yet.
    fn is_alive(&self) -> bool {
        proc_stat(self.pid).is_some_and(|stat| {
            stat.start_time == self.start_time && !matches!(stat.state, 'Z' | 'X' | 'x')
        })
    }
}

struct ProcStat {
    state: char,
    start_time: u64,
}

/// Fields 3 (state) and 22 (start time) of `/proc/<pid>/stat`. The command name (field 2) may
/// contain spaces and parentheses, so fields are counted from the last `)`.
fn proc_stat(pid: i32) -> Option<ProcStat> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace();
    let state = fields.next()?.chars().next()?;
    // Field 3 was the first after the name, so field 22 is 18 further on.
    let start_time = fields.nth(18)?.parse().ok()?;
    Some(ProcStat { state, start_time })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn current_process_is_alive_and_a_different_start_time_is_not() {
        let me = Owner::current().expect("own start time");
        assert!(me.is_alive());
        let recycled = Owner {
            start_time: me.start_time + 1,
            ..me
        };
        assert!(!recycled.is_alive());
        assert_eq!(Owner::parse(&me.render()), Some(me));
    }

    #[test]
    fn an_exited_but_unreaped_owner_is_dead() {
        use std::process::{Command, Stdio};
        let mut child = Command::new("/bin/sh")
            .args(["-c", "read line"])
            .stdin(Stdio::piped())
            .spawn()
            .expect("spawn sh");
        let pid = i32::try_from(child.id()).expect("pid");
        let owner = Owner {
            pid,
            start_time: proc_stat(pid).expect("stat of live child").start_time,
        };
        assert!(owner.is_alive());
        drop(child.stdin.take()); // EOF: sh exits and stays a zombie until waited for.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while proc_stat(pid).is_some_and(|s| s.state != 'Z') {
            assert!(std::time::Instant::now() < deadline, "sh did not exit");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert!(!owner.is_alive(), "a zombie owner must count as dead");
        child.wait().expect("reap");
    }

    #[test]
    fn stale_dirs_are_removed_and_live_ones_kept() {
        let runs = tempfile::tempdir().expect("tempdir");
        let stale = runs.path().join("stale");
        fs::create_dir(&stale).expect("mkdir");
        fs::write(stale.join(OWNER_FILE), "2147483646 1\n").expect("write owner");
        let live = StateDir::fresh(runs.path()).expect("fresh");
        let foreign = runs.path().join("foreign");
        fs::create_dir(&foreign).expect("mkdir");

        remove_stale(runs.path());
        assert!(!stale.exists());
        assert!(live.path().exists());
        assert!(
            foreign.exists(),
            "dirs without an owner record are not ours to delete"
        );
    }

    #[test]
    fn fixed_dir_refuses_foreign_content_and_live_owners() {
        let root = tempfile::tempdir().expect("tempdir");
        let foreign = root.path().join("foreign");
        fs::create_dir(&foreign).expect("mkdir");
        fs::write(foreign.join("precious"), "data").expect("write");
        assert!(matches!(
            StateDir::fixed(&foreign),
            Err(Error::StateDirForeign { .. })
        ));

        let dev = root.path().join("dev");
        let first = StateDir::fixed(&dev).expect("claim missing dir");
        assert!(matches!(
            StateDir::fixed(&dev),
            Err(Error::StateDirInUse { .. })
        ));
        fs::write(dev.join(OWNER_FILE), "2147483646 1\n").expect("fake stale owner");
        let second = StateDir::fixed(&dev).expect("reclaim stale dir");
        assert_eq!(first.path(), second.path());
    }
}
