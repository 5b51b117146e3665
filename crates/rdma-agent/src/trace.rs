//! A side's trace (`labctl run --trace`): a bounded ring of timestamped
//! events — rdma_cm events, QP transitions, registrations, the capability
//! blob, posted work requests, completions, the verdict — returned with the
//! side's result as [`agent_proto::v1::Trace`].
//!
//! Cost: a side without a trace holds `None` and pays one branch per hook;
//! with one, the ring is allocated once and recording a data-path event
//! reads the clock and writes a `Copy` value (no allocation). Rare events
//! (rdma_cm, QP, verdict) carry their text.
//!
//! Times are on [`now_ns`], the agent's monotonic clock, which the `Clock`
//! RPC also answers with, so the controller can align two nodes.
//! This module must not know verbs or libfabric objects: callers hand it
//! plain numbers (libfabric's flag names come from [`fabric::observe`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

use agent_proto::v1::{SideResult, Trace, TraceEvent, TraceOptions};
use workload_catalogue::limits::{DEFAULT_TRACE_EVENTS, MAX_TRACE_EVENTS};

/// Sampling of the bandwidth/latency loops when the request says 0.
pub const DEFAULT_LOOP_SAMPLING: u32 = 64;

/// Nanoseconds on the agent's trace clock (monotonic, since first use).
pub fn now_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// What happened.
#[derive(Debug, Clone)]
pub enum What {
    /// An rdma_cm event, and the private data's length it carried.
    Cm {
        /// librdmacm's name.
        name: String,
        /// Its status.
        status: i32,
        /// Bytes of private data.
        private_data: usize,
    },
    /// A QP was moved to `state` ("INIT", "RTR", "RTS"); `attrs` names the key attributes.
    Qp {
        /// The state.
        state: String,
        /// "dest_qpn=17 rq_psn=0x.. mtu=1024" and the like.
        attrs: String,
    },
    /// A buffer was registered.
    Mr {
        /// Its address.
        addr: u64,
        /// Its length.
        len: u64,
        /// Local key.
        lkey: u32,
        /// Remote key.
        rkey: u32,
        /// Whether the peer may reach it (remote read/write/atomic).
        remote: bool,
    },
    /// The capability blob this side sent (`sent`) or received.
    Blob {
        /// Sent (true) or received.
        sent: bool,
        /// Buffer address.
        addr: u64,
        /// Its rkey (a libfabric MR key for fabric-* sides).
        rkey: u64,
        /// Its length.
        len: u64,
    },
    /// A send work request was posted.
    Post {
        /// The opcode's name ("WRITE", "SEND_WITH_IMM").
        opcode: &'static str,
        /// Its id.
        wr_id: u64,
        /// Payload bytes.
        len: u32,
        /// Remote address (one-sided and atomic operations).
        remote_addr: u64,
        /// Remote key.
        rkey: u32,
        /// Immediate (WRITE_WITH_IMM, SEND_WITH_IMM).
        imm: Option<u32>,
        /// Asks for a completion.
        signaled: bool,
        /// Payload inline in the WQE.
        inline: bool,
    },
    /// A receive work request was posted.
    PostRecv {
        /// Its id.
        wr_id: u64,
        /// Room in bytes.
        len: u32,
    },
    /// A completion was polled.
    Completion {
        /// Its work request's id.
        wr_id: u64,
        /// The status's name ("IBV_WC_SUCCESS").
        status: &'static str,
        /// The opcode's name ("RECV_RDMA_WITH_IMM").
        opcode: &'static str,
        /// Bytes (receive side).
        byte_len: u32,
        /// Immediate data, if it carried any.
        imm: Option<u32>,
    },
    /// libfabric: a buffer was registered (`fi_mr_reg`).
    FabricMr {
        /// Its address.
        addr: u64,
        /// Its length.
        len: u64,
        /// The key a peer names it by.
        key: u64,
        /// Whether peers may write it.
        remote: bool,
    },
    /// libfabric: a peer went into the address vector (`fi_av_insert`).
    FabricPeer {
        /// The `fi_addr_t` it got.
        fi_addr: u64,
        /// Its address as the provider prints it.
        address: String,
    },
    /// libfabric: an operation was posted (`fi_writemsg`, `fi_send`, `fi_recv`).
    FabricPost {
        /// The call's name.
        call: &'static str,
        /// The operation's id (its completion carries it).
        op: u64,
        /// The peer's `fi_addr_t` (sends and writes).
        dest: Option<u64>,
        /// Bytes (a receive: the room).
        len: u64,
        /// Remote address (writes).
        remote_addr: u64,
        /// Remote region's key (writes).
        key: u64,
        /// Remote CQ data put on a write.
        data: Option<u64>,
        /// The flags passed.
        flags: u64,
    },
    /// libfabric: a CQ entry was read.
    FabricCompletion {
        /// The operation it completes; None on the target of a peer's write.
        op: Option<u64>,
        /// The entry's flags.
        flags: u64,
        /// The entry's length.
        len: u64,
        /// Remote CQ data it carries.
        data: Option<u64>,
    },
    /// libfabric: an error entry was read.
    FabricError {
        /// The operation it fails, when known.
        op: Option<u64>,
        /// libfabric's error number.
        err: i32,
        /// The provider's error number.
        prov_errno: i32,
    },
    /// The side's verdict.
    Verify {
        /// Whether the bytes matched.
        verified: bool,
        /// What was checked.
        detail: String,
    },
}

