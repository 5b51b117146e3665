//! A rank's links to the other ranks: one QP each, WRITE_WITH_IMM into
//! their exposed buffers, the immediates that arrived kept per peer in
//! arrival order (RC delivers a QP's messages in order, so each peer's are
//! checked against what the algorithm expects next), and the barrier.
//!
//! An immediate is `kind (2 bits) | operation (14 bits) | step (16 bits)`:
//! a message of another operation or step than the one awaited is a
//! protocol error, never silently taken for the right one.

use std::collections::VecDeque;
use std::time::Instant;

use crate::session::{SessionError, Side};
use crate::verbs::{BufId, LocalSlice, SendOp, SendWr};
use crate::wr_id::{OpKind, WrId};

/// Receives kept posted on each QP; an operation's arrivals on one QP
/// (2 (n-1) ring steps and the barrier's message) stay well below it.
pub const RECVS_PER_QP: u32 = 64;
/// Sends in flight on one QP at most.
pub const SENDS_PER_QP: u32 = 16;

/// What an immediate announces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A step's data has landed.
    Data = 0,
    /// A rank reached the barrier (to rank 0).
    Arrive = 1,
    /// Rank 0 releases the barrier: run the operation.
    Go = 2,
    /// Rank 0 releases the barrier: the run is over.
    Stop = 3,
}

/// An immediate without its operation number (the [`Net`] adds it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Imm {
    kind: Kind,
    step: u16,
}

impl Imm {
    /// Data of step `step` of the current operation.
    pub fn data(step: usize) -> Imm {
        Imm {
            kind: Kind::Data,
            step: step as u16,
        }
    }

    fn control(kind: Kind) -> Imm {
        Imm { kind, step: 0 }
    }

    fn encode(self, op: u32) -> u32 {
        ((self.kind as u32) << 30) | ((op & 0x3FFF) << 16) | u32::from(self.step)
    }
}

/// Says what an immediate is, for errors.
fn describe(imm: u32) -> String {
    let kind = match imm >> 30 {
        0 => "data",
        1 => "barrier arrival",
        2 => "barrier release",
        _ => "stop",
    };
    format!("{kind} of operation {} step {}", (imm >> 16) & 0x3FFF, imm & 0xFFFF)
}

/// This rank's QPs to the others and what arrived on them.
pub struct Net {
    rank: usize,
    world: usize,
    /// The local buffer zero-length messages name (never read).
    anchor: BufId,
    /// Immediates that arrived, per QP, oldest first.
    arrived: Vec<VecDeque<u32>>,
    /// Signaled writes not yet completed, per QP.
    in_flight: Vec<u32>,
    /// The operation number the immediates carry.
    op: u32,
    /// The next data write carries no bytes (a skip fault).
    skip_next: bool,
    sent_bytes: u64,
}

/// The QP of `peer` on `rank`'s side: the other ranks in rank order.
fn qp_of(rank: usize, peer: usize) -> usize {
    if peer < rank {
        peer
    } else {
        peer - 1
    }
}

impl Net {
    /// Posts the receives of every QP (each QP's receive request carries
    /// the QP's index as its wr_id, and is posted again as it completes).
    pub fn post_receives(side: &mut Side) -> Result<(), SessionError> {
        let qps = side.link.num_qps();
        let slices: Vec<LocalSlice> = (0..qps)
            .map(|_| LocalSlice {
                buf: side.bufs[0],
                offset: 0,
                len: 0,
            })
            .collect();
        let mut chain = side.link.recv_chain(&slices, OpKind::Recv.wr_id(0))?;
        for qp in 0..qps {
            for _ in 0..RECVS_PER_QP {
                side.link.post_recv_one_on(qp, &mut chain, qp)?;
            }
        }
        side.recvs = Some(chain);
        Ok(())
    }

    /// The links of `rank` among `world` ranks, once every QP is connected.
    pub fn new(side: &Side, rank: usize, world: usize, anchor: BufId) -> Result<Net, SessionError> {
        if side.peers.len() != world - 1 || side.recvs.is_none() {
            return Err(SessionError::Setup(format!(
                "rank {rank} of {world} has {} peer buffers, expected {}",
                side.peers.len(),
                world - 1
            )));
        }
        Ok(Net {
            rank,
            world,
            anchor,
            arrived: vec![VecDeque::new(); world - 1],
            in_flight: vec![0; world - 1],
            op: 0,
            skip_next: false,
            sent_bytes: 0,
        })
    }

