//! Keys: the lab's own key and nodes' host keys (created on first use,
//! parsed, pinned), which host keys a connection accepts, and the russh
//! handler that checks the presented key during the key exchange.

use std::path::Path;
use std::sync::{Arc, Mutex};

use russh::client;
use russh::keys::PublicKeyOrCertificate;
use russh::keys::{Algorithm, PrivateKey, PublicKey};

use lab_state::{set_mode, StateError};

use super::error::SshError;
use crate::ssh_login::fingerprint;

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

/// Checks the host key the server presents and keeps it, accepted or
/// not, for the error that names it.
pub(super) struct PinningHandler {
    pub(super) check: HostKeyCheck,
    pub(super) presented: Arc<Mutex<Option<PublicKey>>>,
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
