//! One side of a workload session, run on its own OS thread (verbs calls
//! block and busy-poll; they stay off the async runtime). The thread owns
//! every RDMA resource of the session, so ending the thread — finished,
//! failed, timed out or aborted — deregisters the memory and destroys the QP.
//!
//! Connection setup, per `params.cm`:
//! - rdma_cm: the server listens on `bind_addr:0`, and on CONNECT_REQUEST
//!   creates its QP on the device the request arrived on, takes it
//!   INIT→RTR→RTS with `rdma_init_qp_attr`, and accepts with the capability
//!   blob {addr, rkey, length} as private data. The client resolves, connects,
//!   reads the blob from CONNECT_RESPONSE, goes RTR→RTS, and establishes.
//! - oob: both sides are prepared (QP in INIT, endpoint returned); the server
//!   gets the client's endpoint through Connect and the client gets the
//!   server's through Run, and each takes its QP to RTR/RTS with them.
//!
//! The end of a run is a SEND_WITH_IMM carrying [`DONE_IMM`] from the client,
//! so the server knows when to verify in both modes: zero-length, or 8 bytes
//! holding the client's operation count where the server's verdict needs it
//! (a server of one-sided operations cannot count them itself).

use std::collections::{BTreeMap, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::v1::{
    CmMode, CompletionMode, CpuUsage, Endpoint, Progress, QpEndpoint, Role, SideResult, WorkloadParams,
};
use sideway::ibverbs::address::{AddressHandleAttribute, Gid};
use sideway::ibverbs::device_context::Mtu;
use sideway::ibverbs::queue_pair::{QueuePairAttribute, QueuePairState};
use sideway::ibverbs::AccessFlags;
use tokio::sync::oneshot;

use crate::cpu::CpuTimes;
use crate::validate::ValidationError;
use crate::verbs::cm::ConnectParams;
use crate::verbs::{
    wc_opcode_name, wc_status_name, BufId, CmError, CmEventKind, CmId, Completion, EventChannel, Link, LinkConfig,
    LinkError, LocalSlice, RecvChain, RemoteBuf, SendChain, SendOp, SendWr,
};
use crate::workload::{self, Workload};

/// The immediate of the client's final "run is over" message.
pub const DONE_IMM: u32 = 0xFFFF_FFFF;
/// Session timeout when params.timeout_ms is 0.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Outstanding READ/atomic requests per QP we ask for at most (perftest's
/// default `--outs` is 128; rxe allows 128), capped by the device.
const RD_ATOMIC_MAX: u8 = 128;
/// What we ask for when the device cannot be queried.
const RD_ATOMIC_FALLBACK: u8 = 16;

/// Outstanding READ/atomic requests per QP for this link's device.
fn rd_atomic(link: &Link) -> u8 {
    match link.context().query_device() {
        Ok(attr) => attr.max_qp_rd_atom().clamp(1, i32::from(RD_ATOMIC_MAX)) as u8,
        Err(_) => RD_ATOMIC_FALLBACK,
    }
}

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The request was refused before touching RDMA.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// Something in the request does not fit this node (e.g. no RDMA device for the address).
    #[error("{0}")]
    Setup(String),
    /// rdma_cm failed.
    #[error("rdma_cm: {0}")]
    Cm(#[from] CmError),
    /// A verbs call failed.
    #[error("verbs: {0}")]
    Link(#[from] LinkError),
    /// A work completion came back with an error status.
    #[error("{op} completion failed: {status} ({meaning}), wr_id={wr_id:#x}, vendor_err={vendor_err:#x}{}",
        if *status == "IBV_WC_WR_FLUSH_ERR" { "; the QP was already in error (the peer's side likely failed first)" } else { "" })]
    Completion {
        /// The operation of the failed request.
        op: &'static str,
        /// IBV_WC_* name.
        status: &'static str,
        /// Its meaning.
        meaning: &'static str,
        /// The request's id.
        wr_id: u64,
        /// Provider's vendor error.
        vendor_err: u32,
    },
    /// A wait ran past the session's deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The session timeout.
        after: Duration,
    },
    /// Abort was called.
    #[error("session aborted: {0}")]
    Aborted(String),
    /// The peer broke the protocol (bad private data, unexpected event...).
    #[error("protocol: {0}")]
    Protocol(String),
}

/// Kinds of work request, encoded in the top byte of wr_id so a failed
/// completion (whose opcode field is undefined) can still be named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum OpKind {
    /// RDMA WRITE.
    Write = 1,
    /// RDMA READ.
    Read = 2,
    /// SEND.
    Send = 3,
    /// RDMA WRITE with immediate.
    WriteImm = 4,
    /// Atomic fetch-and-add.
    FetchAdd = 5,
    /// Atomic compare-and-swap.
    CompareSwap = 6,
    /// RECV.
    Recv = 7,
    /// The final notification.
    Done = 8,
}

