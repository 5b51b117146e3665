//! SSH to lab nodes with russh: key auth with the lab's own key, host keys
//! pinned before the first contact (labctl generates them: no trust on
//! first use), commands with exit status and stderr, SFTP upload and
//! download, and direct-tcpip channels (how the controller reaches each
//! node's agent, and a host behind one jump host: ssh's ProxyJump, with no
//! `ssh` binary spawned).

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::{ExponentialBuilder, Retryable};
use russh::client::{self, Handle};
use russh::keys::PublicKeyOrCertificate;
use russh::keys::{Algorithm, PrivateKey, PublicKey};
use russh::{ChannelMsg, Disconnect};

use crate::command::RemoteCommand;
use crate::ssh_login;

mod error;

use lab_state::{set_mode, StateError};

/// How much of a command's input is read and handed to the channel at once.
const FEED_CHUNK: usize = 256 * 1024;

pub use self::error::{ConnectStage, SshError};
/// A key's SHA256 fingerprint as `ssh-keygen -l` prints it (`SHA256:...`).
pub use crate::ssh_login::fingerprint;

/// Where and as whom to reach a node.
#[derive(Debug, Clone)]
pub struct SshTarget {
    /// The node's name (for messages).
    pub node: String,
    /// Host to connect to.
    pub host: String,
    /// TCP port.
    pub port: u16,
    /// Login user.
    pub user: String,
    /// The private key to log in with instead of the lab's own key (a host
    /// that exists, provider ssh). A passphrase-protected one logs in
    /// through the user's ssh-agent.
    pub identity: Option<std::path::PathBuf>,
    /// Without `identity`: log in with the user's ssh-agent's keys instead
    /// of the lab's own key (a host that exists and names no key file).
    pub agent: bool,
    /// The one jump host the connection goes through (ssh's ProxyJump).
    pub jump: Option<JumpHost>,
}

/// A jump host (one hop): the node's TCP connection is a direct-tcpip
/// channel of an SSH session to it.
#[derive(Debug, Clone)]
pub struct JumpHost {
    /// Its host.
    pub host: String,
    /// Its SSH port.
    pub port: u16,
    /// Login user there.
    pub user: String,
    /// The private key to log in with there.
    pub identity: Option<std::path::PathBuf>,
    /// Which of its host keys are accepted.
    pub check: HostKeyCheck,
}

impl JumpHost {
    /// `user@host:port`.
    pub fn label(&self) -> String {
        format!("{}@{}:{}", self.user, self.host, self.port)
    }
}

impl SshTarget {
    /// `host:port`.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }

    /// The target of a node the lab's state records, with its jump host
    /// (whose recorded key is the only one accepted).
    pub fn recorded(node: &lab_state::NodeState) -> SshTarget {
        SshTarget {
            node: node.name.clone(),
            host: node.ssh_host.clone(),
            port: node.ssh_port,
            user: node.ssh_user.clone(),
            identity: node.ssh_identity.clone(),
            agent: node.ssh_agent,
            jump: node.ssh_jump.as_ref().map(|j| JumpHost {
                host: j.host.clone(),
                port: j.port,
                user: j.user.clone(),
                identity: j.identity.clone(),
                check: HostKeyCheck::AnyOf {
                    keys: parse_public(&j.host_key).into_iter().collect(),
                    source: "the jump host key recorded in the lab's state".into(),
                },
            }),
        }
    }
}

/// Loads the lab's key, creating it (ed25519, mode 0600) on first use.
pub fn load_or_create_key(path: &Path) -> Result<PrivateKey, SshError> {
    let key_err = |message: String| SshError::Key {
        path: path.display().to_string(),
        message,
    };
    if path.exists() {
        return russh::keys::load_secret_key(path, None).map_err(|e| key_err(e.to_string()));
    }
    let key = PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).map_err(|e| key_err(e.to_string()))?;
    let pem = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .map_err(|e| key_err(e.to_string()))?;
    lab_state::write_atomic(path, pem.as_bytes(), 0o600).map_err(|e: StateError| key_err(e.to_string()))?;
    let public = key.public_key().to_openssh().map_err(|e| key_err(e.to_string()))?;
    let pub_path = path.with_extension("pub");
    std::fs::write(&pub_path, format!("{public} labctl\n")).map_err(|e| key_err(e.to_string()))?;
    set_mode(&pub_path, 0o644).map_err(|e| key_err(e.to_string()))?;
    Ok(key)
}

