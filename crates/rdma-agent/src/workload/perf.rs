//! The bandwidth and latency families (write/read/send/atomic × bw/lat), in
//! perftest's spirit: a pre-built chain of `post_list` work requests posted
//! again and again with at most `tx_depth` outstanding, one signaled request
//! every `cq_moderation` (selective signaling), payloads inline up to
//! `inline_size`, for `iterations` operations or `duration_s` seconds, and
//! optionally swept over sizes 2 B .. max_size. Nothing allocates in the loop.
//!
//! Latency, measured as perftest measures it:
//! - send-lat: a SEND ping-pong, RTT/2 (ib_send_lat).
//! - write-lat: a WRITE ping-pong (ib_write_lat): the client writes `size`
//!   bytes whose last byte is a counter into the server's buffer; the server
//!   polls that byte and, when it changes, WRITEs back into the client's
//!   exposed buffer (its blob travels in the connect private data, or in the
//!   oob endpoint); the client polls its own last byte. Each side waits for
//!   its own WRITE's completion too (every WRITE is signaled, as perftest's),
//!   and a sample is the post-to-echo round trip / 2. Sizes of a sweep are
//!   separated by the client's done message; the server echoes until it sees it.
//! - read-lat, atomic-lat: one outstanding operation, post to completion
//!   (ib_read_lat and ib_atomic_lat time the same).
//!
//! Bytes are still verified where it is cheap, always outside the timed loop:
//! the server checks the pattern the client wrote (write), the client checks
//! what it read (read) and what the server wrote back (write-lat), the server
//! checks the atomic word's final value, and send messages are checked.

use std::time::{Duration, Instant};

use agent_proto::v1::{Fault, Role, SideResult, SizePoint, WorkloadParams};

use super::{corrupt_byte, injects, lanes, note_skip, pattern, read_peer_word, read_word, verdict, OpKind, Workload};
use crate::metrics::{latency, perftest_bandwidth, PeakTracker, PostClock};
use crate::plan::Plan;
use crate::session::{SessionError, Side};
use crate::validate::{no_own_checks, Limits, OwnCheck, ValidationError};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};
use crate::wr_id::WrId;

/// The operation a perf workload measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PerfOp {
    /// RDMA WRITE.
    Write,
    /// RDMA READ.
    Read,
    /// SEND/RECV.
    Send,
    /// Atomic fetch-and-add.
    Atomic,
}

/// One perf workload: an operation and whether it measures latency.
pub struct Perf {
    /// Registry name.
    pub name: &'static str,
    /// Operation.
    pub op: PerfOp,
    /// Latency (one outstanding op) instead of bandwidth.
    pub latency: bool,
}

/// Bytes the send-bw/send-lat server may spend on its receive ring.
const RECV_RING_BYTES: usize = 64 << 20;

/// Receives the send-bw/send-lat server keeps posted: twice the client's send
/// depth, so the client cannot outrun them while the server reposts (a SEND
/// finding no receive is an RNR NAK, and the sender then stalls for the RNR
/// timer), within [`RECV_RING_BYTES`] for large messages; at least 8.
pub fn recv_ring(params: &agent_proto::v1::WorkloadParams, message_len: usize) -> usize {
    let wanted = (2 * crate::workload::default_queue_depth(params) as usize).clamp(64, 1024);
    wanted.min(RECV_RING_BYTES / message_len.max(1)).max(8)
}

/// Receives the server keeps posted on each QP that carries SENDs
/// ([`recv_ring`], the byte budget shared by the QPs); one (the done
/// message's, on the first QP) for the one-sided workloads.
fn recv_slots_per_qp(side: &Side, op: PerfOp) -> usize {
    if op == PerfOp::Send {
        recv_ring(&side.params, buffer_len(side, op) * side.link.num_qps())
    } else {
        1
    }
}

/// The QPs a server posts receives on: every QP for SENDs, else the first.
fn receiving_qps(side: &Side, op: PerfOp) -> usize {
    if op == PerfOp::Send {
        side.link.num_qps()
    } else {
        1
    }
}

/// Bytes of one server receive: a message, or at least the done message's count.
fn recv_slot_len(message_len: usize) -> usize {
    message_len.max(8)
}

