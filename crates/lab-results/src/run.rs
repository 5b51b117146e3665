//! Run records: everything about one `labctl run` (parameters, verdict,
//! bandwidth, latency, CPU, both sides' outcomes, both nodes' facts), as
//! printed by `--json` and saved under the lab's results, and their
//! conversion from the agents' replies.
//!
//! This module owns the record's shape; running a workload is the
//! orchestration crate's job.

use std::collections::BTreeMap;

use agent_proto::v1::{Fault, NodeInfoReply, SideResult, WorkloadParams};
use serde::{Deserialize, Serialize};

/// RDMA hardware counters of one port, by name
/// (`/sys/class/infiniband/<dev>/ports/<port>/hw_counters`).
pub type Counters = BTreeMap<String, u64>;

/// Version of the run record (`--json` and saved results).
pub const RUN_SCHEMA: u32 = 1;

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
    /// Negative test: the fault the run injected ("skip", "corrupt"; absent when none).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fault: Option<String>,
}

impl ParamsRecord {
    /// An `auto` completion mode replaced by the one the client used (its
    /// result's "completion" fact), so the record says how it waited.
    pub fn with_completion_used(mut self, used: Option<&String>) -> ParamsRecord {
        if let (true, Some(used)) = (self.completion == "auto", used) {
            self.completion = used.clone();
        }
        self
    }

    /// The record of the parameters sent to the agents.
    pub fn from(p: &WorkloadParams) -> ParamsRecord {
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
            cm: workload_catalogue::Cm::from(p.cm()).label().to_string(),
            completion: workload_catalogue::Completion::from(p.completion()).label().to_string(),
            seed: p.seed,
            ping_pong: p.ping_pong,
            batches: p.batches,
            corrupt_rkey: p.corrupt_rkey,
            capability_override: (!p.capability_override.is_empty()).then(|| p.capability_override.clone()),
            provider: workload_catalogue::find(&p.workload)
                .is_some_and(|w| w.family == workload_catalogue::Family::Libfabric)
                .then(|| p.provider.clone()),
            total: (p.total > 0).then_some(p.total),
            fault: (p.fault() != Fault::None).then(|| p.fault().label().to_string()),
        }
    }
}

/// Latency figures, µs.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct LatencyRecord {
    /// Minimum.
    pub min: f64,
    /// perftest's t_max: the largest sample after its 2 largest are dropped
    /// (its pick, so the second largest of all).
    pub max: f64,
    /// perftest's t_typical: the median of the samples kept.
    pub typical: f64,
    /// Mean of the samples kept.
    pub avg: f64,
    /// Standard deviation as perftest computes it (each deviation truncated
    /// to whole µs).
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Samples taken (the figures above leave out the 2 largest, as perftest does).
    pub samples: u64,
    /// Every sample's figures, none dropped (records before 2026-11-25 lack them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub all_samples: Option<AllSamplesRecord>,
}

/// Latency figures over every sample, µs: the true maximum, mean and
/// standard deviation, nearest-rank median and percentiles.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct AllSamplesRecord {
    /// Maximum.
    pub max: f64,
    /// Median.
    pub median: f64,
    /// Mean.
    pub avg: f64,
    /// Standard deviation.
    pub stdev: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
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

