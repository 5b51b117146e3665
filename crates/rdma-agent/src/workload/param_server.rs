//! param-server: data-parallel training's parameter server, in miniature.
//! The client runs `num_qps` workers, one QP each (posted round-robin from
//! one thread); the server holds one gradient slot per worker and the
//! weights. Every round:
//!
//! 1. each worker WRITEs its gradient (u32 values from the seeded pattern of
//!    (round, worker)) into its slot, then signals with a zero-length
//!    WRITE_WITH_IMM carrying `round << 8 | worker`;
//! 2. once all of the round's gradients are in, the server checks each one
//!    against the pattern, applies them (`w -= g` per gradient, wrapping u32
//!    arithmetic, so both sides agree bit for bit) and notifies every worker
//!    with a zero-length SEND_WITH_IMM carrying the same kind of immediate;
//! 3. each worker READs the weights back and compares them with its own
//!    recomputation.
//!
//! Rounds are lockstep: a worker pushes the next gradient only after every
//! worker has read the weights, so no READ can see a half-applied update.
//! Round latency (first push to last verified READ) is the latency reported.

use std::time::Instant;

use agent_proto::v1::{Fault, Role, SideResult};

use super::{corrupt_byte, injects, iterations, pattern, size, verdict, OpKind, Workload};
use crate::pattern::Pattern;
use crate::session::{SessionError, Side};
use crate::validate::{check_footprint, OwnCheck, ValidationError};
use crate::verbs::{Access, LocalSlice, RecvChain, SendChain, SendOp, SendWr};
use crate::wr_id::WrId;

/// The param-server workload.
pub struct ParamServer;

/// Receives kept posted per QP: a round needs one, plus the done message on QP 0.
const RECVS_PER_QP: usize = 2;
/// Pattern stream of the initial weights.
const WEIGHTS_STREAM: u64 = 1 << 63;
/// Gradient values are u32.
pub const VALUE_BYTES: u64 = 4;

/// The immediate of a push or a notification: the round (mod 2^24) and the worker.
pub fn encode_imm(round: u64, worker: usize) -> u32 {
    (((round & 0x00FF_FFFF) as u32) << 8) | (worker as u32 & 0xFF)
}

/// The (round mod 2^24, worker) of an immediate.
pub fn decode_imm(imm: u32) -> (u64, usize) {
    (u64::from(imm >> 8), (imm & 0xFF) as usize)
}

/// The pattern of worker `worker`'s gradient in round `round`.
pub fn gradient_pattern(p: &Pattern, round: u64, worker: usize) -> Pattern {
    p.derive((round << 8) | worker as u64)
}

/// The initial weights' pattern.
pub fn weights_pattern(p: &Pattern) -> Pattern {
    p.derive(WEIGHTS_STREAM)
}

/// One update: `w -= g` for every gradient, element by element as little
/// endian u32 with wrapping arithmetic (exact, so any two machines agree).
pub fn apply_gradients<'a>(weights: &mut [u8], gradients: impl IntoIterator<Item = &'a [u8]>) {
    for g in gradients {
        for (w, g) in weights.chunks_exact_mut(4).zip(g.chunks_exact(4)) {
            let value = u32::from_le_bytes(w.try_into().expect("4 bytes"))
                .wrapping_sub(u32::from_le_bytes(g.try_into().expect("4 bytes")));
            w.copy_from_slice(&value.to_le_bytes());
        }
    }
}

/// The QP (worker) and the request's number on it, from a completion's wr_id.
fn lane_of(wr_id: u64) -> (usize, usize) {
    let (qp, n) = WrId::from(wr_id).lane();
    (qp, n as usize)
}

fn workers(side: &Side) -> usize {
    side.link.num_qps()
}

/// Posts `RECVS_PER_QP` zero-length receives on every QP. Done at the start of
/// run: under rdma_cm only the first QP is in INIT during prepare. A message
/// that arrives before its receive is posted is retried (RNR, retry forever).
fn post_receives(side: &mut Side) -> Result<Vec<RecvChain>, SessionError> {
    let ctrl = side.link.add_buffer(8, Access::Local)?;
    let empty = LocalSlice {
        buf: ctrl,
        offset: 0,
        len: 0,
    };
    let mut chains = Vec::with_capacity(workers(side));
    for qp in 0..workers(side) {
        let mut chain = side
            .link
            .recv_chain(&[empty; RECVS_PER_QP], OpKind::Recv.wr_id_on_lane(qp, 0))?;
        for i in 0..RECVS_PER_QP {
            side.link.post_recv_one_on(qp, &mut chain, i)?;
        }
        chains.push(chain);
    }
    Ok(chains)
}

