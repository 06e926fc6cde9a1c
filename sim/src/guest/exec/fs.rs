//! Files: `cat`, `tee`, `install`, `base64`, `echo`, `test`/`[`, `ls`, `mkdir`, `rm`, `chmod`,
//! `chown`, `readlink`, `find`, over the state's file map.
//!
//! Permissions are modelled coarsely, enough to catch a missing `sudo`: without root a user
//! writes only under its home and `/tmp` (or files it owns) and reads only world-readable files
//! or its own. `/usr` (but `/usr/local`), `/boot`, `/sys`, `/proc` and `/sysroot` (until
//! remounted) are read-only as on RHCOS.

use std::collections::BTreeSet;

use ::base64::Engine as _;
use ::base64::engine::general_purpose::STANDARD as BASE64;

use super::{Ctx, Run, storage};
use crate::guest::state::{File, User};

/// Directories every guest has.
const BASE_DIRS: &[&str] = &[
    "/",
    "/boot",
    "/dev",
    "/etc",
    "/etc/systemd",
    "/etc/systemd/system",
    "/etc/sysconfig",
    "/home",
    "/opt",
    "/proc",
    "/root",
    "/run",
    "/sys",
    "/sysroot",
    "/tmp",
    "/usr",
    "/usr/local",
    "/usr/local/bin",
    "/var",
    "/var/lib",
    "/var/log",
];

/// Why a file operation failed, worded as coreutils does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FsError {
    NotFound,
    IsDir,
    NotDir,
    Denied,
    ReadOnly,
    Exists,
}

impl FsError {
    pub fn message(self) -> &'static str {
        match self {
            FsError::NotFound => "No such file or directory",
            FsError::IsDir => "Is a directory",
            FsError::NotDir => "Not a directory",
            FsError::Denied => "Permission denied",
            FsError::ReadOnly => "Read-only file system",
            FsError::Exists => "File exists",
        }
    }
}

