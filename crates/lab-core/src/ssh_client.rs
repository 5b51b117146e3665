//! The system `ssh` client's view of a lab (`labctl ssh NODE`): the argv
//! that logs in to a node exactly as `up` did, the `known_hosts` file of
//! the pinned host keys (nodes and jump hosts) and the ssh config file that
//! carries those settings to the jump hop. It builds argv vectors and file
//! text only; it runs nothing.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use lab_state::{LabState, NodeState};

/// Where the files `ssh` reads live, and the key a lab-created node takes.
#[derive(Debug, Clone)]
pub struct ClientFiles {
    /// The ssh config file written by [`config_text`] (`ssh -F`).
    pub config: PathBuf,
    /// The known_hosts file written by [`known_hosts_text`].
    pub known_hosts: PathBuf,
    /// The lab's own login key, for nodes labctl created (None on a lab of
    /// hosts that exist: their own identity_file, or ssh's defaults/agent).
    pub lab_key: Option<PathBuf>,
    /// Never prompt (password, passphrase): fail instead (`BatchMode`, on
    /// both hops).
    pub batch: bool,
}

/// `host` as known_hosts names it: bare on port 22, `[host]:port` elsewhere
/// (what ssh looks up; `[host]:22` is never matched).
fn known_host_name(host: &str, port: u16) -> String {
    if port == 22 {
        host.to_string()
    } else {
        format!("[{host}]:{port}")
    }
}

/// The known_hosts lines of every pinned key of the lab: each node's and
/// each jump host's, so `StrictHostKeyChecking=yes` passes on both hops
/// and nothing else is trusted.
pub fn known_hosts_text(state: &LabState) -> String {
    let mut lines = std::collections::BTreeSet::new();
    for node in &state.nodes {
        if let Some(key) = &node.host_key {
            lines.insert(format!(
                "{} {}",
                known_host_name(&node.ssh_host, node.ssh_port),
                key.trim()
            ));
        }
        if let Some(jump) = &node.ssh_jump {
            lines.insert(format!(
                "{} {}",
                known_host_name(&jump.host, jump.port),
                jump.host_key.trim()
            ));
        }
    }
    lines.into_iter().fold(String::new(), |mut text, line| {
        let _ = writeln!(text, "{line}");
        text
    })
}

/// A value of an ssh config line, in double quotes (paths may hold spaces;
/// ssh_config has no escape for `"`, so such a path is refused).
fn config_value(path: &Path) -> Result<String, String> {
    let text = path.display().to_string();
    if text.contains('"') || text.contains('\n') {
        return Err(format!(
            "the path {text:?} holds a `\"` or a newline, which an ssh config file cannot carry"
        ));
    }
    Ok(format!("\"{text}\""))
}

/// The ssh config `labctl ssh` passes with `-F`. ssh hands `-F` (and only
/// it) to the jump hop's own ssh, so the jump host's key file, identity and
/// strict host key checking must be here, not on the command line. Nothing
/// from the user's ~/.ssh/config applies: the lab's hosts are reached as
/// `up` reached them.
pub fn config_text(state: &LabState, files: &ClientFiles) -> Result<String, String> {
    let mut text = format!(
        "# Written by labctl for `labctl ssh` of lab {}; rewritten on each call.\n",
        state.lab
    );
    let mut jumps = std::collections::BTreeSet::new();
    for node in &state.nodes {
        if let Some(jump) = &node.ssh_jump {
            if let Some(identity) = &jump.identity {
                jumps.insert((jump.host.clone(), config_value(identity)?));
            }
        }
    }
    // First match wins in ssh_config: the jump hosts' blocks before `Host *`.
    for (host, identity) in jumps {
        let _ = writeln!(text, "Host {host}\n    IdentityFile {identity}\n    IdentitiesOnly yes");
    }
    let _ = writeln!(
        text,
        "Host *\n    UserKnownHostsFile {}\n    GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n    CheckHostIP no",
        config_value(&files.known_hosts)?
    );
    if files.batch {
        let _ = writeln!(text, "    BatchMode yes");
    }
    Ok(text)
}

/// The argv of `ssh` to `node` (then `command`, each its own element, which
/// ssh joins with spaces for the remote shell): the node's user, port and
/// key as `up` used them, its jump host as `-J`, only the pinned host keys
/// trusted.
pub fn ssh_argv(node: &NodeState, files: &ClientFiles, command: &[String]) -> Vec<String> {
    let mut argv: Vec<String> = vec!["ssh".into(), "-F".into(), files.config.display().to_string()];
    // No key named: ssh tries its default keys and the user's agent, as `up` did.
    if let Some(key) = node.ssh_identity.as_deref().or(files.lab_key.as_deref()) {
        argv.extend([
            "-i".into(),
            key.display().to_string(),
            "-o".into(),
            "IdentitiesOnly=yes".into(),
        ]);
    }
    argv.extend(["-p".into(), node.ssh_port.to_string()]);
    if let Some(jump) = &node.ssh_jump {
        argv.extend(["-J".into(), format!("{}@{}:{}", jump.user, jump.host, jump.port)]);
    }
    argv.extend(["-l".into(), node.ssh_user.clone(), "--".into(), node.ssh_host.clone()]);
    argv.extend(command.iter().cloned());
    argv
}

