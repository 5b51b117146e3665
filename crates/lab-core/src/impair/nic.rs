//! The NIC an impairment goes on, and whether netem there reaches RDMA at
//! all: a software device (rxe, siw) sends RDMA through the kernel's
//! qdiscs, a hardware NIC past them.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{SshError, SshSession};
use lab_state::NodeState;

use super::error::ImpairError;

/// The NIC under a node's RDMA device, where impairments go.
pub fn data_nic(node: &NodeState) -> Result<&str, ImpairError> {
    node.data_netdev
        .as_deref()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| ImpairError::NoDataNic {
            node: node.name.clone(),
        })
}

/// Who puts a node's RDMA packets on the wire. rxe and siw are kernel
/// drivers that send RDMA as ordinary packets of the network stack, so a
/// qdisc on the netdev shapes them and tcpdump sees them; a NIC (mlx5,
/// irdma, bnxt_re, efa, an InfiniBand HCA) sends RDMA itself, past both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdmaSender {
    /// A software device: RDMA is kernel traffic.
    Kernel,
    /// A hardware device: RDMA bypasses the kernel.
    Nic {
        /// The RDMA device.
        device: String,
        /// Where sysfs puts it (its bus path).
        sysfs: String,
    },
    /// No RDMA device is recorded, or sysfs did not resolve it.
    Unknown,
}

/// Tells [`RdmaSender`] from where `/sys/class/infiniband/DEVICE` resolves
/// (`readlink -f`): software devices live under /sys/devices/virtual, a
/// NIC's under its bus (the agent's node info uses the same rule).
pub fn rdma_sender(device: &str, resolved: &str) -> RdmaSender {
    let resolved = resolved.trim();
    if resolved.is_empty() || !resolved.starts_with("/sys/devices/") {
        RdmaSender::Unknown
    } else if resolved.split('/').any(|c| c == "virtual") {
        RdmaSender::Kernel
    } else {
        RdmaSender::Nic {
            device: device.to_string(),
            sysfs: resolved.to_string(),
        }
    }
}

/// Asks the node who sends its RDMA device's packets.
pub async fn rdma_sender_of(session: &SshSession, node: &NodeState) -> Result<RdmaSender, SshError> {
    let Some(device) = node.rdma_device.as_deref().filter(|d| !d.is_empty()) else {
        return Ok(RdmaSender::Unknown);
    };
    let class_path = format!("/sys/class/infiniband/{device}");
    let out = session
        .exec(&RemoteCommand::new("readlink").args(["-f", class_path.as_str()]))
        .await?;
    if out.status != 0 {
        return Ok(RdmaSender::Unknown);
    }
    Ok(rdma_sender(device, &String::from_utf8_lossy(&out.stdout)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_rdma_of_software_devices_is_kernel_traffic_and_of_nics_is_not() {
        // `readlink -f /sys/class/infiniband/DEV`: rxe0 as this repository's
        // QEMU nodes resolve it; the NIC paths have the shape of a PCI
        // device's (bus addresses illustrative).
        assert_eq!(
            rdma_sender("rxe0", "/sys/devices/virtual/infiniband/rxe0\n"),
            RdmaSender::Kernel
        );
        assert_eq!(
            rdma_sender("siw0", "/sys/devices/virtual/infiniband/siw0"),
            RdmaSender::Kernel
        );
        let mlx = "/sys/devices/pci0000:00/0000:00:03.0/0000:05:00.0/infiniband/mlx5_0";
        assert_eq!(
            rdma_sender("mlx5_0", mlx),
            RdmaSender::Nic {
                device: "mlx5_0".into(),
                sysfs: mlx.into()
            }
        );
        // readlink -f of a name that does not exist prints the path as given.
        assert_eq!(rdma_sender("gone0", "/sys/class/infiniband/gone0"), RdmaSender::Unknown);
        assert_eq!(rdma_sender("x", ""), RdmaSender::Unknown);
    }
}
