//! `labctl report`: the lab's saved runs, collectives and benches: list
//! them, show one, compare two (a regression diff), export runs and
//! collectives as CSV, plot size sweeps, and one self-contained HTML page of
//! them (`report html`, report_html.rs).
//! Works from the results directory alone; the lab need not be up.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Subcommand};
use lab_results::collective::{points_csv, ranks_csv, CollectiveRecord};
use lab_results::report::{
    compare, list_row, load_dir, plot_collectives, plot_sweeps, resolve, runs_csv, sweep_csv, Comparison, Record,
    ReportError, Saved, Verdict, DEFAULT_THRESHOLD_PCT,
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
    /// Export runs as CSV: one row per run, or per sweep point with --sweep;
    /// collectives: one row per size, or per size and rank with --ranks.
    Csv {
        /// The runs, or the collectives (one kind per file).
        #[arg(required_unless_present = "all", conflicts_with = "all")]
        ids: Vec<String>,
        /// Every saved run (with --collectives: every saved collective).
        #[arg(long)]
        all: bool,
        /// With --all: the collectives instead of the runs.
        #[arg(long, requires = "all")]
        collectives: bool,
        /// Runs: one row per point of each run's size sweep (a collective's rows are always per size).
        #[arg(long)]
        sweep: bool,
        /// Collectives: one row per size and rank (each rank's time; incast: each sender's throughput).
        #[arg(long)]
        ranks: bool,
        /// The CSV file (`-`: standard output).
        #[arg(short, long, value_name = "FILE")]
        output: PathBuf,
    },
    /// Plot bandwidth and latency vs message size of size sweeps (PNG and SVG);
    /// several runs overlay as series. Collectives: busbw and time vs size.
    /// A `bench --sweep` record draws ours against perftest.
    Plot {
        /// Runs made with `labctl run WORKLOAD --all-sizes` (or collectives with
        /// `--all-sizes`, not mixed with runs), or one `bench --sweep`.
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
            collectives,
            sweep,
            ranks,
            output,
        } => {
            let chosen: Vec<&Saved> = if *all {
                let left_out = saved
                    .iter()
                    .filter(|s| matches!(s.record, Record::Collective(_)))
                    .count();
                if !*collectives && left_out > 0 {
                    eprintln!("note: {left_out} collective run(s) left out; `--all --collectives` exports them");
                }
                saved
                    .iter()
                    .filter(|s| match &s.record {
                        Record::Run(_) => !*collectives,
                        Record::Collective(_) => *collectives,
                        Record::Bench(_) => false,
                    })
                    .collect()
            } else {
                ids.iter().map(|id| find(id)).collect::<Result<_, ReportError>>()?
            };
            let mut buffer = Vec::new();
            let rows = match of_one_kind(&chosen, "csv")? {
                Chosen::Collectives(records) => {
                    if *ranks {
                        ranks_csv(&records, &mut buffer)?;
                        records
                            .iter()
                            .map(|c| c.points.iter().map(|p| p.rank_time_us.len()).sum::<usize>())
                            .sum()
                    } else {
                        points_csv(&records, &mut buffer)?;
                        records.iter().map(|c| c.points.len()).sum()
                    }
                }
                Chosen::Runs(runs) => {
                    if *ranks {
                        return Err(BadInput(
                            "--ranks applies to collectives; a pair run has one client and one server".into(),
                        )
                        .into());
                    }
                    if *sweep {
                        sweep_csv(&runs, &mut buffer)?;
                        runs.iter().map(|r| r.sweep.len()).sum()
                    } else {
                        runs_csv(&runs, &mut buffer)?;
                        runs.len()
                    }
                }
            };
            if output.as_os_str() == "-" {
                std::io::stdout().write_all(&buffer)?;
            } else {
                std::fs::write(output, &buffer).map_err(|e| anyhow::anyhow!("writing {}: {e}", output.display()))?;
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
            let chosen: Vec<&Saved> = ids.iter().map(|id| find(id)).collect::<Result<_, ReportError>>()?;
            let written = match of_one_kind(&chosen, "plot")? {
                Chosen::Runs(runs) => plot_sweeps(&runs, output)?,
                Chosen::Collectives(records) => plot_collectives(&records, output)?,
            };
            for path in written {
                println!("{}", path.display());
            }
        }
        ReportCommand::Html(_) => unreachable!("handled above"),
    }
    Ok(ExitCode::SUCCESS)
}

/// The records of a CSV file or a chart: runs, or collectives (their
/// figures differ, so one kind at a time).
enum Chosen<'a> {
    Runs(Vec<&'a RunRecord>),
    Collectives(Vec<&'a CollectiveRecord>),
}

/// `chosen` as runs or as collectives; a bench, or runs and collectives
/// mixed, is bad input naming the first record of the other kind.
fn of_one_kind<'a>(chosen: &[&'a Saved], verb: &str) -> Result<Chosen<'a>, ReportError> {
    let wrong = |s: &Saved| ReportError::WrongKind {
        id: s.id().to_string(),
        is: s.kind(),
        what: match s.record {
            Record::Bench(_) => format!("{verb} takes runs or collectives (a bench's own runs are saved as runs)"),
            Record::Run(_) | Record::Collective(_) => {
                format!("{verb} takes collectives or runs, not both at once (their figures differ)")
            }
        },
    };
    if chosen.iter().any(|s| matches!(s.record, Record::Collective(_))) {
        chosen
            .iter()
            .map(|s| match &s.record {
                Record::Collective(c) => Ok(c.as_ref()),
                Record::Run(_) | Record::Bench(_) => Err(wrong(s)),
            })
            .collect::<Result<_, _>>()
            .map(Chosen::Collectives)
    } else {
        chosen
            .iter()
            .map(|s| match &s.record {
                Record::Run(r) => Ok(r.as_ref()),
                Record::Bench(_) | Record::Collective(_) => Err(wrong(s)),
            })
            .collect::<Result<_, _>>()
            .map(Chosen::Runs)
    }
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
