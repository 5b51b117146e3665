//! `pair:` steps: a server command and a client command on two nodes.
//!
//! The server starts first, in a process group of its own. The client
//! starts once the server is ready: its TCP `port` listens on its node (a
//! poll on the node, /proc/net/tcp), and/or a line of its output matches
//! `ready`. The client's exit status decides; then the server has
//! [`SERVER_GRACE`] to exit on its own with status 0, or it is stopped (with
//! `server_exit: any` its status does not count and it is stopped after
//! [`SERVER_GRACE_ANY`]). Whatever is still running when the step's time
//! limit passes is stopped, and the message says what was waited for. A
//! failed step whose commands were given a GID index that is wrong on
//! their node says so ([`gid_index`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join, OptionFuture};
use lab_model::suite::{PairStep, ServerExit};
use lab_remote::command::RemoteCommand;
use lab_remote::process::{in_group, note_path, stop_group, wait_listening};
use lab_remote::ssh::{self, SshError, SshSession};
use regex::Regex;
use tokio::sync::Notify;
use tokio::time::{sleep_until, Instant};

use super::gid_index;
use super::step::{fill, status_words, Running, StepOutcome};
use crate::facts::LabFacts;
use crate::lab::{connect_pinned, Lab};

/// How long the server may take to exit after its client finished.
pub const SERVER_GRACE: Duration = Duration::from_secs(10);
/// The same with `server_exit: any`, where the server often never exits on
/// its own (a daemon): time to print its last lines, then it is stopped.
pub const SERVER_GRACE_ANY: Duration = Duration::from_secs(2);
/// How long the sessions to the two nodes may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a stopped command may take to hand in its last output.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How one side's command ended, while the step runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// Still running (or never started).
    No,
    /// It exited with this status.
    Status(i32),
    /// labctl stopped it.
    Stopped,
}

impl Ended {
    fn status(self) -> Option<i32> {
        match self {
            Ended::Status(s) => Some(s),
            _ => None,
        }
    }
}

/// Marks the server ready when a line of its output matches.
struct ReadyLine {
    regex: Option<Regex>,
    partial: String,
    seen: Arc<AtomicBool>,
    notify: Arc<Notify>,
}

impl ReadyLine {
    fn feed(&mut self, data: &[u8]) {
        let Some(regex) = &self.regex else { return };
        if self.seen.load(Ordering::Relaxed) {
            return;
        }
        self.partial.push_str(&String::from_utf8_lossy(data));
        // Whole lines, and the line being printed (a prompt without a newline).
        let matched = self.partial.lines().any(|line| regex.is_match(line));
        if let Some(last_newline) = self.partial.rfind('\n') {
            self.partial.drain(..=last_newline);
        }
        if matched {
            self.seen.store(true, Ordering::Relaxed);
            self.notify.notify_one();
        }
    }
}

/// Runs `pair` within `timeout`.
pub async fn run_pair(lab: &Lab, facts: Option<&LabFacts>, pair: &PairStep, timeout: Duration) -> StepOutcome {
    let deadline = Instant::now() + timeout;
    let (server_node, client_node) = (pair.server_node(), pair.client_node());
    let server_cmd = match fill(facts, &pair.server.run, server_node) {
        Ok(c) => c,
        Err(why) => return StepOutcome::failed(format!("server on {server_node}: {why}")),
    };
    let client_cmd = match fill(facts, &pair.client.run, client_node) {
        Ok(c) => c,
        Err(why) => return StepOutcome::failed(format!("client on {client_node}: {why}")),
    };
    let (server_session, client_session) = match connect_both(lab, server_node, client_node).await {
        Ok(sessions) => sessions,
        Err(why) => return StepOutcome::failed(why),
    };
    let mut outcome = drive(
        pair,
        timeout,
        deadline,
        (&server_session, &server_cmd),
        (&client_session, &client_cmd),
    )
    .await;
    if let (Some(failure), Some(facts)) = (outcome.failure.as_mut(), facts) {
        // The sides that ran: the server always, the client once the server was ready.
        let sides = [
            ("server", server_node, &server_session, &server_cmd),
            ("client", client_node, &client_session, &client_cmd),
        ];
        for (side, node, session, command) in sides.into_iter().take(outcome.commands.len()) {
            let Some(node_facts) = facts.nodes.iter().find(|n| n.name == node) else {
                continue;
            };
            if let Some(why) = gid_index::explain(session, node_facts, side, command).await {
                failure.push('\n');
                failure.push_str(&why);
            }
        }
    }
    server_session.close().await;
    client_session.close().await;
    outcome
}

