//! Bandwidth and latency math, following perftest's conventions so numbers
//! compare with `ib_write_bw`/`ib_write_lat`: MiB/s = bytes / 2^20 / s,
//! Gb/s = bits / 1e9 / s, message rate in Mpps; bandwidth peak and average
//! from post and completion times as perftest's report is ([`PostClock`]);
//! latency in microseconds, computed from the samples as perftest's report
//! line is (its median, tail dropping and picks), with every sample's
//! figures beside them.

use std::time::Duration;

use agent_proto::v1::{Bandwidth, Latency, LatencyAllSamples};

mod post_clock;

pub use post_clock::PostClock;

const MIB: f64 = 1024.0 * 1024.0;

/// Bandwidth of `bytes` moved in `ops` messages over `elapsed`, with the peak
/// taken over the given windows (bytes, duration) if any: the workloads that
/// have no perftest counterpart.
pub fn bandwidth(bytes: u64, ops: u64, elapsed: Duration, windows: &[(u64, Duration)]) -> Bandwidth {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return Bandwidth::default();
    }
    let avg_mib_s = bytes as f64 / MIB / secs;
    let peak_mib_s = best_window(windows).fold(avg_mib_s, f64::max);
    Bandwidth {
        peak_mib_s,
        avg_mib_s,
        avg_gbps: bytes as f64 * 8.0 / 1e9 / secs,
        msg_rate_mpps: ops as f64 / 1e6 / secs,
        peak_window_mib_s: peak_mib_s,
    }
}

/// Bandwidth of a perftest pair's run of `ops` messages of `size` bytes, as
/// `print_report_bw` computes it from the run's post and completion times
/// (see [`PostClock`]): average over first post → last completion, peak by
/// perftest's definition (0 when not measured, as perftest prints it). The
/// best window of the run stays beside it in `peak_window_mib_s`.
pub fn perftest_bandwidth(size: u64, ops: u64, clock: &PostClock, windows: &[(u64, Duration)]) -> Bandwidth {
    let secs = clock.span_s();
    if secs <= 0.0 {
        return Bandwidth::default();
    }
    let bytes = size * ops;
    let avg_mib_s = bytes as f64 / MIB / secs;
    let peak_mib_s = clock
        .peak_ns_per_request()
        .filter(|ns| *ns > 0.0)
        .map_or(0.0, |ns| size as f64 / MIB / (ns / 1e9));
    Bandwidth {
        peak_mib_s,
        avg_mib_s,
        avg_gbps: bytes as f64 * 8.0 / 1e9 / secs,
        msg_rate_mpps: ops as f64 / 1e6 / secs,
        peak_window_mib_s: best_window(windows).fold(avg_mib_s, f64::max),
    }
}

fn best_window(windows: &[(u64, Duration)]) -> impl Iterator<Item = f64> + '_ {
    windows
        .iter()
        .filter(|(_, d)| !d.is_zero())
        .map(|(b, d)| *b as f64 / MIB / d.as_secs_f64())
}

/// Splits a run into windows for the peak: records (bytes, time) every
/// `window` of wall time, allocation-free after construction.
#[derive(Debug)]
pub struct PeakTracker {
    window: Duration,
    window_start: std::time::Instant,
    window_bytes: u64,
    windows: Vec<(u64, Duration)>,
}

impl PeakTracker {
    /// A tracker with windows of `window` (perftest uses the whole run; we
    /// keep short windows so a run's burst shows as its peak).
    pub fn new(window: Duration) -> PeakTracker {
        PeakTracker {
            window,
            window_start: std::time::Instant::now(),
            window_bytes: 0,
            windows: Vec::with_capacity(1024),
        }
    }

    /// Counts `bytes` completed now.
    pub fn add(&mut self, bytes: u64) {
        self.window_bytes += bytes;
        let elapsed = self.window_start.elapsed();
        if elapsed >= self.window && self.windows.len() < self.windows.capacity() {
            self.windows.push((self.window_bytes, elapsed));
            self.window_bytes = 0;
            self.window_start = std::time::Instant::now();
        }
    }

