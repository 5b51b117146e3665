//! The collectives (allreduce, allgather, reduce-scatter, reduce, alltoall,
//! broadcast, incast): this node's agent is one rank, with one QP (or
//! libfabric peer) per other rank, QP k facing the k-th other rank in rank
//! order. How the QPs connect (rdma_cm between the ranks, or the
//! controller's exchange with `--cm oob`) is the session's business
//! (`verbs_session::rdma_cm_ranks`); this module sees a connected
//! [`Transport`].
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

mod algorithms;
pub mod elements;
mod net;
pub mod transport;

use std::time::{Duration, Instant};

use agent_proto::v1::{CollectiveParams, CollectivePoint, Fault, SideResult, WorkloadParams};
use workload_catalogue::limits::{MAX_ITERATIONS, MAX_RANKS};
use workload_catalogue::Collective;

use self::algorithms::{run_op, uses_doubling, Layout, DOUBLING_MAX};
use self::elements::{check, elements_of, fill_input, OpShape, Wrong, ELEMENT};
use self::net::{Net, RECVS_PER_QP, SENDS_PER_QP};
use self::transport::{Event, Region, Slice, Transport};
use super::Workload;
use crate::session::{SessionError, Side};
use crate::validate::{self, Limits, OwnCheck, ValidationError};
use crate::verbs::{Access, BufId, LocalSlice, SendOp, SendWr};
use crate::wr_id::{OpKind, WrId};

pub use self::net::peer_at;

/// The smallest size of a sweep, as nccl-tests' `-b 8`.
const SWEEP_MIN: u64 = 8;
/// Bytes of the staging area where peers' partial sums land in one
/// operation of `count` elements: one buffer for the ring, one per step for
/// recursive doubling (a later step's partner may write before this rank
/// has added the earlier step's), a slot per rank on a reduce's root (rank
/// q's buffer at slot q), none outside the reductions.
fn staging_used(op: Collective, world: usize, count: usize, is_root: bool) -> usize {
    let bytes = count * ELEMENT;
    if uses_doubling(op, world, count) {
        world.trailing_zeros() as usize * bytes
    } else if matches!(op, Collective::Allreduce | Collective::ReduceScatter) {
        bytes
    } else if op == Collective::Reduce && is_root {
        world * bytes
    } else {
        0
    }
}

/// Bytes of the staging area a run up to `count` elements needs: the most
/// any of its sizes uses (the largest, or the largest that doubles).
fn staging_len(op: Collective, world: usize, count: usize, is_root: bool) -> usize {
    staging_used(op, world, count, is_root).max(staging_used(op, world, count.min(DOUBLING_MAX / ELEMENT), is_root))
}

/// One collective, run by every rank's agent.
pub struct CollectiveWorkload {
    /// The registry name ("allreduce").
    pub name: &'static str,
    /// The operation.
    pub op: Collective,
}

/// The rank's place in the run (validated: present, rank and root < world).
pub fn place(params: &WorkloadParams) -> CollectiveParams {
    params.collective.unwrap_or_default()
}

