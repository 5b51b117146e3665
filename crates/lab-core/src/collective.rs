//! `labctl run allreduce | allgather | reduce-scatter | alltoall | broadcast
//! | incast`: one collective across several nodes, each node's agent one
//! rank (or several, `--ranks-per-node`).
//!
//! The controller prepares every rank (one QP per other rank, its buffers
//! registered, its QPs in INIT; rank r's k-th QP faces its k-th other rank)
//! and runs every rank at once. Over rdma_cm (the default) each rank's
//! Prepare opens a listener, and Run gives every rank the other ranks'
//! listeners: a rank connects to each lower rank and accepts each higher
//! one, every connect carrying the run's proof. With `--cm oob` the
//! controller pairs the QPs itself — rank q's QP towards r is q's
//! `r - (r > q)`-th — and gives each rank, in its QP order, the QP of every
//! other rank that faces it. Over libfabric every rank gets every other
//! rank's endpoint and region. The ranks start from one barrier per
//! operation among themselves. When a rank fails, the
//! others are aborted at once, and every rank's error (which says what it
//! was waiting for) is reported.
//!
//! Traced (`--trace`), every rank records its side as a pair's sides do,
//! and each node's agent clock is sampled before and after the run (ranks
//! of one node share its agent, so its clock); a failed rank's trace is
//! taken from its agent (`TakeTrace`).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use agent_proto::v1::{
    run_event, AbortRequest, CmMode, CollectiveParams, Endpoint, FabricEndpoint, NodeInfoRequest, PrepareReply,
    PrepareRequest, Progress, QpEndpoint, Role, RunRequest, SideResult, WorkloadParams,
};
use futures::stream::{FuturesUnordered, StreamExt};
use lab_remote::agent::{deadline, Client};
use lab_results::collective::{
    point, verdict, CollectiveParamsRecord, CollectiveRecord, RankRecord, COLLECTIVE_SCHEMA,
};
use lab_results::run::{cpu, node_record};
use lab_results::trace::{ClockEstimate, SideTrace};
use lab_state::{now_rfc3339, NodeState};
use workload_catalogue::limits::MAX_RANKS;

use crate::lab::Lab;
use crate::run::side_traces::{failed_trace, sample_clock, side_trace};
use crate::run::RunError;

/// What to run, where.
#[derive(Debug, Clone)]
pub struct CollectiveOptions {
    /// The workload's parameters (its name in `workload`).
    pub params: WorkloadParams,
    /// The nodes, one rank each in this order; empty: every node of the lab.
    pub nodes: Vec<String>,
    /// Ranks on each node: node 1's ranks come first, then node 2's ...
    pub ranks_per_node: u32,
    /// The collectives with a root: the node of the root (its first rank); default rank 0.
    pub root: Option<String>,
    /// Untimed operations before the timed ones, per size.
    pub warmup: u32,
    /// Give up (and abort every rank) after this long.
    pub timeout: Duration,
}

/// One rank as the controller drives it.
struct Rank {
    rank: usize,
    node: NodeState,
    client: Client,
    session_id: String,
}

/// How long a node's agent gets to answer each Clock after a traced run.
const CLOCK_AFTER_LIMIT: Duration = Duration::from_secs(3);

/// How long the other ranks get to end once one failed and all were aborted.
const ABORT_GRACE: Duration = Duration::from_secs(5);

