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

use agent_proto::v1::{
    run_event, AbortRequest, CmMode, CollectRequest, CompletionMode, ConnectRequest, NodeInfoReply, NodeInfoRequest,
    PrepareRequest, Progress, Role, RunRequest, SideResult, WorkloadParams,
};
use serde::{Deserialize, Serialize};

use crate::agent::{self, AgentError, Client};
use crate::impair::{self, Counters};
use crate::lab::{rdma_ports, Lab, LabError, RdmaDeviceStatus};
use crate::ssh::SshSession;
use crate::state::{now_rfc3339, NodeState};

/// Version of the run record (`--json` and saved results).
pub const RUN_SCHEMA: u32 = 1;

/// Workloads the agents implement, for help texts and early errors.
pub const WORKLOADS: &[&str] = &[
    "write-read",
    "write-imm",
    "send-recv",
    "read",
    "atomic",
    "write-bw",
    "read-bw",
    "send-bw",
    "atomic-bw",
    "write-lat",
    "read-lat",
    "send-lat",
    "atomic-lat",
    "fabric-write",
    "fabric-bw",
    "fabric-lat",
    "mr-cache",
    "param-server",
    "inference-ring",
    "bulk-rdma",
    "bulk-tcp",
];

/// Whether a workload runs over libfabric (`fabric-*`: no QP, no rdma_cm; the
/// server's fabric address is relayed from Prepare to Run).
pub fn is_fabric(workload: &str) -> bool {
    workload.starts_with("fabric-")
}

/// The libfabric provider that goes with a lab's fabric when `--provider` is
/// not given: rxe → `verbs;ofi_rxd` (the verbs RDM provider that works over
/// rxe with libfabric's defaults; `verbs;ofi_rxm` works there too because the
/// agent bounds `FI_UNIVERSE_SIZE` on soft RoCE), none → `tcp;ofi_rxm`,
/// efa → `efa`.
pub fn default_provider(fabric: crate::model::Fabric) -> &'static str {
    match fabric {
        crate::model::Fabric::Rxe => "verbs;ofi_rxd",
        crate::model::Fabric::None => "tcp;ofi_rxm",
        crate::model::Fabric::Efa => "efa",
    }
}

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The lab is not usable.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// An agent refused or failed.
    #[error("node `{node}` ({role}): {:?}: {}{hint}", status.code(), status.message())]
    Agent {
        /// The node.
        node: String,
        /// server or client.
        role: &'static str,
        /// What the agent said.
        status: Box<tonic::Status>,
        /// What it means for the lab, where the controller can tell (starts
        /// with a newline; empty otherwise).
        hint: String,
    },
    /// The run did not finish in time.
    #[error("node `{node}` ({role}): no result within {waited_s} s; the run was aborted")]
    Timeout {
        /// The node that did not answer.
        node: String,
        /// server or client.
        role: &'static str,
        /// Seconds waited.
        waited_s: u64,
    },
    /// The workload name is not known.
    #[error("unknown workload `{name}`; supported: {}", WORKLOADS.join(", "))]
    UnknownWorkload {
        /// The name asked for.
        name: String,
    },
    /// The result could not be saved.
    #[error("saving the run: {0}")]
    Save(String),
}

impl From<AgentError> for RunError {
    fn from(e: AgentError) -> Self {
        RunError::Lab(LabError::Agent(e))
    }
}

