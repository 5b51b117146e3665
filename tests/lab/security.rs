//! Who may talk to the lab (issue 15, items 6 and 7): every node presents
//! the SSH host key labctl generated for it before it booted, and labctl
//! refuses any other; the agent serves only calls that carry the lab's
//! secret, which a non-root user on the node can neither read nor guess,
//! and which no output, log, state or results file contains (but its own
//! file and the nodes' boot archives that carry it, all readable by their
//! owner only). On the data path, a run's server lets in only the client
//! that opens with the run's connect proof, while it waits and while it
//! runs (issue 36, item 2).

use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};

use crate::util::{check, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_security_nodes_present_the_host_key_labctl_made_before_boot",
            test_security_nodes_present_the_host_key_labctl_made_before_boot,
        ),
        t(
            "test_security_a_node_presenting_another_host_key_is_refused",
            test_security_a_node_presenting_another_host_key_is_refused,
        ),
        t(
            "test_security_a_non_root_user_on_a_node_cannot_drive_the_agent",
            test_security_a_non_root_user_on_a_node_cannot_drive_the_agent,
        ),
        t(
            "test_security_the_agent_secret_appears_in_no_output_log_state_or_result",
            test_security_the_agent_secret_appears_in_no_output_log_state_or_result,
        ),
        t(
            "test_security_a_stranger_connecting_to_a_waiting_server_is_refused_and_the_run_verifies",
            test_security_a_stranger_connecting_to_a_waiting_server_is_refused_and_the_run_verifies,
        ),
        t(
            "test_security_a_stranger_connecting_to_a_running_server_is_refused_at_once",
            test_security_a_stranger_connecting_to_a_running_server_is_refused_at_once,
        ),
    ]
}

const NODES: [&str; 2] = ["server", "client"];

fn state_json(lab: &Labctl) -> Result<serde_json::Value, Failed> {
    let text = std::fs::read_to_string(lab.state_dir("e2e").join("state.json"))?;
    Ok(serde_json::from_str(&text)?)
}

/// The first two fields of an OpenSSH public key line (type and key).
fn key_of(line: &str) -> String {
    line.split_whitespace().take(2).collect::<Vec<_>>().join(" ")
}

fn test_security_nodes_present_the_host_key_labctl_made_before_boot(lab: &Labctl) -> Result<(), Failed> {
    let state = state_json(lab)?;
    for (i, node) in NODES.iter().enumerate() {
        let pinned = state["nodes"][i]["host_key"].as_str().ok_or("no pinned host key")?;
        let made = std::fs::read_to_string(lab.state_dir("e2e").join(format!("host_keys/{node}_ed25519.pub")))?;
        check(key_of(pinned) == key_of(&made), || {
            format!("{node}: state pins {pinned}, labctl made {made}")
        })?;
        // sshd on the node serves exactly that key, and only that one.
        let served = lab
            .run(&["exec", node, "--", "cat /etc/ssh/ssh_host_*_key.pub"])
            .ok()?
            .stdout;
        check(served.lines().count() == 1 && key_of(&served) == key_of(pinned), || {
            format!("{node}: sshd's host keys are\n{served}\nbut labctl pinned {pinned}")
        })?;
    }
    // And `labctl ssh`'s known_hosts holds the same keys.
    let known = std::fs::read_to_string(lab.state_dir("e2e").join("known_hosts"))?;
    for (i, node) in NODES.iter().enumerate() {
        let pinned = key_of(state["nodes"][i]["host_key"].as_str().unwrap_or_default());
        check(known.contains(&pinned), || {
            format!("{node}'s key is not in known_hosts:\n{known}")
        })?;
    }
    Ok(())
}

