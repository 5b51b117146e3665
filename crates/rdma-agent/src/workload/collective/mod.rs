//! The collectives (allreduce, allgather, reduce-scatter, alltoall,
//! broadcast, incast): this node's agent is one rank. Every rank is an oob
//! side with one RC QP per other rank (QP k faces the k-th other rank in
//! rank order); the controller pairs the QPs and hands each rank the peers'
//! QP parameters and buffers at Run.
//!
//! Data moves by RDMA WRITE_WITH_IMM straight into the peer's registered
//! buffers, the immediate being the arrival signal (kind, operation, step):
//! no rendezvous per message, buffers registered once per run.
//!
//! Each operation is: poison the buffers the operation writes (so a write
//! that never came is caught), a barrier of all ranks (rank 0 gathers an
//! arrival from every rank and releases them), the operation (timed on this
//! rank until it holds its whole result and its writes are delivered), and
//! a check of every element of this rank's result. Neither the poison, the
//! barrier nor the check is in the time. Rank 0's release also says whether
//! to stop, so timed runs (`duration_s`) end on the same operation everywhere.
//!
//! Buffers of a rank: the input (local) and the exposed buffer the peers
//! write into: the output, and for the reductions a staging area of the same
//! size where the left neighbour's partial sums land; an incast root's output
//! has one region per rank.

pub mod elements;
mod net;

use std::time::{Duration, Instant};

use agent_proto::v1::{CollectiveParams, CollectivePoint, Fault, SideResult, WorkloadParams};
use workload_catalogue::limits::MAX_ITERATIONS;
use workload_catalogue::Collective;

use self::elements::{check, elements_of, fill_input, OpShape, Wrong, ELEMENT};
use self::net::{Imm, Net, RECVS_PER_QP, SENDS_PER_QP};
use super::Workload;
use crate::session::{SessionError, Side};
use crate::validate::{self, Limits, OwnCheck, ValidationError};
use crate::verbs::{Access, BufId, LocalSlice};

/// Most ranks one run may have.
pub const MAX_WORLD: u32 = 16;
/// The smallest size of a sweep, as nccl-tests' `-b 8`.
const SWEEP_MIN: u64 = 8;

/// One collective, run by every rank's agent.
pub struct CollectiveWorkload {
    /// The registry name ("allreduce").
    pub name: &'static str,
    /// The operation.
    pub op: Collective,
}

/// The rank's place in the run (validated: present, rank and root < world).
fn place(params: &WorkloadParams) -> CollectiveParams {
    params.collective.unwrap_or_default()
}

/// The operation a request names.
fn op_of(params: &WorkloadParams) -> Option<Collective> {
    workload_catalogue::find(&params.workload).and_then(|w| w.shape.collective())
}

/// The sizes a run goes through: its size, or a sweep of powers of two from
/// 8 B to max_size (sizes whose alltoall blocks would be empty left out).
fn sizes(params: &WorkloadParams, op: Collective, world: usize) -> Vec<u64> {
    if !params.all_sizes {
        return vec![params.size];
    }
    let max = validate::effective_max_size(params);
    std::iter::successors(Some(SWEEP_MIN), |s| s.checked_mul(2))
        .take_while(|s| *s <= max)
        .filter(|s| elements_of(op, *s, world) > 0)
        .collect()
}

/// Bytes of a rank's exposed buffer for `count` elements: output, plus the
/// reductions' staging area; an incast root's output holds every rank's.
fn exposed_len(op: Collective, rank: usize, world: usize, root: usize, count: usize) -> usize {
    let bytes = count * ELEMENT;
    match op {
        Collective::Allreduce | Collective::ReduceScatter => 2 * bytes,
        Collective::Incast if rank == root => world * bytes,
        Collective::Incast => ELEMENT,
        _ => bytes,
    }
}

/// The largest size a run uses.
fn max_size(params: &WorkloadParams) -> u64 {
    if params.all_sizes {
        validate::effective_max_size(params)
    } else {
        params.size
    }
}

