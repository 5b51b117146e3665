//! The gRPC contract between `labctl` and `rdma-agent`, generated from
//! `proto/rdma_agent/v1/agent.proto`, and the one rule both sides apply to
//! every call: it carries the lab's agent secret ([`auth`]).
//!
//! This crate owns the wire contract only; it must not hold workload or
//! orchestration logic.

pub mod auth;

/// Version 1 of the agent API.
#[allow(missing_docs, clippy::all)]
pub mod v1 {
    tonic::include_proto!("rdma_agent.v1");

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