fn test_security_a_node_presenting_another_host_key_is_refused(lab: &Labctl) -> Result<(), Failed> {
    // Pin the client's key for the server: the server now presents a key
    // other than the pinned one, as an impostor at its address would.
    let path = lab.state_dir("e2e").join("state.json");
    let original = std::fs::read_to_string(&path)?;
    let mut state: serde_json::Value = serde_json::from_str(&original)?;
    let client_key = state["nodes"][1]["host_key"].clone();
    state["nodes"][0]["host_key"] = client_key;
    std::fs::write(&path, serde_json::to_string_pretty(&state)?)?;
    let started = Instant::now();
    let run = lab.run(&["exec", "server", "--", "echo", "reached"]);
    let took = started.elapsed().as_secs_f64();
    std::fs::write(&path, &original)?;
    check(run.code != 0 && !run.stdout.contains("reached"), || {
        format!(
            "exec reached a node with another host key: {} {}",
            run.stdout, run.stderr
        )
    })?;
    check(
        run.stderr.contains("node `server`: SSH host key mismatch") && run.stderr.contains("SHA256:"),
        || format!("unclear refusal:\n{}", run.stderr),
    )?;
    eprintln!(
        "refused in {took:.1}s: {}",
        run.stderr.lines().next().unwrap_or_default()
    );
    // The real key still works.
    lab.run(&["exec", "server", "--", "true"]).ok()?;
    Ok(())
}

/// Runs `line` on `node` as user nobody; returns (exit status, stdout, stderr).
fn as_nobody(lab: &Labctl, node: &str, line: &str) -> Result<(i32, String, String), Failed> {
    let run = lab.run(&[
        "exec",
        node,
        "--",
        "setpriv",
        "--reuid=nobody",
        "--regid=nogroup",
        "--clear-groups",
        "sh",
        "-c",
        line,
    ]);
    Ok((run.code, run.stdout, run.stderr))
}

fn test_security_a_non_root_user_on_a_node_cannot_drive_the_agent(lab: &Labctl) -> Result<(), Failed> {
    let state = state_json(lab)?;
    for (i, node) in NODES.iter().enumerate() {
        let port = state["nodes"][i]["agent_port"].as_u64().ok_or("no agent_port")?;
        let addr = format!("127.0.0.1:{port}");
        // The secret file is root's alone.
        let (code, _, stderr) = as_nobody(lab, node, "cat /etc/labctl/agent.secret")?;
        check(code != 0 && stderr.contains("Permission denied"), || {
            format!("{node}: nobody could read the secret (exit {code}): {stderr}")
        })?;
        // Without it, every call is refused (the probe calls Health; the
        // in-process tests cover every RPC).
        let (code, stdout, _) = as_nobody(lab, node, &format!("/usr/local/bin/rdma-agent probe --addr {addr}"))?;
        check(code != 0 && stdout.contains("refused: Unauthenticated"), || {
            format!("{node}: the agent answered a call without the secret (exit {code}): {stdout}")
        })?;
        // A guessed secret is refused too.
        let guess = format!(
            "umask 077; head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n' > /tmp/guess; \
             /usr/local/bin/rdma-agent probe --addr {addr} --secret-file /tmp/guess; s=$?; rm -f /tmp/guess; exit $s"
        );
        let (code, stdout, stderr) = as_nobody(lab, node, &guess)?;
        check(code != 0 && stdout.contains("refused: PermissionDenied"), || {
            format!("{node}: the agent answered a guessed secret (exit {code}): {stdout} {stderr}")
        })?;
        // Root on the node, like the controller, has the secret and is served.
        let root = lab
            .run(&[
                "exec",
                node,
                "--",
                "/usr/local/bin/rdma-agent",
                "probe",
                "--addr",
                &addr,
            ])
            .ok()?;
        check(root.stdout.contains("healthy: rdma-agent"), || {
            format!("{node}: root's probe: {}", root.stdout)
        })?;
    }
    Ok(())
}

