//! write-read: the client WRITEs a seeded payload into the server's buffer
//! (learned from the capability blob), READs it back into a separate buffer
//! and compares; the server compares its own buffer after the done message.

use agent_proto::v1::{Fault, Role, SideResult};

use super::{
    corrupt_byte, injects, iterations, pattern, post_done_recv, size, verdict, wait_for_done, OpKind, Workload,
};
use crate::session::{SessionError, Side};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};

/// The write-read workload.
pub struct WriteRead;

impl Workload for WriteRead {
    fn name(&self) -> &'static str {
        "write-read"
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = size(&side.params);
        match side.role {
            Role::Server => {
                side.exposed = Some(side.link.add_buffer(len, Access::Remote)?);
                post_done_recv(side)
            }
            Role::Client => {
                let src = side.link.add_buffer(len, Access::Local)?;
                let dst = side.link.add_buffer(len, Access::Local)?;
                side.bufs = vec![src, dst];
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let len = size(&side.params);
        let iters = iterations(&side.params);
        let last = pattern(&side.params).derive(iters - 1);
        if side.role == Role::Server {
            wait_for_done(side)?;
            let exposed = side.exposed.expect("prepared");
            let mut result = side.base_result();
            let outcome = last
                .verify(side.link.buffer(exposed), 0)
                .map(|()| format!("server MR ({len} B) holds the client's last payload"))
                .map_err(|m| format!("server MR differs from iteration {}: {m}", iters - 1));
            verdict(&mut result, outcome);
            return Ok(result);
        }
        if side.peer.len < len as u64 {
            return Err(SessionError::Protocol(format!(
                "server buffer is {} B, the run needs {len} B",
                side.peer.len
            )));
        }
        let (src, dst) = (side.bufs[0], side.bufs[1]);
        let whole = |buf| LocalSlice { buf, offset: 0, len };
        let mut write = side.link.send_chain(&[SendWr {
            wr_id: OpKind::Write.wr_id(0),
            op: SendOp::Write {
                local: whole(src),
                remote_addr: side.peer.addr,
                rkey: side.peer.rkey,
            },
            signaled: true,
            inline: len <= side.params.inline_size as usize,
        }])?;
        let mut read = side.link.send_chain(&[SendWr {
            wr_id: OpKind::Read.wr_id(0),
            op: SendOp::Read {
                local: whole(dst),
                remote_addr: side.peer.addr,
                rkey: side.peer.rkey,
            },
            signaled: true,
            inline: false,
        }])?;
        let mut mismatch = None;
        for i in 0..iters {
            let p = pattern(&side.params).derive(i);
            p.fill(side.link.buffer_mut(src), 0);
            if i + 1 == iters && injects(side, Fault::Corrupt) {
                corrupt_byte(side, src, len / 2, "the last WRITE's source");
            }
            side.link.buffer_mut(dst).fill(0);
            write.set_wr_id(0, OpKind::Write.wr_id(i));
            side.link.post_send(&mut write)?;
            side.next_completion("the WRITE completion")?;
            read.set_wr_id(0, OpKind::Read.wr_id(i));
            side.link.post_send(&mut read)?;
            side.next_completion("the READ completion")?;
            if mismatch.is_none() {
                if let Err(m) = p.verify(side.link.buffer(dst), 0) {
                    mismatch = Some(format!("read-back of iteration {i} differs: {m}"));
                }
            }
            side.progress("run", 2 * len as u64 * (i + 1), 2 * (i + 1), "");
        }
        side.send_done()?;
        let elapsed = side.elapsed();
        let mut result = side.base_result();
        result.bytes = 2 * len as u64 * iters;
        result.ops = 2 * iters;
        result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
        let outcome = match mismatch {
            None => Ok(format!("{iters} x WRITE {len} B then READ back: all bytes match")),
            Some(m) => Err(m),
        };
        verdict(&mut result, outcome);
        Ok(result)
    }
}
