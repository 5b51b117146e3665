//! Expectations met or missed: one outcome per `expect:` entry as bench,
//! ci and doctor report it, with the figure, the gap and the run it came
//! from ("write-bw 64 KiB: expected ≥ 90Gb/s, measured 11.2 Gb/s (12 %)").
//!
//! Measuring is the orchestration crate's job; this module only judges a
//! figure against what was expected and words the result.

use lab_model::expect::{Expectations, Latency, Rate, WorkloadExpectation};
use serde::{Deserialize, Serialize};

/// An expectation's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ExpectVerdict {
    /// The figure is within the expectation.
    Met,
    /// The figure is outside it.
    Missed,
    /// No figure: the run that was to measure it failed.
    NotMeasured,
}

/// One expectation's outcome.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpectOutcome {
    /// What was expected of what: `write-bw 64 KiB`, `mtu` (with the node).
    pub what: String,
    /// The node, for a node fact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The bound as written, with its direction: `≥ 90Gb/s`, `≤ 3us`, `= 4096`.
    pub expected: String,
    /// The figure, in the unit the bound was written in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured: Option<String>,
    /// The figure as a share of the bound, percent (bandwidth and latency).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub percent: Option<f64>,
    /// The verdict.
    pub verdict: ExpectVerdict,
    /// One line: what, the bound, the figure and the gap, or the error.
    pub message: String,
    /// The run whose figure this is, when one ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

impl ExpectOutcome {
    /// Whether it passed.
    pub fn met(&self) -> bool {
        self.verdict == ExpectVerdict::Met
    }

    /// A bandwidth against `at_least`: `bits_per_s` as measured.
    pub fn of_rate(what: &str, at_least: &Rate, bits_per_s: f64) -> ExpectOutcome {
        let value = at_least.in_unit(bits_per_s);
        let percent = 100.0 * bits_per_s / at_least.bits_per_s as f64;
        let measured = format!("{} {}", figure(value), at_least.unit.label);
        ExpectOutcome::judged(what, format!("≥ {at_least}"), measured, percent, percent >= 100.0)
    }

    /// A latency against `at_most`: `us` as measured.
    pub fn of_latency(what: &str, at_most: &Latency, us: f64) -> ExpectOutcome {
        let value = at_most.in_unit(us);
        let percent = 100.0 * us / at_most.us();
        let measured = format!("{} {}", figure(value), at_most.unit);
        ExpectOutcome::judged(what, format!("≤ {at_most}"), measured, percent, percent <= 100.0)
    }

    fn judged(what: &str, expected: String, measured: String, percent: f64, met: bool) -> ExpectOutcome {
        ExpectOutcome {
            message: format!(
                "{what}: expected {expected}, measured {measured} ({} %)",
                figure(percent)
            ),
            what: what.to_string(),
            node: None,
            expected,
            measured: Some(measured),
            percent: Some(percent),
            verdict: if met { ExpectVerdict::Met } else { ExpectVerdict::Missed },
            run_id: None,
        }
    }

    /// A fact of `node` that is what it should be (`met`) or not: the
    /// expectation and the fact as read, with no share (an MTU, a provider).
    pub fn of_fact(what: &str, node: &str, expected: String, found: String, met: bool) -> ExpectOutcome {
        ExpectOutcome {
            message: format!("{what} on {node}: expected {expected}, found {found}"),
            what: what.to_string(),
            node: Some(node.to_string()),
            expected,
            measured: Some(found),
            percent: None,
            verdict: if met { ExpectVerdict::Met } else { ExpectVerdict::Missed },
            run_id: None,
        }
    }

    /// An expectation whose run failed: no figure, the error instead.
    pub fn not_measured(what: &str, expected: String, error: &str) -> ExpectOutcome {
        ExpectOutcome {
            message: format!("{what}: expected {expected}, not measured: {error}"),
            what: what.to_string(),
            node: None,
            expected,
            measured: None,
            percent: None,
            verdict: ExpectVerdict::NotMeasured,
            run_id: None,
        }
    }

    /// The same outcome, naming the run it came from.
    pub fn from_run(mut self, id: &str) -> ExpectOutcome {
        self.run_id = Some(id.to_string());
        self
    }
}

/// What is expected of a workload, in one phrase: `write-bw 64 KiB`.
pub fn workload_label(w: &WorkloadExpectation) -> String {
    format!("{} {}", w.workload, size_label(w.size))
}

/// The bounds of a workload's expectation, as `expected` words them:
/// `≥ 90Gb/s`, `≤ 3us`, or both.
pub fn workload_bounds(w: &WorkloadExpectation) -> String {
    let mut parts = Vec::new();
    if let Some(r) = &w.min {
        parts.push(format!("≥ {r}"));
    }
    if let Some(l) = &w.max {
        parts.push(format!("≤ {l}"));
    }
    parts.join(" and ")
}

