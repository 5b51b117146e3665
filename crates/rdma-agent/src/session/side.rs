//! What a workload sees of its side of a verbs session ([`Side`]): the
//! link (QP, CQ, buffers), the run's parameters, the peer's buffer, the
//! completion waits (polling or on the completion channel, bounded by the
//! session's deadline and Abort), progress, and the client's done message.
//! It must not set up connections (that is
//! [`crate::verbs_session::rdma_cm_connect`] and
//! [`crate::verbs_session::oob_connect`]).
//!
//! The end of a run is a SEND_WITH_IMM carrying [`DONE_IMM`] from the client,
//! so the server knows when to verify in both modes: zero-length, or 8 bytes
//! holding the client's operation count where the server's verdict needs it
//! (a server of one-sided operations cannot count them itself).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use agent_proto::v1::{CompletionMode, CpuUsage, Progress, Role, SideResult, WorkloadParams};

pub(crate) use super::bounds::Bounds;
use super::error::SessionError;
use crate::cpu::CpuTimes;
use crate::verbs::{
    wc_opcode_name, wc_status_name, BufId, Completion, Link, LocalSlice, RecvChain, RemoteBuf, SendChain, SendOp,
    SendWr,
};
use crate::wr_id::{OpKind, WrId};

/// The immediate of the client's final "run is over" message.
pub const DONE_IMM: u32 = 0xFFFF_FFFF;

/// How long a polling wait spins bare between empty polls before it starts
/// yielding. Bare, as perftest's loops spin, because both alternatives cost
/// time on the emulated nodes: a `sched_yield` per empty poll put read-lat
/// and atomic-lat 15-30 us (4-8 %) behind ib_read_lat and ib_atomic_lat, and
/// `spin_loop` (PAUSE) makes a TCG vCPU leave its translated code and take
/// QEMU's global lock on every pause (its thread ran 67 % of the time instead
/// of 91 %). Yielding after a millisecond, far beyond one operation on rxe
/// (~0.35 ms under TCG) or a NIC (microseconds), keeps a one-CPU node's
/// kernel work (a kernel whose rxe runs in a workqueue) from waiting on our
/// spin. write-lat, whose two sides both spin, yields from the start as it
/// always did: one full suite read it 1.12x ib_write_lat with the bare spin
/// against 0.90x yielding, and later A/B runs showed neither way better
/// (docs/performance.md, "Open questions").
const BARE_SPIN: Duration = Duration::from_millis(1);

/// What a polling wait does after an empty poll ([`PollPace::empty_poll`]).
#[derive(Debug, PartialEq, Eq)]
struct PollStep {
    check_alive: bool,
    yield_now: bool,
}

/// Paces one polling wait: bare spins for [`BARE_SPIN`], then a yield per
/// empty poll. Clock and liveness are looked at every 64th poll only, to
/// keep the spin as tight as perftest's. Made by [`Side::poll_pace`], used
/// through [`Side::after_empty_poll`].
pub(crate) struct PollPace {
    /// When the wait began; none for a wait that yields from the start
    /// (it never needs the clock).
    since: Option<Instant>,
    spins: u32,
    yielding: bool,
}

impl PollPace {
    fn new(since: Option<Instant>) -> Self {
        PollPace {
            since,
            spins: 0,
            yielding: since.is_none(),
        }
    }

    fn empty_poll(&mut self) -> PollStep {
        self.spins = self.spins.wrapping_add(1);
        let check_alive = self.spins.is_multiple_of(64);
        if check_alive && !self.yielding {
            self.yielding = self.since.is_none_or(|since| since.elapsed() >= BARE_SPIN);
        }
        PollStep {
            check_alive,
            yield_now: self.yielding,
        }
    }
}

/// Receives progress events from a running side.
pub type ProgressSink = Box<dyn FnMut(Progress) + Send>;

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
    /// Every QP's peer buffer, in QP order (oob; a collective rank's
    /// peers). Empty with rdma_cm, whose runs have one peer: `peer`.
    pub peers: Vec<RemoteBuf>,
    /// The workload's other buffers, in the order it added them.
    pub bufs: Vec<BufId>,
    /// The workload's receive requests.
    pub recvs: Option<RecvChain>,
    /// Facts for the result.
    pub facts: BTreeMap<String, String>,
    /// Where this side sits on its device (set by the connection setup).
    pub(crate) location: Location,
    bounds: Bounds,
    progress: Option<ProgressSink>,
    pending: VecDeque<Completion>,
    passive: bool,
    yield_polls: bool,
    start: Instant,
    cpu_start: CpuTimes,
    done: Option<DoneChains>,
}

/// A side's place on its device: port, source GID and its index, and the
/// first QP's starting PSN.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Location {
    pub psn: u32,
    pub gid: [u8; 16],
    pub sgid_index: u8,
    pub port: u8,
    /// The port's LID on InfiniBand (oob); 0 on Ethernet and with rdma_cm.
    pub lid: u16,
}

