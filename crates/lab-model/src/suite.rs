//! CI suites: the steps of one `labctl ci`, from a lab's `ci:` section or a
//! suite file of the same shape:
//!
//! ```yaml
//! steps:
//!   - copy: {from: build/rc_exchange, to: "@all:/usr/local/bin/"}
//!     setup: true
//!   - workload: write-read
//!   - exec: ibv_devinfo -d {self.dev}
//!   - name: pingpong
//!     pair:
//!       server: ibv_rc_pingpong -d {self.dev} -g {self.gid_index}
//!       client: ibv_rc_pingpong -d {self.dev} -g {self.gid_index} {server.addr}
//!       port: 18515
//!   - collect: {from: "@all:/var/log/app.log"}
//! ```
//!
//! A step is one of five kinds: `workload:` (a `labctl run` of the agents'
//! workloads), `copy:` (files from this machine to nodes), `collect:` (node
//! files back as artifacts), `exec:` (the user's command on nodes, must exit
//! 0) and `pair:` (a server command and a client command on two nodes).
//! `workloads:` is the older name of `steps:` and still read.
//!
//! This module owns the suite's types, its parsing and (in `check`) its checks against a
//! lab (names, nodes, endpoints); placeholders are checked by the
//! orchestration crate, which owns the lab facts, and running a suite is its
//! job too.

use std::fmt;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::de::Deserializer;
use serde::{Deserialize, Serialize};
use shorthand::{NoLongForm, Shorthand};

use crate::located::{parse_located, DocumentKind};
use crate::problem::Problem;
use crate::request::WorkloadRequest;

/// Seconds one step may run when it does not say: what a run gets.
pub const DEFAULT_TIMEOUT_S: u64 = workload_catalogue::limits::DEFAULT_TIMEOUT_S;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The most `retries:` a step may ask for: a step that needs more is broken,
/// and each attempt may take its whole time limit.
pub const MAX_RETRIES: u32 = 5;

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
    #[error("lab `{lab}` in {} has no `ci:` section\n  fix: add `ci: {{steps: [{{workload: write-read}}]}}` to the lab, or pass --suite FILE", file.display())]
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
    /// The suite does not fit the lab (empty, duplicate names, unknown nodes,
    /// a step of no kind or of two).
    #[error("{source_name}: steps[{index}]: {message}\n  fix: {fix}")]
    Mismatch {
        /// `FILE` or `FILE (lab X, ci:)`.
        source_name: String,
        /// The step.
        index: usize,
        /// What is wrong.
        message: String,
        /// How to fix it.
        fix: String,
    },
}

/// A suite: the steps of one `labctl ci`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Suite {
    /// The steps, in order. Each becomes one JUnit test case. (`workloads:`
    /// is read as the same list.)
    #[serde(alias = "workloads")]
    #[schemars(length(min = 1))]
    pub steps: Vec<SuiteStep>,
    /// What the lab must deliver, over the lab's own `expect:` (a workload
    /// at the same size replaced, the rest added). Each expectation becomes
    /// a test case after the steps.
    #[serde(default, skip_serializing_if = "crate::expect::Expectations::is_empty")]
    pub expect: crate::expect::Expectations,
}

/// A step's workload: one of the catalogue's, so an editor offers exactly those.
fn workload_name_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let names: Vec<&str> = workload_catalogue::names().collect();
    schemars::json_schema!({
        "type": "string",
        "enum": names,
    })
}

