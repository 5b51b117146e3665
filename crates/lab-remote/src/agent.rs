//! The controller's side of the agent contract: a gRPC client whose transport
//! is an SSH direct-tcpip channel to 127.0.0.1 inside the node, so the agent
//! never listens on a network, and whose every call carries the lab's agent
//! secret, so no other local user of the node can drive it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::auth::AgentSecret;
use agent_proto::v1::agent_client::AgentClient;
use agent_proto::v1::HealthRequest;
use backon::{ConstantBuilder, Retryable};
use hyper_util::rt::TokioIo;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

use crate::ssh::SshSession;

/// A connected agent client that sends the lab's secret with every call.
pub type Client = AgentClient<InterceptedService<Channel, AgentSecret>>;

/// Errors reaching an agent.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// The channel could not be set up.
    #[error("node `{node}`: cannot reach rdma-agent on 127.0.0.1:{port} through SSH: {message}")]
    Unreachable {
        /// The node.
        node: String,
        /// The agent's port inside the node.
        port: u16,
        /// What failed.
        message: String,
    },
    /// The agent answered with an error.
    #[error("node `{node}`: rdma-agent: {status}")]
    Rpc {
        /// The node.
        node: String,
        /// The gRPC status.
        status: Box<tonic::Status>,
    },
    /// The agent accepted the call and did not answer in time (stopped,
    /// wedged, or the node is starved).
    #[error("node `{node}`: rdma-agent did not answer {call} within {waited_s} s; it may be stopped or wedged (`labctl exec {node} -- ps -o pid,stat,cmd -C rdma-agent`; state T means stopped)")]
    Deadline {
        /// The node.
        node: String,
        /// The call (`Health`, `NodeInfo`, `Prepare`, ...).
        call: &'static str,
        /// Seconds waited.
        waited_s: u64,
    },
    /// The agent did not become healthy.
    #[error("node `{node}`: rdma-agent did not answer Health within {waited_s} s ({last}); its log is /var/log/rdma-agent.log on the node (labctl exec {node} -- tail /var/log/rdma-agent.log)")]
    NotHealthy {
        /// The node.
        node: String,
        /// Seconds waited.
        waited_s: u64,
        /// The last error.
        last: String,
    },
}

/// How long each agent call may take. The agent answers these from memory
/// or after work bounded by its own limits, so a call that takes longer means
/// a stopped or wedged agent, not a slow one. (Runs have their own deadline:
/// the workload's timeout plus a margin.)
pub mod deadline {
    use std::time::Duration;

    /// Health: answered from memory.
    pub const HEALTH: Duration = Duration::from_secs(10);
    /// NodeInfo: reads sysfs and opens each device once. A run waits for it
    /// at most its own timeout when that is shorter.
    pub const NODE_INFO: Duration = Duration::from_secs(20);
    /// Prepare and Connect: register memory and set up queue pairs; a large
    /// registration under emulation takes seconds.
    pub const SETUP: Duration = Duration::from_secs(60);
}

/// Awaits an agent call for at most `limit`; past it, an error that names the
/// node and the call instead of a wait without end.
pub async fn call<T>(
    node: &str,
    call: &'static str,
    limit: Duration,
    request: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, AgentError> {
    match tokio::time::timeout(limit, request).await {
        Ok(Ok(reply)) => Ok(reply.into_inner()),
        Ok(Err(status)) => Err(AgentError::Rpc {
            node: node.to_string(),
            status: Box::new(status),
        }),
        Err(_) => Err(AgentError::Deadline {
            node: node.to_string(),
            call,
            waited_s: limit.as_secs(),
        }),
    }
}

/// Connects to the agent listening on `127.0.0.1:port` inside the node.
pub async fn connect(ssh: Arc<SshSession>, port: u16, secret: &AgentSecret) -> Result<Client, AgentError> {
    let node = ssh.node().to_string();
    // The URI is never resolved: every connection is a fresh SSH channel.
    let channel = Endpoint::from_static("http://rdma-agent.lab")
        .connect_timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let ssh = ssh.clone();
            async move { ssh.open_tcp("127.0.0.1", port).await.map(TokioIo::new) }
        }))
        .await
        .map_err(|e| AgentError::Unreachable {
            node: node.clone(),
            port,
            message: error_chain(&e),
        })?;
    Ok(AgentClient::with_interceptor(channel, secret.clone()).max_decoding_message_size(64 << 20))
}

/// Waits until the agent answers Health; returns its version.
pub async fn wait_healthy(
    ssh: Arc<SshSession>,
    port: u16,
    secret: &AgentSecret,
    wait: Duration,
) -> Result<String, AgentError> {
    let node = ssh.node().to_string();
    let started = Instant::now();
    let attempt = || async {
        let mut client = connect(ssh.clone(), port, secret).await.map_err(|e| e.to_string())?;
        call(&node, "Health", deadline::HEALTH, client.health(HealthRequest {}))
            .await
            .map(|reply| reply.version)
            .map_err(|e| e.to_string())
    };
    let backoff = ConstantBuilder::new()
        .with_delay(Duration::from_millis(300))
        .without_max_times();
    attempt
        .retry(backoff)
        .when(|_| started.elapsed() <= wait)
        .await
        .map_err(|last| AgentError::NotHealthy {
            node: node.clone(),
            waited_s: started.elapsed().as_secs(),
            last,
        })
}

/// An error and its sources on one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let message = s.to_string();
        if !text.contains(&message) {
            text.push_str(": ");
            text.push_str(&message);
        }
        source = s.source();
    }
    text
}
