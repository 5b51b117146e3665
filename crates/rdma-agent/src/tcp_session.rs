//! bulk-tcp: the TCP counterpart of bulk-rdma ([`crate::workload::bulk`]),
//! the same TOTAL bytes of the same seeded pattern in the same CHUNK pieces,
//! between the same two data addresses, over a plain kernel TCP socket: no
//! RDMA device, QP or memory registration.
//!
//! - Prepare (server): allocates its TOTAL-byte buffer, listens on
//!   `bind_addr:0` and returns that address and port in its [`Endpoint`], as a
//!   rdma_cm server does. Its thread accepts connections until one opens with
//!   the run's connect proof (any other is closed, logged and counted: see
//!   [`crate::session::admission`]), reads until it has TOTAL bytes, answers
//!   one acknowledgement byte, then checks every byte against the pattern
//!   (after its clock stopped, as bulk-rdma's server).
//! - Run (client): fills TOTAL bytes with the pattern (before its clock
//!   starts), connects, sends the proof, writes the bytes in CHUNK-sized
//!   writes, and waits for the acknowledgement: its elapsed time ends when
//!   the server has all the bytes, as bulk-rdma's ends when the done message
//!   is delivered.
//!
//! Like a verbs session it runs on its own OS thread, so the per-thread CPU
//! time ([`crate::cpu`]) is the transfer's: the socket calls and the kernel's
//! copies done on their behalf. Abort and the session deadline are checked
//! at least every [`POLL`].

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use agent_proto::auth::{ConnectProof, CONNECT_PROOF_LEN};
use agent_proto::v1::{CmMode, CpuUsage, Endpoint, Progress, Role, SideResult, WorkloadParams};
use tokio::sync::oneshot;

use crate::cpu::{CpuTimes, NodeBusy};
use crate::metrics::{bandwidth, PeakTracker};
use crate::session::admission::{connect_delay, Refused};
use crate::session::bounds::Bounds;
use crate::session::{peer_socket_addr, ProgressSink, SessionError, SessionHandle, SessionSpec};
use crate::timeline::Timeline;
use crate::validate::{bulk_total, Limits, ValidationError};
use crate::workload::bulk::{bulk_facts, check_bulk_total, chunk, chunk_range, verify_total};

/// The workload's registry name.
pub const NAME: &str = "bulk-tcp";

/// How often blocked socket calls wake up to check Abort and the deadline.
const POLL: Duration = Duration::from_millis(100);
/// Least time between two progress events.
const PROGRESS_EVERY: Duration = Duration::from_millis(250);
/// The server's acknowledgement that it holds every byte.
const ACK: u8 = 0xAC;
/// How long an accepted connection has to send its proof: the run's client
/// sends it at once, so this bounds only how long a silent stranger holds
/// up the real client's turn.
const PROOF_WAIT: Duration = Duration::from_secs(2);

/// bulk-tcp's own checks: the same bytes as bulk-rdma, so the same total
/// limit, over a connection its server's Prepare listens for.
pub fn check_request(params: &WorkloadParams, limits: &Limits) -> Result<(), ValidationError> {
    if params.cm() == CmMode::Oob {
        return Err(ValidationError::FieldOutOfRange {
            field: "cm",
            value: i128::from(params.cm),
            range:
                "0 (CM_MODE_RDMA_CM): bulk-tcp connects over TCP to the address and port its server's Prepare returns",
        });
    }
    check_bulk_total(params, limits)
}

/// Starts a bulk-tcp session thread: Prepare of a server (`run` is None), or a
/// client's Run (`run` carries the server's endpoint and the progress sink).
/// The receiver yields the server's endpoint once it listens.
#[allow(clippy::type_complexity)]
pub fn spawn(
    spec: SessionSpec,
    run: Option<(Endpoint, ProgressSink)>,
) -> Result<(SessionHandle, oneshot::Receiver<Result<Endpoint, SessionError>>), SessionError> {
    if spec.role == Role::Client && run.is_none() {
        return Err(SessionError::Setup(
            "bulk-tcp clients need no Prepare: call Run with the server's endpoint".into(),
        ));
    }
    let span = tracing::info_span!(parent: None, "session", id = %spec.id, role = ?spec.role,
        workload = %spec.params.workload);
    crate::session::spawn_thread_session(spec, "tcp", span, run, |spec, cancel, run, endpoint_tx| {
        let alive = Bounds {
            cancel,
            deadline: Instant::now() + spec.timeout(),
            timeout: spec.timeout(),
        };
        match run {
            None => serve(spec, &alive, endpoint_tx),
            Some((peer, sink)) => client(spec, &alive, &peer, sink),
        }
    })
}

/// A socket call that only timed out (its POLL), as opposed to failed.
fn timed_out(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted
    )
}

fn bind_ip(bind_addr: &str) -> Result<IpAddr, SessionError> {
    if let Ok(sa) = bind_addr.parse::<SocketAddr>() {
        return Ok(sa.ip());
    }
    bind_addr
        .parse::<IpAddr>()
        .map_err(|_| SessionError::Setup(format!("bind_addr {bind_addr:?} is not an IP address")))
}

