//! `guestcluster-sim`: the developer entry points that need the simulation or the embedded
//! control plane, kept out of the product binary.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// guestcluster's simulated management cluster: the demo and a control plane for poking at.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the whole flow on an embedded control plane with progress output.
    Demo {
        /// Keep everything running after the flow until Ctrl-C (default: when stdout is a terminal).
        #[arg(long)]
        keep_running: Option<bool>,
        /// The product binary that runs the Jobs' pods (default: `guestcluster` next to this
        /// program, where `cargo build -p guestcluster` puts it).
        #[arg(long, env = sim::product_bin::ENV)]
        guestcluster_bin: Option<PathBuf>,
        /// The kind of cluster to play: `openshift` (SecurityContextConstraints) or `kubernetes`.
        #[arg(long, default_value = "openshift", value_parser = parse_flavour)]
        flavour: sim::Flavour,
    },
    /// Developer tools.
    #[command(subcommand)]
    Dev(DevCommand),
}

#[derive(Subcommand)]
enum DevCommand {
    /// Start the embedded control plane (etcd, kube-apiserver, kube-controller-manager) with our
    /// CRDs installed, print its kubeconfig path, and run until Ctrl-C.
    Up,
}

fn init_logging(default_filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default_filter));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
}

fn parse_flavour(text: &str) -> Result<sim::Flavour, String> {
    sim::Flavour::parse(text).ok_or_else(|| format!("{text:?}: openshift or kubernetes"))
}

fn demo(
    keep_running: Option<bool>,
    guestcluster_bin: Option<PathBuf>,
    flavour: sim::Flavour,
) -> Result<(), Box<dyn std::error::Error>> {
    // The outcome is in the progress lines on stdout; logs only for what goes wrong.
    init_logging("warn");
    let options = sim::demo::Options {
        keep_running,
        guestcluster_bin,
        flavour,
        ..Default::default()
    };
    tokio::runtime::Runtime::new()?.block_on(sim::demo::run(options))?;
    Ok(())
}

fn dev_up() -> Result<(), Box<dyn std::error::Error>> {
    init_logging("info");
    tokio::runtime::Runtime::new()?.block_on(testenv::dev_up(Default::default()))?;
    Ok(())
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Demo {
            keep_running,
            guestcluster_bin,
            flavour,
        } => demo(keep_running, guestcluster_bin, flavour),
        Command::Dev(DevCommand::Up) => dev_up(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}
