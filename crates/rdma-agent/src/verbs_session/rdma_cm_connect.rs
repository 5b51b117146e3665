//! rdma_cm connection setup of a verbs side. The server listens on
//! `bind_addr:0`, and on CONNECT_REQUEST creates its QP on the device the
//! request arrived on, takes it INIT→RTR→RTS with `rdma_init_qp_attr`, and
//! accepts with the capability blob {addr, rkey, length} as private data.
//! The client resolves, connects, reads the blob from CONNECT_RESPONSE, goes
//! RTR→RTS, and establishes. A run over several QPs makes one connection
//! per QP to the same listener.
//!
//! Every connect request's private data opens with the run's connect proof
//! (then, from a client that exposes a buffer, its blob). The server rejects
//! a request without it before creating anything for it, logs the peer,
//! and waits on for its client ([`crate::session::admission`]). Once every
//! QP is connected, a thread reads the listener's channel while the run
//! runs and rejects any further request at once.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::auth::CONNECT_PROOF_LEN;
use agent_proto::v1::{Endpoint, Progress, SideResult};
use sideway::ibverbs::queue_pair::QueuePairState;
use sideway::ibverbs::AccessFlags;
use tokio::sync::oneshot;

use super::setup::{
    apply_corrupt_rkey, attach_trace, fill_local_gid, link_config, new_side, rd_atomic, resolve_completion, trace_blob,
};
use crate::session::admission::{connect_delay, Refused};
use crate::session::{blob, peer_socket_addr, ProgressSink, SessionError, SessionSpec, Side};
use crate::trace::{now_ns, What};
use crate::verbs::cm::ConnectParams;
use crate::verbs::{CmError, CmEventKind, CmId, EventChannel, Link};
use crate::workload::Workload;

/// Waits for one rdma_cm event of `want`; any other event is an error naming it.
pub(super) fn wait_cm_event(
    channel: &Arc<EventChannel>,
    want: CmEventKind,
    cancel: &AtomicBool,
    deadline: Instant,
    timeout: Duration,
) -> Result<crate::verbs::CmEvent, SessionError> {
    let ev = next_cm_event(channel, want, cancel, deadline, timeout)?;
    expect_kind(ev, want)
}

/// `ev` if it is of `want`; else an error naming both.
pub(super) fn expect_kind(ev: crate::verbs::CmEvent, want: CmEventKind) -> Result<crate::verbs::CmEvent, SessionError> {
    if ev.kind == want {
        return Ok(ev);
    }
    Err(unexpected(&ev, want))
}

/// The error of an rdma_cm event `ev` that came instead of one of `want`.
pub(super) fn unexpected(ev: &crate::verbs::CmEvent, want: CmEventKind) -> SessionError {
    SessionError::Protocol(format!(
        "expected rdma_cm {want:?}, got {} (status {})",
        ev.name, ev.status
    ))
}

/// The server's rdma_cm events. Whatever the server waits for, a
/// CONNECT_REQUEST that does not open with the run's proof is rejected,
/// logged and counted in `refused`, and the wait goes on.
struct ServerEvents<'a> {
    channel: &'a Arc<EventChannel>,
    spec: &'a SessionSpec,
    cancel: &'a AtomicBool,
    deadline: Instant,
    refused: Refused,
}

impl ServerEvents<'_> {
    /// Waits for the next event of `want` (see the type's doc).
    fn wait(&mut self, want: CmEventKind) -> Result<crate::verbs::CmEvent, SessionError> {
        loop {
            let mut ev = next_cm_event(self.channel, want, self.cancel, self.deadline, self.spec.timeout())?;
            if ev.kind == CmEventKind::ConnectRequest && !self.spec.proof.admits(&ev.private_data) {
                let peer = ev.new_id.as_ref().and_then(|id| id.peer_addr());
                if let Some(id) = ev.new_id.take() {
                    id.reject();
                }
                // Transports pad private data (with zeros on RoCE), so a
                // request without a proof mostly arrives with 16 bytes that
                // are not one.
                let why = "its private data does not open with this run's connect proof";
                let peer = peer.map_or("an unknown address".into(), |a| a.to_string());
                self.refused.refuse("rdma_cm", &peer, why);
                continue;
            }
            return expect_kind(ev, want);
        }
    }
}

