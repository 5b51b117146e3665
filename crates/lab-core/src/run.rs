//! `labctl run`: one workload across two nodes of a running lab.
//!
//! The controller prepares the server-side agent (memory registered, QP or
//! rdma_cm listener ready), runs the client-side agent while streaming its
//! progress, then collects the server's own result. With `--cm oob` it also
//! prepares the client and relays each side's QP parameters to the other
//! (the Lab C exchange). Every run is saved with its parameters and both
//! nodes' NodeInfo under the lab's results directory.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::data_path_missing;
use crate::impair;
use crate::lab::Lab;
use agent_proto::data_path;
use agent_proto::v1::{
    run_event, AbortRequest, CmMode, CollectRequest, ConnectRequest, NodeInfoRequest, PrepareRequest, Progress, Role,
    RunRequest, SideResult, WorkloadParams,
};
use futures::FutureExt;
use lab_remote::agent::{deadline, Client};
use lab_remote::ssh::SshSession;
use lab_results::run::{
    cpu, latency, node_record, side_record, CounterPair, Counters, CpuPair, ImpairmentPair, MrCacheRecord, NodePair,
    ParamsRecord, RunRecord, SweepPoint, RUN_SCHEMA,
};
use lab_results::trace::SideTrace;
use lab_state::{now_rfc3339, NodeState};
use workload_catalogue::Family;

mod error;
mod failure_cause;
mod rpc;
pub(crate) mod side_traces;

pub use self::error::RunError;
use self::failure_cause::{explain_link_failure, explain_registration_failure, may_be_the_network, roce_port_blocked};
use self::rpc::within;
use self::side_traces::{failed_trace, sample_clock, side_trace};

/// The parameters a workload runs with when the command line says nothing:
/// its catalogue entry's defaults (`workload-catalogue`), in the request's
/// form.
pub fn default_params(workload: &str) -> WorkloadParams {
    WorkloadParams::defaults_of(workload)
}

/// Whether `workload` runs over libfabric (no QP, no rdma_cm: the server's
/// fabric address is relayed from Prepare to Run).
fn is_fabric(workload: &str) -> bool {
    workload_catalogue::find(workload).is_some_and(|w| w.family == Family::Libfabric)
}

/// What to run, where.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// The workload's parameters (its name in `workload`).
    pub params: WorkloadParams,
    /// The passive node.
    pub server: String,
    /// The active node.
    pub client: String,
    /// Give up (and abort both sides) after this long.
    pub timeout: Duration,
    /// Record both nodes' RDMA hardware counters even when no node is
    /// impaired (they are recorded anyway when one is).
    pub counters: bool,
}

/// Overall verdict: every side that checked passed, and somebody checked.
pub fn overall_verified(server: &SideResult, client: &SideResult) -> bool {
    (server.checked || client.checked) && (!server.checked || server.verified) && (!client.checked || client.verified)
}

struct Peer {
    node: NodeState,
    client: Client,
    role: &'static str,
    session: Arc<SshSession>,
    /// This side's session id on its agent: the run's id, told apart by
    /// role when both sides share one node (and so one agent).
    session_id: String,
}

impl Peer {
    /// This side's agent clock against `anchor` (a traced run's).
    async fn clock(&mut self, anchor: Instant) -> Result<lab_results::trace::ClockEstimate, RunError> {
        sample_clock(
            &self.node.name,
            self.role,
            &mut self.client,
            anchor,
            deadline::NODE_INFO,
        )
        .await
    }

    fn fail(&self, status: tonic::Status) -> RunError {
        RunError::Agent {
            node: self.node.name.clone(),
            role: self.role,
            status: Box::new(status),
            hint: String::new(),
        }
    }
}

async fn open_peer(lab: &Lab, state: &lab_state::LabState, name: &str, role: &'static str) -> Result<Peer, RunError> {
    let node = lab.node_state(state, name)?.clone();
    let session = Arc::new(lab.connect(state, name).await?);
    let client = lab.agent(session.clone(), &node).await?;
    Ok(Peer {
        node,
        client,
        role,
        session,
        session_id: String::new(),
    })
}

/// A node's active impairment; a node whose qdisc cannot be read (no tc, no
/// data NIC on record) counts as unimpaired. Takes the peer's session and
/// node rather than the peer, so that it runs beside a call on its agent.
async fn impairment(session: &SshSession, node: &NodeState) -> Option<String> {
    match impair::active(session, node).await {
        Ok(netem) => netem.map(|n| n.to_string()),
        Err(e) => {
            tracing::debug!(node = %node.name, "cannot read the impairment: {e}");
            None
        }
    }
}

