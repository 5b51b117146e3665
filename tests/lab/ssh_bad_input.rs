//! `provider: ssh` given bad input, against the suite's QEMU VMs standing in
//! for existing hosts: each case fails `up` with an error that names the
//! node and says what to do, and leaves nothing on any host (no lab
//! directory, no host lock) and no state here.
//!
//! A device without an active port is made by taking the server's data
//! link down for that one case (the VMs' kernel has no dummy, veth, vlan or
//! bridge driver to give rxe a netdev of its own); the link is brought back
//! whatever happens, and the QEMU lab's write-read is verified at the end.

use libtest_mimic::Failed;

use crate::ssh_existing::ssh_labs_file_with;
use crate::util::{bin_dir, check, nothing_left_on_vms, Labctl};

/// One bad input: how the labs file changes, what stderr must say.
struct Case {
    name: &'static str,
    /// Fields of node `server` that change.
    server: Vec<(&'static str, String)>,
    /// The agent binary to deploy instead of the built one.
    agent: Option<std::path::PathBuf>,
    /// Phrases the error must contain.
    says: Vec<&'static str>,
    /// Run on the server before `up`, and after it whatever happened.
    around: Option<(&'static str, &'static str)>,
}

pub fn test_ssh_lab_bad_inputs_fail_clearly_and_leave_nothing(qemu: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-bad");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let state: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(qemu.state_dir("e2e").join("state.json"))?)?;
    let client_key = state["nodes"][1]["host_key"]
        .as_str()
        .ok_or("no client host key")?
        .to_string();

    // A port nothing listens on: bound, then released.
    let closed_port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    // A key the hosts have never seen.
    let stranger = dir.join("stranger_ed25519");
    let keygen = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(&stranger)
        .output()?;
    check(keygen.status.success(), || {
        format!("ssh-keygen: {}", String::from_utf8_lossy(&keygen.stderr))
    })?;
    // The built agent with its ELF header saying aarch64.
    let foreign = dir.join("rdma-agent-aarch64");
    let mut elf = std::fs::read(bin_dir().join("rdma-agent"))?;
    elf[18..20].copy_from_slice(&0xB7u16.to_le_bytes()); // e_machine = EM_AARCH64
    std::fs::write(&foreign, elf)?;
    // A user that may log in but not use sudo. Its password is `*` (none,
    // not locked): the node's sshd runs without PAM, and OpenSSH alone
    // refuses a locked account even a key login.
    qemu.run(&[
        "exec",
        "server",
        "--",
        "id labnosudo >/dev/null 2>&1 || useradd -m -p '*' -s /bin/sh labnosudo; install -d -o labnosudo -m 700 ~labnosudo/.ssh; \
         install -o labnosudo -m 600 /root/.ssh/authorized_keys ~labnosudo/.ssh/authorized_keys",
    ])
    .ok()?;

    let cases = vec![
        Case {
            name: "unreachable",
            server: vec![("port", closed_port.to_string())],
            agent: None,
            says: vec![
                "cannot reach 127.0.0.1",
                "over SSH",
                "fix: check the node's host and port",
            ],
            around: None,
        },
        Case {
            name: "wrong-key",
            server: vec![("identity_file", stranger.display().to_string())],
            agent: None,
            says: vec!["the host refused the key", "stranger_ed25519", "fix:"],
            around: None,
        },
        Case {
            name: "changed-host-key",
            server: vec![("host_key", client_key.clone())],
            agent: None,
            says: vec!["host key mismatch", "refusing to connect", "fix:"],
            around: None,
        },
        Case {
            name: "no-sudo",
            server: vec![("user", "labnosudo".into())],
            agent: None,
            says: vec!["`sudo -n true` fails for user `labnosudo`", "fix:"],
            around: None,
        },
        Case {
            name: "no-such-device",
            server: vec![("rdma_device", "mlx5_9".into())],
            agent: None,
            says: vec![
                "no RDMA device `mlx5_9` on the host; the host has:",
                "rxe0/1 state ACTIVE",
                "fix:",
            ],
            around: None,
        },
        Case {
            name: "data-addr-on-no-rdma-netdev",
            server: vec![("data_addr", unused_data_addr(&state)?)],
            agent: None,
            says: vec!["is on no RDMA device's netdev; the host has:", "rxe0/1", "fix:"],
            around: None,
        },
        Case {
            name: "foreign-agent",
            server: vec![],
            agent: Some(foreign),
            says: vec!["built for aarch64", "x86_64", "fix:"],
            around: None,
        },
        Case {
            name: "port-not-active",
            server: vec![],
            agent: None,
            says: vec![
                "rxe0 has no ACTIVE port; the host has:",
                "rxe0/1 state DOWN",
                "fix: bring the port up",
            ],
            around: Some(("ip link set eth1 down", "ip link set eth1 up")),
        },
    ];
    let mut failures = Vec::new();
    for case in &cases {
        if let Err(e) = one_case(qemu, &dir, case) {
            failures.push(format!("{}: {}", case.name, e.message().unwrap_or_default()));
        }
    }
    qemu.run(&["exec", "server", "--", "userdel -r labnosudo 2>/dev/null; true"]);
    check(failures.is_empty(), || failures.join("\n"))?;
    // The QEMU lab's own link came back with its device.
    let run = qemu.run(&["run", "write-read", "--json"]).ok()?.json()?;
    check(run["verified"] == true, || {
        format!("the QEMU lab after the cases: {run}")
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// An address in the data network that no VM holds.
fn unused_data_addr(state: &serde_json::Value) -> Result<String, Failed> {
    let first: std::net::Ipv4Addr = state["nodes"][0]["data_addr"].as_str().ok_or("no data_addr")?.parse()?;
    Ok(std::net::Ipv4Addr::from(u32::from(first) + 100).to_string())
}

fn one_case(qemu: &Labctl, dir: &std::path::Path, case: &Case) -> Result<(), Failed> {
    let lab_name = format!("bad{}", case.name.replace('-', ""));
    let lab_name = &lab_name[..lab_name.len().min(20)];
    let file = ssh_labs_file_with(qemu, lab_name, dir, |node| {
        if node == "server" {
            case.server.clone()
        } else {
            Vec::new()
        }
    })?;
    let lab = Labctl {
        file,
        state_base: dir.join("state"),
    };
    let mut cmd = lab.command();
    if let Some(agent) = &case.agent {
        cmd.env("LABCTL_AGENT", agent);
    }
    if let Some((before, _)) = case.around {
        qemu.run(&["exec", "server", "--", before]).ok()?;
    }
    let out = cmd.arg("up").output();
    if let Some((_, after)) = case.around {
        let back = qemu.run(&["exec", "server", "--", after]);
        // The port turns ACTIVE again a moment after the link.
        std::thread::sleep(std::time::Duration::from_secs(3));
        back.ok()?;
    }
    let out = out?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    check(!out.status.success(), || format!("up succeeded:\n{stderr}"))?;
    let missing: Vec<&&str> = case.says.iter().filter(|p| !stderr.contains(**p)).collect();
    check(missing.is_empty(), || format!("the error lacks {missing:?}:\n{stderr}"))?;
    check(stderr.contains("node `server`") || case.agent.is_some(), || {
        format!("the error does not name the node:\n{stderr}")
    })?;
    // Nothing stays: no state here, no lab directory or lock on any host.
    let state_dir = lab.state_dir(lab_name);
    let leftovers = std::fs::read_dir(&state_dir).map(|d| d.count()).unwrap_or(0);
    check(leftovers == 0, || {
        format!("{} holds {leftovers} entries", state_dir.display())
    })?;
    let listing = "ls -d /var/lib/labctl /run/labctl/host.lock 2>/dev/null; true";
    nothing_left_on_vms(qemu, listing, "after the refused up")
}