/// The next rdma_cm event, of any kind (`want` names the wait in errors).
pub(super) fn next_cm_event(
    channel: &Arc<EventChannel>,
    want: CmEventKind,
    cancel: &AtomicBool,
    deadline: Instant,
    timeout: Duration,
) -> Result<crate::verbs::CmEvent, SessionError> {
    let what = format!("{want:?}");
    loop {
        if cancel.load(Ordering::Relaxed) {
            return Err(SessionError::Aborted(format!("while waiting for rdma_cm {what}")));
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(SessionError::Timeout {
                what: format!("rdma_cm event {what}"),
                after: timeout,
            });
        }
        match channel.next_event(left.min(Duration::from_millis(200)), &what) {
            Ok(ev) => return Ok(ev),
            Err(CmError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// The accept of connect `request` onto the link's QP `qp` with
/// `private_data`: each side's outstanding READs and atomics as the
/// request offered them, capped by what the link's device allows.
pub(super) fn accept_params<'a>(
    request: &crate::verbs::CmEvent,
    link: &Link,
    qp: usize,
    private_data: &'a [u8],
) -> ConnectParams<'a> {
    ConnectParams {
        qp_num: link.qp_num_at(qp),
        private_data,
        initiator_depth: request.responder_resources.min(rd_atomic(link)),
        responder_resources: request.initiator_depth.min(rd_atomic(link)),
    }
}

/// Records an rdma_cm event that arrived at `t_ns`.
pub(super) fn trace_cm(side: &mut Side, t_ns: u64, qp: usize, ev: &crate::verbs::CmEvent) {
    if let Some(tr) = side.link.tracer() {
        let what = What::Cm {
            name: ev.name.clone(),
            status: ev.status,
            private_data: ev.private_data.len(),
        };
        tr.record_at(t_ns, qp as u32, what);
    }
}

/// The server side: listen, publish the endpoint, accept, run.
pub(crate) fn server(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
) -> Result<SideResult, SessionError> {
    let ip = spec.bind_ip()?;
    let channel = EventChannel::new()?;
    let listen_id = channel.create_id()?;
    listen_id.bind(SocketAddr::new(ip, 0))?;
    // One CONNECT_REQUEST per QP; the client sends them one after another.
    listen_id.listen(spec.params.num_qps.max(1) as i32 + 3)?;
    let port = listen_id.local_port();
    tracing::info!(%ip, port, "listening (rdma_cm)");
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok(Endpoint {
            address: ip.to_string(),
            port: u32::from(port),
            qps: Vec::new(),
        }));
    }
    let mut events = ServerEvents {
        channel: &channel,
        spec,
        cancel,
        deadline,
        refused: Refused::default(),
    };
    let mut request = events.wait(CmEventKind::ConnectRequest)?;
    let request_at = now_ns();
    let id: CmId = request
        .new_id
        .take()
        .ok_or_else(|| SessionError::Protocol("CONNECT_REQUEST without a new id".into()))?;
    let setup = (|| -> Result<Side, SessionError> {
        let device = id.device_name()?;
        let spec = &resolve_completion(spec, workload, &device);
        let link = Link::open(&link_config(spec, workload, device))?;
        let mut side = new_side(spec, link, cancel, deadline, None);
        trace_cm(&mut side, request_at, 0, &request);
        side.location.port = id.port_num();
        // A client that exposes a buffer too (write-lat's ping-pong) sends
        // its blob after the proof.
        if let Ok(peer) = blob::decode(&request.private_data[CONNECT_PROOF_LEN..]) {
            side.peer = peer;
        }
        side.link.modify_qp(&id.qp_attr(QueuePairState::Init)?, "INIT")?;
        workload.prepare(&mut side)?;
        side.link
            .modify_qp(&id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
        side.link.modify_qp(&id.qp_attr(QueuePairState::ReadyToSend)?, "RTS")?;
        fill_local_gid(&mut side, ip);
        Ok(side)
    })();
    let mut side = match setup {
        Ok(side) => side,
        Err(e) => {
            id.reject();
            return Err(e);
        }
    };
    let exposed = side.exposed.map(|b| side.link.remote_buf(b)).unwrap_or_default();
    let private = blob::encode(&exposed);
    id.accept(&accept_params(&request, &side.link, 0, &private))?;
    trace_blob(&mut side, true, &exposed);
    let established = events.wait(CmEventKind::Established)?;
    trace_cm(&mut side, now_ns(), 0, &established);
    tracing::info!(qpn = side.link.qp_num(), "connection established");
    // The other QPs of a multi-QP run: one rdma_cm connection each, to the
    // same listener, each accepted onto the next QP of the link.
    let mut ids = vec![id];
    for i in 1..side.link.num_qps() {
        let mut request = events.wait(CmEventKind::ConnectRequest)?;
        let id: CmId = request
            .new_id
            .take()
            .ok_or_else(|| SessionError::Protocol("CONNECT_REQUEST without a new id".into()))?;
        let moved = (|| -> Result<(), SessionError> {
            side.link.modify_qp_at(i, &id.qp_attr(QueuePairState::Init)?, "INIT")?;
            workload.qp_in_init(&mut side, i)?;
            side.link
                .modify_qp_at(i, &id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
            side.link
                .modify_qp_at(i, &id.qp_attr(QueuePairState::ReadyToSend)?, "RTS")?;
            Ok(())
        })();
        if let Err(e) = moved {
            id.reject();
            return Err(e);
        }
        id.accept(&accept_params(&request, &side.link, i, &private))?;
        let established = events.wait(CmEventKind::Established)?;
        trace_cm(&mut side, now_ns(), i, &established);
        tracing::info!(qpn = side.link.qp_num_at(i), qp = i, "connection established");
        ids.push(id);
    }
    side.start_clock();
    let (mut result, late) = run_refusing_strangers(&channel, spec, workload, &mut side);
    events.refused.extend(late);
    for id in &ids {
        id.disconnect();
    }
    attach_trace(&mut side, &mut result, &spec.id);
    if let Ok(result) = &mut result {
        events.refused.report(result);
    }
    result
}

/// Runs `workload` on `side`, every QP of which is connected, while a
/// thread reads `channel` and refuses each connect request as it arrives
/// (any is a stranger's now) instead of leaving it queued until the run
/// ends. Returns the run's result and the connects refused meanwhile.
pub(super) fn run_refusing_strangers(
    channel: &Arc<EventChannel>,
    spec: &SessionSpec,
    workload: &dyn Workload,
    side: &mut Side,
) -> (Result<SideResult, SessionError>, Refused) {
    let running = AtomicBool::new(true);
    std::thread::scope(|scope| {
        let watcher = scope.spawn(|| refuse_while_running(channel, spec, &running));
        let result = {
            let _stop = StopOnDrop(&running);
            workload.run(side)
        };
        (result, watcher.join().unwrap_or_default())
    })
}

/// Clears its flag when dropped: the run's watcher stops even when the
/// workload panics.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Relaxed);
    }
}

