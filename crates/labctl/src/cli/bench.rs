//! `labctl bench`: our workloads against perftest on the same two nodes
//! (or, `--suite collectives`, our collectives against Open MPI's on every
//! node), warm-up rounds first, then reference and ours in ABBA order;
//! prints a table (or `--json`) and saves the record under the lab's
//! results directory. After the suite, each figure of the lab's `expect:`
//! (or `--expect FILE`'s) is measured by a run of its own. Exit status: 0
//! everything ran, verified and met its expectations, 1 a run of ours failed
//! or did not verify, 3 only the reference tools failed, 4 an expectation
//! was missed (or could not be measured).

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args as ClapArgs, ValueEnum};
use lab_core::bench::orchestration::{OrchestrationEvent, OrchestrationOptions};
use lab_core::bench::{default_sweep_sizes, run_bench, BenchEvent, BenchOptions, MpiTransport};
use lab_results::bench::{BenchOutcome, BenchRecord, Failures, PairRecord, RatioSpread, Sample, Stats, Suite};
use lab_results::sweep_chart::plot_bench_sweep;

use super::global::{open_lab, GlobalArgs};
use super::table::{Align, Table};

/// Which pairs to run.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum SuiteArg {
    /// write-bw, read-bw, write-lat, atomic-bw against ib_write_bw, ib_read_bw, ib_write_lat, ib_atomic_bw;
    /// fabric-lat against fi_pingpong (tcp;ofi_rxm).
    Quick,
    /// quick plus send-bw, read-lat, send-lat, atomic-lat, and the scaling
    /// series: write-bw and send-bw at 2, 4 and 8 QPs against perftest's -q.
    Full,
    /// allreduce, allgather, reduce-scatter, reduce, alltoall, broadcast on every node
    /// against Open MPI's (the nodes need openmpi-bin, libopenmpi-dev, gcc and
    /// node_ssh), at 8 B, 64 KiB and 1 MiB (--sizes), and write-bw as the link's ceiling.
    Collectives,
}

/// What Open MPI's side of the collectives suite moves its bytes over.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum MpiTransportArg {
    /// TCP on the data link (ob1 PML, tcp BTL): the one that runs on rxe under QEMU.
    Tcp,
    /// UCX on the data path's RDMA device (ucx PML).
    Ucx,
}

/// Options of `bench`.
#[derive(Debug, ClapArgs)]
pub struct BenchArgs {
    /// The suite.
    #[arg(long, value_enum, default_value = "quick")]
    pub suite: SuiteArg,
    /// Measured rounds of (perftest, ours) per pair, in ABBA order; reported
    /// as min / median / max. An even count cancels a linear drift.
    #[arg(long, default_value_t = 4)]
    pub rounds: u32,
    /// Warm-up rounds per pair, run before the measured ones and not counted.
    #[arg(long, default_value_t = 1)]
    pub warmup: u32,
    /// The passive node [default: server; --suite collectives: the lab's second node,
    /// for the ceiling's write-bw].
    #[arg(long)]
    pub server: Option<String>,
    /// The active node [default: client; --suite collectives: the lab's first node].
    #[arg(long)]
    pub client: Option<String>,
    /// Override every pair's iteration count (both tools; a scaling point at
    /// N QPs runs this / N on each QP).
    #[arg(short = 'n', long)]
    pub iterations: Option<u64>,
    /// Only these workloads of the suite (repeatable: --only write-bw --only write-lat).
    #[arg(long)]
    pub only: Vec<String>,
    /// Seconds before one run is given up.
    #[arg(long, default_value_t = 120)]
    pub timeout: u64,
    /// Instead of the pairs: time `up` and `down` of scratch labs like this one
    /// (`<lab>-orch<N>`, torn down afterwards); the lab itself need not be up.
    #[arg(long)]
    pub orchestration: bool,
    /// --orchestration: node counts to time, one scratch lab each.
    #[arg(long, value_delimiter = ',', default_value = "2,4", requires = "orchestration")]
    pub nodes: Vec<usize>,
    /// --orchestration: also time `up` with an empty image cache (builds the image: minutes).
    #[arg(long, requires = "orchestration")]
    pub cold: bool,
    /// Instead of the suite: a size sweep of each `--only` workload (default
    /// write-bw and write-lat) against its perftest tool, one pair per size,
    /// drawn as bandwidth and latency vs size charts (PNG and SVG).
    #[arg(long, conflicts_with_all = ["orchestration", "suite"])]
    pub sweep: bool,
    /// --sweep: the message sizes, bytes or with a unit, comma separated (default: 2 to 1MiB,
    /// powers of two); --suite collectives: the operations' sizes (default: 8,64KiB,1MiB).
    #[arg(long, value_delimiter = ',', value_parser = parse_bench_size)]
    pub sizes: Vec<u64>,
    /// --suite collectives: the transport Open MPI is told to use.
    #[arg(long, value_enum, default_value = "tcp")]
    pub mpi_transport: MpiTransportArg,
    /// --sweep: where the charts go (default: beside the saved record).
    #[arg(short, long, value_name = "DIR", requires = "sweep")]
    pub output: Option<std::path::PathBuf>,
    /// Measure these figures after the suite instead of the lab's `expect:`:
    /// a YAML file holding what `expect:` holds (`write-bw: {size: 64KiB,
    /// min: 10Gb/s}`, one per line). Its node facts are doctor's to check.
    #[arg(long, value_name = "FILE")]
    pub expect: Option<std::path::PathBuf>,
    /// Print the record as JSON.
    #[arg(long)]
    pub json: bool,
}

