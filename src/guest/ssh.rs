//! The SSH [`Guest`]: russh client, public-key auth with the bundle key, one session channel per
//! command, `direct-tcpip` channels for the tunnel to the guest's API server.

use std::sync::Arc;
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, ChannelStream, Disconnect};
use tokio::net::TcpStream;

use super::{Command, Guest, GuestError, Output};

/// How to reach a guest.
#[derive(Clone, Debug)]
pub struct SshOptions {
    /// Guest user (`core` on RHCOS).
    pub user: String,
    /// Budget for TCP connect + key exchange + authentication (upstream: 30 s dial timeout).
    pub connect_timeout: Duration,
    /// Budget for one command, `None` for no limit but the deadline.
    pub command_timeout: Option<Duration>,
    /// The step's deadline: no command runs past it, whatever its own budget.
    pub deadline: Option<tokio::time::Instant>,
    /// A keepalive every this long; after [`KEEPALIVE_MAX`] unanswered ones the connection is
    /// dropped, so a guest that stops answering mid-command ends the command, not the step.
    pub keepalive: Duration,
    /// The most output (stdout and stderr together) one command may return.
    pub max_output: usize,
}

/// Unanswered keepalives before a connection is given up.
pub const KEEPALIVE_MAX: usize = 4;

impl Default for SshOptions {
    fn default() -> Self {
        Self {
            user: "core".to_string(),
            connect_timeout: Duration::from_secs(30),
            command_timeout: None,
            deadline: None,
            keepalive: Duration::from_secs(15),
            max_output: 64 << 20,
        }
    }
}

/// An authenticated SSH connection to a guest.
pub struct SshGuest {
    handle: Handle<AcceptHostKey>,
    addr: String,
    command_timeout: Option<Duration>,
    deadline: Option<tokio::time::Instant>,
    max_output: usize,
}

/// russh client callbacks.
struct AcceptHostKey;

impl client::Handler for AcceptHostKey {
    type Error = russh::Error;

