//! How an SSH session logs in: with a key file labctl can read (the node's
//! `identity_file`, or the lab's own key on machines labctl created), else
//! with the identities of the user's running ssh-agent (`SSH_AUTH_SOCK`):
//! a host without `identity_file`, or one whose key file is protected by a
//! passphrase, which labctl never asks for. It decides and authenticates;
//! [`crate::ssh`] turns its outcomes into errors naming the node.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use russh::client::{self, AuthResult, Handle};
use russh::keys::agent::client::AgentClient;
use russh::keys::agent::AgentIdentity;
use russh::keys::{Algorithm, HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey};

/// What a session logs in with.
#[derive(Debug, Clone)]
pub enum Login {
    /// A private key labctl read.
    Key(Arc<PrivateKey>),
    /// The identities of the ssh-agent at `socket`: only the one whose
    /// public half is `wanted` (a passphrase-protected `identity_file`),
    /// or each in the agent's order.
    Agent {
        /// The agent's socket (`SSH_AUTH_SOCK`).
        socket: PathBuf,
        /// The key file whose key the agent must hold, with its public half.
        wanted: Option<(PathBuf, PublicKey)>,
    },
}

/// Why no login can be tried at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LoginProblem {
    /// The key file cannot be read (`message` says why and what to do).
    Key {
        /// The key file.
        path: PathBuf,
        /// What is wrong and what to do.
        message: String,
    },
    /// No key file is named and no ssh-agent runs.
    NoKeyNoAgent,
}

/// The login for a node whose key file is `identity` (None: the lab's key
/// `lab_key` on machines labctl created, or the agent when `agent` says
/// the node has no key file), with the agent at `agent_socket` if any.
pub fn choose(
    identity: Option<&Path>,
    agent: bool,
    lab_key: &Arc<PrivateKey>,
    agent_socket: Option<PathBuf>,
) -> Result<Login, LoginProblem> {
    let Some(path) = identity else {
        return match (agent, agent_socket) {
            (false, _) => Ok(Login::Key(lab_key.clone())),
            (true, Some(socket)) => Ok(Login::Agent { socket, wanted: None }),
            (true, None) => Err(LoginProblem::NoKeyNoAgent),
        };
    };
    match russh::keys::load_secret_key(path, None) {
        Ok(key) => Ok(Login::Key(Arc::new(key))),
        Err(russh::keys::Error::KeyIsEncrypted) => match agent_socket {
            Some(socket) => Ok(Login::Agent {
                socket,
                wanted: encrypted_public_half(path).map(|public| (path.to_path_buf(), public)),
            }),
            None => Err(LoginProblem::Key {
                path: path.to_path_buf(),
                message: format!(
                    "the key is protected by a passphrase, which labctl never asks for, and no ssh-agent runs (SSH_AUTH_SOCK is not set); start one and add the key (`eval $(ssh-agent)` then `ssh-add {}`), or give the node a key without a passphrase",
                    path.display()
                ),
            }),
        },
        Err(other) => Err(LoginProblem::Key {
            path: path.to_path_buf(),
            message: format!("{other} (labctl reads unencrypted OpenSSH/PEM keys, and passphrase-protected ones through ssh-agent)"),
        }),
    }
}

/// The public half of a passphrase-protected OpenSSH key file (stored in
/// the clear), or of its `.pub` beside it.
fn encrypted_public_half(path: &Path) -> Option<PublicKey> {
    let from_file = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| PrivateKey::from_openssh(text.trim()).ok())
        .map(|key| key.public_key().clone());
    from_file.or_else(|| {
        let text = std::fs::read_to_string(path.with_extension("pub")).ok()?;
        PublicKey::from_openssh(text.trim()).ok()
    })
}

/// What logging in did.
#[derive(Debug)]
pub enum Outcome {
    /// Logged in.
    Success,
    /// The host refused every key tried (fingerprint and comment of each).
    Rejected {
        /// The keys tried, as `SHA256:... (comment)`.
        tried: Vec<String>,
    },
    /// The agent could not be used; the text says why and what to do.
    Agent(String),
}

