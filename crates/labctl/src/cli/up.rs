//! `labctl up`: create and provision the lab, or verify it when it is up.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use lab_core::lab::{UpOptions, UpOutcome};

use lab_state::progress::{phases, StepTime, Timeline};

use super::global::{lock_wait, open_lab, GlobalArgs};
use super::table::{Align, Table};

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
    /// Print where the time went: each phase's slowest node and when the
    /// last node finished it (also saved as up-timings.json in the lab's state).
    #[arg(long)]
    pub timings: bool,
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
    let shown = crate::progress::reporter(up.json);
    let reporter = Timeline::new(shown.as_ref());
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
        outcome = lab.up_with_status(&opts, &reporter) => outcome?,
        signal = super::global::interrupted() => {
            drop(reporter);
            drop(shown);
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
    let (outcome, status) = outcome;
    let status = status?;
    let steps = reporter.steps();
    drop(reporter);
    drop(shown);
    if outcome == UpOutcome::Created {
        // Only for the record; an `up` that worked does not fail over it.
        if let Err(e) = lab_state::write_atomic(&lab.dir.up_timings(), &serde_json::to_vec(&steps)?, 0o644) {
            tracing::warn!(error = %e, "could not save up-timings.json");
        }
    }
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
        if up.timings {
            print_timings(&steps);
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `--timings`: one row per phase, in the order the phases began.
fn print_timings(steps: &[StepTime]) {
    println!("where the time went (seconds; nodes run their phases side by side):");
    let mut table = Table::new(
        "  ",
        &[
            ("phase", Align::Left),
            ("slowest node", Align::Right),
            ("done at", Align::Right),
        ],
    );
    for p in phases(steps) {
        table.row([p.step, format!("{:.1}", p.slowest_s), format!("{:.1}", p.ends_at_s)]);
    }
    for line in table.lines() {
        println!("{line}");
    }
}
