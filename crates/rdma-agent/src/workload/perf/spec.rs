//! What every part of the perf family shares: the operation a workload
//! measures ([`PerfOp`], [`Perf`]), the work request it posts, and the run's
//! shape as both sides read it from the parameters (sizes, depth, post list,
//! moderation, receive ring, slots). No loop lives here.

use agent_proto::v1::WorkloadParams;

use super::slots::{self, Slots};
use crate::plan::Plan;
use crate::session::Side;
use crate::verbs::{LocalSlice, SendOp, SendWr};
use crate::workload::OpKind;

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
pub fn recv_ring(params: &WorkloadParams, message_len: usize) -> usize {
    let wanted = (2 * crate::workload::default_queue_depth(params) as usize).clamp(64, 1024);
    wanted.min(RECV_RING_BYTES / message_len.max(1)).max(8)
}

/// Receives the server keeps posted on each QP that carries SENDs
/// ([`recv_ring`], the byte budget shared by the QPs); one (the done
/// message's, on the first QP) for the one-sided workloads.
pub(super) fn recv_slots_per_qp(side: &Side, op: PerfOp) -> usize {
    if op == PerfOp::Send {
        recv_ring(&side.params, buffer_len(side, op) * side.link.num_qps())
    } else {
        1
    }
}

/// The QPs a server posts receives on: every QP for SENDs, else the first.
pub(super) fn receiving_qps(side: &Side, op: PerfOp) -> usize {
    if op == PerfOp::Send {
        side.link.num_qps()
    } else {
        1
    }
}

/// Bytes of one server receive: a message, or at least the done message's count.
pub(super) fn recv_slot_len(message_len: usize) -> usize {
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

pub(super) fn sizes(side: &Side, op: PerfOp) -> Vec<u64> {
    plan(side, op).sizes
}

pub(super) fn buffer_len(side: &Side, op: PerfOp) -> usize {
    plan(side, op).largest() as usize
}

pub(super) fn tx_depth(side: &Side) -> usize {
    Plan::of(&side.params, u64::MAX).tx_depth
}

pub(super) fn post_list(side: &Side) -> usize {
    (side.params.post_list.max(1) as usize).min(tx_depth(side))
}

pub(super) fn cq_moderation(side: &Side) -> usize {
    let m = if side.params.cq_moderation == 0 {
        16
    } else {
        side.params.cq_moderation as usize
    };
    m.min(tx_depth(side)).max(1)
}

/// Iterations for one size, or None when the run is timed.
pub(super) fn planned_iterations(side: &Side) -> Option<u64> {
    Plan::of(&side.params, u64::MAX).iterations()
}

impl Perf {
    /// write-lat: a WRITE ping-pong, as ib_write_lat.
    pub(super) fn write_ping_pong(&self) -> bool {
        self.op == PerfOp::Write && self.latency
    }

    /// write-bw and read-bw/read-lat: every operation has a slot of its own
    /// ([`Slots`]), so that each one is checked.
    pub(super) fn slotted(&self) -> bool {
        match self.op {
            PerfOp::Write => !self.latency,
            PerfOp::Read => true,
            PerfOp::Send | PerfOp::Atomic => false,
        }
    }

    /// The slots of one size: one per request in flight on each QP for the
    /// bandwidth runs, one for read-lat (a single outstanding READ).
    pub(super) fn slots(&self, side: &Side, size: usize) -> Slots {
        if self.latency {
            Slots::of(size, 1, 1, 1)
        } else {
            Slots::of(size, side.link.num_qps(), tx_depth(side), post_list(side))
        }
    }

    /// Bytes every size's slots fit in (the start of what follows them).
    pub(super) fn slots_len(&self, side: &Side) -> usize {
        sizes(side, self.op)
            .iter()
            .map(|&s| self.slots(side, s as usize).bytes())
            .max()
            .unwrap_or(0)
    }

    /// write-bw: where the client's per-QP WRITE counts go in both sides'
    /// buffers, after every size's slots.
    pub(super) fn counts_offset(&self, side: &Side) -> usize {
        slots::counts_offset(self.slots_len(side))
    }

    /// A work request of this workload's operation from `local`, at the
    /// peer's buffer's start.
    pub(super) fn op_wr(&self, side: &Side, local: LocalSlice, wr_id: u64, signaled: bool) -> SendWr {
        self.op_wr_at(side, local, 0, wr_id, signaled)
    }

    /// As [`Perf::op_wr`], `remote_offset` bytes into the peer's buffer.
    pub(super) fn op_wr_at(
        &self,
        side: &Side,
        local: LocalSlice,
        remote_offset: usize,
        wr_id: u64,
        signaled: bool,
    ) -> SendWr {
        let (addr, rkey) = (side.peer.addr + remote_offset as u64, side.peer.rkey);
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

    pub(super) fn kind(&self) -> OpKind {
        match self.op {
            PerfOp::Write => OpKind::Write,
            PerfOp::Read => OpKind::Read,
            PerfOp::Send => OpKind::Send,
            PerfOp::Atomic => OpKind::FetchAdd,
        }
    }
}
