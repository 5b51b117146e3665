//! A node's wall clock (CLOCK_REALTIME) against this machine's, read
//! through its agent: `doctor` compares two nodes' with it, and `up` sets
//! the clock of a QEMU node, whose image keeps no time (it starts from the
//! host's RTC, to the second), from it.

use agent_proto::v1::ClockRequest;
use lab_remote::agent::{self, Client};
use lab_results::trace::{estimate_offset, ClockEstimate, ClockSample};

/// Clock calls per reading: the one with the shortest round trip gives
/// the estimate.
const SAMPLES: usize = 8;

fn now_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The node's wall clock minus this machine's: NTP's estimate, the agent's
/// reading against the midpoint of the call with the shortest round trip.
pub async fn offset(node: &str, client: &mut Client) -> Result<ClockEstimate, String> {
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let sent_ns = now_ns();
        let reply = agent::call(node, "Clock", agent::deadline::NODE_INFO, client.clock(ClockRequest {}))
            .await
            .map_err(|e| e.to_string())?;
        let received_ns = now_ns();
        if reply.realtime_ns == 0 {
            return Err("the agent does not report its wall clock (an older agent: `labctl up` redeploys it)".into());
        }
        samples.push(ClockSample {
            sent_ns,
            agent_ns: reply.realtime_ns,
            received_ns,
        });
    }
    estimate_offset(&samples).ok_or_else(|| "no usable Clock reply".to_string())
}

/// The argument of `date -s` that takes `offset_ns` off the node's clock,
/// relative to the clock itself (GNU date's `now - N seconds`), so the time
/// the command takes to arrive does not count.
pub fn step_argument(offset_ns: i64) -> String {
    let sign = if offset_ns >= 0 { '-' } else { '+' };
    let secs = offset_ns.unsigned_abs() as f64 / 1e9;
    format!("now {sign} {secs:.6} seconds")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_the_step_takes_the_offset_off_the_nodes_own_clock() {
        // A node 441.7 ms behind (a QEMU node's clock, read by doctor).
        assert_eq!(step_argument(-441_700_000), "now + 0.441700 seconds");
        assert_eq!(step_argument(2_500_000_000), "now - 2.500000 seconds");
    }
}
