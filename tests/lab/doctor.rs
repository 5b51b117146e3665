//! `labctl doctor` on the real lab: every check passes on the healthy lab,
//! and each misconfiguration made for real on one node (its data NIC's MTU,
//! its rxe link removed, UDP 4791 dropped by its firewall, its agent started
//! with a low locked-memory limit, its wall clock set 2 s ahead, its data
//! NIC's transmit queue stopped by pausing the lab's switch) is found by the
//! right check, with the evidence and the fix; a run on the broken lab names
//! the same cause; after the repair the lab is healthy again.

use std::time::Instant;

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, wait_for_agent, Labctl, RepairOnDrop};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    vec![
        t(
            "test_doctor_passes_every_check_on_the_healthy_lab",
            test_doctor_passes_every_check_on_the_healthy_lab,
        ),
        t(
            "test_doctor_finds_an_mtu_mismatch_with_the_fix_and_passes_after_the_repair",
            test_doctor_finds_an_mtu_mismatch_with_the_fix_and_passes_after_the_repair,
        ),
        t(
            "test_doctor_finds_a_removed_rxe_link_the_run_names_it_and_up_repairs_it",
            test_doctor_finds_a_removed_rxe_link_the_run_names_it_and_up_repairs_it,
        ),
        t(
            "test_doctor_finds_udp_4791_dropped_by_a_firewall_the_run_names_it_and_passes_after_the_repair",
            test_doctor_finds_udp_4791_dropped_by_a_firewall_the_run_names_it_and_passes_after_the_repair,
        ),
        t(
            "test_doctor_finds_an_agent_memlock_limit_too_low_the_run_names_it_and_passes_after_the_repair",
            test_doctor_finds_an_agent_memlock_limit_too_low_the_run_names_it_and_passes_after_the_repair,
        ),
        t(
            "test_doctor_warns_of_a_node_clock_set_ahead_and_up_sets_it_back",
            test_doctor_warns_of_a_node_clock_set_ahead_and_up_sets_it_back,
        ),
    ]
}

fn test_doctor_warns_of_a_node_clock_set_ahead_and_up_sets_it_back(lab: &Labctl) -> Result<(), Failed> {
    // `up` set both clocks from this machine's: they agree to the estimate's error.
    let (_, healthy) = doctor(lab, &["--no-run"])?;
    let clock = find(&healthy, "pair", "clock").ok_or("no clock check")?;
    check(clock["verdict"] == "ok", || format!("healthy clock: {clock}"))?;
    let (before_ms, before_error_ms) = clock_offset(clock)?;
    // Break it: the client's clock 2 s ahead. A warning, not a failure: RDMA
    // does not care, the timestamps of what runs on the nodes do.
    let guard = RepairOnDrop::new(lab, &["up"]);
    lab.run(&["exec", "client", "--", "date", "-s", "now + 2 seconds"])
        .ok()?;
    let (code, broken) = doctor(lab, &["--no-run"])?;
    let clock = find(&broken, "pair", "clock").ok_or("no clock check")?;
    let (after_ms, after_error_ms) = clock_offset(clock)?;
    // The step is 2 s on top of the offset the clocks had (within the
    // healthy check's bound, not zero), to both readings' error.
    let step_ms = after_ms - before_ms;
    check(
        code == 0
            && clock["verdict"] == "warn"
            && (step_ms - 2000.0).abs() <= before_error_ms + after_error_ms + 20.0
            && clock["fix"].as_str().unwrap_or_default().contains("chrony"),
        || format!("exit {code}, offset {before_ms:.1} ms before the step, clock check: {clock}"),
    )?;
    // Repair: `up` on the lab that is up sets the clocks again.
    drop(guard);
    let (_, repaired) = doctor(lab, &["--no-run"])?;
    let clock = find(&repaired, "pair", "clock").ok_or("no clock check")?;
    check(clock["verdict"] == "ok", || format!("after `up`: {clock}"))
}

