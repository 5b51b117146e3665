//! `labctl ci`: bring a lab up, run a suite of steps on it, tear it down,
//! and report the outcome as JUnit XML and JSON.
//!
//! The suite (`lab_model::suite`) is a list of steps of five kinds: a
//! workload of the agents (`workload:`, a pair or a collective, as `labctl
//! run`), files to the nodes
//! (`copy:`) and back as artifacts (`collect:`), the user's command on
//! nodes (`exec:`), and a server/client pair of the user's commands
//! (`pair:`). Each step is one JUnit test case. A failed step does not stop
//! the suite unless it is a `setup: true` step; then the steps after it are
//! not run. Every step has a time limit, and what it started on a node is
//! stopped when the limit passes. `retries:` runs a step again when its
//! program or run failed, never when a workload's bytes did not verify
//! ([`retry`]).
//!
//! After the steps, each entry of the lab's and the suite's `expect:` is a
//! case of its own: node facts as `doctor` reads them, workload figures by
//! a run each ([`crate::expect`]).
//!
//! This module holds the runner and the checks that need the lab facts'
//! placeholder grammar; the suite model is `lab_model::suite`, the report
//! `lab_results::ci`; the binary adds the signal handling that makes the
//! teardown run on Ctrl-C and SIGTERM.

mod exec_step;
mod files;
mod gid_index;
mod pair;
mod step;

use std::path::PathBuf;
use std::time::Instant;

use lab_model::suite::{StepKind, Suite, SuiteError};
use lab_results::ci::{not_verified_reason, CaseStatus, CiReport, FailureKind};
use lab_results::expect::{expect_cases, misses, ExpectCase};
use lab_results::run::RunRecord;
use lab_results::trace::{chrome_trace, SideTrace, TraceContext};
use lab_state::progress::Reporter;

use self::step::StepOutcome;
use crate::collective::run_collective_traced;
use crate::facts::LabFacts;
use crate::lab::Lab;
use crate::params::{collective_options, run_options};
use crate::run::{run_workload_traced, RunError};
use lab_model::request::WorkloadRequest;

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
        let mut not_retried = None;
        let outcome = loop {
            let outcome = run_step(lab, step, facts.as_ref(), files).await;
            let (Some(why), Some(kind)) = (&outcome.failure, outcome.failure_kind()) else {
                break outcome;
            };
            let attempt = failed_attempts.len() as u32 + 1;
            match retry(kind, attempt, attempts) {
                Retry::Again => {
                    let first_line = why.lines().next().unwrap_or_default();
                    reporter.note(
                        "ci",
                        &format!("{name}: attempt {attempt} of {attempts} FAILED: {first_line}; running it again"),
                    );
                    failed_attempts.push(format!("attempt {attempt} of {attempts}: {why}"));
                }
                Retry::Final(why_not) => {
                    if let Some(why_not) = &why_not {
                        reporter.note("ci", &format!("{name}: {why_not}"));
                    }
                    not_retried = why_not;
                    break outcome;
                }
            }
        };
        let case = &mut report.cases[index];
        case.duration_s = started.elapsed().as_secs_f64();
        case.attempts = failed_attempts.len() as u32 + 1;
        case.failed_attempts = failed_attempts;
        case.failure = outcome.failure_kind();
        case.not_retried = not_retried;
        case.status = if outcome.failure.is_none() {
            CaseStatus::Passed
        } else {
            CaseStatus::Failed
        };
        case.message = outcome.failure;
        case.run = outcome.run;
        case.collective = outcome.collective;
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
        return;
    }
    run_expectations(lab, suite, report, reporter).await;
}