async fn connect_both(lab: &Lab, server: &str, client: &str) -> Result<(SshSession, SshSession), String> {
    let state = lab.state().map_err(|e| e.to_string())?;
    let key = Arc::new(ssh::load_or_create_key(&lab.dir.ssh_key()).map_err(|e| e.to_string())?);
    let connect = |node: &str| {
        let recorded = lab.node_state(&state, node).cloned();
        let key = key.clone();
        async move { connect_pinned(&recorded?, key, CONNECT_TIMEOUT).await }
    };
    let (s, c) = join(connect(server), connect(client)).await;
    Ok((s.map_err(|e| e.to_string())?, c.map_err(|e| e.to_string())?))
}

async fn drive(
    pair: &PairStep,
    timeout: Duration,
    deadline: Instant,
    (server_session, server_cmd): (&SshSession, &RemoteCommand),
    (client_session, client_cmd): (&SshSession, &RemoteCommand),
) -> StepOutcome {
    let (server_note, client_note) = (note_path("server"), note_path("client"));
    let server = Running::new(server_session.node(), Some("server"), server_cmd);
    let client = Running::new(client_session.node(), Some("client"), client_cmd);
    let seen = Arc::new(AtomicBool::new(false));
    let notify = Arc::new(Notify::new());
    let mut ready_line = ReadyLine {
        regex: pair
            .ready
            .as_deref()
            .map(|r| Regex::new(r).expect("checked when the suite was read")),
        partial: String::new(),
        seen: seen.clone(),
        notify: notify.clone(),
    };
    let wrapped_server = in_group(&server_note, server_cmd);
    let server_run = server_session.exec_streaming(&wrapped_server, None, |is_err, data| {
        server.push(is_err, data);
        ready_line.feed(data);
    });
    tokio::pin!(server_run);
    let mut server_ended = Ended::No;
    let mut client_ended = Ended::No;
    let mut failures: Vec<String> = Vec::new();

    // 1. Wait for the server to be ready.
    let port_wait = pair.port.map(|port| wait_listening(port, timeout.as_secs()));
    let port_ready = OptionFuture::from(port_wait.as_ref().map(|wait| server_session.exec(wait)));
    let line_ready = async {
        if pair.ready.is_some() {
            while !seen.load(Ordering::Relaxed) {
                notify.notified().await;
            }
        }
    };
    let waited_for = match (pair.port, &pair.ready) {
        (Some(port), Some(re)) => format!("port {port} to listen and a line matching `{re}`"),
        (Some(port), None) => format!("port {port} to listen"),
        (None, Some(re)) => format!("a line matching `{re}`"),
        (None, None) => unreachable!("a pair says when its server is ready (checked with the suite)"),
    };
    let ready = tokio::select! {
        status = &mut server_run => {
            server_ended = ended(status);
            failures.push(format!(
                "{} {} before it was ready (waited for {waited_for}){}",
                server.describe(),
                ended_words(server_ended),
                server.last_lines()
            ));
            false
        }
        (port, ()) = join(port_ready, line_ready) => match port {
            Some(Ok(out)) if out.status != 0 => {
                failures.push(format!(
                    "{} was not ready within {} s: port {} did not listen{}",
                    server.describe(), timeout.as_secs(), pair.port.unwrap_or_default(), server.last_lines()
                ));
                false
            }
            Some(Err(e)) => {
                failures.push(format!("waiting for the server's port: {e}"));
                false
            }
            _ => true,
        },
        () = sleep_until(deadline) => {
            failures.push(format!(
                "{} was not ready within {} s (waited for {waited_for}){}",
                server.describe(),
                timeout.as_secs(),
                server.last_lines()
            ));
            false
        }
    };

    // 2. The client, while the server keeps running.
    if ready {
        let wrapped_client = in_group(&client_note, client_cmd);
        let client_run = client_session.exec_streaming(&wrapped_client, None, |is_err, data| client.push(is_err, data));
        tokio::pin!(client_run);
        loop {
            tokio::select! {
                status = &mut client_run => {
                    client_ended = ended(status);
                    break;
                }
                status = &mut server_run, if server_ended == Ended::No => {
                    server_ended = ended(status);
                }
                () = sleep_until(deadline) => {
                    stop(client_session, &client_note, &mut client_run).await;
                    client_ended = Ended::Stopped;
                    failures.push(format!(
                        "{} did not finish within {} s; stopped{}",
                        client.describe(), timeout.as_secs(), client.last_lines()
                    ));
                    break;
                }
            }
        }
        match client_ended {
            Ended::Status(0) | Ended::Stopped => {}
            other => failures.push(format!(
                "{} {}{}",
                client.describe(),
                ended_words(other),
                client.last_lines()
            )),
        }
    }

    // 3. The server: exits on its own within the grace, or is stopped.
    if server_ended == Ended::No {
        let grace = if ready && client_ended != Ended::Stopped {
            let grace = match pair.server_exit {
                ServerExit::Zero => SERVER_GRACE,
                ServerExit::Any => SERVER_GRACE_ANY,
            };
            (Instant::now() + grace).min(deadline.max(Instant::now()))
        } else {
            Instant::now()
        };
        tokio::select! {
            status = &mut server_run => server_ended = ended(status),
            () = sleep_until(grace) => {
                stop(server_session, &server_note, &mut server_run).await;
                server_ended = Ended::Stopped;
                if ready && client_ended != Ended::Stopped && pair.server_exit == ServerExit::Zero {
                    failures.push(format!(
                        "{} was still running {} s after the client finished; stopped (set `server_exit: any` if it never exits on its own){}",
                        server.describe(), SERVER_GRACE.as_secs(), server.last_lines()
                    ));
                }
            }
        }
    }
    if pair.server_exit == ServerExit::Zero {
        if let Ended::Status(status) = server_ended {
            if status != 0 && ready {
                failures.push(format!(
                    "{} {}{}",
                    server.describe(),
                    status_words(status),
                    server.last_lines()
                ));
            }
        }
    }
    let mut commands = vec![server.finish(server_ended.status(), server_ended == Ended::Stopped)];
    if ready {
        commands.push(client.finish(client_ended.status(), client_ended == Ended::Stopped));
    }
    StepOutcome {
        failure: (!failures.is_empty()).then(|| failures.join("\n")),
        commands,
        ..StepOutcome::default()
    }
}

fn ended(status: Result<i32, SshError>) -> Ended {
    match status {
        Ok(status) if status >= 0 => Ended::Status(status),
        // The channel closed without a status: the session is gone.
        _ => Ended::Status(255),
    }
}

fn ended_words(ended: Ended) -> String {
    match ended {
        Ended::Status(255) => "ended without an exit status (the connection to the node was lost?)".into(),
        Ended::Status(status) => status_words(status),
        Ended::Stopped => "was stopped".into(),
        Ended::No => "is still running".into(),
    }
}

/// Stops the group noted in `note`, then lets `run` hand in its last output.
async fn stop<F>(session: &SshSession, note: &str, run: &mut std::pin::Pin<&mut F>)
where
    F: std::future::Future,
{
    if let Err(e) = tokio::time::timeout(DRAIN_TIMEOUT * 4, session.exec(&stop_group(note))).await {
        tracing::warn!(node = session.node(), "stopping a step's command: {e}");
    }
    let _ = tokio::time::timeout(DRAIN_TIMEOUT, run.as_mut()).await;
}
