//! `labctl run --trace`: the JSON a real write-read run leaves, read back.

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    let other = lab.clone();
    let fabric = lab.clone();
    let failed = lab.clone();
    vec![
        crate::timing::trial("test_trace_failed_run_keeps_both_sides", move || {
            crate::trace_failed::run(&failed)
        }),
        crate::timing::trial("test_trace_fabric_write_both_nodes", move || {
            crate::trace_fabric::run(&fabric)
        }),
        crate::timing::trial("test_trace_write_read_both_nodes_aligned", move || write_read(&lab)),
        crate::timing::trial("test_trace_more_write_imm_send_recv_atomic_read_oob", move || {
            other_verbs_workloads(&other)
        }),
    ]
}

pub(crate) fn hex(v: &Value) -> u64 {
    u64::from_str_radix(v.as_str().unwrap_or("").trim_start_matches("0x"), 16).unwrap_or(u64::MAX)
}

fn write_read(lab: &Labctl) -> Result<(), Failed> {
    let dir = tempfile_dir();
    let path = dir.join("t.json");
    let path_s = path.display().to_string();
    lab.run(&["run", "write-read", "--trace", &path_s]).ok()?;
    let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
    let events: Vec<&Value> = doc["traceEvents"].as_array().ok_or("no traceEvents")?.iter().collect();
    let x = |pid: u64, cat: &str| -> Vec<&Value> {
        events
            .iter()
            .copied()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == cat)
            .collect()
    };
    let (server, client) = (1, 2);
    // Server: the exposed registration, the accept's blob, the verdict.
    let remote_mr = x(server, "mr")
        .into_iter()
        .find(|e| e["args"]["access"].as_str().unwrap_or("").contains("REMOTE_WRITE"))
        .ok_or("no remote-access registration on the server")?;
    check(x(server, "cm").iter().any(|e| e["name"] == "CONNECT_REQUEST"), || {
        "server: no CONNECT_REQUEST".into()
    })?;
    let sent = x(server, "blob_sent");
    check(sent.len() == 1, || format!("server blob_sent: {sent:?}"))?;
    check(
        x(server, "verify").iter().any(|e| e["args"]["verified"] == "true"),
        || "server: no verify".into(),
    )?;
    // Client: connect, the blob equal to the server's registration, 16 WRITEs and READs completed.
    check(x(client, "cm").iter().any(|e| e["name"] == "CONNECT_RESPONSE"), || {
        "client: no CONNECT_RESPONSE".into()
    })?;
    let got = x(client, "blob_received");
    let got = got.first().ok_or("client: no blob_received")?;
    check(
        hex(&got["args"]["addr"]) == hex(&remote_mr["args"]["addr"])
            && hex(&got["args"]["rkey"]) == hex(&remote_mr["args"]["rkey"]),
        || format!("blob {got} differs from the registration {remote_mr}"),
    )?;
    let posts = x(client, "post");
    let completions = x(client, "completion");
    for op in ["WRITE", "READ"] {
        let n = posts.iter().filter(|e| e["name"] == format!("post {op}")).count();
        let c = completions
            .iter()
            .filter(|e| e["name"] == format!("completion {op}"))
            .count();
        check(n == 16 && c == 16, || {
            format!("client {op}: {n} posts, {c} completions")
        })?;
    }
    for p in posts
        .iter()
        .filter(|e| e["name"] == "post WRITE" || e["name"] == "post READ")
    {
        check(
            p["dur"].as_f64().unwrap_or(-1.0) >= 0.0 && p["args"]["rkey"] == got["args"]["rkey"],
            || format!("post without a completion after it or with another rkey: {p}"),
        )?;
    }
    // Causality across nodes, within both clocks' error bounds.
    let err_us = placement_bound_us(&doc);
    let done_recv = x(server, "completion")
        .into_iter()
        .find(|e| e["name"] == "completion RECV" && e["args"]["imm"] == "0xffffffff");
    let done_recv = done_recv.ok_or("server: no receive of the done message")?;
    let done_post = posts
        .iter()
        .find(|e| e["name"] == "post SEND_WITH_IMM")
        .ok_or("client: no done post")?;
    let (recv_ts, post_ts) = (
        done_recv["ts"].as_f64().unwrap_or(0.0),
        done_post["ts"].as_f64().unwrap_or(0.0),
    );
    check(recv_ts >= post_ts - err_us, || {
        format!("server received at {recv_ts} us before the client posted at {post_ts} us (error {err_us} us)")
    })?;
    let blob_ts = (sent[0]["ts"].as_f64().unwrap_or(0.0), got["ts"].as_f64().unwrap_or(0.0));
    check(blob_ts.1 >= blob_ts.0 - err_us, || {
        format!("blob received {} before sent {}", blob_ts.1, blob_ts.0)
    })?;
    check(
        events
            .iter()
            .any(|e| e["ph"] == "f" && e["name"] == "SEND_WITH_IMM" && e["pid"] == server),
        || "no flow arrow from the done message to the server".into(),
    )?;
    // A path that cannot be written is refused before anything runs.
    let bad = lab.run(&["run", "write-read", "--trace", "/nonexistent-dir/t.json"]);
    check(bad.code != 0 && bad.stderr.contains("nothing was run"), || {
        format!("bad path: {}", bad.stderr)
    })?;
    // A run with more events than the ring: the newest 20 kept per side, the rest counted and said.
    let small = dir.join("small.json");
    let small_s = small.display().to_string();
    let out = lab
        .run(&["run", "write-read", "--trace", &small_s, "--trace-events", "20"])
        .ok()?;
    let doc: Value = serde_json::from_slice(&std::fs::read(&small)?)?;
    let nodes = doc["otherData"]["nodes"].as_array().ok_or("no nodes")?;
    let client = nodes.iter().find(|n| n["role"] == "client").ok_or("no client node")?;
    let dropped = client["dropped"].as_u64().unwrap_or(0);
    check(
        client["events"] == 20 && client["ring_size"] == 20 && dropped > 0,
        || format!("client with a 20-event ring: {client}"),
    )?;
    check(out.stderr.contains(&format!("20 events, {dropped} dropped")), || {
        format!("the run did not say what it dropped: {}", out.stderr)
    })?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// How far apart two nodes' events may be placed wrongly, µs: each node's