/// The run's plan ([`Plan`], as fabric-bw/lat read theirs): an atomic's
/// operand is always 8 bytes.
fn plan(side: &Side, op: PerfOp) -> Plan {
    let mut plan = Plan::of(&side.params, u64::MAX);
    if op == PerfOp::Atomic {
        plan.sizes = vec![8];
    }
    plan
}

fn sizes(side: &Side, op: PerfOp) -> Vec<u64> {
    plan(side, op).sizes
}

fn buffer_len(side: &Side, op: PerfOp) -> usize {
    plan(side, op).largest() as usize
}

/// write-lat's one-byte ping is all counter, which every ping rewrites:
/// nothing to corrupt.
fn check_write_lat(params: &WorkloadParams, _: &Limits) -> Result<(), ValidationError> {
    if params.fault() == Fault::Corrupt && !params.all_sizes && params.size < 2 {
        return Err(ValidationError::FieldOutOfRange {
            field: "size",
            value: i128::from(params.size),
            range: ">= 2 for write-lat with fault corrupt (a 1-byte ping is only its counter)",
        });
    }
    Ok(())
}

impl Workload for Perf {
    fn name(&self) -> &'static str {
        self.name
    }

    fn own_check(&self) -> OwnCheck {
        if (self.op, self.latency) == (PerfOp::Write, true) {
            check_write_lat
        } else {
            no_own_checks
        }
    }

    fn client_measures_latency(&self) -> bool {
        self.latency
    }

    /// send-bw/send-lat servers keep up to 1024 receives posted
    /// ([`recv_ring`]) plus the done message.
    fn recv_queue_depth(&self, params: &WorkloadParams) -> u32 {
        let depth = self.send_queue_depth(params);
        if self.op == PerfOp::Send {
            depth.max(1024 + 4)
        } else {
            depth
        }
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = buffer_len(side, self.op);
        match side.role {
            Role::Server => {
                let exposed = side.link.add_buffer(len, Access::Remote)?;
                if self.op == PerfOp::Read {
                    pattern(&side.params).fill(side.link.buffer_mut(exposed), 0);
                    if injects(side, Fault::Corrupt) {
                        corrupt_byte(side, exposed, 0, "the server's buffer (the READs' source)");
                    }
                }
                side.exposed = Some(exposed);
                // Receives for SENDs (and the done message), reposted as they
                // complete: QP q owns slots q * per_qp .. (q + 1) * per_qp.
                let per_qp = recv_slots_per_qp(side, self.op);
                let slots = per_qp * receiving_qps(side, self.op);
                let slot_len = recv_slot_len(len);
                let rx = side.link.add_buffer(slot_len * slots, Access::Local)?;
                let slices: Vec<LocalSlice> = (0..slots)
                    .map(|s| LocalSlice {
                        buf: rx,
                        offset: s * slot_len,
                        len: slot_len,
                    })
                    .collect();
                let mut chain = side.link.recv_chain(&slices, OpKind::Recv.wr_id(0))?;
                // The first QP's now; the others' when each reaches INIT (qp_in_init).
                for slot in 0..per_qp {
                    side.link.post_recv_one_on(0, &mut chain, slot)?;
                }
                side.recvs = Some(chain);
                side.bufs = vec![rx];
                if self.op == PerfOp::Send && self.latency {
                    side.bufs.push(side.link.add_buffer(len, Access::Local)?);
                }
                if self.write_ping_pong() {
                    // The echo's source: a pattern of its own, the counter in the last byte.
                    let src = side.link.add_buffer(len, Access::Local)?;
                    echo_pattern(side).fill(side.link.buffer_mut(src), 0);
                    side.bufs.push(src);
                }
                Ok(())
            }
            Role::Client => {
                let buf = side.link.add_buffer(len, Access::Local)?;
                if matches!(self.op, PerfOp::Write | PerfOp::Send) {
                    pattern(&side.params).fill(side.link.buffer_mut(buf), 0);
                    if injects(side, Fault::Corrupt) {
                        corrupt_byte(side, buf, 0, "the client's source buffer");
                    }
                }
                side.bufs = vec![buf];
                if self.op == PerfOp::Send && self.latency {
                    let rx = side.link.add_buffer(len, Access::Local)?;
                    side.bufs.push(rx);
                    let mut chain = side.link.recv_chain(
                        &[LocalSlice {
                            buf: rx,
                            offset: 0,
                            len,
                        }],
                        OpKind::Recv.wr_id(0),
                    )?;
                    side.link.post_recv_one(&mut chain, 0)?;
                    side.recvs = Some(chain);
                }
                if self.write_ping_pong() {
                    // The server WRITEs its echo here; its blob goes to the server.
                    let rx = side.link.add_buffer(len, Access::Remote)?;
                    side.bufs.push(rx);
                    side.exposed = Some(rx);
                }
                Ok(())
            }
        }
    }

    fn qp_in_init(&self, side: &mut Side, qp: usize) -> Result<(), SessionError> {
        if side.role != Role::Server || qp >= receiving_qps(side, self.op) {
            return Ok(());
        }
        let per_qp = recv_slots_per_qp(side, self.op);
        let mut chain = side.recvs.take().expect("prepared");
        let posted =
            (qp * per_qp..(qp + 1) * per_qp).try_for_each(|slot| side.link.post_recv_one_on(qp, &mut chain, slot));
        side.recvs = Some(chain);
        posted.map_err(Into::into)
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        if side.role == Role::Server {
            return self.serve(side);
        }
        let mut sweep = Vec::new();
        let mut problems = Vec::new();
        let (mut total_bytes, mut total_ops) = (0u64, 0u64);
        let sizes = sizes(side, self.op);
        let last = sizes.len() - 1;
        for (n, size) in sizes.into_iter().enumerate() {
            side.progress("run", total_bytes, total_ops, format!("size {size} B"));
            let mut point = if self.latency {
                self.measure_latency(side, size as usize, &mut problems)?
            } else {
                self.measure_bandwidth(side, size as usize, &mut problems)?
            };
            if n == 0 && injects(side, Fault::Skip) {
                // One operation counted that never took effect, as if it were lost.
                point.iterations += 1;
                note_skip(
                    side,
                    format!(
                        "the client counts {} operations at {size} B and did {}",
                        point.iterations,
                        point.iterations - 1
                    ),
                );
            }
            if self.write_ping_pong() && n < last {
                // The server echoes until the done message; one per size, with its pings.
                side.send_done_counting(point.iterations)?;
            }
            total_bytes += point.size * point.iterations;
            total_ops += point.iterations;
            sweep.push(point);
        }
        let mut atomic_final = None;
        if self.op == PerfOp::Atomic {
            // Every fetch-and-add added 1 to a word that started at 0.
            // One READ after the run, outside the timed loop.
            let word = read_peer_word(side, side.bufs[0], "the READ of the atomic word")?;
            if word != total_ops {
                problems.push(format!(
                    "the remote word is {word} after the run: the client counted {total_ops} fetch-and-adds"
                ));
            }
            atomic_final = Some(word);
        }
        let done_count = if self.write_ping_pong() {
            sweep.last().map_or(0, |p| p.iterations)
        } else {
            total_ops
        };
        side.send_done_counting(done_count)?;
        let mut result = side.base_result();
        result.bytes = total_bytes;
        result.ops = total_ops;
        result.atomic_final = atomic_final.unwrap_or_default();
        let last = sweep.last().cloned().unwrap_or_default();
        result.bw = last.bw;
        result.lat = last.lat;
        if side.params.all_sizes {
            result.sweep = sweep;
        }
        result.facts.insert("tx_depth".into(), tx_depth(side).to_string());
        result
            .facts
            .insert("cq_moderation".into(), cq_moderation(side).to_string());
        result.facts.insert("post_list".into(), post_list(side).to_string());
        let checked = match self.op {
            PerfOp::Read => "client checked the bytes it read".to_string(),
            PerfOp::Write if self.latency => "client checked every echo the server wrote back".to_string(),
            PerfOp::Atomic => format!("client read the remote word back: {total_ops}, one per fetch-and-add"),
            _ => "the server checks the bytes and the count".to_string(),
        };
        verdict(
            &mut result,
            if problems.is_empty() {
                Ok(checked)
            } else {
                Err(problems.join("; "))
            },
        );
        if matches!(self.op, PerfOp::Write | PerfOp::Send) && !self.write_ping_pong() && problems.is_empty() {
            // The client has nothing to check: only the server's check counts.
            result.verified = false;
            result.checked = false;
        }
        Ok(result)
    }
}

