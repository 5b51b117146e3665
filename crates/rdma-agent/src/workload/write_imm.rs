//! write-imm: the client WRITEs batch `b` of the payload with immediate `b`
//! into region `b` of the server's buffer, then sends one zero-length
//! WRITE_WITH_IMM (immediate = batches) as a pure notification. The server
//! reports the immediates in arrival order and verifies every region.

use agent_proto::v1::{Fault, Role, SideResult};

use super::{corrupt_byte, injects, note_skip, pattern, size, verdict, OpKind, Workload};
use crate::session::{SessionError, Side};
use crate::validate::{check_footprint, OwnCheck};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};

/// The write-imm workload.
pub struct WriteImm;

/// Batches when params.batches is 0.
const DEFAULT_BATCHES: u32 = 4;

fn batches(side: &Side) -> u32 {
    batch_count(&side.params)
}

/// Batches of a run: `batches`, or [`DEFAULT_BATCHES`] when 0.
pub fn batch_count(params: &agent_proto::v1::WorkloadParams) -> u32 {
    if params.batches == 0 {
        DEFAULT_BATCHES
    } else {
        params.batches
    }
}

impl Workload for WriteImm {
    fn name(&self) -> &'static str {
        "write-imm"
    }

    fn own_check(&self) -> OwnCheck {
        |params, limits| {
            let batches = u64::from(batch_count(params));
            check_footprint(
                params,
                limits,
                batches,
                &format!("write-imm's server holds all {batches} batches"),
            )
        }
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = size(&side.params) * batches(side) as usize;
        match side.role {
            Role::Server => {
                side.exposed = Some(side.link.add_buffer(len, Access::Remote)?);
                // WRITE_WITH_IMM consumes a receive but places no data in it:
                // zero-length receives, one per batch + notification + done.
                let ctrl = side.link.add_buffer(8, Access::Local)?;
                let empty = LocalSlice {
                    buf: ctrl,
                    offset: 0,
                    len: 0,
                };
                let mut chain = side
                    .link
                    .recv_chain(&vec![empty; batches(side) as usize + 2], OpKind::Recv.wr_id(0))?;
                side.link.post_recv_all(&mut chain)?;
                side.recvs = Some(chain);
                Ok(())
            }
            Role::Client => {
                side.bufs = vec![side.link.add_buffer(len, Access::Local)?];
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let len = size(&side.params);
        let n = batches(side);
        let p = pattern(&side.params);
        if side.role == Role::Server {
            let mut immediates = Vec::with_capacity(n as usize + 1);
            loop {
                let c = side.next_completion("WRITE_WITH_IMM batches and the done notification")?;
                if Side::is_done(&c) {
                    break;
                }
                if c.has_imm {
                    immediates.push(c.imm);
                }
            }
            let buf = side.exposed.expect("prepared");
            let mut problems = Vec::new();
            let expected: Vec<u32> = (0..=n).collect();
            if immediates != expected {
                problems.push(format!("immediates {immediates:?}, expected {expected:?}"));
            }
            for b in 0..n as usize {
                let region = &side.link.buffer(buf)[b * len..(b + 1) * len];
                if let Err(m) = p.derive(b as u64).verify(region, 0) {
                    problems.push(format!("batch {b} region: {m}"));
                }
            }
            let mut result = side.base_result();
            result.immediates = immediates;
            result.bytes = len as u64 * u64::from(n);
            result.ops = u64::from(n) + 1;
            verdict(
                &mut result,
                if problems.is_empty() {
                    Ok(format!(
                        "{n} batches of {len} B with immediates 0..{n} in order, then the zero-length notification {n}"
                    ))
                } else {
                    Err(problems.join("; "))
                },
            );
            return Ok(result);
        }
        if side.peer.len < len as u64 * u64::from(n) {
            return Err(SessionError::Protocol(format!(
                "server buffer is {} B, need {} B",
                side.peer.len,
                len as u64 * u64::from(n)
            )));
        }
        let src = side.bufs[0];
        for b in 0..n as usize {
            p.derive(b as u64)
                .fill(&mut side.link.buffer_mut(src)[b * len..(b + 1) * len], 0);
        }
        if injects(side, Fault::Corrupt) {
            corrupt_byte(side, src, len / 2, "batch 0's source");
        }
        let skip = injects(side, Fault::Skip);
        let mut sent = Vec::with_capacity(n as usize + 1);
        for b in 0..=n {
            if skip && b == 0 {
                note_skip(side, "batch 0 is never posted");
                continue;
            }
            // The last one carries no data: a pure notification.
            let slice_len = if b < n { len } else { 0 };
            let offset = (b as usize).min(n as usize - 1) * len;
            let mut chain = side.link.send_chain(&[SendWr {
                wr_id: OpKind::WriteImm.wr_id(u64::from(b)),
                op: SendOp::WriteImm {
                    local: LocalSlice {
                        buf: src,
                        offset,
                        len: slice_len,
                    },
                    remote_addr: side.peer.addr + offset as u64,
                    rkey: side.peer.rkey,
                    imm: b,
                },
                signaled: true,
                inline: slice_len <= side.params.inline_size as usize,
            }])?;
            side.link.post_send(&mut chain)?;
            side.next_completion("the WRITE_WITH_IMM completion")?;
            sent.push(b);
            side.progress(
                "run",
                len as u64 * u64::from(b.min(n - 1) + 1),
                u64::from(b) + 1,
                format!("batch {b}"),
            );
        }
        side.send_done()?;
        let elapsed = side.elapsed();
        let mut result = side.base_result();
        result.immediates = sent;
        result.bytes = len as u64 * u64::from(n);
        result.ops = u64::from(n) + 1;
        result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
        result.verify_detail = "the server verifies data and immediates".into();
        Ok(result)
    }
}
