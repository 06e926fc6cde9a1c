use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// guestcluster: OpenShift Local (CRC) clusters as KubeVirt VMs, with in-cluster golden disk builds.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the operator: leader election, controllers, probes and metrics.
    Operator(Box<OperatorArgs>),
    /// Body of a bundle's prep Job: download, verify and extract a `.crcbundle`, convert its disk
    /// to raw `$GOLDEN_DIR/disk.img`, publish the key Secret and metadata ConfigMap. Settings come
    /// from the environment (see `guestcluster::jobs::bundle_prep`).
    BundlePrep {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Body of a bundle build's installer Job (stage Prepare): resolve the release, extract its
    /// installer, stage the install directory, fetch and verify the live ISO, embed the
    /// generator Ignition. Settings come from the environment (see
    /// `guestcluster::jobs::installer`).
    Installer {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Body of a bundle build's helper Job (stage Install), one per step and VMI: the generator
    /// boot's single-node Ignition, the install boot's wait and certificate steps, the kubelet
    /// certificates after the cold restart. Settings come from the environment (see
    /// `guestcluster::jobs::build_helper`).
    BuildHelper {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Body of a bundle build's disk Job (stage Publish): copy the stopped build VM's raw disk
    /// into the golden PVC sparsely, with its SHA-256 and virtual size in the same pass.
    /// Settings come from the environment (see `guestcluster::jobs::disk`).
    Disk {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Body of an instance's crc-agent Job: configure the freshly booted CRC guest and publish
    /// the handoff Secret. Settings come from the environment (see `guestcluster::agent`).
    Agent {
        #[command(flatten)]
        log: LogArgs,
    },
    /// Print the CRDs as YAML, or write one file per CRD into a directory.
    Crdgen {
        /// Write `<group>_<plural>.yaml` files here instead of printing to stdout.
        #[arg(long)]
        out_dir: Option<PathBuf>,
        /// Also write the Markdown API reference (e.g. `docs/api.md`) to this file.
        #[arg(long)]
        api_docs: Option<PathBuf>,
    },
}

#[derive(clap::Args)]
struct OperatorArgs {
    /// Namespace of the operator: golden PVCs, key Secrets, Jobs and the leader Lease live here.
    /// Defaults to $OPERATOR_NAMESPACE, then the pod's namespace, then `default`.
    #[arg(long)]
    namespace: Option<String>,
    /// Take part in leader election (keep on when more than one replica may run).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    leader_elect: bool,
    /// How long the leader Lease holds without renewal: how soon a standby takes over after the
    /// leader died without releasing it (whole seconds, e.g. `15s`).
    #[arg(long, default_value = "15s", value_parser = guestcluster::api::duration::parse_flag)]
    leader_elect_lease_duration: std::time::Duration,
    /// How long the leader keeps trying to renew before it steps down (ends the process).
    #[arg(long, default_value = "10s", value_parser = guestcluster::api::duration::parse_flag)]
    leader_elect_renew_deadline: std::time::Duration,
    /// The pause between attempts to acquire or renew the Lease.
    #[arg(long, default_value = "2s", value_parser = guestcluster::api::duration::parse_flag)]
    leader_elect_retry_period: std::time::Duration,
    /// Address of `/healthz` and `/readyz`; `0` disables them.
    #[arg(long, default_value = "0.0.0.0:8081")]
    health_probe_bind_address: String,
    /// Image of the Jobs the operator creates (bundle preparation, crc-agent, builds): the
    /// guestcluster image of this release.
    #[arg(long, env = "GUESTCLUSTER_JOB_IMAGE", default_value = guestcluster::resources::bundle::DEFAULT_JOB_IMAGE)]
    job_image: String,
    /// The pause between the three reads of a build guest's ClusterOperators that must all find
    /// them settled before a build step goes on (SNC's and `crc start`'s 30 s; shorter only
    /// for simulated guests). Unset: upstream's.
    #[arg(long, value_parser = guestcluster::api::duration::parse_flag)]
    build_settle_interval: Option<std::time::Duration>,
    /// Service account of the bundle prep Jobs (needs Secrets and ConfigMaps in the operator
    /// namespace).
    #[arg(
        long,
        env = "BUNDLE_PREP_SERVICE_ACCOUNT",
        default_value = "bundle-prep"
    )]
    bundle_prep_service_account: String,
    /// The platform, for who the Jobs' pods run as: `openshift` leaves their UID and fsGroup to
    /// the namespace's SecurityContextConstraints range, `kubernetes` sets both to the image's
    /// user 1001, `auto` picks `openshift` when the API server serves security.openshift.io.
    #[arg(long, env = "PLATFORM", value_enum, default_value_t = guestcluster::operator::platform::Platform::Auto)]
    platform: guestcluster::operator::platform::Platform,
    /// The `crcVersion`s a ClusterPool may have a CRCBundle created for: comma-separated
    /// patterns, `*` matching any characters (`4.22.*,4.21.3`). Empty (the default) allows none:
    /// pools then use bundles an administrator created (`crcBundleRef`, or one already named
    /// after the version).
    #[arg(long, env = "POOL_CRC_VERSIONS", default_value = "")]
    pool_crc_versions: String,
    /// StorageClass of the bundles created for pools; empty is the cluster's default class.
    #[arg(long, env = "POOL_BUNDLE_STORAGE_CLASS", default_value = "")]
    pool_bundle_storage_class: String,
    /// Seconds a bundle created for pools stays once no pool or instance refers to it.
    #[arg(long, default_value_t = guestcluster::actors::pool::bundles::DEFAULT_GC_GRACE.as_secs())]
    pool_bundle_gc_grace_seconds: u64,
    /// Address of `/metrics`; `0` disables it.
    #[arg(long, default_value = "0.0.0.0:8080")]
    metrics_bind_address: String,
    /// Release repositories builds may use, comma-separated: a repository, a prefix ending in
    /// `/`, or `*`. A release is code: its `openshift-install` runs with the pull secret.
    #[arg(long, default_value = guestcluster::tools::release::OPENSHIFT_RELEASE_REPOSITORIES)]
    build_release_repositories: String,
    /// Address of the read-only `/dashboard`; `0` disables it. It names every tenant's objects,
    /// so it listens on loopback (reach it with `kubectl port-forward`) unless set otherwise.
    #[arg(long, default_value = "127.0.0.1:8082")]
    dashboard_bind_address: String,
    /// Sustained API requests per second the operator sends at most (watches included);
    /// `0` turns the client-side limit off.
    #[arg(long, default_value_t = guestcluster::operator::api_limits::ApiLimits::DEFAULT_QPS)]
    kube_api_qps: f64,
    /// API requests the operator may send at once after a quiet period.
    #[arg(long, default_value_t = guestcluster::operator::api_limits::ApiLimits::DEFAULT_BURST)]
    kube_api_burst: u32,
    /// How often every object is looked at again without an event, covering any missed one. A
    /// look at an object whose inputs did not change sends no request.
    #[arg(long, default_value = "5m", value_parser = guestcluster::api::duration::parse_flag)]
    resync_period: std::time::Duration,
    /// Reconciles running at once across all kinds; the others queue in arrival order.
    #[arg(long, default_value_t = guestcluster::actors::root::DEFAULT_MAX_CONCURRENT_RECONCILES)]
    max_concurrent_reconciles: usize,
    #[command(flatten)]
    log: LogArgs,
}

#[derive(clap::Args)]
struct LogArgs {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

fn init_logging(args: &LogArgs) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // Colour only on a terminal: pod logs and files stay plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()));
    match args.log_format {
        LogFormat::Text => builder.init(),
        // One object per line; a line logged for an object carries its actor's span (`kind`,
        // `namespace`, `name`, `actor`) under `span`.
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_span_list(false)
            .init(),
    }
}

/// `0` (as the Go operator accepts) or an empty value disables a listener.
fn listen_addr(value: &str) -> Result<Option<SocketAddr>, Box<dyn std::error::Error>> {
    if value.is_empty() || value == "0" {
        return Ok(None);
    }
    // Accept Go-style `:8081` as all interfaces.
    let full = if value.starts_with(':') {
        format!("0.0.0.0{value}")
    } else {
        value.to_owned()
    };
    Ok(Some(full.parse().map_err(|e| {
        format!("invalid listen address {value:?}: {e}")
    })?))
}

fn operator(args: OperatorArgs) -> Result<(), Box<dyn std::error::Error>> {
    init_logging(&args.log);
    let options = guestcluster::operator::Options {
        namespace: args
            .namespace
            .unwrap_or_else(guestcluster::operator::namespace_from_env),
        leader_elect: args.leader_elect,
        leader_timing: guestcluster::operator::leader::Timing::new(
            args.leader_elect_lease_duration,
            args.leader_elect_renew_deadline,
            args.leader_elect_retry_period,
        )?,
        identity: guestcluster::operator::default_identity(),
        health_addr: listen_addr(&args.health_probe_bind_address)?,
        metrics_addr: listen_addr(&args.metrics_bind_address)?,
        dashboard_addr: listen_addr(&args.dashboard_bind_address)?,
        tree: guestcluster::actors::root::TreeConfig {
            max_concurrent_reconciles: args.max_concurrent_reconciles,
            resync: args.resync_period,
            ..Default::default()
        },
        jobs: guestcluster::resources::bundle::JobSettings {
            image: args.job_image,
            prep_service_account: args.bundle_prep_service_account,
            pod_users: Default::default(),
            settle: args.build_settle_interval.map_or(
                guestcluster::contract::build_helper::Settle::UPSTREAM,
                guestcluster::contract::build_helper::Settle::every,
            ),
            release_repositories: guestcluster::tools::release::ReleaseRepositories::parse(
                &args.build_release_repositories,
            ),
        },
        platform: args.platform,
        guests: guestcluster::actors::runtime::context::GuestSettings::from_env(),
        pool_bundles: guestcluster::actors::pool::bundles::PoolBundles {
            crc_versions: guestcluster::actors::pool::bundles::VersionPatterns::parse(
                &args.pool_crc_versions,
            ),
            storage_class: Some(args.pool_bundle_storage_class).filter(|s| !s.is_empty()),
            gc_grace: std::time::Duration::from_secs(args.pool_bundle_gc_grace_seconds),
        },
    };
    tokio::runtime::Runtime::new()?.block_on(async {
        let limits = guestcluster::operator::api_limits::ApiLimits {
            qps: args.kube_api_qps,
            burst: args.kube_api_burst,
        };
        let metrics = guestcluster::metrics::Metrics::default();
        let clients = guestcluster::operator::api_limits::clients(
            kube::Config::infer().await?,
            limits,
            &metrics,
        )?;
        tracing::info!(namespace = %options.namespace, leader_elect = options.leader_elect, "starting operator");
        guestcluster::operator::run(
            clients,
            options,
            metrics,
            guestcluster::operator::shutdown_signal(),
            |bound| tracing::info!(health = ?bound.health, metrics = ?bound.metrics, dashboard = ?bound.dashboard, "listening"),
        )
        .await?;
        Ok(())
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        // Reports its own outcome: the last stderr line and the termination message name the reason.
        Command::BundlePrep { log } => {
            init_logging(&log);
            return guestcluster::jobs::bundle_prep::main();
        }
        Command::Installer { log } => {
            init_logging(&log);
            return guestcluster::jobs::installer::main();
        }
        Command::BuildHelper { log } => {
            init_logging(&log);
            return guestcluster::jobs::build_helper::main();
        }
        Command::Disk { log } => {
            init_logging(&log);
            return guestcluster::jobs::disk::main();
        }
        Command::Agent { log } => {
            init_logging(&log);
            return guestcluster::agent::main();
        }
        Command::Operator(args) => operator(*args),
        Command::Crdgen { out_dir, api_docs } => crdgen(out_dir, api_docs),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn crdgen(
    out_dir: Option<PathBuf>,
    api_docs: Option<PathBuf>,
) -> Result<(), Box<dyn std::error::Error>> {
    match out_dir {
        Some(dir) => {
            for file in guestcluster::crdgen::write_all(&dir)? {
                eprintln!("wrote {}", dir.join(file.file_name).display());
            }
        }
        None => {
            for file in guestcluster::crdgen::render_all()? {
                print!("---\n{}", file.contents);
            }
        }
    }
    if let Some(path) = api_docs {
        let markdown = guestcluster::apidocs::render(&guestcluster::api::crds());
        std::fs::write(&path, markdown)
            .map_err(|err| format!("writing {}: {err}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}
