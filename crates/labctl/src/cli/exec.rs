//! `labctl exec NODE -- CMD...`: run a command on a node; its exit status is ours.

use std::io::Write;
use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_remote::command::RemoteCommand;

use super::global::{open_lab, GlobalArgs};

/// Options of `exec`.
#[derive(Debug, ClapArgs)]
pub struct ExecArgs {
    /// The node.
    pub node: String,
    /// The command; words are joined with spaces and run by the node's shell, as ssh does.
    #[arg(last = true, required = true)]
    pub command: Vec<String>,
}

pub async fn run(args: &GlobalArgs, exec: &ExecArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let command = RemoteCommand::user_line(exec.command.join(" "));
    let status = lab
        .exec(&exec.node, &command, |is_err, data| {
            if is_err {
                let _ = std::io::stderr().write_all(data);
            } else {
                let _ = std::io::stdout().write_all(data);
            }
        })
        .await?;
    let _ = std::io::stdout().flush();
    // -1: the command ended without a status (connection lost); like ssh, 255.
    Ok(ExitCode::from(if (0..=255).contains(&status) {
        status as u8
    } else {
        255
    }))
}
