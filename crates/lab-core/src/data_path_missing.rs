//! What to say when a node's data address is on no RDMA port: the evidence
//! (every port and GID the agent sees) and the fix. `doctor`'s `device`
//! check and a run that finds the same before it starts say it the same way.

use std::net::Ipv4Addr;

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