impl OpKind {
    /// A wr_id for request `seq` of this kind.
    pub fn wr_id(self, seq: u64) -> u64 {
        ((self as u64) << 56) | (seq & 0x00FF_FFFF_FFFF_FFFF)
    }

    /// The sequence number inside a wr_id.
    pub fn seq(wr_id: u64) -> u64 {
        wr_id & 0x00FF_FFFF_FFFF_FFFF
    }

    /// The name of the operation a wr_id belongs to.
    pub fn name_of(wr_id: u64) -> &'static str {
        match (wr_id >> 56) as u8 {
            1 => "WRITE",
            2 => "READ",
            3 => "SEND",
            4 => "WRITE_WITH_IMM",
            5 => "FETCH_AND_ADD",
            6 => "COMPARE_AND_SWAP",
            7 => "RECV",
            8 => "SEND_WITH_IMM(done)",
            _ => "work request",
        }
    }
}

/// Receives progress events from a running side.
pub type ProgressSink = Box<dyn FnMut(Progress) + Send>;

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
    let cancel = Arc::new(AtomicBool::new(false));
    let (cmd_tx, _cmd_rx) = std::sync::mpsc::channel();
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    let (result_tx, result_rx) = oneshot::channel();
    let handle = SessionHandle {
        cancel: Arc::clone(&cancel),
        commands: cmd_tx,
        result: Some(result_rx),
        role: spec.role,
        // Not oob: Connect is refused for these kinds.
        cm: CmMode::RdmaCm,
    };
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

/// The client's done messages: without and with a count, from one 8-byte buffer.
struct DoneChains {
    ctrl: BufId,
    plain: SendChain,
    counted: SendChain,
}

/// Everything a workload sees of its side of the session.
pub struct Side {
    /// The QP, CQ and buffers.
    pub link: Link,
    /// The run's parameters.
    pub params: WorkloadParams,
    /// Which side this is.
    pub role: Role,
    /// The peer's exposed buffer (client side; from private data or Run's peer).
    pub peer: RemoteBuf,
    /// The buffer this side exposes to its peer (server side).
    pub exposed: Option<BufId>,
    /// The workload's other buffers, in the order it added them.
    pub bufs: Vec<BufId>,
    /// The workload's receive requests.
    pub recvs: Option<RecvChain>,
    /// Facts for the result.
    pub facts: BTreeMap<String, String>,
    deadline: Instant,
    timeout: Duration,
    cancel: Arc<AtomicBool>,
    progress: Option<ProgressSink>,
    pending: VecDeque<Completion>,
    passive: bool,
    spin_polls: bool,
    start: Instant,
    cpu_start: CpuTimes,
    done: Option<DoneChains>,
    psn: u32,
    gid: [u8; 16],
    sgid_index: u8,
    port: u8,
}

impl Side {
    /// Whether completions are awaited on a completion channel: when the
    /// run asks for event mode, or when this side is passive (see
    /// [`Side::set_passive`]) and its link has a channel (servers always do).
    pub fn event_mode(&self) -> bool {
        self.link.has_completion_channel() && (self.passive || self.params.completion() == CompletionMode::Event)
    }

    /// Polling waits spin without `sched_yield` between empty polls (as
    /// perftest's bandwidth loops do) instead of yielding (the default).
    pub fn set_spin_polls(&mut self, spin: bool) {
        self.spin_polls = spin;
    }

    /// Marks this side passive: it does no data-path work and only waits for
    /// a rare completion (the server of a one-sided run waits for the done
    /// message), so it sleeps on the completion channel instead of polling,
    /// as perftest's server sleeps on its socket.
    pub fn set_passive(&mut self, passive: bool) {
        self.passive = passive;
    }

    /// Restarts the clock and CPU counters (after connection setup).
    pub fn start_clock(&mut self) {
        self.start = Instant::now();
        self.cpu_start = CpuTimes::thread_now();
    }

    /// Time since [`Side::start_clock`].
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// CPU used since [`Side::start_clock`].
    pub fn cpu(&self) -> CpuUsage {
        let spent = CpuTimes::thread_now().since(&self.cpu_start);
        CpuUsage {
            user_s: spent.user_s,
            system_s: spent.system_s,
        }
    }

    /// Reports progress to the controller (Run's stream), if anyone listens.
    pub fn progress(&mut self, phase: &str, bytes: u64, ops: u64, message: impl Into<String>) {
        let elapsed_s = self.start.elapsed().as_secs_f64();
        if let Some(sink) = self.progress.as_mut() {
            sink(Progress {
                phase: phase.to_string(),
                bytes,
                ops,
                elapsed_s,
                message: message.into(),
            });
        }
    }

