//! When each request of a bandwidth run was posted and when each signaled
//! completion arrived, so that the run's peak and average are computed as
//! perftest's `print_report_bw` computes them (perftest_parameters.c):
//!
//! - average: every request's bytes over the time from the first post to
//!   the last completion;
//! - peak: the smallest time per request over any stretch that starts at a
//!   post and ends at a later signaled completion,
//!   `min over i <= j of (completed[j] - posted[i]) / (j - i + 1)`,
//!   with `i` the first request of a post and `j` the last request a
//!   signaled completion covers (requests numbered across all QPs, in the
//!   order they were posted and completed, as perftest's totscnt/totccnt).
//!
//! perftest walks every (i, j) pair, which is why it gives up on the peak
//! beyond 20 000 iterations and for timed runs. [`PostClock::peak`] finds
//! the same minimum in a few linear passes (Dinkelbach's method for the
//! smallest ratio), so timed runs get a peak too, up to [`MAX_EVENTS`]
//! posts; past that the peak is not measured (0, as perftest prints it).

use std::time::Instant;

/// Posts (and signaled completions) recorded at most: 16 bytes each, so
/// 8 MiB per list at most, freed when the run's size point ends.
pub const MAX_EVENTS: usize = 1 << 19;

/// A request number and the clock reading (ns) taken with it.
pub type Stamp = (u64, u64);

/// The clock of one bandwidth run (one message size).
#[derive(Debug)]
pub struct PostClock {
    start: Instant,
    /// (number of the post's first request, ns since `start`), in order.
    posts: Vec<Stamp>,
    /// (number of the last request covered, ns since `start`), in order.
    completions: Vec<Stamp>,
    posted: u64,
    completed: u64,
    first_post_ns: Option<u64>,
    last_completion_ns: u64,
    /// More events than [`MAX_EVENTS`] came: the peak is not measured.
    overflowed: bool,
}

impl PostClock {
    /// A clock for a run of about `expected_posts` posts (a capacity hint).
    pub fn new(expected_posts: usize) -> PostClock {
        let capacity = expected_posts.min(MAX_EVENTS);
        PostClock {
            start: Instant::now(),
            posts: Vec::with_capacity(capacity),
            completions: Vec::new(),
            posted: 0,
            completed: 0,
            first_post_ns: None,
            last_completion_ns: 0,
            overflowed: false,
        }
    }

    fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// Call just before posting `requests` requests (one post list).
    pub fn posting(&mut self, requests: u64) {
        let t = self.now_ns();
        self.record_post(t, requests);
    }

    /// Call when a signaled completion covering `requests` requests arrived.
    pub fn completed(&mut self, requests: u64) {
        let t = self.now_ns();
        self.record_completion(t, requests);
    }

    fn record_post(&mut self, t_ns: u64, requests: u64) {
        self.first_post_ns.get_or_insert(t_ns);
        if self.posts.len() < MAX_EVENTS {
            self.posts.push((self.posted, t_ns));
        } else {
            self.overflowed = true;
        }
        self.posted += requests;
    }

    fn record_completion(&mut self, t_ns: u64, requests: u64) {
        if requests == 0 {
            return;
        }
        self.completed += requests;
        self.last_completion_ns = t_ns;
        if self.completions.len() < MAX_EVENTS {
            self.completions.push((self.completed - 1, t_ns));
        } else {
            self.overflowed = true;
        }
    }

    /// Seconds from the first post to the last completion (perftest's
    /// `tcompleted[last] - tposted[0]`); zero before any completion.
    pub fn span_s(&self) -> f64 {
        match self.first_post_ns {
            Some(first) if self.last_completion_ns > first => (self.last_completion_ns - first) as f64 / 1e9,
            _ => 0.0,
        }
    }

    /// The smallest nanoseconds per request over any post → later signaled
    /// completion stretch, or None when not measured (nothing completed,
    /// or more events than [`MAX_EVENTS`]).
    pub fn peak_ns_per_request(&self) -> Option<f64> {
        if self.overflowed {
            return None;
        }
        smallest_time_per_request(&self.posts, &self.completions)
    }
}

/// `min over (i, ti) in posts, (j, tj) in completions, i <= j of
/// (tj - ti) / (j - i + 1)`, both lists in increasing request order.
///
/// Dinkelbach's iteration: for a candidate ratio `r`, the pair that
/// minimises `(tj - ti) - r * (j - i + 1)` is found in one pass (for each
/// completion, the best post at or before it is a running maximum of
/// `ti - r * i`); if that minimum is negative its pair has a smaller ratio
/// and becomes the candidate, otherwise `r` is the minimum. Each step
/// strictly lowers `r` through a finite set of pair ratios, and in practice
/// it settles in a handful of passes.
pub fn smallest_time_per_request(posts: &[Stamp], completions: &[Stamp]) -> Option<f64> {
    let (&(first_post, t_first), &(last_done, t_last)) = (posts.first()?, completions.last()?);
    if last_done < first_post {
        return None;
    }
    let ratio_of = |(i, ti): Stamp, (j, tj): Stamp| (tj as f64 - ti as f64) / (j - i + 1) as f64;
    // The whole run is one admissible pair: a starting candidate.
    let mut best = ratio_of((first_post, t_first), (last_done, t_last));
    loop {
        let mut lead: Option<(Stamp, f64)> = None;
        let mut next_post = posts.iter().peekable();
        let mut found: Option<(f64, Stamp, Stamp)> = None;
        for &(j, tj) in completions {
            while let Some(&&(i, ti)) = next_post.peek() {
                if i > j {
                    break;
                }
                let value = ti as f64 - best * i as f64;
                if lead.is_none_or(|(_, v)| value > v) {
                    lead = Some(((i, ti), value));
                }
                next_post.next();
            }
            let Some((post, post_value)) = lead else { continue };
            // (tj - ti) - best * (j - i + 1) = (tj - best * (j + 1)) - (ti - best * i)
            let slack = (tj as f64 - best * (j + 1) as f64) - post_value;
            if found.is_none_or(|(s, _, _)| slack < s) {
                found = Some((slack, post, (j, tj)));
            }
        }
        match found {
            Some((slack, post, done)) if slack < 0.0 => {
                let ratio = ratio_of(post, done);
                // Rounding could stall the descent at the last ulp: stop there.
                if ratio >= best {
                    return Some(best);
                }
                best = ratio;
            }
            _ => return Some(best),
        }
    }
}

#[cfg(test)]
mod tests;
