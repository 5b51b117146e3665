//! The rdma-agent build that labctl deploys: its bytes, hash and version,
//! read once per command and handed to providers (which check that their
//! nodes can run it) and to provisioning (which uploads it).

use std::sync::Arc;

use sha2::{Digest, Sha256};

/// The agent build this labctl deploys.
#[derive(Debug, Clone)]
pub struct AgentBinary {
    /// The file's bytes.
    pub bytes: Arc<Vec<u8>>,
    /// Its sha256, hex.
    pub sha256: String,
    /// The version it reports (labctl's own).
    pub version: String,
}

impl AgentBinary {
    /// Reads the agent binary at `path`.
    pub fn load(path: &std::path::Path, version: &str) -> std::io::Result<AgentBinary> {
        let bytes = std::fs::read(path)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        Ok(AgentBinary {
            bytes: Arc::new(bytes),
            sha256,
            version: version.to_string(),
        })
    }
}