/// The parameters a workload runs with when the command line says nothing.
/// Sized for emulated labs (a few MB/s): seconds, not minutes.
///
/// The verbs bandwidth workloads wait for completions on a completion channel
/// by default: their client only waits when its send queue is full, and then
/// sleeping gives the CPU to the RNIC's work (on rxe, the kernel's), where a
/// busy poll competes with it. Measured on the lab: write-bw ~1.5x ib_write_bw,
/// which busy-polls and cannot do otherwise (perftest refuses `-e` for WRITE).
/// Latency loops keep polling: there, a sleep would be the latency.
pub fn default_params(workload: &str) -> WorkloadParams {
    let (size, iterations) = match workload {
        "write-read" | "read" | "send-recv" | "write-imm" => (4096, 16),
        "atomic" => (8, 64),
        "atomic-bw" => (8, 500),
        "write-bw" | "read-bw" | "send-bw" | "fabric-bw" => (65536, 200),
        // 64 pages of 64 KiB scattered over the client's two 16 MiB MRs: 4 MiB,
        // under a second at the emulated lab's ~7 MB/s.
        "fabric-write" => (65536, 64),
        w if w.ends_with("-lat") => (2, 200),
        // 40 uses of 4..32 KiB, twice (uncached, cached): about 1.2 MiB.
        "mr-cache" => (4096, 40),
        // 8 rounds of 2 workers x 4 KiB pushed and pulled.
        "param-server" => (4096, 8),
        // 64 batches of 4 KiB through an 8-slot ring (tx_depth below).
        "inference-ring" => (4096, 64),
        // 4 MiB in 256 KiB chunks (`total` below): under a second on the emulated lab.
        "bulk-rdma" | "bulk-tcp" => (BULK_DEFAULT_CHUNK, BULK_DEFAULT_TOTAL / BULK_DEFAULT_CHUNK),
        _ => (4096, 16),
    };
    let bandwidth = matches!(workload, "write-bw" | "read-bw" | "send-bw" | "atomic-bw" | "bulk-rdma");
    WorkloadParams {
        workload: workload.to_string(),
        completion: if bandwidth {
            CompletionMode::Event as i32
        } else {
            CompletionMode::Poll as i32
        },
        size,
        iterations,
        tx_depth: if workload == "inference-ring" { 8 } else { 0 },
        cq_moderation: 0,
        post_list: 0,
        inline_size: 0,
        num_qps: if workload == "param-server" { 2 } else { 1 },
        ib_port: 1,
        gid_index: -1,
        seed: 1,
        batches: if workload == "write-imm" { 8 } else { 0 },
        total: if workload.starts_with("bulk-") {
            BULK_DEFAULT_TOTAL
        } else {
            0
        },
        ..Default::default()
    }
}

/// Bytes a bulk transfer moves unless told otherwise.
pub const BULK_DEFAULT_TOTAL: u64 = 4 << 20;
/// Chunk of a bulk transfer unless told otherwise.
pub const BULK_DEFAULT_CHUNK: u64 = 256 << 10;

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

/// A run's parameters as saved (the proto message, readable).
#[derive(Debug, Clone, Serialize, Default, Deserialize)]
#[serde(default)]
pub struct ParamsRecord {
    /// Message size, bytes.
    pub size: u64,
    /// Operations (0: duration-based).
    pub iterations: u64,
    /// Seconds when duration-based.
    pub duration_s: f64,
    /// Size sweep.
    pub all_sizes: bool,
    /// Sweep's largest size.
    pub max_size: u64,
    /// Outstanding WRs per QP (0: agent default).
    pub tx_depth: u32,
    /// Signal one completion per this many WRs (0: agent default).
    pub cq_moderation: u32,
    /// WRs per post (0: agent default).
    pub post_list: u32,
    /// Inline threshold, bytes.
    pub inline_size: u32,
    /// QPs.
    pub num_qps: u32,
    /// `rdma_cm` or `oob`.
    pub cm: String,
    /// `poll` or `event`.
    pub completion: String,
    /// Payload seed.
    pub seed: u64,
    /// send-recv ping-pong.
    pub ping_pong: bool,
    /// write-imm batches.
    pub batches: u32,
    /// Negative test: a corrupted rkey.
    pub corrupt_rkey: bool,
    /// Negative test: the capability the client used instead of the server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub capability_override: Option<String>,
    /// fabric-* workloads: the libfabric provider (null for the verbs workloads).
    pub provider: Option<String>,
    /// bulk-* workloads: bytes moved in `size`-byte chunks (absent elsewhere).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
}