/// The longest one `up` or `down` of --orchestration may take (a cold `up`
/// builds the node image).
const ORCHESTRATION_STEP_LIMIT: Duration = Duration::from_secs(45 * 60);

async fn run_orchestration(args: &GlobalArgs, bench: &BenchArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let opts = OrchestrationOptions {
        labctl: std::env::current_exe()?,
        nodes: bench.nodes.clone(),
        cold: bench.cold,
        rounds: bench.rounds.max(1),
        timeout: ORCHESTRATION_STEP_LIMIT,
    };
    let quiet = bench.json;
    let timed = lab_core::bench::orchestration::run_orchestration(&lab, &opts, |event| {
        if quiet {
            return;
        }
        match event {
            OrchestrationEvent::Start { step, nodes, round } => {
                eprint!("  {step:<8} {nodes} nodes round {} ... ", round + 1)
            }
            OrchestrationEvent::Done(Ok(s)) => eprintln!("{s:.1} s"),
            OrchestrationEvent::Done(Err(e)) => eprintln!("FAILED: {}", e.lines().next().unwrap_or_default()),
        }
    });
    // Ctrl-C or SIGTERM drops the bench, whose scratch lab then goes `down`.
    let record = tokio::select! {
        record = timed => record?,
        why = super::global::interrupted() => anyhow::bail!("{why}: the scratch labs were torn down; nothing was saved"),
    };
    if bench.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print_table(&record);
    }
    Ok(ExitCode::from(record.outcome().exit_status()))
}

/// The largest size `--sizes` takes: 64 MiB.
const MAX_BENCH_SIZE: u64 = 64 << 20;

/// One of `--sizes`: bytes, or a number with a unit as `labctl run -s` takes it.
fn parse_bench_size(text: &str) -> Result<u64, String> {
    let size = lab_model::size::parse_size(text)?;
    if (1..=MAX_BENCH_SIZE).contains(&size) {
        Ok(size)
    } else {
        Err(format!("{size} B is not in 1 B ..= 64 MiB"))
    }
}

