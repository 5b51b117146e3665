//! The server of send-bw/send-lat, of the one-sided runs (write-bw,
//! read-bw/lat, atomic-bw/lat) and its verdict after the client's done:
//! messages counted and checked as they arrive, write-bw's slots and
//! counts ([`super::slots::check_target`]), the atomic word, the READs'
//! source unchanged. write-lat's echo server is in [`super::lat`].

use agent_proto::v1::SideResult;

use super::slots;
use super::spec::{buffer_len, recv_slot_len, recv_slots_per_qp, sizes, Perf, PerfOp};
use crate::session::{SessionError, Side};
use crate::verbs::{LocalSlice, SendOp, SendWr};
use crate::workload::{pattern, read_word, verdict, OpKind};
use crate::wr_id::WrId;

impl Perf {
    pub(super) fn serve(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        if self.write_ping_pong() {
            return self.serve_write_ping_pong(side);
        }
        if self.op != PerfOp::Send {
            // One-sided (write-bw, read-bw/lat, atomic-bw/lat; write-lat's
            // echo returned above): the server does no data-path work and only
            // waits for the done message, so it sleeps on the completion
            // channel (perftest's server sleeps on its socket).
            side.set_passive(true);
            let wait = if side.event_mode() { "event" } else { "poll" };
            side.facts.insert("server_wait".into(), wait.into());
        }
        let slot_len = recv_slot_len(buffer_len(side, self.op));
        let per_qp = recv_slots_per_qp(side, self.op);
        let rx = side.bufs[0];
        let mut recvs = side.recvs.take().expect("prepared");
        let mut echo = if self.op == PerfOp::Send && self.latency {
            Some(side.link.send_chain(&[SendWr {
                wr_id: OpKind::Send.wr_id(0),
                op: SendOp::Send {
                    local: LocalSlice {
                        buf: side.bufs[1],
                        offset: 0,
                        len: 0,
                    },
                },
                signaled: true,
                inline: false,
            }])?)
        } else {
            None
        };
        let mut echo_chains = std::collections::HashMap::new();
        let mut received = 0u64;
        let mut problem = None;
        let client_count;
        loop {
            let c = side.next_completion("messages and the done notification")?;
            if WrId::from(c.wr_id).is(OpKind::Send) {
                continue;
            }
            let slot = WrId::from(c.wr_id).seq() as usize;
            if Side::is_done(&c) {
                client_count = Side::done_count(&c, &side.link.buffer(rx)[slot * slot_len..]);
                break;
            }
            received += 1;
            let n = c.byte_len as usize;
            if problem.is_none() && self.op == PerfOp::Send {
                if let Err(m) =
                    pattern(&side.params).verify(&side.link.buffer(rx)[slot * slot_len..slot * slot_len + n], 0)
                {
                    problem = Some(format!("message {received} ({n} B): {m}"));
                }
            }
            if echo.is_some() {
                // Echo with the size just received (sweeps change it); chains are cached per size.
                if let std::collections::hash_map::Entry::Vacant(slot) = echo_chains.entry(n) {
                    slot.insert(side.link.send_chain(&[SendWr {
                        wr_id: OpKind::Send.wr_id(0),
                        op: SendOp::Send {
                            local: LocalSlice {
                                buf: side.bufs[1],
                                offset: 0,
                                len: n,
                            },
                        },
                        signaled: true,
                        inline: n <= side.params.inline_size as usize,
                    }])?);
                }
                let data = side.link.buffer(rx)[slot * slot_len..slot * slot_len + n].to_vec();
                side.link.buffer_mut(side.bufs[1])[..n].copy_from_slice(&data);
                let chain = echo_chains.get_mut(&n).expect("inserted");
                side.link.post_send(chain)?;
            }
            side.link.post_recv_one_on(slot / per_qp, &mut recvs, slot)?;
        }
        echo.take();
        let exposed = side.exposed.expect("prepared");
        // The word atomics counted in (the exposed buffer of an atomic run is 8 bytes).
        let atomic_word = (self.op == PerfOp::Atomic).then(|| read_word(side, exposed));
        let outcome = match self.op {
            PerfOp::Write => self.check_slots(side),
            PerfOp::Read => pattern(&side.params)
                .verify(side.link.buffer(exposed), 0)
                .map(|()| "served READs; buffer unchanged".to_string())
                .map_err(|m| format!("server buffer changed: {m}")),
            PerfOp::Atomic => {
                let word = atomic_word.unwrap_or_default();
                match client_count {
                    Some(n) if n == word => Ok(format!(
                        "the word counted {word} fetch-and-adds, as many as the client did"
                    )),
                    Some(n) => Err(format!("the word counted {word} fetch-and-adds, the client did {n}")),
                    None => Err("the client's done message carried no operation count".into()),
                }
            }
            PerfOp::Send => match (problem, client_count) {
                (Some(m), _) => Err(m),
                (None, Some(n)) if n == received => {
                    Ok(format!("{received} messages verified, as many as the client sent"))
                }
                (None, Some(n)) => Err(format!("received {received} messages, the client sent {n}")),
                (None, None) => Err("the client's done message carried no message count".into()),
            },
        };
        let mut result = side.base_result();
        result.ops = received;
        result.atomic_final = atomic_word.unwrap_or_default();
        verdict(&mut result, outcome);
        Ok(result)
    }

    /// write-bw: the last size's slots against the counts the client
    /// WRITEs after them ([`slots::check_target`]).
    fn check_slots(&self, side: &Side) -> Result<String, String> {
        let exposed = side.exposed.expect("prepared");
        let lanes = side.link.num_qps();
        let size = sizes(side, self.op).last().copied().unwrap_or(1) as usize;
        let s = self.slots(side, size);
        let at = self.counts_offset(side);
        let counts = slots::decode_counts(side.link.slice(exposed, at, 8 * lanes), lanes);
        let shown: Vec<String> = counts.iter().map(u64::to_string).collect();
        slots::check_target(side.link.slice(exposed, 0, s.bytes()), &s, &counts, &pattern(&side.params))
            .map(|()| {
                format!(
                    "server buffer: every slot of the {size} B WRITEs ({} per QP) holds the client's pattern stamped with the last WRITE counted into it ({} WRITEs per QP)",
                    s.per_lane,
                    shown.join(", ")
                )
            })
            .map_err(|m| format!("server buffer: {m}"))
    }
}
