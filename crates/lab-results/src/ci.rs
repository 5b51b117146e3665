//! CI reports: the outcome of one `labctl ci` (the lab's `up`, one case per
//! suite step, the teardown) as JSON and as JUnit XML, and the capped
//! record of a command's output that goes into them.
//!
//! This module owns the report's shape and its JUnit rendering; running the
//! suite is the orchestration crate's job.

use std::collections::VecDeque;
use std::time::Duration;

use lab_model::suite::Suite;
use lab_model::LabSpec;
use serde::Serialize;

use crate::collective::CollectiveRecord;
use crate::run::RunRecord;

/// Version of the JSON report layout. 2: steps of several kinds (`kind`,
/// `commands`, `transfers`; `workload` only on workload steps).
pub const CI_SCHEMA: u32 = 2;

/// Bytes of one stream of one command kept in the report: the first
/// [`OUTPUT_HEAD`] and the last `OUTPUT_LIMIT - OUTPUT_HEAD`.
pub const OUTPUT_LIMIT: usize = 64 * 1024;
/// See [`OUTPUT_LIMIT`].
pub const OUTPUT_HEAD: usize = 8 * 1024;
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

/// Why a step failed, as far as `retries:` is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum FailureKind {
    /// A workload step's run finished and its bytes did not verify. Final:
    /// running it again could pass and hide intermittent corruption.
    Verification,
    /// The program or run failed for a reason outside the data (an exit
    /// status, an error, a refused report, a timeout): `retries:` runs it
    /// again.
    Run,
}

/// One step's result.
#[derive(Debug, Clone, Serialize)]
pub struct CaseResult {
    /// The test case's name.
    pub name: String,
    /// What the step does: `workload`, `copy`, `collect`, `exec` or `pair`.
    pub kind: String,
    /// The workload, for workload steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// A setup step: its failure stopped the suite.
    pub setup: bool,
    /// The outcome.
    pub status: CaseStatus,
    /// Seconds the case took.
    pub duration_s: f64,
    /// Why it did not pass; null when it passed.
    pub message: Option<String>,
    /// Attempts run (1 unless the step has `retries:` and failed).
    pub attempts: u32,
    /// Why each attempt before the last failed (a step with `retries:`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub failed_attempts: Vec<String>,
    /// How the last attempt failed: `verification` or `run`; absent when
    /// it passed or never ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureKind>,
    /// Why a failed step was not run again although it had retries left.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_retried: Option<String>,
    /// The run record, when a pair workload's run finished.
    pub run: Option<RunRecord>,
    /// The collective's record, when a collective's run finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub collective: Option<CollectiveRecord>,
    /// exec and pair: each command, its node, status and output.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub commands: Vec<CommandRecord>,
    /// copy and collect: each file moved and checked.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub transfers: Vec<TransferRecord>,
    /// A traced workload step (`trace: true`): the trace's file (Chrome
    /// trace-event JSON, as `labctl run --trace` writes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub trace: Option<String>,
    /// An `expect:` case: the outcome on each node (a node fact) or of
    /// its run (a workload's figures).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expectations: Vec<crate::expect::ExpectOutcome>,
}

impl CaseResult {
    /// A case that has not run yet: `kind` is the step's key (`workload`,
    /// `pair`, ...) or `expect`.
    fn not_run(name: String, kind: &str, workload: Option<String>, setup: bool) -> CaseResult {
        CaseResult {
            name,
            kind: kind.to_string(),
            workload,
            setup,
            status: CaseStatus::NotRun,
            duration_s: 0.0,
            message: Some("not run".into()),
            attempts: 0,
            failed_attempts: Vec::new(),
            failure: None,
            not_retried: None,
            run: None,
            collective: None,
            commands: Vec::new(),
            transfers: Vec::new(),
            trace: None,
            expectations: Vec::new(),
        }
    }
}

