//! `labctl run` on the real lab: every workload moves bytes over rxe and
//! verifies them, in both connection modes where they apply; the negative
//! cases fail fast with the right error and leave the agents usable.

use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let mut trials = Vec::new();
    for workload in ["write-read", "write-imm", "send-recv", "read", "atomic"] {
        for cm in ["rdma-cm", "oob"] {
            let lab = lab.clone();
            let name = format!(
                "test_{}_verifies_over_{}",
                workload.replace('-', "_"),
                cm.replace('-', "_")
            );
            trials.push(crate::timing::trial(name, move || basic_workload(&lab, workload, cm)));
        }
    }
    let t = |name: &str, f: fn(&Labctl) -> Result<(), Failed>| {
        let lab = lab.clone();
        crate::timing::trial(name, move || f(&lab))
    };
    trials.extend([
        t(
            "test_bw_family_reports_bandwidth_and_verifies",
            test_bw_family_reports_bandwidth_and_verifies,
        ),
        t(
            "test_lat_family_reports_latency_percentiles",
            test_lat_family_reports_latency_percentiles,
        ),
        t(
            "test_size_sweep_reports_every_power_of_two",
            test_size_sweep_reports_every_power_of_two,
        ),
        t(
            "test_send_recv_ping_pong_with_completion_events",
            test_send_recv_ping_pong_with_completion_events,
        ),
        t(
            "test_several_qps_share_a_bw_run_in_both_cm_modes",
            test_several_qps_share_a_bw_run_in_both_cm_modes,
        ),
        t(
            "test_run_is_saved_with_params_and_node_info",
            test_run_is_saved_with_params_and_node_info,
        ),
        t(
            "test_wrong_rkey_fails_with_remote_access_error",
            test_wrong_rkey_fails_with_remote_access_error,
        ),
        t(
            "test_size_beyond_the_limit_is_invalid_argument",
            test_size_beyond_the_limit_is_invalid_argument,
        ),
        t(
            "test_client_agent_killed_mid_run_is_reported",
            test_client_agent_killed_mid_run_is_reported,
        ),
        t(
            "test_fabric_write_verifies_over_tcp_rxm_on_the_data_nic",
            test_fabric_write_verifies_over_tcp_rxm_on_the_data_nic,
        ),
        t(
            "test_fabric_write_verifies_over_rxe_with_verbs_rxd",
            test_fabric_write_verifies_over_rxe_with_verbs_rxd,
        ),
        t(
            "test_fabric_write_verifies_over_rxe_with_verbs_rxm",
            test_fabric_write_verifies_over_rxe_with_verbs_rxm,
        ),
        t(
            "test_fabric_bw_and_lat_over_rxe_with_verbs_rxd",
            test_fabric_bw_and_lat_over_rxe_with_verbs_rxd,
        ),
        t(
            "test_fabric_bw_and_lat_over_tcp_rxm_on_the_data_nic",
            test_fabric_bw_and_lat_over_tcp_rxm_on_the_data_nic,
        ),
        t(
            "test_fabric_provider_not_present_lists_the_available_ones",
            test_fabric_provider_not_present_lists_the_available_ones,
        ),
        t(
            "test_fabric_lat_client_agent_killed_mid_run_is_reported",
            test_fabric_lat_client_agent_killed_mid_run_is_reported,
        ),
        t(
            "test_fabric_bench_pairs_fabric_lat_with_fi_pingpong",
            test_fabric_bench_pairs_fabric_lat_with_fi_pingpong,
        ),
    ]);
    trials
}

/// Runs `labctl run ARGS --json` and returns the record.
fn run_json(lab: &Labctl, args: &[&str]) -> Result<Value, Failed> {
    let mut full = vec!["run"];
    full.extend_from_slice(args);
    full.push("--json");
    let run = lab.run(&full);
    if run.code != 0 {
        return Err(format!(
            "labctl {} exited {}:\n{}{}",
            full.join(" "),
            run.code,
            run.stdout,
            run.stderr
        )
        .into());
    }
    run.json()
}

fn verified(r: &Value) -> Result<(), Failed> {
    check(r["verified"] == true, || {
        format!(
            "not verified: server {} / client {}",
            r["server"]["verify_detail"], r["client"]["verify_detail"]
        )
    })?;
    check(r["schema"] == 1, || format!("schema: {}", r["schema"]))
}

