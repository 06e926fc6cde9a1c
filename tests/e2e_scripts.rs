//! The real-cluster scripts in `hack/e2e/` run against the simulated cluster, with the control
//! plane's `kubectl` and the simulated router as the cluster's ingress (`HTTPS_PROXY`), and print
//! what their `.expected` files say: a script that no longer fits the operator, or an expected
//! output that no longer fits the script, fails here instead of on someone's real cluster.
//!
//! An `.expected` file is the script's output with placeholders: `#` lines are comments, `<…>`
//! (any text in angle brackets) stands for a non-empty value, `…` for any text. Its lines appear
//! in the output in order, with nothing else between them but `stage …` progress lines (one per
//! status message a poll sees), and each progress line fits one of the file's progress lines.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::path::{Path, PathBuf};

use support::build::PULL_SECRET;
use support::world::{OPERATOR_NS, world};

/// Whether output `line` fits expected `pattern`.
fn fits(pattern: &str, line: &str) -> bool {
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
fn is_progress(line: &str) -> bool {
    line.split_once("] ")
        .and_then(|(_, rest)| rest.split_once(' '))
        .is_some_and(|(_, rest)| rest.starts_with("stage "))
}

/// Where `output` departs from `expected`: `None` when the expected file's other lines appear in
/// order with nothing between them but progress, and every progress line fits one of its
/// progress lines. (Progress lines are samples of a poll: which messages a poll sees varies from
/// run to run, so none is required.)
fn departure(expected: &str, output: &str) -> Option<String> {
    let (progress, required): (Vec<&str>, Vec<&str>) = expected
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .partition(|l| is_progress(l));
    let mut next = 0;
    for line in output.lines() {
        if is_progress(line) {
            if !progress.iter().any(|p| fits(p, line)) {
                return Some(format!(
                    "a progress line fits none of the expected file's\n  {line}"
                ));
            }
        } else if required.get(next).is_some_and(|p| fits(p, line)) {
            next += 1;
        } else {
            let wanted = required.get(next).unwrap_or(&"(the end of the output)");
            return Some(format!(
                "unexpected line\n  {line}\nwhere the expected file says\n  {wanted}"
            ));
        }
    }
    required
        .get(next)
        .map(|p| format!("the output ended before\n  {p}"))
}

#[test]
fn expected_files_match_with_placeholders_and_any_progress() {
    let expected = "# a comment\n[s] <time> start <name>\n[s] <time> stage A: …\n[s] <time> PASS: size <n> bytes, …\n";
    let output = "[s] 10:00:00 start x\n[s] 10:00:01 stage A: one\n[s] 10:00:02 stage A: two\n[s] 10:00:04 PASS: size 8 bytes, fine\n";
    assert_eq!(departure(expected, output), None);
    let no_progress = "[s] 10:00:00 start x\n[s] 10:00:04 PASS: size 8 bytes, fine\n";
    assert_eq!(departure(expected, no_progress), None);
    let other_stage = "[s] 10:00:00 start x\n[s] 10:00:01 stage B: one\n";
    assert!(
        departure(expected, other_stage)
            .unwrap()
            .contains("fits none of the expected file's\n  [s] 10:00:01 stage B")
    );
    let short = "[s] 10:00:00 start x\n";
    assert!(
        departure(expected, short)
            .unwrap()
            .contains("ended before\n  [s] <time> PASS")
    );
    let foreign = "[s] 10:00:00 start x\n[s] 10:00:01 FAIL: no\n";
    assert!(departure(expected, foreign).unwrap().contains("FAIL: no"));
    assert!(!fits("[s] <time> start <name>", "[s] 10:00:00 start "));
    assert!(fits("a … b", "a  b"));
}

/// The file next to the scripts.
fn e2e(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("hack/e2e")
        .join(file)
}

#[tokio::test]
async fn prove_build_passes_on_the_simulated_cluster_as_its_expected_file_says() {
    let world = world();
    let cp = testenv::ControlPlane::shared()
        .await
        .expect("the shared control plane");
    let kubectl = cp.kubectl();
    let args: Vec<_> = kubectl.get_args().collect();
    assert_eq!(args.first().and_then(|a| a.to_str()), Some("--kubeconfig"));
    let pull_secret = world.root.join("e2e-pull-secret.json");
    std::fs::write(&pull_secret, PULL_SECRET).expect("write the pull secret file");

    let mut script = std::process::Command::new("bash");
    script
        .arg(e2e("prove-build.sh"))
        .env("KUBECTL", kubectl.get_program())
        .env("KUBECONFIG", args[1])
        // The cluster's ingress: the instances' Route hosts through the simulated router (the
        // management cluster's own address is loopback, which Go programs never proxy).
        .env("HTTPS_PROXY", format!("http://{}", world.router))
        .env("NAMESPACE", OPERATOR_NS)
        .env("RELEASE_IMAGE", "quay.io/example/ocp-release:4.22.3-x86_64")
        .env("PULL_SECRET_FILE", &pull_secret)
        // Small disks: the disk Job hashes every byte of the image, holes included.
        .env("GOLDEN_VOLUME_SIZE", "8Gi")
        .env("DISK_SIZE", "8Gi")
        .env("TIMEOUT_MINUTES", "20")
        .env("POLL_SECONDS", "1");
    let output = tokio::task::spawn_blocking(move || script.output())
        .await
        .expect("the script's thread")
        .expect("run bash");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "prove-build.sh failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    let expected =
        std::fs::read_to_string(e2e("prove-build.expected")).expect("read prove-build.expected");
    if let Some(departure) = departure(&expected, &stdout) {
        panic!(
            "prove-build.sh's output departs from prove-build.expected: {departure}\n\nthe output:\n{stdout}"
        );
    }
}
