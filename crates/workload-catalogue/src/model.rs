//! The catalogue's vocabulary: the types an entry is made of and the enums
//! a run's parameters use. No entry lives here (they are in `entries.rs`).

use serde::{Deserialize, Serialize};

/// What carries a workload's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// ibverbs QPs (rdma_cm or out-of-band setup).
    Verbs,
    /// libfabric RDM endpoints (no QP, no rdma_cm; the server's fabric
    /// address is relayed from Prepare to Run).
    Libfabric,
    /// A kernel TCP socket between the same data addresses.
    Tcp,
}

impl Family {
    /// The family as help texts spell it.
    pub fn label(self) -> &'static str {
        match self {
            Family::Verbs => "verbs",
            Family::Libfabric => "libfabric",
            Family::Tcp => "TCP",
        }
    }
}

/// Which roles take part in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Two nodes: a passive server (registers memory, listens) and an active
    /// client (connects, posts the work).
    Pair,
    /// Every node of the run is one rank of a collective operation.
    Collective(Collective),
}

impl Shape {
    /// The roles, in the order the controller starts them.
    pub fn roles(self) -> &'static [&'static str] {
        match self {
            Shape::Pair => &["server", "client"],
            Shape::Collective(_) => &["rank"],
        }
    }

    /// The collective, for a collective workload.
    pub fn collective(self) -> Option<Collective> {
        match self {
            Shape::Pair => None,
            Shape::Collective(c) => Some(c),
        }
    }
}

/// A collective operation over the ranks of a run, with the algorithm the
/// agents run it by and the bus-bandwidth factor nccl-tests' PERFORMANCE.md
/// gives it. Elements are float32.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collective {
    /// Every rank ends with the element-wise sum of all ranks' buffers.
    /// Ring: a reduce-scatter then an allgather, 2(n-1) steps of size/n.
    Allreduce,
    /// Every rank ends with every rank's size/n block, in rank order. Ring,
    /// n-1 steps.
    Allgather,
    /// Rank r ends with block r of the element-wise sum. Ring, n-1 steps.
    ReduceScatter,
    /// The root ends with the element-wise sum of all ranks' buffers: every
    /// other rank writes its buffer into the root at once, and the root adds.
    Reduce,
    /// Rank r sends its block j to rank j. Pairwise: all n-1 writes posted
    /// at once, each rank to every other.
    Alltoall,
    /// The root's buffer reaches every rank: the root writes to each directly.
    Broadcast,
    /// Every rank but the root writes `size` bytes into the root at once
    /// (many-to-one); the root measures each sender.
    Incast,
}

impl Collective {
    /// nccl-tests' bus-bandwidth factor for `ranks` ranks: busbw = algbw x
    /// factor, the figure that, unlike algbw, does not fall as ranks are
    /// added to a link-bound ring, so it compares against the link's speed.
    pub fn bus_factor(self, ranks: u32) -> f64 {
        let n = f64::from(ranks.max(1));
        match self {
            Collective::Allreduce => 2.0 * (n - 1.0) / n,
            Collective::Allgather | Collective::ReduceScatter | Collective::Alltoall => (n - 1.0) / n,
            Collective::Broadcast | Collective::Reduce => 1.0,
            // nccl-tests has no incast; the bytes the root takes in per unit
            // of time are its n-1 senders' sizes.
            Collective::Incast => n - 1.0,
        }
    }

    /// How the agents run it, in a few words (for help and records).
    pub fn algorithm(self) -> &'static str {
        match self {
            Collective::Allreduce => "ring (reduce-scatter + allgather); recursive doubling up to 16 KiB on 2^k ranks",
            Collective::Allgather | Collective::ReduceScatter => "ring",
            Collective::Alltoall => {
                "pairwise (one peer per step) from 128 KiB blocks; smaller blocks to every peer at once"
            }
            Collective::Reduce => "every rank writes to the root at once; the root adds",
            Collective::Broadcast => "root writes to each rank",
            Collective::Incast => "every sender writes to the root at once",
        }
    }

    /// Whether the operation names a root (`--root`).
    pub const fn has_root(self) -> bool {
        matches!(self, Collective::Broadcast | Collective::Incast | Collective::Reduce)
    }
}

