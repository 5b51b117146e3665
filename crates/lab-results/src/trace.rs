//! `labctl run --trace`: both sides' traces on one timeline, written as
//! Chrome trace-event JSON (opens as-is in ui.perfetto.dev and chrome://tracing).
//!
//! Each agent stamps its events on its own monotonic clock; the controller
//! samples every agent's clock over its gRPC channel, NTP-style
//! ([`estimate_offset`]), and this module moves every event onto the
//! controller's clock: `t_controller = t_agent - offset`, good to within the
//! node's error bound (half the best round trip).
//!
//! Layout of the JSON: one process per side (named "server NODE" / "client
//! NODE", or "rank R NODE" for a collective's ranks), thread 0 for
//! connection-level events (rdma_cm, blob, verdict), thread `1 + i` for QP
//! `i`. A posted work request is a complete event ("X") lasting until its
//! completion on the same side; other events are 1 µs marks. Flow arrows
//! ("s"/"f") join the blob sent to the blob received, and each SEND /
//! SEND_WITH_IMM / WRITE_WITH_IMM to the receive completion it caused on
//! the peer (RC delivers them in posting order per QP; only drawn when both
//! traces are complete: no sampling, no drops); for libfabric sides, each
//! `fi_send` to the peer's `FI_RECV` entry and each `fi_writemsg` with
//! remote CQ data to the peer's `FI_REMOTE_WRITE` entry.
//!
//! Two sides of a pair use the same QP indexes. A collective's rank `r`
//! has one QP per other rank, its QP `k` facing the k-th other rank in rank
//! order ([`qp_facing`]); over libfabric it has one endpoint, and a write's
//! destination is the k-th address it inserted, its remote CQ data the
//! same at both ends.

use std::collections::{BTreeMap, HashMap, VecDeque};

use agent_proto::v1::{Trace, TraceEvent, FAILED_COMPLETION_OPCODE};
use serde::Serialize;
use serde_json::{json, Value};

/// One clock sample: controller send time, the agent's reading, controller receive time (ns).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockSample {
    /// Controller clock when the request left.
    pub sent_ns: u64,
    /// The agent's trace clock in its reply.
    pub agent_ns: u64,
    /// Controller clock when the reply arrived.
    pub received_ns: u64,
}

/// An agent clock's offset from the controller's.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct ClockEstimate {
    /// agent - controller, ns.
    pub offset_ns: i64,
    /// The offset is good to within this many ns (half the round trip used).
    pub error_ns: u64,
    /// The round trip of the sample used, ns.
    pub rtt_ns: u64,
    /// Samples taken.
    pub samples: usize,
    /// The agent's clock reading in the sample used (where on the agent's
    /// clock this offset held).
    pub agent_ns: u64,
}

/// NTP's estimate from the sample with the smallest round trip:
/// offset = t_agent - (t_send + t_recv) / 2, error bound = rtt / 2.
/// None without a usable sample (one that came back before it left is not).
pub fn estimate_offset(samples: &[ClockSample]) -> Option<ClockEstimate> {
    let best = samples
        .iter()
        .filter(|s| s.received_ns >= s.sent_ns)
        .min_by_key(|s| s.received_ns - s.sent_ns)?;
    let rtt = best.received_ns - best.sent_ns;
    let midpoint = i128::from(best.sent_ns) + i128::from(rtt / 2);
    Some(ClockEstimate {
        offset_ns: (i128::from(best.agent_ns) - midpoint) as i64,
        error_ns: rtt.div_ceil(2),
        rtt_ns: rtt,
        samples: samples.len(),
        agent_ns: best.agent_ns,
    })
}

/// One side of a traced run.
#[derive(Debug, Clone)]
pub struct SideTrace {
    /// "server" or "client", or "rank R" for a collective's rank.
    pub role: String,
    /// The node's name.
    pub node: String,
    /// A collective's rank: its QP `k` faces the k-th other rank. None for
    /// the two sides of a pair, whose QP `k` faces the peer's QP `k`.
    pub rank: Option<usize>,
    /// What its agent recorded.
    pub trace: Trace,
    /// Its clock against the controller's.
    pub clock: ClockEstimate,
    /// Why the side failed, when it did (its trace then ends at the failure;
    /// None for a side that ended with a result).
    pub failed: Option<String>,
    /// The clock sampled again after the run, when it was: the two clocks'
    /// drift over the run is then taken out (see [`SideTrace::offset_at`]).
    pub clock_after: Option<ClockEstimate>,
}

