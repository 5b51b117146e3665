//! The keys labctl hands the machines it creates: the lab's login key (its
//! public half, for root's `authorized_keys`) and each node's SSH host key
//! pair. labctl generates the host keys itself, before the machine boots,
//! so the very first SSH connection already knows which key the node must
//! present: there is no trust on first use.

use std::collections::BTreeMap;
use std::fmt;

/// One node's SSH host key pair (ed25519, OpenSSH formats).
#[derive(Clone)]
pub struct HostKeyPair {
    /// The private key, as `ssh-keygen` writes it (`-----BEGIN OPENSSH PRIVATE KEY-----`).
    pub private_openssh: String,
    /// The public key line (`ssh-ed25519 AAAA...`), recorded as the node's pinned key.
    pub public: String,
}

impl fmt::Debug for HostKeyPair {
    // The private half never reaches a log or an error message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HostKeyPair")
            .field("private_openssh", &"<redacted>")
            .field("public", &self.public)
            .finish()
    }
}

/// The keys of a lab's nodes, handed to [`Provider::create`](crate::Provider::create).
#[derive(Debug, Clone)]
pub struct NodeKeys {
    /// The lab's login key: one OpenSSH public key line.
    pub authorized_key: String,
    /// Each node's host key pair, by node name.
    pub host_keys: BTreeMap<String, HostKeyPair>,
    /// Files every node may hold from its first boot (the agent and its
    /// secret), where the provider can put them there before the machine
    /// starts (QEMU: in the node's initramfs). Providers that cannot ignore
    /// them; provisioning installs whatever a node lacks either way.
    pub preload: Vec<PreloadFile>,
}

/// A file a node may be given before it boots.
#[derive(Clone)]
pub struct PreloadFile {
    /// Absolute path on the node.
    pub path: String,
    /// Its mode (permission bits).
    pub mode: u32,
    /// Its content.
    pub bytes: std::sync::Arc<Vec<u8>>,
}

impl fmt::Debug for PreloadFile {
    // The agent secret is one of them: contents never reach a log.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PreloadFile")
            .field("path", &self.path)
            .field("mode", &format_args!("{:o}", self.mode))
            .field("bytes", &self.bytes.len())
            .finish()
    }
}

impl NodeKeys {
    /// The host key pair of `node`; every node of the plan has one.
    pub fn host_key(&self, node: &str) -> Result<&HostKeyPair, MissingHostKey> {
        self.host_keys
            .get(node)
            .ok_or_else(|| MissingHostKey { node: node.to_string() })
    }
}

/// A node without a host key pair in [`NodeKeys`]: the keys were generated
/// for a plan without it.
#[derive(Debug, thiserror::Error)]
#[error(
    "node `{node}`: no SSH host key was generated for it; the keys handed to the provider were made for other nodes"
)]
pub struct MissingHostKey {
    /// The node.
    pub node: String,
}
