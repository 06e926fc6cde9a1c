//! `coreos-installer`, found on `PATH`: embedding an Ignition config into a live ISO.

use std::path::Path;
use std::time::Duration;

use super::run::{self, RunError};

/// The program name looked up on `PATH`.
pub const PROGRAM: &str = "coreos-installer";

/// Rewriting an ISO's embed area is local I/O on a ~1 GiB file.
const TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// `coreos-installer iso ignition embed -f -i <ignition> -o <output> <iso>`: a copy of `iso`
/// with `ignition` embedded (replacing any embedded before), readable by every user.
///
/// An output left by an interrupted earlier run is removed first: coreos-installer persists
/// its output without clobbering (`src/live/util.rs`).
///
/// coreos-installer writes a temporary file (mode `0600`) and renames it, so the output is its
/// writer's alone; the VM's QEMU reads it as another user (UID 107) through a read-only volume,
/// which the kubelet does not give the launcher's group (docs/decisions.md, "Pod users").
pub async fn embed(ignition: &Path, iso: &Path, output: &Path) -> Result<(), RunError> {
    embed_with(Path::new(PROGRAM), ignition, iso, output).await
}

/// [`embed`] with the program at `program`.
pub async fn embed_with(
    program: &Path,
    ignition: &Path,
    iso: &Path,
    output: &Path,
) -> Result<(), RunError> {
    use std::os::unix::fs::PermissionsExt as _;
    let (ignition_arg, iso_arg, output_arg) = (
        ignition.display().to_string(),
        iso.display().to_string(),
        output.display().to_string(),
    );
    // The output of an earlier run that was interrupted before its caller took it (the helper
    // renames it into place) is ours to replace: coreos-installer refuses to clobber it.
    match std::fs::remove_file(output) {
        Ok(()) => {}
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
        Err(source) => {
            return Err(RunError::LeftoverOutput {
                program: PROGRAM.to_owned(),
                path: output_arg,
                source,
            });
        }
    }
    run::output(
        program,
        &[
            "iso",
            "ignition",
            "embed",
            "-f",
            "-i",
            &ignition_arg,
            "-o",
            &output_arg,
            &iso_arg,
        ],
        TIMEOUT,
    )
    .await?;
    std::fs::set_permissions(output, std::fs::Permissions::from_mode(READABLE)).map_err(|source| {
        RunError::OutputMode {
            program: PROGRAM.to_owned(),
            path: output_arg,
            source,
        }
    })
}

/// The install ISO's mode: QEMU reads it as another user.
const READABLE: u32 = 0o644;