/// An absolute, normalized path (relative paths start at the user's home, as over SSH).
pub fn normalize(home: &str, path: &str) -> String {
    let joined = if path.starts_with('/') {
        path.to_string()
    } else {
        format!("{home}/{path}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for part in joined.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

fn name(path: &str) -> &str {
    path.rsplit('/').next().unwrap_or(path)
}

fn under(path: &str, dir: &str) -> bool {
    dir == "/" || path == dir || path.starts_with(&format!("{dir}/"))
}

impl Ctx<'_> {
    pub fn path(&self, arg: &str) -> String {
        normalize(&self.home(), arg)
    }

    pub fn is_file(&self, path: &str) -> bool {
        self.state().files.contains_key(path) || self.virtual_file(path).is_some()
    }

    pub fn is_dir(&self, path: &str) -> bool {
        if BASE_DIRS.contains(&path) || self.state().directories.contains(path) {
            return true;
        }
        if self
            .state()
            .users
            .keys()
            .any(|user| User::home(user) == path)
        {
            return true;
        }
        if path == "/dev/disk/by-partlabel" {
            return !self.runtime().live;
        }
        let prefix = format!("{path}/");
        let has = |keys: &mut dyn Iterator<Item = &String>| {
            keys.next().is_some_and(|k| k.starts_with(&prefix))
        };
        has(&mut self.state().files.range(prefix.clone()..).map(|(k, _)| k))
            || has(&mut self.state().directories.range(prefix.clone()..))
    }

    pub fn exists(&self, path: &str) -> bool {
        self.is_file(path) || self.is_dir(path)
    }

    /// Files the kernel or systemd make up.
    fn virtual_file(&self, path: &str) -> Option<Vec<u8>> {
        match path {
            "/dev/null" => Some(Vec::new()),
            "/etc/hostname" => Some(format!("{}\n", self.state().hostname).into_bytes()),
            "/proc/cmdline" => Some(super::system::kernel_cmdline(self.machine()).into_bytes()),
            _ => storage::sys_block_file(self, path),
        }
    }

    fn read_only(&self, path: &str) -> bool {
        (under(path, "/usr") && !under(path, "/usr/local"))
            || under(path, "/boot")
            || under(path, "/sys")
            || under(path, "/proc")
            || (under(path, "/sysroot") && !self.runtime().sysroot_writable)
    }

    fn may_write(&self, path: &str) -> bool {
        if self.root {
            return true;
        }
        if let Some(file) = self.state().files.get(path) {
            return file.owner == self.user;
        }
        under(path, &self.home()) || under(path, "/tmp")
    }

    /// A file's bytes, with permission checks.
    pub fn read(&self, path: &str) -> Result<Vec<u8>, FsError> {
        if let Some(bytes) = self.virtual_file(path) {
            return Ok(bytes);
        }
        match self.state().files.get(path) {
            Some(file) => {
                let readable = self.root || file.owner == self.user || file.mode & 0o004 != 0;
                if readable {
                    Ok(file.content.0.clone())
                } else {
                    Err(FsError::Denied)
                }
            }
            None if self.is_dir(path) => Err(FsError::IsDir),
            None => Err(FsError::NotFound),
        }
    }

    /// Writes (or appends to) a file; a new file gets `mode` and the caller as owner.
    pub fn write(
        &mut self,
        path: &str,
        data: &[u8],
        append: bool,
        mode: u32,
    ) -> Result<(), FsError> {
        if path == "/dev/null" {
            return Ok(());
        }
        self.check_writable(path)?;
        if path == "/etc/hostname" {
            let text = String::from_utf8_lossy(data);
            self.state_mut().hostname = text.trim().to_string();
            return Ok(());
        }
        let owner = if self.root { "root" } else { self.user }.to_string();
        let state = self.state_mut();
        // New content is no longer the certificate `openssl` knew at this path.
        if !append {
            state.certificates.remove(path);
        }
        match state.files.get_mut(path) {
            Some(file) if append => file.content.0.extend_from_slice(data),
            Some(file) => {
                state.untrimmed_bytes += file.content.0.len() as u64;
                file.content.0 = data.to_vec();
            }
            None => {
                state
                    .files
                    .insert(path.to_string(), File::new(data.to_vec(), mode, &owner));
            }
        }
        Ok(())
    }

    pub fn check_writable(&self, path: &str) -> Result<(), FsError> {
        if self.read_only(path) {
            return Err(FsError::ReadOnly);
        }
        if self.is_dir(path) {
            return Err(FsError::IsDir);
        }
        let dir = parent(path);
        if self.state().files.contains_key(dir) {
            return Err(FsError::NotDir);
        }
        if !self.is_dir(dir) {
            return Err(FsError::NotFound);
        }
        if !self.may_write(path) {
            return Err(FsError::Denied);
        }
        Ok(())
    }

    /// Creates a directory and its parents.
    pub fn make_dirs(&mut self, path: &str) -> Result<(), FsError> {
        let mut current = String::new();
        for part in path.split('/').filter(|p| !p.is_empty()) {
            current = format!("{current}/{part}");
            if self.state().files.contains_key(&current) {
                return Err(FsError::NotDir);
            }
            if !self.is_dir(&current) {
                if self.read_only(&current) {
                    return Err(FsError::ReadOnly);
                }
                if !self.may_write(&current) {
                    return Err(FsError::Denied);
                }
                self.state_mut().directories.insert(current.clone());
            }
        }
        Ok(())
    }

    /// Removes a file (and the certificate known at its path).
    pub fn remove_file(&mut self, path: &str) -> Result<(), FsError> {
        let Some(file) = self.state().files.get(path) else {
            return Err(if self.is_dir(path) {
                FsError::IsDir
            } else {
                FsError::NotFound
            });
        };
        if self.read_only(path) {
            return Err(FsError::ReadOnly);
        }
        if !self.root && file.owner != self.user && !under(path, &self.home()) {
            return Err(FsError::Denied);
        }
        let state = self.state_mut();
        if let Some(file) = state.files.remove(path) {
            state.untrimmed_bytes += file.content.0.len() as u64;
        }
        state.certificates.remove(path);
        Ok(())
    }

    /// Files and explicit directories under `dir` (recursive), sorted.
    pub(super) fn entries_under(&self, dir: &str) -> Vec<String> {
        let prefix = if dir == "/" {
            "/".to_string()
        } else {
            format!("{dir}/")
        };
        let mut all: BTreeSet<String> = self
            .state()
            .files
            .range(prefix.clone()..)
            .map(|(k, _)| k)
            .take_while(|k| k.starts_with(&prefix))
            .cloned()
            .collect();
        all.extend(
            self.state()
                .directories
                .range(prefix.clone()..)
                .take_while(|k| k.starts_with(&prefix))
                .cloned(),
        );
        // Implicit parent directories of deeper entries.
        let implicit: Vec<String> = all
            .iter()
            .flat_map(|p| {
                let mut dirs = Vec::new();
                let mut d = parent(p);
                while d.len() > dir.len() && d.starts_with(&prefix) {
                    dirs.push(d.to_string());
                    d = parent(d);
                }
                dirs
            })
            .collect();
        all.extend(implicit);
        all.into_iter().collect()
    }
}

fn fail(program: &str, path: &str, err: FsError) -> Run {
    Run::fail(1, format!("{program}: {path}: {}", err.message()))
}

/// Parses an octal mode (`644`, `0644`).
pub fn parse_mode(text: &str) -> Option<u32> {
    if text.is_empty() || !text.bytes().all(|b| (b'0'..=b'7').contains(&b)) {
        return None;
    }
    u32::from_str_radix(text, 8).ok().filter(|m| *m <= 0o7777)
}

pub fn cat(ctx: &mut Ctx<'_>, args: &[String], stdin: &[u8]) -> Run {
    let mut run = Run::ok();
    let operands: Vec<&String> = args.iter().filter(|a| a.as_str() != "--").collect();
    if let Some(option) = operands.iter().find(|a| a.starts_with('-') && a.len() > 1) {
        return Run::fail(1, format!("cat: unsupported option {option}"));
    }
    if operands.is_empty() {
        return Run::out(stdin.to_vec());
    }
    for arg in operands {
        if arg == "-" {
            run.stdout.extend_from_slice(stdin);
            continue;
        }
        let path = ctx.path(arg);
        match ctx.read(&path) {
            Ok(bytes) => run.stdout.extend_from_slice(&bytes),
            Err(err) => {
                run.stderr
                    .extend_from_slice(format!("cat: {arg}: {}\n", err.message()).as_bytes());
                run.code = 1;
            }
        }
    }
    run
}

/// `sha256sum [FILE…]`: `<hex>  <name>` per operand, `<hex>  -` for stdin.
pub fn sha256sum(ctx: &mut Ctx<'_>, args: &[String], stdin: &[u8]) -> Run {
    use sha2::{Digest, Sha256};
    let line = |bytes: &[u8], name: &str| {
        let hex: String = Sha256::digest(bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{hex}  {name}\n")
    };
    if let Some(option) = args.iter().find(|a| a.starts_with('-') && a.len() > 1) {
        return Run::fail(1, format!("sha256sum: unsupported option {option}"));
    }
    if args.is_empty() {
        return Run::out(line(stdin, "-").into_bytes());
    }
    let mut run = Run::ok();
    for arg in args {
        let bytes = if arg == "-" {
            Ok(stdin.to_vec())
        } else {
            let path = ctx.path(arg);
            ctx.read(&path)
        };
        match bytes {
            Ok(bytes) => run.stdout.extend_from_slice(line(&bytes, arg).as_bytes()),
            Err(err) => {
                run.stderr
                    .extend_from_slice(format!("sha256sum: {arg}: {}\n", err.message()).as_bytes());
                run.code = 1;
            }
        }
    }
    run
}

pub fn tee(ctx: &mut Ctx<'_>, args: &[String], stdin: &[u8]) -> Run {
    let mut append = false;
    let mut files = Vec::new();
    for arg in args {
        match arg.as_str() {
            "-a" | "--append" => append = true,
            option if option.starts_with('-') && option.len() > 1 => {
                return Run::fail(1, format!("tee: unsupported option {option}"));
            }
            file => files.push(file),
        }
    }
    let mut run = Run::out(stdin.to_vec());
    for arg in files {
        let path = ctx.path(arg);
        if let Err(err) = ctx.write(&path, stdin, append, 0o644) {
            run.stderr
                .extend_from_slice(format!("tee: {arg}: {}\n", err.message()).as_bytes());
            run.code = 1;
        }
    }
    run
}

/// `install [-D] [-m MODE] [-o OWNER] [-g GROUP] SOURCE DEST` and `install -d [-m MODE] DIR…`.
pub fn install(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut mode = 0o755;
    let mut owner = None;
    let mut create_parents = false;
    let mut directories = false;
    let mut operands = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        let value = |iter: &mut std::slice::Iter<'_, String>| iter.next().cloned();
        match arg.as_str() {
            "-D" => create_parents = true,
            "-d" | "--directory" => directories = true,
            "-m" | "--mode" => match value(&mut iter).as_deref().and_then(parse_mode) {
                Some(m) => mode = m,
                None => return Run::fail(1, "install: invalid mode"),
            },
            "-o" | "--owner" => owner = value(&mut iter),
            "-g" | "--group" => {
                value(&mut iter);
            }
            a if a.starts_with("--mode=") => match parse_mode(&a[7..]) {
                Some(m) => mode = m,
                None => return Run::fail(1, "install: invalid mode"),
            },
            a if a.starts_with("-m") && a.len() > 2 => match parse_mode(&a[2..]) {
                Some(m) => mode = m,
                None => return Run::fail(1, "install: invalid mode"),
            },
            a if a.starts_with('-') => {
                return Run::fail(1, format!("install: unsupported option {a}"));
            }
            a => operands.push(a.to_string()),
        }
    }
    if directories {
        for dir in &operands {
            let path = ctx.path(dir);
            if let Err(err) = ctx.make_dirs(&path) {
                return Run::fail(
                    1,
                    format!(
                        "install: cannot create directory '{dir}': {}",
                        err.message()
                    ),
                );
            }
        }
        return Run::ok();
    }
    let [source, dest] = operands.as_slice() else {
        return Run::fail(1, "install: expected SOURCE DEST");
    };
    let data = match ctx.read(&ctx.path(source)) {
        Ok(data) => data,
        Err(err) => {
            return Run::fail(
                1,
                format!("install: cannot stat '{source}': {}", err.message()),
            );
        }
    };
    let path = ctx.path(dest);
    if create_parents && let Err(err) = ctx.make_dirs(parent(&path)) {
        return Run::fail(
            1,
            format!(
                "install: cannot create directory '{}': {}",
                parent(&path),
                err.message()
            ),
        );
    }
    // `install` replaces the file: new mode and owner even if it existed.
    if ctx.state().files.contains_key(&path) && ctx.may_write(&path) {
        ctx.state_mut().files.remove(&path);
    }
    if let Err(err) = ctx.write(&path, &data, false, mode) {
        return Run::fail(
            1,
            format!(
                "install: cannot create regular file '{dest}': {}",
                err.message()
            ),
        );
    }
    if let Some(file) = ctx.state_mut().files.get_mut(&path) {
        file.mode = mode;
        if let Some(owner) = owner {
            file.owner = owner;
        }
    }
    Run::ok()
}

pub fn base64(ctx: &mut Ctx<'_>, args: &[String], stdin: &[u8]) -> Run {
    let mut decode = false;
    let mut wrap = Some(76usize);
    let mut input = None;
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-d" | "--decode" => decode = true,
            "-i" | "--ignore-garbage" => {}
            "-w" => match iter.next().and_then(|w| w.parse::<usize>().ok()) {
                Some(w) => wrap = (w > 0).then_some(w),
                None => return Run::fail(1, "base64: invalid wrap size"),
            },
            a if a.starts_with("--wrap=") || (a.starts_with("-w") && a.len() > 2) => {
                let value = a.trim_start_matches("--wrap=").trim_start_matches("-w");
                match value.parse::<usize>() {
                    Ok(w) => wrap = (w > 0).then_some(w),
                    Err(_) => return Run::fail(1, "base64: invalid wrap size"),
                }
            }
            "-" => input = None,
            a if a.starts_with('-') => {
                return Run::fail(1, format!("base64: unsupported option {a}"));
            }
            file => input = Some(file.to_string()),
        }
    }
    let data = match input {
        Some(file) => match ctx.read(&ctx.path(&file)) {
            Ok(data) => data,
            Err(err) => return fail("base64", &file, err),
        },
        None => stdin.to_vec(),
    };
    if decode {
        return match guestcluster::guest::decode_base64(&data) {
            Ok(bytes) => Run::out(bytes),
            Err(_) => Run::fail(1, "base64: invalid input"),
        };
    }
    let encoded = BASE64.encode(&data);
    let mut out = String::new();
    match wrap {
        Some(width) => {
            for chunk in encoded.as_bytes().chunks(width) {
                out.push_str(&String::from_utf8_lossy(chunk));
                out.push('\n');
            }
        }
        None => {
            out.push_str(&encoded);
            out.push('\n');
        }
    }
    Run::out(out)
}

