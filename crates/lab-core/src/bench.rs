//! `labctl bench`: our workloads against perftest on the same two nodes.
//!
//! Each pair runs a reference tool (`ib_write_bw`, ...) and the matching
//! workload of ours (`write-bw`, ...) with the same message size, iteration
//! count, TX depth and CQ moderation over the same link: first `warmup`
//! rounds that are shown but not counted, then `rounds` measured rounds in
//! ABBA order ([`schedule`]), so that a machine that drifts (a freshly
//! booted node keeps getting faster for minutes) moves both tools' medians
//! alike. Per pair it reports min, median and max of the headline metric of
//! each side over the rounds that count, the ratio of the medians (ours /
//! reference), CPU seconds per GiB moved and whether the rounds trend (see
//! `lab_results::bench` for which rounds count and the drift rule).
//!
//! perftest runs through [`Lab::exec`]: the server side first (its exec is
//! one future of a join), the client once the server says it waits for a
//! connection; both under `timeout` on the node and with `-F` (no CPU
//! frequency check). perftest's "MB/sec" is MiB/s (2^20 bytes, checked from
//! its message rate), the same unit as our `bw_avg_mib_s`.
//!
//! `--suite collectives` (the [`collectives`] module, which runs it)
//! compares our collectives with Open MPI's on every node of the lab
//! instead of pairs with perftest.
//!
//! The libfabric pair runs `fi_pingpong` (libfabric-bin: untagged
//! `fi_send`/`fi_recv` ping-pong on an RDM endpoint) against `fabric-lat`,
//! which does the same, on the same provider (`tcp;ofi_rxm` on the data NIC,
//! the provider every lab has). `fi_pingpong`'s only latency figure is
//! "usec/xfer", the mean half round trip, so the pair compares means
//! ([`Metric::LatAvgUs`]). libfabric-bin 1.17 has no RMA bandwidth tool, so
//! `fabric-bw` has no reference pair.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use lab_results::bench::{
    AgentRss, BenchRecord, Failures, Metric, PairRecord, PairSpec, Sample, SideStats, Suite, AGENT_RSS_TARGET_BYTES,
    BENCH_SCHEMA,
};
use lab_results::run::RunRecord;

use crate::lab::Lab;
use crate::run::{default_params, run_workload, RunOptions};
use lab_remote::command::RemoteCommand;
use lab_state::{now_rfc3339, LabState};

pub mod collectives;
mod options;
pub mod orchestration;
mod parse;
mod reference;
mod schedule;

pub use options::{BenchError, BenchOptions, MpiTransport};
pub use parse::{parse_fi_pingpong, parse_mpi_collectives, parse_perftest, parse_perftest_server};
pub use reference::perftest_clock_refusal;
use reference::{first_port, gib, node_data_path, reference_command, run_reference};
pub use schedule::{schedule, Side, Slot};

/// Iterations of a latency pair's run: perftest's own default (`-n 1000`).
/// On a TCG lab a run's t_typical moves with the host's moment; 200
/// iterations (about 0.1 s) let one round differ from the next by 10-30 %
/// and four rounds' ratio by as much, 1000 narrow both about twofold
/// (docs/performance.md, "Iterations of the latency pairs").
const LATENCY_ITERATIONS: u64 = 1000;

/// Iterations of a latency point of a size sweep: at 1 MiB a round trip is
/// about a tenth of a second here, so a sweep keeps the shorter run.
const SWEEP_LATENCY_ITERATIONS: u64 = 200;

