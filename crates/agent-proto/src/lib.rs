//! The gRPC contract between `labctl` and `rdma-agent`, generated from
//! `proto/rdma_agent/v1/agent.proto`.
#![allow(missing_docs, clippy::all)]

/// Version 1 of the agent API.
pub mod v1 {
    tonic::include_proto!("rdma_agent.v1");
}
