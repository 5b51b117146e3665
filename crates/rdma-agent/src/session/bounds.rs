//! The limits of a session's waits: its deadline, the timeout it came from
//! (for the message), and the Abort flag; shared by the verbs sides and the
//! TCP sessions.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::error::SessionError;

/// When a session's waits give up.
pub(crate) struct Bounds {
    /// The session's deadline.
    pub deadline: Instant,
    /// The timeout the deadline came from.
    pub timeout: Duration,
    /// Set by Abort.
    pub cancel: Arc<AtomicBool>,
}

impl Bounds {
    /// Fails if the session was aborted or ran out of time; `what` names the wait.
    pub fn check(&self, what: &str) -> Result<(), SessionError> {
        if self.cancel.load(Ordering::Relaxed) {
            return Err(SessionError::Aborted(format!("while waiting for {what}")));
        }
        if Instant::now() >= self.deadline {
            return Err(SessionError::Timeout {
                what: what.to_string(),
                after: self.timeout,
            });
        }
        Ok(())
    }

    /// Time left until the deadline.
    pub fn left(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }
}