/// bash's builtin `echo`: leading `-n`/`-e`/`-E` flags, arguments joined by spaces.
pub fn echo(args: &[String]) -> Run {
    let mut newline = true;
    let mut rest = args;
    while let Some(flag) = rest.first() {
        let is_flag =
            flag.len() > 1 && flag.starts_with('-') && flag[1..].chars().all(|c| "neE".contains(c));
        if !is_flag {
            break;
        }
        if flag.contains('n') {
            newline = false;
        }
        rest = &rest[1..];
    }
    let mut out = rest.join(" ");
    if newline {
        out.push('\n');
    }
    Run::out(out)
}

pub fn bracket(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    match args.split_last() {
        Some((last, rest)) if last == "]" => test(ctx, rest),
        _ => Run::fail(2, "[: missing `]'"),
    }
}

/// `test` with one unary file/string test, a string comparison, or `!` before either.
pub fn test(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let (negate, args) = match args.split_first() {
        Some((bang, rest)) if bang == "!" => (true, rest),
        _ => (false, args),
    };
    let truth = match args {
        [] => Some(false),
        [s] => Some(!s.is_empty()),
        [op, operand] => {
            let path = ctx.path(operand);
            match op.as_str() {
                "-e" => Some(ctx.exists(&path)),
                "-f" => Some(ctx.is_file(&path)),
                "-d" => Some(ctx.is_dir(&path)),
                "-s" => Some(ctx.read(&path).is_ok_and(|b| !b.is_empty())),
                "-r" => Some(ctx.read(&path).is_ok()),
                "-w" => Some(ctx.exists(&path) && ctx.may_write(&path) && !ctx.read_only(&path)),
                "-L" | "-h" => Some(path.starts_with("/dev/disk/by-partlabel/")),
                "-n" => Some(!operand.is_empty()),
                "-z" => Some(operand.is_empty()),
                _ => None,
            }
        }
        [a, op, b] => match op.as_str() {
            "=" | "==" => Some(a == b),
            "!=" => Some(a != b),
            _ => None,
        },
        _ => None,
    };
    match truth {
        Some(t) if t != negate => Run::ok(),
        Some(_) => Run::ok().with_code(1),
        None => Run::fail(2, format!("test: unsupported expression {args:?}")),
    }
}