/// The client's wall clock against the server's from the pair's clock
/// check, in ms (negative: behind), and the reading's error in ms, from
/// evidence such as "client's wall clock is 1925.2 ms ahead of server's
/// (± 18.0 ms, ...)".
fn clock_offset(clock: &Value) -> Result<(f64, f64), Failed> {
    let evidence = clock["evidence"].as_str().unwrap_or_default();
    let parsed = (|| {
        let rest = evidence.strip_prefix("client's wall clock is ")?;
        let mut words = rest.split_whitespace();
        let ms: f64 = words.next()?.parse().ok()?;
        let sign = match (words.next()?, words.next()?) {
            ("ms", "ahead") => 1.0,
            ("ms", "behind") => -1.0,
            _ => return None,
        };
        let error: f64 = rest.split("(± ").nth(1)?.split_whitespace().next()?.parse().ok()?;
        Some((sign * ms, error))
    })();
    parsed.ok_or_else(|| format!("clock evidence: {evidence}").into())
}

/// The node checks every node of the rxe lab gets, and the pair checks.
const NODE_CHECKS: [&str; 10] = [
    "agent",
    "modules",
    "device",
    "port",
    "mtu",
    "rp_filter",
    "tx_queue",
    "nic_restarts",
    "memlock",
    "libfabric",
];
const PAIR_CHECKS: [&str; 5] = ["reach", "mtu", "udp-4791", "clock", "write-read"];

/// Tests that leave a mark doctor reports for minutes after: they run after
/// every other doctor test.
pub fn late_trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![crate::timing::trial(
        "test_doctor_names_a_data_nic_whose_transmit_queue_stopped",
        move || test_doctor_names_a_data_nic_whose_transmit_queue_stopped(&lab),
    )]
}

fn doctor(lab: &Labctl, extra: &[&str]) -> Result<(i32, Value), Failed> {
    let mut args = vec!["doctor", "--json"];
    args.extend_from_slice(extra);
    let run = lab.run(&args);
    let report: Value = serde_json::from_str(&run.stdout)
        .map_err(|e| format!("doctor --json exited {}: {e}\n{}{}", run.code, run.stdout, run.stderr))?;
    Ok((run.code, report))
}

fn find<'a>(report: &'a Value, scope_node: &str, name: &str) -> Option<&'a Value> {
    report["checks"]
        .as_array()?
        .iter()
        .find(|c| c["check"] == name && (c["node"] == scope_node || (c["scope"] == "pair" && scope_node == "pair")))
}

fn test_doctor_passes_every_check_on_the_healthy_lab(lab: &Labctl) -> Result<(), Failed> {
    let (code, r) = doctor(lab, &[])?;
    // The supervisor may have had to restart a data NIC earlier in the
    // suite (QEMU's virtio-net stall under load): doctor then warns, and
    // must say what the supervisor's log says.
    let log = supervisor_log(lab)?;
    for node in ["server", "client"] {
        check_nic_restarts(&r, node, &log)?;
    }
    let not_ok: Vec<&Value> = r["checks"]
        .as_array()
        .ok_or("no checks")?
        .iter()
        .filter(|c| c["verdict"] != "ok" && !(c["check"] == "nic_restarts" && c["verdict"] == "warn"))
        .collect();
    check(code == 0 && r["schema"] == 1 && not_ok.is_empty(), || {
        format!("exit {code}, checks not ok: {not_ok:#?}")
    })?;
    for node in ["server", "client"] {
        for name in NODE_CHECKS {
            let c = find(&r, node, name).ok_or_else(|| format!("{node}: no {name} check in {r}"))?;
            check(!c["evidence"].as_str().unwrap_or_default().is_empty(), || {
                format!("{node} {name}: no evidence")
            })?;
        }
    }
    for name in PAIR_CHECKS {
        let c = find(&r, "pair", name).ok_or_else(|| format!("no pair check {name} in {r}"))?;
        check(c["a"] == "server" && c["b"] == "client", || format!("pair {c}"))?;
    }
    // The pair's run verified its bytes, and the device check names the GID
    // the workloads use (the lab's RoCE v2 GID of the data address).
    let run = find(&r, "pair", "write-read").ok_or("no run")?;
    check(
        run["evidence"].as_str().unwrap_or_default().contains("verified"),
        || format!("write-read: {run}"),
    )?;
    let device = find(&r, "server", "device").ok_or("no device")?;
    check(
        device["evidence"]
            .as_str()
            .unwrap_or_default()
            .contains("RoCE v2 GID index"),
        || format!("device: {device}"),
    )?;
    // The lab's `expect:` (tests/labs/e2e.yaml), each fact met on each node.
    for node in ["server", "client"] {
        for (name, found) in [
            ("expect devices", "found 1 (rxe0)"),
            ("expect link_rate", "found 2.5 Gb/sec (1X SDR) (rxe0 port 1)"),
            ("expect mtu", "found 1024 (rxe0 port 1)"),
        ] {
            let c = find(&r, node, name).ok_or_else(|| format!("{node}: no {name} check in {r}"))?;
            check(
                c["verdict"] == "ok" && c["evidence"].as_str().unwrap_or_default().ends_with(found),
                || format!("{node} {name}: {c}"),
            )?;
        }
    }
    check(r["expectations"].as_array().map(Vec::len) == Some(6), || {
        format!("expectations: {}", r["expectations"])
    })?;
    eprintln!(
        "doctor on the healthy lab: {:.1} s",
        r["took_s"].as_f64().unwrap_or(0.0)
    );
    // The text form: a row per check and the summary line.
    let text = lab.run(&["doctor"]).ok()?;
    check(
        text.stdout
            .lines()
            .any(|l| l.starts_with("server <-> client") && l.contains("write-read"))
            && text.stdout.lines().any(|l| l.starts_with("healthy: ")),
        || format!("text report:\n{}", text.stdout),
    )
}

