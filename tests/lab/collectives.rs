//! Collectives on the quad lab (`tests/labs/mpi.yaml`, four nodes, one
//! rank each): every collective verifies at three sizes, every fault it
//! takes fails the run naming the rank and the element, a stopped rank and
//! a dead link are each named with what the other ranks wait for, and
//! several ranks share a node. Then the pair workloads with both sides on
//! one node.

use std::time::{Duration, Instant};

use libtest_mimic::{Failed, Trial};

use crate::packages::ensure_up;
use crate::util::{check, Labctl, Run};

/// Every collective of the catalogue, with whether it takes `--root`.
const COLLECTIVES: [(&str, bool); 7] = [
    ("allreduce", false),
    ("allgather", false),
    ("reduce-scatter", false),
    ("reduce", true),
    ("alltoall", false),
    ("broadcast", true),
    ("incast", true),
];

/// nccl-tests' bus-bandwidth factor on `n` ranks (incast: the senders' bytes).
fn bus_factor(collective: &str, n: f64) -> f64 {
    match collective {
        "allreduce" => 2.0 * (n - 1.0) / n,
        "broadcast" | "reduce" => 1.0,
        "incast" => n - 1.0,
        "allgather" | "reduce-scatter" | "alltoall" => (n - 1.0) / n,
        other => panic!("no bus factor for {other}"),
    }
}

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let l = lab.clone();
    let mut trials = vec![crate::timing::trial(
        "test_quad_every_collective_verifies_at_three_sizes_on_four_nodes",
        move || test_every_collective_verifies_at_three_sizes_on_four_nodes(&l),
    )];
    let l = lab.clone();
    trials.push(crate::timing::trial(
        "test_quad_allreduce_and_alltoall_verify_over_libfabric",
        move || test_allreduce_and_alltoall_verify_over_libfabric(&l),
    ));
    let l = lab.clone();
    trials.push(crate::timing::trial(
        "test_quad_every_fault_of_every_collective_names_the_rank_and_the_element",
        move || test_every_fault_of_every_collective_names_the_rank_and_the_element(&l),
    ));
    let l = lab.clone();
    trials.push(crate::timing::trial(
        "test_quad_traced_collectives_draw_every_rank_and_pair_each_write_with_its_arrival",
        move || {
            crate::trace_collective::test_traced_collectives_draw_every_rank_and_pair_each_write_with_its_arrival(&l)
        },
    ));
    let l = lab.clone();
    trials.push(crate::timing::trial(
        "test_quad_a_stopped_rank_and_a_dead_link_are_named_within_the_timeout",
        move || test_a_stopped_rank_and_a_dead_link_are_named_within_the_timeout(&l),
    ));
    let l = lab.clone();
    trials.push(crate::timing::trial(
        "test_quad_two_ranks_per_node_and_bad_rank_choices",
        move || test_two_ranks_per_node_and_bad_rank_choices(&l),
    ));
    let l = lab.clone();
    trials.push(crate::timing::trial(
        "test_quad_pair_workloads_run_with_both_sides_on_one_node",
        move || test_pair_workloads_run_with_both_sides_on_one_node(&l),
    ));
    trials
}