impl ParamsRecord {
    pub(crate) fn from(p: &WorkloadParams) -> ParamsRecord {
        ParamsRecord {
            size: p.size,
            iterations: p.iterations,
            duration_s: p.duration_s,
            all_sizes: p.all_sizes,
            max_size: p.max_size,
            tx_depth: p.tx_depth,
            cq_moderation: p.cq_moderation,
            post_list: p.post_list,
            inline_size: p.inline_size,
            num_qps: p.num_qps,
            cm: if p.cm() == CmMode::Oob { "oob" } else { "rdma_cm" }.to_string(),
            completion: if p.completion() == CompletionMode::Event {
                "event"
            } else {
                "poll"
            }
            .to_string(),
            seed: p.seed,
            ping_pong: p.ping_pong,
            batches: p.batches,
            corrupt_rkey: p.corrupt_rkey,
            capability_override: (!p.capability_override.is_empty()).then(|| p.capability_override.clone()),
            provider: is_fabric(&p.workload).then(|| p.provider.clone()),
            total: (p.total > 0).then_some(p.total),
        }
    }
}

/// Latency figures, µs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyRecord {
    /// Minimum.
    pub min: f64,
    /// Maximum.
    pub max: f64,
    /// Median (perftest's t_typical).
    pub typical: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Samples behind the figures.
    pub samples: u64,
}

/// CPU time of one side.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuRecord {
    /// User seconds.
    pub user_s: f64,
    /// System seconds.
    pub system_s: f64,
    /// (user + system) per GiB moved; null when nothing moved.
    pub per_gib_s: Option<f64>,
}

/// Both sides' CPU.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CpuPair {
    /// The server side.
    pub server: CpuRecord,
    /// The client side.
    pub client: CpuRecord,
}

/// One side's outcome, as saved.
#[derive(Debug, Clone, Serialize, Default, Deserialize)]
#[serde(default)]
pub struct SideRecord {
    /// The node.
    pub node: String,
    /// It checked bytes itself.
    pub checked: bool,
    /// Its verdict, when it checked.
    pub verified: bool,
    /// What it checked, or where the bytes first differed.
    pub verify_detail: String,
    /// Bytes moved.
    pub bytes: u64,
    /// Operations completed.
    pub ops: u64,
    /// Seconds of data movement.
    pub elapsed_s: f64,
    /// Immediates received, in arrival order (write-imm).
    pub immediates: Vec<u32>,
    /// The remote word read back (atomic).
    pub atomic_final: u64,
    /// Device, GID, QPN, MTU, addr, rkey...
    pub facts: std::collections::BTreeMap<String, String>,
    /// bulk-*: bytes moved over time, as this side saw them (absent when empty).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline: Vec<TimelineSample>,
}

/// One point of a transfer's progress.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimelineSample {
    /// Seconds since the side's clock started.
    pub t_s: f64,
    /// Bytes moved so far.
    pub bytes: u64,
}

/// One point of a size sweep.
#[derive(Debug, Clone, Serialize, Default, Deserialize)]
#[serde(default)]
pub struct SweepPoint {
    /// Message size.
    pub size: u64,
    /// Operations at this size.
    pub iterations: u64,
    /// Average bandwidth, MiB/s.
    pub bw_avg_mib_s: f64,
    /// Peak bandwidth, MiB/s.
    pub bw_peak_mib_s: f64,
    /// Message rate, Mpps.
    pub msg_rate_mpps: f64,
    /// Latency, µs.
    pub lat_us: LatencyRecord,
}

/// A node's facts at run time.
#[derive(Debug, Clone, Serialize, Default, Deserialize)]
#[serde(default)]
pub struct NodeRecord {
    /// The node's name in the lab.
    pub name: String,
    /// Its hostname.
    pub hostname: String,
    /// Kernel release.
    pub kernel: String,
    /// rdma-core version.
    pub rdma_core: String,
    /// Agent version.
    pub agent: String,
    /// CPUs.
    pub cpus: u32,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// RDMA ports.
    pub rdma: Vec<RdmaDeviceStatus>,
}