/// A fault a run can inject on purpose, to show its verdict catching it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Fault {
    /// One operation is lost: the client counts one that never took effect.
    Skip,
    /// One byte of the data's source is flipped after it was filled.
    Corrupt,
}

impl Fault {
    /// The fault's name as `--inject-fault`, suites and run records spell it.
    pub fn label(self) -> &'static str {
        match self {
            Fault::Skip => "skip",
            Fault::Corrupt => "corrupt",
        }
    }
}

/// How the two sides of a verbs run connect.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Cm {
    /// rdma_cm; the server's {addr, rkey} travels in the accept's private data.
    #[default]
    RdmaCm,
    /// Out of band through the controller, with explicit INIT → RTR → RTS.
    Oob,
}

impl Cm {
    /// The mode as run records spell it.
    pub fn label(self) -> &'static str {
        match self {
            Cm::RdmaCm => "rdma_cm",
            Cm::Oob => "oob",
        }
    }
}

/// How completions are waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Completion {
    /// Busy-poll the CQ.
    Poll,
    /// Sleep on a completion channel.
    Event,
    /// By the device: event on a software device (rxe, siw), poll on a NIC.
    Auto,
}

impl Completion {
    /// The mode as run records spell it.
    pub fn label(self) -> &'static str {
        match self {
            Completion::Poll => "poll",
            Completion::Event => "event",
            Completion::Auto => "auto",
        }
    }
}

/// An option that only some workloads take; the others refuse it before
/// anything runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opt {
    /// `--qps`: spread the work over several QPs (perftest's `-q`).
    Qps,
    /// `--batches`: a number of batches, each carrying its id.
    Batches,
    /// `--ping-pong`: echo every message.
    PingPong,
    /// `--provider`: the libfabric provider.
    Provider,
    /// `--total`: bytes to move in `--size` chunks.
    Total,
    /// `--trace`: a trace of every side (both nodes, or every rank) on one clock.
    Trace,
    /// `--cm oob`: the out-of-band QP exchange.
    CmOob,
    /// `--nodes`: the nodes a collective runs on, one rank each.
    Nodes,
    /// `--root`: the rank a broadcast sends from, an incast receives at.
    Root,
    /// `--warmup`: untimed operations before the timed ones.
    Warmup,
}

impl Opt {
    /// The option as the command line spells it.
    pub fn flag(self) -> &'static str {
        match self {
            Opt::Qps => "--qps",
            Opt::Batches => "--batches",
            Opt::PingPong => "--ping-pong",
            Opt::Provider => "--provider",
            Opt::Total => "--total",
            Opt::Trace => "--trace",
            Opt::CmOob => "--cm oob",
            Opt::Nodes => "--nodes",
            Opt::Root => "--root",
            Opt::Warmup => "--warmup",
        }
    }

    /// The option as suites spell it.
    pub fn key(self) -> &'static str {
        match self {
            Opt::Qps => "qps",
            Opt::Batches => "batches",
            Opt::PingPong => "ping_pong",
            Opt::Provider => "provider",
            Opt::Total => "total",
            Opt::Trace => "trace",
            Opt::CmOob => "cm: oob",
            Opt::Nodes => "nodes",
            Opt::Root => "root",
            Opt::Warmup => "warmup",
        }
    }
}

/// A figure a workload reports (a run record has a field for each; one a
/// workload does not report is not shown for it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Bytes over time: average and peak MiB/s, Gb/s, message rate.
    Bandwidth,
    /// Per-operation latency: perftest's min, typical, max, percentiles.
    Latency,
    /// Registrations with and without a cache (mr-cache).
    MrCache,
    /// A collective's time per operation, algbw and busbw (nccl-tests').
    BusBandwidth,
}

/// What a run uses when neither the command line nor the suite says.
/// Sized for emulated labs (a few MB/s): seconds, not minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Defaults {
    /// Message size, bytes.
    pub size: u64,
    /// Operations.
    pub iterations: u64,
    /// How completions are waited for.
    pub completion: Completion,
    /// Send queue depth (0: the agent's choice).
    pub tx_depth: u32,
    /// Queue pairs.
    pub qps: u32,
    /// Batches (0: not batched).
    pub batches: u32,
    /// Bytes a bulk transfer moves (0: not a bulk transfer).
    pub total: u64,
}