fn basic_workload(lab: &Labctl, workload: &str, cm: &str) -> Result<(), Failed> {
    let r = run_json(lab, &[workload, "--cm", cm])?;
    verified(&r)?;
    let expected_cm = if cm == "oob" { "oob" } else { "rdma_cm" };
    check(r["params"]["cm"] == expected_cm, || format!("cm {}", r["params"]["cm"]))?;
    match workload {
        "write-read" => {
            // Both sides check: the client reads back, the server its own buffer.
            check(r["client"]["checked"] == true && r["server"]["checked"] == true, || {
                format!("a side did not check: {} / {}", r["client"], r["server"])
            })?;
            check(r["client"]["bytes"].as_u64() >= Some(2 * 4096 * 16), || {
                format!("bytes {}", r["client"]["bytes"])
            })?;
            if cm == "rdma-cm" {
                let facts = &r["client"]["facts"];
                check(
                    facts.as_object().is_some_and(|f| f.keys().any(|k| k.contains("rkey"))),
                    || format!("client never saw the capability blob: {facts}"),
                )?;
            }
        }
        "write-imm" => {
            // Batch ids 0..batches arrive in order, then one more: the
            // zero-length WRITE_WITH_IMM that is a pure notification.
            let imms: Vec<u64> = r["server"]["immediates"]
                .as_array()
                .ok_or("no immediates")?
                .iter()
                .filter_map(Value::as_u64)
                .collect();
            let batches = r["params"]["batches"].as_u64().unwrap_or(0);
            check(imms == (0..=batches).collect::<Vec<_>>(), || {
                format!("immediates {imms:?} for {batches} batches")
            })?;
        }
        "atomic" => {
            check(r["server"]["checked"] == true || r["client"]["checked"] == true, || {
                "nobody checked the word".into()
            })?;
        }
        _ => {}
    }
    Ok(())
}

fn test_bw_family_reports_bandwidth_and_verifies(lab: &Labctl) -> Result<(), Failed> {
    for (workload, extra) in [
        ("write-bw", vec!["-n", "60"]),
        ("read-bw", vec!["-n", "60"]),
        ("send-bw", vec!["-n", "60"]),
        ("atomic-bw", vec!["-n", "100"]),
        ("write-bw", vec!["-n", "60", "--cm", "oob"]),
        ("read-bw", vec!["-n", "60", "--cm", "oob"]),
        ("send-bw", vec!["-n", "60", "--cm", "oob"]),
        ("atomic-bw", vec!["-n", "100", "--cm", "oob"]),
    ] {
        let mut args = vec![workload];
        args.extend(extra);
        let r = run_json(lab, &args)?;
        verified(&r).map_err(|e| format!("{workload}: {}", e.message().unwrap_or_default()))?;
        // Every operation had a slot of its own and was checked through it.
        let (checker, says) = match workload {
            "write-bw" => ("server", "stamped with the last WRITE counted into it"),
            "read-bw" => ("client", "every READ delivered"),
            _ => ("", ""),
        };
        if !checker.is_empty() {
            let detail = r[checker]["verify_detail"].as_str().unwrap_or_default();
            check(detail.contains(says), || {
                format!("{workload}: {checker} says {detail:?}")
            })?;
            let slots = r["client"]["facts"]["slots_per_qp"].as_str().unwrap_or_default();
            check(slots.parse::<u64>().is_ok_and(|n| n > 0), || {
                format!("{workload}: slots_per_qp {slots:?}")
            })?;
        }
        // No --completion: the client chose by its device, and rxe is a
        // software device, so it slept on its completion channel.
        check(
            r["params"]["completion"] == "event" && r["client"]["facts"]["completion"] == "event",
            || {
                format!(
                    "{workload}: completion {} (client used {}), want event on rxe",
                    r["params"]["completion"], r["client"]["facts"]["completion"]
                )
            },
        )?;
        let (avg, peak, window, rate) = (
            r["bw_avg_mib_s"].as_f64().unwrap_or(0.0),
            r["bw_peak_mib_s"].as_f64().unwrap_or(0.0),
            r["bw_peak_window_mib_s"].as_f64().unwrap_or(0.0),
            r["msg_rate_mpps"].as_f64().unwrap_or(0.0),
        );
        // perftest's peak: the whole run (first post to last completion,
        // the average's span) is one of the stretches it minimises over.
        check(
            avg > 0.0 && rate > 0.0 && peak >= avg * (1.0 - 1e-9) && window >= avg * (1.0 - 1e-9),
            || format!("{workload}: avg {avg} peak {peak} best window {window} rate {rate}"),
        )?;
        // Units are consistent: Gb/s = MiB/s * 2^20 * 8 / 1e9.
        let gbps = r["bw_avg_gbps"].as_f64().unwrap_or(0.0);
        check(
            (gbps - avg * 1_048_576.0 * 8.0 / 1e9).abs() < 1e-6 + gbps * 1e-3,
            || format!("{workload}: {gbps} Gb/s vs {avg} MiB/s"),
        )?;
    }
    // Asked for, polling is kept on a software device too.
    let r = run_json(lab, &["write-bw", "-n", "60", "--completion", "poll"])?;
    verified(&r)?;
    check(
        r["params"]["completion"] == "poll" && r["client"]["facts"]["completion"] == "poll",
        || {
            format!(
                "--completion poll: {} / {}",
                r["params"]["completion"], r["client"]["facts"]["completion"]
            )
        },
    )?;
    Ok(())
}