    /// Fails if the session was aborted or ran out of time.
    pub fn check_alive(&self, what: &str) -> Result<(), SessionError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(SessionError::Aborted(format!("while waiting for {what}")));
        }
        if Instant::now() >= self.deadline {
            return Err(SessionError::Timeout {
                what: what.to_string(),
                after: self.timeout,
            });
        }
        Ok(())
    }

    /// The next successful completion; an error completion fails the session
    /// with its status named. `what` names the wait for the timeout message.
    pub fn next_completion(&mut self, what: &str) -> Result<Completion, SessionError> {
        let mut scratch = [Completion::default(); 16];
        let mut spins: u32 = 0;
        let mut armed = false;
        loop {
            if let Some(c) = self.pending.pop_front() {
                if c.status != 0 {
                    let (status, meaning) = wc_status_name(c.status);
                    let op = match OpKind::name_of(c.wr_id) {
                        "work request" => wc_opcode_name(c.opcode),
                        name => name,
                    };
                    return Err(SessionError::Completion {
                        op,
                        status,
                        meaning,
                        wr_id: c.wr_id,
                        vendor_err: c.vendor_err,
                    });
                }
                return Ok(c);
            }
            let n = self.link.poll(&mut scratch)?;
            if n > 0 {
                self.pending.extend(scratch[..n].iter().copied());
                continue;
            }
            if self.event_mode() {
                self.check_alive(what)?;
                if !armed {
                    // Arm, then poll once more: a completion that arrived
                    // before the arming raises no event.
                    self.link.arm_cq()?;
                    armed = true;
                    continue;
                }
                let left = self.deadline.saturating_duration_since(Instant::now());
                self.link.wait_cq_event(left.min(Duration::from_millis(100)))?;
                armed = false;
                continue;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                self.check_alive(what)?;
            }
            if self.spin_polls {
                std::hint::spin_loop();
            } else {
                // One vCPU under emulation: let rxe's kernel work run.
                std::thread::yield_now();
            }
        }
    }

    /// The next completion if one is ready (never waits); an error
    /// completion fails the session like [`Side::next_completion`].
    pub fn try_completion(&mut self) -> Result<Option<Completion>, SessionError> {
        if self.pending.is_empty() {
            let mut scratch = [Completion::default(); 16];
            let n = self.link.poll(&mut scratch)?;
            self.pending.extend(scratch[..n].iter().copied());
        }
        if self.pending.is_empty() {
            return Ok(None);
        }
        self.next_completion("a ready completion").map(Some)
    }

    /// Client: tells the server the run is over, and waits until it was delivered.
    pub fn send_done(&mut self) -> Result<(), SessionError> {
        self.post_done(None)
    }

    /// Client: as [`Side::send_done`], the message carrying `count`, the
    /// operations this side did (8 bytes, little-endian), so that the
    /// server's verdict compares it with what it saw. The server's receive
    /// for it must hold 8 bytes.
    pub fn send_done_counting(&mut self, count: u64) -> Result<(), SessionError> {
        self.post_done(Some(count))
    }

    fn post_done(&mut self, count: Option<u64>) -> Result<(), SessionError> {
        if self.done.is_none() {
            let ctrl = self.link.add_buffer(8, crate::verbs::Access::Local)?;
            let chain = |len| {
                self.link.send_chain(&[SendWr {
                    wr_id: OpKind::Done.wr_id(0),
                    op: SendOp::SendImm {
                        local: LocalSlice {
                            buf: ctrl,
                            offset: 0,
                            len,
                        },
                        imm: DONE_IMM,
                    },
                    signaled: true,
                    inline: false,
                }])
            };
            self.done = Some(DoneChains {
                ctrl,
                plain: chain(0)?,
                counted: chain(8)?,
            });
        }
        let mut done = self.done.take().expect("built above");
        let chain = match count {
            Some(n) => {
                self.link.buffer_mut(done.ctrl).copy_from_slice(&n.to_le_bytes());
                &mut done.counted
            }
            None => &mut done.plain,
        };
        let posted = self.link.post_send(chain);
        self.done = Some(done);
        posted?;
        loop {
            let c = self.next_completion("the done notification's completion")?;
            if c.wr_id == OpKind::Done.wr_id(0) {
                return Ok(());
            }
        }
    }

    /// The count a done message carried ([`Side::send_done_counting`]), read
    /// from the bytes its receive landed in; None for a plain done.
    pub fn done_count(c: &Completion, received: &[u8]) -> Option<u64> {
        (c.byte_len == 8 && received.len() >= 8).then(|| u64::from_le_bytes(received[..8].try_into().expect("8 bytes")))
    }

    /// Whether a completion is the client's done notification.
    pub fn is_done(c: &Completion) -> bool {
        c.has_imm && c.imm == DONE_IMM && c.opcode == 128
    }

    /// A result with the common fields (role, elapsed, cpu, facts) filled in.
    pub fn base_result(&self) -> SideResult {
        let mut facts = self.facts.clone();
        facts.insert("device".into(), self.link.device().to_string());
        facts.insert("qpn".into(), self.link.qp_num().to_string());
        if self.link.num_qps() > 1 {
            let qpns: Vec<String> = (0..self.link.num_qps())
                .map(|i| self.link.qp_num_at(i).to_string())
                .collect();
            facts.insert("qpns".into(), qpns.join(","));
        }
        facts.insert("gid".into(), std::net::Ipv6Addr::from(self.gid).to_string());
        facts.insert("gid_index".into(), self.sgid_index.to_string());
        facts.insert("port".into(), self.port.to_string());
        if let Some(id) = self.exposed {
            let rb = self.link.remote_buf(id);
            facts.insert("mr_addr".into(), format!("{:#x}", rb.addr));
            facts.insert("mr_rkey".into(), format!("{:#x}", rb.rkey));
            facts.insert("mr_length".into(), rb.len.to_string());
        }
        if self.role == Role::Client {
            facts.insert("peer_addr".into(), format!("{:#x}", self.peer.addr));
            facts.insert("peer_rkey".into(), format!("{:#x}", self.peer.rkey));
        }
        SideResult {
            role: self.role as i32,
            elapsed_s: self.elapsed().as_secs_f64(),
            cpu: Some(self.cpu()),
            facts: facts.into_iter().collect(),
            ..Default::default()
        }
    }
}

