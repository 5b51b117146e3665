//! `labctl impair NODE --loss 1% --delay 40ms ...` and `labctl impair NODE
//! --clear`: tc netem on the node's data NIC. Without options it shows what
//! is active.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_core::impair::{self, parse_pct, parse_rate, parse_time, ImpairOutcome, Netem};

use super::global::{open_lab, GlobalArgs};

/// Options of `impair`.
#[derive(Debug, ClapArgs)]
pub struct ImpairArgs {
    /// The node whose data NIC (the one under its RDMA device) is impaired; it
    /// acts on what the node sends.
    pub node: String,
    /// Drop this share of packets (e.g. 1%, 0.5%).
    #[arg(long, value_name = "PERCENT", value_parser = parse_pct)]
    pub loss: Option<f64>,
    /// Delay every packet (e.g. 40ms, 500us).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub delay: Option<u64>,
    /// Vary the delay by up to this much (needs --delay).
    #[arg(long, value_name = "TIME", value_parser = parse_time)]
    pub jitter: Option<u64>,
    /// Limit the bandwidth (e.g. 200mbit, 500kbit).
    #[arg(long, value_name = "RATE", value_parser = parse_rate)]
    pub rate: Option<u64>,
    /// Send this share of packets at once, ahead of delayed ones (needs --delay).
    #[arg(long, value_name = "PERCENT", value_parser = parse_pct)]
    pub reorder: Option<f64>,
    /// Send this share of packets twice.
    #[arg(long, value_name = "PERCENT", value_parser = parse_pct)]
    pub duplicate: Option<f64>,
    /// Remove the impairment (fine when there is none).
    #[arg(long, conflicts_with_all = ["loss", "delay", "jitter", "rate", "reorder", "duplicate"])]
    pub clear: bool,
    /// Impair a node whose RDMA device is a hardware NIC anyway: netem on its
    /// netdev shapes IP traffic only, never the RDMA the NIC sends itself.
    #[arg(long, conflicts_with = "clear")]
    pub ip_only: bool,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: &GlobalArgs, a: &ImpairArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let netem = Netem {
        loss_pct: a.loss,
        delay_us: a.delay,
        jitter_us: a.jitter,
        rate_bit_s: a.rate,
        reorder_pct: a.reorder,
        duplicate_pct: a.duplicate,
    };
    let outcome = if a.clear {
        impair::clear(&lab, &a.node).await?
    } else if netem.is_empty() {
        show(&lab, &a.node).await?
    } else {
        impair::set(&lab, &a.node, &netem, a.ip_only).await?
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&outcome)?);
    } else {
        print_outcome(&outcome);
    }
    Ok(ExitCode::SUCCESS)
}

async fn show(lab: &lab_core::lab::Lab, node: &str) -> anyhow::Result<ImpairOutcome> {
    let state = lab.state()?;
    let node_state = lab.node_state(&state, node)?;
    let netdev = impair::data_nic(node_state)?.to_string();
    let session = lab.connect(&state, node).await?;
    let active = impair::active(&session, node_state).await;
    session.close().await;
    Ok(ImpairOutcome {
        node: node.to_string(),
        netdev,
        command: String::new(),
        active: active?,
        shapes_rdma: None,
    })
}

fn print_outcome(o: &ImpairOutcome) {
    match &o.active {
        Some(netem) => println!("{} {}: netem {netem}", o.node, o.netdev),
        None => println!("{} {}: not impaired", o.node, o.netdev),
    }
    if !o.command.is_empty() {
        println!("  ran: {}", o.command);
    }
    if o.shapes_rdma == Some(false) {
        println!("  IP traffic only: the node's RDMA device is a NIC that sends RDMA itself, past netem");
    }
}