/// While `running`, rejects every CONNECT_REQUEST on the server's channel
/// (the run's own QPs are all connected, so any is a stranger's) and logs
/// it; other events (the run's own connections') are read and let go.
fn refuse_while_running(channel: &Arc<EventChannel>, spec: &SessionSpec, running: &AtomicBool) -> Refused {
    let mut refused = Refused::default();
    while running.load(Ordering::Relaxed) {
        match channel.next_event(Duration::from_millis(100), "a connect request during the run") {
            Ok(mut ev) if ev.kind == CmEventKind::ConnectRequest => {
                let peer = ev.new_id.as_ref().and_then(|id| id.peer_addr());
                if let Some(id) = ev.new_id.take() {
                    id.reject();
                }
                let why = if spec.proof.admits(&ev.private_data) {
                    "it came while the run was running, with every QP of the run connected"
                } else {
                    "its private data does not open with this run's connect proof"
                };
                let peer = peer.map_or("an unknown address".into(), |a| a.to_string());
                refused.refuse("rdma_cm", &peer, why);
            }
            Ok(ev) => tracing::debug!(event = %ev.name, "rdma_cm event during the run"),
            Err(CmError::Timeout { .. }) => {}
            Err(e) => {
                tracing::warn!(error = %e, "reading rdma_cm events during the run stopped");
                break;
            }
        }
    }
    refused
}

