//! The local lab's lifecycle on real VMs: status, the rxe link carrying verbs
//! traffic, exec, idempotent up (pinned host keys: security.rs), the agent's supervision
//! and isolation, and a down that leaves nothing.

use std::os::unix::process::CommandExt;

use libtest_mimic::{Failed, Trial};

use crate::util::{check, processes_mentioning, wait_for_agent, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_status_shows_rxe_active_on_every_node",
            test_status_shows_rxe_active_on_every_node,
        ),
        t(
            "test_rc_pingpong_crosses_the_rxe_link",
            test_rc_pingpong_crosses_the_rxe_link,
        ),
        t(
            "test_exec_returns_exit_status_and_stderr",
            test_exec_returns_exit_status_and_stderr,
        ),
        t("test_second_up_only_verifies", test_second_up_only_verifies),
        t("test_unknown_node_is_named", test_unknown_node_is_named),
        t("test_ssh_opens_a_shell_on_the_node", test_ssh_opens_a_shell_on_the_node),
        t(
            "test_agent_listens_on_loopback_only",
            test_agent_listens_on_loopback_only,
        ),
        t(
            "test_killed_agent_is_respawned_and_healthy",
            test_killed_agent_is_respawned_and_healthy,
        ),
    ]
}

/// The last trial: `down` removes every process and file of the lab.
pub fn teardown_trial(lab: &Labctl) -> Trial {
    let lab = lab.clone();
    crate::timing::trial("test_down_removes_every_process_and_file", move || {
        test_down_removes_every_process_and_file(&lab)
    })
}

fn status(lab: &Labctl) -> Result<serde_json::Value, Failed> {
    lab.run(&["status", "--json"]).ok()?.json()
}

fn test_status_shows_rxe_active_on_every_node(lab: &Labctl) -> Result<(), Failed> {
    let s = status(lab)?;
    check(s["schema"] == 1, || format!("schema version missing: {s}"))?;
    check(s["phase"] == "ready", || format!("phase: {}", s["phase"]))?;
    let nodes = s["nodes"].as_array().ok_or("no nodes")?;
    check(nodes.len() == 2, || format!("expected 2 nodes: {s}"))?;
    for node in nodes {
        let name = &node["name"];
        check(node["error"].is_null(), || format!("{name}: {}", node["error"]))?;
        check(node["agent"]["version"] == env!("CARGO_PKG_VERSION"), || {
            format!("{name}: agent {}", node["agent"])
        })?;
        let port = &node["rdma"][0];
        check(port["state"] == "PORT_ACTIVE", || {
            format!("{name}: rdma {}", node["rdma"])
        })?;
        check(port["device"].as_str().is_some_and(|d| d.starts_with("rxe")), || {
            format!("{name}: device {}", port["device"])
        })?;
        check(port["active_mtu"] == 1024, || {
            format!("{name}: mtu {}", port["active_mtu"])
        })?;
        check(!port["netdev"].as_str().unwrap_or("").is_empty(), || {
            format!("{name}: no netdev")
        })?;
    }
    Ok(())
}

fn test_rc_pingpong_crosses_the_rxe_link(lab: &Labctl) -> Result<(), Failed> {
    // GID index 1 is the RoCEv2 GID of the data address (::ffff:10.77.0.x).
    // 200 round trips of 4 KiB; ibv_rc_pingpong counts both directions.
    let pingpong = "timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -n 200 -s 4096";
    let sides = crate::util::rc_pingpong(lab, pingpong, &format!("{pingpong} server"), 1_638_400)?;
    for (side, out) in [("client", &sides.client), ("server", &sides.server)] {
        check(out.contains("remote address: LID 0x0000"), || {
            format!("{side} no RoCE peer:\n{out}")
        })?;
    }
    Ok(())
}

fn test_exec_returns_exit_status_and_stderr(lab: &Labctl) -> Result<(), Failed> {
    let run = lab.run(&["exec", "client", "--", "echo out; echo err >&2; exit 7"]);
    check(run.code == 7, || format!("exit status {} (want 7)", run.code))?;
    check(run.stdout.trim() == "out", || format!("stdout {:?}", run.stdout))?;
    check(run.stderr.trim() == "err", || format!("stderr {:?}", run.stderr))?;
    let host = lab.run(&["exec", "server", "--", "hostname"]).ok()?;
    check(host.stdout.trim() == "server", || format!("hostname {:?}", host.stdout))
}

fn test_second_up_only_verifies(lab: &Labctl) -> Result<(), Failed> {
    let before = status(lab)?;
    let run = lab.run(&["up"]).ok()?;
    check(run.stdout.contains("was already up (verified)"), || {
        format!("second up said:\n{}", run.stdout)
    })?;
    let after = status(lab)?;
    check(before["created_at"] == after["created_at"], || {
        "second up recreated the lab".into()
    })?;
    check(
        before["provider_state"]["supervisor_pid"] == after["provider_state"]["supervisor_pid"],
        || "second up restarted the VMs".into(),
    )
}