fn check_request(params: &WorkloadParams, limits: &Limits) -> Result<(), ValidationError> {
    let Some(op) = op_of(params) else {
        return Ok(());
    };
    let Some(place) = params.collective.as_ref() else {
        return Err(ValidationError::Missing { field: "collective" });
    };
    validate::check_range("collective.world", place.world.into(), 2, MAX_WORLD.into(), "2 ..= 16")?;
    if place.rank >= place.world {
        return Err(ValidationError::FieldOutOfRange {
            field: "collective.rank",
            value: place.rank.into(),
            range: "0 ..= world - 1",
        });
    }
    if place.root >= place.world {
        return Err(ValidationError::FieldOutOfRange {
            field: "collective.root",
            value: place.root.into(),
            range: "0 ..= world - 1",
        });
    }
    validate::check_range("collective.warmup", place.warmup.into(), 0, 10_000, "0 ..= 10000")?;
    let world = place.world as usize;
    if !params.all_sizes && elements_of(op, params.size, world) == 0 {
        return Err(ValidationError::SizeOutOfRange {
            size: params.size,
            limit: max_size(params),
            why: format!(
                "a {} moves float32 elements: at least {} B for {world} ranks",
                params.workload,
                if op == Collective::Alltoall { 4 * world } else { 4 }
            ),
        });
    }
    // The input plus the exposed buffer, at the largest size.
    let count = elements_of(op, max_size(params), world);
    let footprint = count * ELEMENT + exposed_len(op, place.rank as usize, world, place.root as usize, count);
    let factor = (footprint as u64).div_ceil(max_size(params).max(1)).max(1);
    validate::check_footprint(params, limits, factor, "the input and the buffers peers write into")
}

impl Workload for CollectiveWorkload {
    fn name(&self) -> &'static str {
        self.name
    }

    fn own_check(&self) -> OwnCheck {
        check_request
    }

    fn num_qps(&self, params: &WorkloadParams) -> u32 {
        place(params).world.saturating_sub(1).max(1)
    }

    fn send_queue_depth(&self, _: &WorkloadParams) -> u32 {
        SENDS_PER_QP
    }

    fn recv_queue_depth(&self, _: &WorkloadParams) -> u32 {
        RECVS_PER_QP
    }

    fn prepare(&self, side: &mut Side) -> Result<(), SessionError> {
        let place = place(&side.params);
        let world = place.world as usize;
        let count = elements_of(self.op, max_size(&side.params), world);
        let input = side.link.add_buffer(count * ELEMENT, Access::Local)?;
        let exposed_len = exposed_len(self.op, place.rank as usize, world, place.root as usize, count);
        let exposed = side.link.add_buffer(exposed_len, Access::Remote)?;
        side.bufs = vec![input];
        side.exposed = Some(exposed);
        // Receives first: a peer may write as soon as its QP and ours are ready.
        Net::post_receives(side)
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let place = place(&side.params);
        let (rank, world, root) = (place.rank as usize, place.world as usize, place.root as usize);
        let input = side.bufs[0];
        let exposed = side.exposed.expect("prepared");
        let mut net = Net::new(side, rank, world, input)?;
        let seed = side.params.seed;
        let fault = side.params.fault();
        let mut points = Vec::new();
        let mut sent_bytes = 0u64;
        let mut ops = 0u64;
        let mut first_wrong: Option<(u64, u64, Wrong)> = None;
        let deadline = timed_until(&side.params);
        let max_bytes = elements_of(self.op, max_size(&side.params), world) * ELEMENT;
        for size in sizes(&side.params, self.op, world) {
            let shape = OpShape {
                op: self.op,
                world,
                root,
                count: elements_of(self.op, size, world),
            };
            let layout = Layout {
                input,
                exposed,
                staging: max_bytes,
            };
            prepare_input(side, &shape, &layout, rank, seed, fault);
            if fault == Fault::Skip && rank == fault_rank(&shape) && ops == 0 {
                net.skip_next_write();
            }
            let mut times = Vec::new();
            let (mut wrong, mut checked) = (0u64, 0u64);
            let warmup = u64::from(place.warmup);
            for k in 0u64.. {
                poison(side, &shape, &layout, rank);
                let go = if rank == 0 {
                    let done = match deadline {
                        Some(until) => k > warmup && Instant::now() >= until,
                        None => k >= warmup + side.params.iterations.clamp(1, MAX_ITERATIONS),
                    };
                    !done
                } else {
                    true
                };
                let what = format!("size {size} B, operation {}", k + 1);
                if !net.barrier(side, go, &what)? {
                    break;
                }
                let started = Instant::now();
                run_op(side, &mut net, &shape, &layout, rank, &what)?;
                let took = started.elapsed();
                let out = side.link.buffer(exposed);
                let (c, w, first) = check(&shape, seed, rank, out);
                checked += c;
                wrong += w;
                if let (Some(first), None) = (first, &first_wrong) {
                    first_wrong = Some(((shape.count * ELEMENT) as u64, k + 1, first));
                }
                if k >= warmup {
                    times.push(took);
                }
                sent_bytes += net.take_sent_bytes();
                ops += 1;
            }
            let n = times.len().max(1) as f64;
            let us = |d: &Duration| d.as_secs_f64() * 1e6;
            let point = CollectivePoint {
                size: (shape.count * ELEMENT) as u64,
                iterations: times.len() as u64,
                time_us: times.iter().map(us).sum::<f64>() / n,
                min_us: times.iter().map(us).fold(f64::INFINITY, f64::min).min(f64::MAX),
                max_us: times.iter().map(us).fold(0.0, f64::max),
                wrong,
                checked,
            };
            side.progress(
                "run",
                sent_bytes,
                ops,
                format!("{} B: {:.1} us per operation, {wrong} wrong", point.size, point.time_us),
            );
            points.push(point);
        }
        let mut result = side.base_result();
        result.bytes = sent_bytes;
        result.ops = ops;
        result.elapsed_s = side.elapsed().as_secs_f64();
        result.cpu = Some(side.cpu());
        let checked: u64 = points.iter().map(|p| p.checked).sum();
        let wrong: u64 = points.iter().map(|p| p.wrong).sum();
        super::verdict(
            &mut result,
            match first_wrong {
                None => Ok(format!("rank {rank}: {checked} elements checked over {ops} operations, all as expected")),
                Some((size, op, w)) => Err(format!(
                    "rank {rank}: {wrong} of {checked} elements wrong; first: operation {op} of size {size} B, element {}: expected {}, found {}",
                    w.element, w.expected, w.found
                )),
            },
        );
        result.facts.insert("rank".into(), rank.to_string());
        result.facts.insert("world".into(), world.to_string());
        result.facts.insert("algorithm".into(), self.op.algorithm().into());
        result.collective = points;
        Ok(result)
    }
}

