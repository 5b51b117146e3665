//! Setting, clearing and reading back the netem qdisc on a node's data
//! NIC. On a host labctl does not own, the lab records the netdev it
//! impaired (so `down` can remove it) and refuses to replace a root qdisc
//! someone else configured.

use std::time::Duration;

use serde::Serialize;

use crate::lab::{Lab, LabError};
use crate::provision::as_root;
use lab_remote::command::RemoteCommand;
use lab_remote::ssh::SshSession;
use lab_state::{LabState, NodeState};

use super::error::ImpairError;
use super::netem::{parse_tc_show, Netem};
use super::nic::{data_nic, rdma_sender_of, RdmaSender};

/// The netem impairment active on `node`'s data NIC, read from the node.
pub async fn active(session: &SshSession, node: &NodeState) -> Result<Option<Netem>, ImpairError> {
    let nic = data_nic(node)?;
    let command = RemoteCommand::new("tc").args(["qdisc", "show", "dev", nic]);
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ImpairError::Tc {
            node: node.name.clone(),
            command: command.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(parse_tc_show(&String::from_utf8_lossy(&out.stdout)))
}

/// What [`set`] and [`clear`] did.
#[derive(Debug, Clone, Serialize)]
pub struct ImpairOutcome {
    /// The node.
    pub node: String,
    /// Its data NIC.
    pub netdev: String,
    /// The command run on the node.
    pub command: String,
    /// What is active now, read back from the node.
    pub active: Option<Netem>,
    /// Whether netem reaches the node's RDMA traffic (set by [`set`]):
    /// true on a software device (rxe, siw), false on a NIC impaired with
    /// `ip_only`, absent when the device kind is not known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub shapes_rdma: Option<bool>,
}

/// How long `impair` on a host labctl does not own waits for the lab's
/// lock (it records the qdisc in the lab's state).
const STATE_LOCK_WAIT: Duration = Duration::from_secs(60);

/// The root qdisc in `tc qdisc show dev X` output: its line, and whether
/// it is the kernel's default (handle `0:`, e.g. `qdisc fq_codel 0: root`,
/// `qdisc noqueue 0: root`) rather than one someone configured.
pub fn root_qdisc(output: &str) -> Option<(&str, bool)> {
    output.lines().find_map(|line| {
        let words: Vec<&str> = line.split_whitespace().collect();
        (words.len() >= 4 && words[0] == "qdisc" && words[3] == "root").then_some((line.trim(), words[2] == "0:"))
    })
}

/// Whether a `tc qdisc show` line is a netem qdisc.
fn is_netem(line: &str) -> bool {
    line.starts_with("qdisc netem ")
}

/// The netdev whose netem this lab recorded on `node` (a host labctl does
/// not own), if any.
fn recorded_netem(lab: &Lab, state: &LabState, node: &str) -> Result<Option<String>, ImpairError> {
    Ok(lab
        .node_state(state, node)?
        .host
        .as_ref()
        .and_then(|h| h.netem_netdev.clone()))
}

/// On a host labctl does not own: may `impair` replace the root qdisc in
/// `tc_show`? The kernel's default, yes; a netem this lab recorded on the
/// netdev (`recorded`), yes; anything else is someone's and is refused.
pub fn check_host_qdisc(node: &str, netdev: &str, recorded: bool, tc_show: &str) -> Result<(), ImpairError> {
    match root_qdisc(tc_show) {
        None | Some((_, true)) => Ok(()),
        Some((line, false)) if recorded && is_netem(line) => Ok(()),
        Some((line, false)) => Err(ImpairError::ForeignQdisc {
            node: node.to_string(),
            netdev: netdev.to_string(),
            qdisc: line.to_string(),
        }),
    }
}

async fn tc_show(session: &SshSession, node: &str, netdev: &str) -> Result<String, ImpairError> {
    let command = RemoteCommand::new("tc").args(["qdisc", "show", "dev", netdev]);
    run_tc(session, node, &command).await
}

/// Records (`Some`) or forgets (`None`) the netdev of `node`'s netem in
/// the lab's state; the caller holds the lab's lock.
fn record_netem(lab: &Lab, state: &mut LabState, node: &str, netdev: Option<&str>) -> Result<(), ImpairError> {
    if let Some(changes) = state
        .nodes
        .iter_mut()
        .find(|n| n.name == node)
        .and_then(|n| n.host.as_mut())
    {
        changes.netem_netdev = netdev.map(str::to_string);
    }
    lab.dir.save(state).map_err(LabError::from)?;
    Ok(())
}

/// Replaces the impairment on `node`'s data NIC with `netem`. On a host
/// labctl does not own (provider ssh) the netdev is recorded in the lab's
/// state first, so that `down` removes the qdisc, and a root qdisc someone
/// else configured is refused. A node whose RDMA device is a NIC is refused
/// too (netem would not touch its RDMA), unless `ip_only` says the caller
/// means to shape its IP traffic.
pub async fn set(lab: &Lab, node: &str, netem: &Netem, ip_only: bool) -> Result<ImpairOutcome, ImpairError> {
    netem.validate()?;
    let state = lab.state()?;
    let node_state = lab.node_state(&state, node)?;
    let netdev = data_nic(node_state)?.to_string();
    let session = lab.connect(&state, node).await?;
    let command = netem.tc_command(&netdev);
    let result = async {
        let shapes_rdma = match rdma_sender_of(&session, node_state).await? {
            RdmaSender::Kernel => Some(true),
            RdmaSender::Unknown => None,
            RdmaSender::Nic { .. } if ip_only => Some(false),
            RdmaSender::Nic { device, sysfs } => {
                return Err(ImpairError::RdmaOffloaded {
                    node: node.to_string(),
                    device,
                    sysfs,
                    netdev: netdev.clone(),
                })
            }
        };
        if node_state.host.is_some() {
            let _lock = lab.lock(STATE_LOCK_WAIT).await?;
            let mut state = lab.state()?;
            let recorded = recorded_netem(lab, &state, node)?.as_deref() == Some(netdev.as_str());
            check_host_qdisc(node, &netdev, recorded, &tc_show(&session, node, &netdev).await?)?;
            if !recorded {
                record_netem(lab, &mut state, node, Some(&netdev))?;
            }
        }
        run_tc(&session, node, &as_root(node_state, command.clone())).await?;
        Ok((active(&session, node_state).await?, shapes_rdma))
    }
    .await;
    session.close().await;
    let (active, shapes_rdma) = result?;
    Ok(ImpairOutcome {
        node: node.to_string(),
        netdev,
        command: command.to_string(),
        active,
        shapes_rdma,
    })
}

/// Removes the impairment on `node`'s data NIC; fine when there is none.
pub async fn clear(lab: &Lab, node: &str) -> Result<ImpairOutcome, ImpairError> {
    let state = lab.state()?;
    let node_state = lab.node_state(&state, node)?;
    let netdev = data_nic(node_state)?.to_string();
    let session = lab.connect(&state, node).await?;
    if node_state.host.is_some() {
        let result = clear_on_host(lab, &session, node, node_state, &netdev).await;
        session.close().await;
        let (command, now) = result?;
        return Ok(ImpairOutcome {
            node: node.to_string(),
            netdev,
            command,
            active: now,
            shapes_rdma: None,
        });
    }
    let result = async {
        let command = if active(&session, node_state).await?.is_some() {
            let command = as_root(
                node_state,
                RemoteCommand::new("tc").args(["qdisc", "del", "dev", netdev.as_str(), "root"]),
            );
            run_tc(&session, node, &command).await?;
            command.to_string()
        } else {
            String::new()
        };
        Ok::<_, ImpairError>((command, active(&session, node_state).await?))
    }
    .await;
    session.close().await;
    let (command, now) = result?;
    Ok(ImpairOutcome {
        node: node.to_string(),
        netdev,
        command,
        active: now,
        shapes_rdma: None,
    })
}

/// `clear` on a host labctl does not own: removes the root qdisc only when
/// this lab recorded a netem on the netdev and it is still netem, then
/// forgets it. A qdisc the lab did not set stays (and shows as active).
async fn clear_on_host(
    lab: &Lab,
    session: &SshSession,
    node: &str,
    node_state: &NodeState,
    netdev: &str,
) -> Result<(String, Option<Netem>), ImpairError> {
    let _lock = lab.lock(STATE_LOCK_WAIT).await?;
    let mut state = lab.state()?;
    let recorded = recorded_netem(lab, &state, node)?;
    let mut command = String::new();
    if let Some(recorded) = recorded {
        let still_netem = root_qdisc(&tc_show(session, node, &recorded).await?)
            .is_some_and(|(line, default)| !default && is_netem(line));
        if still_netem {
            let del = as_root(
                node_state,
                RemoteCommand::new("tc").args(["qdisc", "del", "dev", recorded.as_str(), "root"]),
            );
            run_tc(session, node, &del).await?;
            command = del.to_string();
        }
        record_netem(lab, &mut state, node, None)?;
    }
    let now = parse_tc_show(&tc_show(session, node, netdev).await?);
    Ok((command, now))
}

/// Runs a `tc` command on `node`; its stdout, or the failure with its stderr.
async fn run_tc(session: &SshSession, node: &str, command: &RemoteCommand) -> Result<String, ImpairError> {
    let out = session.exec(command).await?;
    if out.status != 0 {
        return Err(ImpairError::Tc {
            node: node.to_string(),
            command: command.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_host_qdisc_default_or_our_netem_may_go_anything_else_is_refused() {
        // Real `tc qdisc show dev X` outputs: a default single-queue NIC, a
        // virtual one, a multiqueue one (children under a default mq).
        let fq_codel = "qdisc fq_codel 0: root refcnt 2 limit 10240p flows 1024 quantum 1514 target 5ms interval 100ms memory_limit 32Mb ecn drop_batch 64\n";
        let noqueue = "qdisc noqueue 0: root refcnt 2\n";
        let mq =
            "qdisc mq 0: root\nqdisc fq_codel 0: parent :2 limit 10240p\nqdisc fq_codel 0: parent :1 limit 10240p\n";
        let netem = "qdisc netem 8001: root refcnt 2 limit 1000 delay 40ms\n";
        let htb = "qdisc htb 1: root refcnt 2 r2q 10 default 0 direct_packets_stat 0 direct_qlen 1000\n";
        assert_eq!(root_qdisc(noqueue), Some(("qdisc noqueue 0: root refcnt 2", true)));
        assert_eq!(root_qdisc(netem), Some((netem.trim(), false)));
        assert_eq!(root_qdisc(""), None);
        for default in [fq_codel, noqueue, mq, ""] {
            check_host_qdisc("client", "eth1", false, default).unwrap();
        }
        // Our own recorded netem may be replaced; one we did not record is someone's.
        check_host_qdisc("client", "eth1", true, netem).unwrap();
        let foreign = check_host_qdisc("client", "eth1", false, netem)
            .unwrap_err()
            .to_string();
        assert!(
            foreign.starts_with("node `client`: eth1 has a root qdisc labctl did not set (`qdisc netem 8001: root"),
            "{foreign}"
        );
        assert!(foreign.contains("tc qdisc del dev eth1 root"), "{foreign}");
        // A recorded netdev whose qdisc someone replaced with theirs: refused too.
        let replaced = check_host_qdisc("client", "eth1", true, htb).unwrap_err().to_string();
        assert!(replaced.contains("`qdisc htb 1: root refcnt 2"), "{replaced}");
    }
}
