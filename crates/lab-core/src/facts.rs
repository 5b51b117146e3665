//! Lab facts: what a program on a node needs to know about the lab (its
//! name, every node's data address, this node's RDMA device, port and GID
//! index, the libfabric provider), gathered once at `up` and kept in the
//! lab's state directory (`facts.json`), so `status` and placeholders need
//! no RPC.
//!
//! The same facts take three shapes on every node (written by
//! [`provision::write_facts`](crate::provision::write_facts)):
//! - [`lab_env`]: `/etc/labctl/lab.env`, shell-sourceable `LABCTL_*`
//!   variables;
//! - [`hostfile`]: `/etc/labctl/hostfile`, in the form `mpirun` reads;
//! - [`hosts_lines`]: `/etc/hosts` lines that resolve node names to data
//!   addresses, each ending with the lab's [`lab_marker`] so that a later
//!   `up` (or `down` on machines that outlive the lab) removes exactly them.
//!
//! With `node_ssh:`, the lines that let nodes `ssh` each other carry the
//! same marker ([`authorized_keys_line`], [`known_hosts_lines`]).
//!
//! [`LabFacts::expand`] fills placeholders such as `{server.addr}` or
//! `{self.gid_index}` in a command template from the same facts.
//!
//! This module only computes and renders: no SSH, no files.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use agent_proto::data_path;
use agent_proto::v1::NodeInfoReply;
use lab_model::Fabric;
use lab_remote::command::quote;
use lab_state::{LabDir, LabState, StateError};
use serde::{Deserialize, Serialize};

/// Where the facts live on a node.
pub const NODE_DIR: &str = "/etc/labctl";
/// `lab.env` on a node ([`lab_env`]).
pub const LAB_ENV_PATH: &str = "/etc/labctl/lab.env";
/// The hostfile on a node ([`hostfile`]).
pub const HOSTFILE_PATH: &str = "/etc/labctl/hostfile";

/// The fields a node placeholder (`{NODE.FIELD}`) can name.
pub const NODE_FIELDS: [&str; 7] = ["addr", "dev", "port", "gid_index", "gid", "netdev", "name"];
/// The lab-level placeholders (`{NAME}`).
pub const LAB_FIELDS: [&str; 4] = ["lab", "nodes", "fabric", "fi_provider"];

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

    /// Fills the placeholders of `template` from the facts:
    /// - `{NODE.FIELD}`, FIELD one of [`NODE_FIELDS`] (`addr`, `dev`,
    ///   `port`, `gid_index`, `gid`, `netdev`, `name`); NODE is a node's
    ///   name, or `self` for `self_node`;
    /// - `{lab}`, `{nodes}` (the names, space-separated), `{fabric}`,
    ///   `{fi_provider}`;
    /// - `{{NAME}}` stands for a literal `{NAME}`.
    ///
    /// Only braces around a placeholder's shape (a name of letters, digits,
    /// `_` and `-`, with at most one `.`) are placeholders; a name of that
    /// shape that does not exist is an error naming it and listing what
    /// exists. Every other brace is the shell's and stays as it is: `${VAR}`,
    /// `{a,b}`, `{1..3}`, `awk '{print $1}'`, `find -exec ... {} \;`.
    pub fn expand(&self, template: &str, self_node: Option<&str>) -> Result<String, PlaceholderError> {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(i) = rest.find('{') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            // `${...}` belongs to the shell.
            if out.ends_with('$') {
                out.push('{');
                rest = after;
                continue;
            }
            // `{{NAME}}` is the literal `{NAME}`.
            if let Some(inner) = after.strip_prefix('{') {
                if let Some(end) = inner.find("}}").filter(|end| is_placeholder_shape(&inner[..*end])) {
                    out.push('{');
                    out.push_str(&inner[..end]);
                    out.push('}');
                    rest = &inner[end + 2..];
                    continue;
                }
                out.push('{');
                rest = after;
                continue;
            }
            match after.find('}') {
                Some(end) if is_placeholder_shape(&after[..end]) => {
                    out.push_str(&self.placeholder(&after[..end], self_node)?);
                    rest = &after[end + 1..];
                }
                _ => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        Ok(out)
    }

    /// The value of one placeholder (without its braces).
    fn placeholder(&self, name: &str, self_node: Option<&str>) -> Result<String, PlaceholderError> {
        let Some((node, field)) = name.split_once('.') else {
            return match name {
                "lab" => Ok(self.lab.clone()),
                "nodes" => Ok(self.node_names().join(" ")),
                "fabric" => Ok(self.fabric.clone()),
                "fi_provider" => Ok(self.libfabric_provider.clone()),
                _ => Err(PlaceholderError::Unknown {
                    placeholder: name.to_string(),
                    nodes: self.node_names(),
                }),
            };
        };
        let node_name = match node {
            "self" => self_node.ok_or_else(|| PlaceholderError::NoSelf {
                placeholder: name.to_string(),
            })?,
            other => other,
        };
        let facts = self.node(node_name).ok_or_else(|| PlaceholderError::UnknownNode {
            placeholder: name.to_string(),
            node: node_name.to_string(),
            nodes: self.node_names(),
        })?;
        let value = match field {
            "addr" => Some(facts.data_addr.to_string()),
            "dev" => facts.rdma_device.clone(),
            "port" => facts.port.map(|p| p.to_string()),
            "gid_index" => facts.gid_index.map(|i| i.to_string()),
            "gid" => facts.gid.clone(),
            "netdev" => facts.netdev.clone(),
            "name" => Some(facts.name.clone()),
            _ => {
                return Err(PlaceholderError::UnknownField {
                    placeholder: name.to_string(),
                    field: field.to_string(),
                })
            }
        };
        value.ok_or_else(|| PlaceholderError::Missing {
            placeholder: name.to_string(),
            node: facts.name.clone(),
            fabric: self.fabric.clone(),
        })
    }
}