fn test_security_the_agent_secret_appears_in_no_output_log_state_or_result(lab: &Labctl) -> Result<(), Failed> {
    let dir = lab.state_dir("e2e");
    let secret = std::fs::read_to_string(dir.join("agent.secret"))?.trim().to_string();
    check(secret.len() == 64, || {
        "the secret file does not hold 64 hex digits".into()
    })?;
    let mut seen: Vec<String> = Vec::new();
    let mut look = |what: String, text: &str| {
        if text.contains(&secret) {
            seen.push(what);
        }
    };
    // What users see: a run (text and JSON), status, exec.
    let run = lab.run(&["run", "write-read", "--size", "4096", "-n", "10"]).ok()?;
    look("run output".into(), &format!("{}{}", run.stdout, run.stderr));
    let run = lab
        .run(&["run", "send-recv", "--size", "4096", "-n", "10", "--json"])
        .ok()?;
    look("run --json".into(), &format!("{}{}", run.stdout, run.stderr));
    let status = lab.run(&["-v", "status", "--json"]).ok()?;
    look(
        "status --json -v".into(),
        &format!("{}{}", status.stdout, status.stderr),
    );
    // What labctl keeps: every file of the state directory but the secret's
    // own and the nodes' boot archives (they carry it to the node's agent, which
    // starts at boot), and the saved results. Those may hold it only readable
    // by their owner.
    let results = lab.state_base.join(".results");
    let holders: Vec<std::path::PathBuf> = std::iter::once(dir.join("agent.secret"))
        .chain(NODES.iter().map(|n| dir.join("nodes").join(n).join("initrd")))
        .collect();
    for holder in &holders {
        let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(holder)?.permissions());
        check(mode & 0o077 == 0, || {
            format!("{} holds the secret with mode {:o}", holder.display(), mode & 0o777)
        })?;
    }
    for root in [dir.clone(), results] {
        for path in files_under(&root)? {
            if holders.contains(&path) {
                continue;
            }
            look(
                path.display().to_string(),
                &String::from_utf8_lossy(&std::fs::read(&path)?),
            );
        }
    }
    // What the nodes keep: the agent's log, the lab facts, process arguments.
    for node in NODES {
        let out = lab
            .run(&[
                "exec",
                node,
                "--",
                "cat /var/log/rdma-agent.log /etc/labctl/lab.env; ps -eo args",
            ])
            .ok()?;
        look(format!("{node}: agent log, lab.env, ps"), &out.stdout);
    }
    check(seen.is_empty(), || {
        format!("the agent secret appears in: {}", seen.join(", "))
    })
}

fn files_under(root: &std::path::Path) -> Result<Vec<std::path::PathBuf>, Failed> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries {
            let path = entry?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.is_file() {
                out.push(path);
            }
        }
    }
    Ok(out)
}

/// The data address and port the server's agent listens on for a run: its
/// rdma_cm listener (`rdma resource show cm_id`, state LISTEN) or its TCP
/// socket (`ss`), polled until it appears.
fn agent_listener(lab: &Labctl, rdma_cm: bool, within: Duration) -> Result<String, Failed> {
    let started = Instant::now();
    let listing = if rdma_cm {
        "rdma resource show cm_id"
    } else {
        "ss -Hltnp"
    };
    loop {
        let out = lab.run(&["exec", "server", "--", listing]).ok()?.stdout;
        let found = out
            .lines()
            // rdma names the agent's session thread (`comm session-…`), ss the process.
            .filter(|l| (l.contains("rdma-agent") || l.contains("comm session-")) && (!rdma_cm || l.contains("LISTEN")))
            .find_map(|l| {
                let addr = if rdma_cm {
                    l.split("src-addr ").nth(1)?.split_whitespace().next()?
                } else {
                    l.split_whitespace().nth(3)?
                };
                (!addr.starts_with("127.") && !addr.starts_with("0.0.0.0")).then(|| addr.to_string())
            });
        if let Some(addr) = found {
            return Ok(addr);
        }
        if started.elapsed() > within {
            return Err(format!("no agent listener in `{listing}` after {within:?}:\n{out}").into());
        }
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// The server agent's last "refused a connect" log line.
fn last_refusal_logged(lab: &Labctl) -> Result<String, Failed> {
    Ok(lab
        .run(&[
            "exec",
            "server",
            "--",
            "grep 'refused a connect' /var/log/rdma-agent.log | tail -n 1",
        ])
        .ok()?
        .stdout)
}

/// How a run's server is reached, and so how a stranger tries it; named
/// as the agent names the transport in its refusal log line.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// rdma_cm (the verbs workloads).
    RdmaCm,
    /// bulk-tcp's own TCP socket.
    Tcp,
    /// libfabric's tcp provider (a TCP listener of the agent's too).
    Libfabric,
}

impl Transport {
    /// The transport as the agent's refusal log line names it.
    fn logged_as(self) -> &'static str {
        match self {
            Transport::RdmaCm => "rdma_cm",
            Transport::Tcp => "tcp",
            Transport::Libfabric => "libfabric",
        }
    }
}