impl Peer {
    /// The node's RDMA counters; `None` (and a note in the log) when they
    /// cannot be read, which must not fail the run they describe.
    async fn counters(&self, port: u32) -> Option<Counters> {
        let device = self.node.rdma_device.as_deref()?;
        match impair::read_counters(&self.session, &self.node, device, port).await {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!(node = %self.node.name, "cannot read the RDMA counters: {e}");
                None
            }
        }
    }
}

/// Runs one workload and saves its record. `on_progress` sees the client's
/// progress events as they stream in.
pub async fn run_workload(
    lab: &Lab,
    opts: &RunOptions,
    on_progress: impl FnMut(&Progress),
) -> Result<RunRecord, RunError> {
    Ok(run_workload_traced(lab, opts, on_progress).await?.0)
}

/// As [`run_workload`]; when `opts.params.trace` asks for a trace, also
/// returns both sides' traces with their clocks' offsets from the
/// controller's (sampled before the run).
pub async fn run_workload_traced(
    lab: &Lab,
    opts: &RunOptions,
    mut on_progress: impl FnMut(&Progress),
) -> Result<(RunRecord, Option<Vec<SideTrace>>), RunError> {
    if workload_catalogue::find(&opts.params.workload).is_none() {
        return Err(RunError::UnknownWorkload {
            name: opts.params.workload.clone(),
        });
    }
    let state = lab.state()?;
    let started_at = now_rfc3339();
    let started = Instant::now();
    let (mut server, mut client) = futures::try_join!(
        open_peer(lab, &state, &opts.server, "server"),
        open_peer(lab, &state, &opts.client, "client")
    )?;
    // Each node's impairment (a `tc` over SSH) is read while its agent
    // answers NodeInfo: a run waits for the slower of the two, not both.
    let node_info_limit = node_info_deadline(opts.timeout);
    let (server_info, client_info, server_impairment, client_impairment) = futures::try_join!(
        within(
            &server.node.name,
            server.role,
            "NodeInfo",
            node_info_limit,
            server.client.node_info(NodeInfoRequest {})
        ),
        within(
            &client.node.name,
            client.role,
            "NodeInfo",
            node_info_limit,
            client.client.node_info(NodeInfoRequest {})
        ),
        impairment(&server.session, &server.node).map(Ok::<_, RunError>),
        impairment(&client.session, &client.node).map(Ok::<_, RunError>),
    )?;

    // A verbs run needs each node's data address on an RDMA port of the
    // lab's fabric; say so now, as `doctor` would, rather than as the verbs
    // call that fails or a run that measures another device than asked.
    if workload_catalogue::find(&opts.params.workload).is_some_and(|w| w.family == Family::Verbs) {
        for (peer, info) in [(&server, &server_info), (&client, &client_info)] {
            let node = &peer.node;
            let Some(path) = data_path::find(&info.devices, node.data_addr, node.rdma_device.as_deref()) else {
                return Err(RunError::NoDataPath {
                    node: node.name.clone(),
                    role: peer.role,
                    evidence: data_path_missing::evidence(node.data_addr, info),
                    fix: data_path_missing::fix(lab.spec.fabric),
                });
            };
            if let Some((evidence, fix)) = data_path_missing::wrong_kind(lab.spec.fabric, info, &path) {
                return Err(RunError::WrongDevice {
                    node: node.name.clone(),
                    role: peer.role,
                    evidence,
                    fix,
                });
            }
        }
    }

    // One anchor for the samples before and after the run: the drift between them is taken out.
    let anchor = Instant::now();
    let clocks = if opts.params.trace.is_some() {
        Some((server.clock(anchor).await?, client.clock(anchor).await?))
    } else {
        None
    };

    let session_id = format!("{:016x}", rand::random::<u64>());
    // One node as both server and client (the tutorial's Lab A: one host,
    // two QPs): one agent holds both sides, so each needs an id of its own.
    let same_node = server.node.name == client.node.name;
    for peer in [&mut server, &mut client] {
        peer.session_id = if same_node {
            format!("{session_id}-{}", peer.role)
        } else {
            session_id.clone()
        };
    }
    let mut params = opts.params.clone();
    // Each run its own nonce, so the connect proof the agents derive from it
    // (see agent_proto::auth::ConnectProof) admits this run's client only.
    params.run_nonce = rand::random::<[u8; 16]>().to_vec();
    if params.timeout_ms == 0 {
        params.timeout_ms = opts.timeout.as_millis() as u64;
    }
    if is_fabric(&params.workload) && params.provider.is_empty() {
        params.provider = lab.spec.fabric.libfabric_provider().to_string();
    }
    if params.expect_provider.is_empty() {
        params.expect_provider = lab.spec.expect.fi_provider.clone().unwrap_or_default();
    }
    let impaired = server_impairment.is_some() || client_impairment.is_some();
    let port = params.ib_port.max(1);
    let counters_before = if impaired || opts.counters {
        Some(futures::join!(server.counters(port), client.counters(port)))
    } else {
        None
    };
    let result = drive(&mut server, &mut client, &params, opts.timeout, &mut on_progress).await;
    let (mut server_side, mut client_side) = match result {
        Ok(sides) => sides,
        Err(e) => {
            // Free both sides' resources, both at once. An agent that did
            // not answer is not asked: it ends its session on its own
            // timeout, as every agent does.
            let silent = match &e {
                RunError::SilentPeer { role, .. } | RunError::Timeout { role, .. } => Some(*role),
                _ => None,
            };
            let abort = |peer: &Peer| {
                let request = AbortRequest {
                    session_id: peer.session_id.clone(),
                    reason: e.to_string(),
                };
                let mut agent = peer.client.clone();
                let ask = silent != Some(peer.role);
                async move {
                    if ask {
                        let _ = tokio::time::timeout(Duration::from_secs(5), agent.abort(request)).await;
                    }
                }
            };
            futures::join!(abort(&server), abort(&client));
            let (s, c) = ((&server.node, &*server.session), (&client.node, &*client.session));
            let e = explain_registration_failure(e, s, c).await;
            let blocked = match may_be_the_network(&e) {
                true => roce_port_blocked(lab.spec.fabric, &params, s, c).await,
                false => Vec::new(),
            };
            let error = explain_link_failure(e, &server.node, &client.node, &blocked);
            return Err(match clocks {
                Some((server_clock, client_clock)) => {
                    let (server_failed, client_failed) = futures::join!(
                        failed_trace(&mut server.client, &server.session_id),
                        failed_trace(&mut client.client, &client.session_id)
                    );
                    RunError::Traced {
                        error: Box::new(error),
                        run_id: session_id,
                        traces: vec![
                            side_trace("server", &opts.server, server_clock, None, server_failed),
                            side_trace("client", &opts.client, client_clock, None, client_failed),
                        ],
                    }
                }
                None => error,
            });
        }
    };

    let counters = match counters_before {
        Some((server_before, client_before)) => {
            let (server_after, client_after) = futures::join!(server.counters(port), client.counters(port));
            let delta = |before: Option<Counters>, after: Option<Counters>| match (before, after) {
                (Some(b), Some(a)) => impair::counter_delta(&b, &a),
                _ => Counters::new(),
            };
            Some(CounterPair {
                server: delta(server_before, server_after),
                client: delta(client_before, client_after),
            })
        }
        None => None,
    };
    let clocks_after = match clocks {
        // Sampled after the run, so the trace can take each clock's drift over it out.
        Some(_) => Some((server.clock(anchor).await.ok(), client.clock(anchor).await.ok())),
        None => None,
    };
    let traces = clocks.map(|(server_clock, client_clock)| {
        let (server_after, client_after) = clocks_after.unwrap_or_default();
        vec![
            side_trace(
                "server",
                &opts.server,
                server_clock,
                server_after,
                (server_side.trace.take().unwrap_or_default(), None),
            ),
            side_trace(
                "client",
                &opts.client,
                client_clock,
                client_after,
                (client_side.trace.take().unwrap_or_default(), None),
            ),
        ]
    });
    let headline = &client_side;
    let bw = headline.bw.unwrap_or_default();
    let moved = client_side.bytes.max(server_side.bytes);
    let mut record = RunRecord {
        schema: RUN_SCHEMA,
        id: session_id,
        lab: lab.spec.name.clone(),
        workload: params.workload.clone(),
        params: ParamsRecord::from(&params).with_completion_used(client_side.facts.get("completion")),
        verified: overall_verified(&server_side, &client_side),
        bw_peak_mib_s: bw.peak_mib_s,
        bw_peak_window_mib_s: bw.peak_window_mib_s,
        bw_avg_mib_s: bw.avg_mib_s,
        bw_avg_gbps: bw.avg_gbps,
        msg_rate_mpps: bw.msg_rate_mpps,
        lat_us: latency(headline.lat.as_ref()),
        cpu: CpuPair {
            server: cpu(&server_side, moved),
            client: cpu(&client_side, moved),
        },
        nodes: NodePair {
            server: node_record(&opts.server, server_info),
            client: node_record(&opts.client, client_info),
        },
        started_at,
        duration_s: started.elapsed().as_secs_f64(),
        server: side_record(&opts.server, &server_side),
        client: side_record(&opts.client, &client_side),
        sweep: client_side
            .sweep
            .iter()
            .map(|p| {
                let bw = p.bw.unwrap_or_default();
                SweepPoint {
                    size: p.size,
                    iterations: p.iterations,
                    bw_avg_mib_s: bw.avg_mib_s,
                    bw_peak_mib_s: bw.peak_mib_s,
                    bw_peak_window_mib_s: bw.peak_window_mib_s,
                    msg_rate_mpps: bw.msg_rate_mpps,
                    lat_us: latency(p.lat.as_ref()),
                }
            })
            .collect(),
        mr_cache: client_side.mr_cache.as_ref().map(MrCacheRecord::from),
        saved_to: None,
        impairment: impaired.then_some(ImpairmentPair {
            server: server_impairment,
            client: client_impairment,
        }),
        counters,
    };
    record.saved_to = Some(save(lab, &record)?.display().to_string());
    Ok((record, traces))
}