impl SideRecord {
    /// What carried this side's traffic, from its facts as the agent read
    /// them after setting up: `rxe0 port 1, GID 1 (RoCE v2), Ethernet,
    /// active MTU 1024`, `libfabric verbs;ofi_rxd, fabric IB-0xfe80...,
    /// domain rxe0-dgram`; None when the side reported none (a side that
    /// failed before opening anything).
    pub fn carrier(&self) -> Option<String> {
        let f = |k: &str| self.facts.get(k).map(String::as_str);
        if let Some(provider) = f("provider") {
            let mut s = format!("libfabric {provider}");
            for key in ["fabric", "domain"] {
                if let Some(v) = f(key) {
                    s.push_str(&format!(", {key} {v}"));
                }
            }
            return Some(s);
        }
        let device = f("device")?;
        let mut s = format!("{device} port {}", f("port").unwrap_or("?"));
        if let Some(index) = f("gid_index") {
            s.push_str(&format!(", GID {index}"));
            if let Some(t) = f("gid_type") {
                s.push_str(&format!(" ({t})"));
            }
        }
        if let Some(layer) = f("link_layer") {
            s.push_str(&format!(", {layer}"));
        }
        if let Some(mtu) = f("active_mtu") {
            s.push_str(&format!(", active MTU {mtu}"));
        }
        Some(s)
    }
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
    /// Peak bandwidth, MiB/s (as [`RunRecord::bw_peak_mib_s`]).
    pub bw_peak_mib_s: f64,
    /// Best 500 ms window, MiB/s.
    pub bw_peak_window_mib_s: f64,
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
    /// Peak bandwidth, MiB/s (2^20 bytes): for the perftest pairs
    /// (write/read/send/atomic-bw) by perftest's definition, the least time
    /// per request from a post to a later signaled completion (0 when not
    /// measured, as perftest prints it); elsewhere the best window.
    pub bw_peak_mib_s: f64,
    /// Best measurement window, MiB/s (500 ms for verbs, 100 ms for bulk and
    /// TCP; the average when the run is shorter than one window).
    pub bw_peak_window_mib_s: f64,
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
    /// The record of the agent's `MrCacheStats`.
    pub fn from(s: &agent_proto::v1::MrCacheStats) -> MrCacheRecord {
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

/// The latency figures of an agent reply (zeros when it has none).
pub fn latency(l: Option<&agent_proto::v1::Latency>) -> LatencyRecord {
    l.map(|l| LatencyRecord {
        min: l.min_us,
        max: l.max_us,
        typical: l.typical_us,
        avg: l.avg_us,
        stdev: l.stdev_us,
        p99: l.p99_us,
        p999: l.p999_us,
        samples: l.samples,
        all_samples: l.all_samples.map(|a| AllSamplesRecord {
            max: a.max_us,
            median: a.median_us,
            avg: a.avg_us,
            stdev: a.stdev_us,
            p99: a.p99_us,
            p999: a.p999_us,
        }),
    })
    .unwrap_or_default()
}

/// One side's CPU time, and per GiB of `bytes` moved.
pub fn cpu(side: &SideResult, bytes: u64) -> CpuRecord {
    let c = side.cpu.unwrap_or_default();
    let gib = bytes as f64 / (1u64 << 30) as f64;
    CpuRecord {
        user_s: c.user_s,
        system_s: c.system_s,
        per_gib_s: (bytes > 0).then(|| (c.user_s + c.system_s) / gib),
    }
}

/// One side's outcome as saved, from its agent's `SideResult`.
pub fn side_record(node: &str, s: &SideResult) -> SideRecord {
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

/// A node's facts as saved, from its agent's NodeInfo.
pub fn node_record(name: &str, info: NodeInfoReply) -> NodeRecord {
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

/// An RDMA device port as seen by `status`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(default)]
pub struct RdmaDeviceStatus {
    /// The device (rxe0).
    pub device: String,
    /// Its Ethernet device.
    pub netdev: String,
    /// Port number.
    pub port: u32,
    /// PORT_ACTIVE, ...
    pub state: String,
    /// Active MTU.
    pub active_mtu: u32,
    /// GIDs (index, value, type).
    pub gids: Vec<String>,
}

/// Every port of every RDMA device in a NodeInfo reply.
pub fn rdma_ports(info: &agent_proto::v1::NodeInfoReply) -> Vec<RdmaDeviceStatus> {
    let mut ports = Vec::new();
    for dev in &info.devices {
        for port in &dev.ports {
            ports.push(RdmaDeviceStatus {
                device: dev.name.clone(),
                netdev: dev.netdev.clone(),
                port: port.port,
                state: port.state.clone(),
                active_mtu: port.active_mtu,
                gids: port
                    .gids
                    .iter()
                    .map(|g| format!("{} {} {}", g.index, g.gid, g.gid_type))
                    .collect(),
            });
        }
    }
    ports
}

#[cfg(test)]
mod carrier_tests {
    use super::*;

    fn side(facts: &[(&str, &str)]) -> SideRecord {
        SideRecord {
            facts: facts.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn test_a_side_names_what_carried_it_from_its_facts() {
        // The facts of a write-read client and a fabric-write client on the
        // default QEMU lab, as their run records hold them.
        let verbs = side(&[
            ("active_mtu", "1024"),
            ("device", "rxe0"),
            ("gid_index", "1"),
            ("gid_type", "RoCE v2"),
            ("link_layer", "Ethernet"),
            ("port", "1"),
        ]);
        assert_eq!(
            verbs.carrier().as_deref(),
            Some("rxe0 port 1, GID 1 (RoCE v2), Ethernet, active MTU 1024")
        );
        let fabric = side(&[
            ("provider", "verbs;ofi_rxd"),
            ("fabric", "IB-0xfe80000000000000"),
            ("domain", "rxe0-dgram"),
        ]);
        assert_eq!(
            fabric.carrier().as_deref(),
            Some("libfabric verbs;ofi_rxd, fabric IB-0xfe80000000000000, domain rxe0-dgram")
        );
        // A record from an agent before the carrier facts: what there is.
        assert_eq!(
            side(&[("device", "rxe0"), ("port", "1"), ("gid_index", "1")])
                .carrier()
                .as_deref(),
            Some("rxe0 port 1, GID 1")
        );
        assert_eq!(side(&[]).carrier(), None);
    }
}
