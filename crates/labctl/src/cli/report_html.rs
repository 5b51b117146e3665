//! `labctl report html`: the chosen runs, collectives and benches, the lab's
//! topology and a trace as one self-contained page (`DIR/index.html`). The page is built
//! by lab_results::html; this picks the records and writes the file.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use lab_results::bench::BenchRecord;
use lab_results::collective::CollectiveRecord;
use lab_results::html::{render, PageInput};
use lab_results::report::{resolve, Record, ReportError, Saved};
use lab_results::run::RunRecord;
use serde_json::{json, Value};

use super::global::{open_lab, GlobalArgs};

/// Bad input to `report html` (exit 2): an unknown id, an unwritable -o, a file that is not a trace.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HtmlInputError(String);

fn bad(message: String) -> anyhow::Error {
    HtmlInputError(message).into()
}

/// How many ids an unknown-id error lists.
const IDS_SHOWN: usize = 8;

/// Options of `report html`.
#[derive(Debug, clap::Args)]
pub struct HtmlArgs {
    /// Runs, collectives and benches (ids, unique prefixes, `latest`) [default: the latest of each kind].
    pub ids: Vec<String>,
    /// The directory of the page (written as DIR/index.html; created if missing).
    #[arg(short, long, value_name = "DIR", default_value = "labctl-report")]
    pub output: PathBuf,
    /// A trace written by `labctl run --trace`, drawn as a timeline.
    #[arg(long, value_name = "FILE.json")]
    pub trace: Option<PathBuf>,
    /// Print the page's path and what it contains as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Fails unless `dir` exists (or can be made) and a file can be written in it.
fn check_writable(dir: &Path) -> anyhow::Result<()> {
    let fix = "give -o a directory you can write to";
    std::fs::create_dir_all(dir).map_err(|e| bad(format!("-o {}: cannot create it: {e}; {fix}", dir.display())))?;
    let probe = dir.join(format!(".labctl-report-probe-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| bad(format!("-o {}: cannot write in it: {e}; {fix}", dir.display())))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// The trace document, checked to be Chrome trace-event JSON.
fn read_trace(path: &Path) -> anyhow::Result<(String, Value)> {
    let bytes = std::fs::read(path).map_err(|e| {
        bad(format!(
            "--trace {}: cannot read it: {e}; give the file `labctl run WORKLOAD --trace FILE` wrote",
            path.display()
        ))
    })?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
        bad(format!(
            "--trace {}: not JSON ({e}); give the file `labctl run --trace` wrote",
            path.display()
        ))
    })?;
    if !doc["traceEvents"].is_array() {
        return Err(bad(format!(
            "--trace {}: no `traceEvents` list, so not a Chrome trace; give the file `labctl run --trace` wrote",
            path.display()
        )));
    }
    let name = path
        .file_name()
        .map_or_else(|| path.display().to_string(), |n| n.to_string_lossy().into_owned());
    Ok((name, doc))
}

/// Resolves `id`; an unknown one names the most recent ids that exist.
fn find<'a>(saved: &'a [Saved], id: &str, dir: &Path) -> anyhow::Result<&'a Saved> {
    resolve(saved, id, dir).map_err(|e| match e {
        ReportError::NotFound { .. } => {
            let recent: Vec<String> = saved
                .iter()
                .rev()
                .take(IDS_SHOWN)
                .map(|s| format!("{} ({} {})", s.id(), s.kind(), s.started_at()))
                .collect();
            bad(format!(
                "{e}\n  most recent: {}",
                if recent.is_empty() {
                    "none".to_string()
                } else {
                    recent.join(", ")
                }
            ))
        }
        e => e.into(),
    })
}

pub async fn run(args: &GlobalArgs, html: &HtmlArgs) -> anyhow::Result<ExitCode> {
    // Bad input before any work: the output directory, the trace.
    check_writable(&html.output)?;
    let trace = html.trace.as_deref().map(read_trace).transpose()?;
    let lab = open_lab(args)?;
    let dir = lab.dir.results_dir();
    let (saved, skipped) = lab_results::report::load_dir(&dir)?;
    for s in &skipped {
        eprintln!("warning: {s}");
    }
    let chosen: Vec<&Saved> = if html.ids.is_empty() {
        let latest_run = saved.iter().rev().find(|s| matches!(s.record, Record::Run(_)));
        let latest_collective = saved.iter().rev().find(|s| matches!(s.record, Record::Collective(_)));
        let latest_bench = saved.iter().rev().find(|s| matches!(s.record, Record::Bench(_)));
        let chosen: Vec<&Saved> = latest_run
            .into_iter()
            .chain(latest_collective)
            .chain(latest_bench)
            .collect();
        if chosen.is_empty() && trace.is_none() {
            return Err(ReportError::Empty { dir }.into());
        }
        chosen
    } else {
        html.ids
            .iter()
            .map(|id| find(&saved, id, &dir))
            .collect::<anyhow::Result<_>>()?
    };
    let runs: Vec<&RunRecord> = chosen
        .iter()
        .filter_map(|s| match &s.record {
            Record::Run(r) => Some(r.as_ref()),
            Record::Bench(_) | Record::Collective(_) => None,
        })
        .collect();
    let collectives: Vec<&CollectiveRecord> = chosen
        .iter()
        .filter_map(|s| match &s.record {
            Record::Collective(c) => Some(c.as_ref()),
            Record::Run(_) | Record::Bench(_) => None,
        })
        .collect();
    let benches: Vec<&BenchRecord> = chosen
        .iter()
        .filter_map(|s| match &s.record {
            Record::Bench(b) => Some(b.as_ref()),
            Record::Run(_) | Record::Collective(_) => None,
        })
        .collect();
    let history: Vec<&BenchRecord> = saved
        .iter()
        .filter_map(|s| match &s.record {
            Record::Bench(b) => Some(b.as_ref()),
            Record::Run(_) | Record::Collective(_) => None,
        })
        .collect();
    let topology = match lab.topology().await {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("warning: the page has no topology: {e}");
            None
        }
    };
    let (page, contents) = render(&PageInput {
        lab: &lab.spec.name,
        runs,
        collectives,
        benches,
        history,
        topology: topology.as_ref(),
        trace,
    })?;
    let path = html.output.join("index.html");
    lab_state::write_atomic(&path, page.as_bytes(), 0o644)
        .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    if html.json {
        let mut out = json!({"path": path, "bytes": page.len()});
        if let (Some(o), Value::Object(c)) = (out.as_object_mut(), serde_json::to_value(&contents)?) {
            o.extend(c);
        }
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "wrote {} ({} KiB): {} run(s), {} collective(s), {} bench(es), {} chart(s), topology: {}, trace: {}",
            path.display(),
            page.len().div_ceil(1024),
            contents.runs.len(),
            contents.collectives.len(),
            contents.benches.len(),
            contents.charts.len(),
            if contents.topology { "yes" } else { "no" },
            contents
                .trace
                .as_ref()
                .map_or("none".into(), |t| format!("{t} ({} slices)", contents.trace_slices)),
        );
    }
    Ok(ExitCode::SUCCESS)
}
