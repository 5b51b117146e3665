//! Two saved records compared metric by metric: each change judged
//! against a threshold (better, worse, same), the parameters that differ
//! listed, regressions counted. `labctl report compare` prints this.

use serde::Serialize;

use super::saved::{bench_name, positive, Record, ReportError, Saved};
use crate::bench::{BenchRecord, PairRecord};
use crate::plot::bytes_label;
use crate::run::RunRecord;
use std::fmt;

/// Which way a metric improves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    /// Bandwidth, message rate, ours/perftest ratios of those.
    Higher,
    /// Latency, CPU time, wall time.
    Lower,
}

/// What a change means.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    /// Improved by at least the threshold.
    Better,
    /// Got worse by at least the threshold: a regression.
    Worse,
    /// Within the threshold.
    Same,
    /// One side has no value (or the old one is 0): no percentage.
    #[serde(rename = "n/a")]
    NotComparable,
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Verdict::Better => "better",
            Verdict::Worse => "WORSE",
            Verdict::Same => "same",
            Verdict::NotComparable => "n/a",
        })
    }
}

/// The change from `old` to `new` in percent of `old`, and its verdict for a
/// metric improving in direction `better`, with changes under `threshold_pct`
/// counted as the same.
pub fn judge_change(old: Option<f64>, new: Option<f64>, better: Better, threshold_pct: f64) -> (Option<f64>, Verdict) {
    let (Some(old), Some(new)) = (old, new) else {
        return (None, Verdict::NotComparable);
    };
    if !(old.is_finite() && new.is_finite()) || old <= 0.0 {
        return (None, Verdict::NotComparable);
    }
    let pct = (new - old) * 100.0 / old;
    let improved = match better {
        Better::Higher => pct,
        Better::Lower => -pct,
    };
    let verdict = if improved >= threshold_pct {
        Verdict::Better
    } else if improved <= -threshold_pct {
        Verdict::Worse
    } else {
        Verdict::Same
    };
    (Some(pct), verdict)
}

/// One metric of a comparison.
#[derive(Debug, Clone, Serialize)]
pub struct MetricChange {
    /// Its name ("bw avg", "lat p99", "write-bw ratio").
    pub metric: String,
    /// Its unit.
    pub unit: String,
    /// Which way is better.
    pub better: Better,
    /// The old record's value.
    pub old: Option<f64>,
    /// The new record's value.
    pub new: Option<f64>,
    /// (new - old) / old, percent.
    pub change_pct: Option<f64>,
    /// What the change means.
    pub verdict: Verdict,
}

/// A parameter that differs between the two records.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ParamDiff {
    /// The parameter.
    pub name: String,
    /// Its old value.
    pub old: String,
    /// Its new value.
    pub new: String,
}

/// `report compare OLD NEW`.
#[derive(Debug, Clone, Serialize)]
pub struct Comparison {
    /// "run" or "bench".
    pub kind: &'static str,
    /// The old record's id.
    pub old_id: String,
    /// The new record's id.
    pub new_id: String,
    /// What the old record is (workload or bench suite).
    pub old_what: String,
    /// What the new record is.
    pub new_what: String,
    /// When the old one started.
    pub old_started_at: String,
    /// When the new one started.
    pub new_started_at: String,
    /// Changes smaller than this (percent) are "same".
    pub threshold_pct: f64,
    /// Parameters that differ: the numbers may not be comparable.
    pub param_differences: Vec<ParamDiff>,
    /// Metric by metric.
    pub metrics: Vec<MetricChange>,
    /// Metrics whose verdict is "worse".
    pub regressions: usize,
}

struct Rows {
    threshold_pct: f64,
    rows: Vec<MetricChange>,
}

impl Rows {
    fn push(&mut self, metric: impl Into<String>, unit: &str, better: Better, old: Option<f64>, new: Option<f64>) {
        if old.is_none() && new.is_none() {
            return;
        }
        let (change_pct, verdict) = judge_change(old, new, better, self.threshold_pct);
        self.rows.push(MetricChange {
            metric: metric.into(),
            unit: unit.to_string(),
            better,
            old,
            new,
            change_pct,
            verdict,
        });
    }
}

/// Fields of two JSON objects that differ, named `prefix` + key; nested
/// objects are walked. Works on serialised parameters, so a parameter added to
/// the records later is compared without a change here.
fn json_differences(prefix: &str, old: &serde_json::Value, new: &serde_json::Value, out: &mut Vec<ParamDiff>) {
    use serde_json::Value;
    let text = |v: Option<&Value>| match v {
        None | Some(Value::Null) => "-".to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
    };
    match (old, new) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: std::collections::BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let name = format!("{prefix}{key}");
                match (a.get(key), b.get(key)) {
                    (Some(x @ Value::Object(_)), Some(y @ Value::Object(_))) => {
                        json_differences(&format!("{name}."), x, y, out)
                    }
                    (x, y) if x != y => out.push(ParamDiff {
                        name,
                        old: text(x),
                        new: text(y),
                    }),
                    _ => {}
                }
            }
        }
        (a, b) if a != b => out.push(ParamDiff {
            name: prefix.trim_end_matches('.').to_string(),
            old: text(Some(a)),
            new: text(Some(b)),
        }),
        _ => {}
    }
}

