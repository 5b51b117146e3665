//! The facts themselves: gathered at `up` from what the lab's state
//! recorded and each node's `NodeInfo`, kept in `facts.json` beside the
//! state, and stand-ins for checking placeholders before a lab exists.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use agent_proto::data_path;
use agent_proto::v1::NodeInfoReply;
use lab_model::Fabric;
use lab_state::{LabDir, LabState, StateError};
use serde::{Deserialize, Serialize};

/// Where the facts live on a node.
pub const NODE_DIR: &str = "/etc/labctl";
/// `lab.env` on a node ([`lab_env`]).
pub const LAB_ENV_PATH: &str = "/etc/labctl/lab.env";
/// The hostfile on a node ([`hostfile`]).
pub const HOSTFILE_PATH: &str = "/etc/labctl/hostfile";

/// Everything a program on a node may want to know about its lab.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LabFacts {
    /// The lab's name.
    pub lab: String,
    /// The fabric (`rxe`, `efa`, `none`).
    pub fabric: String,
    /// The libfabric provider that suits the fabric (`verbs;ofi_rxd`, ...).
    pub libfabric_provider: String,
    /// One entry per node, in labs.yaml order.
    pub nodes: Vec<NodeFacts>,
}

/// One node's facts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeFacts {
    /// The node's name (its hostname).
    pub name: String,
    /// Its address on the data network.
    pub data_addr: Ipv4Addr,
    /// The data network's prefix length.
    pub data_prefix: u8,
    /// The data NIC inside the node (`eth1`); `None` when unknown (EFA).
    pub netdev: Option<String>,
    /// The RDMA device (`rxe0`); `None` without one (`fabric: none`).
    pub rdma_device: Option<String>,
    /// The device's port that carries the data address (usually 1).
    pub port: Option<u32>,
    /// The GID index of the RoCE v2 GID `::ffff:<data_addr>` on that port,
    /// 0 (the port GUID's GID) on an InfiniBand port whose IPoIB netdev holds
    /// the address; `None` when neither is found (EFA, `fabric: none`).
    pub gid_index: Option<u32>,
    /// That GID as sysfs shows it (`0000:...:ffff:0a4d:0001`).
    pub gid: Option<String>,
    /// The node's vCPUs (the hostfile's `slots=`).
    pub vcpus: u32,
}

/// The lab-level part of the facts, as `status --json` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LabLevelFacts {
    /// The lab's name.
    pub lab: String,
    /// The fabric.
    pub fabric: String,
    /// The libfabric provider that suits the fabric.
    pub libfabric_provider: String,
    /// The nodes' names, in labs.yaml order.
    pub nodes: Vec<String>,
    /// Where the facts live on every node.
    pub lab_env: String,
    /// See [`LabLevelFacts::lab_env`].
    pub hostfile: String,
}

impl LabFacts {
    /// The facts of a lab from what `up` recorded and each node's
    /// `NodeInfo` (by node name; a node without one gets only what the
    /// state knows, and `fallback_vcpus` as its vCPUs).
    pub fn build(
        state: &LabState,
        fabric: Fabric,
        infos: &BTreeMap<String, NodeInfoReply>,
        fallback_vcpus: impl Fn(&str) -> u32,
    ) -> LabFacts {
        let nodes = state
            .nodes
            .iter()
            .map(|node| {
                let info = infos.get(&node.name);
                // The RoCE v2 GID of the data address, or on InfiniBand the
                // port whose IPoIB netdev holds it (GID 0), as the agent picks it.
                let found = info.and_then(|i| data_path::find(&i.devices, node.data_addr, node.rdma_device.as_deref()));
                // Without a RoCE GID (EFA), the recorded device's first port.
                let device = node
                    .rdma_device
                    .clone()
                    .or_else(|| found.as_ref().map(|f| f.device.clone()));
                let port = found.as_ref().map(|f| f.port).or_else(|| {
                    let dev = info?.devices.iter().find(|d| Some(&d.name) == device.as_ref())?;
                    dev.ports.first().map(|p| p.port)
                });
                let found_netdev = found.as_ref().map(|f| f.netdev.clone()).filter(|n| !n.is_empty());
                let netdev = node.data_netdev.clone().or(found_netdev).or_else(|| {
                    let dev = info?.devices.iter().find(|d| Some(&d.name) == device.as_ref())?;
                    Some(dev.netdev.clone()).filter(|n| !n.is_empty())
                });
                NodeFacts {
                    name: node.name.clone(),
                    data_addr: node.data_addr,
                    data_prefix: node.data_prefix,
                    netdev,
                    rdma_device: device,
                    port,
                    gid_index: found.as_ref().map(|f| f.gid_index),
                    gid: found.map(|f| f.gid),
                    vcpus: info
                        .map(|i| i.cpus)
                        .filter(|&c| c > 0)
                        .unwrap_or_else(|| fallback_vcpus(&node.name)),
                }
            })
            .collect();
        LabFacts {
            lab: state.lab.clone(),
            fabric: fabric.to_string(),
            libfabric_provider: fabric.libfabric_provider().to_string(),
            nodes,
        }
    }

