//! `labctl bench`: our workloads against perftest on the same two nodes.
//!
//! Each pair runs a reference tool (`ib_write_bw`, ...) and the matching
//! workload of ours (`write-bw`, ...) with the same message size, iteration
//! count, TX depth and CQ moderation over the same link, alternating
//! reference, ours, reference, ours ... for `rounds` rounds so that drift in
//! a noisy machine lands on both. Per pair it reports min, median and max of
//! the headline metric of each side, the ratio of the medians (ours /
//! reference) and CPU seconds per GiB moved.
//!
//! perftest runs through [`Lab::exec`]: the server side first (its exec is
//! one future of a join), the client once the server says it waits for a
//! connection; both under `timeout` on the node and with `-F` (no CPU
//! frequency check). perftest's "MB/sec" is MiB/s (2^20 bytes, checked from
//! its message rate), the same unit as our `bw_avg_mib_s`.
//!
//! The libfabric pair runs `fi_pingpong` (libfabric-bin: untagged
//! `fi_send`/`fi_recv` ping-pong on an RDM endpoint) against `fabric-lat`,
//! which does the same, on the same provider (`tcp;ofi_rxm` on the data NIC,
//! the provider every lab has). `fi_pingpong`'s only latency figure is
//! "usec/xfer", the mean half round trip, so the pair compares means
//! ([`Metric::LatAvgUs`]). libfabric-bin 1.17 has no RMA bandwidth tool, so
//! `fabric-bw` has no reference pair.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use agent_proto::data_path::{self, LinkLayer};
use agent_proto::v1::NodeInfoRequest;
use lab_results::bench::{
    judge, AgentRss, BenchRecord, Metric, PairRecord, PairSpec, PerftestResult, Sample, SideStats, Stats, Suite,
    AGENT_RSS_TARGET_BYTES, BENCH_SCHEMA,
};
use lab_results::run::RunRecord;

use crate::lab::{Lab, LabError};
use crate::run::{default_params, run_workload, RunError, RunOptions};
use lab_remote::command::RemoteCommand;
use lab_state::text::last_lines;
use lab_state::{now_rfc3339, LabState};

pub mod orchestration;
mod parse;

pub use parse::{parse_fi_pingpong, parse_perftest, parse_perftest_server};

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
        iterations: 200,
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
        pairs.extend(sizes.iter().map(|&size| PairSpec {
            size,
            sweep_point: true,
            target: None,
            ..base.clone()
        }));
    }
    Ok(pairs)
}

/// What to run, where.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The suite.
    pub suite: Suite,
    /// Rounds of (reference, ours) per pair.
    pub rounds: u32,
    /// The passive node.
    pub server: String,
    /// The active node.
    pub client: String,
    /// Overrides every pair's iteration count.
    pub iterations: Option<u64>,
    /// Per-run timeout.
    pub timeout: Duration,
    /// Only these workloads (empty: the whole suite; a sweep's default pair).
    pub only: Vec<String>,
    /// `Suite::Sweep`: the message sizes.
    pub sweep_sizes: Vec<u64>,
}

/// How a sample's error begins when perftest refused to report because
/// its clock sampling was disturbed.
const PERFTEST_CLOCK_REFUSED: &str = "perftest refused to report: its clock sampling was disturbed";

/// The line in which perftest says its cycles-per-microsecond sampling
/// was not linear enough to trust (get_clock.c, sample_get_cpu_mhz: "r^2 <
/// 0.9"), after which it prints no report. A vCPU descheduled while it
/// samples does that on a busy host; the measurement itself is not at
/// fault, so the sample is run again once.
pub fn perftest_clock_refusal(output: &str) -> Option<&str> {
    output
        .lines()
        .map(str::trim)
        .find(|line| line.starts_with("Correlation coefficient r^2") && line.ends_with("< 0.9"))
}