/// One recorded event.
#[derive(Debug, Clone)]
pub struct Event {
    /// [`now_ns`] when it happened.
    pub t_ns: u64,
    /// Index of the QP in the link (0 for connection-level events).
    pub qp: u32,
    /// What.
    pub what: What,
}

/// The ring of one side.
#[derive(Debug)]
pub struct Tracer {
    ring: Vec<Event>,
    capacity: usize,
    // Where the next event goes once the ring is full (the oldest one).
    next: usize,
    dropped: u64,
    sample_every: u64,
    posts_seen: u64,
    completions_seen: u64,
}

impl Tracer {
    /// A tracer for a run of `workload` with `opts`, or None when no trace was asked for.
    pub fn for_run(opts: Option<&TraceOptions>, workload: &str) -> Option<Box<Tracer>> {
        let opts = opts?;
        // A larger ring is refused by the request's check; the bound stays
        // here for the memory's sake.
        let capacity = match opts.max_events {
            0 => DEFAULT_TRACE_EVENTS,
            n => n.min(MAX_TRACE_EVENTS),
        } as usize;
        let sample_every = match opts.sample_every {
            0 if workload.ends_with("-bw") || workload.ends_with("-lat") => DEFAULT_LOOP_SAMPLING,
            0 => 1,
            k => k,
        };
        Some(Box::new(Tracer::new(capacity, sample_every)))
    }

    /// A ring of `capacity` events recording every `sample_every`-th post and completion.
    pub fn new(capacity: usize, sample_every: u32) -> Tracer {
        Tracer {
            ring: Vec::with_capacity(capacity.max(1)),
            capacity: capacity.max(1),
            next: 0,
            dropped: 0,
            sample_every: u64::from(sample_every.max(1)),
            posts_seen: 0,
            completions_seen: 0,
        }
    }

    /// Records `what` on QP `qp` now.
    pub fn record(&mut self, qp: u32, what: What) {
        self.record_at(now_ns(), qp, what);
    }

    /// Records `what` on QP `qp` at `t_ns` (an event noticed before the tracer could be reached).
    pub fn record_at(&mut self, t_ns: u64, qp: u32, what: What) {
        let event = Event { t_ns, qp, what };
        if self.ring.len() < self.capacity {
            self.ring.push(event);
        } else {
            self.ring[self.next] = event;
            self.next = (self.next + 1) % self.capacity;
            self.dropped += 1;
        }
    }

