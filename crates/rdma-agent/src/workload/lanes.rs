//! The schedule of a bandwidth run's send queues, apart from the verbs that
//! carry it out, so that it is tested against a fake completion queue.
//!
//! Each QP is a lane: the client keeps it full (up to `depth` requests in
//! flight, posted `list` at a time), signals the last request of every
//! `every`-th post (selective signaling: a signaled completion means every
//! earlier request on its QP completed, a send queue completes in order),
//! and waits only when every lane is full. A counted run posts exactly
//! `planned` requests per lane, ending with a shorter tail chain when the
//! count is not a multiple of `list`; a timed run stops posting when time is
//! up, after one last signaled post. Either way it returns only when every
//! posted request has completed.

use super::SessionError;

/// How the lanes are fed.
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// Requests in flight per QP at most (the send queue's depth).
    pub depth: usize,
    /// Requests per post (`post_list`), at most `depth`.
    pub list: usize,
    /// Every how many posts the last request is signaled (at most
    /// `depth / list`, so a full queue always holds a signaled request).
    pub every: usize,
    /// Requests per lane, or None for a timed run.
    pub planned: Option<u64>,
}

/// What the schedule needs of the send queues.
pub trait SendQueues {
    /// Posts requests `upto - count + 1 ..= upto` of lane `qp` (numbered
    /// from 1): the pre-built post list when `count` is the list length,
    /// else a one-off tail chain; the last request is signaled when
    /// `signaled`, and its completion names `(qp, upto)`.
    fn post(&mut self, qp: usize, count: usize, upto: u64, signaled: bool) -> Result<(), SessionError>;
    /// Waits for the next completion: the lane and number of the signaled
    /// request it ends.
    fn next_completion(&mut self) -> Result<(usize, u64), SessionError>;
    /// Told, right after [`SendQueues::next_completion`], how many requests
    /// that completion finished.
    fn finished(&mut self, requests: u64);
}

#[derive(Default)]
struct Lane {
    posted: u64,
    completed: u64,
    /// The last request covered by a signaled one.
    signaled: u64,
    posts: u64,
}

