//! The gRPC `Agent` service: validates requests, keeps the session table,
//! hands work to session threads, and turns crate errors into `tonic::Status`
//! in exactly one place ([`From<SessionError> for Status`]).

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use agent_proto::auth::AgentSecret;
use agent_proto::v1::agent_server::{Agent, AgentServer};
use agent_proto::v1::{
    run_event, AbortReply, AbortRequest, ClockReply, ClockRequest, CmMode, CollectRequest, ConnectReply,
    ConnectRequest, HealthReply, HealthRequest, NodeInfoReply, NodeInfoRequest, PrepareReply, PrepareRequest, Role,
    RunEvent, RunRequest, SideResult, TakeTraceReply, TakeTraceRequest, WorkloadParams,
};
use tokio::net::TcpListener;
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tonic::{Request, Response, Status};
use tracing::Instrument;

use crate::fabric_session;
use crate::registry::{self, Runner};
use crate::session::{self, Command, SessionError, SessionHandle, SessionSpec};
use crate::validate::{Limits, ValidationError};

impl From<SessionError> for Status {
    fn from(e: SessionError) -> Status {
        let message = e.to_string();
        match e {
            SessionError::Invalid(_) => Status::invalid_argument(message),
            SessionError::Setup(_) => Status::failed_precondition(message),
            SessionError::Timeout { .. } => Status::deadline_exceeded(message),
            SessionError::Aborted(_) => Status::aborted(message),
            SessionError::Completion { .. } | SessionError::OnQp { .. } => Status::aborted(message),
            SessionError::Cm(_) | SessionError::Link(_) => Status::unavailable(message),
            SessionError::Protocol(_) => Status::internal(message),
        }
    }
}

/// The agent's state shared by all RPCs.
pub struct AgentService {
    started: Instant,
    sessions: Arc<Mutex<HashMap<String, SessionHandle>>>,
    /// The lab's secret: the key of each run's connect proof.
    secret: AgentSecret,
}