/// The client side: resolve, connect, read the server's blob, run.
pub(crate) fn client(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    peer: &Endpoint,
    mut sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    let ip = spec.bind_ip()?;
    let dst = peer_socket_addr(peer)?;
    connect_delay(&spec.params, cancel, deadline)?;
    let channel = EventChannel::new()?;
    let id = channel.create_id()?;
    let step_timeout = Duration::from_secs(5).min(spec.timeout());
    id.resolve_addr(Some(SocketAddr::new(ip, 0)), dst, step_timeout)?;
    let addr_resolved = wait_cm_event(&channel, CmEventKind::AddrResolved, cancel, deadline, spec.timeout())?;
    let addr_resolved_at = now_ns();
    id.resolve_route(step_timeout)?;
    let route_resolved = wait_cm_event(&channel, CmEventKind::RouteResolved, cancel, deadline, spec.timeout())?;
    let route_resolved_at = now_ns();
    let device = id.device_name()?;
    let spec = &resolve_completion(spec, workload, &device);
    let link = Link::open(&link_config(spec, workload, device))?;
    sink(Progress {
        phase: "connect".into(),
        message: format!("connecting to {dst} via {}", link.device()),
        ..Default::default()
    });
    let mut side = new_side(spec, link, cancel, deadline, Some(sink));
    trace_cm(&mut side, addr_resolved_at, 0, &addr_resolved);
    trace_cm(&mut side, route_resolved_at, 0, &route_resolved);
    side.location.port = id.port_num();
    // Before connect, rdma_cm's INIT attributes grant no remote access; the
    // client's QP takes the same flags as in oob mode, so a workload whose
    // server writes back (write-lat) can. MRs still decide what is reachable.
    let mut init = id.qp_attr(QueuePairState::Init)?;
    init.setup_access_flags(
        AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic,
    );
    side.link.modify_qp(&init, "INIT")?;
    workload.prepare(&mut side)?;
    // The run's proof, then, from workloads where the server writes back
    // (write-lat), the client's buffer.
    let mut hello = spec.proof.as_bytes().to_vec();
    if let Some(b) = side.exposed {
        hello.extend_from_slice(&blob::encode(&side.link.remote_buf(b)));
    }
    id.connect(&ConnectParams {
        qp_num: side.link.qp_num(),
        private_data: &hello,
        initiator_depth: rd_atomic(&side.link),
        responder_resources: rd_atomic(&side.link),
    })?;
    let response = wait_cm_event(&channel, CmEventKind::ConnectResponse, cancel, deadline, spec.timeout())?;
    trace_cm(&mut side, now_ns(), 0, &response);
    side.peer = blob::decode(&response.private_data).map_err(SessionError::Protocol)?;
    let peer_blob = side.peer;
    trace_blob(&mut side, false, &peer_blob);
    side.link
        .modify_qp(&id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
    side.link.modify_qp(&id.qp_attr(QueuePairState::ReadyToSend)?, "RTS")?;
    id.establish()?;
    // The other QPs of a multi-QP run, connected one after another to the
    // same listener (the server accepts each onto its next QP).
    let mut ids = vec![id];
    for i in 1..side.link.num_qps() {
        let id = channel.create_id()?;
        id.resolve_addr(Some(SocketAddr::new(ip, 0)), dst, step_timeout)?;
        wait_cm_event(&channel, CmEventKind::AddrResolved, cancel, deadline, spec.timeout())?;
        id.resolve_route(step_timeout)?;
        wait_cm_event(&channel, CmEventKind::RouteResolved, cancel, deadline, spec.timeout())?;
        side.link.modify_qp_at(i, &init, "INIT")?;
        workload.qp_in_init(&mut side, i)?;
        id.connect(&ConnectParams {
            qp_num: side.link.qp_num_at(i),
            private_data: spec.proof.as_bytes(),
            initiator_depth: rd_atomic(&side.link),
            responder_resources: rd_atomic(&side.link),
        })?;
        wait_cm_event(&channel, CmEventKind::ConnectResponse, cancel, deadline, spec.timeout())?;
        side.link
            .modify_qp_at(i, &id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
        side.link
            .modify_qp_at(i, &id.qp_attr(QueuePairState::ReadyToSend)?, "RTS")?;
        id.establish()?;
        ids.push(id);
    }
    fill_local_gid(&mut side, ip);
    apply_corrupt_rkey(&mut side);
    side.start_clock();
    side.progress(
        "run",
        0,
        0,
        format!(
            "connected; server buffer {:#x} rkey {:#x}",
            side.peer.addr, side.peer.rkey
        ),
    );
    let mut result = workload.run(&mut side);
    for id in &ids {
        id.disconnect();
    }
    attach_trace(&mut side, &mut result, &spec.id);
    // Give the DREQs a moment to leave before the ids are destroyed.
    let _ = channel.next_event(Duration::from_millis(200), "DISCONNECTED");
    result
}