/// Logs in as `user` on `handle` with `login`.
pub async fn authenticate<H: client::Handler>(
    handle: &mut Handle<H>,
    user: &str,
    login: Login,
) -> Result<Outcome, russh::Error> {
    let (socket, wanted) = match login {
        Login::Key(key) => {
            let hash = rsa_hash(handle, key.algorithm()).await?;
            let auth = handle
                .authenticate_publickey(user, PrivateKeyWithHashAlg::new(key.clone(), hash))
                .await?;
            return Ok(match auth {
                AuthResult::Success => Outcome::Success,
                AuthResult::Failure { .. } => Outcome::Rejected {
                    tried: vec![describe(key.public_key(), "")],
                },
            });
        }
        Login::Agent { socket, wanted } => (socket, wanted),
    };
    let mut agent = match AgentClient::connect_uds(&socket).await {
        Ok(agent) => agent,
        Err(e) => {
            return Ok(Outcome::Agent(format!(
                "cannot reach the ssh-agent at {} (SSH_AUTH_SOCK): {e}; start one (`eval $(ssh-agent)`) and `ssh-add` the key",
                socket.display()
            )))
        }
    };
    let identities = match agent.request_identities().await {
        Ok(identities) => identities,
        Err(e) => {
            return Ok(Outcome::Agent(format!(
                "the ssh-agent at {} did not list its keys: {e}",
                socket.display()
            )))
        }
    };
    let candidates = agent_candidates(identities, wanted.as_ref().map(|(_, public)| public));
    if candidates.is_empty() {
        return Ok(Outcome::Agent(match &wanted {
            Some((path, public)) => format!(
                "the key {} is protected by a passphrase, and the ssh-agent at {} does not hold it ({}); add it with `ssh-add {}`",
                path.display(),
                socket.display(),
                fingerprint(public),
                path.display()
            ),
            None => format!(
                "the ssh-agent at {} holds no key; add the key that logs in to the host with `ssh-add PATH`, or set `identity_file:`",
                socket.display()
            ),
        }));
    }
    let mut tried = Vec::new();
    for (public, comment) in candidates {
        let hash = rsa_hash(handle, public.algorithm()).await?;
        let auth = handle
            .authenticate_publickey_with(user, public.clone(), hash, &mut agent)
            .await;
        match auth {
            Ok(AuthResult::Success) => return Ok(Outcome::Success),
            Ok(AuthResult::Failure { .. }) => tried.push(format!("{} from the ssh-agent", describe(&public, &comment))),
            Err(e) => {
                return Ok(Outcome::Agent(format!(
                    "the ssh-agent at {} did not sign with {}: {e}",
                    socket.display(),
                    describe(&public, &comment)
                )))
            }
        }
    }
    Ok(Outcome::Rejected { tried })
}

/// The agent's keys to try, in its order: only `wanted` when given.
/// Certificates are tried as their plain key.
fn agent_candidates(identities: Vec<AgentIdentity>, wanted: Option<&PublicKey>) -> Vec<(PublicKey, String)> {
    identities
        .into_iter()
        .map(|identity| {
            let comment = match &identity {
                AgentIdentity::PublicKey { comment, .. } | AgentIdentity::Certificate { comment, .. } => {
                    comment.clone()
                }
            };
            (identity.public_key().into_owned(), comment)
        })
        .filter(|(public, _)| wanted.is_none_or(|w| w.key_data() == public.key_data()))
        .collect()
}

/// The signature hash an RSA key uses with this server (none for others).
async fn rsa_hash<H: client::Handler>(
    handle: &Handle<H>,
    algorithm: Algorithm,
) -> Result<Option<HashAlg>, russh::Error> {
    if !matches!(algorithm, Algorithm::Rsa { .. }) {
        return Ok(None);
    }
    Ok(handle.best_supported_rsa_hash().await?.flatten())
}

