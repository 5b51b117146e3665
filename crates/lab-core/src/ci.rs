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
//! holds the suite model, the runner and the report; the binary adds the
//! signal handling that makes the teardown run on Ctrl-C and SIGTERM.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::lab::Lab;
use crate::model::LabSpec;
use crate::progress::Reporter;
use crate::run::{default_params, is_fabric, run_workload, RunOptions, RunRecord};

/// Version of the JSON report layout.
pub const CI_SCHEMA: u32 = 1;
/// Seconds one entry may run when it does not say.
pub const DEFAULT_TIMEOUT_S: u64 = 120;

/// Errors in a suite: bad input, reported before anything is created.
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// The suite file could not be read.
    #[error("{}: cannot read the suite file: {reason}\n  fix: check the path given to --suite", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why (not a `source`: the message already says it).
        reason: std::io::Error,
    },
    /// The suite file is not a valid suite.
    #[error("{}:{line}:{column}: {message}\n  fix: {fix}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// 1-based column.
        column: usize,
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
    /// The lab has no `ci:` section and no suite file was given.
    #[error("lab `{lab}` in {} has no `ci:` section\n  fix: add `ci: {{workloads: [{{workload: write-read}}]}}` to the lab, or pass --suite FILE", file.display())]
    NoSuite {
        /// The lab.
        lab: String,
        /// The labs file.
        file: PathBuf,
    },
    /// The lab is up already; `ci` only runs on a lab it brings up itself.
    #[error("lab `{lab}` is already up; `labctl ci` brings up and tears down a lab of its own\n  fix: run `{command}` first, or run ci on another lab")]
    AlreadyUp {
        /// The lab.
        lab: String,
        /// The `labctl down` that removes it.
        command: String,
    },
    /// The suite does not fit the lab (empty, duplicate names, unknown nodes).
    #[error("{source_name}: workloads[{index}]: {message}\n  fix: {fix}")]
    Mismatch {
        /// `FILE` or `FILE (lab X, ci:)`.
        source_name: String,
        /// The entry.
        index: usize,
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
}

/// A suite: the workload runs of one `labctl ci`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// The runs, in order. Each becomes one JUnit test case.
    #[schemars(length(min = 1))]
    pub workloads: Vec<SuiteEntry>,
}

/// How the two sides of a run connect (`cm:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuiteCm {
    /// rdma_cm (the default).
    RdmaCm,
    /// Out of band through the controller.
    Oob,
}

/// How completions are waited for (`completion:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SuiteCompletion {
    /// Busy-poll the CQ (the default).
    Poll,
    /// Sleep on a completion channel.
    Event,
}

/// One run of a suite; the fields are those of `labctl run`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuiteEntry {
    /// The test case's name, unique in the suite. Default: the workload.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The workload, as for `labctl run`.
    #[serde(deserialize_with = "crate::model::de_workload")]
    #[schemars(example = &"write-read")]
    pub workload: String,
    /// The passive node. Default: `server`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server: Option<String>,
    /// The active node. Default: `client`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// Message size in bytes. Default: the workload's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Operations. Default: the workload's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iterations: Option<u64>,
    /// Run for this many seconds instead of a number of operations.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_s: Option<u64>,
    /// Connection setup: `rdma_cm` (default) or `oob`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cm: Option<SuiteCm>,
    /// Completions: `poll` (default) or `event`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion: Option<SuiteCompletion>,
    /// Number of QPs. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qps: Option<u32>,
    /// send-recv: answer every message.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub ping_pong: bool,
    /// write-imm: number of batches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batches: Option<u32>,
    /// Seed of the payload pattern. Default: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Negative test: the client uses a corrupted rkey, so the run fails.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub corrupt_rkey: bool,
    /// fabric-* workloads: the libfabric provider. Default: from the lab's fabric.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// Abort the run after this many seconds. Default: 120.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
}

impl SuiteEntry {
    /// The test case's name.
    pub fn name(&self) -> &str {
        self.name.as_deref().unwrap_or(&self.workload)
    }