/// Bad choices of nodes or root, told before anything runs.
fn plan_ranks(
    lab_nodes: &[String],
    asked: &[String],
    per_node: u32,
    root: Option<&str>,
) -> Result<(Vec<String>, u32), String> {
    let nodes: Vec<String> = if asked.is_empty() {
        lab_nodes.to_vec()
    } else {
        asked.to_vec()
    };
    if let Some(unknown) = nodes.iter().find(|n| !lab_nodes.contains(n)) {
        return Err(format!(
            "no node `{unknown}` in this lab; its nodes: {}",
            lab_nodes.join(", ")
        ));
    }
    let per_node = per_node.max(1) as usize;
    let ranks: Vec<String> = nodes
        .iter()
        .flat_map(|n| std::iter::repeat_n(n.clone(), per_node))
        .collect();
    if ranks.len() < 2 || ranks.len() > MAX_RANKS as usize {
        return Err(format!(
            "a collective needs 2 ..= {MAX_RANKS} ranks; {} node(s) x {per_node} rank(s) per node make {}",
            nodes.len(),
            ranks.len()
        ));
    }
    let root = match root {
        None => 0,
        Some(name) => ranks
            .iter()
            .position(|n| n == name)
            .ok_or_else(|| format!("--root {name}: not one of the run's nodes ({})", nodes.join(", ")))?
            as u32,
    };
    Ok((ranks, root))
}

/// The QP endpoints rank `r` gets at Run: for each other rank q in rank
/// order, the entry of q's endpoint for the QP that faces r.
fn peers_of(r: usize, endpoints: &[Endpoint]) -> Result<Vec<QpEndpoint>, String> {
    let mut peers = Vec::with_capacity(endpoints.len().saturating_sub(1));
    for (q, endpoint) in endpoints.iter().enumerate().filter(|(q, _)| *q != r) {
        let facing = if r < q { r } else { r - 1 };
        let qp = endpoint.qps.get(facing).cloned().ok_or_else(|| {
            format!(
                "rank {q} returned {} QP endpoints, expected {}",
                endpoint.qps.len(),
                endpoints.len() - 1
            )
        })?;
        peers.push(qp);
    }
    Ok(peers)
}

/// The rdma_cm listeners rank `r` gets at Run: every other rank's, in rank
/// order (its QP k connects to its k-th other rank).
fn listeners_of(r: usize, endpoints: &[Endpoint]) -> Result<Vec<Endpoint>, String> {
    endpoints
        .iter()
        .enumerate()
        .filter(|(q, _)| *q != r)
        .map(|(q, endpoint)| {
            if endpoint.port == 0 || endpoint.address.is_empty() {
                Err(format!(
                    "rank {q} returned no rdma_cm listener (address `{}`, port {})",
                    endpoint.address, endpoint.port
                ))
            } else {
                Ok(Endpoint {
                    address: endpoint.address.clone(),
                    port: endpoint.port,
                    qps: Vec::new(),
                })
            }
        })
        .collect()
}

/// The libfabric endpoints rank `r` gets at Run: every other rank's, in
/// rank order (an RDM endpoint talks to all through one address vector).
fn fabric_peers_of(r: usize, prepared: &[PrepareReply]) -> Result<Vec<FabricEndpoint>, String> {
    prepared
        .iter()
        .enumerate()
        .filter(|(q, _)| *q != r)
        .map(|(q, reply)| {
            reply
                .fabric
                .clone()
                .filter(|f| f.region.is_some())
                .ok_or_else(|| format!("rank {q} returned no libfabric endpoint and region"))
        })
        .collect()
}

/// What a rank said when it failed, on one line; a retry-exceeded write
/// names the link it crossed (the agent knows the peer rank, the
/// controller its node).
fn rank_failure(rank: &Rank, status: &tonic::Status, ranks: &[Rank]) -> String {
    let message = status.message();
    let link = message
        .contains("IBV_WC_RETRY_EXC_ERR")
        .then(|| message.rsplit_once("on the QP to rank ")?.1.parse::<usize>().ok())
        .flatten()
        .and_then(|peer| ranks.get(peer))
        .map(|peer| {
            format!(
                "; the RDMA link `{}` {} <-> `{}` {} stopped delivering: every retransmission went unacknowledged \
                 (check it: labctl exec {} -- ping -c 3 {}, and `tc qdisc show` on both nodes for a leftover impairment)",
                rank.node.name, rank.node.data_addr, peer.node.name, peer.node.data_addr,
                rank.node.name, peer.node.data_addr
            )
        })
        .unwrap_or_default();
    format!(
        "rank {} (node `{}`): {:?}: {message}{link}",
        rank.rank,
        rank.node.name,
        status.code(),
    )
}

