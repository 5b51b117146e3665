//! `labctl trace show`: a trace written by `labctl run --trace` as a
//! terminal swimlane (client | wire | server). Reads the file alone; the
//! lab need not be up.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args as ClapArgs, Subcommand};
use lab_results::trace_view;

use super::global::GlobalArgs;

/// Options of `trace`.
#[derive(Debug, ClapArgs)]
pub struct TraceArgs {
    /// What to do with a trace.
    #[command(subcommand)]
    pub command: TraceCommand,
}

/// The trace verbs.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Draw a trace as a swimlane: one row per event, client left, wire middle, server right.
    Show {
        /// The file `labctl run WORKLOAD --trace FILE.json` wrote.
        file: PathBuf,
        /// Show at most N events (0: all).
        #[arg(long, value_name = "N", default_value_t = 200)]
        limit: usize,
        /// Columns to fill [default: the terminal's width, else 120].
        #[arg(long, value_name = "COLUMNS")]
        width: Option<usize>,
        /// Print the rows as JSON instead.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `labctl trace`.
pub fn run(_global: &GlobalArgs, args: &TraceArgs) -> anyhow::Result<ExitCode> {
    match &args.command {
        TraceCommand::Show {
            file,
            limit,
            width,
            json,
        } => {
            let lane = trace_view::load(file, *limit)?;
            if *json {
                println!("{}", serde_json::to_string_pretty(&lane)?);
            } else {
                let width = width.unwrap_or_else(terminal_width);
                print!("{}", trace_view::render(&lane, width));
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The terminal's width, or 120 when standard output is not a terminal.
fn terminal_width() -> usize {
    let term = console::Term::stdout();
    if term.is_term() {
        usize::from(term.size().1)
    } else {
        120
    }
}
