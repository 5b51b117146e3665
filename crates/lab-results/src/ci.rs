//! CI reports: the outcome of one `labctl ci` (the lab's `up`, one case per
//! suite entry, the teardown) as JSON and as JUnit XML.
//!
//! This module owns the report's shape and its JUnit rendering; running the
//! suite is the orchestration crate's job.

use std::time::Duration;

use lab_model::suite::Suite;
use lab_model::LabSpec;
use serde::Serialize;

use crate::run::RunRecord;

/// Version of the JSON report layout.
pub const CI_SCHEMA: u32 = 1;
/// The outcome of one suite entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CaseStatus {
    /// It ran and both sides verified.
    Passed,
    /// It ran and did not verify, or it failed.
    Failed,
    /// It never ran: `up` failed, or the suite was interrupted first.
    NotRun,
}

/// One entry's result.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The test case's name.
    pub name: String,
    /// The workload.
    pub workload: String,
    /// The outcome.
    pub status: CaseStatus,
    /// Seconds the case took.
    pub duration_s: f64,
    /// Why it did not pass; null when it passed.
    pub message: Option<String>,
    /// The run record, when the run finished.
    pub run: Option<RunRecord>,
}

/// A step of the lab's lifecycle within `ci` (up or down).
#[derive(Debug, Clone, Default, Serialize)]
pub struct StepResult {
    /// It ran.
    pub ran: bool,
    /// It succeeded.
    pub ok: bool,
    /// Seconds it took.
    pub duration_s: f64,
    /// Why it failed.
    pub error: Option<String>,
}

/// The whole `labctl ci` run: what `--json` prints and what is saved.
#[derive(Debug, Clone, Serialize)]
pub struct CiReport {
    /// [`CI_SCHEMA`].
    pub schema: u32,
    /// The lab.
    pub lab: String,
    /// Its provider.
    pub provider: String,
    /// Its fabric.
    pub fabric: String,
    /// Where the suite came from.
    pub suite: String,
    /// When `ci` started, RFC 3339.
    pub started_at: String,
    /// Seconds from start to the end of the teardown.
    pub duration_s: f64,
    /// `labctl up`.
    pub up: StepResult,
    /// One per suite entry, in suite order.
    pub cases: Vec<CaseResult>,
    /// Cases that passed.
    pub passed: usize,
    /// Cases that failed.
    pub failed: usize,
    /// Cases that never ran.
    pub not_run: usize,
    /// `interrupted` or `terminated` when a signal stopped the suite.
    pub signal: Option<String>,
    /// The teardown (`ran: false` with `--keep`).
    pub down: StepResult,
}

impl CiReport {
    /// An empty report for `suite` on `lab`; every case starts as not run.
    pub fn new(lab: &LabSpec, suite: &Suite, suite_name: &str) -> CiReport {
        CiReport {
            schema: CI_SCHEMA,
            lab: lab.name.clone(),
            provider: lab.provider.to_string(),
            fabric: lab.fabric.to_string(),
            suite: suite_name.to_string(),
            started_at: lab_state::now_rfc3339(),
            duration_s: 0.0,
            up: StepResult::default(),
            cases: suite
                .workloads
                .iter()
                .map(|e| CaseResult {
                    name: e.name().to_string(),
                    workload: e.workload.clone(),
                    status: CaseStatus::NotRun,
                    duration_s: 0.0,
                    message: Some("not run".into()),
                    run: None,
                })
                .collect(),
            passed: 0,
            failed: 0,
            not_run: suite.workloads.len(),
            signal: None,
            down: StepResult::default(),
        }
    }

    /// Recounts passed, failed and not run.
    pub fn tally(&mut self) {
        let count = |s: CaseStatus| self.cases.iter().filter(|c| c.status == s).count();
        (self.passed, self.failed, self.not_run) = (
            count(CaseStatus::Passed),
            count(CaseStatus::Failed),
            count(CaseStatus::NotRun),
        );
    }

    /// Marks the cases that never ran with the reason.
    pub fn mark_not_run(&mut self, why: &str) {
        for case in &mut self.cases {
            if case.status == CaseStatus::NotRun {
                case.message = Some(format!("not run: {why}"));
            }
        }
        self.tally();
    }

    /// Everything ran, passed, and the lab came up and went down cleanly.
    pub fn success(&self) -> bool {
        self.up.ok && self.signal.is_none() && self.failed == 0 && self.not_run == 0 && (self.down.ok || !self.down.ran)
    }

    /// The report as JUnit XML: one test suite (the lab), one test case per
    /// entry; failures carry the reason as message and the run's details as
    /// text; cases that never ran are errors.
    pub fn junit_xml(&self) -> String {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let mut report = Report::new("labctl ci");
        let mut suite = TestSuite::new(format!("lab {}", self.lab));
        suite.set_time(Duration::from_secs_f64(self.duration_s.max(0.0)));
        for case in &self.cases {
            let status = match case.status {
                CaseStatus::Passed => TestCaseStatus::success(),
                CaseStatus::Failed | CaseStatus::NotRun => {
                    let kind = if case.status == CaseStatus::Failed {
                        NonSuccessKind::Failure
                    } else {
                        NonSuccessKind::Error
                    };
                    let mut status = TestCaseStatus::non_success(kind);
                    let message = case.message.clone().unwrap_or_default();
                    status.set_message(message.lines().next().unwrap_or_default().to_string());
                    status.set_description(message);
                    status
                }
            };
            let mut test = TestCase::new(case.name.clone(), status);
            test.set_classname(format!("labctl.ci.{}", self.lab));
            test.set_time(Duration::from_secs_f64(case.duration_s.max(0.0)));
            if let Some(run) = &case.run {
                test.set_system_out(run_summary(run));
            }
            suite.add_test_case(test);
        }
        report.add_test_suite(suite);
        report.to_string().expect("a JUnit report of plain strings serialises")
    }
}