/// Runs one collective and saves its record. `on_progress` sees each
/// rank's progress events with the rank.
pub async fn run_collective(
    lab: &Lab,
    opts: &CollectiveOptions,
    on_progress: impl FnMut(usize, &Progress),
) -> Result<CollectiveRecord, RunError> {
    Ok(run_collective_traced(lab, opts, on_progress).await?.0)
}

/// As [`run_collective`]; when `opts.params.trace` asks for a trace, also
/// returns every rank's trace (in rank order) with its node's clock offset
/// from the controller's. A traced run that fails returns
/// [`RunError::Traced`] with what every rank recorded up to the failure.
pub async fn run_collective_traced(
    lab: &Lab,
    opts: &CollectiveOptions,
    mut on_progress: impl FnMut(usize, &Progress),
) -> Result<(CollectiveRecord, Option<Vec<SideTrace>>), RunError> {
    let op = workload_catalogue::find(&opts.params.workload)
        .and_then(|w| w.shape.collective())
        .ok_or_else(|| RunError::UnknownWorkload {
            name: opts.params.workload.clone(),
        })?;
    let state = lab.state()?;
    let lab_nodes: Vec<String> = state.nodes.iter().map(|n| n.name.clone()).collect();
    let (rank_nodes, root) = plan_ranks(&lab_nodes, &opts.nodes, opts.ranks_per_node, opts.root.as_deref())
        .map_err(|detail| RunError::BadRanks { detail })?;
    let world = rank_nodes.len();
    if !opts.params.all_sizes {
        // float32 elements; alltoall's equal blocks need one per rank at least.
        let least = 4 * if op == workload_catalogue::Collective::Alltoall {
            world as u64
        } else {
            1
        };
        if opts.params.size < least {
            return Err(RunError::BadRanks {
                detail: format!(
                    "-s {}: a {} moves float32 elements, at least {least} B for {world} ranks",
                    opts.params.size, opts.params.workload
                ),
            });
        }
    }
    if !opts.params.provider.is_empty() && opts.params.cm() == CmMode::Oob {
        return Err(RunError::BadRanks {
            detail: format!(
                "--cm oob sets up verbs QPs; a {} over libfabric (--provider {}) has none",
                opts.params.workload, opts.params.provider
            ),
        });
    }
    let started_at = now_rfc3339();
    let started = Instant::now();

    // One SSH session and agent client per node, shared by its ranks.
    let mut distinct: Vec<String> = Vec::new();
    for n in &rank_nodes {
        if !distinct.contains(n) {
            distinct.push(n.clone());
        }
    }
    let connected = futures::future::try_join_all(distinct.iter().map(|name| async {
        let node = lab.node_state(&state, name)?.clone();
        let session = std::sync::Arc::new(lab.connect(&state, name).await?);
        let client = lab.agent(session, &node).await?;
        Ok::<_, RunError>((node, client))
    }))
    .await?;
    let infos = futures::future::try_join_all(connected.iter().map(|(node, client)| {
        let mut client = client.clone();
        async move {
            let info = lab_remote::agent::call(
                &node.name,
                "NodeInfo",
                crate::run::node_info_deadline(opts.timeout),
                client.node_info(NodeInfoRequest {}),
            )
            .await?;
            Ok::<_, RunError>(node_record(&node.name, info))
        }
    }))
    .await?;
    let run_id = format!("{:016x}", rand::random::<u64>());
    let mut ranks: Vec<Rank> = rank_nodes
        .iter()
        .enumerate()
        .map(|(rank, name)| {
            let (node, client) = connected
                .iter()
                .find(|(n, _)| &n.name == name)
                .expect("connected above");
            Rank {
                rank,
                node: node.clone(),
                client: client.clone(),
                session_id: format!("{run_id}-r{rank}"),
            }
        })
        .collect();

    let mut params = opts.params.clone();
    if params.timeout_ms == 0 {
        params.timeout_ms = opts.timeout.as_millis() as u64;
    }
    params.num_qps = 0;
    // The ranks' rdma_cm connects carry a proof of this run (as a pair's client does).
    params.run_nonce = rand::random::<[u8; 16]>().to_vec();
    if params.expect_provider.is_empty() {
        params.expect_provider = lab.spec.expect.fi_provider.clone().unwrap_or_default();
    }
    let params_of = |rank: usize| {
        let mut p = params.clone();
        p.collective = Some(CollectiveParams {
            rank: rank as u32,
            world: world as u32,
            root,
            warmup: opts.warmup,
        });
        p
    };

    // One anchor for the clock samples before and after the run, per node.
    let anchor = Instant::now();
    let clocks = if params.trace.is_some() {
        Some(
            sample_clocks(&connected, anchor, deadline::NODE_INFO)
                .await
                .into_iter()
                .collect::<Result<Vec<_>, _>>()?,
        )
    } else {
        None
    };
    let Driven { mut results, failures } = drive(&mut ranks, &params_of, opts.timeout, &mut on_progress).await;
    let traces = match &clocks {
        Some(before) => {
            // A node that stopped answering keeps the offset measured before
            // the run; a live agent answers a Clock at once.
            let after: Vec<Option<ClockEstimate>> = sample_clocks(&connected, anchor, CLOCK_AFTER_LIMIT)
                .await
                .into_iter()
                .map(Result::ok)
                .collect();
            Some(rank_traces(&ranks, &distinct, before, &after, &mut results).await)
        }
        None => None,
    };
    if !failures.is_empty() {
        let error = RunError::Ranks {
            detail: format!(
                "the {} on {world} ranks failed:\n  {}",
                params.workload,
                failures.join("\n  ")
            ),
        };
        return Err(match traces {
            Some(traces) => RunError::Traced {
                error: Box::new(error),
                run_id,
                traces,
            },
            None => error,
        });
    }
    let results: Vec<SideResult> = results.into_iter().map(|r| r.expect("every rank ended")).collect();

    let refs: Vec<&SideResult> = results.iter().collect();
    let sizes = refs.first().map_or(0, |r| r.collective.len());
    let points = (0..sizes).map(|i| point(op, root, &refs, i)).collect();
    let (verified, verify_detail) = verdict(&refs);
    let mut record = CollectiveRecord {
        schema: COLLECTIVE_SCHEMA,
        id: run_id,
        lab: lab.spec.name.clone(),
        collective: params.workload.clone(),
        algorithm: op.algorithm().to_string(),
        transport: match results.first().and_then(|r| r.facts.get("provider")) {
            Some(provider) if !params.provider.is_empty() => format!("libfabric {provider}"),
            _ if params.cm() == CmMode::Oob => "verbs RC (oob)".to_string(),
            _ => "verbs RC (rdma_cm)".to_string(),
        },
        world: world as u32,
        root: op.has_root().then_some(root),
        params: CollectiveParamsRecord {
            size: if params.all_sizes {
                workload_catalogue::limits::sweep_max(params.max_size)
            } else {
                params.size
            },
            all_sizes: params.all_sizes,
            iterations: params.iterations,
            duration_s: params.duration_s,
            warmup: opts.warmup,
            seed: params.seed,
            fault: workload_catalogue::Fault::try_from(params.fault())
                .ok()
                .map(|f| f.label().to_string()),
            completion: results
                .first()
                .and_then(|r| r.facts.get("completion").cloned())
                .unwrap_or_default(),
        },
        verified,
        verify_detail,
        points,
        ranks: ranks
            .iter()
            .zip(&results)
            .map(|(r, s)| RankRecord {
                rank: r.rank as u32,
                node: r.node.name.clone(),
                verified: s.checked && s.verified,
                verify_detail: s.verify_detail.clone(),
                bytes: s.bytes,
                ops: s.ops,
                cpu: cpu(s, s.bytes),
                facts: s.facts.clone().into_iter().collect::<BTreeMap<_, _>>(),
            })
            .collect(),
        nodes: infos,
        started_at,
        duration_s: started.elapsed().as_secs_f64(),
        saved_to: None,
    };
    let json = serde_json::to_vec_pretty(&record).expect("record serialises");
    let path = lab
        .dir
        .save_result(
            &record.started_at,
            &format!("{}-{}", record.collective, record.id),
            &json,
        )
        .map_err(|e| RunError::Save(e.to_string()))?;
    record.saved_to = Some(path.display().to_string());
    Ok((record, traces))
}

