//! Command-line arguments and dispatch: one file per verb, the flags and
//! helpers every verb shares in `global`.

mod bench;
mod bulk;
mod capture;
mod ci;
mod completion;
mod cp;
mod doctor;
mod down;
mod exec;
mod global;
mod graph;
mod image;
mod impair;
mod init;
mod man;
mod report;
mod report_html;
mod run;
mod run_collective;
mod schema;
mod ssh;
mod status;
mod table;
mod trace;
mod trace_file;
mod up;

use std::process::ExitCode;

use clap::{CommandFactory, Parser, Subcommand};
use lab_core::lab::LabError;

pub use global::GlobalArgs;

/// Bring up a real multi-node RDMA lab and run verified workloads across it.
#[derive(Debug, Parser)]
#[command(name = "labctl", version, about, propagate_version = true)]
pub struct Args {
    /// The flags every verb takes.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The verbs.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create the lab's nodes, set up rxe and start rdma-agent on each (idempotent).
    Up(up::UpArgs),
    /// Remove the lab's VMs, processes and state (idempotent).
    Down(down::DownArgs),
    /// Show the lab: VMs, SSH, agents, RDMA ports.
    Status(status::StatusArgs),
    /// Is every node's fabric healthy, and does RDMA work between every pair? Checks with evidence and fixes.
    Doctor(doctor::DoctorArgs),
    /// Draw the lab's topology (nodes, data network, RDMA devices, GIDs, agents) as Mermaid, DOT or SVG.
    Graph(graph::GraphArgs),
    /// Run a command on a node, several or all (in parallel); its exit status is ours.
    Exec(exec::ExecArgs),
    /// Copy files between this machine and nodes (NODE:PATH, @all:PATH), checked by sha256.
    Cp(cp::CpArgs),
    /// Run a workload between two nodes: move bytes, verify them, measure.
    Run(run::RunArgs),
    /// Open an interactive shell on a node.
    Ssh(ssh::SshArgs),
    /// Compare our workloads with perftest on the same two nodes (alternating, min/median/max).
    Bench(bench::BenchArgs),
    /// Bring the lab up, run its suite of workloads, tear it down; JUnit XML and JSON results.
    Ci(ci::CiArgs),
    /// The same bytes by RDMA WRITE and by TCP between two nodes: time, MiB/s, CPU; CSV and charts.
    Bulk(bulk::BulkArgs),
    /// Print the JSON schema of labs.yaml (for editors).
    Schema,
    /// Write the built-in labs out as a commented labs.yaml to start from.
    Init(init::InitArgs),
    /// The cached QEMU node images: list them (`ls`), remove those no lab uses (`prune`).
    Image(image::ImageArgs),
    /// Impair a node's data link with tc netem (loss, delay, jitter, rate, reorder, duplicate), or --clear it.
    Impair(impair::ImpairArgs),
    /// Capture a node's RoCEv2 traffic with tcpdump into a pcap on this machine.
    Capture(capture::CaptureArgs),
    /// Read a trace of `run --trace` back: a swimlane of both nodes' events in time.
    Trace(trace::TraceArgs),
    /// Saved runs and benches: list, show, compare two (regression diff), export CSV, plot sweeps.
    Report(report::ReportArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell) to stdout.
    Completion(completion::CompletionArgs),
    /// Write man pages (labctl.1 and one per verb) into a directory.
    Man(man::ManArgs),
}

/// Runs the chosen verb.
pub async fn dispatch(args: Args) -> anyhow::Result<ExitCode> {
    match &args.command {
        Command::Up(a) => up::run(&args.global, a).await,
        Command::Down(a) => down::run(&args.global, a).await,
        Command::Status(a) => status::run(&args.global, a).await,
        Command::Doctor(a) => doctor::run(&args.global, a).await,
        Command::Graph(a) => graph::run(&args.global, a).await,
        Command::Exec(a) => exec::run(&args.global, a).await,
        Command::Cp(a) => cp::run(&args.global, a).await,
        // A collective runs on every node at once; the rest on a pair.
        Command::Run(a)
            if workload_catalogue::find(&a.request.workload).is_some_and(|w| w.shape.collective().is_some()) =>
        {
            run_collective::run(&args.global, a).await
        }
        Command::Run(a) => run::run(&args.global, a).await,
        Command::Ssh(a) => ssh::run(&args.global, a),
        Command::Bench(a) => bench::run(&args.global, a).await,
        Command::Ci(a) => ci::run(&args.global, a).await,
        Command::Bulk(a) => bulk::run(&args.global, a).await,
        Command::Schema => schema::run(),
        Command::Init(a) => init::run(&args.global, a),
        Command::Image(a) => image::run(&args.global, a).await,
        Command::Impair(a) => impair::run(&args.global, a).await,
        Command::Capture(a) => capture::run(&args.global, a).await,
        Command::Report(a) => report::run(&args.global, a).await,
        Command::Trace(a) => trace::run(&args.global, a),
        // Both from the definitions --help prints.
        Command::Completion(a) => completion::run(a, Args::command()),
        Command::Man(a) => man::run(a, Args::command()),
    }
}

/// Exit code for an error: 2 for bad input, 1 for everything else.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<lab_model::suite::SuiteError>().is_some()
        || e.downcast_ref::<global::BadInput>().is_some()
        || e.downcast_ref::<init::WouldOverwrite>().is_some()
        || e.downcast_ref::<graph::UnknownExtension>().is_some()
        || e.downcast_ref::<report_html::HtmlInputError>().is_some()
        || e.downcast_ref::<lab_core::params::RequestError>().is_some()
    {
        return 2;
    }
    match e.downcast_ref::<lab_core::impair::ImpairError>() {
        Some(lab_core::impair::ImpairError::Spec(_))
        | Some(lab_core::impair::ImpairError::Lab(LabError::UnknownNode { .. })) => return 2,
        _ => {}
    }
    if let Some(lab_core::capture::CaptureError::Lab(LabError::UnknownNode { .. })) =
        e.downcast_ref::<lab_core::capture::CaptureError>()
    {
        return 2;
    }
    if let Some(lab_core::bench::BenchError::Lab(LabError::UnknownNode { .. } | LabError::Config(_))) =
        e.downcast_ref::<lab_core::bench::BenchError>()
    {
        return 2;
    }
    if e.downcast_ref::<lab_core::copy::CopyError>()
        .is_some_and(|e| e.is_bad_input())
    {
        return 2;
    }
    if e.downcast_ref::<lab_results::trace_view::TraceViewError>()
        .is_some_and(|e| e.is_bad_input())
    {
        return 2;
    }
    if e.downcast_ref::<lab_results::report::ReportError>()
        .is_some_and(|e| e.is_bad_input())
    {
        return 2;
    }
    match e.downcast_ref::<LabError>() {
        Some(LabError::Config(_) | LabError::UnknownNode { .. } | LabError::Placeholder(_)) => 2,
        _ => match e.downcast_ref::<lab_core::run::RunError>() {
            Some(lab_core::run::RunError::Lab(LabError::Config(_) | LabError::UnknownNode { .. })) => 2,
            Some(lab_core::run::RunError::BadRanks { .. }) => 2,
            _ => 1,
        },
    }
}