/// Two collective runs: what they were asked for, then time and busbw at
/// each size both ran.
fn compare_collectives(
    old: &crate::collective::CollectiveRecord,
    new: &crate::collective::CollectiveRecord,
    rows: &mut Rows,
) -> Vec<ParamDiff> {
    let mut diffs = Vec::new();
    let top = |c: &crate::collective::CollectiveRecord| {
        serde_json::json!({
            "collective": c.collective,
            "lab": c.lab,
            "world": c.world,
            "nodes": c.ranks.iter().map(|r| r.node.clone()).collect::<Vec<_>>().join(" "),
        })
    };
    json_differences("", &top(old), &top(new), &mut diffs);
    let params = |c: &crate::collective::CollectiveRecord| serde_json::to_value(&c.params).unwrap_or_default();
    json_differences("", &params(old), &params(new), &mut diffs);
    use Better::{Higher, Lower};
    for a in &old.points {
        let Some(b) = new.points.iter().find(|b| b.size == a.size) else {
            continue;
        };
        let size = bytes_label(a.size as f64);
        rows.push(
            format!("time {size}"),
            "us",
            Lower,
            positive(a.time_us),
            positive(b.time_us),
        );
        rows.push(
            format!("busbw {size}"),
            "GB/s",
            Higher,
            positive(a.busbw_gb_s),
            positive(b.busbw_gb_s),
        );
    }
    diffs
}

fn compare_runs(old: &RunRecord, new: &RunRecord, rows: &mut Rows) -> Vec<ParamDiff> {
    let mut diffs = Vec::new();
    let top = |r: &RunRecord| {
        serde_json::json!({
            "workload": r.workload,
            "lab": r.lab,
            "server node": r.server.node,
            "client node": r.client.node,
        })
    };
    json_differences("", &top(old), &top(new), &mut diffs);
    let params = |r: &RunRecord| serde_json::to_value(&r.params).unwrap_or_default();
    json_differences("", &params(old), &params(new), &mut diffs);

    use Better::{Higher, Lower};
    rows.push(
        "bw avg",
        "MiB/s",
        Higher,
        positive(old.bw_avg_mib_s),
        positive(new.bw_avg_mib_s),
    );
    rows.push(
        "bw peak",
        "MiB/s",
        Higher,
        positive(old.bw_peak_mib_s),
        positive(new.bw_peak_mib_s),
    );
    rows.push(
        "msg rate",
        "Mpps",
        Higher,
        positive(old.msg_rate_mpps),
        positive(new.msg_rate_mpps),
    );
    let lat = |r: &RunRecord, f: fn(&crate::run::LatencyRecord) -> f64| (r.lat_us.samples > 0).then(|| f(&r.lat_us));
    rows.push("lat min", "us", Lower, lat(old, |l| l.min), lat(new, |l| l.min));
    rows.push(
        "lat typical",
        "us",
        Lower,
        lat(old, |l| l.typical),
        lat(new, |l| l.typical),
    );
    rows.push("lat avg", "us", Lower, lat(old, |l| l.avg), lat(new, |l| l.avg));
    rows.push("lat p99", "us", Lower, lat(old, |l| l.p99), lat(new, |l| l.p99));
    rows.push("lat p99.9", "us", Lower, lat(old, |l| l.p999), lat(new, |l| l.p999));
    rows.push(
        "cpu server",
        "s/GiB",
        Lower,
        old.cpu.server.per_gib_s,
        new.cpu.server.per_gib_s,
    );
    rows.push(
        "cpu client",
        "s/GiB",
        Lower,
        old.cpu.client.per_gib_s,
        new.cpu.client.per_gib_s,
    );
    rows.push(
        "duration",
        "s",
        Lower,
        positive(old.duration_s),
        positive(new.duration_s),
    );
    // Sweeps: the sizes both have, point by point.
    for point in &old.sweep {
        let Some(other) = new.sweep.iter().find(|p| p.size == point.size) else {
            continue;
        };
        let size = bytes_label(point.size as f64);
        rows.push(
            format!("bw avg @ {size}"),
            "MiB/s",
            Higher,
            positive(point.bw_avg_mib_s),
            positive(other.bw_avg_mib_s),
        );
        let typical = |p: &crate::run::SweepPoint| (p.lat_us.samples > 0).then_some(p.lat_us.typical);
        rows.push(
            format!("lat typical @ {size}"),
            "us",
            Lower,
            typical(point),
            typical(other),
        );
    }
    diffs
}