/// One step of a suite. Exactly one of `workload`, `copy`, `collect`,
/// `exec` and `pair` says what it does; `name`, `setup` and `timeout_s`
/// apply to every kind; the other fields are those of `labctl run` and
/// apply to `workload` steps only.
#[derive(Debug, Clone, Default, PartialEq, Serialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SuiteStep {
    /// The test case's name, unique in the suite. Default: the workload, or
    /// the kind and the program (`exec ibv_devinfo`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// A setup step: when it fails, the steps after it are not run (the lab
    /// is torn down as always).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub setup: bool,
    /// Abort the step after this many seconds (stopping what it started).
    /// Default: 120.
    #[serde(default, alias = "timeout", skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    /// Run the step again, up to this many times, when it fails (a tool
    /// that fails now and then on a busy host). The case passes on the
    /// first attempt that does, and its report lists the attempts that
    /// failed. Default: 0; at most 5.
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(max = 5))]
    pub retries: u32,

    /// A workload of `labctl run`: a pair (between `server` and `client`)
    /// or a collective (across `nodes`, one rank each).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "workload_name_schema")]
    pub workload: Option<String>,
    /// Files from this machine to nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy: Option<CopyStep>,
    /// Files from nodes into the run's artifacts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub collect: Option<CollectStep>,
    /// A command on one or more nodes; every node must exit 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<ExecStepSchema>")]
    pub exec: Option<ExecStep>,
    /// A server command and a client command on two nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pair: Option<PairStep>,

    /// workload: the run's parameters, the fields of `labctl run`'s flags
    /// (`size`, `iterations`, `qps`, `server`, `nodes`, ...), each unset one
    /// leaving the workload's default.
    #[serde(flatten)]
    pub request: WorkloadRequest,
    /// workload (verbs, fabric-* and collectives): record a trace of both
    /// nodes (every rank), as `labctl run --trace` does, written next to the
    /// run's record; the summary and the report name the file.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub trace: bool,
}

/// What a step does, borrowed from its [`SuiteStep`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind<'a> {
    /// `workload:`.
    Workload(&'a str),
    /// `copy:`.
    Copy(&'a CopyStep),
    /// `collect:`.
    Collect(&'a CollectStep),
    /// `exec:`.
    Exec(&'a ExecStep),
    /// `pair:`.
    Pair(&'a PairStep),
}

impl StepKind<'_> {
    /// The kind's key in the suite (`workload`, `copy`, ...).
    pub fn key(&self) -> &'static str {
        match self {
            StepKind::Workload(_) => "workload",
            StepKind::Copy(_) => "copy",
            StepKind::Collect(_) => "collect",
            StepKind::Exec(_) => "exec",
            StepKind::Pair(_) => "pair",
        }
    }
}

/// A command for a node: a shell line (`run: "a | b"`, run by the node's
/// shell as ssh runs it), or a program and its arguments (`run: [prog, arg]`,
/// passed through as that argv). Placeholders (`{server.addr}`) are filled
/// in either.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum CommandSpec {
    /// A line for the node's shell.
    Line(String),
    /// A program and its arguments.
    Argv(Vec<String>),
}

impl CommandSpec {
    /// The words as `labctl exec` takes them: one word is a shell line,
    /// several are an argv.
    pub fn words(&self) -> Vec<String> {
        match self {
            CommandSpec::Line(line) => vec![line.clone()],
            CommandSpec::Argv(argv) => argv.clone(),
        }
    }

    /// The program's name, for default step names: the first word.
    pub fn program(&self) -> &str {
        let first = match self {
            CommandSpec::Line(line) => line.split_whitespace().next().unwrap_or_default(),
            CommandSpec::Argv(argv) => argv.first().map(String::as_str).unwrap_or_default(),
        };
        first.rsplit('/').next().unwrap_or(first)
    }
}

impl fmt::Display for CommandSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandSpec::Line(line) => f.write_str(line),
            CommandSpec::Argv(argv) => f.write_str(&argv.join(" ")),
        }
    }
}

/// The nodes of an `exec:` step: `all` (the default), one name, or a list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum NodeSet {
    /// Every node of the lab.
    #[default]
    All,
    /// These nodes.
    Some(Vec<String>),
}

impl NodeSet {
    /// The nodes, in the lab's order for `All`.
    pub fn resolve(&self, lab_nodes: &[&str]) -> Vec<String> {
        match self {
            NodeSet::All => lab_nodes.iter().map(|n| n.to_string()).collect(),
            NodeSet::Some(nodes) => nodes.clone(),
        }
    }
}