fn test_every_collective_verifies_at_three_sizes_on_four_nodes(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    // Under a page; 1 MiB; and 1001 float32 elements, not a multiple of 4 ranks.
    for (collective, rooted) in COLLECTIVES {
        for size in ["2048", "1MiB", "4004"] {
            let started = Instant::now();
            let mut args = vec!["run", collective, "-s", size, "-n", "2", "--warmup", "1", "--json"];
            if rooted {
                args.extend(["--root", "n3"]);
            }
            let record = lab.run(&args).ok()?.json()?;
            let point = &record["points"][0];
            let (time_us, algbw, busbw) = (
                point["time_us"].as_f64().unwrap_or(0.0),
                point["algbw_gb_s"].as_f64().unwrap_or(0.0),
                point["busbw_gb_s"].as_f64().unwrap_or(0.0),
            );
            let what = format!("{collective} {size}: {record}");
            check(record["verified"] == true && record["world"] == 4, || what.clone())?;
            check(
                point["wrong"] == 0 && point["checked"].as_u64().unwrap_or(0) > 0,
                || what.clone(),
            )?;
            check(point["iterations"] == 2, || what.clone())?;
            let ranks: Vec<f64> = point["rank_time_us"]
                .as_array()
                .map(|a| a.iter().filter_map(|t| t.as_f64()).collect())
                .unwrap_or_default();
            // The operation's time is the slowest rank's.
            check(ranks.len() == 4 && ranks.iter().all(|t| *t > 0.0), || what.clone())?;
            check(ranks.iter().copied().fold(0.0, f64::max) == time_us, || what.clone())?;
            let size_b = point["size"].as_f64().unwrap_or(0.0);
            check((algbw - size_b / (time_us * 1e-6) / 1e9).abs() <= algbw * 1e-9, || {
                what.clone()
            })?;
            check(
                (busbw - algbw * bus_factor(collective, 4.0)).abs() <= busbw * 1e-9,
                || what.clone(),
            )?;
            let nodes: Vec<&str> = record["ranks"]
                .as_array()
                .map(|a| a.iter().filter_map(|r| r["node"].as_str()).collect())
                .unwrap_or_default();
            check(nodes == ["n1", "n2", "n3", "n4"], || what.clone())?;
            if rooted {
                check(record["root"] == 2, || what.clone())?;
            }
            if collective == "incast" {
                let fairness = point["incast"]["jain_fairness"].as_f64().unwrap_or(0.0);
                check(fairness > 0.0 && fairness <= 1.0 + 1e-9, || what.clone())?;
            }
            eprintln!(
                "  {collective:>14} {size:>5}: {:>9.1} us, busbw {busbw:.5} GB/s ({:.1} s)",
                time_us,
                started.elapsed().as_secs_f64()
            );
        }
    }
    // The table and the CSV say the same as the record.
    let table = lab.run(&["run", "allreduce", "-s", "4KiB", "-n", "1"]).ok()?;
    check(
        table.stdout.contains("BUSBW (GB/s)") && table.stdout.contains("verified: all 4 ranks verified"),
        || table.stdout.clone(),
    )?;
    let csv = lab.run(&["run", "alltoall", "-s", "4004", "-n", "1", "--csv"]).ok()?;
    let rows: Vec<&str> = csv.stdout.lines().collect();
    check(
        rows.len() == 2
            && rows[0].starts_with("collective,world,size,count")
            && rows[1].starts_with("alltoall,4,4000,1000,"),
        || csv.stdout.clone(),
    )?;
    // report list and show read the saved records back.
    let list = lab.run(&["report", "list"]).ok()?;
    check(
        list.stdout.contains("collective") && list.stdout.contains("alltoall"),
        || list.stdout.clone(),
    )?;
    Ok(())
}

/// The libfabric providers a collective runs over on an rxe lab, with the
/// sizes tried: RDM over the kernel's TCP at three sizes, and RDM over the
/// verbs device (rxd's own reliability over UD: about 8 s per 1 MiB
/// allreduce on four emulated nodes) at the two small ones.
const PROVIDERS: [(&str, &[&str]); 2] = [
    ("tcp;ofi_rxm", &["2048", "1MiB", "4004"]),
    ("verbs;ofi_rxd", &["2048", "4004"]),
];

fn test_allreduce_and_alltoall_verify_over_libfabric(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    for (provider, sizes) in PROVIDERS {
        for collective in ["allreduce", "alltoall"] {
            for &size in sizes {
                let started = Instant::now();
                let args = [
                    "run",
                    collective,
                    "-s",
                    size,
                    "-n",
                    "2",
                    "--warmup",
                    "1",
                    "--provider",
                    provider,
                    "--json",
                ];
                let record = lab.run(&args).ok()?.json()?;
                let point = &record["points"][0];
                let what = format!("{collective} {size} over {provider}: {record}");
                check(
                    record["verified"] == true
                        && record["world"] == 4
                        && record["transport"] == format!("libfabric {provider}").as_str(),
                    || what.clone(),
                )?;
                check(
                    point["wrong"] == 0 && point["checked"].as_u64().unwrap_or(0) > 0 && point["iterations"] == 2,
                    || what.clone(),
                )?;
                let providers: Vec<&str> = record["ranks"]
                    .as_array()
                    .map(|a| a.iter().filter_map(|r| r["facts"]["provider"].as_str()).collect())
                    .unwrap_or_default();
                check(providers == [provider; 4], || what.clone())?;
                let busbw = point["busbw_gb_s"].as_f64().unwrap_or(0.0);
                check(busbw > 0.0, || what.clone())?;
                eprintln!(
                    "  {collective:>9} {size:>5} over {provider:<13}: {:>9.1} us, busbw {busbw:.5} GB/s ({:.1} s)",
                    point["time_us"].as_f64().unwrap_or(0.0),
                    started.elapsed().as_secs_f64()
                );
            }
        }
        // A fault is caught over libfabric as over verbs.
        let out = fault_run(lab, "allreduce", "skip", &["--provider", provider]);
        let what = format!(
            "skip over {provider}: exit {}\n{}\n{}",
            out.code, out.stdout, out.stderr
        );
        check(out.code == 1, || what.clone())?;
        check(
            out.stdout.lines().any(|l| {
                l.starts_with("NOT VERIFIED: rank ")
                    && l.contains(" elements wrong; first: operation 1")
                    && l.ends_with("found NaN")
            }),
            || what.clone(),
        )?;
    }
    Ok(())
}

