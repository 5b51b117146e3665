//! Bench records: `labctl bench`'s pairs (perftest against our workloads,
//! Open MPI against our collectives), their samples and statistics, idle
//! agent memory and orchestration timings, as printed by `--json` and
//! saved under the lab's results.
//!
//! This module owns the record's shape; [`verdict`] the figures and
//! verdicts read off it (which rounds count, the ratio, the drift check,
//! whose failure a failed round is). Running the pairs is the
//! orchestration crate's job.

use serde::{Deserialize, Serialize};

pub mod collectives;
pub mod verdict;

pub use collectives::CollectiveFigures;

/// Version of the bench record (`--json` and saved results). 2: warm-up
/// rounds, the ABBA order, rounds left out per side, the drift check and
/// the failure tally; schema 1 records read with those empty.
pub const BENCH_SCHEMA: u32 = 2;

/// Which pairs to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Suite {
    /// write-bw, read-bw, write-lat, atomic-bw, fabric-lat (against fi_pingpong).
    Quick,
    /// Quick plus send-bw, read-lat, send-lat, atomic-lat and the scaling
    /// series (write-bw and send-bw at 2, 4 and 8 QPs).
    Full,
    /// No pairs: `up` and `down` timings of scratch labs (`--orchestration`).
    Orchestration,
    /// One pair per message size of each chosen workload (`--sweep`), for
    /// the bandwidth and latency vs size charts.
    Sweep,
    /// Our collectives against Open MPI's on every node of the lab, per
    /// collective and size, with a single pair's write-bw as the link's ceiling.
    Collectives,
}

impl Suite {
    /// The suite's name as `--suite`, record files and listings spell it.
    pub fn label(self) -> &'static str {
        match self {
            Suite::Quick => "quick",
            Suite::Full => "full",
            Suite::Orchestration => "orchestration",
            Suite::Sweep => "sweep",
            Suite::Collectives => "collectives",
        }
    }
}

/// What a pair's headline number is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// Average bandwidth, MiB/s (perftest "BW average[MB/sec]"). Higher is better.
    BwAvgMibS,
    /// Message rate, millions of messages per second. Higher is better.
    MsgRateMpps,
    /// Median latency, µs (perftest "t_typical"). Lower is better.
    LatTypicalUs,
    /// Mean latency, µs (`fi_pingpong`'s "usec/xfer", a mean half round trip). Lower is better.
    LatAvgUs,
    /// A collective's bus bandwidth, GB/s (10^9 bytes), as nccl-tests
    /// defines it ([`crate::collective`]). Higher is better.
    BusbwGbS,
}

impl Metric {
    /// The unit as printed.
    pub fn unit(self) -> &'static str {
        match self {
            Metric::BwAvgMibS => "MiB/s",
            Metric::MsgRateMpps => "Mpps",
            Metric::LatTypicalUs | Metric::LatAvgUs => "us",
            Metric::BusbwGbS => "GB/s",
        }
    }

    /// Whether a larger value is better.
    pub fn higher_is_better(self) -> bool {
        !matches!(self, Metric::LatTypicalUs | Metric::LatAvgUs)
    }
}

/// One comparison: a perftest tool against one of our workloads.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairSpec {
    /// Our workload ("write-bw").
    pub workload: String,
    /// The perftest binary ("ib_write_bw").
    pub tool: String,
    /// Message size, bytes (both sides).
    pub size: u64,
    /// Iterations (both sides).
    pub iterations: u64,
    /// TX depth and CQ moderation (bandwidth tests; both sides). None: latency.
    pub depth: Option<(u32, u32)>,
    /// The headline number.
    pub metric: Metric,
    /// What issue 3 asks of ours / reference, on the median; None: no target.
    pub target: Option<f64>,
    /// libfabric pairs: the provider both sides use (the reference is then
    /// `fi_pingpong`, not perftest). None: a verbs pair.
    pub provider: Option<String>,
    /// QPs per side (perftest's `-q`, our `--qps`), each running
    /// `iterations` operations. Records from before the field read 1.
    #[serde(default = "one_qp")]
    pub qps: u32,
    /// A point of a size sweep (`bench --sweep`): its label names the size.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sweep_point: bool,
}

fn one_qp() -> u32 {
    1
}

fn abab() -> String {
    "abab".into()
}

