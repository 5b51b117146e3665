//! A sample lab's state and its nodes' `NodeInfo`, for the facts' tests.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use agent_proto::v1::{Gid, NodeInfoReply, RdmaDevice, RdmaPort};
use lab_model::Fabric;
use lab_state::{LabState, NodeState};

use super::gather::LabFacts;

/// A provisioned node `name` at data address 10.77.0.`last`.
pub(crate) fn node_state(name: &str, last: u8, netdev: Option<&str>, dev: Option<&str>) -> NodeState {
    NodeState {
        name: name.into(),
        ssh_host: "127.0.0.1".into(),
        ssh_port: 2200 + last as u16,
        ssh_user: "root".into(),
        ssh_identity: None,
        ssh_jump: None,
        ssh_agent: false,
        data_addr: Ipv4Addr::new(10, 77, 0, last),
        data_prefix: 24,
        data_netdev: netdev.map(str::to_string),
        rdma_device: dev.map(str::to_string),
        host_key: None,
        pid: None,
        agent_sha256: None,
        agent_port: 7470,
        provisioned: true,
        host: None,
    }
}

/// One GID table entry.
fn gid(index: u32, gid: &str, gid_type: &str) -> Gid {
    Gid {
        index,
        gid: gid.into(),
        gid_type: gid_type.into(),
    }
}

/// A node whose IPv4 RoCE v2 GID is at `index`, after a link-local
/// GID pair and, at index 2/3, another address's GIDs.
pub(crate) fn info(last: u8, index: u32, cpus: u32) -> NodeInfoReply {
    let mapped = format!("0000:0000:0000:0000:0000:ffff:0a4d:{last:04x}");
    NodeInfoReply {
        hostname: String::new(),
        kernel: "6.1.0".into(),
        rdma_core_version: "44.0".into(),
        agent_version: "0.1.0".into(),
        devices: vec![RdmaDevice {
            name: "rxe0".into(),
            netdev: "eth1".into(),
            node_guid: String::new(),
            software: true,
            ports: vec![RdmaPort {
                port: 1,
                state: "PORT_ACTIVE".into(),
                active_mtu: 1024,
                link_layer: "Ethernet".into(),
                lid: 0,
                netdev: "eth1".into(),
                ipv4_addrs: vec![format!("10.77.0.{last}")],
                ipoib_netdevs: Vec::new(),
                rate: "2.5 Gb/sec (1X SDR)".into(),
                gids: vec![
                    gid(0, "fe80:0000:0000:0000:5054:00ff:febb:0001", "RoCE v1"),
                    gid(1, "fe80:0000:0000:0000:5054:00ff:febb:0001", "RoCE v2"),
                    // The same address as RoCE v1 must not be picked.
                    gid(index - 1, &mapped, "RoCE v1"),
                    gid(index, &mapped, "RoCE v2"),
                ],
            }],
        }],
        memory_total_bytes: 0,
        cpus,
    }
}

/// Facts of a two-node rxe lab: `server` (RoCE v2 GID at index 3, 2
/// vCPUs) and `client-2` (index 5, no CPU count reported).
pub(crate) fn sample() -> LabFacts {
    let mut state = LabState::new("e2e", "qemu", "rxe");
    state.nodes = vec![
        node_state("server", 1, Some("eth1"), Some("rxe0")),
        node_state("client-2", 2, Some("eth1"), Some("rxe0")),
    ];
    let infos = BTreeMap::from([
        ("server".to_string(), info(1, 3, 2)),
        ("client-2".to_string(), info(2, 5, 0)),
    ]);
    LabFacts::build(&state, Fabric::Rxe, &infos, |_| 4)
}
