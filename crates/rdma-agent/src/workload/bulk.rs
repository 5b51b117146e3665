//! bulk-rdma: the client moves TOTAL bytes of the seeded pattern into the
//! server's TOTAL-byte buffer with RDMA WRITEs of CHUNK (`size`) bytes,
//! keeping `tx_depth` of them in flight, then sends the done message; the
//! server checks every byte against the pattern and names the first offset
//! that differs. Its TCP counterpart, with the same bytes and the same
//! measurements, is [`crate::tcp_session`].
//!
//! Both sides fill or allocate their TOTAL bytes in `prepare`, before the
//! clock starts, and the server verifies after it stops: elapsed time and CPU
//! cover the transfer alone, as for bulk-tcp. The server takes no part in a
//! WRITE, so it sleeps until the done message and has no timeline.

use std::time::Duration;

use agent_proto::v1::{Fault, Role, SideResult};

use super::{corrupt_byte, injects, pattern, post_done_recv, verdict, wait_for_done, OpKind, Workload};
use crate::cpu::NodeBusy;
use crate::metrics::{bandwidth, PeakTracker};
use crate::session::{SessionError, Side};
use crate::timeline::Timeline;
use crate::validate::{bulk_total, Limits, OwnCheck, ValidationError};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};
use crate::wr_id::WrId;

/// WRITEs in flight when `tx_depth` is 0.
const DEFAULT_TX_DEPTH: u64 = 128;
/// Least time between two progress events (each crosses SSH to labctl).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The bulk-rdma workload.
pub struct BulkRdma;

/// The chunk of a bulk transfer: `size`, at most the whole transfer.
pub fn chunk(params: &agent_proto::v1::WorkloadParams) -> u64 {
    params.size.max(1).min(bulk_total(params).max(1))
}

/// (offset, length) of chunk `i` of `total` bytes in `chunk`-byte pieces (the last may be short).
pub fn chunk_range(i: u64, chunk: u64, total: u64) -> (u64, u64) {
    let offset = i * chunk;
    (offset, chunk.min(total - offset))
}

/// Facts common to both bulk workloads.
pub fn bulk_facts(result: &mut SideResult, total: u64, chunk: u64, node_busy_s: Option<f64>) {
    result.facts.insert("total".into(), total.to_string());
    result.facts.insert("chunk".into(), chunk.to_string());
    result.facts.insert("chunks".into(), total.div_ceil(chunk).to_string());
    if let Some(busy) = node_busy_s {
        result.facts.insert("node_cpu_busy_s".into(), format!("{busy:.3}"));
    }
}

/// The server's check of the TOTAL bytes it received: piece by piece against
/// the pattern generated a word at a time (a large total is checked in
/// seconds, even on an emulated CPU), and byte by byte only to name the
/// first difference.
pub fn verify_total(params: &agent_proto::v1::WorkloadParams, buf: &[u8], transport: &str) -> Result<String, String> {
    const PIECE: usize = 1 << 16;
    let total = buf.len();
    let pat = pattern(params);
    let mut expected = vec![0u8; PIECE.min(total)];
    for (i, piece) in buf.chunks(PIECE).enumerate() {
        let want = &mut expected[..piece.len()];
        pat.fill(want, (i * PIECE) as u64);
        if piece != want {
            let m = pat.verify(buf, 0).expect_err("a piece differs");
            return Err(format!(
                "the {total} B received by {transport} differ from the pattern: {m}"
            ));
        }
    }
    Ok(format!(
        "all {total} B received by {transport} match the pattern of seed {}",
        params.seed
    ))
}

/// A bulk transfer's total (bulk-rdma and bulk-tcp) against the node's memory.
pub fn check_bulk_total(params: &agent_proto::v1::WorkloadParams, limits: &Limits) -> Result<(), ValidationError> {
    limits.check_bulk_total(bulk_total(params))
}

