//! The end-to-end scripts give a real cluster the time a real build takes: `prove-build.sh`
//! writes its timeout into the bundle as `spec.build.deadline`, so a default shorter than the
//! product's own would fail a build that is merely slow.

use guestcluster::api::bundle::DEFAULT_BUILD_DEADLINE;
use guestcluster::api::duration::parse_duration;
use std::time::Duration;

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

/// What every deadline must leave on top of the real duration it covers.
const MARGIN: f64 = 1.25;

/// One deadline of the product against the real durations of what it waits for.
struct Fit {
    what: &'static str,
    budget: Duration,
    /// The real durations it covers, each named.
    covers: Vec<(&'static str, Duration)>,
}

impl Fit {
    fn new(what: &'static str, budget: Duration, covers: &[(&'static str, Duration)]) -> Self {
        Self {
            what,
            budget,
            covers: covers.to_vec(),
        }
    }

    fn real(&self) -> Duration {
        self.covers.iter().map(|(_, d)| *d).sum()
    }

    fn fits(&self) -> bool {
        self.budget.as_secs_f64() >= self.real().as_secs_f64() * MARGIN
    }
}

fn seconds(s: i64) -> Duration {
    Duration::from_secs(u64::try_from(s).expect("a positive deadline"))
}

/// The product's deadlines, probe budgets and settle checks against what a real cluster takes
/// (`sim::Timings::real`, each figure cited in `docs/simulation.md`). A deadline shorter than
/// the real duration it covers fails a build or a start that is merely slow; each must leave a
/// quarter on top.
#[test]
fn every_deadline_fits_what_a_real_cluster_takes_with_a_quarter_to_spare() {
    use guestcluster::contract::build_helper::{Settle, Step};
    use guestcluster::jobs::build_helper::WAITS;
    use guestcluster::resources::build::{DISK_DEADLINE_SECONDS, helper_deadline_seconds};

    let real = sim::Timings::real();
    let settle = guestcluster::resources::bundle::JobSettings::default().settle;
    let agent = guestcluster::agent::config::Settings::default().patiences;
    let helper = |step| seconds(helper_deadline_seconds(step));
    let gib = |n: u32, per: Duration| per * n;
    // SNC and `crc start` settle with three reads 30 s apart (snc-library.sh,
    // crc pkg/crc/cluster/status.go): what the helper does unless told otherwise.
    assert!(
        settle.checks >= Settle::UPSTREAM.checks && settle.interval >= Settle::UPSTREAM.interval,
        "the helper's default settle check {settle:?} is weaker than SNC's {:?}",
        Settle::UPSTREAM
    );
    let settled = ("three settled reads", settle.span());
    // The root disk of a CRC guest, copied in full at the worst.
    const DISK_GIB: u32 = 80;

    let install = [
        ("the live boot to bootkube", real.bootkube),
        ("bootstrap in place", real.install),
        ("the operators", real.operators),
        settled,
    ];
    let cluster_start = [("the operators after a boot", real.operators), settled];
    // The startup path's own CSR signer: the operator's wait before the kube-controller-manager
    // takes it, then a kubelet bootstrap (a cluster's own pace, bounded by the operators').
    let own_csr_signer = [("the new CSR signer propagated", real.csr_signer_propagation)];
    let rollout = [
        ("a MachineConfig rollout (reboot)", real.rollout),
        ("the operators after it", real.operators),
    ];
    let fits = [
        Fit::new(
            "the helper's SSH wait",
            WAITS.ssh,
            &[
                ("the VMI started", real.vm_start),
                ("the guest booted", real.boot),
            ],
        ),
        Fit::new("the install wait", WAITS.install, &install),
        Fit::new(
            "one install round (a whole streak of settled reads)",
            WAITS.install_round,
            &[settled, ("a failed read before it", settle.interval)],
        ),
        Fit::new(
            "the install helper Job",
            helper(Step::Install),
            &[install.as_slice(), &[settled]].concat(),
        ),
        Fit::new(
            "the settle wait after a boot",
            WAITS.certificates,
            &cluster_start,
        ),
        Fit::new("the rollout wait", WAITS.rollout, &rollout[..1]),
        Fit::new(
            "the customize helper Job",
            helper(Step::Customize),
            &[cluster_start.as_slice(), &rollout, &[settled]].concat(),
        ),
        Fit::new(
            "the seal helper Job (two rollouts)",
            helper(Step::Seal),
            &[rollout.as_slice(), &rollout].concat(),
        ),
        Fit::new(
            "the validation helper Job",
            helper(Step::Validate),
            &[
                &[("the clone booted", real.boot)],
                cluster_start.as_slice(),
                &own_csr_signer,
            ]
            .concat(),
        ),
        Fit::new(
            "the aged-boot helper Job",
            helper(Step::Aged),
            &[
                &[("the clone booted", real.boot)],
                cluster_start.as_slice(),
                &own_csr_signer,
            ]
            .concat(),
        ),
        Fit::new(
            "the startup path's API and operator waits",
            agent.api.deadline + agent.operators.deadline,
            &cluster_start,
        ),
        Fit::new(
            "the startup path's wait for its own CSR signer",
            agent.csr_signer.deadline,
            &own_csr_signer,
        ),
        Fit::new(
            "an instance's crc-agent Job",
            seconds(guestcluster::resources::instance::AGENT_DEADLINE_SECONDS),
            &[
                &[("the VMI started", real.vm_start), ("booted", real.boot)],
                cluster_start.as_slice(),
                &own_csr_signer,
            ]
            .concat(),
        ),
        Fit::new(
            "the disk Job",
            seconds(DISK_DEADLINE_SECONDS),
            &[
                ("its pod started", real.pod_start),
                ("the root disk copied", gib(DISK_GIB, real.clone)),
            ],
        ),
        Fit::new(
            "the build VM's shutdown grace",
            seconds(guestcluster::resources::profile::vm::BUILD_GRACE_SECONDS),
            &[("the guest shut down", real.shutdown)],
        ),
    ];

    // The whole build, stage by stage, at the upper end of each.
    let stage = |name, parts: &[Duration]| (name, parts.iter().sum::<Duration>());
    let boot = [real.vm_start, real.boot];
    let build = [
        stage(
            "Prepare: the installer Job and the live ISO",
            &[real.pod_start, gib(2, real.import)],
        ),
        stage(
            "Install: the generator boot",
            &[real.vm_start, real.boot, real.pod_start],
        ),
        stage("Install: the install boot", &install.map(|(_, d)| d)),
        stage(
            "Install: the cold restart",
            &[&[real.shutdown][..], &boot, &cluster_start.map(|(_, d)| d)].concat(),
        ),
        stage(
            "Customize",
            &[&rollout.map(|(_, d)| d)[..], &[settle.span()]].concat(),
        ),
        stage(
            "Seal",
            &[
                &rollout.map(|(_, d)| d)[..],
                &rollout.map(|(_, d)| d),
                &[real.shutdown],
            ]
            .concat(),
        ),
        stage("Publish", &[real.pod_start, gib(DISK_GIB, real.clone)]),
        stage(
            "Validate: the clone's first boot",
            &[
                &[gib(DISK_GIB, real.clone)][..],
                &boot,
                &cluster_start.map(|(_, d)| d),
            ]
            .concat(),
        ),
        stage(
            "Validate: the aged boot",
            &[&[real.shutdown][..], &boot, &cluster_start.map(|(_, d)| d)].concat(),
        ),
    ];
    let deadline = parse_duration(DEFAULT_BUILD_DEADLINE).expect("the default deadline parses");
    let whole = Fit::new("the build's default deadline", deadline, &build);

    let short: Vec<String> = fits
        .iter()
        .chain([&whole])
        .filter(|fit| !fit.fits())
        .map(|fit| {
            format!(
                "{}: {} min, but it covers {} min (×{MARGIN} = {:.0} min): {}",
                fit.what,
                fit.budget.as_secs() / 60,
                fit.real().as_secs() / 60,
                fit.real().as_secs_f64() * MARGIN / 60.0,
                fit.covers
                    .iter()
                    .map(|(what, d)| format!("{what} {} s", d.as_secs()))
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
        .collect();
    assert!(
        short.is_empty(),
        "deadlines too short:\n{}",
        short.join("\n")
    );
}