/// A placeholder [`LabFacts::expand`] cannot fill.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    /// `{NODE.FIELD}` names no node of the lab.
    #[error("placeholder `{{{placeholder}}}`: the lab has no node `{node}`; its nodes are: {} (and `self`, the node the command runs on)", .nodes.join(", "))]
    UnknownNode {
        /// The placeholder, without braces.
        placeholder: String,
        /// The node it names.
        node: String,
        /// The lab's nodes.
        nodes: Vec<String>,
    },
    /// `{NODE.FIELD}` names no field.
    #[error("placeholder `{{{placeholder}}}`: a node has no field `{field}`; node fields are: {}", NODE_FIELDS.join(", "))]
    UnknownField {
        /// The placeholder, without braces.
        placeholder: String,
        /// The field it names.
        field: String,
    },
    /// `{NAME}` is not a lab-level placeholder.
    #[error("unknown placeholder `{{{placeholder}}}`; lab placeholders are {}; node placeholders are {{NODE.FIELD}} with NODE one of {} or `self`, and FIELD one of {}; write `{{{{NAME}}}}` for a literal `{{NAME}}`", LAB_FIELDS.map(|f| format!("{{{f}}}")).join(", "), .nodes.join(", "), NODE_FIELDS.join(", "))]
    Unknown {
        /// The placeholder, without braces.
        placeholder: String,
        /// The lab's nodes.
        nodes: Vec<String>,
    },
    /// `{self.FIELD}` where no node is `self`.
    #[error("placeholder `{{{placeholder}}}`: `self` means the node the command runs on, and here there is none; name the node instead")]
    NoSelf {
        /// The placeholder, without braces.
        placeholder: String,
    },
    /// The node has no such value (no RDMA device on `fabric: none`, no
    /// RoCE GID on EFA).
    #[error("placeholder `{{{placeholder}}}`: node `{node}` has no such value on fabric `{fabric}`")]
    Missing {
        /// The placeholder, without braces.
        placeholder: String,
        /// The node.
        node: String,
        /// The lab's fabric.
        fabric: String,
    },
}

