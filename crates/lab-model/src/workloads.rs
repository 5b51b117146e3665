//! The workloads the agents implement, by name: the catalogue labs.yaml,
//! suites and the CLI check names against before anything runs.

/// Workloads the agents implement, for help texts and early errors.
pub const WORKLOADS: &[&str] = &[
    "write-read",
    "write-imm",
    "send-recv",
    "read",
    "atomic",
    "write-bw",
    "read-bw",
    "send-bw",
    "atomic-bw",
    "write-lat",
    "read-lat",
    "send-lat",
    "atomic-lat",
    "fabric-write",
    "fabric-bw",
    "fabric-lat",
    "mr-cache",
    "param-server",
    "inference-ring",
    "bulk-rdma",
    "bulk-tcp",
];

/// Whether a workload runs over libfabric (`fabric-*`: no QP, no rdma_cm; the
/// server's fabric address is relayed from Prepare to Run).
pub fn is_fabric(workload: &str) -> bool {
    workload.starts_with("fabric-")
}