/// The lab key `labctl ssh` offers on `state`'s nodes: the lab's own key
/// on machines labctl created, none on hosts that exist (provider ssh).
pub fn lab_key_for(state: &LabState, lab_key: PathBuf) -> Option<PathBuf> {
    (state.provider != "ssh").then_some(lab_key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use lab_state::JumpRecord;
    use std::net::Ipv4Addr;

    const NODE_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBnode";
    const JUMP_KEY: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIBjump";

    fn node(name: &str, host: &str, port: u16) -> NodeState {
        NodeState {
            name: name.into(),
            ssh_host: host.into(),
            ssh_port: port,
            ssh_user: "root".into(),
            ssh_identity: None,
            ssh_jump: None,
            ssh_agent: false,
            data_addr: Ipv4Addr::new(10, 77, 0, 1),
            data_prefix: 24,
            data_netdev: None,
            rdma_device: None,
            host_key: Some(NODE_KEY.into()),
            pid: None,
            agent_sha256: None,
            agent_port: 7000,
            provisioned: true,
            host: None,
        }
    }

    fn files(lab_key: Option<&str>) -> ClientFiles {
        ClientFiles {
            config: "/s/ssh_config".into(),
            known_hosts: "/s/known_hosts".into(),
            lab_key: lab_key.map(PathBuf::from),
            batch: false,
        }
    }

    fn strings(items: &[&str]) -> Vec<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn qemu_node_uses_the_lab_key() {
        let argv = ssh_argv(&node("client", "127.0.0.1", 2201), &files(Some("/s/id_ed25519")), &[]);
        assert_eq!(
            argv,
            strings(&[
                "ssh",
                "-F",
                "/s/ssh_config",
                "-i",
                "/s/id_ed25519",
                "-o",
                "IdentitiesOnly=yes",
                "-p",
                "2201",
                "-l",
                "root",
                "--",
                "127.0.0.1"
            ])
        );
    }

    #[test]
    fn ssh_node_uses_its_identity_file_and_passes_the_command_as_elements() {
        let mut n = node("a", "bench1", 22);
        n.ssh_user = "lab".into();
        n.ssh_identity = Some(PathBuf::from("/home/u/.ssh/lab key"));
        let argv = ssh_argv(&n, &files(None), &strings(&["cat", "/proc/sys/kernel/random/boot_id"]));
        assert_eq!(
            argv,
            strings(&[
                "ssh",
                "-F",
                "/s/ssh_config",
                "-i",
                "/home/u/.ssh/lab key",
                "-o",
                "IdentitiesOnly=yes",
                "-p",
                "22",
                "-l",
                "lab",
                "--",
                "bench1",
                "cat",
                "/proc/sys/kernel/random/boot_id"
            ])
        );
        // Without an identity_file, no key is named: ssh's defaults and agent.
        n.ssh_identity = None;
        let argv = ssh_argv(&n, &files(None), &[]);
        assert!(!argv.contains(&"-i".to_string()), "{argv:?}");
    }

    #[test]
    fn ssh_node_behind_a_jump_host() {
        let mut n = node("client", "10.0.2.2", 2202);
        n.ssh_identity = Some(PathBuf::from("/k/id"));
        n.ssh_jump = Some(JumpRecord {
            host: "127.0.0.1".into(),
            port: 2201,
            user: "root".into(),
            identity: Some(PathBuf::from("/k/id")),
            host_key: JUMP_KEY.into(),
        });
        let argv = ssh_argv(&n, &files(None), &[]);
        let j = argv.iter().position(|a| a == "-J").expect("-J");
        assert_eq!(argv[j + 1], "root@127.0.0.1:2201");
        assert_eq!(argv.last().map(String::as_str), Some("10.0.2.2"));

        let mut state = LabState::new("lab1", "ssh", "existing");
        state.nodes.push(n);
        state.nodes.push(node("server", "bench2", 22));
        assert_eq!(
            known_hosts_text(&state),
            format!("[10.0.2.2]:2202 {NODE_KEY}\n[127.0.0.1]:2201 {JUMP_KEY}\nbench2 {NODE_KEY}\n")
        );
        let config = config_text(&state, &files(None)).expect("config");
        assert_eq!(
            config,
            "# Written by labctl for `labctl ssh` of lab lab1; rewritten on each call.\n\
             Host 127.0.0.1\n    IdentityFile \"/k/id\"\n    IdentitiesOnly yes\n\
             Host *\n    UserKnownHostsFile \"/s/known_hosts\"\n    GlobalKnownHostsFile /dev/null\n    StrictHostKeyChecking yes\n    CheckHostIP no\n"
        );
        assert_eq!(lab_key_for(&state, "/s/id".into()), None);
        let batch = ClientFiles {
            batch: true,
            ..files(None)
        };
        let config = config_text(&state, &batch).expect("config");
        assert!(config.ends_with("CheckHostIP no\n    BatchMode yes\n"), "{config}");
    }

    #[test]
    fn a_path_ssh_config_cannot_carry_is_refused() {
        let err = config_value(Path::new("/a\"b")).unwrap_err();
        assert!(err.contains("cannot carry"), "{err}");
    }
}
