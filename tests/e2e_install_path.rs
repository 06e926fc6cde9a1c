//! `hack/e2e/prove-install-path.sh` on the simulated cluster: the five in-guest checks of the
//! build's install path, over the `virtctl ssh` stand-in (`tests/e2e/virtctl`), with its output
//! compared with `prove-install-path.expected` (see `support::e2e`).
//!
//! The script checks while the build runs Customize, as on a real cluster, where that stage's
//! MachineConfig rollouts take minutes. This binary's world gives a rollout two minutes, so the
//! checks never race Seal's power-off (the script deletes the bundle once they are done), and a
//! boot two seconds, so the script's one-second poll always sees the generator boot's VMI.
// Tests act as users and other controllers: they write directly, not through the operator's write path.
#![allow(clippy::disallowed_methods)]

mod support;

use std::time::Duration;

use support::e2e::run_script;
use support::world::world_with_timings;

#[tokio::test]
async fn prove_install_path_passes_on_the_simulated_cluster_as_its_expected_file_says() {
    let world = world_with_timings(|| sim::Timings {
        rollout: Duration::from_secs(120),
        // The script must see the generator boot's VMI: it polls once a second.
        boot: Duration::from_secs(2),
        ..sim::Timings::fast()
    });
    run_script(world, "prove-install-path.sh", &[("TIMEOUT_MINUTES", "20")]).await;
}
