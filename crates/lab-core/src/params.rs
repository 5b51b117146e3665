//! From what a user asked for to what the agents get: [`WorkloadRequest`]
//! is `labctl run`'s flags (clap reads it directly) and what a CI suite's
//! `workload:` step becomes; one place turns it into [`RunOptions`], so both
//! mean the same thing (unset fields keep the workload's catalogue
//! defaults) and the checks of combinations live where tests reach them.

use std::time::Duration;

use agent_proto::v1::{CmMode, CompletionMode, Fault, WorkloadParams};
use lab_model::suite::{SuiteStep, DEFAULT_TIMEOUT_S};
use workload_catalogue::{Asks, Cm, Completion, Opt, Refused, CATALOGUE};

use crate::collective::CollectiveOptions;
use crate::run::RunOptions;

/// A workload run as asked for; `None` (or `false`) leaves the workload's
/// catalogue default. `labctl run` reads it from its flags (the field docs
/// are its help), a suite's `workload:` step from its fields.
#[derive(Debug, Clone, Default, PartialEq, clap::Args)]
pub struct WorkloadRequest {
    /// The workload.
    #[arg(value_parser = workload_values())]
    pub workload: String,
    /// The passive node, which registers memory and listens [default: server].
    #[arg(long, value_name = "NODE")]
    pub server: Option<String>,
    /// The active node, which connects and posts the work [default: client].
    #[arg(long, value_name = "NODE")]
    pub client: Option<String>,
    /// Collectives: the nodes to run on, one rank each in this order, comma separated
    /// [default: every node of the lab].
    #[arg(long, value_name = "NODE,...", value_delimiter = ',')]
    pub nodes: Option<Vec<String>>,
    /// Collectives: ranks on each node (traffic between ranks of one node goes through
    /// the device's loopback) [default: 1].
    #[arg(long, value_name = "K")]
    pub ranks_per_node: Option<u32>,
    /// broadcast, incast: the node of the root rank [default: the first rank's].
    #[arg(long, value_name = "NODE")]
    pub root: Option<String>,
    /// Collectives: untimed (but verified) operations before the timed ones, at each size
    /// [default: 2].
    #[arg(long, value_name = "N")]
    pub warmup: Option<u32>,
    /// Message size in bytes, or with a unit: 4096, 64KiB, 1MiB [default: the workload's].
    #[arg(short, long, value_parser = lab_model::size::parse_size)]
    pub size: Option<u64>,
    /// Operations to run [default: the workload's].
    #[arg(short = 'n', long)]
    pub iterations: Option<u64>,
    /// Run for this many seconds instead of a number of operations.
    #[arg(
        short = 'D',
        long = "duration",
        value_name = "SECONDS",
        conflicts_with = "iterations"
    )]
    pub duration_s: Option<f64>,
    /// Sweep sizes 2 B .. --max-size in powers of two.
    #[arg(short = 'a', long)]
    pub all_sizes: bool,
    /// Largest size of a sweep; lower it on emulated labs, where every size runs
    /// --iterations times [default: 8MiB].
    #[arg(long, value_parser = lab_model::size::parse_size)]
    pub max_size: Option<u64>,
    /// Outstanding work requests per QP.
    #[arg(short = 't', long)]
    pub tx_depth: Option<u32>,
    /// Signal one completion every N work requests.
    #[arg(short = 'Q', long)]
    pub cq_moderation: Option<u32>,
    /// Work requests chained per post.
    #[arg(short = 'l', long)]
    pub post_list: Option<u32>,
    /// Send payloads up to this size inline.
    #[arg(short = 'I', long)]
    pub inline_size: Option<u32>,
    /// Queue pairs (help from the catalogue: who takes several).
    #[arg(short = 'q', long, help = qps_help())]
    pub qps: Option<u32>,
    /// Connection setup [default: rdma-cm].
    #[arg(long, value_enum)]
    pub cm: Option<Cm>,
    /// How completions are waited for (help from the catalogue's defaults).
    #[arg(long, value_enum, help = completion_help())]
    pub completion: Option<Completion>,
    /// send-recv: answer every message (ping-pong).
    #[arg(long)]
    pub ping_pong: bool,
    /// write-imm, inference-ring: number of batches (each WRITE_WITH_IMM carries its batch id).
    #[arg(long)]
    pub batches: Option<u32>,
    /// Seed of the payload pattern [default: 1].
    #[arg(long)]
    pub seed: Option<u64>,
    /// Negative test: the client uses a corrupted rkey (expect IBV_WC_REM_ACCESS_ERR).
    #[arg(long)]
    pub corrupt_rkey: bool,
    /// Negative test: a fault to inject (help from the catalogue: who takes which).
    #[arg(long = "inject-fault", value_enum, value_name = "FAULT", help = fault_help())]
    pub fault: Option<workload_catalogue::Fault>,
    /// Negative test: the client targets ADDR:RKEY (e.g. a past run's `mr_addr`/`mr_rkey`)
    /// instead of the server's current buffer; memory of a finished run is deregistered,
    /// so expect IBV_WC_REM_ACCESS_ERR.
    #[arg(long, value_name = "ADDR:RKEY")]
    pub use_capability: Option<String>,
    /// fabric-* workloads: the libfabric provider ("tcp;ofi_rxm", "verbs;ofi_rxd", "efa", ...)
    /// [default: from the lab's fabric: rxe: verbs;ofi_rxd, none: tcp;ofi_rxm, efa: efa].
    /// Collectives: run over libfabric RDM with this provider instead of verbs RC.
    #[arg(long)]
    pub provider: Option<String>,
    /// bulk-rdma, bulk-tcp: bytes to move in --size chunks, e.g. 64MiB [default: 4MiB].
    #[arg(long, value_parser = lab_model::size::parse_size)]
    pub total: Option<u64>,
    /// Abort the run after this many seconds [default: 120].
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub timeout: Option<Duration>,
    /// The client waits this many seconds before it connects, while the server waits for
    /// it: to watch a server wait, or to see it refuse a connect that is not its run's
    /// [default: 0; at most 60].
    #[arg(long, value_name = "SECONDS", value_parser = parse_connect_delay)]
    pub connect_delay: Option<Duration>,
    /// Record both nodes' RDMA hardware counters (retransmissions, NAKs, ...) before and
    /// after the run, and show what it added; automatic when a node is impaired (`labctl impair`).
    #[arg(long)]
    pub counters: bool,
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