/// How long a run waits for an agent's NodeInfo, its first call: never
/// longer than the run's own timeout (a stopped agent fails a `--timeout 5`
/// run in 5 s).
pub(crate) fn node_info_deadline(timeout: Duration) -> Duration {
    deadline::NODE_INFO.min(timeout)
}

/// How long the controller waits for a run's result from its start (`Run`).
/// The agents enforce the timeout themselves (a timed run's duration and the
/// connect delay on top, [`WorkloadParams::beyond_timeout`]); the
/// controller's deadline is 15 s later and catches an agent or node that
/// vanished.
pub(crate) fn run_deadline(params: &WorkloadParams, timeout: Duration) -> Duration {
    timeout + params.beyond_timeout() + Duration::from_secs(15)
}

/// The three steps of a run; returns (server, client) results.
async fn drive(
    server: &mut Peer,
    client: &mut Peer,
    params: &WorkloadParams,
    timeout: Duration,
    on_progress: &mut impl FnMut(&Progress),
) -> Result<(SideResult, SideResult), RunError> {
    let prepare = |role: Role, peer: &Peer| PrepareRequest {
        session_id: peer.session_id.clone(),
        params: Some(params.clone()),
        role: role as i32,
        bind_addr: peer.node.data_addr.to_string(),
    };
    let prepared = within(
        &server.node.name,
        server.role,
        "Prepare",
        deadline::SETUP,
        server.client.prepare(prepare(Role::Server, server)),
    )
    .await?;
    let (server_endpoint, fabric_peer) = (prepared.endpoint, prepared.fabric);
    if params.cm() == CmMode::Oob && !is_fabric(&params.workload) {
        // Lab C: each side learns the other's GID, QPN, PSN, MTU, addr and rkey.
        let client_endpoint = within(
            &client.node.name,
            client.role,
            "Prepare",
            deadline::SETUP,
            client.client.prepare(prepare(Role::Client, client)),
        )
        .await?
        .endpoint;
        within(
            &server.node.name,
            server.role,
            "Connect",
            deadline::SETUP,
            server.client.connect(ConnectRequest {
                session_id: server.session_id.clone(),
                peer: client_endpoint,
            }),
        )
        .await?;
    }
    let run = RunRequest {
        session_id: client.session_id.clone(),
        params: Some(params.clone()),
        peer: server_endpoint,
        bind_addr: client.node.data_addr.to_string(),
        // fabric-*: the server's libfabric address, relayed as it came.
        fabric_peer,
        ..Default::default()
    };
    let deadline = run_deadline(params, timeout);
    let started = Instant::now();
    let (client_node, client_role) = (client.node.name.clone(), client.role);
    // The server's result is asked for as the run starts, so that a server
    // side that fails while the client's agent stays silent (stopped, wedged,
    // its node gone) ends the run then, not at the controller's deadline.
    let mut collector = server.client.clone();
    let collect = collector.collect(CollectRequest {
        session_id: server.session_id.clone(),
        timeout_ms: deadline.as_millis() as u64,
    });
    let client_run = async {
        tokio::time::timeout(deadline, async {
            let mut stream = client.client.run(run).await.map_err(|s| client.fail(s))?.into_inner();
            loop {
                match stream.message().await {
                    Ok(Some(event)) => match event.event {
                        Some(run_event::Event::Progress(p)) => on_progress(&p),
                        Some(run_event::Event::Result(r)) => return Ok(r),
                        None => {}
                    },
                    Ok(None) => {
                        return Err(client.fail(tonic::Status::unavailable(
                            "the run ended without a result (did the agent or node die?)",
                        )))
                    }
                    Err(status) => return Err(client.fail(status)),
                }
            }
        })
        .await
        .map_err(|_| RunError::Timeout {
            node: client.node.name.clone(),
            role: "client",
            call: "Run",
            waited_s: deadline.as_secs(),
        })
        .and_then(|r| r)
    };
    tokio::pin!(collect, client_run);
    let (client_result, server_outcome) = tokio::select! {
        biased;
        c = &mut client_run => (c, None),
        s = &mut collect => match s {
            // The server is done: the client's result follows.
            Ok(s) => (client_run.await, Some(Ok(s))),
            // The server failed: its client fails too within moments, unless
            // its agent cannot answer at all.
            Err(status) => match tokio::time::timeout(SILENT_CLIENT_GRACE, &mut client_run).await {
                Ok(c) => (c, Some(Err(status))),
                Err(_) => {
                    return Err(RunError::SilentPeer {
                        failed: Box::new(server.fail(status)),
                        node: client_node,
                        role: client_role,
                        call: "Run",
                        waited_s: started.elapsed().as_secs(),
                    })
                }
            },
        },
    };
    let client_result = match client_result {
        Ok(r) => r,
        Err(e) => {
            // Only a client the server's rdma_cm refused needs the server's
            // word (which it has at once); any other failure is the run's
            // as it is.
            let server_outcome = match server_outcome {
                None if rdma_cm_rejection(&e).is_some() => {
                    tokio::time::timeout(REFUSING_SERVER_WAIT, &mut collect).await.ok()
                }
                outcome => outcome,
            };
            return Err(why_the_server_refused(server, server_outcome, e));
        }
    };
    let server_outcome = match server_outcome {
        Some(outcome) => outcome,
        None => tokio::time::timeout(COLLECT_AFTER_CLIENT, &mut collect)
            .await
            .map_err(|_| RunError::Timeout {
                node: server.node.name.clone(),
                role: "server",
                call: "Collect",
                waited_s: COLLECT_AFTER_CLIENT.as_secs(),
            })?,
    };
    let server_result = server_outcome.map_err(|s| server.fail(s))?.into_inner();
    Ok((server_result, client_result))
}

