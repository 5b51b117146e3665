//! bulk-tcp end to end through two in-process agents on 127.0.0.1: it needs
//! no RDMA device, so the whole Prepare → Run → Collect path runs here for
//! real (the RDMA counterpart, bulk-rdma, runs on the lab: tests/lab/bulk.rs).

use agent_proto::v1::{
    run_event, AbortRequest, CmMode, CollectRequest, HealthRequest, PrepareRequest, Role, RunRequest, SideResult,
    WorkloadParams,
};
use tonic::Code;

use crate::common::{self, start};

fn params(total: u64, chunk: u64, seed: u64) -> WorkloadParams {
    WorkloadParams {
        workload: "bulk-tcp".into(),
        size: chunk,
        iterations: total.div_ceil(chunk),
        total,
        seed,
        gid_index: -1,
        timeout_ms: 20_000,
        ..Default::default()
    }
}

/// Prepare on one agent, Run on another, Collect: (server, client).
async fn transfer(p: WorkloadParams, id: &str) -> (SideResult, SideResult) {
    transfer_after(p, id, |_| {}).await
}

/// [`transfer`], with `meanwhile` run between the server's Prepare and the
/// client's Run (given the server's endpoint).
async fn transfer_after(
    p: WorkloadParams,
    id: &str,
    meanwhile: impl FnOnce(&agent_proto::v1::Endpoint),
) -> (SideResult, SideResult) {
    let (mut server, _stop_server) = start().await;
    let (mut client, _stop_client) = start().await;
    let endpoint = server
        .prepare(PrepareRequest {
            session_id: id.into(),
            params: Some(p.clone()),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .expect("the server prepares")
        .into_inner()
        .endpoint
        .expect("an endpoint");
    assert_eq!(endpoint.address, "127.0.0.1");
    assert_ne!(endpoint.port, 0, "the server listens on a real port");
    meanwhile(&endpoint);
    let mut stream = client
        .run(RunRequest {
            session_id: id.into(),
            params: Some(p),
            peer: Some(endpoint),
            bind_addr: "127.0.0.1".into(),
            fabric_peer: None,
            fabric_peers: Vec::new(),
            rank_listeners: Vec::new(),
        })
        .await
        .expect("the client runs")
        .into_inner();
    let client_side = loop {
        match stream.message().await.expect("the run stream").expect("a result").event {
            Some(run_event::Event::Result(r)) => break r,
            _ => continue,
        }
    };
    let server_side = server
        .collect(CollectRequest {
            session_id: id.into(),
            timeout_ms: 10_000,
        })
        .await
        .expect("the server's result")
        .into_inner();
    (server_side, client_side)
}

#[tokio::test]
async fn test_bulk_tcp_moves_and_verifies_every_byte_with_timelines() {
    let total = 3 * 1024 * 1024 + 12_345; // the last chunk is short
    let chunk = 64 * 1024;
    let (server, client) = transfer(params(total, chunk, 7), "tcp-ok").await;
    assert!(server.checked && server.verified, "{}", server.verify_detail);
    assert!(
        server.verify_detail.contains(&format!("all {total} B")),
        "{}",
        server.verify_detail
    );
    assert!(!client.checked, "the server is the one that checks");
    assert_eq!((server.bytes, client.bytes), (total, total));
    assert_eq!(client.ops, total.div_ceil(chunk));
    for side in [&server, &client] {
        let t = &side.timeline;
        assert!(!t.is_empty() && t.len() <= rdma_agent::timeline::MAX_POINTS);
        assert_eq!(t.last().unwrap().bytes, total, "a timeline ends at the total");
        assert!(t.windows(2).all(|w| w[0].bytes <= w[1].bytes && w[0].t_s <= w[1].t_s));
        assert!(side.elapsed_s > 0.0 && side.cpu.is_some());
        assert_eq!(side.facts.get("total"), Some(&total.to_string()));
        assert_eq!(side.facts.get("chunk"), Some(&chunk.to_string()));
        assert_eq!(side.facts.get("transport").map(String::as_str), Some("tcp"));
    }
    assert_eq!(
        client.timeline.len() as u64,
        total.div_ceil(chunk),
        "one sample per chunk"
    );
    assert!(client.bw.unwrap().avg_mib_s > 0.0);
}

#[tokio::test]
async fn test_bulk_tcp_total_zero_means_size_times_iterations() {
    let mut p = params(0, 4096, 3);
    p.iterations = 10;
    let (server, client) = transfer(p, "tcp-fallback").await;
    assert!(server.verified, "{}", server.verify_detail);
    assert_eq!((server.bytes, client.bytes), (40_960, 40_960));
}

#[tokio::test]
async fn test_bulk_tcp_refuses_oob_and_oversized_totals() {
    let (mut agent, _stop) = start().await;
    let mut oob = params(4096, 1024, 1);
    oob.cm = CmMode::Oob as i32;
    let mut huge = params(1 << 40, 1024, 1);
    huge.iterations = 1;
    for (p, want) in [(oob, "cm"), (huge, "total 1099511627776 B is out of range")] {
        let err = agent
            .prepare(PrepareRequest {
                session_id: "refused".into(),
                params: Some(p),
                role: Role::Server as i32,
                bind_addr: "127.0.0.1".into(),
            })
            .await
            .unwrap_err();
        assert_eq!(err.code(), Code::InvalidArgument, "{}", err.message());
        assert!(err.message().contains(want), "{}", err.message());
    }
    assert_eq!(
        agent
            .health(HealthRequest {})
            .await
            .unwrap()
            .into_inner()
            .active_sessions,
        0
    );
}

#[tokio::test]
async fn test_bulk_tcp_server_aborted_while_waiting_frees_its_session() {
    let (mut agent, _stop) = start().await;
    agent
        .prepare(PrepareRequest {
            session_id: "waiting".into(),
            params: Some(params(1 << 20, 4096, 1)),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap();
    let found = agent
        .abort(AbortRequest {
            session_id: "waiting".into(),
            reason: "test".into(),
        })
        .await
        .unwrap()
        .into_inner()
        .found;
    assert!(found);
    assert_eq!(
        agent
            .health(HealthRequest {})
            .await
            .unwrap()
            .into_inner()
            .active_sessions,
        0
    );
}

#[tokio::test]
async fn test_bulk_tcp_server_refuses_strangers_and_takes_its_client() {
    use std::io::Write;
    let mut p = params(1 << 20, 64 << 10, 21);
    p.run_nonce = b"this run's nonce".to_vec();
    let strangers = std::sync::Mutex::new(Vec::new());
    let (server, client) = transfer_after(p.clone(), "strangers", |endpoint| {
        let at = std::net::SocketAddr::new(endpoint.address.parse().unwrap(), endpoint.port as u16);
        // Bytes that are no proof, a proof cut short, another run's proof.
        let another_runs = common::lab_secret().connect_proof(b"another run");
        for first in [
            vec![0x42; 16],
            another_runs.as_bytes()[..5].to_vec(),
            another_runs.as_bytes().to_vec(),
        ] {
            let mut stream = std::net::TcpStream::connect(at).unwrap();
            strangers.lock().unwrap().push(stream.local_addr().unwrap().to_string());
            stream.write_all(&first).unwrap();
            // The server closes each connection without answering.
            let mut answer = Vec::new();
            let _ = std::io::Read::read_to_end(&mut stream, &mut answer);
            assert!(answer.is_empty(), "a stranger was answered {answer:?}");
        }
    })
    .await;
    assert!(server.verified, "{}", server.verify_detail);
    assert_eq!(client.bytes, 1 << 20, "{client:?}");
    let strangers = strangers.into_inner().unwrap();
    assert_eq!(
        server.facts["refused_connects"],
        format!("3 ({})", strangers.join(", "))
    );
    assert_ne!(
        server.facts["peer"], strangers[0],
        "the server's peer is the run's client"
    );
}
