//! labctl's orchestration: from a resolved lab to running nodes, workloads
//! across them, and records of what happened.
//!
//! Data flows one way: labs.yaml (`lab-model`) → resolved nodes → a provider
//! creates the machines (`lab-providers`) → [`provision`] sets up rxe and the
//! agent over SSH (`lab-remote`) → the controller drives the agents → records
//! (`lab-results`), saved in the lab's state directory (`lab-state`).
//!
//! This crate owns the verbs that act on a lab: `up`, `status`, `exec`,
//! `cp`, `down` ([`lab`]), `run`, `ci`, `doctor`, `bench`, `bulk`, `impair`, `capture`. It
//! must not parse labs.yaml itself, speak a provider's API, format records
//! for people (the binary does), or hold record types (`lab-results` does).
//!
//! # Layout
//! - [`lab`]: a lab from labs.yaml and its state: `up`, `exec`, `down`.
//! - [`status`]: what a lab looks like now, read from its machines.
//! - [`graph`]: the lab's topology model for `labctl graph`, from the status
//!   (or from labs.yaml alone when the lab is not up).
//! - [`exec`]: one command on several nodes at once.
//! - [`copy`]: files between this machine and nodes (`labctl cp`).
//! - [`facts`]: the lab facts every node gets (`lab.env`, hostfile, `/etc/hosts`)
//!   and the placeholders filled from them.
//! - [`provision`]: rxe setup and agent deployment on a node.
//! - [`params`]: what a user asked for → run options: a
//!   `lab_model::request::WorkloadRequest` (the one type of a run's request,
//!   `labctl run`'s flags and a suite's `workload:` step) becomes the
//!   agents' parameters, with the workload catalogue's defaults.
//! - [`run`]: one workload across two nodes, its record and where it is saved.
//! - [`collective`]: one collective across the lab's nodes, a rank per node.
//! - [`doctor`]: `labctl doctor`: each node's fabric and each pair's data path checked.
//! - [`expect`]: the lab measured against its `expect:` (workload figures, node facts).
//! - [`ci`]: a suite of runs on a lab brought up and torn down for it.
//! - [`bench`]: perftest and our workloads side by side; `up`/`down` timings.
//! - [`bulk`]: the same bytes by RDMA WRITE and by TCP.
//! - [`impair`]: tc netem on a node's data NIC, and the RDMA hardware counters.
//! - [`capture`]: tcpdump on a node's data NIC, the pcap copied home and summarized.
//! - `wall_clock`: a node's wall clock against this machine's (doctor's
//!   `clock` check, and `up` setting a QEMU node's).
//! - [`ssh_client`]: the system ssh's argv and files for `labctl ssh` (as `up` logged in).
#![warn(missing_docs)]

mod agent_memlock;
pub mod bench;
pub mod bulk;
pub mod capture;
pub mod ci;
pub mod collective;
pub mod copy;
mod data_path_missing;
pub mod doctor;
pub mod exec;
pub mod expect;
pub mod facts;
pub mod graph;
pub mod impair;
pub mod lab;
pub mod params;
pub mod provision;
mod roce_port_probe;
pub mod run;
pub mod ssh_client;
pub mod status;
mod wall_clock;

/// The agent contract, re-exported for the binary.
pub use agent_proto;