/// A short text of a run, for the JUnit case's system-out.
fn run_summary(r: &RunRecord) -> String {
    let mut out = format!(
        "{} {} -> {}: verified {}, {} bytes, {} ops in {:.3} s, avg {:.2} MiB/s\n",
        r.workload,
        r.client.node,
        r.server.node,
        r.verified,
        r.client.bytes,
        r.client.ops,
        r.client.elapsed_s,
        r.bw_avg_mib_s
    );
    for side in [&r.client, &r.server] {
        if !side.verify_detail.is_empty() {
            out.push_str(&format!("{}: {}\n", side.node, side.verify_detail));
        }
    }
    if let Some(path) = &r.saved_to {
        out.push_str(&format!("saved {path}\n"));
    }
    out
}

/// Why a finished run did not pass, from both sides' own verdicts.
pub fn not_verified_reason(r: &RunRecord) -> String {
    let mut parts = Vec::new();
    for side in [&r.client, &r.server] {
        if side.checked && !side.verified {
            parts.push(format!("{} did not verify: {}", side.node, side.verify_detail));
        }
    }
    if parts.is_empty() {
        "not verified: neither side checked the bytes".into()
    } else {
        format!("not verified: {}", parts.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use lab_model::LabsFile;

    use super::*;
    use crate::run::{NodePair, NodeRecord, ParamsRecord, SideRecord};

    fn lab() -> LabSpec {
        let text = "labs:\n  - name: t\n    nodes:\n      - name: server\n      - name: client\n";
        LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0].clone()
    }

    fn suite(text: &str) -> Result<Suite, lab_model::suite::SuiteError> {
        Suite::parse(Path::new("suite.yaml"), text)
    }

    fn record(verified: bool) -> RunRecord {
        let side = |node: &str, ok: bool| SideRecord {
            node: node.into(),
            checked: true,
            verified: ok,
            verify_detail: if ok {
                "all bytes match".into()
            } else {
                "byte 17 differs".into()
            },
            bytes: 4096,
            ops: 1,
            elapsed_s: 0.1,
            immediates: vec![],
            atomic_final: 0,
            facts: Default::default(),
            timeline: vec![],
        };
        let node = |name: &str| NodeRecord {
            name: name.into(),
            hostname: name.into(),
            kernel: String::new(),
            rdma_core: String::new(),
            agent: String::new(),
            cpus: 1,
            memory_bytes: 0,
            rdma: vec![],
        };
        RunRecord {
            schema: 1,
            id: "x".into(),
            lab: "t".into(),
            workload: "write-read".into(),
            params: ParamsRecord::default(),
            verified,
            bw_peak_mib_s: 0.0,
            bw_avg_mib_s: 0.0,
            bw_avg_gbps: 0.0,
            msg_rate_mpps: 0.0,
            lat_us: Default::default(),
            cpu: Default::default(),
            nodes: NodePair {
                server: node("server"),
                client: node("client"),
            },
            started_at: String::new(),
            duration_s: 0.1,
            server: side("server", verified),
            client: side("client", true),
            sweep: vec![],
            mr_cache: None,
            saved_to: None,
            impairment: None,
            counters: None,
        }
    }

    #[test]
    fn test_junit_has_one_case_per_entry_with_the_reason() {
        let lab = lab();
        let s = suite(
            "workloads:\n  - workload: write-read\n  - name: bad & <odd>\n    workload: read\n  - workload: atomic\n",
        )
        .unwrap();
        let mut report = CiReport::new(&lab, &s, "suite.yaml");
        report.up.ok = true;
        report.cases[0].status = CaseStatus::Passed;
        report.cases[0].message = None;
        report.cases[0].run = Some(record(true));
        report.cases[1].status = CaseStatus::Failed;
        report.cases[1].message = Some(not_verified_reason(&record(false)));
        report.mark_not_run("interrupted");
        assert_eq!((report.passed, report.failed, report.not_run), (1, 1, 1));
        assert!(!report.success());
        let xml = report.junit_xml();
        assert!(xml.contains(r#"tests="3" failures="1" errors="1""#), "{xml}");
        assert!(
            xml.contains(r#"<testcase name="write-read" classname="labctl.ci.t""#),
            "{xml}"
        );
        assert!(xml.contains(r#"name="bad &amp; &lt;odd&gt;""#), "{xml}");
        assert!(
            xml.contains(r#"message="not verified: server did not verify: byte 17 differs""#),
            "{xml}"
        );
        assert!(xml.contains(r#"message="not run: interrupted""#), "{xml}");
        assert!(xml.contains("write-read client -&gt; server: verified true"), "{xml}");
    }

    #[test]
    fn test_success_needs_every_case_passed_and_a_clean_lifecycle() {
        let lab = lab();
        let s = suite("workloads:\n  - workload: write-read\n").unwrap();
        let mut report = CiReport::new(&lab, &s, "suite.yaml");
        report.up.ok = true;
        report.cases[0].status = CaseStatus::Passed;
        report.tally();
        report.down = StepResult {
            ran: true,
            ok: true,
            ..Default::default()
        };
        assert!(report.success());
        report.signal = Some("terminated".into());
        assert!(!report.success());
        report.signal = None;
        report.down.ok = false;
        assert!(!report.success());
    }
}