/// `--qps N`: N connected QPs on each side (their QPNs in the facts), every
/// QP running `-n` operations (perftest's `-q`), and the bytes still verified.
fn test_several_qps_share_a_bw_run_in_both_cm_modes(lab: &Labctl) -> Result<(), Failed> {
    for cm in ["rdma-cm", "oob"] {
        let cases = [
            ("write-bw", 4u64, 50u64),
            ("read-bw", 3, 30),
            ("atomic-bw", 2, 60),
            ("send-bw", 3, 40),
        ];
        for (workload, qps, n) in cases {
            let (qps_arg, n_arg) = (qps.to_string(), n.to_string());
            let args = [workload, "--qps", &qps_arg, "-n", &n_arg, "--size", "8192", "--cm", cm];
            let r = run_json(lab, &args)?;
            let what = format!("{workload} --qps {qps} --cm {cm}");
            verified(&r).map_err(|e| format!("{what}: {}", e.message().unwrap_or_default()))?;
            check(r["params"]["num_qps"] == qps, || {
                format!("{what}: params {}", r["params"])
            })?;
            for side in ["server", "client"] {
                let qpns: Vec<&str> = r[side]["facts"]["qpns"]
                    .as_str()
                    .unwrap_or_default()
                    .split(',')
                    .collect();
                let distinct: std::collections::BTreeSet<_> = qpns.iter().filter(|q| !q.is_empty()).collect();
                check(distinct.len() as u64 == qps, || format!("{what}: {side} QPNs {qpns:?}"))?;
            }
            check(r["client"]["ops"].as_u64() == Some(qps * n), || {
                format!("{what}: client ops {} (want {qps} x {n})", r["client"]["ops"])
            })?;
            if workload == "send-bw" {
                // Every QP's messages were received (on that QP's own receives) and checked.
                check(r["server"]["ops"].as_u64() == Some(qps * n), || {
                    format!("{what}: server received {} (want {qps} x {n})", r["server"]["ops"])
                })?;
            }
            if workload == "atomic-bw" {
                // Every QP's fetch-and-adds landed on the one remote word.
                check(r["server"]["atomic_final"].as_u64() == Some(qps * n), || {
                    format!("{what}: remote word {}", r["server"]["atomic_final"])
                })?;
            }
        }
    }
    // Workloads with one QP by nature refuse more, before anything runs; so
    // do the latency ones (perftest's latency tests refuse -q too). labctl
    // refuses from the catalogue (bad input, exit 2), naming the workloads
    // that take several QPs.
    for workload in ["send-recv", "write-lat"] {
        let run = lab.run(&["run", workload, "--qps", "2"]);
        check(
            run.code == 2
                && run.stderr.contains("--qps applies to")
                && run.stderr.contains("write-bw")
                && run.stderr.contains(&format!("not to {workload}")),
            || format!("{workload} --qps 2: exit {} {}", run.code, run.stderr),
        )?;
    }
    Ok(())
}