/// Untimed operations a collective runs at each size before the timed ones.
pub const DEFAULT_WARMUP: u32 = 2;

/// A request whose fields do not fit its workload (bad input).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// The workload is not in the catalogue.
    #[error("unknown workload `{name}`; supported: {}", workload_catalogue::names().collect::<Vec<_>>().join(", "))]
    UnknownWorkload {
        /// The name asked for.
        name: String,
    },
    /// An option the workload does not take.
    #[error("{} applies to {}, not to {workload} ({family} workload)", opt.flag(), workload_catalogue::taking(*opt))]
    NotTaken {
        /// The option.
        opt: Opt,
        /// The workload.
        workload: String,
        /// The workload's family.
        family: &'static str,
    },
    /// `--server`/`--client` given to a collective, whose every node is a rank.
    #[error("{workload} runs on every node given by --nodes (default: all), one rank each; --server and --client are for pair workloads")]
    PairOption {
        /// The workload.
        workload: String,
    },
    /// A fault the workload cannot inject, so its verdict could not catch it.
    #[error("{workload} cannot inject fault {}; it takes: {takes}", fault.label())]
    FaultNotTaken {
        /// The fault asked for.
        fault: workload_catalogue::Fault,
        /// The workload.
        workload: &'static str,
        /// The faults it takes.
        takes: String,
    },
}

