//! The agent secret: 256 random bits per lab that every RPC carries, so only
//! the lab's controller can drive an agent. The agent listens on loopback
//! and runs as root (it registers memory), so without this any local user
//! of a node could run workloads, read results or abort sessions.
//!
//! labctl generates the secret at the lab's first `up`, keeps it in the
//! lab's 0700 state directory (never in `state.json`), and writes it over
//! SSH into a root-only 0600 file on each node, which the agent reads at
//! start. A call sends it as `authorization: Bearer <hex>` metadata; the
//! agent compares in constant time.
//!
//! The same secret keeps strangers off the data path: a run's client proves
//! to its server that it belongs to the lab and to this run with a
//! [`ConnectProof`] (an HMAC of the run's nonce under the secret) in its
//! first message (rdma_cm private data, libfabric CONNECT, bulk-tcp's first
//! bytes), so the server hands its buffer's address and key to no one else.

use std::fmt;
use std::path::Path;

use subtle::ConstantTimeEq;
use tonic::metadata::{MetadataMap, MetadataValue};
use tonic::{Request, Status};

/// Where the agent reads the secret on a node (root-only, mode 0600).
pub const NODE_SECRET_FILE: &str = "/etc/labctl/agent.secret";

/// The metadata key that carries the secret.
const METADATA_KEY: &str = "authorization";
const SCHEME: &str = "Bearer ";
/// Secret length in bytes (256 bits).
const LEN: usize = 32;

/// Bytes of a [`ConnectProof`]: HMAC-SHA-256 cut to 128 bits, which fits
/// beside the 32-byte capability blob in the 56 bytes of private data an
/// rdma_cm connect request carries on RoCE and InfiniBand.
pub const CONNECT_PROOF_LEN: usize = 16;

/// What the HMAC is computed over besides the run's nonce, so that the
/// proof is of no use as anything else keyed by the secret.
const CONNECT_PROOF_CONTEXT: &[u8] = b"labctl data-path connect v1\0";

/// A run's connect proof: what its client sends first and its server
/// requires before it answers with anything of the run's. Both agents derive
/// it from the lab's secret and the nonce the controller drew for the run;
/// nothing else holds the secret, and a proof seen on the wire is worth
/// nothing in another run. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct ConnectProof([u8; CONNECT_PROOF_LEN]);

impl fmt::Debug for ConnectProof {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnectProof(<redacted>)")
    }
}

impl ConnectProof {
    /// The proof's bytes, as the client sends them.
    pub fn as_bytes(&self) -> &[u8; CONNECT_PROOF_LEN] {
        &self.0
    }

    /// Whether `presented` starts with this proof (transports may pad what
    /// they carry, and the rest of a message is the caller's). The
    /// comparison takes the same time whatever the two share.
    pub fn admits(&self, presented: &[u8]) -> bool {
        presented.len() >= CONNECT_PROOF_LEN && bool::from(presented[..CONNECT_PROOF_LEN].ct_eq(&self.0))
    }
}

/// A lab's agent secret. Its `Debug` and `Display` never show it.
#[derive(Clone, PartialEq, Eq)]
pub struct AgentSecret([u8; LEN]);

impl fmt::Debug for AgentSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("AgentSecret(<redacted>)")
    }
}

/// Why a secret file cannot be used.
#[derive(Debug)]
pub struct SecretFileError {
    /// The file.
    pub path: String,
    /// What is wrong with it, and the fix.
    pub problem: String,
}

impl fmt::Display for SecretFileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "agent secret {}: {}", self.path, self.problem)
    }
}

impl std::error::Error for SecretFileError {}

impl AgentSecret {
    /// A new random secret (the OS's CSPRNG through `rand`'s thread RNG).
    pub fn generate() -> AgentSecret {
        AgentSecret(rand::random())
    }

    /// The secret as it is stored in files: 64 lowercase hex digits and a newline.
    pub fn to_file_text(&self) -> String {
        format!("{}\n", hex::encode(self.0))
    }

    /// Parses the text of a secret file.
    pub fn parse(text: &str) -> Option<AgentSecret> {
        let bytes = hex::decode(text.trim()).ok()?;
        Some(AgentSecret(bytes.try_into().ok()?))
    }

