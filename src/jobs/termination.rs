//! Writes the termination message of a Job container ([`crate::contract::termination`]): the one
//! line the operator reads back from the pod's status to say why a Job failed.

use crate::contract::termination::{DEFAULT_PATH, ENV_PATH, MAX};

/// Writes the termination message: to `TERMINATION_MESSAGE_PATH` when set, else to
/// `/dev/termination-log` only if it exists (the kubelet creates it). Errors are ignored: the
/// log line carries the same text.
pub fn write(message: &str) {
    let mut end = message.len().min(MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let message = &message[..end];
    let _ = match std::env::var_os(ENV_PATH).filter(|p| !p.is_empty()) {
        Some(path) => std::fs::write(path, message),
        None => std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(DEFAULT_PATH)
            .and_then(|mut f| std::io::Write::write_all(&mut f, message.as_bytes())),
    };
}
