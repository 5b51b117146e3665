//! `labctl ci`: bring a lab up, run a suite of steps on it, tear it down,
//! and report the outcome as JUnit XML and JSON.
//!
//! The suite (`lab_model::suite`) is a list of steps of five kinds: a
//! workload of the agents (`workload:`, as `labctl run`), files to the nodes
//! (`copy:`) and back as artifacts (`collect:`), the user's command on
//! nodes (`exec:`), and a server/client pair of the user's commands
//! (`pair:`). Each step is one JUnit test case. A failed step does not stop
//! the suite unless it is a `setup: true` step; then the steps after it are
//! not run. Every step has a time limit, and what it started on a node is
//! stopped when the limit passes.
//!
//! This module holds the runner and the checks that need the lab facts'
//! placeholder grammar; the suite model is `lab_model::suite`, the report
//! `lab_results::ci`; the binary adds the signal handling that makes the
//! teardown run on Ctrl-C and SIGTERM.

mod exec_step;
mod files;
mod pair;
mod step;

use std::path::PathBuf;
use std::time::Instant;

use lab_model::suite::{StepKind, Suite, SuiteError};
use lab_results::ci::{not_verified_reason, CaseStatus, CiReport};
use lab_results::run::RunRecord;
use lab_results::trace::{chrome_trace, SideTrace, TraceContext};
use lab_state::progress::Reporter;

use self::step::StepOutcome;
use crate::facts::LabFacts;
use crate::lab::Lab;
use crate::params::WorkloadRequest;
use crate::run::{run_workload_traced, RunError};

/// Where a suite's files are.
#[derive(Debug, Clone)]
pub struct SuiteFiles {
    /// What `copy:` paths are relative to: the suite file's directory (or
    /// the labs file's, for a lab's `ci:` section).
    pub base_dir: PathBuf,
    /// Where `collect:` puts what it fetches.
    pub artifacts_dir: PathBuf,
}