/// Whether `text` (between braces) looks like a placeholder: a name of
/// letters, digits, `_` and `-` starting with a letter or `_`, or two such
/// names joined by one `.`.
fn is_placeholder_shape(text: &str) -> bool {
    let name = |part: &str| {
        part.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && part.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    };
    match text.split_once('.') {
        Some((node, field)) => name(node) && name(field),
        None => name(text),
    }
}

/// `LABCTL_ADDR_<NODE>`: the node's name upper-cased, anything not a letter
/// or digit turned into `_` (`gpu-1` → `LABCTL_ADDR_GPU_1`).
pub fn addr_var(node: &str) -> String {
    let suffix: String = node
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("LABCTL_ADDR_{suffix}")
}

/// `/etc/labctl/lab.env` of node `node`: shell assignments, values quoted
/// for a POSIX shell (with `shlex`). Values a node does not have (no RDMA
/// device on `fabric: none`, no RoCE GID on EFA) are empty. `None` when the
/// lab has no such node.
pub fn lab_env(facts: &LabFacts, node: &str) -> Option<String> {
    lab_env_in(facts, node, NODE_DIR)
}

/// [`lab_env`] for files kept in directory `dir` of the node (a host that
/// outlives the lab keeps them in the lab's own directory).
pub fn lab_env_in(facts: &LabFacts, node: &str, dir: &str) -> Option<String> {
    let me = facts.node(node)?;
    let env_path = format!("{dir}/lab.env");
    let opt = |v: &Option<String>| v.clone().unwrap_or_default();
    let num = |v: Option<u32>| v.map(|n| n.to_string()).unwrap_or_default();
    let mut vars: Vec<(String, String)> = vec![
        ("LABCTL_LAB".into(), facts.lab.clone()),
        ("LABCTL_NODE".into(), me.name.clone()),
        ("LABCTL_NODES".into(), facts.node_names().join(" ")),
    ];
    for n in &facts.nodes {
        vars.push((addr_var(&n.name), n.data_addr.to_string()));
    }
    vars.extend([
        ("LABCTL_ADDR".into(), me.data_addr.to_string()),
        ("LABCTL_PREFIX".into(), me.data_prefix.to_string()),
        ("LABCTL_DEV".into(), opt(&me.rdma_device)),
        ("LABCTL_PORT".into(), num(me.port)),
        ("LABCTL_GID_INDEX".into(), num(me.gid_index)),
        ("LABCTL_GID".into(), opt(&me.gid)),
        ("LABCTL_NETDEV".into(), opt(&me.netdev)),
        ("LABCTL_FABRIC".into(), facts.fabric.clone()),
        ("LABCTL_FI_PROVIDER".into(), facts.libfabric_provider.clone()),
        ("LABCTL_VCPUS".into(), me.vcpus.to_string()),
        ("LABCTL_HOSTFILE".into(), format!("{dir}/hostfile")),
    ]);
    let mut text = format!(
        "# Lab facts of node `{}` in lab `{}`, written by `labctl up` (rewritten by the\n\
         # next `up`; do not edit). Source it: `. {env_path}`; to export the\n\
         # variables to child processes: `set -a; . {env_path}; set +a`.\n",
        me.name, facts.lab
    );
    for (name, value) in vars {
        let _ = writeln!(text, "{name}={}", quote(&value));
    }
    Some(text)
}

/// `/etc/labctl/hostfile`: one line per node, its data address and
/// `slots=` its vCPUs, as `mpirun --hostfile` reads it.
pub fn hostfile(facts: &LabFacts) -> String {
    let mut text = format!(
        "# lab `{}`: data addresses, slots = vCPUs (written by `labctl up`)\n",
        facts.lab
    );
    for n in &facts.nodes {
        let _ = writeln!(text, "{} slots={}", n.data_addr, n.vcpus);
    }
    text
}

/// The comment that ends each line labctl adds to a node's own files
/// (`/etc/hosts`; with `node_ssh:`, `~/.ssh/authorized_keys` and
/// `~/.ssh/known_hosts`): `labctl:<lab>` after a `#`.
pub fn lab_marker(lab: &str) -> String {
    format!("labctl:{lab}")
}

