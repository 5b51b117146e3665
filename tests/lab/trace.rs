//! `labctl run --trace`: the JSON a real write-read run leaves, read back.

use libtest_mimic::{Failed, Trial};
use serde_json::Value;

use crate::util::{check, Labctl};

pub fn trials(lab: &Labctl) -> Vec<Trial> {
    let lab = lab.clone();
    vec![Trial::test("test_trace_write_read_both_nodes_aligned", move || {
        write_read(&lab)
    })]
}

fn hex(v: &Value) -> u64 {
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
    let nodes = &doc["otherData"]["nodes"];
    let err_us = (nodes[0]["clock_error_ns"].as_f64().unwrap_or(0.0)
        + nodes[1]["clock_error_ns"].as_f64().unwrap_or(0.0))
        / 1000.0;
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
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn tempfile_dir() -> std::path::PathBuf {
    let dir = crate::util::bin_dir().join(format!("trace-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    dir
}