    /// Reads a secret file, refusing one that other users can read (the
    /// secret is only as private as its file).
    pub fn read_file(path: &Path) -> Result<AgentSecret, SecretFileError> {
        use std::os::unix::fs::PermissionsExt;
        let problem = |problem: String| SecretFileError {
            path: path.display().to_string(),
            problem,
        };
        let meta = std::fs::metadata(path).map_err(|e| problem(format!("cannot read it: {e}")))?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(problem(format!(
                "mode {mode:03o} lets other users read it; it must be 0600 (chmod 600 {})",
                path.display()
            )));
        }
        let text = std::fs::read_to_string(path).map_err(|e| problem(format!("cannot read it: {e}")))?;
        AgentSecret::parse(&text).ok_or_else(|| problem(format!("it does not hold {} hex digits", LEN * 2)))
    }

    /// The connect proof of the run whose nonce is `run_nonce` (see
    /// [`ConnectProof`]).
    pub fn connect_proof(&self, run_nonce: &[u8]) -> ConnectProof {
        use hmac::{KeyInit, Mac};
        let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        mac.update(CONNECT_PROOF_CONTEXT);
        mac.update(run_nonce);
        let full = mac.finalize().into_bytes();
        let mut proof = [0u8; CONNECT_PROOF_LEN];
        proof.copy_from_slice(&full[..CONNECT_PROOF_LEN]);
        ConnectProof(proof)
    }

    /// Adds the secret to a call's metadata.
    pub fn attach<T>(&self, mut request: Request<T>) -> Request<T> {
        let value =
            MetadataValue::try_from(format!("{SCHEME}{}", hex::encode(self.0))).expect("hex digits are valid metadata");
        request.metadata_mut().insert(METADATA_KEY, value);
        request
    }

    /// Checks a call's metadata: no secret is `Unauthenticated`, another
    /// secret `PermissionDenied`. The comparison takes the same time
    /// whatever the presented secret shares with this one.
    pub fn check(&self, metadata: &MetadataMap) -> Result<(), Status> {
        let presented = metadata
            .get(METADATA_KEY)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix(SCHEME))
            .ok_or_else(|| {
                Status::unauthenticated("this agent serves only its lab's controller: the call carries no agent secret")
            })?;
        let mut decoded = [0u8; LEN];
        let well_formed = hex::decode_to_slice(presented.trim(), &mut decoded).is_ok();
        if well_formed && bool::from(decoded.ct_eq(&self.0)) {
            Ok(())
        } else {
            Err(Status::permission_denied(
                "this agent serves only its lab's controller: the call's agent secret is not this lab's",
            ))
        }
    }
}

/// A client that sends the secret with every call:
/// `AgentClient::with_interceptor(channel, secret)`.
impl tonic::service::Interceptor for AgentSecret {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        Ok(self.attach(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_the_right_secret_passes_and_others_are_refused() {
        let secret = AgentSecret::generate();
        let other = AgentSecret::generate();
        assert_ne!(secret, other);
        let sent = secret.attach(Request::new(()));
        assert!(secret.check(sent.metadata()).is_ok());

        let wrong = other.attach(Request::new(()));
        assert_eq!(
            secret.check(wrong.metadata()).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
        let none = Request::new(());
        assert_eq!(
            secret.check(none.metadata()).unwrap_err().code(),
            tonic::Code::Unauthenticated
        );
        let mut garbled = Request::new(());
        garbled
            .metadata_mut()
            .insert(METADATA_KEY, MetadataValue::from_static("Bearer nothex"));
        assert_eq!(
            secret.check(garbled.metadata()).unwrap_err().code(),
            tonic::Code::PermissionDenied
        );
    }

    #[test]
    fn test_a_connect_proof_is_the_labs_and_the_runs_only() {
        let secret = AgentSecret::generate();
        let proof = secret.connect_proof(b"run-1");
        // The other agent of the lab derives the same proof, and it admits
        // the proof followed by whatever the transport carries after it.
        let twin = AgentSecret::parse(&secret.to_file_text()).unwrap();
        assert_eq!(twin.connect_proof(b"run-1"), proof);
        let mut sent = proof.as_bytes().to_vec();
        sent.extend_from_slice(&[0xAB; 32]);
        assert!(proof.admits(&sent));
        // Another run's proof, another lab's, a short or empty one: refused.
        assert!(!proof.admits(secret.connect_proof(b"run-2").as_bytes()));
        assert!(!proof.admits(AgentSecret::generate().connect_proof(b"run-1").as_bytes()));
        assert!(!proof.admits(&proof.as_bytes()[..CONNECT_PROOF_LEN - 1]));
        assert!(!proof.admits(&[]));
        assert!(!format!("{proof:?}").contains(&hex::encode(proof.as_bytes())));
    }

    #[test]
    fn test_a_connect_proof_is_hmac_sha256_of_the_context_and_nonce() {
        // A known answer from another implementation (Python's `hmac`):
        // hmac.new(b"Jefe" + bytes(28), CONTEXT + nonce, sha256), first 16
        // bytes. Any HMAC-SHA-256 computes the same proof from the secret.
        let mut key = [0u8; LEN];
        key[..4].copy_from_slice(b"Jefe");
        let proof = AgentSecret(key).connect_proof(b"what do ya want for nothing?");
        assert_eq!(hex::encode(proof.as_bytes()), "957c753e9ed09def7a4d87a9838ed297");
    }

    #[test]
    fn test_the_secret_round_trips_through_its_file_and_never_prints() {
        let secret = AgentSecret::generate();
        let text = secret.to_file_text();
        assert_eq!(text.len(), 65);
        assert_eq!(AgentSecret::parse(&text), Some(secret.clone()));
        assert!(!format!("{secret:?}").contains(text.trim()));
        assert_eq!(AgentSecret::parse("abcd"), None);
    }

    #[test]
    fn test_a_secret_file_others_can_read_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = std::env::temp_dir().join(format!("agent-secret-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("agent.secret");
        std::fs::write(&path, AgentSecret::generate().to_file_text()).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let err = AgentSecret::read_file(&path).unwrap_err().to_string();
        assert!(err.contains("mode 644") && err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(AgentSecret::read_file(&path).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