fn test_security_a_stranger_connecting_to_a_waiting_server_is_refused_and_the_run_verifies(
    lab: &Labctl,
) -> Result<(), Failed> {
    // The libfabric stranger runs on the client node.
    let stranger_bin = env!("CARGO_BIN_EXE_fabric-stranger");
    lab.run(&["cp", "-q", stranger_bin, "client:/root/fabric-stranger"])
        .ok()?;
    let cases: [(&str, &[&str], Transport); 3] = [
        ("write-read", &[], Transport::RdmaCm),
        ("bulk-tcp", &[], Transport::Tcp),
        ("fabric-write", &["--provider", "tcp;ofi_rxm"], Transport::Libfabric),
    ];
    for (workload, extra, transport) in cases {
        // The client holds off for 8 s, so the server waits; meanwhile a
        // stranger on the client node connects to the server's listener.
        let run = {
            let lab = lab.clone();
            let mut args: Vec<String> = ["run", workload, "--connect-delay", "8", "--json"]
                .iter()
                .map(|a| a.to_string())
                .collect();
            args.extend(extra.iter().map(|a| a.to_string()));
            std::thread::spawn(move || lab.run(&args.iter().map(String::as_str).collect::<Vec<_>>()))
        };
        let found = agent_listener(lab, transport == Transport::RdmaCm, Duration::from_secs(40))?;
        let (ip, port) = found.rsplit_once(':').ok_or("listener without a port")?;
        let stranger = match transport {
            // rdmacm-utils' client: no private data, so no proof.
            Transport::RdmaCm => format!("timeout 20 rdma_client -s {ip} -p {port}; echo exit=$?"),
            // Our CONNECT without a proof, from an endpoint of the same provider.
            Transport::Libfabric => {
                format!("timeout 20 /root/fabric-stranger 'tcp;ofi_rxm' 10.77.0.2 {found} 3; echo exit=$?")
            }
            Transport::Tcp => format!(
                "timeout 20 bash -c 'exec 3<>/dev/tcp/{ip}/{port}; printf \"sixteen bytes!!!\" >&3; cat <&3 | wc -c'; echo exit=$?"
            ),
        };
        let tried = lab.run(&["exec", "client", "--", &stranger]);
        let run = run.join().map_err(|_| "the run's thread panicked")?.ok()?;
        let record = run.json()?;
        check(record["verified"] == true, || {
            format!("{workload}: the run did not verify after the stranger:\n{}", run.stdout)
        })?;
        let refused = record["server"]["facts"]["refused_connects"]
            .as_str()
            .unwrap_or_default();
        // libfabric names the endpoint the stranger's CONNECT claims to be.
        let prefix = if transport == Transport::Libfabric {
            "1 (fi_sockaddr_in://10.77.0.2:"
        } else {
            "1 (10.77.0."
        };
        check(refused.starts_with(prefix), || {
            format!(
                "{workload}: the server's refused_connects is {refused:?}; the stranger ran `{stranger}`:\n{}{}",
                tried.stdout, tried.stderr
            )
        })?;
        match transport {
            // The stranger got no answer and gave up.
            Transport::Libfabric => check(
                tried.stdout.starts_with("no answer: ") && tried.stdout.contains("exit=1"),
                || {
                    format!(
                        "{workload}: the stranger was answered: {}{}",
                        tried.stdout, tried.stderr
                    )
                },
            )?,
            // The stranger was closed on without a byte of answer.
            Transport::Tcp => check(tried.stdout.lines().next() == Some("0"), || {
                format!("{workload}: the stranger read an answer: {}", tried.stdout)
            })?,
            Transport::RdmaCm => {}
        }
        // The agent logged it, with the stranger's address.
        let log = last_refusal_logged(lab)?;
        let stranger_addr = refused.trim_start_matches("1 (").trim_end_matches(')');
        check(
            log.contains(transport.logged_as()) && log.contains(stranger_addr),
            || format!("{workload}: the agent's log does not name the refused {stranger_addr}: {log}"),
        )?;
    }
    Ok(())
}