/// bound on its events' placement (both clock measurements'), added.
fn placement_bound_us(doc: &Value) -> f64 {
    let nodes = doc["otherData"]["nodes"].as_array().into_iter().flatten();
    nodes.map(|n| n["offset_error_ns"].as_f64().unwrap_or(0.0)).sum::<f64>() / 1000.0
}

pub(crate) fn tempfile_dir() -> std::path::PathBuf {
    let dir = crate::util::bin_dir().join(format!("trace-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}

/// The parsed trace of one run, with the lookups the checks share.
pub(crate) struct Doc {
    doc: Value,
    err_us: f64,
}

pub(crate) const SERVER: u64 = 1;
pub(crate) const CLIENT: u64 = 2;

impl Doc {
    /// Runs `labctl run ARGS --trace` and reads the trace back.
    pub(crate) fn run(lab: &Labctl, dir: &std::path::Path, args: &[&str]) -> Result<Doc, Failed> {
        let path = dir.join(format!("{}.json", args.join("_").replace(['-', '/'], "_")));
        let path_s = path.display().to_string();
        let mut full: Vec<&str> = vec!["run"];
        full.extend_from_slice(args);
        full.extend_from_slice(&["--trace", &path_s]);
        lab.run(&full).ok()?;
        let doc: Value = serde_json::from_slice(&std::fs::read(&path)?)?;
        let err_us = placement_bound_us(&doc);
        Ok(Doc { doc, err_us })
    }

    fn events(&self) -> impl Iterator<Item = &Value> {
        self.doc["traceEvents"].as_array().into_iter().flatten()
    }

    /// The metadata of each node (events, dropped, sample_every, clock).
    pub(crate) fn nodes(&self) -> impl Iterator<Item = &Value> {
        self.doc["otherData"]["nodes"].as_array().into_iter().flatten()
    }

    /// The spans of `pid` in category `cat`.
    pub(crate) fn x(&self, pid: u64, cat: &str) -> Vec<&Value> {
        self.events()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["cat"] == cat)
            .collect()
    }

    /// The spans of `pid` named `name`.
    pub(crate) fn named(&self, pid: u64, name: &str) -> Vec<&Value> {
        self.events()
            .filter(|e| e["ph"] == "X" && e["pid"] == pid && e["name"] == name)
            .collect()
    }

    /// The server's registration that the client may reach.
    fn remote_mr(&self) -> Result<&Value, Failed> {
        self.x(SERVER, "mr")
            .into_iter()
            .find(|e| e["args"]["access"].as_str().unwrap_or("").contains("REMOTE_WRITE"))
            .ok_or_else(|| "no remote-access registration on the server".into())
    }

    /// Flow arrows named `name`, as (start ts, end ts, end pid), each checked causal.
    pub(crate) fn flows(&self, name: &str) -> Result<Vec<(f64, f64, u64)>, Failed> {
        let starts: Vec<&Value> = self.events().filter(|e| e["ph"] == "s" && e["name"] == name).collect();
        let mut out = Vec::new();
        for s in starts {
            let f = self
                .events()
                .find(|e| e["ph"] == "f" && e["id"] == s["id"])
                .ok_or_else(|| format!("flow {s} has no end"))?;
            let (ts_s, ts_f) = (s["ts"].as_f64().unwrap_or(0.0), f["ts"].as_f64().unwrap_or(0.0));
            check(ts_f >= ts_s - self.err_us, || {
                format!(
                    "{name}: the peer saw it at {ts_f} us, before it was posted at {ts_s} us (error {} us)",
                    self.err_us
                )
            })?;
            out.push((ts_s, ts_f, f["pid"].as_u64().unwrap_or(0)));
        }
        Ok(out)
    }
}

/// Every signaled post of `pid` ends at a completion on its side (a span, not a 1 µs mark).
pub(crate) fn signaled_posts_completed(d: &Doc, pid: u64, name: &str) -> Result<usize, Failed> {
    let posts = d.named(pid, name);
    for p in &posts {
        if p["args"]["signaled"] == "true" {
            check(p["args"]["completed_after_us"].as_f64().is_some(), || {
                format!("{name} without its completion: {p}")
            })?;
        }
    }
    Ok(posts.len())
}

/// The client's one-sided or atomic posts target the server's registration.
fn targets_registration(d: &Doc, post: &Value) -> Result<(), Failed> {
    let mr = d.remote_mr()?;
    let (addr, len) = (
        hex(&mr["args"]["addr"]),
        mr["args"]["len"].as_str().unwrap_or("0").parse::<u64>()?,
    );
    let at = hex(&post["args"]["remote_addr"]);
    check(
        post["args"]["rkey"] == mr["args"]["rkey"] && at >= addr && at < addr + len,
        || format!("post {post} does not target the server's registration {mr}"),
    )
}

fn write_imm(d: &Doc) -> Result<(), Failed> {
    let posts = d.named(CLIENT, "post WRITE_WITH_IMM");
    // 4 batches (`--batches 4`) and the zero-length notification.
    check(posts.len() == 5, || format!("client WRITE_WITH_IMM posts: {posts:?}"))?;
    signaled_posts_completed(d, CLIENT, "post WRITE_WITH_IMM")?;
    let arrived: Vec<&Value> = d.named(SERVER, "completion RECV_RDMA_WITH_IMM");
    for p in &posts {
        targets_registration(d, p)?;
        check(arrived.iter().any(|c| c["args"]["imm"] == p["args"]["imm"]), || {
            format!("the server never completed the immediate of {p}; it completed {arrived:?}")
        })?;
    }
    let flows = d.flows("WRITE_WITH_IMM")?;
    check(
        flows.len() == posts.len() && flows.iter().all(|f| f.2 == SERVER),
        || format!("WRITE_WITH_IMM flows: {flows:?}"),
    )
}

fn send_recv(d: &Doc, iterations: usize, size: u64) -> Result<(), Failed> {
    let sends = d.named(CLIENT, "post SEND");
    check(sends.len() == iterations, || {
        format!("client SEND posts: {}", sends.len())
    })?;
    signaled_posts_completed(d, CLIENT, "post SEND")?;
    let recvs = d.named(SERVER, "completion RECV");
    let full = recvs
        .iter()
        .filter(|c| c["args"]["byte_len"].as_str().and_then(|s| s.parse::<u64>().ok()) == Some(size))
        .count();
    check(full == iterations, || {
        format!("server: {full} RECV completions of {size} bytes: {recvs:?}")
    })?;
    // The first receive was posted before the first SEND left the client.
    let first_recv_post = d
        .named(SERVER, "post RECV")
        .iter()
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::INFINITY, f64::min);
    let first_send = sends
        .iter()
        .filter_map(|e| e["ts"].as_f64())
        .fold(f64::INFINITY, f64::min);
    check(first_recv_post <= first_send + d.err_us, || {
        format!("server posted its first RECV at {first_recv_post} us, after the first SEND at {first_send} us")
    })?;
    // Receives are matched to their completions by wr_id (the server re-posts each slot).
    let consumed = d
        .named(SERVER, "post RECV")
        .iter()
        .filter(|e| e["args"]["completed_after_us"].as_f64().is_some())
        .count();
    check(consumed >= iterations, || {
        format!("server: {consumed} RECV posts completed")
    })?;
    let flows = d.flows("SEND")?;
    check(flows.len() == iterations && flows.iter().all(|f| f.2 == SERVER), || {
        format!("SEND flows: {flows:?}")
    })
}

fn atomic(d: &Doc) -> Result<(), Failed> {
    for (post, done) in [
        ("post FETCH_ADD", "completion FETCH_ADD"),
        ("post COMPARE_SWAP", "completion COMPARE_SWAP"),
    ] {
        let posts = d.named(CLIENT, post);
        check(!posts.is_empty(), || format!("client: no {post}"))?;
        for p in &posts {
            targets_registration(d, p)?;
        }
        signaled_posts_completed(d, CLIENT, post)?;
        let completions = d.named(CLIENT, done);
        check(
            !completions.is_empty() && completions.iter().all(|c| c["args"]["status"] == "IBV_WC_SUCCESS"),
            || format!("client {done}: {completions:?}"),
        )?;
    }
    Ok(())
}

fn read(d: &Doc) -> Result<(), Failed> {
    let posts = d.named(CLIENT, "post READ");
    check(!posts.is_empty(), || "client: no READ post".into())?;
    for p in &posts {
        targets_registration(d, p)?;
    }
    signaled_posts_completed(d, CLIENT, "post READ")?;
    let completions = d.named(CLIENT, "completion READ");
    check(completions.len() == posts.len(), || {
        format!("client: {} READ posts, {} completions", posts.len(), completions.len())
    })
}

/// oob mode's endpoint exchange is the blob: sent by the server, received by the client, joined by a flow.
fn oob_blob(d: &Doc) -> Result<(), Failed> {
    let mr = d.remote_mr()?;
    let sent = d.x(SERVER, "blob_sent");
    let got = d.x(CLIENT, "blob_received");
    check(sent.len() == 1 && got.len() == 1, || {
        format!("oob blobs: sent {sent:?}, received {got:?}")
    })?;
    check(
        hex(&got[0]["args"]["addr"]) == hex(&mr["args"]["addr"]) && got[0]["args"]["rkey"] == mr["args"]["rkey"],
        || format!("oob blob {} differs from the registration {mr}", got[0]),
    )?;
    let flows = d.flows("capability blob")?;
    check(flows.iter().any(|f| f.2 == CLIENT), || format!("blob flows: {flows:?}"))?;
    check(d.x(CLIENT, "cm").is_empty(), || {
        "oob run recorded rdma_cm events".into()
    })
}

/// Names the workload in a check's failure.
fn context(what: &'static str) -> impl Fn(Failed) -> Failed {
    move |e| format!("{what}: {}", e.message().unwrap_or("failed")).into()
}

/// One lab visit, several workloads: write-imm, send-recv, atomic, read, and write-read over oob.
fn other_verbs_workloads(lab: &Labctl) -> Result<(), Failed> {
    let dir = tempfile_dir();
    write_imm(&Doc::run(lab, &dir, &["write-imm", "--batches", "4"])?).map_err(context("write-imm"))?;
    send_recv(
        &Doc::run(lab, &dir, &["send-recv", "--iterations", "8", "--size", "4096"])?,
        8,
        4096,
    )
    .map_err(context("send-recv"))?;
    atomic(&Doc::run(lab, &dir, &["atomic"])?).map_err(context("atomic"))?;
    read(&Doc::run(lab, &dir, &["read"])?).map_err(context("read"))?;
    oob_blob(&Doc::run(lab, &dir, &["write-read", "--cm", "oob"])?).map_err(context("write-read --cm oob"))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
