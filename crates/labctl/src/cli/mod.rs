//! Command-line arguments and dispatch: one file per verb.

mod bench;
mod bulk;
mod capture;
mod ci;
mod down;
mod exec;
mod impair;
mod report;
mod run;
mod schema;
mod ssh;
mod status;
mod up;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use lab_core::lab::{Lab, LabError};

/// Bring up a real multi-node RDMA lab and run verified workloads across it.
#[derive(Debug, Parser)]
#[command(name = "labctl", version, about, propagate_version = true)]
pub struct Args {
    /// The labs file.
    #[arg(
        short = 'f',
        long = "file",
        global = true,
        default_value = "labs.yaml",
        env = "LABCTL_FILE"
    )]
    pub file: PathBuf,
    /// The lab to act on (default: the first in the file).
    #[arg(long, global = true, env = "LABCTL_LAB")]
    pub lab: Option<String>,
    /// More log output (-v info, -vv debug); LABCTL_LOG takes a tracing filter.
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
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
    /// Run a command on a node and return its exit status.
    Exec(exec::ExecArgs),
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
    /// Impair a node's data link with tc netem (loss, delay, jitter, rate, reorder, duplicate), or --clear it.
    Impair(impair::ImpairArgs),
    /// Capture a node's RoCEv2 traffic with tcpdump into a pcap on this machine.
    Capture(capture::CaptureArgs),
    /// Saved runs and benches: list, show, compare two (regression diff), export CSV, plot sweeps.
    Report(report::ReportArgs),
    /// Internal: the per-lab VM supervisor.
    #[command(name = "__supervise", hide = true)]
    Supervise {
        /// The lab's state directory.
        dir: PathBuf,
    },
}

/// How long a verb waits for another labctl working on the same lab.
pub fn lock_wait() -> Duration {
    let secs = std::env::var("LABCTL_LOCK_WAIT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(600);
    Duration::from_secs(secs)
}

/// Opens the selected lab.
pub fn open_lab(args: &Args) -> Result<Lab, LabError> {
    Lab::open(&args.file, args.lab.as_deref())
}

/// Runs the chosen verb.
pub async fn dispatch(args: Args) -> anyhow::Result<ExitCode> {
    match &args.command {
        Command::Up(a) => up::run(&args, a).await,
        Command::Down(a) => down::run(&args, a).await,
        Command::Status(a) => status::run(&args, a).await,
        Command::Exec(a) => exec::run(&args, a).await,
        Command::Run(a) => run::run(&args, a).await,
        Command::Ssh(a) => ssh::run(&args, a),
        Command::Bench(a) => bench::run(&args, a).await,
        Command::Ci(a) => ci::run(&args, a).await,
        Command::Bulk(a) => bulk::run(&args, a).await,
        Command::Schema => schema::run(),
        Command::Impair(a) => impair::run(&args, a).await,
        Command::Capture(a) => capture::run(&args, a).await,
        Command::Report(a) => report::run(&args, a).await,
        Command::Supervise { .. } => unreachable!("handled before the runtime starts"),
    }
}

/// Exit code for an error: 2 for bad input, 1 for everything else.
pub fn exit_code(e: &anyhow::Error) -> u8 {
    if e.downcast_ref::<lab_model::suite::SuiteError>().is_some() {
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
    if e.downcast_ref::<lab_results::report::ReportError>()
        .is_some_and(|e| e.is_bad_input())
    {
        return 2;
    }
    match e.downcast_ref::<LabError>() {
        Some(LabError::Config(_) | LabError::UnknownNode { .. }) => 2,
        _ => match e.downcast_ref::<lab_core::run::RunError>() {
            Some(lab_core::run::RunError::Lab(LabError::Config(_) | LabError::UnknownNode { .. })) => 2,
            _ => 1,
        },
    }
}

/// Resolves when the process gets SIGINT or SIGTERM; says which.
pub async fn interrupted() -> &'static str {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => "terminated",
        _ = int.recv() => "interrupted",
    }
}
