//! `labctl cp SRC... DEST`: files between this machine and the lab's nodes,
//! scp-style, every file checked by sha256.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_core::copy::{CopyLocation, CopyReport};

use super::global::{open_lab, GlobalArgs};

/// Options of `cp`.
#[derive(Debug, ClapArgs)]
#[command(after_help = "\
Paths: NODE:PATH is a path on a node, @all:PATH the same path on every node \
(in parallel), anything else a path here (write ./a:b for a local name with a \
colon). Relative node paths start in the login user's home directory.
  labctl cp ./my-server @all:/usr/local/bin/       # to every node
  labctl cp -r ./build server:/opt/app             # a directory
  labctl cp client:/tmp/out.log ./                 # back here
  labctl cp @all:/var/log/rdma-agent.log ./logs/   # ./logs/NODE/rdma-agent.log
Every file is written under a hidden name beside its destination, checked by \
sha256 and only then renamed, so a failed copy leaves no partial file.")]
pub struct CpArgs {
    /// Sources, then the destination.
    #[arg(required = true, num_args = 2.., value_name = "SRC... DEST")]
    pub paths: Vec<String>,
    /// Copy directories and what they hold.
    #[arg(short, long)]
    pub recursive: bool,
    /// No progress bars.
    #[arg(short, long)]
    pub quiet: bool,
    /// Print what was copied (files, sizes, sha256, failures) as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: &GlobalArgs, cp: &CpArgs) -> anyhow::Result<ExitCode> {
    let (dest, sources) = cp.paths.split_last().expect("clap requires two paths");
    let sources: Vec<CopyLocation> = sources.iter().map(|s| CopyLocation::parse(s)).collect();
    let dest = CopyLocation::parse(dest);
    let lab = open_lab(args)?;
    let progress = crate::progress::copy_progress(cp.quiet || cp.json);
    let report = lab.copy(&sources, &dest, cp.recursive, progress.as_ref()).await?;
    if cp.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_summary(&report);
    }
    Ok(if report.failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_summary(report: &CopyReport) {
    for failure in &report.failed {
        eprintln!("labctl: cp: {}", failure.error);
    }
    if report.files.is_empty() {
        return;
    }
    let mut nodes: Vec<&str> = report.files.iter().map(|f| f.node.as_str()).collect();
    nodes.dedup();
    let mib = report.bytes() as f64 / (1u64 << 20) as f64;
    let files = report.files.len();
    eprintln!(
        "copied {files} file{} ({mib:.1} MiB) {} {} in {:.1} s ({:.1} MiB/s), sha256 checked",
        if files == 1 { "" } else { "s" },
        if report.files[0].to.contains(':') { "to" } else { "from" },
        nodes.join(", "),
        report.seconds,
        mib / report.seconds.max(1e-3),
    );
}