/// Until when a timed run goes on (None: a counted run).
fn timed_until(params: &WorkloadParams) -> Option<Instant> {
    (params.iterations == 0 && params.duration_s > 0.0).then(|| Instant::now() + validate::duration(params))
}

/// Where a rank's data sits: the input buffer, the exposed buffer (output
/// from 0), and the staging area's offset in it.
#[derive(Clone, Copy)]
struct Layout {
    input: BufId,
    exposed: BufId,
    staging: usize,
}

/// The rank whose data a fault spoils: one whose first write carries data
/// (the ring's chunks may be empty when there are fewer elements than ranks).
fn fault_rank(shape: &OpShape) -> usize {
    let n = shape.world;
    match shape.op {
        Collective::Allreduce | Collective::Allgather => n - 1,
        Collective::ReduceScatter | Collective::Alltoall => 0,
        Collective::Broadcast => shape.root,
        Collective::Incast => (shape.root + 1) % n,
    }
}

/// Fills this rank's input for `shape`; a corrupt run then flips a byte of
/// one element that reaches a result.
fn prepare_input(side: &mut Side, shape: &OpShape, layout: &Layout, rank: usize, seed: u64, fault: Fault) {
    let bytes = shape.count * ELEMENT;
    fill_input(
        &mut side.link.buffer_mut(layout.input)[..bytes],
        seed,
        rank,
        0..shape.count,
    );
    if fault == Fault::Corrupt && rank == fault_rank(shape) {
        let e = match shape.op {
            Collective::Alltoall => ((rank + 1) % shape.world) * shape.block(),
            _ => shape.count - 1,
        };
        super::corrupt_byte(
            side,
            layout.input,
            e * ELEMENT + 3,
            &format!("rank {rank}'s input (element {e})"),
        );
    }
}

/// Fills what the operation will write with all-ones bytes (a NaN), so
/// that an element no write reached cannot pass for a result.
fn poison(side: &mut Side, shape: &OpShape, layout: &Layout, rank: usize) {
    let bytes = shape.count * ELEMENT;
    let buf = side.link.buffer_mut(layout.exposed);
    let out = match shape.op {
        Collective::Incast if rank == shape.root => shape.world * bytes,
        Collective::Incast => 0,
        _ => bytes,
    };
    buf[..out].fill(0xFF);
    if matches!(shape.op, Collective::Allreduce | Collective::ReduceScatter) {
        buf[layout.staging..layout.staging + bytes].fill(0xFF);
    }
}

/// Byte range of an element range.
fn bytes(r: std::ops::Range<usize>) -> std::ops::Range<usize> {
    r.start * ELEMENT..r.end * ELEMENT
}

