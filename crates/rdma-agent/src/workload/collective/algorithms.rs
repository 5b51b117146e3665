//! What each collective does on the wire, one operation on one rank: the
//! writes it posts, to which peers and where, and the arrivals it waits
//! for (ring, recursive doubling, pairwise, at once, into a root), with the switches
//! between them. It knows nothing of the run around an operation (the
//! poison, the barrier, the timing, the check): that is `collective`'s.

use workload_catalogue::Collective;

use super::elements::{self, OpShape, ELEMENT};
use super::net::{Imm, Net};
use super::transport::{Region, Slice, Transport};
use crate::session::SessionError;

/// The largest allreduce (bytes) run by recursive doubling on 2^k ranks:
/// log2(n) exchanges of the whole buffer instead of the ring's 2 (n - 1)
/// steps of one chunk each. Below a few KiB a step's latency, not its
/// bytes, is the cost, which is why MPI libraries switch there too.
pub const DOUBLING_MAX: usize = 16 << 10;

/// Whether an allreduce of `count` elements on `world` ranks runs by
/// recursive doubling (else by ring).
pub fn uses_doubling(op: Collective, world: usize, count: usize) -> bool {
    op == Collective::Allreduce && world.is_power_of_two() && count * ELEMENT <= DOUBLING_MAX
}

/// The smallest alltoall block (bytes) sent pairwise, one peer per step,
/// instead of to every peer at once. With every rank writing to every
/// other at once, each receiver takes n - 1 streams together; on the quad
/// lab that lost far more than it overlapped from 128 KiB blocks on
/// (docs/labs/collectives.md has the figures), while smaller blocks gained
/// from having all their writes in flight.
pub const PAIRWISE_MIN_BLOCK: usize = 128 << 10;

/// Whether an alltoall with blocks of `block` elements runs pairwise.
pub fn uses_pairwise(op: Collective, block: usize) -> bool {
    op == Collective::Alltoall && block * ELEMENT >= PAIRWISE_MIN_BLOCK
}

/// Where the staging area starts in a rank's exposed region (its output
/// is from 0).
#[derive(Clone, Copy)]
pub(super) struct Layout {
    pub(super) staging: usize,
}

/// Byte range of an element range.
fn bytes(r: std::ops::Range<usize>) -> std::ops::Range<usize> {
    r.start * ELEMENT..r.end * ELEMENT
}

/// The slice of `region` holding an element range.
fn slice(region: Region, range: std::ops::Range<usize>) -> Slice {
    Slice {
        region,
        offset: range.start * ELEMENT,
        len: range.len() * ELEMENT,
    }
}