/// Checks the placeholders of every command of `suite` against the lab's
/// nodes and the facts' fields, before anything is created: an unknown
/// placeholder or node is bad input, named with its step.
pub fn check_placeholders(lab: &Lab, suite: &Suite, source_name: &str) -> Result<(), SuiteError> {
    let names: Vec<String> = lab.spec.nodes.iter().map(|n| n.name.clone()).collect();
    let facts = LabFacts::placeholder_check(&lab.spec.name, &names);
    for (index, step) in suite.steps.iter().enumerate() {
        for (node, command) in step.commands() {
            let on = node.as_deref().or(names.first().map(String::as_str));
            for word in command.words() {
                if let Err(e) = facts.expand(&word, on) {
                    return Err(SuiteError::Mismatch {
                        source_name: source_name.to_string(),
                        index,
                        message: format!("{}: {e}", step.name()),
                        fix: "use a placeholder the lab facts have (see docs/lab-facts.md), or write `{{NAME}}` for a literal `{NAME}`".into(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Checks that every `copy:` step's files exist on this machine (relative
/// to `base_dir`), before anything is created: a missing build output is
/// bad input, not a failed step after a two-minute `up`.
pub fn check_local_files(suite: &Suite, base_dir: &std::path::Path, source_name: &str) -> Result<(), SuiteError> {
    for (index, step) in suite.steps.iter().enumerate() {
        if let Some(StepKind::Copy(copy)) = step.kind() {
            for from in &copy.from {
                let path = base_dir.join(from);
                if !path.exists() {
                    return Err(SuiteError::Mismatch {
                        source_name: source_name.to_string(),
                        index,
                        message: format!("{}: copy.from `{from}`: no such file ({})", step.name(), path.display()),
                        fix: "build it before `labctl ci`, or fix the path (relative to the suite file's directory)"
                            .into(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Runs every step of `suite` in order on the running `lab`, filling
/// `report.cases` as each finishes. A failed step does not stop the suite,
/// unless it is a setup step.
pub async fn run_suite(lab: &Lab, suite: &Suite, files: &SuiteFiles, report: &mut CiReport, reporter: &dyn Reporter) {
    let facts = LabFacts::load(&lab.dir);
    let mut failed_setup: Option<String> = None;
    for (index, step) in suite.steps.iter().enumerate() {
        let name = step.name();
        if let Some(setup) = &failed_setup {
            report.cases[index].message = Some(format!("not run: setup step `{setup}` failed"));
            continue;
        }
        let label = format!("[{}/{}] {name}", index + 1, suite.steps.len());
        reporter.begin("ci", &label);
        let started = Instant::now();
        let attempts = step.retries + 1;
        let mut failed_attempts = Vec::new();
        let outcome = loop {
            let outcome = run_step(lab, step, facts.as_ref(), files).await;
            match &outcome.failure {
                Some(why) if (failed_attempts.len() as u32) + 1 < attempts => {
                    let attempt = failed_attempts.len() + 1;
                    let first_line = why.lines().next().unwrap_or_default();
                    reporter.note(
                        "ci",
                        &format!("{name}: attempt {attempt} of {attempts} FAILED: {first_line}; running it again"),
                    );
                    failed_attempts.push(format!("attempt {attempt} of {attempts}: {why}"));
                }
                _ => break outcome,
            }
        };
        let case = &mut report.cases[index];
        case.duration_s = started.elapsed().as_secs_f64();
        case.attempts = failed_attempts.len() as u32 + 1;
        case.failed_attempts = failed_attempts;
        case.status = if outcome.failure.is_none() {
            CaseStatus::Passed
        } else {
            CaseStatus::Failed
        };
        case.message = outcome.failure;
        case.run = outcome.run;
        case.commands = outcome.commands;
        case.transfers = outcome.transfers;
        case.trace = outcome.trace.map(|p| p.display().to_string());
        reporter.end("ci", &label, started.elapsed());
        let verdict = match &case.message {
            None => "passed".to_string(),
            Some(why) => format!("FAILED: {}", why.lines().next().unwrap_or_default()),
        };
        reporter.note("ci", &format!("{name} {verdict}"));
        if case.status == CaseStatus::Failed && step.setup {
            failed_setup = Some(name);
        }
        report.tally();
    }
    if let Some(setup) = failed_setup {
        report.mark_not_run(&format!("setup step `{setup}` failed"));
    }
}

/// One attempt at `step`.
async fn run_step(
    lab: &Lab,
    step: &lab_model::suite::SuiteStep,
    facts: Option<&LabFacts>,
    files: &SuiteFiles,
) -> StepOutcome {
    let timeout = step.timeout();
    match step.kind() {
        Some(StepKind::Workload(_)) => run_workload_step(lab, step).await,
        Some(StepKind::Copy(copy)) => files::run_copy(lab, copy, &files.base_dir, timeout).await,
        Some(StepKind::Collect(collect)) => files::run_collect(lab, collect, &files.artifacts_dir, timeout).await,
        Some(StepKind::Exec(exec)) => exec_step::run_exec(lab, facts, exec, timeout).await,
        Some(StepKind::Pair(pair)) => pair::run_pair(lab, facts, pair, timeout).await,
        None => StepOutcome::failed("the step says nothing to do"),
    }
}

/// A workload step: a `labctl run`; it passes when both sides verified.
async fn run_workload_step(lab: &Lab, step: &lab_model::suite::SuiteStep) -> StepOutcome {
    let opts = match WorkloadRequest::from(step).run_options() {
        Ok(opts) => opts,
        Err(e) => return StepOutcome::failed(e.to_string()),
    };
    let mut opts = opts;
    if step.trace {
        // The ring size and sampling of `labctl run --trace`'s defaults.
        opts.params.trace = Some(agent_proto::v1::TraceOptions::default());
    }
    match run_workload_traced(lab, &opts, |_| {}).await {
        Ok((record, traces)) => {
            let mut failure = (!record.verified).then(|| not_verified_reason(&record));
            let trace = match traces.map(|sides| write_step_trace(&record, &sides)) {
                Some(Ok(path)) => Some(path),
                Some(Err(e)) => {
                    failure.get_or_insert(e);
                    None
                }
                None => None,
            };
            StepOutcome {
                failure,
                run: Some(record),
                trace,
                ..StepOutcome::default()
            }
        }
        Err(RunError::Traced { error, run_id, traces }) => {
            let mut outcome = StepOutcome::failed(error.to_string());
            match write_failed_step_trace(lab, &opts.params.workload, &run_id, &error, &traces) {
                Ok(path) => outcome.trace = Some(path),
                Err(e) => outcome.failure = Some(format!("{error}; and its trace: {e}")),
            }
            outcome
        }
        Err(e) => StepOutcome::failed(e.to_string()),
    }
}

/// Writes a failed traced step's trace where its record would have gone
/// (`<stamp>-<workload>-<run id>.trace.json` in the lab's results).
fn write_failed_step_trace(
    lab: &Lab,
    workload: &str,
    run_id: &str,
    error: &RunError,
    sides: &[SideTrace],
) -> Result<PathBuf, String> {
    let ctx = TraceContext {
        lab: lab.spec.name.clone(),
        workload: workload.to_string(),
        run_id: run_id.to_string(),
        error: Some(error.to_string()),
    };
    let text = serde_json::to_vec(&chrome_trace(&ctx, sides)).map_err(|e| format!("the trace: {e}"))?;
    lab.dir
        .save_result(&lab_state::now_rfc3339(), &format!("{workload}-{run_id}.trace"), &text)
        .map_err(|e| format!("writing the trace: {e}"))
}

/// Writes a traced step's trace next to its run record (`<record>.trace.json`).
fn write_step_trace(record: &RunRecord, sides: &[SideTrace]) -> Result<PathBuf, String> {
    let saved = record
        .saved_to
        .as_deref()
        .ok_or("the run record was not saved, so its trace has no place")?;
    let path = PathBuf::from(saved.strip_suffix(".json").unwrap_or(saved).to_string() + ".trace.json");
    let ctx = TraceContext {
        lab: record.lab.clone(),
        workload: record.workload.clone(),
        run_id: record.id.clone(),
        error: None,
    };
    let text = serde_json::to_vec(&chrome_trace(&ctx, sides)).map_err(|e| format!("the trace: {e}"))?;
    std::fs::write(&path, text).map_err(|e| format!("writing the trace to {}: {e}", path.display()))?;
    Ok(path)
}
