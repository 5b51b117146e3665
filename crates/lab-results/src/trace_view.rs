//! `labctl trace show`: a trace written by `labctl run --trace` read back
//! and drawn as a terminal swimlane — client on the left, what crosses the
//! wire in the middle, server on the right — one row per event, in the
//! order of the aligned clock.
//!
//! The wire column is drawn from what each side recorded, not captured on
//! the wire: a post of WRITE, READ, SEND or an atomic is an arrow towards
//! the peer on the row of the post; its completion is an arrow back on the
//! row of the completion (on RC, a WRITE or SEND completes when the
//! responder's ACK has arrived; a READ or atomic when its response has);
//! the capability blob is an arrow on the row it was sent. Rows closer in
//! time than the clocks' error bound may be drawn in either order; the
//! header says how large that bound is.
//!
//! This module only reads the JSON ([`crate::trace`] writes it); it must
//! not know the agents.

use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::Value;

/// Why a file cannot be shown.
#[derive(Debug, thiserror::Error)]
pub enum TraceViewError {
    /// Cannot be read.
    #[error("{}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Not JSON.
    #[error("{}: not JSON ({source})\n  fix: pass the file that `labctl run WORKLOAD --trace FILE.json` wrote", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// Where the parser stopped.
        source: serde_json::Error,
    },
    /// A collective's trace: one process per rank, not two sides.
    #[error("{}: a collective's trace ({ranks} ranks); `trace show` draws the two sides of a pair\n  fix: open it in https://ui.perfetto.dev (one process per rank, an arrow for every write)", path.display())]
    Collective {
        /// The file.
        path: PathBuf,
        /// How many ranks it holds.
        ranks: usize,
    },
    /// JSON, but not a trace labctl wrote.
    #[error("{}: not a labctl trace ({what})\n  fix: pass the file that `labctl run WORKLOAD --trace FILE.json` wrote", path.display())]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What is missing.
        what: String,
    },
}

impl TraceViewError {
    /// Whether the user named a wrong file (exit 2) rather than the machine failing.
    pub fn is_bad_input(&self) -> bool {
        !matches!(self, TraceViewError::Read { source, .. } if source.kind() != std::io::ErrorKind::NotFound)
    }
}

/// Which node a row belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Side {
    /// The client (initiator of the data path).
    Client,
    /// The server (its memory is the target).
    Server,
}

impl Side {
    fn other(self) -> Side {
        match self {
            Side::Client => Side::Server,
            Side::Server => Side::Client,
        }
    }
}

/// Something crossing the wire on a row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wire {
    /// The side it travels towards.
    pub toward: Side,
    /// What travels: "WRITE 4 KiB", "ack", "READ response 4 KiB".
    pub label: String,
}

/// One event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// Milliseconds since the first event, on the aligned clock.
    pub t_ms: f64,
    /// The node that recorded it.
    pub side: Side,
    /// QP index, for data-path and QP events.
    pub qp: Option<u32>,
    /// "post WRITE 4 KiB → 0x7f73d4008000", "QP 17 → RTR".
    pub text: String,
    /// What it puts on the wire, if anything.
    pub wire: Option<Wire>,
}

/// A trace ready to draw.
#[derive(Debug, Clone, Serialize)]
pub struct Swimlane {
    /// The workload.
    pub workload: String,
    /// The lab.
    pub lab: String,
    /// The run's id.
    pub run_id: String,
    /// The client's node.
    pub client: String,
    /// The server's node.
    pub server: String,
    /// The larger of the two nodes' bounds on their events' placement, ms.
    pub clock_error_ms: f64,
    /// Lines the reader should know (sampling, drops).
    pub notes: Vec<String>,
    /// The rows shown.
    pub rows: Vec<Row>,
    /// Events not shown (beyond the limit).
    pub hidden: usize,
    /// Whether more than one QP took part (rows then name theirs).
    pub several_qps: bool,
}

