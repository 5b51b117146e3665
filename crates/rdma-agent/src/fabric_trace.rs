//! The trace of a libfabric (`fabric-*`) side: what its
//! [`fabric::Endpoint`] reports through [`fabric::observe`] — registrations,
//! `fi_av_insert`, each `fi_writemsg` / `fi_send` / `fi_recv` posted and each
//! CQ entry with its flags and remote CQ data — recorded in the same ring as
//! a verbs side's events ([`crate::trace`]), plus the CONNECT message's
//! regions as the capability blob and the verdict.
//!
//! The endpoint calls its observer from the session thread only, so the
//! mutex here is never contended; it is there because the endpoint (and so
//! its observer) must be `Send`.

use std::sync::{Arc, Mutex, MutexGuard};

use agent_proto::v1::{SideResult, WorkloadParams};
use fabric::observe::{Event, Observer};

use crate::session::SessionError;
use crate::trace::{Tracer, What};

/// A fabric side's trace ring, shared with its endpoint's observer.
#[derive(Debug, Clone)]
pub struct FabricTrace(Arc<Mutex<Tracer>>);

impl FabricTrace {
    /// The trace of a run with `params`, or None when no trace was asked for.
    pub fn for_run(params: &WorkloadParams) -> Option<FabricTrace> {
        Tracer::for_run(params.trace.as_ref(), &params.workload).map(|t| FabricTrace(Arc::new(Mutex::new(*t))))
    }

    fn ring(&self) -> MutexGuard<'_, Tracer> {
        // A panic while recording leaves a ring that is still well formed.
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The observer to open the side's endpoint with.
    pub fn observer(&self) -> Observer {
        let trace = self.clone();
        Box::new(move |event: &Event<'_>| trace.note(event))
    }

    fn note(&self, event: &Event<'_>) {
        let mut ring = self.ring();
        let what = match *event {
            Event::Registered { addr, len, key, remote } => What::FabricMr { addr, len, key, remote },
            Event::PeerInserted { fi_addr, address } => What::FabricPeer {
                fi_addr,
                address: address.to_string(),
            },
            Event::Posted {
                call,
                op,
                dest,
                len,
                remote_addr,
                key,
                data,
                flags,
            } => {
                if !ring.sample_post() {
                    return;
                }
                What::FabricPost {
                    call: call.name(),
                    op,
                    dest,
                    len,
                    remote_addr,
                    key,
                    data,
                    flags,
                }
            }
            Event::Completed { op, flags, len, data } => {
                if !ring.sample_completion() {
                    return;
                }
                What::FabricCompletion { op, flags, len, data }
            }
            Event::Failed { op, err, prov_errno } => What::FabricError { op, err, prov_errno },
        };
        ring.record(0, what);
    }

    /// Records one region of the CONNECT message this side sent or received:
    /// fabric-write's capability blob.
    pub fn blob(&self, sent: bool, mr: &fabric::RemoteMr) {
        self.ring().record(
            0,
            What::Blob {
                sent,
                addr: mr.addr,
                rkey: mr.key,
                len: mr.size,
            },
        );
    }

    /// Ends the side of session `session_id`: records its verdict and hands
    /// the trace to its result, or keeps it for TakeTrace if it failed.
    pub fn finish(&self, result: &mut Result<SideResult, SessionError>, session_id: &str) {
        let mut ring = self.ring();
        let tracer = std::mem::replace(&mut *ring, Tracer::new(1, 1));
        crate::trace::attach(tracer, result, session_id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use agent_proto::v1::TraceOptions;
    use fabric::observe::Call;

    fn traced(workload: &str) -> FabricTrace {
        let params = WorkloadParams {
            workload: workload.into(),
            trace: Some(TraceOptions::default()),
            ..Default::default()
        };
        FabricTrace::for_run(&params).expect("a trace was asked for")
    }

    #[test]
    fn records_posts_completions_and_the_blob_with_libfabric_names() {
        let trace = traced("fabric-write");
        let mut observe = trace.observer();
        observe(&Event::Registered {
            addr: 0x7f00_0000_0000,
            len: 16 << 20,
            key: 0x2a,
            remote: true,
        });
        observe(&Event::Posted {
            call: Call::WriteMsg,
            op: 7,
            dest: Some(3),
            len: 4096,
            remote_addr: 0x7f00_0000_1000,
            key: 0x2a,
            data: Some(0x99),
            flags: u64::from(fabric_sys::FI_COMPLETION | fabric_sys::FI_REMOTE_CQ_DATA),
        });
        observe(&Event::Completed {
            op: None,
            flags: u64::from(fabric_sys::FI_RMA | fabric_sys::FI_REMOTE_WRITE | fabric_sys::FI_REMOTE_CQ_DATA),
            len: 0,
            data: Some(0x99),
        });
        trace.blob(
            true,
            &fabric::RemoteMr {
                addr: 0x7f00_0000_0000,
                size: 16 << 20,
                key: 0x2a,
            },
        );
        let mut result = Ok(SideResult {
            verified: true,
            verify_detail: "all pages".into(),
            ..Default::default()
        });
        trace.finish(&mut result, "s1");
        let events = result.unwrap().trace.expect("attached").events;
        let kinds: Vec<(&str, &str)> = events.iter().map(|e| (e.kind.as_str(), e.name.as_str())).collect();
        assert_eq!(
            kinds,
            vec![
                ("mr", "fi_mr_reg"),
                ("post", "fi_writemsg"),
                ("completion", "FI_REMOTE_WRITE"),
                ("blob_sent", "capability {addr, rkey, len}"),
                ("verify", "verified"),
            ]
        );
        assert_eq!(events[0].args["key"], "0x2a");
        assert_eq!(events[1].args["wr_id"], "0x7");
        assert_eq!(events[1].args["dest"], "3", "the peer's fi_addr");
        assert_eq!(events[1].args["remote_addr"], "0x7f0000001000");
        assert_eq!(events[1].args["cq_data"], "0x99");
        assert_eq!(events[1].args["flags"], "FI_REMOTE_CQ_DATA|FI_COMPLETION");
        assert_eq!(events[2].args["cq_data"], "0x99");
        assert!(
            !events[2].args.contains_key("wr_id"),
            "a target entry has no op of ours"
        );
        assert_eq!(events[3].args["rkey"], "0x2a");
    }

    #[test]
    fn bandwidth_loops_are_sampled() {
        let trace = traced("fabric-bw");
        let mut observe = trace.observer();
        for op in 0..128 {
            observe(&Event::Posted {
                call: Call::WriteMsg,
                op,
                dest: Some(0),
                len: 64,
                remote_addr: 0,
                key: 1,
                data: None,
                flags: 0,
            });
        }
        let mut result = Ok(SideResult::default());
        trace.finish(&mut result, "s1");
        let trace = result.unwrap().trace.expect("attached");
        assert_eq!(trace.sample_every, 64);
        assert_eq!(trace.events.iter().filter(|e| e.kind == "post").count(), 2);
    }
}
