//! The collectives over libfabric: four in-process agents, one rank each,
//! driven as the controller drives them (Prepare every rank, then Run every
//! rank with the others' fabric endpoints and regions) over real
//! `tcp;ofi_rxm` on 127.0.0.1. Every rank checks every element of its
//! result. No VMs and no RDMA device needed.

use agent_proto::v1::{
    run_event, CmMode, CollectiveParams, FabricEndpoint, Fault, PrepareRequest, Role, RunRequest, SideResult,
    WorkloadParams,
};

use crate::common::{start, Client};

const WORLD: usize = 4;

fn params(workload: &str, size: u64, rank: usize, root: u32) -> WorkloadParams {
    let mut p = WorkloadParams {
        workload: workload.into(),
        size,
        iterations: 3,
        seed: 7,
        provider: "tcp;ofi_rxm".into(),
        timeout_ms: 30_000,
        gid_index: -1,
        collective: Some(CollectiveParams {
            rank: rank as u32,
            world: WORLD as u32,
            root,
            warmup: 1,
        }),
        ..Default::default()
    };
    p.set_cm(CmMode::Oob);
    p
}

/// Runs one collective on the agents' ranks; each rank's outcome.
async fn run(
    agents: &mut [Client],
    id: &str,
    workload: &str,
    size: u64,
    fault: Fault,
) -> Vec<Result<SideResult, tonic::Status>> {
    let root = 2;
    let params_of = |rank: usize| {
        let mut p = params(workload, size, rank, root);
        p.set_fault(fault);
        p
    };
    let mut endpoints: Vec<FabricEndpoint> = Vec::new();
    for (rank, agent) in agents.iter_mut().enumerate() {
        let reply = agent
            .prepare(PrepareRequest {
                session_id: format!("{id}-r{rank}"),
                params: Some(params_of(rank)),
                role: Role::Client as i32,
                bind_addr: "127.0.0.1".into(),
            })
            .await
            .expect("Prepare")
            .into_inner();
        let fabric = reply.fabric.expect("a libfabric rank returns its fabric endpoint");
        assert!(fabric.region.is_some_and(|r| r.size > 0), "{fabric:?}");
        endpoints.push(fabric);
    }
    let runs = agents.iter_mut().enumerate().map(|(rank, agent)| {
        let peers: Vec<FabricEndpoint> = endpoints
            .iter()
            .enumerate()
            .filter(|(q, _)| *q != rank)
            .map(|(_, e)| e.clone())
            .collect();
        let request = RunRequest {
            session_id: format!("{id}-r{rank}"),
            params: Some(params_of(rank)),
            peer: Some(Default::default()),
            bind_addr: "127.0.0.1".into(),
            fabric_peer: None,
            fabric_peers: peers,
            rank_listeners: Vec::new(),
        };
        let mut agent = agent.clone();
        async move {
            let mut stream = agent.run(request).await?.into_inner();
            while let Some(event) = stream.message().await? {
                if let Some(run_event::Event::Result(r)) = event.event {
                    return Ok(r);
                }
            }
            Err(tonic::Status::unavailable("stream ended without a result"))
        }
    });
    // Every rank at once: they meet in their first barrier.
    let tasks: Vec<_> = runs.map(tokio::spawn).collect();
    let mut outcomes = Vec::with_capacity(tasks.len());
    for task in tasks {
        outcomes.push(task.await.expect("rank task"));
    }
    outcomes
}

async fn agents() -> (Vec<Client>, Vec<tokio::sync::oneshot::Sender<()>>) {
    let mut clients = Vec::new();
    let mut stops = Vec::new();
    for _ in 0..WORLD {
        let (client, stop) = start().await;
        clients.push(client);
        stops.push(stop);
    }
    (clients, stops)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn test_every_collective_verifies_over_libfabric_at_three_sizes() {
    let (mut agents, _stops) = agents().await;
    // Under a page, 1 MiB, and one whose elements are no multiple of the ranks.
    let collectives = workload_catalogue::CATALOGUE
        .iter()
        .filter(|w| w.shape.collective().is_some())
        .map(|w| w.name);
    for workload in collectives {
        for size in [1000u64, 1 << 20, 4 * 1027] {
            let id = format!("{workload}-{size}");
            let results = run(&mut agents, &id, workload, size, Fault::None).await;
            for (rank, r) in results.into_iter().enumerate() {
                let r = r.unwrap_or_else(|e| panic!("{id}: rank {rank}: {e}"));
                assert!(r.checked && r.verified, "{id}: {}", r.verify_detail);
                assert_eq!(r.facts.get("provider").map(String::as_str), Some("tcp;ofi_rxm"));
                assert_eq!(r.facts.get("rank"), Some(&rank.to_string()));
                // One point, 3 timed operations after 1 warm-up, all elements checked.
                assert_eq!(r.collective.len(), 1, "{id}");
                let point = &r.collective[0];
                assert_eq!((point.iterations, point.wrong), (3, 0), "{id}");
                assert!(
                    point.time_us > 0.0 && point.checked > 0 || checks_nothing(workload, rank),
                    "{id}: {point:?}"
                );
                assert_eq!(r.ops, 4, "{id}");
            }
        }
    }
}

/// An incast's or a reduce's sender holds no result (rank 2 is the root).
fn checks_nothing(workload: &str, rank: usize) -> bool {
    matches!(workload, "incast" | "reduce") && rank != 2
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn test_a_fault_fails_the_rank_it_reaches_naming_the_element() {
    let (mut agents, _stops) = agents().await;
    // allreduce by recursive doubling (4 KiB) and by ring (64 KiB);
    // alltoall with every block at once (4 KiB) and pairwise (1 MiB).
    for (workload, fault, size) in [
        ("allreduce", Fault::Corrupt, 4096),
        ("allreduce", Fault::Skip, 4096),
        ("allreduce", Fault::Corrupt, 65536),
        ("allreduce", Fault::Skip, 65536),
        ("alltoall", Fault::Corrupt, 4096),
        ("alltoall", Fault::Skip, 4096),
        ("alltoall", Fault::Corrupt, 1 << 20),
        ("alltoall", Fault::Skip, 1 << 20),
        ("broadcast", Fault::Skip, 4096),
        ("reduce", Fault::Corrupt, 4096),
        ("reduce", Fault::Skip, 4096),
    ] {
        let id = format!("{workload}-{fault:?}-{size}");
        let results = run(&mut agents, &id, workload, size, fault).await;
        let results: Vec<SideResult> = results
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("{id}: {e}")))
            .collect();
        let failed: Vec<&SideResult> = results.iter().filter(|r| !r.verified).collect();
        assert!(!failed.is_empty(), "{id}: the fault went unnoticed");
        for r in failed {
            assert!(
                r.verify_detail
                    .contains(&format!("elements wrong; first: operation 1 of size {size} B, element")),
                "{id}: {}",
                r.verify_detail
            );
        }
        let noted: Vec<&String> = results.iter().filter_map(|r| r.facts.get("fault")).collect();
        assert_eq!(noted.len(), 1, "{id}: one rank injects the fault: {noted:?}");
    }
}