/// Both nodes.
#[derive(Debug, Clone, Serialize, Default, Deserialize)]
#[serde(default)]
pub struct NodePair {
    /// The server.
    pub server: NodeRecord,
    /// The client.
    pub client: NodeRecord,
}

/// Everything about one run: what `--json` prints and what is saved.
#[derive(Debug, Clone, Serialize, Default, Deserialize)]
#[serde(default)]
pub struct RunRecord {
    /// [`RUN_SCHEMA`].
    pub schema: u32,
    /// Unique id of the run.
    pub id: String,
    /// The lab.
    pub lab: String,
    /// The workload.
    pub workload: String,
    /// Its parameters.
    pub params: ParamsRecord,
    /// Every side that checked bytes found them right, and at least one did.
    pub verified: bool,
    /// Peak bandwidth over measurement windows, MiB/s (2^20 bytes).
    pub bw_peak_mib_s: f64,
    /// Average bandwidth, MiB/s.
    pub bw_avg_mib_s: f64,
    /// Average bandwidth, Gb/s (10^9 bits).
    pub bw_avg_gbps: f64,
    /// Messages per second, millions.
    pub msg_rate_mpps: f64,
    /// Latency, µs.
    pub lat_us: LatencyRecord,
    /// CPU time per side.
    pub cpu: CpuPair,
    /// The nodes.
    pub nodes: NodePair,
    /// When the run started, RFC 3339.
    pub started_at: String,
    /// Wall time of the whole run, seconds (setup included).
    pub duration_s: f64,
    /// The server's own outcome.
    pub server: SideRecord,
    /// The client's own outcome.
    pub client: SideRecord,
    /// Size sweep, when asked for.
    pub sweep: Vec<SweepPoint>,
    /// mr-cache: the client's registration cache against none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mr_cache: Option<MrCacheRecord>,
    /// Where the record was saved.
    pub saved_to: Option<String>,
    /// The netem impairment on each node's data NIC during the run (`labctl impair`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub impairment: Option<ImpairmentPair>,
    /// Each node's RDMA hardware counters, what the run added to them; recorded
    /// when a node is impaired or `--counters` is given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub counters: Option<CounterPair>,
}

/// The impairment of each side, as netem arguments (`loss 2%`); absent for
/// an unimpaired side.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct ImpairmentPair {
    /// The server's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The client's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
}

/// What a run added to each side's hardware counters
/// (`/sys/class/infiniband/<dev>/ports/<port>/hw_counters`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct CounterPair {
    /// The server's.
    pub server: Counters,
    /// The client's.
    pub client: Counters,
}

/// mr-cache's accounting (the agent's `MrCacheStats`).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct MrCacheRecord {
    /// The cycle's sizes, bytes.
    pub sizes: Vec<u64>,
    /// Buffer uses per pass.
    pub ops: u64,
    /// Uses served by a kept registration.
    pub hits: u64,
    /// Uses that registered.
    pub misses: u64,
    /// ibv_reg_mr calls with the cache.
    pub registrations: u64,
    /// ibv_reg_mr calls without it (one per use).
    pub uncached_registrations: u64,
    /// µs in ibv_reg_mr with the cache.
    pub cached_reg_us: f64,
    /// µs in ibv_dereg_mr with the cache (its flush).
    pub cached_dereg_us: f64,
    /// µs in ibv_reg_mr without the cache.
    pub uncached_reg_us: f64,
    /// µs in ibv_dereg_mr without the cache.
    pub uncached_dereg_us: f64,
    /// Registration time the cache saved, µs.
    pub saved_us: f64,
    /// The same as a share of the uncached time, percent.
    pub saved_pct: f64,
}

impl MrCacheRecord {
    fn from(s: &agent_proto::v1::MrCacheStats) -> MrCacheRecord {
        MrCacheRecord {
            sizes: s.sizes.clone(),
            ops: s.ops,
            hits: s.hits,
            misses: s.misses,
            registrations: s.registrations,
            uncached_registrations: s.uncached_registrations,
            cached_reg_us: s.cached_reg_us,
            cached_dereg_us: s.cached_dereg_us,
            uncached_reg_us: s.uncached_reg_us,
            uncached_dereg_us: s.uncached_dereg_us,
            saved_us: s.saved_us,
            saved_pct: s.saved_pct,
        }
    }
}