/// Reposts the receive a completion consumed, on its own QP.
fn repost(side: &mut Side, chains: &mut [RecvChain], wr_id: u64) -> Result<(), SessionError> {
    let (qp, i) = lane_of(wr_id);
    let chain = chains
        .get_mut(qp)
        .ok_or_else(|| SessionError::Protocol(format!("receive completion for QP #{qp}, which does not exist")))?;
    side.link.post_recv_one_on(qp, chain, i)?;
    Ok(())
}

impl Workload for ParamServer {
    fn name(&self) -> &'static str {
        "param-server"
    }

    fn own_check(&self) -> OwnCheck {
        |params, limits| {
            if !params.size.is_multiple_of(VALUE_BYTES) {
                return Err(ValidationError::FieldOutOfRange {
                    field: "size",
                    value: i128::from(params.size),
                    range: "a multiple of 4 for param-server (gradients are u32 values)",
                });
            }
            let workers = u64::from(params.num_qps.max(1));
            let what = format!("param-server's server holds {workers} gradient slots and the weights");
            check_footprint(params, limits, workers + 1, &what)
        }
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let len = size(&side.params);
        let n = workers(side);
        match side.role {
            Role::Server => {
                // n gradient slots, then the weights.
                let buf = side.link.add_buffer((n + 1) * len, Access::Remote)?;
                weights_pattern(&pattern(&side.params)).fill(&mut side.link.buffer_mut(buf)[n * len..], 0);
                side.exposed = Some(buf);
            }
            Role::Client => {
                let gradients = side.link.add_buffer(n * len, Access::Local)?;
                let weights = side.link.add_buffer(n * len, Access::Local)?;
                side.bufs = vec![gradients, weights];
            }
        }
        Ok(())
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        match side.role {
            Role::Server => serve(side),
            Role::Client => work(side),
        }
    }
}

fn serve(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let n = workers(side);
    let rounds = iterations(&side.params);
    let p = pattern(&side.params);
    let buf = side.exposed.expect("prepared");
    let mut recvs = post_receives(side)?;
    let ctrl = side.link.add_buffer(8, Access::Local)?;
    let mut notify: Vec<SendChain> = (0..n)
        .map(|k| {
            side.link.send_chain(&[SendWr {
                wr_id: OpKind::Send.wr_id_on_lane(k, 0),
                op: SendOp::SendImm {
                    local: LocalSlice {
                        buf: ctrl,
                        offset: 0,
                        len: 0,
                    },
                    imm: 0,
                },
                signaled: true,
                inline: false,
            }])
        })
        .collect::<Result<_, _>>()?;
    let mut problems = Vec::new();
    let mut gradients_checked = 0u64;
    for round in 0..rounds {
        let mut arrived = vec![false; n];
        let mut count = 0;
        while count < n {
            let c = side.next_completion("the workers' gradients")?;
            if !WrId::from(c.wr_id).is(OpKind::Recv) {
                continue; // a notification's send completion
            }
            if Side::is_done(&c) {
                return Err(SessionError::Protocol(format!(
                    "the client ended the run in round {round} with {count} of {n} gradients in"
                )));
            }
            let (qp, _) = lane_of(c.wr_id);
            let (r, worker) = decode_imm(c.imm);
            if !c.has_imm || r != round & 0x00FF_FFFF || worker != qp || arrived[worker] {
                return Err(SessionError::Protocol(format!(
                    "round {round}: unexpected notification on QP #{qp}: immediate {:?} (round {r}, worker {worker}); \
                     expected round {round} from worker {qp}, once",
                    c.has_imm.then_some(c.imm)
                )));
            }
            arrived[worker] = true;
            count += 1;
            repost(side, &mut recvs, c.wr_id)?;
        }
        let memory = side.link.buffer_mut(buf);
        let (slots, weights) = memory.split_at_mut(n * len);
        for (k, slot) in slots.chunks_exact(len).enumerate() {
            gradients_checked += 1;
            if let Err(m) = gradient_pattern(&p, round, k).verify(slot, 0) {
                if problems.len() < 4 {
                    problems.push(format!("round {round}, worker {k}'s gradient: {m}"));
                }
            }
        }
        apply_gradients(weights, slots.chunks_exact(len));
        for (k, chain) in notify.iter_mut().enumerate() {
            chain.set_imm(0, encode_imm(round, k));
            chain.set_wr_id(0, OpKind::Send.wr_id_on_lane(k, round));
            side.link.post_send_on(k, chain)?;
        }
    }
    loop {
        let c = side.next_completion("the client's done notification")?;
        if Side::is_done(&c) {
            break;
        }
        if WrId::from(c.wr_id).is(OpKind::Recv) {
            return Err(SessionError::Protocol(format!(
                "a message after the last round (immediate {:?}) instead of the done notification",
                c.has_imm.then_some(c.imm)
            )));
        }
    }
    let mut result = side.base_result();
    result.bytes = rounds * n as u64 * len as u64;
    result.ops = rounds * n as u64;
    result.facts.insert("workers".into(), n.to_string());
    result.facts.insert("rounds".into(), rounds.to_string());
    verdict(
        &mut result,
        if problems.is_empty() {
            Ok(format!(
                "{rounds} rounds x {n} workers: all {gradients_checked} gradients of {len} B arrived intact \
                 and in order, and were applied to the weights"
            ))
        } else {
            Err(problems.join("; "))
        },
    );
    Ok(result)
}