/// One command of an exec or pair step.
#[derive(Debug, Clone, Serialize)]
pub struct CommandRecord {
    /// The node it ran on.
    pub node: String,
    /// `server` or `client` in a pair; null in an exec step.
    pub role: Option<String>,
    /// The command line, placeholders filled.
    pub command: String,
    /// Its exit status; null when it did not end on its own (stopped, or
    /// never started).
    pub status: Option<i32>,
    /// labctl stopped it (time limit, or a pair's server still running).
    pub stopped: bool,
    /// Seconds from its start to its end.
    pub seconds: f64,
    /// Its standard output (capped: see [`OUTPUT_LIMIT`]).
    pub stdout: String,
    /// Its standard error (capped the same way).
    pub stderr: String,
}

/// One file of a copy or collect step.
#[derive(Debug, Clone, Serialize)]
pub struct TransferRecord {
    /// The node on the other side.
    pub node: String,
    /// Where it came from.
    pub from: String,
    /// Where it went.
    pub to: String,
    /// Its size.
    pub bytes: u64,
    /// Its sha256, checked on both sides.
    pub sha256: String,
}

/// A stream of output as the report keeps it: everything up to
/// [`OUTPUT_LIMIT`] bytes; past that, the first [`OUTPUT_HEAD`] bytes and
/// the last ones, with a line saying how much was cut.
#[derive(Debug, Clone, Default)]
pub struct CapturedOutput {
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl CapturedOutput {
    /// Adds output.
    pub fn push(&mut self, data: &[u8]) {
        self.total += data.len() as u64;
        let room = OUTPUT_HEAD.saturating_sub(self.head.len());
        let (to_head, rest) = data.split_at(room.min(data.len()));
        self.head.extend_from_slice(to_head);
        self.tail.extend(rest);
        let keep = OUTPUT_LIMIT - OUTPUT_HEAD;
        if self.tail.len() > keep {
            self.tail.drain(..self.tail.len() - keep);
        }
    }

    /// Bytes seen in all.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The text kept (invalid UTF-8 replaced), with a note where bytes were cut.
    pub fn text(&self) -> String {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.total > kept {
            if !out.ends_with('\n') {
                out.push('\n');
            }
            out.push_str(&format!(
                "[labctl: {} bytes of output cut here; the first {} and the last {} are kept]\n",
                self.total - kept,
                self.head.len(),
                self.tail.len()
            ));
        }
        let (a, b) = self.tail.as_slices();
        out.push_str(&String::from_utf8_lossy(&[a, b].concat()));
        out
    }

    /// The last `n` non-empty lines, for failure messages.
    pub fn last_lines(&self, n: usize) -> Vec<String> {
        let text = self.text();
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| l.to_string())
            .collect()
    }
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
    /// One per suite step, in suite order.
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
    /// An empty report for `suite` on `lab`: a case per step, then one per
    /// expectation of the lab's and the suite's `expect:`; every case starts
    /// as not run.
    pub fn new(lab: &LabSpec, suite: &Suite, suite_name: &str) -> CiReport {
        let expect_cases = crate::expect::expect_cases(&lab.expect.overlaid(&suite.expect));
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
                .steps
                .iter()
                .map(|step| {
                    let kind = step.kind().map_or("", |k| k.key());
                    CaseResult::not_run(step.name(), kind, step.workload.clone(), step.setup)
                })
                .chain(expect_cases.iter().map(|(name, case)| {
                    let workload = match case {
                        crate::expect::ExpectCase::Workload(w) => Some(w.workload.clone()),
                        crate::expect::ExpectCase::NodeFact(_) => None,
                    };
                    CaseResult::not_run(name.clone(), "expect", workload, false)
                }))
                .collect(),
            passed: 0,
            failed: 0,
            not_run: suite.steps.len() + expect_cases.len(),
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
    /// step; failures carry the reason as message and description; a case's
    /// system-out holds the run's summary, the files moved and each command's
    /// stdout, its system-err each command's stderr; cases that never ran
    /// are errors.
    pub fn junit_xml(&self) -> String {
        use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
        let mut report = Report::new("labctl ci");
        let mut suite = TestSuite::new(format!("lab {}", self.lab));
        suite.set_time(Duration::from_secs_f64(self.duration_s.max(0.0)));
        for case in &self.cases {
            let mut status = match case.status {
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
                    status.set_description(match &case.not_retried {
                        Some(why) => format!("{message}\n{why}"),
                        None => message,
                    });
                    status
                }
            };
            // Earlier attempts: flakyFailure on a pass, rerunFailure on a
            // failure (the surefire form CI servers show as flaky).
            status.add_reruns(case.failed_attempts.iter().map(|why| {
                let mut rerun = quick_junit::TestRerun::new(NonSuccessKind::Failure);
                rerun.set_message(why.lines().next().unwrap_or_default().to_string());
                rerun.set_description(why.clone());
                rerun
            }));
            let mut test = TestCase::new(case.name.clone(), status);
            test.set_classname(format!("labctl.ci.{}", self.lab));
            test.set_time(Duration::from_secs_f64(case.duration_s.max(0.0)));
            let (out, err) = case_output(case);
            if !out.is_empty() {
                test.set_system_out(out);
            }
            if !err.is_empty() {
                test.set_system_err(err);
            }
            suite.add_test_case(test);
        }
        report.add_test_suite(suite);
        report.to_string().expect("a JUnit report of plain strings serialises")
    }
}

