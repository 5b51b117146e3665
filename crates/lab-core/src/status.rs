//! `labctl status`: what a lab looks like now, read from the machines
//! themselves: each node's machine (as its provider sees it), SSH, the
//! agent's health and version, the RDMA ports and GIDs, and the impairment
//! on the data NIC; plus the lab facts `up` saved (no RPC).

use std::sync::Arc;
use std::time::Duration;

use agent_proto::v1::{HealthRequest, NodeInfoRequest};
use futures::future::join_all;
use lab_providers::Liveness;
use lab_remote::agent::{self, deadline, AgentError};
use lab_remote::ssh::{self, SshSession};
use lab_results::run::{rdma_ports, RdmaDeviceStatus};
use lab_state::Phase;
use russh::keys::PrivateKey;
use serde::Serialize;

use crate::facts::{LabFacts, LabLevelFacts, NodeFacts};
use agent_proto::auth::AgentSecret;

use crate::lab::{connect_pinned, Lab, LabError};

/// Version of the `status --json` layout.
pub const STATUS_SCHEMA: u32 = 1;

impl Lab {
    /// What the lab looks like now: machines, SSH, agents, RDMA devices.
    pub async fn status(&self) -> Result<LabStatus, LabError> {
        self.status_over(None).await
    }

    /// `up`, then the lab's status read over the SSH sessions `up` already
    /// holds (a new connection per node cost 1-1.7 s of a 12-17 s `up`).
    pub async fn up_with_status(
        &self,
        opts: &crate::lab::UpOptions,
        reporter: &dyn lab_state::progress::Reporter,
    ) -> Result<(crate::lab::UpOutcome, Result<LabStatus, LabError>), LabError> {
        self.up_then(opts, reporter, |lab, sessions, reporter| {
            Box::pin(lab_state::progress::step(
                reporter,
                "lab",
                "status",
                lab.status_over(Some(sessions)),
            ))
        })
        .await
    }

    /// The status, over `sessions` (one per node of the state, in order)
    /// when given, else over a new SSH connection per node.
    async fn status_over(&self, sessions: Option<&[Arc<SshSession>]>) -> Result<LabStatus, LabError> {
        let Some(state) = self.dir.load()? else {
            return Ok(LabStatus {
                schema: STATUS_SCHEMA,
                lab: self.spec.name.clone(),
                provider: self.spec.provider.to_string(),
                fabric: self.spec.fabric.to_string(),
                phase: None,
                created_at: None,
                provider_state: serde_json::Value::Null,
                state_dir: self.dir.root().display().to_string(),
                facts: None,
                nodes: Vec::new(),
            });
        };
        let facts = LabFacts::load(&self.dir);
        let provider = self.provider()?;
        let key = Arc::new(ssh::load_or_create_key(&self.dir.ssh_key())?);
        // Unreadable, it is each node's error: the machines' status still shows.
        let secret = self.agent_secret().map_err(|e| e.to_string());
        let nodes = join_all(state.nodes.iter().enumerate().map(|(i, node)| {
            let key = key.clone();
            let session = sessions.and_then(|s| s.get(i)).cloned();
            let (provider, state, facts, secret) = (&provider, &state, &facts, secret.as_ref());
            async move {
                let liveness = match provider.check_alive(&self.dir, state, &node.name).await {
                    Ok(()) => Liveness::Running,
                    Err(e) => Liveness::Stopped(e.to_string().lines().next().unwrap_or_default().to_string()),
                };
                let node_facts = facts.as_ref().and_then(|f| f.node(&node.name)).cloned();
                node_status(node, liveness, session, key, secret, node_facts).await
            }
        }))
        .await;
        Ok(LabStatus {
            schema: STATUS_SCHEMA,
            lab: state.lab.clone(),
            provider: state.provider.clone(),
            fabric: state.fabric.clone(),
            phase: Some(state.phase),
            created_at: Some(state.created_at.clone()),
            provider_state: state.provider_state.clone(),
            state_dir: self.dir.root().display().to_string(),
            facts: facts.map(|f| f.lab_level()),
            nodes,
        })
    }
}

