//! `labctl report`: past runs, collectives and benches, read back from the
//! lab's results directory; one listed or shown, two compared metric by
//! metric (a regression diff), runs and collectives exported as CSV, size
//! sweeps plotted.
//!
//! Records are the JSON files `labctl run` and `labctl bench` save (see
//! [`lab_state::LabDir::save_result`]). They are read with serde, leniently:
//! unknown fields are ignored and missing ones take their defaults, so records
//! of older and newer labctl versions load; a file that is not a record at all
//! is skipped with a warning naming it.

mod collectives;
mod compare;
mod export;
mod saved;

pub use collectives::{collective_charts, has_sweep, plot_collectives};
pub use compare::{compare, judge_change, Better, Comparison, MetricChange, ParamDiff, Verdict};
pub use export::{plot_sweeps, runs_csv, sweep_csv, RUN_COLUMNS, SWEEP_COLUMNS};
pub(crate) use saved::{amount, positive};
pub use saved::{
    list_row, load_dir, parse_record, resolve, ListRow, Record, ReportError, Saved, Skipped, DEFAULT_THRESHOLD_PCT,
};

#[cfg(test)]
mod tests;
