//! `labctl`: bring up a real multi-node RDMA lab and run verified workloads
//! across it. This binary parses arguments and renders output; the work is in
//! the `lab-core` crate.

mod cli;
mod report;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Args::parse();
    // The supervisor is labctl re-executed in the background; it runs its own
    // small runtime and must not set up terminal output.
    if let cli::Command::Supervise { dir } = &args.command {
        init_tracing(args.global.verbose, false);
        return match lab_providers::qemu::supervisor::main(dir) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("supervisor: {e}");
                ExitCode::FAILURE
            }
        };
    }
    init_tracing(args.global.verbose, true);
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

fn init_tracing(verbose: u8, to_stderr: bool) {
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
    // Colour codes only for a terminal: logs piped to a file or CI stay plain text.
    let ansi = if to_stderr {
        std::io::IsTerminal::is_terminal(&std::io::stderr())
    } else {
        std::io::IsTerminal::is_terminal(&std::io::stdout())
    };
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
