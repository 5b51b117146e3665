//! The facts as files on a node: `lab.env` for the shell, the hostfile
//! for `mpirun`, and the marked lines labctl adds to `/etc/hosts` and, with
//! `node_ssh:`, to `~/.ssh/authorized_keys` and `~/.ssh/known_hosts`.

use std::fmt::Write as _;

use lab_remote::command::quote;
use lab_state::LabState;

use super::gather::{LabFacts, NODE_DIR};

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
    use crate::facts::fixtures::{node_state, sample};

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
}
