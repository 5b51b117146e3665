//! The bandwidth client (write-bw, read-bw, send-bw, atomic-bw): every send
//! queue kept full by [`lanes::run`], one pre-built post list per QP (for
//! write-bw and read-bw one per `list` slots, [`super::slots`]), perftest's
//! clock. The per-request work of the checks is a few stores in the post
//! (write-bw's stamp, read-bw's cleared ends) and a few loads per completed
//! READ; whole messages are checked only after the loop.

use std::time::{Duration, Instant};

use agent_proto::v1::SizePoint;

use super::slots::{self, Sentinels, Slots};
use super::spec::{cq_moderation, planned_iterations, post_list, tx_depth, Perf, PerfOp};
use crate::metrics::{perftest_bandwidth, PeakTracker, PostClock};
use crate::session::{SessionError, Side};
use crate::verbs::{BufId, LocalSlice, SendChain, SendWr};
use crate::workload::{lanes, note_skip, pattern, OpKind};
use crate::wr_id::WrId;

/// What write-bw and read-bw do per request and per completion.
struct Slotted {
    slots: Slots,
    /// The client's buffer the slots are in.
    buf: BufId,
    /// read-bw: what each READ must bring; None for write-bw.
    sentinels: Option<Sentinels>,
    /// read-bw: per QP, the last request whose slot was checked.
    checked: Vec<u64>,
    /// read-bw: READs whose check failed, and the first one's description.
    misses: u64,
    first_miss: Option<String>,
    /// read-bw's fault skip: this request of QP 0 reads into `spare` instead of its slot.
    skip: Option<u64>,
    spare: usize,
}

impl Slotted {
    /// Before requests `first..=upto` of lane `qp` are posted: write-bw
    /// stamps their source slots, read-bw clears their ends.
    fn before_post(&self, side: &mut Side, qp: usize, first: u64, upto: u64) {
        let s = self.slots;
        for r in first..=upto {
            let off = s.offset(qp, r);
            match &self.sentinels {
                Some(ends) => ends.clear(side.link.slice_mut(self.buf, off, s.size)),
                None => slots::restamp(
                    side.link.slice_mut(self.buf, off, slots::stamp_len(s.size)),
                    s.previous(r),
                    r,
                ),
            }
        }
    }

    /// read-bw: lane `qp` completed every request up to `upto`.
    fn completed(&mut self, side: &Side, qp: usize, upto: u64) {
        let Some(ends) = self.sentinels else { return };
        let Some(checked) = self.checked.get_mut(qp) else {
            return;
        };
        for r in *checked + 1..=upto {
            if let Err(miss) = ends.check(side.link.slice(self.buf, self.slots.offset(qp, r), self.slots.size)) {
                self.misses += 1;
                self.first_miss
                    .get_or_insert_with(|| format!("READ {r} on QP {qp} {miss}"));
            }
        }
        *checked = upto.max(*checked);
    }

    /// Where request `r` of lane `qp` reads or writes locally.
    fn local(&self, qp: usize, r: u64) -> LocalSlice {
        let offset = if qp == 0 && self.skip == Some(r) {
            self.spare
        } else {
            self.slots.offset(qp, r)
        };
        LocalSlice {
            buf: self.buf,
            offset,
            len: self.slots.size,
        }
    }
}

/// A bandwidth client's send queues as [`lanes::run`] drives them.
struct PerfQueues<'a> {
    perf: &'a Perf,
    side: &'a mut Side,
    /// Per QP, its pre-built post lists: one, or one per `list` slots.
    chains: Vec<Vec<SendChain>>,
    list: usize,
    /// The one source or sink of send-bw and atomic-bw.
    local: LocalSlice,
    slotted: Option<Slotted>,
    /// When each post went out and each signaled completion came back.
    clock: PostClock,
    /// The same completions in 500 ms windows (the extra peak figure).
    windows: PeakTracker,
    size: u64,
}

impl PerfQueues<'_> {
    /// Request `r` of lane `qp`.
    fn wr(&self, qp: usize, r: u64, wr_id: u64, signaled: bool) -> SendWr {
        match &self.slotted {
            Some(s) => {
                // WRITEs land in the same slot of the server; READs all read its first bytes.
                let remote = if self.perf.op == PerfOp::Write {
                    s.slots.offset(qp, r)
                } else {
                    0
                };
                self.perf.op_wr_at(self.side, s.local(qp, r), remote, wr_id, signaled)
            }
            None => self.perf.op_wr(self.side, self.local, wr_id, signaled),
        }
    }
}

