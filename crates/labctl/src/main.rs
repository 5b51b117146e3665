//! `labctl`: bring up a real multi-node RDMA lab and run verified workloads
//! across it. This binary parses arguments and renders output; the work is in
//! the `lab-core` crate.

mod cli;
mod color;
mod progress;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches};

/// The supervisor's argument: labctl re-executed in the background as
/// `labctl __supervise DIR` (see lab_providers::qemu::supervisor).
const SUPERVISE: &str = "__supervise";

fn main() -> ExitCode {
    // The supervisor is read before clap, so it is no subcommand: it never
    // shows in --help, the completions or the man pages. It runs its own
    // small runtime and must not set up terminal output.
    let mut argv = std::env::args_os().skip(1);
    if argv.next().is_some_and(|a| a == SUPERVISE) {
        return match (argv.next(), argv.next()) {
            (Some(dir), None) => supervise(std::path::Path::new(&dir)),
            _ => {
                eprintln!("usage: labctl {SUPERVISE} DIR (started by `labctl up`, not by hand)");
                ExitCode::from(2)
            }
        };
    }
    // clap prints help and usage errors while it parses: it needs --color
    // and NO_COLOR before the arguments are parsed.
    let when = color::scan_args(std::env::args_os());
    let mut command = cli::Args::command().color(color::clap_choice(when, color::Environment::current()));
    let args =
        cli::Args::from_arg_matches(&command.get_matches_mut()).unwrap_or_else(|e| e.format(&mut command).exit());
    let colors = color::Streams::apply(args.global.color);
    init_tracing(args.global.verbose, true, colors.stderr);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match runtime.block_on(cli::dispatch(args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(cli::exit_code(&e))
        }
    }
}

fn supervise(dir: &std::path::Path) -> ExitCode {
    // Its stdout and stderr are its log file: never colour.
    init_tracing(0, false, false);
    match lab_providers::qemu::supervisor::main(dir) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("supervisor: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stderr (or stdout, for the supervisor, whose stdout is its log
/// file), in colour when `ansi` (decided by `color`).
fn init_tracing(verbose: u8, to_stderr: bool, ansi: bool) {
    use tracing_subscriber::EnvFilter;
    // The AWS SDK logs its own view of failures (a WARN per credential
    // provider tried, say) that labctl's error already explains: its logs
    // appear with -v only.
    let default = match verbose {
        0 => "warn,aws_config=off,aws_runtime=off,aws_smithy_runtime=off,aws_smithy_runtime_api=off,aws_sdk_ec2=off",
        1 => "info,russh=warn",
        _ => "debug,russh=info,h2=info,hyper=info,tower=info",
    };
    let filter = EnvFilter::try_from_env("LABCTL_LOG").unwrap_or_else(|_| EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(false)
        .with_ansi(ansi);
    if to_stderr {
        builder.with_writer(std::io::stderr).init();
    } else {
        builder.init();
    }
}