/// The operation a request names.
pub fn op_of(params: &WorkloadParams) -> Option<Collective> {
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
/// reductions' staging area; an incast root's output holds every rank's, a
/// reduce root's staging area a slot per rank; their senders expose nothing
/// that is written (one element, as a region cannot be empty).
fn exposed_len(op: Collective, rank: usize, world: usize, root: usize, count: usize) -> usize {
    let bytes = count * ELEMENT;
    match op {
        Collective::Incast if rank == root => world * bytes,
        Collective::Incast | Collective::Reduce if rank != root => ELEMENT,
        Collective::Allreduce | Collective::ReduceScatter | Collective::Reduce => {
            bytes + staging_len(op, world, count, rank == root)
        }
        _ => bytes,
    }
}

/// The byte lengths of a rank's input and exposed regions for its request
/// (at the run's largest size).
pub fn region_lens(op: Collective, params: &WorkloadParams) -> (usize, usize) {
    let place = place(params);
    let world = place.world as usize;
    let count = elements_of(op, max_size(params), world);
    (
        count * ELEMENT,
        exposed_len(op, place.rank as usize, world, place.root as usize, count),
    )
}

/// The largest size a run uses.
fn max_size(params: &WorkloadParams) -> u64 {
    if params.all_sizes {
        validate::effective_max_size(params)
    } else {
        params.size
    }
}

/// The request checks every collective has, over verbs or libfabric.
pub fn check_request(params: &WorkloadParams, limits: &Limits) -> Result<(), ValidationError> {
    let Some(op) = op_of(params) else {
        return Ok(());
    };
    let Some(place) = params.collective.as_ref() else {
        return Err(ValidationError::Missing { field: "collective" });
    };
    validate::check_range("collective.world", place.world.into(), 2, MAX_RANKS.into(), "2 ..= 16")?;
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
    let (input, exposed) = region_lens(op, params);
    let factor = ((input + exposed) as u64).div_ceil(max_size(params).max(1)).max(1);
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
        let (input_len, exposed_len) = region_lens(self.op, &side.params);
        let input = side.link.add_buffer(input_len, Access::Local)?;
        let exposed = side.link.add_buffer(exposed_len, Access::Remote)?;
        side.bufs = vec![input];
        side.exposed = Some(exposed);
        // Receives first: a peer may write as soon as its QP and ours are ready.
        VerbsRanks::post_receives(side)
    }

    fn run(&self, side: &mut Side) -> Result<SideResult, SessionError> {
        let world = place(&side.params).world as usize;
        if side.peers.len() != world - 1 || side.recvs.is_none() {
            return Err(SessionError::Setup(format!(
                "rank {} of {world} has {} peer buffers, expected {}",
                place(&side.params).rank,
                side.peers.len(),
                world - 1
            )));
        }
        let params = side.params.clone();
        let mut ranks = VerbsRanks {
            input: side.bufs[0],
            exposed: side.exposed.expect("prepared"),
            side: &mut *side,
        };
        let outcome = run_ranks(&mut ranks, self.op, &params)?;
        let mut result = side.base_result();
        result.elapsed_s = side.elapsed().as_secs_f64();
        result.cpu = Some(side.cpu());
        outcome.into_result(&mut result, self.op, &params);
        Ok(result)
    }
}

/// What one rank's run measured and found.
pub struct Outcome {
    /// One point per size.
    pub points: Vec<CollectivePoint>,
    /// Bytes this rank's writes carried.
    pub sent_bytes: u64,
    /// Operations run, warm-up included.
    pub ops: u64,
    /// The first wrong element: size, operation and what was wrong.
    first_wrong: Option<(u64, u64, Wrong)>,
}

impl Outcome {
    /// Fills a rank's result: bytes, ops, the verdict, facts and points.
    pub fn into_result(self, result: &mut SideResult, op: Collective, params: &WorkloadParams) {
        let place = place(params);
        let rank = place.rank;
        result.bytes = self.sent_bytes;
        result.ops = self.ops;
        let checked: u64 = self.points.iter().map(|p| p.checked).sum();
        let wrong: u64 = self.points.iter().map(|p| p.wrong).sum();
        super::verdict(
            result,
            match self.first_wrong {
                None => Ok(format!(
                    "rank {rank}: {checked} elements checked over {} operations, all as expected",
                    self.ops
                )),
                Some((size, op, w)) => Err(format!(
                    "rank {rank}: {wrong} of {checked} elements wrong; first: operation {op} of size {size} B, element {}: expected {}, found {}",
                    w.element, w.expected, w.found
                )),
            },
        );
        result.facts.insert("rank".into(), rank.to_string());
        result.facts.insert("world".into(), place.world.to_string());
        result.facts.insert("algorithm".into(), op.algorithm().into());
        result.collective = self.points;
    }
}

