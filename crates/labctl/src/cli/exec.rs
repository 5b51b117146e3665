//! `labctl exec`: run a command on one node, several or all, in parallel;
//! the exit status is the command's (the highest of them on several nodes).

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;
use std::sync::Mutex;

use clap::Args as ClapArgs;
use lab_core::exec::NodeExit;
use serde_json::json;

use super::global::{open_lab, GlobalArgs};

/// Options of `exec`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Quoting: one word after `--` is a shell command line, run by the node's shell \
(pipes, `;`, `$VAR` and globs work); several words are a program and its \
arguments, passed as they are, not split again:
  labctl exec server -- 'dmesg | tail -n 5'     # one word: a shell line
  labctl exec server -- sh -c 'echo a; echo b'  # several words: argv intact
  labctl exec --all -- hostname                 # every node, lines prefixed
Placeholders from the lab facts are filled per node before anything runs: {NODE.addr} {NODE.dev} {NODE.port} {NODE.gid_index} {NODE.gid} {NODE.netdev} {NODE.name} with NODE a node or `self`, and {lab} {nodes} {fabric} {fi_provider}:
  labctl exec client -- ibv_rc_pingpong -d {self.dev} -g {self.gid_index} {server.addr}
Other braces (${VAR}, {a,b}, awk '{print $1}') are left to the shell.")]
pub struct ExecArgs {
    /// The node (or --all, or --nodes).
    #[arg(required_unless_present_any = ["all", "nodes"], conflicts_with_all = ["all", "nodes"])]
    pub node: Option<String>,
    /// Every node of the lab, in parallel; output lines are prefixed with the node.
    #[arg(long, conflicts_with = "nodes")]
    pub all: bool,
    /// These nodes (comma-separated), in parallel.
    #[arg(long, value_delimiter = ',', value_name = "A,B")]
    pub nodes: Vec<String>,
    /// Print per node {status, stdout, stderr, seconds} as JSON instead of the output.
    #[arg(long)]
    pub json: bool,
    /// The command: one word is a shell line, several are argv (see below).
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub async fn run(args: &GlobalArgs, exec: &ExecArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let nodes: Vec<String> = match (&exec.node, exec.all) {
        (Some(node), _) => vec![node.clone()],
        (None, true) => lab.state()?.nodes.iter().map(|n| n.name.clone()).collect(),
        (None, false) => exec.nodes.clone(),
    };
    let commands = lab.commands_for(&nodes, &exec.command)?;
    if let ([(node, command)], Some(_), false) = (commands.as_slice(), &exec.node, exec.json) {
        // One node: its output as it is, its exit status as ours.
        let status = lab
            .exec(node, command, |is_err, data| {
                if is_err {
                    let _ = std::io::stderr().write_all(data);
                } else {
                    let _ = std::io::stdout().write_all(data);
                }
            })
            .await?;
        let _ = std::io::stdout().flush();
        // -1: the command ended without a status (connection lost); like ssh, 255.
        return Ok(exit_code(if (0..=255).contains(&status) { status } else { 255 }));
    }
    let width = nodes.iter().map(|n| n.len()).max().unwrap_or(0);
    let collected: Mutex<HashMap<(String, bool), Vec<u8>>> = Mutex::default();
    let on_output = |node: &str, is_err: bool, data: &[u8]| {
        let mut pending = collected.lock().expect("output buffers");
        let buffer = pending.entry((node.to_string(), is_err)).or_default();
        buffer.extend_from_slice(data);
        if !exec.json {
            // Whole lines only, so two nodes' lines never interleave mid-line.
            if let Some(end) = buffer.iter().rposition(|b| *b == b'\n') {
                let lines: Vec<u8> = buffer.drain(..=end).collect();
                print_prefixed(node, width, is_err, &lines);
            }
        }
    };
    let exits = lab.exec_on(&commands, &on_output).await?;
    let mut collected = collected.into_inner().expect("output buffers");
    let mut take = |node: &str, is_err: bool| collected.remove(&(node.to_string(), is_err)).unwrap_or_default();
    let worst = exits.iter().map(|e| e.status).max().unwrap_or(0);
    if exec.json {
        let per_node: Vec<_> = exits
            .iter()
            .map(|e: &NodeExit| {
                json!({
                    "node": e.node,
                    "status": e.status,
                    "stdout": String::from_utf8_lossy(&take(&e.node, false)),
                    "stderr": String::from_utf8_lossy(&take(&e.node, true)),
                    "seconds": (e.seconds * 1000.0).round() / 1000.0,
                    "error": e.error,
                })
            })
            .collect();
        let doc = json!({"schema": 1, "command": exec.command, "status": worst, "nodes": per_node});
        println!("{}", serde_json::to_string_pretty(&doc)?);
    } else {
        for e in &exits {
            // What is left is a last line without a newline.
            for is_err in [false, true] {
                let mut rest = take(&e.node, is_err);
                if !rest.is_empty() {
                    rest.push(b'\n');
                    print_prefixed(&e.node, width, is_err, &rest);
                }
            }
            if let Some(error) = &e.error {
                print_prefixed(&e.node, width, true, format!("labctl: {error}\n").as_bytes());
            } else if e.status != 0 {
                print_prefixed(
                    &e.node,
                    width,
                    true,
                    format!("labctl: exit status {}\n", e.status).as_bytes(),
                );
            }
        }
    }
    let _ = std::io::stdout().flush();
    Ok(exit_code(worst))
}

/// Writes complete `lines`, each prefixed with `node` padded to `width`.
fn print_prefixed(node: &str, width: usize, is_err: bool, lines: &[u8]) {
    let mut out = Vec::with_capacity(lines.len() + 16);
    for line in lines.split_inclusive(|b| *b == b'\n') {
        out.extend_from_slice(format!("{node:<width$} | ").as_bytes());
        out.extend_from_slice(line);
    }
    if is_err {
        let _ = std::io::stderr().lock().write_all(&out);
    } else {
        let _ = std::io::stdout().lock().write_all(&out);
    }
}

fn exit_code(status: i32) -> ExitCode {
    ExitCode::from(status.clamp(0, 255) as u8)
}
