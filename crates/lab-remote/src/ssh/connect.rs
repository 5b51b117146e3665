//! Connecting: TCP (or a channel through the jump host), the key exchange
//! with the host key checked, the login, each with its deadline, and the
//! retrying wait for a node that is still booting.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use russh::client;
use russh::keys::{PrivateKey, PublicKey};

use super::error::{ConnectStage, SshError};
use super::keys::{HostKeyCheck, PinningHandler};
use super::{BulkNagle, ConnectFailure, JumpHost, SshSession, SshTarget};
use crate::ssh_login::{self, fingerprint};

impl SshSession {
    /// Connects once, accepting only the host key `pinned` (the one labctl
    /// generated for the node; there is no trust on first use).
    pub async fn connect(
        target: &SshTarget,
        key: Arc<PrivateKey>,
        pinned: PublicKey,
        timeout: Duration,
    ) -> Result<SshSession, SshError> {
        Self::connect_checked(target, key, HostKeyCheck::Pinned(pinned), timeout).await
    }

    /// Connects once, accepting the host keys `check` accepts, and logs in
    /// with `target.identity` when it names a key labctl can read, else
    /// through the user's ssh-agent (a passphrase-protected key file, or
    /// `target.agent`), else with `key` (see [`ssh_login::choose`]).
    pub async fn connect_checked(
        target: &SshTarget,
        key: Arc<PrivateKey>,
        check: HostKeyCheck,
        timeout: Duration,
    ) -> Result<SshSession, SshError> {
        let agent_socket = std::env::var_os("SSH_AUTH_SOCK")
            .filter(|s| !s.is_empty())
            .map(std::path::PathBuf::from);
        let login = ssh_login::choose(target.identity.as_deref(), target.agent, &key, agent_socket)
            .map_err(|problem| login_problem(target, problem))?;
        let config = Arc::new(client::Config {
            inactivity_timeout: None,
            keepalive_interval: Some(Duration::from_secs(15)),
            keepalive_max: 8,
            ..Default::default()
        });
        let presented = Arc::new(Mutex::new(None));
        let handler = PinningHandler {
            check: check.clone(),
            presented: presented.clone(),
        };
        let protocol = |source| SshError::Protocol {
            node: target.node.clone(),
            source,
        };
        // Through a jump host: its session first (its own errors name it),
        // then a channel from it to the node.
        let jump = match &target.jump {
            None => None,
            Some(j) => Some(Box::new(Self::connect_jump(target, j, key.clone(), timeout).await?)),
        };
        // How far the attempt got, for the error if it runs out of time.
        let stage = std::sync::atomic::AtomicU8::new(ConnectStage::Tcp as u8);
        let reached = |s: ConnectStage| stage.store(s as u8, std::sync::atomic::Ordering::Relaxed);
        let started = std::time::Instant::now();
        let timed_out = |stage: &std::sync::atomic::AtomicU8| SshError::AttemptTimedOut {
            node: target.node.clone(),
            addr: target.addr(),
            waited_s: started.elapsed().as_secs_f64().round() as u64,
            stage: ConnectStage::from_u8(stage.load(std::sync::atomic::Ordering::Relaxed)).waiting_for(),
        };
        let connected = tokio::time::timeout(timeout, async {
            if let Some(jump) = &jump {
                let stream = jump.open_tcp(&target.host, target.port).await;
                let stream = stream.map_err(|e| Err(jump_target_error(target, e)))?;
                reached(ConnectStage::Handshake);
                let handle = client::connect_stream(config, stream, handler).await.map_err(Ok)?;
                return Ok((handle, jump.nagle.clone()));
            }
            let stream = tokio::net::TcpStream::connect(target.addr())
                .await
                .map_err(|e| Ok(russh::Error::IO(e)))?;
            // Small messages go out at once (see BulkNagle for bulk streams).
            reached(ConnectStage::Handshake);
            stream.set_nodelay(true).map_err(|e| Ok(russh::Error::IO(e)))?;
            let socket = std::net::TcpStream::from(
                std::os::fd::AsFd::as_fd(&stream)
                    .try_clone_to_owned()
                    .map_err(|e| Ok(russh::Error::IO(e)))?,
            );
            let handle = client::connect_stream(config, stream, handler).await.map_err(Ok)?;
            let nagle = Arc::new(BulkNagle {
                socket,
                uploads: std::sync::atomic::AtomicUsize::new(0),
            });
            Ok::<_, Result<russh::Error, SshError>>((handle, nagle))
        })
        .await;
        let (mut handle, nagle) = match connected {
            Err(_) => return Err(timed_out(&stage)),
            Ok(Ok(handle)) => handle,
            Ok(Err(Err(e))) => return Err(e),
            Ok(Err(Ok(e))) => {
                let seen = presented.lock().expect("host key slot").clone();
                if let Some(seen) = seen {
                    if !check.accepts(&seen) {
                        return Err(match check {
                            HostKeyCheck::Pinned(pinned) => SshError::HostKeyChanged {
                                node: target.node.clone(),
                                pinned: fingerprint(&pinned),
                                presented: fingerprint(&seen),
                            },
                            other => SshError::HostKeyMismatch {
                                node: target.node.clone(),
                                addr: target.addr(),
                                expected: other.expected(),
                                presented: fingerprint(&seen),
                            },
                        });
                    }
                }
                return Err(protocol(e));
            }
        };
        // The login has its own deadline: a host can stall after the key
        // exchange too, and nothing else would end the wait.
        reached(ConnectStage::Login);
        let login_started = std::time::Instant::now();
        let outcome = tokio::time::timeout(
            timeout,
            ssh_login::authenticate(&mut handle, &target.user, login.clone()),
        )
        .await
        .map_err(|_| SshError::AttemptTimedOut {
            node: target.node.clone(),
            addr: target.addr(),
            waited_s: login_started.elapsed().as_secs_f64().round() as u64,
            stage: ConnectStage::Login.waiting_for(),
        })?
        .map_err(protocol)?;
        match outcome {
            ssh_login::Outcome::Success => {}
            ssh_login::Outcome::Agent(message) => {
                return Err(SshError::AgentLogin {
                    node: target.node.clone(),
                    message,
                })
            }
            ssh_login::Outcome::Rejected { tried } => {
                return Err(match (&login, &target.identity) {
                    (ssh_login::Login::Key(_), Some(identity)) => SshError::IdentityRejected {
                        node: target.node.clone(),
                        user: target.user.clone(),
                        identity: identity.display().to_string(),
                    },
                    (ssh_login::Login::Key(_), None) => SshError::AuthRejected {
                        node: target.node.clone(),
                        user: target.user.clone(),
                    },
                    (ssh_login::Login::Agent { .. }, _) => SshError::KeysRejected {
                        node: target.node.clone(),
                        user: target.user.clone(),
                        tried,
                    },
                });
            }
        }
        let host_key = presented
            .lock()
            .expect("host key slot")
            .clone()
            .expect("server key checked during key exchange");
        Ok(SshSession {
            node: target.node.clone(),
            handle,
            host_key,
            nagle,
            jump,
        })
    }

