//! The verbs workloads: the [`Workload`] trait, one module per workload
//! family, and helpers they share. A workload's facts (name, defaults,
//! faults, options) are its entry in the workload catalogue; its
//! implementation here owns its own request checks
//! ([`Workload::own_check`]: the memory it registers) and its queue depths.
//! The dispatch table by name, across verbs, libfabric and TCP, is
//! [`crate::registry`]; this module must not know the other transports.
//!
//! A workload is called twice per side: [`Workload::prepare`] with the QP in
//! INIT (register buffers, post receives; the server sets `side.exposed`, the
//! buffer whose {addr, rkey, length} goes to the client), then
//! [`Workload::run`] once connected (the client has `side.peer`). Clients end
//! their run with [`Side::send_done`]; servers run until they see it.

pub mod atomic;
pub mod bulk;
pub mod collective;
pub mod lanes;
pub mod perf;
pub mod read;
pub mod send_recv;
pub mod write_imm;
pub mod write_read;
// The patterns of docs/labs: registration caching, a parameter server, an inference ring.
pub mod inference_ring;
pub mod mr_cache;
pub mod param_server;

use agent_proto::v1::{Role, WorkloadParams};

use crate::pattern::Pattern;
use crate::session::{SessionError, Side};
use crate::validate::{no_own_checks, OwnCheck};

pub use crate::wr_id::OpKind;

/// One kind of run, both of its sides.
pub trait Workload: Send + Sync {
    /// The registry name ("write-read").
    fn name(&self) -> &'static str;
    /// Its own request checks, after the shared ones and the catalogue
    /// entry's (faults, several QPs): the memory it registers, its size
    /// bounds, field combinations it cannot run.
    fn own_check(&self) -> OwnCheck {
        no_own_checks
    }
    /// Sets up buffers and receives (the first QP in INIT; with rdma_cm the
    /// other QPs of a multi-QP run are not created in the device's eyes yet).
    fn prepare(&self, side: &mut Side) -> Result<(), SessionError>;
    /// QP `qp` (1.. of a multi-QP run) has reached INIT, after
    /// [`Workload::prepare`] and before the peer can send on it: the moment to
    /// post its receives.
    fn qp_in_init(&self, _side: &mut Side, _qp: usize) -> Result<(), SessionError> {
        Ok(())
    }
    /// QPs of a run (all on one CQ): the run's `num_qps`, at least one.
    fn num_qps(&self, params: &WorkloadParams) -> u32 {
        params.num_qps.max(1)
    }
    /// Runs this side to the end and reports.
    fn run(&self, side: &mut Side) -> Result<agent_proto::v1::SideResult, SessionError>;
    /// Send queue depth for a run.
    fn send_queue_depth(&self, params: &WorkloadParams) -> u32 {
        default_queue_depth(params)
    }
    /// Receive queue depth for a run.
    fn recv_queue_depth(&self, params: &WorkloadParams) -> u32 {
        self.send_queue_depth(params)
    }
    /// Whether `role`'s waits lie inside what the run measures: a latency
    /// client's (its wait is the figure), and a ping-pong server's (its
    /// turnaround is half of every round trip). With completion `auto` such
    /// a side polls on every device; the others sleep on a software one.
    fn waits_are_measured(&self, _role: Role) -> bool {
        false
    }
}

/// The queue depth most workloads use: `tx_depth` (128 when unset), at least
/// 16, and room for write-imm's receive per batch plus its notification and
/// done.
pub fn default_queue_depth(params: &WorkloadParams) -> u32 {
    let tx = if params.tx_depth == 0 { 128 } else { params.tx_depth };
    tx.max(params.batches + 4).max(16)
}

/// Iterations of a functional workload (0 → 1: functional runs are counted, not timed).
pub fn iterations(params: &WorkloadParams) -> u64 {
    params.iterations.max(1)
}

/// Message size as usize.
pub fn size(params: &WorkloadParams) -> usize {
    params.size.max(1) as usize
}

/// The payload pattern of a run.
pub fn pattern(params: &WorkloadParams) -> Pattern {
    Pattern::new(params.seed)
}