/// A bandwidth client's send queues as [`lanes::run`] drives them: one
/// pre-built post list per QP, tails built when needed.
struct PerfQueues<'a> {
    perf: &'a Perf,
    side: &'a mut Side,
    chains: Vec<crate::verbs::SendChain>,
    local: LocalSlice,
    /// When each post went out and each signaled completion came back.
    clock: PostClock,
    /// The same completions in 500 ms windows (the extra peak figure).
    windows: PeakTracker,
    size: u64,
}

impl lanes::SendQueues for PerfQueues<'_> {
    fn post(&mut self, qp: usize, count: usize, upto: u64, signaled: bool) -> Result<(), SessionError> {
        let kind = self.perf.kind();
        let chain = &mut self.chains[qp];
        if count == chain.len() {
            chain.set_signaled(count - 1, signaled);
            chain.set_wr_id(count - 1, kind.wr_id_on_lane(qp, upto));
            self.clock.posting(count as u64);
            return Ok(self.side.link.post_send_on(qp, chain)?);
        }
        let first = upto + 1 - count as u64;
        let tail: Vec<SendWr> = (0..count)
            .map(|i| {
                let last = i + 1 == count;
                let wr_id = kind.wr_id_on_lane(qp, first + i as u64);
                self.perf.op_wr(self.side, self.local, wr_id, last && signaled)
            })
            .collect();
        let mut tail_chain = self.side.link.send_chain(&tail)?;
        self.clock.posting(count as u64);
        Ok(self.side.link.post_send_on(qp, &mut tail_chain)?)
    }

    fn next_completion(&mut self) -> Result<(usize, u64), SessionError> {
        let c = self.side.next_completion("bandwidth completions")?;
        Ok(WrId::from(c.wr_id).lane())
    }

    fn finished(&mut self, requests: u64) {
        self.clock.completed(requests);
        self.windows.add(requests * self.size);
    }
}