/// The pairs of a suite, sized for an emulated lab (a few MB/s, ms latency).
pub fn suite(s: Suite) -> Vec<PairSpec> {
    let bw = |workload: &str, tool: &str, target| PairSpec {
        workload: workload.into(),
        tool: tool.into(),
        size: 65536,
        iterations: 300,
        depth: Some((128, 16)),
        metric: Metric::BwAvgMibS,
        target,
        provider: None,
        qps: 1,
        sweep_point: false,
    };
    let lat = |workload: &str, tool: &str, size, target| PairSpec {
        workload: workload.into(),
        tool: tool.into(),
        size,
        iterations: LATENCY_ITERATIONS,
        depth: None,
        metric: Metric::LatTypicalUs,
        target,
        provider: None,
        qps: 1,
        sweep_point: false,
    };
    // A scaling point: the same bytes in all as the one-QP pair, spread over
    // `qps` QPs (perftest's -n counts per QP, as ours does), so a series
    // takes about as long at 8 QPs as at 1.
    let scaled = |pair: PairSpec, qps: u32| PairSpec {
        iterations: (pair.iterations / u64::from(qps)).max(1),
        qps,
        target: None,
        ..pair
    };
    let mut pairs = vec![
        bw("write-bw", "ib_write_bw", Some(1.10)),
        bw("read-bw", "ib_read_bw", Some(1.0)),
        lat("write-lat", "ib_write_lat", 2, Some(1.0)),
        PairSpec {
            workload: "atomic-bw".into(),
            tool: "ib_atomic_bw".into(),
            size: 8,
            iterations: 500,
            depth: Some((128, 16)),
            metric: Metric::MsgRateMpps,
            target: Some(1.0),
            provider: None,
            qps: 1,
            sweep_point: false,
        },
        PairSpec {
            workload: "fabric-lat".into(),
            tool: "fi_pingpong".into(),
            size: 64,
            iterations: 200,
            depth: None,
            metric: Metric::LatAvgUs,
            target: None,
            provider: Some("tcp;ofi_rxm".into()),
            qps: 1,
            sweep_point: false,
        },
    ];
    if s == Suite::Full {
        pairs.push(bw("send-bw", "ib_send_bw", Some(1.0)));
        pairs.push(lat("read-lat", "ib_read_lat", 2, Some(1.0)));
        pairs.push(lat("send-lat", "ib_send_lat", 2, Some(1.0)));
        // An atomic's operand is 8 bytes whatever the size says.
        pairs.push(lat("atomic-lat", "ib_atomic_lat", 8, Some(1.0)));
        for qps in [2, 4, 8] {
            pairs.push(scaled(bw("write-bw", "ib_write_bw", None), qps));
            pairs.push(scaled(bw("send-bw", "ib_send_bw", None), qps));
        }
    }
    pairs
}

/// The message sizes of a sweep by default: 2 B to 1 MiB, powers of two.
pub fn default_sweep_sizes() -> Vec<u64> {
    (1..=20).map(|shift| 1u64 << shift).collect()
}

/// The workloads a sweep runs when none is named: one bandwidth, one latency.
pub const DEFAULT_SWEEP_WORKLOADS: [&str; 2] = ["write-bw", "write-lat"];

/// A size sweep's pairs: each workload's one-QP pair of the full suite at
/// every size. Workloads with a fixed size (atomics) or no perftest
/// reference (fabric-lat) cannot sweep.
pub fn sweep_pairs(workloads: &[String], sizes: &[u64]) -> Result<Vec<PairSpec>, BenchError> {
    // One-QP verbs pairs whose size is free (an atomic's is 8 bytes).
    let can_sweep = |p: &&PairSpec| p.qps == 1 && p.provider.is_none() && !p.tool.starts_with("ib_atomic");
    let full = suite(Suite::Full);
    let mut pairs = Vec::new();
    for workload in workloads {
        let base = full
            .iter()
            .filter(can_sweep)
            .find(|p| &p.workload == workload)
            .ok_or_else(|| {
                let names: Vec<&str> = full.iter().filter(can_sweep).map(|p| p.workload.as_str()).collect();
                BenchError::Setup(format!(
                    "`{workload}` cannot sweep sizes; these can: {}",
                    names.join(", ")
                ))
            })?;
        let iterations = if base.metric.higher_is_better() {
            base.iterations
        } else {
            SWEEP_LATENCY_ITERATIONS
        };
        pairs.extend(sizes.iter().map(|&size| PairSpec {
            size,
            iterations,
            sweep_point: true,
            target: None,
            ..base.clone()
        }));
    }
    Ok(pairs)
}

/// The agent's idle RSS on `node`, from its Health RPC.
async fn agent_rss(lab: &Lab, state: &LabState, node: &str, when: &str) -> Result<AgentRss, BenchError> {
    let ns = lab.node_state(state, node)?.clone();
    let session = Arc::new(lab.connect(state, node).await?);
    let mut client = lab.agent(session.clone(), &ns).await?;
    let health = lab_remote::agent::call(
        node,
        "Health",
        lab_remote::agent::deadline::HEALTH,
        client.health(agent_proto::v1::HealthRequest {}),
    )
    .await
    .map_err(|e| BenchError::Setup(e.to_string()))?;
    session.close().await;
    Ok(AgentRss {
        node: node.to_string(),
        when: when.to_string(),
        rss_bytes: health.rss_bytes,
        target_bytes: AGENT_RSS_TARGET_BYTES,
        holds: health.rss_bytes <= AGENT_RSS_TARGET_BYTES,
    })
}