impl SideTrace {
    /// The measurement after the run when the line through it and the first
    /// is defined (taken later on the agent's clock); None: the first alone
    /// holds.
    fn second_measurement(&self) -> Option<&ClockEstimate> {
        self.clock_after
            .as_ref()
            .filter(|after| after.agent_ns > self.clock.agent_ns)
    }

    /// agent - controller at the agent's time `t_agent_ns`: the offset
    /// measured before the run, or, with a second measurement after it, the
    /// line through both (two free-running clocks drift apart at a rate that
    /// is constant over a run's seconds). Good to within the larger of the two
    /// error bounds between the measurements.
    pub fn offset_at(&self, t_agent_ns: u64) -> i128 {
        let before = &self.clock;
        match self.second_measurement() {
            Some(after) => {
                let (o1, o2) = (i128::from(before.offset_ns), i128::from(after.offset_ns));
                let (a1, a2) = (i128::from(before.agent_ns), i128::from(after.agent_ns));
                o1 + (o2 - o1) * (i128::from(t_agent_ns) - a1) / (a2 - a1)
            }
            None => i128::from(before.offset_ns),
        }
    }

    /// How far [`SideTrace::offset_at`] can be off for an event between the
    /// two measurements: the larger of their error bounds (a point on the
    /// line through two estimates is a weighted mean of them, so its error is
    /// at most the larger of theirs), or the first's without a second.
    pub fn offset_error_ns(&self) -> u64 {
        match self.second_measurement() {
            Some(after) => self.clock.error_ns.max(after.error_ns),
            None => self.clock.error_ns,
        }
    }

    /// How fast the agent's clock ran against the controller's over the run,
    /// in parts per million; None without a second measurement.
    pub fn drift_ppm(&self) -> Option<f64> {
        let after = self.second_measurement()?;
        let span = after.agent_ns - self.clock.agent_ns;
        Some((after.offset_ns - self.clock.offset_ns) as f64 / span as f64 * 1e6)
    }
}

/// What the JSON's metadata names besides the sides.
#[derive(Debug, Clone)]
pub struct TraceContext {
    /// The lab.
    pub lab: String,
    /// The workload.
    pub workload: String,
    /// The run's id (its record's).
    pub run_id: String,
    /// The run's error when it failed (the sides' traces then end at the
    /// failure; each failed side says why in its node entry).
    pub error: Option<String>,
}

impl TraceContext {
    /// Run `run_id` of `workload` on `lab`, which ended with a record.
    pub fn finished(lab: &str, workload: &str, run_id: &str) -> TraceContext {
        TraceContext {
            lab: lab.to_string(),
            workload: workload.to_string(),
            run_id: run_id.to_string(),
            error: None,
        }
    }

    /// Run `run_id` of `workload` on `lab`, which failed with `error`.
    pub fn failed(lab: &str, workload: &str, run_id: &str, error: &impl std::fmt::Display) -> TraceContext {
        TraceContext {
            error: Some(error.to_string()),
            ..TraceContext::finished(lab, workload, run_id)
        }
    }
}

/// A process id per side in the JSON.
fn pid(index: usize) -> usize {
    index + 1
}