/// One operation on this rank, until it holds its result and its own
/// writes are delivered.
pub(super) fn run_op(
    t: &mut dyn Transport,
    net: &mut Net,
    shape: &OpShape,
    layout: &Layout,
    rank: usize,
    what: &str,
) -> Result<(), SessionError> {
    let n = shape.world;
    let ring = Ring {
        left: (rank + n - 1) % n,
        right: (rank + 1) % n,
        steps: if shape.op == Collective::Allreduce {
            2 * (n - 1)
        } else {
            n - 1
        },
    };
    let out = |range| slice(Region::Exposed, range);
    let inp = |range| slice(Region::Input, range);
    match shape.op {
        Collective::Allreduce if uses_doubling(shape.op, n, shape.count) => {
            // Recursive doubling: at step k rank r swaps its partial sum with
            // rank r xor 2^k (its input at k = 0) into the partner's k-th
            // staging slot, and adds the partner's; after log2(n) steps
            // every rank holds the sum of all.
            let steps = n.trailing_zeros() as usize;
            let len = shape.count * ELEMENT;
            for k in 0..steps {
                let partner = rank ^ (1 << k);
                let src = if k == 0 {
                    inp(0..shape.count)
                } else {
                    out(0..shape.count)
                };
                net.write(t, partner, src, (layout.staging + k * len) as u64, Imm::data(k))?;
                net.wait(t, partner, Imm::data(k), || {
                    format!("{what}: step {} of {steps}, the partial sum from rank {partner}", k + 1)
                })?;
                // The write read this rank's output, which the sum now changes.
                net.drain(t, what)?;
                let (input, exposed) = t.regions_mut();
                let (output, staging) = exposed.split_at_mut(layout.staging);
                let arrived = &staging[k * len..(k + 1) * len];
                if k == 0 {
                    elements::add_into(&mut output[..len], &input[..len], arrived);
                } else {
                    elements::add_assign(&mut output[..len], arrived);
                }
            }
        }
        Collective::Allreduce | Collective::ReduceScatter => {
            // Reduce-scatter: at step s rank r sends the chunk it summed last
            // (its own input at s = 0) into the right neighbour's staging
            // area and adds the left neighbour's into its output. Allreduce
            // starts one chunk later, so that each rank ends holding the
            // sum of chunk r + 1, then passes the sums on around the ring.
            let shift = usize::from(shape.op == Collective::ReduceScatter);
            for s in 0..n - 1 {
                let send = (rank + 2 * n - s - shift) % n;
                let recv = (rank + 2 * n - s - 1 - shift) % n;
                let range = shape.chunk(send);
                let src = if s == 0 { inp(range.clone()) } else { out(range.clone()) };
                let at = (layout.staging + range.start * ELEMENT) as u64;
                ring.step(t, net, src, at, s, recv, what)?;
                let r = bytes(shape.chunk(recv));
                let (input, exposed) = t.regions_mut();
                let (output, staging) = exposed.split_at_mut(layout.staging);
                elements::add_into(&mut output[r.clone()], &input[r.clone()], &staging[r]);
            }
            if shape.op == Collective::Allreduce {
                for s in 0..n - 1 {
                    let step = n - 1 + s;
                    let send = (rank + 1 + n - s) % n;
                    let recv = (rank + n - s) % n;
                    let range = shape.chunk(send);
                    let at = (range.start * ELEMENT) as u64;
                    ring.step(t, net, out(range), at, step, recv, what)?;
                }
            }
        }
        Collective::Allgather => {
            copy_local(t, shape.chunk(rank));
            for s in 0..n - 1 {
                let send = (rank + n - s) % n;
                let recv = (rank + 2 * n - s - 1) % n;
                let range = shape.chunk(send);
                let at = (range.start * ELEMENT) as u64;
                ring.step(t, net, out(range), at, s, recv, what)?;
            }
        }
        Collective::Alltoall => {
            let b = shape.block();
            let to = (rank * b * ELEMENT) as u64;
            copy_local(t, rank * b..(rank + 1) * b);
            if uses_pairwise(shape.op, b) {
                // Pairwise: at step k rank r writes its block to rank r + k
                // and waits for rank r - k's, so each link carries one
                // block at a time.
                for k in 1..n {
                    let (dest, from) = ((rank + k) % n, (rank + n - k) % n);
                    net.write(t, dest, inp(dest * b..(dest + 1) * b), to, Imm::data(k))?;
                    net.wait(t, from, Imm::data(k), || {
                        format!("{what}: step {k} of {}, block {rank} from rank {from}", n - 1)
                    })?;
                }
            } else {
                for q in (1..n).map(|k| (rank + k) % n) {
                    net.write(t, q, inp(q * b..(q + 1) * b), to, Imm::data(0))?;
                }
                for q in (1..n).map(|k| (rank + n - k) % n) {
                    net.wait(t, q, Imm::data(0), || format!("{what}: block {rank} from rank {q}"))?;
                }
            }
        }
        Collective::Broadcast => {
            if rank == shape.root {
                copy_local(t, 0..shape.count);
                for q in (1..n).map(|k| (rank + k) % n) {
                    net.write(t, q, inp(0..shape.count), 0, Imm::data(0))?;
                }
            } else {
                net.wait(t, shape.root, Imm::data(0), || {
                    format!("{what}: the root's buffer from rank {}", shape.root)
                })?;
            }
        }
        Collective::Incast => {
            if rank == shape.root {
                wait_for_every_sender(t, net, n, rank, what)?;
            } else {
                let to = (rank * shape.count * ELEMENT) as u64;
                net.write(t, shape.root, inp(0..shape.count), to, Imm::data(0))?;
            }
        }
        Collective::Reduce => {
            // Each sender's buffer lands in its own staging slot of the
            // root; the root then adds them to its own input.
            let len = shape.count * ELEMENT;
            if rank == shape.root {
                wait_for_every_sender(t, net, n, rank, what)?;
                let (input, exposed) = t.regions_mut();
                let (output, staging) = exposed.split_at_mut(layout.staging);
                output[..len].copy_from_slice(&input[..len]);
                for q in (0..n).filter(|q| *q != rank) {
                    elements::add_assign(&mut output[..len], &staging[q * len..(q + 1) * len]);
                }
            } else {
                let to = (layout.staging + rank * len) as u64;
                net.write(t, shape.root, inp(0..shape.count), to, Imm::data(0))?;
            }
        }
    }
    net.drain(t, what)
}