fn test_unknown_node_is_named(lab: &Labctl) -> Result<(), Failed> {
    // Every verb that takes a node name refuses an unknown one as bad input.
    for args in [
        &["exec", "nosuchnode", "--", "true"][..],
        &["run", "write-read", "--server", "nosuchnode"],
        &["bench", "--only", "write-lat", "--client", "nosuchnode"],
    ] {
        let run = lab.run(args);
        check(run.code == 2, || {
            format!("{args:?}: exit {} (want 2): {}", run.code, run.stderr)
        })?;
        check(
            run.stderr.contains("no node `nosuchnode`") && run.stderr.contains("server, client"),
            || format!("{args:?}: message: {}", run.stderr),
        )?;
    }
    Ok(())
}

fn test_ssh_opens_a_shell_on_the_node(lab: &Labctl) -> Result<(), Failed> {
    // Without a terminal, ssh runs the login shell on stdin: a scripted session.
    let mut child = lab
        .command()
        .args(["ssh", "client"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().ok_or("no stdin")?;
        stdin.write_all(b"hostname; cat /sys/class/infiniband/rxe0/ports/1/state; exit 5\n")?;
    }
    let out = child.wait_with_output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    check(out.status.code() == Some(5), || {
        format!("exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr))
    })?;
    check(stdout.contains("client") && stdout.contains("ACTIVE"), || {
        format!("output: {stdout}")
    })
}

fn test_agent_listens_on_loopback_only(lab: &Labctl) -> Result<(), Failed> {
    let listening = lab.run(&["exec", "server", "--", "ss -Hltn 'sport = :7470'"]).ok()?;
    check(listening.stdout.contains("127.0.0.1:7470"), || {
        format!("ss: {}", listening.stdout)
    })?;
    check(
        !listening.stdout.contains("0.0.0.0:7470") && !listening.stdout.contains("*:7470"),
        || format!("agent listens beyond loopback: {}", listening.stdout),
    )?;
    // From the other node, over the data link, the port is closed.
    let probe = lab.run(&[
        "exec",
        "client",
        "--",
        "timeout 5 bash -c 'echo > /dev/tcp/server/7470'",
    ]);
    check(probe.code != 0, || "the agent port answered from the other node".into())
}

fn test_killed_agent_is_respawned_and_healthy(lab: &Labctl) -> Result<(), Failed> {
    let before = lab.run(&["exec", "client", "--", "pgrep -x rdma-agent"]).ok()?;
    lab.run(&["exec", "client", "--", "pkill -9 -x rdma-agent"]).ok()?;
    wait_for_agent(lab, "client", "being killed")?;
    let after = lab.run(&["exec", "client", "--", "pgrep -x rdma-agent"]).ok()?;
    check(after.stdout != before.stdout, || "the agent pid did not change".into())
}

fn test_down_removes_every_process_and_file(lab: &Labctl) -> Result<(), Failed> {
    let dir = lab.state_dir("e2e");
    let dir_text = dir.display().to_string();
    check(!processes_mentioning(&dir_text).is_empty(), || {
        "no lab process before down?".into()
    })?;
    // A bystander whose command line names the lab's directory: `down`
    // stops what `up` started, not whatever mentions the path (issue 15 item 4).
    let mut bystander = std::process::Command::new("sleep")
        .arg0(dir.join("bystander"))
        .arg("600")
        .spawn()?;
    let started = std::time::Instant::now();
    let run = lab.run(&["down"]);
    let took = started.elapsed();
    let survived = bystander.try_wait()?.is_none();
    let _ = bystander.kill();
    let _ = bystander.wait();
    let run = run.ok()?;
    check(survived, || "down killed a process it did not start".into())?;
    check(run.stdout.contains("removed"), || format!("down said: {}", run.stdout))?;
    // The runs the suite saved outlive the lab.
    let results = lab.state_base.join(".results").join("e2e");
    let saved = std::fs::read_dir(&results).map(|d| d.count()).unwrap_or(0);
    check(saved > 0, || {
        format!("no saved runs in {} after down", results.display())
    })?;
    let bystander_pid = format!("{}: ", bystander.id());
    let left: Vec<String> = processes_mentioning(&dir_text)
        .into_iter()
        .filter(|p| !p.starts_with(&bystander_pid))
        .collect();
    check(left.is_empty(), || format!("processes left after down: {left:?}"))?;
    check(!dir.exists(), || format!("{} still exists", dir.display()))?;
    eprintln!("down took {:.1}s", took.as_secs_f64());
    let again = lab.run(&["down"]).ok()?;
    check(again.stdout.contains("nothing to remove"), || {
        format!("second down said: {}", again.stdout)
    })
}
