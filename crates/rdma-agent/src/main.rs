//! `rdma-agent` binary: parses flags, sets up logging to stderr, and serves
//! the gRPC agent until SIGINT/SIGTERM.

use std::net::SocketAddr;

use clap::Parser;

/// The RDMA lab agent: runs verified RDMA workloads for labctl.
#[derive(Debug, Parser)]
#[command(name = "rdma-agent", version = rdma_agent::AGENT_VERSION)]
struct Args {
    /// Address to serve gRPC on (the controller reaches it through SSH).
    #[arg(long, default_value = "127.0.0.1:7470", env = "RDMA_AGENT_LISTEN")]
    listen: SocketAddr,
    /// Log filter (RUST_LOG syntax), e.g. "info" or "rdma_agent=debug".
    #[arg(long, default_value = "info", env = "RDMA_AGENT_LOG")]
    log: String,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // libfabric reads FI_UNIVERSE_SIZE when it initialises (a session thread's first
    // fi_getinfo), so it must be in the environment by then; and setenv is only sound
    // while no other thread reads the environment: hence here, before the tokio
    // runtime starts any worker thread.
    let universe = rdma_agent::fabric_session::universe_size_default(
        std::env::var("FI_UNIVERSE_SIZE").ok().as_deref(),
        std::path::Path::new("/sys/class/infiniband"),
    );
    if let Some(size) = universe {
        std::env::set_var("FI_UNIVERSE_SIZE", size);
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(serve(args, universe))
}

async fn serve(args: Args, universe: Option<&str>) -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(tracing_subscriber::EnvFilter::try_new(&args.log)?)
        .init();
    if let Some(size) = universe {
        tracing::info!(
            size,
            "software RoCE device found: set FI_UNIVERSE_SIZE (verbs;ofi_rxm cannot size its CQs for the default)"
        );
    }
    let listener = tokio::net::TcpListener::bind(args.listen).await?;
    tracing::info!(listen = %listener.local_addr()?, version = rdma_agent::AGENT_VERSION, "rdma-agent serving");
    rdma_agent::service::run(listener, shutdown_signal()).await?;
    tracing::info!("rdma-agent stopped");
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
