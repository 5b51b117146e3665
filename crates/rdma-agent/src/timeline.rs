//! A transfer's progress over time, kept small: one sample per chunk is
//! offered, at most [`MAX_POINTS`] are returned, evenly spaced over the run
//! and always ending with the last sample (the whole transfer).
//!
//! Memory stays bounded however many chunks a run has: the recorder keeps
//! every `stride`-th sample and, when it holds twice [`MAX_POINTS`], drops
//! every other one and doubles the stride.

use agent_proto::v1::TimelinePoint;

/// Most points a timeline returns.
pub const MAX_POINTS: usize = 200;

/// Records (seconds, bytes so far) samples.
#[derive(Debug)]
pub struct Timeline {
    points: Vec<TimelinePoint>,
    stride: u64,
    offered: u64,
    last: Option<TimelinePoint>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline::new()
    }
}

impl Timeline {
    /// An empty timeline.
    pub fn new() -> Timeline {
        Timeline {
            points: Vec::with_capacity(2 * MAX_POINTS),
            stride: 1,
            offered: 0,
            last: None,
        }
    }

    /// Offers the sample "`bytes` moved after `t_s` seconds".
    pub fn record(&mut self, t_s: f64, bytes: u64) {
        let point = TimelinePoint { t_s, bytes };
        if self.offered.is_multiple_of(self.stride) {
            self.points.push(point);
            if self.points.len() >= 2 * MAX_POINTS {
                // Keep the samples whose index is a multiple of the new stride.
                let mut i = 0;
                self.points.retain(|_| {
                    i += 1;
                    (i - 1) % 2 == 0
                });
                self.stride *= 2;
            }
        }
        self.offered += 1;
        self.last = Some(point);
    }

    /// How many samples were offered.
    pub fn offered(&self) -> u64 {
        self.offered
    }

    /// The kept samples, at most [`MAX_POINTS`], ending with the last one offered.
    pub fn finish(self) -> Vec<TimelinePoint> {
        let mut points = self.points;
        if let Some(last) = self.last {
            if points.last() != Some(&last) {
                points.push(last);
            }
        }
        downsample(points, MAX_POINTS)
    }
}

/// At most `cap` of `points`, evenly spaced by index, keeping the first and the last.
pub fn downsample<T: Clone>(points: Vec<T>, cap: usize) -> Vec<T> {
    if points.len() <= cap || cap == 0 {
        return if cap == 0 { Vec::new() } else { points };
    }
    if cap == 1 {
        return points.last().cloned().into_iter().collect();
    }
    let last = points.len() - 1;
    (0..cap)
        .map(|i| points[(i * last + (cap - 1) / 2) / (cap - 1)].clone())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_short_runs_keep_every_sample() {
        let mut t = Timeline::new();
        for i in 1..=10u64 {
            t.record(i as f64 * 0.1, i * 1024);
        }
        let points = t.finish();
        assert_eq!(points.len(), 10);
        assert_eq!(points[0].bytes, 1024);
        assert_eq!(points[9].bytes, 10 * 1024);
    }

    #[test]
    fn test_long_runs_are_capped_evenly_and_end_at_the_total() {
        let n = 1_000_003u64;
        let mut t = Timeline::new();
        for i in 1..=n {
            t.record(i as f64, i * 4096);
        }
        assert!(t.points.len() < 2 * MAX_POINTS, "memory stays bounded");
        let points = t.finish();
        assert_eq!(points.len(), MAX_POINTS);
        assert_eq!(points.first().unwrap().bytes, 4096, "the first sample is kept");
        assert_eq!(
            points.last().unwrap().bytes,
            n * 4096,
            "the last sample is the whole transfer"
        );
        assert!(points
            .windows(2)
            .all(|w| w[0].t_s < w[1].t_s && w[0].bytes < w[1].bytes));
        // Evenly spaced: every gap is within a factor of two of the average
        // (the kept samples are a stride apart, the final one may be closer).
        let avg = n as f64 / (MAX_POINTS - 1) as f64;
        let gaps: Vec<f64> = points.windows(2).map(|w| w[1].t_s - w[0].t_s).collect();
        for g in &gaps[..gaps.len() - 1] {
            assert!(*g > avg / 2.0 && *g < avg * 2.0, "gap {g} vs average {avg}");
        }
    }

    #[test]
    fn test_downsample_keeps_ends_and_spacing() {
        let v: Vec<u32> = (0..1000).collect();
        let d = downsample(v.clone(), 11);
        assert_eq!(d, vec![0, 100, 200, 300, 400, 500, 599, 699, 799, 899, 999]);
        assert_eq!(downsample(v.clone(), 1000), v);
        assert_eq!(downsample(v.clone(), 1), vec![999]);
        assert!(downsample(v, 0).is_empty());
        assert_eq!(downsample(vec![1, 2], 5), vec![1, 2]);
    }

    #[test]
    fn test_an_empty_timeline_is_empty() {
        assert!(Timeline::new().finish().is_empty());
    }
}
