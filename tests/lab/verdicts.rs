//! Verdicts check what they claim: every workload that can inject a fault
//! (`labctl run --inject-fault`) runs with it on the real lab, and the run must
//! end not verified, with the side that caught it saying what it saw. The same
//! runs without the fault verify (workloads.rs, patterns.rs), so the verdict
//! is the fault's doing.

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, Labctl};

/// (workload, fault, extra arguments, a word the failing side's detail names).
const CASES: &[(&str, &str, &[&str], &str)] = &[
    ("write-read", "corrupt", &["-n", "3"], "differs"),
    ("read", "corrupt", &["-n", "3"], "differ"),
    ("write-imm", "skip", &[], "immediates"),
    ("write-imm", "corrupt", &[], "batch 0"),
    ("send-recv", "skip", &["-n", "8"], "message"),
    ("send-recv", "corrupt", &["-n", "8"], "message 0"),
    ("atomic", "skip", &["-n", "4"], "fetch-and-add"),
    ("write-bw", "corrupt", &["-n", "200", "--size", "4096"], "server buffer"),
    // The client counts one WRITE more than it posted: with more WRITEs than
    // the 128 slots, every slot was rewritten and only the stamps can tell.
    (
        "write-bw",
        "skip",
        &["-n", "300", "--size", "4096"],
        "WRITE 301 is missing",
    ),
    // A sweep: the server checks the last size's slots, where the fault is.
    (
        "write-bw",
        "skip",
        &["--all-sizes", "--max-size", "8192", "-n", "200"],
        "8192 B WRITEs",
    ),
    ("read-bw", "corrupt", &["-n", "200", "--size", "4096"], "read-bw"),
    // The first READ lands in a spare buffer: its slot, rewritten by READ
    // 129 before the run ends, holds the right bytes afterwards, so only the
    // check of each READ as it completes sees it.
    (
        "read-bw",
        "skip",
        &["-n", "200", "--size", "4096"],
        "READ 1 on QP 0 delivered nothing",
    ),
    ("send-bw", "skip", &["-n", "200", "--size", "1024"], "the client sent"),
    ("send-bw", "corrupt", &["-n", "200", "--size", "1024"], "message"),
    ("atomic-bw", "skip", &["-n", "200"], "fetch-and-add"),
    ("write-lat", "skip", &["-n", "50", "--size", "64"], "the client counted"),
    // A sweep whose first size is one ping short: caught at that size.
    (
        "write-lat",
        "skip",
        &["--all-sizes", "--max-size", "64", "-n", "10"],
        "at 2 B",
    ),
    ("write-lat", "corrupt", &["-n", "50", "--size", "64"], "ping"),
    ("read-lat", "corrupt", &["-n", "50", "--size", "64"], "read-lat"),
    // One slot, rewritten by every READ: only the per-READ check sees the first one missing.
    (
        "read-lat",
        "skip",
        &["-n", "50", "--size", "64"],
        "READ 1 delivered nothing",
    ),
    ("send-lat", "skip", &["-n", "50", "--size", "64"], "the client sent"),
    ("send-lat", "corrupt", &["-n", "50", "--size", "64"], "message"),
    ("atomic-lat", "skip", &["-n", "50"], "fetch-and-add"),
    ("mr-cache", "corrupt", &["-n", "30"], "differs"),
    ("param-server", "corrupt", &["-n", "4"], "weights"),
    (
        "bulk-rdma",
        "corrupt",
        &["--total", "1MiB", "--size", "64KiB"],
        "offset",
    ),
    ("bulk-tcp", "corrupt", &["--total", "1MiB", "--size", "64KiB"], "offset"),
    ("fabric-write", "corrupt", &["-n", "8", "--size", "4096"], "page"),
    // More writes than the 128 slots: every slot rewritten, so only the stamps can tell.
    ("fabric-bw", "skip", &["-n", "300", "--size", "4096"], "sequence number"),
    ("fabric-lat", "corrupt", &["-n", "20", "--size", "64"], "ping"),
    ("inference-ring", "skip", &["--batches", "12"], "batches arrived"),
    ("inference-ring", "corrupt", &["--batches", "12"], "slot"),
];

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let mut trials: Vec<Trial> = CASES
        .iter()
        .map(|&(workload, fault, extra, needle)| {
            let lab = lab.clone();
            let sweep = if extra.contains(&"--all-sizes") {
                "_in_a_sweep"
            } else {
                ""
            };
            let name = format!("test_{}_verdict_catches_{fault}{sweep}", workload.replace('-', "_"));
            crate::timing::trial(name, move || caught(&lab, workload, fault, extra, needle))
        })
        .collect();
    let lab = lab.clone();
    trials.push(crate::timing::trial(
        "test_verdict_refuses_a_fault_the_workload_cannot_detect",
        move || test_verdict_refuses_a_fault_the_workload_cannot_detect(&lab),
    ));
    trials
}

fn caught(lab: &Labctl, workload: &str, fault: &str, extra: &[&str], needle: &str) -> Result<(), Failed> {
    let mut args = vec!["run", workload, "--inject-fault", fault, "--json", "--timeout", "60"];
    args.extend_from_slice(extra);
    let run = lab.run(&args);
    // Exit 1 with a record: the run completed and was judged (an error prints no record).
    let record: Value = serde_json::from_str(&run.stdout).map_err(|e| {
        format!(
            "no run record ({e}); exit {}\nstdout:\n{}\nstderr:\n{}",
            run.code, run.stdout, run.stderr
        )
    })?;
    check(run.code == 1 && record["verified"] == false, || {
        format!(
            "exit {}, verified {}: server {} / client {}",
            run.code, record["verified"], record["server"]["verify_detail"], record["client"]["verify_detail"]
        )
    })?;
    check(record["params"]["fault"] == fault, || {
        format!("params.fault is {}", record["params"]["fault"])
    })?;
    let caught_by: Vec<&Value> = ["server", "client"]
        .iter()
        .map(|side| &record[side])
        .filter(|s| s["checked"] == true && s["verified"] == false)
        .collect();
    check(!caught_by.is_empty(), || {
        format!("no side reports a failed check: {record}")
    })?;
    check(
        caught_by
            .iter()
            .any(|s| s["verify_detail"].as_str().is_some_and(|d| d.contains(needle))),
        || {
            let details: Vec<String> = caught_by.iter().map(|s| s["verify_detail"].to_string()).collect();
            format!("no failing side names {needle:?}: {}", details.join(" / "))
        },
    )?;
    // The side that injected says what it did.
    let noted = ["server", "client"].iter().any(|side| {
        record[side]["facts"]["fault"]
            .as_str()
            .is_some_and(|f| f.starts_with(fault))
    });
    check(noted, || format!("no side records the fault in its facts: {record}"))
}

fn test_verdict_refuses_a_fault_the_workload_cannot_detect(lab: &Labctl) -> Result<(), Failed> {
    // write-read WRITEs the same bytes every iteration: a lost WRITE leaves
    // the server's memory as the next one makes it, nothing to tell apart.
    // labctl refuses it from the catalogue, before anything runs (bad input).
    let run = lab.run(&["run", "write-read", "--inject-fault", "skip"]);
    check(run.code == 2, || {
        format!("write-read took fault skip (exit {}):\n{}", run.code, run.stdout)
    })?;
    check(run.stderr.contains("write-read cannot inject fault skip"), || {
        format!("message: {}", run.stderr)
    })?;
    check(run.stderr.contains("corrupt"), || {
        format!("the message does not say what it can inject: {}", run.stderr)
    })
}