fn test_doctor_finds_an_mtu_mismatch_with_the_fix_and_passes_after_the_repair(lab: &Labctl) -> Result<(), Failed> {
    // The client's data netdev and its MTU, as doctor reads them.
    let (_, healthy) = doctor(lab, &["--no-run"])?;
    let mtu = find(&healthy, "client", "mtu").ok_or("no client mtu check")?;
    let evidence = mtu["evidence"].as_str().unwrap_or_default();
    // "eth1 MTU 1500, rxe0 port 1 active MTU 1024"
    let words: Vec<&str> = evidence.split_whitespace().collect();
    let (netdev, old) = match words.as_slice() {
        [netdev, "MTU", old, ..] => (netdev.to_string(), old.trim_end_matches(',').to_string()),
        _ => return Err(format!("client mtu evidence: {evidence}").into()),
    };
    // Break it: 1000 bytes leave room for a 512-byte RoCE MTU only.
    let guard = RepairOnDrop::new(
        lab,
        &["exec", "client", "--", "ip", "link", "set", "dev", &netdev, "mtu", &old],
    );
    lab.run(&[
        "exec", "client", "--", "ip", "link", "set", "dev", &netdev, "mtu", "1000",
    ])
    .ok()?;
    let (code, broken) = doctor(lab, &[])?;
    let pair_mtu = find(&broken, "pair", "mtu").ok_or("no pair mtu check")?;
    let fix = pair_mtu["fix"].as_str().unwrap_or_default();
    check(
        code == 1
            && pair_mtu["verdict"] == "fail"
            && pair_mtu["evidence"]
                .as_str()
                .unwrap_or_default()
                .contains(&format!("client: {netdev} MTU 1000"))
            && fix.contains(&format!("`ip link set dev {netdev} mtu {old}` on client")),
        || format!("exit {code}, pair mtu check: {pair_mtu}"),
    )?;
    // The lab expects an MTU of 1024 on every node: the client misses it.
    let expected = find(&broken, "client", "expect mtu").ok_or("no client expect mtu check")?;
    check(
        expected["verdict"] == "fail"
            && expected["evidence"] == "expected 1024, found 512 (rxe0 port 1)"
            && expected["fix"]
                .as_str()
                .unwrap_or_default()
                .contains("ip link set DEV mtu"),
        || format!("client expect mtu: {expected}"),
    )?;
    // The node itself is consistent (its port follows its netdev): the
    // mismatch is between the two ends, and only the pair check says so.
    let client_mtu = find(&broken, "client", "mtu").ok_or("no client mtu check")?;
    check(
        client_mtu["verdict"] == "ok"
            && client_mtu["evidence"]
                .as_str()
                .unwrap_or_default()
                .contains("active MTU 512"),
        || format!("client mtu: {client_mtu}"),
    )?;
    // Repair, and the lab is healthy again, its pair run verified.
    drop(guard);
    let (code, repaired) = doctor(lab, &[])?;
    let run = find(&repaired, "pair", "write-read").ok_or("no run")?;
    check(code == 0 && run["verdict"] == "ok", || {
        format!("after the repair: exit {code}: {repaired}")
    })
}

