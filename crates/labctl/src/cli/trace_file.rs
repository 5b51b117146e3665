//! `labctl run --trace FILE`: the file, opened before the run so a path
//! that cannot be written fails before anything runs, and what a traced
//! run leaves in it, for pairs and collectives alike.

use std::fs::File;
use std::path::{Path, PathBuf};

use lab_core::agent_proto::v1::{TraceOptions, WorkloadParams};
use lab_core::run::RunError;
use lab_results::trace::{chrome_trace, SideTrace, TraceContext};
use workload_catalogue::Opt;

/// The file a traced run writes.
pub(super) struct TraceFile {
    path: PathBuf,
    file: File,
}

impl TraceFile {
    /// Creates `path` for a run of `workload`; refuses workloads that record no trace.
    fn open(path: &Path, workload: &str) -> anyhow::Result<TraceFile> {
        if let Some(w) = workload_catalogue::find(workload).filter(|w| !w.takes(Opt::Trace)) {
            anyhow::bail!(
                "--trace records verbs and libfabric sessions; `{workload}` is a {} workload: drop --trace",
                w.family.label()
            );
        }
        let file = File::create(path).map_err(|e| {
            anyhow::anyhow!(
                "--trace {}: cannot create the file: {e} (does its directory exist and can you write to it?); nothing was run",
                path.display()
            )
        })?;
        Ok(TraceFile {
            path: path.to_path_buf(),
            file,
        })
    }

    /// The file `--trace` names (`path`), opened before the run, and the
    /// agents asked to record a ring of `max_events` per side into
    /// `params`; None without `--trace`.
    pub(super) fn asked(
        path: Option<&Path>,
        max_events: u32,
        params: &mut WorkloadParams,
    ) -> anyhow::Result<Option<TraceFile>> {
        let Some(path) = path else { return Ok(None) };
        let file = TraceFile::open(path, &params.workload)?;
        params.trace = Some(TraceOptions {
            max_events,
            sample_every: 0,
        });
        Ok(Some(file))
    }

    /// Writes the sides' traces as Chrome trace-event JSON and, unless
    /// `quiet`, says what each holds.
    fn write(self, ctx: &TraceContext, sides: &[SideTrace], quiet: bool) -> anyhow::Result<()> {
        let doc = chrome_trace(ctx, sides);
        serde_json::to_writer(std::io::BufWriter::new(self.file), &doc)
            .map_err(|e| anyhow::anyhow!("writing the trace to {}: {e}", self.path.display()))?;
        if quiet {
            return Ok(());
        }
        for s in sides {
            eprintln!(
                "  trace {:<6} {}: {} events, {} dropped, every {} post/completion, clock {:+.3} ms +/- {:.3} ms, {:.0} ns/event{}",
                s.role,
                s.node,
                s.trace.events.len(),
                s.trace.dropped,
                s.trace.sample_every,
                s.clock.offset_ns as f64 / 1e6,
                s.clock.error_ns as f64 / 1e6,
                s.trace.record_cost_ns,
                s.failed.as_deref().map(|e| format!(", FAILED: {e}")).unwrap_or_default()
            );
        }
        eprintln!(
            "  trace written to {} (open it in https://ui.perfetto.dev)",
            self.path.display()
        );
        Ok(())
    }
}

/// A traced run's outcome, settled with its file: a finished run's record,
/// its traces written (`done` names them); a traced failure writes what
/// every side kept up to it (under `lab`, `workload`) before its error is
/// returned; any other failure recorded nothing, and the file goes.
pub(super) fn settle<R>(
    file: Option<TraceFile>,
    outcome: Result<(R, Option<Vec<SideTrace>>), RunError>,
    (lab, workload): (&str, &str),
    done: impl FnOnce(&R) -> TraceContext,
    quiet: bool,
) -> anyhow::Result<R> {
    match outcome {
        Ok((record, sides)) => {
            if let (Some(file), Some(sides)) = (file, sides) {
                file.write(&done(&record), &sides, quiet)?;
            }
            Ok(record)
        }
        Err(RunError::Traced { error, run_id, traces }) => {
            if let Some(file) = file {
                file.write(&TraceContext::failed(lab, workload, &run_id, &error), &traces, quiet)?;
            }
            Err((*error).into())
        }
        Err(e) => {
            if let Some(file) = file {
                let _ = std::fs::remove_file(&file.path);
            }
            Err(e.into())
        }
    }
}
