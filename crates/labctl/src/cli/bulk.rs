//! `labctl bulk`: the same bytes by RDMA WRITE and by TCP between the same
//! two nodes; a side-by-side table (or `--json`), CSV and charts.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args as ClapArgs;
use lab_core::bulk::{run_bulk, BulkOptions};
use lab_results::bulk::{BulkRecord, BulkSide};

use super::global::{open_lab, BadInput, GlobalArgs};
use super::table::{Align, Table};

/// Options of `bulk`.
#[derive(Debug, ClapArgs)]
pub struct BulkArgs {
    /// The receiving node (holds the buffer, checks every byte).
    #[arg(long, default_value = "server")]
    pub server: String,
    /// The sending node.
    #[arg(long, default_value = "client")]
    pub client: String,
    /// Bytes to move, with a unit: 64MiB, 512KiB, 1GiB [default: 4MiB].
    #[arg(long, value_parser = parse_size)]
    pub total: Option<u64>,
    /// Bytes per RDMA WRITE and per TCP write [default: 256KiB].
    #[arg(long, value_parser = parse_size)]
    pub chunk: Option<u64>,
    /// WRITEs in flight (the agent's default is 128).
    #[arg(short = 't', long)]
    pub tx_depth: Option<u32>,
    /// Seed of the payload pattern (the same for both transfers).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Give up on one transfer after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout: u64,
    /// Write the timelines (transport,side,t_s,bytes,mib_s) here, and a summary beside it (NAME-summary.csv).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Write the charts (PNG and SVG) here [default: beside the saved runs in the lab's results directory].
    #[arg(long, value_name = "DIR")]
    pub plot: Option<PathBuf>,
    /// Print the record as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_size(text: &str) -> Result<u64, String> {
    lab_model::size::parse_size(text)
}

pub async fn run(args: &GlobalArgs, bulk: &BulkArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let defaults = workload_catalogue::find("bulk-rdma")
        .expect("in the catalogue")
        .defaults;
    let total = bulk.total.unwrap_or(defaults.total);
    let chunk = bulk.chunk.unwrap_or(defaults.size);
    if total == 0 || chunk == 0 {
        return Err(BadInput(format!(
            "--total and --chunk must be at least 1 byte (got --total {total} --chunk {chunk})"
        ))
        .into());
    }
    let opts = BulkOptions {
        server: bulk.server.clone(),
        client: bulk.client.clone(),
        total,
        chunk,
        seed: bulk.seed,
        tx_depth: bulk.tx_depth.unwrap_or(0),
        timeout: Duration::from_secs(bulk.timeout),
        csv: bulk.csv.clone(),
        plot_dir: bulk.plot.clone(),
    };
    let quiet = bulk.json;
    let mut last: Option<(&str, f64)> = None;
    let record = run_bulk(&lab, &opts, |transport, p| {
        if quiet {
            return;
        }
        // The first event of each transfer, then at most one a second.
        let due = last.is_none_or(|(name, at)| name != transport.name || p.elapsed_s - at >= 1.0);
        if !due {
            return;
        }
        last = Some((transport.name, p.elapsed_s));
        eprintln!(
            "  {:<10} {:>6.1}s {:<8} {} bytes{}",
            transport.label,
            p.elapsed_s,
            p.phase,
            p.bytes,
            if p.message.is_empty() {
                String::new()
            } else {
                format!(" - {}", p.message)
            }
        );
    })
    .await?;
    if bulk.json {
        println!("{}", serde_json::to_string_pretty(&record)?);
    } else {
        print_record(&record);
    }
    Ok(if record.verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

fn print_record(r: &BulkRecord) {
    println!(
        "bulk on lab `{}`: {} B in {} B chunks, {} -> {} (seed {})",
        r.lab, r.total, r.chunk, r.rdma.client.node, r.rdma.server.node, r.seed
    );
    let mut table = Table::new(
        "  ",
        &[("", Align::Left), ("RDMA WRITE", Align::Right), ("TCP", Align::Right)],
    );
    let mut row = |what: &str, f: &dyn Fn(&BulkSide) -> String| {
        for (side, pick) in [
            ("client", (&r.rdma.client, &r.tcp.client)),
            ("server", (&r.rdma.server, &r.tcp.server)),
        ] {
            table.row([format!("{what} ({side})"), f(pick.0), f(pick.1)]);
        }
    };
    row("elapsed s", &|s| format!("{:.3}", s.elapsed_s));
    row("MiB/s", &|s| format!("{:.2}", s.mib_s));
    row("Gb/s", &|s| format!("{:.4}", s.gbps));
    row("CPU s user+sys", &|s| {
        format!(
            "{:.3} ({:.3}+{:.3})",
            s.cpu_user_s + s.cpu_system_s,
            s.cpu_user_s,
            s.cpu_system_s
        )
    });
    row("CPU s/GiB", &|s| format!("{:.3}", s.cpu_s_per_gib));
    row("node CPU busy s", &|s| {
        s.node_cpu_busy_s.map_or("-".to_string(), |v| format!("{v:.3}"))
    });
    let verdict = |ok: bool| if ok { "yes" } else { "NO" };
    table.row(["verified (server)", verdict(r.rdma.verified), verdict(r.tcp.verified)]);
    table.print();
    for leg in [&r.rdma, &r.tcp] {
        println!("  {:<10} {}", leg.transport, leg.verify_detail);
    }
    println!("  reading     {}", r.reading);
    println!("  note        CPU is the agent's session thread; rxe's kernel work and TCP's softirq work");
    println!("              show only in `node CPU busy` (see docs/labs/bulk.md)");
    for leg in [&r.rdma, &r.tcp] {
        if let Some(path) = &leg.saved_to {
            println!("  saved       {path}");
        }
    }
    if let (Some(csv), Some(summary)) = (&r.csv, &r.summary_csv) {
        println!("  csv         {csv}");
        println!("              {summary}");
    }
    for (i, plot) in r.plots.iter().enumerate() {
        println!("  {}{plot}", if i == 0 { "plots       " } else { "            " });
    }
}