fn test_doctor_finds_a_removed_rxe_link_the_run_names_it_and_up_repairs_it(lab: &Labctl) -> Result<(), Failed> {
    // `labctl up` gives a node the lab owns its rxe device back.
    let guard = RepairOnDrop::new(lab, &["up"]);
    // The kernel removes an rxe device only once no process holds it open,
    // and librdmacm keeps every device open for the life of a process that
    // used it: the agent, after the rdma_cm runs before this test. So the
    // agent goes first (its supervisor starts it again), and the removal may
    // not hang the suite.
    lab.run(&[
        "exec",
        "client",
        "--",
        "pkill -x rdma-agent; timeout 30 rdma link delete rxe0",
    ])
    .ok()?;
    wait_for_agent(lab, "client", "the restart")?;

    // doctor: the client's device check fails with what it saw and the fix.
    let (code, broken) = doctor(lab, &["--no-run"])?;
    let device = find(&broken, "client", "device").ok_or("no client device check")?;
    check(
        code == 1
            && device["verdict"] == "fail"
            && device["evidence"]
                .as_str()
                .unwrap_or_default()
                .contains("no RDMA device on the node; its data address is")
            && device["fix"]
                .as_str()
                .unwrap_or_default()
                .contains("rdma link add rxe0 type rxe netdev"),
        || format!("exit {code}, client device check: {device}"),
    )?;
    let server_device = find(&broken, "server", "device").ok_or("no server device check")?;
    check(server_device["verdict"] == "ok", || {
        format!("the server's device check: {server_device}")
    })?;

    // A run on the broken lab names the same cause, before any verbs call.
    let run = lab.run(&["run", "write-read"]);
    check(
        run.code == 1
            && run
                .stderr
                .contains("node `client` (client): no RDMA device on the node; its data address is")
            && run.stderr.contains("rdma link add rxe0 type rxe netdev")
            && run.stderr.contains("`labctl doctor`"),
        || format!("run on the broken lab: exit {}: {}", run.code, run.stderr),
    )?;

    // `labctl up` again puts the link back, as the fix says; then the lab
    // is healthy and a run verifies.
    guard.disarm();
    let up = lab.run(&["up"]).ok()?;
    check(
        format!("{}{}", up.stdout, up.stderr).contains("had no rxe device: added rxe0"),
        || format!("up did not say it added the link:\n{}{}", up.stdout, up.stderr),
    )?;
    let (code, repaired) = doctor(lab, &[])?;
    let pair_run = find(&repaired, "pair", "write-read").ok_or("no run")?;
    check(code == 0 && pair_run["verdict"] == "ok", || {
        format!("after the repair: exit {code}: {repaired}")
    })
}

