//! The real-cluster scripts in `hack/e2e/` run against the simulated cluster (see
//! `support::e2e`) and print what their `.expected` files say: a script that no longer fits the
//! operator, or an expected output that no longer fits the script, fails here instead of on
//! someone's real cluster. `prove-install-path.sh` needs other timings and runs in
//! `e2e_install_path`.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use support::e2e::{departure, fits, run_script};
use support::world::world;

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
    // Optional lines: there or not, but in their place.
    let optional =
        "[s] <time> start\n? [s] <time> waiting\n? [s] <time> still waiting\n[s] <time> done\n";
    for output in [
        "[s] 1 start\n[s] 2 done\n",
        "[s] 1 start\n[s] 2 waiting\n[s] 3 done\n",
        "[s] 1 start\n[s] 2 still waiting\n[s] 3 done\n",
        "[s] 1 start\n[s] 2 waiting\n[s] 3 still waiting\n[s] 4 done\n",
    ] {
        assert_eq!(departure(optional, output), None, "{output}");
    }
    assert!(
        departure(
            optional,
            "[s] 1 start\n[s] 2 still waiting\n[s] 3 waiting\n[s] 4 done\n"
        )
        .is_some()
    );
    assert!(
        departure(optional, "[s] 1 start\n[s] 2 waiting\n")
            .unwrap()
            .contains("ended before\n  [s] <time> done")
    );
    assert!(fits("a … b", "a  b"));
}

#[tokio::test]
async fn prove_build_passes_on_the_simulated_cluster_as_its_expected_file_says() {
    run_script(
        world(),
        "prove-build.sh",
        &[
            // Small disks: the disk Job hashes every byte of the image, holes included.
            ("GOLDEN_VOLUME_SIZE", "8Gi"),
            ("DISK_SIZE", "8Gi"),
            ("TIMEOUT_MINUTES", "20"),
        ],
    )
    .await;
}