/// The capability blob in the accept's private data: magic "RDAB", version,
/// rkey, addr, length, little endian (32 bytes).
pub mod blob {
    use crate::verbs::RemoteBuf;

    const MAGIC: &[u8; 4] = b"RDAB";
    const VERSION: u16 = 1;
    /// Encoded size.
    pub const LEN: usize = 32;

    /// Encodes a capability.
    pub fn encode(b: &RemoteBuf) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[0..4].copy_from_slice(MAGIC);
        out[4..6].copy_from_slice(&VERSION.to_le_bytes());
        out[8..12].copy_from_slice(&b.rkey.to_le_bytes());
        out[16..24].copy_from_slice(&b.addr.to_le_bytes());
        out[24..32].copy_from_slice(&b.len.to_le_bytes());
        out
    }

    /// Decodes a capability; transports may pad private data, so trailing bytes are ignored.
    pub fn decode(data: &[u8]) -> Result<RemoteBuf, String> {
        if data.len() < LEN {
            return Err(format!("private data is {} bytes, expected at least {LEN}", data.len()));
        }
        if &data[0..4] != MAGIC {
            return Err(format!(
                "private data does not start with \"RDAB\": {:02x?}",
                &data[0..4]
            ));
        }
        let version = u16::from_le_bytes([data[4], data[5]]);
        if version != VERSION {
            return Err(format!("capability blob version {version}, expected {VERSION}"));
        }
        let u64_at = |i: usize| u64::from_le_bytes(data[i..i + 8].try_into().expect("8 bytes"));
        Ok(RemoteBuf {
            rkey: u32::from_le_bytes(data[8..12].try_into().expect("4 bytes")),
            addr: u64_at(16),
            len: u64_at(24),
        })
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn round_trips_with_padding() {
            let b = RemoteBuf {
                addr: 0x7f00_dead_b000,
                rkey: 0x1234,
                len: 4096,
            };
            let mut padded = encode(&b).to_vec();
            padded.extend_from_slice(&[0; 20]);
            assert_eq!(decode(&padded), Ok(b));
            assert!(decode(&padded[..10]).is_err());
            padded[0] = b'X';
            assert!(decode(&padded).unwrap_err().contains("RDAB"));
        }
    }
}

/// What to set up.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// The controller's session id.
    pub id: String,
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
        // Timed runs get their duration on top of the setup allowance.
        if self.params.iterations == 0 && self.params.duration_s > 0.0 {
            base + crate::validate::duration(&self.params)
        } else {
            base
        }
    }

    fn bind_ip(&self) -> Result<IpAddr, SessionError> {
        if let Ok(sa) = self.bind_addr.parse::<SocketAddr>() {
            return Ok(sa.ip());
        }
        self.bind_addr
            .parse::<IpAddr>()
            .map_err(|_| SessionError::Setup(format!("bind_addr {:?} is not an IP address", self.bind_addr)))
    }
}

