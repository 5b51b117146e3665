//! The saved records themselves: what a results directory holds (runs and
//! benches, read leniently), finding one by id, and the one-line listing.

use std::fmt;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::bench::{all_ok, BenchRecord, PairRecord};
use crate::plot::{bytes_label, PlotError};
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

pub(super) fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> ReportError + '_ {
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
    /// `labctl run` of a collective.
    Collective(Box<crate::collective::CollectiveRecord>),
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
            Record::Collective(c) => &c.id,
        }
    }

    /// When it started, RFC 3339.
    pub fn started_at(&self) -> &str {
        match &self.record {
            Record::Run(r) => &r.started_at,
            Record::Bench(b) => &b.started_at,
            Record::Collective(c) => &c.started_at,
        }
    }

    /// "run", "bench" or "collective".
    pub fn kind(&self) -> &'static str {
        match &self.record {
            Record::Run(_) => "run",
            Record::Bench(_) => "bench",
            Record::Collective(_) => "collective",
        }
    }

    /// The run, or an error saying this is a bench and `what` needs a run.
    pub fn run(&self, what: &str) -> Result<&RunRecord, ReportError> {
        match &self.record {
            Record::Run(r) => Ok(r),
            Record::Bench(_) | Record::Collective(_) => Err(ReportError::WrongKind {
                id: self.id().to_string(),
                is: self.kind(),
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
    // A collective's record names its `collective` (and has no `workload`).
    let record = if raw.get("collective").is_some_and(|c| c.is_string()) {
        Record::Collective(Box::new(
            serde_json::from_value(raw.clone()).map_err(|e| format!("not a collective record ({e})"))?,
        ))
    } else if raw.get("pairs").is_some() {
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
/// records. A directory that does not exist holds no records. Records that
/// started in the same second (`started_at` has whole seconds) are in the
/// order they were written, so that of two runs in a row the second is the
/// latest; the id breaks what ties remain.
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
            Ok(s) => {
                let written = std::fs::metadata(&path).and_then(|m| m.modified()).ok();
                saved.push((s, written));
            }
            Err(reason) => skipped.push(Skipped { path, reason }),
        }
    }
    // RFC 3339 in UTC sorts as text.
    saved.sort_by(|(a, a_written), (b, b_written)| {
        (a.started_at(), a_written, a.id()).cmp(&(b.started_at(), b_written, b.id()))
    });
    skipped.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((saved.into_iter().map(|(s, _)| s).collect(), skipped))
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

/// How much a run did: `64 KiB x 300`, `sweep 2 B..64 KiB for 2 s`.
pub(crate) fn amount(r: &RunRecord) -> String {
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
pub(super) fn bench_name(b: &BenchRecord) -> String {
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
                let h = format!("bw avg {} MiB/s", crate::number::shown(r.bw_avg_mib_s));
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
        Record::Collective(c) => {
            let largest = c.points.last();
            ListRow {
                id: c.id.clone(),
                kind: "collective",
                started_at: c.started_at.clone(),
                workload: c.collective.clone(),
                params: format!(
                    "{} ranks, {}",
                    c.world,
                    if c.params.all_sizes {
                        format!("sweep 8 B..{}", bytes_label(c.params.size as f64))
                    } else {
                        bytes_label(c.params.size as f64)
                    }
                ),
                size: Some(c.params.size),
                iterations: Some(c.params.iterations),
                duration_s: (c.params.iterations == 0).then_some(c.params.duration_s),
                num_qps: None,
                cm: None,
                sweep: c.params.all_sizes,
                verified: c.verified,
                headline_metric: largest.map(|_| "busbw_gb_s"),
                headline_value: largest.map(|p| p.busbw_gb_s),
                headline: largest.map_or("-".into(), |p| {
                    format!("busbw {:.4} GB/s at {}", p.busbw_gb_s, bytes_label(p.size as f64))
                }),
                path,
            }
        }
    }
}

/// A figure that a record holds as 0 when it was not measured: `None` then.
pub(crate) fn positive(v: f64) -> Option<f64> {
    (v > 0.0).then_some(v)
}
