//! `labctl graph`: the lab's topology model ([`Topology`]), filled from the
//! same data as `labctl status` (machines, agents, RDMA ports, lab facts)
//! when the lab is up, or from labs.yaml alone when it is not (planned
//! nodes and addresses; devices, GIDs and agents unknown, and the model
//! says so). Rendering it is `lab_results::topology`'s job.

use lab_providers::Liveness;
use lab_results::topology::{AgentState, RdmaPort, Source, Topology, TopologyNode, TOPOLOGY_SCHEMA};
use lab_state::Phase;

use crate::lab::{Lab, LabError};
use crate::status::{LabStatus, NodeStatus};

impl Lab {
    /// The lab's topology: live when it is up (this reads every node, as
    /// `status` does), planned from labs.yaml otherwise.
    pub async fn topology(&self) -> Result<Topology, LabError> {
        let status = self.status().await?;
        Ok(if status.phase.is_some() {
            live_topology(self, &status)
        } else {
            planned_topology(self)
        })
    }
}

/// The topology of a lab that is not up: what labs.yaml plans.
pub fn planned_topology(lab: &Lab) -> Topology {
    Topology {
        schema: TOPOLOGY_SCHEMA,
        lab: lab.spec.name.clone(),
        provider: lab.spec.provider.to_string(),
        fabric: lab.spec.fabric.to_string(),
        data_network: lab.spec.data_network.to_string(),
        source: Source::Planned,
        note: Some(format!(
            "lab `{}` is not up: nodes and data addresses as labs.yaml plans them; \
             RDMA devices, GIDs and agents are known once it is (`labctl up`)",
            lab.spec.name
        )),
        nodes: lab
            .nodes
            .iter()
            .map(|n| TopologyNode {
                name: n.name.clone(),
                data_addr: format!("{}/{}", n.data_addr, n.data_prefix),
                netdev: None,
                machine: "planned".into(),
                agent: AgentState::Unknown,
                rdma: Vec::new(),
            })
            .collect(),
    }
}

/// The topology of a lab that is up, from its status.
pub fn live_topology(lab: &Lab, status: &LabStatus) -> Topology {
    let note = match status.phase {
        Some(Phase::Ready) | None => None,
        Some(phase) => Some(format!(
            "lab `{}` is in phase {phase:?}, not ready: some nodes may be missing or half set up",
            status.lab
        )),
    };
    Topology {
        schema: TOPOLOGY_SCHEMA,
        lab: status.lab.clone(),
        provider: status.provider.clone(),
        fabric: status.fabric.clone(),
        data_network: lab.spec.data_network.to_string(),
        source: Source::Live,
        note,
        nodes: status.nodes.iter().map(live_node).collect(),
    }
}

