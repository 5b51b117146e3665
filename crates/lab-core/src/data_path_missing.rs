//! What to say when a node's data address is on no RDMA port, or on a port
//! of another kind of device than the lab's fabric: the evidence (every
//! port and GID the agent sees) and the fix. `doctor`'s `device` check and
//! a run that finds the same before it starts say it the same way.

use std::net::Ipv4Addr;

use agent_proto::data_path::DataPath;
use agent_proto::v1::NodeInfoReply;
use lab_model::labs::Fabric;

/// Every port of every device and its GIDs, or that there is no device.
pub fn evidence(data_addr: Ipv4Addr, info: &NodeInfoReply) -> String {
    let seen: Vec<String> = info
        .devices
        .iter()
        .flat_map(|d| {
            d.ports.iter().map(move |p| {
                let gids: Vec<String> = p
                    .gids
                    .iter()
                    .map(|g| format!("{} {} {}", g.index, g.gid_type, g.gid))
                    .collect();
                format!(
                    "{} port {} ({}) on {}: GIDs [{}]",
                    d.name,
                    p.port,
                    p.state,
                    d.netdev,
                    gids.join("; ")
                )
            })
        })
        .collect();
    if seen.is_empty() {
        format!("no RDMA device on the node; its data address is {data_addr}")
    } else {
        format!("no RDMA port holds the data address {data_addr}: {}", seen.join(" | "))
    }
}

/// How to give the data address an RDMA port on `fabric`.
pub fn fix(fabric: Fabric) -> &'static str {
    match fabric {
        Fabric::Rxe => {
            "the data NIC has no rxe device: `labctl up` again sets it up (by hand, as root: \
             `rdma link add rxe0 type rxe netdev <data netdev>`)"
        }
        _ => "put the data address on the netdev of an RDMA device (`rdma link` lists which netdev each port uses)",
    }
}

/// Whether the device that holds the data address is of the kind the lab's
/// fabric says, and if not what is wrong and the fix: on `rxe` a software
/// device (rxe, siw), on `efa` a hardware one. A lab whose data address
/// sits on a NIC's port while it says `rxe` would measure the NIC, not
/// SoftRoCE, without a word. `existing` and `none` take any device.
pub fn wrong_kind(fabric: Fabric, info: &NodeInfoReply, path: &DataPath) -> Option<(String, &'static str)> {
    let device = info.devices.iter().find(|d| d.name == path.device)?;
    let (wanted, fix) = match fabric {
        Fabric::Rxe if !device.software => (
            "rxe (SoftRoCE)",
            "the data address is on a NIC's RDMA port: give the node the netdev rxe runs on (its `data_addr` \
             on that netdev, or `rdma_device:` naming the rxe device), or say `fabric: existing` to use the NIC",
        ),
        Fabric::Efa if device.software => (
            "EFA",
            "the data address is on a software RDMA device: remove it (`rdma link delete`) so the EFA device carries the runs",
        ),
        _ => return None,
    };
    let kind = if device.software {
        "a software device"
    } else {
        "a hardware device"
    };
    Some((
        format!(
            "the data address is on {} port {}, {kind}, but the lab's fabric is {wanted}",
            path.device, path.port
        ),
        fix,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::NodeInfoReply;

    #[test]
    fn test_a_data_address_on_a_nic_is_not_rxe_and_one_on_rxe_is_not_efa() {
        // The recorded ConnectX host: its RoCE address 192.168.6.6 is on mlx5_4.
        let info = NodeInfoReply {
            devices: agent_proto::fixtures::ib_and_roce_host(),
            ..Default::default()
        };
        let path = agent_proto::data_path::find(&info.devices, "192.168.6.6".parse().unwrap(), None).unwrap();
        let (evidence, fix) = wrong_kind(Fabric::Rxe, &info, &path).unwrap();
        assert_eq!(
            evidence,
            "the data address is on mlx5_4 port 1, a hardware device, but the lab's fabric is rxe (SoftRoCE)"
        );
        assert!(fix.contains("fabric: existing"));
        assert!(wrong_kind(Fabric::Existing, &info, &path).is_none());
        assert!(wrong_kind(Fabric::Efa, &info, &path).is_none());
        // The same port as rxe's: right on rxe, wrong on EFA.
        let mut soft = info.clone();
        soft.devices.iter_mut().for_each(|d| d.software = true);
        assert!(wrong_kind(Fabric::Rxe, &soft, &path).is_none());
        let (evidence, _) = wrong_kind(Fabric::Efa, &soft, &path).unwrap();
        assert!(
            evidence.ends_with("a software device, but the lab's fabric is EFA"),
            "{evidence}"
        );
    }
}
