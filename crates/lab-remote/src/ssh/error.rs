//! [`SshError`]: what can go wrong reaching a node over SSH, each case
//! worded for the user (which node, what failed, what to do). Knows nothing
//! of sessions; the parent module builds these.

/// Errors talking to a node over SSH.
#[derive(Debug, thiserror::Error)]
pub enum SshError {
    /// The node never accepted an SSH session before the deadline.
    #[error("node `{node}`: SSH at {addr} did not answer within {waited_s} s (last error: {last})")]
    Timeout {
        /// The node.
        node: String,
        /// host:port.
        addr: String,
        /// Seconds waited.
        waited_s: u64,
        /// The last connection error.
        last: String,
    },
    /// One connection attempt ran out of time: nothing answered the TCP
    /// connection (SYNs dropped), or the host accepted it and never spoke
    /// SSH, or the login stalled.
    #[error("node `{node}`: SSH to {addr} timed out after {waited_s} s: {stage}")]
    AttemptTimedOut {
        /// The node.
        node: String,
        /// host:port (or the jump host's label and the node's host:port).
        addr: String,
        /// Seconds waited.
        waited_s: u64,
        /// How far it got ([`ConnectStage::waiting_for`]).
        stage: &'static str,
    },
    /// The node presented a host key other than the one labctl gave it.
    #[error("node `{node}`: SSH host key mismatch: labctl gave this node the key {pinned} before it booted, and it presents {presented}; refusing to connect (another machine may be answering at this address, or the image ignored the key labctl gave it). If the node was recreated outside labctl, run `labctl down` and `labctl up`")]
    HostKeyChanged {
        /// The node.
        node: String,
        /// Fingerprint of the pinned key.
        pinned: String,
        /// Fingerprint of the presented key.
        presented: String,
    },
    /// A host that exists (provider ssh) presented a key other than the
    /// one labs.yaml or the user's known_hosts names.
    #[error("node `{node}`: SSH host key mismatch at {addr}: expected {expected}, the host presents {presented}; refusing to connect\n  fix: if the host was reinstalled and {presented} is its new key, put it in labs.yaml as `host_key:` (or in ~/.ssh/known_hosts); otherwise another machine answers at this address")]
    HostKeyMismatch {
        /// The node.
        node: String,
        /// host:port.
        addr: String,
        /// What was expected (fingerprints, where they come from).
        expected: String,
        /// Fingerprint of the presented key.
        presented: String,
    },
    /// The lab's state records no usable host key for the node (a lab
    /// brought up by an older labctl, or a state file edited by hand).
    #[error("node `{node}`: the lab's state records no SSH host key for this node, and labctl does not trust a key on first use; run `labctl down` and `labctl up` to recreate the lab with labctl-generated host keys")]
    NoPinnedKey {
        /// The node.
        node: String,
    },
    /// The node refused the lab's key.
    #[error("node `{node}`: the lab's SSH key was refused for user `{user}`")]
    AuthRejected {
        /// The node.
        node: String,
        /// The user.
        user: String,
    },
    /// A host that exists refused the key labs.yaml names for it.
    #[error("node `{node}`: the host refused the key {identity} for user `{user}`\n  fix: check `identity_file` and `user` of the node: the key's public half must be in ~{user}/.ssh/authorized_keys on the host")]
    IdentityRejected {
        /// The node.
        node: String,
        /// The user.
        user: String,
        /// The private key's path.
        identity: String,
    },
    /// The host refused every key labctl tried (a key file, the agent's keys).
    #[error("node `{node}`: the host refused every key tried for user `{user}`: {}\n  fix: the public half of the node's key must be in ~{user}/.ssh/authorized_keys on the host; check `identity_file` and `user` of the node (without `identity_file`, `ssh-add` the right key to your ssh-agent)", .tried.join(", "))]
    KeysRejected {
        /// The node.
        node: String,
        /// The user.
        user: String,
        /// The keys tried (fingerprint, comment, where from).
        tried: Vec<String>,
    },
    /// The node's key file cannot be used (and what to do).
    #[error("node `{node}`: SSH key {path}: {message}")]
    IdentityUnusable {
        /// The node.
        node: String,
        /// The key file.
        path: String,
        /// What is wrong and what to do.
        message: String,
    },
    /// The user's ssh-agent could not be used to log in.
    #[error("node `{node}`: {message}")]
    AgentLogin {
        /// The node.
        node: String,
        /// What failed and what to do.
        message: String,
    },
    /// A remote command exited non-zero.
    #[error("node `{node}`: `{command}` failed with exit status {status}{}", stderr_suffix(.stderr))]
    CommandFailed {
        /// The node.
        node: String,
        /// The command line.
        command: String,
        /// Its exit status (-1: killed by a signal or no status).
        status: i32,
        /// What it wrote to stderr.
        stderr: String,
    },
    /// The jump host on the way to the node failed (unreachable, its
    /// host key, refused login): `source` says how.
    #[error("node `{node}`: jump host {jump}: {source}")]
    Jump {
        /// The node.
        node: String,
        /// `user@host:port` of the jump host.
        jump: String,
        /// What failed there.
        source: Box<SshError>,
    },
    /// The jump host was reached, but it could not open a connection to the node.
    #[error("node `{node}`: the jump host {jump} cannot reach {addr}: {reason}\n  fix: check the node's host and port as the jump host sees them (`ssh {jump} nc -zv HOST PORT`), and that the jump host's sshd allows TCP forwarding (AllowTcpForwarding)")]
    JumpTarget {
        /// The node.
        node: String,
        /// `user@host:port` of the jump host.
        jump: String,
        /// The node's host:port.
        addr: String,
        /// What the jump host said.
        reason: String,
    },
    /// A protocol or transport error.
    #[error("node `{node}`: SSH: {source}")]
    Protocol {
        /// The node.
        node: String,
        /// The russh error.
        source: russh::Error,
    },
    /// SFTP failed.
    #[error("node `{node}`: SFTP {path}: {message}")]
    Sftp {
        /// The node.
        node: String,
        /// The remote path.
        path: String,
        /// What went wrong.
        message: String,
    },
    /// Reading or writing this machine's side of a stream failed.
    #[error("node `{node}`: the stream on this machine failed: {source}")]
    Local {
        /// The node.
        node: String,
        /// The local I/O error.
        source: std::io::Error,
    },
    /// The lab's key could not be created or read.
    #[error("lab SSH key {path}: {message}")]
    Key {
        /// The key file.
        path: String,
        /// What went wrong.
        message: String,
    },
}