/// Every node's agent clock against `anchor`, in the order of `connected`
/// (a node whose agent does not answer within `limit` has its error in its place).
async fn sample_clocks(
    connected: &[(NodeState, Client)],
    anchor: Instant,
    limit: Duration,
) -> Vec<Result<ClockEstimate, RunError>> {
    futures::future::join_all(connected.iter().map(|(node, client)| {
        let mut client = client.clone();
        async move { sample_clock(&node.name, "rank", &mut client, anchor, limit).await }
    }))
    .await
}

/// Each rank's trace with its node's clocks: a rank that ended hands its
/// trace in its result, a failed one keeps it for TakeTrace.
async fn rank_traces(
    ranks: &[Rank],
    nodes: &[String],
    before: &[ClockEstimate],
    after: &[Option<ClockEstimate>],
    results: &mut [Option<SideResult>],
) -> Vec<SideTrace> {
    let kept = futures::future::join_all(ranks.iter().zip(results.iter_mut()).map(|(r, result)| {
        let mut client = r.client.clone();
        let ended = result.as_mut().map(|res| res.trace.take().unwrap_or_default());
        async move {
            match ended {
                Some(trace) => (trace, None),
                None => match failed_trace(&mut client, &r.session_id).await {
                    (trace, None) => (
                        trace,
                        Some(
                            "its agent handed over no trace (stopped or gone, or the rank failed before recording)"
                                .into(),
                        ),
                    ),
                    kept => kept,
                },
            }
        }
    }))
    .await;
    ranks
        .iter()
        .zip(kept)
        .map(|(r, kept)| {
            let at = nodes
                .iter()
                .position(|n| *n == r.node.name)
                .expect("every rank's node is connected");
            let mut side = side_trace(&format!("rank {}", r.rank), &r.node.name, before[at], after[at], kept);
            side.rank = Some(r.rank);
            side
        })
        .collect()
}

