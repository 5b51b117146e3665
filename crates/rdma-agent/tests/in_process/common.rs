//! Shared by the agent's in-process tests: an agent served on 127.0.0.1:0
//! and a generated client connected to it with the agent's secret. Every
//! agent of the test binary is of one lab: they share [`lab_secret`], as a
//! lab's agents do, so a run's two sides derive the same connect proof.
//! `tests/bounded_memory.rs` includes it too, and uses part of it.
#![allow(dead_code)]

use agent_proto::auth::AgentSecret;
use agent_proto::v1::agent_client::AgentClient;
use agent_proto::v1::WorkloadParams;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint};

/// A client that sends the agent's secret with every call.
pub type Client = AgentClient<InterceptedService<Channel, AgentSecret>>;

/// A running in-process agent.
pub struct Started {
    /// A client carrying the agent's secret.
    pub client: Client,
    /// The agent's address (for clients of a test's own making).
    pub channel: Channel,
    /// Dropping (or sending on) it stops the agent.
    pub stop: tokio::sync::oneshot::Sender<()>,
}

/// The secret of the lab every agent of this test binary belongs to.
pub fn lab_secret() -> &'static AgentSecret {
    static SECRET: std::sync::OnceLock<AgentSecret> = std::sync::OnceLock::new();
    SECRET.get_or_init(AgentSecret::generate)
}

/// Starts an agent of the test binary's lab.
pub async fn start_agent() -> Started {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let secret = lab_secret().clone();
    tokio::spawn(rdma_agent::service::run(listener, secret.clone(), async {
        let _ = stop_rx.await;
    }));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    Started {
        client: AgentClient::with_interceptor(channel.clone(), secret),
        channel,
        stop,
    }
}

/// Starts an agent; dropping (or sending on) the returned sender stops it.
pub async fn start() -> (Client, tokio::sync::oneshot::Sender<()>) {
    let started = start_agent().await;
    (started.client, started.stop)
}

/// Parameters of one operation of `workload` at `size` bytes, on the
/// agent's choice of GID.
pub fn one_op_params(workload: &str, size: u64) -> WorkloadParams {
    WorkloadParams {
        workload: workload.into(),
        size,
        iterations: 1,
        gid_index: -1,
        ..Default::default()
    }
}
