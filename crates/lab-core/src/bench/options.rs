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
    /// `Suite::Sweep`: the message sizes.
    pub sweep_sizes: Vec<u64>,
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
