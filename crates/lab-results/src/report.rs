//! `labctl report`: past runs and benches, read back from the lab's results
//! directory; one listed or shown, two compared metric by metric (a
//! regression diff), runs exported as CSV, size sweeps plotted.
//!
//! Records are the JSON files `labctl run` and `labctl bench` save (see
//! [`lab_state::LabDir::save_result`]). They are read with serde, leniently:
//! unknown fields are ignored and missing ones take their defaults, so records
//! of older and newer labctl versions load; a file that is not a record at all
//! is skipped with a warning naming it.

use std::fmt;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::bench::{all_ok, BenchRecord, PairRecord};
use crate::plot::{bytes_label, write_line_chart, LineChart, PlotError, Series, Stroke, Transport, XScale};
use crate::run::RunRecord;

/// The default `--threshold` of `compare`: changes smaller than this, in
/// percent, are noise on an emulated lab.
pub const DEFAULT_THRESHOLD_PCT: f64 = 5.0;

/// Errors of `report`.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    /// The results directory or a file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What failed.
        source: std::io::Error,
    },
    /// No record has this id.
    #[error("no saved run or bench `{id}` in {dir}; `labctl report list` shows the saved ones")]
    NotFound {
        /// The id asked for.
        id: String,
        /// Where it was looked for.
        dir: PathBuf,
    },
    /// The id prefix fits several records.
    #[error("`{id}` matches {} saved records ({}); give more of the id", matches.len(), matches.join(", "))]
    Ambiguous {
        /// The prefix asked for.
        id: String,
        /// The ids it fits.
        matches: Vec<String>,
    },
    /// Nothing is saved yet.
    #[error("no saved runs or benches in {dir}; `labctl run WORKLOAD` and `labctl bench` save theirs there")]
    Empty {
        /// The results directory.
        dir: PathBuf,
    },
    /// A run was needed and a bench given, or the other way round.
    #[error("`{id}` is a {is}; {what}")]
    WrongKind {
        /// The record's id.
        id: String,
        /// What it is: "run" or "bench".
        is: &'static str,
        /// What was asked of it.
        what: String,
    },
    /// `plot` of a run without a size sweep.
    #[error(
        "run `{id}` ({workload}) has no size sweep to plot; make one with \
         `labctl run {workload} --all-sizes --max-size 65536`"
    )]
    NoSweep {
        /// The run.
        id: String,
        /// Its workload.
        workload: String,
    },
    /// A chart could not be drawn or written.
    #[error(transparent)]
    Plot(#[from] PlotError),
}

impl ReportError {
    /// Whether the user asked for something that is not there (exit code 2),
    /// rather than something failing.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, ReportError::Io { .. } | ReportError::Plot(_))
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
    move |source| ReportError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// A saved record: a run or a bench.
#[derive(Debug, Clone)]
pub enum Record {
    /// `labctl run`.
    Run(Box<RunRecord>),
    /// `labctl bench`.
    Bench(Box<BenchRecord>),
}

/// A record and the file it came from.
#[derive(Debug, Clone)]
pub struct Saved {
    /// The file.
    pub path: PathBuf,
    /// The record, typed.
    pub record: Record,
    /// The file's JSON as written (`show --json` prints it whole, fields this
    /// labctl does not know included).
    pub raw: serde_json::Value,
}

impl Saved {
    /// The run's or bench's id.
    pub fn id(&self) -> &str {
        match &self.record {
            Record::Run(r) => &r.id,
            Record::Bench(b) => &b.id,
        }
    }

    /// When it started, RFC 3339.
    pub fn started_at(&self) -> &str {
        match &self.record {
            Record::Run(r) => &r.started_at,
            Record::Bench(b) => &b.started_at,
        }
    }

    /// "run" or "bench".
    pub fn kind(&self) -> &'static str {
        match &self.record {
            Record::Run(_) => "run",
            Record::Bench(_) => "bench",
        }
    }

    /// The run, or an error saying this is a bench and `what` needs a run.
    pub fn run(&self, what: &str) -> Result<&RunRecord, ReportError> {
        match &self.record {
            Record::Run(r) => Ok(r),
            Record::Bench(_) => Err(ReportError::WrongKind {
                id: self.id().to_string(),
                is: "bench",
                what: what.to_string(),
            }),
        }
    }
}

