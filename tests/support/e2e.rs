//! The real-cluster scripts of `hack/e2e/` on the simulated cluster: their environment (the
//! control plane's `kubectl`, the simulated router as the cluster's ingress, `virtctl ssh` by
//! the stand-in next to the tests) and the comparison of their output with their `.expected`
//! files.
//!
//! An `.expected` file is the script's output with placeholders: `#` lines are comments, `<…>`
//! (any text in angle brackets) stands for a non-empty value, `…` for any text. Its lines appear
//! in the output in order, with nothing else between them but `stage …` progress lines (one per
//! status message a poll sees), and each progress line fits one of the file's progress lines.
//! A line that starts with `? ` is optional: the output may have it there, or not.

use std::path::{Path, PathBuf};

use super::build::PULL_SECRET;
use super::world::{OPERATOR_NS, World};

/// Whether output `line` fits expected `pattern`.
pub fn fits(pattern: &str, line: &str) -> bool {
    /// One piece of a pattern: literal text, or a wildcard that must match at least `min` chars.
    enum Piece<'a> {
        Text(&'a str),
        Any { min: usize },
    }
    let mut pieces = Vec::new();
    let mut rest = pattern;
    while !rest.is_empty() {
        let angle = rest.find('<').filter(|&i| rest[i..].contains('>'));
        let ellipsis = rest.find('…');
        match (angle, ellipsis) {
            (Some(a), e) if e.is_none_or(|e| a < e) => {
                pieces.push(Piece::Text(&rest[..a]));
                pieces.push(Piece::Any { min: 1 });
                let close = rest[a..].find('>').map_or(rest.len(), |c| a + c + 1);
                rest = &rest[close..];
            }
            (_, Some(e)) => {
                pieces.push(Piece::Text(&rest[..e]));
                pieces.push(Piece::Any { min: 0 });
                rest = &rest[e + '…'.len_utf8()..];
            }
            _ => {
                pieces.push(Piece::Text(rest));
                rest = "";
            }
        }
    }
    // Backtracking over the wildcards: patterns are short.
    fn matches(pieces: &[Piece<'_>], line: &str) -> bool {
        match pieces.split_first() {
            None => line.is_empty(),
            Some((Piece::Text(text), rest)) => line
                .strip_prefix(text)
                .is_some_and(|line| matches(rest, line)),
            Some((Piece::Any { min }, rest)) => line
                .char_indices()
                .map(|(i, _)| i)
                .chain([line.len()])
                .filter(|&i| line[..i].chars().count() >= *min)
                .any(|i| matches(rest, &line[i..])),
        }
    }
    matches(&pieces, line)
}

/// A progress line the expected file need not list: `[<script>] HH:MM:SS stage …`.
pub fn is_progress(line: &str) -> bool {
    line.split_once("] ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .is_some_and(|(_, rest)| rest.starts_with("stage "))
}

/// Where `output` departs from `expected`: `None` when the expected file's other lines appear in
/// order with nothing between them but progress (optional lines may be missing), and every
/// progress line fits one of its progress lines. (Progress lines are samples of a poll: which
/// messages a poll sees varies from run to run, so none is required.)
pub fn departure(expected: &str, output: &str) -> Option<String> {
    let (progress, required): (Vec<&str>, Vec<&str>) = expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .partition(|l| is_progress(l));
    // Each expected line, and whether it may be missing.
    let required: Vec<(&str, bool)> = required
        .iter()
        .map(|l| match l.strip_prefix("? ") {
            Some(line) => (line, true),
            None => (*l, false),
        })
        .collect();
    let mut next = 0;
    for line in output.lines() {
        if is_progress(line) {
            if !progress.iter().any(|p| fits(p, line)) {
                return Some(format!(
                    "a progress line fits none of the expected file's\n  {line}"
                ));
            }
            continue;
        }
        // Optional lines the output does not have here are passed over.
        let found = required[next.min(required.len())..]
            .iter()
            .enumerate()
            .take_while(|(i, _)| *i == 0 || required[next + i - 1].1)
            .find(|(_, (pattern, _))| fits(pattern, line))
            .map(|(i, _)| next + i);
        match found {
            Some(at) => next = at + 1,
            None => {
                let wanted = required
                    .get(next)
                    .map_or("(the end of the output)", |(p, _)| p);
                return Some(format!(
                    "unexpected line\n  {line}\nwhere the expected file says\n  {wanted}"
                ));
            }
        }
    }
    required[next..]
        .iter()
        .find(|(_, optional)| !optional)
        .map(|(p, _)| format!("the output ended before\n  {p}"))
}

/// The file next to the scripts.
pub fn e2e(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hack/e2e")
        .join(file)
}

/// Runs `hack/e2e/<script>` against the world's cluster with `env` on top of the common
/// environment, and checks that it succeeds and prints what `<script minus .sh>.expected` says.
pub async fn run_script(world: &World, script: &str, env: &[(&str, &str)]) {
    let cp = testenv::ControlPlane::shared()
        .await
        .expect("the shared control plane");
    let kubectl = cp.kubectl();
    let args: Vec<_> = kubectl.get_args().collect();
    assert_eq!(args.first().and_then(|a| a.to_str()), Some("--kubeconfig"));
    let pull_secret = world.root.join(format!("{script}-pull-secret.json"));
    std::fs::write(&pull_secret, PULL_SECRET).expect("write the pull secret file");
    let virtctl = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/e2e/virtctl");

    let mut command = std::process::Command::new("bash");
    command
        .arg(e2e(script))
        .env("KUBECTL", kubectl.get_program())
        .env("KUBECONFIG", args[1])
        .env("VIRTCTL", &virtctl)
        // The cluster's ingress: the instances' Route hosts through the simulated router (the
        // management cluster's own address is loopback, which Go programs never proxy).
        .env("HTTPS_PROXY", format!("http://{}", world.router))
        .env("NAMESPACE", OPERATOR_NS)
        .env("RELEASE_IMAGE", "quay.io/example/ocp-release:4.22.3-x86_64")
        .env("PULL_SECRET_FILE", &pull_secret)
        .env("POLL_SECONDS", "1")
        .envs(env.iter().copied());
    let output = tokio::task::spawn_blocking(move || command.output())
        .await
        .expect("the script's thread")
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let expected_file = format!("{}.expected", script.trim_end_matches(".sh"));
    let expected = std::fs::read_to_string(e2e(&expected_file))
        .unwrap_or_else(|e| panic!("read {expected_file}: {e}"));
    if let Some(departure) = departure(&expected, &stdout) {
        panic!(
            "{script}'s output departs from {expected_file}: {departure}\n\nthe output:\n{stdout}"
        );
    }
}