/// Commands a prepared session waits for.
pub enum Command {
    /// Server, oob: the client's endpoint.
    Connect(Endpoint, oneshot::Sender<Result<(), SessionError>>),
    /// Client, oob: the server's endpoint, and where to stream progress.
    Run(Endpoint, ProgressSink),
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

impl Drop for SessionHandle {
    fn drop(&mut self) {
        // A forgotten session must not hold RDMA memory forever.
        self.cancel.store(true, Ordering::Relaxed);
    }
}

/// Starts a session thread: Prepare (either role), or a rdma_cm client's Run
/// (`run` carries the server endpoint and progress sink). The returned
/// receiver yields this side's endpoint once it is ready.
pub fn spawn(
    spec: SessionSpec,
    run: Option<(Endpoint, ProgressSink)>,
) -> Result<(SessionHandle, oneshot::Receiver<Result<Endpoint, SessionError>>), SessionError> {
    let workload = workload::lookup(&spec.params.workload)?;
    let cancel = Arc::new(AtomicBool::new(false));
    let (cmd_tx, cmd_rx) = std::sync::mpsc::channel();
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    let (result_tx, result_rx) = oneshot::channel();
    let handle = SessionHandle {
        cancel: Arc::clone(&cancel),
        commands: cmd_tx,
        result: Some(result_rx),
        role: spec.role,
        cm: spec.params.cm(),
    };
    let name = format!("session-{}", spec.id.chars().take(8).collect::<String>());
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let span =
                tracing::info_span!("session", id = %spec.id, role = ?spec.role, workload = %spec.params.workload);
            let _enter = span.enter();
            // A rdma_cm client's Run publishes no endpoint; its errors go to the result.
            let mut endpoint_tx = if run.is_some() { None } else { Some(endpoint_tx) };
            let outcome = run_side(&spec, workload, &cancel, cmd_rx, &mut endpoint_tx, run);
            finish_side(outcome, endpoint_tx, result_tx);
        })
        .map_err(|e| SessionError::Setup(format!("spawning the session thread: {e}")))?;
    Ok((handle, endpoint_rx))
}

fn run_side(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    cmd_rx: std::sync::mpsc::Receiver<Command>,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
    run: Option<(Endpoint, ProgressSink)>,
) -> Result<SideResult, SessionError> {
    let deadline = Instant::now() + spec.timeout();
    match (spec.params.cm(), spec.role) {
        (CmMode::RdmaCm, Role::Server) => cm_server(spec, workload, cancel, deadline, endpoint_tx),
        (CmMode::RdmaCm, Role::Client) => {
            let (peer, sink) = run.ok_or_else(|| {
                SessionError::Setup("rdma_cm clients are not prepared: call Run with the server endpoint".into())
            })?;
            cm_client(spec, workload, cancel, deadline, &peer, sink)
        }
        (CmMode::Oob, role) => oob_side(spec, role, workload, cancel, deadline, cmd_rx, endpoint_tx),
    }
}

fn link_config(params: &WorkloadParams, role: Role, device: String) -> LinkConfig {
    let depth = workload::queue_depth(params);
    LinkConfig {
        device,
        max_send_wr: depth,
        max_recv_wr: workload::recv_queue_depth(params),
        max_inline: params.inline_size,
        // Servers always get a channel: a passive server sleeps on it.
        completion_channel: params.completion() == CompletionMode::Event || role == Role::Server,
        num_qps: params.num_qps.max(1),
    }
}

fn new_side(
    spec: &SessionSpec,
    link: Link,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    progress: Option<ProgressSink>,
) -> Side {
    Side {
        link,
        params: spec.params.clone(),
        role: spec.role,
        peer: RemoteBuf::default(),
        exposed: None,
        bufs: Vec::new(),
        recvs: None,
        facts: BTreeMap::new(),
        deadline,
        timeout: spec.timeout(),
        cancel: Arc::clone(cancel),
        progress,
        pending: VecDeque::with_capacity(64),
        passive: false,
        spin_polls: false,
        start: Instant::now(),
        cpu_start: CpuTimes::thread_now(),
        done: None,
        psn: initial_psn(),
        gid: [0; 16],
        sgid_index: 0,
        port: 1,
    }
}

/// The starting PSN of QP `i` (each QP of a side starts elsewhere in the 24-bit space).
fn qp_psn(base: u32, i: usize) -> u32 {
    base.wrapping_add((i as u32).wrapping_mul(0x0001_0001)) & 0x00FF_FFFF
}

/// A random-enough 24-bit starting PSN.
fn initial_psn() -> u32 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (nanos ^ (std::process::id() << 8)) & 0x00FF_FFFF
}