    /// The session to `target`'s jump host `jump`; a failure is a
    /// [`SshError::Jump`] naming the hop.
    async fn connect_jump(
        target: &SshTarget,
        jump: &JumpHost,
        key: Arc<PrivateKey>,
        timeout: Duration,
    ) -> Result<SshSession, SshError> {
        let hop = SshTarget {
            node: target.node.clone(),
            host: jump.host.clone(),
            port: jump.port,
            user: jump.user.clone(),
            identity: jump.identity.clone(),
            agent: target.agent,
            jump: None,
        };
        Box::pin(Self::connect_checked(&hop, key, jump.check.clone(), timeout))
            .await
            .map_err(|e| SshError::Jump {
                node: target.node.clone(),
                jump: jump.label(),
                source: Box::new(e),
            })
    }

    /// Connects, retrying with backoff until `deadline` passes. `still_alive`
    /// is asked between attempts, so a VM that died ends the wait at once with
    /// its own error. A changed host key or a refused key is never retried.
    pub async fn connect_with_retry<E, F>(
        target: &SshTarget,
        key: Arc<PrivateKey>,
        pinned: PublicKey,
        wait: Duration,
        mut still_alive: impl FnMut() -> F,
    ) -> Result<SshSession, ConnectFailure<E>>
    where
        F: std::future::Future<Output = Result<(), E>>,
    {
        // Neither a changed host key nor a refused key gets better by waiting.
        let final_error = SshError::is_final;
        let started = Instant::now();
        let attempt = || {
            let alive = still_alive();
            let (key, pinned) = (key.clone(), pinned.clone());
            async move {
                alive.await.map_err(ConnectFailure::NodeDied)?;
                let attempt_timeout =
                    Duration::from_secs(20).min(wait.saturating_sub(started.elapsed()).max(Duration::from_secs(1)));
                Self::connect(target, key, pinned, attempt_timeout)
                    .await
                    .map_err(ConnectFailure::Ssh)
            }
        };
        let backoff = ExponentialBuilder::new()
            .with_min_delay(Duration::from_millis(250))
            .with_factor(2.0)
            .with_max_delay(Duration::from_secs(2))
            .without_max_times();
        let result = attempt
            .retry(backoff)
            .when(|e| matches!(e, ConnectFailure::Ssh(e) if !final_error(e)) && started.elapsed() < wait)
            .await;
        match result {
            Err(ConnectFailure::Ssh(last)) if !final_error(&last) => Err(ConnectFailure::Ssh(SshError::Timeout {
                node: target.node.clone(),
                addr: target.addr(),
                waited_s: started.elapsed().as_secs(),
                last: last.to_string(),
            })),
            other => other,
        }
    }
}

/// Why no login can be tried for `target`, and what to do.
fn login_problem(target: &SshTarget, problem: ssh_login::LoginProblem) -> SshError {
    match problem {
        ssh_login::LoginProblem::Key { path, message } => SshError::IdentityUnusable {
            node: target.node.clone(),
            path: path.display().to_string(),
            message,
        },
        ssh_login::LoginProblem::NoKeyNoAgent => SshError::AgentLogin {
            node: target.node.clone(),
            message: "the node names no identity_file and no ssh-agent runs (SSH_AUTH_SOCK is not set)\n  fix: set `identity_file:` on the node, or start an ssh-agent and `ssh-add` the key that logs in to the host".into(),
        },
    }
}

/// A direct-tcpip channel the jump host could not open, as the error
/// naming both hops.
fn jump_target_error(target: &SshTarget, e: SshError) -> SshError {
    let jump = target.jump.as_ref().map(JumpHost::label).unwrap_or_default();
    let reason = match e {
        SshError::Protocol {
            source: russh::Error::ChannelOpenFailure(why),
            ..
        } => format!("channel open failed ({why:?})"),
        SshError::Protocol { source, .. } => source.to_string(),
        other => other.to_string(),
    };
    SshError::JumpTarget {
        node: target.node.clone(),
        jump,
        addr: target.addr(),
        reason,
    }
}