pub fn ls(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut long = false;
    let mut targets = Vec::new();
    for arg in args {
        if arg.starts_with('-') && arg.len() > 1 {
            long |= arg.contains('l');
        } else {
            targets.push(arg.clone());
        }
    }
    if targets.is_empty() {
        targets.push(".".to_string());
    }
    let mut run = Run::ok();
    let line = |ctx: &Ctx<'_>, path: &str, shown: &str| -> String {
        if !long {
            return format!("{shown}\n");
        }
        match ctx.state().files.get(path) {
            Some(file) => format!(
                "-{} 1 {} {} {} {shown}\n",
                mode_string(file.mode),
                file.owner,
                file.owner,
                file.content.0.len()
            ),
            None => format!("drwxr-xr-x 2 root root 0 {shown}\n"),
        }
    };
    for arg in targets {
        let path = ctx.path(&arg);
        if ctx.is_file(&path) {
            run.stdout.extend(line(ctx, &path, &arg).into_bytes());
        } else if ctx.is_dir(&path) {
            let children: BTreeSet<String> = ctx
                .entries_under(&path)
                .into_iter()
                .filter(|p| parent(p) == path)
                .collect();
            for child in children {
                run.stdout
                    .extend(line(ctx, &child, name(&child)).into_bytes());
            }
        } else {
            run.stderr.extend(
                format!("ls: cannot access '{arg}': No such file or directory\n").into_bytes(),
            );
            run.code = 2;
        }
    }
    run
}

