//! `labctl ci`: bring a lab up, run a suite of workloads on it, tear it down,
//! and report the outcome as JUnit XML and JSON.
//!
//! The suite is a list of workload runs, from the lab's `ci:` section in
//! labs.yaml or from a suite file of the same shape:
//!
//! ```yaml
//! workloads:
//!   - workload: write-read
//!   - name: send-recv-8k
//!     workload: send-recv
//!     size: 8192
//! ```
//!
//! Each entry becomes one JUnit test case. An entry passes when the run
//! finished and both sides verified their bytes; otherwise the case's failure
//! message says why (the verification detail, or the error). This module
//! holds the runner; the suite model is `lab_model::suite`, the report
//! `lab_results::ci`; the binary adds the signal handling that makes the
//! teardown run on Ctrl-C and SIGTERM.

use std::time::Instant;

use lab_model::suite::Suite;
use lab_results::ci::{not_verified_reason, CaseStatus, CiReport};
use lab_state::progress::Reporter;

use crate::lab::Lab;
use crate::params::WorkloadRequest;
use crate::run::run_workload;

/// Runs every entry of `suite` in order on the running `lab`, filling
/// `report.cases` as each finishes. A failed entry does not stop the suite.
pub async fn run_suite(lab: &Lab, suite: &Suite, report: &mut CiReport, reporter: &dyn Reporter) {
    for (index, entry) in suite.workloads.iter().enumerate() {
        let step = format!("[{}/{}] {}", index + 1, suite.workloads.len(), entry.name());
        reporter.begin("ci", &step);
        let started = Instant::now();
        let result = match WorkloadRequest::from(entry).run_options() {
            Ok(opts) => run_workload(lab, &opts, |_| {}).await.map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let duration_s = started.elapsed().as_secs_f64();
        let case = &mut report.cases[index];
        case.duration_s = duration_s;
        match result {
            Ok(record) => {
                if record.verified {
                    case.status = CaseStatus::Passed;
                    case.message = None;
                } else {
                    case.status = CaseStatus::Failed;
                    case.message = Some(not_verified_reason(&record));
                }
                case.run = Some(record);
            }
            Err(why) => {
                case.status = CaseStatus::Failed;
                case.message = Some(why);
            }
        }
        reporter.end("ci", &step, started.elapsed());
        let verdict = match &case.message {
            None => "passed".to_string(),
            Some(why) => format!("FAILED: {}", why.lines().next().unwrap_or_default()),
        };
        reporter.note("ci", &format!("{} {verdict}", entry.name()));
        report.tally();
    }
}
