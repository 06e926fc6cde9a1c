//! The guest's sshd: public-key auth against the guest state (`~/.ssh/authorized_keys` and the
//! fragments in `~/.ssh/authorized_keys.d/`), `exec` requests run through the interpreter, `direct-tcpip`
//! channels resolved inside the guest. No passwords, shells, ptys or subsystems (no sftp), as
//! production never needs them.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::{PrivateKey, PublicKey};
use russh::server::{
    self, Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey,
};
use russh::{Channel, ChannelId, ChannelOpenFailure, Disconnect, MethodKind, MethodSet};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use super::exec::{self, Machine};
use super::shell::{self, Pipeline};
use super::state::User;
use super::{Guest, Inner, lock};
use crate::network::ingress::Door;

/// Most stdin a command may receive (file writes come as arguments, not stdin).
const MAX_STDIN: usize = 64 << 20;

/// A listening sshd.
pub(super) struct Sshd {
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<()>,
}

impl Sshd {
    /// Disconnects every session and tunnel and closes the listener; returns once the port is
    /// free again (a guest booting right after may bind the same address).
    pub(super) async fn stop(self) {
        let _ = self.stop.send(true);
        self.task.abort();
        // Cancelled is the expected outcome; the listener is dropped either way.
        let _ = self.task.await;
    }
}

pub(super) fn start(
    listener: TcpListener,
    host_key: PrivateKey,
    guest: Arc<Guest>,
    inner: Arc<Inner>,
) -> Sshd {
    let config = Arc::new(server::Config {
        keys: vec![host_key],
        methods: MethodSet::from(&[MethodKind::PublicKey][..]),
        // Constant-time rejection matters for real servers; here it only slows tests down.
        auth_rejection_time: Duration::from_millis(10),
        auth_rejection_time_initial: Some(Duration::ZERO),
        // OpenSSH has no idle timeout by default.
        inactivity_timeout: None,
        nodelay: true,
        ..Default::default()
    });
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(accept_loop(listener, config, guest, inner, stopped));
    Sshd { stop, task }
}

async fn accept_loop(
    listener: TcpListener,
    config: Arc<server::Config>,
    guest: Arc<Guest>,
    inner: Arc<Inner>,
    stopped: watch::Receiver<bool>,
) {
    loop {
        let socket = match listener.accept().await {
            Ok((socket, _)) => socket,
            Err(err) => {
                tracing::warn!(vmi_uid = %guest.spec.vmi_uid, "guest sshd accept: {err}");
                continue;
            }
        };
        let handler = Connection {
            guest: guest.clone(),
            inner: inner.clone(),
            user: None,
            channels: HashMap::new(),
            stopped: stopped.clone(),
        };
        tokio::spawn(serve(config.clone(), socket, handler, stopped.clone()));
    }
}

async fn serve(
    config: Arc<server::Config>,
    socket: TcpStream,
    handler: Connection,
    mut stopped: watch::Receiver<bool>,
) {
    let vmi_uid = handler.guest.spec.vmi_uid.clone();
    let door = Door {
        namespace: &handler.guest.spec.namespace,
        vmi_uid: &vmi_uid,
    };
    let (Ok(local), Ok(peer)) = (socket.local_addr(), socket.peer_addr()) else {
        return;
    };
    if let Some(ingress) = &handler.inner.ingress
        && !ingress.admits(&door, local, peer).await
    {
        return;
    }
    let session = match server::run_stream(config, socket, handler).await {
        Ok(session) => session,
        Err(err) => {
            tracing::debug!(vmi_uid = %vmi_uid, "guest sshd handshake: {err}");
            return;
        }
    };
    let handle = session.handle();
    tokio::select! {
        _ = until_stopped(&mut stopped) => {
            // Powered off: the peer sees the connection end.
            let _ = handle
                .disconnect(Disconnect::ByApplication, "system is going down".into(), "en".into())
                .await;
        }
        result = session => {
            if let Err(err) = result {
                tracing::debug!(vmi_uid = %vmi_uid, "guest ssh session ended: {err}");
            }
        }
    }
}

/// Resolves once sshd is told to stop (or its owner is gone).
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns must not live across an await (it is not `Send`).
    let _ = stopped.wait_for(|s| *s).await.is_ok();
}

