//! send-recv: two-sided messages. Streaming mode: the client SENDs
//! `iterations` seeded messages through a ring of slots; the server verifies
//! each in arrival order and re-posts its receive. Ping-pong mode
//! (`ping_pong`): the server echoes every message, the client verifies the
//! echo and records the half round trip as latency.

use std::time::Instant;

use agent_proto::v1::{Fault, Role, SideResult};

use super::{corrupt_byte, injects, iterations, note_skip, pattern, size, verdict, OpKind, Workload};
use crate::session::{SessionError, Side};
use crate::verbs::{Access, LocalSlice, SendChain, SendOp, SendWr};
use crate::wr_id::WrId;

/// The send-recv workload.
pub struct SendRecv;

/// Ring slots (receives the server keeps posted; sends the client keeps in flight).
fn ring(side: &Side) -> usize {
    (iterations(&side.params).min(32) as usize).max(2)
}

impl Workload for SendRecv {
    fn name(&self) -> &'static str {
        "send-recv"
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = size(&side.params);
        let slots = ring(side);
        match side.role {
            Role::Server => {
                let rx = side.link.add_buffer(len * slots, Access::Local)?;
                let reply = side.link.add_buffer(len, Access::Local)?;
                side.bufs = vec![rx, reply];
                let slices: Vec<LocalSlice> = (0..slots)
                    .map(|s| LocalSlice {
                        buf: rx,
                        offset: s * len,
                        len,
                    })
                    .collect();
                let mut chain = side.link.recv_chain(&slices, OpKind::Recv.wr_id(0))?;
                side.link.post_recv_all(&mut chain)?;
                side.recvs = Some(chain);
                Ok(())
            }
            Role::Client => {
                let tx = side.link.add_buffer(len * slots, Access::Local)?;
                let rx = side.link.add_buffer(len, Access::Local)?;
                side.bufs = vec![tx, rx];
                if side.params.ping_pong {
                    let mut chain = side.link.recv_chain(
                        &[LocalSlice {
                            buf: rx,
                            offset: 0,
                            len,
                        }],
                        OpKind::Recv.wr_id(0),
                    )?;
                    // The first reply's receive must be in place before the first send.
                    side.link.post_recv_one(&mut chain, 0)?;
                    side.recvs = Some(chain);
                }
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        match side.role {
            Role::Server => serve(side),
            Role::Client if side.params.ping_pong => ping_pong(side),
            Role::Client => stream(side),
        }
    }
}

fn serve(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let p = pattern(&side.params);
    let (rx, reply) = (side.bufs[0], side.bufs[1]);
    let mut recvs = side.recvs.take().expect("prepared");
    let mut echo = side.link.send_chain(&[SendWr {
        wr_id: OpKind::Send.wr_id(0),
        op: SendOp::Send {
            local: LocalSlice {
                buf: reply,
                offset: 0,
                len,
            },
        },
        signaled: true,
        inline: len <= side.params.inline_size as usize,
    }])?;
    let mut received = 0u64;
    let mut mismatch = None;
    loop {
        let c = side.next_completion("messages and the done notification")?;
        if WrId::from(c.wr_id).is(OpKind::Send) {
            continue; // an echo went out
        }
        let slot = WrId::from(c.wr_id).seq() as usize;
        if Side::is_done(&c) {
            break;
        }
        let data = &side.link.buffer(rx)[slot * len..(slot + 1) * len];
        if mismatch.is_none() {
            if c.byte_len as usize != len {
                mismatch = Some(format!("message {received} has {} B, expected {len} B", c.byte_len));
            } else if let Err(m) = p.derive(received).verify(data, 0) {
                mismatch = Some(format!("message {received}: {m}"));
            }
        }
        if side.params.ping_pong {
            let copy = data.to_vec();
            side.link.buffer_mut(reply).copy_from_slice(&copy);
            echo.set_wr_id(0, OpKind::Send.wr_id(received));
            side.link.post_send(&mut echo)?;
        }
        side.link.post_recv_one(&mut recvs, slot)?;
        received += 1;
    }
    let mut result = side.base_result();
    result.bytes = received * len as u64;
    result.ops = received;
    let expected = iterations(&side.params);
    verdict(
        &mut result,
        match mismatch {
            Some(m) => Err(m),
            None if received != expected => Err(format!("received {received} messages, expected {expected}")),
            None => Ok(format!("{received} messages of {len} B received in order and verified")),
        },
    );
    Ok(result)
}

fn slot_chain(side: &Side, buf: crate::verbs::BufId, slot: usize, len: usize) -> Result<SendChain, SessionError> {
    Ok(side.link.send_chain(&[SendWr {
        wr_id: OpKind::Send.wr_id(0),
        op: SendOp::Send {
            local: LocalSlice {
                buf,
                offset: slot * len,
                len,
            },
        },
        signaled: true,
        inline: len <= side.params.inline_size as usize,
    }])?)
}

fn stream(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let iters = iterations(&side.params);
    let slots = ring(side);
    let p = pattern(&side.params);
    let tx = side.bufs[0];
    let mut chains = (0..slots)
        .map(|s| slot_chain(side, tx, s, len))
        .collect::<Result<Vec<_>, _>>()?;
    let mut in_flight = 0usize;
    let (skip, corrupt) = (injects(side, Fault::Skip), injects(side, Fault::Corrupt));
    for i in 0..iters {
        if skip && i == 0 {
            note_skip(side, "message 0 is never sent");
            continue;
        }
        if in_flight == slots {
            side.next_completion("a SEND completion")?;
            in_flight -= 1;
        }
        let slot = (i % slots as u64) as usize;
        p.derive(i)
            .fill(&mut side.link.buffer_mut(tx)[slot * len..(slot + 1) * len], 0);
        if corrupt && i == 0 {
            corrupt_byte(side, tx, slot * len + len / 2, "message 0");
        }
        chains[slot].set_wr_id(0, OpKind::Send.wr_id(i));
        side.link.post_send(&mut chains[slot])?;
        in_flight += 1;
        if i % 64 == 0 {
            side.progress("run", len as u64 * (i + 1), i + 1, "");
        }
    }
    while in_flight > 0 {
        side.next_completion("the last SEND completions")?;
        in_flight -= 1;
    }
    let elapsed = side.elapsed();
    side.send_done()?;
    let mut result = side.base_result();
    result.bytes = len as u64 * iters;
    result.ops = iters;
    result.elapsed_s = elapsed.as_secs_f64();
    result.bw = Some(crate::metrics::bandwidth(result.bytes, iters, elapsed, &[]));
    result.verify_detail = "the server verifies every message".into();
    Ok(result)
}

fn ping_pong(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let iters = iterations(&side.params);
    let p = pattern(&side.params);
    let (tx, rx) = (side.bufs[0], side.bufs[1]);
    let mut recvs = side.recvs.take().expect("prepared");
    let mut send = slot_chain(side, tx, 0, len)?;
    let mut samples = Vec::with_capacity(iters as usize);
    let mut mismatch = None;
    let (skip, corrupt) = (injects(side, Fault::Skip), injects(side, Fault::Corrupt));
    for i in 0..iters {
        if skip && i == 0 {
            note_skip(side, "message 0 is never sent");
            continue;
        }
        p.derive(i).fill(&mut side.link.buffer_mut(tx)[..len], 0);
        if corrupt && i == 0 {
            corrupt_byte(side, tx, len / 2, "message 0");
        }
        send.set_wr_id(0, OpKind::Send.wr_id(i));
        let t0 = Instant::now();
        side.link.post_send(&mut send)?;
        let (mut sent, mut echoed) = (false, false);
        while !(sent && echoed) {
            let c = side.next_completion("the ping-pong echo")?;
            if WrId::from(c.wr_id).is(OpKind::Send) {
                sent = true;
            } else {
                echoed = true;
            }
        }
        samples.push(t0.elapsed().as_secs_f64() * 1e6 / 2.0);
        if mismatch.is_none() {
            if let Err(m) = p.derive(i).verify(side.link.buffer(rx), 0) {
                mismatch = Some(format!("echo {i}: {m}"));
            }
        }
        if i + 1 < iters {
            side.link.post_recv_one(&mut recvs, 0)?;
        }
        if i % 16 == 0 {
            side.progress("run", len as u64 * (i + 1), i + 1, "");
        }
    }
    let elapsed = side.elapsed();
    side.send_done()?;
    let mut result = side.base_result();
    result.bytes = 2 * len as u64 * iters;
    result.ops = 2 * iters;
    result.elapsed_s = elapsed.as_secs_f64();
    result.lat = Some(crate::metrics::latency(&mut samples));
    verdict(
        &mut result,
        mismatch.map_or_else(
            || Ok(format!("{iters} echoes of {len} B verified (latency = RTT/2)")),
            Err,
        ),
    );
    Ok(result)
}
