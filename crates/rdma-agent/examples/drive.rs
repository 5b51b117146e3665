//! Dev aid: drives one workload across two agents the way the controller
//! does (Prepare server [, Prepare client, Connect], Run client, Collect
//! server), printing progress and both results. Reach the agents with
//! `ssh -L` forwards; e.g.
//! `cargo run --release --example drive -- --server 127.0.0.1:17470 --client 127.0.0.1:17471 --workload write-read --oob`.

use agent_proto::v1::agent_client::AgentClient;
use agent_proto::v1::{
    run_event, CmMode, CollectRequest, CompletionMode, ConnectRequest, PrepareRequest, Role, RunRequest, WorkloadParams,
};
use clap::Parser;
use tonic::transport::{Channel, Endpoint};

#[derive(Debug, Parser)]
struct Args {
    #[arg(long, default_value = "127.0.0.1:17470")]
    server: String,
    #[arg(long, default_value = "127.0.0.1:17471")]
    client: String,
    #[arg(long, default_value = "10.77.0.1")]
    server_addr: String,
    #[arg(long, default_value = "10.77.0.2")]
    client_addr: String,
    #[arg(long, default_value = "write-read")]
    workload: String,
    #[arg(long, default_value_t = 4096)]
    size: u64,
    #[arg(long, default_value_t = 1)]
    iterations: u64,
    #[arg(long, default_value_t = 0.0)]
    duration: f64,
    #[arg(long)]
    oob: bool,
    #[arg(long)]
    event: bool,
    #[arg(long)]
    ping_pong: bool,
    #[arg(long)]
    corrupt_rkey: bool,
    #[arg(long)]
    all_sizes: bool,
    #[arg(long, default_value_t = 0)]
    max_size: u64,
    #[arg(long, default_value_t = 0)]
    batches: u32,
    #[arg(long, default_value_t = 0)]
    tx_depth: u32,
    #[arg(long, default_value_t = 0)]
    cq_moderation: u32,
    #[arg(long, default_value_t = 0)]
    post_list: u32,
    #[arg(long, default_value_t = 0)]
    inline_size: u32,
    #[arg(long, default_value_t = 20000)]
    timeout_ms: u64,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

async fn connect(addr: &str) -> anyhow::Result<AgentClient<Channel>> {
    Ok(AgentClient::new(
        Endpoint::from_shared(format!("http://{addr}"))?.connect().await?,
    ))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let params = WorkloadParams {
        workload: a.workload.clone(),
        size: a.size,
        iterations: a.iterations,
        duration_s: a.duration,
        all_sizes: a.all_sizes,
        max_size: a.max_size,
        tx_depth: a.tx_depth,
        cq_moderation: a.cq_moderation,
        post_list: a.post_list,
        inline_size: a.inline_size,
        cm: if a.oob { CmMode::Oob } else { CmMode::RdmaCm } as i32,
        completion: if a.event {
            CompletionMode::Event
        } else {
            CompletionMode::Poll
        } as i32,
        gid_index: -1,
        seed: a.seed,
        ping_pong: a.ping_pong,
        corrupt_rkey: a.corrupt_rkey,
        timeout_ms: a.timeout_ms,
        batches: a.batches,
        ..Default::default()
    };
    let session = format!("drive-{}", std::process::id());
    let mut server = connect(&a.server).await?;
    let mut client = connect(&a.client).await?;
    let t = std::time::Instant::now();
    let server_ep = server
        .prepare(PrepareRequest {
            session_id: session.clone(),
            params: Some(params.clone()),
            role: Role::Server as i32,
            bind_addr: a.server_addr.clone(),
        })
        .await?
        .into_inner()
        .endpoint;
    println!("server endpoint after {:?}: {server_ep:?}", t.elapsed());
    if a.oob {
        let client_ep = client
            .prepare(PrepareRequest {
                session_id: session.clone(),
                params: Some(params.clone()),
                role: Role::Client as i32,
                bind_addr: a.client_addr.clone(),
            })
            .await?
            .into_inner()
            .endpoint;
        println!("client endpoint: {client_ep:?}");
        server
            .connect(ConnectRequest {
                session_id: session.clone(),
                peer: client_ep,
            })
            .await?;
    }
    let run = client
        .run(RunRequest {
            session_id: session.clone(),
            params: Some(params.clone()),
            peer: server_ep,
            bind_addr: a.client_addr.clone(),
            fabric_peer: None,
            fabric_peers: Vec::new(),
            rank_listeners: Vec::new(),
        })
        .await;
    let mut client_outcome = Err(anyhow::anyhow!("no result"));
    match run {
        Err(status) => client_outcome = Err(anyhow::anyhow!("Run: {status}")),
        Ok(stream) => {
            let mut stream = stream.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(ev)) => match ev.event {
                        Some(run_event::Event::Progress(p)) => {
                            println!(
                                "progress {} bytes={} ops={} {:.2}s {}",
                                p.phase, p.bytes, p.ops, p.elapsed_s, p.message
                            )
                        }
                        Some(run_event::Event::Result(r)) => client_outcome = Ok(r),
                        None => {}
                    },
                    Ok(None) => break,
                    Err(status) => {
                        client_outcome = Err(anyhow::anyhow!("Run stream: {status}"));
                        break;
                    }
                }
            }
        }
    }
    match &client_outcome {
        Ok(r) => println!("CLIENT RESULT: {r:#?}"),
        Err(e) => println!("CLIENT ERROR: {e}"),
    }
    let collected = server
        .collect(CollectRequest {
            session_id: session.clone(),
            timeout_ms: a.timeout_ms,
        })
        .await;
    match collected {
        Ok(r) => println!("SERVER RESULT: {:#?}", r.into_inner()),
        Err(s) => println!("SERVER ERROR: {s}"),
    }
    println!("total {:?}", t.elapsed());
    Ok(())
}
