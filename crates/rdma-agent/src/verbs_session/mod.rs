//! The verbs sessions: a thread per side that sets up the connection
//! ([`rdma_cm_connect`] or [`oob_connect`], per `params.cm`) and runs the
//! workload it was given on it.
//!
//! This module sits above both [`crate::session`] (the plumbing every kind
//! of session shares, and [`Side`](crate::session::Side), the workload's
//! view) and [`crate::workload`] (the workloads, which use that view): it
//! hands a workload its side. Neither of the two knows this module.

pub mod oob_connect;
pub mod rdma_cm_connect;
pub mod rdma_cm_ranks;
mod setup;

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use agent_proto::v1::{CmMode, Endpoint, Role, SideResult};
use tokio::sync::oneshot;

use crate::session::{finish_side, Command, ProgressSink, SessionError, SessionHandle, SessionSpec};
use crate::workload::Workload;

/// Starts a session thread: Prepare (either role), or a rdma_cm client's Run
/// (`run` carries the server endpoint and progress sink). The returned
/// receiver yields this side's endpoint once it is ready.
pub fn spawn(
    spec: SessionSpec,
    workload: &'static dyn Workload,
    run: Option<(Endpoint, ProgressSink)>,
) -> Result<(SessionHandle, oneshot::Receiver<Result<Endpoint, SessionError>>), SessionError> {
    let (handle, ends) = SessionHandle::new(spec.role, spec.params.cm());
    let (cancel, cmd_rx, result_tx) = (ends.cancel, ends.commands, ends.result);
    let (endpoint_tx, endpoint_rx) = oneshot::channel();
    let name = format!("session-{}", spec.id.chars().take(8).collect::<String>());
    std::thread::Builder::new()
        .name(name)
        .spawn(move || {
            let span =
                tracing::info_span!("session", id = %spec.id, role = ?spec.role, workload = %spec.params.workload);
            let _enter = span.enter();
            // A rdma_cm client's Run publishes no endpoint; its errors go to the result.
            let mut endpoint_tx = if run.is_some() { None } else { Some(endpoint_tx) };
            let outcome = run_side(&spec, workload, &cancel, cmd_rx, &mut endpoint_tx, run);
            finish_side(outcome, endpoint_tx, result_tx);
        })
        .map_err(|e| SessionError::Setup(format!("spawning the session thread: {e}")))?;
    Ok((handle, endpoint_rx))
}

fn run_side(
    spec: &SessionSpec,
    workload: &'static dyn Workload,
    cancel: &Arc<AtomicBool>,
    cmd_rx: std::sync::mpsc::Receiver<Command>,
    endpoint_tx: &mut Option<oneshot::Sender<Result<Endpoint, SessionError>>>,
    run: Option<(Endpoint, ProgressSink)>,
) -> Result<SideResult, SessionError> {
    let deadline = Instant::now() + spec.timeout();
    match (spec.params.cm(), spec.role) {
        (CmMode::RdmaCm, _) if spec.params.collective.is_some() => {
            rdma_cm_ranks::rank(spec, workload, cancel, deadline, cmd_rx, endpoint_tx)
        }
        (CmMode::RdmaCm, Role::Server) => rdma_cm_connect::server(spec, workload, cancel, deadline, endpoint_tx),
        (CmMode::RdmaCm, Role::Client) => {
            let (peer, sink) = run.ok_or_else(|| {
                SessionError::Setup("rdma_cm clients are not prepared: call Run with the server endpoint".into())
            })?;
            rdma_cm_connect::client(spec, workload, cancel, deadline, &peer, sink)
        }
        (CmMode::Oob, role) => oob_connect::side(spec, role, workload, cancel, deadline, cmd_rx, endpoint_tx),
    }
}
