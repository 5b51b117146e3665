//! What a traced run gathers besides its results, for pairs and collectives
//! alike: each agent's trace clock against the controller's (before and
//! after the run, so its drift can be taken out), and the trace a failed
//! side kept for `TakeTrace`.

use std::time::{Duration, Instant};

use agent_proto::v1::{ClockRequest, TakeTraceRequest, Trace};
use lab_remote::agent::Client;
use lab_results::trace::{estimate_offset, ClockEstimate, ClockSample, SideTrace};

use super::error::RunError;
use super::rpc::within;

/// Clock samples taken per agent for a traced run.
const CLOCK_SAMPLES: usize = 8;

/// How long a failed run waits for each agent's failed side to keep its trace.
const FAILED_TRACE_WAIT_MS: u32 = 3000;

/// Samples the trace clock of `node`'s agent against `anchor`
/// ([`estimate_offset`]), each round trip bounded by `limit`.
pub(crate) async fn sample_clock(
    node: &str,
    role: &'static str,
    client: &mut Client,
    anchor: Instant,
    limit: Duration,
) -> Result<ClockEstimate, RunError> {
    let mut samples = Vec::with_capacity(CLOCK_SAMPLES);
    for _ in 0..CLOCK_SAMPLES {
        let sent_ns = anchor.elapsed().as_nanos() as u64;
        let reply = within(node, role, "Clock", limit, client.clock(ClockRequest {})).await?;
        let received_ns = anchor.elapsed().as_nanos() as u64;
        samples.push(ClockSample {
            sent_ns,
            agent_ns: reply.now_ns,
            received_ns,
        });
    }
    Ok(estimate_offset(&samples).expect("round trips on a monotonic clock are never negative"))
}

/// The trace session `session_id` kept of its side if that side failed,
/// and why; (empty, None) when it kept none (an agent without TakeTrace, or
/// a side that failed before it recorded anything).
pub(crate) async fn failed_trace(client: &mut Client, session_id: &str) -> (Trace, Option<String>) {
    let req = TakeTraceRequest {
        session_id: session_id.to_string(),
        wait_ms: FAILED_TRACE_WAIT_MS,
    };
    let wait = Duration::from_millis(u64::from(FAILED_TRACE_WAIT_MS) + 2000);
    match tokio::time::timeout(wait, client.take_trace(req)).await {
        Ok(Ok(reply)) => {
            let reply = reply.into_inner();
            match reply.trace {
                Some(trace) => (trace, Some(reply.error)),
                None => (Trace::default(), None),
            }
        }
        _ => (Trace::default(), None),
    }
}

/// One side's trace as the trace file takes it.
pub(crate) fn side_trace(
    role: &str,
    node: &str,
    clock: ClockEstimate,
    clock_after: Option<ClockEstimate>,
    (trace, failed): (Trace, Option<String>),
) -> SideTrace {
    SideTrace {
        role: role.into(),
        node: node.to_string(),
        rank: None,
        trace,
        clock,
        failed,
        clock_after,
    }
}