/// How long a run whose server side failed waits for its client's agent to
/// answer before it names that agent as silent.
const SILENT_CLIENT_GRACE: Duration = Duration::from_secs(3);

/// How long the server may take to finish after its client did.
const COLLECT_AFTER_CLIENT: Duration = Duration::from_secs(30);

/// How long a client refused by the server's rdma_cm waits for the server's
/// failure.
const REFUSING_SERVER_WAIT: Duration = Duration::from_secs(3);

/// The rdma_cm rejection in a client's error (`RDMA_CM_EVENT_REJECTED`), if
/// that is what it is.
fn rdma_cm_rejection(client_error: &RunError) -> Option<&str> {
    match client_error {
        RunError::Agent { status, .. } if status.message().contains("RDMA_CM_EVENT_REJECTED") => Some(status.message()),
        _ => None,
    }
}

/// A client that the server's rdma_cm refused (`RDMA_CM_EVENT_REJECTED`)
/// was refused because the server's side had failed, and that failure is
/// the run's: the server's (`server_outcome`, what its Collect returned),
/// with the client's rejection added. Any other error stays as it is, and
/// so does this one when the server has no failure to tell.
fn why_the_server_refused(
    server: &Peer,
    server_outcome: Option<Result<tonic::Response<SideResult>, tonic::Status>>,
    client_error: RunError,
) -> RunError {
    let Some(rejected) = rdma_cm_rejection(&client_error).map(str::to_string) else {
        return client_error;
    };
    match server_outcome {
        Some(Err(status)) if status.code() != tonic::Code::DeadlineExceeded => {
            let message = format!("{}; so it refused the client ({rejected})", status.message());
            server.fail(tonic::Status::new(status.code(), message))
        }
        _ => client_error,
    }
}

