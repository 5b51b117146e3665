//! Work request ids: what a completion says about the request it ends.
//!
//! A failed completion's opcode field is undefined, so the operation travels
//! in the id itself (the top byte); below it a sequence number, which runs
//! over several QPs split into the QP's index (its lane) and the QP's own
//! count. This module is the only place that packs or unpacks those bits.

/// Kinds of work request, named in the top byte of a [`WrId`].
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

const KINDS: [OpKind; 8] = [
    OpKind::Write,
    OpKind::Read,
    OpKind::Send,
    OpKind::WriteImm,
    OpKind::FetchAdd,
    OpKind::CompareSwap,
    OpKind::Recv,
    OpKind::Done,
];

impl OpKind {
    /// The raw wr_id of request `seq` of this kind.
    pub fn wr_id(self, seq: u64) -> u64 {
        WrId::new(self, seq).raw()
    }

    /// The raw wr_id of request `seq` of this kind on QP `lane`.
    pub fn wr_id_on_lane(self, lane: usize, seq: u64) -> u64 {
        WrId::on_lane(self, lane, seq).raw()
    }

    /// The operation's name in error messages.
    pub fn name(self) -> &'static str {
        match self {
            OpKind::Write => "WRITE",
            OpKind::Read => "READ",
            OpKind::Send => "SEND",
            OpKind::WriteImm => "WRITE_WITH_IMM",
            OpKind::FetchAdd => "FETCH_AND_ADD",
            OpKind::CompareSwap => "COMPARE_AND_SWAP",
            OpKind::Recv => "RECV",
            OpKind::Done => "SEND_WITH_IMM(done)",
        }
    }
}

/// A work request id: [`OpKind`] in bits 56..64, the sequence number in
/// bits 0..56; a lane's id has the lane in bits 40..56 and the lane's own
/// sequence number in bits 0..40.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WrId(u64);

const KIND_SHIFT: u32 = 56;
const SEQ_MASK: u64 = (1 << KIND_SHIFT) - 1;
const LANE_SHIFT: u32 = 40;
const LANE_SEQ_MASK: u64 = (1 << LANE_SHIFT) - 1;

impl WrId {
    /// Request `seq` (its low 56 bits) of `kind`.
    pub fn new(kind: OpKind, seq: u64) -> WrId {
        WrId(((kind as u64) << KIND_SHIFT) | (seq & SEQ_MASK))
    }

    /// Request `seq` (its low 40 bits) of `kind` on QP `lane` (below 65536).
    pub fn on_lane(kind: OpKind, lane: usize, seq: u64) -> WrId {
        WrId::new(kind, ((lane as u64) << LANE_SHIFT) | (seq & LANE_SEQ_MASK))
    }

    /// The id as it goes into a work request and comes back in a completion.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// The request's kind, if the id is one of ours.
    pub fn kind(self) -> Option<OpKind> {
        let byte = (self.0 >> KIND_SHIFT) as u8;
        KINDS.into_iter().find(|k| *k as u8 == byte)
    }

    /// Whether the request is of `kind`.
    pub fn is(self, kind: OpKind) -> bool {
        self.kind() == Some(kind)
    }

    /// The sequence number (a lane's id: lane and count together).
    pub fn seq(self) -> u64 {
        self.0 & SEQ_MASK
    }

    /// The lane (QP index) and the lane's own sequence number.
    pub fn lane(self) -> (usize, u64) {
        ((self.seq() >> LANE_SHIFT) as usize, self.seq() & LANE_SEQ_MASK)
    }

    /// The operation's name, or "work request" for an id that is not ours.
    pub fn name(self) -> &'static str {
        self.kind().map_or("work request", OpKind::name)
    }
}

impl From<u64> for WrId {
    fn from(raw: u64) -> WrId {
        WrId(raw)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_ids_carry_their_operation_and_sequence() {
        for kind in KINDS {
            let id = WrId::from(kind.wr_id(42));
            assert_eq!((id.kind(), id.seq(), id.name()), (Some(kind), 42, kind.name()));
        }
        assert_eq!(WrId::from(7).name(), "work request");
        assert_eq!(WrId::new(OpKind::Send, u64::MAX).seq(), SEQ_MASK);
    }

    #[test]
    fn lanes_round_trip() {
        for (lane, seq) in [(0, 0), (1, 1), (15, (1 << 40) - 1), (65535, 12345)] {
            let id = WrId::from(OpKind::Write.wr_id_on_lane(lane, seq));
            assert_eq!(id.lane(), (lane, seq));
            assert!(id.is(OpKind::Write) && !id.is(OpKind::Read));
        }
    }
}
