//! CI suites: the runs of one `labctl ci`, from a lab's `ci:` section or a
//! suite file of the same shape:
//!
//! ```yaml
//! workloads:
//!   - workload: write-read
//!   - name: send-recv-8k
//!     workload: send-recv
//!     size: 8192
//! ```
//!
//! This module owns the suite's types, its parsing and its checks against a
//! lab; running a suite is the orchestration crate's job.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::workloads::is_fabric;

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
    #[serde(deserialize_with = "crate::scalar::de_workload")]
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

    /// The passive node (`server` when the entry does not say).
    pub fn server(&self) -> &str {
        self.server.as_deref().unwrap_or("server")
    }

    /// The active node (`client` when the entry does not say).
    pub fn client(&self) -> &str {
        self.client.as_deref().unwrap_or("client")
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
            let (message, fix) = match crate::problem::unframe(&raw) {
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

    /// Checks the suite against the lab it will run on (its name and its
    /// nodes' names): at least one entry, unique names, nodes that exist,
    /// `provider` only on fabric-* workloads. `LabSpec::check_suite` calls
    /// this with a lab's own names.
    pub fn check(&self, lab: &str, nodes: &[&str], source_name: &str) -> Result<(), SuiteError> {
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
        let mut names = HashSet::new();
        for (index, entry) in self.workloads.iter().enumerate() {
            if !names.insert(entry.name()) {
                return Err(mismatch(
                    index,
                    format!("the name `{}` is used by an earlier entry", entry.name()),
                    "give each entry of the suite its own `name:`".into(),
                ));
            }
            let (server, client) = (entry.server(), entry.client());
            for (role, node) in [("server", server), ("client", client)] {
                if !nodes.contains(&node) {
                    return Err(mismatch(
                        index,
                        format!("{role} `{node}` is not a node of lab `{lab}`"),
                        format!("set `{role}:` to one of: {}", nodes.join(", ")),
                    ));
                }
            }
            if server == client {
                return Err(mismatch(
                    index,
                    format!("server and client are both `{server}`"),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::labs::{LabSpec, LabsFile};

    fn lab() -> LabSpec {
        let text = "labs:\n  - name: t\n    nodes:\n      - name: server\n      - name: client\n";
        LabsFile::parse(Path::new("labs.yaml"), text).unwrap().labs[0].clone()
    }

    fn suite(text: &str) -> Result<Suite, SuiteError> {
        Suite::parse(Path::new("suite.yaml"), text)
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
        let check = |text: &str| lab.check_suite(&suite(text).unwrap(), "suite.yaml");
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
                lab().check_suite(&suite, &path.display().to_string()).unwrap();
                checked += 1;
            }
        }
        assert!(checked > 0, "no example suite in {}", dir.display());
    }
}