/// Reads a trace file and lays out at most `limit` rows (0: all).
pub fn load(path: &Path, limit: usize) -> Result<Swimlane, TraceViewError> {
    let bytes = std::fs::read(path).map_err(|source| TraceViewError::Read {
        path: path.into(),
        source,
    })?;
    let doc: Value = serde_json::from_slice(&bytes).map_err(|source| TraceViewError::Json {
        path: path.into(),
        source,
    })?;
    let ranks = rank_processes(&doc);
    if ranks > 0 {
        return Err(TraceViewError::Collective {
            path: path.into(),
            ranks,
        });
    }
    swimlane(&doc, limit).map_err(|what| TraceViewError::NotATrace {
        path: path.into(),
        what,
    })
}

/// How many "rank R NODE" processes a trace has (a collective's).
fn rank_processes(doc: &Value) -> usize {
    doc["traceEvents"].as_array().map_or(0, |events| {
        events
            .iter()
            .filter(|e| e["ph"] == "M" && e["name"] == "process_name")
            .filter(|e| e["args"]["name"].as_str().is_some_and(|n| n.starts_with("rank ")))
            .count()
    })
}

/// Lays out a parsed trace; `Err` names what a labctl trace should have had.
pub fn swimlane(doc: &Value, limit: usize) -> Result<Swimlane, String> {
    let events = doc["traceEvents"].as_array().ok_or("no traceEvents array")?;
    let mut sides: Vec<(u64, Side, String)> = Vec::new();
    for e in events.iter().filter(|e| e["ph"] == "M" && e["name"] == "process_name") {
        let name = e["args"]["name"].as_str().unwrap_or("");
        let (role, node) = name.split_once(' ').unwrap_or((name, ""));
        let side = match role {
            "client" => Side::Client,
            "server" => Side::Server,
            _ => continue,
        };
        sides.push((e["pid"].as_u64().unwrap_or(0), side, node.to_string()));
    }
    let node_of = |side: Side| sides.iter().find(|s| s.1 == side).map(|s| s.2.clone());
    let (Some(client), Some(server)) = (node_of(Side::Client), node_of(Side::Server)) else {
        return Err("no \"client NODE\" and \"server NODE\" processes".into());
    };
    let side_of = |pid: &Value| sides.iter().find(|s| Some(s.0) == pid.as_u64()).map(|s| s.1);

    let mut marks: Vec<(f64, usize, Row)> = Vec::new();
    let mut several_qps = false;
    for (i, e) in events.iter().enumerate().filter(|(_, e)| e["ph"] == "X") {
        let Some(side) = side_of(&e["pid"]) else { continue };
        let tid = e["tid"].as_u64().unwrap_or(0);
        let qp = (tid > 0).then(|| (tid - 1) as u32);
        several_qps |= tid > 1;
        let ts = e["ts"].as_f64().unwrap_or(0.0);
        let (text, wire) = describe(e, side);
        marks.push((
            ts,
            i,
            Row {
                t_ms: ts / 1000.0,
                side,
                qp,
                text,
                wire,
            },
        ));
    }
    marks.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let rows = collapse_receive_posts(marks.into_iter().map(|m| m.2));
    let total = rows.len();
    let shown = if limit == 0 { total } else { total.min(limit) };
    let rows: Vec<Row> = rows.into_iter().take(shown).collect();

    let other = &doc["otherData"];
    let nodes = other["nodes"].as_array().cloned().unwrap_or_default();
    // A file written before `offset_error_ns` existed has only the first
    // measurement's bound.
    let clock_error_ms = nodes
        .iter()
        .filter_map(|n| n["offset_error_ns"].as_f64().or_else(|| n["clock_error_ns"].as_f64()))
        .fold(0.0, f64::max)
        / 1e6;
    let mut notes = Vec::new();
    for n in &nodes {
        let who = format!(
            "{} {}",
            n["role"].as_str().unwrap_or("?"),
            n["node"].as_str().unwrap_or("?")
        );
        if let Some(k) = n["sample_every"].as_u64().filter(|k| *k > 1) {
            notes.push(format!(
                "{who}: its loop recorded every {k}th post and completion (bandwidth and latency workloads are sampled)"
            ));
        }
        if let Some(d) = n["dropped"].as_u64().filter(|d| *d > 0) {
            notes.push(format!(
                "{who}: {d} events dropped: the ring held {} (--trace-events)",
                n["ring_size"].as_u64().unwrap_or(0)
            ));
        }
    }
    let text = |v: &Value| v.as_str().unwrap_or("?").to_string();
    Ok(Swimlane {
        workload: text(&other["workload"]),
        lab: text(&other["lab"]),
        run_id: text(&other["run_id"]),
        client,
        server,
        clock_error_ms,
        notes,
        rows,
        hidden: total - shown,
        several_qps,
    })
}