impl lanes::SendQueues for PerfQueues<'_> {
    fn post(&mut self, qp: usize, count: usize, upto: u64, signaled: bool) -> Result<(), SessionError> {
        let kind = self.perf.kind();
        let first = upto + 1 - count as u64;
        if let Some(s) = &self.slotted {
            s.before_post(self.side, qp, first, upto);
        }
        let groups = self.chains[qp].len() as u64;
        let list = self.list as u64;
        // A full post list covers the slots of the chain built for them.
        let prebuilt = count == self.list
            && match &self.slotted {
                None => true,
                // The fault skip's request goes out in a chain of its own.
                Some(s) => {
                    upto.is_multiple_of(list) && !(qp == 0 && s.skip.is_some_and(|r| (first..=upto).contains(&r)))
                }
            };
        if prebuilt {
            let chain = &mut self.chains[qp][((upto / list - 1) % groups) as usize];
            chain.set_signaled(count - 1, signaled);
            chain.set_wr_id(count - 1, kind.wr_id_on_lane(qp, upto));
            self.clock.posting(count as u64);
            return Ok(self.side.link.post_send_on(qp, chain)?);
        }
        let tail: Vec<SendWr> = (first..=upto)
            .map(|r| self.wr(qp, r, kind.wr_id_on_lane(qp, r), r == upto && signaled))
            .collect();
        let mut tail_chain = self.side.link.send_chain(&tail)?;
        self.clock.posting(count as u64);
        Ok(self.side.link.post_send_on(qp, &mut tail_chain)?)
    }

    fn next_completion(&mut self) -> Result<(usize, u64), SessionError> {
        let c = self.side.next_completion("bandwidth completions")?;
        let (qp, upto) = WrId::from(c.wr_id).lane();
        if let Some(s) = self.slotted.as_mut() {
            s.completed(self.side, qp, upto);
        }
        Ok((qp, upto))
    }

    fn finished(&mut self, requests: u64) {
        self.clock.completed(requests);
        self.windows.add(requests * self.size);
    }
}

impl Perf {
    /// One size of a bandwidth run. Returns its point and the requests each
    /// QP posted. `skip`: read-bw's fault (the first READ reads elsewhere).
    pub(super) fn measure_bandwidth(
        &self,
        side: &mut Side,
        size: usize,
        skip: bool,
        problems: &mut Vec<String>,
    ) -> Result<(SizePoint, Vec<u64>), SessionError> {
        // The client keeps every send queue full and waits only when they are
        // full: on the completion channel in event mode (the controller's
        // default for bandwidth runs: the sleep leaves the CPU to the RNIC's
        // work), else spinning between empty polls, as ib_*_bw does.
        let list = post_list(side);
        let buf = side.bufs[0];
        let local = LocalSlice {
            buf,
            offset: 0,
            len: size,
        };
        let slotted = self.slotted().then(|| {
            let slots = self.slots(side, size);
            Slotted {
                slots,
                buf,
                sentinels: (self.op == PerfOp::Read).then(|| Sentinels::of(&pattern(&side.params), size)),
                checked: vec![0; slots.lanes],
                misses: 0,
                first_miss: None,
                // Set once the post lists are built: they are reused for every request.
                skip: None,
                spare: self.slots_len(side),
            }
        });
        if let Some(s) = &slotted {
            side.facts.insert("slots_per_qp".into(), s.slots.per_lane.to_string());
            if skip {
                note_skip(
                    side,
                    format!("READ 1 on QP 0 at {size} B read into a spare buffer, not into its slot"),
                );
            }
        }
        // Fewer requests in flight when fewer slots fit (large messages).
        let depth = slotted
            .as_ref()
            .map_or(tx_depth(side), |s| s.slots.depth(tx_depth(side)));
        // Signal the last request of every `every`-th post; never let a full
        // queue hold only unsignaled requests (nothing would complete).
        let every = cq_moderation(side).div_ceil(list).min(depth / list).max(1);
        // One lane per QP, posted round-robin; like perftest's `-q`, each QP
        // runs `iterations` operations with up to `tx_depth` outstanding.
        let lane_count = side.link.num_qps();
        let mut queues = PerfQueues {
            perf: self,
            side,
            chains: Vec::with_capacity(lane_count),
            list,
            local,
            slotted,
            clock: PostClock::new(0),
            windows: PeakTracker::new(Duration::from_millis(500)),
            size: size as u64,
        };
        let groups = queues.slotted.as_ref().map_or(1, |s| s.slots.per_lane / list);
        for qp in 0..lane_count {
            let mut lane = Vec::with_capacity(groups);
            for g in 0..groups {
                let wrs: Vec<SendWr> = (0..list)
                    .map(|k| queues.wr(qp, (g * list + k + 1) as u64, 0, false))
                    .collect();
                lane.push(queues.side.link.send_chain(&wrs)?);
            }
            queues.chains.push(lane);
        }
        if let Some(s) = queues.slotted.as_mut() {
            s.skip = skip.then_some(1);
        }
        let schedule = lanes::Schedule {
            depth,
            list,
            every,
            planned: planned_iterations(queues.side),
        };
        let expected_posts = schedule.planned.map_or(0, |n| n as usize * lane_count / list);
        queues.clock = PostClock::new(expected_posts);
        let stop_at = Instant::now() + crate::validate::duration(&queues.side.params);
        let per_lane = lanes::run(&mut queues, lane_count, &schedule, || Instant::now() >= stop_at)?;
        let PerfQueues {
            side,
            clock,
            windows,
            slotted,
            ..
        } = queues;
        if let Some(s) = slotted {
            self.after_slots(side, &s, &per_lane, problems);
        }
        let posted: u64 = per_lane.iter().sum();
        let point = SizePoint {
            size: size as u64,
            iterations: posted,
            bw: Some(perftest_bandwidth(size as u64, posted, &clock, windows.windows())),
            lat: None,
        };
        Ok((point, per_lane))
    }