/// Server side common to one-sided workloads: wait for the done message,
/// ignoring nothing else (any other completion is a protocol error).
pub fn wait_for_done(side: &mut Side) -> Result<(), SessionError> {
    let c = side.next_completion("the client's done notification")?;
    if Side::is_done(&c) {
        return Ok(());
    }
    Err(SessionError::Protocol(format!(
        "unexpected completion while waiting for done: opcode {} imm {:?}",
        c.opcode,
        c.has_imm.then_some(c.imm)
    )))
}

/// Posts one zero-length receive for the done message.
pub fn post_done_recv(side: &mut Side) -> Result<(), SessionError> {
    let ctrl = side.link.add_buffer(8, crate::verbs::Access::Local)?;
    let mut chain = side.link.recv_chain(
        &[crate::verbs::LocalSlice {
            buf: ctrl,
            offset: 0,
            len: 0,
        }],
        OpKind::Recv.wr_id(u64::MAX >> 8),
    )?;
    side.link.post_recv_one(&mut chain, 0)?;
    Ok(())
}

/// The 8-byte word at the start of `buf`, in host order (as atomics leave it).
pub fn read_word(side: &Side, buf: crate::verbs::BufId) -> u64 {
    u64::from_ne_bytes(side.link.buffer(buf)[..8].try_into().expect("8 bytes"))
}

/// Client: READs the server's 8-byte word (the peer's exposed buffer) into
/// the start of `local`, waits for that READ, and returns the word.
pub fn read_peer_word(side: &mut Side, local: crate::verbs::BufId, what: &str) -> Result<u64, SessionError> {
    let mut read = side.link.send_chain(&[crate::verbs::SendWr {
        wr_id: OpKind::Read.wr_id(0),
        op: crate::verbs::SendOp::Read {
            local: crate::verbs::LocalSlice {
                buf: local,
                offset: 0,
                len: 8,
            },
            remote_addr: side.peer.addr,
            rkey: side.peer.rkey,
        },
        signaled: true,
        inline: false,
    }])?;
    side.link.post_send(&mut read)?;
    while side.next_completion(what)?.wr_id != OpKind::Read.wr_id(0) {}
    Ok(read_word(side, local))
}

/// Whether this run injects `fault` (a negative test, see [`agent_proto::v1::Fault`]).
pub fn injects(side: &Side, fault: agent_proto::v1::Fault) -> bool {
    side.params.fault() == fault
}

/// A FAULT_CORRUPT run: flips byte `offset` of `buf` (the data's source,
/// after it was filled) and says so in the result's facts.
pub fn corrupt_byte(side: &mut Side, buf: crate::verbs::BufId, offset: usize, whose: &str) {
    side.link.buffer_mut(buf)[offset] ^= 0xFF;
    side.facts
        .insert("fault".into(), format!("corrupt: byte {offset} of {whose} flipped"));
}

/// A FAULT_SKIP run: records what was left out.
pub fn note_skip(side: &mut Side, what: impl Into<String>) {
    side.facts.insert("fault".into(), format!("skip: {}", what.into()));
}

/// Result fields for a verification outcome.
pub fn verdict(result: &mut agent_proto::v1::SideResult, outcome: Result<String, String>) {
    result.checked = true;
    match outcome {
        Ok(detail) => {
            result.verified = true;
            result.verify_detail = detail;
        }
        Err(detail) => {
            result.verified = false;
            result.verify_detail = detail;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_depth_fits_write_imm_batches() {
        let p = WorkloadParams {
            batches: 200,
            ..Default::default()
        };
        assert!(default_queue_depth(&p) >= 204);
        assert_eq!(default_queue_depth(&WorkloadParams::default()), 128);
        // inference-ring's depth follows its ring, not its batch count.
        let ring = WorkloadParams {
            workload: "inference-ring".into(),
            batches: 100_000,
            tx_depth: 64,
            ..Default::default()
        };
        assert_eq!(inference_ring::InferenceRing.send_queue_depth(&ring), 130);
    }
}
