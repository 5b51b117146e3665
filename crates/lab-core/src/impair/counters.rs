//! The RDMA device's hardware counters: read from sysfs before and after a
//! run, subtracted, and the Go-Back-N retransmission work picked out, which
//! shows what an impairment costs.

use lab_remote::command::RemoteCommand;
use lab_remote::ssh::{SshError, SshSession};
use lab_results::run::Counters;
use lab_state::NodeState;

use super::error::ImpairError;

/// The RDMA counters that count Go-Back-N retransmission work, with what
/// each one means; shown under a run's table.
pub const RETRANSMISSION_COUNTERS: &[(&str, &str)] = &[
    (
        "out_of_seq_request",
        "responder: a packet arrived past a gap (one was lost); it NAKs and drops the rest of the window",
    ),
    (
        "rcvd_seq_err",
        "requester: sequence-error NAKs received; each makes it go back and resend from the lost packet",
    ),
    (
        "completer_retry_err",
        "requester: retransmission rounds started (after a NAK or an ACK timeout)",
    ),
    (
        "duplicate_request",
        "responder: packets it had already executed, sent again (Go-Back-N resends the whole window)",
    ),
    (
        "retry_exceeded_err",
        "requester: retries used up; the QP failed with IBV_WC_RETRY_EXC_ERR",
    ),
    ("rcvd_rnr_err", "requester: receiver-not-ready NAKs (no receive posted)"),
    ("send_rnr_err", "responder: receiver-not-ready NAKs sent"),
];

/// Reads every counter of `device` port `port` (`/sys/class/infiniband/<dev>/ports/<port>/hw_counters`).
pub async fn read_counters(
    session: &SshSession,
    node: &NodeState,
    device: &str,
    port: u32,
) -> Result<Counters, ImpairError> {
    let dir = format!("/sys/class/infiniband/{device}/ports/{port}/hw_counters");
    // `grep -H . *` prints `name:value` for every counter file in one round trip.
    let command = RemoteCommand::script_with("cd \"$1\" && grep -H . *", [&dir]);
    let out = session.exec(&command).await?;
    if out.status != 0 {
        return Err(ImpairError::Ssh(SshError::CommandFailed {
            node: node.name.clone(),
            command: command.to_string(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }));
    }
    Ok(parse_counters(&String::from_utf8_lossy(&out.stdout)))
}

/// Parses `name:value` lines; lines that are not are skipped, and so is
/// `lifespan`, which sits among the counters but is their refresh interval.
pub fn parse_counters(text: &str) -> Counters {
    text.lines()
        .filter_map(|l| {
            let (name, value) = l.split_once(':')?;
            let name = name.trim();
            (name != "lifespan").then_some(())?;
            Some((name.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// `after - before` per counter (a counter that went backwards, e.g. a
/// device re-created mid-run, counts from zero).
pub fn counter_delta(before: &Counters, after: &Counters) -> Counters {
    after
        .iter()
        .map(|(name, &now)| {
            let then = before.get(name).copied().unwrap_or(0);
            let delta = if now >= then { now - then } else { now };
            (name.clone(), delta)
        })
        .collect()
}

/// The retransmission work in a counter delta (the sum of the Go-Back-N counters).
pub fn retransmission_work(delta: &Counters) -> u64 {
    [
        "out_of_seq_request",
        "rcvd_seq_err",
        "completer_retry_err",
        "duplicate_request",
    ]
    .iter()
    .filter_map(|name| delta.get(*name))
    .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_counter_deltas_and_retransmission_work() {
        let before = parse_counters(
            "rcvd_seq_err:3\ncompleter_retry_err:4\nsent_pkts:100\nlifespan:10\nnot a counter\nduplicate_request:0\n",
        );
        assert_eq!(before.get("sent_pkts"), Some(&100));
        assert_eq!(before.len(), 4, "{before:?}");
        let after =
            parse_counters("rcvd_seq_err:10\ncompleter_retry_err:9\nsent_pkts:700\nlifespan:10\nduplicate_request:2\n");
        let delta = counter_delta(&before, &after);
        assert_eq!(delta["rcvd_seq_err"], 7);
        assert_eq!(delta["completer_retry_err"], 5);
        assert_eq!(delta["sent_pkts"], 600);
        assert!(!delta.contains_key("lifespan"));
        assert_eq!(retransmission_work(&delta), 7 + 5 + 2);
        // A device re-created between the reads starts again at zero.
        let reset = parse_counters("sent_pkts:5\n");
        assert_eq!(counter_delta(&after, &reset)["sent_pkts"], 5);
    }
}