/// Runs `lanes` lanes to their end; `time_up` is asked once per round of
/// posting (timed runs). Returns the requests each lane posted.
pub fn run(
    queues: &mut impl SendQueues,
    lanes: usize,
    schedule: &Schedule,
    mut time_up: impl FnMut() -> bool,
) -> Result<Vec<u64>, SessionError> {
    let Schedule {
        depth,
        list,
        every,
        planned,
    } = *schedule;
    let mut state: Vec<Lane> = (0..lanes).map(|_| Lane::default()).collect();
    loop {
        let time_up = planned.is_none() && time_up();
        let mut posted_any = false;
        let mut all_done = true;
        for (q, lane) in state.iter_mut().enumerate() {
            let remaining = planned.map(|n| n.saturating_sub(lane.posted));
            // A timed lane is finished once its last posted request is signaled.
            let finished_posting = remaining == Some(0) || (time_up && lane.posted > 0 && lane.signaled == lane.posted);
            if finished_posting {
                all_done &= lane.completed == lane.posted;
                continue;
            }
            all_done = false;
            let in_flight = (lane.posted - lane.completed) as usize;
            if in_flight + list <= depth && remaining.is_none_or(|r| r >= list as u64) {
                lane.posts += 1;
                // The last full post is signaled (a shorter tail, if any, waits for it).
                let last_post = remaining.is_some_and(|r| r < 2 * list as u64) || time_up;
                let signaled = lane.posts % every as u64 == 0 || last_post;
                queues.post(q, list, lane.posted + list as u64, signaled)?;
                lane.posted += list as u64;
                if signaled {
                    lane.signaled = lane.posted;
                }
                posted_any = true;
            } else if remaining.is_some_and(|r| r < list as u64) && in_flight == 0 {
                // Tail shorter than post_list: a one-off chain, signaled.
                let r = remaining.unwrap_or(0);
                queues.post(q, r as usize, lane.posted + r, true)?;
                lane.posted += r;
                lane.signaled = lane.posted;
                posted_any = true;
            }
        }
        if all_done {
            return Ok(state.iter().map(|l| l.posted).collect());
        }
        if posted_any {
            continue;
        }
        // Every queue is full (or draining): wait for a completion.
        let (q, upto) = queues.next_completion()?;
        let lane = state
            .get_mut(q)
            .ok_or_else(|| SessionError::Protocol(format!("completion for QP #{q}, which this run does not have")))?;
        queues.finished(upto.saturating_sub(lane.completed));
        lane.completed = lane.completed.max(upto);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// Send queues that check what a real QP would refuse or hang on: more
    /// than `depth` requests in flight (the post fails), numbers that skip
    /// or repeat, and a wait while no signaled request is in flight (nothing
    /// would ever complete). Completions come back in order per QP, from
    /// the QPs in a seeded pseudo-random order.
    struct FakeQueues {
        depth: usize,
        /// Per QP: (last number of the post, signaled) in flight, and the
        /// last number posted and completed.
        in_flight: Vec<VecDeque<(u64, bool)>>,
        posted: Vec<u64>,
        completed: Vec<u64>,
        rng: u64,
        /// Per QP, the size of every post, in order.
        sizes: Vec<Vec<usize>>,
        /// Requests the schedule was told finished.
        finished: u64,
    }

    impl FakeQueues {
        fn new(lanes: usize, depth: usize, seed: u64) -> Self {
            FakeQueues {
                depth,
                in_flight: vec![VecDeque::new(); lanes],
                posted: vec![0; lanes],
                completed: vec![0; lanes],
                rng: seed | 1,
                sizes: vec![Vec::new(); lanes],
                finished: 0,
            }
        }
    }

    impl SendQueues for FakeQueues {
        fn post(&mut self, qp: usize, count: usize, upto: u64, signaled: bool) -> Result<(), SessionError> {
            assert!(count > 0, "an empty post on QP {qp}");
            assert_eq!(upto, self.posted[qp] + count as u64, "QP {qp}: numbers skip or repeat");
            let in_flight = (upto - self.completed[qp]) as usize;
            assert!(
                in_flight <= self.depth,
                "QP {qp}: {in_flight} in flight, depth {}",
                self.depth
            );
            self.posted[qp] = upto;
            self.in_flight[qp].push_back((upto, signaled));
            self.sizes[qp].push(count);
            Ok(())
        }

        fn next_completion(&mut self) -> Result<(usize, u64), SessionError> {
            let ready: Vec<usize> = (0..self.in_flight.len())
                .filter(|&q| self.in_flight[q].iter().any(|&(_, s)| s))
                .collect();
            assert!(!ready.is_empty(), "waiting with no signaled request in flight: a hang");
            // xorshift: which QP's next signaled request completes first.
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let q = ready[(self.rng % ready.len() as u64) as usize];
            while let Some((upto, signaled)) = self.in_flight[q].pop_front() {
                self.completed[q] = upto;
                if signaled {
                    return Ok((q, upto));
                }
            }
            unreachable!("QP {q} had a signaled request");
        }

        fn finished(&mut self, requests: u64) {
            self.finished += requests;
        }
    }

    impl FakeQueues {
        fn check_drained(&self) {
            for q in 0..self.posted.len() {
                assert_eq!(
                    self.completed[q], self.posted[q],
                    "QP {q} ended with requests in flight"
                );
            }
        }
    }

    /// The shapes the agent accepts: every `every` as perf computes it.
    fn schedule(depth: usize, list: usize, cq_moderation: usize, planned: Option<u64>) -> Schedule {
        let list = list.min(depth);
        Schedule {
            depth,
            list,
            every: cq_moderation.min(depth).div_ceil(list).min(depth / list).max(1),
            planned,
        }
    }

    #[test]
    fn counted_runs_post_exactly_the_count_and_drain() {
        let mut runs = 0;
        for lanes in [1, 3] {
            for depth in [1, 2, 7, 16, 128] {
                for list in [1, 2, 5, 16] {
                    for cq_moderation in [1, 3, 16, 100] {
                        for planned in [1, 2, 9, 100, 1001] {
                            let s = schedule(depth, list, cq_moderation, Some(planned));
                            let mut fake = FakeQueues::new(lanes, depth, planned ^ depth as u64);
                            let posted = run(&mut fake, lanes, &s, || unreachable!()).expect("a counted run ends");
                            assert_eq!(posted, vec![planned; lanes], "{s:?}");
                            assert_eq!(fake.finished, planned * lanes as u64, "{s:?}");
                            fake.check_drained();
                            runs += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(runs, 2 * 5 * 4 * 4 * 5);
    }

    #[test]
    fn a_count_that_is_not_a_multiple_of_the_list_ends_with_one_tail() {
        let s = schedule(16, 5, 16, Some(23));
        let mut fake = FakeQueues::new(1, 16, 7);
        let posted = run(&mut fake, 1, &s, || unreachable!()).unwrap();
        assert_eq!(posted, [23]);
        fake.check_drained();
        // 4 posts of 5, then a tail of 3 posted once the queue drained.
        assert_eq!(fake.sizes[0], [5, 5, 5, 5, 3]);
    }

    #[test]
    fn timed_runs_stop_posting_when_time_is_up_and_drain() {
        for (depth, list, cq_moderation) in [(1, 1, 1), (16, 4, 16), (128, 1, 16), (128, 16, 100), (7, 3, 2)] {
            for rounds in [0, 1, 5, 50] {
                let s = schedule(depth, list, cq_moderation, None);
                let mut fake = FakeQueues::new(2, depth, rounds + 1);
                let mut asked = 0;
                let posted = run(&mut fake, 2, &s, || {
                    asked += 1;
                    asked > rounds
                })
                .expect("a timed run ends");
                fake.check_drained();
                assert_eq!(fake.finished, posted.iter().sum::<u64>(), "{s:?}");
                // Whole post lists only, and at least one per lane.
                for p in posted {
                    assert!(p >= s.list as u64 && p.is_multiple_of(s.list as u64), "{s:?}: {p}");
                }
            }
        }
    }
}