    /// After a size: read-bw's verdict on every READ and the full check of
    /// the slots' last READs; write-bw's source slots lose their stamps
    /// (the next size's slots lie elsewhere in the same bytes).
    fn after_slots(&self, side: &mut Side, s: &Slotted, per_lane: &[u64], problems: &mut Vec<String>) {
        let slots = s.slots;
        let size = slots.size;
        if s.sentinels.is_none() {
            for (qp, &count) in per_lane.iter().enumerate() {
                for j in 0..slots.used(count) {
                    let off = (qp * slots.per_lane + j) * size;
                    let head = side.link.slice_mut(s.buf, off, slots::stamp_len(size));
                    slots::restamp(head, slots.last_into(j, count), 0);
                }
            }
            return;
        }
        let total: u64 = per_lane.iter().sum();
        if let Some(first) = &s.first_miss {
            problems.push(format!(
                "read-bw at {size} B: {first}; {} of {total} READs failed their check",
                s.misses
            ));
            return;
        }
        let pat = pattern(&side.params);
        for (qp, &count) in per_lane.iter().enumerate() {
            for j in 0..slots.used(count) {
                let off = (qp * slots.per_lane + j) * size;
                if let Err(m) = pat.verify(side.link.slice(s.buf, off, size), 0) {
                    let r = slots.last_into(j, count);
                    problems.push(format!("read-bw at {size} B: READ {r} on QP {qp}: {m}"));
                    return;
                }
            }
        }
    }

    /// write-bw, after the last size: WRITEs the count the client claims for
    /// each QP after the server's slots, and waits for it to complete (the
    /// done message, posted next on the same QP, arrives after it).
    pub(super) fn send_counts(&self, side: &mut Side, counts: &[u64]) -> Result<(), SessionError> {
        let at = self.counts_offset(side);
        let len = 8 * counts.len();
        if side.peer.len < (at + len) as u64 {
            return Err(SessionError::Protocol(format!(
                "the server's buffer has {} B, write-bw needs {} (its slots and counts): are both agents the same version?",
                side.peer.len,
                at + len
            )));
        }
        let buf = side.bufs[0];
        slots::encode_counts(counts, side.link.slice_mut(buf, at, len));
        let local = LocalSlice { buf, offset: at, len };
        let wr_id = OpKind::Write.wr_id(0);
        let mut chain = side.link.send_chain(&[self.op_wr_at(side, local, at, wr_id, true)])?;
        side.link.post_send(&mut chain)?;
        while side.next_completion("the WRITE of the per-QP counts")?.wr_id != wr_id {}
        Ok(())
    }
}
