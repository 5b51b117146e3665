//! `labctl up`: create and provision the lab, or verify it when it is up.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use lab_core::lab::{UpOptions, UpOutcome};

use super::global::{lock_wait, open_lab, GlobalArgs};

/// Options of `up`.
#[derive(Debug, ClapArgs)]
pub struct UpArgs {
    /// Keep what was created when `up` fails, for debugging.
    #[arg(long)]
    pub keep_on_failure: bool,
    /// The rdma-agent binary to deploy (default: next to labctl).
    #[arg(long, env = "LABCTL_AGENT")]
    pub agent: Option<PathBuf>,
    /// Seconds to wait for each node's SSH.
    #[arg(long, default_value_t = 240)]
    pub ssh_timeout: u64,
    /// Print the lab's status as JSON when done.
    #[arg(long)]
    pub json: bool,
}

/// The agent binary: `--agent`, else `rdma-agent` beside this executable.
pub fn agent_path(explicit: Option<&PathBuf>) -> PathBuf {
    explicit.cloned().unwrap_or_else(|| {
        std::env::current_exe()
            .ok()
            .and_then(|exe| exe.parent().map(|dir| dir.join("rdma-agent")))
            .unwrap_or_else(|| PathBuf::from("rdma-agent"))
    })
}

pub async fn run(args: &GlobalArgs, up: &UpArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let reporter = crate::report::reporter(up.json);
    let opts = UpOptions {
        keep_on_failure: up.keep_on_failure,
        agent_binary: agent_path(up.agent.as_ref()),
        ssh_wait: Duration::from_secs(up.ssh_timeout),
        lock_wait: lock_wait(),
    };
    let started = std::time::Instant::now();
    let was_up = matches!(lab.dir.load(), Ok(Some(s)) if s.phase == lab_state::Phase::Ready);
    // Ctrl-C or SIGTERM in the middle of `up` removes what this `up` created;
    // a lab that was already up, or one another labctl holds, is left alone.
    let outcome = tokio::select! {
        outcome = lab.up(&opts, reporter.as_ref()) => outcome?,
        signal = super::global::interrupted() => {
            drop(reporter);
            if was_up {
                eprintln!("labctl: {signal}; the lab was already up and is left as it was");
            } else if lab.down(std::time::Duration::ZERO).await.is_ok() {
                eprintln!("labctl: {signal}; removed what `up` created");
            } else {
                eprintln!("labctl: {signal}; another labctl holds the lab, left it alone");
            }
            return Ok(ExitCode::from(130));
        }
    };
    drop(reporter);
    let status = lab.status().await?;
    if up.json {
        println!("{}", serde_json::to_string_pretty(&status)?);
    } else {
        let verb = match outcome {
            UpOutcome::Created => "is up",
            UpOutcome::AlreadyUp => "was already up (verified)",
        };
        println!(
            "lab `{}` {verb} in {:.1}s",
            lab.spec.name,
            started.elapsed().as_secs_f64()
        );
        super::status::print_table(&status);
    }
    Ok(ExitCode::SUCCESS)
}