impl AgentService {
    fn new(secret: AgentSecret) -> Self {
        AgentService {
            secret,
            started: Instant::now(),
            sessions: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

/// Serves the agent on `listener` until `shutdown` resolves. Every call must
/// carry `secret` (see [`agent_proto::auth`]); others are refused before
/// any handler runs.
pub async fn run(
    listener: TcpListener,
    secret: AgentSecret,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<(), tonic::transport::Error> {
    let service = AgentService::new(secret.clone());
    let only_the_controller = move |request: Request<()>| {
        secret.check(request.metadata())?;
        Ok(request)
    };
    tonic::transport::Server::builder()
        .add_service(AgentServer::with_interceptor(service, only_the_controller))
        .serve_with_incoming_shutdown(TcpListenerStream::new(listener), shutdown)
        .await
}

fn rss_bytes() -> u64 {
    // statm's second field is resident pages.
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    pages * 4096
}

/// The request's parameters, checked, and the runner of its workload.
fn check_params(params: Option<&WorkloadParams>) -> Result<(WorkloadParams, Runner), SessionError> {
    let params = params
        .cloned()
        .ok_or(SessionError::Invalid(ValidationError::Missing { field: "params" }))?;
    let runner = registry::check(&params, &Limits::of_this_node())?;
    Ok((params, runner))
}

fn check_session_id(id: &str) -> Result<(), SessionError> {
    if id.is_empty() {
        return Err(ValidationError::Missing { field: "session_id" }.into());
    }
    Ok(())
}

/// A verbs session, or a bulk-tcp one: both get their endpoint from Prepare
/// (rdma_cm listener or TCP listener) and their peer's in Run.
#[allow(clippy::type_complexity)]
fn spawn_session(
    spec: SessionSpec,
    runner: Runner,
    run: Option<(agent_proto::v1::Endpoint, session::ProgressSink)>,
) -> Result<
    (
        SessionHandle,
        tokio::sync::oneshot::Receiver<Result<agent_proto::v1::Endpoint, SessionError>>,
    ),
    SessionError,
> {
    match runner {
        Runner::Verbs(workload) => crate::verbs_session::spawn(spec, workload, run),
        Runner::Tcp => crate::tcp_session::spawn(spec, run),
        Runner::Fabric(_) | Runner::FabricCollective { .. } => Err(SessionError::Protocol(
            "a libfabric workload has no verbs or TCP session".into(),
        )),
    }
}

fn collect_timeout(requested_ms: u64) -> Duration {
    if requested_ms == 0 {
        session::DEFAULT_TIMEOUT
    } else {
        Duration::from_millis(requested_ms)
    }
}

impl AgentService {
    fn insert(&self, id: &str, handle: SessionHandle) -> Result<(), SessionError> {
        let mut sessions = self.sessions.lock().expect("session table poisoned");
        if sessions.contains_key(id) {
            return Err(SessionError::Setup(format!("session {id:?} already exists")));
        }
        sessions.insert(id.to_string(), handle);
        Ok(())
    }

    fn remove(&self, id: &str) -> Option<SessionHandle> {
        self.sessions.lock().expect("session table poisoned").remove(id)
    }

    async fn prepare_inner(&self, req: PrepareRequest) -> Result<PrepareReply, SessionError> {
        check_session_id(&req.session_id)?;
        let (params, runner) = check_params(req.params.as_ref())?;
        let role = Role::try_from(req.role).map_err(|_| SessionError::Setup(format!("unknown role {}", req.role)))?;
        match runner {
            Runner::Fabric(kind) => {
                return self
                    .prepare_fabric(req, params, role, |spec| fabric_session::spawn(spec, kind, None))
                    .await
            }
            Runner::FabricCollective { op, .. } => {
                return self
                    .prepare_fabric(req, params, role, |spec| fabric_session::collective::spawn(spec, op))
                    .await
            }
            _ => {}
        }
        if role == Role::Client && params.cm() == CmMode::RdmaCm && params.collective.is_none() {
            return Err(SessionError::Setup(
                "rdma_cm clients need no Prepare: call Run with the server's endpoint".into(),
            ));
        }
        let spec = SessionSpec {
            id: req.session_id.clone(),
            proof: self.secret.connect_proof(&params.run_nonce),
            params,
            role,
            bind_addr: req.bind_addr,
        };
        let timeout = spec.timeout();
        let (handle, endpoint) = spawn_session(spec, runner, None)?;
        self.insert(&req.session_id, handle)?;
        let endpoint = match tokio::time::timeout(timeout, endpoint).await {
            Ok(Ok(Ok(endpoint))) => endpoint,
            Ok(Ok(Err(e))) => {
                self.remove(&req.session_id);
                return Err(e);
            }
            Ok(Err(_)) => {
                self.remove(&req.session_id);
                return Err(SessionError::Setup("session thread ended before it was ready".into()));
            }
            Err(_) => {
                self.remove(&req.session_id);
                return Err(SessionError::Timeout {
                    what: "the session to be ready".into(),
                    after: timeout,
                });
            }
        };
        Ok(PrepareReply {
            endpoint: Some(endpoint),
            fabric: None,
        })
    }

    /// Prepare of a libfabric server or collective rank (see
    /// [`fabric_session`]): `spawn` starts its thread.
    #[allow(clippy::type_complexity)]
    async fn prepare_fabric(
        &self,
        req: PrepareRequest,
        params: WorkloadParams,
        role: Role,
        spawn: impl FnOnce(
            SessionSpec,
        ) -> Result<
            (
                SessionHandle,
                tokio::sync::oneshot::Receiver<
                    Result<(agent_proto::v1::Endpoint, agent_proto::v1::FabricEndpoint), SessionError>,
                >,
            ),
            SessionError,
        >,
    ) -> Result<PrepareReply, SessionError> {
        let spec = SessionSpec {
            id: req.session_id.clone(),
            proof: self.secret.connect_proof(&params.run_nonce),
            params,
            role,
            bind_addr: req.bind_addr,
        };
        let timeout = spec.timeout();
        let (handle, ready) = spawn(spec)?;
        self.insert(&req.session_id, handle)?;
        let outcome = tokio::time::timeout(timeout, ready).await;
        match outcome {
            Ok(Ok(Ok((endpoint, fabric)))) => Ok(PrepareReply {
                endpoint: Some(endpoint),
                fabric: Some(fabric),
            }),
            other => {
                self.remove(&req.session_id);
                Err(match other {
                    Ok(Ok(Err(e))) => e,
                    Ok(Err(_)) => SessionError::Setup("session thread ended before it was ready".into()),
                    _ => SessionError::Timeout {
                        what: "the session to be ready".into(),
                        after: timeout,
                    },
                })
            }
        }
    }

    async fn connect_inner(&self, req: ConnectRequest) -> Result<ConnectReply, SessionError> {
        check_session_id(&req.session_id)?;
        let peer = req
            .peer
            .ok_or(SessionError::Invalid(ValidationError::Missing { field: "peer" }))?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        {
            let sessions = self.sessions.lock().expect("session table poisoned");
            let handle = sessions
                .get(&req.session_id)
                .ok_or_else(|| SessionError::Setup(format!("no session {:?}", req.session_id)))?;
            if handle.role != Role::Server || handle.cm != CmMode::Oob {
                return Err(SessionError::Setup("Connect is for oob server sessions".into()));
            }
            handle
                .commands
                .send(Command::Connect(peer, tx))
                .map_err(|_| SessionError::Setup("session already ended".into()))?;
        }
        match tokio::time::timeout(session::DEFAULT_TIMEOUT, rx).await {
            Ok(Ok(r)) => r.map(|()| ConnectReply {}),
            Ok(Err(_)) => Err(SessionError::Setup("session ended during Connect".into())),
            Err(_) => Err(SessionError::Timeout {
                what: "Connect".into(),
                after: session::DEFAULT_TIMEOUT,
            }),
        }
    }

    /// Starts or resumes the client side; returns the stream receiver.
    fn run_inner(
        &self,
        req: RunRequest,
    ) -> Result<tokio::sync::mpsc::Receiver<Result<RunEvent, Status>>, SessionError> {
        check_session_id(&req.session_id)?;
        let (params, runner) = check_params(req.params.as_ref())?;
        let peer = req
            .peer
            .ok_or(SessionError::Invalid(ValidationError::Missing { field: "peer" }))?;
        let (tx, rx) = tokio::sync::mpsc::channel(64);
        let progress_tx = tx.clone();
        // Never block the data path on a slow reader: drop progress when full.
        let sink: session::ProgressSink = Box::new(move |p| {
            let _ = progress_tx.try_send(Ok(RunEvent {
                event: Some(run_event::Event::Progress(p)),
            }));
        });
        // A fabric or rdma_cm client starts its session here; an oob client
        // and a collective's rank were started by Prepare and only get
        // their peers.
        let spec = SessionSpec {
            id: req.session_id.clone(),
            proof: self.secret.connect_proof(&params.run_nonce),
            params,
            role: Role::Client,
            bind_addr: req.bind_addr,
        };
        let result_rx = if let Runner::Fabric(kind) = runner {
            let fabric_peer = req
                .fabric_peer
                .ok_or(SessionError::Invalid(ValidationError::Missing { field: "fabric_peer" }))?;
            let (mut handle, _ready) = fabric_session::spawn(spec, kind, Some((fabric_peer, sink)))?;
            let result = handle.result.take().expect("fresh handle");
            self.insert(&req.session_id, handle)?;
            result
        } else if spec.params.cm() == CmMode::Oob || spec.params.collective.is_some() {
            let mut sessions = self.sessions.lock().expect("session table poisoned");
            let handle = sessions.get_mut(&req.session_id).ok_or_else(|| {
                SessionError::Setup(format!(
                    "no session {:?}: oob clients and collective ranks must be prepared (Prepare role=CLIENT) before Run",
                    req.session_id
                ))
            })?;
            if handle.role != Role::Client {
                return Err(SessionError::Setup("Run is for client sessions".into()));
            }
            let command = match runner {
                Runner::FabricCollective { .. } => Command::RunRanks(req.fabric_peers, sink),
                _ if spec.params.collective.is_some() && spec.params.cm() == CmMode::RdmaCm => {
                    Command::RunCmRanks(req.rank_listeners, sink)
                }
                _ => Command::Run(peer, sink),
            };
            handle
                .commands
                .send(command)
                .map_err(|_| SessionError::Setup("session already ended".into()))?;
            handle
                .result
                .take()
                .ok_or_else(|| SessionError::Setup("session is already running".into()))?
        } else {
            let (mut handle, _endpoint) = spawn_session(spec, runner, Some((peer, sink)))?;
            let result = handle.result.take().expect("fresh handle");
            self.insert(&req.session_id, handle)?;
            result
        };
        let sessions = Arc::clone(&self.sessions);
        let id = req.session_id.clone();
        tokio::spawn(
            async move {
                let event = match result_rx.await {
                    Ok(Ok(result)) => Ok(RunEvent {
                        event: Some(run_event::Event::Result(result)),
                    }),
                    Ok(Err(e)) => Err(Status::from(e)),
                    Err(_) => Err(Status::internal("session thread ended without a result")),
                };
                sessions.lock().expect("session table poisoned").remove(&id);
                let _ = tx.send(event).await;
            }
            .in_current_span(),
        );
        Ok(rx)
    }

    async fn collect_inner(&self, req: CollectRequest) -> Result<SideResult, SessionError> {
        check_session_id(&req.session_id)?;
        let result_rx = {
            let mut sessions = self.sessions.lock().expect("session table poisoned");
            let handle = sessions
                .get_mut(&req.session_id)
                .ok_or_else(|| SessionError::Setup(format!("no session {:?}", req.session_id)))?;
            handle
                .result
                .take()
                .ok_or_else(|| SessionError::Setup("session result already being collected".into()))?
        };
        let timeout = collect_timeout(req.timeout_ms);
        let outcome = tokio::time::timeout(timeout, result_rx).await;
        // Whatever happened, the session is over; dropping the handle cancels its thread.
        self.remove(&req.session_id);
        match outcome {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(SessionError::Setup("session thread ended without a result".into())),
            Err(_) => Err(SessionError::Timeout {
                what: "the server side to finish (Collect); session aborted".into(),
                after: timeout,
            }),
        }
    }
}

type RunStream = Pin<Box<dyn tokio_stream::Stream<Item = Result<RunEvent, Status>> + Send>>;

#[tonic::async_trait]
impl Agent for AgentService {
    async fn health(&self, _req: Request<HealthRequest>) -> Result<Response<HealthReply>, Status> {
        let active = self.sessions.lock().expect("session table poisoned").len() as u32;
        Ok(Response::new(HealthReply {
            version: crate::AGENT_VERSION.to_string(),
            uptime_s: self.started.elapsed().as_secs(),
            active_sessions: active,
            rss_bytes: rss_bytes(),
        }))
    }

    async fn node_info(&self, _req: Request<NodeInfoRequest>) -> Result<Response<NodeInfoReply>, Status> {
        let span = tracing::info_span!("rpc", method = "NodeInfo");
        // sysfs reads, one device open and a dpkg-query: keep them off the reactor.
        let info = tokio::task::spawn_blocking(crate::node_info::collect)
            .instrument(span)
            .await
            .map_err(|e| Status::internal(format!("node info task: {e}")))?;
        Ok(Response::new(info))
    }

    async fn prepare(&self, req: Request<PrepareRequest>) -> Result<Response<PrepareReply>, Status> {
        let req = req.into_inner();
        let span = tracing::info_span!("rpc", method = "Prepare", session = %req.session_id, role = req.role);
        async {
            let reply = self.prepare_inner(req).await;
            if let Err(e) = &reply {
                tracing::warn!(error = %e, "Prepare failed");
            }
            Ok(Response::new(reply?))
        }
        .instrument(span)
        .await
    }

    async fn connect(&self, req: Request<ConnectRequest>) -> Result<Response<ConnectReply>, Status> {
        let req = req.into_inner();
        let span = tracing::info_span!("rpc", method = "Connect", session = %req.session_id);
        async {
            Ok(Response::new(
                self.connect_inner(req)
                    .await
                    .inspect_err(|e| tracing::warn!(error = %e, "Connect failed"))?,
            ))
        }
        .instrument(span)
        .await
    }

    type RunStream = RunStream;

    async fn run(&self, req: Request<RunRequest>) -> Result<Response<Self::RunStream>, Status> {
        let req = req.into_inner();
        let span = tracing::info_span!("rpc", method = "Run", session = %req.session_id);
        let _enter = span.enter();
        let rx = self
            .run_inner(req)
            .inspect_err(|e| tracing::warn!(error = %e, "Run failed"))?;
        Ok(Response::new(Box::pin(ReceiverStream::new(rx)) as RunStream))
    }

    async fn collect(&self, req: Request<CollectRequest>) -> Result<Response<SideResult>, Status> {
        let req = req.into_inner();
        let span = tracing::info_span!("rpc", method = "Collect", session = %req.session_id);
        async {
            Ok(Response::new(
                self.collect_inner(req)
                    .await
                    .inspect_err(|e| tracing::warn!(error = %e, "Collect failed"))?,
            ))
        }
        .instrument(span)
        .await
    }

    async fn abort(&self, req: Request<AbortRequest>) -> Result<Response<AbortReply>, Status> {
        let req = req.into_inner();
        let span = tracing::info_span!("rpc", method = "Abort", session = %req.session_id);
        let _enter = span.enter();
        let found = self.remove(&req.session_id).is_some();
        tracing::info!(found, reason = %req.reason, "abort");
        Ok(Response::new(AbortReply { found }))
    }

    async fn clock(&self, _req: Request<ClockRequest>) -> Result<Response<ClockReply>, Status> {
        let realtime_ns = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Ok(Response::new(ClockReply {
            now_ns: crate::trace::now_ns(),
            realtime_ns,
        }))
    }

    async fn take_trace(&self, req: Request<TakeTraceRequest>) -> Result<Response<TakeTraceReply>, Status> {
        let req = req.into_inner();
        // The wait is bounded: an aborted side ends within its next poll.
        let wait = Duration::from_millis(u64::from(req.wait_ms).min(10_000));
        let until = Instant::now() + wait;
        loop {
            if let Some(failed) = crate::trace::take_failed(&req.session_id) {
                return Ok(Response::new(TakeTraceReply {
                    trace: Some(failed.trace),
                    error: failed.error,
                }));
            }
            if Instant::now() >= until {
                return Ok(Response::new(TakeTraceReply::default()));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}
