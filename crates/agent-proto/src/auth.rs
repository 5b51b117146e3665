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
