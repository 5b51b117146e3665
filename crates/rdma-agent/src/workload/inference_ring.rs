//! inference-ring: a producer streams batches into a ring buffer on the
//! consumer, as an inference front end feeds a model server. The client
//! (producer) WRITEs batch `b` into slot `b % slots` of the server's ring
//! with WRITE_WITH_IMM carrying `b`; the server (consumer) checks that ids
//! arrive consecutively and that each slot holds batch `b`'s pattern, then
//! returns a credit, a zero-length SEND_WITH_IMM carrying `b`. The producer
//! starts with one credit per slot and spends one per batch, so it never
//! overwrites a slot the consumer has not finished with: the credits are
//! the backpressure. A batch's latency is from its post to its credit.

use std::time::Instant;

use agent_proto::v1::{Fault, Role, SideResult, WorkloadParams};

use super::{corrupt_byte, injects, note_skip, pattern, size, verdict, OpKind, Workload};
use crate::session::{SessionError, Side};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};

/// The inference-ring workload.
pub struct InferenceRing;

/// Ring slots when tx_depth is 0.
pub const DEFAULT_SLOTS: u32 = 8;

/// Slots in the ring: `tx_depth`, or [`DEFAULT_SLOTS`].
pub fn slots(params: &WorkloadParams) -> usize {
    if params.tx_depth == 0 {
        DEFAULT_SLOTS as usize
    } else {
        params.tx_depth as usize
    }
}

/// Batches to stream: `batches`, or `iterations` when it is 0.
pub fn batches(params: &WorkloadParams) -> u64 {
    if params.batches > 0 {
        u64::from(params.batches)
    } else {
        params.iterations.max(1)
    }
}

/// What the consumer saw: checks ids and contents as batches arrive.
#[derive(Debug, Default)]
pub struct ConsumerLedger {
    /// The id due next.
    pub expected: u64,
    /// Batches whose bytes matched.
    pub verified: u64,
    /// The first few problems.
    pub problems: Vec<String>,
}

impl ConsumerLedger {
    /// Records batch `id`, whose slot content check gave `content`.
    pub fn record(&mut self, id: u64, content: Result<(), String>) {
        if id != self.expected {
            self.problem(format!("batch {id} arrived when batch {} was due", self.expected));
        }
        match content {
            Ok(()) => self.verified += 1,
            Err(m) => self.problem(format!("batch {id}: {m}")),
        }
        self.expected = id + 1;
    }

    fn problem(&mut self, what: String) {
        if self.problems.len() < 4 {
            self.problems.push(what);
        }
    }
}

impl Workload for InferenceRing {
    fn name(&self) -> &'static str {
        "inference-ring"
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = size(&side.params);
        let k = slots(&side.params);
        let ctrl = side.link.add_buffer(8, Access::Local)?;
        let empty = LocalSlice {
            buf: ctrl,
            offset: 0,
            len: 0,
        };
        // The consumer takes a batch per slot, plus the done message; the
        // producer a credit per slot. All zero-length: WRITE_WITH_IMM places
        // its data in the ring, credits carry only their immediate.
        let receives = match side.role {
            Role::Server => {
                side.exposed = Some(side.link.add_buffer(k * len, Access::Remote)?);
                k + 1
            }
            Role::Client => {
                side.bufs = vec![side.link.add_buffer(k * len, Access::Local)?];
                k
            }
        };
        let mut chain = side.link.recv_chain(&vec![empty; receives], OpKind::Recv.wr_id(0))?;
        side.link.post_recv_all(&mut chain)?;
        side.recvs = Some(chain);
        side.bufs.push(ctrl);
        Ok(())
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        match side.role {
            Role::Server => consume(side),
            Role::Client => produce(side),
        }
    }
}

fn repost(side: &mut Side, wr_id: u64) -> Result<(), SessionError> {
    let mut chain = side.recvs.take().expect("prepared");
    let posted = side.link.post_recv_one(&mut chain, OpKind::seq(wr_id) as usize);
    side.recvs = Some(chain);
    Ok(posted?)
}