/// Both agents' idle RSS.
async fn idle_rss(lab: &Lab, state: &LabState, opts: &BenchOptions, when: &str) -> Result<Vec<AgentRss>, BenchError> {
    let (server, client) = futures::try_join!(
        agent_rss(lab, state, &opts.server, when),
        agent_rss(lab, state, &opts.client, when)
    )?;
    Ok(vec![server, client])
}

/// Progress of a bench, for the command line.
#[derive(Debug, Clone)]
pub enum BenchEvent<'a> {
    /// A run starts.
    Start {
        /// The pair's label ([`PairSpec::label`]).
        pair: &'a str,
        /// The tool about to run.
        tool: &'a str,
        /// The round (0-based; warm-ups and measured rounds count apart).
        round: u32,
        /// A warm-up round.
        warmup: bool,
    },
    /// A step of the suite's own, outside the rounds (a build, the ceiling).
    Step {
        /// What it is.
        what: &'a str,
    },
    /// An expectation of the lab was measured.
    Expect {
        /// Its outcome.
        outcome: &'a lab_results::expect::ExpectOutcome,
    },
    /// A run ended.
    Done {
        /// The tool.
        tool: &'a str,
        /// Its sample.
        sample: &'a Sample,
    },
}

/// One pair's samples as its [`schedule`] runs: each run announced, then
/// stamped with its slot, its position in the pair's order and when it
/// started, and filed by side.
struct PairRounds {
    /// When the bench started: the runs' `at_s` count from it.
    bench_started: Instant,
    /// When the run announced last started, seconds after `bench_started`.
    run_started_s: f64,
    reference: Vec<Sample>,
    ours: Vec<Sample>,
}

impl PairRounds {
    fn new(bench_started: Instant) -> Self {
        Self {
            bench_started,
            run_started_s: 0.0,
            reference: Vec::new(),
            ours: Vec::new(),
        }
    }

    /// Says which tool of `spec` runs in `slot`, and returns it.
    fn announce<'a>(
        &mut self,
        label: &str,
        spec: &'a PairSpec,
        slot: Slot,
        on_event: &mut impl FnMut(BenchEvent<'_>),
    ) -> &'a str {
        self.run_started_s = self.bench_started.elapsed().as_secs_f64();
        let tool = match slot.side {
            Side::Reference => &spec.tool,
            Side::Ours => &spec.workload,
        };
        on_event(BenchEvent::Start {
            pair: label,
            tool,
            round: slot.round,
            warmup: slot.warmup,
        });
        tool
    }

    fn file(
        &mut self,
        slot: Slot,
        position: u32,
        tool: &str,
        mut sample: Sample,
        on_event: &mut impl FnMut(BenchEvent<'_>),
    ) {
        sample.round = slot.round;
        sample.warmup = slot.warmup;
        sample.position = Some(position);
        sample.at_s = Some(self.run_started_s);
        on_event(BenchEvent::Done { tool, sample: &sample });
        match slot.side {
            Side::Reference => self.reference.push(sample),
            Side::Ours => self.ours.push(sample),
        }
    }
}

async fn run_ours(lab: &Lab, opts: &BenchOptions, spec: &PairSpec, round: u32) -> (Sample, String) {
    let mut params = default_params(&spec.workload);
    params.size = spec.size;
    params.iterations = spec.iterations;
    params.num_qps = spec.qps;
    if let Some((tx, cq)) = spec.depth {
        params.tx_depth = tx;
        params.cq_moderation = cq;
    }
    let described = match &spec.provider {
        Some(provider) => {
            params.provider = provider.to_string();
            format!(
                "{} size {} iterations {} provider {provider}",
                spec.workload, params.size, params.iterations
            )
        }
        None => format!(
            "{} size {} iterations {} tx_depth {} cq_moderation {} qps {} (rdma_cm)",
            spec.workload, params.size, params.iterations, params.tx_depth, params.cq_moderation, params.num_qps
        ),
    };
    let run = RunOptions {
        params,
        server: opts.server.clone(),
        client: opts.client.clone(),
        timeout: opts.timeout,
        counters: false,
    };
    let mut sample = Sample {
        round,
        ..Default::default()
    };
    let described = match run_workload(lab, &run, |_| {}).await {
        Ok(r) => {
            fill_ours(&mut sample, spec, &r);
            with_completion_modes(described, &r)
        }
        Err(e) => {
            sample.error = Some(e.to_string());
            described
        }
    };
    (sample, described)
}