/// Errors of a bench as a whole (single samples fail into the record).
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The lab is not usable.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// Facts about the nodes could not be read.
    #[error("{0}")]
    Setup(String),
    /// The record could not be saved.
    #[error("saving the bench: {0}")]
    Save(String),
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
        /// The round.
        round: u32,
    },
    /// A run ended.
    Done {
        /// The tool.
        tool: &'a str,
        /// Its sample.
        sample: &'a Sample,
    },
}

/// Where a node's data address lives, as its agent reports it.
#[derive(Debug, Clone)]
struct DataPath {
    /// The RDMA device (`-d`).
    device: String,
    /// Its port that holds the address (`-i`).
    ib_port: u32,
    /// The source GID index (the RoCE v2 GID of the address; 0 on InfiniBand).
    gid_index: u32,
    /// `-x`: the GID index on Ethernet; None on InfiniBand, where perftest
    /// addresses the peer by its LID.
    perftest_gid: Option<u32>,
    /// The data address.
    addr: Ipv4Addr,
    /// The network interface under the device (the IPoIB one on InfiniBand).
    netdev: String,
}

/// The data path of `node` (address `addr`, recorded device `device`) in its
/// agent's NodeInfo devices: the lookup the agent makes for its sessions.
fn data_path_of(
    node: &str,
    devices: &[agent_proto::v1::RdmaDevice],
    addr: Ipv4Addr,
    device: Option<&str>,
) -> Result<DataPath, BenchError> {
    let found = data_path::find(devices, addr, device).ok_or_else(|| {
        BenchError::Setup(format!(
            "node `{node}`: no RDMA device{} has {}",
            device.map(|d| format!(" named {d}")).unwrap_or_default(),
            data_path::wanted(addr)
        ))
    })?;
    Ok(DataPath {
        perftest_gid: (found.link_layer == LinkLayer::Ethernet).then_some(found.gid_index),
        device: found.device,
        ib_port: found.port,
        gid_index: found.gid_index,
        addr,
        netdev: found.netdev,
    })
}

/// The RDMA device, port and GID index that carry `node`'s data address (a
/// RoCE v2 GID, or an InfiniBand port's IPoIB address), and the interface
/// under that device (`fi_pingpong -d`: tcp's domains are interfaces).
async fn node_data_path(lab: &Lab, state: &LabState, node: &str) -> Result<DataPath, BenchError> {
    let ns = lab.node_state(state, node)?.clone();
    let session = Arc::new(lab.connect(state, node).await?);
    let mut client = lab.agent(session.clone(), &ns).await?;
    let info = lab_remote::agent::call(
        node,
        "NodeInfo",
        lab_remote::agent::deadline::NODE_INFO,
        client.node_info(NodeInfoRequest {}),
    )
    .await
    .map_err(|e| BenchError::Setup(e.to_string()))?;
    session.close().await;
    data_path_of(node, &info.devices, ns.data_addr, ns.rdma_device.as_deref())
}

/// The perftest command line on one side (`peer` only on the client).
/// perftest's command line for one side; `port: None` leaves `-p` out (the
/// command as recorded, without the round's port).
fn perftest_command(
    spec: &PairSpec,
    device: &str,
    ib_port: u32,
    gid: Option<u32>,
    port: Option<u16>,
    peer: Option<Ipv4Addr>,
) -> RemoteCommand {
    let mut cmd = RemoteCommand::new(&spec.tool).args(["-d", device]);
    // perftest's default port is 1; a device whose data port is another says so.
    if ib_port != 1 {
        cmd = cmd.arg("-i").arg(ib_port.to_string());
    }
    // RoCE needs the GID index; on InfiniBand perftest uses the port's LID.
    if let Some(gid) = gid {
        cmd = cmd.arg("-x").arg(gid.to_string());
    }
    if let Some(port) = port {
        cmd = cmd.arg("-p").arg(port.to_string());
    }
    cmd = cmd.arg("-n").arg(spec.iterations.to_string()).arg("-F");
    if spec.metric != Metric::MsgRateMpps {
        cmd = cmd.arg("-s").arg(spec.size.to_string());
    }
    if let Some((tx, cq)) = spec.depth {
        cmd = cmd.arg("-t").arg(tx.to_string()).arg("-Q").arg(cq.to_string());
    }
    if spec.qps > 1 {
        cmd = cmd.arg("-q").arg(spec.qps.to_string());
    }
    if let Some(peer) = peer {
        cmd = cmd.arg(peer.to_string());
    }
    cmd
}