fn tx_depth(side: &Side) -> usize {
    Plan::of(&side.params, u64::MAX).tx_depth
}

fn post_list(side: &Side) -> usize {
    (side.params.post_list.max(1) as usize).min(tx_depth(side))
}

fn cq_moderation(side: &Side) -> usize {
    let m = if side.params.cq_moderation == 0 {
        16
    } else {
        side.params.cq_moderation as usize
    };
    m.min(tx_depth(side)).max(1)
}

/// Iterations for one size, or None when the run is timed.
fn planned_iterations(side: &Side) -> Option<u64> {
    Plan::of(&side.params, u64::MAX).iterations()
}

/// The counter carried in the last byte of write-lat's i-th message (never 0,
/// the value of untouched memory).
fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// What the server writes back in write-lat.
fn echo_pattern(side: &Side) -> crate::pattern::Pattern {
    pattern(&side.params).derive(0xEC40)
}

/// Checks a write-lat message: the pattern up to the last byte, the counter in it.
fn check_ping(buf: &[u8], size: usize, pat: &crate::pattern::Pattern, last_tag: u8, what: &str) -> Result<(), String> {
    if size > 1 {
        pat.verify(&buf[..size - 1], 0)
            .map_err(|m| format!("{what} at {size} B: {m}"))?;
    }
    if buf[size - 1] != last_tag {
        return Err(format!(
            "{what} at {size} B: last byte {:#04x}, expected the counter {last_tag:#04x}",
            buf[size - 1]
        ));
    }
    Ok(())
}

impl Perf {
    /// write-lat: a WRITE ping-pong, as ib_write_lat.
    fn write_ping_pong(&self) -> bool {
        self.op == PerfOp::Write && self.latency
    }

    fn op_wr(&self, side: &Side, local: LocalSlice, wr_id: u64, signaled: bool) -> SendWr {
        let (addr, rkey) = (side.peer.addr, side.peer.rkey);
        let op = match self.op {
            PerfOp::Write => SendOp::Write {
                local,
                remote_addr: addr,
                rkey,
            },
            PerfOp::Read => SendOp::Read {
                local,
                remote_addr: addr,
                rkey,
            },
            PerfOp::Send => SendOp::Send { local },
            PerfOp::Atomic => SendOp::FetchAdd {
                local,
                remote_addr: addr,
                rkey,
                add: 1,
            },
        };
        SendWr {
            wr_id,
            op,
            signaled,
            inline: local.len <= side.params.inline_size as usize,
        }
    }