impl Workload for BulkRdma {
    fn name(&self) -> &'static str {
        "bulk-rdma"
    }

    fn own_check(&self) -> OwnCheck {
        check_bulk_total
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let total = bulk_total(&side.params) as usize;
        match side.role {
            Role::Server => {
                side.exposed = Some(side.link.add_buffer(total, Access::Remote)?);
                post_done_recv(side)
            }
            Role::Client => {
                let src = side.link.add_buffer(total, Access::Local)?;
                pattern(&side.params).fill(side.link.buffer_mut(src), 0);
                if injects(side, Fault::Corrupt) {
                    corrupt_byte(side, src, total / 2, "the client's source");
                }
                side.bufs = vec![src];
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let total = bulk_total(&side.params);
        let chunk = chunk(&side.params);
        let busy_start = NodeBusy::now();
        let busy = |start: Option<NodeBusy>| Some(NodeBusy::now()?.since(&start?));
        if side.role == Role::Server {
            // Nothing to do until the done message: sleep on the completion channel.
            side.set_passive(true);
            wait_for_done(side)?;
            let mut result = side.base_result();
            bulk_facts(&mut result, total, chunk, busy(busy_start));
            result.bytes = total;
            let exposed = side.exposed.expect("prepared");
            verdict(
                &mut result,
                verify_total(&side.params, side.link.buffer(exposed), "RDMA WRITE"),
            );
            return Ok(result);
        }
        if side.peer.len < total {
            return Err(SessionError::Protocol(format!(
                "the server's buffer is {} B, the transfer needs {total} B",
                side.peer.len
            )));
        }
        let src = side.bufs[0];
        let chunks = total.div_ceil(chunk);
        let depth = if side.params.tx_depth == 0 {
            DEFAULT_TX_DEPTH
        } else {
            u64::from(side.params.tx_depth)
        };
        let (peer_addr, rkey) = (side.peer.addr, side.peer.rkey);
        let mut timeline = Timeline::new();
        let mut peak = PeakTracker::new(Duration::from_millis(100));
        let (mut posted, mut completed, mut moved) = (0u64, 0u64, 0u64);
        let mut last_progress = side.elapsed();
        while completed < chunks {
            while posted < chunks && posted - completed < depth {
                let (offset, len) = chunk_range(posted, chunk, total);
                // A one-request chain per chunk: the provider copies the work
                // request when it is posted, so the chain may go right after.
                let mut wr = side.link.send_chain(&[SendWr {
                    wr_id: OpKind::Write.wr_id(posted),
                    op: SendOp::Write {
                        local: LocalSlice {
                            buf: src,
                            offset: offset as usize,
                            len: len as usize,
                        },
                        remote_addr: peer_addr + offset,
                        rkey,
                    },
                    signaled: true,
                    inline: false,
                }])?;
                side.link.post_send(&mut wr)?;
                posted += 1;
            }
            let c = side.next_completion("a WRITE completion")?;
            let (_, len) = chunk_range(WrId::from(c.wr_id).seq(), chunk, total);
            completed += 1;
            moved += len;
            peak.add(len);
            let now = side.elapsed();
            timeline.record(now.as_secs_f64(), moved);
            if now - last_progress >= PROGRESS_EVERY {
                last_progress = now;
                side.progress("run", moved, completed, "");
            }
        }
        side.send_done()?;
        let mut result = side.base_result();
        bulk_facts(&mut result, total, chunk, busy(busy_start));
        result.facts.insert("tx_depth".into(), depth.to_string());
        result.bytes = moved;
        result.ops = completed;
        result.bw = Some(bandwidth(moved, completed, side.elapsed(), peak.windows()));
        result.timeline = timeline.finish();
        // Only the server can check: the bytes are in its memory.
        result.checked = false;
        result.verify_detail = format!("WROTE {moved} B in {completed} x {chunk} B; the server checks them");
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::WorkloadParams;

    #[test]
    fn test_chunks_cover_the_total_with_a_short_last_one() {
        let total: u64 = 10 * 1024 + 100;
        let chunk = 1024;
        let n = total.div_ceil(chunk);
        assert_eq!(n, 11);
        let ranges: Vec<_> = (0..n).map(|i| chunk_range(i, chunk, total)).collect();
        assert_eq!(ranges[0], (0, 1024));
        assert_eq!(ranges[10], (10 * 1024, 100));
        assert_eq!(ranges.iter().map(|r| r.1).sum::<u64>(), total);
    }

    #[test]
    fn test_chunk_is_at_most_the_total() {
        let p = WorkloadParams {
            size: 1 << 20,
            total: 4096,
            ..Default::default()
        };
        assert_eq!(chunk(&p), 4096);
        let p = WorkloadParams {
            size: 256,
            iterations: 3,
            ..Default::default()
        };
        assert_eq!((chunk(&p), bulk_total(&p)), (256, 768));
    }

    #[test]
    fn test_verify_total_names_the_first_bad_offset() {
        let p = WorkloadParams {
            seed: 5,
            ..Default::default()
        };
        let mut buf = vec![0u8; 5000];
        pattern(&p).fill(&mut buf, 0);
        assert!(verify_total(&p, &buf, "TCP").unwrap().contains("all 5000 B"));
        buf[4097] ^= 1;
        let err = verify_total(&p, &buf, "TCP").unwrap_err();
        assert!(err.contains("offset 4097"), "{err}");
        // Past the first piece, and in a short last piece.
        let mut big = vec![0u8; 200_000];
        pattern(&p).fill(&mut big, 0);
        assert!(verify_total(&p, &big, "RDMA WRITE").is_ok());
        big[150_001] ^= 0x80;
        big[199_999] ^= 1;
        let err = verify_total(&p, &big, "RDMA WRITE").unwrap_err();
        assert!(err.contains("offset 150001") && err.contains("2 bytes differ"), "{err}");
    }
}
