//! `rdma-agent`: the daemon that runs on every lab node, sets up RDMA
//! resources for a workload session, moves and verifies bytes, measures, and
//! reports back to `labctl` over gRPC (`proto/rdma_agent/v1/agent.proto`).
//!
//! # Layout
//!
//! - [`service`]: the tonic `Agent` service, the session table, and the one
//!   place where crate errors become `tonic::Status`.
//! - [`node_info`]: what the node has (kernel, rdma-core, devices, ports, GIDs),
//!   read from `/proc` and `/sys/class/infiniband`.
//! - [`registry`]: the dispatch table: each workload of the catalogue
//!   (`workload-catalogue`: names, defaults, faults, options) and the code
//!   that runs it here (verbs, libfabric, TCP); [`validate`]: the request
//!   checks every workload shares and the catalogue entry's, then each
//!   workload's own ([`validate::OwnCheck`]), all before any RDMA resource is
//!   touched.
//! - [`session`]: what every session shares (request, handle, thread
//!   plumbing, errors) and [`session::Side`], what a verbs workload sees of
//!   its side; [`workload`]: the verbs `Workload` trait and one module per
//!   workload family, on that view; [`verbs_session`], above both: one side
//!   of a verbs session on its own thread (connect with rdma_cm or out of
//!   band, run the workload, verify);
//!   [`wr_id`] names work requests; [`plan`] reads a measured run's sizes,
//!   stop and depth from its parameters, for verbs and libfabric alike.
//! - [`fabric_session`]: the libfabric workloads (`fabric-write`, `fabric-bw`,
//!   `fabric-lat`), one side per thread, on the safe `fabric` crate (no
//!   `unsafe` here); [`fabric_trace`] records what their endpoints do for
//!   `run --trace`.
//! - [`tcp_session`]: `bulk-tcp`, the TCP counterpart of `bulk-rdma` (same
//!   bytes, same measurements, a plain kernel socket); [`timeline`] keeps a
//!   transfer's progress over time for both.
//! - [`verbs`]: the only module with `unsafe`: our rdma_cm wrapper (private
//!   data on connect/accept, which sideway does not expose) and the data path
//!   (pre-built work request lists, CQ polling, completion channel) on top of
//!   QPs/CQs/MRs created with `sideway`.
//! - [`trace`]: a side's bounded event ring for `labctl run --trace`
//!   (rdma_cm, QP moves, MRs, the blob, posts, completions, the verdict).
//! - [`metrics`], [`pattern`], [`cpu`]: bandwidth/latency math, seeded payload
//!   patterns, and per-thread CPU time.
#![warn(missing_docs)]
#![deny(unsafe_code)]

pub mod cpu;
pub mod fabric_session;
pub mod fabric_trace;
pub mod metrics;
pub mod node_info;
pub mod pattern;
pub mod plan;
pub mod registry;
pub mod service;
pub mod session;
pub mod tcp_session;
pub mod timeline;
pub mod trace;
pub mod validate;
#[allow(unsafe_code)]
pub mod verbs;
pub mod verbs_session;
pub mod workload;
pub mod wr_id;

/// The agent's version as reported by Health and NodeInfo.
pub const AGENT_VERSION: &str = env!("CARGO_PKG_VERSION");