/// perftest's average bandwidth. It prints MB/sec with two decimals, so
/// below 1 MiB/s (small messages on an emulated lab) the figure keeps one
/// significant digit or none (`0.00` at 2 B); there the message rate,
/// printed with six decimals and computed from the same run, gives it:
/// Mpps x 10^6 x bytes / 2^20.
fn perftest_average_mib_s(c: &PerftestResult) -> Option<f64> {
    match (c.bw_avg_mib_s, c.msg_rate_mpps) {
        (Some(bw), Some(mpps)) if bw < 1.0 && mpps > 0.0 => Some(mpps * 1e6 * c.bytes as f64 / f64::from(1 << 20)),
        (bw, _) => bw,
    }
}

/// Runs a plain command under `timeout` with line-buffered stdout and the
/// shell's CPU `times` appended, keeping the command's exit status.
fn wrapped(cmd: &RemoteCommand, timeout_s: u64) -> RemoteCommand {
    let argv = cmd.argv().expect("a plain command");
    RemoteCommand::script_with(
        "t=$1; shift; timeout \"$t\" stdbuf -oL \"$@\" 2>&1; rc=$?; times; exit $rc",
        std::iter::once(timeout_s.to_string()).chain(argv.iter().cloned()),
    )
}

fn gib(bytes: f64) -> f64 {
    bytes / (1u64 << 30) as f64
}

async fn run_perftest(
    lab: &Lab,
    opts: &BenchOptions,
    spec: &PairSpec,
    dev: &[DataPath; 2],
    port: u16,
    round: u32,
) -> Sample {
    if spec.provider.is_some() {
        return run_fi_pingpong(lab, opts, spec, dev, port, round).await;
    }
    let mut sample = Sample {
        round,
        ..Default::default()
    };
    let timeout_s = opts.timeout.as_secs().max(10);
    let server_cmd = wrapped(
        &perftest_command(
            spec,
            &dev[0].device,
            dev[0].ib_port,
            dev[0].perftest_gid,
            Some(port),
            None,
        ),
        timeout_s,
    );
    let client_cmd = wrapped(
        &perftest_command(
            spec,
            &dev[1].device,
            dev[1].ib_port,
            dev[1].perftest_gid,
            Some(port),
            Some(dev[0].addr),
        ),
        timeout_s,
    );
    let ready = tokio::sync::Notify::new();
    let (mut server_out, mut client_out) = (Vec::new(), Vec::new());
    let server = lab.exec(&opts.server, &server_cmd, |_, data| {
        server_out.extend_from_slice(data);
        if String::from_utf8_lossy(&server_out).contains("Waiting for client") {
            ready.notify_one();
        }
    });
    let client = async {
        // perftest's server says when it listens; do not wait forever for the line.
        let _ = tokio::time::timeout(Duration::from_secs(20), ready.notified()).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        lab.exec(&opts.client, &client_cmd, |_, data| client_out.extend_from_slice(data))
            .await
    };
    let (server_rc, client_rc) = tokio::join!(server, client);
    let server_text = String::from_utf8_lossy(&server_out).into_owned();
    let client_text = String::from_utf8_lossy(&client_out).into_owned();
    if let Some(line) = perftest_clock_refusal(&client_text).or_else(|| perftest_clock_refusal(&server_text)) {
        sample.error = Some(format!("{PERFTEST_CLOCK_REFUSED}: `{line}`"));
        return sample;
    }
    let failed = |who: &str, rc: Result<i32, LabError>, text: &str| match rc {
        Ok(0) => None,
        Ok(code) => Some(format!("{who} exited {code}:\n{}", last_lines(text, 8))),
        Err(e) => Some(format!("{who}: {e}")),
    };
    if let Some(e) = failed("perftest client", client_rc, &client_text)
        .or_else(|| failed("perftest server", server_rc, &server_text))
    {
        sample.error = Some(e);
        return sample;
    }
    let (c, s) = match (parse_perftest(&client_text), parse_perftest_server(&server_text)) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(e), _) | (_, Err(e)) => {
            sample.error = Some(e);
            return sample;
        }
    };
    sample.value = match spec.metric {
        Metric::BwAvgMibS => perftest_average_mib_s(&c),
        Metric::MsgRateMpps => c.msg_rate_mpps,
        Metric::LatTypicalUs => c.lat_typical_us,
        Metric::LatAvgUs => c.lat_avg_us,
    };
    sample.peak_mib_s = c.bw_peak_mib_s;
    let moved = gib((c.bytes * c.iterations) as f64);
    let cpu = |r: &PerftestResult| Some(r.cpu_user_s? + r.cpu_system_s?);
    if moved > 0.0 {
        sample.cpu_client_s_per_gib = cpu(&c).map(|x| x / moved);
        sample.cpu_total_s_per_gib = cpu(&c).zip(cpu(&s)).map(|(a, b)| (a + b) / moved);
    }
    sample.perftest = Some([c, s]);
    sample
}