fn mode_string(mode: u32) -> String {
    let mut s = String::new();
    for shift in [6, 3, 0] {
        let bits = (mode >> shift) & 7;
        s.push(if bits & 4 != 0 { 'r' } else { '-' });
        s.push(if bits & 2 != 0 { 'w' } else { '-' });
        s.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    s
}

pub fn mkdir(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut parents = false;
    let mut dirs = Vec::new();
    let mut iter = args.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-p" | "--parents" => parents = true,
            "-m" => {
                iter.next();
            }
            a if a.starts_with('-') => {
                return Run::fail(1, format!("mkdir: unsupported option {a}"));
            }
            a => dirs.push(a.to_string()),
        }
    }
    for dir in dirs {
        let path = ctx.path(&dir);
        if !parents {
            if ctx.exists(&path) {
                return Run::fail(
                    1,
                    format!("mkdir: cannot create directory '{dir}': File exists"),
                );
            }
            if !ctx.is_dir(parent(&path)) {
                return Run::fail(
                    1,
                    format!("mkdir: cannot create directory '{dir}': No such file or directory"),
                );
            }
        }
        if let Err(err) = ctx.make_dirs(&path) {
            return Run::fail(
                1,
                format!("mkdir: cannot create directory '{dir}': {}", err.message()),
            );
        }
    }
    Run::ok()
}

pub fn rm(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let mut force = false;
    let mut recursive = false;
    let mut targets = Vec::new();
    for arg in args {
        match arg.as_str() {
            "--force" => force = true,
            "--recursive" => recursive = true,
            a if a.starts_with('-') && a.len() > 1 && a[1..].chars().all(|c| "frR".contains(c)) => {
                force |= a.contains('f');
                recursive |= a.contains('r') || a.contains('R');
            }
            a if a.starts_with('-') && a.len() > 1 => {
                return Run::fail(1, format!("rm: unsupported option {a}"));
            }
            a => targets.push(a.to_string()),
        }
    }
    let mut run = Run::ok();
    for arg in targets {
        let path = ctx.path(&arg);
        let result = if ctx.state().files.contains_key(&path) {
            ctx.remove_file(&path)
        } else if ctx.is_dir(&path) {
            if recursive {
                remove_tree(ctx, &path)
            } else {
                Err(FsError::IsDir)
            }
        } else if force {
            Ok(())
        } else {
            Err(FsError::NotFound)
        };
        if let Err(err) = result {
            run.stderr
                .extend(format!("rm: cannot remove '{arg}': {}\n", err.message()).into_bytes());
            run.code = 1;
        }
    }
    run
}

