//! What every kind of step shares: its outcome, the user's command filled
//! from the lab facts, the captured output of a command, and the words of a
//! failure message.

use std::sync::Mutex;
use std::time::Instant;

use lab_model::suite::CommandSpec;
use lab_remote::command::RemoteCommand;
use lab_results::ci::{CapturedOutput, CommandRecord, FailureKind, TransferRecord};
use lab_results::collective::CollectiveRecord;
use lab_results::run::RunRecord;

use crate::exec::{filled_command, FillError};
use crate::facts::LabFacts;

/// Lines of a command's output quoted in a failure message.
pub const QUOTED_LINES: usize = 8;

/// How a step ended.
#[derive(Debug, Default)]
pub struct StepOutcome {
    /// Why it failed; `None` when it passed.
    pub failure: Option<String>,
    /// A pair workload step's run record.
    pub run: Option<RunRecord>,
    /// A collective step's record.
    pub collective: Option<CollectiveRecord>,
    /// An exec or pair step's commands.
    pub commands: Vec<CommandRecord>,
    /// A copy or collect step's files.
    pub transfers: Vec<TransferRecord>,
    /// A traced workload step's trace file.
    pub trace: Option<std::path::PathBuf>,
    /// The failure is a workload's bytes that did not verify (final: never
    /// retried); otherwise a failure is the program's or the run's.
    pub verification_failed: bool,
}

impl StepOutcome {
    /// How it failed; None when it passed.
    pub fn failure_kind(&self) -> Option<FailureKind> {
        self.failure.as_ref().map(|_| {
            if self.verification_failed {
                FailureKind::Verification
            } else {
                FailureKind::Run
            }
        })
    }

    /// A workload step whose run finished: `not_verified` says why its
    /// bytes did not verify (a verification failure), `trace` is its trace
    /// file as written, if it was traced (a trace that could not be written
    /// fails a step that verified).
    pub fn finished(not_verified: Option<String>, trace: Option<Result<std::path::PathBuf, String>>) -> StepOutcome {
        let verification_failed = not_verified.is_some();
        let mut failure = not_verified;
        let trace = match trace {
            Some(Ok(path)) => Some(path),
            Some(Err(e)) => {
                failure.get_or_insert(e);
                None
            }
            None => None,
        };
        StepOutcome {
            failure,
            trace,
            verification_failed,
            ..StepOutcome::default()
        }
    }

    /// A step that failed before running anything.
    pub fn failed(why: impl Into<String>) -> StepOutcome {
        StepOutcome {
            failure: Some(why.into()),
            ..StepOutcome::default()
        }
    }
}

/// `command` for `node`, its placeholders filled from `facts` (as `labctl
/// exec` fills them).
pub fn fill(facts: Option<&LabFacts>, command: &CommandSpec, node: &str) -> Result<RemoteCommand, String> {
    filled_command(facts, &command.words(), node).map_err(|e| match e {
        FillError::Placeholder(e) => e.to_string(),
        // Placeholders were checked before `up`; facts are missing only
        // when they could not be gathered.
        FillError::NoFacts => "the lab has no lab facts to fill this command's placeholders from".into(),
    })
}

/// One command's output and timing while it runs; shared with the output
/// callback, hence the locks.
pub struct Running {
    node: String,
    role: Option<String>,
    command: String,
    started: Instant,
    stdout: Mutex<CapturedOutput>,
    stderr: Mutex<CapturedOutput>,
}

impl Running {
    /// `command` on `node` starts now.
    pub fn new(node: &str, role: Option<&str>, command: &RemoteCommand) -> Running {
        Running {
            node: node.to_string(),
            role: role.map(str::to_string),
            command: command.as_str().to_string(),
            started: Instant::now(),
            stdout: Mutex::new(CapturedOutput::default()),
            stderr: Mutex::new(CapturedOutput::default()),
        }
    }

    /// The node.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Output arrived.
    pub fn push(&self, is_stderr: bool, data: &[u8]) {
        let stream = if is_stderr { &self.stderr } else { &self.stdout };
        stream.lock().expect("output lock").push(data);
    }

    /// The record once it ended (`status`) or was stopped.
    pub fn finish(&self, status: Option<i32>, stopped: bool) -> CommandRecord {
        CommandRecord {
            node: self.node.clone(),
            role: self.role.clone(),
            command: self.command.clone(),
            status,
            stopped,
            seconds: self.started.elapsed().as_secs_f64(),
            stdout: self.stdout.lock().expect("output lock").text(),
            stderr: self.stderr.lock().expect("output lock").text(),
        }
    }

    /// `ROLE on NODE: `COMMAND``, as failure messages name a command.
    pub fn describe(&self) -> String {
        describe(self.role.as_deref(), &self.node, &self.command)
    }

    /// The last lines of its output (stdout, then stderr), indented for a
    /// failure message; empty when it printed nothing.
    pub fn last_lines(&self) -> String {
        let mut lines = self.stdout.lock().expect("output lock").last_lines(QUOTED_LINES);
        let err = self.stderr.lock().expect("output lock").last_lines(QUOTED_LINES);
        lines.extend(err);
        let lines = &lines[lines.len().saturating_sub(QUOTED_LINES)..];
        if lines.is_empty() {
            return String::new();
        }
        let mut out = String::from("\n  last lines of its output:");
        for line in lines {
            out.push_str("\n    ");
            out.push_str(line);
        }
        out
    }
}

/// `ROLE on NODE: `COMMAND`` (`exec on NODE: ...` without a role).
pub fn describe(role: Option<&str>, node: &str, command: &str) -> String {
    format!("{} on {node}: `{command}`", role.unwrap_or("exec"))
}

/// How a command's status reads in a message.
pub fn status_words(status: i32) -> String {
    if status > 128 && status < 128 + 65 {
        format!("was killed by signal {} (status {status})", status - 128)
    } else {
        format!("exited with status {status}")
    }
}