impl PairSpec {
    /// The pair's name in tables and comparisons: the workload, with its
    /// size in a sweep and for a collective ("allreduce 1MiB": the
    /// collectives suite runs each at several sizes), and its QP count when
    /// it runs several ("write-bw q4"), so the pairs of a series stay apart.
    pub fn label(&self) -> String {
        let mut label = self.workload.clone();
        if self.sweep_point || self.metric == Metric::BusbwGbS {
            label = format!(
                "{label} {}",
                crate::plot::bytes_label(self.size as f64).replace(' ', "")
            );
        }
        if self.qps > 1 {
            label = format!("{label} q{}", self.qps);
        }
        label
    }
}

/// perftest's result table, parsed.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PerftestResult {
    /// Message size.
    pub bytes: u64,
    /// Iterations.
    pub iterations: u64,
    /// Bandwidth tests: peak and average MiB/s, message rate Mpps.
    pub bw_peak_mib_s: Option<f64>,
    /// Average MiB/s.
    pub bw_avg_mib_s: Option<f64>,
    /// Mpps.
    pub msg_rate_mpps: Option<f64>,
    /// Latency tests: t_min, t_max, t_typical, t_avg, t_stdev, p99, p99.9 (µs).
    pub lat_min_us: Option<f64>,
    /// t_max.
    pub lat_max_us: Option<f64>,
    /// t_typical (the median).
    pub lat_typical_us: Option<f64>,
    /// t_avg.
    pub lat_avg_us: Option<f64>,
    /// t_stdev.
    pub lat_stdev_us: Option<f64>,
    /// 99% percentile.
    pub lat_p99_us: Option<f64>,
    /// 99.9% percentile.
    pub lat_p999_us: Option<f64>,
    /// Header facts: "TX depth", "CQ Moderation", "Max inline data", "Mtu", ...
    pub header: std::collections::BTreeMap<String, String>,
    /// CPU seconds (user, system) of perftest's process, from the shell's
    /// `times` (the whole process: setup and TCP exchange included).
    pub cpu_user_s: Option<f64>,
    /// System seconds.
    pub cpu_system_s: Option<f64>,
}

/// One measurement of one side.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Sample {
    /// The round (0-based).
    pub round: u32,
    /// The headline metric; None when the run failed.
    pub value: Option<f64>,
    /// Peak bandwidth, MiB/s (bandwidth pairs).
    pub peak_mib_s: Option<f64>,
    /// CPU seconds (user + system) per GiB moved, client side.
    pub cpu_client_s_per_gib: Option<f64>,
    /// CPU seconds (user + system) per GiB moved, both sides.
    pub cpu_total_s_per_gib: Option<f64>,
    /// Ours: the bytes were verified (perftest: null, it does not check).
    pub verified: Option<bool>,
    /// Ours: the run's id (its record is saved next to this one).
    pub run_id: Option<String>,
    /// Why the run failed.
    pub error: Option<String>,
    /// perftest: why this sample is a second run (its first refused to
    /// report); absent when it ran once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<String>,
    /// perftest: both sides' parsed output (client first).
    pub perftest: Option<[PerftestResult; 2]>,
    /// A warm-up round: run and shown, never counted.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub warmup: bool,
    /// Where the run fell in its pair's order (0-based over both tools,
    /// warm-ups included): the drift check's time axis. None in records
    /// from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position: Option<u32>,
    /// Seconds from the bench's start to this run's start; with the
    /// record's `client_uptime_s`, how long the node had been up when the
    /// run started. None in records from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_s: Option<f64>,
    /// A collective (both sides): the time per operation, algbw and what
    /// was checked; `value` is its busbw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveFigures>,
}

/// min, median, max of the samples that succeeded.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Stats {
    /// Smallest.
    pub min: Option<f64>,
    /// Median.
    pub median: Option<f64>,
    /// Largest.
    pub max: Option<f64>,
    /// Successful samples.
    pub n: usize,
}

impl Stats {
    /// No sample gave a value.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// Stats of the values present.
    pub fn of(values: impl IntoIterator<Item = Option<f64>>) -> Stats {
        let mut v: Vec<f64> = values.into_iter().flatten().filter(|x| x.is_finite()).collect();
        v.sort_by(f64::total_cmp);
        if v.is_empty() {
            return Stats::default();
        }
        let mid = v.len() / 2;
        let median = if v.len() % 2 == 1 {
            v[mid]
        } else {
            (v[mid - 1] + v[mid]) / 2.0
        };
        Stats {
            min: v.first().copied(),
            median: Some(median),
            max: v.last().copied(),
            n: v.len(),
        }
    }
}