/// A run's rdma_cm server refuses a stranger's connect while the run runs,
/// as the request arrives, not when the run ends; so does a collective's
/// rank (rank 0, on `server`), whose listener its higher ranks connect to.
fn test_security_a_stranger_connecting_to_a_running_server_is_refused_at_once(lab: &Labctl) -> Result<(), Failed> {
    const RUN_S: u64 = 15;
    let run_s = RUN_S.to_string();
    for workload in ["write-bw", "allreduce"] {
        let collective = workload == "allreduce";
        let run = {
            let (lab, workload, run_s) = (lab.clone(), workload.to_string(), run_s.clone());
            std::thread::spawn(move || lab.run(&["run", &workload, "-D", &run_s, "--json"]))
        };
        let listener = agent_listener(lab, true, Duration::from_secs(40))?;
        let (ip, port) = listener.rsplit_once(':').ok_or("listener without a port")?;
        // The client connects as soon as the server listens; give it time to be running.
        std::thread::sleep(Duration::from_secs(3));
        let stranger = format!(
            "t0=$(date +%s%N); timeout 30 rdma_client -s {ip} -p {port}; echo exit=$?; echo took_ms=$(( ($(date +%s%N) - t0) / 1000000 ))"
        );
        let tried = lab.run(&["exec", "client", "--", &stranger]);
        let run = run.join().map_err(|_| "the run's thread panicked")?.ok()?;
        let record = run.json()?;
        let field = |key: &str| {
            tried
                .stdout
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        let (exit, took_ms) = (field("exit="), field("took_ms="));
        let what = || {
            format!(
                "{workload}: the stranger ran `{stranger}`:\n{}{}",
                tried.stdout, tried.stderr
            )
        };
        // Refused at once: rdma_client gave up on a REJECTED, well before the run's end.
        check(
            exit.is_some_and(|e| e != 0 && e != 124) && took_ms.is_some_and(|ms| ms < 5000),
            || format!("exit {exit:?} after {took_ms:?} ms; {}", what()),
        )?;
        check(record["verified"] == true, || {
            format!("{workload}: the run did not verify after the stranger:\n{}", run.stdout)
        })?;
        let (elapsed, listening_side) = if collective {
            check(record["transport"] == "verbs RC (rdma_cm)", || format!("{record}"))?;
            (record["duration_s"].as_f64().unwrap_or(0.0), &record["ranks"][0])
        } else {
            (record["client"]["elapsed_s"].as_f64().unwrap_or(0.0), &record["server"])
        };
        check(elapsed >= (RUN_S - 1) as f64, || {
            format!(
                "the run lasted {elapsed} s, not its {RUN_S}: the stranger came after its end; {}",
                what()
            )
        })?;
        let refused = listening_side["facts"]["refused_connects"].as_str().unwrap_or_default();
        check(refused.starts_with("1 (10.77.0."), || {
            format!("the listening side's refused_connects is {refused:?}; {}", what())
        })?;
        let log = last_refusal_logged(lab)?;
        check(
            log.contains("while the run was running") || log.contains("connect proof"),
            || format!("{workload}: the agent's log does not say why: {log}"),
        )?;
        eprintln!(
            "  {workload}: the stranger was refused {} ms after it connected, while the run ran",
            took_ms.unwrap_or(0)
        );
    }
    Ok(())
}
