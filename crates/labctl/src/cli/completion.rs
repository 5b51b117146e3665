//! `labctl completion SHELL`: the shell's completion script on stdout,
//! generated from the same clap definitions as `--help`.

use std::io::Write;
use std::process::ExitCode;

use clap_complete::Shell;

/// Options of `completion`.
#[derive(Debug, clap::Args)]
pub struct CompletionArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// Prints the script for `command` (labctl's, as `--help` shows it).
pub fn run(completion: &CompletionArgs, mut command: clap::Command) -> anyhow::Result<ExitCode> {
    // Into memory first: clap_complete panics on a failed write, and
    // `labctl completion bash | head` closes the pipe early.
    let mut script = Vec::new();
    clap_complete::generate(completion.shell, &mut command, "labctl", &mut script);
    match std::io::stdout().lock().write_all(&script) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => Err(anyhow::Error::new(e).context("writing to stdout")),
        _ => Ok(ExitCode::SUCCESS),
    }
}