fn test_doctor_finds_udp_4791_dropped_by_a_firewall_the_run_names_it_and_passes_after_the_repair(
    lab: &Labctl,
) -> Result<(), Failed> {
    // Break it: the server's firewall drops RoCE v2's port, and nothing else
    // (ping, SSH and the agents' RPCs go on working).
    let rule = "INPUT -p udp -m udp --dport 4791 -j DROP";
    lab.run(&["exec", "server", "--", &format!("iptables -I {rule}")])
        .ok()?;
    let guard = RepairOnDrop::new(lab, &["exec", "server", "--", &format!("iptables -D {rule}")]);

    // doctor: the pair's udp-4791 check fails the direction into the
    // server, shows the server's rule, and says where to remove it.
    let (code, broken) = doctor(lab, &["--no-run"])?;
    let udp = find(&broken, "pair", "udp-4791").ok_or("no pair udp-4791 check")?;
    let evidence = udp["evidence"].as_str().unwrap_or_default();
    let fix = udp["fix"].as_str().unwrap_or_default();
    check(
        code == 1
            && udp["verdict"] == "fail"
            && evidence.contains("server -> client (10.77.0.2:4791): 16 UDP datagrams sent, client counted them")
            && evidence.contains("client -> server (10.77.0.1:4791): 16 UDP datagrams sent, server counted fewer")
            && evidence.contains("server's firewall: -A INPUT -p udp -m udp --dport 4791 -j DROP")
            && fix.contains("on `server`"),
        || format!("exit {code}, udp-4791 check: {udp:#}"),
    )?;
    let reach = find(&broken, "pair", "reach").ok_or("no reach check")?;
    check(reach["verdict"] == "ok", || format!("reach should still pass: {reach}"))?;

    // A run on the broken lab fails, and its error names the blocked port
    // and the rule, not only the verbs error: with rdma_cm (its connection
    // request is lost: the run waits for its timeout) and with oob (the QPs
    // connect over TCP, then every WRITE goes unacknowledged).
    for (cm, agent_said) in [("rdma-cm", "ConnectResponse"), ("oob", "IBV_WC_RETRY_EXC_ERR")] {
        let started = std::time::Instant::now();
        let run = lab.run(&["run", "write-read", "--cm", cm, "--timeout", "10"]);
        eprintln!(
            "udp 4791 dropped: {cm} run failed in {:.1} s:\n{}",
            started.elapsed().as_secs_f64(),
            run.stderr
        );
        check(
            run.code != 0
                && run.stderr.contains(agent_said)
                && run
                    .stderr
                    .contains("RoCE v2's UDP port 4791 is not delivered: client -> server")
                && run.stderr.contains("-A INPUT -p udp -m udp --dport 4791 -j DROP")
                && run.stderr.contains("`labctl doctor`"),
            || format!("{cm} run on the broken lab: exit {}: {}", run.code, run.stderr),
        )?;
    }
    // doctor with its pair run: the run is not attempted (it could only time
    // out), and says why.
    let (_, broken) = doctor(lab, &[])?;
    let pair_run = find(&broken, "pair", "write-read").ok_or("no write-read check")?;
    check(
        pair_run["verdict"] == "fail"
            && pair_run["evidence"]
                .as_str()
                .unwrap_or_default()
                .starts_with("not run: RoCE v2's UDP port 4791 is not delivered"),
        || format!("write-read on the broken lab: {pair_run}"),
    )?;

    // Repair: the rule goes, and the lab is healthy again, its run verified.
    drop(guard);
    let (code, repaired) = doctor(lab, &[])?;
    let udp = find(&repaired, "pair", "udp-4791").ok_or("no udp-4791 check")?;
    let pair_run = find(&repaired, "pair", "write-read").ok_or("no run")?;
    check(
        code == 0 && udp["verdict"] == "ok" && pair_run["verdict"] == "ok",
        || format!("after the repair: exit {code}: {repaired}"),
    )
}

/// Appended to the server's /etc/lab/agent.env, which the lab image's
/// supervisor sources before it starts the agent: the lines start it
/// instead, with a 64 KiB locked-memory limit and without CAP_IPC_LOCK
/// (setpriv drops it from the bounding set, so the root agent loses it at
/// exec). The healthy file is kept beside it.
const LOW_MEMLOCK: &str = r#"cp /etc/lab/agent.env /etc/lab/agent.env.healthy
cat >>/etc/lab/agent.env <<'EOF'
ulimit -l 64
exec setpriv --bounding-set=-ipc_lock "$bin" --listen "127.0.0.1:${AGENT_PORT}" >>/var/log/rdma-agent.log 2>&1
EOF
pkill -x rdma-agent"#;

