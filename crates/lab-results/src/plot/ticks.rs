//! Axis ticks: where they go and what they say, on linear axes (steps of
//! 1, 2 or 5 times a power of ten, with a unit) and power-of-two size
//! axes, handed to plotters as an axis that uses them and nothing else.

use std::ops::Range;

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;

/// Most ticks on a message-size axis (labels such as `128 KiB`).
const MAX_SIZE_TICKS: i64 = 12;

/// The unit of an axis's tick labels.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unit {
    /// Seconds, shown in s, ms or µs, whichever keeps the numbers short.
    Seconds,
    /// A fixed unit written after each number (`MiB/s`, `CPU s/GiB`).
    Fixed(String),
}

/// Where the ticks of a linear axis go and what each says: steps of 1, 2
/// or 5 times a power of ten, as many decimals as the step needs (so no
/// `0.15000000000000002`), then the unit.
#[derive(Debug, Clone, PartialEq)]
pub struct Ticks {
    /// Positions, in the axis's own values.
    pub at: Vec<f64>,
    /// One label per position.
    pub labels: Vec<String>,
}

/// At most `max` ticks (at least 2 where the range allows) over `lo..=hi`.
pub fn linear_ticks(lo: f64, hi: f64, max: usize, unit: &Unit) -> Ticks {
    let (scale, name) = match unit {
        Unit::Seconds => {
            let top = lo.abs().max(hi.abs());
            if top >= 1.0 || top == 0.0 {
                (1.0, "s")
            } else if top >= 1e-3 {
                (1e3, "ms")
            } else {
                (1e6, "µs")
            }
        }
        Unit::Fixed(name) => (1.0, name.as_str()),
    };
    let (lo_u, hi_u) = (lo * scale, hi * scale);
    let span = hi_u - lo_u;
    if !span.is_finite() || span <= 0.0 {
        return Ticks {
            at: vec![lo],
            labels: vec![format!("{} {name}", short(lo_u, 0))],
        };
    }
    // The step is m x 10^e, m one of 1, 2, 5; tick i is at i x m x 10^e.
    let raw = span / max.max(1) as f64;
    let mut e = raw.log10().floor() as i32;
    let m = match raw / 10f64.powi(e) {
        r if r <= 1.0 + 1e-9 => 1,
        r if r <= 2.0 + 1e-9 => 2,
        r if r <= 5.0 + 1e-9 => 5,
        _ => {
            e += 1;
            1
        }
    };
    let step = m as f64 * 10f64.powi(e);
    let first = (lo_u / step - 1e-9).ceil() as i64;
    let last = (hi_u / step + 1e-9).floor() as i64;
    let counts: Vec<i64> = (first..=last).map(|i| i * m).collect();
    let value = |k: i64| k as f64 * 10f64.powi(e);
    Ticks {
        at: counts.iter().map(|&k| value(k) / scale).collect(),
        labels: counts
            .iter()
            .map(|&k| {
                // As many decimals as the step has; tiny steps as `4e-8`.
                let number = match e {
                    0.. => short(value(k), 0),
                    -4..0 => short(value(k), (-e) as usize),
                    _ if k == 0 => "0".to_string(),
                    _ => format!("{k}e{e}"),
                };
                format!("{number} {name}")
            })
            .collect(),
    }
}

/// `v` with `decimals` decimals, never `-0`.
fn short(v: f64, decimals: usize) -> String {
    let text = format!("{v:.decimals$}");
    match text.strip_prefix('-') {
        Some(rest) if rest.chars().all(|c| c == '0' || c == '.') => rest.to_string(),
        _ => text,
    }
}

/// The ticks of a power-of-two size axis (values are log2 of bytes): one
/// per power of two, every second or more when there would be more than 12.
pub(super) fn log2_ticks(lo: f64, hi: f64) -> Ticks {
    let (first, last) = (lo.ceil() as i64, hi.floor() as i64);
    let every = ((last - first) / MAX_SIZE_TICKS + 1).max(1);
    let at: Vec<f64> = (first..=last).step_by(every as usize).map(|v| v as f64).collect();
    Ticks {
        labels: at.iter().map(|v| bytes_label(2f64.powf(*v))).collect(),
        at,
    }
}

