//! Bandwidth and latency math, following perftest's conventions so numbers
//! compare with `ib_write_bw`/`ib_write_lat`: MiB/s = bytes / 2^20 / s,
//! Gb/s = bits / 1e9 / s, message rate in Mpps; latency in microseconds with
//! "typical" being the median.

use std::time::Duration;

use agent_proto::v1::{Bandwidth, Latency};

const MIB: f64 = 1024.0 * 1024.0;

/// Bandwidth of `bytes` moved in `ops` messages over `elapsed`, with the peak
/// taken over the given windows (bytes, duration) if any.
pub fn bandwidth(bytes: u64, ops: u64, elapsed: Duration, windows: &[(u64, Duration)]) -> Bandwidth {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return Bandwidth::default();
    }
    let avg_mib_s = bytes as f64 / MIB / secs;
    let peak_mib_s = windows
        .iter()
        .filter(|(_, d)| !d.is_zero())
        .map(|(b, d)| *b as f64 / MIB / d.as_secs_f64())
        .fold(avg_mib_s, f64::max);
    Bandwidth {
        peak_mib_s,
        avg_mib_s,
        avg_gbps: bytes as f64 * 8.0 / 1e9 / secs,
        msg_rate_mpps: ops as f64 / 1e6 / secs,
    }
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

/// Latency statistics of one-way or round-trip samples, in microseconds.
/// `samples_us` is sorted in place.
pub fn latency(samples_us: &mut [f64]) -> Latency {
    let n = samples_us.len();
    if n == 0 {
        return Latency::default();
    }
    samples_us.sort_by(|a, b| a.total_cmp(b));
    let avg = samples_us.iter().sum::<f64>() / n as f64;
    let variance = samples_us.iter().map(|s| (s - avg) * (s - avg)).sum::<f64>() / n as f64;
    Latency {
        min_us: samples_us[0],
        max_us: samples_us[n - 1],
        typical_us: percentile_sorted(samples_us, 50.0),
        avg_us: avg,
        stdev_us: variance.sqrt(),
        p99_us: percentile_sorted(samples_us, 99.0),
        p999_us: percentile_sorted(samples_us, 99.9),
        samples: n as u64,
    }
}

/// Nearest-rank percentile of sorted samples (perftest picks an element, it
/// does not interpolate).
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
    fn latency_statistics() {
        let mut samples: Vec<f64> = (1..=1000).map(f64::from).collect();
        samples.reverse();
        let lat = latency(&mut samples);
        assert_eq!(lat.min_us, 1.0);
        assert_eq!(lat.max_us, 1000.0);
        assert_eq!(lat.typical_us, 500.0);
        assert!((lat.avg_us - 500.5).abs() < 1e-9);
        assert_eq!(lat.p99_us, 990.0);
        assert_eq!(lat.p999_us, 999.0);
        assert_eq!(lat.samples, 1000);
        // Population stdev of 1..=n is sqrt((n^2 - 1) / 12).
        assert!((lat.stdev_us - ((1000.0f64 * 1000.0 - 1.0) / 12.0).sqrt()).abs() < 1e-6);
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
