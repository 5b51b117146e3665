//! `proxy_jump:` on a provider ssh lab: the client VM reached through the
//! server VM (jump host = the server's forwarded SSH port on this machine,
//! target = the client's data address as the server sees it, port 22), over
//! russh's direct-tcpip channel with no `ssh` binary. `up`, a verified
//! write-read and `down` on that lab; then the three ways a hop can fail,
//! each named: the jump host unreachable, the jump host refusing the login,
//! the node unreachable from the jump host.

use libtest_mimic::Failed;
use serde_json::Value;

use crate::ssh_existing::ssh_labs_file_with;
use crate::util::{bin_dir, check, e2e_server_and_client, nothing_left_on_vms, Labctl};

pub(crate) fn test_ssh_lab_through_a_jump_host(qemu: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-jump");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let (server, client) = e2e_server_and_client(qemu)?;
    let jump_port = server["ssh_port"].to_string();
    let jump_key = server["host_key"].as_str().ok_or("server: no host_key")?.to_string();
    let client_addr = client["data_addr"].as_str().ok_or("client: no data_addr")?.to_string();
    // The client's sshd must listen on its data address (0.0.0.0:22).
    let listening = qemu
        .run(&[
            "exec",
            "client",
            "--",
            "grep -c ' 00000000:0016 00000000:0000 0A' /proc/net/tcp",
        ])
        .ok()?;
    check(listening.stdout.trim() != "0", || {
        "the client's sshd does not listen on 0.0.0.0:22".into()
    })?;
    let lab_through = |name: &str, jump: String, port: &str| {
        let (jump, jump_key, addr, port) = (jump, jump_key.clone(), client_addr.clone(), port.to_string());
        ssh_labs_file_with(qemu, name, &dir, move |n| {
            if n != "client" {
                return Vec::new();
            }
            vec![
                ("host", addr.clone()),
                ("port", port.clone()),
                ("proxy_jump", jump.clone()),
                ("proxy_jump_host_key", jump_key.clone()),
            ]
        })
        .map(|file| Labctl {
            file,
            state_base: dir.join("state"),
        })
    };
    let ssh = lab_through("sshj", format!("root@127.0.0.1:{jump_port}"), "22")?;
    let result = jumped_lab(qemu, &ssh, &jump_key);
    let down = ssh.run(&["down"]);
    result?;
    down.ok()?;
    check(!ssh.state_dir("sshj").exists(), || {
        "the jumped lab's state stayed".into()
    })?;
    let listing = "ls -d /var/lib/labctl /run/labctl 2>/dev/null; true";
    nothing_left_on_vms(qemu, listing, "after the jumped lab's down")?;

    // Each hop's failure names the hop, and leaves no state.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let cases = [
        (
            "sshj-unreachable",
            format!("root@127.0.0.1:{closed}"),
            "22",
            format!("cannot reach the jump host root@127.0.0.1:{closed} over SSH"),
        ),
        (
            "sshj-refused",
            format!("nobody@127.0.0.1:{jump_port}"),
            "22",
            format!("jump host nobody@127.0.0.1:{jump_port}: node `client`: the host refused the key"),
        ),
        (
            "sshj-no-route",
            format!("root@127.0.0.1:{jump_port}"),
            "1",
            format!("the jump host root@127.0.0.1:{jump_port} cannot reach {client_addr}:1"),
        ),
    ];
    for (name, jump, port, wanted) in cases {
        let lab = lab_through(name, jump, port)?;
        let up = lab.run(&["up"]);
        let leftover = lab.state_dir(name).exists();
        lab.run(&["down"]);
        check(up.code != 0, || format!("{name}: up succeeded"))?;
        check(
            up.stderr.contains("node `client`") && up.stderr.contains(&wanted),
            || format!("{name}: wanted `{wanted}` in:\n{}", up.stderr),
        )?;
        check(!leftover, || format!("{name}: a failed up left state"))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn jumped_lab(qemu: &Labctl, ssh: &Labctl, jump_key: &str) -> Result<(), Failed> {
    let up = ssh.run(&["up"]).ok()?;
    check(up.stderr.contains("through a jump host with key SHA256:"), || {
        format!(
            "up does not say the client is reached through the jump host:\n{}",
            up.stderr
        )
    })?;
    let state: Value = serde_json::from_str(&std::fs::read_to_string(ssh.state_dir("sshj").join("state.json"))?)?;
    let client = state["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|n| n["name"] == "client"))
        .cloned()
        .unwrap_or(Value::Null);
    check(
        client["ssh_jump"]["host_key"] == jump_key && client["ssh_port"] == 22,
        || format!("client: the jump host is not recorded with its key: {client}"),
    )?;
    // The lab's agent on the client runs, reached through the jump host.
    let seen = qemu.run(&["exec", "client", "--", "cat /run/labctl/host.lock"]).ok()?;
    check(seen.stdout.contains("lab=sshj"), || {
        format!("client lock: {}", seen.stdout)
    })?;
    let status = ssh.run(&["status", "--json"]).ok()?.json()?;
    for node in status["nodes"].as_array().ok_or("no nodes")? {
        check(node["error"].is_null(), || format!("jumped lab node: {node}"))?;
    }
    let run = ssh.run(&["run", "write-read", "--json"]).ok()?.json()?;
    check(run["verified"] == true, || {
        format!("write-read through the jump host: {run}")
    })?;
    labctl_ssh_through_the_jump_host(qemu, ssh, jump_key)
}

/// `labctl ssh client -- CMD` logs in as `up` did: the system's ssh through
/// the jump host (`-J`), the node's identity_file, both hops' pinned keys
/// in the lab's known_hosts with StrictHostKeyChecking=yes, and `--batch`
/// so a refused key fails instead of prompting. It reaches the client VM
/// itself: its boot_id, not the jump host's.
fn labctl_ssh_through_the_jump_host(qemu: &Labctl, ssh: &Labctl, jump_key: &str) -> Result<(), Failed> {
    let boot_id = |node: &str| -> Result<String, Failed> {
        let out = qemu
            .run(&["exec", node, "--", "cat /proc/sys/kernel/random/boot_id"])
            .ok()?;
        Ok(out.stdout.trim().to_string())
    };
    let (client_id, server_id) = (boot_id("client")?, boot_id("server")?);
    check(!client_id.is_empty() && client_id != server_id, || {
        format!("boot ids: client {client_id}, server {server_id}")
    })?;
    let via = ssh
        .run(&[
            "ssh",
            "--batch",
            "client",
            "--",
            "cat",
            "/proc/sys/kernel/random/boot_id",
        ])
        .ok()?;
    eprintln!(
        "--- labctl ssh --batch client -- cat /proc/sys/kernel/random/boot_id (client {client_id}, server {server_id}):\n{}",
        via.stdout
    );
    check(via.stdout.trim() == client_id, || {
        format!(
            "labctl ssh client printed {:?}, the client's boot_id is {client_id} (server's {server_id}); stderr:\n{}",
            via.stdout, via.stderr
        )
    })?;
    let known = std::fs::read_to_string(ssh.state_dir("sshj").join("known_hosts"))?;
    check(known.contains(jump_key.trim()), || {
        format!("the jump host's key is not in the lab's known_hosts:\n{known}")
    })?;
    let config = std::fs::read_to_string(ssh.state_dir("sshj").join("ssh_config.batch"))?;
    check(
        config.contains("StrictHostKeyChecking yes") && config.contains("BatchMode yes"),
        || format!("labctl ssh's config:\n{config}"),
    )
}