/// `mv [-f] SOURCE DEST`: renames a file (not a directory), replacing DEST in one step, as
/// rename(2) does: no moment without a file at DEST.
pub fn mv(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let operands: Vec<&String> = args
        .iter()
        .filter(|a| !matches!(a.as_str(), "-f" | "--force"))
        .collect();
    if let Some(option) = operands.iter().find(|a| a.starts_with('-') && a.len() > 1) {
        return Run::fail(1, format!("mv: unsupported option {option}"));
    }
    let [source, dest] = operands.as_slice() else {
        return Run::fail(1, "mv: expected SOURCE DEST");
    };
    let (from, to) = (ctx.path(source), ctx.path(dest));
    let Some(file) = ctx.state().files.get(&from).cloned() else {
        let err = if ctx.is_dir(&from) {
            FsError::IsDir
        } else {
            FsError::NotFound
        };
        return Run::fail(1, format!("mv: cannot move '{source}': {}", err.message()));
    };
    if let Err(err) = ctx.check_writable(&to) {
        return Run::fail(1, format!("mv: cannot move to '{dest}': {}", err.message()));
    }
    let state = ctx.state_mut();
    let certificate = state.certificates.remove(&from);
    state.files.remove(&from);
    if let Some(old) = state.files.insert(to.clone(), file) {
        state.untrimmed_bytes += old.content.0.len() as u64;
    }
    state.certificates.remove(&to);
    if let Some(certificate) = certificate {
        state.certificates.insert(to, certificate);
    }
    Run::ok()
}

pub fn remove_tree(ctx: &mut Ctx<'_>, dir: &str) -> Result<(), FsError> {
    for entry in ctx.entries_under(dir) {
        if ctx.state().files.contains_key(&entry) {
            ctx.remove_file(&entry)?;
        } else {
            ctx.state_mut().directories.remove(&entry);
        }
    }
    ctx.state_mut().directories.remove(dir);
    Ok(())
}

pub fn chmod(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let operands: Vec<&String> = args.iter().filter(|a| a.as_str() != "-R").collect();
    let Some((mode, paths)) = operands.split_first() else {
        return Run::fail(1, "chmod: missing operand");
    };
    let Some(mode) = parse_mode(mode) else {
        return Run::fail(1, format!("chmod: only octal modes are simulated: {mode}"));
    };
    for arg in paths {
        let path = ctx.path(arg);
        if ctx.is_dir(&path) && !ctx.state().files.contains_key(&path) {
            continue;
        }
        let Some(file) = ctx.state().files.get(&path) else {
            return fail("chmod", arg, FsError::NotFound);
        };
        if !ctx.root && file.owner != ctx.user {
            return Run::fail(
                1,
                format!("chmod: changing permissions of '{arg}': Operation not permitted"),
            );
        }
        if let Some(file) = ctx.state_mut().files.get_mut(&path) {
            file.mode = mode;
        }
    }
    Run::ok()
}

pub fn chown(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let operands: Vec<&String> = args.iter().filter(|a| a.as_str() != "-R").collect();
    let Some((owner, paths)) = operands.split_first() else {
        return Run::fail(1, "chown: missing operand");
    };
    let owner = owner.split(':').next().unwrap_or_default().to_string();
    for arg in paths {
        let path = ctx.path(arg);
        if !ctx.exists(&path) {
            return fail("chown", arg, FsError::NotFound);
        }
        if !ctx.root {
            return Run::fail(
                1,
                format!("chown: changing ownership of '{arg}': Operation not permitted"),
            );
        }
        if let Some(file) = ctx.state_mut().files.get_mut(&path) {
            file.owner = owner.clone();
        }
    }
    Run::ok()
}

pub fn readlink(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let canonical = args
        .iter()
        .any(|a| matches!(a.as_str(), "-f" | "-e" | "-m"));
    let Some(arg) = args.iter().find(|a| !a.starts_with('-')) else {
        return Run::fail(1, "readlink: missing operand");
    };
    let path = ctx.path(arg);
    if let Some(device) = storage::partlabel_target(ctx, &path) {
        return if canonical {
            Run::out(format!("{device}\n"))
        } else {
            Run::out(format!("../../{}\n", name(&device)))
        };
    }
    if path.starts_with("/dev/disk/") {
        return Run::ok().with_code(1);
    }
    if canonical && (ctx.exists(&path) || ctx.is_dir(parent(&path))) {
        return Run::out(format!("{path}\n"));
    }
    Run::ok().with_code(1)
}