fn consume(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let k = slots(&side.params);
    let p = pattern(&side.params);
    let ring = side.exposed.expect("prepared");
    let ctrl = *side.bufs.last().expect("prepared");
    let mut credit = side.link.send_chain(&[SendWr {
        wr_id: OpKind::Send.wr_id(0),
        op: SendOp::SendImm {
            local: LocalSlice {
                buf: ctrl,
                offset: 0,
                len: 0,
            },
            imm: 0,
        },
        signaled: true,
        inline: false,
    }])?;
    let mut ledger = ConsumerLedger::default();
    loop {
        let c = side.next_completion("the producer's batches and the done notification")?;
        if (c.wr_id >> 56) as u8 != OpKind::Recv as u8 {
            continue; // a credit's send completion
        }
        if Side::is_done(&c) {
            break;
        }
        if !c.has_imm {
            return Err(SessionError::Protocol(format!(
                "a message without a batch id (opcode {}) after batch {}",
                c.opcode,
                ledger.expected.wrapping_sub(1)
            )));
        }
        // Ids are 32-bit on the wire; extend them from the one due.
        let id = (ledger.expected & !0xFFFF_FFFF) | u64::from(c.imm);
        let slot = (id % k as u64) as usize;
        let content = p
            .derive(id)
            .verify(&side.link.buffer(ring)[slot * len..(slot + 1) * len], 0)
            .map_err(|m| format!("slot {slot} does not hold its bytes: {m}"));
        ledger.record(id, content);
        // The slot is free again: repost, then hand the credit back.
        repost(side, c.wr_id)?;
        credit.set_imm(0, c.imm);
        credit.set_wr_id(0, OpKind::Send.wr_id(id));
        side.link.post_send(&mut credit)?;
    }
    let n = ledger.expected;
    let due = batches(&side.params);
    if n != due {
        ledger.problem(format!("{n} batches arrived, the run has {due}"));
    }
    let mut result = side.base_result();
    result.bytes = n * len as u64;
    result.ops = n;
    result.facts.insert("ring_slots".into(), k.to_string());
    result.facts.insert("batches_received".into(), n.to_string());
    verdict(
        &mut result,
        if ledger.problems.is_empty() && ledger.verified == n {
            Ok(format!(
                "{n} batches of {len} B through a ring of {k} slots: ids 0..{} in order, every batch's bytes match",
                n.saturating_sub(1)
            ))
        } else {
            Err(format!(
                "{} of {n} batches verified; {}",
                ledger.verified,
                ledger.problems.join("; ")
            ))
        },
    );
    Ok(result)
}