pub async fn run(args: &GlobalArgs, bench: &BenchArgs) -> anyhow::Result<ExitCode> {
    if bench.orchestration {
        return run_orchestration(args, bench).await;
    }
    let lab = open_lab(args)?;
    let suite = match bench.suite {
        _ if bench.sweep => Suite::Sweep,
        SuiteArg::Quick => Suite::Quick,
        SuiteArg::Full => Suite::Full,
        SuiteArg::Collectives => Suite::Collectives,
    };
    if !bench.sizes.is_empty() && !matches!(suite, Suite::Sweep | Suite::Collectives) {
        return Err(super::global::BadInput("--sizes is for --sweep and --suite collectives".into()).into());
    }
    // The collectives suite's ceiling runs between the lab's first two nodes unless told.
    let nth_node = |i: usize, pair_default: &str| match suite {
        Suite::Collectives => lab.nodes.get(i).map_or(pair_default.to_string(), |n| n.name.clone()),
        _ => pair_default.to_string(),
    };
    let expect = match &bench.expect {
        Some(path) => Some(lab_model::expect::Expectations::load(path).map_err(super::global::BadInput)?),
        None => None,
    };
    let opts = BenchOptions {
        expect,
        suite,
        rounds: bench.rounds.max(1),
        warmup: bench.warmup,
        server: bench.server.clone().unwrap_or_else(|| nth_node(1, "server")),
        client: bench.client.clone().unwrap_or_else(|| nth_node(0, "client")),
        iterations: bench.iterations,
        timeout: Duration::from_secs(bench.timeout),
        only: bench.only.clone(),
        sweep_sizes: match suite {
            Suite::Sweep if bench.sizes.is_empty() => default_sweep_sizes(),
            _ => bench.sizes.clone(),
        },
        mpi_transport: match bench.mpi_transport {
            MpiTransportArg::Tcp => MpiTransport::Tcp,
            MpiTransportArg::Ucx => MpiTransport::Ucx,
        },
    };
    let quiet = bench.json;
    let on_event = |event: BenchEvent<'_>| {
        if quiet {
            return;
        }
        match event {
            BenchEvent::Start {
                pair,
                tool,
                round,
                warmup,
            } => {
                let which = if warmup { "warm-up" } else { "round" };
                eprint!("  {pair:<16} {which:<7} {} {tool:<13} ... ", round + 1);
            }
            BenchEvent::Step { what } => eprintln!("  {what}"),
            BenchEvent::Expect { outcome } => {
                let verdict = if outcome.met() { "met" } else { "MISSED" };
                eprintln!("  {verdict:<6} {}", outcome.message);
            }
            BenchEvent::Done { sample, .. } => match (&sample.error, sample.value, &sample.collective) {
                (Some(e), _, _) => eprintln!("FAILED: {}", e.lines().next().unwrap_or_default()),
                (None, Some(v), Some(c)) => eprintln!("busbw {} GB/s, {:.1} us/op", sig(v), c.time_us),
                (None, Some(v), None) => eprintln!("{v:.4}"),
                (None, None, _) => eprintln!("no value"),
            },
        }
    };
    let record = match suite {
        Suite::Collectives => lab_core::bench::collectives::run_collectives_bench(&lab, &opts, on_event).await?,
        _ => run_bench(&lab, &opts, on_event).await?,
    };
    if bench.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print_table(&record);
    }
    if bench.sweep {
        let dir = match (&bench.output, &record.saved_to) {
            (Some(dir), _) => dir.clone(),
            (None, Some(saved)) => std::path::Path::new(saved).parent().map(Into::into).unwrap_or_default(),
            (None, None) => lab.dir.results_dir(),
        };
        for path in plot_bench_sweep(&record, &dir)? {
            // Beside --json's record on stdout, the charts' paths go to stderr.
            if bench.json {
                eprintln!("chart {}", path.display());
            } else {
                println!("  chart       {}", path.display());
            }
        }
    }
    Ok(ExitCode::from(record.outcome().exit_status()))
}

fn num(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(v) if v.abs() >= 100.0 => format!("{v:.1}"),
        Some(v) if v.abs() >= 1.0 => format!("{v:.2}"),
        Some(v) => format!("{v:.6}"),
    }
}

