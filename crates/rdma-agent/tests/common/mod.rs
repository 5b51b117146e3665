//! Shared by the agent's in-process tests: an agent served on 127.0.0.1:0
//! and a generated client connected to it.

use agent_proto::v1::agent_client::AgentClient;
use tonic::transport::{Channel, Endpoint};

/// Starts an agent; dropping (or sending on) the returned sender stops it.
pub async fn start() -> (AgentClient<Channel>, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(rdma_agent::service::run(listener, async {
        let _ = stop_rx.await;
    }));
    let channel = Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    (AgentClient::new(channel), stop_tx)
}