/// TOTAL bytes of zeroes, or a Setup error instead of the allocator's abort.
fn allocate(total: u64) -> Result<Vec<u8>, SessionError> {
    let mut buf = Vec::new();
    buf.try_reserve_exact(total as usize)
        .map_err(|e| SessionError::Setup(format!("allocating the {total} B transfer buffer: {e}")))?;
    buf.resize(total as usize, 0);
    Ok(buf)
}

/// This side's clock and CPU counters, started once connected.
struct Clock {
    start: Instant,
    cpu: CpuTimes,
    node: Option<NodeBusy>,
}

impl Clock {
    fn start() -> Clock {
        Clock {
            start: Instant::now(),
            cpu: CpuTimes::thread_now(),
            node: NodeBusy::now(),
        }
    }

    /// A result with role, elapsed, CPU and the bulk facts filled in.
    fn result(&self, role: Role, params: &WorkloadParams) -> SideResult {
        let cpu = CpuTimes::thread_now().since(&self.cpu);
        let node_busy = NodeBusy::now().zip(self.node).map(|(now, start)| now.since(&start));
        let total = bulk_total(params);
        let mut result = SideResult {
            role: role as i32,
            elapsed_s: self.start.elapsed().as_secs_f64(),
            cpu: Some(CpuUsage {
                user_s: cpu.user_s,
                system_s: cpu.system_s,
            }),
            bytes: total,
            ..Default::default()
        };
        bulk_facts(&mut result, total, chunk(params), node_busy);
        result.facts.insert("transport".into(), "tcp".into());
        result
    }
}

fn serve(
    spec: &SessionSpec,
    alive: &Bounds,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
) -> Result<SideResult, SessionError> {
    let ip = bind_ip(&spec.bind_addr)?;
    let total = bulk_total(&spec.params);
    let mut buf = allocate(total)?;
    let listener = TcpListener::bind((ip, 0))
        .map_err(|e| SessionError::Setup(format!("listening on {ip}:0 for bulk-tcp: {e}")))?;
    let local = listener
        .local_addr()
        .map_err(|e| SessionError::Setup(format!("the listener's address: {e}")))?;
    // Non-blocking accept, polled, so Abort and the deadline are noticed.
    listener
        .set_nonblocking(true)
        .map_err(|e| SessionError::Setup(format!("listener: {e}")))?;
    tracing::info!(%local, total, "bulk-tcp listening");
    if let Some(tx) = endpoint_tx.take() {
        let _ = tx.send(Ok(Endpoint {
            address: local.ip().to_string(),
            port: u32::from(local.port()),
            qps: Vec::new(),
        }));
    }
    let mut refused = Refused::default();
    let (mut stream, peer) = loop {
        alive.check("the bulk-tcp client to connect")?;
        match listener.accept() {
            Ok((stream, peer)) => match read_proof(&stream, &spec.proof) {
                Ok(()) => break (stream, peer),
                Err(why) => refused.refuse("tcp", &peer.to_string(), &why),
            },
            Err(e) if timed_out(&e) => std::thread::sleep(Duration::from_millis(20)),
            Err(e) => return Err(SessionError::Setup(format!("accepting on {local}: {e}"))),
        }
    };
    drop(listener);
    let setup = |e: std::io::Error| SessionError::Setup(format!("the connection from {peer}: {e}"));
    stream.set_read_timeout(Some(POLL)).map_err(setup)?;
    let clock = Clock::start();
    let mut timeline = Timeline::new();
    let mut got = 0usize;
    while got < buf.len() {
        match stream.read(&mut buf[got..]) {
            Ok(0) => {
                return Err(SessionError::Protocol(format!(
                    "the client {peer} closed the connection after {got} of {total} B"
                )))
            }
            Ok(n) => {
                got += n;
                timeline.record(clock.start.elapsed().as_secs_f64(), got as u64);
            }
            Err(e) if timed_out(&e) => alive.check("the client's bytes")?,
            Err(e) => {
                return Err(SessionError::Protocol(format!(
                    "reading from {peer} after {got} B: {e}"
                )))
            }
        }
    }
    let mut result = clock.result(Role::Server, &spec.params);
    // Acknowledged after the clock stopped: the client's wait includes it, ours does not.
    stream
        .write_all(&[ACK])
        .map_err(|e| SessionError::Protocol(format!("acknowledging to {peer}: {e}")))?;
    // Reads, however the kernel split the stream.
    result.ops = timeline.offered();
    result.timeline = timeline.finish();
    result.facts.insert("peer".into(), peer.to_string());
    result.facts.insert("local".into(), local.to_string());
    refused.report(&mut result);
    crate::workload::verdict(&mut result, verify_total(&spec.params, &buf, "TCP"));
    Ok(result)
}