/// The command as run, with how each side waited for completions (the
/// default `auto` resolves per side and device; perftest polls on both).
fn with_completion_modes(described: String, r: &RunRecord) -> String {
    let mode = |facts: &std::collections::BTreeMap<String, String>| facts.get("completion").cloned();
    match (mode(&r.client.facts), mode(&r.server.facts)) {
        (Some(client), Some(server)) => format!("{described}, completion: client {client}, server {server}"),
        _ => described,
    }
}

fn fill_ours(sample: &mut Sample, spec: &PairSpec, r: &RunRecord) {
    sample.value = match spec.metric {
        Metric::BwAvgMibS => Some(r.bw_avg_mib_s),
        Metric::MsgRateMpps => Some(r.msg_rate_mpps),
        Metric::LatTypicalUs => Some(r.lat_us.typical),
        Metric::LatAvgUs => Some(r.lat_us.avg),
        // A pair's run has no bus bandwidth (collectives run elsewhere).
        Metric::BusbwGbS => None,
    };
    if spec.metric == Metric::BwAvgMibS {
        sample.peak_mib_s = Some(r.bw_peak_mib_s);
    }
    sample.verified = Some(r.verified);
    sample.run_id = Some(r.id.clone());
    let moved = gib((r.client.bytes.max(r.server.bytes)) as f64);
    if moved > 0.0 {
        let c = r.cpu.client.user_s + r.cpu.client.system_s;
        let s = r.cpu.server.user_s + r.cpu.server.system_s;
        sample.cpu_client_s_per_gib = Some(c / moved);
        sample.cpu_total_s_per_gib = Some((c + s) / moved);
    }
    if !r.verified {
        sample.error = Some(format!(
            "not verified: client: {}; server: {}",
            r.client.verify_detail, r.server.verify_detail
        ));
    }
}

