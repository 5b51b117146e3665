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
}

impl Shape {
    /// The roles, in the order the controller starts them.
    pub fn roles(self) -> &'static [&'static str] {
        match self {
            Shape::Pair => &["server", "client"],
        }
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
    /// `--trace`: a trace of both nodes on one clock.
    Trace,
    /// `--cm oob`: the out-of-band QP exchange.
    CmOob,
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