/// Reads an accepted connection's first bytes, which must be the run's
/// proof; Err says what was wrong. Leaves the stream blocking.
fn read_proof(mut stream: &TcpStream, proof: &ConnectProof) -> Result<(), String> {
    let mut presented = [0u8; CONNECT_PROOF_LEN];
    stream
        .set_nonblocking(false)
        .and_then(|()| stream.set_read_timeout(Some(PROOF_WAIT)))
        .map_err(|e| format!("preparing the connection: {e}"))?;
    match stream.read_exact(&mut presented) {
        Ok(()) if proof.admits(&presented) => Ok(()),
        Ok(()) => Err("its first bytes are not this run's connect proof".into()),
        Err(e) if timed_out(&e) => Err(format!("it sent no connect proof within {PROOF_WAIT:?}")),
        Err(e) => Err(format!("reading its connect proof: {e}")),
    }
}

fn client(
    spec: &SessionSpec,
    alive: &Bounds,
    peer: &Endpoint,
    mut sink: ProgressSink,
) -> Result<SideResult, SessionError> {
    let dst = peer_socket_addr(peer)?;
    let total = bulk_total(&spec.params);
    let chunk = chunk(&spec.params);
    let mut src = allocate(total)?;
    crate::workload::pattern(&spec.params).fill(&mut src, 0);
    let corrupt = spec.params.fault() == agent_proto::v1::Fault::Corrupt;
    if corrupt {
        src[total as usize / 2] ^= 0xFF;
    }
    connect_delay(&spec.params, &alive.cancel, alive.deadline)?;
    alive.check("connecting")?;
    let connect_timeout = Duration::from_secs(5).min(alive.left());
    let mut stream = TcpStream::connect_timeout(&dst, connect_timeout.max(Duration::from_millis(1)))
        .map_err(|e| SessionError::Setup(format!("connecting to the bulk-tcp server {dst}: {e}")))?;
    let setup = |e: std::io::Error| SessionError::Setup(format!("the connection to {dst}: {e}"));
    stream.write_all(spec.proof.as_bytes()).map_err(setup)?;
    stream.set_write_timeout(Some(POLL)).map_err(setup)?;
    stream.set_read_timeout(Some(POLL)).map_err(setup)?;
    let local = stream.local_addr().map_err(setup)?;
    sink(Progress {
        phase: "connect".into(),
        message: format!("connected {local} -> {dst} over TCP"),
        ..Default::default()
    });
    let clock = Clock::start();
    let mut timeline = Timeline::new();
    let mut peak = PeakTracker::new(Duration::from_millis(100));
    let mut last_progress = Duration::ZERO;
    let chunks = total.div_ceil(chunk);
    let mut sent = 0u64;
    for i in 0..chunks {
        let (offset, len) = chunk_range(i, chunk, total);
        let mut piece = &src[offset as usize..(offset + len) as usize];
        while !piece.is_empty() {
            match stream.write(piece) {
                Ok(0) => {
                    return Err(SessionError::Protocol(format!(
                        "{dst} stopped accepting after {sent} B"
                    )))
                }
                Ok(n) => {
                    piece = &piece[n..];
                    sent += n as u64;
                }
                Err(e) if timed_out(&e) => alive.check("the server to take more bytes")?,
                Err(e) => return Err(SessionError::Protocol(format!("writing to {dst} after {sent} B: {e}"))),
            }
        }
        peak.add(len);
        let now = clock.start.elapsed();
        timeline.record(now.as_secs_f64(), sent);
        if now - last_progress >= PROGRESS_EVERY {
            last_progress = now;
            sink(Progress {
                phase: "run".into(),
                bytes: sent,
                ops: i + 1,
                elapsed_s: now.as_secs_f64(),
                message: String::new(),
            });
        }
    }
    let mut ack = [0u8; 1];
    loop {
        match stream.read(&mut ack) {
            Ok(1) if ack[0] == ACK => break,
            Ok(0) => {
                return Err(SessionError::Protocol(format!(
                    "{dst} closed the connection without acknowledging the {total} B"
                )))
            }
            Ok(_) => {
                return Err(SessionError::Protocol(format!(
                    "{dst} answered {:#04x} instead of the acknowledgement {ACK:#04x}",
                    ack[0]
                )))
            }
            Err(e) if timed_out(&e) => alive.check("the server's acknowledgement")?,
            Err(e) => {
                return Err(SessionError::Protocol(format!(
                    "reading the acknowledgement from {dst}: {e}"
                )))
            }
        }
    }
    let mut result = clock.result(Role::Client, &spec.params);
    result.ops = chunks;
    let elapsed = Duration::from_secs_f64(result.elapsed_s);
    result.bw = Some(bandwidth(sent, chunks, elapsed, peak.windows()));
    result.timeline = timeline.finish();
    result.facts.insert("peer".into(), dst.to_string());
    result.facts.insert("local".into(), local.to_string());
    if corrupt {
        result.facts.insert(
            "fault".into(),
            format!("corrupt: byte {} of the client's source flipped", total / 2),
        );
    }
    // Only the server can check: the bytes are in its memory.
    result.checked = false;
    result.verify_detail = format!("sent {sent} B in {chunks} x {chunk} B writes; the server checks them");
    Ok(result)
}
