//! What labctl's runs leave behind, and what can be read off it.
//!
//! This crate owns the records: a run's ([`run`]), a bench's ([`bench`]), a
//! bulk comparison's ([`bulk`]) and a CI run's ([`ci`], with its JUnit XML),
//! the conversions from the agents' replies into them, and everything that
//! only reads them: [`report`] (list, show, compare, CSV, sweep plots) and
//! the [`plot`] module that draws charts as PNG and SVG; and [`topology`],
//! a lab's nodes, data network, RDMA devices and agents drawn as Mermaid,
//! DOT or SVG (`labctl graph`).
//!
//! It must not run anything: no SSH, no agent calls, no provider. Records
//! come in as values or files and go out as text, JSON, CSV and pictures.
//!
//! # Layout
//! - [`run`]: the run record and its parts.
//! - [`bench`]: the bench record (pairs, samples, statistics, verdicts).
//! - [`bulk`]: the bulk record, its CSVs and charts.
//! - [`ci`]: the CI report and its JUnit XML.
//! - [`collective`]: a collective run's record: every rank, and algbw/busbw
//!   as nccl-tests defines them.
//! - [`doctor`]: the `labctl doctor` report: per-node and per-pair checks.
//! - [`expect`]: `expect:` entries met or missed, with the figure and the gap.
//! - [`trace`]: `labctl run --trace`: clock offsets and both sides' events
//!   as Chrome trace-event JSON (Perfetto).
//! - [`trace_view`]: a trace file read back as a terminal swimlane
//!   (`labctl trace show`).
//! - [`report`]: saved records loaded back, compared, exported, plotted.
//! - [`html`]: `labctl report html`, one self-contained page of charts,
//!   numbers, topology and a trace timeline.
//! - [`plot`]: line and bar charts (plotters, embedded font); one tick
//!   formatter and one colour per transport for every chart.
//! - [`topology`]: the lab's topology model and its Mermaid, DOT and SVG
//!   (layout-rs) renderings.
#![warn(missing_docs)]

pub mod bench;
pub mod bulk;
pub mod ci;
pub mod collective;
pub mod doctor;
pub mod expect;
pub mod html;
pub mod number;
pub mod plot;
pub mod report;
pub mod run;
pub mod sweep_chart;
pub mod topology;
pub mod trace;
pub mod trace_view;

#[cfg(test)]
pub(crate) mod fixtures;