/// The Chrome trace-event document for two (or more) sides.
pub fn chrome_trace(ctx: &TraceContext, sides: &[SideTrace]) -> Value {
    let mut out: Vec<Value> = Vec::new();
    // Controller-clock times, rebased so the first event is at 0.
    let aligned = |side: &SideTrace, e: &TraceEvent| i128::from(e.t_ns) - side.offset_at(e.t_ns);
    let t0 = sides
        .iter()
        .flat_map(|s| s.trace.events.iter().map(move |e| aligned(s, e)))
        .min()
        .unwrap_or(0);
    let us = |ns: i128| (ns - t0) as f64 / 1000.0;
    for (i, side) in sides.iter().enumerate() {
        out.push(json!({"ph": "M", "name": "process_name", "pid": pid(i),
            "args": {"name": format!("{} {}", side.role, side.node)}}));
        out.push(json!({"ph": "M", "name": "process_sort_index", "pid": pid(i), "args": {"sort_index": i}}));
        out.push(json!({"ph": "M", "name": "thread_name", "pid": pid(i), "tid": 0,
            "args": {"name": "connection (rdma_cm, blob, verdict)"}}));
        let qpns = qp_numbers(&side.trace);
        for (qp, qpn) in &qpns {
            let towards = match side.rank {
                Some(rank) => format!(" to rank {}", rank_facing(rank, *qp as usize)),
                None => String::new(),
            };
            out.push(json!({"ph": "M", "name": "thread_name", "pid": pid(i), "tid": qp + 1,
                "args": {"name": format!("QP {qp} (qpn {qpn}){towards}")}}));
        }
        // A libfabric side has no QP moves: its data path is its endpoint's.
        if qpns.is_empty() && side.trace.events.iter().any(|e| e.name.starts_with("fi_")) {
            out.push(json!({"ph": "M", "name": "thread_name", "pid": pid(i), "tid": 1,
                "args": {"name": "libfabric endpoint (posts, CQ entries)"}}));
        }
        let ends = completion_of_posts(&side.trace.events);
        // A failed verbs completion carries no valid opcode: it is named after its post.
        let post_of: HashMap<usize, usize> = ends.iter().map(|(&post, &end)| (end, post)).collect();
        for (k, e) in side.trace.events.iter().enumerate() {
            let tid = if is_qp_event(e) { e.qp + 1 } else { 0 };
            let mut args: BTreeMap<&str, Value> = e.args.iter().map(|(k, v)| (k.as_str(), json!(v))).collect();
            args.insert("t_agent_ns", json!(e.t_ns));
            let ts = us(aligned(side, e));
            let dur = match ends.get(&k) {
                Some(&end) => {
                    let c = &side.trace.events[end];
                    args.insert(
                        "completed_after_us",
                        json!((c.t_ns.saturating_sub(e.t_ns)) as f64 / 1000.0),
                    );
                    (c.t_ns.saturating_sub(e.t_ns)) as f64 / 1000.0
                }
                None => 1.0,
            };
            let name = match post_of.get(&k) {
                Some(&post) if e.kind == "completion" && e.name == FAILED_COMPLETION_OPCODE => {
                    format!("completion {}", side.trace.events[post].name)
                }
                _ => label(e),
            };
            out.push(
                json!({"ph": "X", "name": name, "cat": e.kind, "pid": pid(i), "tid": tid,
                "ts": ts, "dur": dur, "args": args}),
            );
        }
    }
    let mut flow_id = 0u64;
    let mut flow = |out: &mut Vec<Value>,
                    name: &str,
                    from: (usize, &SideTrace, &TraceEvent),
                    to: (usize, &SideTrace, &TraceEvent)| {
        flow_id += 1;
        let tid = |e: &TraceEvent| if is_qp_event(e) { e.qp + 1 } else { 0 };
        out.push(
            json!({"ph": "s", "id": flow_id, "name": name, "cat": "flow", "pid": pid(from.0),
            "tid": tid(from.2), "ts": us(aligned(from.1, from.2))}),
        );
        out.push(
            json!({"ph": "f", "bp": "e", "id": flow_id, "name": name, "cat": "flow", "pid": pid(to.0),
            "tid": tid(to.2), "ts": us(aligned(to.1, to.2))}),
        );
    };
    let mut flows = 0usize;
    for (a, from) in sides.iter().enumerate() {
        for (b, to) in sides.iter().enumerate() {
            if a == b {
                continue;
            }
            // The blob: what one side sent, the other received.
            let sent = from.trace.events.iter().find(|e| e.kind == "blob_sent");
            let got = to.trace.events.iter().find(|e| e.kind == "blob_received");
            if let (Some(s), Some(r)) = (sent, got) {
                flow(&mut out, "capability blob", (a, from, s), (b, to, r));
                flows += 1;
            }
            if !complete(&from.trace) || !complete(&to.trace) {
                continue;
            }
            let pairs = match (from.rank, to.rank) {
                (Some(ra), Some(rb)) => rank_message_pairs(&from.trace.events, ra, &to.trace.events, rb),
                _ => message_pairs(&from.trace.events, &to.trace.events),
            };
            for (s, r) in pairs {
                flow(
                    &mut out,
                    &from.trace.events[s].name,
                    (a, from, &from.trace.events[s]),
                    (b, to, &to.trace.events[r]),
                );
                flows += 1;
            }
        }
    }
    let nodes: Vec<Value> = sides
        .iter()
        .map(|s| {
            json!({"role": s.role, "node": s.node, "rank": s.rank, "clock_offset_ns": s.clock.offset_ns,
                "clock_error_ns": s.clock.error_ns, "clock_rtt_ns": s.clock.rtt_ns, "clock_samples": s.clock.samples,
                "events": s.trace.events.len(), "dropped": s.trace.dropped, "ring_size": s.trace.capacity,
                "sample_every": s.trace.sample_every, "record_cost_ns": s.trace.record_cost_ns,
                "failed": s.failed, "clock_drift_ppm": s.drift_ppm(),
                "clock_after_offset_ns": s.clock_after.map(|c| c.offset_ns),
                "clock_after_error_ns": s.clock_after.map(|c| c.error_ns),
                "offset_error_ns": s.offset_error_ns()})
        })
        .collect();
    json!({
        "traceEvents": out,
        "displayTimeUnit": "ns",
        "otherData": {
            "lab": ctx.lab, "workload": ctx.workload, "run_id": ctx.run_id, "error": ctx.error,
            "clock": "controller clock (each node's events moved by its offset; +/- its offset_error_ns), microseconds since the first event",
            "flows": flows,
            "nodes": nodes,
        }
    })
}