/// Whether `key` may log in as `user`: a line of its `~/.ssh/authorized_keys` or of a file in
/// `~/.ssh/authorized_keys.d/` (where RHCOS keeps Ignition's keys), each file ignored when
/// group/world-writable or foreign-owned, as OpenSSH's StrictModes does.
pub(super) fn authorized(machine: &Machine, user: &str, key: &PublicKey) -> bool {
    if !machine.state.users.contains_key(user) {
        return false;
    }
    let ssh_dir = format!("{}/.ssh", User::home(user));
    let single = format!("{ssh_dir}/authorized_keys");
    let fragments = format!("{ssh_dir}/authorized_keys.d/");
    machine
        .state
        .files
        .iter()
        .filter(|(path, _)| {
            **path == single
                || path
                    .strip_prefix(&fragments)
                    .is_some_and(|name| !name.is_empty() && !name.contains('/'))
        })
        .filter(|(_, file)| file.mode & 0o022 == 0 && (file.owner == user || file.owner == "root"))
        .flat_map(|(_, file)| {
            String::from_utf8_lossy(&file.content.0)
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .filter_map(|line| parse_authorized_line(&line))
        .any(|allowed| allowed.key_data() == key.key_data())
}

/// One `authorized_keys` line, with or without leading options.
fn parse_authorized_line(line: &str) -> Option<PublicKey> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    PublicKey::from_openssh(line).ok().or_else(|| {
        let start = line.find(|c: char| c.is_whitespace())?;
        PublicKey::from_openssh(line[start..].trim()).ok()
    })
}

/// A session channel waiting for its command's stdin.
#[derive(Default)]
struct ExecChannel {
    stdin: Vec<u8>,
    eof: bool,
    waiting: Option<(String, Pipeline)>,
}

/// One SSH connection.
struct Connection {
    guest: Arc<Guest>,
    inner: Arc<Inner>,
    user: Option<String>,
    channels: HashMap<ChannelId, ExecChannel>,
    stopped: watch::Receiver<bool>,
}

impl Connection {
    fn check(&self, user: &str, key: &PublicKey) -> bool {
        let os = lock(&self.guest.os);
        os.as_ref()
            .is_some_and(|os| authorized(&os.machine, user, key))
    }

    async fn run(
        &mut self,
        channel: ChannelId,
        line: &str,
        pipeline: &Pipeline,
        session: &mut Session,
    ) -> Result<(), russh::Error> {
        let stdin = self
            .channels
            .get_mut(&channel)
            .map(|c| std::mem::take(&mut c.stdin))
            .unwrap_or_default();
        let user = self.user.clone().unwrap_or_default();
        tracing::trace!(vmi_uid = %self.guest.spec.vmi_uid, bytes = line.len(), "guest exec");
        // A unit stopped by an earlier command is down only once its hooks are done.
        let _ = self
            .guest
            .settling
            .subscribe()
            .wait_for(|running| *running == 0)
            .await;
        match self.inner.exec(&self.guest, &user, pipeline, &stdin) {
            None => {
                // Going down: the command never ran.
                session.close(channel)?;
            }
            Some(Ok(output)) => {
                if !output.stdout.is_empty() {
                    session.data(channel, output.stdout)?;
                }
                if !output.stderr.is_empty() {
                    session.extended_data(channel, 1, output.stderr)?;
                }
                self.inner.stop_units(&self.guest, &output.effects);
                session.exit_status_request(channel, output.code)?;
                session.eof(channel)?;
                session.close(channel)?;
                self.inner.after_command(&self.guest, output.effects);
            }
            Some(Err(err)) => {
                session.close(channel)?;
                self.inner
                    .crash(&self.guest, format!("writing guest state: {err}"));
            }
        }
        Ok(())
    }

    fn refuse(
        channel: ChannelId,
        message: &str,
        session: &mut Session,
    ) -> Result<(), russh::Error> {
        session.extended_data(channel, 1, format!("{message}\n").into_bytes())?;
        session.exit_status_request(channel, 2)?;
        session.eof(channel)?;
        session.close(channel)
    }
}

impl server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.check(user, offer.public_key) {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        if self.check(user, key.public_key) {
            self.user = Some(user.to_string());
            Ok(Auth::Accept)
        } else {
            tracing::info!(vmi_uid = %self.guest.spec.vmi_uid, user, "guest sshd refused a public key");
            Ok(Auth::reject())
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.insert(channel.id(), ExecChannel::default());
        // Everything arrives through the handler callbacks; an unread channel would block the
        // session once its buffer fills.
        drop(channel);
        reply.accept().await;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)?;
        let line = String::from_utf8_lossy(data).into_owned();
        let pipeline = match shell::parse(&line) {
            Ok(pipeline) => pipeline,
            Err(err) => return Self::refuse(channel, &format!("simulated guest: {err}"), session),
        };
        let ready =
            !exec::reads_stdin(&pipeline) || self.channels.get(&channel).is_none_or(|c| c.eof);
        if ready {
            self.run(channel, &line, &pipeline, session).await
        } else {
            if let Some(state) = self.channels.get_mut(&channel) {
                state.waiting = Some((line, pipeline));
            }
            Ok(())
        }
    }

    async fn data(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let too_much = match self.channels.get_mut(&channel) {
            Some(state) if state.stdin.len() + data.len() <= MAX_STDIN => {
                state.stdin.extend_from_slice(data);
                false
            }
            Some(_) => true,
            None => false,
        };
        if too_much {
            self.channels.remove(&channel);
            return Self::refuse(channel, "simulated guest: stdin too large", session);
        }
        Ok(())
    }

    async fn channel_eof(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let waiting = match self.channels.get_mut(&channel) {
            Some(state) => {
                state.eof = true;
                state.waiting.take()
            }
            None => None,
        };
        match waiting {
            Some((line, pipeline)) => self.run(channel, &line, &pipeline, session).await,
            None => Ok(()),
        }
    }

    async fn channel_close(
        &mut self,
        channel: ChannelId,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.remove(&channel);
        Ok(())
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)
    }

    async fn subsystem_request(
        &mut self,
        channel: ChannelId,
        _name: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_failure(channel)
    }

    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        let target = self
            .inner
            .tunnel_target(&self.guest, host_to_connect, port_to_connect);
        let tcp = match target {
            Some(addr) => TcpStream::connect(addr).await.ok(),
            None => None,
        };
        let Some(mut tcp) = tcp else {
            reply.reject(ChannelOpenFailure::ConnectFailed).await;
            return Ok(());
        };
        reply.accept().await;
        let mut stopped = self.stopped.clone();
        tokio::spawn(async move {
            let mut stream = channel.into_stream();
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut stream, &mut tcp) => {}
                _ = until_stopped(&mut stopped) => {}
            }
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::guest::exec::Runtime;
    use crate::guest::state::{File, GuestState};
    use guestcluster::guest::keys;

    fn line(key: &PrivateKey) -> String {
        keys::authorized_key_line(key.public_key(), "core").unwrap()
    }

    #[test]
    fn keys_from_authorized_keys_and_its_fragments() {
        let bundle = keys::generate_ecdsa_p256().unwrap();
        let added = keys::generate_ed25519().unwrap();
        let foreign = keys::generate_ed25519().unwrap();
        let state = GuestState::sealed_crc_at("4.22.1", &line(&bundle), 0);
        let mut m = Machine::power_on(state, Runtime::new(1 << 30, 0, false));
        assert!(authorized(&m, "core", bundle.public_key()));
        assert!(!authorized(&m, "root", bundle.public_key()));
        assert!(!authorized(&m, "core", added.public_key()));
        let file = format!("\n{}\n", line(&added));
        m.state.files.insert(
            "/home/core/.ssh/authorized_keys".into(),
            File::root(file.clone(), 0o644),
        );
        assert!(authorized(&m, "core", added.public_key()));
        assert!(!authorized(&m, "core", foreign.public_key()));
        // World-writable: ignored.
        m.state.files.insert(
            "/home/core/.ssh/authorized_keys".into(),
            File::root(file, 0o666),
        );
        assert!(!authorized(&m, "core", added.public_key()));
        // Ignition's fragment removed: the bundle key no longer opens the guest.
        m.state
            .files
            .remove("/home/core/.ssh/authorized_keys.d/ignition");
        assert!(!authorized(&m, "core", bundle.public_key()));
    }

    #[test]
    fn authorized_lines_may_carry_options() {
        let key = keys::generate_ed25519().unwrap();
        let simple = format!("no-pty,no-agent-forwarding {}", line(&key));
        assert!(parse_authorized_line(&simple).is_some());
        assert!(parse_authorized_line("# comment").is_none());
        assert!(parse_authorized_line("garbage").is_none());
    }
}