/// `SHA256:...`, as `ssh-keygen -l` prints a key (re-exported as
/// `ssh::fingerprint`).
pub fn fingerprint(public: &PublicKey) -> String {
    public.fingerprint(HashAlg::Sha256).to_string()
}

/// `SHA256:... (comment)`.
fn describe(public: &PublicKey, comment: &str) -> String {
    let own = public.comment().to_string();
    let comment = if comment.is_empty() { own.as_str() } else { comment };
    if comment.is_empty() {
        fingerprint(public)
    } else {
        format!("{} ({comment})", fingerprint(public))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> PrivateKey {
        PrivateKey::random(&mut rand::rng(), Algorithm::Ed25519).expect("key")
    }

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("labctl-login-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch dir");
        dir
    }

    #[test]
    fn a_readable_identity_file_wins_over_the_agent() {
        let dir = scratch("plain");
        let path = dir.join("id");
        let k = key();
        std::fs::write(
            &path,
            k.to_openssh(russh::keys::ssh_key::LineEnding::LF)
                .expect("pem")
                .as_bytes(),
        )
        .expect("write");
        let lab = Arc::new(key());
        let login = choose(Some(&path), true, &lab, Some("/agent.sock".into())).expect("login");
        assert!(
            matches!(login, Login::Key(ref got) if got.public_key() == k.public_key()),
            "{login:?}"
        );
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn an_encrypted_identity_file_goes_to_the_agent_for_exactly_its_key() {
        let dir = scratch("encrypted");
        let path = dir.join("id");
        let k = key();
        let encrypted = k.encrypt(&mut rand::rng(), "pass").expect("encrypt");
        std::fs::write(
            &path,
            encrypted
                .to_openssh(russh::keys::ssh_key::LineEnding::LF)
                .expect("pem")
                .as_bytes(),
        )
        .expect("write");
        let lab = Arc::new(key());
        match choose(Some(&path), false, &lab, Some("/agent.sock".into())).expect("login") {
            Login::Agent { socket, wanted } => {
                assert_eq!(socket, PathBuf::from("/agent.sock"));
                let (wanted_path, public) = wanted.expect("the file's public half");
                assert_eq!(wanted_path, path);
                assert_eq!(public.key_data(), k.public_key().key_data());
            }
            other => panic!("{other:?}"),
        }
        // Without an agent: the error says to ssh-add it or give an unencrypted key.
        match choose(Some(&path), false, &lab, None) {
            Err(LoginProblem::Key { message, .. }) => {
                assert!(
                    message.contains("ssh-add") && message.contains("without a passphrase"),
                    "{message}"
                );
            }
            other => panic!("{other:?}"),
        }
        std::fs::remove_dir_all(dir).expect("cleanup");
    }

    #[test]
    fn no_identity_file_uses_the_lab_key_or_the_agent() {
        let lab = Arc::new(key());
        assert!(matches!(
            choose(None, false, &lab, Some("/a".into())),
            Ok(Login::Key(_))
        ));
        assert!(matches!(
            choose(None, true, &lab, Some("/a".into())),
            Ok(Login::Agent { wanted: None, .. })
        ));
        assert_eq!(choose(None, true, &lab, None).unwrap_err(), LoginProblem::NoKeyNoAgent);
    }

    #[test]
    fn agent_candidates_keep_the_agents_order_or_only_the_wanted_key() {
        let (a, b) = (key(), key());
        let ids = || {
            vec![
                AgentIdentity::PublicKey {
                    key: a.public_key().clone(),
                    comment: "a".into(),
                },
                AgentIdentity::PublicKey {
                    key: b.public_key().clone(),
                    comment: "b".into(),
                },
            ]
        };
        let all: Vec<String> = agent_candidates(ids(), None).into_iter().map(|(_, c)| c).collect();
        assert_eq!(all, ["a", "b"]);
        let only: Vec<String> = agent_candidates(ids(), Some(b.public_key()))
            .into_iter()
            .map(|(_, c)| c)
            .collect();
        assert_eq!(only, ["b"]);
        assert!(agent_candidates(ids(), Some(key().public_key())).is_empty());
    }
}
