//! `provider: ssh` with `fabric: existing` against hosts that exist: the
//! suite's own QEMU VMs play them (reached at their forwarded SSH ports with
//! the e2e lab's key and pinned host keys; their rxe0 plays the RDMA NIC).
//! `up`, verified traffic, two pairs of the quick bench, `impair` (recorded, refused on a
//! qdisc someone else set), a second lab refused while the first holds the
//! hosts, `down` twice; then nothing of the ssh lab is left on the VMs and
//! the QEMU lab still works.

use std::net::Ipv4Addr;
use std::path::PathBuf;

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{bin_dir, check, nothing_left_on_vms, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let (a, b, c, d, e, f, g, h) = (
        lab.clone(),
        lab.clone(),
        lab.clone(),
        lab.clone(),
        lab.clone(),
        lab.clone(),
        lab.clone(),
        lab.clone(),
    );
    vec![
        crate::timing::trial(
            "test_ssh_lab_on_existing_hosts_comes_up_runs_and_leaves_nothing",
            move || test_ssh_lab_on_existing_hosts_comes_up_runs_and_leaves_nothing(&a),
        ),
        crate::timing::trial("test_ssh_lab_bad_inputs_fail_clearly_and_leave_nothing", move || {
            crate::ssh_bad_input::test_ssh_lab_bad_inputs_fail_clearly_and_leave_nothing(&b)
        }),
        crate::timing::trial(
            "test_ssh_lab_fabric_rxe_adds_only_missing_links_and_removes_them",
            move || test_ssh_lab_fabric_rxe_adds_only_missing_links_and_removes_them(&c),
        ),
        crate::timing::trial("test_ssh_lab_through_a_jump_host", move || {
            crate::ssh_jump::test_ssh_lab_through_a_jump_host(&d)
        }),
        crate::timing::trial("test_ssh_lab_hosts_from_ssh_config_aliases", move || {
            crate::ssh_config::test_ssh_lab_hosts_from_ssh_config_aliases(&e)
        }),
        crate::timing::trial(
            "test_ssh_lab_with_a_passphrase_key_logs_in_through_ssh_agent",
            move || crate::ssh_agent::test_ssh_lab_with_a_passphrase_key_logs_in_through_ssh_agent(&f),
        ),
        crate::timing::trial(
            "test_ssh_lab_down_of_an_unreachable_host_lists_it_and_a_later_down_cleans_up",
            move || {
                crate::ssh_unreachable::test_ssh_lab_down_of_an_unreachable_host_lists_it_and_a_later_down_cleans_up(&g)
            },
        ),
        crate::timing::trial(
            "test_ssh_lab_up_of_an_unreachable_host_that_never_answers_times_out_naming_it",
            move || {
                crate::ssh_unreachable::test_ssh_lab_up_of_an_unreachable_host_that_never_answers_times_out_naming_it(
                    &h,
                )
            },
        ),
    ]
}

/// A labs file of lab `name`, provider ssh, whose nodes are the e2e lab's VMs.
fn ssh_labs_file(qemu: &Labctl, name: &str, dir: &std::path::Path) -> Result<PathBuf, Failed> {
    ssh_labs_file_with(qemu, name, dir, |_| Vec::new())
}

