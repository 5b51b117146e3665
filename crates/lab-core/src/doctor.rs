//! `labctl doctor`: is every node's fabric healthy, and does RDMA work
//! between every pair of nodes? Each node is read in parallel (its agent's
//! NodeInfo, a read-only probe script as root, a ping to every other node's
//! data address); then, pair by pair, RoCE v2's UDP port 4791 is probed
//! both ways where rxe carries it, and a one-shot write-read whose bytes
//! are verified proves the data path end to end (RDMA WRITE one way, READ
//! back, over UDP 4791 in both directions on Ethernet).
//!
//! What the provider recorded about a node from outside it (the QEMU
//! provider's restarts of its data NIC) is read beside.
//!
//! The node facts of the lab's `expect:` (devices, link rate, MTU,
//! libfabric provider) are checked on what was read, node by node.
//!
//! It reads and never repairs: every check that does not pass says what to
//! do. The checks themselves are pure ([`checks`]), tested on recorded
//! output; this module only gathers.

pub mod checks;
pub mod expected;
pub mod probe;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use agent_proto::v1::{NodeInfoRequest, WorkloadParams};
use futures::future::join_all;
use lab_model::labs::Fabric;
use lab_providers::Provider;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;
use lab_results::doctor::{Check, DoctorReport, Scope, Verdict, DOCTOR_SCHEMA};
use lab_state::{LabDir, LabState, NodeState};

use self::checks::{
    clock_check, efa_check, expectation_checks, node_checks, pair_checks, reach_of, udp_check, NicRestartSeen,
    NodeFound, Reach, UDP_CHECK,
};
use crate::lab::{Lab, LabError};
use crate::provision::as_root;
use crate::roce_port_probe;
use crate::run::{run_workload, RunOptions};

/// The workload that proves a pair's data path, and its size: small enough
/// to take a second on an emulated lab, a page so that it spans packets at
/// every RoCE MTU below 4096.
const PAIR_WORKLOAD: &str = "write-read";
const PAIR_SIZE: u64 = 4096;
const PAIR_ITERATIONS: u64 = 4;
const PAIR_TIMEOUT: Duration = Duration::from_secs(30);

/// What `doctor` runs.
#[derive(Debug, Clone, Default)]
pub struct DoctorOptions {
    /// Leave out the pairs' RDMA runs (the node checks, reach, MTU and the
    /// UDP 4791 probe only).
    pub no_run: bool,
    /// The node facts to check instead of the lab's `expect:` (`--expect
    /// FILE`, a ci suite's over its lab's); None: the lab's.
    pub expect: Option<lab_model::expect::Expectations>,
}

