//! A workload run as asked for: [`WorkloadRequest`] is both `labctl run`'s
//! flags (clap reads it directly, its field docs are the help) and a suite's
//! `workload:` step (serde reads the same fields by their snake_case names),
//! so the two spellings of one run cannot drift apart. Unset fields keep
//! the workload's catalogue defaults; turning a request into what the agents
//! get is the orchestration crate's job (`lab_core::params`).

use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use workload_catalogue::{Asks, Cm, Completion, Fault, Opt, CATALOGUE};

use crate::problem::Problem;
use crate::scalar::{scalar, Scalar};

/// A workload run as asked for; `None` (or `false`) leaves the workload's
/// catalogue default. Fields marked `serde(skip)` are the command line's
/// alone: a suite step names its workload and time limit in fields of its
/// own (`workload:`, `timeout_s:`), and the rest make no sense in CI.
#[derive(Debug, Clone, Default, PartialEq, clap::Args, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkloadRequest {
    /// The workload.
    #[arg(value_parser = workload_values())]
    #[serde(skip)]
    pub workload: String,
    /// The passive node, which registers memory and listens [default: server].
    #[arg(long, value_name = "NODE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The active node, which connects and posts the work [default: client].
    #[arg(long, value_name = "NODE")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Collectives: the nodes to run on, one rank each in this order (on the command line
    /// comma separated) [default: every node of the lab].
    #[arg(long, value_name = "NODE,...", value_delimiter = ',')]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Collectives: ranks on each node (traffic between ranks of one node goes through
    /// the device's loopback) [default: 1].
    #[arg(long, value_name = "K")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub ranks_per_node: Option<u32>,
    /// The collectives with a root: the node of the root rank [default: the first rank's].
    #[arg(long, value_name = "NODE", help = root_help())]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root: Option<String>,
    /// Collectives: untimed (but verified) operations before the timed ones, at each size
    /// [default: 2].
    #[arg(long, value_name = "N")]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warmup: Option<u32>,
    /// Message size in bytes, or with a unit: 4096, 64KiB, 1MiB [default: the workload's].
    #[arg(short, long, value_parser = crate::size::parse_size)]
    #[serde(default, deserialize_with = "de_size", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<SizeSchema>")]
    pub size: Option<u64>,
    /// Operations to run [default: the workload's].
    #[arg(short = 'n', long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Run for this many seconds instead of a number of operations.
    #[arg(
        short = 'D',
        long = "duration",
        value_name = "SECONDS",
        conflicts_with = "iterations"
    )]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<f64>,
    /// Sweep sizes 2 B .. --max-size in powers of two.
    #[arg(short = 'a', long)]
    #[serde(skip)]
    pub all_sizes: bool,
    /// Largest size of a sweep; lower it on emulated labs, where every size runs
    /// --iterations times [default: 8MiB].
    #[arg(long, value_parser = crate::size::parse_size)]
    #[serde(skip)]
    pub max_size: Option<u64>,
    /// Outstanding work requests per QP (perftest's `-t`).
    #[arg(short = 't', long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tx_depth: Option<u32>,
    /// Signal one completion every N work requests (perftest's `-Q`).
    #[arg(short = 'Q', long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cq_moderation: Option<u32>,
    /// Work requests chained per post (perftest's `-l`).
    #[arg(short = 'l', long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_list: Option<u32>,
    /// Send payloads up to this size inline (perftest's `-I`).
    #[arg(short = 'I', long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_size: Option<u32>,
    /// Queue pairs [default: the workload's].
    #[arg(short = 'q', long, help = qps_help())]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<u32>,
    /// Connection setup through rdma_cm (the default) or out of band (oob).
    #[arg(long, value_enum)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cm: Option<Cm>,
    /// How completions are waited for: `poll`, `event` or `auto` [default: the workload's].
    #[arg(long, value_enum, help = completion_help())]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<Completion>,
    /// send-recv: answer every message (ping-pong).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ping_pong: bool,
    /// write-imm, inference-ring: number of batches (each WRITE_WITH_IMM carries its batch id).
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<u32>,
    /// Seed of the payload pattern [default: 1].
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Negative test: the client uses a corrupted rkey (expect IBV_WC_REM_ACCESS_ERR), so
    /// the run fails.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub corrupt_rkey: bool,
    /// Negative test: a fault to inject (`skip`, `corrupt`); the run's verdict catches it,
    /// so the run fails (and a suite step is not retried).
    #[arg(long = "inject-fault", value_enum, value_name = "FAULT", help = fault_help())]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fault: Option<Fault>,
    /// Negative test: the client targets ADDR:RKEY (e.g. a past run's `mr_addr`/`mr_rkey`)
    /// instead of the server's current buffer; memory of a finished run is deregistered,
    /// so expect IBV_WC_REM_ACCESS_ERR.
    #[arg(long, value_name = "ADDR:RKEY")]
    #[serde(skip)]
    pub use_capability: Option<String>,
    /// fabric-* workloads: the libfabric provider ("tcp;ofi_rxm", "verbs;ofi_rxd", "efa", ...)
    /// [default: from the lab's fabric: rxe: verbs;ofi_rxd, none: tcp;ofi_rxm, efa: efa].
    /// Collectives: run over libfabric RDM with this provider instead of verbs RC.
    #[arg(long)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// bulk-rdma, bulk-tcp: bytes to move in `size` chunks, e.g. 64MiB [default: 4MiB].
    #[arg(long, value_parser = crate::size::parse_size)]
    #[serde(default, deserialize_with = "de_size", skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<SizeSchema>")]
    pub total: Option<u64>,
    /// Abort the run after this many seconds [default: 120].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    #[serde(skip)]
    pub timeout: Option<Duration>,
    /// The client waits this many seconds before it connects, while the server waits for
    /// it: to watch a server wait, or to see it refuse a connect that is not its run's
    /// [default: 0; at most 60].
    #[arg(long, value_name = "SECONDS", value_parser = parse_connect_delay)]
    #[serde(skip)]
    pub connect_delay: Option<Duration>,
    /// Record both nodes' RDMA hardware counters (retransmissions, NAKs, ...) before and
    /// after the run, and show what it added; automatic when a node is impaired (`labctl impair`).
    #[arg(long)]
    #[serde(skip)]
    pub counters: bool,
}

