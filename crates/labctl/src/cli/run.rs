//! `labctl run WORKLOAD`: move real bytes between two nodes, verify them,
//! measure, and print (or `--json`) the result; every run is also saved.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_core::params::run_options;
use lab_core::run::run_workload_traced;
use lab_model::request::WorkloadRequest;
use lab_results::run::RunRecord;
use lab_results::trace::TraceContext;
use workload_catalogue::limits::{DEFAULT_TRACE_EVENTS, MAX_TRACE_EVENTS};

use super::global::{open_lab, GlobalArgs};
use super::table::{Align, Table};
use super::trace_file::{settle, TraceFile};

/// Options of `run`: the request (workload and its parameters, shared with
/// suites' `workload:` steps) and how to show it.
#[derive(Debug, ClapArgs)]
pub struct RunArgs {
    #[command(flatten)]
    pub request: WorkloadRequest,
    /// Print the result as JSON.
    #[arg(long, conflicts_with = "csv")]
    pub json: bool,
    /// Collectives: print one CSV row per size (nccl-tests' columns).
    #[arg(long)]
    pub csv: bool,
    /// Record a trace of both nodes, or of every rank of a collective (rdma_cm, QP states,
    /// MRs, the {addr, rkey} blob, every post and completion) aligned on one clock, and write
    /// it as Chrome trace-event JSON to FILE (open it in ui.perfetto.dev). Verbs, fabric-*
    /// and the collectives.
    #[arg(long, value_name = "FILE")]
    pub trace: Option<std::path::PathBuf>,
    /// With --trace: the ring size per side (per rank), at most 1048576; older events are
    /// dropped (and counted).
    #[arg(long, value_name = "N", requires = "trace", default_value_t = DEFAULT_TRACE_EVENTS,
          value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_TRACE_EVENTS)))]
    pub trace_events: u32,
}

