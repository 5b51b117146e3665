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

use std::time::{Duration, Instant};

use lab_model::suite::{Suite, SuiteCm, SuiteCompletion, SuiteEntry, DEFAULT_TIMEOUT_S};
use lab_results::ci::{not_verified_reason, CaseStatus, CiReport};
use lab_state::progress::Reporter;

use crate::lab::Lab;
use crate::run::{default_params, run_workload, RunOptions};

/// What [`run_workload`] needs for a suite entry.
pub fn run_options(entry: &SuiteEntry) -> RunOptions {
    let mut params = default_params(&entry.workload);
    if let Some(size) = entry.size {
        params.size = size;
    }
    if let Some(n) = entry.iterations {
        params.iterations = n;
    }
    if let Some(d) = entry.duration_s {
        params.iterations = 0;
        params.duration_s = d as f64;
    }
    if let Some(cm) = entry.cm {
        params.set_cm(match cm {
            SuiteCm::RdmaCm => agent_proto::v1::CmMode::RdmaCm,
            SuiteCm::Oob => agent_proto::v1::CmMode::Oob,
        });
    }
    if let Some(completion) = entry.completion {
        params.set_completion(match completion {
            SuiteCompletion::Poll => agent_proto::v1::CompletionMode::Poll,
            SuiteCompletion::Event => agent_proto::v1::CompletionMode::Event,
        });
    }
    params.num_qps = entry.qps.unwrap_or(params.num_qps);
    params.ping_pong = entry.ping_pong;
    params.batches = entry.batches.unwrap_or(params.batches);
    params.seed = entry.seed.unwrap_or(params.seed);
    params.corrupt_rkey = entry.corrupt_rkey;
    if let Some(provider) = &entry.provider {
        params.provider = provider.clone();
    }
    RunOptions {
        params,
        server: entry.server().to_string(),
        client: entry.client().to_string(),
        timeout: Duration::from_secs(entry.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)),
        counters: false,
    }
}

/// Runs every entry of `suite` in order on the running `lab`, filling
/// `report.cases` as each finishes. A failed entry does not stop the suite.
pub async fn run_suite(lab: &Lab, suite: &Suite, report: &mut CiReport, reporter: &dyn Reporter) {
    for (index, entry) in suite.workloads.iter().enumerate() {
        let step = format!("[{}/{}] {}", index + 1, suite.workloads.len(), entry.name());
        reporter.begin("ci", &step);
        let started = Instant::now();
        let result = run_workload(lab, &run_options(entry), |_| {}).await;
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
            Err(e) => {
                case.status = CaseStatus::Failed;
                case.message = Some(e.to_string());
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

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lab_model::suite::SuiteError;

    use super::*;

    fn suite(text: &str) -> Result<Suite, SuiteError> {
        Suite::parse(Path::new("suite.yaml"), text)
    }

    #[test]
    fn test_entry_fields_become_run_parameters() {
        let s = suite(
            "workloads:\n  - workload: send-recv\n    size: 8192\n    iterations: 3\n    cm: oob\n    completion: event\n    ping_pong: true\n    timeout_s: 30\n",
        )
        .unwrap();
        let opts = run_options(&s.workloads[0]);
        assert_eq!((opts.params.size, opts.params.iterations), (8192, 3));
        assert_eq!(opts.params.cm(), agent_proto::v1::CmMode::Oob);
        assert_eq!(opts.params.completion(), agent_proto::v1::CompletionMode::Event);
        assert!(opts.params.ping_pong);
        assert_eq!(opts.timeout, Duration::from_secs(30));
        assert_eq!((opts.server.as_str(), opts.client.as_str()), ("server", "client"));
        // Unset fields keep the workload's defaults, as `labctl run` does.
        let d = run_options(&suite("workloads:\n  - workload: write-bw\n").unwrap().workloads[0]);
        assert_eq!(d.params, default_params("write-bw"));
        assert_eq!(d.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
    }
}