/// Runs a rank's operations over `t`: every size, each operation poisoned,
/// behind a barrier, timed and checked.
pub fn run_ranks(t: &mut dyn Transport, op: Collective, params: &WorkloadParams) -> Result<Outcome, SessionError> {
    let place = place(params);
    let (rank, world, root) = (place.rank as usize, place.world as usize, place.root as usize);
    let mut net = Net::new(t, rank, world);
    let seed = params.seed;
    let fault = params.fault();
    let mut points = Vec::new();
    let mut sent_bytes = 0u64;
    let mut ops = 0u64;
    let mut first_wrong: Option<(u64, u64, Wrong)> = None;
    let deadline = timed_until(params);
    let layout = Layout {
        staging: elements_of(op, max_size(params), world) * ELEMENT,
    };
    for size in sizes(params, op, world) {
        let shape = OpShape {
            op,
            world,
            root,
            count: elements_of(op, size, world),
        };
        prepare_input(t, &shape, rank, seed, fault);
        if fault == Fault::Skip && rank == fault_rank(&shape) && ops == 0 {
            net.skip_next_write();
        }
        let mut times = Vec::new();
        let (mut wrong, mut checked) = (0u64, 0u64);
        let warmup = u64::from(place.warmup);
        for k in 0u64.. {
            poison(t, &shape, &layout, rank);
            let go = if rank == 0 {
                let done = match deadline {
                    Some(until) => k > warmup && Instant::now() >= until,
                    None => k >= warmup + params.iterations.clamp(1, MAX_ITERATIONS),
                };
                !done
            } else {
                true
            };
            let what = format!("size {size} B, operation {}", k + 1);
            if !net.barrier(t, go, &what)? {
                break;
            }
            let started = Instant::now();
            run_op(t, &mut net, &shape, &layout, rank, &what)?;
            let took = started.elapsed();
            let (c, w, first) = check(&shape, seed, rank, t.regions_mut().1);
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
        t.progress(
            sent_bytes,
            ops,
            format!("{} B: {:.1} us per operation, {wrong} wrong", point.size, point.time_us),
        );
        points.push(point);
    }
    Ok(Outcome {
        points,
        sent_bytes,
        ops,
        first_wrong,
    })
}

/// A verbs rank: one RC QP per other rank (QP i faces the i-th other rank),
/// WRITE_WITH_IMM into the peer's exposed buffer, a receive per immediate.
struct VerbsRanks<'a> {
    side: &'a mut Side,
    input: BufId,
    exposed: BufId,
}

impl VerbsRanks<'_> {
    /// Posts the receives of every QP (each QP's receive request carries
    /// the QP's index as its wr_id, and is posted again as it completes).
    fn post_receives(side: &mut Side) -> Result<(), SessionError> {
        let qps = side.link.num_qps();
        let slices: Vec<LocalSlice> = (0..qps)
            .map(|_| LocalSlice {
                buf: side.bufs[0],
                offset: 0,
                len: 0,
            })
            .collect();
        let mut chain = side.link.recv_chain(&slices, OpKind::Recv.wr_id(0))?;
        for qp in 0..qps {
            for _ in 0..RECVS_PER_QP {
                side.link.post_recv_one_on(qp, &mut chain, qp)?;
            }
        }
        side.recvs = Some(chain);
        Ok(())
    }

    fn rank(&self) -> usize {
        place(&self.side.params).rank as usize
    }
}

impl Transport for VerbsRanks<'_> {
    fn post_write(&mut self, to: usize, src: Slice, offset: u64, imm: u32) -> Result<(), SessionError> {
        let local = LocalSlice {
            buf: match src.region {
                Region::Input => self.input,
                Region::Exposed => self.exposed,
            },
            offset: src.offset,
            len: src.len,
        };
        let remote = self.side.peers[to];
        let mut chain = self.side.link.send_chain(&[SendWr {
            wr_id: OpKind::WriteImm.wr_id(to as u64),
            op: SendOp::WriteImm {
                local,
                remote_addr: remote.addr + offset,
                rkey: remote.rkey,
                imm,
            },
            signaled: true,
            inline: false,
        }])?;
        self.side.link.post_send_on(to, &mut chain)?;
        Ok(())
    }

    fn next_event(&mut self) -> Result<Event, SessionError> {
        let rank = self.rank();
        let c = self.side.next_completion("a completion").map_err(|e| match e {
            SessionError::Completion { wr_id, .. } => SessionError::OnQp {
                peer: format!("rank {}", net::peer_at(rank, WrId::from(wr_id).seq() as usize)),
                source: Box::new(e),
            },
            other => other,
        })?;
        let id = WrId::from(c.wr_id);
        let qp = id.seq() as usize;
        if qp >= self.side.link.num_qps() {
            return Err(SessionError::Protocol(format!(
                "completion of unknown wr_id {:#x}",
                c.wr_id
            )));
        }
        if !id.is(OpKind::Recv) {
            return Ok(Event::Sent { to: qp });
        }
        if !c.has_imm {
            return Err(SessionError::Protocol(format!(
                "a message without immediate arrived on QP {qp}"
            )));
        }
        let mut chain = self.side.recvs.take().expect("receives posted");
        let posted = self.side.link.post_recv_one_on(qp, &mut chain, qp);
        self.side.recvs = Some(chain);
        posted?;
        Ok(Event::Arrived {
            from: Some(qp),
            imm: c.imm,
        })
    }

    fn in_order(&self) -> bool {
        true
    }

    fn regions_mut(&mut self) -> (&mut [u8], &mut [u8]) {
        self.side.link.buffer_pair_mut(self.input, self.exposed)
    }

    fn note(&mut self, key: &str, value: String) {
        self.side.facts.insert(key.into(), value);
    }

    fn progress(&mut self, bytes: u64, ops: u64, message: String) {
        self.side.progress("run", bytes, ops, message);
    }
}

