//! `labctl run` of a collective: every rank's progress while it runs, then
//! the nccl-tests-style table (size, count, time, algbw, busbw, #wrong), or
//! the record as `--json` / `--csv`; with `--trace`, every rank's trace on
//! one clock, one process per rank.

use std::process::ExitCode;

use lab_core::collective::run_collective_traced;
use lab_results::collective::CollectiveRecord;
use lab_results::trace::TraceContext;

use super::global::{open_lab, GlobalArgs};
use super::run::RunArgs;
use super::table::{Align, Table};
use super::trace_file::{settle, TraceFile};

/// Runs the collective `run` asks for and prints it.
pub async fn run(args: &GlobalArgs, run: &RunArgs) -> anyhow::Result<ExitCode> {
    let mut opts = lab_core::params::collective_options(&run.request)?;
    // Opened before the run: a path that cannot be written fails now, not after it.
    let trace_file = TraceFile::asked(run.trace.as_deref(), run.trace_events, &mut opts.params)?;
    let lab = open_lab(args)?;
    let quiet = run.json || run.csv;
    let outcome = run_collective_traced(&lab, &opts, |rank, p| {
        if !quiet && !p.message.is_empty() {
            eprintln!("  {:>6.1}s rank {rank:<2} {}", p.elapsed_s, p.message);
        }
    })
    .await;
    let record = settle(
        trace_file,
        outcome,
        (&lab.spec.name, &opts.params.workload),
        |r: &CollectiveRecord| TraceContext::finished(&r.lab, &r.collective, &r.id),
        quiet,
    )?;
    if run.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else if run.csv {
        print!("{}", lab_results::collective::to_csv(&record)?);
    } else {
        print_record(&record);
    }
    Ok(if record.verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The record as nccl-tests prints its table, then the ranks and the verdict.
pub(crate) fn print_record(r: &CollectiveRecord) {
    let nodes: Vec<&str> = r.ranks.iter().map(|k| k.node.as_str()).collect();
    println!(
        "{} on {} ranks ({}), {}{}{}",
        r.collective,
        r.world,
        nodes.join(" "),
        r.algorithm,
        r.root.map(|root| format!(", root rank {root}")).unwrap_or_default(),
        if r.transport.is_empty() {
            String::new()
        } else {
            format!(", over {}", r.transport)
        }
    );
    let mut t = Table::new(
        "  ",
        &[
            ("SIZE (B)", Align::Right),
            ("COUNT", Align::Right),
            ("ITERS", Align::Right),
            ("TIME (us)", Align::Right),
            ("ALGBW (GB/s)", Align::Right),
            ("BUSBW (GB/s)", Align::Right),
            ("#WRONG", Align::Right),
            ("SLOWEST", Align::Left),
        ],
    );
    for p in &r.points {
        let slowest = r
            .ranks
            .get(p.slowest_rank as usize)
            .map(|k| format!("rank {} ({})", k.rank, k.node))
            .unwrap_or_default();
        t.row([
            p.size.to_string(),
            p.count.to_string(),
            p.iterations.to_string(),
            format!("{:.1}", p.time_us),
            format!("{:.4}", p.algbw_gb_s),
            format!("{:.4}", p.busbw_gb_s),
            p.wrong.to_string(),
            slowest,
        ]);
    }
    t.print();
    for p in &r.points {
        if let Some(incast) = &p.incast {
            let senders: Vec<String> = incast
                .sender_mib_s
                .iter()
                .enumerate()
                .filter(|(q, _)| Some(*q as u32) != r.root)
                .map(|(q, v)| format!("rank {q} {v:.2}"))
                .collect();
            println!(
                "  {} B incast: {:.2} MiB/s into the root; senders (MiB/s): {}; Jain's fairness {:.3}",
                p.size,
                incast.aggregate_mib_s,
                senders.join(", "),
                incast.jain_fairness
            );
        }
    }
    let times: Vec<String> = r
        .points
        .last()
        .map(|p| p.rank_time_us.iter().map(|t| format!("{t:.1}")).collect())
        .unwrap_or_default();
    if r.world > 1 && !times.is_empty() {
        println!("  each rank's time at the largest size (us): {}", times.join(", "));
    }
    if let Some(fault) = &r.params.fault {
        println!("  fault injected: {fault}");
    }
    println!(
        "{}: {}",
        if r.verified { "verified" } else { "NOT VERIFIED" },
        r.verify_detail
    );
    if let Some(path) = &r.saved_to {
        println!("saved: {path}");
    }
}
