//! `labctl status`: the lab's VMs, SSH, agents and RDMA ports.

use std::process::ExitCode;

use clap::Args as ClapArgs;
use lab_core::status::LabStatus;
use lab_providers::Liveness;

use super::global::{open_lab, GlobalArgs};
use super::table::{Align, Table};

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
    for line in table_lines(s) {
        println!("{line}");
    }
}

fn table_lines(s: &LabStatus) -> Vec<String> {
    let Some(phase) = s.phase else {
        return vec![format!("lab `{}` ({} / {}): not up", s.lab, s.provider, s.fabric)];
    };
    let accel = s.provider_state.get("accel").and_then(|a| a.as_str()).unwrap_or("-");
    let mut out = vec![format!(
        "lab `{}`  provider {}  fabric {}  accel {}  phase {:?}  since {}",
        s.lab,
        s.provider,
        s.fabric,
        accel,
        phase,
        s.created_at.as_deref().unwrap_or("-")
    )];
    let mut table = Table::new(
        "",
        &[
            ("NODE", Align::Left),
            ("VM", Align::Left),
            ("SSH", Align::Left),
            ("DATA", Align::Left),
            ("AGENT", Align::Left),
            ("RDMA", Align::Left),
            ("MTU", Align::Left),
            ("GID", Align::Left),
        ],
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
        // The GID index of the data address (its RoCE v2 GID, or GID 0 of the IB port whose IPoIB netdev holds it; lab facts).
        let gid = n
            .facts
            .as_ref()
            .and_then(|f| f.gid_index)
            .map_or("-".to_string(), |i| i.to_string());
        table.row([
            n.name.clone(),
            vm.to_string(),
            n.ssh.to_string(),
            n.data_addr.to_string(),
            agent,
            rdma,
            mtu,
            gid,
        ]);
    }
    // Each node's row, then its notes beneath it, under the VM column.
    let lines = table.lines();
    let under = " ".repeat(lines[0].find("VM").unwrap_or(0));
    out.push(lines[0].clone());
    for (n, row) in s.nodes.iter().zip(&lines[1..]) {
        out.push(row.clone());
        if let Some(netem) = &n.impairment {
            let nic = n.rdma.first().map_or("data NIC", |r| r.netdev.as_str());
            out.push(format!(
                "{under}impaired: netem {netem} on {nic} (`labctl impair {} --clear` removes it)",
                n.name
            ));
        }
        if let Some(e) = &n.error {
            out.push(format!("{under}! {e}"));
        }
    }
    out
}

fn short_state(state: &str) -> &str {
    state.strip_prefix("PORT_").unwrap_or(state)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_core::status::NodeStatus;

    fn node(name: &str, error: Option<&str>) -> NodeStatus {
        NodeStatus {
            name: name.into(),
            vm: Liveness::Running,
            ssh: "127.0.0.1:40022".into(),
            data_addr: "10.77.0.1/24".into(),
            ssh_ok: true,
            agent: None,
            rdma: Vec::new(),
            error: error.map(str::to_string),
            impairment: None,
            facts: None,
        }
    }

    /// Issue 16: a 31-character node name used to run into the VM column.
    #[test]
    fn test_a_31_character_node_name_keeps_every_column_aligned() {
        let long = "a-node-name-of-31-characters-xy";
        assert_eq!(long.len(), 31);
        let status = LabStatus {
            schema: 1,
            lab: "lab-with-a-name-of-31-character".into(),
            provider: "qemu".into(),
            fabric: "rxe".into(),
            phase: Some(lab_state::Phase::Ready),
            created_at: Some("2026-11-25T05:00:00Z".into()),
            provider_state: serde_json::json!({"accel": "tcg"}),
            state_dir: "/tmp/x".into(),
            facts: None,
            nodes: vec![node(long, None), node("client", Some("SSH did not answer"))],
        };
        let lines = table_lines(&status);
        let (header, rows) = (&lines[1], [&lines[2], &lines[3]]);
        // Each header word starts its column: every row has a cell there,
        // preceded by at least two spaces.
        let starts: Vec<usize> = ["VM", "SSH", "DATA", "AGENT", "RDMA", "MTU", "GID"]
            .iter()
            .map(|h| header.find(&format!("  {h}")).expect(h) + 2)
            .collect();
        assert_eq!(starts[0], long.len() + 2, "{lines:#?}");
        for row in rows {
            for &at in &starts {
                assert_eq!(&row[at - 2..at], "  ", "{lines:#?}");
                assert_ne!(&row[at..at + 1], " ", "{lines:#?}");
            }
        }
        assert!(
            lines[2].starts_with(&format!("{long}  running  127.0.0.1:40022  10.77.0.1/24  -")),
            "{lines:#?}"
        );
        // The error sits under the VM column, below its node's row.
        assert_eq!(lines[4], format!("{}! SSH did not answer", " ".repeat(starts[0])));
    }
}