    fn kind(&self) -> OpKind {
        match self.op {
            PerfOp::Write => OpKind::Write,
            PerfOp::Read => OpKind::Read,
            PerfOp::Send => OpKind::Send,
            PerfOp::Atomic => OpKind::FetchAdd,
        }
    }

    fn measure_bandwidth(
        &self,
        side: &mut Side,
        size: usize,
        problems: &mut Vec<String>,
    ) -> Result<SizePoint, SessionError> {
        // The client keeps every send queue full and waits only when they are
        // full: on the completion channel in event mode (the controller's
        // default for bandwidth runs: the sleep leaves the CPU to the RNIC's
        // work), else spinning between empty polls, as ib_*_bw does.
        let depth = tx_depth(side);
        let list = post_list(side);
        // Signal the last request of every `every`-th post; never let a full
        // queue hold only unsignaled requests (nothing would complete).
        let every = cq_moderation(side).div_ceil(list).min(depth / list).max(1);
        let buf = side.bufs[0];
        let local = LocalSlice {
            buf,
            offset: 0,
            len: size,
        };
        let wrs: Vec<SendWr> = (0..list).map(|_| self.op_wr(side, local, 0, false)).collect();
        // One lane per QP, posted round-robin; like perftest's `-q`, each QP
        // runs `iterations` operations with up to `tx_depth` outstanding.
        let mut chains = Vec::with_capacity(side.link.num_qps());
        for _ in 0..side.link.num_qps() {
            chains.push(side.link.send_chain(&wrs)?);
        }
        let schedule = lanes::Schedule {
            depth,
            list,
            every,
            planned: planned_iterations(side),
        };
        let stop_at = Instant::now() + crate::validate::duration(&side.params);
        let expected_posts = schedule.planned.map_or(0, |n| n as usize * chains.len() / list);
        let lane_count = chains.len();
        let mut queues = PerfQueues {
            perf: self,
            side,
            chains,
            local,
            clock: PostClock::new(expected_posts),
            windows: PeakTracker::new(Duration::from_millis(500)),
            size: size as u64,
        };
        let per_lane = lanes::run(&mut queues, lane_count, &schedule, || Instant::now() >= stop_at)?;
        let PerfQueues {
            side, clock, windows, ..
        } = queues;
        if self.op == PerfOp::Read {
            if let Err(m) = pattern(&side.params).verify(&side.link.buffer(buf)[..size], 0) {
                problems.push(format!("read-bw at {size} B: {m}"));
            }
        }
        let posted: u64 = per_lane.iter().sum();
        Ok(SizePoint {
            size: size as u64,
            iterations: posted,
            bw: Some(perftest_bandwidth(size as u64, posted, &clock, windows.windows())),
            lat: None,
        })
    }

    /// Client of write-lat: WRITE with the counter in the last byte, wait for
    /// its completion and for the server's echo in our buffer; RTT / 2.
    fn measure_write_ping_pong(
        &self,
        side: &mut Side,
        size: usize,
        problems: &mut Vec<String>,
    ) -> Result<SizePoint, SessionError> {
        side.set_yield_polls(true);
        let (src, rx) = (side.bufs[0], side.bufs[1]);
        let local = LocalSlice {
            buf: src,
            offset: 0,
            len: size,
        };
        let mut chain = side
            .link
            .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        let planned = planned_iterations(side);
        let stop_at = Instant::now() + crate::validate::duration(&side.params);
        let mut samples = Vec::with_capacity(planned.unwrap_or(100_000).min(10_000_000) as usize);
        let mut i = 0u64;
        while planned.map_or(Instant::now() < stop_at || i == 0, |n| i < n) {
            let t = tag(i);
            side.link.buffer_mut(src)[size - 1] = t;
            chain.set_wr_id(0, self.kind().wr_id(i));
            let t0 = Instant::now();
            side.link.post_send(&mut chain)?;
            side.next_completion("the write-lat WRITE's completion")?;
            // Yields between looks (set_yield_polls above), as the CQ waits do.
            let mut pace = side.poll_pace();
            while side.link.read_byte_volatile(rx, size - 1) != t {
                side.after_empty_poll(&mut pace, "the server's write-lat echo")?;
            }
            if samples.len() < samples.capacity() {
                samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
            }
            i += 1;
        }
        if i > 0 {
            if let Err(m) = check_ping(side.link.buffer(rx), size, &echo_pattern(side), tag(i - 1), "echo") {
                problems.push(m);
            }
        }
        // The counter byte goes back to the pattern for the next (larger) size.
        let restore = pattern(&side.params).byte_at(size as u64 - 1);
        side.link.buffer_mut(src)[size - 1] = restore;
        Ok(SizePoint {
            size: size as u64,
            iterations: i,
            bw: None,
            lat: Some(latency(&mut samples)),
        })
    }

