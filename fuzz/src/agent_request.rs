//! The agent's request path before any RDMA resource is touched: arbitrary
//! bytes decoded as a protobuf `WorkloadParams` (the wire path, prost), then
//! `registry::check` (the real workload registry, the catalogue's rules, pinned limits),
//! and for a request that passes, the steps the service and the session
//! thread take next without hardware: fabric-write's fill message, the verbs
//! workload's queue depths / iterations / size, and the session deadline
//! (`Instant::now() + spec.timeout()`, as `session.rs` computes it).
//! The same bytes also go through the capability blob decoder (the peer's
//! rdma_cm private data). Errors are fine; a panic is a bug.
//!
//! Shared by the cargo-fuzz target (`fuzz_targets/agent_request.rs`) and
//! the corpus replay the test suite runs on stable Rust
//! (`crates/rdma-agent/tests/in_process/fuzz_corpus.rs`).
use std::time::Instant;

use agent_proto::v1::{Role, WorkloadParams};
use fabric::endpoint::MSG_SLOT_SIZE;
use fabric::write::Message as FabricMessage;
use prost::Message;
use rdma_agent::registry::{self, Runner};
use rdma_agent::session::{blob, SessionSpec};
use rdma_agent::validate::{self, Limits};
use rdma_agent::{fabric_session, workload};
use workload_catalogue::limits::DEFAULT_MAX_SIZE;

/// Pinned limits: the agent's default with plenty of memory, and a small node
/// where 1/4 of MemAvailable is the limit.
const LIMITS: [Limits; 2] = [
    Limits {
        max_size: DEFAULT_MAX_SIZE,
        mem_available: Some(1 << 40),
    },
    Limits {
        max_size: DEFAULT_MAX_SIZE,
        mem_available: Some(16 << 20),
    },
];

/// One input: errors are fine, a panic is a finding.
pub fn run(data: &[u8]) {
    let _ = blob::decode(data);

    let Ok(params) = WorkloadParams::decode(data) else {
        return;
    };
    for limits in &LIMITS {
        match registry::check(&params, limits) {
            Ok(runner) => accepted(&params, runner),
            Err(e) => {
                let _ = e.to_string();
            }
        }
    }
}

/// What happens to a request that passed validation, short of RDMA.
fn accepted(params: &WorkloadParams, runner: Runner) {
    let _ = (params.cm(), params.completion());
    // The timed loops' stop time, as the workloads compute it.
    let _stop_at = Instant::now() + validate::duration(params);
    match runner {
        Runner::Fabric(kind) => {
            if kind == fabric_session::Kind::Write {
                // The client's one control message must fit a message slot.
                let fill = FabricMessage::RandomFill(fabric_session::random_fill(params, 1)).encode();
                assert!(fill.len() <= MSG_SLOT_SIZE, "RandomFill of {} B", fill.len());
            }
            let _ = fabric_session::provider(params);
        }
        Runner::Tcp => {
            let _ = validate::bulk_total(params);
        }
        Runner::FabricCollective { op, .. } => {
            // The rank's one region, as Prepare registers it.
            let (input, exposed) = rdma_agent::workload::collective::region_lens(op, params);
            let _ = input.checked_add(exposed).expect("the region's length fits");
            let _ = fabric_session::provider(params);
        }
        Runner::Verbs(w) => {
            let _ = (w.send_queue_depth(params), w.recv_queue_depth(params));
            let _ = workload::iterations(params);
            let _ = workload::size(params);
            let _ = workload::pattern(params);
            let _ = validate::effective_max_size(params);
        }
    }
    for role in [Role::Server, Role::Client] {
        let spec = SessionSpec {
            id: "fuzz".into(),
            proof: agent_proto::auth::AgentSecret::generate().connect_proof(&params.run_nonce),
            params: params.clone(),
            role,
            bind_addr: "10.77.0.1".into(),
        };
        let _deadline = Instant::now() + spec.timeout();
    }
}