/// A case's system-out and system-err: the run's summary, the files moved,
/// and each command's output under a line naming it.
fn case_output(case: &CaseResult) -> (String, String) {
    let mut out = case.run.as_ref().map(run_summary).unwrap_or_default();
    if let Some(c) = &case.collective {
        out.push_str(&collective_summary(c));
    }
    for o in &case.expectations {
        let verdict = if o.met() { "met" } else { "MISSED" };
        match &o.run_id {
            Some(id) => out.push_str(&format!("{verdict} {} (run {id})\n", o.message)),
            None => out.push_str(&format!("{verdict} {}\n", o.message)),
        }
    }
    for t in &case.transfers {
        out.push_str(&format!(
            "{} -> {} ({} bytes, sha256 {})\n",
            t.from, t.to, t.bytes, t.sha256
        ));
    }
    let mut err = String::new();
    for c in &case.commands {
        let role = c.role.as_deref().map(|r| format!("{r} ")).unwrap_or_default();
        let ended = match (c.status, c.stopped) {
            (_, true) => "stopped by labctl".to_string(),
            (Some(status), false) => format!("exit status {status}"),
            (None, false) => "no exit status".to_string(),
        };
        let header = format!("==> {role}on {}: {} ({ended}, {:.1} s)\n", c.node, c.command, c.seconds);
        for (text, into) in [(&c.stdout, &mut out), (&c.stderr, &mut err)] {
            if !text.is_empty() {
                into.push_str(&header);
                into.push_str(text);
                if !text.ends_with('\n') {
                    into.push('\n');
                }
            }
        }
    }
    (out, err)
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

/// A short text of a collective's run, for the JUnit case's system-out:
/// nccl-tests' figures per size, then each failed rank's verdict.
fn collective_summary(c: &CollectiveRecord) -> String {
    let nodes: Vec<&str> = c.ranks.iter().map(|r| r.node.as_str()).collect();
    let mut out = format!(
        "{} on {} ranks ({}), {}, over {}: verified {}\n",
        c.collective,
        c.world,
        nodes.join(" "),
        c.algorithm,
        c.transport,
        c.verified
    );
    for p in &c.points {
        out.push_str(&format!(
            "{} B: {:.1} us, algbw {:.4} GB/s, busbw {:.4} GB/s, {} wrong, slowest rank {}\n",
            p.size, p.time_us, p.algbw_gb_s, p.busbw_gb_s, p.wrong, p.slowest_rank
        ));
    }
    for r in c.ranks.iter().filter(|r| !r.verified) {
        out.push_str(&format!("rank {} ({}): {}\n", r.rank, r.node, r.verify_detail));
    }
    if let Some(path) = &c.saved_to {
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
            bw_peak_window_mib_s: 0.0,
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
    fn test_a_verification_failure_not_retried_says_so_in_json_and_junit() {
        let lab = lab();
        let s = suite("workloads:\n  - workload: write-read\n    retries: 2\n").unwrap();
        let mut report = CiReport::new(&lab, &s, "suite.yaml");
        assert_eq!(report.cases[0].failure, None);
        let json = serde_json::to_value(&report).unwrap();
        assert!(json["cases"][0].get("not_retried").is_none(), "{json}");
        report.up.ok = true;
        let case = &mut report.cases[0];
        case.status = CaseStatus::Failed;
        case.attempts = 1;
        case.message = Some(not_verified_reason(&record(false)));
        case.failure = Some(FailureKind::Verification);
        case.not_retried = Some("not retried (2 retries left): a verification failure is final".into());
        report.tally();
        let json = serde_json::to_value(&report).unwrap();
        let case = &json["cases"][0];
        assert_eq!(case["failure"], "verification");
        assert_eq!(case["attempts"], 1);
        assert!(case["not_retried"]
            .as_str()
            .unwrap()
            .starts_with("not retried (2 retries left)"));
        assert!(case.get("failed_attempts").is_none(), "{case}");
        let xml = report.junit_xml();
        assert!(
            xml.contains("byte 17 differs\nnot retried (2 retries left): a verification failure is final</failure>"),
            "{xml}"
        );
        assert!(!xml.contains("rerunFailure"), "{xml}");
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

    #[test]
    fn test_captured_output_keeps_head_and_tail_and_says_what_was_cut() {
        let mut small = CapturedOutput::default();
        small.push(b"one\ntwo\n\nthree\n");
        assert_eq!(small.text(), "one\ntwo\n\nthree\n");
        assert_eq!(small.last_lines(2), ["two", "three"]);
        let mut big = CapturedOutput::default();
        for i in 0..20_000 {
            big.push(format!("line {i:05}\n").as_bytes());
        }
        let text = big.text();
        assert_eq!(big.total(), 20_000 * 11);
        assert!(text.starts_with("line 00000\n"), "{}", &text[..40]);
        assert!(text.ends_with("line 19999\n"));
        let cut = 20_000 * 11 - OUTPUT_LIMIT as u64;
        assert!(
            text.contains(&format!(
                "[labctl: {cut} bytes of output cut here; the first 8192 and the last 57344 are kept]"
            )),
            "no note"
        );
        assert!(text.len() < OUTPUT_LIMIT + 200);
    }

    #[test]
    fn test_junit_carries_each_commands_output_and_status() {
        let lab = lab();
        let s = suite("steps:\n  - pair: {server: srv, client: cli, port: 1}\n").unwrap();
        let mut report = CiReport::new(&lab, &s, "suite.yaml");
        assert_eq!(
            (report.cases[0].kind.as_str(), report.cases[0].name.as_str()),
            ("pair", "pair srv")
        );
        let command = |role: &str, status: Option<i32>, stopped: bool| CommandRecord {
            node: role.into(),
            role: Some(role.into()),
            command: format!("{role} --flag"),
            status,
            stopped,
            seconds: 1.5,
            stdout: format!("{role} says hello\n"),
            stderr: if stopped {
                String::new()
            } else {
                format!("{role} <warns>")
            },
        };
        report.cases[0].commands = vec![command("server", None, true), command("client", Some(1), false)];
        report.cases[0].status = CaseStatus::Failed;
        report.cases[0].message = Some("client on client: `client --flag` exited with status 1".into());
        report.tally();
        let xml = report.junit_xml();
        assert!(
            xml.contains("==&gt; server on server: server --flag (stopped by labctl, 1.5 s)\nserver says hello"),
            "{xml}"
        );
        assert!(
            xml.contains("==&gt; client on client: client --flag (exit status 1, 1.5 s)\nclient says hello"),
            "{xml}"
        );
        assert!(xml.contains("<system-err>==&gt; client on client: client --flag (exit status 1, 1.5 s)\nclient &lt;warns&gt;\n</system-err>"), "{xml}");
    }
}
