//! The bandwidth and latency families (write/read/send/atomic × bw/lat), in
//! perftest's spirit: a pre-built chain of `post_list` work requests posted
//! again and again with at most `tx_depth` outstanding, one signaled request
//! every `cq_moderation` (selective signaling), payloads inline up to
//! `inline_size`, for `iterations` operations or `duration_s` seconds, and
//! optionally swept over sizes 2 B .. max_size. Nothing allocates in the loop.
//!
//! Latency: send-lat is a SEND ping-pong (RTT/2, as ib_send_lat); write-,
//! read- and atomic-lat time one outstanding operation to its completion.
//! Bytes are still verified where it is cheap: the server checks the pattern
//! the client wrote (write), the client checks what it read (read), the
//! server checks the atomic word's final value, and send messages are checked.

use std::time::{Duration, Instant};

use agent_proto::v1::{Role, SideResult, SizePoint};

use super::{pattern, verdict, OpKind, Workload};
use crate::metrics::{bandwidth, latency, PeakTracker};
use crate::session::{SessionError, Side};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};

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

/// Iterations per size when neither iterations nor duration is given.
const DEFAULT_ITERATIONS: u64 = 1000;
/// Receives the server keeps posted for send-bw/send-lat.
const RECV_RING: usize = 64;

fn sizes(side: &Side, op: PerfOp) -> Vec<u64> {
    if op == PerfOp::Atomic {
        return vec![8];
    }
    if side.params.all_sizes {
        let max = crate::validate::effective_max_size(&side.params);
        let mut v = Vec::new();
        let mut s = 2;
        while s <= max {
            v.push(s);
            s *= 2;
        }
        v
    } else {
        vec![side.params.size.max(1)]
    }
}

fn buffer_len(side: &Side, op: PerfOp) -> usize {
    *sizes(side, op).iter().max().expect("at least one size") as usize
}