/// The same, with `changes(node)` setting fields of a node (a field it
/// names replaces the one from the e2e lab, a new one is added).
pub(crate) fn ssh_labs_file_with(
    qemu: &Labctl,
    name: &str,
    dir: &std::path::Path,
    changes: impl Fn(&str) -> Vec<(&'static str, String)>,
) -> Result<PathBuf, Failed> {
    let state_dir = qemu.state_dir("e2e");
    let state: Value = serde_json::from_str(&std::fs::read_to_string(state_dir.join("state.json"))?)?;
    let nodes = state["nodes"].as_array().ok_or("e2e state has no nodes")?;
    let first: Ipv4Addr = nodes[0]["data_addr"].as_str().ok_or("no data_addr")?.parse()?;
    let prefix = nodes[0]["data_prefix"].as_u64().ok_or("no data_prefix")? as u32;
    let network = Ipv4Addr::from(u32::from(first) & (u32::MAX << (32 - prefix)));
    let mut text = format!(
        "labs:\n  - name: {name}\n    provider: ssh\n    fabric: existing\n    data_network: {network}/{prefix}\n    \
         defaults: {{user: root, identity_file: {}}}\n    nodes:\n",
        state_dir.join("id_ed25519").display()
    );
    for n in nodes {
        let node = n["name"].as_str().ok_or("no name")?;
        let mut fields: Vec<(&str, String)> = vec![
            ("host", n["ssh_host"].as_str().ok_or("no ssh_host")?.to_string()),
            ("port", n["ssh_port"].to_string()),
            ("data_addr", n["data_addr"].as_str().ok_or("no data_addr")?.to_string()),
            ("host_key", n["host_key"].as_str().ok_or("no host_key")?.to_string()),
        ];
        for (key, value) in changes(node) {
            match fields.iter_mut().find(|(k, _)| *k == key) {
                Some(field) => field.1 = value,
                None => fields.push((key, value)),
            }
        }
        text.push_str(&format!("      - name: {node}\n"));
        for (key, value) in fields {
            text.push_str(&format!("        {key}: {value}\n"));
        }
    }
    let path = dir.join(format!("{name}.yaml"));
    std::fs::write(&path, text)?;
    Ok(path)
}

fn verified_run(lab: &Labctl, workload: &str) -> Result<(), Failed> {
    let run = lab.run(&["run", workload, "--json"]).ok()?.json()?;
    check(run["verified"] == true, || format!("{workload} not verified: {run}"))
}

fn test_ssh_lab_on_existing_hosts_comes_up_runs_and_leaves_nothing(qemu: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let ssh = Labctl {
        file: ssh_labs_file(qemu, "sshx", &dir)?,
        state_base: dir.join("state"),
    };
    let other = Labctl {
        file: ssh_labs_file(qemu, "sshy", &dir)?,
        state_base: dir.join("state"),
    };
    let result = exercise(qemu, &ssh, &other);
    // Whatever failed above, the hosts are given back.
    let down = ssh.run(&["down"]);
    other.run(&["down"]);
    result?;
    down.ok()?;
    let again = ssh.run(&["down"]).ok()?;
    check(
        again.stderr.contains("not up") || again.stdout.contains("not up"),
        || format!("second down: {}{}", again.stdout, again.stderr),
    )?;
    check(!ssh.state_dir("sshx").exists(), || "the ssh lab's state stayed".into())?;
    // What the ssh lab could have left: its directory and lock, a process
    // from it, a systemd unit, lines in /etc/hosts, a netem qdisc.
    let listing = "ls -d /var/lib/labctl /run/labctl 2>/dev/null; ps -o args | grep -F /var/lib/labctl | grep -v grep; \
                   grep -F labctl:sshx /etc/hosts; (systemctl list-units --all --plain 2>/dev/null | grep -F labctl-agent); \
                   tc qdisc show | grep -F netem; true";
    nothing_left_on_vms(qemu, listing, "after the ssh lab's down")?;
    for node in ["server", "client"] {
        let own = qemu
            .run(&["exec", node, "--", "grep -x LABCTL_LAB=e2e /etc/labctl/lab.env"])
            .ok()?;
        check(own.stdout.trim() == "LABCTL_LAB=e2e", || {
            format!("{node}: the QEMU lab's own lab.env changed: {}", own.stdout)
        })?;
    }
    // The QEMU lab still works: its agents healthy, its traffic verified.
    let status = qemu.run(&["status", "--json"]).ok()?.json()?;
    for node in status["nodes"].as_array().ok_or("no nodes")? {
        check(
            node["error"].is_null() && node["agent"]["version"] == env!("CARGO_PKG_VERSION"),
            || format!("QEMU lab node after the ssh lab: {node}"),
        )?;
    }
    verified_run(qemu, "write-read")
}

fn exercise(qemu: &Labctl, ssh: &Labctl, other: &Labctl) -> Result<(), Failed> {
    ssh.run(&["up"]).ok()?;
    let state: Value = serde_json::from_str(&std::fs::read_to_string(ssh.state_dir("sshx").join("state.json"))?)?;
    let status = ssh.run(&["status", "--json"]).ok()?.json()?;
    for node in status["nodes"].as_array().ok_or("no nodes")? {
        check(
            node["error"].is_null() && node["agent"]["version"] == env!("CARGO_PKG_VERSION"),
            || format!("ssh lab node: {node}"),
        )?;
    }
    for node in state["nodes"].as_array().ok_or("no nodes")? {
        let name = node["name"].as_str().ok_or("no name")?;
        let host = &node["host"];
        let dir = host["dir"]
            .as_str()
            .ok_or_else(|| format!("{name}: no host dir recorded: {node}"))?;
        check(dir.starts_with("/var/lib/labctl/sshx-"), || {
            format!("{name}: dir {dir}")
        })?;
        check(node["agent_port"] != 7470, || {
            format!("{name}: the ssh lab took the QEMU lab's agent port")
        })?;
        // The agent of the ssh lab runs from its directory, beside the QEMU lab's own.
        let seen = qemu
            .run(&[
                "exec",
                name,
                "--",
                "cat /run/labctl/host.lock; ls /var/lib/labctl; pgrep -c -x rdma-agent",
            ])
            .ok()?;
        check(
            seen.stdout.contains("lab=sshx") && seen.stdout.lines().last() == Some("2"),
            || format!("{name}: on the host: {}", seen.stdout),
        )?;
        check(host["supervisor"] == "watchdog", || {
            format!("{name}: supervisor {host}")
        })?;
    }
    verified_run(ssh, "write-read")?;
    verified_run(ssh, "fabric-write")?;
    // perftest against ours on the hosts' own devices: a bandwidth and a
    // latency pair of the quick suite, each measured by both tools (the
    // other pairs run the same way; the shared lab's bench tests cover them).
    let bench = ssh
        .run(&[
            "bench",
            "--suite",
            "quick",
            "--only",
            "write-bw",
            "--only",
            "write-lat",
            "--rounds",
            "1",
            "--warmup",
            "0",
            "--json",
        ])
        .ok()?
        .json()?;
    let pairs = bench["pairs"].as_array().ok_or("bench without pairs")?;
    check(pairs.len() == 2, || format!("quick suite pairs: {}", pairs.len()))?;
    for pair in pairs {
        let measured = |side: &str| pair[side]["samples"].as_array().is_some_and(|s| !s.is_empty());
        check(
            measured("reference") && measured("ours") && pair["ratio"].as_f64().is_some_and(|r| r > 0.0),
            || format!("pair not measured by both tools: {pair}"),
        )?;
    }
    impairments(qemu, ssh, &state)?;
    // `up` again is the same lab reconnecting (the recorded netem stays
    // recorded: `down` removes it, checked by the caller's listing).
    ssh.run(&["up"]).ok()?;
    // Another lab on the same hosts is refused, naming the holder, and
    // leaves nothing of its own.
    let refused = other.run(&["up"]);
    check(refused.code != 0, || "a second lab on held hosts came up".into())?;
    check(refused.stderr.contains("in use by another lab: lab `sshx`"), || {
        format!("refusal does not name the holder: {}", refused.stderr)
    })?;
    check(!other.state_dir("sshy").exists(), || {
        "the refused lab left state".into()
    })?;
    Ok(())
}

/// `impair` on hosts labctl does not own: a root qdisc someone else set is
/// refused by name; a netem the lab sets is recorded in its state (the
/// client's is cleared with `--clear`, the server's left for `down`).
fn impairments(qemu: &Labctl, ssh: &Labctl, state: &Value) -> Result<(), Failed> {
    let netdev_of = |name: &str| {
        state["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == name))
            .and_then(|n| n["data_netdev"].as_str())
            .map(str::to_string)
            .ok_or_else(|| format!("{name}: no data_netdev recorded: {state}"))
    };
    let (server_nic, client_nic) = (netdev_of("server")?, netdev_of("client")?);
    let recorded = |name: &str| -> Result<Value, Failed> {
        let now: Value = serde_json::from_str(&std::fs::read_to_string(ssh.state_dir("sshx").join("state.json"))?)?;
        let node = now["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == name))
            .cloned();
        Ok(node.map(|n| n["host"]["netem_netdev"].clone()).unwrap_or(Value::Null))
    };
    // Someone else's qdisc on the client (a netem the lab did not set; the
    // VMs' kernel has no other qdisc module): refused, naming it, left alone.
    qemu.run(&[
        "exec",
        "client",
        "--",
        &format!("tc qdisc add dev {client_nic} root netem delay 1ms"),
    ])
    .ok()?;
    let refused = ssh.run(&["impair", "client", "--delay", "5ms"]);
    let after = qemu.run(&["exec", "client", "--", &format!("tc qdisc show dev {client_nic}")]);
    qemu.run(&["exec", "client", "--", &format!("tc qdisc del dev {client_nic} root")])
        .ok()?;
    check(
        refused.code != 0
            && refused.stderr.contains(&format!(
                "{client_nic} has a root qdisc labctl did not set (`qdisc netem "
            )),
        || {
            format!(
                "a foreign qdisc was not refused by name: {}{}",
                refused.stdout, refused.stderr
            )
        },
    )?;
    check(
        after.stdout.contains("delay 1ms") && !after.stdout.contains("delay 5ms"),
        || format!("the foreign qdisc changed: {}", after.stdout),
    )?;
    check(recorded("client")?.is_null(), || "a refused impair was recorded".into())?;
    // Set on both, read back on the hosts, recorded in the state.
    for (node, nic) in [("server", &server_nic), ("client", &client_nic)] {
        let set = ssh.run(&["impair", node, "--delay", "5ms", "--json"]).ok()?.json()?;
        check(set["active"]["delay_us"] == 5000 && set["shapes_rdma"] == true, || {
            format!("{node}: impair says {set}")
        })?;
        let shown = qemu
            .run(&["exec", node, "--", &format!("tc qdisc show dev {nic}")])
            .ok()?
            .stdout;
        check(shown.contains("qdisc netem") && shown.contains("delay 5ms"), || {
            format!("{node}: tc shows {shown}")
        })?;
        check(recorded(node)? == nic.as_str(), || {
            format!("{node}: netem not recorded")
        })?;
    }
    // --clear removes the client's and forgets it; the server's stays for `down`.
    let cleared = ssh.run(&["impair", "client", "--clear", "--json"]).ok()?.json()?;
    check(cleared["active"].is_null() && recorded("client")?.is_null(), || {
        format!("clear: {cleared}")
    })?;
    let shown = qemu
        .run(&["exec", "client", "--", &format!("tc qdisc show dev {client_nic}")])
        .ok()?
        .stdout;
    check(!shown.contains("netem"), || format!("client after clear: {shown}"))?;
    Ok(())
}

/// `fabric: rxe` on hosts that exist: the client VM's rxe0 is deleted
/// first, the server's kept. `up` adds a link only on the client (named
/// after the lab's id, recorded), uses the server's own; `down` removes
/// exactly the added one. The client's rxe0 is put back afterwards, whatever
/// happened, and the QEMU lab verified.
fn test_ssh_lab_fabric_rxe_adds_only_missing_links_and_removes_them(qemu: &Labctl) -> Result<(), Failed> {
    let dir = bin_dir().join("lab-tests-ssh-rxe");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let qemu_state: Value = serde_json::from_str(&std::fs::read_to_string(qemu.state_dir("e2e").join("state.json"))?)?;
    let netdev = qemu_state["nodes"][1]["data_netdev"]
        .as_str()
        .unwrap_or("eth1")
        .to_string();
    let file = ssh_labs_file(qemu, "sshr", &dir)?;
    let text = std::fs::read_to_string(&file)?.replace("fabric: existing", "fabric: rxe");
    std::fs::write(&file, text)?;
    let ssh = Labctl {
        file,
        state_base: dir.join("state"),
    };
    // The QEMU lab's agent has the device open (librdmacm opens every
    // device it sees and keeps it): restart it (its init respawns it) so the
    // link can go.
    qemu.run(&[
        "exec",
        "client",
        "--",
        "pkill -x rdma-agent; sleep 2; rdma link delete rxe0",
    ])
    .ok()?;
    let result = rxe_lab(qemu, &ssh);
    let down = ssh.run(&["down"]);
    let restore = qemu.run(&[
        "exec",
        "client",
        "--",
        &format!(
            "pkill -x rdma-agent; sleep 2; rdma link show | grep -q ' netdev {netdev} ' || rdma link add rxe0 type rxe netdev {netdev}; \
             for i in $(seq 50); do grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null && break; sleep 0.2; done; rdma link show"
        ),
    ]);
    result?;
    down.ok()?;
    restore.ok()?;
    // Exactly the added link went: the client has only its rxe0 again, the server its own.
    for node in ["server", "client"] {
        let links = qemu.run(&["exec", node, "--", "rdma link show"]).ok()?.stdout;
        check(
            links.lines().count() == 1 && links.contains("link rxe0/1") && !links.contains("rxe_"),
            || format!("{node} after down: {links}"),
        )?;
    }
    verified_run(qemu, "write-read")?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn rxe_lab(qemu: &Labctl, ssh: &Labctl) -> Result<(), Failed> {
    let up = ssh.run(&["up"]).ok()?;
    let state: Value = serde_json::from_str(&std::fs::read_to_string(ssh.state_dir("sshr").join("state.json"))?)?;
    let node = |name: &str| {
        state["nodes"]
            .as_array()
            .and_then(|n| n.iter().find(|n| n["name"] == name))
            .cloned()
            .unwrap_or(Value::Null)
    };
    let (server, client) = (node("server"), node("client"));
    let added = client["host"]["rxe_link"].as_str().unwrap_or("").to_string();
    check(
        added.starts_with("rxe_") && client["rdma_device"] == added.as_str(),
        || format!("client: no added link recorded: {client}"),
    )?;
    check(
        server["host"]["rxe_link"].is_null() && server["rdma_device"] == "rxe0",
        || format!("server: its own rxe0 should be used and not recorded: {server}"),
    )?;
    check(
        up.stderr.contains(&format!("added rxe link {added}")) && up.stderr.contains("using rxe0"),
        || format!("up did not say what it added and what it used:\n{}", up.stderr),
    )?;
    let on_host = qemu.run(&["exec", "client", "--", "rdma link show"]).ok()?.stdout;
    check(on_host.contains(&format!("link {added}/1 state ACTIVE")), || {
        format!("client links: {on_host}")
    })?;
    verified_run(ssh, "write-read")
}
