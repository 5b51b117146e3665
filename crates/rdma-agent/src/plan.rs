//! The plan of a measured run (write-bw ... atomic-lat on verbs, fabric-bw
//! and fabric-lat on libfabric), read from the parameters once and the same
//! way for both: the sizes (one, or a sweep of powers of two), when each
//! size's loop stops (a count or a duration), and the requests kept
//! outstanding. It must not hold any transport's code.

use std::time::Duration;

use agent_proto::v1::WorkloadParams;

/// Iterations per size when neither iterations nor a duration is given.
pub const DEFAULT_ITERATIONS: u64 = 1000;
/// Outstanding requests when `tx_depth` is 0 (perftest's default).
pub const DEFAULT_TX_DEPTH: u32 = 128;

/// When one size's loop ends.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many operations.
    Count(u64),
    /// After this long (a timed run).
    After(Duration),
}

/// What a measured run does.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// The message sizes, in the order they run.
    pub sizes: Vec<u64>,
    /// When each size's loop ends.
    pub stop: Stop,
    /// Requests kept outstanding (bandwidth loops).
    pub tx_depth: usize,
}

impl Plan {
    /// The plan of validated `params`; a sweep (2 B, 4 B, ... max_size)
    /// stops at `largest`, the workload's own bound on one message.
    pub fn of(params: &WorkloadParams, largest: u64) -> Plan {
        let sizes = if params.all_sizes {
            let max = crate::validate::effective_max_size(params).min(largest);
            std::iter::successors(Some(2u64), |s| s.checked_mul(2))
                .take_while(|&s| s <= max)
                .collect()
        } else {
            vec![params.size.max(1)]
        };
        let stop = if params.iterations > 0 {
            Stop::Count(params.iterations)
        } else if params.duration_s > 0.0 {
            Stop::After(crate::validate::duration(params))
        } else {
            Stop::Count(DEFAULT_ITERATIONS)
        };
        let tx_depth = if params.tx_depth == 0 {
            DEFAULT_TX_DEPTH
        } else {
            params.tx_depth
        };
        Plan {
            sizes,
            stop,
            tx_depth: tx_depth as usize,
        }
    }

    /// The largest size (the buffers are this big).
    pub fn largest(&self) -> u64 {
        self.sizes.iter().copied().max().unwrap_or(1)
    }

    /// Operations per size, or None when the run is timed.
    pub fn iterations(&self) -> Option<u64> {
        match self.stop {
            Stop::Count(n) => Some(n),
            Stop::After(_) => None,
        }
    }

    /// How long a timed run lasts per size (zero when counted).
    pub fn duration(&self) -> Duration {
        match self.stop {
            Stop::Count(_) => Duration::ZERO,
            Stop::After(d) => d,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(size: u64, all_sizes: bool, max_size: u64) -> WorkloadParams {
        WorkloadParams {
            size,
            all_sizes,
            max_size,
            iterations: 10,
            ..Default::default()
        }
    }

    #[test]
    fn sizes_are_one_or_a_sweep_bounded_by_the_workload() {
        assert_eq!(Plan::of(&params(65536, false, 0), 16 << 20).sizes, [65536]);
        let sweep = Plan::of(&params(1, true, 0), 8192).sizes;
        assert_eq!((sweep[0], *sweep.last().unwrap(), sweep.len()), (2, 8192, 13));
        assert_eq!(Plan::of(&params(1, true, 0), u64::MAX).largest(), 8 << 20);
        assert_eq!(Plan::of(&params(1, true, 64), 8192).largest(), 64);
        assert_eq!(Plan::of(&params(0, false, 0), 8192).sizes, [1]);
    }

    #[test]
    fn stop_and_depth_have_perftest_defaults() {
        let mut p = params(1, false, 0);
        let plan = Plan::of(&p, u64::MAX);
        assert_eq!(
            (plan.stop, plan.iterations(), plan.tx_depth),
            (Stop::Count(10), Some(10), 128)
        );
        p.iterations = 0;
        assert_eq!(Plan::of(&p, u64::MAX).stop, Stop::Count(DEFAULT_ITERATIONS));
        p.duration_s = 0.5;
        p.tx_depth = 16;
        let plan = Plan::of(&p, u64::MAX);
        assert_eq!(
            (plan.iterations(), plan.duration(), plan.tx_depth),
            (None, Duration::from_millis(500), 16)
        );
    }
}