/// `copy:` files from this machine to nodes, checked by sha256 as
/// `labctl cp` checks them; directories are copied whole.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CopyStep {
    /// Paths on this machine, relative to the suite file's directory.
    #[serde(deserialize_with = "de_one_or_many")]
    #[schemars(with = "OneOrMany")]
    pub from: Vec<String>,
    /// `NODE:PATH` or `@all:PATH` (a path ending in `/` is a directory).
    pub to: String,
}

/// `collect:` files from nodes into the run's artifacts directory, one
/// subdirectory per node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CollectStep {
    /// `NODE:PATH` or `@all:PATH`; directories are collected whole.
    #[serde(deserialize_with = "de_one_or_many")]
    #[schemars(with = "OneOrMany")]
    pub from: Vec<String>,
    /// A subdirectory of the artifacts directory. Default: the artifacts
    /// directory itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// A missing file fails the step. With `optional: true` it is skipped
    /// (logs that only exist after a failure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub optional: bool,
}

/// `exec:` a command on nodes: `exec: "line"` (every node) or
/// `exec: {nodes: [a, b], run: ...}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExecStep {
    /// Where it runs. Default: every node.
    pub nodes: NodeSet,
    /// What runs.
    pub run: CommandSpec,
}

/// The long form of [`ExecStep`].
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ExecFields {
    /// `all` (the default), a node, or a list of nodes.
    #[serde(default, deserialize_with = "de_node_set")]
    #[schemars(with = "NodeSetSchema")]
    nodes: NodeSet,
    /// A shell line, or a list: a program and its arguments.
    #[serde(deserialize_with = "de_command")]
    #[schemars(with = "CommandSchema")]
    run: CommandSpec,
}

/// `pair:` a server and a client command. The server starts first; the
/// client starts once the server is ready (its `port` listens, or a line of
/// its output matches `ready`); the client's exit status decides; then the
/// server must exit 0 (or anything, with `server_exit: any`), else it is
/// stopped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PairStep {
    /// The server's command, or `{node, run}`. Node default: `server`.
    #[serde(deserialize_with = "de_pair_side")]
    #[schemars(with = "PairSideSchema")]
    pub server: PairSide,
    /// The client's command, or `{node, run}`. Node default: `client`.
    #[serde(deserialize_with = "de_pair_side")]
    #[schemars(with = "PairSideSchema")]
    pub client: PairSide,
    /// The server is ready when this TCP port listens on its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 65535))]
    pub port: Option<u16>,
    /// The server is ready when a line of its output (stdout or stderr)
    /// matches this regular expression.
    #[serde(
        default,
        deserialize_with = "shorthand::de_some_regex",
        skip_serializing_if = "Option::is_none"
    )]
    pub ready: Option<String>,
    /// What the server's exit status must be: `zero` (default) or `any`.
    #[serde(default)]
    pub server_exit: ServerExit,
}

/// One side of a pair.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PairSide {
    /// The node. Default: `server` for the server, `client` for the client.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The command.
    #[serde(deserialize_with = "de_command")]
    #[schemars(with = "CommandSchema")]
    pub run: CommandSpec,
}

/// What a pair's server must do after its client finished.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ServerExit {
    /// Exit with status 0 on its own (the default).
    #[default]
    Zero,
    /// Anything: its status is not checked, and it is stopped if it still runs.
    Any,
}

impl PairStep {
    /// The server's node.
    pub fn server_node(&self) -> &str {
        self.server.node.as_deref().unwrap_or("server")
    }

    /// The client's node.
    pub fn client_node(&self) -> &str {
        self.client.node.as_deref().unwrap_or("client")
    }
}

// --- schemas of the forms that take a shorthand ---------------------------

#[allow(dead_code)] // only its schema is used
#[derive(JsonSchema)]
#[serde(untagged)]
enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

#[allow(dead_code)] // only its schema is used
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "Command")]
enum CommandSchema {
    /// A line for the node's shell.
    Line(String),
    /// A program and its arguments.
    Argv(#[schemars(length(min = 1))] Vec<String>),
}

#[allow(dead_code)] // only its schema is used
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "NodeSet")]
enum NodeSetSchema {
    /// `all`, or one node's name.
    One(String),
    /// Nodes' names.
    Many(Vec<String>),
}