fn test_lat_family_reports_latency_percentiles(lab: &Labctl) -> Result<(), Failed> {
    let workloads = ["write-lat", "read-lat", "send-lat", "atomic-lat"];
    for (workload, cm) in workloads.iter().flat_map(|w| [(*w, "rdma-cm"), (*w, "oob")]) {
        let r = run_json(lab, &[workload, "-n", "40", "--cm", cm])?;
        verified(&r)?;
        // No --completion: the latency client polls (its wait is the figure);
        // send-lat's server polls too, its echo being inside each round trip
        // (as ib_send_lat's), write-lat's polls its buffer as ib_write_lat's
        // does, and on rxe, a software device, the one-sided servers sleep.
        let server_wants = if matches!(workload, "write-lat" | "send-lat") {
            "poll"
        } else {
            "event"
        };
        let (client_used, server_used) = (&r["client"]["facts"]["completion"], &r["server"]["facts"]["completion"]);
        check(client_used == "poll" && server_used == server_wants, || {
            format!("{workload} --cm {cm}: client {client_used}, server {server_used}; want poll, {server_wants}")
        })?;
        let l = &r["lat_us"];
        let f = |k: &str| l[k].as_f64().unwrap_or(-1.0);
        check(l["samples"].as_u64() >= Some(40), || {
            format!("{workload}: samples {}", l["samples"])
        })?;
        check(
            f("min") > 0.0
                && f("min") <= f("typical")
                && f("typical") <= f("p99")
                && f("p99") <= f("p999")
                && f("p999") <= f("max"),
            || format!("{workload}: percentiles out of order: {l}"),
        )?;
        // perftest's figures leave out the 2 largest samples; every
        // sample's are beside them, so their maximum is the true one.
        let all = &l["all_samples"];
        let a = |k: &str| all[k].as_f64().unwrap_or(-1.0);
        check(
            a("median") >= f("min") && a("p999") <= a("max") && a("max") >= f("max") && a("avg") > 0.0,
            || format!("{workload}: all_samples missing or inconsistent with the perftest figures: {l}"),
        )?;
    }
    Ok(())
}

fn test_size_sweep_reports_every_power_of_two(lab: &Labctl) -> Result<(), Failed> {
    let r = run_json(lab, &["write-bw", "--all-sizes", "--max-size", "16384", "-n", "20"])?;
    let sizes: Vec<u64> = r["sweep"]
        .as_array()
        .ok_or("no sweep")?
        .iter()
        .filter_map(|p| p["size"].as_u64())
        .collect();
    let want: Vec<u64> = (1..=14).map(|k| 1u64 << k).collect();
    check(sizes == want, || format!("sweep sizes {sizes:?}"))?;
    verified(&r)?;
    // write-lat's sweep: one done message per size carries that size's pings,
    // and the server's verdict wants as many echoes at every size.
    let lat = run_json(lab, &["write-lat", "--all-sizes", "--max-size", "256", "-n", "10"])?;
    verified(&lat)?;
    let points = lat["sweep"].as_array().ok_or("no write-lat sweep")?;
    check(
        points.len() == 8 && points.iter().all(|p| p["iterations"] == 10),
        || format!("write-lat sweep points: {points:?}"),
    )?;
    check(lat["server"]["ops"] == 80, || {
        format!("server echoed {}", lat["server"]["ops"])
    })
}

fn test_send_recv_ping_pong_with_completion_events(lab: &Labctl) -> Result<(), Failed> {
    let r = run_json(
        lab,
        &[
            "send-recv",
            "--ping-pong",
            "--completion",
            "event",
            "-n",
            "10",
            "-s",
            "64",
        ],
    )?;
    verified(&r)?;
    check(
        r["params"]["completion"] == "event"
            && r["client"]["facts"]["completion"] == "event"
            && r["params"]["ping_pong"] == true,
        || format!("params {}", r["params"]),
    )?;
    check(r["lat_us"]["samples"].as_u64() >= Some(10), || {
        format!("lat {}", r["lat_us"])
    })
}

