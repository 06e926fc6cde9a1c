//! The termination message of a Job container: the one line the operator reads back from the
//! pod's status (`<Reason>: message`) to say why a Job failed.

/// The kubelet keeps at most this much of a termination message.
pub const MAX: usize = 4096;
/// Where the kubelet reads it unless `terminationMessagePath` says otherwise.
pub const DEFAULT_PATH: &str = "/dev/termination-log";

/// Writes the termination message: to `TERMINATION_MESSAGE_PATH` when set, else to
/// `/dev/termination-log` only if it exists (the kubelet creates it). Errors are ignored: the
/// log line carries the same text.
pub fn write(message: &str) {
    let mut end = message.len().min(MAX);
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    let message = &message[..end];
    let _ = match std::env::var_os("TERMINATION_MESSAGE_PATH").filter(|p| !p.is_empty()) {
        Some(path) => std::fs::write(path, message),
        None => std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(DEFAULT_PATH)
            .and_then(|mut f| std::io::Write::write_all(&mut f, message.as_bytes())),
    };
}
