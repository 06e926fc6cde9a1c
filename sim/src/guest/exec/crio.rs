//! CRI-O's storage across boots, as cri-o f954a17 keeps it:
//! - `crio` removes its clean-shutdown file when it starts and writes the "supported" marker
//!   beside it (`cmd/crio/main.go`); a clean stop syncs the storage and writes the file again
//!   (`server/server.go`, `Shutdown`). Paths: `pkg/config/config_unix.go`.
//! - `crio-wipe.service` runs `crio wipe` before `crio.service` (`contrib/systemd/crio-wipe.service`).
//!   With the marker present and the file missing — the last stop was not clean — it removes the
//!   whole storage directory, images included (`internal/criocli/wipe.go`,
//!   `internal/lib/container_server.go` `ShutdownWasUnclean`).
//!
//! A sealed disk cannot pull (its pull secret is `{}`), so a clone killed without a clean stop
//! would lose the images its next boot needs; SNC replaces the unit with a no-op
//! (`crio-wipe.service`, installed by `createdisk.sh`).

use super::Machine;
use crate::guest::state::File;

pub const CRIO: &str = "crio.service";
pub const WIPE_UNIT: &str = "crio-wipe.service";
/// Where an administrator's unit replaces the vendor's.
pub const WIPE_OVERRIDE: &str = "/etc/systemd/system/crio-wipe.service";
pub const CLEAN_SHUTDOWN: &str = "/var/lib/crio/clean.shutdown";
pub const CLEAN_SHUTDOWN_SUPPORTED: &str = "/var/lib/crio/clean.shutdown.supported";

/// Whether the unit that runs is still `crio wipe`: the vendor's, or an override whose
/// `ExecStart` runs crio with `wipe`.
pub fn wipes(machine: &Machine) -> bool {
    let Some(unit) = machine.state.file(WIPE_OVERRIDE) else {
        return true;
    };
    String::from_utf8_lossy(unit)
        .replace("\\\n", " ")
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ExecStart="))
        .any(|command| {
            let words: Vec<&str> = command.split_whitespace().collect();
            words.first().is_some_and(|w| w.ends_with("crio")) && words.contains(&"wipe")
        })
}

/// At boot, in unit order: `crio-wipe.service`, then `crio.service`.
pub fn boot(machine: &mut Machine) {
    if !machine.unit_active(CRIO) {
        return;
    }
    let unclean = machine.state.files.contains_key(CLEAN_SHUTDOWN_SUPPORTED)
        && !machine.state.files.contains_key(CLEAN_SHUTDOWN);
    if machine.unit_active(WIPE_UNIT) && wipes(machine) && unclean {
        tracing::warn!(
            "simulated CRI-O wipe: no {CLEAN_SHUTDOWN} after the last stop; the image store goes"
        );
        let state = &mut machine.state;
        state.image_cache.clear();
        state.containers.clear();
        state.journal.entry(WIPE_UNIT.to_owned()).or_default().push(format!(
            "File {CLEAN_SHUTDOWN} not found. Wiping storage directory /var/lib/containers/storage because of suspected unclean shutdown"
        ));
    }
    let state = &mut machine.state;
    state.files.remove(CLEAN_SHUTDOWN);
    state.files.insert(
        CLEAN_SHUTDOWN_SUPPORTED.to_owned(),
        File::root(Vec::new(), 0o644),
    );
}

/// A clean stop of the OS: a running CRI-O writes its clean-shutdown file.
pub fn shutdown(machine: &mut Machine) {
    if machine.unit_active(CRIO) {
        machine
            .state
            .files
            .insert(CLEAN_SHUTDOWN.to_owned(), File::root(Vec::new(), 0o644));
    }
}
