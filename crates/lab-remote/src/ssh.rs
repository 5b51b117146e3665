//! SSH to lab nodes with russh: key auth with the lab's own key, host keys
//! pinned before the first contact (labctl generates them: no trust on
//! first use), commands with exit status and stderr, SFTP upload and
//! download, and direct-tcpip channels (how the controller reaches each
//! node's agent, and a host behind one jump host: ssh's ProxyJump, with no
//! `ssh` binary spawned).
//!
//! One concern a file: `keys` (the lab's key, host keys and their check),
//! `connect` (reaching and logging in), `exec` (commands), `sftp` (files);
//! this file holds the types they share and the session's channels.

use std::sync::Arc;

use russh::client::Handle;
use russh::keys::PublicKey;
use russh::Disconnect;

mod connect;
mod error;
mod exec;
mod keys;
mod sftp;

pub use self::error::{ConnectStage, SshError};
pub use self::keys::{
    load_or_create_host_key, load_or_create_key, parse_public, pinned_host_key, public_line, HostKeyCheck,
};
/// A key's SHA256 fingerprint as `ssh-keygen -l` prints it (`SHA256:...`).
pub use crate::ssh_login::fingerprint;

use self::keys::PinningHandler;

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
    /// The host key the jump host presented, when the session runs through one.
    pub fn jump_host_key(&self) -> Option<&PublicKey> {
        self.jump.as_ref().map(|j| &j.host_key)
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

/// Why [`SshSession::connect_with_retry`] gave up.
#[derive(Debug)]
pub enum ConnectFailure<E> {
    /// SSH itself failed (timeout, host key, auth).
    Ssh(SshError),
    /// The node's liveness check failed while waiting.
    NodeDied(E),
}

#[cfg(test)]
mod tests;