/// A ring of receives posted back to back is one row: "post RECV 0 B ×10"
/// (libfabric's "post fi_recv 8 KiB ×16" likewise).
fn collapse_receive_posts(rows: impl Iterator<Item = Row>) -> Vec<Row> {
    let mut out: Vec<(Row, usize)> = Vec::new();
    for row in rows {
        match out.last_mut() {
            Some((last, n))
                if (row.text.starts_with("post RECV") || row.text.starts_with("post fi_recv"))
                    && last.text == row.text
                    && last.side == row.side
                    && last.qp == row.qp =>
            {
                *n += 1
            }
            _ => out.push((row, 1)),
        }
    }
    out.into_iter()
        .map(|(mut row, n)| {
            if n > 1 {
                row.text.push_str(&format!(" ×{n}"));
            }
            row
        })
        .collect()
}

/// An argument as text ("" when absent).
fn arg<'a>(e: &'a Value, key: &str) -> &'a str {
    e["args"][key].as_str().unwrap_or("")
}

/// A byte count argument.
fn arg_bytes(e: &Value, key: &str) -> Option<u64> {
    arg(e, key).parse().ok()
}

/// A byte count as the charts label it ("56 B", "4 KiB").
fn bytes_short(n: u64) -> String {
    crate::plot::bytes_label(n as f64)
}