impl WorkloadRequest {
    /// What it asks of its workload, for the catalogue's check.
    fn asks(&self) -> Asks {
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

    /// What [`crate::collective::run_collective`] needs for this request
    /// (a collective workload's): its parameters as [`Self::run_options`]
    /// makes them, and the ranks' nodes. `--server`/`--client` are refused:
    /// every node of a collective is a rank.
    pub fn collective_options(&self) -> Result<CollectiveOptions, RequestError> {
        if self.server.is_some() || self.client.is_some() {
            return Err(RequestError::PairOption {
                workload: self.workload.clone(),
            });
        }
        let opts = self.run_options()?;
        Ok(CollectiveOptions {
            params: opts.params,
            nodes: self.nodes.clone().unwrap_or_default(),
            ranks_per_node: self.ranks_per_node.unwrap_or(1),
            root: self.root.clone(),
            warmup: self.warmup.unwrap_or(DEFAULT_WARMUP),
            timeout: opts.timeout,
        })
    }

    /// What [`crate::run::run_workload`] needs for this request: the
    /// workload's catalogue defaults, overridden by what the request sets.
    /// An option the workload does not take is refused, naming the
    /// workloads that take it.
    pub fn run_options(&self) -> Result<RunOptions, RequestError> {
        let entry = workload_catalogue::find(&self.workload).ok_or_else(|| RequestError::UnknownWorkload {
            name: self.workload.clone(),
        })?;
        match entry.refuses(&self.asks()) {
            Some(Refused::Opt(opt)) => {
                return Err(RequestError::NotTaken {
                    opt,
                    workload: self.workload.clone(),
                    family: entry.family.label(),
                })
            }
            Some(Refused::Fault(fault)) => {
                return Err(RequestError::FaultNotTaken {
                    fault,
                    workload: entry.name,
                    takes: entry.fault_labels(),
                })
            }
            None => {}
        }
        let mut params = WorkloadParams::defaults_of(&self.workload);
        if let Some(size) = self.size {
            params.size = size;
        }
        if let Some(n) = self.iterations {
            params.iterations = n;
        }
        if let Some(d) = self.duration_s {
            params.iterations = 0;
            params.duration_s = d;
        }
        params.all_sizes = self.all_sizes;
        params.max_size = self.max_size.unwrap_or(params.max_size);
        params.tx_depth = self.tx_depth.unwrap_or(params.tx_depth);
        params.cq_moderation = self.cq_moderation.unwrap_or(params.cq_moderation);
        params.post_list = self.post_list.unwrap_or(params.post_list);
        params.inline_size = self.inline_size.unwrap_or(params.inline_size);
        params.num_qps = self.qps.unwrap_or(params.num_qps);
        if let Some(cm) = self.cm {
            params.set_cm(CmMode::from(cm));
        }
        if let Some(completion) = self.completion {
            params.set_completion(CompletionMode::from(completion));
        }
        params.ping_pong = self.ping_pong;
        params.batches = self.batches.unwrap_or(params.batches);
        params.seed = self.seed.unwrap_or(params.seed);
        params.corrupt_rkey = self.corrupt_rkey;
        if let Some(fault) = self.fault {
            params.set_fault(Fault::from(fault));
        }
        params.capability_override = self.use_capability.clone().unwrap_or_default();
        if let Some(provider) = &self.provider {
            params.provider = provider.clone();
        }
        if let Some(total) = self.total {
            params.total = total;
        }
        if let Some(delay) = self.connect_delay {
            params.connect_delay_ms = u32::try_from(delay.as_millis()).unwrap_or(u32::MAX);
        }
        Ok(RunOptions {
            params,
            server: self.server.clone().unwrap_or_else(|| "server".into()),
            client: self.client.clone().unwrap_or_else(|| "client".into()),
            timeout: self.timeout.unwrap_or(Duration::from_secs(DEFAULT_TIMEOUT_S)),
            counters: self.counters,
        })
    }
}

impl From<&SuiteStep> for WorkloadRequest {
    fn from(entry: &SuiteStep) -> WorkloadRequest {
        WorkloadRequest {
            workload: entry.workload.clone().unwrap_or_default(),
            server: entry.server.clone(),
            client: entry.client.clone(),
            nodes: entry.nodes.clone(),
            ranks_per_node: entry.ranks_per_node,
            root: entry.root.clone(),
            warmup: entry.warmup,
            size: entry.size,
            iterations: entry.iterations,
            duration_s: entry.duration_s.map(|d| d as f64),
            cm: entry.cm,
            completion: entry.completion,
            qps: entry.qps,
            tx_depth: entry.tx_depth,
            cq_moderation: entry.cq_moderation,
            post_list: entry.post_list,
            inline_size: entry.inline_size,
            total: entry.total,
            fault: entry.fault,
            ping_pong: entry.ping_pong,
            batches: entry.batches,
            seed: entry.seed,
            corrupt_rkey: entry.corrupt_rkey,
            provider: entry.provider.clone(),
            timeout: entry.timeout_s.map(Duration::from_secs),
            ..WorkloadRequest::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lab_model::suite::Suite;

    use super::*;

    fn entry(text: &str) -> SuiteStep {
        Suite::parse(Path::new("suite.yaml"), text).unwrap().steps[0].clone()
    }

    #[test]
    fn test_suite_fields_and_flags_become_the_same_run_parameters() {
        let from_suite = WorkloadRequest::from(&entry(
            "workloads:\n  - workload: send-recv\n    size: 8192\n    iterations: 3\n    cm: oob\n    completion: event\n    ping_pong: true\n    timeout_s: 30\n",
        ));
        let from_flags = WorkloadRequest {
            workload: "send-recv".into(),
            size: Some(8192),
            iterations: Some(3),
            cm: Some(Cm::Oob),
            completion: Some(Completion::Event),
            ping_pong: true,
            timeout: Some(Duration::from_secs(30)),
            ..Default::default()
        };
        assert_eq!(from_suite, from_flags);
        let opts = from_suite.run_options().unwrap();
        assert_eq!((opts.params.size, opts.params.iterations), (8192, 3));
        assert_eq!(opts.params.cm(), CmMode::Oob);
        assert_eq!(opts.params.completion(), CompletionMode::Event);
        assert!(opts.params.ping_pong);
        assert_eq!(opts.timeout, Duration::from_secs(30));
        assert_eq!((opts.server.as_str(), opts.client.as_str()), ("server", "client"));
    }

    #[test]
    fn test_the_connect_delay_is_whole_seconds_up_to_a_minute() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            request: WorkloadRequest,
        }
        use clap::Parser;
        let cli = Cli::try_parse_from(["run", "write-read", "--connect-delay", "8"]).unwrap();
        assert_eq!(cli.request.run_options().unwrap().params.connect_delay_ms, 8000);
        let too_long = Cli::try_parse_from(["run", "write-read", "--connect-delay", "61"])
            .err()
            .unwrap()
            .to_string();
        assert!(too_long.contains("at most 60 s"), "{too_long}");
        assert_eq!(
            WorkloadRequest::from(&entry("workloads:\n  - workload: write-read\n"))
                .run_options()
                .unwrap()
                .params
                .connect_delay_ms,
            0,
            "no delay unless asked for"
        );
    }

