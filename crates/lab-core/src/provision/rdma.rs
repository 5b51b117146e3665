//! The node's RDMA device: an rxe link bound to the data NIC, or, on EFA
//! nodes, the EFA device libfabric offers.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{self, SshSession};
use lab_state::NodeState;

use super::error::ProvisionError;
use super::privilege::as_root;

/// Loads rdma_rxe and binds an rxe device to the data NIC; run over SSH
/// with `sh -s` (see [`setup_rxe`]).
pub const RXE_SETUP: &str = include_str!("../../../../provisioning/node/rxe-setup.sh");

/// Checks that libfabric offers EFA reliable-datagram endpoints; returns the
/// EFA device (the libfabric domain without its `-rdm` suffix).
pub async fn check_efa(session: &SshSession, node: &NodeState) -> Result<String, ProvisionError> {
    // The EFA installer puts fi_info under /opt/amazon/efa/bin, outside the
    // PATH of a non-login shell.
    let out = session
        .exec(&RemoteCommand::script(
            "PATH=$PATH:/opt/amazon/efa/bin fi_info -p efa -t FI_EP_RDM 2>&1",
        ))
        .await?;
    let text = out.stdout_text();
    let domain = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("domain:"))
        .map(|d| d.trim().trim_end_matches("-rdm").to_string());
    match (out.status, domain) {
        (0, Some(domain)) => Ok(domain),
        (status, _) => Err(ProvisionError::Efa {
            node: node.name.clone(),
            message: format!("exited with status {status}: {}", text.trim()),
        }),
    }
}

/// Loads rdma_rxe and binds an rxe device to the data NIC unless it has
/// one; returns (netdev, device, whether this call added the device). On a
/// host the lab does not own, a new link takes the name the lab recorded
/// and no package is installed.
pub async fn setup_rxe(session: &SshSession, node: &NodeState) -> Result<(String, String, bool), ProvisionError> {
    let mut command = RemoteCommand::new("sh").arg("-s").arg(node.data_addr.to_string());
    if let Some(changes) = &node.host {
        command = command.arg(changes.rxe_link.as_deref().unwrap_or("")).arg("check");
    }
    let command = as_root(node, command);
    let mut out = ssh::CommandOutput::default();
    out.status = session
        .exec_streaming(&command, Some(RXE_SETUP.as_bytes()), |is_err, data| {
            if is_err {
                out.stderr.extend_from_slice(data)
            } else {
                out.stdout.extend_from_slice(data)
            }
        })
        .await?;
    if out.status != 0 {
        return Err(ProvisionError::Rxe {
            node: node.name.clone(),
            message: format!(
                "{} (exit status {})",
                String::from_utf8_lossy(&out.stderr).trim(),
                out.status
            ),
        });
    }
    let text = out.stdout_text();
    let field = |key: &str| {
        text.split_whitespace()
            .find_map(|kv| kv.strip_prefix(key).map(str::to_string))
            .unwrap_or_default()
    };
    Ok((field("netdev="), field("device="), field("created=") == "1"))
}