    /// Server of write-lat, one size: echo every ping until the client's done.
    /// Returns the pings echoed and the verdict: as many pings as the client
    /// counted (at least one), the last one holding the pattern and counter.
    fn echo_writes(&self, side: &mut Side, size: usize) -> Result<(u64, Result<(), String>), SessionError> {
        let exposed = side.exposed.expect("prepared");
        let (rx, src) = (side.bufs[0], side.bufs[1]);
        let mut client_count = None;
        let local = LocalSlice {
            buf: src,
            offset: 0,
            len: size,
        };
        let mut chain = side
            .link
            .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        let mut echoed = 0u64;
        // Yields between looks (set_yield_polls in serve_write_ping_pong).
        let mut pace = side.poll_pace();
        let mut done = false;
        while !done {
            if side.link.read_byte_volatile(exposed, size - 1) == tag(echoed) {
                // A done message before the byte changed means the client
                // moved on to the next size: that byte is not a ping.
                if let Some(c) = side.try_completion()? {
                    if Side::is_done(&c) {
                        client_count = Side::done_count(&c, side.link.buffer(rx));
                        break;
                    }
                }
                side.link.buffer_mut(src)[size - 1] = tag(echoed);
                chain.set_wr_id(0, self.kind().wr_id(echoed));
                side.link.post_send(&mut chain)?;
                loop {
                    let c = side.next_completion("the write-lat echo's completion")?;
                    if Side::is_done(&c) {
                        // The client saw the echo and stopped before our ACK came back.
                        client_count = Side::done_count(&c, side.link.buffer(rx));
                        done = true;
                    } else {
                        break;
                    }
                }
                echoed += 1;
                continue;
            }
            if let Some(c) = side.try_completion()? {
                if Side::is_done(&c) {
                    client_count = Side::done_count(&c, side.link.buffer(rx));
                    break;
                }
                continue;
            }
            side.after_empty_poll(&mut pace, "the client's write-lat ping or done")?;
        }
        let restore = echo_pattern(side).byte_at(size as u64 - 1);
        side.link.buffer_mut(src)[size - 1] = restore;
        let verdict = match client_count {
            None => Err(format!("at {size} B: the client's done message carried no ping count")),
            Some(n) if n != echoed => Err(format!("at {size} B: echoed {echoed} pings, the client counted {n}")),
            Some(_) if echoed == 0 => Err(format!("at {size} B: no pings")),
            Some(_) => check_ping(
                side.link.buffer(exposed),
                size,
                &pattern(&side.params),
                tag(echoed - 1),
                "ping",
            ),
        };
        Ok((echoed, verdict))
    }

    fn serve_write_ping_pong(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        side.set_yield_polls(true);
        let mut recvs = side.recvs.take().expect("prepared");
        let (mut pings, mut bytes) = (0u64, 0u64);
        let mut problems = Vec::new();
        for size in sizes(side, self.op) {
            let size = size as usize;
            let (echoed, verdict) = self.echo_writes(side, size)?;
            pings += echoed;
            bytes += echoed * size as u64;
            if let Err(m) = verdict {
                problems.push(m);
            }
            // The done receive is reposted for the next size's done.
            side.link.post_recv_one(&mut recvs, 0)?;
        }
        side.recvs = Some(recvs);
        let mut result = side.base_result();
        result.ops = pings;
        result.bytes = bytes;
        verdict(
            &mut result,
            if problems.is_empty() {
                Ok(format!(
                    "echoed {pings} pings, as many as the client counted; each size's last ping held the client's pattern and counter"
                ))
            } else {
                Err(problems.join("; "))
            },
        );
        Ok(result)
    }