/// Saves `record` among the lab's results.
fn save(lab: &Lab, record: &RunRecord) -> Result<PathBuf, RunError> {
    let json = serde_json::to_vec_pretty(record).expect("record serialises");
    lab.dir
        .save_result(&record.started_at, &format!("{}-{}", record.workload, record.id), &json)
        .map_err(|e| RunError::Save(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::CompletionMode;

    #[test]
    fn test_the_controller_waits_for_a_timed_run_past_its_timeout() {
        let mut params = WorkloadParams::defaults_of("write-bw");
        let timeout = Duration::from_secs(120);
        assert_eq!(run_deadline(&params, timeout), Duration::from_secs(135));
        // `-D 200`: the agents run for 200 s after their setup allowance.
        params.iterations = 0;
        params.duration_s = 200.0;
        assert_eq!(run_deadline(&params, timeout), Duration::from_secs(335));
    }

    fn side(checked: bool, verified: bool) -> SideResult {
        SideResult {
            checked,
            verified,
            ..Default::default()
        }
    }

    #[test]
    fn test_verdict_needs_a_check_and_no_failed_one() {
        assert!(overall_verified(&side(true, true), &side(true, true)));
        assert!(overall_verified(&side(true, true), &side(false, false)));
        assert!(overall_verified(&side(false, false), &side(true, true)));
        assert!(!overall_verified(&side(false, false), &side(false, false)));
        assert!(!overall_verified(&side(true, false), &side(true, true)));
        assert!(!overall_verified(&side(true, true), &side(true, false)));
    }

    #[test]
    fn test_every_workload_has_runnable_defaults() {
        for w in workload_catalogue::names() {
            let p = default_params(w);
            assert_eq!(p.workload, w);
            assert!(p.size >= 2 && p.iterations >= 1, "{w}: {p:?}");
        }
        assert_eq!(default_params("atomic").size, 8);
        assert_eq!(default_params("param-server").num_qps, 2);
        assert_eq!(default_params("inference-ring").tx_depth, 8);
        assert_eq!(default_params("mr-cache").iterations, 40);
        assert_eq!(default_params("write-bw").size, 65536);
        assert_eq!(default_params("write-bw").completion(), CompletionMode::Auto);
        assert_eq!(default_params("write-lat").completion(), CompletionMode::Poll);
        assert_eq!(default_params("bulk-tcp").total, 4 << 20);
        assert_eq!(default_params("bulk-rdma").size, 256 << 10);
        assert_eq!(
            (
                default_params("fabric-write").size,
                default_params("fabric-write").iterations
            ),
            (65536, 64)
        );
    }

    #[test]
    fn test_fabric_provider_follows_the_lab_fabric() {
        use lab_model::Fabric;
        assert_eq!(Fabric::Rxe.libfabric_provider(), "verbs;ofi_rxd");
        assert_eq!(Fabric::None.libfabric_provider(), "tcp;ofi_rxm");
        assert_eq!(Fabric::Efa.libfabric_provider(), "efa");
        assert!(is_fabric("fabric-write") && !is_fabric("write-bw"));
        let mut p = default_params("fabric-write");
        p.provider = "tcp;ofi_rxm".into();
        assert_eq!(ParamsRecord::from(&p).provider.as_deref(), Some("tcp;ofi_rxm"));
        assert_eq!(ParamsRecord::from(&default_params("write-bw")).provider, None);
    }

    #[test]
    fn test_cpu_per_gib_uses_bytes_moved() {
        let s = SideResult {
            cpu: Some(agent_proto::v1::CpuUsage {
                user_s: 0.5,
                system_s: 0.5,
            }),
            ..Default::default()
        };
        assert_eq!(cpu(&s, 1 << 30).per_gib_s, Some(1.0));
        assert_eq!(cpu(&s, 0).per_gib_s, None);
    }
}