pub async fn run(args: &GlobalArgs, run: &RunArgs) -> anyhow::Result<ExitCode> {
    if run.csv {
        return Err(super::global::BadInput(format!(
            "--csv applies to the collectives; {} prints --json or a table (`labctl report csv` exports runs)",
            run.request.workload
        ))
        .into());
    }
    let opts = run_options(&run.request)?;
    let mut opts = opts;
    // Opened before the run: a path that cannot be written fails now, not after it.
    let trace_file = TraceFile::asked(run.trace.as_deref(), run.trace_events, &mut opts.params)?;
    let lab = open_lab(args)?;
    // Progress: on every phase change, and at most once a second within one.
    let quiet = run.json;
    let mut last: Option<(String, f64)> = None;
    let outcome = run_workload_traced(&lab, &opts, |p| {
        let due = match &last {
            Some((phase, at)) => *phase != p.phase || p.elapsed_s - at >= 1.0,
            None => true,
        };
        if quiet || !due {
            return;
        }
        last = Some((p.phase.clone(), p.elapsed_s));
        let detail = if p.message.is_empty() {
            String::new()
        } else {
            format!(" - {}", p.message)
        };
        eprintln!(
            "  {:>6.1}s {:<8} {} ops, {} bytes{detail}",
            p.elapsed_s, p.phase, p.ops, p.bytes
        );
    })
    .await;
    let record = settle(
        trace_file,
        outcome,
        (&lab.spec.name, &opts.params.workload),
        |r: &RunRecord| TraceContext::finished(&r.lab, &r.workload, &r.id),
        quiet,
    )?;
    if run.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print_record(&record);
    }
    Ok(if record.verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

pub(crate) fn print_record(r: &RunRecord) {
    let p = &r.params;
    let amount = if p.iterations > 0 {
        format!("{} B x {}", p.size, p.iterations)
    } else {
        format!("{} B for {} s", p.size, p.duration_s)
    };
    match &p.provider {
        // fabric-write: the server writes the pages into the client's MRs.
        Some(provider) if r.workload == "fabric-write" => println!(
            "{} on lab `{}`: {} -> {} (libfabric {provider}, {} pages of {} B)",
            r.workload, r.lab, r.server.node, r.client.node, p.iterations, p.size
        ),
        Some(provider) => println!(
            "{} on lab `{}`: {} -> {} (libfabric {provider}, {amount})",
            r.workload, r.lab, r.client.node, r.server.node
        ),
        None => println!(
            "{} on lab `{}`: {} -> {} ({}, {}, {})",
            r.workload, r.lab, r.client.node, r.server.node, p.cm, p.completion, amount
        ),
    }
    let verdict = if r.verified { "yes" } else { "NO" };
    println!("  verified    {verdict}");
    for side in [&r.client, &r.server] {
        if !side.verify_detail.is_empty() {
            println!("              {}: {}", side.node, side.verify_detail);
        }
    }
    // What really carried each side (no silent fallback).
    let carriers = [&r.client, &r.server]
        .into_iter()
        .filter_map(|side| side.carrier().map(|c| format!("{}: {c}", side.node)));
    for (i, line) in carriers.enumerate() {
        println!("{:<14}{line}", if i == 0 { "  over" } else { "" });
    }
    for side in [&r.client, &r.server] {
        if let Some(fault) = side.facts.get("fault") {
            println!("  injected    {}: {fault}", side.node);
        }
    }
    // Connects the server turned away for want of the run's proof.
    if let Some(refused) = r.server.facts.get("refused_connects") {
        println!(
            "  refused     {}: {refused}, without this run's connect proof",
            r.server.node
        );
    }
    if !r.server.immediates.is_empty() {
        println!("  immediates  {:?} (server, in arrival order)", r.server.immediates);
    }
    if r.workload == "atomic" {
        println!(
            "  remote word {:#x} (final value read back)",
            r.client.atomic_final.max(r.server.atomic_final)
        );
    }
    println!(
        "  moved       {} bytes, {} ops in {:.3} s",
        r.client.bytes, r.client.ops, r.client.elapsed_s
    );
    if r.bw_avg_mib_s > 0.0 {
        println!(
            "  bandwidth   avg {:.2} MiB/s ({:.4} Gb/s), peak {:.2} MiB/s, {:.6} Mpps",
            r.bw_avg_mib_s, r.bw_avg_gbps, r.bw_peak_mib_s, r.msg_rate_mpps
        );
    }
    let l = &r.lat_us;
    if l.samples > 0 {
        println!(
            "  latency us  min {:.1}  typical {:.1}  avg {:.1}  max {:.1}  stdev {:.1}  p99 {:.1}  p99.9 {:.1}  ({} samples)",
            l.min, l.typical, l.avg, l.max, l.stdev, l.p99, l.p999, l.samples
        );
        // The line above is perftest's (its 2 largest samples dropped);
        // the true worst case is what a learner looks for in a tail.
        if let Some(all) = &l.all_samples {
            println!(
                "              every sample: median {:.1}  avg {:.1}  max {:.1}  stdev {:.1}  p99 {:.1}  p99.9 {:.1}",
                all.median, all.avg, all.max, all.stdev, all.p99, all.p999
            );
        }
    }
    let per_gib = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.2} s/GiB"));
    println!(
        "  cpu         server {:.3} s user {:.3} s sys ({})   client {:.3} s user {:.3} s sys ({})",
        r.cpu.server.user_s,
        r.cpu.server.system_s,
        per_gib(r.cpu.server.per_gib_s),
        r.cpu.client.user_s,
        r.cpu.client.system_s,
        per_gib(r.cpu.client.per_gib_s)
    );
    if !r.sweep.is_empty() {
        let mut table = Table::new(
            "  ",
            &[
                ("size", Align::Right),
                ("iters", Align::Right),
                ("avg MiB/s", Align::Right),
                ("peak MiB/s", Align::Right),
                ("Mpps", Align::Right),
                ("typical us", Align::Right),
            ],
        );
        for s in &r.sweep {
            table.row([
                s.size.to_string(),
                s.iterations.to_string(),
                format!("{:.2}", s.bw_avg_mib_s),
                format!("{:.2}", s.bw_peak_mib_s),
                format!("{:.6}", s.msg_rate_mpps),
                format!("{:.1}", s.lat_us.typical),
            ]);
        }
        table.print();
    }
    if let Some(m) = &r.mr_cache {
        let sizes: Vec<String> = m.sizes.iter().map(u64::to_string).collect();
        println!(
            "  mr cache    {} uses of {} B: {} hits, {} misses, {} registrations ({} without the cache)",
            m.ops,
            sizes.join("/"),
            m.hits,
            m.misses,
            m.registrations,
            m.uncached_registrations
        );
        println!(
            "              reg+dereg {:.0} us with the cache, {:.0} us without: saved {:.0} us ({:.1}%)",
            m.cached_reg_us + m.cached_dereg_us,
            m.uncached_reg_us + m.uncached_dereg_us,
            m.saved_us,
            m.saved_pct
        );
    }
    print_counters(r);
    if let Some(path) = &r.saved_to {
        println!("  saved       {path}");
    }
}

/// The impairment and the counters the run moved (non-zero ones only; the
/// JSON has them all), with what the Go-Back-N ones mean.
fn print_counters(r: &RunRecord) {
    if let Some(imp) = &r.impairment {
        for (node, netem) in [(&r.server.node, &imp.server), (&r.client.node, &imp.client)] {
            if let Some(netem) = netem {
                println!("  impaired    {node}: netem {netem} (on what it sends)");
            }
        }
    }
    let Some(counters) = &r.counters else {
        return;
    };
    let mut explained = Vec::new();
    for (node, c) in [(&r.server.node, &counters.server), (&r.client.node, &counters.client)] {
        let moved: Vec<String> = c
            .iter()
            .filter(|(_, v)| **v > 0)
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let shown = if moved.is_empty() {
            "none moved".to_string()
        } else {
            moved.join(", ")
        };
        println!("  counters    {node}: {shown}");
        for (name, _) in lab_core::impair::RETRANSMISSION_COUNTERS {
            if c.get(*name).is_some_and(|v| *v > 0) && !explained.contains(name) {
                explained.push(*name);
            }
        }
    }
    for (name, meaning) in lab_core::impair::RETRANSMISSION_COUNTERS {
        if explained.contains(name) {
            println!("              {name}: {meaning}");
        }
    }
}