/// The lab's `/etc/hosts` lines: `<data addr> <node> # labctl:<lab>`.
pub fn hosts_lines(facts: &LabFacts) -> String {
    let marker = lab_marker(&facts.lab);
    let mut text = String::new();
    for n in &facts.nodes {
        let _ = writeln!(text, "{} {} # {marker}", n.data_addr, n.name);
    }
    text
}

/// The `authorized_keys` line of the lab's node key (`node_ssh:`):
/// `<public key> # labctl:<lab>` (sshd takes what follows the key as its
/// comment).
pub fn authorized_keys_line(lab: &str, public_key: &str) -> String {
    format!("{} # {}\n", public_key.trim(), lab_marker(lab))
}

/// The `known_hosts` lines of the lab (`node_ssh:`): each node's pinned host
/// key under its name and its data address, `<name>,<addr> <key> #
/// labctl:<lab>`, so `ssh <node>` and `ssh <addr>` (what `mpirun` does with
/// the hostfile) find it. A node whose host key is not known yet is left out.
pub fn known_hosts_lines(state: &LabState) -> String {
    let marker = lab_marker(&state.lab);
    let mut text = String::new();
    for node in &state.nodes {
        if let Some(key) = &node.host_key {
            let _ = writeln!(text, "{},{} {} # {marker}", node.name, node.data_addr, key.trim());
        }
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::{Gid, RdmaDevice, RdmaPort};
    use lab_state::NodeState;

    fn node_state(name: &str, last: u8, netdev: Option<&str>, dev: Option<&str>) -> NodeState {
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

    fn gid(index: u32, gid: &str, gid_type: &str) -> Gid {
        Gid {
            index,
            gid: gid.into(),
            gid_type: gid_type.into(),
        }
    }

    /// A node whose IPv4 RoCE v2 GID is at `index`, after a link-local
    /// GID pair and, at index 2/3, another address's GIDs.
    fn info(last: u8, index: u32, cpus: u32) -> NodeInfoReply {
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

    fn sample() -> LabFacts {
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
    fn test_lab_env_is_exactly_this() {
        let env = lab_env(&sample(), "server").unwrap();
        let body: Vec<&str> = env.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(
            body,
            [
                "LABCTL_LAB=e2e",
                "LABCTL_NODE=server",
                "LABCTL_NODES='server client-2'",
                "LABCTL_ADDR_SERVER=10.77.0.1",
                "LABCTL_ADDR_CLIENT_2=10.77.0.2",
                "LABCTL_ADDR=10.77.0.1",
                "LABCTL_PREFIX=24",
                "LABCTL_DEV=rxe0",
                "LABCTL_PORT=1",
                "LABCTL_GID_INDEX=3",
                "LABCTL_GID=0000:0000:0000:0000:0000:ffff:0a4d:0001",
                "LABCTL_NETDEV=eth1",
                "LABCTL_FABRIC=rxe",
                "LABCTL_FI_PROVIDER='verbs;ofi_rxd'",
                "LABCTL_VCPUS=2",
                "LABCTL_HOSTFILE=/etc/labctl/hostfile",
            ]
        );
        assert!(lab_env(&sample(), "nosuch").is_none());
    }

    #[test]
    fn test_lab_env_is_what_a_real_shell_reads() {
        let env = lab_env(&sample(), "client-2").unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!(
                "{env}\nprintf '%s|' \"$LABCTL_NODE\" \"$LABCTL_NODES\" \"$LABCTL_ADDR_SERVER\" \"$LABCTL_GID_INDEX\" \"$LABCTL_FI_PROVIDER\""
            ))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "client-2|server client-2|10.77.0.1|5|verbs;ofi_rxd|"
        );
    }

    #[test]
    fn test_hostfile_and_hosts_lines() {
        let facts = sample();
        let hostfile = hostfile(&facts);
        let body: Vec<&str> = hostfile.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(body, ["10.77.0.1 slots=2", "10.77.0.2 slots=4"]);
        assert_eq!(
            hosts_lines(&facts),
            "10.77.0.1 server # labctl:e2e\n10.77.0.2 client-2 # labctl:e2e\n"
        );
        assert_eq!(addr_var("gpu-1"), "LABCTL_ADDR_GPU_1");
    }

    #[test]
    fn test_node_ssh_lines_name_every_node_by_name_and_address() {
        let mut state = LabState::new("e2e", "qemu", "rxe");
        state.nodes = vec![
            node_state("server", 1, Some("eth1"), Some("rxe0")),
            node_state("client", 2, Some("eth1"), Some("rxe0")),
            node_state("late", 3, None, None),
        ];
        state.nodes[0].host_key = Some("ssh-ed25519 AAAAserver".into());
        state.nodes[1].host_key = Some("ssh-ed25519 AAAAclient\n".into());
        assert_eq!(
            known_hosts_lines(&state),
            "server,10.77.0.1 ssh-ed25519 AAAAserver # labctl:e2e\n\
             client,10.77.0.2 ssh-ed25519 AAAAclient # labctl:e2e\n"
        );
        assert_eq!(
            authorized_keys_line("e2e", "ssh-ed25519 AAAAnode\n"),
            "ssh-ed25519 AAAAnode # labctl:e2e\n"
        );
    }

    #[test]
    fn test_expand_fills_every_placeholder() {
        let facts = sample();
        let cmd = facts
            .expand(
                "ib_write_bw -d {self.dev} -i {self.port} -x {self.gid_index} {server.addr} \
                 # {lab} {nodes} {fabric} {fi_provider} {client-2.gid} {server.netdev} {self.name}",
                Some("client-2"),
            )
            .unwrap();
        assert_eq!(
            cmd,
            "ib_write_bw -d rxe0 -i 1 -x 5 10.77.0.1 # e2e server client-2 rxe verbs;ofi_rxd \
             0000:0000:0000:0000:0000:ffff:0a4d:0002 eth1 client-2"
        );
    }

    #[test]
    fn test_expand_escapes_braces() {
        let facts = sample();
        // The shell's braces stay as they are; only placeholder shapes expand.
        assert_eq!(
            facts
                .expand("awk '{print $1}' ${HOME} {a,b} {1..3} {} { x; } {lab}", None)
                .unwrap(),
            "awk '{print $1}' ${HOME} {a,b} {1..3} {} { x; } e2e"
        );
        assert_eq!(
            facts.expand("{{lab}} {{server.addr}} {{{lab}", None).unwrap(),
            "{lab} {server.addr} {{e2e"
        );
        assert_eq!(facts.expand("no placeholders", None).unwrap(), "no placeholders");
        assert_eq!(facts.expand("", None).unwrap(), "");
    }

    #[test]
    fn test_expand_errors_name_the_culprit_and_list_what_exists() {
        let facts = sample();
        let err = |t: &str, s: Option<&str>| facts.expand(t, s).unwrap_err().to_string();
        assert_eq!(
            err("{serv.addr}", None),
            "placeholder `{serv.addr}`: the lab has no node `serv`; its nodes are: server, client-2 (and `self`, the node the command runs on)"
        );
        assert_eq!(
            err("{server.address}", None),
            "placeholder `{server.address}`: a node has no field `address`; node fields are: addr, dev, port, gid_index, gid, netdev, name"
        );
        let unknown = err("x {labname} y", None);
        assert!(unknown.starts_with("unknown placeholder `{labname}`"), "{unknown}");
        assert!(
            unknown.contains("{lab}, {nodes}, {fabric}, {fi_provider}") && unknown.contains("server, client-2"),
            "{unknown}"
        );
        assert!(unknown.contains("write `{{NAME}}` for a literal `{NAME}`"), "{unknown}");
        assert!(err("{self.addr}", None).contains("`self` means the node the command runs on"));
        assert!(err("{self.addr}", Some("ghost")).contains("no node `ghost`"));
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