/// Until when a timed run goes on (None: a counted run).
fn timed_until(params: &WorkloadParams) -> Option<Instant> {
    (params.iterations == 0 && params.duration_s > 0.0).then(|| Instant::now() + validate::duration(params))
}

/// The rank whose data a fault spoils: one whose first write carries data
/// (the ring's chunks may be empty when there are fewer elements than ranks).
fn fault_rank(shape: &OpShape) -> usize {
    let n = shape.world;
    match shape.op {
        Collective::Allreduce | Collective::Allgather => n - 1,
        Collective::ReduceScatter | Collective::Alltoall => 0,
        Collective::Broadcast => shape.root,
        Collective::Incast | Collective::Reduce => (shape.root + 1) % n,
    }
}

/// Fills this rank's input for `shape`; a corrupt run then flips a byte of
/// one element that reaches a result.
fn prepare_input(t: &mut dyn Transport, shape: &OpShape, rank: usize, seed: u64, fault: Fault) {
    let bytes = shape.count * ELEMENT;
    let (input, _) = t.regions_mut();
    fill_input(&mut input[..bytes], seed, rank, 0..shape.count);
    if fault == Fault::Corrupt && rank == fault_rank(shape) {
        let e = match shape.op {
            Collective::Alltoall => ((rank + 1) % shape.world) * shape.block(),
            _ => shape.count - 1,
        };
        let offset = e * ELEMENT + 3;
        input[offset] ^= 0xFF;
        t.note(
            "fault",
            format!("corrupt: byte {offset} of rank {rank}'s input (element {e}) flipped"),
        );
    }
}

/// Fills what the operation will write with all-ones bytes (a NaN), so
/// that an element no write reached cannot pass for a result.
fn poison(t: &mut dyn Transport, shape: &OpShape, layout: &Layout, rank: usize) {
    let bytes = shape.count * ELEMENT;
    let (_, buf) = t.regions_mut();
    let out = match shape.op {
        Collective::Incast if rank == shape.root => shape.world * bytes,
        Collective::Incast | Collective::Reduce if rank != shape.root => 0,
        _ => bytes,
    };
    buf[..out].fill(0xFF);
    let staging = staging_used(shape.op, shape.world, shape.count, rank == shape.root);
    if staging > 0 {
        buf[layout.staging..layout.staging + staging].fill(0xFF);
    }
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
        // A reduce root: its output, then a staging slot per rank.
        assert_eq!(exposed_len(Collective::Reduce, 0, 4, 0, 10), 40 + 160);
        assert_eq!(exposed_len(Collective::Reduce, 2, 4, 0, 10), ELEMENT);
        // The reductions' staging: one buffer for the ring, one per step
        // of recursive doubling (two on four ranks) at its sizes.
        assert_eq!(exposed_len(Collective::Allreduce, 1, 4, 0, 10), 40 + 2 * 40);
        assert_eq!(exposed_len(Collective::Allreduce, 1, 3, 0, 10), 40 + 40);
        assert_eq!(exposed_len(Collective::ReduceScatter, 1, 4, 0, 10), 40 + 40);
        let big = 1 << 20;
        assert_eq!(exposed_len(Collective::Allreduce, 1, 4, 0, big), 8 * big);
        assert_eq!(exposed_len(Collective::Broadcast, 1, 4, 0, 10), 40);
    }
}