/// What the ranks ended with: each rank's result if it ended with one,
/// and every rank's error (sorted; empty when all ended).
struct Driven {
    results: Vec<Option<SideResult>>,
    failures: Vec<String>,
}

impl Driven {
    fn failed(world: usize, failures: Vec<String>) -> Driven {
        Driven {
            results: vec![None; world],
            failures,
        }
    }
}

/// Prepares every rank, then runs them all; on failure, aborts the rest
/// and returns every rank's error.
async fn drive(
    ranks: &mut [Rank],
    params_of: &impl Fn(usize) -> WorkloadParams,
    timeout: Duration,
    on_progress: &mut impl FnMut(usize, &Progress),
) -> Driven {
    let any_rank = params_of(0);
    let cm = any_rank.cm();
    let prepared = futures::future::join_all(ranks.iter().map(|r| {
        let mut client = r.client.clone();
        let request = PrepareRequest {
            session_id: r.session_id.clone(),
            params: Some(params_of(r.rank)),
            role: Role::Client as i32,
            bind_addr: r.node.data_addr.to_string(),
        };
        async move {
            match tokio::time::timeout(deadline::SETUP, client.prepare(request)).await {
                Ok(Ok(reply)) => Ok(reply.into_inner()),
                Ok(Err(status)) => Err(status),
                Err(_) => Err(tonic::Status::deadline_exceeded(format!(
                    "Prepare did not answer within {} s",
                    deadline::SETUP.as_secs()
                ))),
            }
        }
    }))
    .await;
    let mut endpoints = Vec::with_capacity(ranks.len());
    let mut failures = Vec::new();
    for (r, p) in ranks.iter().zip(prepared) {
        match p {
            Ok(e) => endpoints.push(e),
            Err(status) => failures.push(rank_failure(r, &status, ranks)),
        }
    }
    if !failures.is_empty() {
        abort_all(ranks, "another rank failed to prepare").await;
        return Driven::failed(ranks.len(), failures);
    }

    let limit = crate::run::run_deadline(&any_rank, timeout);
    let mut running = FuturesUnordered::new();
    let (progress_tx, mut progress_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Progress)>();
    let over_libfabric = endpoints.iter().any(|e| e.fabric.is_some());
    let verbs_endpoints: Vec<Endpoint> = endpoints
        .iter()
        .map(|e| e.endpoint.clone().unwrap_or_default())
        .collect();
    for r in ranks.iter() {
        let mut request = RunRequest {
            session_id: r.session_id.clone(),
            params: Some(params_of(r.rank)),
            peer: Some(Endpoint::default()),
            bind_addr: r.node.data_addr.to_string(),
            ..Default::default()
        };
        let peers = if over_libfabric {
            fabric_peers_of(r.rank, &endpoints).map(|peers| request.fabric_peers = peers)
        } else if cm == CmMode::Oob {
            peers_of(r.rank, &verbs_endpoints).map(|qps| {
                request.peer = Some(Endpoint {
                    address: String::new(),
                    port: 0,
                    qps,
                })
            })
        } else {
            listeners_of(r.rank, &verbs_endpoints).map(|listeners| request.rank_listeners = listeners)
        };
        if let Err(e) = peers {
            return Driven::failed(ranks.len(), vec![e]);
        }
        let mut client = r.client.clone();
        let rank = r.rank;
        let tx = progress_tx.clone();
        running.push(async move {
            let outcome = tokio::time::timeout(limit, async {
                let mut stream = client.run(request).await?.into_inner();
                loop {
                    match stream.message().await? {
                        Some(event) => match event.event {
                            Some(run_event::Event::Progress(p)) => {
                                let _ = tx.send((rank, p));
                            }
                            Some(run_event::Event::Result(result)) => return Ok(result),
                            None => {}
                        },
                        None => {
                            return Err(tonic::Status::unavailable(
                                "the run ended without a result (did the agent or node die?)",
                            ))
                        }
                    }
                }
            })
            .await
            .unwrap_or_else(|_| {
                Err(tonic::Status::deadline_exceeded(format!(
                    "rdma-agent did not end the run within {} s (a stopped or wedged agent?)",
                    limit.as_secs()
                )))
            });
            (rank, outcome)
        });
    }
    drop(progress_tx);
    let mut results: Vec<Option<SideResult>> = vec![None; ranks.len()];
    let mut aborted = false;
    // After an abort the ranks end within about 100 ms; one that does not
    // answer by then is stopped or gone, and is named as such.
    let far = tokio::time::Instant::now() + limit + ABORT_GRACE;
    let grace = tokio::time::sleep_until(far);
    tokio::pin!(grace);
    loop {
        tokio::select! {
            Some((rank, p)) = progress_rx.recv() => on_progress(rank, &p),
            () = &mut grace => {
                for r in ranks.iter().filter(|r| results[r.rank].is_none()) {
                    if !failures.iter().any(|f| f.starts_with(&format!("rank {} ", r.rank))) {
                        failures.push(format!(
                            "rank {} (node `{}`): no answer from its agent {} s after the abort (is it stopped, or its node gone? `labctl exec {} -- ps -o pid,stat,cmd -C rdma-agent`)",
                            r.rank, r.node.name, ABORT_GRACE.as_secs(), r.node.name
                        ));
                    }
                }
                break;
            }
            next = running.next() => {
                let Some((rank, outcome)) = next else { break };
                match outcome {
                    Ok(result) => results[rank] = Some(result),
                    Err(status) => {
                        failures.push(rank_failure(&ranks[rank], &status, ranks));
                        if !aborted {
                            aborted = true;
                            let reason = format!("rank {rank} failed: {}", status.message());
                            abort_all(ranks, &reason).await;
                            grace.as_mut().reset(tokio::time::Instant::now() + ABORT_GRACE);
                        }
                    }
                }
            }
        }
    }
    while let Ok((rank, p)) = progress_rx.try_recv() {
        on_progress(rank, &p);
    }
    failures.sort();
    Driven { results, failures }
}

