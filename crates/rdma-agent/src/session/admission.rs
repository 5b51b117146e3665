//! Who a run's server lets in: only the client that opens with the run's
//! connect proof ([`agent_proto::auth::ConnectProof`]). Every transport checks
//! the proof itself (rdma_cm private data, libfabric CONNECT, bulk-tcp's first
//! bytes); this module holds what they share: the log and the count of the
//! connects they refused, and the client's optional wait before it connects.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_proto::v1::{SideResult, WorkloadParams};
use workload_catalogue::limits::MAX_CONNECT_DELAY_MS;

use super::error::SessionError;

/// The fact a server's result carries when it refused anyone: how many, and
/// from where ("2 (10.77.0.2:40112, 10.77.0.2:40114)").
pub const REFUSED_FACT: &str = "refused_connects";

/// The connects a server refused, in arrival order.
#[derive(Debug, Default)]
pub struct Refused {
    peers: Vec<String>,
}

impl Refused {
    /// Logs a refused connect (with the peer's address, for the node's
    /// administrator) and counts it for the result. `why` says what the
    /// connect lacked.
    pub fn refuse(&mut self, transport: &str, peer: &str, why: &str) {
        tracing::warn!(transport, %peer, why, "refused a connect that does not prove it is this run's client");
        self.peers.push(peer.to_string());
    }

    /// Adds the connects `later` refused (a later phase of the same server).
    pub fn extend(&mut self, later: Refused) {
        self.peers.extend(later.peers);
    }

    /// How many were refused.
    pub fn count(&self) -> usize {
        self.peers.len()
    }

    /// The [`REFUSED_FACT`] of a server that refused anyone.
    pub fn fact(&self) -> Option<(String, String)> {
        (!self.peers.is_empty()).then(|| {
            (
                REFUSED_FACT.into(),
                format!("{} ({})", self.peers.len(), self.peers.join(", ")),
            )
        })
    }

    /// Adds [`REFUSED_FACT`] to the server's result when it refused anyone.
    pub fn report(&self, result: &mut SideResult) {
        result.facts.extend(self.fact());
    }
}

/// The client's wait before it connects (`params.connect_delay_ms`), broken
/// off by Abort or the session's deadline.
pub(crate) fn connect_delay(
    params: &WorkloadParams,
    cancel: &AtomicBool,
    deadline: Instant,
) -> Result<(), SessionError> {
    let delay = Duration::from_millis(u64::from(params.connect_delay_ms.min(MAX_CONNECT_DELAY_MS)));
    let until = Instant::now() + delay;
    while Instant::now() < until {
        if cancel.load(Ordering::Relaxed) {
            return Err(SessionError::Aborted("during the connect delay".into()));
        }
        if Instant::now() >= deadline {
            return Err(SessionError::Timeout {
                what: "the end of the connect delay".into(),
                after: delay,
            });
        }
        std::thread::sleep(
            until
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(50)),
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_refused_connects_are_counted_and_named_in_the_result() {
        let mut result = SideResult::default();
        let mut refused = Refused::default();
        refused.report(&mut result);
        assert!(
            !result.facts.contains_key(REFUSED_FACT),
            "no fact when no one was refused"
        );
        refused.refuse("tcp", "10.77.0.2:40112", "no proof");
        refused.refuse("tcp", "10.77.0.9:5", "a wrong proof");
        refused.report(&mut result);
        assert_eq!(refused.count(), 2);
        assert_eq!(result.facts[REFUSED_FACT], "2 (10.77.0.2:40112, 10.77.0.9:5)");
    }

    #[test]
    fn test_the_connect_delay_waits_and_yields_to_abort() {
        let params = WorkloadParams {
            connect_delay_ms: 120,
            ..Default::default()
        };
        let far = Instant::now() + Duration::from_secs(30);
        let started = Instant::now();
        connect_delay(&params, &AtomicBool::new(false), far).unwrap();
        assert!(started.elapsed() >= Duration::from_millis(120));
        let aborted = connect_delay(&params, &AtomicBool::new(true), far).unwrap_err();
        assert!(matches!(aborted, SessionError::Aborted(_)), "{aborted:?}");
    }
}