fn produce(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let k = slots(&side.params);
    let mut n = batches(&side.params);
    if injects(side, Fault::Skip) {
        n -= 1;
        note_skip(side, format!("batch {n}, the last, is never posted"));
    }
    let corrupt = injects(side, Fault::Corrupt);
    let p = pattern(&side.params);
    if side.peer.len < (k * len) as u64 {
        return Err(SessionError::Protocol(format!(
            "server ring is {} B, {k} slots of {len} B need {} B",
            side.peer.len,
            k * len
        )));
    }
    let staging = side.bufs[0];
    let mut chains = (0..k)
        .map(|slot| {
            side.link.send_chain(&[SendWr {
                wr_id: OpKind::WriteImm.wr_id(slot as u64),
                op: SendOp::WriteImm {
                    local: LocalSlice {
                        buf: staging,
                        offset: slot * len,
                        len,
                    },
                    remote_addr: side.peer.addr + (slot * len) as u64,
                    rkey: side.peer.rkey,
                    imm: 0,
                },
                signaled: true,
                inline: len <= side.params.inline_size as usize,
            }])
        })
        .collect::<Result<Vec<_>, _>>()?;
    let mut credits = k;
    // A staging slot is reusable once its WRITE completed (the NIC has read it).
    let mut in_flight = vec![false; k];
    let mut posted_at = Vec::with_capacity(n as usize);
    let mut samples = Vec::with_capacity(n as usize);
    let mut problems = Vec::new();
    let (mut next, mut credited) = (0u64, 0u64);
    let mut max_in_flight = 0;
    while credited < n {
        let slot = (next % k as u64) as usize;
        if next < n && credits > 0 && !in_flight[slot] {
            p.derive(next)
                .fill(&mut side.link.buffer_mut(staging)[slot * len..(slot + 1) * len], 0);
            if corrupt && next == 0 {
                corrupt_byte(side, staging, len / 2, "batch 0's staging slot");
            }
            chains[slot].set_imm(0, next as u32);
            posted_at.push(Instant::now());
            side.link.post_send(&mut chains[slot])?;
            in_flight[slot] = true;
            credits -= 1;
            max_in_flight = max_in_flight.max(k - credits);
            next += 1;
            continue;
        }
        let c = side.next_completion("the consumer's credits")?;
        match (c.wr_id >> 56) as u8 {
            kind if kind == OpKind::WriteImm as u8 => in_flight[OpKind::seq(c.wr_id) as usize] = false,
            kind if kind == OpKind::Recv as u8 => {
                let id = (credited & !0xFFFF_FFFF) | u64::from(c.imm);
                if !c.has_imm || id != credited {
                    if problems.len() < 4 {
                        problems.push(format!(
                            "credit {:?} came back when the credit for batch {credited} was due",
                            c.has_imm.then_some(c.imm)
                        ));
                    }
                } else {
                    samples.push(posted_at[id as usize].elapsed().as_secs_f64() * 1e6);
                }
                credited += 1;
                credits += 1;
                repost(side, c.wr_id)?;
                side.progress("run", credited * len as u64, credited, format!("batch {id} consumed"));
            }
            _ => {}
        }
    }
    side.send_done()?;
    let elapsed = side.elapsed();
    let mut result = side.base_result();
    result.bytes = n * len as u64;
    result.ops = n;
    result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
    result.lat = Some(crate::metrics::latency(&mut samples));
    result.facts.insert("ring_slots".into(), k.to_string());
    result.facts.insert("max_in_flight".into(), max_in_flight.to_string());
    verdict(
        &mut result,
        if problems.is_empty() {
            Ok(format!(
                "{n} batches posted with at most {max_in_flight} of {k} slots in flight; \
                 credits came back in order (the consumer verifies the bytes)"
            ))
        } else {
            Err(problems.join("; "))
        },
    );
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_ledger_accepts_consecutive_verified_batches() {
        let mut l = ConsumerLedger::default();
        for id in 0..64 {
            l.record(id, Ok(()));
        }
        assert_eq!((l.expected, l.verified), (64, 64));
        assert!(l.problems.is_empty());
    }

    #[test]
    fn test_ledger_names_gaps_reorders_and_bad_bytes() {
        let mut l = ConsumerLedger::default();
        l.record(0, Ok(()));
        l.record(2, Ok(()));
        l.record(1, Ok(()));
        l.record(2, Err("slot 2 does not hold its bytes".into()));
        assert_eq!(l.verified, 3);
        assert_eq!(l.problems.len(), 3, "{:?}", l.problems);
        assert!(l.problems[0].contains("batch 2 arrived when batch 1 was due"));
        assert!(l.problems[1].contains("batch 1 arrived when batch 3 was due"));
        assert!(l.problems[2].contains("slot 2"));
    }

    #[test]
    fn test_slots_and_batches_defaults() {
        let mut p = WorkloadParams {
            iterations: 64,
            ..Default::default()
        };
        assert_eq!((slots(&p), batches(&p)), (8, 64));
        p.tx_depth = 4;
        p.batches = 10;
        assert_eq!((slots(&p), batches(&p)), (4, 10));
    }
}
