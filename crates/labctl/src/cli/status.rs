//! `labctl status`: the lab's VMs, SSH, agents and RDMA ports.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_core::status::LabStatus;
use lab_providers::Liveness;

use super::global::{open_lab, GlobalArgs};

/// Options of `status`.
#[derive(Debug, ClapArgs)]
pub struct StatusArgs {
    /// Print JSON (with a schema version) instead of a table.
    #[arg(long)]
    pub json: bool,
}

pub async fn run(args: &GlobalArgs, status: &StatusArgs) -> anyhow::Result<ExitCode> {
    let lab = open_lab(args)?;
    let report = lab.status().await?;
    if status.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print_table(&report);
    }
    let healthy = report.phase == Some(lab_state::Phase::Ready)
        && report
            .nodes
            .iter()
            .all(|n| n.error.is_none() && (report.fabric != "rxe" || n.rdma.iter().any(|p| p.state == "PORT_ACTIVE")));
    Ok(if healthy || report.phase.is_none() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// The human view of a status report.
pub fn print_table(s: &LabStatus) {
    let Some(phase) = s.phase else {
        println!("lab `{}` ({} / {}): not up", s.lab, s.provider, s.fabric);
        return;
    };
    let accel = s.provider_state.get("accel").and_then(|a| a.as_str()).unwrap_or("-");
    println!(
        "lab `{}`  provider {}  fabric {}  accel {}  phase {:?}  since {}",
        s.lab,
        s.provider,
        s.fabric,
        accel,
        phase,
        s.created_at.as_deref().unwrap_or("-")
    );
    println!(
        "{:<10} {:<8} {:<16} {:<16} {:<8} {:<22} {:<5} GID",
        "NODE", "VM", "SSH", "DATA", "AGENT", "RDMA", "MTU"
    );
    for n in &s.nodes {
        let vm = match &n.vm {
            Liveness::Running => "running",
            Liveness::Stopped(_) => "stopped",
        };
        let agent = n.agent.as_ref().map_or("-".to_string(), |a| format!("v{}", a.version));
        let rdma = n.rdma.first().map_or("-".to_string(), |r| {
            format!("{}/{} {} {}", r.device, r.port, r.netdev, short_state(&r.state))
        });
        let mtu = n.rdma.first().map_or("-".to_string(), |r| r.active_mtu.to_string());
        // The GID index of the data address's RoCE v2 GID (lab facts).
        let gid = n
            .facts
            .as_ref()
            .and_then(|f| f.gid_index)
            .map_or("-".to_string(), |i| i.to_string());
        println!(
            "{:<10} {:<8} {:<16} {:<16} {:<8} {:<22} {:<5} {}",
            n.name, vm, n.ssh, n.data_addr, agent, rdma, mtu, gid
        );
        if let Some(netem) = &n.impairment {
            let nic = n.rdma.first().map_or("data NIC", |r| r.netdev.as_str());
            println!(
                "           impaired: netem {netem} on {nic} (`labctl impair {} --clear` removes it)",
                n.name
            );
        }
        if let Some(e) = &n.error {
            println!("           ! {e}");
        }
    }
}

fn short_state(state: &str) -> &str {
    state.strip_prefix("PORT_").unwrap_or(state)
}