/// A file of the results directory that is not a readable record.
#[derive(Debug, Clone)]
pub struct Skipped {
    /// The file.
    pub path: PathBuf,
    /// Why it was skipped.
    pub reason: String,
}

impl fmt::Display for Skipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}; skipped", self.path.display(), self.reason)
    }
}

/// Parses one saved file: a bench record has `pairs`, a run record `workload`.
pub fn parse_record(path: &Path, bytes: &[u8]) -> Result<Saved, String> {
    let mut raw: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON ({e})"))?;
    // Records are written before they know their path; the file is where it was saved.
    if let Some(saved_to @ serde_json::Value::Null) = raw.get_mut("saved_to") {
        *saved_to = path.display().to_string().into();
    }
    let record = if raw.get("pairs").is_some() {
        Record::Bench(Box::new(
            serde_json::from_value(raw.clone()).map_err(|e| format!("not a bench record ({e})"))?,
        ))
    } else if raw.get("workload").is_some() {
        Record::Run(Box::new(
            serde_json::from_value(raw.clone()).map_err(|e| format!("not a run record ({e})"))?,
        ))
    } else {
        return Err("neither a run nor a bench record (no `workload`, no `pairs`)".into());
    };
    let saved = Saved {
        path: path.to_path_buf(),
        record,
        raw,
    };
    if saved.id().is_empty() {
        return Err("the record has no id".into());
    }
    Ok(saved)
}

/// Every record in `dir`, oldest first, and the `.json` files that are not
/// records. A directory that does not exist holds no records.
pub fn load_dir(dir: &Path) -> Result<(Vec<Saved>, Vec<Skipped>), ReportError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), Vec::new())),
        Err(e) => return Err(io_err(dir)(e)),
    };
    let (mut saved, mut skipped) = (Vec::new(), Vec::new());
    for entry in entries {
        let path = entry.map_err(io_err(dir))?.path();
        // Atomic writes leave `.<name>.tmp<n>` files only while they run.
        let hidden = path.file_name().is_some_and(|n| n.to_string_lossy().starts_with('.'));
        // `<record>.trace.json` files (run --trace, ci `trace: true`) are traces and
        // `<stamp>-ci.json` files ci reports (their cases' records sit beside them):
        // neither is a record, and neither is worth a warning.
        let name = path.to_string_lossy();
        let not_a_record = name.ends_with(".trace.json") || name.ends_with("-ci.json");
        if hidden || not_a_record || path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let parsed = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|bytes| parse_record(&path, &bytes));
        match parsed {
            Ok(s) => saved.push(s),
            Err(reason) => skipped.push(Skipped { path, reason }),
        }
    }
    // RFC 3339 in UTC sorts as text; the id breaks ties of the same second.
    saved.sort_by(|a, b| (a.started_at(), a.id()).cmp(&(b.started_at(), b.id())));
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((saved, skipped))
}

/// The record `id` names: `latest`, a full id, or a prefix fitting one id.
pub fn resolve<'a>(saved: &'a [Saved], id: &str, dir: &Path) -> Result<&'a Saved, ReportError> {
    if id == "latest" {
        return saved
            .last()
            .ok_or_else(|| ReportError::Empty { dir: dir.to_path_buf() });
    }
    if let Some(exact) = saved.iter().find(|s| s.id() == id) {
        return Ok(exact);
    }
    let matches: Vec<&Saved> = saved
        .iter()
        .filter(|s| !id.is_empty() && s.id().starts_with(id))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(ReportError::NotFound {
            id: id.to_string(),
            dir: dir.to_path_buf(),
        }),
        many => Err(ReportError::Ambiguous {
            id: id.to_string(),
            matches: many.iter().map(|s| s.id().to_string()).collect(),
        }),
    }
}