#[allow(dead_code)] // only its schema is used
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "ExecStep")]
enum ExecStepSchema {
    Command(CommandSchema),
    Full(ExecFields),
}

#[allow(dead_code)] // only its schema is used
#[derive(JsonSchema)]
#[serde(untagged)]
#[schemars(rename = "PairSideOrCommand")]
enum PairSideSchema {
    Command(CommandSchema),
    Full(PairSide),
}

// --- deserializers: checks while the parser points at the value -----------

fn command(words: Result<String, Vec<String>>) -> Result<CommandSpec, Problem> {
    match words {
        Ok(line) if line.trim().is_empty() => Err(Problem::new(
            "the command is empty",
            "write the command line, like `run: ibv_devinfo`",
        )),
        Ok(line) => Ok(CommandSpec::Line(line)),
        Err(argv) if argv.is_empty() => Err(Problem::new(
            "the command is an empty list",
            "list the program and its arguments, like `run: [ibv_devinfo, -v]`",
        )),
        Err(argv) => Ok(CommandSpec::Argv(argv)),
    }
}

fn de_command<'de, D: Deserializer<'de>>(d: D) -> Result<CommandSpec, D::Error> {
    d.deserialize_any(Shorthand::<CommandSpec, NoLongForm> {
        expecting: "a command line, or a list of a program and its arguments",
        short: command,
        long: |_| unreachable!("an empty mapping is refused: `run` is required"),
        marker: PhantomData,
    })
}

fn de_node_set<'de, D: Deserializer<'de>>(d: D) -> Result<NodeSet, D::Error> {
    d.deserialize_any(Shorthand::<NodeSet, NoLongForm> {
        expecting: "`all`, a node's name, or a list of nodes' names",
        short: |v| match v {
            Ok(all) if all == "all" => Ok(NodeSet::All),
            Ok(one) => Ok(NodeSet::Some(vec![one])),
            Err(list) if list.is_empty() => Err(Problem::new(
                "`nodes` is an empty list",
                "name at least one node, or write `nodes: all`",
            )),
            Err(list) => Ok(NodeSet::Some(list)),
        },
        long: |_| unreachable!("an empty mapping is not a node set"),
        marker: PhantomData,
    })
}

fn de_one_or_many<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    d.deserialize_any(Shorthand::<Vec<String>, NoLongForm> {
        expecting: "a path, or a list of paths",
        short: |v| match v {
            Ok(one) => Ok(vec![one]),
            Err(list) if list.is_empty() => Err(Problem::new("`from` is an empty list", "list at least one path")),
            Err(list) => Ok(list),
        },
        long: |_| unreachable!("an empty mapping is not a path"),
        marker: PhantomData,
    })
}

fn de_pair_side<'de, D: Deserializer<'de>>(d: D) -> Result<PairSide, D::Error> {
    d.deserialize_any(Shorthand::<PairSide, PairSide> {
        expecting: "a command, or `{node: NODE, run: COMMAND}`",
        short: |v| command(v).map(|run| PairSide { node: None, run }),
        long: |side| side,
        marker: PhantomData,
    })
}

impl<'de> Deserialize<'de> for ExecStep {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ExecStep, D::Error> {
        d.deserialize_any(Shorthand::<ExecStep, ExecFields> {
            expecting: "a command (run on every node), or `{nodes: [...], run: COMMAND}`",
            short: |v| {
                command(v).map(|run| ExecStep {
                    nodes: NodeSet::All,
                    run,
                })
            },
            long: |f| ExecStep {
                nodes: f.nodes,
                run: f.run,
            },
            marker: PhantomData,
        })
    }
}

impl Serialize for NodeSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            NodeSet::All => s.serialize_str("all"),
            NodeSet::Some(nodes) => nodes.serialize(s),
        }
    }
}

// ---------------------------------------------------------------------------

