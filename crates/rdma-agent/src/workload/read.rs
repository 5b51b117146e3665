//! read: the server fills its buffer with the seeded pattern; the client
//! READs it and verifies; the server checks its buffer was left untouched.

use agent_proto::v1::{Fault, Role, SideResult};

use super::{
    corrupt_byte, injects, iterations, pattern, post_done_recv, size, verdict, wait_for_done, OpKind, Workload,
};
use crate::session::{SessionError, Side};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};

/// The read workload.
pub struct Read;

impl Workload for Read {
    fn name(&self) -> &'static str {
        "read"
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = size(&side.params);
        match side.role {
            Role::Server => {
                let buf = side.link.add_buffer(len, Access::Remote)?;
                pattern(&side.params).fill(side.link.buffer_mut(buf), 0);
                if injects(side, Fault::Corrupt) {
                    corrupt_byte(side, buf, len / 2, "the server's buffer (the READs' source)");
                }
                side.exposed = Some(buf);
                post_done_recv(side)
            }
            Role::Client => {
                side.bufs = vec![side.link.add_buffer(len, Access::Local)?];
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let len = size(&side.params);
        let p = pattern(&side.params);
        if side.role == Role::Server {
            wait_for_done(side)?;
            let buf = side.exposed.expect("prepared");
            let mut result = side.base_result();
            let outcome = p
                .verify(side.link.buffer(buf), 0)
                .map(|()| format!("served READs of {len} B; buffer unchanged"))
                .map_err(|m| format!("server buffer changed during a read-only run: {m}"));
            verdict(&mut result, outcome);
            return Ok(result);
        }
        if side.peer.len < len as u64 {
            return Err(SessionError::Protocol(format!(
                "server buffer is {} B, need {len} B",
                side.peer.len
            )));
        }
        let dst = side.bufs[0];
        let iters = iterations(&side.params);
        let mut read = side.link.send_chain(&[SendWr {
            wr_id: OpKind::Read.wr_id(0),
            op: SendOp::Read {
                local: LocalSlice {
                    buf: dst,
                    offset: 0,
                    len,
                },
                remote_addr: side.peer.addr,
                rkey: side.peer.rkey,
            },
            signaled: true,
            inline: false,
        }])?;
        let mut mismatch = None;
        for i in 0..iters {
            side.link.buffer_mut(dst).fill(0);
            read.set_wr_id(0, OpKind::Read.wr_id(i));
            side.link.post_send(&mut read)?;
            side.next_completion("the READ completion")?;
            if mismatch.is_none() {
                if let Err(m) = p.verify(side.link.buffer(dst), 0) {
                    mismatch = Some(format!("READ {i} differs from the server's pattern: {m}"));
                }
            }
            side.progress("run", len as u64 * (i + 1), i + 1, "");
        }
        side.send_done()?;
        let elapsed = side.elapsed();
        let mut result = side.base_result();
        result.bytes = len as u64 * iters;
        result.ops = iters;
        result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
        verdict(
            &mut result,
            mismatch.map_or_else(
                || Ok(format!("{iters} x READ {len} B: all bytes match the server's pattern")),
                Err,
            ),
        );
        Ok(result)
    }
}
