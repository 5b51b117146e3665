//! The gRPC contract between `labctl` and `rdma-agent`, generated from
//! `proto/rdma_agent/v1/agent.proto`, and the one rule both sides apply to
//! every call: it carries the lab's agent secret ([`auth`]), and the one
//! reading of a `NodeInfo` reply both sides make: where a node's data
//! address lives on either link layer ([`data_path`]).
//!
//! This crate owns the wire contract only; it must not hold workload or
//! orchestration logic.

pub mod auth;
pub mod data_path;
#[cfg(any(test, feature = "test-fixtures"))]
pub mod fixtures;

/// Version 1 of the agent API.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("rdma_agent.v1");

    /// `TraceEvent.name` of a failed verbs completion: its own opcode is not
    /// valid (only wr_id, status, qp_num and vendor_err are, ibv_poll_cq(3)),
    /// so a reader names it after the post it completes.
    pub const FAILED_COMPLETION_OPCODE: &str = "FAILED";

    impl Fault {
        /// The fault's name as `labctl run --inject-fault` and run records spell it.
        pub fn label(self) -> &'static str {
            match self {
                Fault::None => "none",
                Fault::Skip => "skip",
                Fault::Corrupt => "corrupt",
            }
        }
    }
}
