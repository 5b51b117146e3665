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
use crate::validate::{check_footprint, OwnCheck};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};
use crate::wr_id::WrId;

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

    fn own_check(&self) -> OwnCheck {
        |params, limits| {
            let slots = slots(params) as u64;
            let what = format!("inference-ring's ring holds {slots} slots (tx_depth)");
            check_footprint(params, limits, slots, &what)
        }
    }

    /// Credits bound what is in flight: a batch per slot, a credit per slot
    /// (with its send completion possibly not yet polled), and done.
    fn send_queue_depth(&self, params: &WorkloadParams) -> u32 {
        (2 * slots(params) as u32 + 2).max(16)
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
    let posted = side.link.post_recv_one(&mut chain, WrId::from(wr_id).seq() as usize);
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
        if !WrId::from(c.wr_id).is(OpKind::Recv) {
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

/// What the producer's credit loop needs of the link, so that the loop is
/// tested against a fake consumer.
trait Ring {
    /// Fills staging slot `slot` with batch `id` and posts its
    /// WRITE_WITH_IMM into the consumer's slot `id % k`.
    fn post_batch(&mut self, slot: usize, id: u64) -> Result<(), SessionError>;
    /// Waits for the next completion (a credit's receive is reposted).
    fn next_event(&mut self) -> Result<RingEvent, SessionError>;
    /// The credit due for batch `id` came back; `in_order` when it named it.
    fn credited(&mut self, id: u64, in_order: bool);
}

/// A completion of the producer's.
#[derive(Debug, PartialEq)]
enum RingEvent {
    /// The WRITE out of staging slot `slot` completed: the slot is reusable.
    Written { slot: usize },
    /// A credit, with the immediate it carried.
    Credit { imm: Option<u32> },
    /// Anything else (a credit's own send completion on the consumer's side).
    Other,
}

/// What the credit loop saw.
struct CreditTally {
    problems: Vec<String>,
    max_in_flight: usize,
}

/// The producer's credit loop: posts batches 0..n through `k` slots, at most
/// one batch per free credit (a batch is in the consumer's slot until its
/// credit comes back) and never out of a staging slot whose WRITE has not
/// completed; ends when every batch was credited.
fn feed(ring: &mut impl Ring, k: usize, n: u64) -> Result<CreditTally, SessionError> {
    let mut credits = k;
    // A staging slot is reusable once its WRITE completed (the NIC has read it).
    let mut in_flight = vec![false; k];
    let mut problems = Vec::new();
    let (mut next, mut credited) = (0u64, 0u64);
    let mut max_in_flight = 0;
    while credited < n {
        let slot = (next % k as u64) as usize;
        if next < n && credits > 0 && !in_flight[slot] {
            ring.post_batch(slot, next)?;
            in_flight[slot] = true;
            credits -= 1;
            max_in_flight = max_in_flight.max(k - credits);
            next += 1;
            continue;
        }
        match ring.next_event()? {
            RingEvent::Written { slot } => in_flight[slot] = false,
            RingEvent::Credit { imm } => {
                // Ids are 32-bit on the wire; extend them from the one due.
                let in_order = imm.is_some_and(|imm| (credited & !0xFFFF_FFFF) | u64::from(imm) == credited);
                if !in_order && problems.len() < 4 {
                    problems.push(format!(
                        "credit {imm:?} came back when the credit for batch {credited} was due"
                    ));
                }
                ring.credited(credited, in_order);
                credited += 1;
                credits += 1;
            }
            RingEvent::Other => {}
        }
    }
    Ok(CreditTally {
        problems,
        max_in_flight,
    })
}

/// The producer's ring on the link: staging slots, one pre-built chain each.
struct LinkRing<'a> {
    side: &'a mut Side,
    chains: Vec<crate::verbs::SendChain>,
    staging: crate::verbs::BufId,
    len: usize,
    pattern: crate::pattern::Pattern,
    corrupt: bool,
    posted_at: Vec<Instant>,
    samples: &'a mut Vec<f64>,
}

impl Ring for LinkRing<'_> {
    fn post_batch(&mut self, slot: usize, id: u64) -> Result<(), SessionError> {
        let len = self.len;
        self.pattern.derive(id).fill(
            &mut self.side.link.buffer_mut(self.staging)[slot * len..(slot + 1) * len],
            0,
        );
        if self.corrupt && id == 0 {
            corrupt_byte(self.side, self.staging, len / 2, "batch 0's staging slot");
        }
        self.chains[slot].set_imm(0, id as u32);
        self.posted_at.push(Instant::now());
        Ok(self.side.link.post_send(&mut self.chains[slot])?)
    }

    fn next_event(&mut self) -> Result<RingEvent, SessionError> {
        let c = self.side.next_completion("the consumer's credits")?;
        let id = WrId::from(c.wr_id);
        Ok(match id.kind() {
            Some(OpKind::WriteImm) => RingEvent::Written {
                slot: id.seq() as usize,
            },
            Some(OpKind::Recv) => {
                repost(self.side, c.wr_id)?;
                RingEvent::Credit {
                    imm: c.has_imm.then_some(c.imm),
                }
            }
            _ => RingEvent::Other,
        })
    }

    fn credited(&mut self, id: u64, in_order: bool) {
        if in_order {
            self.samples
                .push(self.posted_at[id as usize].elapsed().as_secs_f64() * 1e6);
        }
        let done = id + 1;
        self.side
            .progress("run", done * self.len as u64, done, format!("batch {id} consumed"));
    }
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
    let chains = (0..k)
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
    let mut samples = Vec::with_capacity(n as usize);
    let mut ring = LinkRing {
        side,
        chains,
        staging,
        len,
        pattern: p,
        corrupt,
        posted_at: Vec::with_capacity(n as usize),
        samples: &mut samples,
    };
    let tally = feed(&mut ring, k, n)?;
    let side = ring.side;
    let (problems, max_in_flight) = (tally.problems, tally.max_in_flight);
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
    use std::collections::VecDeque;

    use super::*;

    /// A producer's link and a consumer, modelled: a batch lands in the
    /// consumer's ring when posted, and its WRITE's completion reaches the
    /// producer later, in order (so a credit can come back before the
    /// completion is polled); the consumer takes landed batches in order and
    /// returns a credit for each. Panics where the real run would corrupt or hang: a WRITE into a
    /// consumer slot still holding an unconsumed batch, a staging slot
    /// refilled while its WRITE is in flight, batch ids out of order, or a
    /// wait with nothing that could complete.
    struct FakeRing {
        k: usize,
        /// WRITEs in flight: (staging slot, batch id).
        writes: VecDeque<(usize, u64)>,
        /// Batches landed in the consumer's ring, not yet consumed.
        landed: VecDeque<u64>,
        /// The consumer's slots: the batch each holds until consumed.
        held: Vec<Option<u64>>,
        staging_busy: Vec<bool>,
        next_id: u64,
        credited: Vec<(u64, bool)>,
        rng: u64,
        /// Every this-many credits, one carries a wrong immediate.
        lie_every: Option<u64>,
        credits_sent: u64,
    }

    impl FakeRing {
        fn new(k: usize, seed: u64) -> Self {
            FakeRing {
                k,
                writes: VecDeque::new(),
                landed: VecDeque::new(),
                held: vec![None; k],
                staging_busy: vec![false; k],
                next_id: 0,
                credited: Vec::new(),
                rng: seed | 1,
                lie_every: None,
                credits_sent: 0,
            }
        }

        fn coin(&mut self) -> bool {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            self.rng & 1 == 1
        }
    }

    impl Ring for FakeRing {
        fn post_batch(&mut self, slot: usize, id: u64) -> Result<(), SessionError> {
            assert_eq!(id, self.next_id, "batches out of order");
            assert_eq!(slot, (id % self.k as u64) as usize, "batch {id} in the wrong slot");
            assert!(
                !self.staging_busy[slot],
                "staging slot {slot} refilled while its WRITE is in flight"
            );
            let target = &mut self.held[slot];
            assert!(
                target.is_none(),
                "batch {id} overwrites unconsumed batch {target:?} in slot {slot}"
            );
            *target = Some(id);
            self.staging_busy[slot] = true;
            self.writes.push_back((slot, id));
            self.landed.push_back(id);
            self.next_id += 1;
            Ok(())
        }

        fn next_event(&mut self) -> Result<RingEvent, SessionError> {
            let can_write = !self.writes.is_empty();
            let can_credit = !self.landed.is_empty();
            assert!(can_write || can_credit, "waiting with nothing in flight: a hang");
            if can_write && (!can_credit || self.coin()) {
                let (slot, _) = self.writes.pop_front().expect("a write");
                self.staging_busy[slot] = false;
                return Ok(RingEvent::Written { slot });
            }
            let id = self.landed.pop_front().expect("a landed batch");
            self.held[(id % self.k as u64) as usize] = None;
            self.credits_sent += 1;
            let lie = self.lie_every.is_some_and(|e| self.credits_sent.is_multiple_of(e));
            let imm = if lie { id as u32 + 7 } else { id as u32 };
            Ok(RingEvent::Credit { imm: Some(imm) })
        }

        fn credited(&mut self, id: u64, in_order: bool) {
            self.credited.push((id, in_order));
        }
    }

    #[test]
    fn test_credit_loop_never_overruns_the_ring_and_ends_when_all_are_credited() {
        for k in 1..=9 {
            for n in [1, 2, 3, 8, 9, 10, 64, 257] {
                for seed in 1..=4 {
                    let mut ring = FakeRing::new(k, seed * 7919 + n);
                    let tally = feed(&mut ring, k, n).expect("the loop ends");
                    assert!(tally.problems.is_empty(), "{:?}", tally.problems);
                    assert!(tally.max_in_flight <= k && tally.max_in_flight >= 1);
                    assert_eq!(ring.next_id, n, "k {k}: batches posted");
                    let expect: Vec<(u64, bool)> = (0..n).map(|id| (id, true)).collect();
                    assert_eq!(ring.credited, expect, "k {k} n {n}");
                }
            }
        }
    }

    #[test]
    fn test_credit_loop_names_a_credit_that_is_not_the_one_due() {
        let mut ring = FakeRing::new(4, 3);
        ring.lie_every = Some(5);
        let tally = feed(&mut ring, 4, 20).expect("the loop ends");
        assert_eq!(tally.problems.len(), 4, "{:?}", tally.problems);
        assert_eq!(
            tally.problems[0],
            "credit Some(11) came back when the credit for batch 4 was due"
        );
        assert_eq!(ring.credited.iter().filter(|(_, ok)| !ok).count(), 4);
    }

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