/// `labctl status` for one lab.
#[derive(Debug, Clone, Serialize)]
pub struct LabStatus {
    /// [`STATUS_SCHEMA`].
    pub schema: u32,
    /// The lab.
    pub lab: String,
    /// Its provider.
    pub provider: String,
    /// Its fabric.
    pub fabric: String,
    /// `None` when the lab is not up.
    pub phase: Option<Phase>,
    /// When it was created.
    pub created_at: Option<String>,
    /// Provider facts (accelerator, supervisor).
    pub provider_state: serde_json::Value,
    /// The state directory.
    pub state_dir: String,
    /// The lab-level facts `up` wrote on the nodes; `None` when not up (or
    /// up by a labctl without lab facts).
    pub facts: Option<LabLevelFacts>,
    /// Per node.
    pub nodes: Vec<NodeStatus>,
}

/// One node in `labctl status`.
#[derive(Debug, Clone, Serialize)]
pub struct NodeStatus {
    /// The node.
    pub name: String,
    /// Its machine.
    pub vm: Liveness,
    /// `host:port` of its SSH.
    pub ssh: String,
    /// Its address on the data link.
    pub data_addr: String,
    /// SSH answered with the pinned key.
    pub ssh_ok: bool,
    /// The agent, when it answered.
    pub agent: Option<AgentStatus>,
    /// RDMA devices reported by the agent.
    pub rdma: Vec<RdmaDeviceStatus>,
    /// The first thing that failed, if anything did.
    pub error: Option<String>,
    /// The netem impairment on its data NIC (`labctl impair`), read from the
    /// node; null when there is none.
    pub impairment: Option<crate::impair::Netem>,
    /// The node's lab facts (from `up`, not read from the node).
    pub facts: Option<NodeFacts>,
}

/// The agent as seen by `status`.
#[derive(Debug, Clone, Serialize)]
pub struct AgentStatus {
    /// Its version.
    pub version: String,
    /// Seconds since it started.
    pub uptime_s: u64,
    /// Its resident memory, bytes.
    pub rss_bytes: u64,
    /// Kernel release of the node.
    pub kernel: String,
    /// rdma-core version of the node.
    pub rdma_core: String,
}

async fn node_status(
    node: &lab_state::NodeState,
    vm: Liveness,
    open: Option<Arc<SshSession>>,
    key: Arc<PrivateKey>,
    secret: Result<&AgentSecret, &String>,
    facts: Option<NodeFacts>,
) -> NodeStatus {
    let mut status = NodeStatus {
        name: node.name.clone(),
        ssh: format!("{}:{}", node.ssh_host, node.ssh_port),
        data_addr: format!("{}/{}", node.data_addr, node.data_prefix),
        vm: vm.clone(),
        ssh_ok: false,
        agent: None,
        rdma: Vec::new(),
        error: None,
        impairment: None,
        facts,
    };
    if let Liveness::Stopped(why) = vm {
        status.error = Some(why);
        return status;
    }
    // A session this function opens, it closes; one it is given stays open.
    let (session, owned) = match open {
        Some(session) => (session, false),
        None => match connect_pinned(node, key, Duration::from_secs(10)).await {
            Ok(s) => (Arc::new(s), true),
            Err(e) => {
                status.error = Some(e.to_string());
                return status;
            }
        },
    };
    status.ssh_ok = true;
    if node.data_netdev.is_some() {
        match crate::impair::active(&session, node).await {
            Ok(netem) => status.impairment = netem,
            Err(e) => tracing::debug!(node = %node.name, "cannot read the impairment: {e}"),
        }
    }
    let secret = match secret {
        Ok(secret) => secret,
        Err(e) => {
            status.error = Some(LabError::AgentSecret(e.clone()).to_string());
            if owned {
                session.close().await;
            }
            return status;
        }
    };
    let result = async {
        let mut client = agent::connect(session.clone(), node.agent_port, secret).await?;
        let health = agent::call(&node.name, "Health", deadline::HEALTH, client.health(HealthRequest {})).await?;
        let info = agent::call(
            &node.name,
            "NodeInfo",
            deadline::NODE_INFO,
            client.node_info(NodeInfoRequest {}),
        )
        .await?;
        Ok::<_, AgentError>((health, info))
    }
    .await;
    match result {
        Ok((health, info)) => {
            status.agent = Some(AgentStatus {
                version: health.version,
                uptime_s: health.uptime_s,
                rss_bytes: health.rss_bytes,
                kernel: info.kernel.clone(),
                rdma_core: info.rdma_core_version.clone(),
            });
            status.rdma = rdma_ports(&info);
        }
        Err(e) => status.error = Some(e.to_string()),
    }
    if owned {
        session.close().await;
    }
    status
}
