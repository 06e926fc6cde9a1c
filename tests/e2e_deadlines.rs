//! The end-to-end scripts give a real cluster the time a real build takes: `prove-build.sh`
//! writes its timeout into the bundle as `spec.build.deadline`, so a default shorter than the
//! product's own would fail a build that is merely slow.

use guestcluster::actors::lease::decide::parse_duration;
use guestcluster::api::bundle::DEFAULT_BUILD_DEADLINE;

/// The default of `TIMEOUT_MINUTES=${TIMEOUT_MINUTES:-N}` in a script.
fn default_timeout_minutes(script: &str) -> u64 {
    let path = format!("{}/hack/e2e/{script}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    text.lines()
        .find_map(|line| line.strip_prefix("TIMEOUT_MINUTES=${TIMEOUT_MINUTES:-"))
        .and_then(|rest| rest.strip_suffix('}'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{path} sets no TIMEOUT_MINUTES default"))
}

#[test]
fn the_build_script_waits_at_least_as_long_as_a_build_may_take() {
    let deadline = parse_duration(DEFAULT_BUILD_DEADLINE).expect("the default deadline parses");
    let minutes = default_timeout_minutes("prove-build.sh");
    assert!(
        minutes * 60 >= deadline.as_secs(),
        "prove-build.sh gives the build {minutes} min (its spec.build.deadline), less than the default deadline {DEFAULT_BUILD_DEADLINE}"
    );
}