/// Runs the suite and saves its record under the lab's results directory.
pub async fn run_bench(
    lab: &Lab,
    opts: &BenchOptions,
    mut on_event: impl FnMut(BenchEvent<'_>),
) -> Result<BenchRecord, BenchError> {
    if opts.suite == Suite::Collectives {
        return Err(BenchError::Setup(
            "the collectives suite runs through bench::collectives::run_collectives_bench".into(),
        ));
    }
    // What to run first: a workload that cannot sweep is refused before any node is asked.
    let specs = if opts.suite == Suite::Sweep {
        let workloads = if opts.only.is_empty() {
            DEFAULT_SWEEP_WORKLOADS.map(String::from).to_vec()
        } else {
            opts.only.clone()
        };
        sweep_pairs(&workloads, &opts.sweep_sizes)?
    } else {
        suite(opts.suite)
            .into_iter()
            .filter(|s| opts.only.is_empty() || opts.only.contains(&s.workload))
            .collect()
    };
    // A lab that expects a libfabric provider gets its fabric pair on it
    // (fi_pingpong too), not on the tcp;ofi_rxm every lab has.
    let expected_provider = opts.expect.as_ref().unwrap_or(&lab.spec.expect).fi_provider.clone();
    let specs: Vec<PairSpec> = specs
        .into_iter()
        .map(|spec| match (&spec.provider, &expected_provider) {
            (Some(_), Some(expected)) => PairSpec {
                provider: Some(expected.clone()),
                ..spec
            },
            _ => spec,
        })
        .collect();
    let state = lab.state()?;
    let started_at = now_rfc3339();
    let started = Instant::now();
    let (paths, client_uptime_s) = futures::join!(
        async {
            futures::try_join!(
                node_data_path(lab, &state, &opts.server),
                node_data_path(lab, &state, &opts.client)
            )
        },
        uptime_s(lab, &opts.client)
    );
    let (server_dev, client_dev) = paths?;
    let mut version = Vec::new();
    let _ = lab
        .exec(
            &opts.client,
            &RemoteCommand::script("ib_write_bw --version 2>&1"),
            |_, d| version.extend_from_slice(d),
        )
        .await;
    let perftest_version = String::from_utf8_lossy(&version)
        .lines()
        .find_map(|l| l.strip_prefix("Version:").map(|v| v.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let devs = [server_dev, client_dev];
    let mut agent_rss = idle_rss(lab, &state, opts, "before the runs").await?;
    let mut pairs = Vec::new();
    let mut port = first_port();
    for spec in specs {
        let mut spec = spec;
        if let Some(n) = opts.iterations {
            // `-n` is the one-QP count; a scaling point spreads it over its QPs.
            spec.iterations = (n / u64::from(spec.qps.max(1))).max(1);
        }
        let mut rounds = PairRounds::new(started);
        let mut ours_cmd = String::new();
        let label = spec.label();
        for (position, slot) in (0u32..).zip(schedule(opts.warmup, opts.rounds.max(1))) {
            let tool = rounds.announce(&label, &spec, slot, &mut on_event);
            let sample = match slot.side {
                Side::Reference => run_reference(lab, opts, &spec, &devs, &mut port, slot.round).await,
                Side::Ours => {
                    let (sample, described) = run_ours(lab, opts, &spec, slot.round).await;
                    ours_cmd = described;
                    sample
                }
            };
            rounds.file(slot, position, tool, sample, &mut on_event);
        }
        let reference = SideStats::of(&spec.tool, reference_command(&spec, &devs), rounds.reference);
        let ours = SideStats::of(&spec.workload, ours_cmd, rounds.ours);
        pairs.push(PairRecord::new(spec, reference, ours));
    }
    agent_rss.extend(idle_rss(lab, &state, opts, "after the runs").await?);
    let expectations = measure_expectations(lab, opts, &opts.server, &opts.client, &mut on_event).await;
    let mut record = BenchRecord {
        schema: BENCH_SCHEMA,
        id: format!("{:016x}", rand::random::<u64>()),
        lab: lab.spec.name.clone(),
        suite: opts.suite,
        rounds: opts.rounds.max(1),
        warmup_rounds: opts.warmup,
        order: "abba".into(),
        server: opts.server.clone(),
        client: opts.client.clone(),
        perftest_version,
        perftest_device: [
            (devs[0].device.clone(), devs[0].gid_index),
            (devs[1].device.clone(), devs[1].gid_index),
        ],
        started_at,
        client_uptime_s,
        duration_s: started.elapsed().as_secs_f64(),
        failures: Failures::of(&pairs),
        pairs,
        agent_rss,
        orchestration: None,
        collectives: None,
        saved_to: None,
        expectations,
    };
    record.saved_to = Some(save(lab, &record)?.display().to_string());
    Ok(record)
}

/// `node`'s time since boot, from its `/proc/uptime`; None if it did not say.
async fn uptime_s(lab: &Lab, node: &str) -> Option<f64> {
    let mut out = Vec::new();
    lab.exec(node, &RemoteCommand::script("cat /proc/uptime"), |_, d| {
        out.extend_from_slice(d)
    })
    .await
    .ok()?;
    String::from_utf8_lossy(&out).split_whitespace().next()?.parse().ok()
}

/// The figures of the lab's `expect:` (or `--expect`'s), each by a run of
/// its own after the suite's, pairs between `server` and `client`.
async fn measure_expectations(
    lab: &Lab,
    opts: &BenchOptions,
    server: &str,
    client: &str,
    on_event: &mut impl FnMut(BenchEvent<'_>),
) -> Vec<lab_results::expect::ExpectOutcome> {
    let expect = opts.expect.as_ref().unwrap_or(&lab.spec.expect);
    if expect.workloads.is_empty() {
        return Vec::new();
    }
    on_event(BenchEvent::Step {
        what: "the lab's expectations",
    });
    let at = crate::expect::Placement {
        server: server.to_string(),
        client: client.to_string(),
        timeout: opts.timeout,
    };
    crate::expect::measure_workloads(lab, expect, &at, |outcome| on_event(BenchEvent::Expect { outcome })).await
}

/// Saves `record` among the lab's results as `<time>-bench-<suite>-<id>.json`.
fn save(lab: &Lab, record: &BenchRecord) -> Result<PathBuf, BenchError> {
    let suite = record.suite.label();
    let json = serde_json::to_vec_pretty(record).expect("record serialises");
    lab.dir
        .save_result(&record.started_at, &format!("bench-{suite}-{}", record.id), &json)
        .map_err(|e| BenchError::Save(e.to_string()))
}

#[cfg(test)]
mod tests;
