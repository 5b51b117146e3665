//! `labctl ssh NODE`: an interactive shell through the system's ssh client,
//! trusting only the host key pinned at `up`.

use std::os::unix::process::CommandExt;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args as ClapArgs;

use super::global::{open_lab, GlobalArgs};

/// Options of `ssh`.
#[derive(Debug, ClapArgs)]
pub struct SshArgs {
    /// The node.
    pub node: String,
}

pub fn run(args: &GlobalArgs, ssh: &SshArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let argv = lab.ssh_argv(&ssh.node)?;
    let err = std::process::Command::new(&argv[0]).args(&argv[1..]).exec();
    Err(err).context("cannot run `ssh` (install openssh-client)")
}
