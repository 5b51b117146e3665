//! What a bench is asked to run, and how it fails as a whole (a single
//! run fails into its sample instead).

use std::time::Duration;

use lab_results::bench::Suite;

use crate::lab::LabError;
use crate::run::RunError;

/// What to run, where.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// The suite.
    pub suite: Suite,
    /// Measured rounds of (reference, ours) per pair, in ABBA order.
    pub rounds: u32,
    /// Warm-up rounds per pair before the measured ones: run, shown, not counted.
    pub warmup: u32,
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
    /// `Suite::Sweep`: the message sizes; `Suite::Collectives`: the
    /// operations' sizes (empty: its defaults).
    pub sweep_sizes: Vec<u64>,
    /// `Suite::Collectives`: what Open MPI's side moves its bytes over.
    pub mpi_transport: MpiTransport,
    /// The figures to measure after the pairs instead of the lab's
    /// `expect:` (`--expect FILE`); None: the lab's.
    pub expect: Option<lab_model::expect::Expectations>,
}

/// The transport Open MPI's side of the collectives suite is told to use.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum MpiTransport {
    /// The ob1 PML with the tcp BTL on the data link's interface: runs
    /// anywhere, and the only one that ran on rxe under QEMU (UCX's UD
    /// setup timed out; Debian's openib BTL has no rdmacm CPC).
    #[default]
    Tcp,
    /// The ucx PML on the data path's RDMA device.
    Ucx,
}

impl MpiTransport {
    /// The transport as records and `--mpi-transport` spell it.
    pub fn label(self) -> &'static str {
        match self {
            MpiTransport::Tcp => "tcp",
            MpiTransport::Ucx => "ucx",
        }
    }
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

impl From<RunError> for BenchError {
    fn from(e: RunError) -> Self {
        BenchError::Setup(e.to_string())
    }
}