    /// The closed windows.
    pub fn windows(&self) -> &[(u64, Duration)] {
        &self.windows
    }
}

/// How many of the largest samples perftest leaves out of its latency
/// figures (`LAT_MEASURE_TAIL` in perftest_parameters.c).
pub const PERFTEST_DROPPED_TAIL: usize = 2;

/// Latency statistics of one-way or round-trip samples, in microseconds,
/// computed as perftest's `print_report_lat` does (see the `Latency`
/// message), plus every sample's figures in `all_samples`. `samples_us` is
/// sorted in place.
pub fn latency(samples_us: &mut [f64]) -> Latency {
    let n = samples_us.len();
    if n == 0 {
        return Latency::default();
    }
    samples_us.sort_by(|a, b| a.total_cmp(b));
    let sorted = &*samples_us;
    // perftest has no rule for fewer than three samples; keep at least one.
    let kept_count = n.saturating_sub(PERFTEST_DROPPED_TAIL).max(1);
    let kept = &sorted[..kept_count];
    // perftest indexes past the kept samples for t_max and the 99.9th
    // percentile (into the dropped tail); the same picks, clamped to the end.
    let pick = |i: usize| sorted[i.min(n - 1)];
    let avg = mean(kept);
    let truncated_variance = kept.iter().map(|s| ((avg - s).trunc()).powi(2)).sum::<f64>() / kept_count as f64;
    let all_avg = mean(sorted);
    Latency {
        min_us: sorted[0],
        max_us: pick(kept_count),
        typical_us: perftest_median(kept),
        avg_us: avg,
        stdev_us: truncated_variance.sqrt(),
        p99_us: pick((kept_count as f64 * 0.99).ceil() as usize),
        p999_us: pick((kept_count as f64 * 0.999).ceil() as usize),
        samples: n as u64,
        all_samples: Some(LatencyAllSamples {
            max_us: sorted[n - 1],
            median_us: percentile_sorted(sorted, 50.0),
            avg_us: all_avg,
            stdev_us: (sorted.iter().map(|s| (s - all_avg).powi(2)).sum::<f64>() / n as f64).sqrt(),
            p99_us: percentile_sorted(sorted, 99.0),
            p999_us: percentile_sorted(sorted, 99.9),
        }),
    }
}

fn mean(samples: &[f64]) -> f64 {
    samples.iter().sum::<f64>() / samples.len() as f64
}

/// perftest's `get_median`: the middle sample of an odd count, the mean of
/// the middle two of an even one.
fn perftest_median(sorted: &[f64]) -> f64 {
    let n = sorted.len();
    if n.is_multiple_of(2) {
        (sorted[n / 2] + sorted[n / 2 - 1]) / 2.0
    } else {
        sorted[n / 2]
    }
}

