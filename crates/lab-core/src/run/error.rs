//! How a run fails: the one error type of `run`, `run --trace` and the
//! collectives, told as the user reads it (the node, its role, the call).

use lab_remote::agent::AgentError;
use lab_results::trace::SideTrace;

use crate::lab::LabError;

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The lab is not usable.
    #[error(transparent)]
    Lab(#[from] LabError),
    /// An agent refused or failed.
    #[error("node `{node}` ({role}): {:?}: {}{hint}", status.code(), status.message())]
    Agent {
        /// The node.
        node: String,
        /// server or client.
        role: &'static str,
        /// What the agent said.
        status: Box<tonic::Status>,
        /// What it means for the lab, where the controller can tell (starts
        /// with a newline; empty otherwise).
        hint: String,
    },
    /// An agent did not answer a call of the run in time.
    #[error("node `{node}` ({role}): rdma-agent did not answer {call} within {waited_s} s; the run was aborted (a stopped or wedged agent? `labctl exec {node} -- ps -o pid,stat,cmd -C rdma-agent`)")]
    Timeout {
        /// The node that did not answer.
        node: String,
        /// server or client.
        role: &'static str,
        /// The call (`NodeInfo`, `Prepare`, `Connect`, `Run`, `Collect`).
        call: &'static str,
        /// Seconds waited.
        waited_s: u64,
    },
    /// One side failed while the other's agent had not answered its call:
    /// the failure, and the silent agent named (the run ends then rather
    /// than at the controller's deadline).
    #[error("{failed}\n  node `{node}` ({role}): rdma-agent had not answered {call} {waited_s} s into the run; the run was aborted (a stopped or wedged agent? `labctl exec {node} -- ps -o pid,stat,cmd -C rdma-agent`; state T means stopped)")]
    SilentPeer {
        /// The other side's failure.
        failed: Box<RunError>,
        /// The node whose agent was silent.
        node: String,
        /// server or client.
        role: &'static str,
        /// The call it had not answered.
        call: &'static str,
        /// Seconds since the call.
        waited_s: u64,
    },
    /// A verbs workload on a node whose data address is on no RDMA port
    /// (no device, or one bound to another netdev): found in its agent's
    /// NodeInfo before the run starts.
    #[error("node `{node}` ({role}): {evidence}; a verbs workload needs an RDMA port that holds the node's data address.\n  fix: {fix}\n  `labctl doctor` checks this and the rest of every node's fabric")]
    NoDataPath {
        /// The node.
        node: String,
        /// server or client.
        role: &'static str,
        /// Every port and GID its agent sees.
        evidence: String,
        /// What to do.
        fix: &'static str,
    },
    /// A verbs workload whose data address is on a device of another kind
    /// than the lab's fabric (a NIC on an rxe lab): no silent fallback.
    #[error("node `{node}` ({role}): {evidence}.\n  fix: {fix}\n  `labctl doctor` checks this (device) on every node")]
    WrongDevice {
        /// The node.
        node: String,
        /// server or client.
        role: &'static str,
        /// The device, its kind and the fabric's.
        evidence: String,
        /// What to do.
        fix: &'static str,
    },
    /// The workload name is not known.
    #[error("unknown workload `{name}`; supported: {}", workload_catalogue::names().collect::<Vec<_>>().join(", "))]
    UnknownWorkload {
        /// The name asked for.
        name: String,
    },
    /// The result could not be saved.
    #[error("saving the run: {0}")]
    Save(String),
    /// A collective's nodes or root that do not fit the lab (bad input).
    #[error("{detail}")]
    BadRanks {
        /// What does not fit, and what would.
        detail: String,
    },
    /// What each rank of a failed collective said (one line per rank).
    #[error("{detail}")]
    Ranks {
        /// What went wrong, rank by rank.
        detail: String,
    },
    /// A traced run failed: the error, and what every side recorded up to it.
    #[error("{error}")]
    Traced {
        /// What failed.
        error: Box<RunError>,
        /// The run's session id.
        run_id: String,
        /// Every side's trace (a side that kept none has an empty one).
        traces: Vec<SideTrace>,
    },
}

impl From<AgentError> for RunError {
    fn from(e: AgentError) -> Self {
        RunError::Lab(LabError::Agent(e))
    }
}