    fn measure_latency(
        &self,
        side: &mut Side,
        size: usize,
        problems: &mut Vec<String>,
    ) -> Result<SizePoint, SessionError> {
        if self.write_ping_pong() {
            return self.measure_write_ping_pong(side, size, problems);
        }
        let buf = side.bufs[0];
        let local = LocalSlice {
            buf,
            offset: 0,
            len: size,
        };
        let mut chain = side
            .link
            .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        let planned = planned_iterations(side);
        let stop_at = Instant::now() + crate::validate::duration(&side.params);
        let mut samples = Vec::with_capacity(planned.unwrap_or(100_000).min(10_000_000) as usize);
        let mut recvs = side.recvs.take();
        let mut i = 0u64;
        while planned.map_or(Instant::now() < stop_at || i == 0, |n| i < n) {
            chain.set_wr_id(0, self.kind().wr_id(i));
            let t0 = Instant::now();
            side.link.post_send(&mut chain)?;
            if self.op == PerfOp::Send {
                // Ping-pong: wait for our send and the echo.
                let (mut sent, mut echoed) = (false, false);
                while !(sent && echoed) {
                    let c = side.next_completion("the send-lat echo")?;
                    if WrId::from(c.wr_id).is(OpKind::Send) {
                        sent = true;
                    } else {
                        echoed = true;
                    }
                }
                let rtt = t0.elapsed();
                if samples.len() < samples.capacity() {
                    samples.push(rtt.as_secs_f64() * 1e6 / 2.0);
                }
                if let Some(r) = recvs.as_mut() {
                    side.link.post_recv_one(r, 0)?;
                }
            } else {
                side.next_completion("the latency operation's completion")?;
                if samples.len() < samples.capacity() {
                    samples.push(t0.elapsed().as_secs_f64() * 1e6);
                }
            }
            i += 1;
        }
        side.recvs = recvs;
        if self.op == PerfOp::Read {
            if let Err(m) = pattern(&side.params).verify(&side.link.buffer(buf)[..size], 0) {
                problems.push(format!("read-lat at {size} B: {m}"));
            }
        }
        let elapsed_bytes = i * size as u64;
        let _ = elapsed_bytes;
        Ok(SizePoint {
            size: size as u64,
            iterations: i,
            bw: None,
            lat: Some(latency(&mut samples)),
        })
    }