fn work(side: &mut Side) -> Result<SideResult, SessionError> {
    let len = size(&side.params);
    let n = workers(side);
    let rounds = iterations(&side.params);
    let p = pattern(&side.params);
    let need = (n as u64 + 1) * len as u64;
    if side.peer.len < need {
        return Err(SessionError::Protocol(format!(
            "server buffer is {} B, {n} workers need {need} B ({n} gradient slots and the weights)",
            side.peer.len
        )));
    }
    let (gradients, weights) = (side.bufs[0], side.bufs[1]);
    let weights_addr = side.peer.addr + (n * len) as u64;
    let mut push = Vec::with_capacity(n);
    let mut pull = Vec::with_capacity(n);
    for k in 0..n {
        let slot_addr = side.peer.addr + (k * len) as u64;
        push.push(side.link.send_chain(&[
            SendWr {
                wr_id: OpKind::Write.wr_id_on_lane(k, 0),
                op: SendOp::Write {
                    local: LocalSlice {
                        buf: gradients,
                        offset: k * len,
                        len,
                    },
                    remote_addr: slot_addr,
                    rkey: side.peer.rkey,
                },
                // The WRITE_WITH_IMM behind it completes it (RC orders them).
                signaled: false,
                inline: false,
            },
            SendWr {
                wr_id: OpKind::WriteImm.wr_id_on_lane(k, 0),
                op: SendOp::WriteImm {
                    local: LocalSlice {
                        buf: gradients,
                        offset: k * len,
                        len: 0,
                    },
                    remote_addr: slot_addr,
                    rkey: side.peer.rkey,
                    imm: 0,
                },
                signaled: true,
                inline: false,
            },
        ])?);
        pull.push(side.link.send_chain(&[SendWr {
            wr_id: OpKind::Read.wr_id_on_lane(k, 0),
            op: SendOp::Read {
                local: LocalSlice {
                    buf: weights,
                    offset: k * len,
                    len,
                },
                remote_addr: weights_addr,
                rkey: side.peer.rkey,
            },
            signaled: true,
            inline: false,
        }])?);
    }
    let mut recvs = post_receives(side)?;
    let mut model = vec![0u8; len];
    weights_pattern(&p).fill(&mut model, 0);
    let mut samples = Vec::with_capacity(rounds as usize);
    let mut problems = Vec::new();
    for round in 0..rounds {
        let start = Instant::now();
        for k in 0..n {
            gradient_pattern(&p, round, k).fill(&mut side.link.buffer_mut(gradients)[k * len..(k + 1) * len], 0);
        }
        apply_gradients(&mut model, side.link.buffer(gradients).chunks_exact(len));
        if round == 0 && injects(side, Fault::Corrupt) {
            // After the worker's own model took the gradient: the server's will differ.
            corrupt_byte(side, gradients, len / 2, "worker 0's first gradient");
        }
        for (k, chain) in push.iter_mut().enumerate() {
            chain.set_imm(1, encode_imm(round, k));
            chain.set_wr_id(1, OpKind::WriteImm.wr_id_on_lane(k, round));
            side.link.post_send_on(k, chain)?;
        }
        let (mut pushed, mut notified, mut pulled) = (0, vec![false; n], 0);
        while pushed < n || pulled < n {
            let c = side.next_completion("the server's notifications and the weights")?;
            let (qp, _) = lane_of(c.wr_id);
            match WrId::from(c.wr_id).kind() {
                Some(OpKind::WriteImm) => pushed += 1,
                Some(OpKind::Recv) => {
                    let (r, worker) = decode_imm(c.imm);
                    if !c.has_imm || r != round & 0x00FF_FFFF || worker != qp || notified[worker] {
                        return Err(SessionError::Protocol(format!(
                            "round {round}: unexpected notification on QP #{qp}: immediate {:?}; \
                             expected round {round} for worker {qp}, once",
                            c.has_imm.then_some(c.imm)
                        )));
                    }
                    notified[worker] = true;
                    repost(side, &mut recvs, c.wr_id)?;
                    pull[worker].set_wr_id(0, OpKind::Read.wr_id_on_lane(worker, round));
                    side.link.post_send_on(worker, &mut pull[worker])?;
                }
                Some(OpKind::Read) => {
                    pulled += 1;
                    let got = &side.link.buffer(weights)[qp * len..(qp + 1) * len];
                    if got != model.as_slice() && problems.len() < 4 {
                        let at = got.iter().zip(&model).position(|(a, b)| a != b).unwrap_or(0);
                        problems.push(format!(
                            "round {round}: worker {qp} read weights that differ from its recomputation \
                             first at byte {at} (expected {:#04x}, got {:#04x})",
                            model[at], got[at]
                        ));
                    }
                }
                _ => {}
            }
        }
        samples.push(start.elapsed().as_secs_f64() * 1e6);
        side.progress(
            "run",
            (round + 1) * 2 * (n * len) as u64,
            (round + 1) * 3 * n as u64,
            format!("round {round}"),
        );
    }
    side.send_done()?;
    let elapsed = side.elapsed();
    let mut result = side.base_result();
    result.bytes = rounds * 2 * (n * len) as u64;
    result.ops = rounds * 3 * n as u64;
    result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
    result.lat = Some(crate::metrics::latency(&mut samples));
    result.facts.insert("workers".into(), n.to_string());
    result.facts.insert("rounds".into(), rounds.to_string());
    verdict(
        &mut result,
        if problems.is_empty() {
            Ok(format!(
                "{rounds} rounds x {n} workers: the weights every worker read back after every round \
                 match its own recomputation ({len} B)"
            ))
        } else {
            Err(problems.join("; "))
        },
    );
    Ok(result)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_immediates_round_trip() {
        for (round, worker) in [(0, 0), (1, 15), (0x00FF_FFFF, 3), (77, 255)] {
            assert_eq!(decode_imm(encode_imm(round, worker)), (round, worker));
        }
        // Rounds wrap at 2^24; both sides compare modulo that.
        assert_eq!(decode_imm(encode_imm(1 << 24, 2)), (0, 2));
        // Never the done message's immediate with at most 16 workers.
        assert_ne!(encode_imm(0x00FF_FFFF, 15), crate::session::DONE_IMM);
    }

    #[test]
    fn test_apply_subtracts_every_gradient_wrapping() {
        let mut w: Vec<u8> = [10u32, 0, u32::MAX].iter().flat_map(|v| v.to_le_bytes()).collect();
        let g1: Vec<u8> = [3u32, 1, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
        let g2: Vec<u8> = [4u32, 2, 6].iter().flat_map(|v| v.to_le_bytes()).collect();
        apply_gradients(&mut w, [g1.as_slice(), g2.as_slice()]);
        let got: Vec<u32> = w
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(got, vec![3, u32::MAX - 2, u32::MAX - 11]);
    }

    #[test]
    fn test_server_and_worker_recomputation_agree() {
        // The server applies the gradients it received slot by slot; a worker
        // applies the ones it generated. Same patterns, same bytes.
        let p = Pattern::new(7);
        let (n, len, rounds) = (3, 64, 5);
        let mut server = vec![0u8; len];
        let mut worker = vec![0u8; len];
        weights_pattern(&p).fill(&mut server, 0);
        weights_pattern(&p).fill(&mut worker, 0);
        let initial = server.clone();
        for round in 0..rounds {
            let grads: Vec<Vec<u8>> = (0..n)
                .map(|k| {
                    let mut g = vec![0u8; len];
                    gradient_pattern(&p, round, k).fill(&mut g, 0);
                    g
                })
                .collect();
            apply_gradients(&mut server, grads.iter().map(Vec::as_slice));
            let flat: Vec<u8> = grads.concat();
            apply_gradients(&mut worker, flat.chunks_exact(len));
        }
        assert_eq!(server, worker);
        assert_ne!(server, initial);
        // Gradients differ by worker and by round.
        let mut a = vec![0u8; 16];
        let mut b = vec![0u8; 16];
        gradient_pattern(&p, 0, 1).fill(&mut a, 0);
        gradient_pattern(&p, 1, 0).fill(&mut b, 0);
        assert_ne!(a, b);
    }

    #[test]
    fn test_lanes_carry_the_qp() {
        let id = OpKind::Recv.wr_id_on_lane(5, 1);
        assert_eq!(lane_of(id), (5, 1));
        assert!(WrId::from(id).is(OpKind::Recv));
    }
}
