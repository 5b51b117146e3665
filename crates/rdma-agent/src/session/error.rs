//! Why a session failed: one enum for every kind of session, turned into a
//! gRPC status in one place (the service).

use std::time::Duration;

use crate::validate::ValidationError;
use crate::verbs::{CmError, LinkError};

/// Why a session failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The request was refused before touching RDMA.
    #[error(transparent)]
    Invalid(#[from] ValidationError),
    /// Something in the request does not fit this node (e.g. no RDMA device for the address).
    #[error("{0}")]
    Setup(String),
    /// rdma_cm failed.
    #[error("rdma_cm: {0}")]
    Cm(#[from] CmError),
    /// A verbs call failed.
    #[error("verbs: {0}")]
    Link(#[from] LinkError),
    /// A work completion came back with an error status.
    #[error("{op} completion failed: {status} ({meaning}), wr_id={wr_id:#x}, vendor_err={vendor_err:#x}{}",
        if *status == "IBV_WC_WR_FLUSH_ERR" { "; the QP was already in error (the peer's side likely failed first)" } else { "" })]
    Completion {
        /// The operation of the failed request.
        op: &'static str,
        /// IBV_WC_* name.
        status: &'static str,
        /// Its meaning.
        meaning: &'static str,
        /// The request's id.
        wr_id: u64,
        /// Provider's vendor error.
        vendor_err: u32,
    },
    /// A failed completion on the QP to one of several peers (a
    /// collective's rank), with the peer named.
    #[error("{source}, on the QP to {peer}")]
    OnQp {
        /// The peer the QP leads to ("rank 2").
        peer: String,
        /// The completion's error.
        source: Box<SessionError>,
    },
    /// A wait ran past the session's deadline.
    #[error("timed out after {after:?} waiting for {what}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The session timeout.
        after: Duration,
    },
    /// Abort was called.
    #[error("session aborted: {0}")]
    Aborted(String),
    /// The peer broke the protocol (bad private data, unexpected event...).
    #[error("protocol: {0}")]
    Protocol(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completion_errors_name_the_status() {
        let (status, meaning) = crate::verbs::wc_status_name(10);
        let e = SessionError::Completion {
            op: "WRITE",
            status,
            meaning,
            wr_id: 1,
            vendor_err: 0,
        };
        assert!(e
            .to_string()
            .starts_with("WRITE completion failed: IBV_WC_REM_ACCESS_ERR (remote access error), wr_id=0x1"));
    }
}