/// `find DIR [-maxdepth N] [-type f|d] [-name PATTERN] [-print|-delete]`.
pub fn find(ctx: &mut Ctx<'_>, args: &[String]) -> Run {
    let Some((start, rest)) = args.split_first() else {
        return Run::fail(1, "find: missing starting point");
    };
    let mut kind = None;
    let mut pattern = None;
    let mut delete = false;
    let mut max_depth = usize::MAX;
    let mut iter = rest.iter();
    while let Some(arg) = iter.next() {
        match arg.as_str() {
            "-type" => kind = iter.next().cloned(),
            "-name" => pattern = iter.next().cloned(),
            "-maxdepth" => match iter.next().and_then(|d| d.parse().ok()) {
                Some(d) => max_depth = d,
                None => return Run::fail(1, "find: invalid -maxdepth"),
            },
            "-delete" => delete = true,
            "-print" => {}
            other => return Run::fail(1, format!("find: unsupported expression {other}")),
        }
    }
    let root = ctx.path(start);
    if !ctx.exists(&root) {
        return Run::fail(1, format!("find: '{start}': No such file or directory"));
    }
    let depth = |p: &str| p[root.len()..].matches('/').count();
    let mut matches = Vec::new();
    let mut candidates = vec![root.clone()];
    candidates.extend(ctx.entries_under(&root));
    for path in candidates {
        let is_file = ctx.state().files.contains_key(&path);
        let kind_ok = match kind.as_deref() {
            Some("f") => is_file,
            Some("d") => !is_file,
            _ => true,
        };
        let name_ok = pattern
            .as_deref()
            .is_none_or(|p| glob_match(p, name(&path)));
        if kind_ok && name_ok && depth(&path) <= max_depth {
            matches.push(path);
        }
    }
    let mut run = Run::ok();
    for path in matches {
        if delete {
            if ctx.state().files.contains_key(&path) {
                if let Err(err) = ctx.remove_file(&path) {
                    run.stderr.extend(
                        format!("find: cannot delete '{path}': {}\n", err.message()).into_bytes(),
                    );
                    run.code = 1;
                }
            } else if path != root {
                ctx.state_mut().directories.remove(&path);
            }
        } else {
            run.stdout.extend(format!("{path}\n").into_bytes());
        }
    }
    run
}