impl WorkloadRequest {
    /// What it asks of its workload, for the catalogue's check
    /// ([`workload_catalogue::Workload::refuses`]); a suite step adds its
    /// `trace:`.
    pub fn asks(&self) -> Asks {
        Asks {
            provider: self.provider.is_some(),
            total: self.total.is_some(),
            trace: false,
            cm: self.cm,
            ping_pong: self.ping_pong,
            batches: self.batches.is_some(),
            qps: self.qps,
            fault: self.fault,
            nodes: self.nodes.is_some() || self.ranks_per_node.is_some(),
            root: self.root.is_some(),
            warmup: self.warmup.is_some(),
        }
    }

    /// The suite keys it sets, in the struct's order (what a step of
    /// another kind must not carry).
    pub fn given_keys(&self) -> Vec<String> {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::Object(fields)) => fields.keys().cloned().collect(),
            _ => Vec::new(),
        }
    }

    /// The suite keys it has (every field serde reads), for the messages
    /// about a key that is none of a step's.
    pub fn keys() -> &'static [&'static str] {
        static KEYS: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        KEYS.get_or_init(crate::fields::of::<WorkloadRequest>)
    }
}

fn parse_seconds(text: &str) -> Result<Duration, String> {
    text.parse::<u64>()
        .map(Duration::from_secs)
        .map_err(|_| format!("`{text}` is not a whole number of seconds"))
}

fn parse_connect_delay(text: &str) -> Result<Duration, String> {
    let delay = parse_seconds(text)?;
    let most = Duration::from_millis(u64::from(workload_catalogue::limits::MAX_CONNECT_DELAY_MS));
    if delay > most {
        return Err(format!("at most {} s", most.as_secs()));
    }
    Ok(delay)
}

/// A byte count in a suite: a whole number, or text with a unit as on the
/// command line (`64KiB`), checked while the parser points at it.
fn de_size<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    const FIX: &str = "write bytes, or a number with KiB, MiB or GiB, like 65536 or 64KiB";
    scalar(d, |v| match v {
        Scalar::Null => Ok(None),
        Scalar::Int(n) => u64::try_from(n)
            .map(Some)
            .map_err(|_| Problem::new(format!("{n} is not a size"), FIX)),
        Scalar::Str(s) => crate::size::parse_size(&s).map(Some).map_err(|m| Problem::new(m, FIX)),
        other => Err(Problem::new(
            format!(
                "a size must be bytes or a number with a unit, found {}",
                other.describe()
            ),
            FIX,
        )),
    })
}

#[allow(dead_code)] // only its schema is used
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "Size")]
enum SizeSchema {
    /// Bytes.
    Bytes(#[schemars(range(min = 0))] u64),
    /// A number with a unit: `64KiB`, `1MiB`, `1.5GiB`.
    WithUnit(String),
}

/// The workload argument's values: every catalogue entry, its doc as help.
fn workload_values() -> clap::builder::PossibleValuesParser {
    clap::builder::PossibleValuesParser::new(
        CATALOGUE
            .iter()
            .map(|w| clap::builder::PossibleValue::new(w.name).help(format!("[{}] {}", w.family.label(), w.doc))),
    )
}

/// `--qps`'s help: who takes it and who defaults to more than one.
fn qps_help() -> String {
    let more: Vec<String> = CATALOGUE
        .iter()
        .filter(|w| w.defaults.qps > 1)
        .map(|w| format!("{}: {}", w.name, w.defaults.qps))
        .collect();
    format!(
        "Number of QPs, for {} [default: 1; {}]",
        workload_catalogue::taking(Opt::Qps),
        more.join("; ")
    )
}

/// `--root`'s help: who has a root.
fn root_help() -> String {
    format!(
        "{}: the node of the root rank [default: the first rank's]",
        workload_catalogue::taking(Opt::Root)
    )
}

/// `--completion`'s help: the defaults, by workload.
fn completion_help() -> String {
    let auto: Vec<&str> = CATALOGUE
        .iter()
        .filter(|w| w.defaults.completion == Completion::Auto)
        .map(|w| w.name)
        .collect();
    format!(
        "Completion handling [default: auto for {}: on a software device such as rxe every wait \
         sleeps (a bandwidth client while its send queue is full, a latency server between \
         messages), leaving the CPU to the device's kernel work, except a latency client's, \
         which polls; everything polls on a NIC; poll otherwise]. The record says which mode \
         each side used.",
        auto.join(", ")
    )
}

/// `--inject-fault`'s help: what each fault does, and who takes which.
fn fault_help() -> String {
    let list: Vec<String> = CATALOGUE
        .iter()
        .map(|w| format!("{} ({})", w.name, w.fault_labels()))
        .collect();
    format!(
        "Negative test: inject a fault and see the verdict catch it (the run must end not \
         verified): `skip` loses one operation (the client counts one that never took effect), \
         `corrupt` flips one byte of the data's source. Each workload takes the faults it can \
         detect; others are refused: {}",
        list.join(", ")
    )
}
