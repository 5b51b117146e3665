//! Sessions: one side of a workload run on its own OS thread (verbs calls
//! block and busy-poll; they stay off the async runtime). The thread owns
//! every resource of the session, so ending the thread — finished, failed,
//! timed out or aborted — deregisters the memory and destroys the QP.
//!
//! This module owns what every kind of session shares: the request
//! ([`SessionSpec`]), the service's grip on the thread ([`SessionHandle`],
//! [`Command`]), the thread plumbing ([`spawn_thread_session`],
//! [`finish_side`]), the errors ([`SessionError`]), the limits of a
//! session's waits (`bounds`), and what a verbs workload sees of its side
//! ([`side`]) with the peer's buffer as rdma_cm carries it ([`blob`]), and
//! who a server lets in ([`admission`]).
//!
//! It must not know any workload, nor the sessions that run one: those sit
//! above it and above [`crate::workload`] — the verbs sessions in
//! [`crate::verbs_session`], the libfabric and TCP ones in `fabric_session`
//! and `tcp_session`.

pub mod admission;
pub mod blob;
pub(crate) mod bounds;
mod error;
pub mod side;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use agent_proto::auth::ConnectProof;
use agent_proto::v1::{CmMode, Endpoint, FabricEndpoint, Role, SideResult, WorkloadParams};
use tokio::sync::oneshot;

pub use error::SessionError;
pub use side::{ProgressSink, Side, DONE_IMM};

/// Session timeout when params.timeout_ms is 0.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How a session thread ends, whatever kind of session it ran: logs the
/// outcome; a failure before the endpoint was published goes to Prepare
/// (which is still waiting for it); the outcome goes to Run/Collect.
pub(crate) fn finish_side<T>(
    outcome: Result<SideResult, SessionError>,
    endpoint_tx: Option<oneshot::Sender<Result<T, SessionError>>>,
    result_tx: oneshot::Sender<Result<SideResult, SessionError>>,
) {
    match &outcome {
        Ok(r) => tracing::info!(verified = r.verified, elapsed_s = r.elapsed_s, "side finished"),
        Err(e) => tracing::warn!(error = %e, "side failed"),
    }
    let outcome = match (endpoint_tx, outcome) {
        (Some(tx), Err(e)) => {
            let _ = tx.send(Err(e));
            Err(SessionError::Setup("prepare failed".into()))
        }
        (_, outcome) => outcome,
    };
    let _ = result_tx.send(outcome);
    // The session's memory was freed with its resources: give it back, so
    // that an idle agent's RSS is its own and not its last run's.
    crate::verbs::release_free_memory();
}

/// Where a one-thread session publishes its endpoint; None on a client.
pub(crate) type EndpointSender<T> = Option<oneshot::Sender<Result<T, SessionError>>>;

/// Starts a session of a kind that runs on one thread of its own and has no
/// Connect step (libfabric, TCP): builds its handle, runs `side` on a thread
/// named `<kind>-<id>` inside `span`, and ends it with [`finish_side`]. `side`
/// gets the abort flag, `run` (the client's peer and sink; None on a server)
/// and the endpoint sender (None on a client, which publishes no endpoint).
#[allow(clippy::type_complexity)]
pub(crate) fn spawn_thread_session<T, R, F>(
    spec: SessionSpec,
    kind: &str,
    span: tracing::Span,
    run: Option<R>,
    side: F,
) -> Result<(SessionHandle, oneshot::Receiver<Result<T, SessionError>>), SessionError>
where
    T: Send + 'static,
    R: Send + 'static,
    F: FnOnce(&SessionSpec, Arc<AtomicBool>, Option<R>, &mut EndpointSender<T>) -> Result<SideResult, SessionError>
        + Send
        + 'static,
{
    // Not oob: Connect is refused for these kinds.
    let (handle, ends) = SessionHandle::new(spec.role, CmMode::RdmaCm);
    let (cancel, result_tx) = (ends.cancel, ends.result);
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    let name = format!("{kind}-{}", spec.id.chars().take(8).collect::<String>());
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let _enter = span.enter();
            let mut endpoint_tx = run.is_none().then_some(endpoint_tx);
            let outcome = side(&spec, cancel, run, &mut endpoint_tx);
            finish_side(outcome, endpoint_tx, result_tx);
        })
        .map_err(|e| SessionError::Setup(format!("spawning the session thread: {e}")))?;
    Ok((handle, endpoint_rx))
}

/// What to set up.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The controller's session id.
    pub id: String,
    /// What the run's client sends first and its server requires before it
    /// answers (see [`agent_proto::auth::ConnectProof`]).
    pub proof: ConnectProof,
    /// Workload parameters.
    pub params: WorkloadParams,
    /// Server or client.
    pub role: Role,
    /// This node's data address ("10.77.0.1", optionally with a port).
    pub bind_addr: String,
}

impl SessionSpec {
    /// The session timeout.
    pub fn timeout(&self) -> Duration {
        let base = if self.params.timeout_ms == 0 {
            DEFAULT_TIMEOUT
        } else {
            Duration::from_millis(self.params.timeout_ms)
        };
        // A client's connect delay and a timed run's duration come on top of
        // the setup allowance.
        base + self.params.beyond_timeout()
    }