/// The cases of the lab's and the suite's `expect:`, after the steps: the
/// node facts from one read of every node (as `doctor` reads them, without
/// its pair runs), then each workload figure by a run of its own between
/// the lab's first two nodes.
async fn run_expectations(lab: &Lab, suite: &Suite, report: &mut CiReport, reporter: &dyn Reporter) {
    let expect = lab.spec.expect.overlaid(&suite.expect);
    let cases = expect_cases(&expect);
    let first = suite.steps.len();
    // The nodes are read once for every fact; the first fact's case gets the time.
    let reading = Instant::now();
    let facts = if cases.iter().any(|(_, c)| matches!(c, ExpectCase::NodeFact(_))) {
        let opts = crate::doctor::DoctorOptions {
            no_run: true,
            expect: Some(expect.clone()),
        };
        Some(
            lab.doctor(&opts, |_| {})
                .await
                .map(|r| r.expectations)
                .map_err(|e| e.to_string()),
        )
    } else {
        None
    };
    let nodes: Vec<&str> = lab.spec.nodes.iter().map(|n| n.name.as_str()).collect();
    let at = crate::expect::Placement {
        server: nodes[0].to_string(),
        client: nodes.get(1).unwrap_or(&nodes[0]).to_string(),
        timeout: std::time::Duration::from_secs(120),
    };
    let mut read_time = Some(reading.elapsed());
    let total = first + cases.len();
    for (k, (name, case)) in cases.into_iter().enumerate() {
        let label = format!("[{}/{total}] {name}", first + k + 1);
        reporter.begin("ci", &label);
        let started = Instant::now();
        let before = match case {
            ExpectCase::NodeFact(_) => read_time.take().unwrap_or_default(),
            ExpectCase::Workload(_) => std::time::Duration::ZERO,
        };
        let outcomes = match (&case, &facts) {
            (ExpectCase::NodeFact(fact), Some(Ok(all))) => {
                Ok(all.iter().filter(|o| o.what == *fact).cloned().collect())
            }
            (ExpectCase::NodeFact(_), Some(Err(e))) => Err(format!("the nodes could not be read: {e}")),
            (ExpectCase::NodeFact(_), None) => Err("the nodes were not read".to_string()),
            (ExpectCase::Workload(w), _) => Ok(vec![crate::expect::measure(lab, &expect, w, &at).await]),
        };
        let case = &mut report.cases[first + k];
        case.duration_s = (before + started.elapsed()).as_secs_f64();
        case.attempts = 1;
        match outcomes {
            Ok(outcomes) => {
                let missed: Vec<&str> = misses(&outcomes).map(|o| o.message.as_str()).collect();
                case.status = if missed.is_empty() && !outcomes.is_empty() {
                    CaseStatus::Passed
                } else {
                    CaseStatus::Failed
                };
                case.message = match (missed.is_empty(), outcomes.is_empty()) {
                    (true, false) => None,
                    (true, true) => Some("no node answered".into()),
                    (false, _) => Some(missed.join("\n")),
                };
                case.expectations = outcomes;
            }
            Err(e) => {
                case.status = CaseStatus::Failed;
                case.message = Some(e);
            }
        }
        case.failure = (case.status == CaseStatus::Failed).then_some(FailureKind::Run);
        reporter.end("ci", &label, started.elapsed());
        let verdict = match &case.message {
            None => "passed".to_string(),
            Some(why) => format!("FAILED: {}", why.lines().next().unwrap_or_default()),
        };
        reporter.note("ci", &format!("{name} {verdict}"));
        report.tally();
    }
}

/// What follows a failed attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Retry {
    /// Run the step again.
    Again,
    /// The failure stands; with why, when retries were left.
    Final(Option<String>),
}