impl SuiteStep {
    /// What the step does: the first kind given ([`Suite::check`] refuses a
    /// step with none or several).
    pub fn kind(&self) -> Option<StepKind<'_>> {
        if let Some(workload) = &self.workload {
            return Some(StepKind::Workload(workload));
        }
        if let Some(copy) = &self.copy {
            return Some(StepKind::Copy(copy));
        }
        if let Some(collect) = &self.collect {
            return Some(StepKind::Collect(collect));
        }
        if let Some(exec) = &self.exec {
            return Some(StepKind::Exec(exec));
        }
        self.pair.as_ref().map(StepKind::Pair)
    }

    /// The kinds given (one, for a valid step).
    fn kinds(&self) -> Vec<&'static str> {
        [
            ("workload", self.workload.is_some()),
            ("copy", self.copy.is_some()),
            ("collect", self.collect.is_some()),
            ("exec", self.exec.is_some()),
            ("pair", self.pair.is_some()),
        ]
        .into_iter()
        .filter_map(|(key, given)| given.then_some(key))
        .collect()
    }

    /// The `labctl run` fields given, which only `workload` steps take.
    fn run_fields(&self) -> Vec<String> {
        let mut given = self.request.given_keys();
        if self.trace {
            given.push("trace".into());
        }
        given
    }

    /// The run a `workload` step asks for: its fields, its workload and its
    /// time limit (`timeout_s`, which every kind of step has).
    pub fn request(&self) -> WorkloadRequest {
        WorkloadRequest {
            workload: self.workload.clone().unwrap_or_default(),
            timeout: self.timeout_s.map(std::time::Duration::from_secs),
            ..self.request.clone()
        }
    }

    /// The test case's name: `name:`, else the workload, else the kind and
    /// what it acts on (`exec ibv_devinfo`, `copy rc_exchange`).
    pub fn name(&self) -> String {
        if let Some(name) = &self.name {
            return name.clone();
        }
        let base = |path: &str| {
            let path = path.trim_end_matches('/');
            let path = path.rsplit_once(':').map_or(path, |(_, p)| p);
            path.rsplit('/').next().unwrap_or(path).to_string()
        };
        match self.kind() {
            Some(StepKind::Workload(w)) => w.to_string(),
            Some(StepKind::Copy(c)) => format!("copy {}", base(c.from.first().map_or("", |s| s))),
            Some(StepKind::Collect(c)) => format!("collect {}", base(c.from.first().map_or("", |s| s))),
            Some(StepKind::Exec(e)) => format!("exec {}", e.run.program()),
            Some(StepKind::Pair(p)) => format!("pair {}", p.server.run.program()),
            None => "step".into(),
        }
    }

    /// workload: the passive node (`server` when the step does not say).
    pub fn server(&self) -> &str {
        self.request.server.as_deref().unwrap_or("server")
    }

    /// workload: the active node (`client` when the step does not say).
    pub fn client(&self) -> &str {
        self.request.client.as_deref().unwrap_or("client")
    }

    /// The step's time limit.
    pub fn timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs(self.timeout_s.unwrap_or(DEFAULT_TIMEOUT_S))
    }

    /// The commands of an `exec` or `pair` step with the node each runs on
    /// (`None` for every node), for checks of their placeholders.
    pub fn commands(&self) -> Vec<(Option<String>, &CommandSpec)> {
        match self.kind() {
            Some(StepKind::Exec(e)) => match &e.nodes {
                NodeSet::All => vec![(None, &e.run)],
                NodeSet::Some(nodes) => nodes.iter().map(|n| (Some(n.clone()), &e.run)).collect(),
            },
            Some(StepKind::Pair(p)) => vec![
                (Some(p.server_node().to_string()), &p.server.run),
                (Some(p.client_node().to_string()), &p.client.run),
            ],
            _ => Vec::new(),
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
        const SUITE: DocumentKind = DocumentKind {
            shape: "a suite is `steps:` followed by a list of steps like `- workload: write-read` or `- exec: COMMAND` (see docs/cmd/ci.md)",
            docs: "docs/cmd/ci.md",
        };
        parse_located(text, &SUITE).map_err(|e| SuiteError::Invalid {
            path: path.to_path_buf(),
            line: e.line,
            column: e.column,
            message: e.message,
            fix: e.fix,
        })
    }
}

mod check;
mod shorthand;
mod step_fields;

#[cfg(test)]
mod tests;
