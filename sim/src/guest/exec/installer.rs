//! Running a file by its path, and `env NAME=VALUE… PROG ARGS`. The one kind of file a guest can
//! execute is the `openshift-install` launcher the fake `oc adm release extract` writes (streamed
//! in by the build): the guest runs the Rust-native fake installer ([`crate::installer::native`])
//! on its own file system, stamping certificates with **guest** time.

use std::collections::BTreeMap;

use super::{Ctx, Run, fs};
use crate::installer::{self, native};

/// `env [NAME=VALUE]… [PROG ARGS…]`: the assignments, then the command.
pub fn split_env(args: &[String]) -> (BTreeMap<String, String>, &[String]) {
    let mut env = BTreeMap::new();
    let mut rest = args;
    while let Some((first, tail)) = rest.split_first() {
        match first.split_once('=') {
            Some((name, value))
                if !name.is_empty()
                    && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') =>
            {
                env.insert(name.to_owned(), value.to_owned());
                rest = tail;
            }
            _ => break,
        }
    }
    (env, rest)
}

/// Executes the file at `program` (a path) with `args` and `env`.
pub fn exec_file(
    ctx: &mut Ctx<'_>,
    program: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
) -> Run {
    let path = ctx.path(program);
    if ctx.is_dir(&path) {
        return Run::fail(126, format!("bash: {program}: Is a directory"));
    }
    let Some(file) = ctx.state().files.get(&path).cloned() else {
        return Run::fail(127, format!("bash: {program}: No such file or directory"));
    };
    let executable = if ctx.root {
        file.mode & 0o111 != 0
    } else if file.owner == ctx.user {
        file.mode & 0o500 == 0o500
    } else {
        file.mode & 0o005 == 0o005
    };
    if !executable {
        return Run::fail(126, format!("bash: {program}: Permission denied"));
    }
    let Some(launcher) = installer::parse_launcher(&file.content.0) else {
        return Run::fail(
            126,
            format!(
                "bash: {program}: cannot execute: the simulated guest runs only the openshift-install launcher that `oc adm release extract` writes"
            ),
        );
    };
    let call = native::Invocation {
        launcher: &launcher,
        env,
        cwd: &ctx.home(),
        now: ctx.now.0,
        seed: native::fresh_seed(),
    };
    match native::run(&mut GuestFs { ctx }, &call, args) {
        Ok(stdout) => Run::out(stdout),
        Err(err) => Run::fail(err.exit_code(), err.to_string()),
    }
}

/// The guest's file system, with the caller's permissions.
struct GuestFs<'c, 'a> {
    ctx: &'c mut Ctx<'a>,
}

fn describe(path: &str, err: fs::FsError) -> String {
    format!("{path}: {}", err.message())
}

impl native::InstallFs for GuestFs<'_, '_> {
    fn read(&self, path: &str) -> Option<Vec<u8>> {
        self.ctx.read(path).ok()
    }

    fn is_file(&self, path: &str) -> bool {
        self.ctx.state().files.contains_key(path)
    }

    fn list_files(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        self.ctx
            .state()
            .files
            .range(prefix.clone()..)
            .map(|(path, _)| path)
            .take_while(|path| path.starts_with(&prefix))
            .filter_map(|path| path.strip_prefix(&prefix))
            .filter(|name| !name.contains('/'))
            .map(str::to_owned)
            .collect()
    }

    fn write(&mut self, path: &str, data: &[u8], mode: u32) -> Result<(), String> {
        self.ctx
            .make_dirs(fs::parent(path))
            .map_err(|e| describe(path, e))?;
        self.ctx
            .write(path, data, false, mode)
            .map_err(|e| describe(path, e))
    }

    fn make_dirs(&mut self, path: &str) -> Result<(), String> {
        self.ctx.make_dirs(path).map_err(|e| describe(path, e))
    }