/// One line of `report list`.
#[derive(Debug, Clone, Serialize)]
pub struct ListRow {
    /// The id.
    pub id: String,
    /// "run" or "bench".
    pub kind: &'static str,
    /// Start time, RFC 3339.
    pub started_at: String,
    /// The workload; for a bench, `bench <suite>`.
    pub workload: String,
    /// Key parameters, in words.
    pub params: String,
    /// Message size, bytes (runs).
    pub size: Option<u64>,
    /// Operations (runs; 0 when duration-based).
    pub iterations: Option<u64>,
    /// Seconds (duration-based runs).
    pub duration_s: Option<f64>,
    /// QPs (runs).
    pub num_qps: Option<u32>,
    /// `rdma_cm` or `oob` (runs).
    pub cm: Option<String>,
    /// A size sweep (runs).
    pub sweep: bool,
    /// Runs: the bytes were verified. Benches: every sample ran and verified.
    pub verified: bool,
    /// The headline metric's name: `bw_avg_mib_s`, `lat_typical_us`; none for benches.
    pub headline_metric: Option<&'static str>,
    /// Its value.
    pub headline_value: Option<f64>,
    /// The headline, in words.
    pub headline: String,
    /// The file.
    pub path: String,
}

fn amount(r: &RunRecord) -> String {
    let p = &r.params;
    let each = if p.iterations > 0 {
        format!("x {}", p.iterations)
    } else {
        format!("for {} s", p.duration_s)
    };
    if p.all_sizes {
        format!("sweep 2 B..{} {each}", bytes_label(p.max_size as f64))
    } else {
        format!("{} {each}", bytes_label(p.size as f64))
    }
}

/// `bench quick`, `bench full`.
fn bench_name(b: &BenchRecord) -> String {
    let suite = serde_json::to_value(b.suite).unwrap_or_default();
    format!("bench {}", suite.as_str().unwrap_or("?"))
}

/// The row `list` shows for a record.
pub fn list_row(s: &Saved) -> ListRow {
    let path = s.path.display().to_string();
    match &s.record {
        Record::Run(r) => {
            let p = &r.params;
            let qps = if p.num_qps == 1 { "QP" } else { "QPs" };
            let (metric, value, headline) = if r.bw_avg_mib_s > 0.0 {
                let h = format!("bw avg {:.2} MiB/s", r.bw_avg_mib_s);
                (Some("bw_avg_mib_s"), Some(r.bw_avg_mib_s), h)
            } else if r.lat_us.samples > 0 {
                let h = format!("lat typical {:.1} us", r.lat_us.typical);
                (Some("lat_typical_us"), Some(r.lat_us.typical), h)
            } else {
                (None, None, "-".to_string())
            };
            ListRow {
                id: r.id.clone(),
                kind: "run",
                started_at: r.started_at.clone(),
                workload: r.workload.clone(),
                params: format!("{}, {} {qps}, {}", amount(r), p.num_qps, p.cm),
                size: Some(p.size),
                iterations: Some(p.iterations),
                duration_s: (p.iterations == 0).then_some(p.duration_s),
                num_qps: Some(p.num_qps),
                cm: Some(p.cm.clone()),
                sweep: !r.sweep.is_empty(),
                verified: r.verified,
                headline_metric: metric,
                headline_value: value,
                headline,
                path,
            }
        }
        Record::Bench(b) => {
            let with_target: Vec<&PairRecord> = b.pairs.iter().filter(|p| p.meets_target.is_some()).collect();
            let met = with_target.iter().filter(|p| p.meets_target == Some(true)).count();
            ListRow {
                id: b.id.clone(),
                kind: "bench",
                started_at: b.started_at.clone(),
                workload: bench_name(b),
                params: format!("{} pairs x {} rounds", b.pairs.len(), b.rounds),
                size: None,
                iterations: None,
                duration_s: None,
                num_qps: None,
                cm: None,
                sweep: false,
                verified: all_ok(b),
                headline_metric: None,
                headline_value: None,
                headline: match &b.orchestration {
                    Some(o) => o
                        .steps
                        .iter()
                        .map(|s| {
                            format!(
                                "{} {}: {} s",
                                s.step,
                                s.nodes,
                                s.seconds.median.map_or("-".into(), |m| format!("{m:.0}"))
                            )
                        })
                        .collect::<Vec<_>>()
                        .join(", "),
                    None => format!("targets met {met}/{}", with_target.len()),
                },
                path,
            }
        }
    }
}

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

