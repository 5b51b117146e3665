//! `labctl report`: the lab's saved runs and benches: list them, show one,
//! compare two (a regression diff), export runs as CSV, plot size sweeps,
//! and one self-contained HTML page of them (`report html`, report_html.rs).
//! Works from the results directory alone; the lab need not be up.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Subcommand};
use lab_results::report::{
    compare, list_row, load_dir, plot_sweeps, resolve, runs_csv, sweep_csv, Comparison, Record, ReportError, Verdict,
    DEFAULT_THRESHOLD_PCT,
};
use lab_results::run::RunRecord;
use lab_results::sweep_chart::plot_bench_sweep;

use super::global::{open_lab, BadInput, GlobalArgs};
use super::table::{Align, Table};

/// Options of `report`.
#[derive(Debug, ClapArgs)]
pub struct ReportArgs {
    /// What to report.
    #[command(subcommand)]
    pub command: ReportCommand,
}

/// The report verbs. IDs are a run's or bench's id, a unique prefix of one, or `latest`.
#[derive(Debug, Subcommand)]
pub enum ReportCommand {
    /// List saved runs and benches, oldest first.
    List {
        /// Only this workload (`bench` for benches).
        #[arg(long)]
        workload: Option<String>,
        /// Only the N most recent.
        #[arg(long, value_name = "N")]
        last: Option<usize>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Show one saved run or bench as `labctl run` / `labctl bench` printed it.
    Show {
        /// The record.
        id: String,
        /// Print the saved JSON record.
        #[arg(long)]
        json: bool,
    },
    /// Compare two runs (or two benches) metric by metric: old, new, change %, verdict.
    Compare {
        /// The baseline.
        old: String,
        /// The candidate.
        new: String,
        /// Changes smaller than this many percent are "same".
        #[arg(long, value_name = "PCT", default_value_t = DEFAULT_THRESHOLD_PCT)]
        threshold: f64,
        /// Exit 1 when any metric got worse by the threshold or more (for CI).
        #[arg(long)]
        fail_on_regression: bool,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Export runs as CSV: one row per run, or per sweep point with --sweep.
    Csv {
        /// The runs (default with --all: every saved run).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<String>,
        /// Every saved run.
        #[arg(long)]
        all: bool,
        /// One row per point of each run's size sweep.
        #[arg(long)]
        sweep: bool,
        /// The CSV file (`-`: standard output).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Plot bandwidth and latency vs message size of size sweeps (PNG and SVG);
    /// several runs overlay as series. A `bench --sweep` record draws ours
    /// against perftest.
    Plot {
        /// Runs made with `labctl run WORKLOAD --all-sizes`, or one `bench --sweep`.
        #[arg(required = true)]
        ids: Vec<String>,
        /// Where to write the charts.
        #[arg(short, long, value_name = "DIR", default_value = ".")]
        output: PathBuf,
    },
    /// One self-contained page (DIR/index.html): charts of runs and benches,
    /// their numbers, the lab's topology and a trace's timeline; no network needed.
    Html(super::report_html::HtmlArgs),
}

pub async fn run(args: &GlobalArgs, report: &ReportArgs) -> anyhow::Result<ExitCode> {
    if let ReportCommand::Html(html) = &report.command {
        return super::report_html::run(args, html).await;
    }
    let lab = open_lab(args)?;
    let dir = lab.dir.results_dir();
    let (saved, skipped) = load_dir(&dir)?;
    for s in &skipped {
        eprintln!("warning: {s}");
    }
    let find = |id: &str| resolve(&saved, id, &dir);
    match &report.command {
        ReportCommand::List { workload, last, json } => {
            let mut rows: Vec<_> = saved
                .iter()
                .map(list_row)
                .filter(|r| match workload.as_deref() {
                    None => true,
                    Some("bench") => r.kind == "bench",
                    Some(w) => r.workload == w,
                })
                .collect();
            if let Some(n) = last {
                rows.drain(..rows.len().saturating_sub(*n));
            }
            if *json {
                println!("{}", serde_json::to_string_pretty(&rows)?);
                return Ok(ExitCode::SUCCESS);
            }
            println!("{} saved in {}", rows.len(), dir.display());
            if rows.is_empty() {
                return Ok(ExitCode::SUCCESS);
            }
            let mut table = Table::new(
                "  ",
                &[
                    ("id", Align::Left),
                    ("kind", Align::Left),
                    ("started", Align::Left),
                    ("workload", Align::Left),
                    ("params", Align::Left),
                    ("verified", Align::Left),
                    ("headline", Align::Left),
                ],
            );
            for r in &rows {
                table.row([
                    r.id.as_str(),
                    r.kind,
                    r.started_at.as_str(),
                    r.workload.as_str(),
                    r.params.as_str(),
                    if r.verified { "yes" } else { "NO" },
                    r.headline.as_str(),
                ]);
            }
            table.print();
        }
        ReportCommand::Show { id, json } => {
            let s = find(id)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&s.raw)?);
            } else {
                match &s.record {
                    Record::Run(r) => super::run::print_record(r),
                    Record::Bench(b) => super::bench::print_table(b),
                    Record::Collective(c) => super::run_collective::print_record(c),
                }
            }
        }
        ReportCommand::Compare {
            old,
            new,
            threshold,
            fail_on_regression,
            json,
        } => {
            if !(threshold.is_finite() && *threshold >= 0.0) {
                return Err(BadInput(format!(
                    "--threshold {threshold}: give a percentage of 0 or more (default 5)"
                ))
                .into());
            }
            let c = compare(find(old)?, find(new)?, *threshold)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&c)?);
            } else {
                print_comparison(&c);
            }
            if *fail_on_regression && c.regressions > 0 {
                eprintln!(
                    "error: {} metric(s) got worse by {}% or more",
                    c.regressions, c.threshold_pct
                );
                return Ok(ExitCode::FAILURE);
            }
        }
        ReportCommand::Csv {
            ids,
            all,
            sweep,
            output,
        } => {
            let runs: Vec<&RunRecord> = if *all {
                saved
                    .iter()
                    .filter_map(|s| match &s.record {
                        Record::Run(r) => Some(r.as_ref()),
                        Record::Bench(_) | Record::Collective(_) => None,
                    })
                    .collect()
            } else {
                ids.iter()
                    .map(|id| find(id)?.run("csv exports runs (a bench's own runs are saved as runs)"))
                    .collect::<Result<_, ReportError>>()?
            };
            let mut buffer = Vec::new();
            if *sweep {
                sweep_csv(&runs, &mut buffer)?;
            } else {
                runs_csv(&runs, &mut buffer)?;
            }
            if output.as_os_str() == "-" {
                std::io::stdout().write_all(&buffer)?;
            } else {
                std::fs::write(output, &buffer).map_err(|e| anyhow::anyhow!("writing {}: {e}", output.display()))?;
                let rows = if *sweep {
                    runs.iter().map(|r| r.sweep.len()).sum()
                } else {
                    runs.len()
                };
                eprintln!("wrote {} ({rows} rows)", output.display());
            }
        }
        ReportCommand::Plot { ids, output } => {
            // A size-sweep bench draws its own charts (ours against perftest).
            if let [id] = ids.as_slice() {
                if let Record::Bench(b) = &find(id)?.record {
                    for path in plot_bench_sweep(b, output)? {
                        println!("{}", path.display());
                    }
                    return Ok(ExitCode::SUCCESS);
                }
            }
            let runs: Vec<&RunRecord> = ids
                .iter()
                .map(|id| find(id)?.run("plot draws the size sweeps of runs"))
                .collect::<Result<_, ReportError>>()?;
            for path in plot_sweeps(&runs, output)? {
                println!("{}", path.display());
            }
        }
        ReportCommand::Html(_) => unreachable!("handled above"),
    }
    Ok(ExitCode::SUCCESS)
}

