//! `labctl impair`: packet loss, delay, jitter, rate limits, reordering and
//! duplication on a node's data NIC with tc netem, read back from the node
//! itself; and the RDMA device's hardware counters, which show what an
//! impairment costs (Go-Back-N retransmissions on rxe).
//!
//! netem acts on the packets a NIC *sends*: impairing `client` delays or
//! drops what the client transmits (its requests, or its ACKs and READ
//! responses), not what it receives.
//!
//! One concern a file: `netem` is the configuration as text (parse, check,
//! render, read back), `nic` finds the NIC and whether netem reaches its
//! RDMA, `apply` sets and clears it on a node, `counters` reads the RDMA
//! device's hardware counters; `error` is what they all fail with.

mod apply;
mod counters;
mod error;
mod netem;
mod nic;

pub use apply::{active, check_host_qdisc, clear, root_qdisc, set, ImpairOutcome};
pub use counters::{counter_delta, parse_counters, read_counters, retransmission_work, RETRANSMISSION_COUNTERS};
pub use error::ImpairError;
pub use netem::{parse_pct, parse_rate, parse_tc_show, parse_time, Netem};
pub use nic::{data_nic, rdma_sender, rdma_sender_of, RdmaSender};

pub use lab_results::run::Counters;