/// A root's wait for the one write of every other rank, in whatever order
/// they land.
fn wait_for_every_sender(
    t: &mut dyn Transport,
    net: &mut Net,
    world: usize,
    root: usize,
    what: &str,
) -> Result<(), SessionError> {
    let mut waiting: Vec<usize> = (0..world).filter(|q| *q != root).collect();
    while !waiting.is_empty() {
        let before = waiting.len();
        waiting.retain(|q| !net.arrived(*q, Imm::data(0)));
        if waiting.len() == before {
            let pending = waiting.clone();
            net.pump(t, || format!("{what}: data from ranks {pending:?}"))?;
        }
    }
    Ok(())
}

/// A rank's place in a ring: its neighbours and the operation's steps.
struct Ring {
    left: usize,
    right: usize,
    steps: usize,
}

impl Ring {
    /// One step: write `src` into the right neighbour at `offset`, then
    /// wait for the left neighbour's write of the same step (chunk `recv`).
    #[allow(clippy::too_many_arguments)]
    fn step(
        &self,
        t: &mut dyn Transport,
        net: &mut Net,
        src: Slice,
        offset: u64,
        step: usize,
        recv: usize,
        what: &str,
    ) -> Result<(), SessionError> {
        net.write(t, self.right, src, offset, Imm::data(step))?;
        let (left, steps) = (self.left, self.steps);
        net.wait(t, left, Imm::data(step), || {
            format!("{what}: step {} of {steps}, chunk {recv} from rank {left}", step + 1)
        })
    }
}

/// The operation's local part: this rank's own elements, from its input
/// to the same place in its output.
fn copy_local(t: &mut dyn Transport, elements: std::ops::Range<usize>) {
    let (input, exposed) = t.regions_mut();
    let range = bytes(elements);
    exposed[range.clone()].copy_from_slice(&input[range]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_small_allreduces_on_powers_of_two_double_and_the_rest_ring() {
        assert!(uses_doubling(Collective::Allreduce, 4, 2));
        assert!(uses_doubling(Collective::Allreduce, 16, DOUBLING_MAX / ELEMENT));
        assert!(!uses_doubling(Collective::Allreduce, 4, DOUBLING_MAX / ELEMENT + 1));
        assert!(!uses_doubling(Collective::Allreduce, 3, 2));
        assert!(!uses_doubling(Collective::ReduceScatter, 4, 2));
        // The catalogue tells users where the switch is.
        let told = format!("up to {} KiB", DOUBLING_MAX >> 10);
        assert!(Collective::Allreduce.algorithm().contains(&told));
    }

    #[test]
    fn test_large_alltoall_blocks_go_pairwise_and_small_ones_at_once() {
        assert!(uses_pairwise(Collective::Alltoall, PAIRWISE_MIN_BLOCK / ELEMENT));
        assert!(!uses_pairwise(Collective::Alltoall, PAIRWISE_MIN_BLOCK / ELEMENT - 1));
        assert!(!uses_pairwise(Collective::Allgather, PAIRWISE_MIN_BLOCK / ELEMENT));
        // The catalogue tells users where the switch is.
        let told = format!("from {} KiB blocks", PAIRWISE_MIN_BLOCK >> 10);
        assert!(Collective::Alltoall.algorithm().contains(&told));
    }
}