    /// What `run_workload` needs for this entry.
    pub fn run_options(&self) -> RunOptions {
        let mut params = default_params(&self.workload);
        if let Some(size) = self.size {
            params.size = size;
        }
        if let Some(n) = self.iterations {
            params.iterations = n;
        }
        if let Some(d) = self.duration_s {
            params.iterations = 0;
            params.duration_s = d as f64;
        }
        if let Some(cm) = self.cm {
            params.set_cm(match cm {
                SuiteCm::RdmaCm => agent_proto::v1::CmMode::RdmaCm,
                SuiteCm::Oob => agent_proto::v1::CmMode::Oob,
            });
        }
        if let Some(completion) = self.completion {
            params.set_completion(match completion {
                SuiteCompletion::Poll => agent_proto::v1::CompletionMode::Poll,
                SuiteCompletion::Event => agent_proto::v1::CompletionMode::Event,
            });
        }
        params.num_qps = self.qps.unwrap_or(params.num_qps);
        params.ping_pong = self.ping_pong;
        params.batches = self.batches.unwrap_or(params.batches);
        params.seed = self.seed.unwrap_or(params.seed);
        params.corrupt_rkey = self.corrupt_rkey;
        if let Some(provider) = &self.provider {
            params.provider = provider.clone();
        }
        RunOptions {
            params,
            server: self.server.clone().unwrap_or_else(|| "server".into()),
            client: self.client.clone().unwrap_or_else(|| "client".into()),
            timeout: Duration::from_secs(self.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S)),
            counters: false,
        }
    }
}

impl Suite {
    /// Reads a suite file.
    pub fn load(path: &Path) -> Result<Suite, SuiteError> {
        let text = std::fs::read_to_string(path).map_err(|reason| SuiteError::Read {
            path: path.to_path_buf(),
            reason,
        })?;
        Suite::parse(path, &text)
    }

    /// Parses a suite; `path` is used in messages.
    pub fn parse(path: &Path, text: &str) -> Result<Suite, SuiteError> {
        serde_yaml_ng::from_str(text).map_err(|e| {
            let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            let raw = e.to_string();
            let (message, fix) = match crate::model::unframe(&raw) {
                Some((field, message, fix)) if field.is_empty() => (message, fix),
                Some((field, message, fix)) => (format!("{field}: {message}"), fix),
                None => (
                    // serde_yaml_ng appends " at line L column C"; the position is in front already.
                    raw.split(" at line ").next().unwrap_or(&raw).to_string(),
                    "a suite is `workloads:` followed by a list of runs like `- workload: write-read` (see docs/cmd/ci.md)"
                        .into(),
                ),
            };
            SuiteError::Invalid {
                path: path.to_path_buf(),
                line,
                column,
                message,
                fix,
            }
        })
    }

    /// Checks the suite against the lab it will run on: at least one entry,
    /// unique names, nodes that exist, `provider` only on fabric-* workloads.
    pub fn check(&self, lab: &LabSpec, source_name: &str) -> Result<(), SuiteError> {
        let mismatch = |index: usize, message: String, fix: String| SuiteError::Mismatch {
            source_name: source_name.to_string(),
            index,
            message,
            fix,
        };
        if self.workloads.is_empty() {
            return Err(mismatch(
                0,
                "the suite has no workloads".into(),
                "list at least one run under `workloads:`, like `- workload: write-read`".into(),
            ));
        }
        let nodes: Vec<&str> = lab.nodes.iter().map(|n| n.name.as_str()).collect();
        let mut names = HashSet::new();
        for (index, entry) in self.workloads.iter().enumerate() {
            if !names.insert(entry.name()) {
                return Err(mismatch(
                    index,
                    format!("the name `{}` is used by an earlier entry", entry.name()),
                    "give each entry of the suite its own `name:`".into(),
                ));
            }
            let opts = entry.run_options();
            for (role, node) in [("server", &opts.server), ("client", &opts.client)] {
                if !nodes.contains(&node.as_str()) {
                    return Err(mismatch(
                        index,
                        format!("{role} `{node}` is not a node of lab `{}`", lab.name),
                        format!("set `{role}:` to one of: {}", nodes.join(", ")),
                    ));
                }
            }
            if opts.server == opts.client {
                return Err(mismatch(
                    index,
                    format!("server and client are both `{}`", opts.server),
                    "a run needs two different nodes".into(),
                ));
            }
            if entry.provider.is_some() && !is_fabric(&entry.workload) {
                return Err(mismatch(
                    index,
                    format!(
                        "`provider` applies to the fabric-* workloads, not to {}",
                        entry.workload
                    ),
                    "remove the provider line".into(),
                ));
            }
        }
        Ok(())
    }
}

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
            started_at: crate::state::now_rfc3339(),
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