/// The `fi_pingpong` command line on one side (`peer` only on the client):
/// RDM endpoint, untagged messages, the data interface as tcp's domain.
/// `fi_pingpong`'s command line for one side: the server binds `-B port`,
/// the client names the server's `-P port` and address. `port: None` leaves
/// the port out (the command as recorded).
fn fi_pingpong_command(
    spec: &PairSpec,
    provider: &str,
    netdev: &str,
    port: Option<u16>,
    peer: Option<Ipv4Addr>,
) -> RemoteCommand {
    let mut cmd = RemoteCommand::new("fi_pingpong")
        .args(["-p", provider, "-e", "rdm", "-m", "msg", "-d", netdev])
        .args(["-I", &spec.iterations.to_string(), "-S", &spec.size.to_string()]);
    let port_flag = if peer.is_some() { "-P" } else { "-B" };
    if let Some(port) = port {
        cmd = cmd.arg(port_flag).arg(port.to_string());
    }
    if let Some(peer) = peer {
        cmd = cmd.arg(peer.to_string());
    }
    cmd
}

/// One round of `fi_pingpong`: the server, then the client once the server's
/// control port listens (`ss` on the server node; fi_pingpong prints nothing
/// before its result without -v, and -v logs every byte).
async fn run_fi_pingpong(
    lab: &Lab,
    opts: &BenchOptions,
    spec: &PairSpec,
    dev: &[DataPath; 2],
    port: u16,
    round: u32,
) -> Sample {
    let mut sample = Sample {
        round,
        ..Default::default()
    };
    let provider = spec.provider.as_deref().unwrap_or("tcp;ofi_rxm");
    let timeout_s = opts.timeout.as_secs().max(10);
    let server_cmd = wrapped(
        &fi_pingpong_command(spec, provider, &dev[0].netdev, Some(port), None),
        timeout_s,
    );
    let client_cmd = wrapped(
        &fi_pingpong_command(spec, provider, &dev[1].netdev, Some(port), Some(dev[0].addr)),
        timeout_s,
    );
    let listening = RemoteCommand::script_with(
        "for i in $(seq 100); do ss -Hltn \"sport = :$1\" | grep -q . && exit 0; sleep 0.2; done; exit 1",
        [port.to_string()],
    );
    let (mut server_out, mut client_out) = (Vec::new(), Vec::new());
    let server = lab.exec(&opts.server, &server_cmd, |_, data| server_out.extend_from_slice(data));
    let client = async {
        match lab.exec(&opts.server, &listening, |_, _| {}).await {
            Ok(0) => {}
            Ok(_) => return Err(format!("fi_pingpong server: port {port} not listening after 20 s")),
            Err(e) => return Err(format!("fi_pingpong server: {e}")),
        }
        lab.exec(&opts.client, &client_cmd, |_, data| client_out.extend_from_slice(data))
            .await
            .map_err(|e| format!("fi_pingpong client: {e}"))
    };
    let (server_rc, client_rc) = tokio::join!(server, client);
    let server_text = String::from_utf8_lossy(&server_out).into_owned();
    let client_text = String::from_utf8_lossy(&client_out).into_owned();
    let outcome = match (client_rc, server_rc) {
        (Err(e), _) => Err(e),
        (Ok(0), Ok(0)) => Ok(()),
        (Ok(code), _) if code != 0 => Err(format!(
            "fi_pingpong client exited {code}:\n{}",
            last_lines(&client_text, 8)
        )),
        (_, Ok(code)) => Err(format!(
            "fi_pingpong server exited {code}:\n{}",
            last_lines(&server_text, 8)
        )),
        (_, Err(e)) => Err(format!("fi_pingpong server: {e}")),
    };
    if let Err(e) = outcome {
        sample.error = Some(e);
        return sample;
    }
    let (c, s) = match (parse_fi_pingpong(&client_text), parse_fi_pingpong(&server_text)) {
        (Ok(c), Ok(s)) => (c, s),
        (Err(e), _) | (_, Err(e)) => {
            sample.error = Some(e);
            return sample;
        }
    };
    sample.value = c.lat_avg_us;
    // Both directions: iterations × size each way.
    let moved = gib((2 * c.bytes * c.iterations) as f64);
    let cpu = |r: &PerftestResult| Some(r.cpu_user_s? + r.cpu_system_s?);
    if moved > 0.0 {
        sample.cpu_client_s_per_gib = cpu(&c).map(|x| x / moved);
        sample.cpu_total_s_per_gib = cpu(&c).zip(cpu(&s)).map(|(a, b)| (a + b) / moved);
    }
    sample.perftest = Some([c, s]);
    sample
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
    sample.value = Some(match spec.metric {
        Metric::BwAvgMibS => r.bw_avg_mib_s,
        Metric::MsgRateMpps => r.msg_rate_mpps,
        Metric::LatTypicalUs => r.lat_us.typical,
        Metric::LatAvgUs => r.lat_us.avg,
    });
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

fn side_stats(tool: &str, command: String, samples: Vec<Sample>) -> SideStats {
    SideStats {
        tool: tool.to_string(),
        command,
        stats: Stats::of(samples.iter().map(|s| s.value)),
        cpu_client_s_per_gib: Stats::of(samples.iter().map(|s| s.cpu_client_s_per_gib)),
        cpu_total_s_per_gib: Stats::of(samples.iter().map(|s| s.cpu_total_s_per_gib)),
        samples,
    }
}

/// Runs the suite and saves its record under the lab's results directory.
pub async fn run_bench(
    lab: &Lab,
    opts: &BenchOptions,
    mut on_event: impl FnMut(BenchEvent<'_>),
) -> Result<BenchRecord, BenchError> {
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
    let state = lab.state()?;
    let started_at = now_rfc3339();
    let started = Instant::now();
    let (server_dev, client_dev) = futures::try_join!(
        node_data_path(lab, &state, &opts.server),
        node_data_path(lab, &state, &opts.client)
    )?;
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
    // A fresh TCP port per perftest run: a server left over by a failed
    // run (it exits on its own `timeout`) cannot take the next one's port.
    let mut port: u16 = 18515 + (rand::random::<u16>() % 200) * 16;
    for spec in specs {
        let mut spec = spec;
        if let Some(n) = opts.iterations {
            // `-n` is the one-QP count; a scaling point spreads it over its QPs.
            spec.iterations = (n / u64::from(spec.qps.max(1))).max(1);
        }
        let (mut reference, mut ours) = (Vec::new(), Vec::new());
        let mut ours_cmd = String::new();
        let label = spec.label();
        for round in 0..opts.rounds.max(1) {
            on_event(BenchEvent::Start {
                pair: &label,
                tool: &spec.tool,
                round,
            });
            port = port.wrapping_add(1).max(18515);
            let mut s = run_perftest(lab, opts, &spec, &devs, port, round).await;
            if let Some(first) = s.error.take_if(|e| e.starts_with(PERFTEST_CLOCK_REFUSED)) {
                port = port.wrapping_add(1).max(18515);
                s = run_perftest(lab, opts, &spec, &devs, port, round).await;
                s.rerun = Some(format!("the first run failed: {first}"));
            }
            on_event(BenchEvent::Done {
                tool: &spec.tool,
                sample: &s,
            });
            reference.push(s);
            on_event(BenchEvent::Start {
                pair: &label,
                tool: &spec.workload,
                round,
            });
            let (s, described) = run_ours(lab, opts, &spec, round).await;
            ours_cmd = described;
            on_event(BenchEvent::Done {
                tool: &spec.workload,
                sample: &s,
            });
            ours.push(s);
        }
        let ref_cmd = match &spec.provider {
            Some(provider) => {
                fi_pingpong_command(&spec, provider, &devs[1].netdev, None, Some(devs[0].addr)).to_string()
            }
            None => perftest_command(
                &spec,
                &devs[1].device,
                devs[1].ib_port,
                devs[1].perftest_gid,
                None,
                Some(devs[0].addr),
            )
            .to_string(),
        };
        let reference = side_stats(&spec.tool, ref_cmd, reference);
        let ours = side_stats(&spec.workload, ours_cmd, ours);
        let (ratio, meets_target) = judge(&spec, &reference.stats, &ours.stats);
        let cpu_ratio = match (ours.cpu_total_s_per_gib.median, reference.cpu_total_s_per_gib.median) {
            (Some(o), Some(r)) if r > 0.0 => Some(o / r),
            _ => None,
        };
        pairs.push(PairRecord {
            unit: spec.metric.unit().to_string(),
            better: if spec.metric.higher_is_better() {
                "higher"
            } else {
                "lower"
            }
            .to_string(),
            spec,
            reference,
            ours,
            ratio,
            meets_target,
            cpu_ratio,
        });
    }
    agent_rss.extend(idle_rss(lab, &state, opts, "after the runs").await?);
    let mut record = BenchRecord {
        schema: BENCH_SCHEMA,
        id: format!("{:016x}", rand::random::<u64>()),
        lab: lab.spec.name.clone(),
        suite: opts.suite,
        rounds: opts.rounds.max(1),
        server: opts.server.clone(),
        client: opts.client.clone(),
        perftest_version,
        perftest_device: [
            (devs[0].device.clone(), devs[0].gid_index),
            (devs[1].device.clone(), devs[1].gid_index),
        ],
        started_at,
        duration_s: started.elapsed().as_secs_f64(),
        pairs,
        agent_rss,
        orchestration: None,
        saved_to: None,
    };
    record.saved_to = Some(save(lab, &record)?.display().to_string());
    Ok(record)
}

/// Saves `record` among the lab's results as `<time>-bench-<suite>-<id>.json`.
fn save(lab: &Lab, record: &BenchRecord) -> Result<PathBuf, BenchError> {
    let suite = match record.suite {
        Suite::Quick => "quick",
        Suite::Full => "full",
        Suite::Orchestration => "orchestration",
        Suite::Sweep => "sweep",
    };
    let json = serde_json::to_vec_pretty(record).expect("record serialises");
    lab.dir
        .save_result(&record.started_at, &format!("bench-{suite}-{}", record.id), &json)
        .map_err(|e| BenchError::Save(e.to_string()))
}

impl From<RunError> for BenchError {
    fn from(e: RunError) -> Self {
        BenchError::Setup(e.to_string())
    }
}

#[cfg(test)]
mod tests;
