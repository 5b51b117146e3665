//! `labctl capture NODE [--duration S | --count N] -o FILE.pcap`: tcpdump on
//! the node's data NIC, the pcap copied to the host. Ctrl-C stops it early
//! and still keeps what was captured.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use lab_core::capture::{capture, CaptureOptions, CaptureOutcome, StoppedBy, DEFAULT_FILTER};

use super::global::{interrupted, open_lab, BadInput, GlobalArgs};

/// Options of `capture`.
#[derive(Debug, ClapArgs)]
pub struct CaptureArgs {
    /// The node to capture on (its data NIC, the one under its RDMA device).
    pub node: String,
    /// Stop after this many seconds (default: at --count packets, or Ctrl-C).
    #[arg(short = 'd', long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Stop after this many packets.
    #[arg(short = 'c', long, value_name = "N")]
    pub count: Option<u64>,
    /// tcpdump filter expression.
    #[arg(long, value_name = "EXPR", default_value = DEFAULT_FILTER)]
    pub filter: String,
    /// Where to write the pcap on this machine.
    #[arg(short = 'o', long, value_name = "FILE.pcap")]
    pub output: PathBuf,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Capture on a node whose RDMA device is a hardware NIC anyway: tcpdump
    /// on its netdev sees IP traffic only, never the RDMA the NIC sends itself.
    #[arg(long)]
    pub ip_only: bool,
}

pub async fn run(args: &GlobalArgs, a: &CaptureArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let duration = match a.duration {
        Some(s) if !(s.is_finite() && s > 0.0) => {
            return Err(BadInput(format!("--duration {s}: give a number of seconds above 0")).into())
        }
        Some(s) => Some(Duration::from_secs_f64(s)),
        None => None,
    };
    if a.count == Some(0) {
        return Err(BadInput("--count 0 would capture nothing; give a number of packets above 0".into()).into());
    }
    let opts = CaptureOptions {
        node: a.node.clone(),
        duration,
        count: a.count,
        filter: a.filter.clone(),
        output: a.output.clone(),
        ip_only: a.ip_only,
    };
    let until = match (duration, a.count) {
        (Some(d), Some(n)) => format!("{n} packets or {} s, Ctrl-C to stop early", d.as_secs_f64()),
        (Some(d), None) => format!("{} s, Ctrl-C to stop early", d.as_secs_f64()),
        (None, Some(n)) => format!("{n} packets, Ctrl-C to stop early"),
        (None, None) => "Ctrl-C to stop".to_string(),
    };
    let outcome = capture(
        &lab,
        &opts,
        |line| eprintln!("capturing on `{}`: {line} ({until})", a.node),
        async {
            interrupted().await;
        },
    )
    .await?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print_outcome(&outcome);
    }
    Ok(ExitCode::SUCCESS)
}

fn print_outcome(o: &CaptureOutcome) {
    let why = match o.stopped_by {
        StoppedBy::Count => "count reached",
        StoppedBy::Duration => "duration up",
        StoppedBy::Interrupted => "interrupted",
    };
    println!(
        "{} packets captured on `{}` {} ({}; filter `{}`)",
        o.packets, o.node, o.netdev, why, o.filter
    );
    println!("  saved       {} ({} bytes)", o.output, o.bytes);
    if !o.roce_opcodes.is_empty() {
        println!(
            "  RoCEv2      {} packets by opcode:",
            o.roce_opcodes.values().sum::<u64>()
        );
        for (name, n) in &o.roce_opcodes {
            println!("  {n:>10}  {name}");
        }
    }
    println!(
        "  read it     tshark -r {} -Y infiniband -T fields -e infiniband.bth.opcode -e infiniband.bth.psn   (see docs/labs/capture.md)",
        o.output
    );
}
