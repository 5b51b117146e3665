//! What every verb shares: the global flags (the labs file, the lab,
//! verbosity) and the helpers built on them.

use std::path::PathBuf;
use std::time::Duration;

use lab_core::lab::{Lab, LabError};

/// The flags every verb takes.
#[derive(Debug, clap::Args)]
pub struct GlobalArgs {
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
pub fn open_lab(args: &GlobalArgs) -> Result<Lab, LabError> {
    Lab::open(&args.file, args.lab.as_deref())
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