/// One operation of `collective` at 4004 B (not a multiple of the world
/// size), no warm-up, with `fault` injected; `extra` flags appended.
fn fault_run(lab: &Labctl, collective: &str, fault: &str, extra: &[&str]) -> Run {
    let mut args = vec![
        "run",
        collective,
        "-s",
        "4004",
        "-n",
        "1",
        "--warmup",
        "0",
        "--inject-fault",
        fault,
    ];
    args.extend_from_slice(extra);
    lab.run(&args)
}

fn test_every_fault_of_every_collective_names_the_rank_and_the_element(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    for (collective, _) in COLLECTIVES {
        for fault in ["skip", "corrupt"] {
            let out = fault_run(lab, collective, fault, &[]);
            let what = format!(
                "{collective} --inject-fault {fault}: exit {}\n{}\n{}",
                out.code, out.stdout, out.stderr
            );
            check(out.code == 1, || what.clone())?;
            let verdict = out
                .stdout
                .lines()
                .find(|l| l.starts_with("NOT VERIFIED: rank "))
                .unwrap_or("");
            check(
                verdict.contains(" elements wrong; first: operation 1 of size ")
                    && verdict.contains(", element ")
                    && verdict.contains(": expected ")
                    && verdict.contains(", found "),
                || what.clone(),
            )?;
            // A skipped write leaves the poison (NaN) where its data belonged.
            if fault == "skip" {
                check(verdict.ends_with("found NaN"), || what.clone())?;
            }
            check(out.stdout.contains(&format!("fault injected: {fault}")), || {
                what.clone()
            })?;
        }
    }
    Ok(())
}

/// labctl with `args`, its output piped, not waited for.
fn spawn_piped(lab: &Labctl, args: &[&str]) -> std::io::Result<std::process::Child> {
    lab.command()
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
}

/// A collective started in the background, once each of its `ranks` has
/// said it is connected, with the thread that collects its stderr. The
/// faults below are for a running collective, and the ranks' connects can
/// take seconds: rdma_cm resends a lost connect request only after about
/// 4.8 s.
struct Connected {
    child: std::process::Child,
    stderr: std::thread::JoinHandle<String>,
}

fn start_connected(lab: &Labctl, args: &[&str], ranks: usize) -> Result<Connected, Failed> {
    use std::io::BufRead;
    const WITHIN: Duration = Duration::from_secs(40);
    let mut child = spawn_piped(lab, args)?;
    let stderr = child.stderr.take().ok_or("the run has no stderr")?;
    let (all_connected, connected) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let (mut text, mut seen) = (String::new(), 0);
        for line in std::io::BufReader::new(stderr).lines().map_while(Result::ok) {
            if line.contains("connected to the other ranks") {
                seen += 1;
                if seen == ranks {
                    let _ = all_connected.send(());
                }
            }
            text.push_str(&line);
            text.push('\n');
        }
        text
    });
    if connected.recv_timeout(WITHIN).is_err() {
        let _ = child.kill();
        let text = reader.join().unwrap_or_default();
        return Err(format!(
            "`labctl {}`: the {ranks} ranks did not all connect within {WITHIN:?}:\n{text}",
            args.join(" ")
        )
        .into());
    }
    Ok(Connected { child, stderr: reader })
}

impl Connected {
    /// Waits for the run's end: its exit status and stderr.
    fn finish(self) -> Result<(std::process::ExitStatus, String), Failed> {
        let status = self.child.wait_with_output()?.status;
        Ok((status, self.stderr.join().map_err(|_| "the stderr reader panicked")?))
    }
}