    /// Whether the next posted work request is one to record (every k-th).
    pub fn sample_post(&mut self) -> bool {
        self.posts_seen += 1;
        (self.posts_seen - 1).is_multiple_of(self.sample_every)
    }

    /// Whether the next completion is one to record (every k-th).
    pub fn sample_completion(&mut self) -> bool {
        self.completions_seen += 1;
        (self.completions_seen - 1).is_multiple_of(self.sample_every)
    }

    /// The events, oldest first.
    pub fn events(&self) -> impl Iterator<Item = &Event> {
        let (newer, older) = self.ring.split_at(self.next);
        older.iter().chain(newer.iter())
    }

    /// Events that fell out of the ring.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The trace for the result, with the measured cost of recording one event here.
    pub fn into_proto(self) -> Trace {
        let events = self.events().map(to_proto).collect();
        Trace {
            events,
            dropped: self.dropped,
            capacity: self.capacity as u32,
            sample_every: self.sample_every as u32,
            record_cost_ns: measure_record_cost(),
        }
    }
}

/// Nanoseconds one data-path event costs to record on this node: a
/// scratch ring filled with posts, timed as a whole.
fn measure_record_cost() -> f64 {
    const N: usize = 4096;
    let mut scratch = Tracer::new(N, 1);
    let start = Instant::now();
    for i in 0..N as u64 {
        if scratch.sample_post() {
            scratch.record(
                0,
                What::Post {
                    opcode: "WRITE",
                    wr_id: i,
                    len: 0,
                    remote_addr: 0,
                    rkey: 0,
                    imm: None,
                    signaled: true,
                    inline: false,
                },
            );
        }
    }
    let per_event = start.elapsed().as_nanos() as f64 / N as f64;
    std::hint::black_box(&scratch);
    per_event
}

/// Ends a traced side of session `session_id`: records its verdict and
/// hands the trace to its result; a side that failed records why and keeps
/// its trace for [`take_failed`] (the controller's TakeTrace).
pub fn attach<E: std::fmt::Display>(mut tracer: Tracer, result: &mut Result<SideResult, E>, session_id: &str) {
    match result {
        Ok(r) => {
            tracer.record(
                0,
                What::Verify {
                    verified: r.verified,
                    detail: r.verify_detail.clone(),
                },
            );
            r.trace = Some(tracer.into_proto());
        }
        Err(e) => {
            let error = e.to_string();
            tracer.record(
                0,
                What::Verify {
                    verified: false,
                    detail: format!("side failed: {error}"),
                },
            );
            keep_failed(session_id, error, tracer.into_proto());
        }
    }
}

/// Failed sides' traces kept for the controller; the newest few only (a
/// controller that never asks must not make the agent grow). Process-wide
/// because the session thread that fails outlives the RPC that started it.
static FAILED: Mutex<VecDeque<FailedTrace>> = Mutex::new(VecDeque::new());
/// How many failed sides' traces are kept.
const FAILED_KEPT: usize = 4;

/// A failed side's trace and why it failed.
#[derive(Debug, Clone)]
pub struct FailedTrace {
    /// The session.
    pub session_id: String,
    /// The side's error.
    pub error: String,
    /// What it recorded up to the error.
    pub trace: Trace,
}

fn failed() -> std::sync::MutexGuard<'static, VecDeque<FailedTrace>> {
    FAILED.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn keep_failed(session_id: &str, error: String, trace: Trace) {
    let mut kept = failed();
    if kept.len() == FAILED_KEPT {
        kept.pop_front();
    }
    kept.push_back(FailedTrace {
        session_id: session_id.to_string(),
        error,
        trace,
    });
}

/// Takes the kept trace of session `session_id`'s failed side, if any.
pub fn take_failed(session_id: &str) -> Option<FailedTrace> {
    let mut kept = failed();
    let at = kept.iter().position(|f| f.session_id == session_id)?;
    kept.remove(at)
}