    /// The node called `name`.
    pub fn node(&self, name: &str) -> Option<&NodeFacts> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// The nodes' names.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// The lab-level facts (for `status --json`).
    pub fn lab_level(&self) -> LabLevelFacts {
        LabLevelFacts {
            lab: self.lab.clone(),
            fabric: self.fabric.clone(),
            libfabric_provider: self.libfabric_provider.clone(),
            nodes: self.node_names(),
            lab_env: LAB_ENV_PATH.into(),
            hostfile: HOSTFILE_PATH.into(),
        }
    }

    /// `facts.json` in the lab's state directory.
    pub fn path(dir: &LabDir) -> PathBuf {
        dir.root().join("facts.json")
    }

    /// Saves the facts beside `state.json` (atomically).
    pub fn save(&self, dir: &LabDir) -> Result<(), StateError> {
        let json = serde_json::to_vec_pretty(self).expect("lab facts serialise");
        lab_state::write_atomic(&Self::path(dir), &json, 0o600)
    }

    /// The saved facts, or `None` (a lab brought up by an older labctl, or
    /// not up). A corrupt file reads as `None` too: the next `up` rewrites it.
    pub fn load(dir: &LabDir) -> Option<LabFacts> {
        Self::load_from(&Self::path(dir))
    }

    fn load_from(path: &Path) -> Option<LabFacts> {
        let text = std::fs::read(path).ok()?;
        match serde_json::from_slice(&text) {
            Ok(facts) => Some(facts),
            Err(e) => {
                tracing::warn!(path = %path.display(), "ignoring unreadable lab facts: {e}");
                None
            }
        }
    }