impl SshError {
    /// Whether waiting cannot help: a changed host key or a refused key
    /// (at the node or at its jump host).
    pub fn is_final(&self) -> bool {
        match self {
            SshError::Jump { source, .. } => source.is_final(),
            e => matches!(
                e,
                SshError::HostKeyChanged { .. }
                    | SshError::HostKeyMismatch { .. }
                    | SshError::AuthRejected { .. }
                    | SshError::IdentityRejected { .. }
                    | SshError::KeysRejected { .. }
                    | SshError::AgentLogin { .. }
                    | SshError::IdentityUnusable { .. }
                    | SshError::NoPinnedKey { .. }
                    | SshError::Key { .. }
            ),
        }
    }
}

fn stderr_suffix(stderr: &str) -> String {
    let s = stderr.trim();
    if s.is_empty() {
        String::new()
    } else {
        format!(": {s}")
    }
}

/// How far one SSH connection attempt got, for the error when it times out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnectStage {
    /// Waiting for the TCP connection (or the jump host's channel).
    Tcp = 0,
    /// Connected; waiting for the server's SSH banner and key exchange.
    Handshake = 1,
    /// Key exchange done; logging in.
    Login = 2,
}

impl ConnectStage {
    /// The stage from its number (what an attempt records as it goes).
    pub fn from_u8(n: u8) -> ConnectStage {
        match n {
            0 => ConnectStage::Tcp,
            1 => ConnectStage::Handshake,
            _ => ConnectStage::Login,
        }
    }

    /// What the attempt was waiting for, as the error says it.
    pub fn waiting_for(self) -> &'static str {
        match self {
            ConnectStage::Tcp => "no answer to the TCP connection (the host is down, or a firewall drops the packets)",
            ConnectStage::Handshake => {
                "the TCP connection was accepted but no SSH banner came (is an SSH server listening on that port?)"
            }
            ConnectStage::Login => "the host stopped answering while logging in",
        }
    }
}
