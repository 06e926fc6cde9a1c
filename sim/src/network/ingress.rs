//! The network plugin's NetworkPolicy enforcement at a simulated guest's door. A real plugin
//! knows each packet's source pod by the network namespace it left; every simulated pod shares
//! the host's loopback, so the source is found the way `ss -p` finds a socket's owner: the
//! connecting socket's inode in `/proc/net/tcp`, the process holding it, and that process's
//! group, which the kubelet registered for the container it started ([`PodGroups`]). A
//! connection from a process outside every pod is the node's own, which no policy blocks.
//!
//! A refused connection is closed at once. A real plugin drops the packets, so a real client
//! waits for a timeout instead; either way nothing reaches the guest.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt};

use super::policy::{self, PodView, Source};
use guestcluster::kubevirt::labels;

/// Container process groups → the pod they belong to (namespace, name).
#[derive(Default)]
pub struct PodGroups {
    groups: Mutex<HashMap<i32, (u64, String, String)>>,
    serial: std::sync::atomic::AtomicU64,
}

/// A container's group, registered until dropped.
pub struct Registration {
    groups: Arc<PodGroups>,
    group: i32,
    serial: u64,
}

impl PodGroups {
    /// Registers process group `group` as pod `namespace/name`'s.
    pub fn register(self: &Arc<Self>, group: i32, namespace: &str, name: &str) -> Registration {
        let serial = self
            .serial
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.lock()
            .insert(group, (serial, namespace.to_owned(), name.to_owned()));
        Registration {
            groups: self.clone(),
            group,
            serial,
        }
    }

    fn pod_of(&self, group: i32) -> Option<(String, String)> {
        self.lock()
            .get(&group)
            .map(|(_, namespace, name)| (namespace.clone(), name.clone()))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i32, (u64, String, String)>> {
        // A plain map, valid after any panic in between.
        self.groups
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        // A reused group id may have been registered for another container since.
        let mut groups = self.groups.lock();
        if groups
            .get(&self.group)
            .is_some_and(|(s, ..)| *s == self.serial)
        {
            groups.remove(&self.group);
        }
    }
}

/// Decides, per accepted connection, whether the guest's launcher pod may receive it.
pub struct Ingress {
    client: Client,
    groups: Arc<PodGroups>,
}

/// The guest a connection is for: its launcher pod is found by the VMI's UID.
pub struct Door<'a> {
    pub namespace: &'a str,
    pub vmi_uid: &'a str,
}

impl Ingress {
    pub fn new(client: Client, groups: Arc<PodGroups>) -> Self {
        Self { client, groups }
    }

    /// Whether the connection `peer` → `local` may reach the guest behind `door`. An error
    /// (the API unreachable) refuses it: a plugin enforces the policies it last knew, and the
    /// simulation has no older view to fall back on.
    pub async fn admits(&self, door: &Door<'_>, local: SocketAddr, peer: SocketAddr) -> bool {
        match self.decide(door, local, peer).await {
            Ok(verdict) => verdict,
            Err(err) => {
                tracing::warn!(
                    namespace = door.namespace,
                    vmi_uid = door.vmi_uid,
                    %peer,
                    "simulated network policy: connection refused, its source could not be checked: {err}"
                );
                false
            }
        }
    }

    async fn decide(
        &self,
        door: &Door<'_>,
        local: SocketAddr,
        peer: SocketAddr,
    ) -> Result<bool, kube::Error> {
        let source = match socket_group(local, peer).and_then(|g| self.groups.pod_of(g)) {
            None => return Ok(true),
            Some((namespace, name)) => match self.pod_view(&namespace, &name).await? {
                Some(view) => Source::Pod(view),
                // Deleted meanwhile: its processes are being stopped.
                None => return Ok(false),
            },
        };
        let selector = format!("{}={}", labels::CREATED_BY, door.vmi_uid);
        let launchers = Api::<Pod>::namespaced(self.client.clone(), door.namespace)
            .list(&ListParams::default().labels(&selector))
            .await?;
        let Some(launcher) = launchers.items.first() else {
            return Ok(false);
        };
        let target = PodView {
            namespace: door.namespace.to_owned(),
            name: launcher.name_any(),
            labels: launcher.labels().clone(),
            ..Default::default()
        };
        let policies = Api::<NetworkPolicy>::namespaced(self.client.clone(), door.namespace)
            .list(&ListParams::default())
            .await?;
        let admitted = policy::admits(&policies.items, &target, &source, local.port());
        if !admitted {
            tracing::info!(
                namespace = door.namespace,
                vmi_uid = door.vmi_uid,
                port = local.port(),
                ?source,
                "simulated network policy: connection refused"
            );
        }
        Ok(admitted)
    }

