//! `labctl run fabric-write --trace`: libfabric's side of the trace, read
//! back from a real run on the suite lab (its default provider on rxe).

use libtest_mimic::Failed;
use serde_json::Value;

use crate::trace::{hex, tempfile_dir, Doc, CLIENT, SERVER};
use crate::util::{check, Labctl};

/// Pages the run writes (the server posts one fi_writemsg per page).
const PAGES: usize = 6;
/// Bytes per page.
const PAGE: u64 = 4096;

/// One traced fabric-write on the suite lab, checked.
pub fn run(lab: &Labctl) -> Result<(), Failed> {
    let dir = tempfile_dir().join("fabric");
    std::fs::create_dir_all(&dir)?;
    let (pages, page) = (PAGES.to_string(), PAGE.to_string());
    fabric_write(&Doc::run(lab, &dir, &["fabric-write", "-n", &pages, "--size", &page])?)?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn len(v: &Value) -> u64 {
    v["args"]["len"].as_str().and_then(|s| s.parse().ok()).unwrap_or(0)
}

/// The key events of fabric-write on both nodes, and their order.
fn fabric_write(d: &Doc) -> Result<(), Failed> {
    // Client: two 16 MiB regions peers may write, sent in CONNECT as the blob.
    let regions: Vec<&Value> = d
        .named(CLIENT, "fi_mr_reg")
        .into_iter()
        .filter(|m| m["args"]["access"].as_str().unwrap_or("").contains("FI_REMOTE_WRITE"))
        .collect();
    check(regions.len() == 2 && regions.iter().all(|m| len(m) == 16 << 20), || {
        format!("client's remote regions: {regions:?}")
    })?;
    let sent = d.x(CLIENT, "blob_sent");
    let received = d.x(SERVER, "blob_received");
    check(sent.len() == 2 && received.len() == 2, || {
        format!("blobs: sent {sent:?}, received {received:?}")
    })?;
    for (s, r) in sent.iter().zip(&received) {
        check(
            s["args"]["rkey"] == r["args"]["rkey"] && s["args"]["addr"] == r["args"]["addr"] && len(s) == len(r),
            || format!("the server received {r}, the client sent {s}"),
        )?;
        check(regions.iter().any(|m| m["args"]["key"] == s["args"]["rkey"]), || {
            format!("blob {s} names no region of the client: {regions:?}")
        })?;
    }
    for pid in [CLIENT, SERVER] {
        check(!d.named(pid, "fi_av_insert").is_empty(), || {
            format!("pid {pid}: no fi_av_insert of the peer")
        })?;
    }
    // Client: CONNECT and RandomFill sent, each with its FI_SEND entry.
    let sends = d.named(CLIENT, "post fi_send");
    check(sends.len() == 2, || format!("client fi_send posts: {sends:?}"))?;
    crate::trace::signaled_posts_completed(d, CLIENT, "post fi_send")?;
    check(d.named(SERVER, "completion FI_RECV").len() >= 2, || {
        "server: fewer than 2 FI_RECV entries (CONNECT, RandomFill)".into()
    })?;
    // Server: one fi_writemsg per page, into the client's regions by their keys,
    // each completed; remote CQ data on the last one only.
    let writes = d.named(SERVER, "post fi_writemsg");
    check(writes.len() == PAGES, || {
        format!("server fi_writemsg posts: {writes:?}")
    })?;
    crate::trace::signaled_posts_completed(d, SERVER, "post fi_writemsg")?;
    for w in &writes {
        let blob = received
            .iter()
            .find(|b| b["args"]["rkey"] == w["args"]["key"])
            .ok_or_else(|| format!("write {w} uses a key the client did not send"))?;
        let (base, at) = (hex(&blob["args"]["addr"]), hex(&w["args"]["remote_addr"]));
        check(len(w) == PAGE && at >= base && at + PAGE <= base + len(blob), || {
            format!("write {w} is not a page inside region {blob}")
        })?;
    }
    let with_data: Vec<&&Value> = writes.iter().filter(|w| w["args"]["cq_data"].is_string()).collect();
    let last = writes
        .iter()
        .max_by(|a, b| {
            a["ts"]
                .as_f64()
                .unwrap_or(0.0)
                .total_cmp(&b["ts"].as_f64().unwrap_or(0.0))
        })
        .ok_or("no writes")?;
    check(with_data.len() == 1 && with_data[0]["ts"] == last["ts"], || {
        format!("remote CQ data on {with_data:?}, the last write is {last}")
    })?;
    // Client: the target-side entry carries that data, and the verdict follows it.
    let arrived = d.named(CLIENT, "completion FI_REMOTE_WRITE");
    let data = &with_data[0]["args"]["cq_data"];
    check(arrived.iter().any(|c| &c["args"]["cq_data"] == data), || {
        format!("client never saw remote CQ data {data}: {arrived:?}")
    })?;
    check(
        d.x(CLIENT, "verify").iter().any(|v| v["args"]["verified"] == "true"),
        || "client: no verified verdict".into(),
    )?;
    // Flows, each causal within the clocks' error bound: the blob, the two
    // messages to the server, the data-carrying write to the client.
    let blob = d.flows("capability blob")?;
    check(blob.iter().any(|f| f.2 == SERVER), || format!("blob flows: {blob:?}"))?;
    let messages = d.flows("fi_send")?;
    check(messages.len() == 2 && messages.iter().all(|f| f.2 == SERVER), || {
        format!("fi_send flows: {messages:?}")
    })?;
    let writes = d.flows("fi_writemsg")?;
    check(writes.len() == 1 && writes[0].2 == CLIENT, || {
        format!("fi_writemsg flows: {writes:?}")
    })?;
    // Nothing was sampled away or dropped in a run this small.
    for node in d.nodes() {
        check(node["sample_every"] == 1 && node["dropped"] == 0, || {
            format!("node {node}")
        })?;
    }
    Ok(())
}