fn latency(l: Option<&agent_proto::v1::Latency>) -> LatencyRecord {
    l.map(|l| LatencyRecord {
        min: l.min_us,
        max: l.max_us,
        typical: l.typical_us,
        avg: l.avg_us,
        stdev: l.stdev_us,
        p99: l.p99_us,
        p999: l.p999_us,
        samples: l.samples,
    })
    .unwrap_or_default()
}

fn cpu(side: &SideResult, bytes: u64) -> CpuRecord {
    let c = side.cpu.unwrap_or_default();
    let gib = bytes as f64 / (1u64 << 30) as f64;
    CpuRecord {
        user_s: c.user_s,
        system_s: c.system_s,
        per_gib_s: (bytes > 0).then(|| (c.user_s + c.system_s) / gib),
    }
}

fn side_record(node: &str, s: &SideResult) -> SideRecord {
    SideRecord {
        node: node.to_string(),
        checked: s.checked,
        verified: s.verified,
        verify_detail: s.verify_detail.clone(),
        bytes: s.bytes,
        ops: s.ops,
        elapsed_s: s.elapsed_s,
        immediates: s.immediates.clone(),
        atomic_final: s.atomic_final,
        facts: s.facts.clone().into_iter().collect(),
        timeline: s
            .timeline
            .iter()
            .map(|p| TimelineSample {
                t_s: p.t_s,
                bytes: p.bytes,
            })
            .collect(),
    }
}

fn node_record(name: &str, info: NodeInfoReply) -> NodeRecord {
    NodeRecord {
        name: name.to_string(),
        rdma: rdma_ports(&info),
        hostname: info.hostname,
        kernel: info.kernel,
        rdma_core: info.rdma_core_version,
        agent: info.agent_version,
        cpus: info.cpus,
        memory_bytes: info.memory_total_bytes,
    }
}

/// A retry-exceeded completion means the peer stopped acknowledging: on a
/// lab that is the data link (cut, lossy, or the peer gone). The agent knows
/// only its QP; the controller knows both ends, so it names the link.
fn explain_link_failure(e: RunError, server: &NodeState, client: &NodeState) -> RunError {
    match e {
        RunError::Agent {
            node,
            role,
            status,
            hint,
        } if hint.is_empty()
            && (status.message().contains("IBV_WC_RETRY_EXC_ERR")
                || status.message().contains("resolve route timed out")) =>
        {
            let what = if status.message().contains("IBV_WC_RETRY_EXC_ERR") {
                "stopped delivering: every retransmission went unacknowledged"
            } else {
                "does not deliver: the peer's address did not resolve (no ARP reply)"
            };
            let end = |n: &NodeState| {
                format!(
                    "`{}` {} ({} on {})",
                    n.name,
                    n.data_addr,
                    n.rdma_device.as_deref().unwrap_or("rdma device"),
                    n.data_netdev.as_deref().unwrap_or("data NIC")
                )
            };
            let hint = format!(
                "\n  the RDMA link {} <-> {} {what}.\n  \
                 check it: labctl exec {} -- ping -c 3 {}  (and `tc qdisc show` for a leftover impairment)",
                end(client),
                end(server),
                client.name,
                server.data_addr
            );
            RunError::Agent {
                node,
                role,
                status,
                hint,
            }
        }
        other => other,
    }
}

/// atomic-bw: only the two sides together know the expected value. The
/// server reads its word back; it must equal the fetch-and-adds (each adds 1)
/// the client saw complete, over all QPs.
fn check_atomic_count(server: &mut SideResult, client: &SideResult) {
    if !server.checked || !server.verified {
        return;
    }
    if server.atomic_final == client.ops {
        server.verify_detail = format!(
            "remote word is {}, the client's completed fetch-and-adds",
            server.atomic_final
        );
    } else {
        server.verified = false;
        server.verify_detail = format!(
            "remote word is {}, but the client completed {} fetch-and-adds",
            server.atomic_final, client.ops
        );
    }
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
}