    #[test]
    fn test_unset_fields_keep_the_workloads_defaults() {
        let opts = WorkloadRequest::from(&entry("workloads:\n  - workload: write-bw\n"))
            .run_options()
            .unwrap();
        assert_eq!(opts.params, WorkloadParams::defaults_of("write-bw"));
        assert_eq!(opts.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
        let d = WorkloadRequest {
            workload: "write-bw".into(),
            duration_s: Some(2.5),
            iterations: Some(9),
            ..Default::default()
        }
        .run_options()
        .unwrap();
        assert_eq!(
            (d.params.iterations, d.params.duration_s),
            (0, 2.5),
            "a duration wins over a count"
        );
    }

    #[test]
    fn test_fields_of_other_workloads_are_refused() {
        let provider = WorkloadRequest {
            workload: "write-read".into(),
            provider: Some("efa".into()),
            ..Default::default()
        };
        assert_eq!(
            provider.run_options().unwrap_err().to_string(),
            "--provider applies to fabric-write, fabric-bw, fabric-lat, allreduce, allgather, reduce-scatter, alltoall, broadcast, incast, not to write-read (verbs workload)"
        );
        let total = WorkloadRequest {
            workload: "fabric-bw".into(),
            total: Some(1 << 20),
            ..Default::default()
        };
        assert!(matches!(
            total.run_options(),
            Err(RequestError::NotTaken { opt: Opt::Total, .. })
        ));
        let oob = WorkloadRequest {
            workload: "bulk-tcp".into(),
            cm: Some(Cm::Oob),
            ..Default::default()
        };
        assert_eq!(
            oob.run_options().unwrap_err().to_string(),
            format!(
                "--cm oob applies to {}, not to bulk-tcp (TCP workload)",
                workload_catalogue::taking(Opt::CmOob)
            )
        );
        let unknown = WorkloadRequest {
            workload: "nope".into(),
            ..Default::default()
        };
        assert!(matches!(
            unknown.run_options(),
            Err(RequestError::UnknownWorkload { .. })
        ));
        let ok = WorkloadRequest {
            workload: "bulk-tcp".into(),
            total: Some(1 << 20),
            ..Default::default()
        };
        assert_eq!(ok.run_options().unwrap().params.total, 1 << 20);
    }
}