    fn serve(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        if self.write_ping_pong() {
            return self.serve_write_ping_pong(side);
        }
        if self.op != PerfOp::Send {
            // One-sided (write-bw, read-bw/lat, atomic-bw/lat; write-lat's
            // echo returned above): the server does no data-path work and only
            // waits for the done message, so it sleeps on the completion
            // channel (perftest's server sleeps on its socket).
            side.set_passive(true);
            let wait = if side.event_mode() { "event" } else { "poll" };
            side.facts.insert("server_wait".into(), wait.into());
        }
        let slot_len = recv_slot_len(buffer_len(side, self.op));
        let per_qp = recv_slots_per_qp(side, self.op);
        let rx = side.bufs[0];
        let mut recvs = side.recvs.take().expect("prepared");
        let mut echo = if self.op == PerfOp::Send && self.latency {
            Some(side.link.send_chain(&[SendWr {
                wr_id: OpKind::Send.wr_id(0),
                op: SendOp::Send {
                    local: LocalSlice {
                        buf: side.bufs[1],
                        offset: 0,
                        len: 0,
                    },
                },
                signaled: true,
                inline: false,
            }])?)
        } else {
            None
        };
        let mut echo_chains = std::collections::HashMap::new();
        let mut received = 0u64;
        let mut problem = None;
        let client_count;
        loop {
            let c = side.next_completion("messages and the done notification")?;
            if WrId::from(c.wr_id).is(OpKind::Send) {
                continue;
            }
            let slot = WrId::from(c.wr_id).seq() as usize;
            if Side::is_done(&c) {
                client_count = Side::done_count(&c, &side.link.buffer(rx)[slot * slot_len..]);
                break;
            }
            received += 1;
            let n = c.byte_len as usize;
            if problem.is_none() && self.op == PerfOp::Send {
                if let Err(m) =
                    pattern(&side.params).verify(&side.link.buffer(rx)[slot * slot_len..slot * slot_len + n], 0)
                {
                    problem = Some(format!("message {received} ({n} B): {m}"));
                }
            }
            if echo.is_some() {
                // Echo with the size just received (sweeps change it); chains are cached per size.
                if let std::collections::hash_map::Entry::Vacant(slot) = echo_chains.entry(n) {
                    slot.insert(side.link.send_chain(&[SendWr {
                        wr_id: OpKind::Send.wr_id(0),
                        op: SendOp::Send {
                            local: LocalSlice {
                                buf: side.bufs[1],
                                offset: 0,
                                len: n,
                            },
                        },
                        signaled: true,
                        inline: n <= side.params.inline_size as usize,
                    }])?);
                }
                let data = side.link.buffer(rx)[slot * slot_len..slot * slot_len + n].to_vec();
                side.link.buffer_mut(side.bufs[1])[..n].copy_from_slice(&data);
                let chain = echo_chains.get_mut(&n).expect("inserted");
                side.link.post_send(chain)?;
            }
            side.link.post_recv_one_on(slot / per_qp, &mut recvs, slot)?;
        }
        echo.take();
        let exposed = side.exposed.expect("prepared");
        // The word atomics counted in (the exposed buffer of an atomic run is 8 bytes).
        let atomic_word = (self.op == PerfOp::Atomic).then(|| read_word(side, exposed));
        let outcome = match self.op {
            PerfOp::Write => {
                // Every WRITE put the client's pattern at offset 0; the largest size covers the rest.
                let n = buffer_len(side, self.op);
                pattern(&side.params)
                    .verify(&side.link.buffer(exposed)[..n], 0)
                    .map(|()| format!("server buffer holds the client's pattern ({n} B)"))
                    .map_err(|m| format!("server buffer: {m}"))
            }
            PerfOp::Read => pattern(&side.params)
                .verify(side.link.buffer(exposed), 0)
                .map(|()| "served READs; buffer unchanged".to_string())
                .map_err(|m| format!("server buffer changed: {m}")),
            PerfOp::Atomic => {
                let word = atomic_word.unwrap_or_default();
                match client_count {
                    Some(n) if n == word => Ok(format!(
                        "the word counted {word} fetch-and-adds, as many as the client did"
                    )),
                    Some(n) => Err(format!("the word counted {word} fetch-and-adds, the client did {n}")),
                    None => Err("the client's done message carried no operation count".into()),
                }
            }
            PerfOp::Send => match (problem, client_count) {
                (Some(m), _) => Err(m),
                (None, Some(n)) if n == received => {
                    Ok(format!("{received} messages verified, as many as the client sent"))
                }
                (None, Some(n)) => Err(format!("received {received} messages, the client sent {n}")),
                (None, None) => Err("the client's done message carried no message count".into()),
            },
        };
        let mut result = side.base_result();
        result.ops = received;
        result.atomic_final = atomic_word.unwrap_or_default();
        verdict(&mut result, outcome);
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::Pattern;

    #[test]
    fn write_lat_counter_is_never_zero_and_wraps() {
        assert_eq!(tag(0), 1);
        assert_eq!(tag(254), 255);
        assert_eq!(tag(255), 1);
        assert!((0..10_000).all(|i| tag(i) != 0));
    }

    #[test]
    fn write_lat_check_wants_pattern_then_counter() {
        let pat = Pattern::new(7);
        let mut buf = vec![0u8; 16];
        pat.fill(&mut buf, 0);
        buf[7] = tag(41);
        assert_eq!(check_ping(&buf, 8, &pat, tag(41), "ping"), Ok(()));
        let err = check_ping(&buf, 8, &pat, tag(42), "ping").unwrap_err();
        assert!(err.contains("last byte") && err.contains("at 8 B"), "{err}");
        buf[3] ^= 0xFF;
        assert!(check_ping(&buf, 8, &pat, tag(41), "ping")
            .unwrap_err()
            .contains("offset 3"));
        // One byte: the counter alone.
        assert_eq!(check_ping(&[tag(0)], 1, &pat, tag(0), "ping"), Ok(()));
    }
}