fn positive(v: f64) -> Option<f64> {
    (v > 0.0).then_some(v)
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
    };
    let param_differences = match (&old.record, &new.record) {
        (Record::Run(a), Record::Run(b)) => compare_runs(a, b, &mut rows),
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

fn num(v: Option<f64>) -> String {
    v.map(|v| v.to_string()).unwrap_or_default()
}

fn flag(v: bool) -> String {
    v.to_string()
}

/// Columns of [`runs_csv`].
pub const RUN_COLUMNS: &[&str] = &[
    "id",
    "started_at",
    "lab",
    "workload",
    "server",
    "client",
    "size",
    "iterations",
    "duration_s",
    "all_sizes",
    "max_size",
    "tx_depth",
    "cq_moderation",
    "post_list",
    "inline_size",
    "num_qps",
    "cm",
    "completion",
    "provider",
    "verified",
    "bw_avg_mib_s",
    "bw_peak_mib_s",
    "bw_avg_gbps",
    "msg_rate_mpps",
    "lat_min_us",
    "lat_typical_us",
    "lat_avg_us",
    "lat_max_us",
    "lat_stdev_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_samples",
    "cpu_server_user_s",
    "cpu_server_system_s",
    "cpu_server_s_per_gib",
    "cpu_client_user_s",
    "cpu_client_system_s",
    "cpu_client_s_per_gib",
    "wall_s",
];

fn run_fields(r: &RunRecord) -> Vec<String> {
    let p = &r.params;
    vec![
        r.id.clone(),
        r.started_at.clone(),
        r.lab.clone(),
        r.workload.clone(),
        r.server.node.clone(),
        r.client.node.clone(),
        p.size.to_string(),
        p.iterations.to_string(),
        p.duration_s.to_string(),
        flag(p.all_sizes),
        p.max_size.to_string(),
        p.tx_depth.to_string(),
        p.cq_moderation.to_string(),
        p.post_list.to_string(),
        p.inline_size.to_string(),
        p.num_qps.to_string(),
        p.cm.clone(),
        p.completion.clone(),
        p.provider.clone().unwrap_or_default(),
        flag(r.verified),
    ]
}

/// Writes one row per run: id, time, workload, parameters, metrics. Absent
/// values (no latency in a bandwidth run, no CPU per GiB when nothing moved)
/// are empty cells.
pub fn runs_csv(runs: &[&RunRecord], out: impl Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(RUN_COLUMNS)?;
    for r in runs {
        let l = &r.lat_us;
        let lat = |v: f64| num((l.samples > 0).then_some(v));
        let mut row = run_fields(r);
        row.extend([
            num(positive(r.bw_avg_mib_s)),
            num(positive(r.bw_peak_mib_s)),
            num(positive(r.bw_avg_gbps)),
            num(positive(r.msg_rate_mpps)),
            lat(l.min),
            lat(l.typical),
            lat(l.avg),
            lat(l.max),
            lat(l.stdev),
            lat(l.p99),
            lat(l.p999),
            l.samples.to_string(),
            r.cpu.server.user_s.to_string(),
            r.cpu.server.system_s.to_string(),
            num(r.cpu.server.per_gib_s),
            r.cpu.client.user_s.to_string(),
            r.cpu.client.system_s.to_string(),
            num(r.cpu.client.per_gib_s),
            r.duration_s.to_string(),
        ]);
        w.write_record(&row)?;
    }
    w.flush()?;
    Ok(())
}

/// Columns of [`sweep_csv`].
pub const SWEEP_COLUMNS: &[&str] = &[
    "id",
    "started_at",
    "workload",
    "cm",
    "num_qps",
    "verified",
    "size",
    "iterations",
    "bw_avg_mib_s",
    "bw_peak_mib_s",
    "msg_rate_mpps",
    "lat_min_us",
    "lat_typical_us",
    "lat_avg_us",
    "lat_p99_us",
    "lat_p999_us",
    "lat_samples",
];

/// Writes one row per sweep point of each run (runs without a sweep add none).
pub fn sweep_csv(runs: &[&RunRecord], out: impl Write) -> Result<(), csv::Error> {
    let mut w = csv::Writer::from_writer(out);
    w.write_record(SWEEP_COLUMNS)?;
    for r in runs {
        for s in &r.sweep {
            let l = &s.lat_us;
            let lat = |v: f64| num((l.samples > 0).then_some(v));
            w.write_record([
                r.id.clone(),
                r.started_at.clone(),
                r.workload.clone(),
                r.params.cm.clone(),
                r.params.num_qps.to_string(),
                flag(r.verified),
                s.size.to_string(),
                s.iterations.to_string(),
                num(positive(s.bw_avg_mib_s)),
                num(positive(s.bw_peak_mib_s)),
                num(positive(s.msg_rate_mpps)),
                lat(l.min),
                lat(l.typical),
                lat(l.avg),
                lat(l.p99),
                lat(l.p999),
                l.samples.to_string(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

/// A run's short name on a chart: `write-bw 1a2b3c4d`.
fn label(r: &RunRecord) -> String {
    format!("{} {}", r.workload, &r.id[..r.id.len().min(8)])
}

/// Draws bandwidth vs size and latency vs size of the sweeps of `runs` (one
/// series each) into `dir` as PNG and SVG; a chart no run has figures for is
/// left out. Returns the files written.
pub fn plot_sweeps(runs: &[&RunRecord], dir: &Path) -> Result<Vec<PathBuf>, ReportError> {
    for r in runs {
        if r.sweep.is_empty() {
            return Err(ReportError::NoSweep {
                id: r.id.clone(),
                workload: r.workload.clone(),
            });
        }
    }
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let stem = match runs {
        [one] => format!("{}-{}", one.workload, &one.id[..one.id.len().min(8)]),
        many => format!(
            "sweeps-{}",
            many.iter()
                .map(|r| &r.id[..r.id.len().min(8)])
                .collect::<Vec<_>>()
                .join("-")
        ),
    };
    let of = match runs {
        [one] => format!(" ({})", label(one)),
        _ => String::new(),
    };
    // Each run in its transport's colour; a second run of the same
    // transport dashed, a third solid again (the legend tells them apart).
    let series = |y: fn(&crate::run::SweepPoint) -> Option<f64>| -> Vec<Series> {
        let mut seen: Vec<Transport> = Vec::new();
        runs.iter()
            .map(|r| {
                let transport = Transport::of_workload(&r.workload);
                let before = seen.iter().filter(|t| **t == transport).count();
                seen.push(transport);
                Series {
                    label: label(r),
                    points: r
                        .sweep
                        .iter()
                        .filter_map(|p| y(p).map(|v| (p.size as f64, v)))
                        .collect(),
                    transport: Some(transport),
                    stroke: if before % 2 == 0 { Stroke::Solid } else { Stroke::Dashed },
                }
            })
            .filter(|s| !s.points.is_empty())
            .collect()
    };
    let charts = [
        (
            "bw",
            LineChart {
                title: format!("bandwidth vs message size{of}"),
                x_label: "message size".into(),
                y_label: "average bandwidth".into(),
                y_unit: "MiB/s".into(),
                x_scale: XScale::Log2Bytes,
                series: series(|p| positive(p.bw_avg_mib_s)),
            },
        ),
        (
            "lat",
            LineChart {
                title: format!("latency vs message size{of}"),
                x_label: "message size".into(),
                y_label: "typical latency".into(),
                y_unit: "µs".into(),
                x_scale: XScale::Log2Bytes,
                series: series(|p| (p.lat_us.samples > 0).then_some(p.lat_us.typical)),
            },
        ),
    ];
    let mut written = Vec::new();
    for (what, chart) in charts {
        if chart.series.is_empty() {
            continue;
        }
        written.extend(write_line_chart(&chart, &dir.join(format!("{stem}-{what}")))?);
    }
    if written.is_empty() {
        return Err(PlotError::Empty(format!("the sweeps of {stem}")).into());
    }
    Ok(written)
}

#[cfg(test)]
mod tests;