    fn remove(&mut self, path: &str) -> Result<(), String> {
        if self.ctx.state().files.contains_key(path) {
            self.ctx.remove_file(path).map_err(|e| describe(path, e))
        } else if self.ctx.is_dir(path) {
            fs::remove_tree(self.ctx, path).map_err(|e| describe(path, e))
        } else {
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{GuestTime, Machine, Runtime, exec};
    use crate::guest::state::GuestState;
    use crate::installer::{LAUNCHER_MARKER, parse_record};

    const DIR: &str = "/var/tmp/guestcluster";

    fn launcher() -> String {
        format!(
            "#!/bin/sh\n{LAUNCHER_MARKER}\nSIM_INSTALL_RELEASE_IMAGE='quay.io/x/ocp-release:4.22.3-x86_64'\nSIM_INSTALL_RELEASE_VERSION='4.22.3'\nSIM_INSTALL_RELEASE_DIGEST='sha256:11'\nexport SIM_INSTALL_RELEASE_IMAGE\nexec '/sim/tools/libexec/openshift-install' \"$@\"\n"
        )
    }

    const CONFIG: &str = "apiVersion: v1\nbaseDomain: testing\nmetadata:\n  name: crc\nbootstrapInPlace:\n  installationDisk: /dev/vda\npullSecret: '{\"auths\":{}}'\nsshKey: 'ssh-ed25519 AAAA build'\n";

    fn live() -> Machine {
        let (state, _) = GuestState::live_environment(&GuestState::live_iso("{}")).unwrap();
        let mut state = state;
        state.users.insert(
            "core".into(),
            crate::guest::state::User {
                uid: 1000,
                password_hash: None,
                sudo: true,
            },
        );
        state.provision_key("core", KEY);
        Machine::power_on(state, Runtime::new(64 * GIB, -86_400, true))
    }

    fn ok(m: &mut Machine, now: i64, line: &str, stdin: &[u8]) -> String {
        let out = exec(m, GuestTime(now), "core", line, stdin);
        assert_eq!(out.code, 0, "{line}: {}", stderr(&out));
        stdout(&out)
    }

    #[test]
    fn the_extracted_installer_runs_in_the_guest_at_guest_time() {
        let mut m = live();
        let guest_now = NOW - 86_400;
        ok(
            &mut m,
            guest_now,
            &format!("sudo mkdir -p {DIR}/install"),
            b"",
        );
        ok(
            &mut m,
            guest_now,
            &format!("sudo tee {DIR}/openshift-install"),
            launcher().as_bytes(),
        );
        let run = format!(
            "sudo env OPENSHIFT_INSTALL_EXPERIMENTAL_DISABLE_IMAGE_POLICY=true OPENSHIFT_INSTALL_RELEASE_IMAGE_OVERRIDE=quay.io/x/ocp-release@sha256:22 {DIR}/openshift-install"
        );
        // Not executable yet.
        let out = exec(
            &mut m,
            GuestTime(guest_now),
            "core",
            &format!("{run} version"),
            b"",
        );
        assert_eq!(out.code, 126, "{}", stderr(&out));
        ok(
            &mut m,
            guest_now,
            &format!("sudo chmod 0755 {DIR}/openshift-install"),
            b"",
        );
        let version = ok(
            &mut m,
            guest_now,
            &format!("{DIR}/openshift-install version"),
            b"",
        );
        assert!(
            version.starts_with("openshift-install 4.22.3\n"),
            "{version}"
        );

        ok(
            &mut m,
            guest_now,
            &format!("sudo tee {DIR}/install/install-config.yaml"),
            CONFIG.as_bytes(),
        );
        // Without sudo the installer cannot write its directory.
        let out = exec(
            &mut m,
            GuestTime(guest_now),
            "core",
            &format!("env {DIR}/openshift-install create manifests --dir {DIR}/install"),
            b"",
        );
        assert_eq!(out.code, 1, "{}", stderr(&out));
        ok(
            &mut m,
            guest_now,
            &format!("{run} create manifests --dir {DIR}/install"),
            b"",
        );
        let root_ca = parse_record(
            m.state
                .file(&format!("{DIR}/install/tls/root-ca.crt"))
                .unwrap(),
        )
        .unwrap();
        assert_eq!(
            root_ca.not_before, guest_now,
            "stamped with the guest's clock"
        );

        let later = guest_now + 30;
        ok(
            &mut m,
            later,
            &format!("{run} create single-node-ignition-config --dir {DIR}/install"),
            b"",
        );
        let ignition = ok(
            &mut m,
            later,
            &format!("sudo cat {DIR}/install/bootstrap-in-place-for-live-iso.ign"),
            b"",
        );
        let value: serde_json::Value = serde_json::from_str(&ignition).unwrap();
        let files = crate::tools::ignition_files(&value).unwrap();
        assert_eq!(
            files["/opt/openshift/release-image"].contents,
            b"quay.io/x/ocp-release@sha256:22\n"
        );
        let signer =
            parse_record(&files["/opt/openshift/tls/kubelet-signer.crt"].contents).unwrap();
        assert_eq!(
            (signer.not_before, signer.not_after),
            (later, later + 86_400)
        );
        let kept = parse_record(&files["/opt/openshift/tls/root-ca.crt"].contents).unwrap();
        assert_eq!(kept, root_ca);
        let encoded = ok(
            &mut m,
            later,
            &format!("sudo base64 -w0 {DIR}/install/auth/kubeconfig"),
            b"",
        );
        assert!(!encoded.is_empty());
        ok(
            &mut m,
            later,
            &format!("sudo cat {DIR}/install/auth/kubeadmin-password"),
            b"",
        );
        assert!(
            !m.state
                .files
                .contains_key(&format!("{DIR}/install/install-config.yaml"))
        );
    }

    #[test]
    fn other_files_do_not_execute() {
        let mut m = sealed();
        let out = run(&mut m, "/usr/bin/missing");
        assert_eq!(out.code, 127);
        let out = run(&mut m, "sudo env A=1 /etc/os-release");
        assert_eq!(out.code, 126, "not executable");
        let out = run(&mut m, "env A=1 B=2");
        assert_eq!(stdout(&out), "A=1\nB=2\n");
        let out = run(&mut m, "env A=1 echo hi");
        assert_eq!(stdout(&out), "hi\n");
    }
}