/// Aborts every rank's session (a finished one is simply not found).
async fn abort_all(ranks: &[Rank], reason: &str) {
    futures::future::join_all(ranks.iter().map(|r| {
        let mut client = r.client.clone();
        let request = AbortRequest {
            session_id: r.session_id.clone(),
            reason: reason.to_string(),
        };
        async move {
            let _ = tokio::time::timeout(Duration::from_secs(5), client.abort(request)).await;
        }
    }))
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn test_ranks_follow_the_nodes_and_the_root_names_a_node() {
        let lab = names(&["n1", "n2", "n3", "n4"]);
        assert_eq!(plan_ranks(&lab, &[], 1, None), Ok((lab.clone(), 0)));
        let (ranks, root) = plan_ranks(&lab, &names(&["n3", "n1"]), 2, Some("n1")).unwrap();
        assert_eq!(ranks, names(&["n3", "n3", "n1", "n1"]));
        assert_eq!(root, 2);
        assert!(plan_ranks(&lab, &names(&["n9"]), 1, None)
            .unwrap_err()
            .contains("no node `n9`"));
        assert!(plan_ranks(&lab, &names(&["n1"]), 1, None)
            .unwrap_err()
            .contains("2 ..= 16 ranks"));
        assert!(plan_ranks(&lab, &[], 5, None).unwrap_err().contains("make 20"));
        assert!(plan_ranks(&lab, &names(&["n1", "n2"]), 1, Some("n3"))
            .unwrap_err()
            .contains("--root n3"));
    }

    #[test]
    fn test_each_rank_gets_every_other_ranks_listener_in_rank_order() {
        let listener = |q: u32| Endpoint {
            address: format!("10.77.0.{}", q + 1),
            port: 40000 + q,
            qps: Vec::new(),
        };
        let endpoints: Vec<Endpoint> = (0..4).map(listener).collect();
        let ports = |r| {
            listeners_of(r, &endpoints)
                .unwrap()
                .iter()
                .map(|e| e.port)
                .collect::<Vec<_>>()
        };
        assert_eq!(ports(0), [40001, 40002, 40003]);
        assert_eq!(ports(2), [40000, 40001, 40003]);
        let mut missing = endpoints.clone();
        missing[3].port = 0;
        assert_eq!(
            listeners_of(0, &missing).unwrap_err(),
            "rank 3 returned no rdma_cm listener (address `10.77.0.4`, port 0)"
        );
    }

    #[test]
    fn test_each_rank_gets_the_qp_of_every_other_rank_that_faces_it() {
        // Rank q's k-th QP faces its k-th other rank; tag each QP (q, peer).
        let world = 4;
        let endpoints: Vec<Endpoint> = (0..world)
            .map(|q| Endpoint {
                qps: (0..world)
                    .filter(|p| *p != q)
                    .map(|p| QpEndpoint {
                        qpn: (q * 10 + p) as u32,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            })
            .collect();
        for r in 0..world {
            let got: Vec<u32> = peers_of(r, &endpoints).unwrap().iter().map(|e| e.qpn).collect();
            let want: Vec<u32> = (0..world).filter(|q| *q != r).map(|q| (q * 10 + r) as u32).collect();
            assert_eq!(got, want, "rank {r}");
        }
        let short = vec![Endpoint::default(), Endpoint::default()];
        assert!(peers_of(0, &short).unwrap_err().contains("returned 0 QP endpoints"));
    }
}
