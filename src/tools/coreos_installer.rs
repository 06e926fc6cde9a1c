//! `coreos-installer`, found on `PATH`: embedding an Ignition config into a live ISO.

use std::path::Path;
use std::time::Duration;

use super::run::{self, RunError};

/// The program name looked up on `PATH`.
pub const PROGRAM: &str = "coreos-installer";

/// Rewriting an ISO's embed area is local I/O on a ~1 GiB file.
const TIMEOUT: Duration = Duration::from_secs(10 * 60);

/// `coreos-installer iso ignition embed -f -i <ignition> -o <output> <iso>`: a copy of `iso`
/// with `ignition` embedded (replacing any embedded before).
pub async fn embed(ignition: &Path, iso: &Path, output: &Path) -> Result<(), RunError> {
    let (ignition, iso, output) = (
        ignition.display().to_string(),
        iso.display().to_string(),
        output.display().to_string(),
    );
    run::output(
        Path::new(PROGRAM),
        &[
            "iso", "ignition", "embed", "-f", "-i", &ignition, "-o", &output, &iso,
        ],
        TIMEOUT,
    )
    .await
    .map(drop)
}