/// Shell glob with `*` and `?`.
pub fn glob_match(pattern: &str, text: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let t: Vec<char> = text.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::guest::state::paths;

    #[test]
    fn agent_write_file_sequence_persists_content_and_mode() {
        let mut m = sealed();
        let out = run(
            &mut m,
            "sudo install -m 0644 -D /dev/null /etc/dnsmasq.d/crc-dnsmasq.conf",
        );
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert!(out.changed);
        let out = run(
            &mut m,
            "echo ZG9tYWluPWNyYy50ZXN0aW5nCg== | base64 --decode | sudo tee /etc/dnsmasq.d/crc-dnsmasq.conf",
        );
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert_eq!(stdout(&out), "domain=crc.testing\n");
        let file = &m.state.files["/etc/dnsmasq.d/crc-dnsmasq.conf"];
        assert_eq!(file.content.0, b"domain=crc.testing\n");
        assert_eq!((file.mode, file.owner.as_str()), (0o644, "root"));
    }

    #[test]
    fn mv_replaces_the_destination_in_one_step() {
        let mut m = sealed();
        assert_eq!(run(&mut m, "echo new | sudo tee /etc/a.new").code, 0);
        assert_eq!(run(&mut m, "echo old | sudo tee /etc/a").code, 0);
        let out = run(&mut m, "sudo mv -f /etc/a.new /etc/a");
        assert_eq!(out.code, 0, "{}", stderr(&out));
        assert_eq!(m.state.file("/etc/a"), Some(&b"new\n"[..]));
        assert!(!m.state.files.contains_key("/etc/a.new"));
        let out = run(&mut m, "sudo mv /etc/missing /etc/a");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("No such file"), "{}", stderr(&out));
        assert_eq!(run(&mut m, "mv /etc/a /etc/b").code, 1, "not root");
    }

    #[test]
    fn writes_without_sudo_are_denied_outside_home() {
        let mut m = sealed();
        let out = run(&mut m, "echo x | tee /etc/x");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("Permission denied"));
        assert!(!m.state.files.contains_key("/etc/x"));
        let out = run(&mut m, "echo x | tee notes.txt");
        assert_eq!(out.code, 0);
        assert!(m.state.files.contains_key("/home/core/notes.txt"));
    }

    #[test]
    fn reads_respect_modes() {
        let mut m = sealed();
        let out = run(&mut m, "cat /opt/kubeconfig");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("Permission denied"));
        let out = run(&mut m, "sudo cat /opt/kubeconfig");
        assert_eq!(out.code, 0);
        assert!(stdout(&out).contains("clusters:"));
        assert_eq!(run(&mut m, "cat /etc/os-release").code, 0);
        let out = run(&mut m, "cat /nope");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("No such file"));
    }

    #[test]
    fn tee_append_and_missing_parent() {
        let mut m = sealed();
        run(
            &mut m,
            "sudo install -m 0644 -D /dev/null /home/core/.ssh/authorized_keys",
        );
        run(
            &mut m,
            "echo a | sudo tee -a /home/core/.ssh/authorized_keys",
        );
        run(
            &mut m,
            "echo b | sudo tee -a /home/core/.ssh/authorized_keys",
        );
        assert_eq!(
            m.state.file("/home/core/.ssh/authorized_keys"),
            Some(&b"a\nb\n"[..])
        );
        let out = run(&mut m, "echo a | sudo tee /no/such/dir/file");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("No such file"));
    }

    #[test]
    fn read_only_trees_refuse_writes() {
        let mut m = sealed();
        let out = run(&mut m, "echo x | sudo tee /usr/lib/x");
        assert!(stderr(&out).contains("Read-only"));
        assert_eq!(run(&mut m, "echo x | sudo tee /usr/local/bin/x").code, 0);
    }

    #[test]
    fn base64_encodes_wrapped_and_decodes() {
        let mut m = sealed();
        let out = run(&mut m, "echo -n hello | base64");
        assert_eq!(stdout(&out), "aGVsbG8=\n");
        let out = run(&mut m, "echo '!!!' | base64 --decode");
        assert_eq!(out.code, 1);
        assert!(stderr(&out).contains("invalid input"));
    }

    #[test]
    fn test_checks_files_and_strings() {
        let mut m = sealed();
        assert_eq!(run(&mut m, "test -f /opt/kubeconfig").code, 0);
        assert_eq!(
            run(&mut m, "test -e /etc/dnsmasq.d/crc-dnsmasq.conf").code,
            1
        );
        assert_eq!(run(&mut m, "test -d /etc/dnsmasq.d").code, 0);
        assert_eq!(run(&mut m, "test ! -f /nope").code, 0);
        assert_eq!(run(&mut m, "[ a = a ]").code, 0);
        assert_eq!(run(&mut m, "test -q x").code, 2);
    }

    #[test]
    fn ls_mkdir_rm_and_find() {
        let mut m = sealed();
        assert_eq!(run(&mut m, "sudo mkdir -p /var/log/pods/a").code, 0);
        run(&mut m, "echo x | sudo tee /var/log/a.log");
        run(&mut m, "echo y | sudo tee /var/log/b.log");
        let out = run(&mut m, "ls /var/log");
        assert_eq!(stdout(&out), "a.log\nb.log\npods\n");
        let out = run(&mut m, "sudo find /var/log -type f -name '*.log'");
        assert_eq!(stdout(&out), "/var/log/a.log\n/var/log/b.log\n");
        assert_eq!(
            run(&mut m, "sudo find /var/log -name '*.log' -delete").code,
            0
        );
        assert_eq!(stdout(&run(&mut m, "ls /var/log")), "pods\n");
        assert_eq!(run(&mut m, "sudo rm /var/log/pods").code, 1);
        assert_eq!(run(&mut m, "sudo rm -rf /var/log/pods").code, 0);
        assert_eq!(run(&mut m, "ls /var/log/pods").code, 2);
        assert_eq!(run(&mut m, "sudo rm -f /nope").code, 0);
        assert_eq!(run(&mut m, "sudo rm /nope").code, 1);
        assert_eq!(run(&mut m, "mkdir /etc/x").code, 1);
    }

    #[test]
    fn removing_a_certificate_file_forgets_the_certificate() {
        let mut m = sealed();
        run(
            &mut m,
            &format!("sudo rm -f {}", paths::KUBELET_CLIENT_CERT),
        );
        assert!(
            !m.state
                .certificates
                .contains_key(paths::KUBELET_CLIENT_CERT)
        );
        assert!(m.state.untrimmed_bytes > 0);
    }

    #[test]
    fn chmod_chown_and_readlink() {
        let mut m = sealed();
        assert_eq!(run(&mut m, "sudo chmod 0600 /etc/os-release").code, 0);
        assert_eq!(m.state.files["/etc/os-release"].mode, 0o600);
        assert_eq!(run(&mut m, "chmod 0644 /etc/os-release").code, 1);
        assert_eq!(run(&mut m, "sudo chown core:core /etc/os-release").code, 0);
        assert_eq!(m.state.files["/etc/os-release"].owner, "core");
        let out = run(&mut m, "readlink -f /dev/disk/by-partlabel/root");
        assert_eq!(stdout(&out), "/dev/vda4\n");
        assert_eq!(
            run(&mut m, "readlink -f /dev/disk/by-partlabel/nope").code,
            1
        );
    }

    #[test]
    fn echo_flags_and_glob() {
        assert_eq!(super::echo(&["-n".into(), "a".into()]).stdout, b"a");
        assert_eq!(super::echo(&["-x".into()]).stdout, b"-x\n");
        assert!(super::glob_match("*.log", "a.log"));
        assert!(super::glob_match("a?c*", "abcdef"));
        assert!(!super::glob_match("*.log", "a.txt"));
    }

    #[test]
    fn hostname_file_is_the_hostname() {
        let mut m = sealed();
        assert_eq!(stdout(&run(&mut m, "cat /etc/hostname")), "crc\n");
        run(&mut m, "echo other | sudo tee /etc/hostname");
        assert_eq!(m.state.hostname, "other");
    }
}
