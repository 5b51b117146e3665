//! `labctl ssh NODE [-- CMD...]`: a shell (or one command) through the
//! system's ssh client, logging in as `up` did and trusting only the host
//! keys pinned at `up`.

use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args as ClapArgs;

use super::global::{open_lab, GlobalArgs};

/// Options of `ssh`.
#[derive(Debug, ClapArgs)]
pub struct SshArgs {
    /// Never prompt for a password or passphrase (ssh's BatchMode, on the
    /// jump hop too): fail instead. For scripts.
    #[arg(long)]
    pub batch: bool,
    /// The node.
    pub node: String,
    /// A command to run instead of a shell (after `--`); each argument is
    /// handed to ssh as its own element, and ssh joins them with spaces for
    /// the node's shell, as `ssh HOST CMD...` does.
    #[arg(last = true)]
    pub command: Vec<String>,
}

pub fn run(args: &GlobalArgs, ssh: &SshArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let argv = lab.ssh_argv(&ssh.node, &ssh.command, ssh.batch)?;
    let err = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    Err(err).context("cannot run `ssh` (install openssh-client)")
}