/// Whether an event belongs on its QP's track (data path and QP moves).
fn is_qp_event(e: &TraceEvent) -> bool {
    matches!(e.kind.as_str(), "qp" | "post" | "post_recv" | "completion")
}

/// A short label: "WRITE", "→ RTR", "cm ESTABLISHED".
fn label(e: &TraceEvent) -> String {
    match e.kind.as_str() {
        "post" | "post_recv" => format!("post {}", e.name),
        "completion" => format!("completion {}", e.name),
        "qp" => format!("QP -> {}", e.name),
        "cm" => e.name.trim_start_matches("RDMA_CM_EVENT_").to_string(),
        "mr" => e.name.clone(),
        "blob_sent" => "blob sent".into(),
        "blob_received" => "blob received".into(),
        _ => e.name.clone(),
    }
}

/// QP index -> qpn, from the QP transitions.
fn qp_numbers(t: &Trace) -> BTreeMap<u32, String> {
    let mut out = BTreeMap::new();
    for e in t.events.iter().filter(|e| e.kind == "qp") {
        if let Some(qpn) = e.args.get("qpn") {
            out.entry(e.qp).or_insert_with(|| qpn.clone());
        }
    }
    out
}

/// Neither sampled nor cut by the ring.
fn complete(t: &Trace) -> bool {
    t.sample_every <= 1 && t.dropped == 0
}

/// Index of each signaled post's completion on the same side: the next
/// completion with its wr_id on its QP.
fn completion_of_posts(events: &[TraceEvent]) -> HashMap<usize, usize> {
    let mut open: HashMap<(u32, &str), VecDeque<usize>> = HashMap::new();
    let mut out = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        let Some(wr_id) = e.args.get("wr_id") else { continue };
        match e.kind.as_str() {
            "post" if e.args.get("signaled").is_some_and(|s| s == "true") => {
                open.entry((e.qp, wr_id.as_str())).or_default().push_back(i);
            }
            "post_recv" => open.entry((e.qp, wr_id.as_str())).or_default().push_back(i),
            "completion" => {
                if let Some(post) = open.get_mut(&(e.qp, wr_id.as_str())).and_then(|q| q.pop_front()) {
                    out.insert(post, i);
                }
            }
            _ => {}
        }
    }
    out
}

/// What a post makes the peer complete, and through which queue: verbs
/// SEND / SEND_WITH_IMM / WRITE_WITH_IMM consume the peer's posted RECVs in
/// order; a libfabric `fi_send` is the peer's next `FI_RECV` entry, and an
/// `fi_writemsg` carrying remote CQ data the peer's next `FI_REMOTE_WRITE`
/// entry with data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Delivery {
    VerbsReceive,
    FabricMessage,
    FabricCqData,
}