fn value(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.3}"),
        Some(v) => format!("{v:.6}"),
    }
}

fn print_comparison(c: &Comparison) {
    println!(
        "compare {} {} ({}, {}) -> {} ({}, {}); changes under {}% are \"same\"",
        c.kind, c.old_id, c.old_what, c.old_started_at, c.new_id, c.new_what, c.new_started_at, c.threshold_pct
    );
    if !c.param_differences.is_empty() {
        println!("  warning: parameters differ, so the numbers may not be comparable:");
        let mut differences = Table::headless("    ", &[Align::Left, Align::Left]);
        for d in &c.param_differences {
            differences.row([d.name.clone(), format!("{} -> {}", d.old, d.new)]);
        }
        differences.print();
    }
    let mut table = Table::new(
        "  ",
        &[
            ("metric", Align::Left),
            ("unit", Align::Left),
            ("old", Align::Right),
            ("new", Align::Right),
            ("change", Align::Right),
            ("verdict", Align::Left),
        ],
    );
    for m in &c.metrics {
        let change = m.change_pct.map_or("-".into(), |p| format!("{p:+.1}%"));
        table.row([
            m.metric.clone(),
            m.unit.clone(),
            value(m.old),
            value(m.new),
            change,
            m.verdict.to_string(),
        ]);
    }
    table.print();
    let count = |v: Verdict| c.metrics.iter().filter(|m| m.verdict == v).count();
    println!(
        "  {} better, {} worse, {} same, {} not comparable (bandwidth and rates: higher is better; latency, CPU, time: lower)",
        count(Verdict::Better),
        count(Verdict::Worse),
        count(Verdict::Same),
        count(Verdict::NotComparable)
    );
}