impl Lab {
    /// Diagnoses the lab: node checks, then pair checks. `on_step` is told
    /// of each step as it starts (for progress).
    pub async fn doctor(&self, opts: &DoctorOptions, mut on_step: impl FnMut(&str)) -> Result<DoctorReport, LabError> {
        let started = Instant::now();
        let state = self.state()?;
        let fabric = self.spec.fabric;
        // Only for what it recorded about the nodes (QEMU: data NIC restarts).
        let provider = self.provider().ok();
        on_step("reading every node");
        let sessions: Vec<Result<Arc<SshSession>, String>> =
            join_all(state.nodes.iter().map(|node| self.connect(&state, &node.name)))
                .await
                .into_iter()
                .map(|s| s.map(Arc::new).map_err(|e| format!("SSH: {e}")))
                .collect();
        // RoCE's UDP port is probed where RDMA runs through the kernel (rxe,
        // always over Ethernet), while the nodes are read: pair by pair, so
        // that each receiver counts one sender's datagrams at a time.
        let probed: Vec<Option<(&NodeState, &SshSession)>> = state
            .nodes
            .iter()
            .zip(&sessions)
            .map(|(node, session)| {
                let applies = roce_port_probe::applies(node, fabric);
                applies.then(|| session.as_deref().ok().map(|s| (node, s))).flatten()
            })
            .collect();
        let udp_probes = async {
            let mut checks = BTreeMap::new();
            for i in 0..probed.len() {
                for j in i + 1..probed.len() {
                    if let (Some(a), Some(b)) = (probed[i], probed[j]) {
                        // Both ways at once: each receiver counts only what is sent to it.
                        let (a_to_b, b_to_a) =
                            futures::join!(roce_port_probe::probe(a, b), roce_port_probe::probe(b, a));
                        checks.insert((i, j), (a_to_b, b_to_a));
                    }
                }
            }
            checks
        };
        let examine = join_all(
            state
                .nodes
                .iter()
                .zip(&sessions)
                .map(|(node, session)| self.examine(&state, node, session.as_ref(), provider.as_deref())),
        );
        let (examined, mut udp_probes) = futures::join!(examine, udp_probes);
        let (found, reaches): (Vec<NodeFound>, Vec<Vec<Reach>>) = examined.into_iter().unzip();
        // What EC2 launched, for the EFA check (other providers record nothing).
        let efa = lab_providers::aws::AwsState::from_lab_state(&state).and_then(|aws| aws.efa);
        let mut report = DoctorReport {
            schema: DOCTOR_SCHEMA,
            lab: self.spec.name.clone(),
            fabric: fabric.to_string(),
            checks: found
                .iter()
                .flat_map(|n| {
                    node_checks(fabric, n)
                        .into_iter()
                        .chain(efa_check(fabric, n, efa.as_ref()))
                })
                .collect(),
            took_s: 0.0,
            expectations: Vec::new(),
        };
        report.expectations = expected::node_facts(opts.expect.as_ref().unwrap_or(&self.spec.expect), &found);
        report.checks.extend(expectation_checks(&report.expectations));
        for i in 0..found.len() {
            for j in i + 1..found.len() {
                let (a, b) = (&found[i], &found[j]);
                report.checks.extend(pair_checks(a, b, &reaches[i][j], &reaches[j][i]));
                report.checks.extend(clock_check(a, b));
                if let Some((a_to_b, b_to_a)) = udp_probes.remove(&(i, j)) {
                    let scope = Scope::Pair {
                        a: a.name.clone(),
                        b: b.name.clone(),
                    };
                    let udp = udp_check(&scope, a_to_b, b_to_a);
                    let blocked = udp.verdict == Verdict::Fail;
                    report.checks.push(udp);
                    if blocked && !opts.no_run {
                        // Every packet of the run would be dropped: it could
                        // only wait for its timeout.
                        report.checks.push(Check::not_ok(
                            &scope,
                            PAIR_WORKLOAD,
                            Verdict::Fail,
                            "not run: RoCE v2's UDP port 4791 is not delivered between the two nodes",
                            format!("fix what failed above first: {scope} {UDP_CHECK}"),
                        ));
                        continue;
                    }
                }
                if fabric == Fabric::None || opts.no_run {
                    continue;
                }
                on_step(&format!("{PAIR_WORKLOAD} {} -> {}", b.name, a.name));
                let broken = report
                    .checks
                    .iter()
                    .filter(|c| c.verdict == Verdict::Fail)
                    .map(|c| format!("{} {}", c.scope, c.check))
                    .collect::<Vec<_>>();
                report.checks.push(self.pair_run(a, b, &broken).await);
            }
        }
        for session in sessions.iter().flatten() {
            session.close().await;
        }
        report.took_s = started.elapsed().as_secs_f64();
        Ok(report)
    }

