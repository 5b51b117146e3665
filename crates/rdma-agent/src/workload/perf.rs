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
//! Verification, always outside the timed span of a sample and never in
//! proportion to the bytes moved inside the bandwidth loop:
//! - write-bw stamps every WRITE with its sequence number in a slot of its
//!   own ([`slots`]); after the run the client WRITEs the count it claims per
//!   QP, and the server checks that each slot holds the pattern stamped with
//!   the last WRITE counted into it (a lost WRITE is a missing number).
//! - read-bw and read-lat check every READ: its slot's ends are cleared
//!   before it is posted and must hold the server's pattern once it has
//!   completed; the last READs are then checked in full.
//! - the server checks the pattern of send messages and their count, the
//!   atomic word's final value, and that the READs' source is unchanged;
//!   write-lat's client checks every echo, its server every ping count.
//!
//! Parts: [`spec`] (what both sides read from the parameters), [`slots`]
//! (the per-operation checks, pure), [`bw`] (the bandwidth client),
//! [`lat`] (the latency clients, write-lat's server), [`serve`] (the other
//! servers and their verdicts).

mod bw;
mod lat;
mod serve;
pub mod slots;
mod spec;

use agent_proto::v1::{Fault, Role, SideResult, WorkloadParams};

pub use spec::{recv_ring, Perf, PerfOp};

use super::{corrupt_byte, injects, note_skip, pattern, read_peer_word, verdict, OpKind, Workload};
use crate::session::{SessionError, Side};
use crate::validate::{no_own_checks, Limits, OwnCheck, ValidationError};
use crate::verbs::{Access, LocalSlice};
use spec::{buffer_len, cq_moderation, post_list, receiving_qps, recv_slot_len, recv_slots_per_qp, sizes, tx_depth};

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

    /// The client of every latency workload, and send-lat's server: it
    /// receives each ping and sends the echo inside the client's round trip,
    /// as ib_send_lat's server does by spinning. The read-lat and atomic-lat
    /// servers have no data-path work and sleep whatever the mode
    /// ([`Side::set_passive`]); write-lat's server watches memory.
    fn waits_are_measured(&self, role: Role) -> bool {
        self.latency && (role == Role::Client || self.op == PerfOp::Send)
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
                let exposed_len = if self.slotted() && self.op == PerfOp::Write {
                    // write-bw's slots, then the client's per-QP counts.
                    self.counts_offset(side) + 8 * side.link.num_qps()
                } else {
                    len
                };
                let exposed = side.link.add_buffer(exposed_len, Access::Remote)?;
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
                    lat::echo_pattern(side).fill(side.link.buffer_mut(src), 0);
                    side.bufs.push(src);
                }
                Ok(())
            }
            Role::Client => {
                let buf_len = match self.op {
                    // write-bw's source slots, then the counts it WRITEs after the run.
                    PerfOp::Write if self.slotted() => self.counts_offset(side) + 8 * side.link.num_qps(),
                    // The READs' slots, then the spare bytes of the fault skip.
                    PerfOp::Read => self.slots_len(side) + len,
                    _ => len,
                };
                let buf = side.link.add_buffer(buf_len, Access::Local)?;
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
        let write_bw = self.slotted() && self.op == PerfOp::Write;
        // write-bw's server checks the last size's slots, so its lost WRITE
        // is in the last size; the others' in the first.
        let skip_at = if write_bw { last } else { 0 };
        // write-bw: the WRITEs each QP posted at the last size.
        let mut per_lane = Vec::new();
        for (n, size) in sizes.into_iter().enumerate() {
            side.progress("run", total_bytes, total_ops, format!("size {size} B"));
            let skip = n == skip_at && injects(side, Fault::Skip);
            let mut point = if self.latency {
                self.measure_latency(side, size as usize, skip, &mut problems)?
            } else {
                // Only read-bw's skip happens on the wire (a READ into a
                // spare buffer); write-bw's is the count below.
                let read_skip = skip && self.op == PerfOp::Read;
                let (point, lanes) = self.measure_bandwidth(side, size as usize, read_skip, &mut problems)?;
                per_lane = lanes;
                point
            };
            if skip && self.op != PerfOp::Read {
                // One operation counted that never took effect, as if it were lost
                // (write-bw: on QP 0, in the count it WRITEs to the server).
                point.iterations += 1;
                if let Some(first) = per_lane.first_mut().filter(|_| write_bw) {
                    *first += 1;
                }
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
        if write_bw {
            self.send_counts(side, &per_lane)?;
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
            PerfOp::Read => {
                "client checked that every READ delivered (its slot's ends, cleared before it was posted) and the last READs in full"
                    .to_string()
            }
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