/// One tool's side of a pair.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SideStats {
    /// "ib_write_bw" or "write-bw".
    pub tool: String,
    /// The command (perftest) or parameters (ours).
    pub command: String,
    /// The headline metric.
    pub stats: Stats,
    /// CPU per GiB, client side, over the samples.
    pub cpu_client_s_per_gib: Stats,
    /// CPU per GiB, both sides, over the samples.
    pub cpu_total_s_per_gib: Stats,
    /// Rounds that ran but are not in the statistics, by why.
    #[serde(default)]
    pub left_out: LeftOut,
    /// Collectives: the time per operation, µs, over the counted rounds.
    #[serde(default, skip_serializing_if = "Stats::is_empty")]
    pub time_us: Stats,
    /// Every sample, in the order run (warm-ups first).
    pub samples: Vec<Sample>,
}

/// One pair's outcome.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PairRecord {
    /// What was compared.
    pub spec: PairSpec,
    /// Unit of the metric.
    pub unit: String,
    /// "higher" or "lower".
    pub better: String,
    /// perftest.
    pub reference: SideStats,
    /// Ours.
    pub ours: SideStats,
    /// Median of ours / median of the reference.
    pub ratio: Option<f64>,
    /// Whether the ratio meets the target (≥ target for higher-is-better
    /// metrics, ≤ for latency); None without a target or a ratio.
    pub meets_target: Option<bool>,
    /// Median CPU per GiB (both sides) of ours / the reference's.
    pub cpu_ratio: Option<f64>,
    /// Collectives: the median time per operation of ours / the
    /// reference's (the latency ratio: lower is better).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_ratio: Option<f64>,
    /// Whether the measured rounds trend with time instead of scattering.
    #[serde(default)]
    pub drift: Drift,
    /// How far the ratio moves over resampled rounds; none with fewer than
    /// [`SPREAD_MIN_ROUNDS`] counted rounds a side (and in older records).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<RatioSpread>,
}

/// Everything about one bench: what `--json` prints and what is saved.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BenchRecord {
    /// [`BENCH_SCHEMA`].
    pub schema: u32,
    /// Unique id.
    pub id: String,
    /// The lab.
    pub lab: String,
    /// The suite.
    pub suite: Suite,
    /// Measured rounds per pair.
    pub rounds: u32,
    /// Warm-up rounds per pair, run before the measured ones and left out.
    #[serde(default)]
    pub warmup_rounds: u32,
    /// The order of each pair's measured rounds: `abba` (reference first in
    /// even rounds, ours first in odd ones); `abab` in records from before
    /// it, where the reference always ran first.
    #[serde(default = "abab")]
    pub order: String,
    /// The passive node (collectives: of the ceiling's write-bw).
    pub server: String,
    /// The active node (collectives: of the ceiling's write-bw).
    pub client: String,
    /// `ib_write_bw --version` on the client; empty when no perftest ran
    /// (collectives).
    pub perftest_version: String,
    /// RDMA device and GID index of the data address on (server, client).
    pub perftest_device: [(String, u32); 2],
    /// Start time, RFC 3339.
    pub started_at: String,
    /// The client's time since boot (its `/proc/uptime`) when the bench
    /// started: a freshly booted node can keep getting faster for minutes,
    /// and this plus a sample's `at_s` places each run on that curve. None when
    /// the node did not say, and in records from before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_uptime_s: Option<f64>,
    /// Wall time, seconds.
    pub duration_s: f64,
    /// The pairs.
    pub pairs: Vec<PairRecord>,
    /// Failed rounds by whose failure (the reference's or ours).
    #[serde(default)]
    pub failures: Failures,
    /// Each agent's resident memory while idle, before and after the pairs,
    /// against [`AGENT_RSS_TARGET_BYTES`].
    #[serde(default)]
    pub agent_rss: Vec<AgentRss>,
    /// `--orchestration`: `up` and `down` timings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orchestration: Option<OrchestrationRecord>,
    /// `--suite collectives`: the ranks, Open MPI's build and transport,
    /// and the link's ceiling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collectives: Option<CollectivesRecord>,
    /// Where it was saved.
    pub saved_to: Option<String>,
    /// The lab's `expect:` figures, each measured by a run of its own after
    /// the pairs (absent when the lab expects none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<crate::expect::ExpectOutcome>,
}