/// A node's SSH host key pair as providers hand it over: loaded from `path`,
/// or generated there (ed25519, mode 0600) on first use.
pub fn load_or_create_host_key(path: &Path) -> Result<(String, String), SshError> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| SshError::Key {
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
        set_mode(dir, 0o700).map_err(|e| SshError::Key {
            path: dir.display().to_string(),
            message: e.to_string(),
        })?;
    }
    let key = load_or_create_key(path)?;
    let private = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .map_err(|e| SshError::Key {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    Ok((private.to_string(), public_line(key.public_key())))
}

/// The OpenSSH public line of a key.
pub fn public_line(key: &PublicKey) -> String {
    key.to_openssh().unwrap_or_default()
}

/// The host key `node` must present: its recorded OpenSSH public line.
pub fn pinned_host_key(node: &str, recorded: Option<&str>) -> Result<PublicKey, SshError> {
    recorded
        .and_then(parse_public)
        .ok_or_else(|| SshError::NoPinnedKey { node: node.to_string() })
}

/// Parses a pinned OpenSSH public key line.
pub fn parse_public(line: &str) -> Option<PublicKey> {
    PublicKey::from_openssh(line.trim()).ok()
}

/// Which host keys a connection accepts.
#[derive(Debug, Clone)]
pub enum HostKeyCheck {
    /// Exactly this key (one labctl generated, or one recorded in state).
    Pinned(PublicKey),
    /// A key with this SHA256 fingerprint (`SHA256:...`, from labs.yaml).
    Fingerprint(String),
    /// Any of these keys, read from `source` (a known_hosts file).
    AnyOf {
        /// The keys.
        keys: Vec<PublicKey>,
        /// Where they come from, for messages.
        source: String,
    },
}

impl HostKeyCheck {
    /// Whether `presented` passes.
    pub fn accepts(&self, presented: &PublicKey) -> bool {
        match self {
            HostKeyCheck::Pinned(k) => k.key_data() == presented.key_data(),
            HostKeyCheck::Fingerprint(f) => fingerprint(presented) == *f,
            HostKeyCheck::AnyOf { keys, .. } => keys.iter().any(|k| k.key_data() == presented.key_data()),
        }
    }

    /// What it expects, for messages.
    pub fn expected(&self) -> String {
        match self {
            HostKeyCheck::Pinned(k) => fingerprint(k),
            HostKeyCheck::Fingerprint(f) => format!("{f} (host_key in labs.yaml)"),
            HostKeyCheck::AnyOf { keys, source } => format!(
                "{} ({source})",
                keys.iter().map(fingerprint).collect::<Vec<_>>().join(" or ")
            ),
        }
    }
}

struct PinningHandler {
    check: HostKeyCheck,
    presented: Arc<Mutex<Option<PublicKey>>>,
}

impl client::Handler for PinningHandler {
    type Error = russh::Error;

    async fn check_server_key(&mut self, presented: &PublicKeyOrCertificate) -> Result<bool, Self::Error> {
        let key = match presented {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            PublicKeyOrCertificate::Certificate(cert) => PublicKey::from(cert.public_key().clone()),
        };
        let accepted = self.check.accepts(&key);
        *self.presented.lock().expect("host key slot") = Some(key);
        Ok(accepted)
    }
}

/// An authenticated SSH session to one node.
pub struct SshSession {
    node: String,
    handle: Handle<PinningHandler>,
    host_key: PublicKey,
    nagle: Arc<BulkNagle>,
    /// The session to the jump host the connection runs through; kept as
    /// long as this one.
    jump: Option<Box<SshSession>>,
}

/// TCP_NODELAY on the session's socket, off while a bulk upload streams.
/// Small messages (agent RPCs through the tunnel, a stream's end) must go out
/// at once, so the socket runs with NODELAY; but a bulk stream written
/// packet by packet then leaves a short segment behind every SSH packet,
/// which a slow node pays for per segment: `cp` to two TCG nodes measured
/// 0.78 x scp's throughput with NODELAY and 0.91 x with Nagle.
struct BulkNagle {
    /// A second handle on the session's socket (same socket, dup'd fd).
    socket: std::net::TcpStream,
    /// Uploads streaming now; NODELAY is back on when the last one ends.
    uploads: std::sync::atomic::AtomicUsize,
}

/// While alive, the session's socket coalesces writes (Nagle on).
struct BulkUpload<'a>(&'a BulkNagle);

