//! `rdma-agent` binary: parses flags, sets up logging to stderr, and serves
//! the gRPC agent until SIGINT/SIGTERM; `rdma-agent probe` asks a running
//! agent for its health, as its controller would.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use agent_proto::auth::{AgentSecret, NODE_SECRET_FILE};
use clap::{Parser, Subcommand};

/// The RDMA lab agent: runs verified RDMA workloads for labctl.
#[derive(Debug, Parser)]
#[command(name = "rdma-agent", version = rdma_agent::AGENT_VERSION)]
struct Args {
    #[command(subcommand)]
    command: Option<Command>,
    /// Address to serve gRPC on (the controller reaches it through SSH).
    #[arg(long, default_value = "127.0.0.1:7470", env = "RDMA_AGENT_LISTEN")]
    listen: SocketAddr,
    /// The lab's agent secret (root-only, mode 0600, written by labctl at
    /// `up`); every call must carry it.
    #[arg(long, global = true, default_value = NODE_SECRET_FILE, env = "RDMA_AGENT_SECRET_FILE")]
    secret_file: PathBuf,
    /// Log filter (RUST_LOG syntax), e.g. "info" or "rdma_agent=debug".
    #[arg(long, default_value = "info", env = "RDMA_AGENT_LOG")]
    log: String,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Calls Health on a running agent with the secret of --secret-file (or
    /// none, when that file cannot be read) and prints what it answered.
    /// Exit status 0 when it answered, 1 when it refused or was unreachable.
    Probe {
        /// The agent's address.
        #[arg(long, default_value = "127.0.0.1:7470")]
        addr: SocketAddr,
    },
}

fn main() -> anyhow::Result<ExitCode> {
    let args = Args::parse();
    if let Some(Command::Probe { addr }) = args.command {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        return Ok(runtime.block_on(probe(addr, &args.secret_file)));
    }
    // Before any thread, so an idle agent gives back what a session used.
    rdma_agent::verbs::keep_large_allocations_unpooled();
    // Read before serving: an agent without its lab's secret must not start.
    let secret = AgentSecret::read_file(&args.secret_file)?;
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
        .block_on(serve(args, secret, universe))?;
    Ok(ExitCode::SUCCESS)
}

async fn probe(addr: SocketAddr, secret_file: &Path) -> ExitCode {
    use agent_proto::v1::agent_client::AgentClient;
    use agent_proto::v1::HealthRequest;
    let secret = match AgentSecret::read_file(secret_file) {
        Ok(secret) => Some(secret),
        Err(e) => {
            eprintln!("rdma-agent probe: {e}; calling without a secret");
            None
        }
    };
    let channel = match tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
        .expect("a socket address is a valid URI")
        .connect_timeout(std::time::Duration::from_secs(5))
        .connect()
        .await
    {
        Ok(channel) => channel,
        Err(e) => {
            println!("unreachable: {addr}: {e}");
            return ExitCode::from(1);
        }
    };
    let request = tonic::Request::new(HealthRequest {});
    let request = match &secret {
        Some(secret) => secret.attach(request),
        None => request,
    };
    match AgentClient::new(channel).health(request).await {
        Ok(reply) => {
            println!("healthy: rdma-agent {}", reply.into_inner().version);
            ExitCode::SUCCESS
        }
        Err(status) => {
            println!("refused: {:?}: {}", status.code(), status.message());
            ExitCode::from(1)
        }
    }
}

async fn serve(args: Args, secret: AgentSecret, universe: Option<&str>) -> anyhow::Result<()> {
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
    rdma_agent::service::run(listener, secret, shutdown_signal()).await?;
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
