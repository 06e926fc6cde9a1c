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
    /// Print the CRDs as YAML, or write one file per CRD into a directory.
    Crdgen {
        /// Write `<group>_<plural>.yaml` files here instead of printing to stdout.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Crdgen { out_dir } => crdgen(out_dir),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err}");
            ExitCode::FAILURE
        }
    }
}

fn crdgen(out_dir: Option<PathBuf>) -> Result<(), Box<dyn std::error::Error>> {
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
    Ok(())
}