fn compare_benches(old: &BenchRecord, new: &BenchRecord, rows: &mut Rows) -> Vec<ParamDiff> {
    let mut diffs = Vec::new();
    let top = |b: &BenchRecord| {
        serde_json::json!({
            "lab": b.lab,
            "suite": b.suite,
            "rounds": b.rounds,
            "server node": b.server,
            "client node": b.client,
            "perftest version": b.perftest_version,
        })
    };
    json_differences("", &top(old), &top(new), &mut diffs);
    // Orchestration: each step at each node count, median seconds.
    let steps = |b: &BenchRecord| b.orchestration.iter().flat_map(|o| o.steps.clone()).collect::<Vec<_>>();
    let (old_steps, new_steps) = (steps(old), steps(new));
    for s in &old_steps {
        let other = new_steps.iter().find(|n| n.step == s.step && n.nodes == s.nodes);
        rows.push(
            format!("{} {} nodes", s.step, s.nodes),
            "s",
            Better::Lower,
            s.seconds.median,
            other.and_then(|o| o.seconds.median),
        );
    }
    for s in new_steps
        .iter()
        .filter(|n| !old_steps.iter().any(|s| s.step == n.step && s.nodes == n.nodes))
    {
        rows.push(
            format!("{} {} nodes", s.step, s.nodes),
            "s",
            Better::Lower,
            None,
            s.seconds.median,
        );
    }
    // Idle agent memory, per node and moment.
    for a in &old.agent_rss {
        let other = new.agent_rss.iter().find(|n| n.node == a.node && n.when == a.when);
        rows.push(
            format!("agent RSS {} {}", a.node, a.when),
            "MB",
            Better::Lower,
            Some(a.rss_bytes as f64 / 1e6),
            other.map(|o| o.rss_bytes as f64 / 1e6),
        );
    }
    // Pairs meet by label: a scaling series has one pair per QP count.
    let mut labels: Vec<String> = old.pairs.iter().map(|p| p.spec.label()).collect();
    for p in &new.pairs {
        if !labels.contains(&p.spec.label()) {
            labels.push(p.spec.label());
        }
    }
    let find = |b: &'_ BenchRecord, w: &str| b.pairs.iter().find(|p| p.spec.label() == w).cloned();
    for w in labels.iter().map(String::as_str) {
        let (a, b) = (find(old, w), find(new, w));
        let spec = |p: &Option<PairRecord>| {
            p.as_ref()
                .map(|p| serde_json::to_value(&p.spec).unwrap_or_default())
                .unwrap_or(serde_json::Value::Null)
        };
        json_differences(&format!("{w}."), &spec(&a), &spec(&b), &mut diffs);
        let any = a.as_ref().or(b.as_ref()).expect("the workload comes from one of them");
        let better = if any.better == "lower" {
            Better::Lower
        } else {
            Better::Higher
        };
        let unit = any.unit.clone();
        let tool = any.spec.tool.clone();
        rows.push(
            format!("{w} ours/{tool} ratio"),
            "x",
            better,
            a.as_ref().and_then(|p| p.ratio),
            b.as_ref().and_then(|p| p.ratio),
        );
        rows.push(
            format!("{w} ours median"),
            &unit,
            better,
            a.as_ref().and_then(|p| p.ours.stats.median),
            b.as_ref().and_then(|p| p.ours.stats.median),
        );
        rows.push(
            format!("{w} {tool} median"),
            &unit,
            better,
            a.as_ref().and_then(|p| p.reference.stats.median),
            b.as_ref().and_then(|p| p.reference.stats.median),
        );
        rows.push(
            format!("{w} ours cpu"),
            "s/GiB",
            Better::Lower,
            a.as_ref().and_then(|p| p.ours.cpu_total_s_per_gib.median),
            b.as_ref().and_then(|p| p.ours.cpu_total_s_per_gib.median),
        );
    }
    diffs
}

/// Compares `old` with `new`: two runs, or two benches.
pub fn compare(old: &Saved, new: &Saved, threshold_pct: f64) -> Result<Comparison, ReportError> {
    let mut rows = Rows {
        threshold_pct,
        rows: Vec::new(),
    };
    let what = |s: &Saved| match &s.record {
        Record::Run(r) => r.workload.clone(),
        Record::Bench(b) => format!("{} ({} pairs)", bench_name(b), b.pairs.len()),
        Record::Collective(c) => format!("{} on {} ranks", c.collective, c.world),
    };
    let param_differences = match (&old.record, &new.record) {
        (Record::Run(a), Record::Run(b)) => compare_runs(a, b, &mut rows),
        (Record::Collective(a), Record::Collective(b)) => compare_collectives(a, b, &mut rows),
        (Record::Bench(a), Record::Bench(b)) => compare_benches(a, b, &mut rows),
        _ => {
            return Err(ReportError::WrongKind {
                id: new.id().to_string(),
                is: new.kind(),
                what: format!("`{}` is a {}: compare two runs or two benches", old.id(), old.kind()),
            })
        }
    };
    let regressions = rows.rows.iter().filter(|r| r.verdict == Verdict::Worse).count();
    Ok(Comparison {
        kind: old.kind(),
        old_id: old.id().to_string(),
        new_id: new.id().to_string(),
        old_what: what(old),
        new_what: what(new),
        old_started_at: old.started_at().to_string(),
        new_started_at: new.started_at().to_string(),
        threshold_pct,
        param_differences,
        metrics: rows.rows,
        regressions,
    })
}