    /// This node's data address as an IP (a port, if given, is ignored).
    pub fn bind_ip(&self) -> Result<IpAddr, SessionError> {
        if let Ok(sa) = self.bind_addr.parse::<SocketAddr>() {
            return Ok(sa.ip());
        }
        self.bind_addr
            .parse::<IpAddr>()
            .map_err(|_| SessionError::Setup(format!("bind_addr {:?} is not an IP address", self.bind_addr)))
    }
}

/// The server's address and port in a peer endpoint (rdma_cm and TCP sessions).
pub(crate) fn peer_socket_addr(peer: &Endpoint) -> Result<SocketAddr, SessionError> {
    let ip: IpAddr = peer
        .address
        .parse()
        .map_err(|_| SessionError::Setup(format!("peer address {:?} is not an IP address", peer.address)))?;
    let port = u16::try_from(peer.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| SessionError::Setup(format!("peer port {} is not a port", peer.port)))?;
    Ok(SocketAddr::new(ip, port))
}

/// Commands a prepared session waits for.
pub enum Command {
    /// Server, oob: the client's endpoint.
    Connect(Endpoint, oneshot::Sender<Result<(), SessionError>>),
    /// Client, oob: the server's endpoint, and where to stream progress.
    Run(Endpoint, ProgressSink),
    /// A collective's rank over libfabric: every other rank's endpoint and
    /// region in rank order, and where to stream progress.
    RunRanks(Vec<FabricEndpoint>, ProgressSink),
    /// A collective's rank over verbs with rdma_cm: every other rank's
    /// listener in rank order, and where to stream progress.
    RunCmRanks(Vec<Endpoint>, ProgressSink),
}

/// The controller's next command for a prepared session thread. Checks
/// `alive` (abort, deadline) before each wait of at most 100 ms, so the
/// thread notices either while the controller is silent.
pub(crate) fn next_command(
    commands: &std::sync::mpsc::Receiver<Command>,
    alive: impl Fn() -> Result<(), SessionError>,
) -> Result<Command, SessionError> {
    use std::sync::mpsc::RecvTimeoutError;
    loop {
        alive()?;
        match commands.recv_timeout(Duration::from_millis(100)) {
            Ok(command) => return Ok(command),
            Err(RecvTimeoutError::Timeout) => continue,
            Err(RecvTimeoutError::Disconnected) => {
                return Err(SessionError::Aborted("session dropped by the service".into()))
            }
        }
    }
}

/// The service's grip on a running session thread.
pub struct SessionHandle {
    /// Set to abort; the thread notices within about 100 ms.
    pub cancel: Arc<AtomicBool>,
    /// Commands for a prepared session.
    pub commands: std::sync::mpsc::Sender<Command>,
    /// The side's final result.
    pub result: Option<oneshot::Receiver<Result<SideResult, SessionError>>>,
    /// The side's role.
    pub role: Role,
    /// The connection mode.
    pub cm: CmMode,
}

/// The session thread's ends of a new [`SessionHandle`].
pub(crate) struct ThreadEnds {
    /// Set by Abort (and when the handle is dropped).
    pub cancel: Arc<AtomicBool>,
    /// Commands for a prepared session.
    pub commands: std::sync::mpsc::Receiver<Command>,
    /// Where the side's final result goes.
    pub result: oneshot::Sender<Result<SideResult, SessionError>>,
}

impl SessionHandle {
    /// A handle for a session of `role` connected in mode `cm`, and the
    /// thread's ends of it.
    pub(crate) fn new(role: Role, cm: CmMode) -> (SessionHandle, ThreadEnds) {
        let cancel = Arc::new(AtomicBool::new(false));
        let (cmd_tx, cmd_rx) = std::sync::mpsc::channel();
        let (result_tx, result_rx) = oneshot::channel();
        let handle = SessionHandle {
            cancel: Arc::clone(&cancel),
            commands: cmd_tx,
            result: Some(result_rx),
            role,
            cm,
        };
        let ends = ThreadEnds {
            cancel,
            commands: cmd_rx,
            result: result_tx,
        };
        (handle, ends)
    }
}

impl Drop for SessionHandle {
    fn drop(&mut self) {
        // A forgotten session must not hold RDMA memory forever.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_runs_extend_the_timeout() {
        let mut spec = SessionSpec {
            id: "s".into(),
            proof: agent_proto::auth::AgentSecret::generate().connect_proof(b""),
            params: WorkloadParams::default(),
            role: Role::Server,
            bind_addr: "10.0.0.1".into(),
        };
        assert_eq!(spec.timeout(), DEFAULT_TIMEOUT);
        spec.params.duration_s = 5.0;
        assert_eq!(spec.timeout(), DEFAULT_TIMEOUT + Duration::from_secs(5));
        assert_eq!(spec.bind_ip().unwrap().to_string(), "10.0.0.1");
        spec.bind_addr = "10.0.0.1:7000".into();
        assert!(spec.bind_ip().is_ok());
    }
}