/// Waits for one rdma_cm event of `want`; any other event is an error naming it.
fn wait_cm_event(
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
            Ok(ev) if ev.kind == want => return Ok(ev),
            Ok(ev) => {
                return Err(SessionError::Protocol(format!(
                    "expected rdma_cm {what}, got {} (status {})",
                    ev.name, ev.status
                )))
            }
            Err(CmError::Timeout { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn cm_server(
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
    let request = wait_cm_event(&channel, CmEventKind::ConnectRequest, cancel, deadline, spec.timeout())?;
    let id: CmId = request
        .new_id
        .ok_or_else(|| SessionError::Protocol("CONNECT_REQUEST without a new id".into()))?;
    let setup = (|| -> Result<Side, SessionError> {
        let device = id.device_name()?;
        let link = Link::open(&link_config(&spec.params, spec.role, device))?;
        let mut side = new_side(spec, link, cancel, deadline, None);
        side.port = id.port_num();
        // A client that exposes a buffer too (write-lat's ping-pong) sends its blob.
        if !request.private_data.is_empty() {
            if let Ok(peer) = blob::decode(&request.private_data) {
                side.peer = peer;
            }
        }
        side.link.modify_qp(&id.qp_attr(QueuePairState::Init)?, "INIT")?;
        workload.prepare(&mut side)?;
        side.link
            .modify_qp(&id.qp_attr(QueuePairState::ReadyToReceive)?, "RTR")?;
        side.link.modify_qp(&id.qp_attr(QueuePairState::ReadyToSend)?, "RTS")?;
        fill_local_gid(&mut side, ip, None);
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
    id.accept(&ConnectParams {
        qp_num: side.link.qp_num(),
        private_data: &private,
        initiator_depth: request.responder_resources.min(rd_atomic(&side.link)),
        responder_resources: request.initiator_depth.min(rd_atomic(&side.link)),
    })?;
    wait_cm_event(&channel, CmEventKind::Established, cancel, deadline, spec.timeout())?;
    tracing::info!(qpn = side.link.qp_num(), "connection established");
    // The other QPs of a multi-QP run: one rdma_cm connection each, to the
    // same listener, each accepted onto the next QP of the link.
    let mut ids = vec![id];
    for i in 1..side.link.num_qps() {
        let request = wait_cm_event(&channel, CmEventKind::ConnectRequest, cancel, deadline, spec.timeout())?;
        let id: CmId = request
            .new_id
            .ok_or_else(|| SessionError::Protocol("CONNECT_REQUEST without a new id".into()))?;
        let moved = (|| -> Result<(), SessionError> {
            side.link.modify_qp_at(i, &id.qp_attr(QueuePairState::Init)?, "INIT")?;
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
        id.accept(&ConnectParams {
            qp_num: side.link.qp_num_at(i),
            private_data: &private,
            initiator_depth: request.responder_resources.min(rd_atomic(&side.link)),
            responder_resources: request.initiator_depth.min(rd_atomic(&side.link)),
        })?;
        wait_cm_event(&channel, CmEventKind::Established, cancel, deadline, spec.timeout())?;
        tracing::info!(qpn = side.link.qp_num_at(i), qp = i, "connection established");
        ids.push(id);
    }
    side.start_clock();
    let result = workload.run(&mut side);
    for id in &ids {
        id.disconnect();
    }
    result
}

fn cm_client(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    peer: &Endpoint,
    mut sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    let ip = spec.bind_ip()?;
    let server_ip: IpAddr = peer
        .address
        .parse()
        .map_err(|_| SessionError::Setup(format!("peer address {:?} is not an IP address", peer.address)))?;
    let port = u16::try_from(peer.port)
        .ok()
        .filter(|p| *p != 0)
        .ok_or_else(|| SessionError::Setup(format!("peer port {} is not a port", peer.port)))?;
    let dst = SocketAddr::new(server_ip, port);
    let channel = EventChannel::new()?;
    let id = channel.create_id()?;
    let step_timeout = Duration::from_secs(5).min(spec.timeout());
    id.resolve_addr(Some(SocketAddr::new(ip, 0)), dst, step_timeout)?;
    wait_cm_event(&channel, CmEventKind::AddrResolved, cancel, deadline, spec.timeout())?;
    id.resolve_route(step_timeout)?;
    wait_cm_event(&channel, CmEventKind::RouteResolved, cancel, deadline, spec.timeout())?;
    let device = id.device_name()?;
    let link = Link::open(&link_config(&spec.params, spec.role, device))?;
    sink(Progress {
        phase: "connect".into(),
        message: format!("connecting to {dst} via {}", link.device()),
        ..Default::default()
    });
    let mut side = new_side(spec, link, cancel, deadline, Some(sink));
    side.port = id.port_num();
    // Before connect, rdma_cm's INIT attributes grant no remote access; the
    // client's QP takes the same flags as in oob mode, so a workload whose
    // server writes back (write-lat) can. MRs still decide what is reachable.
    let mut init = id.qp_attr(QueuePairState::Init)?;
    init.setup_access_flags(
        AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic,
    );
    side.link.modify_qp(&init, "INIT")?;
    workload.prepare(&mut side)?;
    // Workloads where the server writes back (write-lat) expose a client buffer.
    let client_blob = side.exposed.map(|b| blob::encode(&side.link.remote_buf(b)));
    id.connect(&ConnectParams {
        qp_num: side.link.qp_num(),
        private_data: client_blob.as_ref().map_or(&[][..], |b| &b[..]),
        initiator_depth: rd_atomic(&side.link),
        responder_resources: rd_atomic(&side.link),
    })?;
    let response = wait_cm_event(&channel, CmEventKind::ConnectResponse, cancel, deadline, spec.timeout())?;
    side.peer = blob::decode(&response.private_data).map_err(SessionError::Protocol)?;
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
        id.connect(&ConnectParams {
            qp_num: side.link.qp_num_at(i),
            private_data: &[],
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
    fill_local_gid(&mut side, ip, None);
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
    let result = workload.run(&mut side);
    for id in &ids {
        id.disconnect();
    }
    // Give the DREQs a moment to leave before the ids are destroyed.
    let _ = channel.next_event(Duration::from_millis(200), "DISCONNECTED");
    result
}

fn apply_corrupt_rkey(side: &mut Side) {
    if let Some((addr, rkey)) = crate::validate::capability_override(&side.params) {
        side.facts.insert(
            "capability_override".into(),
            format!(
                "{addr:#x}:{rkey:#x} instead of {:#x}:{:#x}",
                side.peer.addr, side.peer.rkey
            ),
        );
        side.peer.addr = addr;
        side.peer.rkey = rkey;
    }
    if side.params.corrupt_rkey {
        // rxe and mlx5 both compare the key byte: flipping it is always invalid.
        let bad = side.peer.rkey ^ 0xFF;
        side.facts
            .insert("corrupt_rkey".into(), format!("{:#x} -> {bad:#x}", side.peer.rkey));
        side.peer.rkey = bad;
    }
}

fn fill_local_gid(side: &mut Side, ip: IpAddr, index: Option<u32>) {
    let device = side.link.device().to_string();
    let found = match (ip, index) {
        (_, Some(i)) => crate::node_info::gid_at(&device, side.port, i).map(|g| (i, g)),
        (IpAddr::V4(v4), None) => crate::node_info::find_ipv4_gid(v4, Some(&device)).map(|l| (l.index, l.gid)),
        _ => None,
    };
    if let Some((i, gid)) = found {
        side.sgid_index = i as u8;
        side.gid = gid;
    }
}

/// Where the oob side lives: its device, port and source GID.
fn oob_location(spec: &SessionSpec) -> Result<(String, u8, u32, [u8; 16]), SessionError> {
    let ip = spec.bind_ip()?;
    let port = if spec.params.ib_port == 0 {
        1
    } else {
        spec.params.ib_port as u8
    };
    let wanted_device = (!spec.params.device.is_empty()).then_some(spec.params.device.as_str());
    if spec.params.gid_index >= 0 {
        let device = match wanted_device {
            Some(d) => d.to_string(),
            None => match ip {
                IpAddr::V4(v4) => crate::node_info::find_ipv4_gid(v4, None)
                    .map(|l| l.device)
                    .ok_or_else(|| SessionError::Setup(format!("no RDMA device has a RoCE v2 GID for {ip}")))?,
                IpAddr::V6(_) => return Err(SessionError::Setup("oob over IPv6 needs params.device".into())),
            },
        };
        let index = spec.params.gid_index as u32;
        let gid = crate::node_info::gid_at(&device, port, index)
            .ok_or_else(|| SessionError::Setup(format!("{device} port {port} has no GID at index {index}")))?;
        return Ok((device, port, index, gid));
    }
    let IpAddr::V4(v4) = ip else {
        return Err(SessionError::Setup(
            "automatic GID selection needs an IPv4 bind_addr".into(),
        ));
    };
    let loc = crate::node_info::find_ipv4_gid(v4, wanted_device).ok_or_else(|| {
        SessionError::Setup(format!(
            "no RDMA device{} has the RoCE v2 GID ::ffff:{v4} (is rxe set up on the data NIC?)",
            wanted_device.map(|d| format!(" named {d}")).unwrap_or_default()
        ))
    })?;
    Ok((loc.device, loc.port, loc.index, loc.gid))
}

fn oob_side(
    spec: &SessionSpec,
    role: Role,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    deadline: Instant,
    cmd_rx: std::sync::mpsc::Receiver<Command>,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
) -> Result<SideResult, SessionError> {
    let (device, port, sgid_index, gid) = oob_location(spec)?;
    let link = Link::open(&link_config(&spec.params, spec.role, device))?;
    let mut side = new_side(spec, link, cancel, deadline, None);
    side.port = port;
    side.sgid_index = sgid_index as u8;
    side.gid = gid;
    let mut init = QueuePairAttribute::new();
    init.setup_state(QueuePairState::Init)
        .setup_pkey_index(0)
        .setup_port(port)
        .setup_access_flags(
            AccessFlags::LocalWrite | AccessFlags::RemoteWrite | AccessFlags::RemoteRead | AccessFlags::RemoteAtomic,
        );
    for i in 0..side.link.num_qps() {
        side.link.modify_qp_at(i, &init, "INIT")?;
    }
    workload.prepare(&mut side)?;
    let mtu = crate::verbs::link::port_active_mtu(side.link.context(), port).unwrap_or(1024);
    let exposed = side.exposed.map(|b| side.link.remote_buf(b)).unwrap_or_default();
    // One entry per QP, in QP order; the peer pairs them up by position.
    let qps = (0..side.link.num_qps())
        .map(|i| QpEndpoint {
            qpn: side.link.qp_num_at(i),
            psn: qp_psn(side.psn, i),
            gid: gid.to_vec(),
            lid: 0,
            mtu,
            addr: exposed.addr,
            rkey: exposed.rkey,
            length: exposed.len,
        })
        .collect();
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok(Endpoint {
            address: spec.bind_ip()?.to_string(),
            port: 0,
            qps,
        }));
    }
    // Wait for the peer's endpoint: Connect on the server, Run on the client.
    let (peer, reply) = loop {
        side.check_alive(if role == Role::Server { "Connect" } else { "Run" })?;
        match cmd_rx.recv_timeout(Duration::from_millis(100)) {
            Ok(Command::Connect(peer, reply)) if role == Role::Server => break (peer, Some(reply)),
            Ok(Command::Run(peer, sink)) if role == Role::Client => {
                side.progress = Some(sink);
                break (peer, None);
            }
            Ok(_) => return Err(SessionError::Protocol(format!("wrong command for a {role:?} session"))),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => {
                return Err(SessionError::Aborted("session dropped by the service".into()))
            }
        }
    };
    let connected = oob_connect(&mut side, &peer, mtu);
    if let Some(reply) = reply {
        let _ = reply.send(
            connected
                .as_ref()
                .map(|_| ())
                .map_err(|e| SessionError::Setup(e.to_string())),
        );
    }
    connected?;
    if role == Role::Client {
        apply_corrupt_rkey(&mut side);
        side.progress(
            "run",
            0,
            0,
            format!(
                "connected (oob); server buffer {:#x} rkey {:#x}",
                side.peer.addr, side.peer.rkey
            ),
        );
    }
    side.start_clock();
    workload.run(&mut side)
}

/// RTR and RTS of every QP with the peer's QP parameters (paired by position).
fn oob_connect(side: &mut Side, peer: &Endpoint, local_mtu: u32) -> Result<(), SessionError> {
    let ours = side.link.num_qps();
    if peer.qps.len() != ours {
        return Err(SessionError::Setup(if peer.qps.is_empty() {
            "peer endpoint has no QP (was it prepared with cm=OOB?)".to_string()
        } else {
            format!(
                "peer endpoint has {} QPs, this side has {ours} (were both sides prepared with the same num_qps?)",
                peer.qps.len()
            )
        }));
    }
    for (i, remote) in peer.qps.iter().enumerate() {
        let dgid: [u8; 16] = remote
            .gid
            .as_slice()
            .try_into()
            .map_err(|_| SessionError::Setup(format!("peer GID is {} bytes, expected 16", remote.gid.len())))?;
        let mtu_bytes = if remote.mtu == 0 {
            local_mtu
        } else {
            local_mtu.min(remote.mtu)
        };
        let path_mtu = match mtu_bytes {
            4096.. => Mtu::Mtu4096,
            2048.. => Mtu::Mtu2048,
            1024.. => Mtu::Mtu1024,
            512.. => Mtu::Mtu512,
            _ => Mtu::Mtu256,
        };
        let mut ah = AddressHandleAttribute::new();
        ah.setup_port(side.port)
            .setup_grh(&Gid::from(std::net::Ipv6Addr::from(dgid)), 0, side.sgid_index, 64, 0);
        let mut rtr = QueuePairAttribute::new();
        rtr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(path_mtu)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(rd_atomic(&side.link))
            .setup_min_rnr_timer(12)
            .setup_address_vector(&ah);
        side.link.modify_qp_at(i, &rtr, "RTR")?;
        let mut rts = QueuePairAttribute::new();
        rts.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(qp_psn(side.psn, i))
            .setup_timeout(14)
            .setup_retry_cnt(crate::verbs::TRANSPORT_RETRY_COUNT)
            .setup_rnr_retry(7)
            .setup_max_read_atomic(rd_atomic(&side.link));
        side.link.modify_qp_at(i, &rts, "RTS")?;
        if i == 0 {
            side.peer = RemoteBuf {
                addr: remote.addr,
                rkey: remote.rkey,
                len: remote.length,
            };
            side.facts.insert("path_mtu".into(), mtu_bytes.to_string());
            side.facts.insert("peer_qpn".into(), remote.qpn.to_string());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_carry_their_operation() {
        let id = OpKind::Write.wr_id(42);
        assert_eq!(OpKind::name_of(id), "WRITE");
        assert_eq!(OpKind::seq(id), 42);
        assert_eq!(OpKind::name_of(7), "work request");
    }

    #[test]
    fn completion_errors_name_the_status() {
        let (status, meaning) = wc_status_name(10);
        let e = SessionError::Completion {
            op: "WRITE",
            status,
            meaning,
            wr_id: 1,
            vendor_err: 0,
        };
        assert!(e
            .to_string()
            .starts_with("WRITE completion failed: IBV_WC_REM_ACCESS_ERR (remote access error), wr_id=0x1"));
    }

    #[test]
    fn timed_runs_extend_the_timeout() {
        let mut spec = SessionSpec {
            id: "s".into(),
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