    /// One node's facts, and whether it reaches each node of the lab
    /// (itself included, as reached), over its SSH session (or the reason
    /// there is none).
    async fn examine(
        &self,
        state: &LabState,
        node: &NodeState,
        session: Result<&Arc<SshSession>, &String>,
        provider: Option<&dyn Provider>,
    ) -> (NodeFound, Vec<Reach>) {
        let all = &state.nodes;
        let mut found = NodeFound {
            name: node.name.clone(),
            data_addr: node.data_addr,
            device: node.rdma_device.clone(),
            info: Err(String::new()),
            probe: Err(String::new()),
            clock: Err(String::new()),
            nic_restarts: provider.and_then(|p| nic_restarts(p, &self.dir, &node.name)),
        };
        let session = match session {
            Ok(s) => s,
            Err(e) => {
                found.info = Err(e.clone());
                found.probe = Err(e.clone());
                found.clock = Err(e.clone());
                return (found, all.iter().map(|_| Reach::Failed(e.clone())).collect());
            }
        };
        // The agent's NodeInfo, the probe script (fi_info alone takes a
        // couple of seconds on an emulated node) and the pings, at once over
        // the one session.
        let info = async {
            let mut client = match self.agent(session.clone(), node).await {
                Ok(client) => client,
                Err(e) => return (Err(e.to_string()), Err(e.to_string())),
            };
            let info = lab_remote::agent::call(
                &node.name,
                "NodeInfo",
                lab_remote::agent::deadline::NODE_INFO,
                client.node_info(NodeInfoRequest {}),
            )
            .await
            .map_err(|e| e.to_string());
            let clock = crate::wall_clock::offset(&node.name, &mut client).await;
            (info, clock)
        };
        let probe = async {
            match session.exec(&as_root(node, RemoteCommand::script(probe::SCRIPT))).await {
                Ok(out) => Ok(probe::parse(&out.stdout_text())),
                Err(e) => Err(e.to_string()),
            }
        };
        let reaches = join_all(all.iter().map(|peer| async move {
            if peer.name == node.name {
                return Reach::Replied("itself".into());
            }
            let ping = RemoteCommand::new("ping").args(["-c", "1", "-W", "2", &peer.data_addr.to_string()]);
            match session.exec(&ping).await {
                Ok(out) => reach_of(
                    out.status,
                    &format!("{}\n{}", out.stdout_text(), String::from_utf8_lossy(&out.stderr)),
                ),
                Err(e) => Reach::Failed(e.to_string()),
            }
        }));
        let ((info, clock), probe, reaches) = futures::join!(info, probe, reaches);
        found.info = info;
        found.clock = clock;
        found.probe = probe;
        (found, reaches)
    }

    /// The pair's write-read (server `a`, client `b`), its bytes verified.
    /// `broken` names the checks that already failed: a run that fails
    /// points at them.
    async fn pair_run(&self, a: &NodeFound, b: &NodeFound, broken: &[String]) -> Check {
        let scope = Scope::Pair {
            a: a.name.clone(),
            b: b.name.clone(),
        };
        let mut params = WorkloadParams::defaults_of(PAIR_WORKLOAD);
        params.size = PAIR_SIZE;
        params.iterations = PAIR_ITERATIONS;
        let opts = RunOptions {
            params,
            server: a.name.clone(),
            client: b.name.clone(),
            timeout: PAIR_TIMEOUT,
            counters: false,
        };
        let started = Instant::now();
        let outcome = run_workload(self, &opts, |_| {}).await;
        let took = started.elapsed().as_secs_f64();
        let cause = if broken.is_empty() {
            "run `labctl run write-read --server A --client B -v` for the agents' log".to_string()
        } else {
            format!("fix what failed above first: {}", broken.join(", "))
        };
        match outcome {
            Ok(r) if r.verified => Check::ok(
                &scope,
                PAIR_WORKLOAD,
                format!(
                    "{PAIR_ITERATIONS} x {PAIR_SIZE} B written by {} into {} and read back, verified (run {}, {took:.1} s)",
                    b.name, a.name, r.id
                ),
            ),
            Ok(r) => Check::not_ok(
                &scope,
                PAIR_WORKLOAD,
                Verdict::Fail,
                format!(
                    "the bytes did not verify: server: {}; client: {}",
                    r.server.verify_detail, r.client.verify_detail
                ),
                cause,
            ),
            Err(e) => Check::not_ok(&scope, PAIR_WORKLOAD, Verdict::Fail, e.to_string(), cause),
        }
    }
}

/// The provider's restarts of node `node`'s data NIC, with how long ago each was.
fn nic_restarts(provider: &dyn Provider, dir: &LabDir, node: &str) -> Option<Result<Vec<NicRestartSeen>, String>> {
    let now = SystemTime::now();
    provider.data_nic_restarts(dir, node).map(|read| {
        read.map(|restarts| {
            restarts
                .into_iter()
                .map(|r| NicRestartSeen {
                    at: lab_state::rfc3339(r.at),
                    ago_s: now.duration_since(r.at).ok().map(|d| d.as_secs_f64()),
                    failed: r.failed,
                    detail: r.detail,
                })
                .collect()
        })
    })
}