    async fn pod_view(&self, namespace: &str, name: &str) -> Result<Option<PodView>, kube::Error> {
        let Some(pod) = Api::<Pod>::namespaced(self.client.clone(), namespace)
            .get_opt(name)
            .await?
        else {
            return Ok(None);
        };
        let namespace_labels = Api::<Namespace>::all(self.client.clone())
            .get_opt(namespace)
            .await?
            .map(|n| n.labels().clone())
            .unwrap_or_default();
        let ip = pod
            .status
            .as_ref()
            .and_then(|s| s.pod_ip.as_deref())
            .and_then(|ip| ip.parse().ok());
        Ok(Some(PodView {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            labels: pod.labels().clone(),
            namespace_labels,
            ip,
        }))
    }
}

/// The process group of the process holding the client end of the TCP connection `peer` →
/// `local`, or `None` when no process of this host holds it.
fn socket_group(local: SocketAddr, peer: SocketAddr) -> Option<i32> {
    let (SocketAddr::V4(local), SocketAddr::V4(peer)) = (local, peer) else {
        return None;
    };
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let inode = client_inode(&table, local, peer)?;
    let link = format!("socket:[{inode}]");
    for process in std::fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = process
            .file_name()
            .to_str()
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let Ok(fds) = std::fs::read_dir(process.path().join("fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|target| target.as_os_str() == link.as_str())
        });
        if holds {
            return process_group(pid);
        }
    }
    None
}

/// The inode of the socket whose local end is `peer` and remote end `local`, from the text of
/// `/proc/net/tcp` (addresses as the kernel's native-endian hex words, ports big-endian hex).
fn client_inode(table: &str, local: SocketAddrV4, peer: SocketAddrV4) -> Option<u64> {
    let parse = |field: &str| -> Option<SocketAddrV4> {
        let (ip, port) = field.split_once(':')?;
        let ip = u32::from_str_radix(ip, 16).ok()?;
        let port = u16::from_str_radix(port, 16).ok()?;
        Some(SocketAddrV4::new(Ipv4Addr::from(ip.to_ne_bytes()), port))
    };
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (own, remote, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
        (parse(own)? == peer && parse(remote)? == local)
            .then(|| inode.parse().ok())
            .flatten()
            .filter(|inode| *inode != 0)
    })
}

/// Field 5 of `/proc/<pid>/stat` (after the parenthesised command name, which may hold spaces).
fn process_group(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_client_end_of_a_connection_in_the_tcp_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n\
   0: 0900007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n\
   1: 0100007F:A1B2 0900007F:0016 01 00000000:00000000 00:00000000 00000000  1001        0 222 1 0 20 4 1 10 -1\n\
   2: 0900007F:0016 0100007F:A1B2 01 00000000:00000000 00:00000000 00000000     0        0 333 1 0 20 4 1 10 -1\n";
        let guest = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 9), 22);
        let client = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 0xA1B2);
        assert_eq!(client_inode(table, guest, client), Some(222));
        let other = SocketAddrV4::new(Ipv4Addr::new(127, 0, 0, 1), 1);
        assert_eq!(client_inode(table, guest, other), None);
    }

    #[tokio::test]
    async fn a_connection_of_this_process_belongs_to_its_group() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let local = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(local).await.unwrap();
        let (_server, peer) = listener.accept().await.unwrap();
        // SAFETY: getpgrp(2) has no preconditions.
        let own = unsafe { libc::getpgrp() };
        assert_eq!(socket_group(local, peer), Some(own));
        let groups = Arc::new(PodGroups::default());
        let registration = groups.register(own, "ops", "helper");
        assert_eq!(groups.pod_of(own), Some(("ops".into(), "helper".into())));
        // A later registration of the same group survives the earlier one's end.
        let again = groups.register(own, "ops", "next");
        drop(registration);
        assert_eq!(groups.pod_of(own), Some(("ops".into(), "next".into())));
        drop(again);
        assert_eq!(groups.pod_of(own), None);
    }
}
