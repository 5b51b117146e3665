//! `labctl bulk`: the same TOTAL bytes moved twice between the same two
//! nodes, once with RDMA WRITE (`bulk-rdma`) and once over TCP (`bulk-tcp`),
//! with the same seed, chunk and queue depth; both runs are ordinary
//! [`crate::run`] runs (verified by the server, saved as usual). This module
//! puts them side by side: per-side elapsed time, MiB/s and CPU, a one-line
//! reading, the throughput timelines as CSV, and charts (PNG and SVG).

use std::path::{Path, PathBuf};
use std::time::Duration;

use agent_proto::v1::Progress;
use lab_results::bulk::{
    leg, reading, summary_csv, summary_path, timeline_csv, timelines, write_plots, BulkRecord, Transport, BULK_SCHEMA,
    TRANSPORTS,
};
use lab_results::plot::PlotError;
use lab_results::run::RunRecord;

use crate::lab::Lab;
use crate::run::{default_params, run_workload, RunError, RunOptions};

/// What to move, where, and where to write the results.
#[derive(Debug, Clone)]
pub struct BulkOptions {
    /// The receiving node.
    pub server: String,
    /// The sending node.
    pub client: String,
    /// Bytes to move.
    pub total: u64,
    /// Bytes per WRITE or per write(2).
    pub chunk: u64,
    /// Seed of the payload pattern.
    pub seed: u64,
    /// WRITEs in flight (0: the agent's default, 128).
    pub tx_depth: u32,
    /// Give up on one transfer after this long.
    pub timeout: Duration,
    /// Write the timelines here (and the summary beside it).
    pub csv: Option<PathBuf>,
    /// Write the charts here; None: under the lab's results directory.
    pub plot_dir: Option<PathBuf>,
}

/// Why `labctl bulk` failed.
#[derive(Debug, thiserror::Error)]
pub enum BulkError {
    /// One of the transfers failed.
    #[error("{transport} transfer: {source}")]
    Run {
        /// Which.
        transport: &'static str,
        /// What went wrong.
        #[source]
        source: RunError,
    },
    /// A chart could not be written.
    #[error(transparent)]
    Plot(#[from] PlotError),
    /// The CSV could not be written.
    #[error("writing {path}: {source}")]
    Csv {
        /// The file.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

/// Runs bulk-rdma, then bulk-tcp, and writes the CSV and charts.
/// `on_progress` sees each transfer's client progress.
pub async fn run_bulk(
    lab: &Lab,
    opts: &BulkOptions,
    mut on_progress: impl FnMut(Transport, &Progress),
) -> Result<BulkRecord, BulkError> {
    let mut runs = Vec::new();
    for transport in TRANSPORTS {
        let mut params = default_params(transport.workload);
        params.total = opts.total;
        params.size = opts.chunk;
        // For the record: how many chunks (the agent counts from total).
        params.iterations = opts.total.div_ceil(opts.chunk.max(1)).max(1);
        params.seed = opts.seed;
        params.tx_depth = opts.tx_depth;
        let run = RunOptions {
            params,
            server: opts.server.clone(),
            client: opts.client.clone(),
            timeout: opts.timeout,
            counters: false,
        };
        let record = run_workload(lab, &run, |p| on_progress(transport, p))
            .await
            .map_err(|source| BulkError::Run {
                transport: transport.label,
                source,
            })?;
        runs.push(record);
    }
    let rdma = leg(TRANSPORTS[0], &runs[0]);
    let tcp = leg(TRANSPORTS[1], &runs[1]);
    let mut record = BulkRecord {
        schema: BULK_SCHEMA,
        lab: lab.spec.name.clone(),
        total: opts.total,
        chunk: opts.chunk,
        seed: opts.seed,
        verified: rdma.verified && tcp.verified,
        reading: reading(&rdma, &tcp),
        rdma,
        tcp,
        csv: None,
        summary_csv: None,
        plots: Vec::new(),
        runs,
    };
    if let Some(path) = &opts.csv {
        let summary = summary_path(path);
        write_file(path, &timeline_csv(&timelines(&record.runs)))?;
        write_file(&summary, &summary_csv(&record))?;
        record.csv = Some(path.display().to_string());
        record.summary_csv = Some(summary.display().to_string());
    }
    let dir = match &opts.plot_dir {
        Some(dir) => dir.clone(),
        None => default_plot_dir(lab, &record.runs[0]),
    };
    record.plots = write_plots(&record, &dir)?
        .into_iter()
        .map(|p| p.display().to_string())
        .collect();
    Ok(record)
}

/// `<results dir>/<rdma run's start>-bulk-<rdma run id>/`, beside the saved runs.
pub fn default_plot_dir(lab: &Lab, first: &RunRecord) -> PathBuf {
    let stamp: String = first.started_at.chars().filter(|c| c.is_ascii_alphanumeric()).collect();
    lab.dir.results_dir().join(format!("{stamp}-bulk-{}", first.id))
}

fn write_file(path: &Path, text: &str) -> Result<(), BulkError> {
    let failed = |source| BulkError::Csv {
        path: path.to_path_buf(),
        source,
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(failed)?;
    }
    std::fs::write(path, text).map_err(failed)
}