impl Peer {
    fn fail(&self, status: tonic::Status) -> RunError {
        RunError::Agent {
            node: self.node.name.clone(),
            role: self.role,
            status: Box::new(status),
            hint: String::new(),
        }
    }
}

async fn open_peer(
    lab: &Lab,
    state: &crate::state::LabState,
    name: &str,
    role: &'static str,
) -> Result<Peer, RunError> {
    let node = lab.node_state(state, name)?.clone();
    let session = Arc::new(lab.connect(state, name).await?);
    let client = agent::connect(session.clone(), node.agent_port).await?;
    Ok(Peer {
        node,
        client,
        role,
        session,
    })
}

impl Peer {
    /// The node's active impairment; a node whose qdisc cannot be read
    /// (no tc, no data NIC on record) counts as unimpaired.
    async fn impairment(&self) -> Option<String> {
        match impair::active(&self.session, &self.node).await {
            Ok(netem) => netem.map(|n| n.to_string()),
            Err(e) => {
                tracing::debug!(node = %self.node.name, "cannot read the impairment: {e}");
                None
            }
        }
    }

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
    mut on_progress: impl FnMut(&Progress),
) -> Result<RunRecord, RunError> {
    if !WORKLOADS.contains(&opts.params.workload.as_str()) {
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
    let (server_info, client_info) = futures::try_join!(
        async {
            server
                .client
                .node_info(NodeInfoRequest {})
                .await
                .map_err(|s| server.fail(s))
        },
        async {
            client
                .client
                .node_info(NodeInfoRequest {})
                .await
                .map_err(|s| client.fail(s))
        }
    )?;

    let session_id = format!("{:016x}", rand::random::<u64>());
    let mut params = opts.params.clone();
    if params.timeout_ms == 0 {
        params.timeout_ms = opts.timeout.as_millis() as u64;
    }
    if is_fabric(&params.workload) && params.provider.is_empty() {
        params.provider = default_provider(lab.spec.fabric).to_string();
    }
    let (server_impairment, client_impairment) = futures::join!(server.impairment(), client.impairment());
    let impaired = server_impairment.is_some() || client_impairment.is_some();
    let port = params.ib_port.max(1);
    let counters_before = if impaired || opts.counters {
        Some(futures::join!(server.counters(port), client.counters(port)))
    } else {
        None
    };
    let result = drive(
        &mut server,
        &mut client,
        &session_id,
        &params,
        opts.timeout,
        &mut on_progress,
    )
    .await;
    let (mut server_side, client_side) = match result {
        Ok(sides) => sides,
        Err(e) => {
            // Free both sides' resources; each agent also times out on its own.
            for peer in [&mut server, &mut client] {
                let abort = AbortRequest {
                    session_id: session_id.clone(),
                    reason: e.to_string(),
                };
                let _ = tokio::time::timeout(Duration::from_secs(5), peer.client.abort(abort)).await;
            }
            return Err(explain_link_failure(e, &server.node, &client.node));
        }
    };

    if params.workload == "atomic-bw" {
        check_atomic_count(&mut server_side, &client_side);
    }
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
    let headline = &client_side;
    let bw = headline.bw.unwrap_or_default();
    let moved = client_side.bytes.max(server_side.bytes);
    let mut record = RunRecord {
        schema: RUN_SCHEMA,
        id: session_id,
        lab: lab.spec.name.clone(),
        workload: params.workload.clone(),
        params: ParamsRecord::from(&params),
        verified: overall_verified(&server_side, &client_side),
        bw_peak_mib_s: bw.peak_mib_s,
        bw_avg_mib_s: bw.avg_mib_s,
        bw_avg_gbps: bw.avg_gbps,
        msg_rate_mpps: bw.msg_rate_mpps,
        lat_us: latency(headline.lat.as_ref()),
        cpu: CpuPair {
            server: cpu(&server_side, moved),
            client: cpu(&client_side, moved),
        },
        nodes: NodePair {
            server: node_record(&opts.server, server_info.into_inner()),
            client: node_record(&opts.client, client_info.into_inner()),
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
    Ok(record)
}

/// The three steps of a run; returns (server, client) results.
async fn drive(
    server: &mut Peer,
    client: &mut Peer,
    session_id: &str,
    params: &WorkloadParams,
    timeout: Duration,
    on_progress: &mut impl FnMut(&Progress),
) -> Result<(SideResult, SideResult), RunError> {
    let prepare = |role: Role, bind: &NodeState| PrepareRequest {
        session_id: session_id.to_string(),
        params: Some(params.clone()),
        role: role as i32,
        bind_addr: bind.data_addr.to_string(),
    };
    let prepared = server
        .client
        .prepare(prepare(Role::Server, &server.node))
        .await
        .map_err(|s| server.fail(s))?
        .into_inner();
    let (server_endpoint, fabric_peer) = (prepared.endpoint, prepared.fabric);
    if params.cm() == CmMode::Oob && !is_fabric(&params.workload) {
        // Lab C: each side learns the other's GID, QPN, PSN, MTU, addr and rkey.
        let client_endpoint = client
            .client
            .prepare(prepare(Role::Client, &client.node))
            .await
            .map_err(|s| client.fail(s))?
            .into_inner()
            .endpoint;
        server
            .client
            .connect(ConnectRequest {
                session_id: session_id.to_string(),
                peer: client_endpoint,
            })
            .await
            .map_err(|s| server.fail(s))?;
    }
    let run = RunRequest {
        session_id: session_id.to_string(),
        params: Some(params.clone()),
        peer: server_endpoint,
        bind_addr: client.node.data_addr.to_string(),
        // fabric-*: the server's libfabric address, relayed as it came.
        fabric_peer,
    };
    // The agents enforce the timeout themselves; the controller's deadline
    // is a little later and catches an agent or node that vanished.
    let deadline = timeout + Duration::from_secs(15);
    let client_result = tokio::time::timeout(deadline, async {
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
        waited_s: deadline.as_secs(),
    })??;
    let collect = CollectRequest {
        session_id: session_id.to_string(),
        timeout_ms: 15_000,
    };
    let server_result = tokio::time::timeout(Duration::from_secs(30), server.client.collect(collect))
        .await
        .map_err(|_| RunError::Timeout {
            node: server.node.name.clone(),
            role: "server",
            waited_s: 30,
        })?
        .map_err(|s| server.fail(s))?
        .into_inner();
    Ok((server_result, client_result))
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

    fn side(checked: bool, verified: bool) -> SideResult {
        SideResult {
            checked,
            verified,
            ..Default::default()
        }
    }

    #[test]
    fn test_atomic_bw_word_must_match_the_clients_count() {
        let client = SideResult {
            ops: 120,
            ..Default::default()
        };
        let mut server = side(true, true);
        server.atomic_final = 120;
        check_atomic_count(&mut server, &client);
        assert!(server.verified, "{}", server.verify_detail);
        server.atomic_final = 119;
        check_atomic_count(&mut server, &client);
        assert!(!server.verified);
        assert!(server.verify_detail.contains("119") && server.verify_detail.contains("120"));
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
        for w in WORKLOADS {
            let p = default_params(w);
            assert_eq!(p.workload, *w);
            assert!(p.size >= 2 && p.iterations >= 1, "{w}: {p:?}");
        }
        assert_eq!(default_params("atomic").size, 8);
        assert_eq!(default_params("param-server").num_qps, 2);
        assert_eq!(default_params("inference-ring").tx_depth, 8);
        assert_eq!(default_params("mr-cache").iterations, 40);
        assert_eq!(default_params("write-bw").size, 65536);
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
        use crate::model::Fabric;
        assert_eq!(default_provider(Fabric::Rxe), "verbs;ofi_rxd");
        assert_eq!(default_provider(Fabric::None), "tcp;ofi_rxm");
        assert_eq!(default_provider(Fabric::Efa), "efa");
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