impl Workload for Perf {
    fn name(&self) -> &'static str {
        self.name
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = buffer_len(side, self.op);
        match side.role {
            Role::Server => {
                let exposed = side.link.add_buffer(len, Access::Remote)?;
                if self.op == PerfOp::Read {
                    pattern(&side.params).fill(side.link.buffer_mut(exposed), 0);
                }
                side.exposed = Some(exposed);
                // Receives for SENDs (and the done message), reposted as they complete.
                let slots = if self.op == PerfOp::Send {
                    RECV_RING
                } else {
                    1
                };
                let rx = side.link.add_buffer(len * slots, Access::Local)?;
                let slices: Vec<LocalSlice> = (0..slots)
                    .map(|s| LocalSlice {
                        buf: rx,
                        offset: s * len,
                        len: if self.op == PerfOp::Send { len } else { 0 },
                    })
                    .collect();
                let mut chain = side.link.recv_chain(&slices, OpKind::Recv.wr_id(0))?;
                side.link.post_recv_all(&mut chain)?;
                side.recvs = Some(chain);
                side.bufs = vec![rx];
                if self.op == PerfOp::Send && self.latency {
                    side.bufs.push(side.link.add_buffer(len, Access::Local)?);
                }
                Ok(())
            }
            Role::Client => {
                let buf = side.link.add_buffer(len, Access::Local)?;
                if matches!(self.op, PerfOp::Write | PerfOp::Send) {
                    pattern(&side.params).fill(side.link.buffer_mut(buf), 0);
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
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        if side.role == Role::Server {
            return self.serve(side);
        }
        let mut sweep = Vec::new();
        let mut problems = Vec::new();
        let (mut total_bytes, mut total_ops) = (0u64, 0u64);
        for size in sizes(side, self.op) {
            side.progress("run", total_bytes, total_ops, format!("size {size} B"));
            let point = if self.latency {
                self.measure_latency(side, size as usize, &mut problems)?
            } else {
                self.measure_bandwidth(side, size as usize, &mut problems)?
            };
            total_bytes += point.size * point.iterations;
            total_ops += point.iterations;
            sweep.push(point);
        }
        side.send_done()?;
        let mut result = side.base_result();
        result.bytes = total_bytes;
        result.ops = total_ops;
        let last = sweep.last().cloned().unwrap_or_default();
        result.bw = last.bw;
        result.lat = last.lat;
        if side.params.all_sizes {
            result.sweep = sweep;
        }
        result
            .facts
            .insert("tx_depth".into(), tx_depth(side).to_string());
        result
            .facts
            .insert("cq_moderation".into(), cq_moderation(side).to_string());
        result
            .facts
            .insert("post_list".into(), post_list(side).to_string());
        let checked = match self.op {
            PerfOp::Read => "client checked the bytes it read",
            _ => "the server checks the bytes/final value",
        };
        verdict(
            &mut result,
            if problems.is_empty() {
                Ok(checked.to_string())
            } else {
                Err(problems.join("; "))
            },
        );
        if self.op != PerfOp::Read && problems.is_empty() {
            // Only the server's check counts for these.
            result.verified = false;
            result.checked = false;
        }
        Ok(result)
    }
}

fn tx_depth(side: &Side) -> usize {
    (if side.params.tx_depth == 0 {
        128
    } else {
        side.params.tx_depth
    }) as usize
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
    if side.params.iterations > 0 {
        Some(side.params.iterations)
    } else if side.params.duration_s > 0.0 {
        None
    } else {
        Some(DEFAULT_ITERATIONS)
    }
}

impl Perf {
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
        let depth = tx_depth(side);
        let list = post_list(side);
        // Signal the last request of every `every`-th post.
        let every = cq_moderation(side).div_ceil(list).max(1);
        let buf = side.bufs[0];
        let local = LocalSlice {
            buf,
            offset: 0,
            len: size,
        };
        let wrs: Vec<SendWr> = (0..list)
            .map(|_| self.op_wr(side, local, 0, false))
            .collect();
        let mut chain = side.link.send_chain(&wrs)?;
        let planned = planned_iterations(side);
        let stop_at = Instant::now() + Duration::from_secs_f64(side.params.duration_s.max(0.0));
        let mut peak = PeakTracker::new(Duration::from_millis(500));
        let (mut posted, mut completed, mut posts) = (0u64, 0u64, 0u64);
        let start = Instant::now();
        loop {
            let remaining = planned.map(|n| n.saturating_sub(posted));
            let finished_posting = remaining == Some(0)
                || (planned.is_none() && Instant::now() >= stop_at && posted > 0);
            if finished_posting && completed == posted {
                break;
            }
            let in_flight = (posted - completed) as usize;
            if !finished_posting
                && in_flight + list <= depth
                && remaining.is_none_or(|r| r >= list as u64)
            {
                posts += 1;
                let last_post = remaining == Some(list as u64)
                    || (planned.is_none() && Instant::now() >= stop_at);
                let signaled = posts % every as u64 == 0 || last_post;
                chain.set_signaled(list - 1, signaled);
                chain.set_wr_id(list - 1, self.kind().wr_id(posted + list as u64));
                side.link.post_send(&mut chain)?;
                posted += list as u64;
                if !signaled {
                    continue;
                }
                if last_post && planned.is_none() {
                    // Timed run: this signaled post is the last one.
                    while completed < posted {
                        let c = side.next_completion("bandwidth completions")?;
                        let upto = OpKind::seq(c.wr_id);
                        peak.add((upto - completed) * size as u64);
                        completed = upto;
                    }
                    break;
                }
                continue;
            }
            if !finished_posting && remaining.is_some_and(|r| r < list as u64) && in_flight == 0 {
                // Tail shorter than post_list: a one-off chain, signaled.
                let tail: Vec<SendWr> = (0..remaining.unwrap_or(0) as usize)
                    .map(|i| {
                        let last = i + 1 == remaining.unwrap_or(0) as usize;
                        self.op_wr(side, local, self.kind().wr_id(posted + i as u64 + 1), last)
                    })
                    .collect();
                let mut tail_chain = side.link.send_chain(&tail)?;
                side.link.post_send(&mut tail_chain)?;
                posted += tail.len() as u64;
                continue;
            }
            let c = side.next_completion("bandwidth completions")?;
            let upto = OpKind::seq(c.wr_id);
            peak.add(upto.saturating_sub(completed) * size as u64);
            completed = completed.max(upto);
        }
        let elapsed = start.elapsed();
        if self.op == PerfOp::Read {
            if let Err(m) = pattern(&side.params).verify(&side.link.buffer(buf)[..size], 0) {
                problems.push(format!("read-bw at {size} B: {m}"));
            }
        }
        let bytes = posted * size as u64;
        Ok(SizePoint {
            size: size as u64,
            iterations: posted,
            bw: Some(bandwidth(bytes, posted, elapsed, peak.windows())),
            lat: None,
        })
    }

    fn measure_latency(
        &self,
        side: &mut Side,
        size: usize,
        problems: &mut Vec<String>,
    ) -> Result<SizePoint, SessionError> {
        let buf = side.bufs[0];
        let local = LocalSlice {
            buf,
            offset: 0,
            len: size,
        };
        let mut chain =
            side.link
                .send_chain(&[self.op_wr(side, local, self.kind().wr_id(0), true)])?;
        let planned = planned_iterations(side);
        let stop_at = Instant::now() + Duration::from_secs_f64(side.params.duration_s.max(0.0));
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
                    if OpKind::name_of(c.wr_id) == "SEND" {
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
        let len = buffer_len(side, self.op);
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
        loop {
            let c = side.next_completion("messages and the done notification")?;
            if OpKind::name_of(c.wr_id) == "SEND" {
                continue;
            }
            if Side::is_done(&c) {
                break;
            }
            let slot = OpKind::seq(c.wr_id) as usize;
            received += 1;
            let n = c.byte_len as usize;
            if problem.is_none() && self.op == PerfOp::Send {
                if let Err(m) = pattern(&side.params)
                    .verify(&side.link.buffer(rx)[slot * len..slot * len + n], 0)
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
                let data = side.link.buffer(rx)[slot * len..slot * len + n].to_vec();
                side.link.buffer_mut(side.bufs[1])[..n].copy_from_slice(&data);
                let chain = echo_chains.get_mut(&n).expect("inserted");
                side.link.post_send(chain)?;
            }
            side.link.post_recv_one(&mut recvs, slot)?;
        }
        echo.take();
        let exposed = side.exposed.expect("prepared");
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
            PerfOp::Atomic => Ok(format!(
                "remote word counted {} fetch-and-adds",
                u64::from_ne_bytes(side.link.buffer(exposed)[..8].try_into().expect("8 bytes"))
            )),
            PerfOp::Send => problem
                .clone()
                .map_or_else(|| Ok(format!("{received} messages verified")), Err),
        };
        let mut result = side.base_result();
        result.ops = received;
        if self.op == PerfOp::Atomic {
            result.atomic_final =
                u64::from_ne_bytes(side.link.buffer(exposed)[..8].try_into().expect("8 bytes"));
        }
        verdict(&mut result, outcome);
        Ok(result)
    }
}
