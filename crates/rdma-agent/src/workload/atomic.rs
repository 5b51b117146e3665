//! atomic: fetch-and-add and compare-and-swap on an 8-byte word in the
//! server's memory. Every returned old value is checked, the final value is
//! read back by the client, and the server checks its word after done.

use agent_proto::v1::{Fault, Role, SideResult};

use super::{injects, iterations, note_skip, post_done_recv, read_peer_word, read_word, verdict, OpKind, Workload};
use crate::session::{SessionError, Side};
use crate::verbs::{Access, LocalSlice, SendOp, SendWr};

/// The atomic workload.
pub struct Atomic;

/// The word's starting value for a seed (kept well away from wrap-around).
fn initial(seed: u64) -> u64 {
    (seed.wrapping_mul(0x9E37_79B9) & 0xFFFF_FFFF) << 8
}

/// The value the successful compare-and-swap installs.
fn swapped(seed: u64) -> u64 {
    !initial(seed)
}

impl Workload for Atomic {
    fn name(&self) -> &'static str {
        "atomic"
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        match side.role {
            Role::Server => {
                let word = side.link.add_buffer(8, Access::Remote)?;
                side.link
                    .buffer_mut(word)
                    .copy_from_slice(&initial(side.params.seed).to_ne_bytes());
                side.exposed = Some(word);
                post_done_recv(side)
            }
            Role::Client => {
                side.bufs = vec![side.link.add_buffer(8, Access::Local)?];
                Ok(())
            }
        }
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let seed = side.params.seed;
        if side.role == Role::Server {
            super::wait_for_done(side)?;
            let word = side.exposed.expect("prepared");
            let value = read_word(side, word);
            let mut result = side.base_result();
            result.atomic_final = value;
            let expected = swapped(seed);
            verdict(
                &mut result,
                if value == expected {
                    Ok(format!("remote word is {value:#x} as expected"))
                } else {
                    Err(format!("remote word is {value:#x}, expected {expected:#x}"))
                },
            );
            return Ok(result);
        }
        let res = side.bufs[0];
        let local = LocalSlice {
            buf: res,
            offset: 0,
            len: 8,
        };
        let (addr, rkey) = (side.peer.addr, side.peer.rkey);
        let iters = iterations(&side.params);
        let v0 = initial(seed);
        let mut problems = Vec::new();
        let mut fetch_add = side.link.send_chain(&[SendWr {
            wr_id: OpKind::FetchAdd.wr_id(0),
            op: SendOp::FetchAdd {
                local,
                remote_addr: addr,
                rkey,
                add: 1,
            },
            signaled: true,
            inline: false,
        }])?;
        let skip = injects(side, Fault::Skip);
        for i in 0..iters {
            if skip && i == 0 {
                note_skip(side, "the first fetch-and-add is never posted");
                continue;
            }
            fetch_add.set_wr_id(0, OpKind::FetchAdd.wr_id(i));
            side.link.post_send(&mut fetch_add)?;
            side.next_completion("the FETCH_AND_ADD completion")?;
            let old = read_word(side, res);
            if old != v0.wrapping_add(i) && problems.is_empty() {
                problems.push(format!(
                    "fetch-and-add {i} returned {old:#x}, expected {:#x}",
                    v0.wrapping_add(i)
                ));
            }
            side.progress("run", 8 * (i + 1), i + 1, "");
        }
        let after_adds = v0.wrapping_add(iters);
        // A CAS that must succeed, then one that must fail (stale compare).
        for (n, (compare, swap, expect_old)) in
            [(after_adds, swapped(seed), after_adds), (after_adds, 0, swapped(seed))]
                .into_iter()
                .enumerate()
        {
            let mut cas = side.link.send_chain(&[SendWr {
                wr_id: OpKind::CompareSwap.wr_id(n as u64),
                op: SendOp::CompareSwap {
                    local,
                    remote_addr: addr,
                    rkey,
                    compare,
                    swap,
                },
                signaled: true,
                inline: false,
            }])?;
            side.link.post_send(&mut cas)?;
            side.next_completion("the COMPARE_AND_SWAP completion")?;
            let old = read_word(side, res);
            if old != expect_old {
                problems.push(format!(
                    "compare-and-swap {n} returned {old:#x}, expected {expect_old:#x}"
                ));
            }
        }
        let fin = read_peer_word(side, res, "the READ of the final value")?;
        if fin != swapped(seed) {
            problems.push(format!("final value {fin:#x}, expected {:#x}", swapped(seed)));
        }
        side.send_done()?;
        let elapsed = side.elapsed();
        let mut result = side.base_result();
        result.atomic_final = fin;
        result.ops = iters + 3;
        result.bytes = 8 * result.ops;
        result.bw = Some(crate::metrics::bandwidth(result.bytes, result.ops, elapsed, &[]));
        verdict(
            &mut result,
            if problems.is_empty() {
                Ok(format!(
                    "{iters} fetch-and-add returned {v0:#x}..; CAS succeeded then failed as expected; final {fin:#x}"
                ))
            } else {
                Err(problems.join("; "))
            },
        );
        Ok(result)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn initial_and_swapped_values_differ_and_leave_room_to_add() {
        for seed in [0, 1, 42, u64::MAX] {
            assert_ne!(initial(seed), swapped(seed));
            assert!(initial(seed).checked_add(1 << 32).is_some());
        }
    }
}