fn test_a_stopped_rank_and_a_dead_link_are_named_within_the_timeout(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    // SIGSTOP one rank's agent mid-run: the others name what they wait for,
    // and the stopped one is named as not answering.
    let long = ["run", "allreduce", "-s", "64KiB", "-n", "100000", "--timeout", "15"];
    let started = Instant::now();
    let running = start_connected(lab, &long, 4)?;
    std::thread::sleep(Duration::from_secs(3));
    lab.run(&["exec", "n2", "--", "pkill -STOP -x rdma-agent"]).ok()?;
    let (status, stderr) = running.finish()?;
    let took = started.elapsed();
    lab.run(&["exec", "n2", "--", "pkill -CONT -x rdma-agent"]).ok()?;
    let what = format!("stopped rank, after {took:?}:\n{stderr}");
    check(status.code() == Some(1), || what.clone())?;
    check(stderr.contains("the allreduce on 4 ranks failed:"), || what.clone())?;
    check(stderr.contains("rank 1 (node `n2`): no answer from its agent"), || {
        what.clone()
    })?;
    // Rank 2 is rank 1's right neighbour: it waits for a chunk from rank 1 (or, between
    // operations, for rank 0's release, which waits for rank 1).
    check(
        stderr
            .contains("rank 2 (node `n3`): DeadlineExceeded: timed out after 15s waiting for size 65536 B, operation "),
        || what.clone(),
    )?;
    check(stderr.contains(" s)"), || what.clone())?;
    // The run's timeout, the controller's margin and the abort's grace, no more.
    check(took < Duration::from_secs(15 + 15 + 5 + 10), || what.clone())?;

    // 100 % loss on n3's data link: the writes across it run out of retries,
    // and the failure names the link.
    let started = Instant::now();
    let running = start_connected(lab, &long, 4)?;
    std::thread::sleep(Duration::from_secs(3));
    let impaired = lab.run(&["impair", "n3", "--loss", "100%"]);
    let (status, stderr) = running.finish()?;
    let took = started.elapsed();
    lab.run(&["impair", "n3", "--clear"]).ok()?;
    impaired.ok()?;
    let what = format!("lost link, after {took:?}:\n{stderr}");
    check(status.code() == Some(1), || what.clone())?;
    check(stderr.contains("IBV_WC_RETRY_EXC_ERR"), || what.clone())?;
    check(
        stderr.contains("stopped delivering") && stderr.contains("`n3` 10.77.0.3"),
        || what.clone(),
    )?;
    check(took < Duration::from_secs(15 + 15 + 5 + 10), || what.clone())?;
    // The lab is healthy again: a short allreduce verifies.
    lab.run(&["run", "allreduce", "-s", "4KiB", "-n", "1"]).ok()?;
    Ok(())
}

fn test_two_ranks_per_node_and_bad_rank_choices(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    let record = lab
        .run(&[
            "run",
            "allreduce",
            "--nodes",
            "n1,n2",
            "--ranks-per-node",
            "2",
            "-s",
            "4004",
            "-n",
            "2",
            "--json",
        ])
        .ok()?
        .json()?;
    let nodes: Vec<&str> = record["ranks"]
        .as_array()
        .map(|a| a.iter().filter_map(|r| r["node"].as_str()).collect())
        .unwrap_or_default();
    check(record["verified"] == true && nodes == ["n1", "n1", "n2", "n2"], || {
        record.to_string()
    })?;
    // Bad choices are bad input (exit 2), told before anything runs.
    for (args, says) in [
        (
            vec!["run", "allreduce", "--nodes", "n1"],
            "a collective needs 2 ..= 16 ranks",
        ),
        (vec!["run", "allreduce", "--nodes", "n1,n9"], "no node `n9` in this lab"),
        (
            vec!["run", "broadcast", "--nodes", "n1,n2", "--root", "n4"],
            "--root n4: not one of the run's nodes",
        ),
        (
            vec!["run", "allreduce", "--root", "n1"],
            "--root applies to reduce, broadcast, incast",
        ),
        (
            vec!["run", "allreduce", "--server", "n1"],
            "--server and --client are for pair workloads",
        ),
        (vec!["run", "write-read", "--nodes", "n1,n2"], "--nodes applies to"),
        (vec!["run", "alltoall", "-s", "8"], "at least 16 B for 4 ranks"),
    ] {
        let out = lab.run(&args);
        check(out.code == 2 && out.stderr.contains(says), || {
            format!("{args:?}: exit {}, wanted {says:?}\n{}", out.code, out.stderr)
        })?;
    }
    Ok(())
}

fn test_pair_workloads_run_with_both_sides_on_one_node(lab: &Labctl) -> Result<(), Failed> {
    ensure_up(lab)?;
    // The tutorial's Lab A: one host, two QPs, no second machine.
    for (workload, extra) in [
        ("write-read", vec![]),
        ("write-read", vec!["--cm", "oob"]),
        ("write-bw", vec![]),
        ("send-lat", vec![]),
        ("fabric-write", vec![]),
        ("bulk-tcp", vec![]),
    ] {
        let mut args = vec!["run", workload, "--server", "n4", "--client", "n4", "--json"];
        args.extend(extra.iter());
        let record = lab.run(&args).ok()?.json()?;
        check(
            record["verified"] == true && record["server"]["node"] == "n4" && record["client"]["node"] == "n4",
            || format!("{args:?}: {record}"),
        )?;
    }
    Ok(())
}