fn live_node(n: &NodeStatus) -> TopologyNode {
    let facts = n.facts.as_ref();
    let rdma = n
        .rdma
        .iter()
        .map(|p| {
            // The data address's GID (RoCE v2, or GID 0 on InfiniBand), where the lab facts put it.
            let data = facts.filter(|f| f.rdma_device.as_deref() == Some(&p.device) && f.port == Some(p.port));
            RdmaPort {
                device: p.device.clone(),
                port: p.port,
                netdev: p.netdev.clone(),
                state: p.state.clone(),
                active_mtu: p.active_mtu,
                data_gid_index: data.and_then(|f| f.gid_index),
                data_gid: data.and_then(|f| f.gid.clone()),
                gids: p.gids.clone(),
            }
        })
        .collect();
    let agent = match (&n.agent, &n.error) {
        (Some(a), _) => AgentState::Up {
            version: a.version.clone(),
            uptime_s: a.uptime_s,
        },
        (None, Some(e)) => AgentState::Down { error: e.clone() },
        (None, None) => AgentState::Down {
            error: "did not answer".into(),
        },
    };
    TopologyNode {
        name: n.name.clone(),
        data_addr: n.data_addr.clone(),
        netdev: facts
            .and_then(|f| f.netdev.clone())
            .or_else(|| n.rdma.first().map(|p| p.netdev.clone()).filter(|d| !d.is_empty())),
        machine: match &n.vm {
            Liveness::Running => "running".into(),
            Liveness::Stopped(why) => format!("stopped: {why}"),
        },
        agent,
        rdma,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::facts::NodeFacts;
    use crate::status::{AgentStatus, STATUS_SCHEMA};
    use lab_results::run::RdmaDeviceStatus;
    use lab_results::topology::to_mermaid;

    /// The lab of a labs.yaml of its own: tests run in parallel, and one
    /// writing the file while another reads it made the reader see it empty.
    fn lab() -> Lab {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("labctl-graph-{}-{n}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("labs.yaml");
        std::fs::write(
            &file,
            "labs:\n  - name: pair\n    data_network: 10.9.0.0/24\n    nodes:\n      - name: a\n      - name: b\n        data_addr: 10.9.0.20\n",
        )
        .unwrap();
        Lab::open(&file, None).unwrap()
    }

    #[test]
    fn test_planned_topology_has_the_planned_addresses_and_says_not_up() {
        let t = planned_topology(&lab());
        assert_eq!(t.source, Source::Planned);
        assert_eq!(t.data_network, "10.9.0.0/24");
        let nodes: Vec<(&str, &str)> = t
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.data_addr.as_str()))
            .collect();
        assert_eq!(nodes, [("a", "10.9.0.1/24"), ("b", "10.9.0.20/24")]);
        assert!(t
            .nodes
            .iter()
            .all(|n| n.agent == AgentState::Unknown && n.rdma.is_empty()));
        assert!(t.note.as_deref().unwrap().contains("is not up"), "{:?}", t.note);
        let mermaid = to_mermaid(&t);
        assert!(mermaid.contains("RDMA device: unknown until up"), "{mermaid}");
    }

    #[test]
    fn test_live_topology_marks_the_data_gid_from_the_facts() {
        let lab = lab();
        let node = |name: &str, agent: bool| NodeStatus {
            name: name.into(),
            vm: Liveness::Running,
            ssh: "127.0.0.1:2222".into(),
            data_addr: "10.9.0.1/24".into(),
            ssh_ok: true,
            agent: agent.then(|| AgentStatus {
                version: "0.1.0".into(),
                uptime_s: 10,
                rss_bytes: 1,
                kernel: "6.1".into(),
                rdma_core: "44".into(),
            }),
            rdma: vec![RdmaDeviceStatus {
                device: "rxe0".into(),
                netdev: "eth1".into(),
                port: 1,
                state: "PORT_ACTIVE".into(),
                active_mtu: 1024,
                gids: vec!["1 0000:0000:0000:0000:0000:ffff:0a09:0001 RoCE v2".into()],
            }],
            error: (!agent).then(|| "agent did not answer".to_string()),
            impairment: None,
            facts: Some(NodeFacts {
                name: name.into(),
                data_addr: "10.9.0.1".parse().unwrap(),
                data_prefix: 24,
                netdev: Some("eth1".into()),
                rdma_device: Some("rxe0".into()),
                port: Some(1),
                gid_index: Some(1),
                gid: Some("0000:0000:0000:0000:0000:ffff:0a09:0001".into()),
                vcpus: 1,
            }),
        };
        let status = LabStatus {
            schema: STATUS_SCHEMA,
            lab: "pair".into(),
            provider: "qemu".into(),
            fabric: "rxe".into(),
            phase: Some(Phase::Creating),
            created_at: None,
            provider_state: serde_json::Value::Null,
            state_dir: String::new(),
            facts: None,
            nodes: vec![node("a", true), node("b", false)],
        };
        let t = live_topology(&lab, &status);
        assert_eq!(t.source, Source::Live);
        assert!(t.note.as_deref().unwrap().contains("Creating"), "{:?}", t.note);
        let a = &t.nodes[0];
        assert_eq!(a.netdev.as_deref(), Some("eth1"));
        assert_eq!(
            (a.rdma[0].data_gid_index, a.rdma[0].data_gid.as_deref()),
            (Some(1), Some("0000:0000:0000:0000:0000:ffff:0a09:0001"))
        );
        assert_eq!(a.lines()[2], "GID 1 ::ffff:10.9.0.1 (RoCE v2)");
        assert_eq!(
            t.nodes[1].agent,
            AgentState::Down {
                error: "agent did not answer".into()
            }
        );
    }
}
