//! One agent call of a run, bounded in time, its failures told as the
//! run's errors (the node with its role, and the call).

use std::time::Duration;

use lab_remote::agent::{self, AgentError};

use super::error::RunError;
use crate::lab::LabError;

/// Awaits one agent call of a run for at most `limit` ([`agent::call`]),
/// its errors told as the run's: the node with its role, and the call.
pub(super) async fn within<T>(
    node: &str,
    role: &'static str,
    call: &'static str,
    limit: Duration,
    request: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
) -> Result<T, RunError> {
    agent::call(node, call, limit, request).await.map_err(|e| match e {
        AgentError::Rpc { node, status } => RunError::Agent {
            node,
            role,
            status,
            hint: String::new(),
        },
        AgentError::Deadline { node, call, waited_s } => RunError::Timeout {
            node,
            role,
            call,
            waited_s,
        },
        other => RunError::Lab(LabError::Agent(other)),
    })
}
