//! `labctl run COLLECTIVE --trace` on the quad lab: one process per rank,
//! and an arrow for every write, from the sender's QP that faces the
//! receiver to the receive it caused there — checked against what both
//! ends recorded (the same immediate, or the same remote CQ data).

use std::collections::BTreeSet;

use libtest_mimic::Failed;
use serde_json::Value;

use crate::packages::ensure_up;
use crate::trace::tempfile_dir;
use crate::util::{check, Labctl};

/// The rank a rank's QP `qp` faces (its QPs face the other ranks in rank order).
fn rank_facing(rank: u64, qp: u64) -> u64 {
    if qp >= rank {
        qp + 1
    } else {
        qp
    }
}

/// A span of `pid` named `name` starting at `ts` (a flow's end points at one).
fn span_at<'a>(events: &'a [Value], pid: &Value, ts: &Value, name: &str) -> Result<&'a Value, Failed> {
    events
        .iter()
        .find(|e| e["ph"] == "X" && e["pid"] == *pid && e["ts"] == *ts && e["name"] == name)
        .ok_or_else(|| format!("no `{name}` of pid {pid} at {ts} us").into())
}

/// One traced run: its collective, size and flags, the write's name, the
/// span its arrival is, and the argument both ends carry.
struct Case {
    collective: &'static str,
    size: &'static str,
    extra: &'static [&'static str],
    write: &'static str,
    arrival: &'static str,
    tag: &'static str,
}

pub fn test_traced_collectives_draw_every_rank_and_pair_each_write_with_its_arrival(
    lab: &Labctl,
) -> Result<(), Failed> {
    ensure_up(lab)?;
    let dir = tempfile_dir();
    // A ring allreduce over verbs (64 KiB: past recursive doubling), and an
    // alltoall over libfabric (every rank writes to every other).
    let cases = [
        Case {
            collective: "allreduce",
            size: "65536",
            extra: &[],
            write: "WRITE_WITH_IMM",
            arrival: "completion RECV_RDMA_WITH_IMM",
            tag: "imm",
        },
        Case {
            collective: "alltoall",
            size: "4096",
            extra: &["--provider", "tcp;ofi_rxm"],
            write: "fi_writemsg",
            arrival: "completion FI_REMOTE_WRITE",
            tag: "cq_data",
        },
    ];
    for Case {
        collective,
        size,
        extra,
        write,
        arrival,
        tag,
    } in cases
    {
        let path = dir.join(format!("{collective}.json"));
        let path_s = path.display().to_string();
        let mut args = vec!["run", collective, "-s", size, "-n", "2", "--warmup", "0", "--json"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--trace", &path_s]);
        let record = lab.run(&args).ok()?.json()?;
        check(record["verified"] == true && record["world"] == 4, || {
            format!("{collective}: {record}")
        })?;
        let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let events = doc["traceEvents"].as_array().cloned().unwrap_or_default();

        // One process per rank, named after its rank and node, each trace whole.
        for rank in 0..4u64 {
            let pid = rank + 1;
            let node = record["ranks"][rank as usize]["node"].as_str().unwrap_or("?");
            let name = events
                .iter()
                .find(|e| e["name"] == "process_name" && e["pid"] == pid)
                .map(|e| e["args"]["name"].clone());
            check(name == Some(Value::from(format!("rank {rank} {node}"))), || {
                format!("{collective}: process {pid} is {name:?}")
            })?;
            let meta = &doc["otherData"]["nodes"][rank as usize];
            check(
                meta["rank"] == rank && meta["dropped"] == 0 && meta["sample_every"] == 1 && meta["failed"].is_null(),
                || format!("{collective}: rank {rank}'s trace: {meta}"),
            )?;
        }

        // Every write that carries an immediate (CQ data) has its arrow.
        let writes = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["name"] == format!("post {write}") && !e["args"][tag].is_null())
            .count();
        let starts: Vec<&Value> = events.iter().filter(|e| e["ph"] == "s" && e["name"] == write).collect();
        check(writes > 0 && starts.len() == writes, || {
            format!("{collective}: {writes} writes, {} arrows", starts.len())
        })?;
        let mut links = BTreeSet::new();
        for s in starts {
            let f = events
                .iter()
                .find(|e| e["ph"] == "f" && e["id"] == s["id"])
                .ok_or_else(|| format!("{collective}: arrow {s} has no end"))?;
            let post = span_at(&events, &s["pid"], &s["ts"], &format!("post {write}"))?;
            let got = span_at(&events, &f["pid"], &f["ts"], arrival)?;
            // The arrow joins a write to the arrival it caused: same tag at both ends.
            check(post["args"][tag] == got["args"][tag], || {
                format!("{collective}: {tag} posted {post} arrived as {got}")
            })?;
            let (from, to) = (s["pid"].as_u64().unwrap_or(0) - 1, f["pid"].as_u64().unwrap_or(0) - 1);
            check(from != to, || {
                format!("{collective}: an arrow from rank {from} to itself")
            })?;
            if write == "WRITE_WITH_IMM" {
                // Verbs: the sender's QP faces the receiver, the receiver's faces the sender.
                let (qp_from, qp_to) = (s["tid"].as_u64().unwrap_or(0) - 1, f["tid"].as_u64().unwrap_or(0) - 1);
                check(
                    rank_facing(from, qp_from) == to && rank_facing(to, qp_to) == from,
                    || format!("{collective}: rank {from} QP {qp_from} -> rank {to} QP {qp_to}"),
                )?;
            }
            links.insert((from, to));
        }
        // The data's paths: ring neighbours for the allreduce, every pair for the alltoall.
        let expected: Vec<(u64, u64)> = match collective {
            "allreduce" => (0..4).map(|r| (r, (r + 1) % 4)).collect(),
            _ => (0..4)
                .flat_map(|a| (0..4).filter(move |b| *b != a).map(move |b| (a, b)))
                .collect(),
        };
        check(expected.iter().all(|l| links.contains(l)), || {
            format!("{collective}: links drawn {links:?}, expected at least {expected:?}")
        })?;
        eprintln!(
            "  {collective} over {}: {writes} writes, each with its arrow; links {links:?}",
            record["transport"]
        );
    }

    // `trace show` draws pairs; a collective's trace is sent to Perfetto.
    let path_s = dir.join("allreduce.json").display().to_string();
    let shown = lab.run(&["trace", "show", &path_s]);
    check(
        shown.code == 2
            && shown.stderr.contains("a collective's trace (4 ranks)")
            && shown.stderr.contains("ui.perfetto.dev"),
        || format!("trace show: exit {}\n{}", shown.code, shown.stderr),
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