fn test_run_is_saved_with_params_and_node_info(lab: &Labctl) -> Result<(), Failed> {
    let r = run_json(lab, &["read", "-s", "8192", "-n", "2", "--seed", "7"])?;
    let path = r["saved_to"].as_str().ok_or("not saved")?;
    let saved: Value = serde_json::from_slice(&std::fs::read(path)?)?;
    check(
        saved["id"] == r["id"] && saved["params"]["seed"] == 7 && saved["params"]["size"] == 8192,
        || format!("saved record differs: {saved}"),
    )?;
    for side in ["server", "client"] {
        let node = &saved["nodes"][side];
        check(node["kernel"].as_str().is_some_and(|k| k.starts_with("6.")), || {
            format!("{side}: {node}")
        })?;
        check(node["rdma"][0]["state"] == "PORT_ACTIVE", || {
            format!("{side}: {}", node["rdma"])
        })?;
    }
    for key in [
        "started_at",
        "duration_s",
        "cpu",
        "lat_us",
        "bw_avg_gbps",
        "msg_rate_mpps",
    ] {
        check(!saved[key].is_null(), || format!("{key} missing"))?;
    }
    Ok(())
}

fn test_wrong_rkey_fails_with_remote_access_error(lab: &Labctl) -> Result<(), Failed> {
    for cm in ["rdma-cm", "oob"] {
        let started = Instant::now();
        let run = lab.run(&["run", "write-read", "--corrupt-rkey", "--cm", cm, "--timeout", "60"]);
        check(run.code != 0, || {
            format!("{cm}: a corrupted rkey verified?\n{}", run.stdout)
        })?;
        check(run.stderr.contains("IBV_WC_REM_ACCESS_ERR"), || {
            format!("{cm}: message: {}", run.stderr)
        })?;
        check(run.stderr.contains("node `client`"), || {
            format!("{cm}: the failing node is not named: {}", run.stderr)
        })?;
        check(started.elapsed() < Duration::from_secs(45), || {
            format!("{cm}: took {:?}", started.elapsed())
        })?;
    }
    // Neither agent is wedged: the next run works.
    verified(&run_json(lab, &["write-read"])?)
}

fn test_size_beyond_the_limit_is_invalid_argument(lab: &Labctl) -> Result<(), Failed> {
    let run = lab.run(&["run", "write-read", "--size", "17179869184"]);
    check(run.code != 0, || "a 16 GiB buffer was accepted".into())?;
    check(
        run.stderr.contains("InvalidArgument") && run.stderr.contains("size"),
        || format!("message: {}", run.stderr),
    )?;
    let zero = lab.run(&["run", "write-bw", "-n", "0"]);
    check(zero.code != 0 && zero.stderr.contains("InvalidArgument"), || {
        format!("-n 0: {}", zero.stderr)
    })
}

fn test_client_agent_killed_mid_run_is_reported(lab: &Labctl) -> Result<(), Failed> {
    client_agent_killed_mid_run_is_reported(lab, &["write-bw"], &["write-read"])
}