fn test_doctor_finds_an_agent_memlock_limit_too_low_the_run_names_it_and_passes_after_the_repair(
    lab: &Labctl,
) -> Result<(), Failed> {
    // Break it: the server's agent restarts bound by a 64 KiB limit.
    let guard = RepairOnDrop::new(
        lab,
        &[
            "exec",
            "server",
            "--",
            "mv /etc/lab/agent.env.healthy /etc/lab/agent.env && pkill -x rdma-agent",
        ],
    );
    lab.run(&["exec", "server", "--", LOW_MEMLOCK]).ok()?;
    wait_for_agent(lab, "server", "its restart with a low memlock limit")?;

    // doctor: the server's memlock check fails with the limit and the fix;
    // the client's passes.
    let (code, broken) = doctor(lab, &["--no-run"])?;
    let server = find(&broken, "server", "memlock").ok_or("no server memlock check")?;
    let client = find(&broken, "client", "memlock").ok_or("no client memlock check")?;
    let evidence = server["evidence"].as_str().unwrap_or_default();
    check(
        code == 1
            && server["verdict"] == "fail"
            && evidence.contains("64 KiB")
            && evidence.contains("lacks CAP_IPC_LOCK")
            && server["fix"]
                .as_str()
                .unwrap_or_default()
                .contains("LimitMEMLOCK=infinity")
            && client["verdict"] == "ok",
        || format!("exit {code}, memlock checks: server {server:#}, client {client:#}"),
    )?;

    // A run whose buffer is past the limit fails, and its error names the
    // agent's limit on the server as well as the verbs call.
    let run = lab.run(&["run", "write-read", "--size", "256KiB", "-n", "2"]);
    eprintln!("memlock 64 KiB: run failed:\n{}", run.stderr);
    check(
        run.code != 0
            && run.stderr.contains("ibv_reg_mr")
            && run.stderr.contains("rdma-agent on `server` may lock at most 64 KiB")
            && run.stderr.contains("LimitMEMLOCK=infinity")
            && run.stderr.contains("`labctl doctor`"),
        || format!("run on the broken lab: exit {}: {}", run.code, run.stderr),
    )?;

    // Repair: the agent starts as before, and the lab is healthy again, its
    // run verified.
    drop(guard);
    wait_for_agent(lab, "server", "its restart as the lab starts it")?;
    let (code, repaired) = doctor(lab, &[])?;
    let server = find(&repaired, "server", "memlock").ok_or("no server memlock check")?;
    let pair_run = find(&repaired, "pair", "write-read").ok_or("no run")?;
    check(
        code == 0 && server["verdict"] == "ok" && pair_run["verdict"] == "ok",
        || format!("after the repair: exit {code}: {repaired}"),
    )
}

/// Sends SIGCONT to a stopped process when dropped, so a failing test
/// never leaves the lab's switch stopped.
struct ContinueOnDrop(String);

impl Drop for ContinueOnDrop {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill").args(["-CONT", &self.0]).status();
    }
}