fn mmm(s: &Stats) -> String {
    format!("{} / {} / {}", num(s.min), num(s.median), num(s.max))
}

/// Four significant digits, in exponent form below 0.001: busbw spans
/// 10^-7 to 10^-2 GB/s on an emulated lab.
fn sig(v: f64) -> String {
    if v == 0.0 || !v.is_finite() {
        return format!("{v}");
    }
    if v.abs() < 1e-3 {
        return format!("{v:.3e}");
    }
    let decimals = (3 - v.abs().log10().floor() as i32).max(0) as usize;
    format!("{v:.decimals$}")
}

fn sig_mmm(s: &Stats) -> String {
    let f = |v: Option<f64>| v.map_or("-".into(), sig);
    format!("{} / {} / {}", f(s.min), f(s.median), f(s.max))
}

pub(crate) fn print_table(r: &BenchRecord) {
    if let Some(o) = &r.orchestration {
        println!(
            "bench orchestration on scratch labs like `{}`, {} rounds (image cache {})",
            r.lab, r.rounds, o.image_cache
        );
        let mut table = Table::new(
            "  ",
            &[
                ("step", Align::Left),
                ("nodes", Align::Right),
                ("seconds min / median / max", Align::Right),
            ],
        );
        for s in &o.steps {
            table.row([s.step.to_string(), s.nodes.to_string(), mmm(&s.seconds)]);
        }
        // Each step's row, then its errors beneath it.
        let lines = table.lines();
        println!("{}", lines[0]);
        for (s, row) in o.steps.iter().zip(&lines[1..]) {
            println!("{row}");
            for e in &s.errors {
                println!("    {}", e.replace('\n', "\n      "));
            }
        }
        if !o.phases.is_empty() {
            println!("  where the warm `up`s spent their time (slowest node; done at: since `up` began):");
            let mut table = Table::new(
                "  ",
                &[
                    ("phase", Align::Left),
                    ("nodes", Align::Right),
                    ("seconds min / median / max", Align::Right),
                    ("done at, median", Align::Right),
                ],
            );
            for p in &o.phases {
                table.row([
                    p.phase.clone(),
                    p.nodes.to_string(),
                    mmm(&p.seconds),
                    num(p.ends_at.median),
                ]);
            }
            for line in table.lines() {
                println!("{line}");
            }
        }
        if let Some(path) = &r.saved_to {
            println!("  saved       {path}");
        }
        return;
    }
    if r.collectives.is_some() {
        print_collectives(r);
        return;
    }
    println!(
        "bench `{}` suite on lab `{}`: {} -> {}, {} round{} (perftest {}, {})",
        r.suite.label(),
        r.lab,
        r.client,
        r.server,
        r.rounds,
        if r.rounds == 1 { "" } else { "s" },
        r.perftest_version,
        order_words(r, "perftest")
    );
    let mut table = Table::new(
        "  ",
        &[
            ("workload", Align::Left),
            ("reference", Align::Left),
            ("unit", Align::Left),
            ("perftest min / median / max", Align::Right),
            ("ours min / median / max", Align::Right),
            ("ratio", Align::Right),
            ("target", Align::Right),
            ("met", Align::Right),
            ("drift", Align::Right),
            ("cpu s/GiB pt", Align::Right),
            ("cpu s/GiB us", Align::Right),
        ],
    );
    for p in &r.pairs {
        let target = match p.spec.target {
            Some(t) if p.better == "higher" => format!(">= {t:.2}"),
            Some(t) => format!("<= {t:.2}"),
            None => "-".into(),
        };
        let met = match p.meets_target {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        table.row([
            p.spec.label(),
            p.spec.tool.to_string(),
            p.unit.to_string(),
            mmm(&p.reference.stats),
            mmm(&p.ours.stats),
            p.ratio.map_or("-".into(), |x| format!("{x:.3}")),
            target,
            met.to_string(),
            drift_word(p).to_string(),
            num(p.reference.cpu_total_s_per_gib.median),
            num(p.ours.cpu_total_s_per_gib.median),
        ]);
    }
    table.print();
    println!("  ratio = ours median / perftest median; bandwidth and Mpps: higher is better, latency (t_typical, RTT/2 for write-lat): lower is better");
    println!("  cpu = user + system seconds of both sides per GiB moved (median); perftest's is its whole process, ours the timed run");
    println!(
        "  drift = whether a pair's rounds trend with time (TREND) or scatter; `-`: fewer than 6 counted rounds of both tools together"
    );
    print_pair_notes(r);
    print_scaling(r);
    print_rss_failures_saved(r);
}

/// The idle agents' memory, the failed rounds, the outcome and where the record is.
fn print_rss_failures_saved(r: &BenchRecord) {
    let mut rss_table = Table::headless(
        "  ",
        &[Align::Left, Align::Left, Align::Right, Align::Left, Align::Left],
    );
    for rss in &r.agent_rss {
        rss_table.row([
            format!("agent RSS idle ({})", rss.when),
            rss.node.clone(),
            format!("{:.1} MB", rss.rss_bytes as f64 / 1e6),
            format!("target <= {:.0} MB", rss.target_bytes as f64 / 1e6),
            (if rss.holds { "holds" } else { "EXCEEDED" }).to_string(),
        ]);
    }
    rss_table.print();
    print_expectations(r);
    print_failures(r);
    if let Some(path) = &r.saved_to {
        println!("  saved       {path}");
    }
}

/// `--suite collectives`: per collective and size, both sides' busbw and
/// time per operation with their ratios, then the link's ceiling.
fn print_collectives(r: &BenchRecord) {
    let Some(c) = &r.collectives else { return };
    println!(
        "bench `collectives` suite on lab `{}`: {} ranks ({}), {} ({})",
        r.lab,
        c.world,
        c.nodes.join(" "),
        rounds(r.rounds as usize),
        order_words(r, "Open MPI")
    );
    println!("  Open MPI: {}; transport: {}", c.mpi_version, c.mpi_transport_detail);
    println!("  built: {} ({:.1} s)", c.build, c.build_s);
    let mut table = Table::new(
        "  ",
        &[
            ("collective", Align::Left),
            ("size", Align::Right),
            ("Open MPI call", Align::Left),
            ("ours busbw GB/s min / median / max", Align::Right),
            ("Open MPI busbw GB/s min / median / max", Align::Right),
            ("ratio", Align::Right),
            ("target", Align::Right),
            ("met", Align::Right),
            ("us/op ours", Align::Right),
            ("us/op Open MPI", Align::Right),
            ("time ratio", Align::Right),
            ("drift", Align::Right),
        ],
    );
    for p in &r.pairs {
        let met = match p.meets_target {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        table.row([
            p.spec.workload.clone(),
            lab_results::plot::bytes_label(p.spec.size as f64),
            p.spec.tool.clone(),
            sig_mmm(&p.ours.stats),
            sig_mmm(&p.reference.stats),
            p.ratio.map_or("-".into(), |x| format!("{x:.3}")),
            p.spec.target.map_or("-".into(), |t| format!(">= {t:.2}")),
            met.to_string(),
            num(p.ours.time_us.median),
            num(p.reference.time_us.median),
            p.time_ratio.map_or("-".into(), |x| format!("{x:.3}")),
            drift_word(p).to_string(),
        ]);
    }
    table.print();
    println!("  busbw = size / time per operation x nccl-tests' factor (allreduce 2(n-1)/n; allgather, reduce-scatter, alltoall (n-1)/n; reduce, broadcast 1); time = the slowest rank's mean");
    println!("  ratio = ours median busbw / Open MPI's (higher is better); time ratio = ours median time / Open MPI's (lower is better: the latency at small sizes)");
    if let Some(ceiling) = &c.ceiling {
        match (ceiling.sample.value, ceiling.gb_s, &ceiling.sample.error) {
            (Some(mib_s), Some(gb_s), None) => println!(
                "  link ceiling: {mib_s:.2} MiB/s = {} GB/s ({})",
                sig(gb_s),
                ceiling.command
            ),
            (_, _, e) => println!(
                "  link ceiling: FAILED ({}): {}",
                ceiling.command,
                e.as_deref().unwrap_or("no figure")
            ),
        }
    }
    print_pair_notes(r);
    print_rss_failures_saved(r);
}

/// How the rounds of each pair were ordered, as the heading says it.
fn order_words(r: &BenchRecord, reference: &str) -> String {
    let order = match r.order.as_str() {
        "abba" => format!("ABBA order: {reference} first in odd rounds, ours first in even ones"),
        _ => format!("alternating {reference}, ours"),
    };
    match r.warmup_rounds {
        0 => order.to_string(),
        1 => format!("1 warm-up round per pair not counted, then {order}"),
        n => format!("{n} warm-up rounds per pair not counted, then {order}"),
    }
}

/// The drift column: `TREND`, `scatter`, or `-` when too few rounds count.
fn drift_word(p: &PairRecord) -> &'static str {
    match p.drift.trending {
        Some(true) => "TREND",
        Some(false) => "scatter",
        None => "-",
    }
}

/// `N round(s)`.
fn rounds(n: usize) -> String {
    format!("{n} round{}", if n == 1 { "" } else { "s" })
}

/// Under the table: per pair, the rounds left out of its figures and why,
/// a missing ratio, rounds that trend, and a ratio whose spread over
/// resampled rounds holds the target.
fn print_pair_notes(r: &BenchRecord) {
    for p in &r.pairs {
        let label = p.spec.label();
        for (tool, side) in [(&p.spec.tool, &p.reference), (&p.spec.workload, &p.ours)] {
            let l = &side.left_out;
            let mut why = Vec::new();
            if l.failed > 0 {
                why.push(format!("{} failed", rounds(l.failed)));
            }
            if l.unverified > 0 {
                why.push(format!("{} not verified", rounds(l.unverified)));
            }
            if !why.is_empty() {
                println!(
                    "  {label}: {tool}: {} left out of its figures ({} counted)",
                    why.join(", "),
                    side.stats.n
                );
            }
        }
        if p.reference.stats.n == 0 {
            println!("  {label}: {} failed every measured round: no ratio", p.spec.tool);
        }
        if p.ours.stats.n == 0 {
            println!("  {label}: no round of {} counts: the pair fails", p.spec.workload);
        }
        if let (Some(true), Some(rho), Some(limit)) = (p.drift.trending, p.drift.rho, p.drift.threshold) {
            println!(
                "  {label}: its rounds trend with time (Spearman rho {rho:+.2} over {} rounds, |rho| >= {limit:.2} trends): \
                 the lab was still warming up or drifting, so the ratio may measure that; run it again with more --warmup",
                p.drift.n
            );
        }
        // Records saved before the spread existed get it from their rounds.
        let spread = p
            .spread
            .or_else(|| RatioSpread::of(&p.reference.samples, &p.ours.samples));
        if let (Some(spread), Some(target), Some(ratio)) = (spread, p.spec.target, p.ratio) {
            if spread.spans(target) {
                let op = if p.spec.metric.higher_is_better() { ">=" } else { "<=" };
                println!(
                    "  {label}: over resampled rounds the ratio {ratio:.3} could be anywhere in {:.2}-{:.2}, \
                     which holds the target ({op} {target:.2}): {} a side cannot tell a meet from a miss; more --rounds narrow it",
                    spread.low,
                    spread.high,
                    rounds(spread.rounds)
                );
            }
        }
    }
}

/// The lab's expectations, each met or missed with its figure and gap.
fn print_expectations(r: &BenchRecord) {
    if r.expectations.is_empty() {
        return;
    }
    println!("  expectations:");
    for o in &r.expectations {
        let verdict = if o.met() { "met" } else { "MISSED" };
        let run = o.run_id.as_deref().map(|id| format!(" [run {id}]")).unwrap_or_default();
        println!("    {verdict:<6} {}{run}", o.message);
    }
}

/// Failed rounds, the reference tools' apart from ours, and what the bench
/// comes to.
fn print_failures(r: &BenchRecord) {
    let each = |of: fn(&PairRecord) -> (&String, &Vec<Sample>), heading: &str| {
        let mut printed = false;
        for p in &r.pairs {
            let (tool, samples) = of(p);
            for s in samples.iter().filter(|s| s.failed() || s.unverified()) {
                if !printed {
                    println!("  {heading}");
                    printed = true;
                }
                let which = if s.warmup { "warm-up" } else { "round" };
                let e = s.error.as_deref().unwrap_or("no figure");
                println!("    {tool} {which} {}: {}", s.round + 1, e.replace('\n', "\n      "));
            }
        }
    };
    each(
        |p| (&p.spec.tool, &p.reference.samples),
        "failed rounds of the reference tools (theirs, not ours):",
    );
    each(|p| (&p.spec.workload, &p.ours.samples), "failed rounds of ours:");
    let f = Failures::of(&r.pairs);
    match r.outcome() {
        BenchOutcome::Ok => {}
        BenchOutcome::OursFailed => println!(
            "  outcome: ours failed ({} failed, {} not verified, {} pairs without a counted round of ours; \
             the reference: {} failed): exit status 1",
            rounds(f.ours_failed),
            rounds(f.ours_unverified),
            f.pairs_without_ours.len(),
            rounds(f.reference_failed)
        ),
        BenchOutcome::ExpectMissed => println!(
            "  outcome: {} of {} expectations missed or not measured (every run of the suite verified): exit status 4",
            lab_results::expect::misses(&r.expectations).count(),
            r.expectations.len()
        ),
        BenchOutcome::ReferenceFailed => println!(
            "  outcome: only the reference tools failed ({}; every run of ours verified): exit status 3",
            rounds(f.reference_failed)
        ),
    }
}

/// The scaling series: per workload that ran at several QP counts, one row
/// per count with both tools' medians, the ratio, and each tool's median
/// against its own one-QP median.
fn print_scaling(r: &BenchRecord) {
    let mut series: Vec<&str> = Vec::new();
    for p in r.pairs.iter().filter(|p| p.spec.qps > 1) {
        if !series.contains(&p.spec.workload.as_str()) {
            series.push(&p.spec.workload);
        }
    }
    let Some(first) = r.pairs.iter().find(|p| p.spec.qps > 1) else {
        return;
    };
    println!(
        "  scaling: aggregate {} by QPs (each QP runs the one-QP pair's iterations / QPs)",
        first.unit
    );
    let mut table = Table::new(
        "  ",
        &[
            ("workload", Align::Left),
            ("QPs", Align::Right),
            ("perftest median", Align::Right),
            ("ours median", Align::Right),
            ("ratio", Align::Right),
            ("perftest vs 1 QP", Align::Right),
            ("ours vs 1 QP", Align::Right),
        ],
    );
    for workload in series {
        let mut points: Vec<_> = r.pairs.iter().filter(|p| p.spec.workload == workload).collect();
        points.sort_by_key(|p| p.spec.qps);
        let one = points.iter().find(|p| p.spec.qps == 1);
        let against_one = |of: fn(&PairRecord) -> Option<f64>, p: &PairRecord| match (of(p), one.and_then(|o| of(o))) {
            (Some(x), Some(base)) if base > 0.0 => format!("{:.2}x", x / base),
            _ => "-".into(),
        };
        for p in &points {
            table.row([
                workload.to_string(),
                p.spec.qps.to_string(),
                num(p.reference.stats.median),
                num(p.ours.stats.median),
                p.ratio.map_or("-".into(), |x| format!("{x:.3}")),
                against_one(|p| p.reference.stats.median, p),
                against_one(|p| p.ours.stats.median, p),
            ]);
        }
    }
    table.print();
}
