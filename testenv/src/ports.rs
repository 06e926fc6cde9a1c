//! Loopback ports for processes that bind them later.
//!
//! A port a process is told to bind is chosen before it binds, so something else can take it in
//! between. A port from the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999
//! by default) is the worst choice: every outgoing connection on the machine (a watch, a probe)
//! may be given it, and a long-lived one keeps it. CI saw that: an operator restarted on the
//! metrics port it had used before found a client connection on it and could never bind again.
//! Ports below that range are never handed out by the kernel, only taken by explicit binds, so
//! picking one at random there leaves only the rare collision with another test's pick.

use std::hash::{BuildHasher, RandomState};
use std::io;
use std::net::TcpListener;

/// Lowest port considered: above the registered ports most services use.
const FIRST: u16 = 10_000;
/// Candidates tried below the ephemeral range before asking the kernel for any free port.
const TRIES: usize = 256;

/// A listener on a loopback port outside the kernel's ephemeral range, free when returned.
/// Hold it until every port of a set is chosen (so they differ), then drop it and start the
/// process that binds the port.
pub fn reserve() -> io::Result<TcpListener> {
    let end = ephemeral_start().max(FIRST + 1);
    let span = u64::from(end - FIRST);
    let random = RandomState::new();
    for attempt in 0..TRIES {
        let port = FIRST + (random.hash_one(attempt) % span) as u16;
        if let Ok(listener) = TcpListener::bind(("127.0.0.1", port)) {
            return Ok(listener);
        }
    }
    TcpListener::bind(("127.0.0.1", 0))
}

/// A free loopback port outside the kernel's ephemeral range (see [`reserve`]).
pub fn pick() -> io::Result<u16> {
    Ok(reserve()?.local_addr()?.port())
}

/// The first port of the kernel's ephemeral range, or Linux's default when it cannot be read.
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32_768)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_differ_while_held() {
        let held: Vec<TcpListener> = (0..8).map(|_| reserve().unwrap()).collect();
        let mut ports: Vec<u16> = held
            .iter()
            .map(|l| l.local_addr().unwrap().port())
            .collect();
        assert!(
            ports.iter().all(|p| (FIRST..ephemeral_start()).contains(p)),
            "{ports:?}"
        );
        ports.sort_unstable();
        ports.dedup();
        assert_eq!(ports.len(), held.len());
    }
}
