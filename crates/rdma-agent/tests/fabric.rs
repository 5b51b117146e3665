//! fabric-write through two in-process agents (each on 127.0.0.1:0, as the
//! controller drives them: Prepare the server, Run the client with the
//! server's fabric endpoint, Collect the server) over real `tcp;ofi_rxm` on
//! 127.0.0.1. No VMs and no RDMA device needed.

use agent_proto::v1::agent_client::AgentClient;
use agent_proto::v1::{
    run_event, AbortRequest, CollectRequest, FabricEndpoint, HealthRequest, PrepareRequest, Role, RunRequest,
    SideResult, WorkloadParams,
};
use tonic::transport::Channel;
use tonic::Code;

mod common;
use common::start;

fn params(size: u64, pages: u64) -> WorkloadParams {
    WorkloadParams {
        workload: "fabric-write".into(),
        size,
        iterations: pages,
        seed: 42,
        provider: "tcp;ofi_rxm".into(),
        timeout_ms: 30_000,
        gid_index: -1,
        ..Default::default()
    }
}

async fn prepare_server(server: &mut AgentClient<Channel>, id: &str, p: &WorkloadParams) -> FabricEndpoint {
    let reply = server
        .prepare(PrepareRequest {
            session_id: id.into(),
            params: Some(p.clone()),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .expect("Prepare")
        .into_inner();
    let fabric = reply.fabric.expect("a fabric server returns its fabric endpoint");
    assert_eq!(fabric.provider, "tcp;ofi_rxm");
    assert!(!fabric.fabric_addr.is_empty());
    fabric
}

/// Runs the client to its result, returning the phases seen on the way.
async fn run_client(
    client: &mut AgentClient<Channel>,
    id: &str,
    p: &WorkloadParams,
    peer: FabricEndpoint,
) -> Result<(SideResult, Vec<String>), tonic::Status> {
    let mut stream = client
        .run(RunRequest {
            session_id: id.into(),
            params: Some(p.clone()),
            peer: Some(Default::default()),
            bind_addr: "127.0.0.1".into(),
            fabric_peer: Some(peer),
        })
        .await?
        .into_inner();
    let mut phases = Vec::new();
    while let Some(event) = stream.message().await? {
        match event.event {
            Some(run_event::Event::Progress(p)) => phases.push(p.phase),
            Some(run_event::Event::Result(r)) => return Ok((r, phases)),
            None => {}
        }
    }
    Err(tonic::Status::unavailable("stream ended without a result"))
}

#[tokio::test]
async fn fabric_write_over_tcp_verifies_through_two_agents() {
    let (mut server, _stop_s) = start().await;
    let (mut client, _stop_c) = start().await;
    // 64 pages of 64 KiB: the controller's defaults.
    let p = params(65536, 64);
    let peer = prepare_server(&mut server, "fw1", &p).await;
    let (result, phases) = run_client(&mut client, "fw1", &p, peer).await.expect("Run");
    assert!(result.checked && result.verified, "{}", result.verify_detail);
    assert!(result.verify_detail.contains("64 pages"), "{}", result.verify_detail);
    assert_eq!((result.bytes, result.ops), (64 * 65536, 64));
    assert!(result.elapsed_s > 0.0 && result.bw.unwrap().avg_mib_s > 0.0);
    assert_eq!(result.facts.get("provider").map(String::as_str), Some("tcp;ofi_rxm"));
    for phase in ["connect", "run", "verify"] {
        assert!(phases.iter().any(|p| p == phase), "phases {phases:?}");
    }
    let served = server
        .collect(CollectRequest {
            session_id: "fw1".into(),
            timeout_ms: 10_000,
        })
        .await
        .expect("Collect")
        .into_inner();
    assert_eq!(served.role, Role::Server as i32);
    assert!(!served.checked, "the server writes, the client checks");
    assert_eq!((served.bytes, served.ops), (64 * 65536, 64));
    assert_eq!(served.facts.get("immediate"), result.facts.get("immediate"));
    // Both sessions are gone (their endpoints and MRs with them).
    for agent in [&mut server, &mut client] {
        let h = agent.health(HealthRequest {}).await.unwrap().into_inner();
        assert_eq!(h.active_sessions, 0);
    }
    // The other page-size extreme: 2 × 16 MiB pages, one per MR.
    let p = params(16 << 20, 2);
    let peer = prepare_server(&mut server, "fw2", &p).await;
    let (result, _) = run_client(&mut client, "fw2", &p, peer).await.expect("Run");
    assert!(result.verified, "{}", result.verify_detail);
    assert_eq!(result.bytes, 32 << 20);
}

#[tokio::test]
async fn fabric_write_refusals_and_abort() {
    let (mut server, _stop) = start().await;
    // Too many pages for two 16 MiB MRs.
    let err = server
        .prepare(PrepareRequest {
            session_id: "bad".into(),
            params: Some(params(1 << 20, 33)),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
    assert!(err.message().contains("iterations"), "{}", err.message());
    // An unknown provider names the ones this host has.
    let mut p = params(4096, 4);
    p.provider = "nosuch".into();
    let err = server
        .prepare(PrepareRequest {
            session_id: "np".into(),
            params: Some(p),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(err.message().contains("tcp"), "{}", err.message());
    // Unknown workloads list the fabric ones too.
    let mut p = params(4096, 4);
    p.workload = "fabric-teleport".into();
    let err = server
        .prepare(PrepareRequest {
            session_id: "uw".into(),
            params: Some(p),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("fabric-write"), "{}", err.message());
    // A prepared server that nobody connects to: Abort frees it, and Collect
    // then finds nothing.
    let p = params(4096, 4);
    prepare_server(&mut server, "ab", &p).await;
    assert_eq!(
        server
            .health(HealthRequest {})
            .await
            .unwrap()
            .into_inner()
            .active_sessions,
        1
    );
    let found = server
        .abort(AbortRequest {
            session_id: "ab".into(),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(found);
    assert_eq!(
        server
            .health(HealthRequest {})
            .await
            .unwrap()
            .into_inner()
            .active_sessions,
        0
    );
}

#[tokio::test]
async fn fabric_server_that_never_hears_from_a_client_times_out_in_collect() {
    let (mut server, _stop) = start().await;
    let mut p = params(4096, 4);
    p.timeout_ms = 1500;
    prepare_server(&mut server, "to", &p).await;
    let started = std::time::Instant::now();
    let err = server
        .collect(CollectRequest {
            session_id: "to".into(),
            timeout_ms: 10_000,
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{}", err.message());
    assert!(err.message().contains("control message"), "{}", err.message());
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
}