/// The lab's switch stops (SIGSTOP to its supervisor, which forwards every
/// frame between the VMs): the client's QEMU can write no more frames, its
/// virtio-net stops taking them from the guest, the transmit ring fills and
/// after 5 s the guest kernel logs NETDEV WATCHDOG, as it does when a NIC
/// hangs. doctor names the stopped queue; once the switch runs again the
/// link carries frames again and doctor's reach check says so. The
/// supervisor's watch of the data NICs (QMP) read both and left them alone.
fn test_doctor_names_a_data_nic_whose_transmit_queue_stopped(lab: &Labctl) -> Result<(), Failed> {
    let supervisor = crate::faults::state(lab)?["provider_state"]["supervisor_pid"]
        .as_u64()
        .ok_or("no supervisor_pid in the lab's state.json")?
        .to_string();
    // A neighbour entry for the server, so that the frames below go out
    // instead of waiting on ARP.
    lab.run(&["exec", "client", "--", "ping", "-c", "1", "-W", "5", "10.77.0.1"])
        .ok()?;
    let restarts_before = supervisor_log(lab)?.matches("data NIC stalled").count();
    let stopped = std::process::Command::new("kill")
        .args(["-STOP", &supervisor])
        .status()
        .map_err(|e| format!("kill -STOP: {e}"))?;
    check(stopped.success(), || format!("kill -STOP {supervisor}: {stopped}"))?;
    let guard = ContinueOnDrop(supervisor);
    // Eight UDP senders of 1 400-byte datagrams: more frames than the
    // segment socket's buffer and the 256-slot ring hold together (one
    // socket's send buffer alone would not fill the ring).
    let flood = "for i in 1 2 3 4 5 6 7 8; do \
        (exec 3>/dev/udp/10.77.0.1/9; dd if=/dev/zero bs=1400 count=2000 >&3) >/dev/null 2>&1 & \
        done; \
        for s in $(seq 40); do sleep 1; dmesg | grep -q 'eth1: NETDEV WATCHDOG' && break; done; \
        kill $(jobs -p) 2>/dev/null; \
        dmesg | grep 'NETDEV WATCHDOG'";
    let waited = Instant::now();
    let logged = lab.run(&["exec", "client", "--", "bash", "-c", flood]);
    check(logged.stdout.contains("NETDEV WATCHDOG"), || {
        format!(
            "no transmit timeout after {:.0} s with the switch stopped: {}{}",
            waited.elapsed().as_secs_f64(),
            logged.stdout,
            logged.stderr
        )
    })?;
    eprintln!(
        "transmit queue stopped: the kernel logged it after {:.0} s",
        waited.elapsed().as_secs_f64()
    );
    drop(guard);
    let (code, r) = doctor(lab, &["--no-run"])?;
    let tx = find(&r, "client", "tx_queue").ok_or_else(|| format!("no client tx_queue check in {r}"))?;
    let evidence = tx["evidence"].as_str().unwrap_or_default();
    check(
        code == 1
            && tx["verdict"] == "fail"
            && evidence.starts_with("the kernel timed out eth1's transmit queue 0 (NETDEV WATCHDOG)")
            && evidence.ends_with(" s ago")
            && tx["fix"].as_str().unwrap_or_default().contains("labctl down"),
        || format!("exit {code}, client tx_queue: {tx}"),
    )?;
    // The switch runs again: the frames flow, and the server's queue never stopped.
    let reach = find(&r, "pair", "reach").ok_or("no reach check")?;
    let server = find(&r, "server", "tx_queue").ok_or("no server tx_queue check")?;
    check(reach["verdict"] == "ok" && server["verdict"] == "ok", || {
        format!("after the switch resumed: reach {reach}, server tx_queue {server}")
    })?;
    // The supervisor reads each VM's transmit queue through QMP (it would
    // restart one QEMU stopped taking frames from): it has read both, and
    // the paused switch, which left a frame in flight, was no stall to it.
    let log = supervisor_log(lab)?;
    for node in ["server", "client"] {
        check(
            log.contains(&format!("node {node}: watching its data NIC's transmit queue")),
            || format!("supervisor.log does not watch {node}:\n{log}"),
        )?;
    }
    check(log.matches("data NIC stalled").count() == restarts_before, || {
        format!("the supervisor took the paused switch for a stalled NIC:\n{log}")
    })?;
    // doctor's nic_restarts check says what the supervisor's log says.
    for node in ["server", "client"] {
        check_nic_restarts(&r, node, &log)?;
    }
    Ok(())
}

/// Node `node`'s `nic_restarts` check against the supervisor's log (the
/// provider's record): no restart and ok, or as many as the log lists,
/// the last one's line quoted.
fn check_nic_restarts(r: &Value, node: &str, log: &str) -> Result<(), Failed> {
    let c = find(r, node, "nic_restarts").ok_or_else(|| format!("{node}: no nic_restarts check in {r}"))?;
    let evidence = c["evidence"].as_str().unwrap_or_default();
    let restarts: Vec<&str> = log
        .lines()
        .filter_map(|l| {
            l.split_once(&format!(" supervisor: node {node}: "))
                .map(|(_, said)| said)
        })
        .filter(|said| said.starts_with("data NIC stalled") || said.starts_with("restarting its transmit queue failed"))
        .collect();
    let agrees = match restarts.last() {
        None => c["verdict"] == "ok" && evidence == "no restart of the data NIC from the host since the node started",
        Some(last) => {
            let times = match restarts.len() {
                1 => "once".to_string(),
                n => format!("{n} times"),
            };
            evidence.starts_with(&format!(
                "the host restarted the data NIC {times} since the node started"
            )) && evidence.ends_with(last)
        }
    };
    check(agrees, || format!("{node} nic_restarts: {c}\nsupervisor.log:\n{log}"))
}

fn supervisor_log(lab: &Labctl) -> Result<String, Failed> {
    let path = lab.state_dir("e2e").join("supervisor.log");
    std::fs::read_to_string(&path).map_err(|e| format!("{}: {e}", path.display()).into())
}