    /// Makes the next data write carry no bytes: its immediate arrives, its
    /// data does not (the skip fault).
    pub fn skip_next_write(&mut self) {
        self.skip_next = true;
    }

    /// Bytes this rank's writes carried since the last call.
    pub fn take_sent_bytes(&mut self) -> u64 {
        std::mem::take(&mut self.sent_bytes)
    }

    /// WRITE_WITH_IMM of `local` into `peer`'s exposed buffer at `offset`.
    pub fn write(
        &mut self,
        side: &mut Side,
        peer: usize,
        mut local: LocalSlice,
        offset: u64,
        imm: Imm,
    ) -> Result<(), SessionError> {
        let qp = qp_of(self.rank, peer);
        while self.in_flight[qp] + 1 >= SENDS_PER_QP {
            self.pump(side, || format!("room in the send queue to rank {peer}"))?;
        }
        if imm.kind == Kind::Data && self.skip_next && local.len > 0 {
            self.skip_next = false;
            super::super::note_skip(
                side,
                format!(
                    "rank {}'s write of {} B to rank {peer} (operation {}) carried no data",
                    self.rank,
                    local.len,
                    self.op + 1
                ),
            );
            local.len = 0;
        }
        let remote = side.peers[qp];
        let mut chain = side.link.send_chain(&[SendWr {
            wr_id: OpKind::WriteImm.wr_id(qp as u64),
            op: SendOp::WriteImm {
                local,
                remote_addr: remote.addr + offset,
                rkey: remote.rkey,
                imm: imm.encode(self.op),
            },
            signaled: true,
            inline: false,
        }])?;
        side.link.post_send_on(qp, &mut chain)?;
        self.in_flight[qp] += 1;
        self.sent_bytes += local.len as u64;
        Ok(())
    }

    /// Takes one completion: an arrival (kept, its receive posted again) or
    /// a write's completion. A timeout or abort says what this rank was
    /// waiting for (`what`, formatted only then) and for how long.
    pub fn pump(&mut self, side: &mut Side, what: impl FnOnce() -> String) -> Result<(), SessionError> {
        self.pump_since(side, what, Instant::now())
    }

    /// As [`Net::pump`], for a wait that began at `since`.
    fn pump_since(
        &mut self,
        side: &mut Side,
        what: impl FnOnce() -> String,
        since: Instant,
    ) -> Result<(), SessionError> {
        let c = side.next_completion("a completion").map_err(|e| {
            let waited = format!("{} (for {:.1} s)", what(), since.elapsed().as_secs_f64());
            match e {
                SessionError::Timeout { after, .. } => SessionError::Timeout { what: waited, after },
                SessionError::Aborted(_) => SessionError::Aborted(format!("while waiting for {waited}")),
                SessionError::Completion { wr_id, .. } => {
                    let qp = WrId::from(wr_id).seq() as usize;
                    let peer = if qp < self.rank { qp } else { qp + 1 };
                    SessionError::OnQp {
                        peer: format!("rank {peer}"),
                        source: Box::new(e),
                    }
                }
                other => other,
            }
        })?;
        let id = WrId::from(c.wr_id);
        let qp = id.seq() as usize;
        if qp >= self.world - 1 {
            return Err(SessionError::Protocol(format!(
                "completion of unknown wr_id {:#x}",
                c.wr_id
            )));
        }
        if id.is(OpKind::Recv) {
            if !c.has_imm {
                return Err(SessionError::Protocol(format!(
                    "a message without immediate arrived on QP {qp}"
                )));
            }
            self.arrived[qp].push_back(c.imm);
            let mut chain = side.recvs.take().expect("receives posted");
            let posted = side.link.post_recv_one_on(qp, &mut chain, qp);
            side.recvs = Some(chain);
            posted?;
        } else {
            self.in_flight[qp] = self.in_flight[qp].saturating_sub(1);
        }
        Ok(())
    }

    /// Whether `imm` of the current operation has arrived from `peer`
    /// (taking it); another message first is a protocol error, reported by
    /// the next [`Net::wait`]. Does not wait.
    pub fn arrived(&mut self, peer: usize, imm: Imm) -> bool {
        let qp = qp_of(self.rank, peer);
        let want = imm.encode(self.op);
        if self.arrived[qp].front() == Some(&want) {
            self.arrived[qp].pop_front();
            return true;
        }
        false
    }