fn to_proto(e: &Event) -> TraceEvent {
    let mut args = HashMap::new();
    let mut arg = |k: &str, v: String| {
        args.insert(k.to_string(), v);
    };
    let (kind, name) = match &e.what {
        What::Cm {
            name,
            status,
            private_data,
        } => {
            arg("status", status.to_string());
            arg("private_data_len", private_data.to_string());
            ("cm", name.clone())
        }
        What::Qp { state, attrs } => {
            for pair in attrs.split_whitespace() {
                if let Some((k, v)) = pair.split_once('=') {
                    arg(k, v.to_string());
                }
            }
            ("qp", state.clone())
        }
        What::Mr {
            addr,
            len,
            lkey,
            rkey,
            remote,
        } => {
            arg("addr", format!("{addr:#x}"));
            arg("len", len.to_string());
            arg("lkey", format!("{lkey:#x}"));
            arg("rkey", format!("{rkey:#x}"));
            let access = if *remote {
                "LOCAL_WRITE|REMOTE_READ|REMOTE_WRITE|REMOTE_ATOMIC"
            } else {
                "LOCAL_WRITE"
            };
            arg("access", access.to_string());
            ("mr", "reg_mr".to_string())
        }
        What::Blob { sent, addr, rkey, len } => {
            arg("addr", format!("{addr:#x}"));
            arg("rkey", format!("{rkey:#x}"));
            arg("len", len.to_string());
            let kind = if *sent { "blob_sent" } else { "blob_received" };
            (kind, "capability {addr, rkey, len}".to_string())
        }
        What::Post {
            opcode,
            wr_id,
            len,
            remote_addr,
            rkey,
            imm,
            signaled,
            inline,
        } => {
            arg("wr_id", format!("{wr_id:#x}"));
            arg("len", len.to_string());
            if *rkey != 0 || *remote_addr != 0 {
                arg("remote_addr", format!("{remote_addr:#x}"));
                arg("rkey", format!("{rkey:#x}"));
            }
            if let Some(imm) = imm {
                arg("imm", format!("{imm:#x}"));
            }
            arg("signaled", signaled.to_string());
            arg("inline", inline.to_string());
            ("post", opcode.to_string())
        }
        What::PostRecv { wr_id, len } => {
            arg("wr_id", format!("{wr_id:#x}"));
            arg("len", len.to_string());
            ("post_recv", "RECV".to_string())
        }
        What::Completion {
            wr_id,
            status,
            opcode,
            byte_len,
            imm,
        } => {
            arg("wr_id", format!("{wr_id:#x}"));
            arg("status", status.to_string());
            arg("byte_len", byte_len.to_string());
            if let Some(imm) = imm {
                arg("imm", format!("{imm:#x}"));
            }
            ("completion", opcode.to_string())
        }
        What::FabricMr { addr, len, key, remote } => {
            arg("addr", format!("{addr:#x}"));
            arg("len", len.to_string());
            arg("key", format!("{key:#x}"));
            let access = if *remote {
                "FI_READ|FI_WRITE|FI_SEND|FI_RECV|FI_REMOTE_READ|FI_REMOTE_WRITE"
            } else {
                "FI_READ|FI_WRITE|FI_SEND|FI_RECV"
            };
            arg("access", access.to_string());
            ("mr", "fi_mr_reg".to_string())
        }
        What::FabricPeer { fi_addr, address } => {
            arg("fi_addr", fi_addr.to_string());
            arg("address", address.clone());
            ("av", "fi_av_insert".to_string())
        }
        What::FabricPost {
            call,
            op,
            dest,
            len,
            remote_addr,
            key,
            data,
            flags,
        } => {
            arg("wr_id", format!("{op:#x}"));
            if let Some(dest) = dest {
                arg("dest", dest.to_string());
            }
            arg("len", len.to_string());
            if *key != 0 || *remote_addr != 0 {
                arg("remote_addr", format!("{remote_addr:#x}"));
                arg("key", format!("{key:#x}"));
            }
            if let Some(data) = data {
                arg("cq_data", format!("{data:#x}"));
            }
            if *flags != 0 {
                arg("flags", fabric::observe::flag_names(*flags));
            }
            // Every operation of a fabric endpoint asks for its CQ entry.
            arg("signaled", "true".to_string());
            let kind = if *call == "fi_recv" { "post_recv" } else { "post" };
            (kind, call.to_string())
        }
        What::FabricCompletion { op, flags, len, data } => {
            if let Some(op) = op {
                arg("wr_id", format!("{op:#x}"));
            }
            arg("flags", fabric::observe::flag_names(*flags));
            arg("byte_len", len.to_string());
            if let Some(data) = data {
                arg("cq_data", format!("{data:#x}"));
            }
            ("completion", fabric::observe::completion_name(*flags).to_string())
        }
        What::FabricError { op, err, prov_errno } => {
            if let Some(op) = op {
                arg("wr_id", format!("{op:#x}"));
            }
            arg(
                "status",
                format!("error {err}: {}", std::io::Error::from_raw_os_error(*err)),
            );
            arg("prov_errno", prov_errno.to_string());
            ("completion", "fi_cq_readerr".to_string())
        }
        What::Verify { verified, detail } => {
            arg("verified", verified.to_string());
            arg("detail", detail.clone());
            (
                "verify",
                if *verified { "verified" } else { "NOT verified" }.to_string(),
            )
        }
    };
    TraceEvent {
        t_ns: e.t_ns,
        qp: e.qp,
        kind: kind.to_string(),
        name,
        args,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(tr: &mut Tracer, i: u64) {
        tr.record_at(i, 0, What::PostRecv { wr_id: i, len: 0 });
    }

    #[test]
    fn ring_keeps_the_newest_and_counts_the_dropped() {
        let mut tr = Tracer::new(4, 1);
        for i in 0..10 {
            note(&mut tr, i);
        }
        let kept: Vec<u64> = tr.events().map(|e| e.t_ns).collect();
        assert_eq!(kept, vec![6, 7, 8, 9]);
        assert_eq!(tr.dropped(), 6);
        let proto = tr.into_proto();
        assert_eq!(proto.events.len(), 4);
        assert_eq!(proto.events[0].args["wr_id"], "0x6");
        assert_eq!(proto.dropped, 6);
        assert!(proto.record_cost_ns > 0.0);
    }

    #[test]
    fn a_failed_side_keeps_its_trace_for_the_controller_once() {
        let mut tr = Tracer::new(8, 1);
        note(&mut tr, 1);
        let mut result: Result<SideResult, String> = Err("WRITE completion failed".into());
        attach(tr, &mut result, "session-a");
        assert!(take_failed("session-b").is_none());
        let kept = take_failed("session-a").expect("kept");
        assert_eq!(kept.error, "WRITE completion failed");
        let last = kept.trace.events.last().expect("the verdict");
        assert_eq!(
            (last.kind.as_str(), last.args["verified"].as_str()),
            ("verify", "false")
        );
        assert!(last.args["detail"].contains("side failed: WRITE completion failed"));
        assert!(take_failed("session-a").is_none(), "taken once");
        // Only the newest few are kept.
        for i in 0..FAILED_KEPT + 2 {
            let mut result: Result<SideResult, String> = Err("x".into());
            attach(Tracer::new(1, 1), &mut result, &format!("s{i}"));
        }
        assert!(take_failed("s0").is_none() && take_failed("s1").is_none());
        assert!(take_failed(&format!("s{}", FAILED_KEPT + 1)).is_some());
    }

    #[test]
    fn samples_every_kth_post_starting_with_the_first() {
        let mut tr = Tracer::new(16, 3);
        let picked: Vec<bool> = (0..7).map(|_| tr.sample_post()).collect();
        assert_eq!(picked, vec![true, false, false, true, false, false, true]);
        let opts = TraceOptions::default();
        assert_eq!(Tracer::for_run(Some(&opts), "write-bw").unwrap().sample_every, 64);
        assert_eq!(Tracer::for_run(Some(&opts), "write-read").unwrap().sample_every, 1);
        assert!(Tracer::for_run(None, "write-read").is_none());
    }
}
