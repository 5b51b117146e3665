//! labctl's library: from `labs.yaml` to a running RDMA lab and back.
//!
//! Data flows one way: labs.yaml ([`model`]) → resolved nodes → a
//! [`provider`] creates the machines → [`provision`] sets up rxe and the agent
//! over [`ssh`] → the controller drives the agents ([`agent`]) → results.
//!
//! # Layout
//! - [`model`]: labs.yaml types, defaults and validation with file:line:column errors.
//! - [`state`]: the lab's state directory, atomic writes, the per-lab lock.
//! - [`image`]: the node image recipe and its cache.
//! - [`provider`]: the `Provider` trait and its implementations (`qemu`, `multipass`).
//! - [`ssh`]: russh sessions with pinned host keys, exec, SFTP, direct-tcpip.
//! - [`provision`]: rxe setup and agent deployment on a node.
//! - [`agent`]: the gRPC client to a node's rdma-agent, tunnelled over SSH.
//! - [`lab`]: `up`, `status`, `exec`, `down`.
//! - [`run`]: `run`: one workload across two nodes, its record and where it is saved.
//! - [`bulk`]: `bulk`: the same bytes by RDMA WRITE and by TCP, side by side, with CSV and charts.
//! - [`report`]: `report`: saved runs and benches listed, shown, compared, exported as CSV, plotted.
//! - [`ci`]: `ci`: a suite of runs on a lab brought up and torn down for it, JUnit and JSON reports.
//! - [`impair`]: `impair`: tc netem on a node's data NIC, and the RDMA hardware counters.
//! - [`capture`]: `capture`: tcpdump on a node's data NIC, the pcap copied home and summarized.
//! - [`progress`]: how long steps report progress.
#![warn(missing_docs)]

pub mod agent;
pub mod bench;
pub mod bulk;
pub mod capture;
pub mod ci;

/// The agent contract, re-exported for the binary.
pub use agent_proto;

pub mod image;
pub mod impair;
pub mod lab;
pub mod model;
pub mod plot;
pub mod progress;
pub mod provider;
pub mod provision;
pub mod report;
pub mod run;
pub mod ssh;
pub mod state;
pub mod text;
