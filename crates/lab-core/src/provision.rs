//! What happens on a node once its machine exists, whatever the provider:
//! wait for SSH (pinning the host key), set up rxe on the data NIC, deploy and
//! start rdma-agent, and wait for it to answer.

use std::sync::Arc;
use std::time::Duration;

use russh::keys::PrivateKey;
use sha2::{Digest, Sha256};

use crate::agent::{self, AgentError};
use crate::progress::{step, Reporter};
use crate::provider::ProviderError;
use crate::ssh::{self, ConnectFailure, SshError, SshSession, SshTarget};
use crate::state::NodeState;

/// Node-side scripts, run over SSH with `sh -s`.
pub const RXE_SETUP: &str = include_str!("../../../provisioning/node/rxe-setup.sh");
/// See [`RXE_SETUP`].
pub const AGENT_START: &str = include_str!("../../../provisioning/node/agent-start.sh");

/// Where the agent binary lives on a node.
pub const AGENT_PATH: &str = "/usr/local/bin/rdma-agent";

/// Errors provisioning one node.
#[derive(Debug, thiserror::Error)]
pub enum ProvisionError {
    /// SSH failed.
    #[error(transparent)]
    Ssh(#[from] SshError),
    /// The node's machine died while we waited.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// rxe could not be set up.
    #[error("node `{node}`: SoftRoCE setup failed: {message}")]
    Rxe {
        /// The node.
        node: String,
        /// What the setup script said.
        message: String,
    },
    /// The agent could not be deployed or did not answer.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The agent runs a different version than this labctl.
    #[error("node `{node}`: the deployed rdma-agent reports version {found} but labctl is {expected}; rebuild both from one checkout (cargo build --release -p labctl -p rdma-agent)")]
    AgentVersion {
        /// The node.
        node: String,
        /// What labctl expected.
        expected: String,
        /// What the agent said.
        found: String,
    },
}

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

/// How a node is reached and what to set up on it.
pub struct NodeJob<'a> {
    /// The node's recorded state; updated as steps complete.
    pub node: &'a mut NodeState,
    /// The lab's private key.
    pub key: Arc<PrivateKey>,
    /// Set up rxe on the data NIC.
    pub rxe: bool,
    /// The agent to deploy.
    pub agent: &'a AgentBinary,
    /// How long to wait for SSH.
    pub ssh_wait: Duration,
}

/// The SSH target of a recorded node.
pub fn target(node: &NodeState) -> SshTarget {
    SshTarget {
        node: node.name.clone(),
        host: node.ssh_host.clone(),
        port: node.ssh_port,
        user: node.ssh_user.clone(),
    }
}

/// Runs every provisioning step on one node. `still_alive` reports a machine
/// that died while SSH was awaited.
pub async fn provision_node(
    job: NodeJob<'_>,
    reporter: &dyn Reporter,
    still_alive: impl FnMut() -> Result<(), ProviderError>,
) -> Result<Arc<SshSession>, ProvisionError> {
    let name = job.node.name.clone();
    let pinned = job.node.host_key.as_deref().and_then(ssh::parse_public);
    let session = step(
        reporter,
        &name,
        "wait for SSH",
        SshSession::connect_with_retry(&target(job.node), job.key.clone(), pinned, job.ssh_wait, still_alive),
    )
    .await
    .map_err(|e| match e {
        ConnectFailure::Ssh(e) => ProvisionError::Ssh(e),
        ConnectFailure::NodeDied(e) => ProvisionError::Provider(e),
    })?;
    job.node.host_key = Some(ssh::public_line(session.host_key()));
    let session = Arc::new(session);

    if job.rxe {
        let (netdev, device) = step(reporter, &name, "rxe", setup_rxe(&session, job.node)).await?;
        job.node.data_netdev = Some(netdev);
        job.node.rdma_device = Some(device);
    }
    step(reporter, &name, "agent", deploy_agent(&session, job.node, job.agent)).await?;
    job.node.provisioned = true;
    Ok(session)
}

/// Loads rdma_rxe and binds an rxe device to the data NIC; returns (netdev, device).
pub async fn setup_rxe(session: &SshSession, node: &NodeState) -> Result<(String, String), ProvisionError> {
    let command = format!("sh -s {}", node.data_addr);
    let mut out = ssh::CommandOutput::default();
    out.status = session
        .exec_streaming(&command, Some(RXE_SETUP.as_bytes()), |is_err, data| {
            if is_err {
                out.stderr.extend_from_slice(data)
            } else {
                out.stdout.extend_from_slice(data)
            }
        })
        .await?;
    if out.status != 0 {
        return Err(ProvisionError::Rxe {
            node: node.name.clone(),
            message: format!(
                "{} (exit status {})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ),
        });
    }
    let text = out.stdout_text();
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).map(str::to_string))
            .unwrap_or_default()
    };
    Ok((field("netdev="), field("device=")))
}

/// Uploads the agent when the node's copy differs, (re)starts it under the
/// node's supervisor, and waits until it answers with labctl's version.
pub async fn deploy_agent(
    session: &Arc<SshSession>,
    node: &mut NodeState,
    agent: &AgentBinary,
) -> Result<(), ProvisionError> {
    let remote = session
        .exec(&format!("sha256sum {AGENT_PATH} 2>/dev/null"))
        .await?
        .stdout_text();
    let up_to_date = remote.split_whitespace().next() == Some(agent.sha256.as_str());
    if !up_to_date {
        session.upload(&agent.bytes, AGENT_PATH, 0o755).await?;
    }
    let running = session.exec("pgrep -x rdma-agent >/dev/null").await?.status == 0;
    if !up_to_date || !running {
        let mut stderr = Vec::new();
        let status = session
            .exec_streaming(
                &format!("sh -s {}", node.agent_port),
                Some(AGENT_START.as_bytes()),
                |is_err, data| {
                    if is_err {
                        stderr.extend_from_slice(data)
                    }
                },
            )
            .await?;
        if status != 0 {
            return Err(ProvisionError::Ssh(SshError::CommandFailed {
                node: node.name.clone(),
                command: "agent-start.sh".into(),
                status,
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
            }));
        }
    }
    let version = agent::wait_healthy(session.clone(), node.agent_port, Duration::from_secs(30)).await?;
    if version != agent.version {
        return Err(ProvisionError::AgentVersion {
            node: node.name.clone(),
            expected: agent.version.clone(),
            found: version,
        });
    }
    node.agent_sha256 = Some(agent.sha256.clone());
    Ok(())
}
