//! `exec:` steps: the user's command on one or more nodes in parallel, each
//! in a process group of its own so that a step past its time limit is
//! stopped on every node, not only abandoned.

use std::time::Duration;

use lab_model::suite::ExecStep;
use lab_remote::command::RemoteCommand;
use lab_remote::process::{in_group, note_path, stop_group};

use super::step::{fill, status_words, Running, StepOutcome};
use crate::facts::LabFacts;
use crate::lab::Lab;

/// How long stopping a step's commands may take.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `exec` on its nodes; it passes when every node exits 0 within
/// `timeout`.
pub async fn run_exec(lab: &Lab, facts: Option<&LabFacts>, exec: &ExecStep, timeout: Duration) -> StepOutcome {
    let lab_nodes: Vec<&str> = lab.spec.nodes.iter().map(|n| n.name.as_str()).collect();
    let nodes = exec.nodes.resolve(&lab_nodes);
    let mut planned = Vec::new();
    for node in &nodes {
        match fill(facts, &exec.run, node) {
            Ok(command) => planned.push((node.clone(), command, note_path("exec"))),
            Err(why) => return StepOutcome::failed(format!("exec on {node}: {why}")),
        }
    }
    let running: Vec<Running> = planned.iter().map(|(n, c, _)| Running::new(n, None, c)).collect();
    let wrapped: Vec<(String, RemoteCommand)> = planned
        .iter()
        .map(|(node, command, note)| (node.clone(), in_group(note, command)))
        .collect();
    let on_output = |node: &str, is_err: bool, data: &[u8]| {
        if let Some(r) = running.iter().find(|r| r.node() == node) {
            r.push(is_err, data);
        }
    };
    match tokio::time::timeout(timeout, lab.exec_on(&wrapped, &on_output)).await {
        Ok(Ok(exits)) => {
            let mut failures = Vec::new();
            let mut commands = Vec::new();
            for (exit, r) in exits.iter().zip(&running) {
                commands.push(r.finish(exit.error.is_none().then_some(exit.status), false));
                if let Some(error) = &exit.error {
                    failures.push(format!("{}: {error}", r.describe()));
                } else if exit.status != 0 {
                    failures.push(format!(
                        "{} {}{}",
                        r.describe(),
                        status_words(exit.status),
                        r.last_lines()
                    ));
                }
            }
            StepOutcome {
                failure: (!failures.is_empty()).then(|| failures.join("\n")),
                commands,
                ..StepOutcome::default()
            }
        }
        Ok(Err(e)) => StepOutcome::failed(e.to_string()),
        Err(_) => {
            let stops: Vec<(String, RemoteCommand)> = planned
                .iter()
                .map(|(node, _, note)| (node.clone(), stop_group(note)))
                .collect();
            let said = std::sync::Mutex::new(Vec::<String>::new());
            let on_stop = |node: &str, is_err: bool, data: &[u8]| {
                if !is_err && String::from_utf8_lossy(data).contains("stopped") {
                    said.lock().expect("stop lock").push(node.to_string());
                }
            };
            let stopped = tokio::time::timeout(STOP_TIMEOUT, lab.exec_on(&stops, &on_stop)).await;
            let stopped_on = said.into_inner().expect("stop lock");
            let mut failures = Vec::new();
            let commands = running
                .iter()
                .map(|r| {
                    let was_running = stopped_on.iter().any(|n| n == r.node());
                    if was_running {
                        failures.push(format!(
                            "{} did not finish within {} s; stopped{}",
                            r.describe(),
                            timeout.as_secs(),
                            r.last_lines()
                        ));
                    }
                    r.finish(None, was_running)
                })
                .collect();
            if !matches!(stopped, Ok(Ok(_))) {
                failures.push(format!(
                    "the step's time limit of {} s passed, and its commands could not be stopped within {} s",
                    timeout.as_secs(),
                    STOP_TIMEOUT.as_secs()
                ));
            } else if failures.is_empty() {
                failures.push(format!("the step's time limit of {} s passed", timeout.as_secs()));
            }
            StepOutcome {
                failure: Some(failures.join("\n")),
                commands,
                ..StepOutcome::default()
            }
        }
    }
}