impl Defaults {
    /// `size` x `iterations`, polled completions, everything else the agent's.
    pub const fn of(size: u64, iterations: u64) -> Defaults {
        Defaults {
            size,
            iterations,
            completion: Completion::Poll,
            tx_depth: 0,
            qps: 1,
            batches: 0,
            total: 0,
        }
    }

    /// The same, with completions chosen by the device.
    pub const fn auto(self) -> Defaults {
        Defaults {
            completion: Completion::Auto,
            ..self
        }
    }
}

/// One workload's facts.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// The name `labctl run`, suites and the agent use.
    pub name: &'static str,
    /// What carries its bytes.
    pub family: Family,
    /// Which roles take part.
    pub shape: Shape,
    /// One line: what moves and who verifies it.
    pub doc: &'static str,
    /// Parameters when nothing says otherwise.
    pub defaults: Defaults,
    /// The faults it can inject and then catch in its verdict; every
    /// workload takes at least one.
    pub faults: &'static [Fault],
    /// The options it takes beyond the common ones.
    pub opts: &'static [Opt],
    /// The figures it reports.
    pub metrics: &'static [Metric],
}

impl Workload {
    /// Whether it takes `opt`.
    pub fn takes(&self, opt: Opt) -> bool {
        self.opts.contains(&opt)
    }

    /// Whether it can inject `fault`.
    pub fn injects(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    /// Whether it reports `metric`.
    pub fn reports(&self, metric: Metric) -> bool {
        self.metrics.contains(&metric)
    }

    /// The first option in `asks` it does not take, or the fault it cannot
    /// inject; `None` when it takes everything asked. Both `labctl run` and
    /// a suite's checks refuse a request through this one rule.
    pub fn refuses(&self, asks: &Asks) -> Option<Refused> {
        if let Some(opt) = asks.opts().into_iter().find(|opt| !self.takes(*opt)) {
            return Some(Refused::Opt(opt));
        }
        asks.fault.filter(|f| !self.injects(*f)).map(Refused::Fault)
    }

    /// The faults it takes, as `--inject-fault` spells them ("skip, corrupt").
    pub fn fault_labels(&self) -> String {
        self.faults.iter().map(|f| f.label()).collect::<Vec<_>>().join(", ")
    }
}

/// What a request asks of its workload beyond the common parameters, as
/// `labctl run`'s flags and a suite step's fields both say it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Asks {
    /// A libfabric provider is named.
    pub provider: bool,
    /// A byte total (`--total`) is set.
    pub total: bool,
    /// Both nodes record a trace.
    pub trace: bool,
    /// The connection set-up asked for.
    pub cm: Option<Cm>,
    /// send-recv answers every message.
    pub ping_pong: bool,
    /// A number of batches is set.
    pub batches: bool,
    /// The number of QPs asked for.
    pub qps: Option<u32>,
    /// The fault to inject.
    pub fault: Option<Fault>,
    /// The nodes to run on are listed (collectives).
    pub nodes: bool,
    /// A root rank is named.
    pub root: bool,
    /// Warmup operations are asked for.
    pub warmup: bool,
}

impl Asks {
    /// The options asked for, in the order they are checked.
    pub fn opts(&self) -> Vec<Opt> {
        [
            (Opt::Provider, self.provider),
            (Opt::Total, self.total),
            (Opt::Trace, self.trace),
            (Opt::CmOob, self.cm == Some(Cm::Oob)),
            (Opt::PingPong, self.ping_pong),
            (Opt::Batches, self.batches),
            (Opt::Qps, self.qps.is_some_and(|q| q > 1)),
            (Opt::Nodes, self.nodes),
            (Opt::Root, self.root),
            (Opt::Warmup, self.warmup),
        ]
        .into_iter()
        .filter_map(|(opt, asked)| asked.then_some(opt))
        .collect()
    }
}

/// What a workload refuses of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// An option it does not take.
    Opt(Opt),
    /// A fault it cannot inject (and so could not catch).
    Fault(Fault),
}