impl BulkNagle {
    fn begin(&self) -> BulkUpload<'_> {
        if self.uploads.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            // Best effort: a socket option that cannot be set costs speed only.
            let _ = self.socket.set_nodelay(false);
        }
        BulkUpload(self)
    }
}

impl Drop for BulkUpload<'_> {
    fn drop(&mut self) {
        if self.0.uploads.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            // Setting NODELAY also sends whatever Nagle still holds.
            let _ = self.0.socket.set_nodelay(true);
        }
    }
}

/// What a remote command did.
#[derive(Debug, Clone, Default)]
pub struct CommandOutput {
    /// Exit status (-1 when the command died without one).
    pub status: i32,
    /// Its stdout.
    pub stdout: Vec<u8>,
    /// Its stderr.
    pub stderr: Vec<u8>,
}

impl CommandOutput {
    /// stdout as text, trimmed.
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).trim().to_string()
    }
}

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

    /// The host key the jump host presented, when the session runs through one.
    pub fn jump_host_key(&self) -> Option<&PublicKey> {
        self.jump.as_ref().map(|j| &j.host_key)
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

    /// The node's name.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// The host key the node presented.
    pub fn host_key(&self) -> &PublicKey {
        &self.host_key
    }

    fn protocol(&self, source: russh::Error) -> SshError {
        SshError::Protocol {
            node: self.node.clone(),
            source,
        }
    }

    /// Runs `command`, handing output chunks to `on_output(is_stderr, bytes)`
    /// as they arrive, and returns the exit status.
    pub async fn exec_streaming(
        &self,
        command: &RemoteCommand,
        stdin: Option<&[u8]>,
        mut on_output: impl FnMut(bool, &[u8]),
    ) -> Result<i32, SshError> {
        let mut channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .exec(true, command.as_str())
            .await
            .map_err(|e| self.protocol(e))?;
        if let Some(input) = stdin {
            channel.data(input).await.map_err(|e| self.protocol(e))?;
        }
        channel.eof().await.map_err(|e| self.protocol(e))?;
        let mut status = -1;
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => on_output(false, &data),
                ChannelMsg::ExtendedData { data, .. } => on_output(true, &data),
                ChannelMsg::ExitStatus { exit_status } => status = exit_status as i32,
                // As shells report it: 128 + the signal's number.
                ChannelMsg::ExitSignal { signal_name, .. } => status = 128 + signal_number(&signal_name),
                _ => {}
            }
        }
        Ok(status)
    }

    /// Runs `command` with `stdin` streamed to it and its stdout streamed
    /// into `stdout`, both under the channel's flow control (no whole file in
    /// memory, no round trip per chunk, as scp does it). Returns the exit
    /// status and the command's stderr.
    pub async fn exec_piped<R, W>(
        &self,
        command: &RemoteCommand,
        stdin: Option<R>,
        stdout: &mut W,
    ) -> Result<(i32, Vec<u8>), SshError>
    where
        R: tokio::io::AsyncRead + Unpin,
        W: tokio::io::AsyncWrite + Unpin,
    {
        use tokio::io::AsyncWriteExt;
        let channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .exec(true, command.as_str())
            .await
            .map_err(|e| self.protocol(e))?;
        let (mut reader, writer) = channel.split();
        let feed = async {
            use tokio::io::AsyncReadExt;
            if let Some(mut input) = stdin {
                let _coalesce = self.nagle.begin();
                // Large reads handed over whole: russh cuts them into
                // packets of the peer's maximum size. (`Channel::data`
                // copies through an 8 KiB buffer, one small packet per
                // read, which costs a slow node a third of the throughput.)
                loop {
                    let mut chunk = bytes::BytesMut::with_capacity(FEED_CHUNK);
                    if input.read_buf(&mut chunk).await? == 0 {
                        break;
                    }
                    writer.data_bytes(chunk.freeze()).await?;
                }
            }
            writer.eof().await
        };
        let drain = async {
            let mut status = -1;
            let mut stderr = Vec::new();
            while let Some(msg) = reader.wait().await {
                match msg {
                    ChannelMsg::Data { data } => stdout.write_all(&data).await?,
                    ChannelMsg::ExtendedData { data, .. } => stderr.extend_from_slice(&data),
                    ChannelMsg::ExitStatus { exit_status } => status = exit_status as i32,
                    ChannelMsg::ExitSignal { signal_name, .. } => status = 128 + signal_number(&signal_name),
                    _ => {}
                }
            }
            stdout.flush().await?;
            Ok::<_, std::io::Error>((status, stderr))
        };
        // A command that exits without reading all of its input (a full
        // disk, a missing directory) closes the channel while the writer
        // waits for window space that never comes: the command's end ends
        // the feeding, and its status and stderr say why.
        tokio::pin!(feed, drain);
        let mut fed = None;
        let drained = loop {
            tokio::select! {
                result = &mut feed, if fed.is_none() => fed = Some(result),
                result = &mut drain => break result,
            }
        };
        let (status, stderr) = drained.map_err(|e| SshError::Local {
            node: self.node.clone(),
            source: e,
        })?;
        if status == 0 {
            if let Some(Err(e)) = fed {
                return Err(self.protocol(e));
            }
        }
        Ok((status, stderr))
    }

    /// Runs `command` and collects its output, whatever its exit status.
    pub async fn exec(&self, command: &RemoteCommand) -> Result<CommandOutput, SshError> {
        let mut out = CommandOutput::default();
        out.status = self
            .exec_streaming(command, None, |is_err, data| {
                if is_err {
                    out.stderr.extend_from_slice(data)
                } else {
                    out.stdout.extend_from_slice(data)
                }
            })
            .await?;
        Ok(out)
    }

    /// Runs `command`; a non-zero exit is an error carrying status and stderr.
    pub async fn run(&self, command: &RemoteCommand) -> Result<CommandOutput, SshError> {
        let out = self.exec(command).await?;
        if out.status != 0 {
            return Err(SshError::CommandFailed {
                node: self.node.clone(),
                command: command.to_string(),
                status: out.status,
                stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
            });
        }
        Ok(out)
    }

    /// Runs `command` with `stdin` on its standard input (a script, a
    /// key: what must not appear in a command line); a non-zero exit is an
    /// error carrying the status and stderr, naming the command as `what`
    /// (the command line itself may be a whole script). Returns its stdout,
    /// trimmed.
    pub async fn run_with_input(&self, command: &RemoteCommand, stdin: &[u8], what: &str) -> Result<String, SshError> {
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let status = self
            .exec_streaming(command, Some(stdin), |is_err, data| {
                if is_err {
                    stderr.extend_from_slice(data)
                } else {
                    stdout.extend_from_slice(data)
                }
            })
            .await?;
        if status != 0 {
            return Err(SshError::CommandFailed {
                node: self.node.clone(),
                command: what.to_string(),
                status,
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            });
        }
        Ok(String::from_utf8_lossy(&stdout).trim().to_string())
    }

    /// Writes `bytes` to `remote_path` over SFTP, through a temporary name and
    /// a rename so a running binary is never half-overwritten.
    pub async fn upload(&self, bytes: &[u8], remote_path: &str, mode: u32) -> Result<(), SshError> {
        use russh_sftp::client::SftpSession;
        use tokio::io::AsyncWriteExt;
        let sftp_err = |message: String| SshError::Sftp {
            node: self.node.clone(),
            path: remote_path.to_string(),
            message,
        };
        let channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| self.protocol(e))?;
        let sftp = SftpSession::new(channel.into_stream())
            .await
            .map_err(|e| sftp_err(e.to_string()))?;
        let tmp = format!("{remote_path}.upload");
        let mut file = sftp.create(&tmp).await.map_err(|e| sftp_err(e.to_string()))?;
        file.write_all(bytes).await.map_err(|e| sftp_err(e.to_string()))?;
        file.shutdown().await.map_err(|e| sftp_err(e.to_string()))?;
        drop(file);
        let _ = sftp.close().await;
        let install = RemoteCommand::new("chmod")
            .arg(format!("{mode:o}"))
            .arg(&tmp)
            .and(RemoteCommand::new("mv").arg("-f").arg(&tmp).arg(remote_path));
        self.run(&install).await?;
        Ok(())
    }

    /// Reads `remote_path` over SFTP (a capture, a log) into memory.
    pub async fn download(&self, remote_path: &str) -> Result<Vec<u8>, SshError> {
        use russh_sftp::client::SftpSession;
        use tokio::io::AsyncReadExt;
        let sftp_err = |message: String| SshError::Sftp {
            node: self.node.clone(),
            path: remote_path.to_string(),
            message,
        };
        let channel = self.handle.channel_open_session().await.map_err(|e| self.protocol(e))?;
        channel
            .request_subsystem(true, "sftp")
            .await
            .map_err(|e| self.protocol(e))?;
        let sftp = SftpSession::new(channel.into_stream())
            .await
            .map_err(|e| sftp_err(e.to_string()))?;
        let mut file = sftp.open(remote_path).await.map_err(|e| sftp_err(e.to_string()))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)
            .await
            .map_err(|e| sftp_err(e.to_string()))?;
        drop(file);
        let _ = sftp.close().await;
        Ok(bytes)
    }

    /// Opens a TCP stream to `host:port` as seen from inside the node.
    pub async fn open_tcp(&self, host: &str, port: u16) -> Result<russh::ChannelStream<russh::client::Msg>, SshError> {
        let channel = self
            .handle
            .channel_open_direct_tcpip(host, port as u32, "127.0.0.1", 0)
            .await
            .map_err(|e| self.protocol(e))?;
        Ok(channel.into_stream())
    }

    /// Closes the session politely (and then its jump host's).
    pub async fn close(&self) {
        let _ = self.handle.disconnect(Disconnect::ByApplication, "", "en").await;
        if let Some(jump) = &self.jump {
            Box::pin(jump.close()).await;
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

/// Why [`SshSession::connect_with_retry`] gave up.
#[derive(Debug)]
pub enum ConnectFailure<E> {
    /// SSH itself failed (timeout, host key, auth).
    Ssh(SshError),
    /// The node's liveness check failed while waiting.
    NodeDied(E),
}

fn signal_number(signal: &russh::Sig) -> i32 {
    use russh::Sig;
    match signal {
        Sig::HUP => 1,
        Sig::INT => 2,
        Sig::QUIT => 3,
        Sig::ILL => 4,
        Sig::ABRT => 6,
        Sig::FPE => 8,
        Sig::KILL => 9,
        Sig::USR1 => 10,
        Sig::SEGV => 11,
        Sig::PIPE => 13,
        Sig::ALRM => 14,
        Sig::TERM => 15,
        _ => 127,
    }
}

#[cfg(test)]
mod tests;