/// A linear axis whose tick positions and labels are [`Ticks`]: plotters
/// asks it where the ticks go and what they say, so every chart's axes go
/// through [`linear_ticks`] (or [`log2_ticks`]) and nothing else.
pub(super) struct TickedAxis {
    pub(super) range: Range<f64>,
    pub(super) ticks: Ticks,
}

impl Ranged for TickedAxis {
    type ValueType = f64;
    type FormatOption = NoDefaultFormatting;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.range.clone()).map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // The bold grid lines only: a light grid between them adds nothing.
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.ticks.at.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.range.clone()
    }
}

impl ValueFormatter<f64> for TickedAxis {
    fn format_ext(&self, value: &f64) -> String {
        self.ticks.label(*value)
    }
}

impl Ticks {
    /// The label at `v` (a key point plotters hands back).
    fn label(&self, v: f64) -> String {
        self.at
            .iter()
            .zip(&self.labels)
            .min_by(|a, b| (a.0 - v).abs().total_cmp(&(b.0 - v).abs()))
            .map(|(_, l)| l.clone())
            .unwrap_or_default()
    }
}

/// "4 KiB", "1 MiB", "2 B".
pub fn bytes_label(v: f64) -> String {
    let v = v.round() as u64;
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if v >= 1 << shift && v.is_multiple_of(1 << shift) {
            return format!("{} {unit}", v >> shift);
        }
    }
    format!("{v} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_linear_ticks_are_short_decimals_with_units_chosen_for_the_range() {
        let labels = |lo, hi, max, unit: Unit| linear_ticks(lo, hi, max, &unit).labels;
        // The bulk chart's case: 0.05 s .. 0.42 s, once labelled
        // 0.15000000000000002 and 0.39999999999999994.
        assert_eq!(
            labels(0.05, 0.42, 10, Unit::Seconds),
            ["50 ms", "100 ms", "150 ms", "200 ms", "250 ms", "300 ms", "350 ms", "400 ms"]
        );
        assert_eq!(
            labels(0.0, 2.6, 10, Unit::Seconds),
            ["0.0 s", "0.5 s", "1.0 s", "1.5 s", "2.0 s", "2.5 s"]
        );
        assert_eq!(
            labels(0.0, 0.0004, 4, Unit::Seconds),
            ["0 µs", "100 µs", "200 µs", "300 µs", "400 µs"]
        );
        assert_eq!(
            labels(0.0, 13.2, 8, Unit::Fixed("MiB/s".into())),
            ["0 MiB/s", "2 MiB/s", "4 MiB/s", "6 MiB/s", "8 MiB/s", "10 MiB/s", "12 MiB/s"]
        );
        assert_eq!(
            labels(0.0, 0.33, 8, Unit::Fixed("s/GiB".into())),
            [
                "0.00 s/GiB",
                "0.05 s/GiB",
                "0.10 s/GiB",
                "0.15 s/GiB",
                "0.20 s/GiB",
                "0.25 s/GiB",
                "0.30 s/GiB"
            ]
        );
        // Positions are where the labels say, and never more than asked for.
        let t = linear_ticks(0.05, 0.42, 10, &Unit::Seconds);
        assert!((t.at[2] - 0.15).abs() < 1e-12, "{:?}", t.at);
        for (lo, hi) in [(0.0, 1e-7), (0.0, 3.0), (1.0, 1000.0), (0.013, 0.0131), (-2.0, 7.0)] {
            let t = linear_ticks(lo, hi, 8, &Unit::Fixed("x".into()));
            assert!((2..=8).contains(&t.at.len()), "{lo}..{hi}: {:?}", t.labels);
            assert!(t.at.iter().all(|v| (lo..=hi).contains(v)), "{lo}..{hi}: {:?}", t.at);
            assert!(t.labels.iter().all(|l| l.len() <= 10), "{:?}", t.labels);
        }
        // An empty range still gets one tick, and `-0` is never written.
        assert_eq!(labels(3.0, 3.0, 8, Unit::Fixed("B".into())), ["3 B"]);
        assert_eq!(short(-0.0001, 2), "0.00");
    }

    #[test]
    fn test_bytes_label() {
        assert_eq!(bytes_label(2.0), "2 B");
        assert_eq!(bytes_label(4096.0), "4 KiB");
        assert_eq!(bytes_label(8.0 * 1024.0 * 1024.0), "8 MiB");
        assert_eq!(bytes_label(1536.0), "1536 B");
    }
}
