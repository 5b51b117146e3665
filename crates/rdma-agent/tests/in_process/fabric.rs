//! fabric-write, fabric-bw and fabric-lat through two in-process agents (each
//! on 127.0.0.1:0, as the controller drives them: Prepare the server, Run the
//! client with the server's fabric endpoint, Collect the server) over real
//! `tcp;ofi_rxm` on 127.0.0.1; and the agent against a misbehaving peer made
//! of the `fabric` crate in this process (wrong bytes, a peer that vanishes).
//! No VMs and no RDMA device needed.

use agent_proto::v1::{
    run_event, AbortRequest, CollectRequest, FabricEndpoint, HealthRequest, PrepareRequest, Role, RunRequest,
    SideResult, WorkloadParams,
};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use fabric::perf::{BwClient, LatServer};
use fabric::write::{Gate, Message, Server};
use fabric::{Endpoint, Hints};
use tonic::Code;

use crate::common::{self, start};

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

async fn prepare_server(server: &mut common::Client, id: &str, p: &WorkloadParams) -> FabricEndpoint {
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
    client: &mut common::Client,
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
            fabric_peers: Vec::new(),
            rank_listeners: Vec::new(),
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

fn perf(workload: &str, size: u64, iterations: u64) -> WorkloadParams {
    WorkloadParams {
        workload: workload.into(),
        size,
        iterations,
        ..params(size, iterations)
    }
}

async fn collect(server: &mut common::Client, id: &str) -> Result<SideResult, tonic::Status> {
    server
        .collect(CollectRequest {
            session_id: id.into(),
            timeout_ms: 20_000,
        })
        .await
        .map(|r| r.into_inner())
}

#[tokio::test]
async fn fabric_bw_over_tcp_measures_and_the_server_verifies() {
    let (mut server, _stop_s) = start().await;
    let (mut client, _stop_c) = start().await;
    // 200 × 64 KiB with 128 outstanding (the controller's defaults).
    let p = perf("fabric-bw", 65536, 200);
    let peer = prepare_server(&mut server, "bw1", &p).await;
    let (result, phases) = run_client(&mut client, "bw1", &p, peer).await.expect("Run");
    let served = collect(&mut server, "bw1").await.expect("Collect");
    assert!(served.checked && served.verified, "{}", served.verify_detail);
    assert!(served.verify_detail.contains("seed 42"), "{}", served.verify_detail);
    assert!(!result.checked, "the server checks fabric-bw, as write-bw");
    assert_eq!((result.bytes, result.ops), (200 * 65536, 200));
    assert_eq!((served.bytes, served.ops), (200 * 65536, 200));
    let bw = result.bw.expect("bandwidth");
    assert!(bw.avg_mib_s > 0.0 && bw.peak_mib_s >= bw.avg_mib_s && bw.avg_gbps > 0.0);
    // Messages and bytes over the same clock: rate × 64 KiB is the bandwidth.
    let from_rate = bw.msg_rate_mpps * 1e6 * 65536.0 / (1u64 << 20) as f64;
    assert!(
        (from_rate - bw.avg_mib_s).abs() / bw.avg_mib_s < 1e-6,
        "{from_rate} vs {}",
        bw.avg_mib_s
    );
    assert_eq!(result.facts.get("tx_depth").map(String::as_str), Some("128"));
    assert!(result.sweep.is_empty());
    for phase in ["connect", "run", "verify"] {
        assert!(phases.iter().any(|p| p == phase), "phases {phases:?}");
    }
    // A sweep 2 B .. 64 KiB, and a timed run with a shallow window.
    let mut p = perf("fabric-bw", 1, 20);
    p.all_sizes = true;
    p.max_size = 65536;
    let peer = prepare_server(&mut server, "bw2", &p).await;
    let (result, _) = run_client(&mut client, "bw2", &p, peer).await.expect("Run");
    let served = collect(&mut server, "bw2").await.expect("Collect");
    assert!(served.verified, "{}", served.verify_detail);
    let sizes: Vec<u64> = result.sweep.iter().map(|s| s.size).collect();
    assert_eq!(sizes, (1..=16).map(|k| 1u64 << k).collect::<Vec<_>>());
    assert!(result
        .sweep
        .iter()
        .all(|s| s.iterations == 20 && s.bw.unwrap().avg_mib_s > 0.0));
    assert_eq!(result.bw, result.sweep.last().unwrap().bw);
    let mut p = perf("fabric-bw", 4096, 0);
    p.duration_s = 0.3;
    p.tx_depth = 4;
    let peer = prepare_server(&mut server, "bw3", &p).await;
    let (result, _) = run_client(&mut client, "bw3", &p, peer).await.expect("Run");
    let served = collect(&mut server, "bw3").await.expect("Collect");
    assert!(served.verified, "{}", served.verify_detail);
    assert!(
        result.ops > 1 && result.ops == served.ops,
        "{} / {}",
        result.ops,
        served.ops
    );
    assert!(result.elapsed_s >= 0.3);
}

#[tokio::test]
async fn fabric_lat_over_tcp_measures_and_both_sides_verify() {
    let (mut server, _stop_s) = start().await;
    let (mut client, _stop_c) = start().await;
    let p = perf("fabric-lat", 64, 500);
    let peer = prepare_server(&mut server, "lat1", &p).await;
    let (result, _) = run_client(&mut client, "lat1", &p, peer).await.expect("Run");
    let served = collect(&mut server, "lat1").await.expect("Collect");
    assert!(result.checked && result.verified, "{}", result.verify_detail);
    assert!(served.checked && served.verified, "{}", served.verify_detail);
    assert_eq!((result.ops, served.ops), (500, 500));
    let lat = result.lat.expect("latency");
    assert_eq!(lat.samples, 500);
    assert!(lat.min_us > 0.0 && lat.min_us <= lat.typical_us && lat.typical_us <= lat.p99_us);
    assert!(lat.p99_us <= lat.p999_us && lat.p999_us <= lat.max_us && lat.stdev_us >= 0.0);
    assert!(result.bw.is_none());
    // The sweep stops at 8 KiB (one message), whatever max_size says.
    let mut p = perf("fabric-lat", 1, 10);
    p.all_sizes = true;
    p.max_size = 8 << 20;
    let peer = prepare_server(&mut server, "lat2", &p).await;
    let (result, _) = run_client(&mut client, "lat2", &p, peer).await.expect("Run");
    let served = collect(&mut server, "lat2").await.expect("Collect");
    assert!(
        result.verified && served.verified,
        "{} / {}",
        result.verify_detail,
        served.verify_detail
    );
    let sizes: Vec<u64> = result.sweep.iter().map(|s| s.size).collect();
    assert_eq!(sizes, (1..=13).map(|k| 1u64 << k).collect::<Vec<_>>());
    assert!(result.sweep.iter().all(|s| s.lat.unwrap().samples == 10));
    // Timed, at the size fi_pingpong's "SIZE-END" length would collide with.
    let mut p = perf("fabric-lat", 13, 0);
    p.duration_s = 0.2;
    let peer = prepare_server(&mut server, "lat3", &p).await;
    let (result, _) = run_client(&mut client, "lat3", &p, peer).await.expect("Run");
    let served = collect(&mut server, "lat3").await.expect("Collect");
    assert!(
        result.verified && served.verified,
        "{} / {}",
        result.verify_detail,
        served.verify_detail
    );
    assert!(result.ops > 1 && result.ops == served.ops);
    // Too large a ping is refused before anything is opened.
    let err = server
        .prepare(PrepareRequest {
            session_id: "lat4".into(),
            params: Some(perf("fabric-lat", 65536, 1)),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert!(err.message().contains("8192"), "{}", err.message());
}

fn open_peer() -> Endpoint {
    let info = Hints::new().provider("tcp;ofi_rxm").node("127.0.0.1").get().unwrap();
    Endpoint::open(info).unwrap()
}

/// A fabric-write server that generates the pages from the wrong seed; it
/// sends back the first page of the request it got.
fn corrupting_write_server(addr_tx: mpsc::Sender<Vec<u8>>) -> std::thread::JoinHandle<fabric::write::PageRef> {
    std::thread::spawn(move || {
        let mut ep = open_peer();
        addr_tx.send(ep.address().unwrap()).unwrap();
        let mut server = Server::new(&mut ep, 1 << 20).unwrap();
        server
            .accept(&mut ep, &mut Gate::open(), Duration::from_secs(20))
            .unwrap();
        let Message::RandomFill(mut req) = Message::decode(&ep.recv_message(Duration::from_secs(20)).unwrap()).unwrap()
        else {
            panic!("expected RandomFill");
        };
        req.seed ^= 1;
        server.serve_request(&mut ep, &req, Duration::from_secs(20)).unwrap();
        req.pages[0]
    })
}

#[tokio::test]
async fn corrupted_bytes_are_reported_with_their_location_through_the_agent() {
    let (mut agent, _stop) = start().await;
    // fabric-write: the agent's client names MR, page and offset.
    let (addr_tx, addr_rx) = mpsc::channel();
    let fake = corrupting_write_server(addr_tx);
    let peer = FabricEndpoint {
        fabric_addr: addr_rx.recv().unwrap(),
        provider: "tcp;ofi_rxm".into(),
        region: None,
    };
    let (result, _) = run_client(&mut agent, "cw", &params(4096, 8), peer).await.expect("Run");
    let first = fake.join().unwrap();
    assert!(result.checked && !result.verified, "{}", result.verify_detail);
    let at = format!(
        "MR {}, page {} (byte {} of the MR), offset ",
        first.mr,
        first.page,
        first.page * 4096
    );
    assert!(
        result.verify_detail.contains(&at),
        "{} lacks {at}",
        result.verify_detail
    );
    // fabric-bw: a writer with another seed; the agent's server names slot and offset.
    let p = perf("fabric-bw", 4096, 8);
    let server_addr = prepare_server(&mut agent, "cb", &p).await.fabric_addr;
    std::thread::spawn(move || {
        let mut ep = open_peer();
        // The run's proof (its params carry no nonce): the peer gets in, and only its bytes are wrong.
        let proof = common::lab_secret().connect_proof(&[]);
        let mut c = BwClient::connect(
            &mut ep,
            &server_addr,
            4096,
            43,
            proof.as_bytes(),
            Duration::from_secs(20),
        )
        .unwrap();
        c.run_size(
            &mut ep,
            0,
            4096,
            4,
            fabric::perf::Stop::Count(8),
            Duration::from_secs(20),
            &mut |_| {},
        )
        .unwrap();
    })
    .join()
    .unwrap();
    let served = collect(&mut agent, "cb").await.expect("Collect");
    assert!(served.checked && !served.verified, "{}", served.verify_detail);
    assert!(
        served.verify_detail.contains("slot 0 (byte ") && served.verify_detail.contains("offset 0: expected"),
        "{}",
        served.verify_detail
    );
}

#[tokio::test]
async fn a_peer_that_vanishes_ends_bw_and_lat_in_a_timeout() {
    let (mut agent, _stop) = start().await;
    // fabric-bw: the writer shakes hands and goes away; the server's Collect times out.
    let mut p = perf("fabric-bw", 4096, 8);
    p.timeout_ms = 3000;
    let server_addr = prepare_server(&mut agent, "vb", &p).await.fabric_addr;
    std::thread::spawn(move || {
        let mut ep = open_peer();
        let proof = common::lab_secret().connect_proof(&[]);
        fabric::perf::connect(&mut ep, &server_addr, proof.as_bytes(), Duration::from_secs(10)).unwrap();
    })
    .join()
    .unwrap();
    let started = Instant::now();
    let err = collect(&mut agent, "vb").await.unwrap_err();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{}", err.message());
    assert!(err.message().contains("remote write"), "{}", err.message());
    assert!(started.elapsed() < Duration::from_secs(12));
    // fabric-lat: the echoing server goes away after the handshake; the client's Run times out.
    let (addr_tx, addr_rx) = mpsc::channel();
    let fake = std::thread::spawn(move || {
        let mut ep = open_peer();
        addr_tx.send(ep.address().unwrap()).unwrap();
        LatServer::accept(&mut ep, 64, 42, &mut Gate::open(), Duration::from_secs(10)).unwrap();
    });
    let peer = FabricEndpoint {
        fabric_addr: addr_rx.recv().unwrap(),
        provider: "tcp;ofi_rxm".into(),
        region: None,
    };
    let mut p = perf("fabric-lat", 64, 100);
    p.timeout_ms = 3000;
    let started = Instant::now();
    let err = run_client(&mut agent, "vl", &p, peer).await.unwrap_err();
    fake.join().unwrap();
    assert_eq!(err.code(), Code::DeadlineExceeded, "{}", err.message());
    assert!(started.elapsed() < Duration::from_secs(12));
    let h = agent.health(HealthRequest {}).await.unwrap().into_inner();
    assert_eq!(h.active_sessions, 0);
}

#[tokio::test]
async fn fabric_endpoint_that_opens_another_provider_than_expected_fails_naming_both() {
    // The host has tcp, not verbs;ofi_rxd: a lab that expects verbs;ofi_rxd
    // and a run that names no provider gets the default, tcp;ofi_rxm, and
    // both sides refuse to move a byte over it.
    let (mut server, _stop_s) = start().await;
    let (mut client, _stop_c) = start().await;
    let mut expecting = params(4096, 4);
    expecting.provider = String::new();
    expecting.expect_provider = "verbs;ofi_rxd".into();
    let err = server
        .prepare(PrepareRequest {
            session_id: "xp".into(),
            params: Some(expecting.clone()),
            role: Role::Server as i32,
            bind_addr: "127.0.0.1".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    for says in [
        "opened libfabric provider `tcp;ofi_rxm`",
        "expects `verbs;ofi_rxd`",
        "--provider verbs;ofi_rxd",
    ] {
        assert!(err.message().contains(says), "{says}: {}", err.message());
    }
    // The client side checks too: against a server that expects nothing.
    let plain = params(4096, 4);
    let peer = prepare_server(&mut server, "xc", &plain).await;
    expecting.provider = "tcp;ofi_rxm".into();
    let err = run_client(&mut client, "xc", &expecting, peer).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition, "{}", err.message());
    assert!(
        err.message().contains("the run asked for `tcp;ofi_rxm`"),
        "{}",
        err.message()
    );
    server
        .abort(AbortRequest {
            session_id: "xc".into(),
            reason: "test".into(),
        })
        .await
        .unwrap();
    // An expectation the opened provider meets: `tcp` is a part of tcp;ofi_rxm.
    let mut met = params(4096, 4);
    met.expect_provider = "tcp".into();
    let peer = prepare_server(&mut server, "xm", &met).await;
    let (result, _) = run_client(&mut client, "xm", &met, peer).await.expect("Run");
    assert!(result.verified, "{}", result.verify_detail);
}

#[tokio::test]
async fn a_fabric_server_refuses_connects_without_the_runs_proof_and_takes_its_client() {
    let (mut server, _stop_s) = start().await;
    let (mut client, _stop_c) = start().await;
    for (workload, id) in [
        ("fabric-bw", "gate-bw"),
        ("fabric-lat", "gate-lat"),
        ("fabric-write", "gate-w"),
    ] {
        let mut p = perf(workload, 4096, 16);
        p.run_nonce = format!("nonce of {id}").into_bytes();
        let peer = prepare_server(&mut server, id, &p).await;
        // Two strangers: one with no proof, one with another run's; each
        // CONNECT goes unanswered, so its handshake runs out of time.
        let server_addr = peer.fabric_addr.clone();
        std::thread::spawn(move || {
            let another_runs = common::lab_secret().connect_proof(b"another run");
            for proof in [&[][..], &another_runs.as_bytes()[..]] {
                let mut ep = open_peer();
                let err = fabric::perf::connect(&mut ep, &server_addr, proof, Duration::from_millis(1500)).unwrap_err();
                assert!(
                    err.to_string().contains("timed out") || err.to_string().contains("waiting"),
                    "{err}"
                );
            }
        })
        .join()
        .unwrap();
        let (result, _) = run_client(&mut client, id, &p, peer).await.expect("Run");
        let served = collect(&mut server, id).await.expect("Collect");
        let verified = if workload == "fabric-write" { &result } else { &served };
        assert!(
            verified.checked && verified.verified,
            "{workload}: {}",
            verified.verify_detail
        );
        let refused = &served.facts["refused_connects"];
        assert!(
            refused.starts_with("2 (fi_sockaddr_in://127.0.0.1:")
                && refused.matches("fi_sockaddr_in://127.0.0.1:").count() == 2
                && refused.matches("(claimed)").count() == 2,
            "{workload}: {refused}"
        );
    }
}