impl Side {
    /// A side on `link` for a run of `params`, before the clock starts.
    pub(crate) fn new(
        link: Link,
        params: WorkloadParams,
        role: Role,
        bounds: Bounds,
        progress: Option<ProgressSink>,
        psn: u32,
    ) -> Side {
        Side {
            link,
            params,
            role,
            peer: RemoteBuf::default(),
            exposed: None,
            peers: Vec::new(),
            bufs: Vec::new(),
            recvs: None,
            facts: BTreeMap::new(),
            location: Location {
                psn,
                gid: [0; 16],
                sgid_index: 0,
                port: 1,
                lid: 0,
            },
            bounds,
            progress,
            pending: VecDeque::with_capacity(64),
            passive: false,
            yield_polls: false,
            start: Instant::now(),
            cpu_start: CpuTimes::thread_now(),
            done: None,
        }
    }

    /// Where progress goes from now on (an oob client learns it at Run).
    pub(crate) fn set_progress(&mut self, sink: ProgressSink) {
        self.progress = Some(sink);
    }

    /// Whether completions are awaited on a completion channel: when the
    /// run asks for event mode, or when this side is passive (see
    /// [`Side::set_passive`]) and its link has a channel (servers always do).
    pub fn event_mode(&self) -> bool {
        self.link.has_completion_channel() && (self.passive || self.params.completion() == CompletionMode::Event)
    }

    /// Polling waits yield between empty polls from the start instead of
    /// spinning bare for [`BARE_SPIN`] first. For ping-pongs whose two sides
    /// both spin (write-lat): there the bare spin measured worse, see
    /// [`BARE_SPIN`].
    pub fn set_yield_polls(&mut self, yield_polls: bool) {
        self.yield_polls = yield_polls;
    }

    /// The pacing of a polling wait that begins now: a bare spin first,
    /// unless [`Side::set_yield_polls`] asked to yield from the start.
    pub(crate) fn poll_pace(&self) -> PollPace {
        PollPace::new((!self.yield_polls).then(Instant::now))
    }

    /// After an empty poll of a polling wait: checks liveness every 64th
    /// time, and yields or spins on as `pace` says.
    pub(crate) fn after_empty_poll(&self, pace: &mut PollPace, what: &str) -> Result<(), SessionError> {
        let step = pace.empty_poll();
        if step.check_alive {
            self.check_alive(what)?;
        }
        if step.yield_now {
            std::thread::yield_now();
        }
        Ok(())
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
        self.bounds.check(what)
    }

    /// The next successful completion; an error completion fails the session
    /// with its status named. `what` names the wait for the timeout message.
    pub fn next_completion(&mut self, what: &str) -> Result<Completion, SessionError> {
        let mut scratch = [Completion::default(); 16];
        let mut pace: Option<PollPace> = None;
        let mut armed = false;
        loop {
            if let Some(c) = self.pending.pop_front() {
                if c.status != 0 {
                    let (status, meaning) = wc_status_name(c.status);
                    let op = match WrId::from(c.wr_id).kind() {
                        Some(kind) => kind.name(),
                        None => wc_opcode_name(c.opcode),
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
                let left = self.bounds.left();
                self.link.wait_cq_event(left.min(Duration::from_millis(100)))?;
                armed = false;
                continue;
            }
            let pace = pace.get_or_insert_with(|| self.poll_pace());
            self.after_empty_poll(pace, what)?;
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
        // The mode this side waited with (an Auto request resolved by the device).
        let waited = if self.event_mode() { "event" } else { "poll" };
        facts.insert("completion".into(), waited.into());
        facts.insert("qpn".into(), self.link.qp_num().to_string());
        if self.link.num_qps() > 1 {
            let qpns: Vec<String> = (0..self.link.num_qps())
                .map(|i| self.link.qp_num_at(i).to_string())
                .collect();
            facts.insert("qpns".into(), qpns.join(","));
        }
        facts.insert("gid".into(), std::net::Ipv6Addr::from(self.location.gid).to_string());
        facts.insert("gid_index".into(), self.location.sgid_index.to_string());
        facts.insert("port".into(), self.location.port.to_string());
        let carrier = crate::verbs::link::carrier_facts(
            self.link.context(),
            self.location.port,
            u32::from(self.location.sgid_index),
        );
        facts.extend(carrier.into_iter().map(|(k, v)| (k.to_string(), v)));
        if self.location.lid != 0 {
            facts.insert("lid".into(), self.location.lid.to_string());
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fresh_wait_spins_bare_and_checks_liveness_every_64th_poll() {
        // Started "now", but dated ahead so a descheduled test thread cannot
        // outlast the millisecond.
        let mut pace = PollPace::new(Some(Instant::now() + Duration::from_secs(3600)));
        let steps: Vec<PollStep> = (0..128).map(|_| pace.empty_poll()).collect();
        assert!(steps.iter().all(|s| !s.yield_now), "no yield within the bare spin");
        let checks: Vec<usize> = (0..128).filter(|&i| steps[i].check_alive).collect();
        assert_eq!(checks, vec![63, 127]);
    }

    #[test]
    fn a_wait_past_the_bare_spin_yields_from_the_next_check_on() {
        let mut pace = PollPace::new(Some(Instant::now() - BARE_SPIN));
        let steps: Vec<PollStep> = (0..130).map(|_| pace.empty_poll()).collect();
        // The clock is read at the 64th poll: bare until then, yielding after.
        assert!(steps[..63].iter().all(|s| !s.yield_now));
        assert!(steps[63..].iter().all(|s| s.yield_now));
    }

    #[test]
    fn a_yielding_wait_yields_from_the_first_empty_poll() {
        let mut pace = PollPace::new(None);
        assert!((0..10).all(|_| pace.empty_poll().yield_now));
    }
}