    /// Facts with every field set to a stand-in value, for checking a
    /// command's placeholders (their names, the nodes they name) before the
    /// lab exists: [`expand`](Self::expand) on them fails exactly where it
    /// would fail for a name that does not exist.
    pub fn placeholder_check(lab: &str, nodes: &[String]) -> LabFacts {
        LabFacts {
            lab: lab.to_string(),
            fabric: "rxe".into(),
            libfabric_provider: "verbs;ofi_rxd".into(),
            nodes: nodes
                .iter()
                .map(|name| NodeFacts {
                    name: name.clone(),
                    data_addr: Ipv4Addr::UNSPECIFIED,
                    data_prefix: 0,
                    netdev: Some(String::new()),
                    rdma_device: Some(String::new()),
                    port: Some(0),
                    gid_index: Some(0),
                    gid: Some(String::new()),
                    vcpus: 1,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::RdmaDevice;

    use crate::facts::fixtures::{info, node_state, sample};
    use crate::facts::render::lab_env;

    #[test]
    fn test_the_gid_index_is_the_one_of_the_ipv4_mapped_roce_v2_gid() {
        let facts = sample();
        let server = facts.node("server").unwrap();
        assert_eq!(server.gid_index, Some(3));
        assert_eq!(server.port, Some(1));
        assert_eq!(server.gid.as_deref(), Some("0000:0000:0000:0000:0000:ffff:0a4d:0001"));
        assert_eq!(server.vcpus, 2);
        let client = facts.node("client-2").unwrap();
        assert_eq!(client.gid_index, Some(5));
        // The agent reported no CPU count: the labs.yaml value stands in.
        assert_eq!(client.vcpus, 4);
        assert_eq!(facts.libfabric_provider, "verbs;ofi_rxd");
        // Another device's GIDs do not count.
        let devices = info(1, 3, 1).devices;
        assert!(data_path::find(&devices, Ipv4Addr::new(10, 77, 0, 1), Some("mlx5_0")).is_none());
        assert!(data_path::find(&devices, Ipv4Addr::new(10, 77, 0, 9), None).is_none());
    }

    /// An InfiniBand node as its agent reports it: `devices` from
    /// agent_proto::fixtures (real hosts' listings, quoted there).
    fn infiniband_info(devices: Vec<RdmaDevice>) -> NodeInfoReply {
        let mut reply = info(1, 3, 8);
        reply.devices = devices;
        reply
    }

    /// The facts of an ssh-lab node `server` at `data_addr` whose agent
    /// reports `devices`.
    fn infiniband_node_facts(data_addr: Ipv4Addr, devices: Vec<RdmaDevice>) -> LabFacts {
        let mut state = LabState::new("ib", "ssh", "existing");
        let mut server = node_state("server", 1, None, None);
        server.data_addr = data_addr;
        state.nodes = vec![server];
        let infos = BTreeMap::from([("server".to_string(), infiniband_info(devices))]);
        LabFacts::build(&state, Fabric::Existing, &infos, |_| 4)
    }

    #[test]
    fn test_an_infiniband_node_gets_its_port_gid_0_and_ipoib_netdev() {
        let facts = infiniband_node_facts(Ipv4Addr::new(10, 20, 0, 11), agent_proto::fixtures::ib_and_roce_host());
        let server = facts.node("server").unwrap();
        assert_eq!(
            (
                server.rdma_device.as_deref(),
                server.port,
                server.gid_index,
                server.netdev.as_deref()
            ),
            (Some("mlx5_0"), Some(1), Some(0), Some("ib0"))
        );
        assert_eq!(server.gid.as_deref(), Some("fe80:0000:0000:0000:b859:9f03:00db:f884"));
    }

    #[test]
    fn test_an_address_on_a_partition_child_makes_the_child_the_netdev() {
        let facts = infiniband_node_facts(
            Ipv4Addr::new(10, 82, 0, 11),
            agent_proto::fixtures::ib_host_with_pkey_children(),
        );
        let server = facts.node("server").unwrap();
        assert_eq!(
            (
                server.rdma_device.as_deref(),
                server.port,
                server.gid_index,
                server.netdev.as_deref()
            ),
            (Some("mlx5_0"), Some(1), Some(0), Some("mlx5_ib0.8002"))
        );
        assert_eq!(server.gid.as_deref(), Some("fe80:0000:0000:0000:248a:0703:00a3:1964"));
    }

    #[test]
    fn test_a_node_without_rdma_has_empty_rdma_facts() {
        let mut state = LabState::new("plain", "qemu", "none");
        state.nodes = vec![node_state("a", 1, None, None)];
        let mut bare = info(1, 3, 1);
        bare.devices.clear();
        let facts = LabFacts::build(&state, Fabric::None, &BTreeMap::from([("a".to_string(), bare)]), |_| 1);
        let a = &facts.nodes[0];
        assert_eq!((a.rdma_device.as_deref(), a.port, a.gid_index), (None, None, None));
        let env = lab_env(&facts, "a").unwrap();
        assert!(env.contains("\nLABCTL_DEV=''\n"), "{env}");
        assert!(env.contains("\nLABCTL_FI_PROVIDER='tcp;ofi_rxm'\n"), "{env}");
        let err = facts.expand("{a.gid_index}", None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "placeholder `{a.gid_index}`: node `a` has no such value on fabric `none`"
        );
    }

    #[test]
    fn test_facts_round_trip_through_the_state_directory() {
        let base = std::env::temp_dir().join(format!("labctl-facts-test-{}", std::process::id()));
        let dir = LabDir::for_lab(&base.join("labs.yaml"), "e2e");
        dir.create().unwrap();
        assert!(LabFacts::load(&dir).is_none());
        let facts = sample();
        facts.save(&dir).unwrap();
        assert_eq!(LabFacts::load(&dir), Some(facts));
        std::fs::write(LabFacts::path(&dir), b"{ broken").unwrap();
        assert!(LabFacts::load(&dir).is_none());
        dir.remove().unwrap();
        let _ = std::fs::remove_dir_all(base);
    }
}