/// Nearest-rank percentile of sorted samples.
pub fn percentile_sorted(sorted: &[f64], pct: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    // The epsilon keeps 99.9% of 1000 at rank 999 despite float rounding.
    let rank = ((pct / 100.0) * sorted.len() as f64 - 1e-9).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bandwidth_uses_mib_for_bytes_and_decimal_gbits() {
        let bw = bandwidth(8 * 1024 * 1024, 128, Duration::from_secs(2), &[]);
        assert!((bw.avg_mib_s - 4.0).abs() < 1e-9);
        assert!((bw.avg_gbps - 8.0 * 1024.0 * 1024.0 * 8.0 / 1e9 / 2.0).abs() < 1e-9);
        assert!((bw.msg_rate_mpps - 64.0 / 1e6).abs() < 1e-12);
        assert_eq!(bw.peak_mib_s, bw.avg_mib_s);
    }

    #[test]
    fn bandwidth_peak_is_the_best_window() {
        let windows = [
            (1024 * 1024, Duration::from_millis(500)),
            (3 * 1024 * 1024, Duration::from_millis(500)),
        ];
        let bw = bandwidth(4 * 1024 * 1024, 4, Duration::from_secs(1), &windows);
        assert!((bw.peak_mib_s - 6.0).abs() < 1e-9);
        assert!((bw.avg_mib_s - 4.0).abs() < 1e-9);
    }

    #[test]
    fn bandwidth_of_zero_time_is_zero() {
        assert_eq!(bandwidth(10, 1, Duration::ZERO, &[]), Bandwidth::default());
    }

    #[test]
    fn latency_statistics_drop_the_tail_like_perftest() {
        let mut samples: Vec<f64> = (1..=1000).map(f64::from).collect();
        samples.reverse();
        let lat = latency(&mut samples);
        // 998 samples kept (999 and 1000 dropped): median of an even count.
        assert_eq!(lat.min_us, 1.0);
        assert_eq!(lat.typical_us, 499.5);
        assert!((lat.avg_us - 499.5).abs() < 1e-9);
        // perftest's picks: sorted[998], sorted[ceil(998 * 0.99)], sorted[ceil(998 * 0.999)].
        assert_eq!((lat.max_us, lat.p99_us, lat.p999_us), (999.0, 990.0, 999.0));
        assert_eq!(lat.samples, 1000);
        let all = lat.all_samples.unwrap();
        assert_eq!(
            (all.max_us, all.median_us, all.p99_us, all.p999_us),
            (1000.0, 500.0, 990.0, 999.0)
        );
        assert!((all.avg_us - 500.5).abs() < 1e-9);
        // Population stdev of 1..=n is sqrt((n^2 - 1) / 12).
        assert!((all.stdev_us - ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt()).abs() < 1e-6);
    }

    /// perftest's `-U` output: the samples (`i, value` lines) and the
    /// figures of its report line.
    fn recorded(text: &str) -> (Vec<f64>, Vec<f64>) {
        let samples = text
            .lines()
            .filter_map(|l| l.split_once(", "))
            .filter(|(i, _)| i.parse::<u32>().is_ok())
            .map(|(_, v)| v.parse().unwrap())
            .collect();
        let report = text
            .lines()
            .rfind(|l| l.split_whitespace().count() == 9 && l.trim_start().starts_with(|c: char| c.is_ascii_digit()))
            .unwrap();
        let figures = report.split_whitespace().skip(2).map(|f| f.parse().unwrap()).collect();
        (samples, figures)
    }

    #[test]
    fn latency_figures_equal_perftests_from_the_same_samples() {
        for (tool, text) in [
            (
                "ib_write_lat",
                include_str!("../fixtures/perftest/ib_write_lat.client.U.txt"),
            ),
            (
                "ib_read_lat",
                include_str!("../fixtures/perftest/ib_read_lat.client.U.txt"),
            ),
        ] {
            let (mut samples, printed) = recorded(text);
            assert_eq!(samples.len(), 199, "{tool}: -n 200 gives 199 samples");
            let lat = latency(&mut samples);
            let ours = [
                lat.min_us,
                lat.max_us,
                lat.typical_us,
                lat.avg_us,
                lat.stdev_us,
                lat.p99_us,
                lat.p999_us,
            ];
            let names = ["t_min", "t_max", "t_typical", "t_avg", "t_stdev", "99%", "99.9%"];
            for ((name, ours), theirs) in names.iter().zip(ours).zip(&printed) {
                // -U prints samples with 6 significant digits, the report 2 decimals.
                assert!(
                    (ours - theirs).abs() <= 0.01 + 1e-5 * theirs.abs(),
                    "{tool} {name}: ours {ours}, perftest printed {theirs}"
                );
            }
        }
    }

    #[test]
    fn latency_of_one_sample() {
        let lat = latency(&mut [7.5]);
        assert_eq!(
            (lat.min_us, lat.typical_us, lat.p999_us, lat.stdev_us),
            (7.5, 7.5, 7.5, 0.0)
        );
        assert_eq!(latency(&mut []), Latency::default());
    }

    #[test]
    fn peak_tracker_closes_windows() {
        let mut t = PeakTracker::new(Duration::ZERO);
        t.add(10);
        t.add(20);
        assert_eq!(t.windows().len(), 2);
        assert_eq!(t.windows()[1].0, 20);
    }
}