/// One operation on this rank, until it holds its result and its own
/// writes are delivered.
fn run_op(
    side: &mut Side,
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
    let out = |range: std::ops::Range<usize>| LocalSlice {
        buf: layout.exposed,
        offset: range.start * ELEMENT,
        len: range.len() * ELEMENT,
    };
    let inp = |range: std::ops::Range<usize>| LocalSlice {
        buf: layout.input,
        offset: range.start * ELEMENT,
        len: range.len() * ELEMENT,
    };
    match shape.op {
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
                ring.step(side, net, src, at, s, recv, what)?;
                let r = bytes(shape.chunk(recv));
                let (input, exposed) = side.link.buffer_pair_mut(layout.input, layout.exposed);
                let (output, staging) = exposed.split_at_mut(layout.staging);
                elements::add_into(&mut output[r.clone()], &input[r.clone()], &staging[r]);
            }
            if shape.op == Collective::Allreduce {
                for s in 0..n - 1 {
                    let step = n - 1 + s;
                    let send = (rank + 1 + n - s) % n;
                    let recv = (rank + n - s) % n;
                    let range = shape.chunk(send);
                    ring.step(
                        side,
                        net,
                        out(range.clone()),
                        (range.start * ELEMENT) as u64,
                        step,
                        recv,
                        what,
                    )?;
                }
            }
        }
        Collective::Allgather => {
            copy_local(side, layout, shape.chunk(rank));
            for s in 0..n - 1 {
                let send = (rank + n - s) % n;
                let recv = (rank + 2 * n - s - 1) % n;
                let range = shape.chunk(send);
                ring.step(
                    side,
                    net,
                    out(range.clone()),
                    (range.start * ELEMENT) as u64,
                    s,
                    recv,
                    what,
                )?;
            }
        }
        Collective::Alltoall => {
            let b = shape.block();
            copy_local(side, layout, rank * b..(rank + 1) * b);
            for q in (1..n).map(|k| (rank + k) % n) {
                let to = (rank * b * ELEMENT) as u64;
                net.write(side, q, inp(q * b..(q + 1) * b), to, Imm::data(0))?;
            }
            for q in (1..n).map(|k| (rank + n - k) % n) {
                net.wait(side, q, Imm::data(0), || format!("{what}: block {rank} from rank {q}"))?;
            }
        }
        Collective::Broadcast => {
            if rank == shape.root {
                copy_local(side, layout, 0..shape.count);
                for q in (1..n).map(|k| (rank + k) % n) {
                    net.write(side, q, inp(0..shape.count), 0, Imm::data(0))?;
                }
            } else {
                net.wait(side, shape.root, Imm::data(0), || {
                    format!("{what}: the root's buffer from rank {}", shape.root)
                })?;
            }
        }
        Collective::Incast => {
            if rank == shape.root {
                // In whatever order the senders' data lands.
                let mut waiting: Vec<usize> = (0..n).filter(|q| *q != rank).collect();
                while !waiting.is_empty() {
                    let before = waiting.len();
                    waiting.retain(|q| !net.arrived(*q, Imm::data(0)));
                    if waiting.len() == before {
                        let pending = waiting.clone();
                        net.pump(side, || format!("{what}: data from ranks {pending:?}"))?;
                    }
                }
            } else {
                let to = (rank * shape.count * ELEMENT) as u64;
                net.write(side, shape.root, inp(0..shape.count), to, Imm::data(0))?;
            }
        }
    }
    net.drain(side, what)
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
        side: &mut Side,
        net: &mut Net,
        src: LocalSlice,
        offset: u64,
        step: usize,
        recv: usize,
        what: &str,
    ) -> Result<(), SessionError> {
        net.write(side, self.right, src, offset, Imm::data(step))?;
        let (left, steps) = (self.left, self.steps);
        net.wait(side, left, Imm::data(step), || {
            format!("{what}: step {} of {steps}, chunk {recv} from rank {left}", step + 1)
        })
    }
}

/// The operation's local part: this rank's own elements, from its input
/// to the same place in its output.
fn copy_local(side: &mut Side, layout: &Layout, elements: std::ops::Range<usize>) {
    let (input, exposed) = side.link.buffer_pair_mut(layout.input, layout.exposed);
    let range = bytes(elements);
    exposed[range.clone()].copy_from_slice(&input[range]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_sweeps_start_at_eight_bytes_and_skip_empty_alltoall_blocks() {
        let p = WorkloadParams {
            all_sizes: true,
            max_size: 1024,
            ..Default::default()
        };
        assert_eq!(
            sizes(&p, Collective::Allreduce, 4),
            [8, 16, 32, 64, 128, 256, 512, 1024]
        );
        assert_eq!(sizes(&p, Collective::Alltoall, 4), [16, 32, 64, 128, 256, 512, 1024]);
    }

    #[test]
    fn test_an_incast_root_holds_every_rank_and_its_senders_almost_nothing() {
        assert_eq!(exposed_len(Collective::Incast, 0, 4, 0, 10), 160);
        assert_eq!(exposed_len(Collective::Incast, 1, 4, 0, 10), ELEMENT);
        assert_eq!(exposed_len(Collective::Allreduce, 1, 4, 0, 10), 80);
        assert_eq!(exposed_len(Collective::Broadcast, 1, 4, 0, 10), 40);
    }
}