/// A size as people read it: `8 B`, `64 KiB`, `1 MiB`; bytes when not whole.
fn size_label(n: u64) -> String {
    for (shift, unit) in [(30, "GiB"), (20, "MiB"), (10, "KiB")] {
        if n >= 1 << shift && n.is_multiple_of(1 << shift) {
            return format!("{} {unit}", n >> shift);
        }
    }
    format!("{n} B")
}

/// Three significant figures, no exponent: 11.2, 0.0123, 1234.
fn figure(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return format!("{x}");
    }
    let digits = (2 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

/// What one ci case of an `expect:` checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExpectCase {
    /// A node fact (`devices`, `link_rate`, `mtu`, `fi_provider`) on every node.
    NodeFact(&'static str),
    /// A workload's figures.
    Workload(WorkloadExpectation),
}

/// The ci cases of `e`, named for the JUnit report (`expect mtu 4096`,
/// `expect write-bw 64 KiB ≥ 1Gb/s`): node facts first, then workloads
/// in the order written.
pub fn expect_cases(e: &Expectations) -> Vec<(String, ExpectCase)> {
    let mut cases = Vec::new();
    let facts = [
        ("devices", e.devices.map(|n| format!("≥ {n}"))),
        ("link_rate", e.link_rate.as_ref().map(|r| format!("≥ {r}"))),
        ("mtu", e.mtu.map(|n| n.to_string())),
        ("fi_provider", e.fi_provider.clone()),
    ];
    for (fact, bound) in facts {
        if let Some(bound) = bound {
            cases.push((format!("expect {fact} {bound}"), ExpectCase::NodeFact(fact)));
        }
    }
    for w in &e.workloads {
        cases.push((
            format!("expect {} {}", workload_label(w), workload_bounds(w)),
            ExpectCase::Workload(w.clone()),
        ));
    }
    cases
}

/// The outcomes that did not pass.
pub fn misses(outcomes: &[ExpectOutcome]) -> impl Iterator<Item = &ExpectOutcome> {
    outcomes.iter().filter(|o| !o.met())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_missed_bandwidth_says_the_figure_and_the_gap_in_the_units_written() {
        let rate: Rate = "90Gb/s".parse().unwrap();
        let o = ExpectOutcome::of_rate("write-bw 64 KiB", &rate, 11.2e9);
        assert_eq!(
            o.message,
            "write-bw 64 KiB: expected ≥ 90Gb/s, measured 11.2 Gb/s (12.4 %)"
        );
        assert_eq!(o.verdict, ExpectVerdict::Missed);
        let met = ExpectOutcome::of_rate("write-bw 64 KiB", &"10MiB/s".parse().unwrap(), 8.0 * 12.5 * 1048576.0);
        assert!(met.met(), "{}", met.message);
        assert_eq!(met.measured.as_deref(), Some("12.5 MiB/s"));
    }

    #[test]
    fn test_a_latency_meets_at_or_under_its_bound() {
        let bound: Latency = "3us".parse().unwrap();
        let o = ExpectOutcome::of_latency("write-lat 8 B", &bound, 45.25);
        assert_eq!(o.message, "write-lat 8 B: expected ≤ 3us, measured 45.2 us (1508 %)");
        assert!(!o.met());
        assert!(ExpectOutcome::of_latency("write-lat 8 B", &bound, 3.0).met());
        let ms: Latency = "1.5ms".parse().unwrap();
        let o = ExpectOutcome::of_latency("write-lat 8 B", &ms, 750.0);
        assert!(o.met() && o.measured.as_deref() == Some("0.750 ms"), "{}", o.message);
    }

    #[test]
    fn test_labels_facts_and_failed_runs_are_worded_for_a_reader() {
        let w = WorkloadExpectation {
            workload: "write-bw".into(),
            size: 65536,
            min: Some("1Gb/s".parse().unwrap()),
            max: None,
        };
        assert_eq!(workload_label(&w), "write-bw 64 KiB");
        assert_eq!(workload_bounds(&w), "≥ 1Gb/s");
        assert_eq!(size_label(8), "8 B");
        assert_eq!(size_label(1 << 20), "1 MiB");
        assert_eq!(size_label(1536), "1536 B");
        let o = ExpectOutcome::of_fact("mtu", "client", "4096".into(), "1024 (rxe0 port 1)".into(), false);
        assert_eq!(o.message, "mtu on client: expected 4096, found 1024 (rxe0 port 1)");
        let o = ExpectOutcome::not_measured("write-bw 64 KiB", "≥ 1Gb/s".into(), "server: timed out");
        assert_eq!(o.verdict, ExpectVerdict::NotMeasured);
        assert!(o.message.ends_with("not measured: server: timed out"));
        assert_eq!(misses(std::slice::from_ref(&o)).count(), 1);
    }
}