/// Issue 8's target for an idle agent's resident memory: 20 MB (10^6 bytes).
pub const AGENT_RSS_TARGET_BYTES: u64 = 20_000_000;

/// One agent's resident memory at one moment of a bench.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AgentRss {
    /// The node.
    pub node: String,
    /// `before the runs` or `after the runs` (the agent is idle at both).
    pub when: String,
    /// Resident set size, bytes (the agent's Health reply, from /proc/self/status).
    pub rss_bytes: u64,
    /// [`AGENT_RSS_TARGET_BYTES`].
    pub target_bytes: u64,
    /// `rss_bytes <= target_bytes`.
    pub holds: bool,
}

/// Counted rounds (both tools together) the drift check needs: three
/// rounds of each tool.
pub const DRIFT_MIN_ROUNDS: usize = 6;

/// Rounds of one side left out of its statistics, by why.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeftOut {
    /// Warm-up rounds: run, shown, never counted.
    pub warmup: usize,
    /// Measured rounds that failed (no figure).
    pub failed: usize,
    /// Measured rounds of ours that finished with bytes that did not verify.
    pub unverified: usize,
}

/// The drift check of one pair.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Drift {
    /// Spearman's rho between the run order and the figures (each tool's
    /// divided by its median); None when it cannot be computed.
    pub rho: Option<f64>,
    /// Counted rounds, both tools together.
    pub n: usize,
    /// |rho| from which the rounds trend: 1.96 / √(n − 1).
    pub threshold: Option<f64>,
    /// The rounds trend instead of scattering; None with fewer than
    /// [`DRIFT_MIN_ROUNDS`] counted rounds.
    pub trending: Option<bool>,
}

/// Counted rounds each side needs for a [`RatioSpread`].
pub const SPREAD_MIN_ROUNDS: usize = 3;

/// Resamplings behind a [`RatioSpread`].
pub const SPREAD_RESAMPLES: usize = 2000;

/// The ratio's 95 % interval by a percentile bootstrap over the counted
/// rounds: each side's rounds drawn again with replacement, ours' median
/// over the reference's, [`SPREAD_RESAMPLES`] times from a fixed seed (a
/// record always gives the same interval). A target inside it means rounds
/// like these could have met it as well as missed it. With four rounds a
/// side it is rough, and it only widens with the rounds' scatter.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RatioSpread {
    /// 2.5th percentile of the resampled ratios.
    pub low: f64,
    /// 97.5th percentile.
    pub high: f64,
    /// Counted rounds of the side with fewer.
    pub rounds: usize,
}

/// Failed rounds of a bench, by whose failure they are.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Failures {
    /// Rounds (warm-ups included) in which the reference tool failed.
    pub reference_failed: usize,
    /// Rounds (warm-ups included) in which ours failed without a verdict
    /// on the bytes (an error, a timeout).
    pub ours_failed: usize,
    /// Rounds (warm-ups included) of ours whose bytes did not verify.
    pub ours_unverified: usize,
    /// Pairs with no counted round of ours: they fail.
    pub pairs_without_ours: Vec<String>,
    /// Pairs whose reference failed every measured round: no ratio.
    pub pairs_without_reference: Vec<String>,
}

/// What a bench as a whole comes to, and so its exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BenchOutcome {
    /// Every round of both tools ran, and every run of ours verified.
    Ok,
    /// A run of ours failed or did not verify, a pair has no counted round
    /// of ours, or (`--orchestration`) a timed step failed.
    OursFailed,
    /// Only the reference tools failed (some of their rounds).
    ReferenceFailed,
    /// Every run of ours verified, but a figure of the lab's `expect:` was
    /// missed or could not be measured.
    ExpectMissed,
}

impl BenchOutcome {
    /// `labctl bench`'s exit status: 0, 1 (ours failed), 3 (only the
    /// reference failed) or 4 (an expectation missed).
    pub fn exit_status(self) -> u8 {
        match self {
            BenchOutcome::Ok => 0,
            BenchOutcome::OursFailed => 1,
            BenchOutcome::ReferenceFailed => 3,
            BenchOutcome::ExpectMissed => 4,
        }
    }
}