/// Starts a 40 s run of `workload`, kills the client's agent 8 s in, and
/// checks the run fails naming the node well within its timeout, the agent
/// comes back, and `after` then verifies.
fn client_agent_killed_mid_run_is_reported(lab: &Labctl, workload: &[&str], after: &[&str]) -> Result<(), Failed> {
    let started = Instant::now();
    let child = lab
        .command()
        .arg("run")
        .args(workload)
        .args(["-D", "40", "--timeout", "60"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    std::thread::sleep(Duration::from_secs(8));
    lab.run(&["exec", "client", "--", "pkill -9 -x rdma-agent"]).ok()?;
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr);
    check(!out.status.success(), || {
        "the run succeeded although its client agent was killed".into()
    })?;
    check(stderr.contains("node `client`"), || {
        format!("the node is not named: {stderr}")
    })?;
    check(started.elapsed() < Duration::from_secs(90), || {
        format!("reported after {:?}", started.elapsed())
    })?;
    // The supervisor brings the agent back; the lab is usable again.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = lab.run(&["status", "--json"]);
        if s.code == 0 {
            break;
        }
        if Instant::now() > deadline {
            return Err(format!("agent not back: {}", s.stdout).into());
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    verified(&run_json(lab, after)?)
}

/// fabric-write with `provider` (None: the lab's default), checked end to end:
/// the client verified every page, the record names the provider, and the
/// server wrote what the client counted.
fn fabric_write(lab: &Labctl, provider: Option<&str>, expected: &str) -> Result<Value, Failed> {
    let mut args = vec!["fabric-write"];
    if let Some(p) = provider {
        args.extend(["--provider", p]);
    }
    let r = run_json(lab, &args)?;
    verified(&r)?;
    check(r["params"]["provider"] == expected, || {
        format!("params.provider {}", r["params"]["provider"])
    })?;
    check(
        r["client"]["checked"] == true && r["server"]["checked"] == false,
        || format!("checks: client {} / server {}", r["client"], r["server"]),
    )?;
    let (pages, size) = (r["params"]["iterations"].as_u64(), r["params"]["size"].as_u64());
    check(pages == Some(64) && size == Some(65536), || {
        format!("params {}", r["params"])
    })?;
    for side in ["client", "server"] {
        check(r[side]["bytes"].as_u64() == Some(64 * 65536), || {
            format!("{side} bytes {}", r[side]["bytes"])
        })?;
        check(r[side]["facts"]["provider"] == expected, || {
            format!("{side} facts {}", r[side]["facts"])
        })?;
    }
    check(r["bw_avg_mib_s"].as_f64().unwrap_or(0.0) > 0.0, || {
        format!("bandwidth {}", r["bw_avg_mib_s"])
    })?;
    check(
        r["server"]["facts"]["immediate"] == r["client"]["facts"]["immediate"],
        || format!("immediates differ: {} / {}", r["server"]["facts"], r["client"]["facts"]),
    )?;
    Ok(r)
}

fn test_fabric_write_verifies_over_tcp_rxm_on_the_data_nic(lab: &Labctl) -> Result<(), Failed> {
    let r = fabric_write(lab, Some("tcp;ofi_rxm"), "tcp;ofi_rxm")?;
    // Bound to the data NIC: the endpoints' addresses are on the lab link
    // (e2e.yaml keeps the default data_network, 10.77.0.0/24), not the management NIC.
    for side in ["server", "client"] {
        let addr = r[side]["facts"]["fabric_addr"].as_str().unwrap_or_default();
        check(addr.contains("10.77.0."), || {
            format!("{side} fabric address {addr} is not on the data network")
        })?;
    }
    Ok(())
}

fn test_fabric_write_verifies_over_rxe_with_verbs_rxd(lab: &Labctl) -> Result<(), Failed> {
    // The e2e lab's fabric is rxe, whose default provider is verbs;ofi_rxd.
    let r = fabric_write(lab, None, "verbs;ofi_rxd")?;
    let domain = r["client"]["facts"]["domain"].as_str().unwrap_or_default();
    check(domain.contains("rxe"), || {
        format!("domain {domain} is not the rxe device")
    })
}

fn test_fabric_write_verifies_over_rxe_with_verbs_rxm(lab: &Labctl) -> Result<(), Failed> {
    // verbs;ofi_rxm over rxe needs a bounded FI_UNIVERSE_SIZE, which the agent
    // sets on soft RoCE nodes by itself: nothing here asks for it.
    let r = fabric_write(lab, Some("verbs;ofi_rxm"), "verbs;ofi_rxm")?;
    let domain = r["client"]["facts"]["domain"].as_str().unwrap_or_default();
    check(domain.contains("rxe"), || {
        format!("domain {domain} is not the rxe device")
    })
}

/// fabric-bw then fabric-lat over `provider`, checked for the verbs
/// workloads' JSON shape and both verdicts. Small: 32 × 64 KiB, 50 pings.
fn fabric_bw_and_lat(lab: &Labctl, provider: Option<&str>, expected: &str) -> Result<[Value; 2], Failed> {
    let with_provider = |mut args: Vec<&'static str>| {
        let mut owned: Vec<String> = args.drain(..).map(String::from).collect();
        if let Some(p) = provider {
            owned.extend(["--provider".to_string(), p.to_string()]);
        }
        owned
    };
    let bw_args = with_provider(vec!["fabric-bw", "-s", "65536", "-n", "32", "-t", "16"]);
    let bw = run_json(lab, &bw_args.iter().map(String::as_str).collect::<Vec<_>>())?;
    verified(&bw)?;
    check(bw["params"]["provider"] == expected, || {
        format!("params.provider {}", bw["params"]["provider"])
    })?;
    check(
        bw["server"]["checked"] == true && bw["client"]["checked"] == false,
        || format!("fabric-bw checks: server {} / client {}", bw["server"], bw["client"]),
    )?;
    for side in ["client", "server"] {
        check(bw[side]["bytes"].as_u64() == Some(32 * 65536), || {
            format!("fabric-bw {side} bytes {}", bw[side]["bytes"])
        })?;
    }
    let avg = bw["bw_avg_mib_s"].as_f64().unwrap_or(0.0);
    check(
        avg > 0.0
            && bw["bw_peak_mib_s"].as_f64().unwrap_or(0.0) >= avg
            && bw["bw_avg_gbps"].as_f64().unwrap_or(0.0) > 0.0
            && bw["msg_rate_mpps"].as_f64().unwrap_or(0.0) > 0.0,
        || format!("fabric-bw metrics {bw}"),
    )?;
    let lat_args = with_provider(vec!["fabric-lat", "-s", "64", "-n", "50"]);
    let lat = run_json(lab, &lat_args.iter().map(String::as_str).collect::<Vec<_>>())?;
    verified(&lat)?;
    check(
        lat["server"]["checked"] == true && lat["client"]["checked"] == true,
        || format!("fabric-lat checks: server {} / client {}", lat["server"], lat["client"]),
    )?;
    let l = &lat["lat_us"];
    let num = |k: &str| l[k].as_f64().unwrap_or(-1.0);
    check(
        l["samples"].as_u64() == Some(50)
            && num("min") > 0.0
            && num("min") <= num("typical")
            && num("typical") <= num("p99")
            && num("p99") <= num("max")
            && num("avg") > 0.0
            && num("stdev") >= 0.0,
        || format!("fabric-lat lat_us {l}"),
    )?;
    Ok([bw, lat])
}

fn test_fabric_bw_and_lat_over_rxe_with_verbs_rxd(lab: &Labctl) -> Result<(), Failed> {
    let [bw, _] = fabric_bw_and_lat(lab, None, "verbs;ofi_rxd")?;
    let domain = bw["client"]["facts"]["domain"].as_str().unwrap_or_default();
    check(domain.contains("rxe"), || {
        format!("domain {domain} is not the rxe device")
    })
}

fn test_fabric_bw_and_lat_over_tcp_rxm_on_the_data_nic(lab: &Labctl) -> Result<(), Failed> {
    for r in fabric_bw_and_lat(lab, Some("tcp;ofi_rxm"), "tcp;ofi_rxm")? {
        for side in ["server", "client"] {
            let addr = r[side]["facts"]["fabric_addr"].as_str().unwrap_or_default();
            check(addr.contains("10.77.0."), || {
                format!("{side} fabric address {addr} is not on the data network")
            })?;
        }
    }
    Ok(())
}

fn test_fabric_provider_not_present_lists_the_available_ones(lab: &Labctl) -> Result<(), Failed> {
    let run = lab.run(&["run", "fabric-bw", "--provider", "nosuch", "-n", "4"]);
    check(run.code != 0, || "a missing provider was accepted".into())?;
    check(
        run.stderr.contains("nosuch") && run.stderr.contains("tcp") && run.stderr.contains("node `server`"),
        || {
            format!(
                "the error does not name the provider, the node and the available ones: {}",
                run.stderr
            )
        },
    )
}

fn test_fabric_lat_client_agent_killed_mid_run_is_reported(lab: &Labctl) -> Result<(), Failed> {
    // A peer that disappears mid-run ends the run with an error naming it, not a hang.
    client_agent_killed_mid_run_is_reported(
        lab,
        &["fabric-lat", "--provider", "tcp;ofi_rxm"],
        &["fabric-lat", "--provider", "tcp;ofi_rxm", "-n", "20"],
    )
}

fn test_fabric_bench_pairs_fabric_lat_with_fi_pingpong(lab: &Labctl) -> Result<(), Failed> {
    // fi_pingpong and fabric-lat on the same provider, one warm-up round (the
    // default) then two measured rounds in ABBA order; the record has both,
    // their ratio over the measured rounds, and the warm-up named.
    let uptime = || -> Result<f64, Failed> {
        let out = lab.run(&["exec", "client", "--", "cat /proc/uptime"]);
        let first = out.stdout.split_whitespace().next().unwrap_or_default().to_string();
        first
            .parse()
            .map_err(|_| format!("client uptime: {:?}", out.stdout).into())
    };
    let up_before = uptime()?;
    let run = lab.run(&["bench", "--only", "fabric-lat", "--rounds", "2", "-n", "100", "--json"]);
    check(run.code == 0, || {
        format!("labctl bench exited {}:\n{}{}", run.code, run.stdout, run.stderr)
    })?;
    let up_after = uptime()?;
    let r = run.json()?;
    // Each run is placed on the client's clock since boot: the bench read
    // the client's uptime between the two reads here, and its runs started
    // in their order, after that and before the second read.
    let client_up = r["client_uptime_s"].as_f64().unwrap_or(-1.0);
    let mut starts: Vec<(u64, f64)> = ["reference", "ours"]
        .iter()
        .flat_map(|side| r["pairs"][0][side]["samples"].as_array().cloned().unwrap_or_default())
        .map(|s| {
            (
                s["position"].as_u64().unwrap_or(u64::MAX),
                s["at_s"].as_f64().unwrap_or(-1.0),
            )
        })
        .collect();
    starts.sort_by_key(|&(position, _)| position);
    check(
        up_before <= client_up
            && starts.len() == 6
            && starts.windows(2).all(|w| w[0].1 < w[1].1)
            && starts[0].1 >= 0.0
            && client_up + starts[5].1 <= up_after,
        || {
            format!(
                "client uptime {up_before} .. {up_after} s, the bench's {client_up}, runs (position, at_s) {starts:?}"
            )
        },
    )?;
    let pair = &r["pairs"][0];
    check(
        pair["spec"]["tool"] == "fi_pingpong" && pair["spec"]["provider"] == "tcp;ofi_rxm",
        || format!("pair {}", pair["spec"]),
    )?;
    check(r["warmup_rounds"] == 1 && r["order"] == "abba", || {
        format!("warmup_rounds {} order {}", r["warmup_rounds"], r["order"])
    })?;
    // Places in the pair's order: warm-up a b, then A B B A.
    for (side, places) in [("reference", [0, 2, 5]), ("ours", [1, 3, 4])] {
        let samples = pair[side]["samples"].as_array().ok_or("no samples")?;
        let got: Vec<u64> = samples.iter().filter_map(|s| s["position"].as_u64()).collect();
        let warm: Vec<bool> = samples.iter().map(|s| s["warmup"] == true).collect();
        check(
            got == places && warm == [true, false, false] && pair[side]["left_out"]["warmup"] == 1,
            || {
                format!(
                    "{side}: positions {got:?}, warm-ups {warm:?}, left_out {}",
                    pair[side]["left_out"]
                )
            },
        )?;
        check(pair[side]["stats"]["n"].as_u64() == Some(2), || {
            format!("{side} samples {}", pair[side]["samples"])
        })?;
    }
    check(
        r["failures"]["reference_failed"] == 0 && r["failures"]["ours_failed"] == 0,
        || format!("failures {}", r["failures"]),
    )?;
    let (ours, reference) = (
        pair["ours"]["stats"]["median"].as_f64().unwrap_or(0.0),
        pair["reference"]["stats"]["median"].as_f64().unwrap_or(0.0),
    );
    let ratio = pair["ratio"].as_f64().unwrap_or(0.0);
    check(
        ours > 0.0 && reference > 0.0 && (ratio - ours / reference).abs() < 1e-9,
        || format!("medians {ours} / {reference}, ratio {ratio}"),
    )?;
    check(
        pair["reference"]["samples"][0]["perftest"][0]["iterations"].as_u64() == Some(100),
        || {
            format!(
                "fi_pingpong parsed as {}",
                pair["reference"]["samples"][0]["perftest"][0]
            )
        },
    )
}
