//! The SSH client's limits against a server that misbehaves on purpose (a russh server in the
//! test): a command that is accepted and never answered ends at its own budget or at the step's
//! deadline, whichever comes first; a command that prints without end is stopped at the output
//! limit; the crc-agent's whole startup path against a guest that never answers ends at its
//! deadline. The simulated guest always answers, so these peers are written here.

use std::sync::Arc;
use std::time::Duration;

use guestcluster::agent::{Settings, Startup, startup_path};
use guestcluster::guest::cluster::{Patience, Patiences};
use guestcluster::guest::ssh::{SshGuest, SshOptions};
use guestcluster::guest::{Command, GuestError, keys};
use guestcluster::identity;
use russh::server::{self, Auth, ChannelOpenHandle, Msg, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};

/// Accepts any key; `hang` never answers a command, `flood` prints 4 MiB, anything else exits 0
/// — unless `mute`, when no command is ever answered (a guest whose sshd accepts and then hangs).
#[derive(Clone, Copy)]
struct Misbehaving {
    mute: bool,
}

impl server::Handler for Misbehaving {
    type Error = russh::Error;

    async fn auth_publickey(
        &mut self,
        _: &str,
        _: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(Auth::Accept)
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
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
        match data {
            _ if self.mute => {}
            b"hang" => {}
            b"flood" => {
                for _ in 0..64 {
                    session.data(channel, vec![b'x'; 64 << 10])?;
                }
                session.exit_status_request(channel, 0)?;
                session.close(channel)?;
            }
            _ => {
                session.exit_status_request(channel, 0)?;
                session.close(channel)?;
            }
        }
        Ok(())
    }
}

async fn server() -> String {
    serve(Misbehaving { mute: false }).await
}

async fn serve(handler: Misbehaving) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let config = Arc::new(server::Config {
        keys: vec![keys::generate_ed25519().unwrap()],
        auth_rejection_time: Duration::from_millis(10),
        auth_rejection_time_initial: Some(Duration::ZERO),
        ..Default::default()
    });
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let config = config.clone();
            tokio::spawn(async move {
                if let Ok(session) = server::run_stream(config, socket, handler).await {
                    let _ = session.await;
                }
            });
        }
    });
    addr
}

async fn connect(addr: &str, options: SshOptions) -> SshGuest {
    SshGuest::connect(addr, keys::generate_ed25519().unwrap(), &options)
        .await
        .expect("the test server accepts any key")
}

/// A guard against a hang, not a speed check.
const HANG_GUARD: Duration = Duration::from_secs(60);

#[tokio::test]
async fn an_unanswered_command_ends_at_its_budget_or_the_step_deadline() {
    let addr = server().await;
    let hang = Command::new(["hang"]);

    let own_budget = connect(
        &addr,
        SshOptions {
            // Room for a quick command on a loaded machine; the hung one takes all of it.
            command_timeout: Some(Duration::from_secs(3)),
            ..SshOptions::default()
        },
    )
    .await;
    assert!(
        own_budget
            .run_with_input(&Command::new(["ok"]), &[])
            .await
            .is_ok()
    );
    let err = tokio::time::timeout(HANG_GUARD, own_budget.run_with_input(&hang, &[]))
        .await
        .expect("hung past the command budget")
        .unwrap_err();
    assert!(matches!(err, GuestError::CommandTimeout { .. }), "{err}");

    // No budget of its own: the step's deadline still ends it (it also bounds the connect, so
    // it leaves room for a key exchange on a loaded machine).
    let deadline = connect(
        &addr,
        SshOptions {
            command_timeout: None,
            deadline: Some(tokio::time::Instant::now() + Duration::from_secs(8)),
            ..SshOptions::default()
        },
    )
    .await;
    let err = tokio::time::timeout(HANG_GUARD, deadline.run_with_input(&hang, &[]))
        .await
        .expect("hung past the step deadline")
        .unwrap_err();
    assert!(matches!(err, GuestError::CommandTimeout { .. }), "{err}");
}

#[tokio::test]
async fn output_past_the_limit_stops_the_command() {
    let addr = server().await;
    let guest = connect(
        &addr,
        SshOptions {
            max_output: 1 << 20,
            ..SshOptions::default()
        },
    )
    .await;
    let err = guest
        .run_with_input(&Command::new(["flood"]), &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, GuestError::OutputTooLarge { limit, .. } if limit == 1 << 20),
        "{err}"
    );
}

/// The crc-agent's startup path against a guest that accepts SSH and then never answers: it ends
/// with the step's reason at the run's deadline, even with a long budget per command.
#[tokio::test]
async fn a_guest_that_never_answers_ends_the_agent_at_its_deadline() {
    let addr = serve(Misbehaving { mute: true }).await;
    let quick = Patience::new(Duration::from_millis(50), Duration::from_secs(5));
    let settings = Settings {
        ssh_port: quick,
        ssh_connect_timeout: Duration::from_secs(5),
        ssh_command_timeout: Duration::from_secs(600),
        run_deadline: Duration::from_secs(8),
        patiences: Patiences::uniform(quick),
        ..Settings::default()
    };
    let key = keys::generate_ed25519().unwrap();
    let identity = identity::generate("api.example.com", 1_700_000_000).unwrap();
    let startup = Startup {
        addr,
        user: "core",
        guest_key: &key,
        bundle_key: None,
        identity: &identity,
        pull_secret: b"{}",
        api_hostname: "api.example.com",
        settings: &settings,
    };
    let err = tokio::time::timeout(HANG_GUARD, startup_path(&startup))
        .await
        .expect("the agent hung past its run deadline")
        .unwrap_err();
    assert_eq!(err.reason(), "GuestStepFailed", "{err}");
    assert!(err.to_string().contains("did not finish within"), "{err}");
}