/// The pair's ratio and verdict; no ratio when either side has no median.
pub fn judge(spec: &PairSpec, reference: &Stats, ours: &Stats) -> (Option<f64>, Option<bool>) {
    let ratio = match (ours.median, reference.median) {
        (Some(o), Some(r)) if r > 0.0 => Some(o / r),
        _ => None,
    };
    let meets = match (ratio, spec.target) {
        (Some(ratio), Some(t)) if spec.metric.higher_is_better() => Some(ratio >= t),
        (Some(ratio), Some(t)) => Some(ratio <= t),
        _ => None,
    };
    (ratio, meets)
}

/// Every round of both tools ran, and every run of ours verified its bytes.
pub fn all_ok(record: &BenchRecord) -> bool {
    record.outcome() == BenchOutcome::Ok
}

/// One step's timings at one node count.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct StepTiming {
    /// `up warm`, `up cold` or `down`.
    pub step: String,
    /// Nodes in the scratch lab.
    pub nodes: usize,
    /// Seconds, over the rounds that succeeded.
    pub seconds: Stats,
    /// Seconds of each round (null: it failed).
    pub samples: Vec<Option<f64>>,
    /// Why rounds failed.
    pub errors: Vec<String>,
}

/// The orchestration part of a bench record.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct OrchestrationRecord {
    /// The image cache the warm `up`s used.
    pub image_cache: String,
    /// Per step and node count.
    pub steps: Vec<StepTiming>,
    /// Where the warm `up`s spent their time, per phase and node count
    /// (from each `up`'s own timeline; records saved before it have none).
    #[serde(default)]
    pub phases: Vec<PhaseTiming>,
}

/// One phase of the warm `up`s of one node count, over the rounds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PhaseTiming {
    /// The step `up` reports (`start VMs`, `boot to init`, `wait for SSH`, `rxe`, ...).
    pub phase: String,
    /// Nodes in the scratch lab.
    pub nodes: usize,
    /// Seconds the slowest node took in it.
    pub seconds: Stats,
    /// Seconds from the start of `up` to when the last node finished it.
    pub ends_at: Stats,
}

/// Every step of every round succeeded.
pub fn orchestration_ok(record: &OrchestrationRecord) -> bool {
    record
        .steps
        .iter()
        .all(|s| s.errors.is_empty() && !s.samples.is_empty())
}

/// What `--suite collectives` ran on and with.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CollectivesRecord {
    /// The nodes in rank order (one rank each, on both sides).
    pub nodes: Vec<String>,
    /// Ranks.
    pub world: u32,
    /// Untimed operations at the start of every run (both sides), apart
    /// from the suite's warm-up rounds.
    pub warmup_ops: u32,
    /// Seed of the inputs (both sides fill and check the same elements).
    pub seed: u64,
    /// `mpirun --version`'s first line.
    pub mpi_version: String,
    /// The transport Open MPI was told to use: `tcp` or `ucx`.
    pub mpi_transport: String,
    /// It in words, with the interface or device.
    pub mpi_transport_detail: String,
    /// The mpirun command line, up to the program's arguments.
    pub mpirun: String,
    /// How the program was built and spread to the nodes.
    pub build: String,
    /// Seconds the build and the copies took.
    pub build_s: f64,
    /// One single-pair write-bw on the lab's data link, run in the same bench.
    pub ceiling: Option<CeilingRecord>,
}

/// The link's ceiling: one pair's write-bw, in the collectives' unit too.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CeilingRecord {
    /// The parameters, as run.
    pub command: String,
    /// The run (`value` in MiB/s), or why it failed.
    pub sample: Sample,
    /// The same bandwidth in GB/s (10^9 bytes), the unit of busbw.
    pub gb_s: Option<f64>,
}

impl CeilingRecord {
    /// The ceiling from its run; `gb_s` follows from the sample's MiB/s.
    pub fn new(command: String, sample: Sample) -> CeilingRecord {
        let gb_s = sample.value.map(|mib_s| mib_s * f64::from(1u32 << 20) / 1e9);
        CeilingRecord { command, sample, gb_s }
    }
}