/// Whether failed attempt `attempt` (from 1) of `attempts` is run again.
/// A failure outside the data (an exit status, an error, a refused report,
/// a timeout) is, while attempts are left. A workload's verification
/// failure never is: a second attempt that passes would turn intermittent
/// corruption into "passed on attempt 2".
fn retry(kind: FailureKind, attempt: u32, attempts: u32) -> Retry {
    let left = attempts.saturating_sub(attempt);
    match kind {
        FailureKind::Run if left > 0 => Retry::Again,
        FailureKind::Run => Retry::Final(None),
        FailureKind::Verification if left > 0 => Retry::Final(Some(format!(
            "not retried ({left} {} left): a verification failure is final, since a run that passes \
             after it would hide intermittent corruption",
            if left == 1 { "retry" } else { "retries" }
        ))),
        FailureKind::Verification => Retry::Final(None),
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

/// A workload step: a `labctl run`; it passes when both sides (every
/// rank) verified.
async fn run_workload_step(lab: &Lab, step: &lab_model::suite::SuiteStep) -> StepOutcome {
    let request = step.request();
    if workload_catalogue::find(&request.workload).is_some_and(|w| w.shape.collective().is_some()) {
        return run_collective_step(lab, step, &request).await;
    }
    let opts = match run_options(&request) {
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
            let failure = (!record.verified).then(|| not_verified_reason(&record));
            let written = traces.map(|sides| write_step_trace(&record, &sides));
            StepOutcome {
                run: Some(record),
                ..StepOutcome::finished(failure, written)
            }
        }
        Err(RunError::Traced { error, run_id, traces }) => {
            failed_traced_step(lab, &opts.params.workload, &run_id, &error, &traces)
        }
        Err(e) => StepOutcome::failed(e.to_string()),
    }
}

/// A collective step: a `labctl run COLLECTIVE` across the step's nodes.
async fn run_collective_step(lab: &Lab, step: &lab_model::suite::SuiteStep, request: &WorkloadRequest) -> StepOutcome {
    let mut opts = match collective_options(request) {
        Ok(opts) => opts,
        Err(e) => return StepOutcome::failed(e.to_string()),
    };
    if step.trace {
        opts.params.trace = Some(agent_proto::v1::TraceOptions::default());
    }
    match run_collective_traced(lab, &opts, |_, _| {}).await {
        Ok((record, traces)) => {
            let failure = (!record.verified).then(|| format!("not verified: {}", record.verify_detail));
            let ctx = TraceContext::finished(&record.lab, &record.collective, &record.id);
            let written = traces.map(|ranks| write_trace_beside(record.saved_to.as_deref(), &ctx, &ranks));
            StepOutcome {
                collective: Some(record),
                ..StepOutcome::finished(failure, written)
            }
        }
        Err(RunError::Traced { error, run_id, traces }) => {
            failed_traced_step(lab, &opts.params.workload, &run_id, &error, &traces)
        }
        Err(e) => StepOutcome::failed(e.to_string()),
    }
}

/// A traced step whose run failed: the run's error, and its trace written
/// where the record would have gone (or why it could not be).
fn failed_traced_step(lab: &Lab, workload: &str, run_id: &str, error: &RunError, traces: &[SideTrace]) -> StepOutcome {
    let mut outcome = StepOutcome::failed(error.to_string());
    match write_failed_step_trace(lab, workload, run_id, error, traces) {
        Ok(path) => outcome.trace = Some(path),
        Err(e) => outcome.failure = Some(format!("{error}; and its trace: {e}")),
    }
    outcome
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
    let ctx = TraceContext::failed(&lab.spec.name, workload, run_id, error);
    let text = serde_json::to_vec(&chrome_trace(&ctx, sides)).map_err(|e| format!("the trace: {e}"))?;
    lab.dir
        .save_result(&lab_state::now_rfc3339(), &format!("{workload}-{run_id}.trace"), &text)
        .map_err(|e| format!("writing the trace: {e}"))
}

/// Writes a traced step's trace next to its run record (`<record>.trace.json`).
fn write_step_trace(record: &RunRecord, sides: &[SideTrace]) -> Result<PathBuf, String> {
    let ctx = TraceContext::finished(&record.lab, &record.workload, &record.id);
    write_trace_beside(record.saved_to.as_deref(), &ctx, sides)
}

/// Writes a trace next to the record saved at `saved` (`<record>.trace.json`).
fn write_trace_beside(saved: Option<&str>, ctx: &TraceContext, sides: &[SideTrace]) -> Result<PathBuf, String> {
    let saved = saved.ok_or("the run record was not saved, so its trace has no place")?;
    let path = PathBuf::from(saved.strip_suffix(".json").unwrap_or(saved).to_string() + ".trace.json");
    let text = serde_json::to_vec(&chrome_trace(ctx, sides)).map_err(|e| format!("the trace: {e}"))?;
    std::fs::write(&path, text).map_err(|e| format!("writing the trace to {}: {e}", path.display()))?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_a_verification_failure_is_final_and_says_why_while_retries_are_left() {
        match retry(FailureKind::Verification, 1, 3) {
            Retry::Final(Some(why)) => {
                assert!(
                    why.starts_with("not retried (2 retries left): a verification failure is final"),
                    "{why}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(retry(FailureKind::Verification, 2, 3), Retry::Final(Some(w)) if w.contains("(1 retry left)"))
        );
        // Without retries there is nothing to say.
        assert_eq!(retry(FailureKind::Verification, 1, 1), Retry::Final(None));
    }

    #[test]
    fn test_a_run_failure_is_retried_until_the_attempts_run_out() {
        assert_eq!(retry(FailureKind::Run, 1, 3), Retry::Again);
        assert_eq!(retry(FailureKind::Run, 2, 3), Retry::Again);
        assert_eq!(retry(FailureKind::Run, 3, 3), Retry::Final(None));
        assert_eq!(retry(FailureKind::Run, 1, 1), Retry::Final(None));
    }

    #[test]
    fn test_a_workload_outcome_that_did_not_verify_is_a_verification_failure() {
        let bad = StepOutcome {
            failure: Some("not verified: server did not verify: byte 17 differs".into()),
            verification_failed: true,
            ..StepOutcome::default()
        };
        assert_eq!(bad.failure_kind(), Some(FailureKind::Verification));
        assert_eq!(
            StepOutcome::failed("rdma-agent did not answer Run").failure_kind(),
            Some(FailureKind::Run)
        );
        assert_eq!(StepOutcome::default().failure_kind(), None);
    }
}