/// The row's text and wire for one complete event.
fn describe(e: &Value, side: Side) -> (String, Option<Wire>) {
    let cat = e["cat"].as_str().unwrap_or("");
    let name = e["name"].as_str().unwrap_or("");
    let size = |key: &str| arg_bytes(e, key).map(bytes_short).unwrap_or_default();
    let toward_peer = |label: String| {
        Some(Wire {
            toward: side.other(),
            label,
        })
    };
    let back = |label: String| Some(Wire { toward: side, label });
    match cat {
        "cm" => {
            let pd = arg_bytes(e, "private_data_len").unwrap_or(0);
            let mut text = format!("cm {name}");
            if pd > 0 {
                text.push_str(&format!(" ({pd} B private data)"));
            }
            if !matches!(arg(e, "status"), "" | "0") {
                text.push_str(&format!(" status {}", arg(e, "status")));
            }
            (text, None)
        }
        "qp" => {
            let state = name.trim_start_matches("QP -> ");
            let mut text = format!("QP {} → {state}", arg(e, "qpn"));
            if !arg(e, "dest_qpn").is_empty() {
                text.push_str(&format!(" (to QP {})", arg(e, "dest_qpn")));
            }
            (text, None)
        }
        "mr" if name == "fi_mr_reg" => {
            let reach = if arg(e, "access").contains("REMOTE") {
                "peers may write"
            } else {
                "local only"
            };
            let text = format!(
                "fi_mr_reg {} {} key {} ({reach})",
                size("len"),
                arg(e, "addr"),
                arg(e, "key")
            );
            (text, None)
        }
        "mr" => {
            let remote = arg(e, "access").contains("REMOTE");
            let text = if remote {
                format!("reg_mr {} {} rkey {}", size("len"), arg(e, "addr"), arg(e, "rkey"))
            } else {
                format!("reg_mr {} lkey {} (local only)", size("len"), arg(e, "lkey"))
            };
            (text, None)
        }
        "blob_sent" | "blob_received" => {
            let what = if arg_bytes(e, "len") == Some(0) {
                "no buffer exposed".to_string()
            } else {
                format!("{} rkey {} {}", arg(e, "addr"), arg(e, "rkey"), size("len"))
            };
            if cat == "blob_sent" {
                (format!("blob sent: {what}"), toward_peer("{addr, rkey} blob".into()))
            } else {
                (format!("blob received: {what}"), None)
            }
        }
        "post" => {
            let op = name.trim_start_matches("post ");
            let mut text = format!("post {op}");
            let len = arg_bytes(e, "len");
            if let Some(len) = len {
                text.push_str(&format!(" {}", bytes_short(len)));
            }
            if !arg(e, "imm").is_empty() {
                text.push_str(&format!(" imm {}", arg(e, "imm")));
            }
            if !arg(e, "cq_data").is_empty() {
                text.push_str(&format!(" data {}", arg(e, "cq_data")));
            }
            if !arg(e, "remote_addr").is_empty() {
                text.push_str(&format!(" → {}", arg(e, "remote_addr")));
            }
            if arg(e, "signaled") == "false" {
                text.push_str(" (unsignaled)");
            }
            let len_label = len.map(|l| format!(" {}", bytes_short(l))).unwrap_or_default();
            let wire = match op {
                "fi_writemsg" if !arg(e, "cq_data").is_empty() => toward_peer(format!("write{len_label} + data")),
                "fi_writemsg" => toward_peer(format!("write{len_label}")),
                "fi_send" => toward_peer(format!("message{len_label}")),
                "READ" => toward_peer(format!("READ request{len_label}")),
                "FETCH_ADD" | "COMPARE_SWAP" => toward_peer(op.to_string()),
                _ => toward_peer(format!("{op}{len_label}")),
            };
            (text, wire)
        }
        "post_recv" => {
            let op = name.trim_start_matches("post ");
            (format!("post {op} {}", size("len")), None)
        }
        "completion" => {
            let op = name.trim_start_matches("completion ");
            let status = arg(e, "status");
            let ok = matches!(status, "" | "IBV_WC_SUCCESS");
            let mut text = format!("cqe {op}");
            if let Some(len) = arg_bytes(e, "byte_len").filter(|_| op.starts_with("RECV")) {
                text.push_str(&format!(" {}", bytes_short(len)));
            }
            if op.starts_with("RECV") && !arg(e, "imm").is_empty() {
                text.push_str(&format!(" imm {}", arg(e, "imm")));
            }
            if op == "FI_RECV" {
                text.push_str(&format!(" {}", size("byte_len")));
            }
            if !arg(e, "cq_data").is_empty() {
                text.push_str(&format!(" data {}", arg(e, "cq_data")));
            }
            text.push_str(if ok { " ok" } else { " " });
            if !ok {
                text.push_str(status);
            }
            let wire = match op {
                _ if !ok => None,
                "READ" => back(format!("READ response {}", size("byte_len"))),
                "FETCH_ADD" | "COMPARE_SWAP" => back("original value".into()),
                "WRITE" | "SEND" | "RDMA_WRITE" => back("ack".into()),
                // fabric-* writes ask for delivery complete: the target acknowledged placement.
                "FI_WRITE" => back("ack".into()),
                _ => None,
            };
            (text, wire)
        }
        "verify" => {
            let verdict = if arg(e, "verified") == "true" {
                "verified"
            } else {
                "not verified here"
            };
            (format!("{verdict}: {}", arg(e, "detail")), None)
        }
        _ => {
            let args: Vec<String> = e["args"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| !matches!(k.as_str(), "t_agent_ns" | "completed_after_us"))
                        .map(|(k, v)| format!("{k}={}", v.as_str().map(str::to_string).unwrap_or(v.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            (format!("{name} {}", args.join(" ")).trim_end().to_string(), None)
        }
    }
}

/// Cuts `s` to `width` characters, ending in "…" when cut.
fn fit(s: &str, width: usize) -> String {
    let n = s.chars().count();
    if n <= width {
        format!("{s}{}", " ".repeat(width - n))
    } else {
        let mut out: String = s.chars().take(width.saturating_sub(1)).collect();
        out.push('…');
        out
    }
}

/// The arrow for the wire column, `width` wide.
fn arrow(w: &Wire, width: usize) -> String {
    let label = format!(" {} ", w.label);
    let label: String = label.chars().take(width.saturating_sub(4)).collect();
    let dashes = width.saturating_sub(label.chars().count() + 1);
    let (left, right) = (dashes / 2, dashes - dashes / 2);
    match w.toward {
        Side::Server => format!("{}{label}{}▶", "─".repeat(left), "─".repeat(right)),
        Side::Client => format!("◀{}{label}{}", "─".repeat(left), "─".repeat(right)),
    }
}

/// "client mc", or "client" when the node is named after its role.
fn who(role: &str, node: &str) -> String {
    if node == role {
        role.to_string()
    } else {
        format!("{role} {node}")
    }
}

/// The swimlane as text, about `width` columns wide (at least 80).
pub fn render(s: &Swimlane, width: usize) -> String {
    let width = width.max(80);
    let time_w = 10;
    let wire_w = 26;
    let side_w = (width - time_w - wire_w - 6) / 2;
    let mut out = String::new();
    let (client, server) = (who("client", &s.client), who("server", &s.server));
    out.push_str(&format!(
        "{} on lab {}, run {}: {client} ↔ {server}\n",
        s.workload, s.lab, s.run_id
    ));
    out.push_str(&format!(
        "time: ms since the first event, both nodes on the controller's clock (each ±{:.3} ms)\n",
        s.clock_error_ms
    ));
    out.push_str("wire: drawn from each side's posts and completions, not captured\n");
    for n in &s.notes {
        out.push_str(&format!("note: {n}\n"));
    }
    out.push('\n');
    out.push_str(&format!(
        "{:>time_w$}  {}  {}  {}\n",
        "ms",
        fit(&client, side_w),
        fit("wire", wire_w),
        fit(&server, side_w).trim_end()
    ));
    for r in &s.rows {
        let text = match (s.several_qps, r.qp) {
            (true, Some(q)) => format!("q{q} {}", r.text),
            _ => r.text.clone(),
        };
        let (left, right) = match r.side {
            Side::Client => (text, String::new()),
            Side::Server => (String::new(), text),
        };
        let wire = r.wire.as_ref().map(|w| arrow(w, wire_w)).unwrap_or_default();
        let line = format!(
            "{:>time_w$.3}  {}  {}  {}",
            r.t_ms,
            fit(&left, side_w),
            fit(&wire, wire_w),
            fit(&right, side_w)
        );
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if s.hidden > 0 {
        out.push_str(&format!(
            "… {} more events not shown (--limit 0 shows all, or open the file in ui.perfetto.dev)\n",
            s.hidden
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The shape `crate::trace::chrome_trace` writes, cut to a few events
    /// of a real write-imm run (values as recorded on the QEMU lab).
    fn doc() -> Value {
        let x = |pid: u64, tid: u64, ts: f64, cat: &str, name: &str, args: Value| json!({"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": 1.0, "cat": cat, "name": name, "args": args});
        json!({
            "traceEvents": [
                {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "server ms"}},
                {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "client mc"}},
                x(1, 0, 7274.5, "cm", "CONNECT_REQUEST", json!({"private_data_len": "56", "status": "0"})),
                x(1, 0, 10760.1, "mr", "reg_mr", json!({"access": "LOCAL_WRITE|REMOTE_WRITE", "addr": "0x7f73d400d000", "len": "32768", "lkey": "0x49b", "rkey": "0x49b"})),
                x(1, 1, 10972.6, "post_recv", "post RECV", json!({"len": "0", "wr_id": "0x7"})),
                x(1, 1, 10988.3, "post_recv", "post RECV", json!({"len": "0", "wr_id": "0x8"})),
                x(1, 1, 10989.0, "post_recv", "post RECV", json!({"len": "0", "wr_id": "0x9"})),
                x(1, 1, 11208.7, "qp", "QP -> RTR", json!({"qpn": "18", "dest_qpn": "18"})),
                x(1, 0, 96594.5, "blob_sent", "blob sent", json!({"addr": "0x7f73d400d000", "len": "32768", "rkey": "0x49b"})),
                x(2, 0, 97782.7, "blob_received", "blob received", json!({"addr": "0x7f73d400d000", "len": "32768", "rkey": "0x49b"})),
                x(2, 1, 187052.2, "post", "post WRITE_WITH_IMM", json!({"imm": "0x0", "len": "4096", "remote_addr": "0x7f73d400d000", "rkey": "0x49b", "signaled": "true"})),
                x(2, 1, 190332.4, "completion", "completion WRITE", json!({"byte_len": "4096", "status": "IBV_WC_SUCCESS"})),
                x(1, 1, 190199.0, "completion", "completion RECV_RDMA_WITH_IMM", json!({"byte_len": "4096", "imm": "0x0", "status": "IBV_WC_SUCCESS"})),
                x(2, 1, 192000.0, "post", "post READ", json!({"len": "4096", "remote_addr": "0x7f73d400d000", "signaled": "true"})),
                x(2, 1, 193000.0, "completion", "completion READ", json!({"byte_len": "4096", "status": "IBV_WC_REM_ACCESS_ERR"})),
                x(1, 0, 225180.7, "verify", "verified", json!({"detail": "8 batches in order", "verified": "true"})),
            ],
            "otherData": {"lab": "mine", "workload": "write-imm", "run_id": "10ede081",
                "nodes": [
                    {"role": "server", "node": "ms", "clock_error_ns": 827091, "sample_every": 1, "dropped": 0, "ring_size": 65536},
                    {"role": "client", "node": "mc", "clock_error_ns": 884361, "sample_every": 64, "dropped": 12, "ring_size": 16},
                ]}
        })
    }

    #[test]
    fn the_header_bound_is_the_placement_bound_of_both_measurements() {
        // A node whose clock was measured again after the run: its events
        // are placed to within the larger of the two bounds.
        let mut d = doc();
        d["otherData"]["nodes"][1]["offset_error_ns"] = json!(1_204_000);
        let s = swimlane(&d, 0).unwrap();
        assert!((s.clock_error_ms - 1.204).abs() < 1e-9, "{}", s.clock_error_ms);
    }

    #[test]
    fn rows_follow_the_aligned_clock_with_the_wire_between() {
        let s = swimlane(&doc(), 0).unwrap();
        assert_eq!((s.client.as_str(), s.server.as_str()), ("mc", "ms"));
        assert!((s.clock_error_ms - 0.884361).abs() < 1e-9);
        assert_eq!(s.rows.len(), 12, "three receive posts in a row are one");
        assert!(s
            .rows
            .iter()
            .any(|r| r.text == "post RECV 0 B ×3" && r.side == Side::Server));
        assert!(s.rows.windows(2).all(|w| w[0].t_ms <= w[1].t_ms));
        // The server's receive completion (190.199) comes before the
        // client's WRITE completion (190.332), as recorded.
        let texts: Vec<&str> = s.rows.iter().map(|r| r.text.as_str()).collect();
        let recv = texts
            .iter()
            .position(|t| t.starts_with("cqe RECV_RDMA_WITH_IMM 4 KiB imm 0x0 ok"))
            .unwrap();
        let ack = texts.iter().position(|t| *t == "cqe WRITE ok").unwrap();
        assert!(recv < ack, "{texts:#?}");
        assert_eq!(
            s.rows[ack].wire,
            Some(Wire {
                toward: Side::Client,
                label: "ack".into()
            })
        );
        let post = s
            .rows
            .iter()
            .find(|r| r.text.starts_with("post WRITE_WITH_IMM"))
            .unwrap();
        assert_eq!(post.text, "post WRITE_WITH_IMM 4 KiB imm 0x0 → 0x7f73d400d000");
        assert_eq!(post.side, Side::Client);
        assert_eq!(
            post.wire,
            Some(Wire {
                toward: Side::Server,
                label: "WRITE_WITH_IMM 4 KiB".into()
            })
        );
        let blob = s.rows.iter().find(|r| r.text.starts_with("blob sent")).unwrap();
        assert_eq!(blob.wire.as_ref().unwrap().toward, Side::Client);
        assert!(texts.contains(&"cm CONNECT_REQUEST (56 B private data)"));
        assert!(texts.contains(&"QP 18 → RTR (to QP 18)"));
        // A failed READ says its status and draws no response.
        let failed = s.rows.iter().find(|r| r.text.starts_with("cqe READ")).unwrap();
        assert_eq!(failed.text, "cqe READ IBV_WC_REM_ACCESS_ERR");
        assert_eq!(failed.wire, None);
        assert_eq!(s.notes.len(), 2, "{:?}", s.notes);
        assert!(s.notes[0].contains("every 64th") && s.notes[1].contains("12 events dropped"));
    }

    #[test]
    fn drawing_puts_client_left_wire_middle_server_right() {
        let s = swimlane(&doc(), 0).unwrap();
        let text = render(&s, 120);
        let line = |needle: &str| {
            text.lines()
                .find(|l| l.contains(needle))
                .unwrap_or_else(|| panic!("{needle} in\n{text}"))
        };
        let header = text.lines().find(|l| l.trim_start().starts_with("ms ")).unwrap();
        let (client_col, wire_col, server_col) = (
            header.find("client mc").unwrap(),
            header.find("wire").unwrap(),
            header.find("server ms").unwrap(),
        );
        assert!(client_col < wire_col && wire_col < server_col);
        let post = line("post WRITE_WITH_IMM");
        let arrow_at = post.find("WRITE_WITH_IMM 4 KiB").unwrap();
        assert!(post.trim_end().ends_with('▶'), "{post}");
        assert!(post.find("post WRITE").unwrap() < arrow_at);
        let recv = line("cqe RECV_RDMA_WITH_IMM");
        assert!(
            recv.chars().position(|c| c == 'c').unwrap() > 40,
            "server column: {recv}"
        );
        assert!(line("blob sent").contains('◀'));
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
        // Limited: the rest is counted, not dropped silently.
        let cut = swimlane(&doc(), 3).unwrap();
        assert_eq!((cut.rows.len(), cut.hidden), (3, 9));
        assert!(render(&cut, 100).contains("… 9 more events not shown"));
    }

    #[test]
    fn other_json_is_refused_with_what_is_missing() {
        assert!(swimlane(&json!({"a": 1}), 0).unwrap_err().contains("traceEvents"));
        let no_sides = json!({"traceEvents": [{"ph": "X", "pid": 1}]});
        assert!(swimlane(&no_sides, 0).unwrap_err().contains("client NODE"));
        let ranks = json!({"traceEvents": [
            {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "rank 0 n1"}},
            {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "rank 1 n2"}},
        ]});
        assert_eq!(rank_processes(&ranks), 2);
        assert_eq!(rank_processes(&no_sides), 0);
        assert_eq!(bytes_short(56), "56 B");
        assert_eq!(bytes_short(4096), "4 KiB");
        // Sizes that are no whole KiB stay exact, as on the charts' axes.
        assert_eq!(bytes_short(1536 * 1024), "1536 KiB");
        assert_eq!(bytes_short(4097), "4097 B");
    }
}