    /// Waits for `imm` of the current operation from `peer`; `what` says,
    /// for a timeout, what this rank is waiting for.
    pub fn wait(
        &mut self,
        side: &mut Side,
        peer: usize,
        imm: Imm,
        what: impl Fn() -> String,
    ) -> Result<(), SessionError> {
        let qp = qp_of(self.rank, peer);
        let want = imm.encode(self.op);
        let since = Instant::now();
        loop {
            if let Some(got) = self.arrived[qp].pop_front() {
                if got == want {
                    return Ok(());
                }
                return Err(SessionError::Protocol(format!(
                    "rank {} expected {} from rank {peer}, got {}",
                    self.rank,
                    describe(want),
                    describe(got)
                )));
            }
            // The time told is the whole wait's, not the last completion's.
            self.pump_since(side, &what, since)?;
        }
    }

    /// Waits until every write of this rank has completed (its data delivered).
    pub fn drain(&mut self, side: &mut Side, what: &str) -> Result<(), SessionError> {
        while let Some(qp) = self.in_flight.iter().position(|n| *n > 0) {
            let peer = if qp < self.rank { qp } else { qp + 1 };
            self.pump(side, || format!("{what}: its write to rank {peer} to complete"))?;
        }
        Ok(())
    }

    /// A zero-length message to `peer`.
    fn signal(&mut self, side: &mut Side, peer: usize, kind: Kind) -> Result<(), SessionError> {
        let local = LocalSlice {
            buf: self.anchor,
            offset: 0,
            len: 0,
        };
        self.write(side, peer, local, 0, Imm::control(kind))
    }

    /// The barrier before an operation: every rank tells rank 0 it is
    /// there, and rank 0, once all are, tells every rank to go (`go`) or
    /// that the run is over. Returns whether to run the operation; the
    /// operation number moves on either way.
    pub fn barrier(&mut self, side: &mut Side, go: bool, what: &str) -> Result<bool, SessionError> {
        let decided = if self.rank == 0 {
            for peer in 1..self.world {
                self.wait(side, peer, Imm::control(Kind::Arrive), || {
                    format!("{what}: rank {peer} to reach the barrier")
                })?;
            }
            let kind = if go { Kind::Go } else { Kind::Stop };
            for peer in 1..self.world {
                self.signal(side, peer, kind)?;
            }
            go
        } else {
            self.signal(side, 0, Kind::Arrive)?;
            let (go, stop) = (
                Imm::control(Kind::Go).encode(self.op),
                Imm::control(Kind::Stop).encode(self.op),
            );
            loop {
                match self.arrived[0].pop_front() {
                    Some(got) if got == go => break true,
                    Some(got) if got == stop => break false,
                    Some(got) => {
                        return Err(SessionError::Protocol(format!(
                            "rank {} expected the barrier's release from rank 0, got {}",
                            self.rank,
                            describe(got)
                        )))
                    }
                    None => self.pump(side, || format!("{what}: rank 0 to release the barrier"))?,
                }
            }
        };
        // The releases' and arrival's completions are taken during the
        // operation: rank 0 starts it as soon as its releases are posted.
        self.op = self.op.wrapping_add(1);
        Ok(decided)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_each_rank_numbers_its_peers_qps_in_rank_order() {
        assert_eq!(
            (0..4).filter(|p| *p != 2).map(|p| qp_of(2, p)).collect::<Vec<_>>(),
            [0, 1, 2]
        );
        assert_eq!(qp_of(0, 3), 2);
    }

    #[test]
    fn test_immediates_tell_kind_operation_and_step_apart() {
        let a = Imm::data(3).encode(7);
        assert_ne!(a, Imm::data(3).encode(8));
        assert_ne!(a, Imm::data(4).encode(7));
        assert_ne!(Imm::control(Kind::Go).encode(7), Imm::control(Kind::Stop).encode(7));
        assert_eq!(describe(a), "data of operation 7 step 3");
        // The operation number wraps within its 14 bits, never into the kind.
        assert_eq!(Imm::data(0).encode(0x4000) >> 30, 0);
    }
}