fn delivery_of_post(e: &TraceEvent) -> Option<Delivery> {
    if e.kind != "post" {
        return None;
    }
    match e.name.as_str() {
        "SEND" | "SEND_WITH_IMM" | "WRITE_WITH_IMM" => Some(Delivery::VerbsReceive),
        "fi_send" => Some(Delivery::FabricMessage),
        "fi_writemsg" if e.args.contains_key("cq_data") => Some(Delivery::FabricCqData),
        _ => None,
    }
}

fn delivery_of_completion(e: &TraceEvent) -> Option<Delivery> {
    if e.kind != "completion" {
        return None;
    }
    match e.name.as_str() {
        "RECV" | "RECV_RDMA_WITH_IMM" => Some(Delivery::VerbsReceive),
        "FI_RECV" => Some(Delivery::FabricMessage),
        "FI_REMOTE_WRITE" if e.args.contains_key("cq_data") => Some(Delivery::FabricCqData),
        _ => None,
    }
}

/// (sender post, receiver completion) pairs: the n-th post of a kind on a QP
/// caused the peer's n-th completion of that kind on the same QP index.
fn message_pairs(sender: &[TraceEvent], receiver: &[TraceEvent]) -> Vec<(usize, usize)> {
    let mut receipts: HashMap<(u32, Delivery), VecDeque<usize>> = HashMap::new();
    for (i, e) in receiver.iter().enumerate() {
        if let Some(d) = delivery_of_completion(e) {
            receipts.entry((e.qp, d)).or_default().push_back(i);
        }
    }
    let mut out = Vec::new();
    for (i, e) in sender.iter().enumerate() {
        let Some(d) = delivery_of_post(e) else { continue };
        if let Some(r) = receipts.get_mut(&(e.qp, d)).and_then(|q| q.pop_front()) {
            out.push((i, r));
        }
    }
    out
}

/// The index of rank `rank`'s QP that faces rank `other` (its QPs face the
/// other ranks in rank order).
pub fn qp_facing(rank: usize, other: usize) -> usize {
    if other > rank {
        other - 1
    } else {
        other
    }
}

/// The rank rank `rank`'s QP `qp` faces.
pub fn rank_facing(rank: usize, qp: usize) -> usize {
    if qp >= rank {
        qp + 1
    } else {
        qp
    }
}

/// (sender post, receiver completion) pairs between rank `from` and rank
/// `to` of a collective. Verbs: the sender's posts on its QP facing `to`
/// caused, in order, the receive completions on `to`'s QP facing `from`.
/// libfabric: the sender's writes to its (k-th inserted) address of `to`
/// caused `to`'s remote-write entries with the same CQ data, in order (the
/// data names the sender, so no other rank's writes carry it).
fn rank_message_pairs(sender: &[TraceEvent], from: usize, receiver: &[TraceEvent], to: usize) -> Vec<(usize, usize)> {
    let (sender_qp, receiver_qp) = (qp_facing(from, to) as u32, qp_facing(to, from) as u32);
    // The sender's address of `to`: its k-th `fi_av_insert`, k = the QP index facing `to`.
    let dest = sender
        .iter()
        .filter(|e| e.kind == "av")
        .nth(sender_qp as usize)
        .and_then(|e| e.args.get("fi_addr"));
    let mut receipts: HashMap<(Delivery, Option<&str>), VecDeque<usize>> = HashMap::new();
    for (i, e) in receiver.iter().enumerate() {
        match delivery_of_completion(e) {
            Some(Delivery::FabricCqData) => {
                let data = e.args.get("cq_data").map(String::as_str);
                receipts.entry((Delivery::FabricCqData, data)).or_default().push_back(i);
            }
            Some(d @ Delivery::VerbsReceive) if e.qp == receiver_qp => {
                receipts.entry((d, None)).or_default().push_back(i);
            }
            _ => {}
        }
    }
    let mut out = Vec::new();
    for (i, e) in sender.iter().enumerate() {
        let key = match delivery_of_post(e) {
            Some(Delivery::FabricCqData) if dest.is_some() && e.args.get("dest") == dest => {
                (Delivery::FabricCqData, e.args.get("cq_data").map(String::as_str))
            }
            Some(d @ Delivery::VerbsReceive) if e.qp == sender_qp => (d, None),
            _ => continue,
        };
        if let Some(r) = receipts.get_mut(&key).and_then(|q| q.pop_front()) {
            out.push((i, r));
        }
    }
    out
}

#[cfg(test)]
mod tests;