    /// The host key is not verified, as upstream's crc-agent does (`InsecureIgnoreHostKey`):
    /// a guest's host key is generated inside the guest on the bundle's first boot and copied
    /// into every clone, and nothing publishes it through a trusted channel. The connection
    /// stays on the pod network to the VMI we just checked by UID, and we authenticate with a
    /// key only the bundle's guests accept.
    async fn check_server_key(
        &mut self,
        _key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

impl SshGuest {
    /// Connects to `addr` (`host:port`) and authenticates `options.user` with `key`.
    pub async fn connect(
        addr: &str,
        key: PrivateKey,
        options: &SshOptions,
    ) -> Result<Self, GuestError> {
        let seconds = options.connect_timeout.as_secs();
        let budget = options.deadline.map_or(options.connect_timeout, |d| {
            options
                .connect_timeout
                .min(d.saturating_duration_since(tokio::time::Instant::now()))
        });
        tokio::time::timeout(budget, Self::connect_inner(addr, key, options))
            .await
            .map_err(|_| GuestError::Timeout {
                addr: addr.to_string(),
                seconds,
            })?
    }

    async fn connect_inner(
        addr: &str,
        key: PrivateKey,
        options: &SshOptions,
    ) -> Result<Self, GuestError> {
        let config = Arc::new(client::Config {
            nodelay: true,
            keepalive_interval: Some(options.keepalive),
            keepalive_max: KEEPALIVE_MAX,
            ..Default::default()
        });
        let mut handle = client::connect(config, addr, AcceptHostKey)
            .await
            .map_err(|e| GuestError::Connect {
                addr: addr.to_string(),
                reason: e.to_string(),
            })?;
        let key = PrivateKeyWithHashAlg::new(Arc::new(key), None);
        let auth = handle
            .authenticate_publickey(options.user.clone(), key)
            .await
            .map_err(|e| GuestError::Ssh(e.to_string()))?;
        if !auth.success() {
            return Err(GuestError::AuthRejected {
                user: options.user.clone(),
            });
        }
        Ok(Self {
            handle,
            addr: addr.to_string(),
            command_timeout: options.command_timeout,
            deadline: options.deadline,
            max_output: options.max_output,
        })
    }

    /// The address this connection was made to.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Runs a command with `input` on its stdin (then EOF).
    pub async fn run_with_input(
        &self,
        command: &Command,
        input: &[u8],
    ) -> Result<Output, GuestError> {
        self.run_with_reader(command, input).await
    }

    /// Runs a command with what `input` reads on its stdin (then EOF), sent as it is read, a
    /// channel window at a time: a large file never has to be in memory at once.
    pub async fn run_with_reader(
        &self,
        command: &Command,
        input: impl tokio::io::AsyncRead + Unpin + Send,
    ) -> Result<Output, GuestError> {
        let left = self
            .deadline
            .map(|d| d.saturating_duration_since(tokio::time::Instant::now()));
        let limit = match (self.command_timeout, left) {
            (Some(own), Some(left)) => Some(own.min(left)),
            (own, left) => own.or(left),
        };
        match limit {
            None => self.exec(command, input).await,
            Some(limit) => tokio::time::timeout(limit, self.exec(command, input))
                .await
                .map_err(|_| GuestError::CommandTimeout {
                    command: command.to_string(),
                    seconds: limit.as_secs(),
                })?,
        }
    }

    async fn exec(
        &self,
        command: &Command,
        input: impl tokio::io::AsyncRead + Unpin + Send,
    ) -> Result<Output, GuestError> {
        let ssh = |e: russh::Error| GuestError::Ssh(format!("`{command}`: {e}"));
        let mut channel = self.handle.channel_open_session().await.map_err(ssh)?;
        channel.exec(true, command.line()).await.map_err(ssh)?;
        // Nothing read, nothing sent: an empty input costs no message.
        channel.data(input).await.map_err(ssh)?;
        // EOF on stdin, as an SSH client with no input does: commands reading stdin finish.
        channel.eof().await.map_err(ssh)?;
        let mut output = Output::default();
        let mut status = None;
        while let Some(message) = channel.wait().await {
            if output.stdout.len() + output.stderr.len() > self.max_output {
                return Err(GuestError::OutputTooLarge {
                    command: command.to_string(),
                    limit: self.max_output,
                });
            }
            match message {
                ChannelMsg::Data { data } => output.stdout.extend_from_slice(&data),
                ChannelMsg::ExtendedData { data, ext: 1 } => output.stderr.extend_from_slice(&data),
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                ChannelMsg::Failure => {
                    return Err(GuestError::Ssh(format!("guest refused to run `{command}`")));
                }
                _ => {}
            }
        }
        output.status = status.ok_or_else(|| GuestError::NoExitStatus {
            command: command.to_string(),
        })?;
        Ok(output)
    }

    /// A TCP stream to `host:port` as seen from inside the guest (`direct-tcpip`): the guest
    /// resolves `host` with its own resolver, so `api.crc.testing:6443` reaches the guest's API
    /// server whatever the pod IP.
    pub async fn open_tunnel(
        &self,
        host: &str,
        port: u16,
    ) -> Result<ChannelStream<client::Msg>, GuestError> {
        let channel = self
            .handle
            .channel_open_direct_tcpip(host, u32::from(port), "127.0.0.1", 0)
            .await
            .map_err(|e| GuestError::Tunnel {
                host: host.to_string(),
                port,
                reason: e.to_string(),
            })?;
        Ok(channel.into_stream())
    }

    /// Whether the connection is gone (guest powered off, network cut).
    pub fn is_closed(&self) -> bool {
        self.handle.is_closed()
    }

    /// Closes the connection politely.
    pub async fn close(&self) {
        // Ignored: the peer may already be gone, which is the state we want anyway.
        let _ = self
            .handle
            .disconnect(Disconnect::ByApplication, "bye", "en")
            .await;
    }
}

impl Guest for SshGuest {
    async fn run_with_input(&self, command: &Command, input: &[u8]) -> Result<Output, GuestError> {
        SshGuest::run_with_input(self, command, input).await
    }
}

/// Waits until a TCP connection to `addr` succeeds (sshd listening), trying every `interval`
/// for at most `limit` (upstream: every 10 s for 5 min). The probe socket is closed at once.
pub async fn wait_for_port(
    addr: &str,
    interval: Duration,
    limit: Duration,
) -> Result<(), GuestError> {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let attempt = tokio::time::timeout(interval, TcpStream::connect(addr)).await;
        if let Ok(Ok(stream)) = attempt {
            drop(stream);
            return Ok(());
        }
        if tokio::time::Instant::now() + interval > deadline {
            return Err(GuestError::Timeout {
                addr: addr.to_string(),
                seconds: limit.as_secs(),
            });
        }
        tokio::time::sleep(interval).await;
    }
}