/// Runs every entry of `suite` in order on the running `lab`, filling
/// `report.cases` as each finishes. A failed entry does not stop the suite.
pub async fn run_suite(lab: &Lab, suite: &Suite, report: &mut CiReport, reporter: &dyn Reporter) {
    for (index, entry) in suite.workloads.iter().enumerate() {
        let step = format!("[{}/{}] {}", index + 1, suite.workloads.len(), entry.name());
        reporter.begin("ci", &step);
        let started = Instant::now();
        let result = run_workload(lab, &entry.run_options(), |_| {}).await;
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
    use super::*;
    use crate::model::LabsFile;

    fn lab() -> LabSpec {
        let text = "labs:\n  - name: t\n    nodes:\n      - name: server\n      - name: client\n";
        LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0].clone()
    }

    fn suite(text: &str) -> Result<Suite, SuiteError> {
        Suite::parse(Path::new("suite.yaml"), text)
    }

    #[test]
    fn test_entry_fields_become_run_parameters() {
        let s = suite(
            "workloads:\n  - workload: send-recv\n    size: 8192\n    iterations: 3\n    cm: oob\n    completion: event\n    ping_pong: true\n    timeout_s: 30\n",
        )
        .unwrap();
        let opts = s.workloads[0].run_options();
        assert_eq!((opts.params.size, opts.params.iterations), (8192, 3));
        assert_eq!(opts.params.cm(), agent_proto::v1::CmMode::Oob);
        assert_eq!(opts.params.completion(), agent_proto::v1::CompletionMode::Event);
        assert!(opts.params.ping_pong);
        assert_eq!(opts.timeout, Duration::from_secs(30));
        assert_eq!((opts.server.as_str(), opts.client.as_str()), ("server", "client"));
        // Unset fields keep the workload's defaults, as `labctl run` does.
        let d = suite("workloads:\n  - workload: write-bw\n").unwrap().workloads[0].run_options();
        assert_eq!(d.params, default_params("write-bw"));
        assert_eq!(d.timeout, Duration::from_secs(DEFAULT_TIMEOUT_S));
    }

    #[test]
    fn test_bad_suite_files_name_line_and_problem() {
        let e = suite("workloads:\n  - workload: write-raed\n").unwrap_err().to_string();
        assert_eq!(
            e,
            "suite.yaml:2:15: workloads[0].workload: unknown workload `write-raed`\n  fix: write `write-read`"
        );
        let e = suite("workloads:\n  - workload: write-read\n    sise: 3\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("suite.yaml:3:") && e.contains("unknown field `sise`"),
            "{e}"
        );
        let e = suite("- write-read\n").unwrap_err().to_string();
        assert!(e.contains("fix: a suite is `workloads:`"), "{e}");
    }

    #[test]
    fn test_suite_must_fit_the_lab() {
        let lab = lab();
        let check = |text: &str| suite(text).unwrap().check(&lab, "suite.yaml");
        assert!(check("workloads:\n  - workload: write-read\n  - workload: send-recv\n").is_ok());
        let e = check("workloads: []\n").unwrap_err().to_string();
        assert!(e.contains("no workloads"), "{e}");
        let e = check("workloads:\n  - workload: read\n  - workload: read\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("workloads[1]") && e.contains("`read` is used"), "{e}");
        let e = check("workloads:\n  - workload: read\n    client: c9\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("client `c9` is not a node") && e.contains("server, client"),
            "{e}"
        );
        let e = check("workloads:\n  - workload: read\n    client: server\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("both `server`"), "{e}");
        let e = check("workloads:\n  - workload: read\n    provider: efa\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fabric-*"), "{e}");
    }

    #[test]
    fn test_shipped_example_suites_fit_a_two_node_lab() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/ci-examples");
        let mut checked = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.to_string_lossy().ends_with(".suite.yaml") {
                let suite = Suite::load(&path).unwrap_or_else(|e| panic!("{e}"));
                suite.check(&lab(), &path.display().to_string()).unwrap();
                checked += 1;
            }
        }
        assert!(checked > 0, "no example suite in {}", dir.display());
    }

    fn record(verified: bool) -> RunRecord {
        let side = |node: &str, ok: bool| crate::run::SideRecord {
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
        let node = |name: &str| crate::run::NodeRecord {
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
            params: params_record(),
            verified,
            bw_peak_mib_s: 0.0,
            bw_avg_mib_s: 0.0,
            bw_avg_gbps: 0.0,
            msg_rate_mpps: 0.0,
            lat_us: Default::default(),
            cpu: Default::default(),
            nodes: crate::run::NodePair {
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

    fn params_record() -> crate::run::ParamsRecord {
        crate::run::ParamsRecord::from(&default_params("write-read"))
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
